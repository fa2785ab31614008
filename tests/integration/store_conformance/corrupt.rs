//! Values a daemon never writes are store errors on both backends, never answers.

use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::attempt_count::{Attempt, RepeatClaim};
use portcullis::store::keys::RepeatKey;
use portcullis::store::network_bucket::NetworkBucketStore;
use portcullis::store::network_bucket::NetworkRequest;
use portcullis::store::repeat_list::RepeatNoteRequest;

use super::*;

/// Values a daemon never writes, in a key a script reads, are a store error on every
/// operation that reads them (deny: the service answers UNAVAILABLE), never an answer.
/// A failure counter at 2^63 - 1 would otherwise wrap negative and open the door.
const CORRUPT_RECORDS: [(&str, &str); 9] = [
    ("f", "9223372036854775807"),
    ("f", "-1"),
    ("f", "1.5"),
    ("f", "nan"),
    ("f", "inf"),
    ("f", "five"),
    ("ws", "-5"),
    ("ws", "1e20"),
    ("st", "64"),
];

async fn every_read_fails(store: &dyn Store, k: &AccountKey, what: &str) {
    let p = policy(false);
    assert!(store.record_attempt(k, None, &p).await.is_err(), "record_attempt over {what}");
    assert!(store.is_open(k, &p).await.is_err(), "admit over {what}");
    assert!(store.inspect(k, &p).await.is_err(), "inspect over {what}");
    let refund = store.refund(k, None, (1_800_000_000_000, true), None).await;
    assert!(refund.is_err(), "refund over {what}");
}

/// A count claiming a repeat on `list`, and a note onto it, both fail over a corrupt list.
async fn every_repeat_read_fails(store: &dyn Store, k: &AccountKey, list: &RepeatKey, what: &str) {
    let p = policy(false);
    let claim = RepeatClaim { list, fingerprint: 0xaa11 };
    let attempt = Attempt { repeat: Some(claim), ..Attempt::new(k, None, &p) };
    assert!(store.count(&attempt).await.is_err(), "count over the repeat list {what}");
    assert!(
        store
            .note_repeat(&RepeatNoteRequest { bucket: k, list, fingerprint: 0xaa11, max_len: 3 })
            .await
            .is_err(),
        "note over {what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_a_daemon_never_writes_are_store_errors_on_redis() {
    let redis = Redis::new();
    let store = redis.store();
    let mut conn = redis.server.conn();
    for (n, (field, value)) in CORRUPT_RECORDS.iter().enumerate() {
        let k = key(&format!("corrupt{n}@example.com"));
        assert!(store.record_attempt(&k, None, &policy(false)).await.unwrap().allowed);
        let _: () =
            redis::cmd("HSET").arg(k.record()).arg(*field).arg(*value).query(&mut conn).unwrap();
        every_read_fails(store.as_ref(), &k, &format!("{field}={value}")).await;
    }
    // A corrupt attempt_id answer: replaying the id is an error, not its "answer".
    let k = key("corrupt-id@example.com");
    let attempt = k.attempt(&secret(), &id("replayed"));
    store.record_attempt(&k, Some(&attempt), &policy(false)).await.unwrap();
    let ids: Vec<String> =
        redis::cmd("KEYS").arg(format!("*{}*:a:*", k.digest())).query(&mut conn).unwrap();
    assert_eq!(ids.len(), 1);
    for bad in ["7:1800000000000:0", "1:99999999999999999999:0", "1:1:99999999999999"] {
        let _: () = redis::cmd("SET").arg(&ids[0]).arg(bad).query(&mut conn).unwrap();
        let replay = store.record_attempt(&k, Some(&attempt), &policy(false)).await;
        assert!(replay.is_err(), "replay over {bad}: {replay:?}");
    }
    // A corrupt repeat list: a count that reads it, and a note, are errors (a garbled
    // list must never forgive, nor be overwritten as if empty).
    let k = key("corrupt-list@example.com");
    let list = k.repeats(&secret(), "ip:203.0.113.7/32");
    store.record_attempt(&k, None, &policy(false)).await.unwrap();
    let ws = store.inspect(&k, &policy(false)).await.unwrap().record.unwrap().window_start_ms;
    let mut bad_lists: Vec<String> =
        ["garbage", "x|,aa11,", "99999999999999999999|,aa11,", "-1|,aa11,"]
            .map(String::from)
            .into();
    // Of the record's own window: a torn mark, a mark alone, a short or a long
    // fingerprint, a missing comma, 17 entries.
    for body in [",aa11**,", ",*,", ",aa1,", ",aa11aa11aa11aa11a,", ",aa11", ",aa11*x,"] {
        bad_lists.push(format!("{ws}|{body}"));
    }
    bad_lists.push(format!("{ws}|,{}", "aa11,".repeat(17)));
    for bad in &bad_lists {
        let _: () = redis::cmd("SET").arg(list.as_str()).arg(bad).query(&mut conn).unwrap();
        every_repeat_read_fails(store.as_ref(), &k, &list, bad).await;
    }
    // A corrupt network bucket: every operation on it is an error (a take would
    // otherwise read it as full).
    let n = NetworkKey::new(&secret(), "default", "key:corrupt");
    let p = BucketPolicy { capacity: 3, interval_ms: 1000 };
    for bad in ["-1", "1.5", "nan", "lots", "1e20"] {
        let _: () = redis::cmd("SET").arg(n.as_key()).arg(bad).query(&mut conn).unwrap();
        for op in [NetworkOp::Take, NetworkOp::Peek, NetworkOp::GiveBack] {
            let r = store
                .network(&NetworkRequest { key: &n, op, policy: &p, held: None, candidate: None })
                .await;
            assert!(r.is_err(), "{op:?} over {bad}: {r:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_a_daemon_never_writes_are_store_errors_on_the_embedded_store() {
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let open = || EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
    // Record entries as the embedded store encodes them: tag 1, then failures, window
    // start, step and expiry as little-endian u64s.
    let record = |failures: u64, ws: u64, step: u64| {
        let mut bytes = vec![1u8];
        for word in [failures, ws, step, u64::MAX / 2] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes
    };
    let corrupt = [
        ("failures 2^63 - 1", record(i64::MAX as u64, 1_800_000_000_000, 0)),
        ("failures u64::MAX", record(u64::MAX, 1_800_000_000_000, 0)),
        ("window start u64::MAX", record(1, u64::MAX, 0)),
        ("step 64", record(1, 1_800_000_000_000, 64)),
        ("step u32::MAX + 1", record(1, 1_800_000_000_000, 1 << 32)),
        ("truncated", vec![1u8, 0, 0]),
    ];
    for (n, (what, bytes)) in corrupt.iter().enumerate() {
        let k = key(&format!("corrupt{n}@example.com"));
        {
            let store = open();
            store.record_attempt(&k, None, &policy(false)).await.unwrap();
        }
        {
            let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(ENTRIES).unwrap().insert(k.record().as_str(), bytes.as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let store = open();
        every_read_fails(&store, &k, what).await;
    }
    // A corrupt repeat list (tag 7: window start, the forgiven marks (bit i: entry i),
    // a zero word, expiry, then at most 16 fingerprints).
    let k = key("corrupt-list@example.com");
    let list = k.repeats(&secret(), "ip:203.0.113.7/32");
    let marked = |ws: u64, marks: u64, fingerprints: usize, tail: usize| {
        let mut bytes = vec![7u8];
        for word in [ws, marks, 0, u64::MAX / 2] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend(std::iter::repeat_n(0xaa, fingerprints * 8 + tail));
        bytes
    };
    let repeats = |ws: u64, fingerprints: usize, tail: usize| marked(ws, 0, fingerprints, tail);
    {
        let store = open();
        store.record_attempt(&k, None, &policy(false)).await.unwrap();
    }
    for (what, bytes) in [
        ("a torn fingerprint", repeats(1_800_000_000_000, 2, 3)),
        ("17 fingerprints", repeats(1_800_000_000_000, 17, 0)),
        ("window start u64::MAX", repeats(u64::MAX, 1, 0)),
        ("truncated", vec![7u8, 1, 2]),
        ("a mark past the list", marked(1_800_000_000_000, 0b100, 2, 0)),
        ("marks above 16 bits", marked(1_800_000_000_000, 1 << 16, 1, 0)),
    ] {
        {
            let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(ENTRIES).unwrap().insert(list.as_str(), bytes.as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let store = open();
        every_repeat_read_fails(&store, &k, &list, what).await;
    }
    // A corrupt network bucket (tag 6: TAT and expiry must agree and be a time).
    let n = NetworkKey::new(&secret(), "default", "key:corrupt");
    let bucket = |tat: u64, expiry: u64| {
        let mut bytes = vec![6u8];
        for word in [tat, 0, 0, expiry] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes
    };
    let far = 1_900_000_000_000;
    for (what, bytes) in
        [("tat != expiry", bucket(far, far + 1)), ("tat u64::MAX", bucket(u64::MAX, u64::MAX))]
    {
        {
            let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(ENTRIES).unwrap().insert(n.as_key().as_str(), bytes.as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let store = open();
        let p = BucketPolicy { capacity: 3, interval_ms: 1000 };
        for op in [NetworkOp::Take, NetworkOp::Peek, NetworkOp::GiveBack] {
            assert!(
                store
                    .network(&NetworkRequest {
                        key: &n,
                        op,
                        policy: &p,
                        held: None,
                        candidate: None
                    })
                    .await
                    .is_err(),
                "{op:?} over {what}"
            );
        }
    }
}
