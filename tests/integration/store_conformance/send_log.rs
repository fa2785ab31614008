//! The mail flows' send log (`send_log.lua`; the embedded store's `send`; the twin
//! `throttle::send_log`) on both stores: one sequence of sends and peeks at chosen times
//! answered as the pure rule answers it (the interval, the cap over any 24 h, a refusal
//! or a peek that writes nothing, a cap lowered or raised under a full log), attempt ids
//! noting one mail, concurrent sends noting one; and send logs a daemon never writes
//! read as store errors on both.
//!
//! Time: the embedded store's clock is the test's; on Redis, whose clock is `TIME`, a
//! log's times (and its expiry) are moved back instead, and Redis is ahead of the twin by
//! what the test took (its waits are at most the twin's, and within [`SLACK_MS`] of it).

use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::send_log::SendLogStore;
use portcullis::store::send_log::{SendOp, SendRequest, Sent};
use portcullis::throttle::flow::Flow;
use portcullis::throttle::send_log::{self, CAP_WINDOW_MS, SendPolicy};

use super::*;

/// How far Redis's clock may run ahead of the twin's over one test.
const SLACK_MS: u64 = 5_000;

pub(super) const RESET: SendPolicy = SendPolicy { min_interval_ms: 60_000, daily_cap: 5 };

/// What the suite needs from a backend to move a send log through time.
#[async_trait]
pub(super) trait LogBackend: Send + Sync {
    fn store(&self) -> Arc<dyn Store>;
    /// As if `ms` passed for the send log at `log` (a store key).
    async fn pass(&self, log: &str, ms: u64);
    /// How long `key` lives from now, in ms; `None` without one.
    async fn lifetime(&self, key: &str) -> Option<u64>;
    /// Whether the store's clock is the test's (answers exact), not Redis's `TIME`.
    fn exact(&self) -> bool;
}

#[async_trait]
impl LogBackend for Embedded {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn pass(&self, _: &str, ms: u64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }
    async fn lifetime(&self, key: &str) -> Option<u64> {
        Backend::ttl_ms(self, key).await
    }
    fn exact(&self) -> bool {
        true
    }
}

#[async_trait]
impl LogBackend for Redis {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn pass(&self, log: &str, ms: u64) {
        let mut conn = self.server.conn();
        let held: Option<String> = redis::cmd("GET").arg(log).query(&mut conn).unwrap();
        let Some(held) = held else { return };
        let ttl: i64 = redis::cmd("PTTL").arg(log).query(&mut conn).unwrap();
        let ttl = u64::try_from(ttl).expect("a send log expires");
        if ttl <= ms {
            let _: () = redis::cmd("DEL").arg(log).query(&mut conn).unwrap();
            return;
        }
        let aged: Vec<u64> = send_log::parse(&held).unwrap().iter().map(|t| t - ms).collect();
        let _: () = redis::cmd("SET")
            .arg(log)
            .arg(send_log::text(&aged))
            .arg("PX")
            .arg(ttl - ms)
            .query(&mut conn)
            .unwrap();
    }
    async fn lifetime(&self, key: &str) -> Option<u64> {
        Backend::ttl_ms(self, key).await
    }
    fn exact(&self) -> bool {
        false
    }
}

/// The twin's side: a log and its clock.
struct Twin {
    log: Vec<u64>,
    now: u64,
}

/// One call on the backend and on the twin, at the twin's time, under `policy`: the
/// answers must agree.
async fn step(b: &dyn LogBackend, twin: &mut Twin, policy: &SendPolicy, op: SendOp, what: &str) {
    let k = key("send-log@example.com").flow(Flow::PasswordReset);
    let request = SendRequest { log: &k, attempt_id: None, policy, op, candidate: None };
    let got = b.store().send(&request).await.unwrap();
    let (allowed, log) = match op {
        SendOp::Send => {
            let outcome = policy.send(&twin.log, twin.now);
            twin.log = outcome.log.clone();
            (outcome.allowed, outcome.log)
        }
        SendOp::Peek => {
            let live = send_log::live(&twin.log, twin.now);
            (policy.next_in_ms(&live, twin.now) == 0, live)
        }
        SendOp::Shadow => unreachable!("a step asks no candidate"),
    };
    let wait = policy.next_in_ms(&log, twin.now);
    let want = Sent {
        allowed,
        sends: u32::try_from(log.len()).unwrap(),
        next_in_ms: wait,
        replays: 0,
        shadow: None,
    };
    if b.exact() {
        assert_eq!(got, want, "{what}");
    } else {
        assert_eq!((got.allowed, got.sends, got.replays), (allowed, want.sends, 0), "{what}");
        let close = got.next_in_ms <= wait && got.next_in_ms + SLACK_MS >= wait;
        assert!(close, "{what}: waits {} ms, the twin {wait} ms", got.next_in_ms);
    }
}

/// At most `want` ms and within [`SLACK_MS`] of it.
pub(super) fn lives(ttl: Option<u64>, want: u64) -> bool {
    ttl.is_some_and(|t| t <= want && t + SLACK_MS >= want)
}

async fn send_log_follows_the_twin(b: &dyn LogBackend) {
    let log = key("send-log@example.com").flow(Flow::PasswordReset).record();
    let mut twin = Twin { log: Vec::new(), now: 1_800_000_000_000 };
    let pass = async |twin: &mut Twin, ms: u64| {
        b.pass(&log, ms).await;
        twin.now += ms;
    };
    step(b, &mut twin, &RESET, SendOp::Peek, "a peek at no log").await;
    assert_eq!(b.lifetime(&log).await, None, "a peek wrote a log");
    step(b, &mut twin, &RESET, SendOp::Send, "the first mail").await;
    assert!(lives(b.lifetime(&log).await, CAP_WINDOW_MS), "{:?}", b.lifetime(&log).await);
    pass(&mut twin, 1_000).await;
    step(b, &mut twin, &RESET, SendOp::Send, "a second later").await;
    step(b, &mut twin, &RESET, SendOp::Peek, "a peek a second later").await;
    let lifetime = b.lifetime(&log).await;
    assert!(lives(lifetime, CAP_WINDOW_MS - 1_000), "a refusal wrote: {lifetime:?}");
    pass(&mut twin, 59_000).await;
    step(b, &mut twin, &RESET, SendOp::Send, "the interval later").await;
    for n in 3..=5 {
        pass(&mut twin, 60_000).await;
        step(b, &mut twin, &RESET, SendOp::Send, &format!("mail {n}")).await;
    }
    pass(&mut twin, 3_600_000).await;
    step(b, &mut twin, &RESET, SendOp::Send, "a sixth in 24 h").await;
    step(b, &mut twin, &RESET, SendOp::Peek, "a peek at a full log").await;
    // A cap lowered under a full log (a new configuration): refused, the log as it is.
    let lowered = SendPolicy { daily_cap: 2, ..RESET };
    step(b, &mut twin, &lowered, SendOp::Peek, "a peek, the cap lowered").await;
    step(b, &mut twin, &lowered, SendOp::Send, "a mail, the cap lowered").await;
    // A cap raised: a sixth fits, the interval still holds.
    let raised = SendPolicy { daily_cap: 7, ..RESET };
    step(b, &mut twin, &raised, SendOp::Send, "a sixth, the cap raised").await;
    step(b, &mut twin, &raised, SendOp::Send, "at once, the cap raised").await;
    // Back to five, six in the log: none fits until two have left the window, each
    // 24 h after it was sent.
    step(b, &mut twin, &RESET, SendOp::Peek, "six sent, the cap five").await;
    let first_left = twin.log.last().unwrap() + CAP_WINDOW_MS - twin.now;
    pass(&mut twin, first_left).await;
    step(b, &mut twin, &RESET, SendOp::Send, "the first mail's 24 h over").await;
    pass(&mut twin, 60_000).await;
    step(b, &mut twin, &RESET, SendOp::Send, "the second mail's 24 h over").await;
    pass(&mut twin, 30_000).await;
    step(b, &mut twin, &RESET, SendOp::Send, "half an interval later").await;
    // A day without a mail: nothing is left.
    pass(&mut twin, CAP_WINDOW_MS).await;
    step(b, &mut twin, &RESET, SendOp::Peek, "a day later").await;
    step(b, &mut twin, &RESET, SendOp::Send, "a mail a day later").await;
}

/// A request's attempt id notes one mail: a retry gets the first answer (and its replay
/// count), whether that was a mail or a refusal, and notes nothing.
async fn attempt_ids_note_one_mail(b: &dyn LogBackend) {
    let store = b.store();
    let k = key("send-ids@example.com").flow(Flow::VerificationResend);
    let send = |attempt: Option<&str>, op: SendOp| {
        let (store, k) = (store.clone(), k.clone());
        let attempt = attempt.map(|a| k.attempt(&secret(), &id(a)));
        async move {
            let request = SendRequest {
                log: &k,
                attempt_id: attempt.as_ref(),
                policy: &RESET,
                op,
                candidate: None,
            };
            let sent = store.send(&request).await.unwrap();
            (sent.allowed, sent.replays)
        }
    };
    assert_eq!(send(Some("mail-1"), SendOp::Send).await, (true, 0));
    for n in 1..=3 {
        assert_eq!(send(Some("mail-1"), SendOp::Send).await, (true, n), "retry {n}");
    }
    assert_eq!(send(Some("mail-2"), SendOp::Send).await, (false, 0));
    assert_eq!(send(Some("mail-2"), SendOp::Send).await, (false, 1));
    let peek = SendRequest {
        log: &k,
        attempt_id: None,
        policy: &RESET,
        op: SendOp::Peek,
        candidate: None,
    };
    assert_eq!(store.send(&peek).await.unwrap().sends, 1, "a retry noted a mail");
    // A peek never reads nor writes an attempt id.
    assert_eq!(send(Some("mail-3"), SendOp::Peek).await, (false, 0));
    assert_eq!(send(Some("mail-3"), SendOp::Send).await, (false, 0));
}

/// Concurrent requests to one account's fresh log: one mail.
async fn concurrent_sends_note_one_mail(b: &dyn LogBackend) {
    let k = key("send-race@example.com").flow(Flow::PasswordReset);
    let sends = (0..30).map(|_| {
        let (store, k) = (b.store(), k.clone());
        tokio::spawn(async move {
            let request = SendRequest {
                log: &k,
                attempt_id: None,
                policy: &RESET,
                op: SendOp::Send,
                candidate: None,
            };
            store.send(&request).await.unwrap().allowed
        })
    });
    let mut allowed = 0;
    for s in sends {
        allowed += usize::from(s.await.unwrap());
    }
    assert_eq!(allowed, 1);
}

// The parent's `conformance!`: each case on both stores.
conformance!(send_log_follows_the_twin, attempt_ids_note_one_mail, concurrent_sends_note_one_mail);

/// Both operations on a send log fail, with and without an attempt id.
async fn every_send_fails(store: &dyn Store, k: &AccountKey, what: &str) {
    let attempt = k.attempt(&secret(), &id("a-request-over-a-corrupt-log"));
    for (op, attempt) in
        [(SendOp::Send, None), (SendOp::Send, Some(&attempt)), (SendOp::Peek, None)]
    {
        let request =
            SendRequest { log: k, attempt_id: attempt, policy: &RESET, op, candidate: None };
        let r = store.send(&request).await;
        assert!(r.is_err(), "{op:?} over {what}: {r:?}");
    }
}

/// Send logs a daemon never writes, by hand at the key: every send and peek is a store
/// error (a deny), never an answer; a log that is well formed is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_logs_a_daemon_never_writes_are_store_errors_on_redis() {
    let redis = Redis::new();
    let store = redis.store.clone();
    let mut conn = redis.server.conn();
    let k = key("corrupt-log@example.com").flow(Flow::PasswordReset);
    let t = 1_800_000_000_000u64;
    let mut bad: Vec<String> = [
        "abc",
        "1,2",
        "1,,2",
        ",1",
        "1,",
        "-1",
        "1.5",
        "1e5",
        " 1",
        "1 ,0",
        "0x10",
        "999999999999999",
        "1234567890123456",
        "nan",
        "inf",
        "",
    ]
    .map(String::from)
    .into();
    bad.push(format!("{},{t}", t - 1));
    bad.push(send_log::text(&vec![t; 51]));
    for value in &bad {
        let _: () = redis::cmd("SET").arg(k.record()).arg(value).query(&mut conn).unwrap();
        every_send_fails(store.as_ref(), &k, value).await;
    }
    let _: () = redis::cmd("DEL").arg(k.record()).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET").arg(k.record()).arg("f").arg(1).query(&mut conn).unwrap();
    every_send_fails(store.as_ref(), &k, "a hash").await;
    // Well-formed logs written by hand are read: 50 sends of 2020, and three of the last
    // minute, newest first.
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = s * 1000 + us / 1000;
    let mut peek = async |log: &[u64]| {
        let _: () =
            redis::cmd("SET").arg(k.record()).arg(send_log::text(log)).query(&mut conn).unwrap();
        let request = SendRequest {
            log: &k,
            attempt_id: None,
            policy: &RESET,
            op: SendOp::Peek,
            candidate: None,
        };
        let sent = store.send(&request).await.unwrap();
        (sent.allowed, sent.sends)
    };
    let old: Vec<u64> = (0..50).map(|i| 1_600_000_000_000 - i).collect();
    assert_eq!(peek(&old).await, (true, 0), "sends of 2020");
    assert_eq!(peek(&[now - 1_000, now - 2_000, now - 3_000]).await, (false, 3));
    // A code flow's record holding a send log is an error too.
    let code = key("corrupt-log@example.com").flow(Flow::SecondFactor);
    let _: () = redis::cmd("SET").arg(code.record()).arg(t).query(&mut conn).unwrap();
    assert!(store.record_attempt(&code, None, &policy(true)).await.is_err());
}

/// The same on the embedded store: entries written into its file by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_logs_a_daemon_never_writes_are_store_errors_on_the_embedded_store() {
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let dir = tempfile::tempdir().unwrap();
    let t = 1_800_000_000_000u64;
    let clock = Arc::new(ManualClock(AtomicU64::new(t)));
    let open = || EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
    let write = |key: &str, bytes: &[u8]| {
        let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(ENTRIES).unwrap().insert(key, bytes).unwrap();
        txn.commit().unwrap();
    };
    // A send log as the embedded store encodes it: tag 8, the count, two zero words,
    // the expiry, then the times; `tail` stray bytes after them.
    let sends = |count: u64, times: &[u64], tail: usize| {
        let mut bytes = vec![8u8];
        for word in [count, 0, 0, u64::MAX / 2].iter().chain(times) {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend(std::iter::repeat_n(0, tail));
        bytes
    };
    let k = key("corrupt-log@example.com").flow(Flow::PasswordReset);
    {
        let store = open();
        let request = SendRequest {
            log: &k,
            attempt_id: None,
            policy: &RESET,
            op: SendOp::Send,
            candidate: None,
        };
        assert!(store.send(&request).await.unwrap().allowed);
    }
    let mut record = vec![1u8];
    for word in [1, t, 0, u64::MAX / 2] {
        record.extend_from_slice(&word.to_le_bytes());
    }
    let corrupt = [
        ("a count that is not the times'", sends(3, &[t, t - 1], 0)),
        ("times increasing", sends(2, &[t - 1, t], 0)),
        ("a time past the year 5138", sends(1, &[u64::MAX], 0)),
        ("51 times", sends(51, &[t; 51], 0)),
        ("a torn time", sends(1, &[t], 3)),
        ("truncated", vec![8u8, 1, 2]),
        ("a login record", record),
    ];
    for (what, bytes) in &corrupt {
        write(&k.record(), bytes);
        every_send_fails(&open(), &k, what).await;
    }
    // The encoding above is the store's: a well-formed entry is read.
    write(&k.record(), &sends(2, &[t - 60_000, t - 120_000], 0));
    let request = SendRequest {
        log: &k,
        attempt_id: None,
        policy: &RESET,
        op: SendOp::Peek,
        candidate: None,
    };
    let peek = open().send(&request).await.unwrap();
    assert_eq!((peek.allowed, peek.sends), (true, 2));
    // A code flow's record holding a send log is an error too.
    let code = key("corrupt-log@example.com").flow(Flow::SecondFactor);
    write(&code.record(), &sends(1, &[t], 0));
    assert!(open().record_attempt(&code, None, &policy(true)).await.is_err());
}
