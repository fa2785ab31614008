//! Repeated passwords' store side (docs/throttle.md, "Repeated passwords"; the rules
//! are [`crate::throttle::repeat_list`]): a client's list of refused-password
//! fingerprints on the bucket it was counted in. The check is part of the count
//! ([`super::attempt_count::RepeatClaim`]); the note after a failed comparison is
//! here (`lua/repeat_list.lua`, `embedded/repeat_list.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::{AccountKey, RepeatKey};

/// A failed comparison's password onto its client's list ([`RepeatListStore::note_repeat`]).
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

/// Refused-password lists on a store.
#[async_trait]
pub trait RepeatListStore: Send + Sync {
    /// A comparison failed: puts `fingerprint` first on `list`, the client's list on
    /// `bucket` (the record the attempt was counted in), keeping at most `max_len`
    /// fingerprints, bound to the bucket's current window and expiring with its record
    /// (a bucket without a record notes nothing). Writes nothing else.
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError>;
}
