//! Grace logins' store side (docs/breach.md, "Grace logins"; the rule is
//! [`crate::throttle::breached_count`]): how often one breached credential of an
//! account was accepted (`lua/breached_count.lua`, `embedded/breached_count.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::AccountKey;

/// One accept of a breached password to count ([`BreachedCountStore::note_breached`]; docs/breach.md,
/// "Grace logins").
#[derive(Debug, Clone, Copy)]
pub struct BreachedNoteRequest<'a> {
    /// The account key (its record's hash tag).
    pub account: &'a AccountKey,
    /// The accepted credential ([`super::keys::AccountKey::credential`] of the stored hash).
    pub credential: u64,
    /// How long the count is kept after this accept, in ms.
    pub ttl_ms: u64,
}

/// How long a breached-accept count is kept after its last accept
/// ([`BreachedNoteRequest::ttl_ms`]): a year, so a user who logs in rarely still meets the
/// change requirement.
pub const BREACHED_COUNT_TTL_MS: u64 = 366 * 24 * 3600 * 1000;

/// Breached-accept counts on a store.
#[async_trait]
pub trait BreachedCountStore: Send + Sync {
    /// An accept of a breached password: counts it on the account, for `credential`
    /// only (another credential starts the count at 1), atomically, keeping it
    /// `ttl_ms`; answers the count including this accept
    /// ([`crate::throttle::breached_count`]).
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError>;
}
