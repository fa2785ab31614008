//! How long a lockout lasts, the ceiling of consecutive failures, and `ConfirmDevice`'s
//! one step, alike on both stores (docs/throttle.md, "How long a lockout lasts" and "The
//! ceiling"; docs/devices.md, "Step-up for unknown devices").

use super::*;

/// A lockout lasts at least `lockout_duration` from the attempt that shut the door,
/// however late in its window (docs/throttle.md, "How long a lockout lasts"; PCI DSS 4.0
/// 8.3.4): one failure, four more a second before the window ends, and the door stays
/// shut 15 minutes from the fifth. `Admit` and `Inspect` say the same.
pub(super) async fn lockout_lasts_lockout_duration(b: &dyn Backend) {
    let (k, p) = (key("late@example.com"), policy(false));
    let store = b.store();
    assert!(store.record_attempt(&k, None, &p).await.unwrap().allowed);
    b.advance(&k, 15 * MIN - 1000).await;
    assert_eq!(allowed(b, &k, &p, 4).await, [true; 4]);
    b.advance(&k, 2000).await;
    assert!(!store.is_open(&k, &p).await.unwrap(), "open a second after the window's end");
    let answer = portcullis::rpc::admin::inspection(&p, &store.inspect(&k, &p).await.unwrap());
    assert!((897..=899).contains(&answer.seconds_until_open), "{answer:?}");
    assert!(!store.record_attempt(&k, None, &p).await.unwrap().allowed);
    b.advance(&k, 15 * MIN - 1000).await;
    assert!(store.is_open(&k, &p).await.unwrap());
    // Then escalation as before: the next window is the second one.
    assert!(store.record_attempt(&k, None, &p).await.unwrap().allowed);
    assert_eq!(b.record(&k).await, Some((1, 1)));
}

/// The ceiling (docs/throttle.md, "The ceiling"): allowed attempts add up across
/// windows; the one that reaches it says so, every later one is refused in every later
/// window, a refund gives one back, `Inspect` shows it, and a clear ends it.
pub(super) async fn the_ceiling_holds_across_windows(b: &dyn Backend) {
    let k = key("ceiling-conformance@example.com");
    let p = Policy { max_consecutive_failures: 8, ..policy(false) };
    let store = b.store();
    let mut reached = Vec::new();
    for _ in 0..2 {
        for _ in 0..5 {
            reached.push(store.record_attempt(&k, None, &p).await.unwrap().reached_ceiling);
        }
        b.advance(&k, 60 * MIN).await;
    }
    // 5 + 3 allowed: the eighth reached the ceiling; the ninth and tenth were refused.
    assert_eq!(reached.iter().filter(|r| **r).count(), 1);
    assert!(reached[7]);
    let seen = store.inspect(&k, &p).await.unwrap();
    assert_eq!(seen.record.unwrap().consecutive, 8);
    let answer = portcullis::rpc::admin::inspection(&p, &seen);
    assert!(answer.ceiling_reached && answer.door == portcullis::pb::DoorState::Closed as i32);
    assert_eq!((answer.consecutive_failures, answer.seconds_until_open), (8, 0));
    b.advance(&k, 24 * 60 * MIN).await;
    assert!(!store.is_open(&k, &p).await.unwrap(), "the ceiling let go with time");
    let refused = store.record_attempt(&k, None, &p).await.unwrap();
    assert!(!refused.allowed && !refused.reached_ceiling);
    // A refund of a refused attempt gives back no consecutive failure: the door stays
    // shut. A refund of an allowed one gives one back.
    let ws = refused.window_start_ms;
    store.refund(&k, None, (ws, false), None).await.unwrap();
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().consecutive, 8);
    assert!(!store.is_open(&k, &p).await.unwrap(), "a refund of a refusal reopened the ceiling");
    store.record_attempt(&k, None, &p).await.unwrap();
    store.refund(&k, None, (ws, true), None).await.unwrap();
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().consecutive, 7);
    assert!(store.is_open(&k, &p).await.unwrap());
    assert!(store.record_attempt(&k, None, &p).await.unwrap().reached_ceiling);
    store.clear(&k).await.unwrap();
    assert!(store.is_open(&k, &p).await.unwrap());
    let fresh = store.record_attempt(&k, None, &p).await.unwrap();
    assert!(fresh.allowed && !fresh.reached_ceiling);
}

/// `ConfirmDevice`'s one step (docs/devices.md): a challenge confirms under the epoch it
/// was issued under, while the code step is open, once; then the login record and the
/// second_factor record are gone. A refusal writes nothing.
pub(super) async fn confirm_device_once(b: &dyn Backend) {
    use portcullis::store::devices::{Confirmation, DeviceConfirmation};
    use portcullis::throttle::flow::{Flow, fixed_window};
    let store = b.store();
    let k = key("confirm-conformance@example.com");
    let code = k.flow(Flow::SecondFactor);
    let sf = fixed_window(5, Duration::from_secs(900), 100);
    let (p, secret) = (policy(false), secret());
    let mark = |n: u8| k.challenge(&secret, &[n; 16]);
    let confirm = |used: AccountKey, epoch: u64| {
        let store = store.clone();
        let k = k.clone();
        async move {
            let c = DeviceConfirmation {
                account: &k,
                challenge: &used,
                challenge_epoch: epoch,
                second_factor: &sf,
                mark_ttl_ms: 20 * MIN,
                epoch_ttl_ms: 60 * MIN,
            };
            store.confirm_device(&c).await.unwrap()
        }
    };
    allowed(b, &k, &p, 3).await;
    for _ in 0..5 {
        store.record_attempt(&code, None, &sf).await.unwrap();
    }
    // Five wrong codes: the code step is shut, nothing is written.
    assert_eq!(confirm(mark(1), 0).await, Confirmation::CodeStepShut);
    assert_eq!(b.record(&k).await, Some((3, 0)));
    assert_eq!(b.ttl_ms(&mark(1).record()).await, None, "a refusal marked the challenge");
    b.advance(&code, 15 * MIN).await;
    // Another epoch (a revocation since the challenge): refused.
    assert_eq!(confirm(mark(1), 1).await, Confirmation::Revoked);
    // Open: confirmed once, both records gone; the same challenge again: used.
    assert_eq!(
        confirm(mark(1), 0).await,
        Confirmation::Confirmed { epoch: 0, code_candidate_refused: false }
    );
    assert_eq!(b.record(&k).await, None);
    assert_eq!(b.record(&code).await, None);
    assert!(near(b.ttl_ms(&mark(1).record()).await, 20 * MIN));
    assert_eq!(confirm(mark(1), 0).await, Confirmation::Used);
    // After a revocation, a challenge issued under the new epoch confirms.
    let epoch = store.revoke_devices(&k, 60 * MIN).await.unwrap();
    assert_eq!(confirm(mark(2), 0).await, Confirmation::Revoked);
    assert_eq!(
        confirm(mark(3), epoch).await,
        Confirmation::Confirmed { epoch, code_candidate_refused: false }
    );
}

/// A stale password (one its client was refused with in an earlier window) retried in
/// every later window is counted in each window, but adds no consecutive failure, so a
/// phone retrying an old password never reaches the ceiling (docs/throttle.md,
/// "Repeated passwords"); its refund gives none back either. A new password still does.
pub(super) async fn a_stale_password_never_reaches_the_ceiling(b: &dyn Backend) {
    use portcullis::store::attempt_count::{Attempt, RepeatClaim};
    use portcullis::store::repeat_list::RepeatNoteRequest;
    let store = b.store();
    let k = key("stale-phone@example.com");
    let p = Policy { max_consecutive_failures: 3, ..policy(false) };
    let phone = k.repeats(&secret(), "ip:203.0.113.7/32");
    let attempt = |fingerprint: u64| {
        let (store, k, phone) = (store.clone(), k.clone(), phone.clone());
        async move {
            let claim = RepeatClaim { list: &phone, fingerprint };
            let a = Attempt { repeat: Some(claim), ..Attempt::new(&k, None, &p) };
            store.count(&a).await.unwrap()
        }
    };
    let first = attempt(0xbeef).await;
    assert!(first.allowed && first.consecutive_added);
    let note = RepeatNoteRequest { bucket: &k, list: &phone, fingerprint: 0xbeef, max_len: 3 };
    store.note_repeat(&note).await.unwrap();
    for window in 0..6 {
        b.advance(&k, 60 * MIN).await;
        let again = attempt(0xbeef).await;
        assert!(again.allowed, "window {window}: the stale password was refused");
        assert!(!again.consecutive_added && !again.reached_ceiling, "window {window}");
        assert_eq!(again.failures, 1, "window {window}: counted in its window");
    }
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().consecutive, 1);
    // A new password is a new guess.
    let new = attempt(0xf00d).await;
    assert!(new.allowed && new.consecutive_added);
    assert_eq!(store.inspect(&k, &p).await.unwrap().record.unwrap().consecutive, 2);
}
