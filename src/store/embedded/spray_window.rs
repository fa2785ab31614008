//! Spray counts in the embedded store (`lua/spray_window.lua` on Redis), exact: the
//! periods are [`crate::throttle::spray_window`]'s.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::{Entry, SprayCounts};
use super::tables::Tables;
use crate::store::error::StoreError;
use crate::store::spray_window::{SprayNote, SprayNoteRequest, SprayWindowStore};
use crate::throttle::spray_window;

#[async_trait]
impl SprayWindowStore for EmbeddedStore {
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        let SprayNoteRequest { spray, account, note, period_ms, limit } = *request;
        let (count, member) = (spray.count(), spray.member(account));
        self.submit(note == SprayNote::Failure, move |t| {
            self::spray(t, &count, &member, note, period_ms, limit)
        })
        .await
    }
}

/// The embedded form of `spray_window.lua`, exact and in constant time: one entry per
/// (fingerprint, account key), `member` ([`SprayKey::member`]), noting the latest
/// period a comparison of it failed in, and one per fingerprint, `count_key`
/// ([`SprayKey::count`]), holding [`SprayCounts`] of the current and the previous
/// period. The answer is
/// `|failed|` over both periods, as on Redis, without reading the members: a count
/// over a million accounts costs what one over ten does. `Check` reads the count
/// entry only and writes nothing. Both entries expire at the end of the next period.
/// `limit` is not needed: the count is exact whatever its size.
fn spray(
    t: &mut Tables<'_, '_>,
    count_key: &str,
    key: &str,
    note: SprayNote,
    period_ms: u64,
    _limit: u32,
) -> Result<u64, StoreError> {
    if period_ms == 0 {
        return Err(StoreError::Protocol("spray period must not be 0".into()));
    }
    // The spray window's rules (`throttle::spray_window`, the twin of spray_window.lua).
    let noted = spray_window::period(t.now, period_ms);
    let expires_ms = spray_window::expires_ms(noted, period_ms);
    let held = match t.get(count_key)? {
        Some(Entry::SprayCount { period: held, counts, .. }) => Some((held, counts)),
        None => None,
        Some(_) => return Err(StoreError::Protocol("a spray key holds another entry".into())),
    };
    let mut counts = spray_window::roll(held, noted);
    let union = |[current, previous]: [SprayCounts; 2]| previous.failed + current.new_failed;
    if note == SprayNote::Check {
        return Ok(union(counts));
    }
    let last = match t.get(key)? {
        Some(Entry::Spray { failed, .. }) => failed,
        Some(_) => return Err(StoreError::Protocol("a spray key holds another entry".into())),
        None => 0,
    };
    // New to this period's set; new to the union with the period before (a member
    // last noted then is in both).
    let (joins_period, joins_union) = spray_window::joins(last, noted);
    counts[0].failed += u64::from(joins_period);
    counts[0].new_failed += u64::from(joins_union);
    t.put(key, Entry::Spray { failed: noted, expires_ms })?;
    t.put(count_key, Entry::SprayCount { period: noted, counts, expires_ms })?;
    Ok(union(counts))
}
