//! gRPC ↔ domain mapping only: validate a request, derive its account key, call the
//! store and the verifier, and build the answer. Answers are built in one place
//! ([`decision`], [`reject`], [`accept`]) and store errors become `UNAVAILABLE` in one
//! place ([`store_unavailable`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use zeroize::Zeroizing;

use crate::normalize::normalize;
use crate::pb::governor_server::Governor;
use crate::pb::{
    Account, AdmitRequest, AdmitResponse, ClearAttemptsRequest, ClearAttemptsResponse, ClearReason,
    Decision, RecordAttemptRequest, RecordAttemptResponse, Verdict, VerifyRequest, VerifyResponse,
};
use crate::realm::{Realm, Realms};
use crate::store::keys::{AccountKey, AttemptId, KeySecret};
use crate::store::{Counted, Store, StoreError};
use crate::verify::governor::{Refusal, Ticket};
use crate::verify::{Comparison, MAX_CLIENT_KEY_BYTES, Verifier};

/// How often one `attempt_id` may be replayed through `RecordAttempt` and still get its
/// first answer; later replays are denied. Two covers the client's retries; without a
/// bound, a gateway that let end users choose attempt ids would hand them a reusable
/// ALLOW. (`Verify` never answers a replay with a new comparison: see [`VerifyJob::run`].)
pub const MAX_REPLAYS: u64 = 2;

/// The `portcullis.v1.Governor` service.
pub struct GovernorService {
    realms: Arc<Realms>,
    store: Arc<dyn Store>,
    /// Derives account keys; the same secret on every daemon sharing the store.
    secret: KeySecret,
    /// Dummy hashes, ceilings and the CPU governor of `Verify`.
    verifier: Arc<Verifier>,
}

impl GovernorService {
    /// A service over `store` for `realms`.
    pub fn new(
        realms: Arc<Realms>,
        store: Arc<dyn Store>,
        secret: KeySecret,
        verifier: Arc<Verifier>,
    ) -> Self {
        Self { realms, store, secret, verifier }
    }

    /// Validates `account` (before any store work) and derives its key; see
    /// [`validate_account`].
    fn account_key(
        &self,
        account: Option<&Account>,
        extensions: &tonic::Extensions,
    ) -> Result<(&Realm, AccountKey), Status> {
        validate_account(&self.realms, &self.secret, account, extensions)
    }
}

/// Validates `account` (before any store or CPU work) and derives its key: the account
/// is present, its realm configured and open to the request's caller
/// ([`crate::auth::check_realm`]), its identifier valid after normalization. Shared by
/// `Governor` and `Admin`.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field: missing account, unknown realm, identifier
/// empty after normalization or over 320 bytes. `PERMISSION_DENIED` when the caller may
/// not use the realm.
pub(crate) fn validate_account<'r>(
    realms: &'r Realms,
    secret: &KeySecret,
    account: Option<&Account>,
    extensions: &tonic::Extensions,
) -> Result<(&'r Realm, AccountKey), Status> {
    let account = account.ok_or_else(|| Status::invalid_argument("account is required"))?;
    let realm = realms
        .get(&account.realm)
        .ok_or_else(|| Status::invalid_argument("account.realm is not a configured realm"))?;
    crate::auth::check_realm(extensions, &realm.name)?;
    let identifier = normalize(realm.normalization, &account.identifier)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((realm, AccountKey::new(secret, &realm.name, &identifier)))
}

/// The one place a throttle answer becomes a wire [`Decision`]. A closed door is
/// `DECISION_DENY`, whatever closed it.
fn decision(allowed: bool) -> i32 {
    if allowed { Decision::Allow as i32 } else { Decision::Deny as i32 }
}

/// The one place a failed login's answer is built. A closed door, an unknown identifier,
/// a wrong password (and a disabled account, which a gateway sends as unknown) all get
/// this value, byte for byte.
pub fn reject() -> VerifyResponse {
    VerifyResponse { verdict: Verdict::Reject as i32, needs_rehash: false }
}

/// The answer to a password that matched.
fn accept(needs_rehash: bool) -> VerifyResponse {
    VerifyResponse { verdict: Verdict::Accept as i32, needs_rehash }
}

/// Every store failure leaves the service here. `UNAVAILABLE` because the failure is
/// the store's, transient, and says nothing about the account; gateways treat it as
/// deny. The cause is logged (it names no identifier: keys are digests) and not sent.
pub(crate) fn store_unavailable(err: StoreError) -> Status {
    tracing::error!(error = %err, cause = ?std::error::Error::source(&err), "store operation failed");
    metrics::counter!("portcullis_store_errors_total").increment(1);
    Status::unavailable("store unavailable")
}

/// The single lockout event: realm only, never the identifier or its key.
fn note_lockout(realm: &Realm, counted: &Counted) {
    if counted.locked_now {
        tracing::warn!(realm = %realm.name, "lockout: an account key used up its window");
        metrics::counter!("portcullis_lockouts_total", "realm" => realm.name.clone()).increment(1);
    }
}

/// The caller's deadline from the `grpc-timeout` header (gRPC over HTTP/2: 1–8 digits
/// and a unit H, M, S, m, u or n). tonic enforces the header but does not expose it, and
/// the parse is a few lines, so no library is pulled in for it. A malformed header is
/// ignored here; tonic answers it.
fn grpc_deadline(metadata: &MetadataMap) -> Option<Instant> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Instant::now().checked_add(timeout)
}

/// One `Verify` after validation. It runs in its own task, so the count, the refund of
/// a refused attempt and the clear after a match all happen even if the caller goes away.
struct VerifyJob {
    store: Arc<dyn Store>,
    /// The place in the CPU budget, taken before counting.
    ticket: Ticket,
    realm: Realm,
    key: AccountKey,
    attempt_id: Option<AttemptId>,
    /// Wiped on drop (`zeroize`).
    password: Zeroizing<Vec<u8>>,
    comparison: Comparison,
    deadline: Option<Instant>,
}

/// A refusal of the CPU budget: retryable, unlike a reject; the attempt is not counted.
fn budget_refused(refusal: Refusal) -> Status {
    Status::resource_exhausted(format!(
        "CPU budget refused the comparison ({refusal}); retry later"
    ))
}

impl VerifyJob {
    /// count → closed door: reject, no hashing → CPU admission → refused: refund and
    /// `RESOURCE_EXHAUSTED` → compare → match: clear and accept; else reject. (The
    /// ticket was taken before the count, so a full queue was refused without one.)
    async fn run(self) -> Result<VerifyResponse, Status> {
        let VerifyJob { store, ticket, realm, key, attempt_id, password, comparison, deadline } =
            self;
        let counted = store
            .record_attempt(&key, attempt_id.as_ref(), &realm.policy)
            .await
            .map_err(store_unavailable)?;
        note_lockout(&realm, &counted);
        // A replayed attempt_id is rejected without a comparison: comparing again would be
        // a guess its first call's count does not cover (and after a lockout, a guess
        // behind a closed door), and refunding it would give back a count that paid for
        // a real comparison. The id's first call is the one that counted and compared.
        if !counted.allowed || counted.replays > 0 {
            return Ok(reject());
        }
        let compared = ticket.run(deadline, move || comparison.run(&password)).await;
        match compared {
            Err(refusal) => {
                store
                    .refund(&key, attempt_id.as_ref(), counted.window_start_ms)
                    .await
                    .map_err(store_unavailable)?;
                Err(budget_refused(refusal))
            }
            Ok(Err(aborted)) => {
                tracing::error!(realm = %realm.name, error = %aborted, "password comparison failed");
                Err(Status::internal("the comparison did not complete"))
            }
            Ok(Ok(outcome)) if outcome.matched => {
                store.clear(&key).await.map_err(store_unavailable)?;
                Ok(accept(outcome.needs_rehash))
            }
            Ok(Ok(_)) => Ok(reject()),
        }
    }
}

#[tonic::async_trait]
impl Governor for GovernorService {
    async fn admit(
        &self,
        request: Request<AdmitRequest>,
    ) -> Result<Response<AdmitResponse>, Status> {
        let (realm, key) =
            self.account_key(request.get_ref().account.as_ref(), request.extensions())?;
        let open = self.store.is_open(&key, &realm.policy).await.map_err(store_unavailable)?;
        Ok(Response::new(AdmitResponse { decision: decision(open) }))
    }

    async fn record_attempt(
        &self,
        request: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        let req = request.get_ref();
        let (realm, key) = self.account_key(req.account.as_ref(), request.extensions())?;
        let attempt_id = AttemptId::parse(&req.attempt_id).map_err(Status::invalid_argument)?;
        let counted = self
            .store
            .record_attempt(&key, attempt_id.as_ref(), &realm.policy)
            .await
            .map_err(store_unavailable)?;
        note_lockout(realm, &counted);
        let allowed = counted.allowed && counted.replays <= MAX_REPLAYS;
        Ok(Response::new(RecordAttemptResponse { decision: decision(allowed) }))
    }

    async fn verify(
        &self,
        request: Request<VerifyRequest>,
    ) -> Result<Response<VerifyResponse>, Status> {
        let deadline = grpc_deadline(request.metadata());
        let (_, extensions, req) = request.into_parts();
        // The password is wiped from memory when the request is done with, whatever way
        // it ends (tonic's own receive buffer is not ours to wipe).
        let password = Zeroizing::new(req.password);
        let (realm, key) = self.account_key(req.account.as_ref(), &extensions)?;
        let attempt_id = AttemptId::parse(&req.attempt_id).map_err(Status::invalid_argument)?;
        if req.client_key.is_empty() {
            return Err(Status::invalid_argument("client_key is required"));
        }
        if req.client_key.len() > MAX_CLIENT_KEY_BYTES {
            return Err(Status::invalid_argument(format!(
                "client_key is longer than {MAX_CLIENT_KEY_BYTES} bytes"
            )));
        }
        let max_password = self.verifier.settings().max_password_bytes;
        if password.len() > max_password {
            return Err(Status::invalid_argument(format!(
                "password is longer than {max_password} bytes"
            )));
        }
        // Checked before counting, so a malformed hash leaves no count to refund.
        let comparison = self.verifier.prepare(realm, &req.stored_hash).map_err(|e| {
            tracing::warn!(realm = %realm.name, problem = %e, "a gateway sent an unusable stored hash");
            metrics::counter!("portcullis_verify_bad_hashes_total").increment(1);
            Status::invalid_argument(e.to_string())
        })?;
        // Admission knows only the client key. A full queue is refused here, before
        // any store work: under a flood most calls end at this line.
        let ticket = self.verifier.governor().reserve(&req.client_key).map_err(budget_refused)?;
        let job = VerifyJob {
            store: self.store.clone(),
            ticket,
            realm: realm.clone(),
            key,
            attempt_id,
            password,
            comparison,
            deadline,
        };
        let answer = tokio::spawn(job.run())
            .await
            .map_err(|_| Status::internal("the verification did not complete"))??;
        Ok(Response::new(answer))
    }

    async fn clear_attempts(
        &self,
        request: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        let req = request.get_ref();
        let (_, key) = self.account_key(req.account.as_ref(), request.extensions())?;
        match ClearReason::try_from(req.reason) {
            Ok(ClearReason::PasswordVerified | ClearReason::PasswordResetCompleted) => {}
            Ok(ClearReason::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(
                    "reason must be CLEAR_REASON_PASSWORD_VERIFIED or CLEAR_REASON_PASSWORD_RESET_COMPLETED",
                ));
            }
        }
        self.store.clear(&key).await.map_err(store_unavailable)?;
        Ok(Response::new(ClearAttemptsResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timeout(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("grpc-timeout", value.parse().unwrap());
        m
    }

    #[test]
    fn grpc_timeout_header_is_parsed() {
        let now = Instant::now();
        let at = |v: &str| grpc_deadline(&with_timeout(v)).map(|d| d.duration_since(now));
        let near = |d: Option<Duration>, want: Duration| {
            d.is_some_and(|d| d >= want && d < want + Duration::from_secs(1))
        };
        assert!(near(at("1H"), Duration::from_secs(3600)));
        assert!(near(at("2M"), Duration::from_secs(120)));
        assert!(near(at("3S"), Duration::from_secs(3)));
        assert!(near(at("250m"), Duration::from_millis(250)));
        assert!(near(at("1000u"), Duration::from_millis(1)));
        assert!(near(at("5n"), Duration::ZERO));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_deadline(&MetadataMap::new()), None);
    }

    #[test]
    fn reject_is_one_value() {
        assert_eq!(reject(), reject());
        assert_eq!(reject().verdict, Verdict::Reject as i32);
        assert!(!reject().needs_rehash);
    }
}
