//! The store fails: every RPC answers an error (UNAVAILABLE) within the configured
//! operation timeout, never DECISION_ALLOW. Scripts flushed or Redis restarted: the
//! next attempt counts exactly once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use portcullis::normalize::Normalization;
use portcullis::pb::{AdmitRequest, ClearAttemptsRequest, ClearReason, RecordAttemptRequest};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

/// The tests' daemons use a 300 ms operation timeout (`common::config_toml`); the
/// margin covers scheduling on a loaded 2-core machine, far below the client's 5 s deadline.
const ANSWER_WITHIN: Duration = Duration::from_millis(300 + 1200);

/// Calls all three RPCs and asserts each is UNAVAILABLE, in time.
async fn assert_every_rpc_unavailable(c: &mut Client) {
    let acct = account("default", "ivan@example.com");
    let started = Instant::now();
    let r = c.0.admit(AdmitRequest { account: acct.clone() }).await;
    assert_eq!(r.expect_err("admit answered").code(), Code::Unavailable);
    let r =
        c.0.record_attempt(RecordAttemptRequest { account: acct.clone(), attempt_id: "x".into() })
            .await;
    assert_eq!(r.expect_err("record_attempt answered").code(), Code::Unavailable);
    let req =
        ClearAttemptsRequest { account: acct, reason: ClearReason::PasswordResetCompleted as i32 };
    let r = c.0.clear_attempts(req).await;
    assert_eq!(r.expect_err("clear answered").code(), Code::Unavailable);
    assert!(started.elapsed() < 3 * ANSWER_WITHIN, "took {:?}", started.elapsed());
}

#[tokio::test]
async fn redis_stopped_means_unavailable_never_allow() {
    let mut redis = RedisServer::start();
    let daemon = Daemon::start(settings(&redis.url(), "")).await;
    let mut c = daemon.client().await;
    c.attempt("default", "ivan@example.com").await.unwrap();
    redis.stop();
    for _ in 0..3 {
        assert_every_rpc_unavailable(&mut c).await;
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn redis_refusing_connections_means_unavailable() {
    let port = free_port();
    let daemon = Daemon::start(settings(&format!("redis://127.0.0.1:{port}/"), "")).await;
    let mut c = daemon.client().await;
    assert_every_rpc_unavailable(&mut c).await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn redis_that_never_answers_times_out_as_unavailable() {
    // Accepts TCP connections (the kernel completes the handshake) and never replies.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let daemon = Daemon::start(settings(&format!("redis://127.0.0.1:{port}/"), "")).await;
    let mut c = daemon.client().await;
    assert_every_rpc_unavailable(&mut c).await;
    drop(blackhole);
    daemon.shutdown().await;
}

#[tokio::test]
async fn flushed_scripts_and_a_restarted_redis_count_the_next_attempt_once() {
    let mut redis = RedisServer::start_persistent();
    let daemon = Daemon::start(settings(&redis.url(), "")).await;
    let mut c = daemon.client().await;
    let id = "judy@example.com";
    let key = record_key("default", Normalization::Email, id);

    for _ in 0..3 {
        c.attempt("default", id).await.unwrap();
    }
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut redis.conn()).unwrap();
    c.attempt("default", id).await.unwrap();
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, 4);

    redis.restart();
    let scripts: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg("0000000000000000000000000000000000000000")
        .query(&mut redis.conn())
        .unwrap();
    assert_eq!(scripts, [false]);
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, 4, "the AOF kept the record");
    // The pool's old connections died with the server: the first call may fail (never
    // allow); whichever call succeeds first counts exactly once.
    let mut answered = false;
    for _ in 0..5 {
        match c.attempt("default", id).await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::Unavailable),
        }
    }
    assert!(answered, "the daemon did not recover after Redis restarted");
    let failures = read_record(&mut redis.conn(), &key).unwrap().0;
    assert_eq!(failures, 5, "the attempt after the restart counted {} times", failures - 4);
    daemon.shutdown().await;
}

#[tokio::test]
async fn health_follows_the_store() {
    let mut redis = RedisServer::start();
    let daemon = Daemon::start(settings(&redis.url(), "")).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .timeout(CALL_DEADLINE)
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let status = async |h: &mut HealthClient<_>| {
        let req = HealthCheckRequest { service: portcullis::SERVICE_NAME.into() };
        h.check(req).await.unwrap().into_inner().status()
    };
    let wait_for = async |h: &mut HealthClient<_>, want: ServingStatus| {
        for _ in 0..100 {
            if status(h).await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("health never became {want:?}");
    };
    wait_for(&mut health, ServingStatus::Serving).await;
    redis.stop();
    wait_for(&mut health, ServingStatus::NotServing).await;
    daemon.shutdown().await;
}
