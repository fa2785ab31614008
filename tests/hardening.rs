//! The listener's own limits: an oversized message or header list is refused before it
//! is decoded (nothing reaches the store, the daemon keeps serving); connections beyond
//! `server.max_connections` are closed at accept; a connection that sends nothing is
//! closed after `server.idle_timeout`. (Memory and latency under the abusive patterns
//! are measured by `cargo bench --bench abuse`, not timed here.)

mod common;

use std::time::Duration;

use common::*;
use portcullis::pb::{Decision, RecordAttemptRequest};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

#[tokio::test]
async fn oversized_messages_and_header_lists_are_refused_before_decoding() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(settings(&redis.url(), "[server]\nmax_message_kib = 16\n")).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    // 17 KiB of identifier: over the message limit, refused unread.
    let req = RecordAttemptRequest {
        account: account("default", &"x".repeat(17 * 1024)),
        attempt_id: String::new(),
    };
    let e = c.0.record_attempt(req).await.unwrap_err();
    assert!(matches!(e.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted), "{e:?}");
    // 32 KiB of metadata: over the 16 KiB header list.
    let mut req = tonic::Request::new(RecordAttemptRequest {
        account: account("default", "h@example.com"),
        attempt_id: String::new(),
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
    let daemon = Daemon::start(settings(&redis.url(), "[server]\nmax_connections = 2\n")).await;
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
    let daemon = Daemon::start(settings(&redis.url(), "[server]\nidle_timeout = \"1s\"\n")).await;
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
