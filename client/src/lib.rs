//! `portcullis-client`: the library a gateway embeds to call the Portcullis daemon, and
//! the contract it shares with the daemon: the wire types of `proto/portcullis/v1`
//! ([`pb`]), their codec ([`codec`]) and identifier normalization ([`normalize`](mod@normalize)). It
//! builds without the daemon's store, hashing, HTTP server and trace exporter.
//!
//! The client calls the daemon and answers with a [`Decision`]: `Allow`, `Deny`, or for
//! a right password that needs more before a session, `Challenge` (a new device in a
//! step-up realm) or `ChangeRequired` (a breached password past its grace logins).
//! Only `Allow` lets a login through ([`Answer::is_allowed`]); the other two are
//! outcomes of their own, never a flag beside an allow.
//!
//! Whatever goes wrong between gateway and daemon — a refused or reset connection, a
//! timeout, an open circuit breaker, an error status, an unknown or unspecified enum
//! value — arrives as [`Decision::Deny`]. There is no other outcome for a caller to
//! mishandle; [`Answer::retryable`] only tells a user interface whether to say "try again
//! later" (503) instead of "wrong credentials" (401).
//!
//! Resilience never becomes a bypass (docs/client.md):
//! - only transport failures are retried (connection refused or reset, connect timeout,
//!   unreachable), at most `max_retries` times, within a retry budget, always with the
//!   same `attempt_id` (generated here when the caller gives none), so a retried
//!   attempt is counted once;
//! - answers from the daemon — reject, `RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`,
//!   `INTERNAL`, even `UNAVAILABLE` sent by the daemon — are never retried and never
//!   count against an endpoint's health;
//! - `call_timeout` bounds a whole call, retries included; a try cut off by it is not
//!   retried, but counts as a transport failure: a daemon that never answers must be
//!   ejected;
//! - passive health ejects an endpoint after consecutive transport failures; the breaker
//!   opens when no endpoint is healthy, denies without a network call, and half-opens
//!   with one probe call when a back-off runs out.
//!
//! Each call is a client span (`portcullis.v1.Governor/<Method>`) whose W3C trace
//! context is injected into every try's gRPC metadata, so the daemon's spans join the
//! caller's trace; retries, ejections and the breaker's state are recorded through the
//! `metrics` facade of the gateway's process (`docs/observability.md`).
//!
//! The flows around the login (one-time and recovery codes, reset and verification
//! mails: [`Flow`], [`Client::record_flow_attempt`], [`Client::clear_flow`];
//! `docs/flows.md`) go through the same call machinery, with the same outcomes.
//!
//! `docs/client.md` has the table of every outcome.

mod answer;
mod client_key;
pub mod codec;
mod config;
mod flow;
pub mod handshake;
pub mod metrics;
pub mod normalize;
mod pool;
pub mod rpcs;
pub mod trace;

/// Generated gRPC types of `proto/portcullis/v1` (messages and clients; the daemon
/// builds its server stubs over these same messages).
pub mod pb {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("portcullis.v1");
}

pub use answer::{Answer, Decision, Login, PasswordCheck};
pub use client_key::client_key_from_forwarded;
pub use config::{Bearer, ClientConfig, ClientError, ClientTls};
pub use flow::Flow;

use answer::{decision_answer, failure_answer};

use std::error::Error as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::Instrument;

use crate::metrics::{CLIENT_BREAKER_DENIALS, CLIENT_BREAKER_OPEN, CLIENT_RETRIES};
pub use crate::normalize::{Normalization, NormalizedIdentifier, normalize};
use crate::pb::governor_client::GovernorClient;
use crate::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, RecordAttemptRequest, Verdict, VerifyRequest,
};
use pool::{HealthPolicy, Pick, Pool, RetryBudget};
use rpcs::Rpc;

/// Why a password's record is cleared (docs/architecture.md: nothing else clears it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearReason {
    /// The gateway compared the hash itself and it matched.
    PasswordVerified,
    /// A password reset was completed (not merely requested).
    PasswordResetCompleted,
}

/// The generated client with the bearer-token interceptor.
type RpcClient = GovernorClient<InterceptedService<Channel, Bearer>>;

/// Counters for tests and dashboards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStats {
    /// Logical calls made.
    pub calls: u64,
    /// Retries after transport failures.
    pub retries: u64,
    /// Tries that ended in a transport failure or timeout.
    pub transport_failures: u64,
    /// Calls denied by the open breaker without a network call.
    pub breaker_denials: u64,
    /// Whether the breaker is open now.
    pub breaker_open: bool,
    /// Health of each endpoint, in configuration order.
    pub healthy: Vec<bool>,
    /// Per endpoint: why the daemon last refused a TLS handshake
    /// (`TLS handshake refused: …`, [`handshake`]), or `None`.
    pub tls_refusals: Vec<Option<String>>,
}

/// The gateway's handle to the daemon fleet. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    bearer: Bearer,
    pool: Pool,
    budget: RetryBudget,
    calls: AtomicU64,
    retries: AtomicU64,
    transport_failures: AtomicU64,
    breaker_denials: AtomicU64,
    /// With TLS: what a handshake of its own tells after a transport failure.
    diagnoses: Option<Arc<handshake::Diagnoses>>,
}

/// How one try ended, when it did not return a value.
enum Failure {
    /// The daemon answered with this status. Never retried, never a health failure.
    Answered(Status),
    /// Connection refused, reset, unreachable or connect timeout: retried.
    Transport,
    /// No answer within `call_timeout`: not retried (the daemon may be working on it).
    Timeout,
    /// No endpoint could take the call.
    BreakerOpen,
}

/// A status the daemon sent carries no source; one the client made from a connect,
/// reset or protocol error does.
fn is_transport(status: &Status) -> bool {
    status.source().is_some()
}

impl Client {
    /// Builds a client; connects lazily, on the first call to each endpoint.
    ///
    /// # Errors
    /// [`ClientError`] for an empty or invalid endpoint list or an out-of-range setting.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        if config.endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        let check = |ok: bool, setting, allowed| {
            if ok { Ok(()) } else { Err(ClientError::OutOfRange { setting, allowed }) }
        };
        let ms = Duration::from_millis;
        check(config.call_timeout >= ms(1), "call_timeout", "at least 1ms")?;
        check(config.connect_timeout >= ms(1), "connect_timeout", "at least 1ms")?;
        check(config.max_retries <= 10, "max_retries", "0–10")?;
        check((0.0..=1.0).contains(&config.retry_budget_ratio), "retry_budget_ratio", "0.0–1.0")?;
        check(config.eject_after >= 1, "eject_after", "at least 1")?;
        check(config.eject_for >= ms(1), "eject_for", "at least 1ms")?;
        check(config.eject_max >= config.eject_for, "eject_max", "at least eject_for")?;
        check(config.keepalive_time >= ms(1000), "keepalive_time", "at least 1s")?;
        check(config.keepalive_timeout >= ms(100), "keepalive_timeout", "at least 100ms")?;
        let tls = config.tls.as_ref().map(ClientTls::load).transpose()?;
        let diagnoses = (config.tls.as_ref())
            .map(|t| handshake::Diagnoses::new(t, config.endpoints.len(), config.connect_timeout))
            .transpose()?
            .map(Arc::new);
        let bearer = match &config.token_file {
            Some(path) => Bearer::from_file(path)?,
            None => Bearer::new(None)?,
        };
        let mut endpoints = Vec::new();
        for (index, url) in config.endpoints.iter().enumerate() {
            let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
                .map_err(|source| ClientError::BadEndpoint { index, source })?
                .connect_timeout(config.connect_timeout)
                .http2_keep_alive_interval(config.keepalive_time)
                .keep_alive_timeout(config.keepalive_timeout)
                .keep_alive_while_idle(config.keepalive_permit_without_calls);
            if let Some(tls) = &tls {
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(|source| ClientError::BadEndpoint { index, source })?;
            }
            let channel = endpoint.connect_lazy();
            endpoints.push((url.clone(), channel));
        }
        let policy = HealthPolicy {
            eject_after: config.eject_after,
            eject_for: config.eject_for,
            eject_max: config.eject_max,
            probe_timeout: config.connect_timeout + config.call_timeout,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                bearer,
                pool: Pool::new(endpoints, policy),
                budget: RetryBudget::new(config.retry_budget_ratio, config.retry_budget_reserve),
                config,
                calls: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                transport_failures: AtomicU64::new(0),
                breaker_denials: AtomicU64::new(0),
                diagnoses,
            }),
        })
    }

    /// `Admit`: is the account key's door open? Never counts.
    pub async fn admit(&self, realm: &str, identifier: &str) -> Answer {
        let req = AdmitRequest { account: account(realm, identifier) };
        let answer = self
            .call(Rpc::Admit, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.admit(req).await.map(|r| r.into_inner().decision) }
            })
            .await;
        decision_answer(answer)
    }

    /// `RecordAttempt`: counts one attempt before the gateway compares the hash itself.
    /// `attempt_id` makes retries idempotent; one is generated when `None`. Without a
    /// client key: no throttle per client network ([`Self::record_attempt_from`]).
    pub async fn record_attempt(
        &self,
        realm: &str,
        identifier: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        self.record_attempt_from(realm, identifier, "", attempt_id).await
    }

    /// `RecordAttempt` with the end client's `client_key` (its address: see
    /// [`client_key_from_forwarded`]): the attempt also takes a token of the client
    /// network's bucket, which [`Self::clear_attempts_from`] gives back when the
    /// password matched (docs/throttle.md, "Per client network").
    pub async fn record_attempt_from(
        &self,
        realm: &str,
        identifier: &str,
        client_key: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        let req = RecordAttemptRequest {
            account: account(realm, identifier),
            attempt_id: attempt_id.map_or_else(new_attempt_id, str::to_owned),
            client_key: client_key.to_owned(),
        };
        let answer = self
            .call(Rpc::RecordAttempt, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.record_attempt(req).await.map(|r| r.into_inner()) }
            })
            .await;
        match answer {
            Ok(r) => Answer {
                step_up: r.step_up,
                network_throttled: r.network_throttled,
                lockout_started: r.lockout_started,
                ceiling_reached: r.ceiling_reached,
                ..decision_answer(Ok(r.decision))
            },
            Err(f) => failure_answer(f),
        }
    }

    /// `Verify`: the whole login check. `stored_hash` is empty for an unknown (or
    /// disabled) account. Routed by `client_key`, so one end client's calls meet one
    /// daemon's per-client ceiling.
    pub async fn verify(&self, login: Login<'_>) -> Answer {
        let req = VerifyRequest {
            account: account(login.realm, login.identifier),
            password: login.password.to_vec(),
            stored_hash: login.stored_hash.to_owned(),
            client_key: login.client_key.to_owned(),
            attempt_id: login.attempt_id.map_or_else(new_attempt_id, str::to_owned),
            device_token: login.device_token.unwrap_or_default().to_owned(),
        };
        let mut req = req;
        let answer = self
            .call(Rpc::Verify, login.client_key, |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.verify(req).await.map(|r| r.into_inner()) }
            })
            .await;
        // Our copy of the password is wiped (the caller owns `login.password`).
        zeroize::Zeroize::zeroize(&mut req.password);
        match answer {
            Ok(r) if r.verdict == Verdict::Accept as i32 => Answer {
                device_token: Some(r.device_token).filter(|t| !t.is_empty()),
                spray_suspected: r.spray_suspected,
                step_up: r.step_up,
                network_throttled: r.network_throttled,
                password_breached: r.password_breached,
                ..Answer::allow(r.needs_rehash)
            },
            // A challenge without its token could never be confirmed: a deny.
            Ok(r) if r.verdict == Verdict::Challenge as i32 && !r.challenge_token.is_empty() => {
                Answer {
                    decision: Decision::Challenge,
                    challenge_token: Some(r.challenge_token),
                    spray_suspected: r.spray_suspected,
                    step_up: r.step_up,
                    network_throttled: r.network_throttled,
                    password_breached: r.password_breached,
                    ceiling_reached: r.ceiling_reached,
                    ..Answer::deny(false)
                }
            }
            Ok(r) if r.verdict == Verdict::ChangeRequired as i32 => Answer {
                decision: Decision::ChangeRequired,
                spray_suspected: r.spray_suspected,
                step_up: r.step_up,
                network_throttled: r.network_throttled,
                password_breached: true,
                ..Answer::deny(false)
            },
            Ok(r) => Answer {
                spray_suspected: r.spray_suspected,
                step_up: r.step_up,
                network_throttled: r.network_throttled,
                lockout_started: r.lockout_started,
                ceiling_reached: r.ceiling_reached,
                ..Answer::deny(false)
            },
            Err(f) => failure_answer(f),
        }
    }

    /// `ConfirmDevice` (docs/devices.md, "Step-up for unknown devices"): once the
    /// challenge of a [`Decision::Challenge`] passed (its code checked through
    /// [`Flow::SecondFactor`], or a mailed link followed), exchanges its
    /// [`Answer::challenge_token`] for a device token: `Allow` with
    /// [`Answer::device_token`] set, to store as after an accepted login. `stored_hash`
    /// is the one sent with that `Verify`. Every failure (a challenge token that is
    /// expired, another account's or credential's, the daemon unreachable) is a `Deny`
    /// without a token: ask the user to log in again.
    pub async fn confirm_device(
        &self,
        realm: &str,
        identifier: &str,
        challenge_token: &str,
        stored_hash: &str,
    ) -> Answer {
        let req = crate::pb::ConfirmDeviceRequest {
            account: account(realm, identifier),
            challenge_token: challenge_token.to_owned(),
            stored_hash: stored_hash.to_owned(),
        };
        let answer = self
            .call(Rpc::ConfirmDevice, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.confirm_device(req).await.map(|r| r.into_inner().device_token) }
            })
            .await;
        match answer {
            Ok(token) if !token.is_empty() => {
                Answer { device_token: Some(token), ..Answer::allow(false) }
            }
            Ok(_) => Answer::deny(false),
            Err(f) => failure_answer(f),
        }
    }

    /// `CheckPassword`, at set and change time (docs/breach.md): whether `password` may
    /// become `identifier`'s new password. Only [`PasswordCheck::Acceptable`] accepts it;
    /// every failure (no filter configured, the daemon unreachable, an unknown reason) is
    /// [`PasswordCheck::Unchecked`], which a gateway treats as a refusal (or retries when
    /// `retryable`). Our copy of the password is wiped.
    pub async fn check_password(
        &self,
        realm: &str,
        identifier: &str,
        password: &[u8],
    ) -> PasswordCheck {
        let mut req = crate::pb::CheckPasswordRequest {
            account: account(realm, identifier),
            password: password.to_vec(),
        };
        let answer = self
            .call(Rpc::CheckPassword, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.check_password(req).await.map(|r| r.into_inner()) }
            })
            .await;
        zeroize::Zeroize::zeroize(&mut req.password);
        use crate::pb::PasswordCheckReason as Reason;
        match answer.map(|r| Reason::try_from(r.reason)) {
            Ok(Ok(Reason::Ok)) => PasswordCheck::Acceptable,
            Ok(Ok(Reason::Breached)) => PasswordCheck::Breached,
            Ok(Ok(Reason::ContextWord)) => PasswordCheck::ContextWord,
            Ok(Ok(Reason::Unspecified) | Err(_)) => PasswordCheck::Unchecked { retryable: false },
            Err(f) => PasswordCheck::Unchecked { retryable: failure_answer(f).retryable },
        }
    }

    /// `ClearAttempts`: `Allow` when the daemon cleared the record.
    pub async fn clear_attempts(
        &self,
        realm: &str,
        identifier: &str,
        reason: ClearReason,
    ) -> Answer {
        self.clear_attempts_from(realm, identifier, "", reason).await
    }

    /// `ClearAttempts` naming the `client_key` of the [`Self::record_attempt_from`]
    /// whose password matched: with [`ClearReason::PasswordVerified`], its network's
    /// token is given back.
    pub async fn clear_attempts_from(
        &self,
        realm: &str,
        identifier: &str,
        client_key: &str,
        reason: ClearReason,
    ) -> Answer {
        let reason = match reason {
            ClearReason::PasswordVerified => crate::pb::ClearReason::PasswordVerified,
            ClearReason::PasswordResetCompleted => crate::pb::ClearReason::PasswordResetCompleted,
        };
        let req = ClearAttemptsRequest {
            account: account(realm, identifier),
            reason: reason as i32,
            client_key: client_key.to_owned(),
        };
        let answer = self
            .call(Rpc::ClearAttempts, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.clear_attempts(req).await.map(drop) }
            })
            .await;
        match answer {
            Ok(()) => Answer::allow(false),
            Err(f) => failure_answer(f),
        }
    }

    /// The endpoint a `Verify` for `client_key` would go to now; `None` when the
    /// breaker is open.
    pub fn route(&self, client_key: &str) -> Option<String> {
        self.inner.pool.route(client_key).map(str::to_owned)
    }

    /// Counters and health now.
    pub fn stats(&self) -> ClientStats {
        let i = &self.inner;
        ClientStats {
            calls: i.calls.load(Ordering::Relaxed),
            retries: i.retries.load(Ordering::Relaxed),
            transport_failures: i.transport_failures.load(Ordering::Relaxed),
            breaker_denials: i.breaker_denials.load(Ordering::Relaxed),
            breaker_open: i.pool.breaker_open(),
            healthy: i.pool.healthy(),
            tls_refusals: i.diagnoses.as_ref().map_or_else(Vec::new, |d| d.found()),
        }
    }

    /// One logical call of `method`: a client span (the parent of the daemon's, through
    /// the W3C context each try injects), then [`Self::try_endpoints`]. Keeps the
    /// breaker gauge current.
    async fn call<T, F, Fut>(&self, rpc: Rpc, route: &str, op: F) -> Result<T, Failure>
    where
        F: Fn(RpcClient, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let span = tracing::info_span!(
            "portcullis_client",
            otel.name = rpc.full_name(),
            otel.kind = "client",
            rpc.system = "grpc",
            rpc.service = rpc.service().name(),
            rpc.method = rpc.method(),
            retries = tracing::field::Empty,
        );
        let result = self.try_endpoints(route, op).instrument(span).await;
        ::metrics::gauge!(CLIENT_BREAKER_OPEN).set(if self.inner.pool.breaker_open() {
            1.0
        } else {
            0.0
        });
        result
    }

    /// Tries endpoints in rendezvous order for `route`, retrying transport failures
    /// only, within the budget. `call_timeout` bounds the whole call, retries included;
    /// each try sends the time left as its `grpc-timeout`.
    async fn try_endpoints<T, F, Fut>(&self, route: &str, op: F) -> Result<T, Failure>
    where
        F: Fn(RpcClient, Duration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let inner = &self.inner;
        inner.calls.fetch_add(1, Ordering::Relaxed);
        inner.budget.deposit();
        let deadline = tokio::time::Instant::now() + inner.config.call_timeout;
        let mut tried = Vec::new();
        loop {
            let Some(pick) = inner.pool.pick(route, &tried) else {
                if tried.is_empty() {
                    inner.breaker_denials.fetch_add(1, Ordering::Relaxed);
                    ::metrics::counter!(CLIENT_BREAKER_DENIALS).increment(1);
                    return Err(Failure::BreakerOpen);
                }
                return Err(Failure::Transport);
            };
            tried.push(pick.index);
            let client = GovernorClient::with_interceptor(
                inner.pool.endpoint(pick).channel.clone(),
                inner.bearer.clone(),
            );
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let outcome = match tokio::time::timeout_at(deadline, op(client, left)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(status)) if is_transport(&status) => Err(Failure::Transport),
                Ok(Err(s))
                    if answer::is_own_deadline(&s, tokio::time::Instant::now() >= deadline) =>
                {
                    Err(Failure::Timeout)
                }
                Ok(Err(status)) => Err(Failure::Answered(status)),
                Err(_elapsed) => Err(Failure::Timeout),
            };
            if matches!(outcome, Ok(_) | Err(Failure::Answered(_))) {
                inner.pool.answered(pick);
                if let Some(diagnoses) = &inner.diagnoses {
                    diagnoses.answered(pick.index);
                }
            }
            match outcome {
                Ok(value) => return Ok(value),
                Err(Failure::Answered(status)) => return Err(Failure::Answered(status)),
                Err(failure) => {
                    self.transport_failure(pick);
                    let retry = matches!(failure, Failure::Transport)
                        && tried.len() <= inner.config.max_retries as usize
                        && tokio::time::Instant::now() < deadline
                        && inner.budget.withdraw();
                    if !retry {
                        return Err(failure);
                    }
                    inner.retries.fetch_add(1, Ordering::Relaxed);
                    ::metrics::counter!(CLIENT_RETRIES).increment(1);
                    tracing::Span::current().record("retries", tried.len() - 1);
                }
            }
        }
    }

    fn transport_failure(&self, pick: Pick) {
        self.inner.transport_failures.fetch_add(1, Ordering::Relaxed);
        self.inner.pool.failed(pick);
        let url = &self.inner.pool.endpoint(pick).url;
        tracing::debug!(endpoint = %handshake::without_credentials(url), "transport failure");
        if let Some(diagnoses) = &self.inner.diagnoses {
            diagnoses.after_failure(pick.index, url);
        }
    }
}

fn account(realm: &str, identifier: &str) -> Option<Account> {
    Some(Account { realm: realm.to_owned(), identifier: identifier.to_owned() })
}

/// Non-`Verify` calls are spread over endpoints by account; the store is shared, so
/// any endpoint gives the same answer.
fn route_key(realm: &str, identifier: &str) -> String {
    format!("{}\0{realm}\0{identifier}", realm.len())
}

fn new_attempt_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// One try's request: a copy of `message` (every try sends the same one, its
/// `attempt_id` included), the time left as its `grpc-timeout`, and the caller's W3C
/// trace context in its metadata.
fn outgoing<T: Clone>(message: &T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message.clone());
    req.set_timeout(timeout);
    crate::trace::inject(req.metadata_mut());
    req
}
