//! The CPU budget of `Verify`: per-client waiting, bounded wait and queue, the global
//! ceiling under a flood, and slots freed when callers go away. Counts come from the
//! governor's own gauges, never from timing.

use std::time::Duration;

use portcullis::normalize::Normalization;
use portcullis::pb::{Verdict, VerifyRequest};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use tokio::task::JoinSet;
use tonic::Code;

/// Waits (bounded) until the governor is idle, then returns its stats.
async fn settled(daemon: &Daemon) -> portcullis::verify::budget::BudgetStats {
    for _ in 0..200 {
        let s = daemon.budget();
        if s.running == 0 && s.waiting == 0 && s.clients == 0 {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.budget()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_concurrent_logins_from_one_client_all_succeed() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let hash = StoredHash::generate(b"pw", &HashParams::Bcrypt { cost: 6 }).unwrap();
    let mut calls = JoinSet::new();
    for n in 0..6 {
        let mut c = daemon.client().await;
        let hash = hash.as_str().to_owned();
        calls.spawn(async move {
            c.verify("fast", &format!("tab{n}@example.com"), b"pw", &hash, "203.0.113.7").await
        });
    }
    let answers = calls.join_all().await;
    for a in &answers {
        assert_eq!(a.as_ref().map(|r| r.verdict()).ok(), Some(Verdict::Accept), "{a:?}");
    }
    let stats = settled(&daemon).await;
    assert_eq!(stats.peak_running, 1, "one client key holds one slot at a time");
    assert_eq!(stats.refused, [0, 0, 0]);
    daemon.shutdown().await;
}

/// Six parallel `Verify` calls of one browser (one client key) with the right password
/// for *one* account all accept (docs/verify.md, "Parallel logins"): each is counted
/// only after the one before was compared and cleared. With four failures already in
/// the window, the first call takes the fifth place and its clear opens the way for the
/// other five.
async fn six_parallel_valid_logins_to_one_account(daemon: Daemon) {
    let hash = StoredHash::generate(b"pw", &HashParams::Bcrypt { cost: 4 }).unwrap();
    let mut c = daemon.client().await;
    for (round, prior_failures) in [0, 4].into_iter().enumerate() {
        let id = format!("browser{round}@example.com");
        for _ in 0..prior_failures {
            let r = c.verify("fast", &id, b"typo", hash.as_str(), "203.0.113.7").await.unwrap();
            assert_eq!(r.verdict(), Verdict::Reject);
        }
        let mut calls = JoinSet::new();
        for _ in 0..6 {
            let mut c = daemon.client().await;
            let (id, hash) = (id.clone(), hash.as_str().to_owned());
            calls.spawn(async move { c.verify("fast", &id, b"pw", &hash, "203.0.113.7").await });
        }
        for a in calls.join_all().await {
            let verdict = a.as_ref().map(|r| r.verdict()).ok();
            assert_eq!(verdict, Some(Verdict::Accept), "{prior_failures} failures before: {a:?}");
        }
    }
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_parallel_valid_logins_to_one_account_all_accept_on_redis() {
    let redis = RedisServer::start();
    six_parallel_valid_logins_to_one_account(
        Daemon::start(TestConfig::redis(&redis.url()).settings()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_parallel_valid_logins_to_one_account_all_accept_on_the_embedded_store() {
    let data = tempfile::tempdir().unwrap();
    six_parallel_valid_logins_to_one_account(
        Daemon::start(TestConfig::embedded(data.path()).settings()).await,
    )
    .await;
}

/// Two comparisons at once and room for all fifteen calls in the queue.
const WIDE: &str = "[verify]\nmax_concurrent = 2\nmax_waiters = 32\n";

/// Fifteen concurrent wrong guesses at one fresh account compare at most
/// `max_failures` (5) passwords: from fifteen client keys (each counted atomically
/// before its comparison) and from one (each counted after the one before ended).
async fn fifteen_concurrent_wrong_guesses(daemon: Daemon) {
    let hash = StoredHash::generate(b"pw", &HashParams::Bcrypt { cost: 4 }).unwrap();
    for (round, one_client) in [false, true].into_iter().enumerate() {
        let before = daemon.budget().comparisons;
        let id = format!("target{round}@example.com");
        let mut calls = JoinSet::new();
        for n in 0..15 {
            let mut c = daemon.client().await;
            let (id, hash) = (id.clone(), hash.as_str().to_owned());
            let client_key =
                if one_client { "198.51.100.9".to_owned() } else { format!("10.0.0.{n}") };
            calls.spawn(async move {
                c.verify("fast", &id, format!("guess{n}").as_bytes(), &hash, &client_key).await
            });
        }
        for a in calls.join_all().await {
            assert_eq!(a.map(|r| r.verdict()).ok(), Some(Verdict::Reject));
        }
        let compared = settled(&daemon).await.comparisons - before;
        assert_eq!(compared, 5, "one client: {one_client}");
    }
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_wrong_guesses_compare_at_most_max_failures_on_redis() {
    let redis = RedisServer::start();
    fifteen_concurrent_wrong_guesses(
        Daemon::start(TestConfig::redis(&redis.url()).extra(WIDE).settings()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_wrong_guesses_compare_at_most_max_failures_on_the_embedded_store() {
    let data = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(TestConfig::embedded(data.path()).extra(WIDE).settings()).await;
    fifteen_concurrent_wrong_guesses(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_over_max_wait_is_refused_and_refunded() {
    let redis = RedisServer::start();
    let extra = "[verify]\nmax_concurrent = 1\nmax_wait = \"40ms\"\nmax_waiters = 1000\n";
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(extra).settings()).await;
    // ~15 ms a comparison, 40 calls in a row for one client: most cannot start in 40 ms.
    let hash = StoredHash::generate(b"pw", &HashParams::Bcrypt { cost: 8 }).unwrap();
    let mut calls = JoinSet::new();
    for n in 0..40 {
        let mut c = daemon.client().await;
        let hash = hash.as_str().to_owned();
        calls.spawn(async move {
            let id = format!("user{n}@example.com");
            (id.clone(), c.verify("fast", &id, b"pw", &hash, "198.51.100.1").await)
        });
    }
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for (id, answer) in calls.join_all().await {
        match answer {
            Ok(r) => {
                assert_eq!(r.verdict(), Verdict::Accept);
                accepted.push(id);
            }
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                assert!(s.message().contains("wait_timeout"), "{}", s.message());
                refused.push(id);
            }
        }
    }
    assert!(
        !accepted.is_empty() && !refused.is_empty(),
        "{} accepted, {} refused",
        accepted.len(),
        refused.len()
    );
    let stats = settled(&daemon).await;
    assert_eq!(stats.refused, [0, refused.len() as u64, 0]);
    assert_eq!(stats.comparisons, accepted.len() as u64);
    let mut conn = redis.conn();
    for id in &refused {
        // Refused before its count (waiting for its own turn) or refunded after it.
        let record = read_record(&mut conn, &record_key("fast", Normalization::Email, id));
        assert_eq!(record.map_or(0, |r| r.0), 0, "a refused attempt was left counted");
    }
    for id in &accepted {
        assert_eq!(read_record(&mut conn, &record_key("fast", Normalization::Email, id)), None);
    }
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_identifiers_never_exceeds_the_global_ceiling() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra("[verify]\nmax_concurrent = 2\n").settings(),
    )
    .await;
    let mut calls = JoinSet::new();
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(daemon.client().await);
    }
    for n in 0..64 {
        let mut c = clients[n % clients.len()].clone();
        calls.spawn(async move {
            let id = format!("made-up-{n}@example.com");
            c.verify("default", &id, b"password1", "", &format!("192.0.2.{n}")).await
        });
    }
    let (mut rejected, mut exhausted) = (0, 0);
    for answer in calls.join_all().await {
        match answer {
            Ok(r) => {
                assert_eq!(r.verdict(), Verdict::Reject);
                rejected += 1;
            }
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                exhausted += 1;
            }
        }
    }
    let stats = settled(&daemon).await;
    assert_eq!(stats.peak_running, 2, "the ceiling of 2 was exceeded or never reached");
    assert_eq!(rejected + exhausted, 64);
    assert_eq!(stats.comparisons, rejected as u64);
    // 64 callers against 2 slots and 16 queue places: most find the queue full; a
    // waiter on a loaded machine may also pass max_wait. Every refusal is counted.
    assert_eq!(stats.refused.iter().sum::<u64>(), exhausted as u64, "{stats:?}");
    assert!(stats.refused[0] > 0, "the bounded queue never filled: {stats:?}");
    // A full queue is refused before the attempt is counted: only the calls that got a
    // place left a record (compared, or refunded after a wait).
    let records: Vec<String> = redis::cmd("KEYS").arg("*:r").query(&mut redis.conn()).unwrap();
    assert_eq!(
        records.len() as u64,
        64 - stats.refused[0],
        "queue_full refusals touched the store"
    );
    daemon.shutdown().await;
}

/// One storm of 1,000 `Verify` calls that give up early, about 100 in flight, so calls
/// are cancelled both queued and hashing. Identifiers and client keys are new each
/// `round` (a network bucket drained by one round would refuse the next before hashing).
async fn cancelled_storm(clients: &[Client], round: usize) {
    let mut calls = JoinSet::new();
    for n in 0..1000 {
        let mut c = clients[n % clients.len()].clone();
        calls.spawn(async move {
            let mut req = tonic::Request::new(VerifyRequest {
                account: account("default", &format!("hurry{round}-{n}@example.com")),
                password: b"password1".to_vec(),
                stored_hash: String::new(),
                client_key: format!("client-{round}-{}", n % 50),
                attempt_id: format!("a-{round}-{n}"),
                ..Default::default()
            });
            // Most give up after 1 ms (refused in the queue, or cancelled before it); a
            // quarter wait 40 ms, so that some are cancelled while hashing.
            req.set_timeout(Duration::from_millis(if n % 4 == 0 { 40 } else { 1 }));
            c.0.verify(req).await
        });
        if calls.len() >= 100 {
            calls.join_next().await;
        }
    }
    while calls.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cancelled_calls_leave_every_slot_free() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra("[verify]\nmax_waiters = 1000\n").settings(),
    )
    .await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(daemon.client().await);
    }
    let max = daemon.verifier.budget().settings().max_concurrent;
    // A loaded machine (the whole suite in parallel) can be slow enough that no 40 ms
    // call reaches its comparison in one storm; storms repeat, bounded, until calls
    // were cancelled both while hashing and in the queue. No slot may leak after any.
    let mut stats = daemon.budget();
    for round in 0..5 {
        cancelled_storm(&clients, round).await;
        stats = settled(&daemon).await;
        assert_eq!((stats.running, stats.waiting, stats.clients), (0, 0, 0), "{stats:?}");
        assert_eq!(stats.free_slots, max, "a slot leaked: {stats:?}");
        if stats.comparisons >= 1 && stats.refused[2] >= 1 {
            break;
        }
    }
    assert!(stats.comparisons >= 1, "no call was cancelled while hashing: {stats:?}");
    assert!(stats.refused[2] >= 1, "no call was refused for its deadline: {stats:?}");
    // The daemon still works after the storm.
    let mut c = daemon.client().await;
    let r = c.verify("default", "after@example.com", b"x", "", "fresh").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Reject);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_argon2_memory_is_freed_once_the_hashing_threads_are_idle() {
    use portcullis::verify::budget::{BudgetSettings, CpuBudget, Lane};
    use portcullis::verify::hash::{Algorithm, kept_memory_kib};
    use std::sync::Arc;
    let settings = BudgetSettings {
        max_concurrent: 1,
        max_per_client: 1,
        max_wait: Duration::from_secs(5),
        max_waiters: 8,
        max_trusted_waiters: 8,
    };
    let governor = Arc::new(CpuBudget::new(settings).unwrap());
    governor.spawn_memory_release(Duration::from_millis(50));
    let params = HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: 256,
        iterations: 1,
        parallelism: 1,
    };
    let hash = StoredHash::generate(b"pw", &params).unwrap();
    // One pool thread, so every job below runs on the thread that compared.
    let run = |job: Box<dyn FnOnce() -> usize + Send>| {
        let ticket = governor.reserve("gateway", Lane::Untrusted).unwrap();
        async move { ticket.run(None, job).await.unwrap().unwrap() }
    };
    let kept = run(Box::new(move || {
        assert!(hash.matches_keeping(b"pw", 256));
        kept_memory_kib()
    }))
    .await;
    assert_eq!(kept, 256, "the comparison's memory is kept for the next one");
    // Each check is itself a job, so the release comes in a quiet period between checks.
    let mut now = kept;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = run(Box::new(kept_memory_kib)).await;
        if now == 0 {
            break;
        }
    }
    assert_eq!(now, 0, "idle hashing threads give their kept memory back");
}
