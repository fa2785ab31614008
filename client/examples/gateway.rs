//! An example login gateway: `POST /login` (form fields `username`, `password`) checks
//! the password through the Portcullis daemon's `Verify`, using `portcullis-client` (`portcullis::client` in the daemon's crate).
//!
//! Each HTTP request gets a server span (continuing a W3C `traceparent` the browser or a
//! proxy sent); `portcullis::client` makes its call a child of it, so one trace runs
//! browser → gateway → daemon → store when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. The
//! client's metrics (retries, ejections, breaker state) are served at `GET /metrics`.
//!
//! Users come from an htpasswd-format file (`name:$2y$...` as `htpasswd -B` writes) or a
//! file of `name:$argon2id$...` PHC strings. Every failed login gets one uniform 401; a
//! daemon that refuses for capacity or cannot be reached gets a 503 with `Retry-After`.
//!
//! What the answer's signals do here, as a careful gateway would (docs/client.md):
//!
//! | answer | response |
//! |---|---|
//! | `network_throttled` (a `flag` realm), any verdict | the challenge page (a CAPTCHA): the same bytes for a right and a wrong password, so a throttled network learns nothing |
//! | deny with `step_up` (the account is near its lockout) | the challenge page: an unknown account gets it at the same count |
//! | deny | the uniform 401, the same for a wrong password and an unknown account |
//! | allow with `spray_suspected` or `step_up` | the second-factor page: no session, no device cookie yet |
//! | allow with `password_breached` | the session (device cookie), then `303` to the password change page |
//! | allow | `welcome` and the device cookie |
//! | challenge (a right password from a new device, `unknown_device = "step_up"`) | the code page; the code is "mailed"; a right code at `POST /login/code` confirms the device (`ConfirmDevice`) and logs in |
//! | with `--step-up`: every other deny (a wrong password, a closed door, an unknown account, with a device cookie or without) | **the same code page**, no code sent: the form tells a combo-list checker nothing |
//! | change required (a breached password past its grace logins) | `303` to the password change page, no session, no device cookie |
//! | `lockout_started` or `ceiling_reached`, any verdict | the page that verdict gets, and a notice "mailed" to the account's owner (a log line) when the account exists: once per lockout |
//!
//! The example has no CAPTCHA provider, second factor or sessions: the pages say where a
//! real gateway puts them.
//!
//! Two flows around the login (docs/flows.md), each counted by the daemon *before* the
//! gateway acts:
//!
//! - `POST /password/reset` (form field `username`): "forgot password". It asks
//!   `RecordFlowAttempt(FLOW_PASSWORD_RESET)` with the client's address, "sends" the
//!   mail (a log line, where a real gateway queues it) only when the daemon allows *and*
//!   the account exists, and answers every request with the same page, byte for byte:
//!   an account that exists, one that does not, a request over the caps. Only a daemon
//!   that cannot answer gets the `503`, which says nothing about the account either.
//! - `POST /login/code` (form field `code`): the one-time code step of a pending login
//!   (below). It asks `RecordFlowAttempt(FLOW_SECOND_FACTOR)` before it looks at the
//!   code; on a deny the "too many codes" page (`429`), right code or not; on an allow a
//!   right code confirms the device (`ConfirmDevice`, which clears the count) and logs
//!   in, a wrong one gets `401`. The codes come from `--codes` (`name:code` lines), a
//!   stand-in for TOTP secrets or mailed codes. A code alone signs no one in: without a
//!   pending login the answer is `401`.
//!
//! Step-up for unknown devices (docs/devices.md): run the daemon's realm with
//! `unknown_device = "step_up"` and this gateway with `--step-up`. A right password from
//! a browser without the account's device cookie is a challenge: the gateway keeps the
//! challenge token in a server-side pending login (a `__Host-` cookie names it), "mails"
//! the code (a log line) and shows the code page. Every failed login gets the same page
//! (and cookie), but no code and a pending login that no code completes, whose tries are
//! counted on a decoy record of its own (the real user's code step is never closed by
//! wrong passwords, and a checker cannot tell by the tries it gets). The code step counts each
//! try through `FLOW_SECOND_FACTOR`, and a right code exchanges the challenge token for
//! a device token (`ConfirmDevice`). Pending logins are bounded (100,000; past it, 503).
//!
//! Known devices (OWASP device cookies): a successful login sets the device token the
//! daemon returned as an `HttpOnly; Secure; SameSite=Strict` cookie named for the account,
//! and the next login to that account sends it back, so this browser keeps logging in
//! while attackers keep the account locked for everyone else (`docs/devices.md`).
//!
//! ```sh
//! cargo run --release --example gateway -- --users users.txt --listen 127.0.0.1:8080
//! curl -i -d 'username=alice&password=secret' http://127.0.0.1:8080/login
//! curl -i -d 'username=alice' http://127.0.0.1:8080/password/reset
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use portcullis_client::{
    Client, ClientConfig, Decision, Login, Normalization, client_key_from_forwarded, normalize,
};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

// The example's own modules, beside it in `gateway/` (a crate root's modules are looked
// up next to it, where Cargo would take a file for an example of its own).
#[path = "gateway/codes.rs"]
mod codes;
#[path = "gateway/reset.rs"]
mod reset;
#[path = "gateway/telemetry.rs"]
mod telemetry;

use codes::{PendingLogins, code_page, login_code};
use reset::password_reset;

#[derive(Parser)]
struct Args {
    /// Users file: one `name:hash` per line (bcrypt or argon2 PHC); `#` starts a comment.
    #[arg(long)]
    users: PathBuf,
    /// One-time codes: one `name:code` per line, each account's current code (a stand-in
    /// for a TOTP secret or a mailed code); without it no account has a code.
    #[arg(long)]
    codes: Option<PathBuf>,
    /// HTTP listen address (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Daemon URL(s); repeat for several.
    #[arg(long = "daemon", default_value = "http://127.0.0.1:50051")]
    daemons: Vec<String>,
    /// Realm the users belong to.
    #[arg(long, default_value = "default")]
    realm: String,
    /// Deadline of one call to the daemon.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    call_timeout: std::time::Duration,
    /// The realm's `unknown_device` is `"step_up"`: every failed login shows the code
    /// page a right password from a new device gets (docs/devices.md, "No checker").
    #[arg(long)]
    step_up: bool,
    /// Proxies of your own in front of this gateway (load balancers, CDNs) that append
    /// to `X-Forwarded-For`; 0: clients connect directly and the header is ignored
    /// (docs/client.md, "The client key").
    #[arg(long, default_value_t = 0)]
    trusted_proxy_hops: usize,
}

struct Gateway {
    client: Client,
    realm: String,
    /// Stored hashes by normalized identifier: the lookup uses the same normalization
    /// as the daemon's counter (email mode, the daemon's default).
    users: HashMap<String, String>,
    /// Each account's current one-time code, by normalized identifier (`--codes`).
    codes: HashMap<String, String>,
    /// `--trusted-proxy-hops`.
    trusted_proxy_hops: usize,
    /// `--step-up`.
    step_up: bool,
    /// Logins waiting for their code, by the id the challenge cookie carries.
    pending: PendingLogins,
}

impl Gateway {
    /// The end client's address as our own proxies saw it, never the `X-Forwarded-For`
    /// header's leftmost (client-chosen) entry.
    fn client_key(&self, peer: SocketAddr, headers: &HeaderMap) -> String {
        let forwarded: Vec<&str> =
            headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()).collect();
        client_key_from_forwarded(peer.ip(), &forwarded, self.trusted_proxy_hops)
    }

    /// The value `table` holds for `typed`, looked up as the daemon counts it (the same
    /// normalization); `None` for an unknown account or a name that does not normalize.
    fn lookup<'a>(&self, table: &'a HashMap<String, String>, typed: &str) -> Option<&'a str> {
        let id = normalize(Normalization::Email, typed).ok()?;
        table.get(id.as_str()).map(String::as_str)
    }
}

#[derive(serde::Deserialize)]
struct LoginForm {
    username: String,
    password: String,
}

/// Every failed login: same status, headers and body, whatever failed.
fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, "invalid username or password\n").into_response()
}

/// The end client must pass a challenge (a CAPTCHA) before its next attempt: its network
/// is throttled, or the account is near its lockout. The same bytes whatever the verdict
/// and whether the account exists, so it tells an attacker nothing about the password.
/// A real gateway renders its CAPTCHA widget here and, on the next `POST /login`, checks
/// the widget's token with its provider *before* calling `Verify`, so an unsolved
/// challenge costs no guess; after a solved one, a matching password from a throttled
/// network still goes to the second factor.
fn challenge() -> Response {
    let mut r =
        (StatusCode::UNAUTHORIZED, "solve the challenge, then sign in again\n").into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The password matched, but the daemon asks for more (a sprayed password, a step-up):
/// no session and no device cookie until a second factor passes. A real gateway keeps
/// a short-lived pending-login record here and sends the user to its TOTP or WebAuthn
/// step; the device cookie is set once that succeeds.
fn second_factor() -> Response {
    let mut r = (StatusCode::UNAUTHORIZED, "second factor required\n").into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Where a login with a breached password is sent (docs/breach.md): the user is in, and
/// must choose a new password before anything else.
const PASSWORD_CHANGE: &str = "/password/change";

/// The password change page. A real gateway serves it only to the session it just
/// started, lets that session do nothing else until the change, checks the new password
/// with `Client::check_password` (CheckPassword: breached, or a context word) before it
/// stores the new hash, and then revokes the account's other sessions.
async fn password_change_page() -> Response {
    let mut r = (
        StatusCode::OK,
        "your password appears in a known data breach: choose a new one to continue\n",
    )
        .into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The device cookie's name for one account: `__Host-` (RFC 6265bis: Secure, Path=/, no
/// Domain, so no subdomain can set or read it) and a digest of the realm and normalized
/// identifier, so the browser keeps one token per account and the name does not show
/// the identifier.
fn device_cookie_name(realm: &str, identifier: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(realm.as_bytes())
        .chain_update([0])
        .chain_update(identifier.as_bytes())
        .finalize();
    format!("__Host-portcullis-device-{}", hex::encode(&digest[..8]))
}

/// The value of cookie `name` in the request's `Cookie` headers (RFC 6265 §5.4:
/// `name=value` pairs separated by `; `).
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(n, value)| (n == name).then_some(value))
}

/// The password is right but breached and its grace logins are spent: no session, no
/// device cookie; the change page, where a real gateway lets this login do nothing but
/// choose a new password.
fn change_required() -> Response {
    let mut r =
        (StatusCode::SEE_OTHER, "password change required before signing in\n").into_response();
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_static(PASSWORD_CHANGE));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `welcome` (or, for a breached password, `303` to the change page) with the device
/// cookie for `token`: a login that needs nothing more.
fn signed_in(cookie_name: Option<String>, token: Option<String>, breached: bool) -> Response {
    // A real gateway starts its session here (restricted to the password change when
    // the password is breached).
    let mut ok = if breached {
        // In the breach filter (docs/breach.md): let the user in, then make them change
        // it (NIST SP 800-63B). Never say so on a failed login.
        let mut r = (StatusCode::SEE_OTHER, "password change required\n").into_response();
        r.headers_mut().insert(header::LOCATION, HeaderValue::from_static(PASSWORD_CHANGE));
        r
    } else {
        (StatusCode::OK, "welcome\n").into_response()
    };
    // It carries a credential (the device cookie): no cache keeps it.
    ok.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let set = cookie_name.zip(token).and_then(|(name, token)| {
        let max_age = 90 * 24 * 3600; // the daemon's default device_token_ttl
        HeaderValue::from_str(&format!(
            "{name}={token}; Max-Age={max_age}; Path=/; HttpOnly; Secure; SameSite=Strict"
        ))
        .ok()
    });
    if let Some(set) = set {
        ok.headers_mut().append(header::SET_COOKIE, set);
    }
    ok
}

/// The daemon refused for capacity or could not be reached: try again shortly.
fn unavailable() -> Response {
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, "try again shortly\n").into_response();
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Reads a W3C `traceparent` from the HTTP request.
struct Headers<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

async fn login(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // The request's span: route and method only, never the form's fields.
    let span = tracing::info_span!(
        "http_request",
        otel.name = "POST /login",
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/login",
        http.response.status_code = tracing::field::Empty,
    );
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(&headers)));
    let _ = span.set_parent(parent);
    let response = check(gw, peer, &headers, form).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

async fn check(
    gw: Arc<Gateway>,
    peer: SocketAddr,
    headers: &HeaderMap,
    form: LoginForm,
) -> Response {
    // An identifier that does not normalize cannot name an account: the daemon refuses
    // it with INVALID_ARGUMENT, which the client turns into a (final) deny.
    let identifier = normalize(Normalization::Email, &form.username).ok();
    let stored =
        identifier.as_ref().and_then(|id| gw.users.get(id.as_str())).map_or("", String::as_str);
    let cookie_name = identifier.as_ref().map(|id| device_cookie_name(&gw.realm, id.as_str()));
    let device_token = cookie_name.as_deref().and_then(|name| cookie(headers, name));
    let client_key = gw.client_key(peer, headers);
    let answer = gw
        .client
        .verify(Login {
            realm: &gw.realm,
            identifier: &form.username,
            password: form.password.as_bytes(),
            stored_hash: stored,
            client_key: &client_key,
            attempt_id: None,
            device_token,
        })
        .await;
    // This very attempt shut the door (docs/gateways.md, "When an attempt shuts the
    // door"): tell the owner of an account that exists, once per lockout, since the
    // daemon sets it on exactly one attempt. The end user still gets the page any
    // failure gets.
    if (answer.lockout_started || answer.ceiling_reached) && !stored.is_empty() {
        let ceiling = answer.ceiling_reached;
        tracing::info!(flow = "lockout_notice", ceiling, "owner's lockout notice mail queued");
    }
    match answer.decision {
        Decision::Deny if answer.retryable => unavailable(),
        // The client's network used up its failed logins in a `flag` realm
        // (docs/throttle.md, "Per client network"). Whatever the verdict, the same
        // challenge: a "second factor" page on a match would tell a credential stuffer
        // which of its passwords was right.
        _ if answer.network_throttled => challenge(),
        // A right password from a device the account does not know, in a step-up realm
        // (docs/devices.md): the code page, and a code.
        Decision::Challenge => {
            let challenge = answer.challenge_token.map(|token| (token, stored.to_owned()));
            let id = identifier.as_ref().map(|id| id.as_str());
            code_page(&gw, id, challenge, answer.password_breached)
        }
        // Every other failed login (a wrong password, a closed door, an unknown account,
        // a device cookie or none: the gateway cannot tell which devices the daemon
        // trusted): the same code page, no code ("No checker").
        Decision::Deny if gw.step_up => {
            code_page(&gw, identifier.as_ref().map(|id| id.as_str()), None, false)
        }
        // The account is near its lockout ("Step-up before the lockout"): challenge the
        // client before its next guess. Read from a count the daemon keeps for every
        // identifier, so an unknown account gets the same page at the same count.
        Decision::Deny if answer.step_up => challenge(),
        Decision::Deny => unauthorized(),
        Decision::ChangeRequired => change_required(),
        Decision::Allow if answer.spray_suspected || answer.step_up => {
            // The password is being sprayed across the realm (docs/spray.md) and it
            // matched: the moment to demand a second factor, before any session.
            tracing::warn!("a matching password needs a second factor");
            second_factor()
        }
        Decision::Allow => {
            if answer.needs_rehash {
                // A real gateway stores a new hash at the realm's target here.
                tracing::info!("accepted a hash below the realm's target");
            }
            signed_in(cookie_name, answer.device_token, answer.password_breached)
        }
    }
}

/// A `name:value` file (users and their hashes, or their codes), keyed by normalized
/// name.
fn read_users(path: &PathBuf) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, hash) =
            line.split_once(':').ok_or_else(|| format!("line {}: expected name:value", n + 1))?;
        let id =
            normalize(Normalization::Email, name).map_err(|e| format!("line {}: {e}", n + 1))?;
        users.insert(id.as_str().to_owned(), hash.to_owned());
    }
    Ok(users)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs, spans (when OTEL_* name an endpoint) and the Prometheus recorder.
    let telemetry = telemetry::init();
    let args = Args::parse();
    let users = read_users(&args.users)?;
    let codes = args.codes.as_ref().map(read_users).transpose()?.unwrap_or_default();
    let client = Client::new(ClientConfig {
        endpoints: args.daemons,
        call_timeout: args.call_timeout,
        ..ClientConfig::default()
    })?;
    let gateway = Arc::new(Gateway {
        client,
        realm: args.realm,
        users,
        codes,
        trusted_proxy_hops: args.trusted_proxy_hops,
        step_up: args.step_up,
        pending: PendingLogins::default(),
    });
    let metrics = telemetry.metrics.clone();
    let app = axum::Router::new()
        .route("/login", post(login))
        .route(PASSWORD_CHANGE, get(password_change_page))
        .route("/password/reset", post(password_reset))
        .route("/login/code", post(login_code))
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { metrics.render() }
            }),
        )
        .with_state(gateway);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!("gateway listening on {}", listener.local_addr()?);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await?;
    telemetry.shutdown().await;
    Ok(())
}
