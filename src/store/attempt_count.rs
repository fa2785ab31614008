//! The attempt count's store side (docs/throttle.md, "The rules"; the rules are
//! [`crate::throttle::attempt_count`]): one record per account key (an account's, a
//! known device's bucket or a flow's), counted, refunded, cleared and read in one
//! atomic step each (`lua/attempt_count/` on Redis, `embedded/attempt_count.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::{AccountKey, AttemptKey, NetworkKey, RepeatKey};
use crate::throttle::{Policy, Record};

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
    /// The client network as its window's set keeps it ([`network_tag`]),
    /// noted in the counted record's network set for its window when the attempt is
    /// counted (docs/throttle.md, "Why a door is shut"). `None` (no `client_key`, a
    /// trusted network): nothing is noted, and the count reads no set.
    pub network: Option<u64>,
    /// The realm's candidate policy (docs/throttle.md, "Trying a policy in shadow"): an
    /// attempt counted on the account's own record is counted on its candidate record
    /// too, in the same step, under these rules ([`Counted::shadow`]). `None`: none.
    pub candidate: Option<&'a Policy>,
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
            network: None,
            candidate: None,
        }
    }

    /// This attempt with the realm's candidate policy ([`Attempt::candidate`]).
    pub fn with_candidate(self, candidate: Option<&'a Policy>) -> Self {
        Self { candidate, ..self }
    }

    /// This attempt with its client network's tag ([`Attempt::network`]).
    pub fn from_network(self, network: Option<&NetworkKey>) -> Self {
        Self { network: network.map(network_tag), ..self }
    }
}

/// A network as a window's network set keeps it: the number the first 15 of its tag's
/// 16 hex digits spell ([`NetworkKey::tag`]; 60 bits, so Redis keeps the set as an
/// intset of 8-byte integers, a quarter of the memory of the same tags as text; two
/// networks of one window share it with odds of about 2^-50).
pub fn network_tag(network: &NetworkKey) -> u64 {
    u64::from_str_radix(&network.tag()[..15], 16).unwrap_or(0)
}

/// A device's claim on one attempt ([`Attempt::device`]).
#[derive(Debug, Clone, Copy)]
pub struct DeviceClaim<'a> {
    /// The device's bucket ([`AccountKey::device`]).
    pub bucket: &'a AccountKey,
    /// The device epoch its token was issued under.
    pub epoch: u64,
}

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
    /// ([`AttemptCountStore::refund`]'s `allowed`).
    pub consecutive_added: bool,
    /// What the candidate policy answered ([`Attempt::candidate`]), when the attempt was
    /// counted under one (on the account's own record or a known device's bucket);
    /// `None` otherwise (no candidate, a replay, a forgiven repeat).
    pub shadow: Option<Shadow>,
}

/// What a candidate policy answered for one counted attempt (docs/throttle.md, "Trying a
/// policy in shadow").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadow {
    /// The candidate would have allowed the attempt.
    pub allowed: bool,
    /// Attempts in the candidate's window after this one: its step-up signal.
    pub failures: u64,
    /// When the candidate's window the attempt was counted in started (ms, the store's
    /// clock): what a refund of the attempt names on the candidate record.
    pub window_start_ms: u64,
    /// The attempt added a consecutive failure to the candidate record (allowed there,
    /// and no stale repeat): a refund gives it back only then.
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

/// What the operator's `Inspect` reads: an account key's record and the store's clock,
/// at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspection {
    /// The record, or `None` when the account key has none (never counted, cleared or
    /// expired).
    pub record: Option<Record>,
    /// The store's clock when the record was read, in ms since the Unix epoch.
    pub now_ms: u64,
    /// Client networks noted in the record's current window (0 once it is over), at
    /// most [`crate::throttle::attempt_count::MAX_NETWORKS`] ("that many or more").
    pub networks: u64,
    /// The account's device lanes, for its login record (zero for any other).
    pub devices: DeviceLanes,
    /// The account's record under the realm's candidate policy (docs/throttle.md,
    /// "Trying a policy in shadow"), for its login record; `None` without one.
    pub candidate: Option<Record>,
}

/// The account's known-device lanes as `Inspect` reads them (docs/devices.md, "Lanes
/// in Inspect"): the buckets its index lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceLanes {
    /// Listed buckets that hold a record.
    pub lanes: u64,
    /// Their failures in their current windows, summed.
    pub failures: u64,
}

/// The attempt count on a store: every operation one atomic step on the store's clock.
#[async_trait]
pub trait AttemptCountStore: Send + Sync {
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

    /// Gives back one attempt counted in the window that started at `window_start_ms`
    /// (the CPU budget refused it, so it was not a guess), and forgets its `attempt_id`
    /// so a retry counts afresh. `allowed`: the attempt added a consecutive failure
    /// ([`Counted::consecutive_added`]: allowed, and no stale repeat; docs/throttle.md,
    /// "The ceiling"), which goes back too; one that added none must give none back, or
    /// a refund would reopen a door at its ceiling. `candidate`: what the count did on
    /// the key's candidate record ([`Counted::shadow`]), given back there by the same
    /// rule in the same store step (docs/throttle.md, "Trying a policy in shadow").
    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        (window_start_ms, allowed): (u64, bool),
        candidate: Option<&Shadow>,
    ) -> Result<(), StoreError>;

    /// `ClearAttempts`: deletes the record (a login record, a device bucket, or a flow's
    /// record: `ClearFlow` and the operator's `Unlock`).
    ///
    /// The account's candidate record goes too (docs/throttle.md, "Trying a policy in
    /// shadow"). Answers whether the last attempt counted on it was one the enforced
    /// policy allowed and the candidate would have refused: after a verified password,
    /// a real user the candidate would have locked out.
    async fn clear(&self, key: &AccountKey) -> Result<bool, StoreError>;

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

    /// `portcullis.v1.Admin/Inspect`: reads the record, its window's network set and,
    /// for the account's login record, its device lanes (whose windows `policy` sets),
    /// with the store's clock, at one instant. Never writes.
    async fn inspect(&self, key: &AccountKey, policy: &Policy) -> Result<Inspection, StoreError>;
}
