//! The "forgot password" form of the example gateway (`POST /password/reset`; docs/flows.md,
//! `password_reset`): counted first, one page for every name.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Gateway, unavailable};

#[derive(serde::Deserialize)]
pub(super) struct ResetForm {
    username: String,
}

/// The one answer to a reset request, whatever the account and the daemon's decision
/// (OWASP's Forgot Password Cheat Sheet: the same message either way).
fn reset_requested() -> Response {
    let body = "if an account exists for that name, we have sent it a link to reset its password\n";
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `POST /password/reset`: counted first, for every name alike; a mail only on an allow
/// for an account that exists; one page for all (docs/flows.md, "No oracle").
pub(super) async fn password_reset(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<ResetForm>,
) -> Response {
    let client_key = gw.client_key(peer, &headers);
    let answer =
        gw.client.password_reset_request(&gw.realm, &form.username, &client_key, None).await;
    // The daemon or its store cannot answer now: no account's doing, so no oracle.
    if answer.retryable {
        return unavailable();
    }
    if answer.is_allowed() && gw.lookup(&gw.users, &form.username).is_some() {
        // A real gateway makes a single-use, expiring reset token here and puts the mail
        // in its outbox; it never sends inline, where the mail server's round trip would
        // make the answer slower for accounts that exist. The log names no account.
        tracing::info!(flow = "password_reset", "reset mail queued");
    }
    reset_requested()
}
