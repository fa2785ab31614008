//! Refused-password lists in the embedded store (docs/throttle.md, "Repeated
//! passwords"): read in the count's transaction (`attempt_count.rs`), written after a
//! failed comparison, with the rules of [`crate::throttle::repeat_list`] that
//! `lua/repeat_list.lua` applies on Redis.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::{Entry, MAX_REPEATS};
use super::tables::Tables;
use crate::store::error::StoreError;
use crate::store::repeat_list::{RepeatListStore, RepeatNoteRequest};
use crate::throttle::repeat_list::{RepeatEntry, RepeatList};

#[async_trait]
impl RepeatListStore for EmbeddedStore {
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        let RepeatNoteRequest { bucket, list, fingerprint, max_len } = *request;
        let (record, list) = (bucket.record(), list.as_str().to_owned());
        self.submit(true, move |t| note_repeat(t, &record, &list, fingerprint, max_len)).await
    }
}

/// The repeat list at `list` and its expiry, if it is bound to the window that
/// started at `window_start_ms` (`None` when absent or of another window). Another
/// kind of entry there is a store error, as on Redis.
pub(super) fn list_of(
    t: &Tables<'_, '_>,
    list: &str,
    window_start_ms: u64,
) -> Result<Option<(RepeatList, u64)>, StoreError> {
    match t.get(list)? {
        Some(Entry::Repeats { window_start_ms: ws, fingerprints, marks, len, expires_ms }) => {
            let held = &fingerprints[..usize::from(len).min(MAX_REPEATS)];
            let entries = held
                .iter()
                .enumerate()
                .map(|(i, &fingerprint)| RepeatEntry {
                    fingerprint,
                    forgiven: marks & (1 << i) != 0,
                })
                .collect();
            Ok((ws == window_start_ms).then_some((RepeatList { entries }, expires_ms)))
        }
        None => Ok(None),
        Some(_) => Err(StoreError::Protocol("a repeat key holds another entry".into())),
    }
}

/// Whether `fingerprint` is on the list at `list`, whatever window it is bound to
/// (record_attempt.lua's `listed`: a stale password from an earlier window).
pub(super) fn lists(t: &Tables<'_, '_>, list: &str, fingerprint: u64) -> Result<bool, StoreError> {
    match t.get(list)? {
        Some(Entry::Repeats { fingerprints, len, .. }) => {
            Ok(fingerprints[..usize::from(len).min(MAX_REPEATS)].contains(&fingerprint))
        }
        None => Ok(false),
        Some(_) => Err(StoreError::Protocol("a repeat key holds another entry".into())),
    }
}

/// Writes `held` at `list`, bound to the window that started at `window_start_ms`.
pub(super) fn put_list(
    t: &mut Tables<'_, '_>,
    list: &str,
    window_start_ms: u64,
    held: &RepeatList,
    expires_ms: u64,
) -> Result<(), StoreError> {
    let mut fingerprints = [0u64; MAX_REPEATS];
    let mut marks = 0u16;
    for (i, e) in held.entries.iter().take(MAX_REPEATS).enumerate() {
        fingerprints[i] = e.fingerprint;
        marks |= u16::from(e.forgiven) << i;
    }
    let len = u8::try_from(held.entries.len().min(MAX_REPEATS)).unwrap_or(0);
    t.put(list, Entry::Repeats { window_start_ms, fingerprints, marks, len, expires_ms })
}

/// The embedded form of `repeat_list.lua` ([`RepeatList::note`]): `fingerprint` first on
/// `list` and not forgiven, at most `max_len` kept, bound to the bucket's window and
/// expiring with its record; no record, or one at its ceiling (kept until cleared,
/// its door shut: repeat_list.lua's PTTL of -1), no note.
fn note_repeat(
    t: &mut Tables<'_, '_>,
    record: &str,
    list: &str,
    fingerprint: u64,
    max_len: u32,
) -> Result<(), StoreError> {
    let (r, expires_ms) = match t.get(record)? {
        Some(Entry::Record { expires_ms: crate::throttle::KEPT_UNTIL_CLEARED_MS, .. }) | None => {
            return Ok(());
        }
        Some(Entry::Record { record, expires_ms }) => (record, expires_ms),
        Some(_) => return Err(StoreError::Protocol("a record key holds another entry".into())),
    };
    let mut held = list_of(t, list, r.window_start_ms)?.map(|(held, _)| held).unwrap_or_default();
    held.note(fingerprint, max_len);
    put_list(t, list, r.window_start_ms, &held, expires_ms)
}
