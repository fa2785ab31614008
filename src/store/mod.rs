//! Where the attempt records live. One trait, one implementation per backend; each
//! operation is one atomic step in its store (a Lua script on Redis), on the store's
//! clock.

pub mod config;
pub mod embedded;
pub mod instrumented;
pub mod keys;
pub mod redis;

use async_trait::async_trait;

use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::send_log::SendPolicy;
use crate::throttle::{Policy, Record};
use keys::{AccountKey, AttemptKey, HeldKey, NetworkKey, RepeatKey, SprayKey};

/// What a spray call does: read the count, or note an account in one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SprayNote {
    /// Read only: the fingerprint's count now (sent with the attempt's count).
    Check,
    /// The comparison failed: the account joins the fingerprint's failed set.
    Failure,
}

/// One operation on a client network's token bucket ([`Store::network`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkOp {
    /// Takes one token, if there is one (before a comparison that may fail).
    Take,
    /// Gives one token back (the attempt it was taken for compared nothing or matched).
    GiveBack,
    /// Reads the bucket; writes nothing (`Admin/InspectNetwork`).
    Peek,
    /// Fills the bucket (`Admin/ReleaseNetwork`).
    Release,
}

impl NetworkOp {
    /// The name the store's script takes, and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkOp::Take => "take",
            NetworkOp::GiveBack => "give",
            NetworkOp::Peek => "peek",
            NetworkOp::Release => "release",
        }
    }
}

/// A network bucket after one [`NetworkOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkState {
    /// [`NetworkOp::Take`] took a token; `false` for every other operation.
    pub taken: bool,
    /// Tokens left after the operation (0 ..= capacity).
    pub tokens: u32,
    /// Milliseconds until the bucket is full again (0: full).
    pub full_in_ms: u64,
}

/// A store operation that did not complete. Never turned into an answer: the service
/// maps every variant to `UNAVAILABLE` (fail closed). It names no backend's crate: each
/// backend converts its own errors (the Redis store's into [`StoreError::Command`],
/// keeping the Redis error as its source).
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store operation timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("no store connection available")]
    Pool(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("store command failed")]
    Command(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("store answered something this version does not understand: {0}")]
    Protocol(String),
    #[error("embedded store failed: {0}")]
    Embedded(String),
    #[error("embedded store is shut down")]
    Closed,
    #[error("store refused as unsafe: {0}")]
    Unsafe(String),
    #[error("{confirmed} of {wanted} replicas confirmed the write within store.wait_timeout")]
    Replication { wanted: u32, confirmed: u32 },
    #[error("{}", KEY_SECRET_MISMATCH)]
    KeySecretMismatch,
    #[error("{}", KEY_CHECK_PENDING)]
    KeyCheckPending,
    /// A replayed `attempt_id` came with another request than its first call
    /// ([`keys::AttemptKey::bound`]): the caller's error, `INVALID_ARGUMENT` naming
    /// `attempt_id`, never the first call's answer.
    #[error("attempt_id was already used for another request")]
    AttemptIdReused,
}

/// What [`StoreError::KeyCheckPending`] says: why a daemon that just started does not
/// serve yet.
pub const KEY_CHECK_PENDING: &str = "the store holds no key check value: waiting \
     store.key_check_claim_wait for the daemons already serving it to write theirs back \
     before this daemon writes its own (docs/store.md, \"One key secret per store\")";

/// What [`StoreError::KeySecretMismatch`] says, to the operator who must act on it.
pub const KEY_SECRET_MISMATCH: &str = "this daemon's key secret is not the one this store is \
     keyed with (its key check value differs), so it would count every account afresh: \
     refusing to serve. Give this daemon the same store.key_secret_file (or \
     PORTCULLIS_KEY_SECRET) as the other daemons of this store; to rotate the key secret \
     on purpose, run `portcullis adopt-key-secret` with the new one (docs/store.md, \
     \"One key secret per store\")";

/// What a key check does ([`crate::secret::KeyCheck`]; docs/store.md, "One key secret
/// per store").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCheckMode {
    /// Writes the check value when the store has none; else compares.
    Prove,
    /// Overwrites the check value: the operator's rotation step. Every daemon keyed
    /// otherwise stops serving at its next check.
    Adopt,
}

impl KeyCheckMode {
    /// The name the store's script takes.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyCheckMode::Prove => "prove",
            KeyCheckMode::Adopt => "adopt",
        }
    }
}

/// One spray call ([`Store::note_spray`]; docs/spray.md).
#[derive(Debug, Clone, Copy)]
pub struct SprayNoteRequest<'a> {
    /// The password fingerprint's keys in the realm.
    pub spray: &'a SprayKey,
    /// The account key noted (a device bucket is noted as its account).
    pub account: &'a AccountKey,
    /// Read the count, or note a failure.
    pub note: SprayNote,
    /// The realm's `spray_period`, in ms (at least 1 000).
    pub period_ms: u64,
    /// The realm's `spray_threshold`: past it the count changes nothing, so a store may
    /// stop counting there.
    pub limit: u32,
}

/// One operation on a client network's token bucket ([`Store::network`]).
#[derive(Debug, Clone, Copy)]
pub struct NetworkRequest<'a> {
    /// The bucket's key (realm and client network).
    pub key: &'a NetworkKey,
    /// What to do with it.
    pub op: NetworkOp,
    /// The realm's bucket: capacity and refill.
    pub policy: &'a BucketPolicy,
    /// `RecordAttempt`'s tokens: a [`NetworkOp::Take`] that takes one adds it to this
    /// count, and a [`NetworkOp::GiveBack`] gives one back only when the count holds one
    /// (and takes it off), so `ClearAttempts` gives back only what an attempt took.
    /// `None`: the caller knows it holds the token (`Verify`, the flows, operators).
    pub held: Option<&'a HeldKey>,
}

/// A failed comparison's password onto its client's list ([`Store::note_repeat`]).
#[derive(Debug, Clone, Copy)]
pub struct RepeatNoteRequest<'a> {
    /// The record the attempt was counted in (the account's, or a device's bucket).
    pub bucket: &'a AccountKey,
    /// The client's list on that bucket.
    pub list: &'a RepeatKey,
    /// The password's keyed, truncated fingerprint (`crate::defence::repeats`).
    pub fingerprint: u64,
    /// Fingerprints kept (the realm's `repeat_list_length`, 1–16).
    pub max_len: u32,
}

/// What a [`Store::send`] call does with a mail flow's send log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// A request to send: allowed or not, by the log's interval and daily cap; an
    /// allowed one is noted.
    Send,
    /// Reads the log; writes nothing (`Admin/Inspect`).
    Peek,
}

impl SendOp {
    /// The name the store's script takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SendOp::Send => "send",
            SendOp::Peek => "peek",
        }
    }
}

/// One call on a mail flow's send log ([`Store::send`]; docs/flows.md).
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// The flow's record of the account ([`keys::AccountKey::flow`]).
    pub log: &'a AccountKey,
    /// Where the gateway's idempotency id keeps its answer (a retried request is
    /// noted once and gets the first answer).
    pub attempt_id: Option<&'a AttemptKey>,
    /// The flow's interval and daily cap.
    pub policy: &'a SendPolicy,
    /// Send, or read.
    pub op: SendOp,
}

/// A send log after one [`SendRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// [`SendOp::Send`]: the mail may be sent (noted in the log); [`SendOp::Peek`]: one
    /// would be now.
    pub allowed: bool,
    /// Sends in the last 24 h after the call (0 ..= [`crate::throttle::send_log::MAX_DAILY_CAP`];
    /// above the daily cap when the cap was lowered under a full log).
    pub sends: u32,
    /// Milliseconds until a send would be allowed (0: now).
    pub next_in_ms: u64,
    /// How often this `attempt_id` was seen before (0: a first call). A replay gets the
    /// first call's `allowed` and notes nothing.
    pub replays: u64,
}

/// One accept of a breached password to count ([`Store::note_breached`]; docs/breach.md,
/// "Grace logins").
#[derive(Debug, Clone, Copy)]
pub struct BreachedNoteRequest<'a> {
    /// The account key (its record's hash tag).
    pub account: &'a AccountKey,
    /// The accepted credential ([`keys::AccountKey::credential`] of the stored hash).
    pub credential: u64,
    /// How long the count is kept after this accept, in ms.
    pub ttl_ms: u64,
}

/// How long a breached-accept count is kept after its last accept
/// ([`BreachedNoteRequest::ttl_ms`]): a year, so a user who logs in rarely still meets the
/// change requirement.
pub const BREACHED_COUNT_TTL_MS: u64 = 366 * 24 * 3600 * 1000;

/// What [`Store::send_mail`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailSent {
    /// The send log's answer (`allowed: false` when the network's budget refused).
    pub sent: Sent,
    /// The network's budget was empty: the log was not asked.
    pub network_refused: bool,
    /// The caller still owes the network its token back (a refused or replayed send
    /// behind a taken token): a store that cannot do it in the same step leaves it to
    /// the caller, who gives it back after the answer.
    pub give_back_due: bool,
}

/// One attempt to count (docs/throttle.md, "The rules").
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The account key.
    pub key: &'a AccountKey,
    /// A device token's claim (it checked out for this account and credential): the
    /// attempt is counted in the device's bucket when the claim's device epoch is the
    /// account's current one (docs/devices.md, "Revocation"), else on `key`.
    pub device: Option<DeviceClaim<'a>>,
    /// Where the gateway's idempotency id keeps its answer.
    pub attempt_id: Option<&'a AttemptKey>,
    /// The realm's throttle.
    pub policy: &'a Policy,
    /// How long a revocation must be remembered after this attempt: the realm's
    /// `device_token_ttl` plus the clock skew a token check allows, in ms (a token this
    /// attempt's accept issues lives that long).
    pub device_epoch_ttl_ms: u64,
    /// The password's fingerprint in its client's refused-password list: an attempt
    /// whose fingerprint is on the list for the bucket's current window is not counted
    /// (docs/throttle.md, "Repeated passwords"). `None`: every attempt counts.
    pub repeat: Option<RepeatClaim<'a>>,
    /// Answer the account's device epoch ([`Counted::epoch`]) even without a device
    /// claim: a `step_up` realm's `Verify`, whose challenge carries the epoch it was
    /// issued under so a revocation voids it (docs/devices.md). Read in the same step,
    /// for right and wrong passwords alike.
    pub read_epoch: bool,
}

/// One attempt's claim to be a repeat ([`Attempt::repeat`]).
#[derive(Debug, Clone, Copy)]
pub struct RepeatClaim<'a> {
    /// The client's list on the bucket the attempt is counted in (the device's, or the
    /// account's).
    pub list: &'a RepeatKey,
    /// The password's keyed, truncated fingerprint (`crate::defence::repeats`).
    pub fingerprint: u64,
}

impl<'a> Attempt<'a> {
    /// An untrusted attempt on `key` (no device token), as `RecordAttempt` counts it.
    pub fn new(
        key: &'a AccountKey,
        attempt_id: Option<&'a AttemptKey>,
        policy: &'a Policy,
    ) -> Self {
        Self {
            key,
            device: None,
            attempt_id,
            policy,
            device_epoch_ttl_ms: DEFAULT_EPOCH_TTL_MS,
            repeat: None,
            read_epoch: false,
        }
    }
}

/// A device's claim on one attempt ([`Attempt::device`]).
#[derive(Debug, Clone, Copy)]
pub struct DeviceClaim<'a> {
    /// The device's bucket ([`AccountKey::device`]).
    pub bucket: &'a AccountKey,
    /// The device epoch its token was issued under.
    pub epoch: u64,
}

/// How long a daemon that finds no key check value at start waits for the fleet to
/// write it back, by default (`store.key_check_claim_wait`): three readiness checks.
pub const DEFAULT_KEY_CHECK_CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long an attempt id's answer is kept by default (`store.attempt_id_horizon`): a
/// retry of the same call comes within the client's `call_timeout` (2 s by default,
/// retries included) and never after the daemon's `server.request_timeout` (at most
/// 5 min); after the horizon the same id is a new attempt (docs/throttle.md,
/// "Idempotent retries").
pub const DEFAULT_ATTEMPT_ID_HORIZON: std::time::Duration = std::time::Duration::from_secs(300);

/// [`Attempt::device_epoch_ttl_ms`] where no realm says otherwise: the default
/// `device_token_ttl` (90 days) plus five minutes of clock skew.
pub const DEFAULT_EPOCH_TTL_MS: u64 = (90 * 24 * 3600 + 300) * 1000;

/// What a counted attempt answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The attempt may proceed.
    pub allowed: bool,
    /// This attempt closed the door (first refusal of its window): emit the lockout event.
    pub locked_now: bool,
    /// Attempts the window holds after this one (0 for a replay, which counts nothing):
    /// what the step-up signal is read from.
    pub failures: u64,
    /// Store-clock start of the window the attempt was counted in, in ms; a refund
    /// names it so it never reaches into a later window.
    pub window_start_ms: u64,
    /// How often this `attempt_id` was seen before (0: a first call, counted). A replay
    /// gets the first call's answer and counts nothing.
    pub replays: u64,
    /// The attempt was counted in its device's bucket (its claim's epoch is current);
    /// `false` for every other attempt, a revoked device's included.
    pub trusted: bool,
    /// The attempt repeated a password its client was refused with in this window: it
    /// was not counted (`failures` is the window's count without it), and `allowed`
    /// says whether the door is open.
    pub repeat: bool,
    /// Only with `repeat`: the list entry it matched was already forgiven once without a
    /// comparison ([`crate::throttle::repeat_list::RepeatMatch::Recheck`]), so this attempt,
    /// still not counted, is compared (a truncated fingerprint may be the right
    /// password's). `false`: a repeat is answered without a comparison.
    pub recheck: bool,
    /// This attempt brought its record to the ceiling (docs/throttle.md, "The ceiling"):
    /// the last one allowed until the record is cleared. Emit the ceiling event.
    pub reached_ceiling: bool,
    /// The account's device epoch as the count read it (0 when it has none), when the
    /// attempt had a device claim or asked for it ([`Attempt::read_epoch`]); else 0.
    pub epoch: u64,
    /// This call added a consecutive failure (an allowed attempt that is no repeat of a
    /// password its client was refused with): a refund gives one back only then
    /// ([`Store::refund`]'s `allowed`).
    pub consecutive_added: bool,
}

impl Counted {
    /// Whether this call added to a count: not a replay of an `attempt_id` (its first
    /// call counted), not a forgiven repeat. Only such a call may be refunded: a refund
    /// of any other would give back a failure some earlier call paid for.
    pub fn added(&self) -> bool {
        self.replays == 0 && !self.repeat
    }

    /// The failures the window holds once this call's own count, if it added one, is
    /// given back: what a refused call's step-up signal is read from.
    pub fn failures_without_this(&self) -> u64 {
        if self.added() { self.failures.saturating_sub(1) } else { self.failures }
    }
}

/// One `ConfirmDevice` to settle ([`Store::confirm_device`]; docs/devices.md, "Step-up
/// for unknown devices").
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfirmation<'a> {
    /// The account: its login record (cleared), its `second_factor` record (read, then
    /// cleared) and its device epoch (read).
    pub account: &'a AccountKey,
    /// The challenge's one-use mark ([`AccountKey::challenge`]).
    pub challenge: &'a AccountKey,
    /// The device epoch the challenge was issued under.
    pub challenge_epoch: u64,
    /// The realm's `second_factor` throttle: while its door is shut, no device is
    /// confirmed.
    pub second_factor: &'a Policy,
    /// How long the one-use mark is kept, in ms: the challenge's lifetime plus clock
    /// skew.
    pub mark_ttl_ms: u64,
    /// How long an existing device epoch is kept from now, in ms (the new token's
    /// `device_token_ttl` plus clock skew).
    pub epoch_ttl_ms: u64,
}

/// What [`Store::confirm_device`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// Confirmed: the challenge is used up, the account's login and `second_factor`
    /// records are cleared; the device token is issued under this epoch.
    Confirmed {
        /// The account's device epoch.
        epoch: u64,
    },
    /// The account's devices were revoked after the challenge was issued.
    Revoked,
    /// The account's code step is shut (its `second_factor` door refuses the next code).
    CodeStepShut,
    /// The challenge confirmed a device already.
    Used,
}

/// What the operator's `Inspect` reads: an account key's record and the store's clock,
/// at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    /// The record, or `None` when the account key has none (never counted, cleared or
    /// expired).
    pub record: Option<Record>,
    /// The store's clock when the record was read, in ms since the Unix epoch.
    pub now_ms: u64,
}

/// The operations of docs/architecture.md's RPC table, one atomic store step each.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `Admit`: whether the next attempt would be allowed. Never writes.
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError>;

    /// Counts one attempt (once per `attempt_id`), in its device's bucket when its
    /// device claim holds, and answers it.
    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError>;

    /// `RecordAttempt`: counts one untrusted attempt ([`Attempt::new`]).
    async fn record_attempt(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        policy: &Policy,
    ) -> Result<Counted, StoreError> {
        self.count(&Attempt::new(key, attempt_id, policy)).await
    }

    /// `Admin/RevokeDevices`: raises the account's device epoch, so no device token
    /// issued before is trusted again (docs/devices.md, "Revocation"); the epoch is
    /// remembered for at least `ttl_ms` (the realm's `device_token_ttl` plus clock skew).
    /// Answers the new epoch.
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError>;

    /// Gives back one attempt counted in the window that started at `window_start_ms`
    /// (the CPU budget refused it, so it was not a guess), and forgets its `attempt_id`
    /// so a retry counts afresh. `allowed`: the attempt added a consecutive failure
    /// ([`Counted::consecutive_added`]: allowed, and no stale repeat; docs/throttle.md,
    /// "The ceiling"), which goes back too; one that added none must give none back, or
    /// a refund would reopen a door at its ceiling.
    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        window_start_ms: u64,
        allowed: bool,
    ) -> Result<(), StoreError>;

    /// Spray detection (docs/spray.md): for [`SprayNote::Failure`], notes `account` (its
    /// account key; a device bucket is noted as its account) in `spray`'s failed set of
    /// the current period (`period_ms` long, on the store's clock); [`SprayNote::Check`]
    /// writes nothing. Answers how many distinct account keys failed with the
    /// fingerprint in this period and the one before (after the note, for `Failure`):
    /// an estimate on Redis (HyperLogLog, standard error 0.81%), exact on the embedded
    /// store; a store may stop counting at `limit` (the realm's threshold: past it the
    /// number changes nothing).
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError>;

    /// The throttle per client network (docs/throttle.md, "Per client network"): one
    /// [`NetworkOp`] on `key`'s token bucket, shaped by `policy`, atomically on the
    /// store's clock ([`crate::throttle::network_bucket`]'s rules).
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError>;

    /// A comparison failed: puts `fingerprint` first on `list`, the client's list on
    /// `bucket` (the record the attempt was counted in), keeping at most `max_len`
    /// fingerprints, bound to the bucket's current window and expiring with its record
    /// (a bucket without a record notes nothing). Writes nothing else.
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError>;

    /// A mail flow's send log (docs/flows.md; [`crate::throttle::send_log`]'s rules):
    /// for [`SendOp::Send`], whether a mail may go to the account now, noting it when it
    /// may, once per `attempt_id`, atomically on the store's clock; [`SendOp::Peek`]
    /// writes nothing.
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError>;

    /// An accept of a breached password: counts it on the account, for `credential`
    /// only (another credential starts the count at 1), atomically, keeping it
    /// `ttl_ms`; answers the count including this accept
    /// ([`crate::throttle::breached_count`]).
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError>;

    /// A mail flow's request (docs/flows.md): takes `network`'s token first (none: a
    /// trusted network), and only if it was taken asks the send log ([`Store::send`]);
    /// a refused or replayed send owes the token back. Default: the two operations in
    /// turn, the give-back left to the caller ([`MailSent::give_back_due`]); the
    /// embedded store does all three in one transaction (one commit, not two).
    async fn send_mail(
        &self,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        if let Some(take) = network
            && !self.network(take).await?.taken
        {
            let sent = Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0 };
            return Ok(MailSent { sent, network_refused: true, give_back_due: false });
        }
        let sent = self.send(request).await?;
        let give_back_due = network.is_some() && (!sent.allowed || sent.replays > 0);
        Ok(MailSent { sent, network_refused: false, give_back_due })
    }

    /// `ClearAttempts`: deletes the record (a login record, a device bucket, or a flow's
    /// record: `ClearFlow` and the operator's `Unlock`).
    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError>;

    /// `Verify`'s match: deletes `bucket`'s record (the account's, or the known device's)
    /// and answers `account`'s device epoch (0 until an operator first revokes its
    /// devices), which the accept's fresh device token carries; an existing epoch is
    /// kept `epoch_ttl_ms` more, so it outlives that token.
    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError>;

    /// `ConfirmDevice`, in one atomic step: the challenge confirms only under the epoch
    /// it was issued under, while the account's code step is open, and once; then the
    /// account's login record and `second_factor` record are deleted together. A
    /// refusal writes nothing.
    async fn confirm_device(
        &self,
        confirmation: &DeviceConfirmation<'_>,
    ) -> Result<Confirmation, StoreError>;

    /// `portcullis.v1.Admin/Inspect`: reads the record and the store's clock. Never writes.
    async fn inspect(&self, key: &AccountKey) -> Result<Inspection, StoreError>;

    /// Health: the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Readiness (`/readyz`, `grpc.health.v1`): the store answers. Default:
    /// [`Store::ping`] (on Redis: `INFO memory` answers and the eviction rule holds; the
    /// scripts are not checked, an operation loads its script on `NOSCRIPT`); a backend
    /// with more to check overrides it.
    async fn ready(&self) -> Result<(), StoreError> {
        self.ping().await
    }

    /// The refusal every operation meets now, without a round trip: on Redis, while the
    /// key check found another key secret's value ([`StoreError::KeySecretMismatch`]) or
    /// waits for the fleet's ([`StoreError::KeyCheckPending`]). For work that checks
    /// something with the key secret before it reaches the store (`ConfirmDevice`'s
    /// challenge), so a refused daemon answers as it does to every call. Default: none.
    ///
    /// # Errors
    /// The refusal.
    fn refusal(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
