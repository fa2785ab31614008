//! The embedded store's tables as one operation sees them inside its batch's
//! transaction: typed reads and writes of entries, each with its expiry kept in the
//! sweep's index, on the batch's clock. Each rule's file (`attempt_count.rs`,
//! `network_bucket.rs`, …) writes its operations on these.

use redb::ReadableTable;

use super::entry::Entry;
use crate::store::error::StoreError;
use crate::throttle::Record;

/// Most expired entries removed by one sweep (the rest wait for the next).
const SWEEP_LIMIT: usize = 10_000;

/// The entries and their expiry index, open in one write transaction, and the batch's
/// store-clock time in ms.
pub(super) struct Tables<'a, 't> {
    pub(super) entries: &'a mut redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) expiry: &'a mut redb::Table<'t, (u64, &'static str), ()>,
    pub(super) now: u64,
}

impl Tables<'_, '_> {
    /// The device epoch at `key` (0 when absent).
    pub(super) fn epoch(&self, key: &str) -> Result<u64, StoreError> {
        match self.get(key)? {
            Some(Entry::Epoch { epoch, .. }) => Ok(epoch),
            None => Ok(0),
            Some(_) => Err(StoreError::Protocol("a device epoch key holds another entry".into())),
        }
    }

    /// The live entry at `key` (an expired one reads as absent, as in Redis).
    pub(super) fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let Some(bytes) = self.entries.get(key).map_err(embedded)? else { return Ok(None) };
        let entry = Entry::decode(bytes.value())?;
        Ok((entry.expires_ms() > self.now).then_some(entry))
    }

    /// The record at `key` (an account's, a device bucket's or a flow's); another kind
    /// of entry there is a store error.
    pub(super) fn record(&self, key: &str) -> Result<Option<Record>, StoreError> {
        match self.get(key)? {
            Some(Entry::Record { record, .. }) => Ok(Some(record)),
            Some(
                Entry::Attempt { .. }
                | Entry::Spray { .. }
                | Entry::SprayCount { .. }
                | Entry::Bucket { .. }
                | Entry::Repeats { .. }
                | Entry::Sends { .. }
                | Entry::Breached { .. }
                | Entry::Used { .. }
                | Entry::Held { .. }
                | Entry::Tally { .. }
                | Entry::TallyMember { .. }
                | Entry::CandidateReport { .. }
                | Entry::Networks { .. }
                | Entry::Devices { .. }
                | Entry::Epoch { .. },
            ) => Err(StoreError::Protocol("a record key holds another entry".into())),
            None => Ok(None),
        }
    }

    /// Writes `entry` at `key`, moving its expiry in the index.
    pub(super) fn put(&mut self, key: &str, entry: Entry) -> Result<(), StoreError> {
        let old = self.entries.insert(key, entry.encode().as_slice()).map_err(embedded)?;
        if let Some(old) = old
            && let Ok(old) = Entry::decode(old.value())
        {
            self.expiry.remove((old.expires_ms(), key)).map_err(embedded)?;
        }
        self.expiry.insert((entry.expires_ms(), key), ()).map_err(embedded)?;
        Ok(())
    }

    /// Deletes the entry at `key` and its expiry.
    pub(super) fn remove(&mut self, key: &str) -> Result<(), StoreError> {
        if let Some(old) = self.entries.remove(key).map_err(embedded)?
            && let Ok(old) = Entry::decode(old.value())
        {
            self.expiry.remove((old.expires_ms(), key)).map_err(embedded)?;
        }
        Ok(())
    }

    /// Deletes up to [`SWEEP_LIMIT`] entries whose expiry has passed; returns how many.
    pub(super) fn sweep(&mut self) -> Result<usize, StoreError> {
        let mut due = Vec::new();
        for item in self.expiry.range::<(u64, &str)>(..).map_err(embedded)? {
            let (key, _) = item.map_err(embedded)?;
            let (expires_ms, name) = key.value();
            if expires_ms > self.now || due.len() >= SWEEP_LIMIT {
                break;
            }
            due.push((expires_ms, name.to_owned()));
        }
        for (expires_ms, name) in &due {
            self.expiry.remove((*expires_ms, name.as_str())).map_err(embedded)?;
            self.entries.remove(name.as_str()).map_err(embedded)?;
        }
        if !due.is_empty() {
            tracing::debug!(swept = due.len(), "expired entries removed");
        }
        Ok(due.len())
    }
}

/// A redb error as the store's.
pub(super) fn embedded(e: impl std::fmt::Display) -> StoreError {
    StoreError::Embedded(e.to_string())
}
