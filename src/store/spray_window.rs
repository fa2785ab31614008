//! Spray detection's store side (docs/spray.md; the periods are
//! [`crate::throttle::spray_window`]): per password fingerprint, the distinct account
//! keys that failed with it this period and the one before (`lua/spray_window.lua`,
//! `embedded/spray_window.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::{AccountKey, SprayKey};

/// What a spray call does: read the count, or note an account in one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SprayNote {
    /// Read only: the fingerprint's count now (sent with the attempt's count).
    Check,
    /// The comparison failed: the account joins the fingerprint's failed set.
    Failure,
}

/// One spray call ([`SprayWindowStore::note_spray`]; docs/spray.md).
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

/// Spray counts on a store.
#[async_trait]
pub trait SprayWindowStore: Send + Sync {
    /// Spray detection (docs/spray.md): for [`SprayNote::Failure`], notes `account` (its
    /// account key; a device bucket is noted as its account) in `spray`'s failed set of
    /// the current period (`period_ms` long, on the store's clock); [`SprayNote::Check`]
    /// writes nothing. Answers how many distinct account keys failed with the
    /// fingerprint in this period and the one before (after the note, for `Failure`):
    /// an estimate on Redis (HyperLogLog, standard error 0.81%), exact on the embedded
    /// store; a store may stop counting at `limit` (the realm's threshold: past it the
    /// number changes nothing).
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError>;
}
