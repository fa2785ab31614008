//! Repeat lists (docs/throttle.md, "Repeated passwords") on both backends: a fingerprint
//! on its client's list is forgiven only in the window it was noted in, on that list,
//! never past a closed door, never after a clear; the list keeps the newest and lives
//! with its record; a match is forgiven unseen once, then compared until a failed
//! comparison re-arms it, exactly as `portcullis::throttle::repeat_list` (the pure twin).

use portcullis::store::attempt_count::{Attempt, Counted, RepeatClaim};
use portcullis::store::keys::RepeatKey;
use portcullis::store::repeat_list::RepeatNoteRequest;
use portcullis::throttle::repeat_list::{RepeatList, RepeatMatch};

use super::*;

async fn count(b: &dyn Backend, k: &AccountKey, list: &RepeatKey, fingerprint: u64) -> Counted {
    let p = policy(false);
    let attempt =
        Attempt { repeat: Some(RepeatClaim { list, fingerprint }), ..Attempt::new(k, None, &p) };
    b.store().count(&attempt).await.unwrap()
}

pub(super) async fn repeat_lists(b: &dyn Backend) {
    let (store, p) = (b.store(), policy(false));
    let k = key("repeat@example.com");
    let phone = k.repeats(&secret(), "ip:203.0.113.7/32");
    let other = k.repeats(&secret(), "ip:198.51.100.1/32");

    // Not yet noted: counted. Noted: forgiven, allowed, not counted, the window's
    // repeats go up.
    let first = count(b, &k, &phone, 0xaa11).await;
    assert!(!first.repeat && first.allowed);
    assert_eq!(first.failures, 1);
    // No list is written by a count, and a note on a bucket without a record writes none.
    assert_eq!(b.ttl_ms(phone.as_str()).await, None, "a count wrote a repeat list");
    let absent = key("absent@example.com");
    let absent_list = absent.repeats(&secret(), "ip:203.0.113.7/32");
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &absent,
            list: &absent_list,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    assert_eq!(b.ttl_ms(absent_list.as_str()).await, None, "a note without a record wrote");
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &phone,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    let record_ttl = b.ttl_ms(&k.record()).await;
    // The list takes the record's PTTL as its PX in one script: on a loaded machine the
    // script may cross a millisecond between the two, so it may end a few ms later.
    let list_ttl = b.ttl_ms(phone.as_str()).await.map(|t| t.saturating_sub(5));
    assert!(near(list_ttl, record_ttl.unwrap()), "list outlives record");
    // The first match is forgiven unseen; the entry is then marked, and every further
    // match (no failed comparison noted in between) is a recheck: still not counted.
    for n in 1..=4 {
        let again = count(b, &k, &phone, 0xaa11).await;
        assert!(again.repeat && again.allowed, "repeat {n}");
        assert_eq!(again.recheck, n > 1, "repeat {n}");
        assert_eq!(again.failures, 1);
    }
    // The recheck's comparison failed: re-armed, forgiven unseen once more.
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &phone,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    let rearmed = count(b, &k, &phone, 0xaa11).await;
    assert!(rearmed.repeat && !rearmed.recheck, "a note did not re-arm the entry");
    assert!(count(b, &k, &phone, 0xaa11).await.recheck);
    assert_eq!(b.record(&k).await, Some((1, 0)), "a repeat was counted");
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().repeats, 6);
    // On another client's list the same fingerprint is a new guess.
    assert!(!count(b, &k, &other, 0xaa11).await.repeat);
    assert_eq!(b.record(&k).await, Some((2, 0)));

    // The list keeps the newest max_len; a noted fingerprint moves first.
    for fp in [0xbb22, 0xcc33, 0xaa11, 0xdd44] {
        store
            .note_repeat(&RepeatNoteRequest {
                bucket: &k,
                list: &phone,
                fingerprint: fp,
                max_len: 3,
            })
            .await
            .unwrap();
    }
    assert!(!count(b, &k, &phone, 0xbb22).await.repeat, "the oldest was kept");
    for fp in [0xaa11, 0xcc33, 0xdd44] {
        assert!(count(b, &k, &phone, fp).await.repeat, "{fp:x} was dropped");
    }
    assert_eq!(b.record(&k).await, Some((3, 0)));

    // Behind a closed door a repeat is refused, and still not counted.
    let closing = [0x1001, 0x1002];
    for fp in closing {
        assert!(count(b, &k, &phone, fp).await.allowed);
    }
    let behind = count(b, &k, &phone, 0xaa11).await;
    assert!(behind.repeat && !behind.allowed);
    // The entry was forgiven above (a match after its note): behind the door a recheck
    // is refused too (Verify compares nothing behind a closed door).
    assert!(behind.recheck);
    assert_eq!(b.record(&k).await, Some((5, 0)), "a repeat behind a closed door was counted");

    // A clear (an accept) forgets the list.
    store.clear(&k).await.unwrap();
    let fresh = count(b, &k, &phone, 0xaa11).await;
    assert!(!fresh.repeat);
    assert_eq!(fresh.failures, 1);

    // A new window forgets it, and its repeats.
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &phone,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    assert!(count(b, &k, &phone, 0xaa11).await.repeat);
    b.advance(&k, 15 * MIN).await;
    let later = count(b, &k, &phone, 0xaa11).await;
    assert!(!later.repeat && later.allowed);
    assert_eq!(later.failures, 1);
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().repeats, 0);
}

/// Repeats never loosen the atomic limit: 50 concurrent counts of fingerprints noted on
/// no list allow exactly `max_failures`.
pub(super) async fn concurrent_new_fingerprints_allow_max_failures(b: &dyn Backend) {
    let k = key("repeat-race@example.com");
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..50u64 {
        let (store, k) = (b.store(), k.clone());
        calls.spawn(async move {
            let list = k.repeats(&secret(), &format!("ip:203.0.113.{n}/32"));
            let p = policy(false);
            let claim = RepeatClaim { list: &list, fingerprint: 0x5000 + n };
            let attempt = Attempt { repeat: Some(claim), ..Attempt::new(&k, None, &p) };
            store.count(&attempt).await.unwrap().allowed
        });
    }
    let allowed = calls.join_all().await.into_iter().filter(|a| *a).count();
    assert_eq!(allowed, 5);
    assert_eq!(b.record(&k).await, Some((50, 0)));
}

/// The pure twin against the store: a fixed pseudo-random run of counts and notes over
/// four fingerprints, a list of 3, on one client's list; every answer (allowed,
/// failures, repeat, recheck) is what `RepeatList` and the throttle's rules predict.
pub(super) async fn repeat_lists_follow_the_twin(b: &dyn Backend) {
    let store = b.store();
    let p = policy(false);
    let k = key("twin@example.com");
    let list = k.repeats(&secret(), "ip:203.0.113.7/32");
    let mut model = RepeatList::default();
    let mut failures = 0u64;
    // xorshift64: the same run every time.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..200 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let fingerprint = 0xa000 + state % 4;
        // Notes only for a bucket with a record (the first call counts), then one in
        // three calls is a failed comparison's note; the rest are counts.
        if step > 0 && state.is_multiple_of(3) {
            store
                .note_repeat(&RepeatNoteRequest {
                    bucket: &k,
                    list: &list,
                    fingerprint,
                    max_len: 3,
                })
                .await
                .unwrap();
            model.note(fingerprint, 3);
            continue;
        }
        let got = count(b, &k, &list, fingerprint).await;
        let found = model.claim(fingerprint);
        if found.is_none() {
            failures += 1;
        }
        let allowed = match found {
            Some(_) => failures < u64::from(p.max_failures),
            None => failures <= u64::from(p.max_failures),
        };
        let want = (allowed, failures, found.is_some(), found == Some(RepeatMatch::Recheck));
        assert_eq!(
            (got.allowed, got.failures, got.repeat, got.recheck),
            want,
            "step {step}: {fingerprint:x} on {model:?}"
        );
    }
    assert!(failures > 5, "the run never closed the door");
}

/// The list as `record_attempt.lua` and `repeat_list.lua` document it: "<ws>|,<fp>[*],…,"
/// newest first, '*' on an entry forgiven once (the scripts' worked examples).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_list_marks_a_forgiven_entry_on_redis() {
    let redis = Redis::new();
    let store = redis.store();
    let mut conn = redis.server.conn();
    let k = key("format@example.com");
    let list = k.repeats(&secret(), "ip:203.0.113.7/32");
    let p = policy(false);
    store.count(&Attempt::new(&k, None, &p)).await.unwrap();
    let ws = store.inspect(&k, &p).await.unwrap().record.unwrap().window_start_ms;
    let mut text = || -> String { redis::cmd("GET").arg(list.as_str()).query(&mut conn).unwrap() };
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &list,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &list,
            fingerprint: 0xbb22,
            max_len: 3,
        })
        .await
        .unwrap();
    assert_eq!(text(), format!("{ws}|,bb22,aa11,"));
    let claim = |fingerprint| Attempt {
        repeat: Some(RepeatClaim { list: &list, fingerprint }),
        ..Attempt::new(&k, None, &p)
    };
    let forgiven = store.count(&claim(0xaa11)).await.unwrap();
    assert!(forgiven.repeat && !forgiven.recheck);
    assert_eq!(text(), format!("{ws}|,aa11*,bb22,"));
    let again = store.count(&claim(0xaa11)).await.unwrap();
    assert!(again.repeat && again.recheck);
    assert_eq!(text(), format!("{ws}|,aa11*,bb22,"), "a recheck wrote the list");
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &list,
            fingerprint: 0xcc33,
            max_len: 3,
        })
        .await
        .unwrap();
    assert_eq!(text(), format!("{ws}|,cc33,aa11*,bb22,"), "a note dropped a mark");
    store
        .note_repeat(&RepeatNoteRequest {
            bucket: &k,
            list: &list,
            fingerprint: 0xaa11,
            max_len: 3,
        })
        .await
        .unwrap();
    assert_eq!(text(), format!("{ws}|,aa11,cc33,bb22,"), "a note did not re-arm");
}
