//! The gateway library's keepalive (docs/client.md, "Keepalive"): a daemon whose process
//! stops answering while its socket stays open (SIGSTOP: what a frozen host or a NAT that
//! dropped the flow looks like from the client) costs denies within each call's deadline,
//! and once a daemon answers behind the same address again the client is back on a new
//! connection, because its pings found the old one dead.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::client::{Client, ClientConfig, Decision};
use portcullis_test_support::*;
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy that sends each new connection to the upstream set last; connections
/// already open stay with the upstream they were opened to.
struct SwitchingProxy {
    addr: SocketAddr,
    upstream: Arc<Mutex<SocketAddr>>,
}

impl SwitchingProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = Arc::new(Mutex::new(upstream));
        let target = upstream.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = *target.lock().unwrap();
                tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { addr, upstream }
    }

    fn switch_to(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap() = upstream;
    }
}

/// A daemon process on an embedded store of its own.
fn daemon(dir: &tempfile::TempDir) -> DaemonProcess {
    DaemonProcess::spawn(&TestConfig::embedded(dir.path()).toml())
}

/// Admits at one fresh account until an answer is Allow, for at most `limit`; whether
/// one was.
async fn answered_within(client: &Client, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if client.admit("default", "keepalive@example.com").await.decision == Decision::Allow {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Runs the scenario with the client's keepalive settings; whether the client was back
/// within `recover` after the second daemon took the address.
async fn frozen_daemon_then_a_new_one(keepalive_time: Duration, recover: Duration) -> bool {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let frozen = daemon(&dir_a);
    let proxy = SwitchingProxy::start(frozen.addr).await;
    let call_timeout = Duration::from_millis(800);
    let client = Client::new(ClientConfig {
        endpoints: vec![format!("http://{}", proxy.addr)],
        call_timeout,
        keepalive_time,
        keepalive_timeout: Duration::from_secs(1),
        eject_for: Duration::from_millis(200),
        eject_max: Duration::from_millis(400),
        ..ClientConfig::default()
    })
    .unwrap();
    assert!(answered_within(&client, Duration::from_secs(5)).await, "the first daemon answers");

    frozen.signal("STOP");
    for _ in 0..3 {
        let started = Instant::now();
        let answer = client.admit("default", "keepalive@example.com").await;
        assert_eq!((answer.decision, answer.retryable), (Decision::Deny, true));
        // Bounded by call_timeout (the margin is for a loaded machine, not a measurement).
        assert!(
            started.elapsed() < call_timeout + Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    let fresh = daemon(&dir_b);
    proxy.switch_to(fresh.addr);
    let recovered = answered_within(&client, recover).await;
    frozen.signal("CONT");
    frozen.kill();
    fresh.kill();
    recovered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_daemon_is_denied_within_the_deadline_and_keepalive_finds_the_next() {
    // Pings every second, each given a second: the dead connection is closed within
    // about two, and the next call connects through the proxy to the new daemon.
    let recovered = frozen_daemon_then_a_new_one(Duration::from_secs(1), Duration::from_secs(15));
    assert!(recovered.await, "the client never left the frozen daemon's connection");
}

/// The control: without pings (one an hour) the client stays on the frozen daemon's
/// connection while a new daemon answers behind the same address, so the test above
/// shows keepalive's work, not a reconnect that would have happened anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keepalive_the_client_stays_on_the_dead_connection() {
    let recovered = frozen_daemon_then_a_new_one(Duration::from_secs(3600), Duration::from_secs(6));
    assert!(!recovered.await, "the client left the dead connection without keepalive");
}
