//! The store fails: every RPC answers an error (UNAVAILABLE) within the configured
//! operation timeout, never DECISION_ALLOW. Scripts flushed or Redis restarted: the
//! next attempt counts exactly once.

use std::time::{Duration, Instant};

use portcullis::normalize::Normalization;
use portcullis::pb::{AdmitRequest, ClearAttemptsRequest, ClearReason, RecordAttemptRequest};
use portcullis_test_support::*;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

/// The tests' daemons use a 300 ms operation timeout
/// (`portcullis_test_support::TestConfig::redis`); the margin covers scheduling on a
/// loaded 2-core machine, far below the client's 5 s deadline.
const ANSWER_WITHIN: Duration = Duration::from_millis(300 + 1200);

/// Calls all three RPCs and asserts each is UNAVAILABLE, in time.
async fn assert_every_rpc_unavailable(c: &mut Client) {
    let acct = account("default", "ivan@example.com");
    let started = Instant::now();
    let r = c.0.admit(AdmitRequest { account: acct.clone() }).await;
    assert_eq!(r.expect_err("admit answered").code(), Code::Unavailable);
    let r =
        c.0.record_attempt(RecordAttemptRequest {
            account: acct.clone(),
            attempt_id: "x".into(),
            client_key: String::new(),
        })
        .await;
    assert_eq!(r.expect_err("record_attempt answered").code(), Code::Unavailable);
    let req = ClearAttemptsRequest {
        account: acct,
        reason: ClearReason::PasswordResetCompleted as i32,
        client_key: String::new(),
    };
    let r = c.0.clear_attempts(req).await;
    assert_eq!(r.expect_err("clear answered").code(), Code::Unavailable);
    assert!(started.elapsed() < 3 * ANSWER_WITHIN, "took {:?}", started.elapsed());
}

#[tokio::test]
async fn redis_stopped_means_unavailable_never_allow() {
    let mut redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
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
    let daemon =
        Daemon::start(TestConfig::redis(&format!("redis://127.0.0.1:{port}/")).settings()).await;
    let mut c = daemon.client().await;
    assert_every_rpc_unavailable(&mut c).await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn redis_that_never_answers_times_out_as_unavailable() {
    // Accepts TCP connections (the kernel completes the handshake) and never replies.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let daemon =
        Daemon::start(TestConfig::redis(&format!("redis://127.0.0.1:{port}/")).settings()).await;
    let mut c = daemon.client().await;
    assert_every_rpc_unavailable(&mut c).await;
    drop(blackhole);
    daemon.shutdown().await;
}

#[tokio::test]
async fn flushed_scripts_and_a_restarted_redis_count_the_next_attempt_once() {
    let mut redis = RedisServer::start_persistent();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
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
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
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

/// The process id of `redis` (asked while it answers).
fn redis_pid(redis: &RedisServer) -> u32 {
    let mut conn = redis.conn();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    info.lines().find_map(|l| l.trim_end().strip_prefix("process_id:")?.parse().ok()).unwrap()
}

/// Sends `signal` (e.g. `-STOP`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").arg(signal).arg(pid.to_string()).status();
    assert!(status.unwrap().success(), "kill {signal} {pid}");
}

#[tokio::test]
async fn a_frozen_redis_means_unavailable_and_a_thawed_one_counts_again() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let id = "frozen@example.com";
    c.attempt("default", id).await.unwrap();
    // SIGSTOP: the sockets stay open and nothing answers, as in a long stall.
    let pid = redis_pid(&redis);
    signal(pid, "-STOP");
    for _ in 0..2 {
        assert_every_rpc_unavailable(&mut c).await;
    }
    signal(pid, "-CONT");
    let mut answered = None;
    for _ in 0..20 {
        match c.attempt("default", id).await {
            Ok(decision) => {
                answered = Some(decision);
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::Unavailable),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered.is_some(), "the daemon did not recover after Redis was thawed");
    daemon.shutdown().await;
}

/// Ids of the clients connected to `redis` other than the asking connection.
fn client_ids(conn: &mut redis::Connection) -> Vec<u64> {
    let me: u64 = redis::cmd("CLIENT").arg("ID").query(conn).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    list.lines()
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id="))?.parse().ok())
        .filter(|id| *id != me)
        .collect()
}

#[tokio::test]
async fn a_demoted_master_is_a_store_error_and_its_connection_is_dropped() {
    let redis = RedisServer::start();
    let other = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let id = "demoted@example.com";
    c.attempt("default", id).await.unwrap();
    let mut probe = redis.conn();
    let before = client_ids(&mut probe);
    assert!(!before.is_empty());

    // Demoted, as in a failover: writes answer READONLY.
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(other.port).query(&mut probe).unwrap();
    let r = c.0.record_attempt(RecordAttemptRequest {
        account: account("default", id),
        attempt_id: String::new(),
        client_key: String::new(),
    });
    assert_eq!(r.await.expect_err("a READONLY node answered").code(), Code::Unavailable);
    // The connection that saw READONLY is retired: closed, never handed out again.
    let mut dropped = false;
    for _ in 0..50 {
        let now = client_ids(&mut probe);
        if before.iter().all(|id| !now.contains(id)) {
            dropped = true;
            break;
        }
        // Later calls (errors too) must not reuse it.
        let _ = c.attempt("default", id).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(dropped, "the connection that answered READONLY is still open");

    // Promoted again: counting resumes without a restart.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut probe).unwrap();
    let mut answered = false;
    for _ in 0..20 {
        if c.attempt("default", "after@example.com").await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the daemon did not resume after the node was promoted");
    daemon.shutdown().await;
}
