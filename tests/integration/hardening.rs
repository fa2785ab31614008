//! The listener's own limits: an oversized message or header list is refused before it
//! is decoded (nothing reaches the store, the daemon keeps serving); connections beyond
//! `server.max_connections` are closed at accept; a connection that sends nothing is
//! closed after `server.idle_timeout`; a connection that resets streams beyond
//! `server.max_client_resets_per_minute`, or sends `server.max_oversized_messages`
//! oversized messages, is closed while other connections are served, and its address
//! is refused new connections for `server.abuse_cooldown`. (Memory and
//! latency under the abusive patterns are measured by `cargo bench --bench abuse`, not
//! timed here.)

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use portcullis::config::{Config, Overrides};
use portcullis::pb::{Decision, RecordAttemptRequest};
use portcullis_test_support::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

#[tokio::test]
async fn oversized_messages_and_header_lists_are_refused_before_decoding() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra("[server]\nmax_message_kib = 16\n").settings(),
    )
    .await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    // 17 KiB of identifier: over the message limit, refused unread.
    let req = RecordAttemptRequest {
        account: account("default", &"x".repeat(17 * 1024)),
        attempt_id: String::new(),
        client_key: String::new(),
    };
    let e = c.0.record_attempt(req).await.unwrap_err();
    assert!(matches!(e.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted), "{e:?}");
    // 32 KiB of metadata: over the 16 KiB header list.
    let mut req = tonic::Request::new(RecordAttemptRequest {
        account: account("default", "h@example.com"),
        attempt_id: String::new(),
        client_key: String::new(),
    });
    req.metadata_mut().insert("x-padding", "p".repeat(32 * 1024).parse().unwrap());
    assert!(c.0.record_attempt(req).await.is_err());
    assert_eq!(dbsize(&mut conn), 0, "an oversized call reached the store");
    // The daemon keeps serving, on a new connection.
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "h@example.com").await.unwrap(), Decision::Allow);
    daemon.shutdown().await;
}

/// Reads until the peer closes (0 bytes or an error); `false` if still open after `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // The server's HTTP/2 SETTINGS frame: keep reading.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn connections_beyond_the_bound_are_closed_at_accept() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra("[server]\nmax_connections = 2\n").settings(),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(daemon.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(daemon.addr).await.unwrap();
    assert!(closed_within(&mut third, Duration::from_secs(5)).await, "a third connection stayed");
    // The held ones are still open; when one goes, its place is free again.
    assert!(!closed_within(&mut held[0], Duration::from_millis(200)).await);
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "bound@example.com").await.unwrap(), Decision::Allow);
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra("[server]\nidle_timeout = \"1s\"\n").settings(),
    )
    .await;
    // Sends nothing at all (not even the HTTP/2 preface): a slow-headers client.
    let mut silent = TcpStream::connect(daemon.addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(10)).await, "never closed");
    // A connection with calls is not idle while they run, and serves after a pause
    // shorter than the timeout.
    let mut c = daemon.client().await;
    for _ in 0..3 {
        assert_eq!(c.attempt("default", "idle@example.com").await.unwrap(), Decision::Allow);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    daemon.shutdown().await;
}

/// A new connection from this test's address (the abuser's) is closed at accept, before
/// the daemon sends a byte (its HTTP/2 SETTINGS): `server.abuse_cooldown` holds it.
async fn assert_closed_at_accept(addr: SocketAddr) {
    let mut again = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), again.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "a connection from the abuser's address was served during the cooldown: {read:?}"
    );
}

/// A raw HTTP/2 connection; the task ends when the daemon closes the connection.
async fn h2_connect(
    addr: SocketAddr,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    (client, tokio::spawn(connection))
}

/// Opens a stream and resets it at once, `n` times or until the connection fails;
/// returns how many were reset.
async fn reset_streams(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    n: usize,
) -> usize {
    for sent in 0..n {
        let Ok(ready) = client.clone().ready().await else { return sent };
        *client = ready;
        let Ok((_, mut stream)) = client.send_request(grpc_request(addr), false) else {
            return sent;
        };
        stream.send_reset(h2::Reason::CANCEL);
        tokio::task::yield_now().await;
    }
    n
}

#[tokio::test]
async fn a_connection_that_resets_streams_in_a_loop_is_closed_while_others_are_served() {
    let redis = RedisServer::start();
    // h2's own bound on pending reset streams is set out of the way: only the
    // per-connection reset budget may close the connection here.
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra("[server]\nmax_client_resets_per_minute = 50\nmax_pending_accept_reset_streams = 1000\n\
         abuse_cooldown = \"1s\"\n").settings())
    .await;
    let mut victim = daemon.client().await;
    assert_eq!(victim.attempt("default", "victim@example.com").await.unwrap(), Decision::Allow);

    // Under the budget: the connection stays open.
    let (mut calm, calm_task) = h2_connect(daemon.addr).await;
    assert_eq!(reset_streams(&mut calm, daemon.addr, 20).await, 20);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!calm_task.is_finished(), "a connection under the reset budget was closed");

    // A reset loop: closed soon after its 50th reset, long before 20,000.
    let (mut abuser, abuser_task) = h2_connect(daemon.addr).await;
    let sent = reset_streams(&mut abuser, daemon.addr, 20_000).await;
    assert!(sent < 20_000, "a connection reset 20,000 streams and stayed open");
    assert!(sent >= 50, "closed after {sent} resets, under the budget of 50");
    let ended = tokio::time::timeout(Duration::from_secs(5), abuser_task).await;
    assert!(ended.is_ok(), "the resetting connection was not closed");

    // The other connections are served throughout.
    assert!(!calm_task.is_finished());
    for i in 0..5 {
        let id = format!("victim-{i}@example.com");
        assert_eq!(victim.attempt("default", &id).await.unwrap(), Decision::Allow);
    }

    // Its address cools down: a new connection from it is closed at accept, before the
    // daemon sends a byte (its HTTP/2 SETTINGS), while the open ones go on.
    assert_closed_at_accept(daemon.addr).await;
    assert_eq!(victim.attempt("default", "victim-6@example.com").await.unwrap(), Decision::Allow);
    // After abuse_cooldown (1 s), new connections are served again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut later = daemon.client().await;
    assert_eq!(later.attempt("default", "later@example.com").await.unwrap(), Decision::Allow);
    daemon.shutdown().await;
}

/// A gRPC frame announcing (and carrying) `len` bytes of message.
fn grpc_frame(len: usize) -> Bytes {
    let mut frame = vec![0u8; 5 + len];
    frame[1..5].copy_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
    Bytes::from(frame)
}

#[tokio::test]
async fn a_connection_sending_oversized_messages_is_closed_at_the_limit() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url())
            .extra("[server]\nmax_message_kib = 16\nmax_oversized_messages = 3\n")
            .settings(),
    )
    .await;
    let mut conn = redis.conn();
    let mut victim = daemon.client().await;
    let (mut client, task) = h2_connect(daemon.addr).await;
    let mut refused = 0;
    let mut sent = 0;
    for _ in 0..10 {
        let Ok(ready) = client.clone().ready().await else { break };
        client = ready;
        let Ok((response, mut body)) = client.send_request(grpc_request(daemon.addr), false) else {
            break;
        };
        sent += 1;
        if body.send_data(grpc_frame(20 * 1024), true).is_err() {
            break;
        }
        let Ok(response) = response.await else { break };
        let code = response.headers().get("grpc-status").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(code.as_deref(), Some("11"), "an oversized message was not refused");
        refused += 1;
    }
    // The third refusal closes the connection; its answer may be lost with it.
    assert!((2..=3).contains(&refused), "{refused} refusals before the connection closed");
    assert!(sent <= 4, "{sent} oversized messages sent on one connection");
    let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(ended.is_ok(), "the connection was not closed");
    assert_eq!(dbsize(&mut conn), 0, "an oversized call reached the store");
    // Another connection is served.
    assert_eq!(victim.attempt("default", "size@example.com").await.unwrap(), Decision::Allow);
    // And the abuser's address cools down (server.abuse_cooldown, 1 s by default): a new
    // connection from it is closed before the daemon sends a byte.
    assert_closed_at_accept(daemon.addr).await;
    daemon.shutdown().await;
}

#[test]
fn abuse_limits_out_of_range_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    for (line, setting) in [
        ("max_client_resets_per_minute = 0", "server.max_client_resets_per_minute"),
        ("max_client_resets_per_minute = 100001", "server.max_client_resets_per_minute"),
        ("max_oversized_messages = 0", "server.max_oversized_messages"),
        ("max_oversized_messages = 1001", "server.max_oversized_messages"),
        ("io_threads = 0", "server.io_threads"),
        ("io_threads = 257", "server.io_threads"),
        ("abuse_cooldown = \"2h\"", "server.abuse_cooldown"),
    ] {
        std::fs::write(
            &path,
            TestConfig::redis("redis://127.0.0.1:1").extra(&format!("[server]\n{line}\n")).toml(),
        )
        .unwrap();
        let e = Config::load(Some(&path), &Overrides::default())
            .and_then(|c| c.validate(Some(SECRET.into())))
            .err()
            .unwrap_or_else(|| panic!("{line} was accepted"));
        assert!(e.to_string().contains(setting), "{line}: {e}");
    }
}
