//! A realm's candidate bucket for a client network (`network_bucket.lua` with a
//! candidate; the embedded store's `network_bucket`): taken and given back beside the
//! enforced bucket in the same operation, never changing what the enforced bucket
//! answers; the held count's candidate part meets an attempt the candidate refused
//! before it gives back one of the candidate's tokens.

use super::*;

/// An hour a token: no refill during the test on Redis's real clock.
const HOUR: u64 = 3_600_000;

pub(super) async fn a_candidate_bucket_counts_beside_the_network(b: &dyn Backend) {
    let store = b.store();
    let enforced = BucketPolicy { capacity: 3, interval_ms: HOUR };
    let tighter = BucketPolicy { capacity: 1, interval_ms: HOUR };
    let n = NetworkKey::new(&secret(), "default", "ip:198.51.100.7/32");
    let held = n.held_by(&key("someone@example.com"));
    let call = |op: NetworkOp, held: Option<&HeldKey>, candidate: Option<&BucketPolicy>| {
        let (store, n, held) = (store.clone(), n.clone(), held.cloned());
        let candidate = candidate.copied();
        async move {
            let request = NetworkRequest {
                key: &n,
                op,
                policy: &enforced,
                held: held.as_ref(),
                candidate: candidate.as_ref(),
            };
            store.network(&request).await.unwrap()
        }
    };
    let with = Some(&tighter);
    // Two attempts of one account: the candidate's bucket takes the first and refuses
    // the second; the enforced bucket takes both and answers as without a candidate.
    let first = call(NetworkOp::Take, Some(&held), with).await;
    assert_eq!((first.taken, first.tokens, first.shadow), (true, 2, Some(true)));
    let second = call(NetworkOp::Take, Some(&held), with).await;
    assert_eq!((second.taken, second.tokens, second.shadow), (true, 1, Some(false)));
    assert!(near(b.ttl_ms(&n.candidate_bucket()).await, HOUR), "the candidate's bucket owes");
    assert!(near(b.ttl_ms(&held.candidate()).await, 2 * HOUR), "kept while either owes");
    // The first give meets the attempt the candidate refused: the enforced token comes
    // back, the candidate's stays spent.
    let back = call(NetworkOp::GiveBack, Some(&held), with).await;
    assert_eq!((back.tokens, back.shadow), (2, Some(true)));
    assert!(near(b.ttl_ms(&n.candidate_bucket()).await, HOUR));
    // The second gives back the candidate's own token: both buckets full, nothing kept.
    let back = call(NetworkOp::GiveBack, Some(&held), with).await;
    assert_eq!((back.tokens, back.full_in_ms, back.shadow), (3, 0, Some(false)));
    for gone in [n.as_key(), n.candidate_bucket(), held.as_str().to_owned(), held.candidate()] {
        assert_eq!(b.ttl_ms(&gone).await, None, "{gone} outlived its debt");
    }
    // Nothing held: a give changes neither bucket.
    let nothing = call(NetworkOp::GiveBack, Some(&held), with).await;
    assert_eq!((nothing.tokens, nothing.shadow), (3, Some(false)));
    assert_eq!(b.ttl_ms(&n.candidate_bucket()).await, None);

    // Without a held count (Verify): the caller gives back what each bucket took; a
    // give to the candidate's bucket alone leaves the enforced one as it is.
    let took = call(NetworkOp::Take, None, with).await;
    assert_eq!(took.shadow, Some(true));
    let refused = call(NetworkOp::Take, None, with).await;
    assert_eq!((refused.taken, refused.shadow), (true, Some(false)));
    let shadow_only = call(NetworkOp::GiveShadow, None, with).await;
    assert_eq!((shadow_only.tokens, shadow_only.shadow), (1, Some(false)), "enforced untouched");
    assert_eq!(b.ttl_ms(&n.candidate_bucket()).await, None, "the candidate's token came back");
    // A release fills both.
    assert_eq!(call(NetworkOp::Take, None, with).await.shadow, Some(true));
    let released = call(NetworkOp::Release, None, with).await;
    assert_eq!((released.tokens, released.full_in_ms), (3, 0));
    assert_eq!(b.ttl_ms(&n.candidate_bucket()).await, None, "the candidate's bucket released");
    // Without a candidate nothing is said of one, and its keys are never touched.
    let plain = call(NetworkOp::Take, Some(&held), None).await;
    assert_eq!((plain.taken, plain.shadow), (true, None));
    assert_eq!(b.ttl_ms(&n.candidate_bucket()).await, None);
    assert_eq!(b.ttl_ms(&held.candidate()).await, None);
}

/// The candidate's bucket empty, the enforced one not: the candidate refuses; the
/// enforced bucket empty, the candidate's not: the candidate takes (its `would_allow`).
pub(super) async fn a_looser_candidate_takes_what_the_network_refuses(b: &dyn Backend) {
    let store = b.store();
    let enforced = BucketPolicy { capacity: 1, interval_ms: HOUR };
    let looser = BucketPolicy { capacity: 2, interval_ms: HOUR };
    let n = NetworkKey::new(&secret(), "default", "key:looser");
    let take = || {
        let (store, n) = (store.clone(), n.clone());
        async move {
            let request = NetworkRequest {
                key: &n,
                op: NetworkOp::Take,
                policy: &enforced,
                held: None,
                candidate: Some(&looser),
            };
            store.network(&request).await.unwrap()
        }
    };
    let first = take().await;
    assert_eq!((first.taken, first.shadow), (true, Some(true)));
    let second = take().await;
    assert_eq!((second.taken, second.shadow), (false, Some(true)), "the candidate would allow");
    let third = take().await;
    assert_eq!((third.taken, third.shadow), (false, Some(false)), "both empty now");
}

/// A take with a candidate over `bad`: a store error, and the enforced bucket and its
/// held count untouched (the candidate's keys are read before anything is written).
async fn a_take_fails_and_writes_nothing(
    b: &dyn Backend,
    n: &NetworkKey,
    held: &HeldKey,
    bad: &str,
) {
    let request = NetworkRequest {
        key: n,
        op: NetworkOp::Take,
        policy: &BucketPolicy { capacity: 3, interval_ms: HOUR },
        held: Some(held),
        candidate: Some(&BucketPolicy { capacity: 1, interval_ms: HOUR }),
    };
    let r = b.store().network(&request).await;
    assert!(r.is_err(), "a take over {bad}: {r:?}");
    assert_eq!(b.ttl_ms(&n.as_key()).await, None, "the enforced bucket was written over {bad}");
    assert_eq!(b.ttl_ms(held.as_str()).await, None, "the held count was written over {bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_candidate_bucket_or_held_count_is_a_store_error_on_redis() {
    let b = Redis::new();
    let n = NetworkKey::new(&secret(), "default", "key:corrupt-candidate");
    let held = n.held_by(&key("someone@example.com"));
    let mut conn = b.server.conn();
    for bad in ["-1", "1.5", "lots", "1e20"] {
        let _: () = redis::cmd("SET").arg(n.candidate_bucket()).arg(bad).query(&mut conn).unwrap();
        a_take_fails_and_writes_nothing(&b, &n, &held, bad).await;
    }
    let _: () = redis::cmd("DEL").arg(n.candidate_bucket()).query(&mut conn).unwrap();
    for bad in ["1", "1,", "-1,0", "1,x", "1,2,3", "1e20,0"] {
        let _: () = redis::cmd("SET").arg(held.candidate()).arg(bad).query(&mut conn).unwrap();
        a_take_fails_and_writes_nothing(&b, &n, &held, bad).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_candidate_bucket_or_held_count_is_a_store_error_on_the_embedded_store() {
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let n = NetworkKey::new(&secret(), "default", "key:corrupt-candidate");
    let held = n.held_by(&key("someone@example.com"));
    // Entries as the embedded store encodes them: a tag, then four little-endian words.
    let entry = |tag: u8, words: [u64; 4]| {
        let mut bytes = vec![tag];
        words.iter().for_each(|w| bytes.extend_from_slice(&w.to_le_bytes()));
        bytes
    };
    let far = 1_900_000_000_000;
    for (key, what, bytes) in [
        (
            n.candidate_bucket(),
            "a bucket whose TAT is not its expiry",
            entry(6, [far, 0, 0, far + 1]),
        ),
        (n.candidate_bucket(), "a held count where a bucket belongs", entry(10, [1, 0, 0, far])),
        (held.candidate(), "a refused count past the bound", entry(10, [1, u64::MAX, 0, far])),
        (held.candidate(), "a third word", entry(10, [1, 0, 7, far])),
        (held.candidate(), "a bucket where a held count belongs", entry(6, [far, 0, 0, far])),
    ] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(ENTRIES).unwrap().insert(key.as_str(), bytes.as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
        let store = EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
        let b = Embedded { store: Arc::new(store), clock, _dir: dir };
        a_take_fails_and_writes_nothing(&b, &n, &held, what).await;
    }
}

/// `RecordAttempt`'s give-back of an attempt that compared nothing gives back that
/// attempt's own part of the candidate's held count: its candidate token when the
/// candidate's bucket took one, else its refusal, never another attempt's; a verified
/// password's give still meets a refusal first.
pub(super) async fn an_attempts_own_give_back_leaves_the_others_part(b: &dyn Backend) {
    let store = b.store();
    let enforced = BucketPolicy { capacity: 5, interval_ms: HOUR };
    let tighter = BucketPolicy { capacity: 2, interval_ms: HOUR };
    let n = NetworkKey::new(&secret(), "default", "ip:198.51.100.9/32");
    let held = n.held_by(&key("own@example.com"));
    let call = |op: NetworkOp| {
        let (store, n, held) = (store.clone(), n.clone(), held.clone());
        async move {
            let request = NetworkRequest {
                key: &n,
                op,
                policy: &enforced,
                held: Some(&held),
                candidate: Some(&tighter),
            };
            store.network(&request).await.unwrap()
        }
    };
    // Three attempts: the candidate's bucket takes two and refuses the third.
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(call(NetworkOp::Take).await.shadow);
    }
    assert_eq!(seen, [Some(true), Some(true), Some(false)]);
    // The second attempt compared nothing: its own candidate token comes back, and the
    // third's refusal stays for a verified password to meet.
    let own = call(NetworkOp::GiveOwn { candidate_took: true }).await;
    assert_eq!((own.tokens, own.shadow), (3, Some(false)));
    let verified = call(NetworkOp::GiveBack).await;
    assert_eq!(verified.shadow, Some(true), "the refusal was taken by another's give-back");
    // A refused attempt's own give-back forgets its refusal and gives the candidate
    // nothing.
    assert_eq!(call(NetworkOp::Take).await.shadow, Some(true), "one token was back");
    assert_eq!(call(NetworkOp::Take).await.shadow, Some(false));
    let refused = call(NetworkOp::GiveOwn { candidate_took: false }).await;
    assert_eq!(refused.shadow, Some(false));
    let next = call(NetworkOp::GiveBack).await;
    assert_eq!(next.shadow, Some(false), "the forgotten refusal was met again");
}

/// The operations the script refuses without their keys, the embedded store refuses
/// too.
pub(super) async fn a_give_without_its_keys_is_refused(b: &dyn Backend) {
    let store = b.store();
    let p = BucketPolicy { capacity: 3, interval_ms: HOUR };
    let n = NetworkKey::new(&secret(), "default", "key:misused");
    let held = n.held_by(&key("misused@example.com"));
    let request = |op, held, candidate| NetworkRequest { key: &n, op, policy: &p, held, candidate };
    let own = NetworkOp::GiveOwn { candidate_took: true };
    for (what, r) in [
        ("give_shadow without a candidate", request(NetworkOp::GiveShadow, None, None)),
        ("give_shadow with a held count", request(NetworkOp::GiveShadow, Some(&held), Some(&p))),
        ("an own give without a held count", request(own, None, Some(&p))),
    ] {
        assert!(store.network(&r).await.is_err(), "{what}");
    }
}
