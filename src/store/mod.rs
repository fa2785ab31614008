//! Where the attempt records live. One trait, one implementation per backend; each
//! operation is one atomic step in its store (a Lua script on Redis), on the store's
//! clock.

pub mod embedded;
pub mod instrumented;
pub mod keys;
pub mod redis;

use async_trait::async_trait;

use crate::spray::{SprayKey, SprayNote};
use crate::throttle::{Policy, Record};
use keys::{AccountKey, AttemptId};

/// A store operation that did not complete. Never turned into an answer: the service
/// maps every variant to `UNAVAILABLE` (fail closed).
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store operation timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("no store connection available")]
    Pool(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("store command failed")]
    Command(#[source] ::redis::RedisError),
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
}

/// What a counted attempt answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The attempt may proceed.
    pub allowed: bool,
    /// This attempt closed the door (first refusal of its window): emit the lockout event.
    pub locked_now: bool,
    /// Store-clock start of the window the attempt was counted in, in ms; a refund
    /// names it so it never reaches into a later window.
    pub window_start_ms: u64,
    /// How often this `attempt_id` was seen before (0: a first call, counted). A replay
    /// gets the first call's answer and counts nothing.
    pub replays: u64,
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

    /// `RecordAttempt`: counts one attempt (once per `attempt_id`) and answers it.
    async fn record_attempt(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptId>,
        policy: &Policy,
    ) -> Result<Counted, StoreError>;

    /// Gives back one attempt counted in the window that started at `window_start_ms`
    /// (the CPU budget refused it, so it was not a guess), and forgets its `attempt_id`
    /// so a retry counts afresh.
    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptId>,
        window_start_ms: u64,
    ) -> Result<(), StoreError>;

    /// Spray detection (docs/spray.md): for [`SprayNote::Failure`], notes `account` (its
    /// account key; a device bucket is noted as its account) in `spray`'s failed set of
    /// the current period (`period_ms` long, on the store's clock); [`SprayNote::Check`]
    /// writes nothing. Answers how many distinct account keys failed with the
    /// fingerprint in this period and the one before (after the note, for `Failure`):
    /// an estimate on Redis (HyperLogLog, standard error 0.81%), exact on the embedded
    /// store; a store may stop counting at `limit` (the realm's threshold: past it the
    /// number changes nothing).
    async fn note_spray(
        &self,
        spray: &SprayKey,
        account: &AccountKey,
        note: SprayNote,
        period_ms: u64,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// `ClearAttempts`: deletes the record.
    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError>;

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
}
