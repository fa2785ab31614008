//! The login check of `Verify`, in the domain's own types (no gRPC): the order of work of
//! docs/verify.md ("The order of work") after the request was validated, and the events
//! and metrics of counted attempts. `crate::rpc` builds a [`LoginRequest`] from the wire
//! and turns the [`LoginVerdict`] or [`LoginError`] into the answer.
//!
//! device token check → CPU budget reservation (a full queue is refused here, before any
//! store work) → the client's turn (its earlier call has ended) → count, with the spray
//! check in the same round trip → closed door or replay: reject, no hashing → sprayed
//! fingerprint in a `reject` realm: reject, no hashing → CPU admission (refused: refund)
//! → compare → match: clear and accept with a fresh device token; else note the spray
//! failure and reject. Every answer carries `spray_suspected` as the check read it,
//! before this call's own note (docs/spray.md, "No oracle").
//!
//! A known device's attempt is counted in its own bucket, and its match clears only that
//! bucket: the account's record, which untrusted clients fill, stays as it is, so the
//! real user logging in does not hand an attacker a fresh allowance.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tracing::Instrument;
use zeroize::Zeroizing;

use crate::devices::{DeviceTokens, Grant, IssueError, KnownDevice};
use crate::realm::Realm;
use crate::spray::{SprayAction, SprayFingerprints, SprayWatch};
use crate::store::keys::{AccountKey, AttemptKey};
use crate::store::{Attempt, Counted, DeviceClaim, SprayNote, Store, StoreError};
use crate::telemetry::metrics::{ATTEMPTS, DEVICE_LOCKOUTS, LOCKOUTS, TRUSTED_CALLS, VERDICTS};
use crate::verify::budget::{Aborted, Lane, Refusal};
use crate::verify::{Comparison, Verifier};

/// One validated `Verify` (`crate::rpc` checked every field before any store or CPU
/// work).
pub struct LoginRequest {
    /// The account's realm.
    pub realm: Realm,
    /// The account key.
    pub key: AccountKey,
    /// Wiped on drop (`zeroize`).
    pub password: Zeroizing<Vec<u8>>,
    /// The stored hash, parsed (or the realm's dummy for an unknown account).
    pub comparison: Comparison,
    /// The stored hash as the gateway sent it: what an accept's device token vouches for.
    pub stored_hash: String,
    /// Who is asking, for the CPU budget.
    pub client_key: String,
    /// The device token the gateway sent (empty: none).
    pub device_token: String,
    /// Where the attempt id's answer is kept, when the gateway sent one.
    pub attempt: Option<AttemptKey>,
    /// The caller's deadline.
    pub deadline: Option<Instant>,
}

/// What a login check answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginVerdict {
    /// The password matched a real stored hash.
    Accept {
        /// The hash is below the realm's target.
        needs_rehash: bool,
        /// The fresh device token (docs/devices.md).
        device_token: String,
        /// The password's fingerprint is being sprayed across the realm.
        spray_suspected: bool,
    },
    /// Anything else: a closed door, an unknown identifier, a wrong password, a replay.
    /// The same whatever the cause.
    Reject {
        /// The password's fingerprint is being sprayed across the realm.
        spray_suspected: bool,
    },
}

/// Why a login check gave no verdict. Every one is a deny for the gateway.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("the store failed")]
    Store(#[from] StoreError),
    #[error("the CPU budget refused the comparison ({0})")]
    Refused(Refusal),
    #[error("the comparison did not complete")]
    Aborted(#[from] Aborted),
    #[error("no device token could be made")]
    NoDeviceToken(#[from] IssueError),
    #[error("the login check's task ended")]
    Gone,
}

/// Everything a login check needs, shared by every call.
pub struct Logins {
    store: Arc<dyn Store>,
    /// Dummy hashes, ceilings and the CPU budget.
    verifier: Arc<Verifier>,
    /// Issues and checks device tokens.
    devices: DeviceTokens,
    /// Password fingerprints for spray detection.
    fingerprints: SprayFingerprints,
    /// This daemon's view of spraying, shared with the Admin service.
    spray_watch: Arc<SprayWatch>,
}

impl Logins {
    /// Login checks against `store`, comparing under `verifier`'s budget.
    pub fn new(
        store: Arc<dyn Store>,
        verifier: Arc<Verifier>,
        devices: DeviceTokens,
        fingerprints: SprayFingerprints,
        spray_watch: Arc<SprayWatch>,
    ) -> Self {
        Self { store, verifier, devices, fingerprints, spray_watch }
    }

    /// The verifier (the request's hash is parsed by it before a login is checked).
    pub fn verifier(&self) -> &Arc<Verifier> {
        &self.verifier
    }

    /// Checks one login (see the module docs). The work after the reservation runs in
    /// its own task, in the current span: the count, a refund and the clear happen even
    /// if the caller goes away, and a comparison that started runs to its end.
    ///
    /// # Errors
    /// [`LoginError`]: the store failed, the CPU budget refused (a full queue before
    /// the count; a wait after it, refunded), the comparison panicked, no device token.
    pub async fn verify(&self, request: LoginRequest) -> Result<LoginVerdict, LoginError> {
        // At most one HMAC, whether or not the account exists: the check tells an
        // observer nothing about the account by time (a malformed token is only cheaper).
        let realm = &request.realm;
        let grant =
            Grant { realm: &realm.name, account: &request.key, stored_hash: &request.stored_hash };
        let device = self.devices.check(
            &request.device_token,
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
        let ticket = self
            .verifier
            .budget()
            .reserve(&request.client_key, lane)
            .map_err(LoginError::Refused)?;
        let realm_name = realm.name.clone();
        let job = Job {
            store: self.store.clone(),
            devices: self.devices.clone(),
            spray: self.fingerprints.key(&realm.name, &request.password),
            spray_watch: self.spray_watch.clone(),
            device,
            ticket,
            request,
        };
        let verdict =
            tokio::spawn(job.run().in_current_span()).await.map_err(|_| LoginError::Gone)??;
        note_verdict(&realm_name, &verdict);
        Ok(verdict)
    }
}

/// One login after its reservation, in its own task.
struct Job {
    store: Arc<dyn Store>,
    devices: DeviceTokens,
    /// Where the password's fingerprint is counted (docs/spray.md).
    spray: crate::store::keys::SprayKey,
    spray_watch: Arc<SprayWatch>,
    /// The known device, when the token checked out for this account and stored hash:
    /// the attempt is counted (and refunded, and cleared) in its bucket instead of on
    /// the account's record, unless the store finds its epoch revoked.
    device: Option<KnownDevice>,
    /// The place in the CPU budget, taken before counting. Its client slot is had
    /// before the count and kept until the job ends (after the clear).
    ticket: crate::verify::budget::Ticket,
    request: LoginRequest,
}

impl Job {
    async fn run(self) -> Result<LoginVerdict, LoginError> {
        let Job { store, devices, spray, spray_watch, device, mut ticket, request } = self;
        let LoginRequest {
            realm, key, password, comparison, stored_hash, attempt, deadline, ..
        } = request;
        // The client's turn first: its earlier call (the same browser's parallel login)
        // has then been counted, compared and cleared, so this count sees its clear. A
        // refusal here counted nothing, so there is nothing to refund.
        ticket.take_turn(deadline).await.map_err(LoginError::Refused)?;
        // Two commands sent at once, each on a pooled multiplexed connection (on a cluster
        // each to its own node): one round trip of latency, not two. The check only
        // reads: an account is noted only after a real comparison failed (below), so
        // neither a closed door, a refund nor a short deadline notes anything, and no
        // answer depends on whether this account was counted before.
        let counting = Attempt {
            key: &key,
            device: device.as_ref().map(|d| DeviceClaim { bucket: &d.bucket, epoch: d.epoch }),
            attempt_id: attempt.as_ref(),
            policy: &realm.policy,
            device_epoch_ttl_ms: realm.device_epoch_ttl_ms(),
        };
        let (counted, sprayed) = tokio::join!(
            store.count(&counting),
            store.note_spray(
                &spray,
                &key,
                SprayNote::Check,
                realm.spray.period_ms(),
                realm.spray.threshold
            ),
        );
        let counted = counted?;
        let suspected = spray_watch.observe(&realm.name, &spray, sprayed?, &realm.spray);
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
                store.refund(bucket, attempt.as_ref(), counted.window_start_ms).await?;
                return Err(LoginError::Refused(refusal));
            }
        }
        note_count(&realm, bucket, &counted, counted.allowed && counted.replays == 0);
        let reject = LoginVerdict::Reject { spray_suspected: suspected };
        // A replayed attempt_id is rejected without a comparison: comparing again would be
        // a guess its first call's count does not cover (and after a lockout, a guess
        // behind a closed door), and refunding it would give back a count that paid for
        // a real comparison. The id's first call is the one that counted and compared.
        if !counted.allowed || counted.replays > 0 {
            return Ok(reject);
        }
        // The realm refuses comparisons of a sprayed password: no hashing, and the
        // attempt stays counted (it was a guess at the account, whoever made it).
        if suspected && realm.spray.action == SprayAction::Reject {
            return Ok(reject);
        }
        let rpc = tracing::Span::current();
        let compared = ticket.compare(deadline, move || comparison.run(&password, &rpc)).await;
        let outcome = match compared {
            Err(refusal) => {
                store.refund(bucket, attempt.as_ref(), counted.window_start_ms).await?;
                return Err(LoginError::Refused(refusal));
            }
            Ok(outcome) => outcome?,
        };
        if outcome.matched {
            // The clear answers the account's device epoch, which the fresh token
            // carries. A token that cannot be made is an error (deny), never an accept
            // without it; the user logs in again.
            let epoch = store.accept(bucket, &key, realm.device_epoch_ttl_ms()).await?;
            let grant = Grant { realm: &realm.name, account: &key, stored_hash: &stored_hash };
            let device_token = devices.issue(&grant, epoch).inspect_err(|e| {
                tracing::error!(realm = %realm.name, error = %e, "no device token");
            })?;
            return Ok(LoginVerdict::Accept {
                needs_rehash: outcome.needs_rehash,
                device_token,
                spray_suspected: suspected,
            });
        }
        // The spray note names the account, not the device bucket: it counts distinct
        // accounts. The answer stays the check's.
        let distinct = store
            .note_spray(
                &spray,
                &key,
                SprayNote::Failure,
                realm.spray.period_ms(),
                realm.spray.threshold,
            )
            .await?;
        spray_watch.noted(&realm.name, &spray, distinct, &realm.spray);
        Ok(reject)
    }
}

/// Meters a counted attempt, and emits the single lockout event: realm only, never the
/// identifier or its key. A known device's bucket closing is its own event (`key` names
/// a device bucket). `allowed` is the answer given (a replay may be refused although
/// its first call was allowed).
pub fn note_count(realm: &Realm, key: &AccountKey, counted: &Counted, allowed: bool) {
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
fn note_verdict(realm: &str, verdict: &LoginVerdict) {
    let name = match verdict {
        LoginVerdict::Accept { .. } => "accept",
        LoginVerdict::Reject { .. } => "reject",
    };
    metrics::counter!(VERDICTS, "realm" => realm.to_owned(), "verdict" => name).increment(1);
}
