//! A realm's tally on Redis: one `lua/realm_tally/` script per operation on the realm's
//! keys (one hash tag: one slot on a cluster), with no `WAIT`: a tally is what an
//! operator reads, never what a login is decided on.

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::{realm_tally_note as note, realm_tally_read as read};
use crate::store::error::StoreError;
use crate::store::keys::TallyKey;
use crate::store::realm_tally::{RealmTallyStore, TallyBatch, TallyLookbacks, TallyReading};
use crate::throttle::realm_tally::SLOT_TTL_MS;

#[async_trait]
impl RealmTallyStore for RedisStore {
    async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError> {
        let keys = note::Keys { labels: batch.key.labels(), slots: batch.key.slot_keys() };
        let counts = batch.counts.map(|c| c.to_string()).join(",");
        let [locked, ceiling, networks, spray, grace] = batch.members.clone().map(|m| m.join(","));
        let args =
            note::Args { counts, locked, ceiling, networks, spray, grace, ttl_ms: SLOT_TTL_MS };
        let _noted = note::Reply::parse(&[self.invoke(&note::call(&keys, &args)).await?])?;
        Ok(())
    }

    async fn read_tallies(
        &self,
        key: &TallyKey,
        lookbacks: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError> {
        let keys = read::Keys { labels: key.labels(), slots: key.slot_keys() };
        let [locked_slots, ceiling_slots, networks_slots, spray_slots, grace_slots] =
            lookbacks.distinct;
        let args = read::Args {
            locked_slots,
            ceiling_slots,
            networks_slots,
            spray_slots,
            grace_slots,
            count_slots: lookbacks.counts,
        };
        let reply: Vec<i64> = self.invoke(&read::call(&keys, &args)).await?;
        let read::Reply {
            now_ms,
            locked,
            ceiling,
            networks,
            spray,
            grace,
            challenges,
            confirmed,
            refused_2f,
            refused_rc,
            refused_pr,
            refused_vr,
        } = read::Reply::parse(&reply)?;
        let n = |v: i64| {
            u64::try_from(v)
                .map_err(|_| StoreError::Protocol("realm tally: a negative count".into()))
        };
        Ok(TallyReading {
            distinct: [n(locked)?, n(ceiling)?, n(networks)?, n(spray)?, n(grace)?],
            counts: [
                n(challenges)?,
                n(confirmed)?,
                n(refused_2f)?,
                n(refused_rc)?,
                n(refused_pr)?,
                n(refused_vr)?,
            ],
            now_ms: n(now_ms)?,
            exact: false,
        })
    }
}
