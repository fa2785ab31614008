//! A realm's tally (`realm_tally/note.lua` and `read.lua`; the embedded store's
//! `realm_tally`; the twin `throttle::realm_tally`) on both stores: one sequence of notes
//! at chosen minutes read back over several look-backs, each member counted once per
//! look-back, nothing older than the hour; and tallies a daemon never writes read as
//! store errors on both.
//!
//! Time: the embedded store's clock is the test's; on Redis, whose clock is `TIME`, the
//! tally's slots are moved back instead (each slot's keys renamed to the slot of its
//! minute `k` earlier, and relabelled), which is what `k` minutes passing looks like.

use portcullis::store::keys::TallyKey;
use portcullis::store::realm_tally::{TallyBatch, TallyLookbacks, TallyReading};
use portcullis::throttle::realm_tally::{Distinct, SLOTS};

use super::*;

/// What the suite needs from a backend to move a tally through time.
#[async_trait]
trait TallyBackend: Send + Sync {
    fn store(&self) -> Arc<dyn Store>;
    /// As if `minutes` passed for the tally at `key`.
    async fn pass(&self, key: &TallyKey, minutes: u64);
}

#[async_trait]
impl TallyBackend for Embedded {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn pass(&self, _: &TallyKey, minutes: u64) {
        self.clock.0.fetch_add(minutes * MIN, Ordering::SeqCst);
    }
}

#[async_trait]
impl TallyBackend for Redis {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn pass(&self, key: &TallyKey, minutes: u64) {
        let mut conn = self.server.conn();
        let labels: Vec<(u64, u64)> =
            redis::cmd("HGETALL").arg(key.labels()).query(&mut conn).unwrap();
        let slots = key.slot_keys();
        let per_slot = slots.len() / SLOTS as usize;
        let moved: Vec<(u64, u64)> =
            labels.iter().map(|&(slot, minute)| (slot, minute - minutes)).collect();
        // Out of the way first, so no slot overwrites another still to move.
        for &(slot, _) in &moved {
            for i in 0..per_slot {
                let from = &slots[slot as usize * per_slot + i];
                let _: () = redis::cmd("RENAME")
                    .arg(from)
                    .arg(format!("{from}:moving"))
                    .query(&mut conn)
                    .unwrap_or(());
            }
        }
        let _: () = redis::cmd("DEL").arg(key.labels()).query(&mut conn).unwrap();
        for &(slot, minute) in &moved {
            let to = (minute % SLOTS) as usize;
            for i in 0..per_slot {
                let from = format!("{}:moving", slots[slot as usize * per_slot + i]);
                let _: () = redis::cmd("RENAME")
                    .arg(&from)
                    .arg(&slots[to * per_slot + i])
                    .query(&mut conn)
                    .unwrap_or(());
            }
            let _: () =
                redis::cmd("HSET").arg(key.labels()).arg(to).arg(minute).query(&mut conn).unwrap();
        }
    }
}

fn members(list: &[(Distinct, &[&str])]) -> [Vec<String>; 5] {
    let mut out: [Vec<String>; 5] = Default::default();
    for (tally, names) in list {
        out[tally.index()] = names.iter().map(|n| (*n).to_owned()).collect();
    }
    out
}

async fn note(
    b: &dyn TallyBackend,
    key: &TallyKey,
    list: &[(Distinct, &[&str])],
    counts: [u64; 6],
) {
    let batch = TallyBatch { key, members: members(list), counts };
    portcullis::store::realm_tally::RealmTallyStore::add_tallies(&*TallyBackend::store(b), &batch)
        .await
        .unwrap();
}

/// `(locked, networks, counts)` over a look-back of `locked` minutes for the locked
/// tally and an hour for the rest.
async fn read(b: &dyn TallyBackend, key: &TallyKey, locked: u64) -> (u64, u64, [u64; 6]) {
    let lookbacks =
        TallyLookbacks { distinct: [locked, SLOTS, SLOTS, SLOTS, SLOTS], counts: SLOTS };
    let TallyReading { distinct, counts, .. } =
        portcullis::store::realm_tally::RealmTallyStore::read_tallies(
            &*TallyBackend::store(b),
            key,
            &lookbacks,
        )
        .await
        .unwrap();
    (distinct[Distinct::Locked.index()], distinct[Distinct::Networks.index()], counts)
}

async fn tallies_count_each_member_once_within_the_hour(b: &dyn TallyBackend) {
    let key = TallyKey::new(&secret(), "default");
    let other = TallyKey::new(&secret(), "other");
    let (a, bb, c) = ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc");
    assert_eq!(read(b, &key, 15).await, (0, 0, [0; 6]), "nothing noted");
    note(b, &key, &[(Distinct::Locked, &[a, bb])], [2, 0, 0, 0, 0, 0]).await;
    note(b, &key, &[(Distinct::Locked, &[a])], [0; 6]).await;
    assert_eq!(read(b, &key, 15).await, (2, 0, [2, 0, 0, 0, 0, 0]));
    assert_eq!(read(b, &other, 15).await, (0, 0, [0; 6]), "realms apart");

    b.pass(&key, 5).await;
    note(
        b,
        &key,
        &[(Distinct::Locked, &[bb, c]), (Distinct::Networks, &["0123"])],
        [0, 0, 0, 0, 1, 0],
    )
    .await;
    assert_eq!(read(b, &key, 15).await, (3, 1, [2, 0, 0, 0, 1, 0]), "b counted once");
    assert_eq!(read(b, &key, 5).await.0, 2, "five minutes: b and c");
    assert_eq!(read(b, &key, 6).await.0, 3, "six minutes reach a");

    // 60 minutes after the first notes: they have left the hour; the later ones not.
    b.pass(&key, 55).await;
    assert_eq!(read(b, &key, 60).await, (2, 1, [0, 0, 0, 0, 1, 0]));
    // A note in this minute uses the first notes' slot: it starts the slot afresh.
    note(b, &key, &[], [0, 1, 0, 0, 0, 0]).await;
    assert_eq!(read(b, &key, 60).await, (2, 1, [0, 1, 0, 0, 1, 0]));
    b.pass(&key, 61).await;
    assert_eq!(read(b, &key, 60).await, (0, 0, [0; 6]), "an hour without notes: nothing");
}

mod embedded_backend {
    use super::*;
    #[tokio::test]
    async fn tallies_count_each_member_once_within_the_hour() {
        super::tallies_count_each_member_once_within_the_hour(&Embedded::new()).await;
    }
}

mod redis_backend {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tallies_count_each_member_once_within_the_hour() {
        super::tallies_count_each_member_once_within_the_hour(&Redis::new()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tallies_a_daemon_never_writes_are_store_errors() {
        let r = Redis::new();
        let key = TallyKey::new(&secret(), "default");
        note(&r, &key, &[(Distinct::Locked, &["aaaa"])], [1, 0, 0, 0, 0, 0]).await;
        let lookbacks = TallyLookbacks { distinct: [SLOTS; 5], counts: SLOTS };
        let mut conn = r.server.conn();
        let slot: Vec<(String, String)> =
            redis::cmd("HGETALL").arg(key.labels()).query(&mut conn).unwrap();
        let (slot, minute) = slot[0].clone();
        let counters = &key.slot_keys()[slot.parse::<usize>().unwrap() * 6];
        for (target, field, value) in [
            (counters.as_str(), "challenges", "-5"),
            (counters.as_str(), "challenges", "1.5"),
            (&key.labels()[..], slot.as_str(), "minute"),
        ] {
            let _: () =
                redis::cmd("HSET").arg(target).arg(field).arg(value).query(&mut conn).unwrap();
            let read = portcullis::store::realm_tally::RealmTallyStore::read_tallies(
                &*TallyBackend::store(&r),
                &key,
                &lookbacks,
            )
            .await;
            assert!(read.is_err(), "{field}={value} read as {read:?}");
            let _: () =
                redis::cmd("HSET").arg(target).arg(field).arg("1").query(&mut conn).unwrap();
        }
        let _: () =
            redis::cmd("HSET").arg(key.labels()).arg(&slot).arg(&minute).query(&mut conn).unwrap();
        // A HyperLogLog that is not one: PFCOUNT refuses it.
        let locked = &key.slot_keys()[slot.parse::<usize>().unwrap() * 6 + 1];
        let _: () = redis::cmd("SET").arg(locked).arg("not a sketch").query(&mut conn).unwrap();
        assert!(
            portcullis::store::realm_tally::RealmTallyStore::read_tallies(
                &*TallyBackend::store(&r),
                &key,
                &lookbacks
            )
            .await
            .is_err()
        );
    }
}
