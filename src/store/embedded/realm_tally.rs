//! A realm's tally in the embedded store (`lua/realm_tally/` on Redis), exact: one
//! [`Ring`] per tally kind, and per member of a distinct tally the minute it was last
//! noted, so a member noted in several minutes counts once ([`Ring::move_member`]).

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::error::StoreError;
use crate::store::keys::TallyKey;
use crate::store::realm_tally::{RealmTallyStore, TallyBatch, TallyLookbacks, TallyReading};
use crate::throttle::realm_tally::{Counter, Distinct, Ring, SLOT_TTL_MS, minute, slot};

#[async_trait]
impl RealmTallyStore for EmbeddedStore {
    async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError> {
        let key = batch.key.clone();
        let (members, counts) = (batch.members.clone(), batch.counts);
        self.submit(true, move |t| add(t, &key, &members, counts)).await
    }

    async fn read_tallies(
        &self,
        key: &TallyKey,
        lookbacks: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError> {
        let (key, lookbacks) = (key.clone(), *lookbacks);
        self.submit(false, move |t| read(t, &key, &lookbacks)).await
    }
}

/// The ring at `key` (empty when absent).
fn ring(t: &Tables<'_, '_>, key: &str) -> Result<Ring, StoreError> {
    match t.get(key)? {
        Some(Entry::Tally { ring, .. }) => Ok(ring),
        None => Ok(Ring::new()),
        Some(_) => Err(StoreError::Protocol("a tally key holds another entry".into())),
    }
}

/// The embedded form of `note.lua`.
fn add(
    t: &mut Tables<'_, '_>,
    key: &TallyKey,
    members: &[Vec<String>; 5],
    counts: [u64; 6],
) -> Result<(), StoreError> {
    let now = minute(t.now);
    let expires_ms = t.now.saturating_add(SLOT_TTL_MS);
    for tally in Distinct::ALL {
        let list = &members[tally.index()];
        if list.is_empty() {
            continue;
        }
        let ring_key = key.entry(tally.name(), None);
        let mut ring = ring(t, &ring_key)?;
        ring.advance(now);
        for member in list {
            let member_key = key.entry(tally.name(), Some(member));
            let previous = match t.get(&member_key)? {
                Some(Entry::TallyMember { minute, .. }) => Some(minute),
                None => None,
                Some(_) => {
                    return Err(StoreError::Protocol("a tally key holds another entry".into()));
                }
            };
            ring.move_member(previous, now);
            t.put(&member_key, Entry::TallyMember { minute: now, expires_ms })?;
        }
        t.put(&ring_key, Entry::Tally { ring, expires_ms })?;
    }
    for counter in Counter::ALL {
        let n = counts[counter.index()];
        if n == 0 {
            continue;
        }
        let ring_key = key.entry(&counter.name(), None);
        let mut ring = ring(t, &ring_key)?;
        ring.advance(now);
        let held = &mut ring.counts[slot(now)];
        *held = held.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        t.put(&ring_key, Entry::Tally { ring, expires_ms })?;
    }
    Ok(())
}

/// The embedded form of `read.lua`.
fn read(
    t: &mut Tables<'_, '_>,
    key: &TallyKey,
    lookbacks: &TallyLookbacks,
) -> Result<TallyReading, StoreError> {
    let now = minute(t.now);
    let mut distinct = [0; 5];
    for tally in Distinct::ALL {
        let ring = ring(t, &key.entry(tally.name(), None))?;
        distinct[tally.index()] = ring.sum(now, lookbacks.distinct[tally.index()]);
    }
    let mut counts = [0; 6];
    for counter in Counter::ALL {
        let ring = ring(t, &key.entry(&counter.name(), None))?;
        counts[counter.index()] = ring.sum(now, lookbacks.counts);
    }
    Ok(TallyReading { distinct, counts, now_ms: t.now, exact: true })
}
