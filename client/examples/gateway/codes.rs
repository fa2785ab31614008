//! The one-time code step of the example gateway (`POST /login/code`) and the step-up
//! challenge's code page: a pending login per challenge, named by a `__Host-` cookie
//! (docs/devices.md, "Step-up for unknown devices"; docs/flows.md, `second_factor`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use portcullis_client::{Decision, Flow, Normalization, normalize};

use super::{Gateway, cookie, device_cookie_name, signed_in, unauthorized, unavailable};

/// A login waiting for its code (the server-side record a challenge cookie names).
pub(super) struct Pending {
    /// The name the user typed.
    pub(super) identifier: String,
    /// A real challenge: its token and the stored hash it is bound to. `None`: the page
    /// a wrong password got, which no code completes.
    pub(super) challenge: Option<(String, String)>,
    /// The password is breached: the change page follows the code.
    pub(super) breached: bool,
    /// When it stops being accepted (the challenge token's own 15 minutes).
    pub(super) expires: std::time::Instant,
}

/// The challenge cookie's name: `__Host-` (Secure, Path=/, no Domain).
const CHALLENGE_COOKIE: &str = "__Host-portcullis-challenge";

/// How long a pending login waits for its code: the challenge token's lifetime.
pub(super) const CHALLENGE_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The code page: a right password from a new device and (with `--step-up`) a wrong
/// one from a browser without the account's device cookie get the same status, headers
/// and body; only the cookie's random id differs. A code is sent only for the first.
pub(super) fn code_page(gw: &Gateway, pending: Pending) -> Response {
    let id = uuid::Uuid::new_v4().simple().to_string();
    if pending.challenge.is_some() {
        // A real gateway puts a mail (or a text) with a fresh code in its outbox here;
        // never inline, so the page takes as long with and without one.
        tracing::info!(flow = "second_factor", "code mail queued");
    }
    {
        let mut all = gw.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        all.retain(|_, p| p.expires > now);
        all.insert(id.clone(), pending);
    }
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
    /// Without a pending login only: the account (a stand-in, see [`login_code`]).
    #[serde(default)]
    username: String,
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

/// A wrong code, for an account with a code and one without alike.
fn wrong_code() -> Response {
    (StatusCode::UNAUTHORIZED, "wrong code\n").into_response()
}

/// `a == b` in a time that does not depend on where they first differ.
fn same_code(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /login/code`: the one-time code step. After a challenge (a pending login the
/// challenge cookie names) the account is the pending login's, never the form's; a
/// right code exchanges the challenge token for a device token (`ConfirmDevice`). Without
/// a pending login the example takes the name from the form to stay short (a real
/// gateway names the account by a pending login's server-side record, always).
pub(super) async fn login_code(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    Form(form): Form<CodeForm>,
) -> Response {
    let challenge_cookie = cookie(&headers, CHALLENGE_COOKIE);
    let pending = challenge_cookie.and_then(|id| {
        let mut all = gw.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        all.retain(|_, p| p.expires > now);
        all.get(id).map(|p| (id.to_owned(), p.identifier.clone(), p.challenge.clone(), p.breached))
    });
    if challenge_cookie.is_some() && pending.is_none() {
        // A pending login that expired or was completed: sign in again.
        return unauthorized();
    }
    let identifier = pending.as_ref().map_or_else(|| form.username.clone(), |p| p.1.clone());
    let identifier = identifier.as_str();
    // Counted before the code is looked at: a guess over the window is refused, right
    // or wrong, so the window bounds the guesses whatever the code.
    let answer = gw.client.second_factor_attempt(&gw.realm, identifier, None).await;
    match answer.decision {
        Decision::Deny if answer.retryable => return unavailable(),
        Decision::Allow => {}
        _ => return too_many_codes(),
    }
    let right = gw
        .lookup(&gw.codes, identifier)
        .is_some_and(|c| same_code(c.as_bytes(), form.code.trim().as_bytes()));
    let Some((id, _, challenge, breached)) = pending else {
        if !right {
            return wrong_code();
        }
        // A verified code clears the flow's count. Should that fail, the record still
        // ends with its window: the login goes on.
        let cleared = gw.client.clear_flow(&gw.realm, identifier, Flow::SecondFactor).await;
        if !cleared.is_allowed() {
            tracing::warn!("a verified code's count was not cleared");
        }
        // A real gateway starts the session (and sets the device cookie) here.
        return (StatusCode::OK, "welcome\n").into_response();
    };
    // The page a wrong password got: no code completes it, right or wrong.
    let Some((token, stored_hash)) = challenge.filter(|_| right) else {
        return wrong_code();
    };
    // The challenge passed: the device token, and the second factor's count cleared.
    let confirmed = gw.client.confirm_device(&gw.realm, identifier, &token, &stored_hash).await;
    if !confirmed.is_allowed() {
        // An expired challenge, or the daemon unreachable: sign in again.
        return if confirmed.retryable { unavailable() } else { unauthorized() };
    }
    gw.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    let cookie_name = normalize(Normalization::Email, identifier)
        .ok()
        .map(|id| device_cookie_name(&gw.realm, id.as_str()));
    signed_in(cookie_name, confirmed.device_token, breached)
}

/// Pending logins by challenge id.
pub(super) type PendingLogins = std::sync::Mutex<HashMap<String, Pending>>;
