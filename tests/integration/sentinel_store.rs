//! The store on a Sentinel-monitored master (`redis-sentinel`, three of them, quorum 2):
//! counting through the master the Sentinels name, and a master killed under load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::normalize::Normalization;
use portcullis::pb::Decision;
use portcullis_test_support::*;
use tonic::Code;

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
    let answered = Arc::new(AtomicU64::new(0));
    let allowed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let mut c = clients[t % clients.len()].clone();
            let (stop, answered, allowed, errors) =
                (stop.clone(), answered.clone(), allowed.clone(), errors.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match c.attempt("default", identifier).await {
                        Ok(d) => {
                            answered.fetch_add(1, Ordering::Relaxed);
                            allowed.fetch_add(u64::from(d == Decision::Allow), Ordering::Relaxed);
                        }
                        Err(status) => {
                            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            })
        })
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
    for t in tasks {
        t.await.unwrap();
    }
    let answered = answered.load(Ordering::Relaxed);
    assert_eq!(allowed.load(Ordering::Relaxed), 0, "an attempt was allowed past the limit");
    let counted = read_record(&mut group.replica.conn(), &key).unwrap().0;
    let loss = 5 + answered as i64 - counted as i64;
    eprintln!(
        "sentinel failover: {answered} attempts answered under load, {} errors, promoted \
         after {failed_over:?}; the record counts {counted} of {}: replication loss {loss}",
        errors.load(Ordering::Relaxed),
        answered + 5
    );
    // A call whose reply was lost in the failover may be counted and answered with an
    // error (a deny): counted can exceed answered by at most the errors.
    let errors = errors.load(Ordering::Relaxed);
    assert!(counted <= 5 + answered + errors, "{counted} counted for {answered} + {errors} calls");
    daemon.shutdown().await;
}
