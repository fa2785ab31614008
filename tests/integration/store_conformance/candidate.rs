//! A candidate record (`record_attempt.lua`'s `shadow`, `refund.lua`; the embedded
//! store's `candidate_report`): an attempt refunded on the enforced record (the CPU
//! budget or the network refused it before any comparison) is given back on the
//! candidate record too, with its last-refused mark.

use portcullis::store::attempt_count::{Attempt, AttemptCountStore};
use redb::ReadableDatabase;

use super::*;

pub(super) async fn a_refund_gives_the_attempt_back_on_the_candidate_record(b: &dyn Backend) {
    let store = b.store();
    let enforced = policy(false);
    let candidate = Policy { max_failures: 3, ..enforced };
    let k = key("refunded@example.com");
    let attempt = Attempt::new(&k, None, &enforced).with_candidate(Some(&candidate));
    for _ in 0..2 {
        assert!(store.count(&attempt).await.unwrap().shadow.unwrap().allowed);
    }
    // The third, refunded everywhere: the candidate's window holds two again, so the
    // next attempt is its third and allowed.
    let third = store.count(&attempt).await.unwrap();
    let shadow = third.shadow.unwrap();
    assert_eq!((shadow.allowed, shadow.failures, shadow.consecutive_added), (true, 3, true));
    let refunded = (third.window_start_ms, third.consecutive_added);
    store.refund(&k, None, refunded, Some(&shadow)).await.unwrap();
    let again = store.count(&attempt).await.unwrap().shadow.unwrap();
    assert_eq!((again.allowed, again.failures), (true, 3), "the refund reached the candidate");
    // The fourth is one the candidate refuses; refunded, it no longer counts as the
    // attempt a verified password follows (the clear reports no refused attempt).
    let fourth = store.count(&attempt).await.unwrap();
    let shadow = fourth.shadow.unwrap();
    assert!(fourth.allowed && !shadow.allowed);
    let refunded = (fourth.window_start_ms, fourth.consecutive_added);
    store.refund(&k, None, refunded, Some(&shadow)).await.unwrap();
    assert!(!store.clear(&k).await.unwrap(), "the refunded attempt's mark stayed");
    // Without the refund, the clear reports it.
    for _ in 0..4 {
        store.count(&attempt).await.unwrap();
    }
    assert!(store.clear(&k).await.unwrap());
}

/// A refund over a candidate record a daemon never wrote is a store error, and
/// nothing is written first (the attempt id stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_over_a_corrupt_candidate_record_writes_nothing_on_redis() {
    let b = Redis::new();
    let store = b.store();
    let enforced = policy(false);
    let candidate = Policy { max_failures: 3, ..enforced };
    let k = key("corrupt-refund@example.com");
    let attempt_key = k.attempt(&secret(), &id("r1"));
    let attempt = Attempt::new(&k, Some(&attempt_key), &enforced).with_candidate(Some(&candidate));
    let counted = store.count(&attempt).await.unwrap();
    let shadow = counted.shadow.unwrap();
    let _: () = redis::cmd("SET")
        .arg(k.candidate_record().unwrap())
        .arg("not,a,record")
        .query(&mut b.server.conn())
        .unwrap();
    let refunded = (counted.window_start_ms, counted.consecutive_added);
    let r = store.refund(&k, Some(&attempt_key), refunded, Some(&shadow)).await;
    assert!(r.is_err(), "{r:?}");
    assert!(b.ttl_ms(attempt_key.as_str()).await.is_some(), "the attempt id was forgotten");
    assert_eq!(b.record(&k).await.map(|(f, _)| f), Some(1), "the enforced count was refunded");
}

/// The embedded store's entries as they are, then `writes` (key and bytes as the store
/// encodes them) put in place with the store closed; reopened.
fn reopened_with(b: Embedded, writes: &[(&str, &[u8])]) -> (Embedded, Vec<Option<Vec<u8>>>) {
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let Embedded { store, clock, _dir: dir } = b;
    drop(store);
    let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
    let before = {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(ENTRIES).unwrap();
        writes.iter().map(|(k, _)| table.get(*k).unwrap().map(|v| v.value().to_vec())).collect()
    };
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(ENTRIES).unwrap();
        for (k, bytes) in writes {
            table.insert(*k, *bytes).unwrap();
        }
    }
    txn.commit().unwrap();
    drop(db);
    let store = EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
    (Embedded { store: Arc::new(store), clock, _dir: dir }, before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_over_a_corrupt_candidate_record_writes_nothing_on_the_embedded_store() {
    let enforced = policy(false);
    let candidate = Policy { max_failures: 3, ..enforced };
    let k = key("corrupt-refund@example.com");
    let attempt_key = k.attempt(&secret(), &id("r1"));
    let b = Embedded::new();
    let attempt = Attempt::new(&k, Some(&attempt_key), &enforced).with_candidate(Some(&candidate));
    let counted = b.store.count(&attempt).await.unwrap();
    let shadow = k.candidate_record().unwrap();
    let (b, _) = reopened_with(b, &[(&shadow, &[1u8, 0, 0])]);
    let refunded = (counted.window_start_ms, counted.consecutive_added);
    let r = b.store.refund(&k, Some(&attempt_key), refunded, counted.shadow.as_ref()).await;
    assert!(r.is_err(), "{r:?}");
    assert!(b.ttl_ms(attempt_key.as_str()).await.is_some(), "the attempt id was forgotten");
    assert_eq!(b.record(&k).await.map(|(f, _)| f), Some(1), "the enforced count was refunded");
}

/// A refund over a corrupt enforced record beside a good candidate record: a store
/// error, and nothing written first: the candidate record and the attempt id as they
/// were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_over_a_corrupt_record_leaves_the_candidate_record_on_redis() {
    let b = Redis::new();
    let store = b.store();
    let enforced = policy(false);
    let candidate = Policy { max_failures: 3, ..enforced };
    let k = key("corrupt-record@example.com");
    let attempt_key = k.attempt(&secret(), &id("r1"));
    let attempt = Attempt::new(&k, Some(&attempt_key), &enforced).with_candidate(Some(&candidate));
    let counted = store.count(&attempt).await.unwrap();
    let mut conn = b.server.conn();
    let shadow = k.candidate_record().unwrap();
    let before: String = redis::cmd("GET").arg(&shadow).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET").arg(k.record()).arg("f").arg("x").query(&mut conn).unwrap();
    let refunded = (counted.window_start_ms, counted.consecutive_added);
    let r = store.refund(&k, Some(&attempt_key), refunded, counted.shadow.as_ref()).await;
    assert!(r.is_err(), "{r:?}");
    let after: String = redis::cmd("GET").arg(&shadow).query(&mut conn).unwrap();
    assert_eq!(after, before, "the candidate record was written before the failure");
    assert!(b.ttl_ms(attempt_key.as_str()).await.is_some(), "the attempt id was forgotten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_over_a_corrupt_record_leaves_the_candidate_record_on_the_embedded_store() {
    let enforced = policy(false);
    let candidate = Policy { max_failures: 3, ..enforced };
    let k = key("corrupt-record@example.com");
    let attempt_key = k.attempt(&secret(), &id("r1"));
    let b = Embedded::new();
    let attempt = Attempt::new(&k, Some(&attempt_key), &enforced).with_candidate(Some(&candidate));
    let counted = b.store.count(&attempt).await.unwrap();
    let record = k.record();
    let (b, before) = reopened_with(b, &[(&record, &[1u8, 0, 0])]);
    let good = before[0].clone().expect("the counted record");
    let refunded = (counted.window_start_ms, counted.consecutive_added);
    let r = b.store.refund(&k, Some(&attempt_key), refunded, counted.shadow.as_ref()).await;
    assert!(r.is_err(), "{r:?}");
    // The record repaired: the candidate record still holds its one attempt (a refund
    // would have left none), and the attempt id still answers its first call.
    let (b, _) = reopened_with(b, &[(&record, &good)]);
    let store = b.store.clone();
    let again = store.count(&attempt).await.unwrap();
    assert_eq!(again.replays, 1, "the attempt id was forgotten");
    let fresh = Attempt::new(&k, None, &enforced).with_candidate(Some(&candidate));
    let next = store.count(&fresh).await.unwrap().shadow.unwrap();
    assert_eq!(next.failures, 2, "the candidate record was written before the failure");
}
