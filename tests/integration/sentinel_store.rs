//! The store on a Sentinel-monitored master (`redis-sentinel`, three of them, quorum 2):
//! counting through the master the Sentinels name, a master killed under load, and the
//! shipped example (`deploy/config/sentinel.toml`) surviving its master.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use portcullis::normalize::Normalization;
use portcullis::pb::Decision;
use portcullis_test_support::*;
use tokio::task::JoinHandle;
use tonic::Code;

/// What one knocking caller saw.
#[derive(Default)]
struct Knocks {
    answered: u64,
    allowed: u64,
    errors: u64,
}

/// A caller that counts attempts on `identifier` until `stop`: every answer a decision or
/// `UNAVAILABLE` (then a 20 ms pause), nothing else.
fn knock(mut c: Client, identifier: &'static str, stop: Arc<AtomicBool>) -> JoinHandle<Knocks> {
    tokio::spawn(async move {
        let mut knocks = Knocks::default();
        while !stop.load(Ordering::Relaxed) {
            match c.attempt("default", identifier).await {
                Ok(d) => {
                    knocks.answered += 1;
                    knocks.allowed += u64::from(d == Decision::Allow);
                }
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    knocks.errors += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        knocks
    })
}

/// The knocks of every caller, added up.
async fn total(tasks: Vec<JoinHandle<Knocks>>) -> Knocks {
    let mut all = Knocks::default();
    for task in tasks {
        let k = task.await.unwrap();
        (all.answered, all.allowed, all.errors) =
            (all.answered + k.answered, all.allowed + k.allowed, all.errors + k.errors);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_killed_under_load_fails_over_without_an_allow_past_the_limit() {
    let mut group = SentinelGroup::start();
    let daemon = Daemon::start(TestConfig::store(&group.sentinel_toml()).settings()).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(daemon.client().await);
    }
    let identifier = "sentinel@example.com";
    let key = record_key("default", Normalization::Email, identifier);
    for _ in 0..5 {
        assert_eq!(clients[0].attempt("default", identifier).await.unwrap(), Decision::Allow);
    }
    assert_eq!(read_record(&mut group.master.conn(), &key).unwrap().0, 5);
    replicated(&group.master, &key);
    // The replica to be promoted never loaded the scripts.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut group.replica.conn()).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..16)
        .map(|t| knock(clients[t % clients.len()].clone(), identifier, stop.clone()))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_master = group.master.port;
    let killed_at = Instant::now();
    group.master.kill();

    // The Sentinels promote the replica (down-after 1 s, then the election).
    let deadline = Instant::now() + Duration::from_secs(30);
    while group.master_port() == Some(old_master) {
        assert!(Instant::now() < deadline, "the Sentinels never failed over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(group.master_port(), Some(group.replica.port));
    let failed_over = killed_at.elapsed();
    // Counting resumes on the promoted node, scripts loaded there on NOSCRIPT.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut c = clients[0].clone();
    loop {
        if let Ok(d) = c.attempt("default", "after-sentinel@example.com").await {
            assert_eq!(d, Decision::Allow);
            break;
        }
        assert!(Instant::now() < deadline, "counting did not resume after the failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let Knocks { answered, allowed, errors } = total(tasks).await;
    assert_eq!(allowed, 0, "an attempt was allowed past the limit");
    let counted = read_record(&mut group.replica.conn(), &key).unwrap().0;
    let loss = 5 + answered as i64 - counted as i64;
    eprintln!(
        "sentinel failover: {answered} attempts answered under load, {errors} errors, promoted \
         after {failed_over:?}; the record counts {counted} of {}: replication loss {loss}",
        answered + 5
    );
    // A call whose reply was lost in the failover may be counted and answered with an
    // error (a deny): counted can exceed answered by at most the errors.
    assert!(counted <= 5 + answered + errors, "{counted} counted for {answered} + {errors} calls");
    daemon.shutdown().await;
}

/// A failed-over group's master: the replica the Sentinels name now.
fn promoted(group: &SentinelGroup) -> &Node {
    let port = group.master_port().expect("the Sentinels name a master");
    group.replicas().find(|r| r.port == port).expect("a replica was promoted")
}

/// The shipped Sentinel example's store settings (`wait_replicas`, `wait_timeout`) on a
/// group with `wait_replicas + 1` replicas, as its comment asks: after `kill -9` of the
/// master, counted attempts are denied (`UNAVAILABLE`) for the failover's seconds only,
/// then served again, with no allow on a locked account and no acknowledged count lost.
/// With one replica under `wait_replicas = 1` (the example before), counting never
/// resumed: the promoted master had no replica to confirm `WAIT 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_sentinel_example_denies_only_for_the_failover_then_serves() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/config/sentinel.toml");
    let example: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    let store = example["store"].as_table().unwrap();
    let wait_replicas = store["wait_replicas"].as_integer().unwrap();
    let wait_timeout = store["wait_timeout"].as_str().unwrap();
    let pool_size = store["pool_size"].as_integer().unwrap();
    let allow_eviction = store["allow_eviction"].as_bool().unwrap();
    assert!(wait_replicas >= 1, "the example confirms each count on a replica");
    let mut group = SentinelGroup::with_replicas(usize::try_from(wait_replicas).unwrap() + 1);
    let lines = format!(
        "{}\nwait_replicas = {wait_replicas}\nwait_timeout = \"{wait_timeout}\"\n\
         pool_size = {pool_size}\nallow_eviction = {allow_eviction}",
        group.sentinel_toml()
    );
    let daemon = Daemon::start(TestConfig::store(&lines).settings()).await;
    let mut c = daemon.client().await;
    // The example's WAIT is in force: with every replica hung, no count is confirmed, and
    // each is refused (UNAVAILABLE, a deny) although the master counted it.
    for replica in group.replicas() {
        replica.freeze(true);
    }
    let unconfirmed = c.attempt("default", "unconfirmed@example.com").await;
    for replica in group.replicas() {
        replica.freeze(false);
    }
    assert_eq!(unconfirmed.unwrap_err().code(), Code::Unavailable, "a count no replica confirmed");
    let locked = "locked-sentinel@example.com";
    for _ in 0..5 {
        assert_eq!(c.attempt("default", locked).await.unwrap(), Decision::Allow);
    }
    assert_eq!(c.attempt("default", locked).await.unwrap(), Decision::Deny);

    // Eight callers keep knocking on the locked door; one prober counts a new account
    // every 20 ms and notes when each of its attempts was served or refused.
    let stop = Arc::new(AtomicBool::new(false));
    let mut knockers = Vec::new();
    for _ in 0..8 {
        knockers.push(knock(daemon.client().await, locked, stop.clone()));
    }
    let started = Instant::now();
    let prober = {
        let stop = stop.clone();
        let mut c = daemon.client().await;
        tokio::spawn(async move {
            let mut served = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let at = started.elapsed();
                match c.attempt("default", &format!("probe-{n}@example.com")).await {
                    Ok(d) => {
                        assert_eq!(d, Decision::Allow, "a new account's first attempt");
                        served.push((at, true));
                    }
                    Err(status) => {
                        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                        served.push((at, false));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            served
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_master = group.master.port;
    let killed_at = started.elapsed();
    group.master.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while group.master_port() == Some(old_master) {
        assert!(Instant::now() < deadline, "the Sentinels never failed over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The documented bound (docs/deployment.md): down-after-milliseconds plus the
    // election and the other replica's resync, a few seconds; then steady service.
    let bound = SENTINEL_DOWN_AFTER + Duration::from_secs(5);
    tokio::time::sleep(bound + Duration::from_secs(2) - (started.elapsed() - killed_at)).await;
    stop.store(true, Ordering::Relaxed);
    let knocks = total(knockers).await;
    let served = prober.await.unwrap();

    // Served again: the first attempt after the kill that opens a run of ten served ones.
    // (On a loaded machine a count can miss `wait_timeout` now and then, before the kill or
    // after: a deny, which the example accepts; the outage is what the failover adds.)
    let before = served.iter().filter(|(at, _)| *at < killed_at);
    assert!(before.clone().any(|(_, ok)| *ok), "nothing served before the kill");
    let after: Vec<_> = served.iter().filter(|(at, _)| *at >= killed_at).collect();
    assert!(after.iter().any(|(_, ok)| !ok), "no attempt was refused: the kill went unseen");
    let recovered = (0..=after.len().saturating_sub(10))
        .find(|i| after[*i..*i + 10].iter().all(|(_, ok)| *ok))
        .expect("attempts were never served again after the kill");
    let outage = after[recovered].0 - killed_at;
    let steady = &after[recovered..];
    let steady_served = steady.iter().filter(|(_, ok)| *ok).count();
    let refused = after[..recovered].iter().filter(|(_, ok)| !ok).count();
    eprintln!(
        "sentinel example ({} replicas, wait_replicas = {wait_replicas}): {refused} probe \
         attempts refused after the kill, served again {outage:?} after it; then {} of {} \
         served",
        group.replicas().count(),
        steady_served,
        steady.len()
    );
    assert!(outage <= bound, "attempts were refused {outage:?} after the kill (bound {bound:?})");
    assert!(steady.len() >= 20, "only {} attempts after the failover", steady.len());
    assert!(steady_served * 10 >= steady.len() * 9, "{steady_served} of {} served", steady.len());
    assert_eq!(knocks.allowed, 0, "the locked door opened");
    // Every answered attempt on the locked account was confirmed by a replica, so the
    // promoted one holds it: 6 before the load, then each answered knock.
    let key = record_key("default", Normalization::Email, locked);
    let counted = read_record(&mut promoted(&group).conn(), &key).unwrap().0;
    let answered = knocks.answered;
    assert!(
        counted >= 6 + answered,
        "{counted} counted, {answered} + 6 acknowledged: a lost count"
    );
    daemon.shutdown().await;
}
