//! The login checks, in the domain's own types (no gRPC): `Verify`'s order of work of
//! docs/verify.md ("The order of work") after the request was validated (`job`, and
//! `settle`: the one step every way out of a counted call goes through),
//! `RecordAttempt` and `ClearAttempts` with the throttle per client network
//! ([`record`]), the network's turn and the answers' signals ([`signals`]), and the
//! events and metrics of counted attempts. `crate::rpc` builds a [`LoginRequest`] from
//! the wire and turns the [`LoginVerdict`] or [`LoginError`] into the answer.
//!
//! device token check → CPU budget reservation (a full queue is refused here, before any
//! store work) → the client's turn (its earlier call has ended) → count, with the spray
//! check and the network's token in the same round trip → network throttled in a
//! `reject` realm: the count given back, reject, no hashing → closed door or replay:
//! reject, no hashing → sprayed fingerprint in a `reject` realm: reject, no hashing →
//! a repeat of a refused password (read in the count's step, not counted): the failure
//! notes and reject, no hashing → CPU admission (refused: refund) → compare → match:
//! clear and accept with a fresh device token; else note the spray failure and the
//! refused password's fingerprint, and reject. Every path but a failed comparison gives
//! the network's token back. Every answer carries `spray_suspected` as
//! the check read it, before this call's own note (docs/spray.md, "No oracle"), and
//! `step_up` / `network_throttled` ([`Signals`]).
//!
//! A known device's attempt is counted in its own bucket, and its match clears only that
//! bucket: the account's record, which untrusted clients fill, stays as it is, so the
//! real user logging in does not hand an attacker a fresh allowance.

mod job;
pub mod record;
mod settle;
pub mod signals;

pub use signals::Signals;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use zeroize::Zeroizing;

use crate::defence::breach::BreachList;
use crate::defence::client_network::NetworkWatch;
use crate::defence::devices::{CHALLENGE_TTL, DeviceTokens, Grant, IssueError, MAX_CLOCK_SKEW};
use crate::defence::repeats::RepeatFingerprints;
use crate::defence::spray::{SprayFingerprints, SprayWatch};
use crate::realm::Realm;
use crate::secret::KeySecret;
use crate::store::Store;
use crate::store::attempt_count::Counted;
use crate::store::devices::{Confirmation, DeviceConfirmation};
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey};
use crate::store::realm_tally::TallyBuffer;
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::metrics::{
    CEILINGS_REACHED, DEVICE_LOCKOUTS, DEVICES_CONFIRMED, LOCKOUTS, VERDICTS,
};
use crate::throttle::candidate_report::{self, Defence, Outcome};
use crate::throttle::flow::Flow;
use crate::throttle::realm_tally::{Counter, Distinct};
use crate::verify::budget::{Aborted, Refusal};
use crate::verify::{Comparison, Verifier};

/// How often one `attempt_id` may be replayed through `RecordAttempt` and still get its
/// first answer; later replays are denied. Two covers the client's retries; without a
/// bound, a gateway that let end users choose attempt ids would hand them a reusable
/// ALLOW. (`Verify` never answers a replay with a new comparison.)
pub const MAX_REPLAYS: u64 = 2;

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
    /// Who is asking: for the CPU budget, and the throttle per client network.
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
        /// The password is in the breach filter (docs/breach.md).
        password_breached: bool,
        /// What the answer carries besides.
        signals: Signals,
    },
    /// The password matched, from a device the realm does not know (`unknown_device =
    /// "step_up"`): a second factor before any session (docs/devices.md).
    Challenge {
        /// What `ConfirmDevice` exchanges for a device token once the challenge passed.
        challenge_token: String,
        /// The password is in the breach filter: ask for a change after the challenge.
        password_breached: bool,
        /// What the answer carries besides.
        signals: Signals,
    },
    /// The password matched, but it is breached and its grace logins are spent: a
    /// password change before any session (docs/breach.md, "Grace logins").
    ChangeRequired {
        /// What the answer carries besides.
        signals: Signals,
    },
    /// Anything else: a closed door, an unknown identifier, a wrong password, a replay,
    /// a throttled network. The same whatever the cause.
    Reject {
        /// What the answer carries besides.
        signals: Signals,
    },
}

impl LoginVerdict {
    /// What the answer carries besides its verdict.
    pub fn signals(&self) -> Signals {
        match self {
            LoginVerdict::Accept { signals, .. }
            | LoginVerdict::Challenge { signals, .. }
            | LoginVerdict::ChangeRequired { signals }
            | LoginVerdict::Reject { signals } => *signals,
        }
    }
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
    /// Keys the client networks' buckets.
    secret: KeySecret,
    /// Issues and checks device tokens.
    devices: DeviceTokens,
    /// Password fingerprints for spray detection.
    fingerprints: SprayFingerprints,
    /// Fingerprints of refused passwords, per bucket and client.
    repeats: RepeatFingerprints,
    /// This daemon's view of spraying, shared with the Admin service.
    spray_watch: Arc<SprayWatch>,
    /// The breached-password filter accepts are screened against.
    breach: Arc<BreachList>,
    /// This daemon's throttle episodes of client networks.
    network_watch: Arc<NetworkWatch>,
    /// What the realm's status counts (`crate::store::realm_tally`).
    tally: Arc<TallyBuffer>,
}

impl Logins {
    /// Login checks against `store`, comparing under `verifier`'s budget; device tokens,
    /// spray fingerprints and network buckets keyed by `secret`'s sub-keys.
    pub fn new(
        store: Arc<dyn Store>,
        verifier: Arc<Verifier>,
        secret: &KeySecret,
        spray_watch: Arc<SprayWatch>,
        network_watch: Arc<NetworkWatch>,
    ) -> Self {
        Self {
            store,
            verifier,
            secret: secret.clone(),
            devices: DeviceTokens::new(secret),
            fingerprints: SprayFingerprints::new(secret),
            repeats: RepeatFingerprints::new(secret),
            spray_watch,
            network_watch,
            breach: Arc::new(BreachList::disabled()),
            tally: TallyBuffer::new(secret),
        }
    }

    /// Notes what the realm's status counts in `tally` (the daemon's, which writes it
    /// to the store; by default a buffer of this value's own, never written).
    pub fn with_tally(self, tally: Arc<TallyBuffer>) -> Self {
        Self { tally, ..self }
    }

    /// Where this login's notes for the realms' status go.
    pub fn tally(&self) -> &Arc<TallyBuffer> {
        &self.tally
    }

    /// Screens accepted passwords against `breach` (docs/breach.md).
    pub fn with_breach(self, breach: Arc<BreachList>) -> Self {
        Self { breach, ..self }
    }

    /// The breach list in force (shared with `CheckPassword` and the reloads).
    pub fn breach(&self) -> &Arc<BreachList> {
        &self.breach
    }

    /// The verifier (the request's hash is parsed by it before a login is checked).
    pub fn verifier(&self) -> &Arc<Verifier> {
        &self.verifier
    }
}

/// What `RecordAttempt` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The gateway may compare the password now.
    pub allowed: bool,
    /// `step_up` and `network_throttled` (never `spray_suspected`: no password).
    pub signals: Signals,
}

/// Why a `ClearAttempts` clears ([`Logins::clear`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clearing<'a> {
    /// The password was verified by the gateway; with the `client_key` of its
    /// `RecordAttempt`, whose held network token goes back.
    Verified(Option<&'a str>),
    /// A password reset was completed.
    ResetCompleted,
}

/// What [`Logins::confirm_device`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmed {
    /// The device token the confirmed device now holds.
    Device(String),
    /// The challenge token is not valid: not this fleet's for exactly this realm, account
    /// key and stored hash, expired, already used, or issued before the account's devices
    /// were revoked. No device token.
    Invalid,
    /// The account's code step is shut (its `second_factor` record refuses the next
    /// code): no device token until it opens.
    CodeStepShut,
}

impl Logins {
    /// `ConfirmDevice` (docs/devices.md, "Step-up for unknown devices"): the gateway's
    /// challenge after a [`LoginVerdict::Challenge`] passed. [`Confirmed::Invalid`] when
    /// the challenge token is not this fleet's for exactly this realm, account key and
    /// stored hash, or older than [`CHALLENGE_TTL`]. Else one store step
    /// ([`crate::store::devices::DeviceStore::confirm_device`]; OWASP ASVS 5.0 6.5.1: a challenge is used
    /// once): the challenge confirms under the device epoch it was issued under (a
    /// revocation since voids it), while the account's code step is open, and once; the
    /// account's login record (the challenge left it counted, as a failure would) and its
    /// `second_factor` record (the code was verified) are cleared together, and a device
    /// token is issued under that epoch.
    ///
    /// # Errors
    /// The store's error (its refusal first, before the challenge is checked), or no
    /// random nonce: no device token (the gateway denies).
    pub async fn confirm_device(
        &self,
        realm: &Realm,
        key: &AccountKey,
        challenge_token: &str,
        stored_hash: &str,
    ) -> Result<Confirmed, LoginError> {
        // A daemon the store refuses (another key secret's check value) must not judge
        // the challenge with its own secret: it answers UNAVAILABLE as to every call.
        self.store.refusal()?;
        let grant = Grant { realm: &realm.name, account: key, stored_hash };
        let Some(challenge) =
            self.devices.check_challenge(challenge_token, &grant, SystemTime::now())
        else {
            return Ok(Confirmed::Invalid);
        };
        let confirmation = DeviceConfirmation {
            account: key,
            challenge: &challenge.used,
            challenge_epoch: challenge.epoch,
            second_factor: &realm.flows.second_factor,
            mark_ttl_ms: crate::throttle::duration_ms(CHALLENGE_TTL + MAX_CLOCK_SKEW),
            epoch_ttl_ms: realm.device_epoch_ttl_ms(),
        };
        let epoch = match self.store.confirm_device(&confirmation).await? {
            Confirmation::Confirmed { epoch, code_candidate_refused } => {
                // The code was right: one the candidate refused is a user it would have
                // shut out.
                let code = Defence::Flow(Flow::SecondFactor);
                note_right_password(realm, &self.tally, code, code_candidate_refused);
                epoch
            }
            Confirmation::Revoked | Confirmation::Used => return Ok(Confirmed::Invalid),
            Confirmation::CodeStepShut => return Ok(Confirmed::CodeStepShut),
        };
        let token = self.devices.issue(&grant, epoch)?;
        metrics::counter!(DEVICES_CONFIRMED, "realm" => realm.name.clone()).increment(1);
        emit(SecurityEvent::of_account(EventKind::DeviceConfirmed, &realm.name, key.event_tag()));
        self.tally.count(&realm.name, Counter::Confirmed);
        Ok(Confirmed::Device(token))
    }
}

/// Meters a counted attempt, and emits the single lockout event: realm only, never the
/// identifier or its key. A known device's bucket closing is its own event (`key` names
/// a device bucket). `allowed` is the answer given (a replay may be refused although
/// its first call was allowed). A ceiling the attempt reached is the caller's to note
/// ([`note_ceiling`]), once it stands. The candidate's step-up beside the enforced one
/// is noted here when `answered` (`RecordAttempt`: its answer carries the count's
/// step-up); `Verify` notes it once its answer is known to carry it
/// ([`note_candidate_step_up`]: an accept clears the window and carries none).
pub fn note_count(
    realm: &Realm,
    tally: &TallyBuffer,
    key: &AccountKey,
    counted: &Counted,
    (allowed, answered): (bool, bool),
) {
    realm.meters.attempt(allowed);
    if let (Some(shadow), Some(candidate)) = (counted.shadow, &realm.candidate) {
        let step_up = if answered { candidate_step_up(realm, counted) } else { (false, false) };
        for outcome in candidate_report::outcomes(allowed, shadow.allowed, step_up) {
            tally.candidate(&realm.name, &candidate.id, Defence::Login, outcome);
        }
    }
    let record = if key.is_device() { "device" } else { "account" };
    // The realm's status counts the account when the attempt shut its door (the one
    // that used up the window), as Inspect's door_shut_unix_ms does.
    let shut = counted.added()
        && counted.allowed
        && counted.failures == u64::from(realm.policy.max_failures);
    if shut && !key.is_device() {
        tally.distinct(&realm.name, Distinct::Locked, &key.event_tag());
    }
    if !counted.locked_now {
        return;
    }
    let started =
        SecurityEvent::of_account(EventKind::LockoutStarted, &realm.name, key.event_tag());
    emit(started.record(record));
    if key.is_device() {
        tracing::warn!(realm = %realm.name, "device lockout: a known device used up its window");
        metrics::counter!(DEVICE_LOCKOUTS, "realm" => realm.name.clone()).increment(1);
    } else {
        tracing::warn!(realm = %realm.name, "lockout: an account key used up its window");
        metrics::counter!(LOCKOUTS, "realm" => realm.name.clone()).increment(1);
    }
}

/// Whether the enforced policy and the realm's candidate would ask for step-up after
/// `counted` (each from its own window's count and its own `step_up_failures`); both
/// `false` without a candidate's answer.
pub fn candidate_step_up(realm: &Realm, counted: &Counted) -> (bool, bool) {
    let (Some(shadow), Some(candidate)) = (counted.shadow, &realm.candidate) else {
        return (false, false);
    };
    let steps = |n: Option<u32>, failures: u64| n.is_some_and(|n| failures >= u64::from(n));
    (
        steps(realm.step_up_failures, counted.failures),
        steps(candidate.step_up_failures, shadow.failures),
    )
}

/// Notes where the candidate's step-up and the enforced one (`step_up`, as
/// [`candidate_step_up`] gives it) differed, for an answer that carries the count's
/// step-up (`Verify`'s reject, or its challenge).
pub fn note_candidate_step_up(realm: &Realm, tally: &TallyBuffer, step_up: (bool, bool)) {
    let Some(candidate) = &realm.candidate else { return };
    let outcome = match step_up {
        (false, true) => Outcome::StepUpAdded,
        (true, false) => Outcome::StepUpDropped,
        _ => return,
    };
    tally.candidate(&realm.name, &candidate.id, Defence::Login, outcome);
}

/// A right password (or code) was presented (a `Verify` that matched, a `ClearAttempts`
/// after a verified password, a `ClearFlow`); `candidate_refused`: the attempt was one
/// the realm's candidate policy would have refused in `defence`, so it would have shut
/// this real user out (docs/throttle.md, "Trying a policy in shadow").
pub fn note_right_password(
    realm: &Realm,
    tally: &TallyBuffer,
    defence: Defence,
    candidate_refused: bool,
) {
    if let (true, Some(candidate)) = (candidate_refused, &realm.candidate) {
        tally.candidate(&realm.name, &candidate.id, defence, Outcome::UserLockedOut);
    }
}

/// Meters and logs a record (`key`: an account's or a device's) that reached its
/// ceiling, and emits its event: once the attempt that reached it stays counted (on
/// `RecordAttempt`, at once; on `Verify`, once its comparison failed).
pub fn note_ceiling(realm: &Realm, tally: &TallyBuffer, key: &AccountKey) {
    let record = if key.is_device() { "device" } else { "account" };
    tracing::warn!(realm = %realm.name, record, "ceiling: a record reached its consecutive failures and stays shut until cleared");
    metrics::counter!(CEILINGS_REACHED, "realm" => realm.name.clone(), "record" => record)
        .increment(1);
    let event = SecurityEvent::of_account(EventKind::CeilingReached, &realm.name, key.event_tag());
    emit(event.record(record));
    if !key.is_device() {
        tally.distinct(&realm.name, Distinct::Ceiling, &key.event_tag());
    }
}

/// Meters a `Verify` verdict by realm.
fn note_verdict(realm: &str, verdict: &LoginVerdict) {
    let name = match verdict {
        LoginVerdict::Accept { .. } => "accept",
        LoginVerdict::Challenge { .. } => "challenge",
        LoginVerdict::ChangeRequired { .. } => "change_required",
        LoginVerdict::Reject { .. } => "reject",
    };
    metrics::counter!(VERDICTS, "realm" => realm.to_owned(), "verdict" => name).increment(1);
}
