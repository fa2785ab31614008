//! gRPC ↔ domain mapping only: validate a request, derive its account key, call the
//! store and the verifier, and build the answer. Answers are built in one place
//! ([`decision`], [`reject`], [`accept`]) and store errors become `UNAVAILABLE` in one
//! place ([`store_unavailable`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;
use zeroize::Zeroizing;

use crate::devices::{DeviceTokens, Grant, KnownDevice, MAX_DEVICE_TOKEN_BYTES};
use crate::normalize::normalize;
use crate::pb::governor_server::Governor;
use crate::pb::{
    Account, AdmitRequest, AdmitResponse, ClearAttemptsRequest, ClearAttemptsResponse, ClearReason,
    Decision, RecordAttemptRequest, RecordAttemptResponse, Verdict, VerifyRequest, VerifyResponse,
};
use crate::realm::{Realm, Realms};
use crate::spray::{SprayAction, SprayFingerprints, SprayKey, SprayNote, SprayWatch};
use crate::store::keys::{AccountKey, AttemptId, KeySecret};
use crate::store::{Attempt, Counted, DeviceClaim, Store, StoreError};
use crate::telemetry::metrics::{
    ATTEMPTS, BAD_HASHES, DEVICE_LOCKOUTS, LOCKOUTS, TRUSTED_CALLS, VERDICTS,
};
use crate::telemetry::traces::{record_outcome, record_realm, record_status};
use crate::verify::governor::{Lane, Refusal, Ticket};
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
    /// Issues and checks device tokens (a key derived from `secret`).
    devices: DeviceTokens,
    /// Password fingerprints for spray detection (a key derived from `secret`).
    fingerprints: SprayFingerprints,
    /// This daemon's view of spraying, shared with the Admin service.
    spray_watch: Arc<SprayWatch>,
}

impl GovernorService {
    /// A service over `store` for `realms`, reporting spraying to `spray_watch`.
    pub fn new(
        realms: Arc<Realms>,
        store: Arc<dyn Store>,
        secret: KeySecret,
        verifier: Arc<Verifier>,
        spray_watch: Arc<SprayWatch>,
    ) -> Self {
        let devices = DeviceTokens::new(&secret);
        let fingerprints = SprayFingerprints::new(&secret);
        Self { realms, store, secret, verifier, devices, fingerprints, spray_watch }
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
    record_realm(&realm.name);
    crate::auth::check_realm(extensions, &realm.name)?;
    let identifier = normalize(realm.normalization, &account.identifier)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((realm, AccountKey::new(secret, &realm.name, &identifier)))
}

/// The one place a throttle answer becomes a wire [`Decision`]. A closed door is
/// `DECISION_DENY`, whatever closed it.
fn decision(allowed: bool) -> i32 {
    record_outcome(if allowed { "allow" } else { "deny" }, None);
    if allowed { Decision::Allow as i32 } else { Decision::Deny as i32 }
}

/// The one place a failed login's answer is built. A closed door, an unknown identifier,
/// a wrong password (and a disabled account, which a gateway sends as unknown) all get
/// this value, byte for byte.
/// Whether the call carried a valid device token is never part of it. `spray_suspected`
/// depends on the password's fingerprint and the realm only (docs/spray.md), never on
/// the account, so it tells nothing about the account either.
pub fn reject(spray_suspected: bool) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::Reject as i32,
        needs_rehash: false,
        device_token: String::new(),
        spray_suspected,
    }
}

/// The answer to a password that matched, with a fresh device token.
fn accept(needs_rehash: bool, device_token: String, spray_suspected: bool) -> VerifyResponse {
    VerifyResponse { verdict: Verdict::Accept as i32, needs_rehash, device_token, spray_suspected }
}

/// Every store failure leaves the service here. `UNAVAILABLE` because the failure is
/// the store's, transient, and says nothing about the account; gateways treat it as
/// deny. The cause is not sent; the store wrapper ([`crate::store::instrumented`])
/// counts it and logs it once a refusal episode (it names no identifier).
pub(crate) fn store_unavailable(_err: StoreError) -> Status {
    record_outcome("unavailable", None);
    Status::unavailable("store unavailable")
}

/// Meters a counted attempt, and emits the single lockout event: realm only, never the
/// identifier or its key. A known device's bucket closing is its own event (`key` names
/// a device bucket).
fn note_attempt(realm: &Realm, key: &AccountKey, counted: &Counted, allowed: bool) {
    let decision = if allowed { "allow" } else { "deny" };
    metrics::counter!(ATTEMPTS, "realm" => realm.name.clone(), "decision" => decision).increment(1);
    if !counted.locked_now {
        return;
    }
    if key.is_device() {
        tracing::warn!(realm = %realm.name, "device lockout: a known device used up its window");
        metrics::counter!(DEVICE_LOCKOUTS, "realm" => realm.name.clone()).increment(1);
    } else {
        tracing::warn!(realm = %realm.name, "lockout: an account key used up its window");
        metrics::counter!(LOCKOUTS, "realm" => realm.name.clone()).increment(1);
    }
}

/// Meters a `Verify` verdict by realm.
fn note_verdict(realm: &Realm, answer: &VerifyResponse) {
    let verdict = if answer.verdict == Verdict::Accept as i32 { "accept" } else { "reject" };
    record_outcome(verdict, None);
    metrics::counter!(VERDICTS, "realm" => realm.name.clone(), "verdict" => verdict).increment(1);
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
    /// The place in the CPU budget, taken before counting. Its client slot is had
    /// before the count and kept until the job ends (after the clear).
    ticket: Ticket,
    realm: Realm,
    key: AccountKey,
    /// The known device, when the call's device token checked out for this account
    /// and stored hash: the attempt is counted (and refunded, and cleared) in its
    /// bucket instead of on `key`, unless the store finds its epoch revoked.
    device: Option<KnownDevice>,
    /// Issues the fresh token of an accept.
    devices: DeviceTokens,
    /// The stored hash the gateway sent, which an accept's device token vouches for.
    stored_hash: String,
    /// The realm's device epoch TTL ([`Attempt::device_epoch_ttl_ms`]).
    device_epoch_ttl_ms: u64,
    /// Where the password's fingerprint is counted (docs/spray.md).
    spray: SprayKey,
    spray_watch: Arc<SprayWatch>,
    attempt_id: Option<AttemptId>,
    /// Wiped on drop (`zeroize`).
    password: Zeroizing<Vec<u8>>,
    comparison: Comparison,
    deadline: Option<Instant>,
}

/// A refusal of the CPU budget: retryable, unlike a reject; the attempt is not counted.
fn budget_refused(refusal: Refusal) -> Status {
    record_outcome("refused", Some(refusal.as_str()));
    Status::resource_exhausted(format!(
        "CPU budget refused the comparison ({refusal}); retry later"
    ))
}

impl VerifyJob {
    /// the client's turn (its earlier call has ended) → count (and, in the same round
    /// trip, read the password fingerprint's spray count) → closed door: reject, no hashing → sprayed fingerprint in a `reject` realm:
    /// reject, no hashing → CPU admission → refused: refund and `RESOURCE_EXHAUSTED` →
    /// compare → match: clear and accept; else note the failure and reject. Every answer
    /// carries `spray_suspected` as the check read it, before this call's own note
    /// (docs/spray.md, "No oracle"). (The ticket was taken before the count, so a full
    /// queue was refused without one.)
    ///
    /// A known device's attempt is counted in its own bucket, and its match clears only
    /// that bucket: the account's record, which untrusted clients fill, stays as it is,
    /// so the real user logging in does not hand an attacker a fresh allowance.
    async fn run(self) -> Result<VerifyResponse, Status> {
        let VerifyJob {
            store,
            mut ticket,
            realm,
            key,
            device,
            devices,
            stored_hash,
            device_epoch_ttl_ms,
            spray,
            spray_watch,
            attempt_id,
            password,
            comparison,
            deadline,
        } = self;
        // The client's turn first: its earlier call (the same browser's parallel login)
        // has then been counted, compared and cleared, so this count sees its clear. A
        // refusal here counted nothing, so there is nothing to refund.
        ticket.take_turn(deadline).await.map_err(budget_refused)?;
        // Two commands sent at once, each on a pooled multiplexed connection (on a cluster
        // each to its own node): one round trip of latency, not two. The check only
        // reads: an account is noted only after a real comparison failed (below), so
        // neither a closed door, a refund nor a short deadline notes anything, and no
        // answer depends on whether this account was counted before.
        let attempt = Attempt {
            key: &key,
            device: device.as_ref().map(|d| DeviceClaim { bucket: &d.bucket, epoch: d.epoch }),
            attempt_id: attempt_id.as_ref(),
            policy: &realm.policy,
            device_epoch_ttl_ms,
        };
        let (counted, sprayed) = tokio::join!(
            store.count(&attempt),
            store.note_spray(
                &spray,
                &key,
                SprayNote::Check,
                realm.spray.period_ms(),
                realm.spray.threshold
            ),
        );
        let counted = counted.map_err(store_unavailable)?;
        let distinct = sprayed.map_err(store_unavailable)?;
        // Where it was counted: the device's bucket, or (no token, or a revoked one) the
        // account's own record.
        let bucket = match &device {
            Some(known) if counted.trusted => &known.bucket,
            _ => &key,
        };
        if device.is_some() && !counted.trusted {
            // A revoked device waits with the untrusted (a full queue refuses it there,
            // and its count is given back).
            if let Err(refusal) = ticket.demote() {
                store
                    .refund(bucket, attempt_id.as_ref(), counted.window_start_ms)
                    .await
                    .map_err(store_unavailable)?;
                return Err(budget_refused(refusal));
            }
        }
        let suspected = spray_watch.observe(&realm.name, &spray, distinct, &realm.spray);
        note_attempt(&realm, bucket, &counted, counted.allowed && counted.replays == 0);
        // A replayed attempt_id is rejected without a comparison: comparing again would be
        // a guess its first call's count does not cover (and after a lockout, a guess
        // behind a closed door), and refunding it would give back a count that paid for
        // a real comparison. The id's first call is the one that counted and compared.
        if !counted.allowed || counted.replays > 0 {
            return Ok(reject(suspected));
        }
        // The realm refuses comparisons of a sprayed password: no hashing, and the
        // attempt stays counted (it was a guess at the account, whoever made it).
        if suspected && realm.spray.action == SprayAction::Reject {
            return Ok(reject(true));
        }
        let rpc = tracing::Span::current();
        let compared = ticket.compare(deadline, move || comparison.run(&password, &rpc)).await;
        match compared {
            Err(refusal) => {
                store
                    .refund(bucket, attempt_id.as_ref(), counted.window_start_ms)
                    .await
                    .map_err(store_unavailable)?;
                Err(budget_refused(refusal))
            }
            Ok(Err(aborted)) => {
                tracing::error!(realm = %realm.name, error = %aborted, "password comparison failed");
                Err(Status::internal("the comparison did not complete"))
            }
            Ok(Ok(outcome)) if outcome.matched => {
                // The clear answers the account's device epoch, which the fresh token
                // carries. A token that cannot be made answers an error (deny), never an
                // accept without it; the user logs in again.
                let epoch = store
                    .accept(bucket, &key, device_epoch_ttl_ms)
                    .await
                    .map_err(store_unavailable)?;
                let grant = Grant { realm: &realm.name, account: &key, stored_hash: &stored_hash };
                let token = devices.issue(&grant, epoch).map_err(|e| {
                    tracing::error!(realm = %realm.name, error = %e, "no device token");
                    Status::internal("the verification did not complete")
                })?;
                Ok(accept(outcome.needs_rehash, token, suspected))
            }
            Ok(Ok(_)) => {
                // The spray note names the account, not the device bucket: it counts
                // distinct accounts. The answer stays the check's.
                let distinct = store
                    .note_spray(
                        &spray,
                        &key,
                        SprayNote::Failure,
                        realm.spray.period_ms(),
                        realm.spray.threshold,
                    )
                    .await
                    .map_err(store_unavailable)?;
                spray_watch.noted(&realm.name, &spray, distinct, &realm.spray);
                Ok(reject(suspected))
            }
        }
    }
}

#[tonic::async_trait]
impl Governor for GovernorService {
    async fn admit(
        &self,
        request: Request<AdmitRequest>,
    ) -> Result<Response<AdmitResponse>, Status> {
        let result = async {
            let (realm, key) =
                self.account_key(request.get_ref().account.as_ref(), request.extensions())?;
            let open = self.store.is_open(&key, &realm.policy).await.map_err(store_unavailable)?;
            Ok(Response::new(AdmitResponse { decision: decision(open) }))
        }
        .await;
        record_status(&result);
        result
    }

    async fn record_attempt(
        &self,
        request: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        let result = async {
            let req = request.get_ref();
            let (realm, key) = self.account_key(req.account.as_ref(), request.extensions())?;
            let attempt_id = AttemptId::parse(&req.attempt_id).map_err(Status::invalid_argument)?;
            let counted = self
                .store
                .record_attempt(&key, attempt_id.as_ref(), &realm.policy)
                .await
                .map_err(store_unavailable)?;
            let allowed = counted.allowed && counted.replays <= MAX_REPLAYS;
            note_attempt(realm, &key, &counted, allowed);
            Ok(Response::new(RecordAttemptResponse { decision: decision(allowed) }))
        }
        .await;
        record_status(&result);
        result
    }

    async fn verify(
        &self,
        request: Request<VerifyRequest>,
    ) -> Result<Response<VerifyResponse>, Status> {
        let result = self.verify_call(request).await;
        record_status(&result);
        result
    }

    async fn clear_attempts(
        &self,
        request: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        let result = self.clear_call(request).await;
        record_status(&result);
        result
    }
}

impl GovernorService {
    async fn verify_call(
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
        if req.device_token.len() > MAX_DEVICE_TOKEN_BYTES {
            return Err(Status::invalid_argument(format!(
                "device_token is longer than {MAX_DEVICE_TOKEN_BYTES} bytes"
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
            metrics::counter!(BAD_HASHES).increment(1);
            Status::invalid_argument(e.to_string())
        })?;
        // At most one HMAC, whether or not the account exists: the check tells an
        // observer nothing about the account by time (a malformed token is only cheaper).
        let grant = Grant { realm: &realm.name, account: &key, stored_hash: &req.stored_hash };
        let device = self.devices.check(
            &req.device_token,
            &grant,
            realm.device_token_ttl,
            SystemTime::now(),
        );
        let lane = if device.is_some() {
            metrics::counter!(TRUSTED_CALLS, "realm" => realm.name.clone()).increment(1);
            Lane::Trusted
        } else {
            Lane::Untrusted
        };
        // Admission knows only the client key and the lane. A full queue is refused
        // here, before any store work: under a flood most calls end at this line.
        let ticket =
            self.verifier.governor().reserve(&req.client_key, lane).map_err(budget_refused)?;
        let job = VerifyJob {
            store: self.store.clone(),
            ticket,
            realm: realm.clone(),
            key,
            device,
            devices: self.devices.clone(),
            device_epoch_ttl_ms: realm.device_epoch_ttl_ms(),
            stored_hash: req.stored_hash,
            spray: self.fingerprints.key(&realm.name, &password),
            spray_watch: self.spray_watch.clone(),
            attempt_id,
            password,
            comparison,
            deadline,
        };
        // The job runs in the RPC span, so its store, admission and comparison spans are
        // the RPC's children.
        let answer = tokio::spawn(job.run().in_current_span())
            .await
            .map_err(|_| Status::internal("the verification did not complete"))??;
        note_verdict(realm, &answer);
        Ok(Response::new(answer))
    }

    async fn clear_call(
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
        record_outcome("cleared", None);
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
        assert_eq!(reject(false), reject(false));
        assert_eq!(reject(false).verdict, Verdict::Reject as i32);
        assert!(!reject(false).needs_rehash && !reject(false).spray_suspected);
        assert!(reject(true).spray_suspected);
    }
}
