//! What a store operation that did not complete is: the one error every rule's store
//! operations answer with.

use super::key_check::{KEY_CHECK_PENDING, KEY_SECRET_MISMATCH};

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
    /// ([`super::keys::AttemptKey::bound`]): the caller's error, `INVALID_ARGUMENT` naming
    /// `attempt_id`, never the first call's answer.
    #[error("attempt_id was already used for another request")]
    AttemptIdReused,
}
