//! The one-time code step of the example gateway (`POST /login/code`) and the step-up
//! challenge's code page: a pending login per challenge, named by a `__Host-` cookie
//! (docs/devices.md, "Step-up for unknown devices"; docs/flows.md, `second_factor`).
//!
//! A pending login is what the code step acts on; without one there is no code step
//! (a code alone never signs anyone in). A right password's pending login counts its
//! codes on the account's `second_factor` record and, on a right code, confirms the
//! device. A wrong password's (or an unknown account's) looks and counts the same, on a
//! decoy record of its own per pending login, so a checker cannot tell the two apart by
//! how many codes it may try, and cannot use wrong passwords to close the real user's
//! code step; no code completes it. (A decoy record shared by an account's wrong
//! passwords would be a checker: spend its tries once, and every later wrong password's
//! first code would be refused while the right password's would not.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Gateway, cookie, device_cookie_name, signed_in, unauthorized, unavailable};

/// A login waiting for its code (the server-side record a challenge cookie names).
#[derive(Clone)]
pub(super) struct Pending {
    /// The account, normalized as the daemon counts it.
    identifier: String,
    /// A real challenge: its token and the stored hash it is bound to. `None`: the page
    /// a wrong password got, which no code completes.
    challenge: Option<(String, String)>,
    /// The password is breached: the change page follows the code.
    breached: bool,
    /// When it stops being accepted (the challenge token's own 15 minutes).
    expires: Instant,
}

/// Logins waiting for their code, by challenge id: at most [`MAX_PENDING`].
#[derive(Default)]
pub(super) struct PendingLogins(std::sync::Mutex<HashMap<String, Pending>>);

/// Most pending logins kept at once: a flood of failed logins from new browsers makes
/// one each (15 minutes), so the map is bounded; past it the code page is refused
/// (`503`, for right and wrong passwords alike) until some expire.
const MAX_PENDING: usize = 100_000;

/// The challenge cookie's name: `__Host-` (Secure, Path=/, no Domain).
const CHALLENGE_COOKIE: &str = "__Host-portcullis-challenge";

/// How long a pending login waits for its code: the challenge token's lifetime.
const CHALLENGE_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl PendingLogins {
    /// Keeps `pending` under a fresh random id; `None` when the map is full.
    fn insert(&self, pending: Pending) -> Option<String> {
        let mut all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.len() >= MAX_PENDING {
            // Expired ones go only when the map is full: no sweep on every login.
            let now = Instant::now();
            all.retain(|_, p| p.expires > now);
            if all.len() >= MAX_PENDING {
                return None;
            }
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        all.insert(id.clone(), pending);
        Some(id)
    }

    /// The pending login `id` names, if it is still waiting.
    fn get(&self, id: &str) -> Option<Pending> {
        let all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(id).filter(|p| p.expires > Instant::now()).cloned()
    }

    fn remove(&self, id: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }
}

/// The code page for a login that needs its code: a right password from a new device
/// (`challenge`: its token and stored hash) and, with `--step-up`, every failed login
/// (`None`) get the same status, headers and body; only the cookie's random id differs.
/// A code is sent only for the first. `identifier` is the normalized account (a name
/// that does not normalize gets the page and a cookie naming nothing).
pub(super) fn code_page(
    gw: &Gateway,
    identifier: Option<&str>,
    challenge: Option<(String, String)>,
    breached: bool,
) -> Response {
    let expires = Instant::now() + CHALLENGE_TTL;
    let id = match identifier {
        Some(identifier) => {
            let real = challenge.is_some();
            let pending =
                Pending { identifier: identifier.to_owned(), challenge, breached, expires };
            let Some(id) = gw.pending.insert(pending) else { return unavailable() };
            if real {
                // A real gateway puts a mail (or a text) with a fresh code in its outbox
                // here; never inline, so the page takes as long with and without one.
                tracing::info!(flow = "second_factor", "code mail queued");
            }
            id
        }
        None => uuid::Uuid::new_v4().simple().to_string(),
    };
    let body = "we sent a code to your address: enter it to finish signing in \
                (no code? check your password and sign in again)\n";
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let max_age = CHALLENGE_TTL.as_secs();
    let cookie = format!(
        "{CHALLENGE_COOKIE}={id}; Max-Age={max_age}; Path=/; HttpOnly; Secure; SameSite=Strict"
    );
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    r
}

#[derive(serde::Deserialize)]
pub(super) struct CodeForm {
    code: String,
}

/// The code step's window of tries is used up: no code is looked at, right or wrong,
/// until it ends. No time is given: the daemon answers none.
fn too_many_codes() -> Response {
    let mut r =
        (StatusCode::TOO_MANY_REQUESTS, "too many codes: try again later\n").into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A wrong code, for a real pending login and a decoy alike.
fn wrong_code() -> Response {
    (StatusCode::UNAUTHORIZED, "wrong code\n").into_response()
}

/// `a == b` in a time that does not depend on where they first differ.
fn same_code(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The account a decoy pending login counts its codes on: one per pending login (its
/// random id), apart from every real account (a `.invalid` address no one can hold), so
/// each wrong password's page gets the tries a fresh real challenge gets, and never
/// touches the real one.
fn decoy(pending_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(b"decoy\0").chain_update(pending_id).finalize();
    format!("{}@decoy.invalid", hex::encode(&digest[..12]))
}

/// `POST /login/code`: the one-time code step of a pending login (the challenge cookie
/// names it; the account is its, never the form's). Each code is counted through
/// `FLOW_SECOND_FACTOR` before it is looked at; a right code of a real challenge
/// exchanges the challenge token for a device token (`ConfirmDevice`, which also
/// clears the count and the login record) and signs in. No pending login (none, expired
/// or used): sign in again.
pub(super) async fn login_code(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Form(form): Form<CodeForm>,
) -> Response {
    let Some(id) = cookie(&headers, CHALLENGE_COOKIE) else { return unauthorized() };
    let Some(Pending { identifier, challenge, breached, .. }) = gw.pending.get(id) else {
        return unauthorized();
    };
    let counted_on = if challenge.is_some() { identifier.clone() } else { decoy(id) };
    // Counted before the code is looked at: a guess over the window is refused, right
    // or wrong, so the window bounds the guesses whatever the code.
    let answer = gw.client.second_factor_attempt(&gw.realm, &counted_on, None).await;
    if answer.retryable {
        return unavailable();
    }
    if !answer.is_allowed() {
        return too_many_codes();
    }
    let right = gw
        .lookup(&gw.codes, &identifier)
        .is_some_and(|c| same_code(c.as_bytes(), form.code.trim().as_bytes()));
    // A decoy's page: no code completes it, right or wrong.
    let Some((token, stored_hash)) = challenge.filter(|_| right) else { return wrong_code() };
    // The challenge passed: the device token; the count and the login record cleared.
    let confirmed = gw.client.confirm_device(&gw.realm, &identifier, &token, &stored_hash).await;
    if !confirmed.is_allowed() {
        // An expired challenge, or the daemon unreachable: sign in again.
        return if confirmed.retryable { unavailable() } else { unauthorized() };
    }
    gw.pending.remove(id);
    let cookie_name = Some(device_cookie_name(&gw.realm, &identifier));
    let mut r = signed_in(cookie_name, confirmed.device_token, breached);
    // The pending login is used: its cookie goes too.
    let spent =
        format!("{CHALLENGE_COOKIE}=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Strict");
    if let Ok(spent) = HeaderValue::from_str(&spent) {
        r.headers_mut().append(header::SET_COOKIE, spent);
    }
    r
}
