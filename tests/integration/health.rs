//! Health of the real binary: `/healthz`, `/readyz` and `grpc.health.v1` follow the
//! store (not ready while Redis is down, ready again when it returns), and on SIGTERM
//! turn not-ready first while calls are still answered for `shutdown_delay`; then the
//! listener closes and in-flight calls finish.

use std::time::{Duration, Instant};

use portcullis_test_support::*;
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// `grpc.health.v1` status of the Governor service; an error counts as not serving.
async fn grpc_health(addr: std::net::SocketAddr) -> ServingStatus {
    let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(2))
        .connect()
        .await
    else {
        return ServingStatus::NotServing;
    };
    let request = HealthCheckRequest { service: portcullis::SERVICE_NAME.into() };
    match HealthClient::new(channel).check(request).await {
        Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => ServingStatus::Serving,
        _ => ServingStatus::NotServing,
    }
}

/// Polls until `/readyz` answers `status` and gRPC health says `grpc` (10 s at most).
async fn wait_for(d: &DaemonProcess, status: u16, grpc: ServingStatus) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, body) = http_get(d.admin_addr(), "/readyz").await.expect("/readyz answers");
        if got == status && grpc_health(d.addr).await == grpc {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {got} ({body:?}), wanted {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn readiness_follows_the_store() {
    let mut redis = RedisServer::start();
    let d = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).admin("0s").toml());
    let body = wait_for(&d, 200, ServingStatus::Serving).await;
    assert_eq!(body, "store: ok\ndraining: no\nrestart pending: none\n");
    assert_eq!(http_get(d.admin_addr(), "/healthz").await.unwrap(), (200, "ok\n".into()));

    redis.stop();
    let body = wait_for(&d, 503, ServingStatus::NotServing).await;
    assert_eq!(body, "store: not answering\ndraining: no\nrestart pending: none\n");
    // Alive all the same: liveness is the process, not the store.
    assert_eq!(http_get(d.admin_addr(), "/healthz").await.unwrap().0, 200);

    redis.restart();
    wait_for(&d, 200, ServingStatus::Serving).await;
    let mut c = d.client().await;
    assert_eq!(
        c.attempt("default", "back@example.com").await.unwrap(),
        portcullis::pb::Decision::Allow
    );
}

#[tokio::test]
async fn sigterm_turns_not_ready_then_serves_for_the_delay_then_drains() {
    let redis = RedisServer::start();
    const DELAY: Duration = Duration::from_secs(2);
    let mut d = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).admin("2s").toml());
    wait_for(&d, 200, ServingStatus::Serving).await;
    let mut before = d.client().await;
    // A comparison of about a second (cost 14), to be in flight when the delay ends.
    let slow = bcrypt::hash("right", 14).unwrap();

    let _ = std::process::Command::new("kill").arg("-TERM").arg(d.pid().to_string()).status();
    let term = Instant::now();
    let body = wait_for(&d, 503, ServingStatus::NotServing).await;
    assert_eq!(body, "store: ok\ndraining: yes\nrestart pending: none\n");
    assert!(term.elapsed() < DELAY, "not-ready came late: {:?}", term.elapsed());
    // Still serving: on an open connection and on a new one.
    use portcullis::pb::Decision::Allow;
    assert_eq!(before.attempt("default", "a@example.com").await.unwrap(), Allow);
    let mut fresh = d.client().await;
    assert_eq!(fresh.attempt("default", "b@example.com").await.unwrap(), Allow);
    assert!(term.elapsed() < DELAY, "the checks above took the whole delay");

    // A call started shortly before the delay ends is in flight while the daemon drains,
    // and finishes.
    tokio::time::sleep_until((term + DELAY - Duration::from_millis(300)).into()).await;
    let started = Instant::now();
    let answer = fresh.verify("default", "c@example.com", b"right", &slow, "k").await;
    let finished = Instant::now();
    assert!(
        finished > term + DELAY,
        "the slow call ended before the delay did ({:?} after SIGTERM): nothing was in flight",
        finished - term
    );
    assert_eq!(answer.unwrap().verdict, portcullis::pb::Verdict::Accept as i32);
    let _ = started;
    let status = d.wait_exit(Duration::from_secs(10)).await.expect("the daemon exits");
    assert!(status.success(), "{status:?}");
    let logs = d.logs();
    let not_ready = logs.find("not ready, still serving").expect("the not-ready line");
    let draining = logs.find("finishing in-flight calls").expect("the drain line");
    assert!(not_ready < draining, "{logs}");
}
