//! A candidate's flows in shadow (docs/throttle.md, "Trying a policy in shadow") on both
//! stores: a code flow's attempt counted again on the flow's candidate record
//! (`record_attempt.lua`'s shadow), cleared with the flow's record and reporting a
//! user it would have locked out; a mail flow's send asked again of the account's
//! candidate send log in the same `send_log.lua` call (the embedded store's one
//! transaction), following the twin `throttle::send_log`; and a candidate send log a
//! daemon never wrote failing the send with nothing noted, on both stores.

use portcullis::store::attempt_count::Attempt;
use portcullis::store::network_bucket::{NetworkBucketStore, NetworkRequest};
use portcullis::store::send_log::{SendLogStore, SendOp, SendRequest};
use portcullis::throttle::flow::{CODE_RETENTION, Flow, fixed_window};
use portcullis::throttle::send_log::{CAP_WINDOW_MS, SendPolicy};

use super::send_log::{LogBackend, RESET, lives};
use super::*;

/// The candidate's caps of the mail flow: a shorter interval, a lower cap.
const CANDIDATE: SendPolicy = SendPolicy { min_interval_ms: 30_000, daily_cap: 2 };

/// A second-factor record under five a window, its candidate under three: each attempt
/// answered by both, the enforced answer unchanged; the candidate record in the flow's
/// hash tag, kept at most the candidate's retention, cleared with the flow's record; a
/// clear after an attempt only the candidate refused says so.
async fn a_code_flows_candidate_record_counts_in_shadow(b: &dyn Backend) {
    let window = Duration::from_secs(15 * 60);
    let (enforced, candidate) = (fixed_window(5, window, 100), fixed_window(3, window, 100));
    let account = key("shadow-code@example.com");
    let k = account.flow(Flow::SecondFactor);
    let shadow = k.candidate_record().unwrap();
    assert!(shadow.starts_with(&k.record()), "in the flow record's hash tag: {shadow}");
    let store = b.store();
    let attempt = Attempt::new(&k, None, &enforced).with_candidate(Some(&candidate));
    let mut answers = Vec::new();
    for _ in 0..6 {
        let counted = store.count(&attempt).await.unwrap();
        answers.push((counted.allowed, counted.shadow.map(|s| s.allowed)));
    }
    let (both, only_enforced, neither) =
        ((true, Some(true)), (true, Some(false)), (false, Some(false)));
    assert_eq!(answers, [both, both, both, only_enforced, only_enforced, neither]);
    let ttl = b.ttl_ms(&shadow).await;
    assert!(ttl.is_some_and(|t| t <= CODE_RETENTION.as_millis() as u64), "{ttl:?}");
    let inspected = store.inspect(&k, &enforced).await.unwrap();
    assert_eq!(inspected.candidate, None, "a flow's Inspect reads no candidate record");
    assert!(!store.clear(&k).await.unwrap(), "the last attempt was refused by both");
    assert_eq!(b.ttl_ms(&shadow).await, None, "cleared with the flow's record");
    for _ in 0..4 {
        store.count(&attempt).await.unwrap();
    }
    assert!(store.clear(&k).await.unwrap(), "the fourth: allowed, refused by the candidate");
    // Without a candidate nothing is counted in shadow, and the login's candidate record
    // is another key.
    let plain = store.count(&Attempt::new(&k, None, &enforced)).await.unwrap();
    assert_eq!(plain.shadow, None);
    assert_eq!(b.ttl_ms(&shadow).await, None);
    assert_eq!(b.ttl_ms(&account.candidate_record().unwrap()).await, None);
}

/// A mail flow's sends under the enforced caps and the candidate's, at chosen times,
/// answered as the twin answers each (the candidate's log keeps the sends it would have
/// allowed); a replay and a peek ask no candidate; the candidate's log lives a cap
/// window at most.
async fn a_candidate_send_log_follows_the_twin(b: &dyn LogBackend) {
    let k = key("shadow-log@example.com").flow(Flow::PasswordReset);
    let (log, shadow_log) = (k.record(), k.candidate_record().unwrap());
    let store = b.store();
    let request = |op, attempt_id| SendRequest {
        log: &k,
        attempt_id,
        policy: &RESET,
        op,
        candidate: Some(&CANDIDATE),
    };
    let peek = store.send(&request(SendOp::Peek, None)).await.unwrap();
    assert_eq!(peek.shadow, None, "a peek asks no candidate");
    assert_eq!(b.lifetime(&shadow_log).await, None, "a peek wrote a candidate log");
    let (mut enforced, mut candidate) = (Vec::new(), Vec::new());
    let mut now = 1_800_000_000_000u64;
    let mut answers = Vec::new();
    for (wait, what) in [
        (0, "the first mail"),
        (30_000, "half the enforced interval: the candidate's whole"),
        (30_000, "the enforced interval: the candidate's cap is full"),
        (60_000, "a third"),
        (60_000, "a fourth"),
        (CAP_WINDOW_MS, "a day later"),
    ] {
        b.pass(&log, wait).await;
        if !b.exact() {
            // Redis: each log's times moved back (the embedded store's clock moved once).
            b.pass(&shadow_log, wait).await;
        }
        now += wait;
        let e = RESET.send(&enforced, now);
        let c = CANDIDATE.send(&candidate, now);
        (enforced, candidate) = (e.log, c.log);
        let sent = store.send(&request(SendOp::Send, None)).await.unwrap();
        assert_eq!((sent.allowed, sent.shadow), (e.allowed, Some(c.allowed)), "{what}");
        answers.push((e.allowed, c.allowed));
    }
    let t = (true, true);
    assert_eq!(answers, [t, (false, true), (true, false), (true, false), (true, false), t]);
    let lifetime = b.lifetime(&shadow_log).await;
    assert!(lives(lifetime, CAP_WINDOW_MS), "{lifetime:?}");
    // A replayed attempt id answers its first call and asks no candidate.
    let id = k.attempt(&secret(), &id("shadow-mail"));
    let first = store.send(&request(SendOp::Send, Some(&id))).await.unwrap();
    let again = store.send(&request(SendOp::Send, Some(&id))).await.unwrap();
    assert_eq!(first.shadow, Some(false), "inside both intervals");
    assert_eq!((again.replays, again.shadow), (1, None));
}

/// `ConfirmDevice` (a step-up's verified code) clears the `second_factor` record and its
/// candidate record together, and the account's record with its own; the code's
/// candidate record said its last code was one the candidate refused, so the right
/// code is a user the candidate would have shut out.
async fn a_confirmed_device_clears_the_code_flows_candidate_record(b: &dyn Backend) {
    use portcullis::store::devices::{Confirmation, DeviceConfirmation};
    let window = Duration::from_secs(15 * 60);
    let (enforced, candidate) = (fixed_window(5, window, 100), fixed_window(3, window, 100));
    let k = key("shadow-confirm@example.com");
    let code = k.flow(Flow::SecondFactor);
    let store = b.store();
    let attempt = Attempt::new(&code, None, &enforced).with_candidate(Some(&candidate));
    for _ in 0..4 {
        store.count(&attempt).await.unwrap();
    }
    let shadow = code.candidate_record().unwrap();
    assert!(b.ttl_ms(&shadow).await.is_some(), "counted in shadow");
    let login = Attempt::new(&k, None, &enforced).with_candidate(Some(&candidate));
    store.count(&login).await.unwrap();
    let login_shadow = k.candidate_record().unwrap();
    assert!(b.ttl_ms(&login_shadow).await.is_some(), "the login counted in shadow");
    let used = k.challenge(&secret(), &[7; 16]);
    let c = DeviceConfirmation {
        account: &k,
        challenge: &used,
        challenge_epoch: 0,
        second_factor: &enforced,
        mark_ttl_ms: 20 * MIN,
        epoch_ttl_ms: 60 * MIN,
    };
    let confirmed = store.confirm_device(&c).await.unwrap();
    assert_eq!(confirmed, Confirmation::Confirmed { epoch: 0, code_candidate_refused: true });
    assert_eq!(b.ttl_ms(&shadow).await, None, "the candidate record outlived the confirm");
    assert_eq!(b.ttl_ms(&login_shadow).await, None, "the login's candidate record too");
    assert!(!store.clear(&code).await.unwrap(), "its mark went with it");
}

/// A mail request under the enforced network budget and the candidate's, through
/// `send_mail` (the embedded store's one transaction; on Redis the take, the send and a
/// give-back after the answer): each answer the enforced policy's, the candidate's
/// beside it its bucket's and its log's, and the tokens each bucket is owed back given
/// back to it alone.
async fn a_mail_requests_network_budget_is_tried_in_shadow(b: &dyn Backend) {
    use portcullis::store::network_bucket::NetworkRequest;
    use portcullis::throttle::flow::hourly_budget;
    let store = b.store();
    let ask = |who: &str, network: &'static str, budgets: (u32, u32)| {
        let store = store.clone();
        let k = key(who).flow(Flow::PasswordReset);
        async move {
            let n = NetworkKey::flow(&secret(), "default", Flow::PasswordReset, network);
            let (enforced, candidate) = (hourly_budget(budgets.0), hourly_budget(budgets.1));
            let take = NetworkRequest {
                key: &n,
                op: NetworkOp::Take,
                policy: &enforced,
                held: None,
                candidate: Some(&candidate),
            };
            let request = SendRequest {
                log: &k,
                attempt_id: None,
                policy: &RESET,
                op: SendOp::Send,
                candidate: Some(&RESET),
            };
            let mail = store.send_mail(&request, Some(&take)).await.unwrap();
            // A give-back on Redis follows the answer.
            tokio::time::sleep(Duration::from_millis(50)).await;
            (mail.network_refused, mail.sent.allowed, mail.sent.shadow)
        }
    };
    // The candidate's budget is one mail from the network, the enforced three.
    let tight = "ip:198.51.100.0/24";
    assert_eq!(ask("a@example.com", tight, (3, 1)).await, (false, true, Some(true)));
    assert_eq!(ask("b@example.com", tight, (3, 1)).await, (false, true, Some(false)), "spent");
    // Inside a's interval: the enforced log refuses and gives its token back; the
    // candidate's bucket had none to take.
    assert_eq!(ask("a@example.com", tight, (3, 1)).await, (false, false, Some(false)));
    assert_eq!(ask("c@example.com", tight, (3, 1)).await, (false, true, Some(false)));
    assert_eq!(ask("d@example.com", tight, (3, 1)).await, (true, false, Some(false)), "3 sent");
    // The candidate's budget is three, the enforced one: past the enforced budget the
    // candidate's log alone is asked, and a send it refuses gives its token back.
    let loose = "ip:203.0.113.0/24";
    assert_eq!(ask("e@example.com", loose, (1, 3)).await, (false, true, Some(true)));
    assert_eq!(ask("f@example.com", loose, (1, 3)).await, (true, false, Some(true)), "would allow");
    assert_eq!(
        ask("e@example.com", loose, (1, 3)).await,
        (true, false, Some(false)),
        "e's interval"
    );
    assert_eq!(ask("g@example.com", loose, (1, 3)).await, (true, false, Some(true)), "given back");
    assert_eq!(ask("h@example.com", loose, (1, 3)).await, (true, false, Some(false)), "spent");
    // f's mail was only the candidate's: its enforced log holds none.
    let f = key("f@example.com").flow(Flow::PasswordReset);
    let peek = SendRequest {
        log: &f,
        attempt_id: None,
        policy: &RESET,
        op: SendOp::Peek,
        candidate: None,
    };
    assert_eq!(store.send(&peek).await.unwrap().sends, 0);
}

conformance!(
    a_mail_requests_network_budget_is_tried_in_shadow,
    a_code_flows_candidate_record_counts_in_shadow,
    a_confirmed_device_clears_the_code_flows_candidate_record,
    a_candidate_send_log_follows_the_twin,
);

/// A send with a candidate over a candidate send log a daemon never wrote fails, with
/// and without an attempt id, and notes nothing: no mail in the enforced log, no
/// attempt id kept (a retry is asked afresh).
async fn every_shadowed_send_fails(store: &dyn Store, k: &AccountKey, what: &str) {
    let attempt = k.attempt(&secret(), &id("a-request-over-a-corrupt-candidate-log"));
    for attempt in [None, Some(&attempt)] {
        let request = SendRequest {
            log: k,
            attempt_id: attempt,
            policy: &RESET,
            op: SendOp::Send,
            candidate: Some(&CANDIDATE),
        };
        let r = store.send(&request).await;
        assert!(r.is_err(), "a send over {what}: {r:?}");
    }
    let peek =
        SendRequest { log: k, attempt_id: None, policy: &RESET, op: SendOp::Peek, candidate: None };
    assert_eq!(store.send(&peek).await.unwrap().sends, 0, "{what}: a mail was noted");
    let request = SendRequest {
        log: k,
        attempt_id: Some(&attempt),
        policy: &RESET,
        op: SendOp::Send,
        candidate: None,
    };
    let sent = store.send(&request).await.unwrap();
    assert_eq!((sent.allowed, sent.replays), (true, 0), "{what}: the attempt id was kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_candidate_send_log_is_a_store_error_on_redis() {
    let redis = Redis::new();
    let mut conn = redis.server.conn();
    for (n, value) in ["abc", "1,,2", "-1", "1,2", ""].into_iter().enumerate() {
        let k = key(&format!("corrupt-shadow-{n}@example.com")).flow(Flow::PasswordReset);
        let shadow = k.candidate_record().unwrap();
        let _: () = redis::cmd("SET").arg(&shadow).arg(value).query(&mut conn).unwrap();
        every_shadowed_send_fails(redis.store.as_ref(), &k, value).await;
    }
    let k = key("corrupt-shadow-hash@example.com").flow(Flow::VerificationResend);
    let shadow = k.candidate_record().unwrap();
    let _: () = redis::cmd("HSET").arg(&shadow).arg("f").arg(1).query(&mut conn).unwrap();
    every_shadowed_send_fails(redis.store.as_ref(), &k, "a hash").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_candidate_send_log_is_a_store_error_on_the_embedded_store() {
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let open = || EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
    let keys: Vec<AccountKey> = (0..2)
        .map(|n| key(&format!("corrupt-shadow-{n}@example.com")).flow(Flow::PasswordReset))
        .collect();
    drop(open());
    // Bytes no entry decodes from: a send log cut short, a record cut short.
    let corrupt: [&[u8]; 2] = [&[8, 1, 2], &[1, 0, 0]];
    {
        let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let mut table = txn.open_table(ENTRIES).unwrap();
        for (k, bytes) in keys.iter().zip(corrupt) {
            table.insert(k.candidate_record().unwrap().as_str(), bytes).unwrap();
        }
        drop(table);
        txn.commit().unwrap();
    }
    let store = Arc::new(open());
    // A whole mail request (its network's tokens, then the send, in one transaction):
    // refused with no token taken.
    let n = NetworkKey::new(&secret(), "default", "ip:198.51.100.77/32");
    let budget = BucketPolicy { capacity: 3, interval_ms: 3_600_000 };
    let take = NetworkRequest {
        key: &n,
        op: NetworkOp::Take,
        policy: &budget,
        held: None,
        candidate: Some(&budget),
    };
    let request = SendRequest {
        log: &keys[0],
        attempt_id: None,
        policy: &RESET,
        op: SendOp::Send,
        candidate: Some(&CANDIDATE),
    };
    let r = store.clone().send_mail(&request, Some(&take)).await;
    assert!(r.is_err(), "a mail request over a corrupt candidate log: {r:?}");
    let peek = NetworkRequest { op: NetworkOp::Peek, candidate: None, ..take };
    assert_eq!(store.network(&peek).await.unwrap().tokens, 3, "a token was taken");
    for (k, what) in keys.iter().zip(["a send log cut short", "a record cut short"]) {
        every_shadowed_send_fails(store.as_ref(), k, what).await;
    }
}
