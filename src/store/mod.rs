//! Where the attempt records live. One trait per rule, named for it (its request and answer
//! shapes beside it: [`attempt_count`], [`devices`], [`network_bucket`], [`repeat_list`],
//! [`spray_window`], [`send_log`], [`breached_count`], [`realm_tally`],
//! [`candidate_report`], and the [`key_check`]'s shapes), and [`Store`], which a backend is
//! when it keeps every rule; one implementation per backend, each rule's in the backend's
//! file of that name (docs/architecture.md, "One name per rule"). Each operation is one
//! atomic step in its store (a Lua script on Redis), on the store's clock.

pub mod attempt_count;
pub mod breached_count;
pub mod candidate_report;
pub mod config;
pub mod devices;
pub mod embedded;
pub mod error;
pub mod instrumented;
pub mod key_check;
pub mod keys;
pub mod network_bucket;
pub mod realm_tally;
pub mod redis;
pub mod repeat_list;
pub mod send_log;
pub mod spray_window;

use async_trait::async_trait;

use attempt_count::AttemptCountStore;
use breached_count::BreachedCountStore;
use candidate_report::CandidateReportStore;
use devices::DeviceStore;
use error::StoreError;
use network_bucket::NetworkBucketStore;
use realm_tally::RealmTallyStore;
use repeat_list::RepeatListStore;
use send_log::SendLogStore;
use spray_window::SprayWindowStore;

/// How long an attempt id's answer is kept by default (`store.attempt_id_horizon`): a
/// retry of the same call comes within the client's `call_timeout` (2 s by default,
/// retries included) and never after the daemon's `server.request_timeout` (at most
/// 5 min); after the horizon the same id is a new attempt (docs/throttle.md,
/// "Idempotent retries").
pub const DEFAULT_ATTEMPT_ID_HORIZON: std::time::Duration = std::time::Duration::from_secs(300);

/// A store: every rule's operations (docs/architecture.md's RPC table, one atomic store
/// step each), and its health.
#[async_trait]
pub trait Store:
    AttemptCountStore
    + DeviceStore
    + NetworkBucketStore
    + RepeatListStore
    + SprayWindowStore
    + SendLogStore
    + BreachedCountStore
    + RealmTallyStore
    + CandidateReportStore
    + Send
    + Sync
    + 'static
{
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
