//! `[server]`: the limits of the gRPC listener, their defaults and ranges, and the
//! runtime and tonic builder they make (docs/security.md, "Limits: `[server]`").

use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::setting::{Bound, ConfigError, Problems, between, check};

/// `[server]`: limits of the gRPC listener. Defaults fit the requests this daemon takes
/// (a `Verify` request is a few kilobytes at most).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct ServerLimits {
    /// Largest request or answer message, decoded or encoded, in KiB (tonic's default is
    /// 4 MiB). Must leave room for `verify.max_password_bytes` plus 8 KiB.
    #[default(16)]
    pub max_message_kib: u32,
    /// HTTP/2 streams (calls) open at once on one connection.
    #[default(100)]
    pub max_concurrent_streams: u32,
    /// Largest HTTP/2 header list of one call, in KiB.
    #[default(16)]
    pub max_header_list_kib: u32,
    /// Open connections at once; a connection beyond is closed at accept.
    #[default(1024)]
    pub max_connections: usize,
    /// Deadline of a TLS handshake.
    #[default(Duration::from_secs(5))]
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// A connection with no call in flight for this long is closed (it also ends a
    /// client that never finishes sending its headers).
    #[default(Duration::from_secs(300))]
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest a call may take, body included: a client that opens a call and never
    /// sends its message cannot hold the stream (and its memory) longer. A caller's own
    /// `grpc-timeout` may be shorter.
    #[default(Duration::from_secs(30))]
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Interval of HTTP/2 keep-alive pings.
    #[default(Duration::from_secs(30))]
    #[serde(with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// A keep-alive ping unanswered for this long closes the connection.
    #[default(Duration::from_secs(10))]
    #[serde(with = "humantime_serde")]
    pub keepalive_timeout: Duration,
    /// HTTP/2 receive window of one stream, in KiB: how much of one request may be
    /// buffered before the client must wait.
    #[default(64)]
    pub stream_window_kib: u32,
    /// HTTP/2 receive window of one connection, in KiB.
    #[default(256)]
    pub connection_window_kib: u32,
    /// Streams a client may reset before the server has answered them, at once, before
    /// the connection is closed (the HTTP/2 rapid-reset attack, CVE-2023-44487).
    #[default(20)]
    pub max_pending_accept_reset_streams: usize,
    /// Streams one connection's client may reset (RST_STREAM frames it sends): this many
    /// at once, and this many a minute after; one more closes the connection. h2's
    /// `max_pending_accept_reset_streams` bounds only resets of streams not yet accepted,
    /// at once, which a reset loop stays under (docs/security.md, "Abusive clients: what one connection can cost").
    #[default(200)]
    pub max_client_resets_per_minute: u32,
    /// Messages over `max_message_kib` refused on one connection; the refusal that
    /// reaches this count closes the connection.
    #[default(3)]
    pub max_oversized_messages: u32,
    /// Threads that run the connections, the calls and the store's network I/O (password
    /// hashing runs apart, on the CPU budget's threads: `verify.max_concurrent`).
    /// 1, the default, runs them on one thread, which costs the least CPU per call
    /// ([`ServerLimits::runtime`]); more spread calls over more cores when one core
    /// cannot carry the call rate.
    #[default(1)]
    pub io_threads: usize,
    /// After a connection is closed for abuse (`max_client_resets_per_minute`,
    /// `max_oversized_messages`), new connections from its address are closed at accept
    /// for this long, before any TLS or HTTP/2 work: a client that reconnects at once
    /// cannot keep spending the daemon's time on the same abuse. An address that offends
    /// again right after its cooldown gets twice as long, up to 32 times this
    /// (`super::cooldown::AbuseCooldown`). Connections already open from that address are left alone.
    /// `0s` turns it off.
    #[default(Duration::from_secs(1))]
    #[serde(with = "humantime_serde")]
    pub abuse_cooldown: Duration,
}

/// Largest `server.io_threads`.
pub const MAX_IO_THREADS: usize = 256;

/// Streams the server may reset on one connection because of the client's protocol
/// errors (h2's `max_local_error_reset_streams`, its default) before it closes the
/// connection with GOAWAY `ENHANCE_YOUR_CALM`.
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

impl ServerLimits {
    /// The Tokio runtime the daemon serves on: a current-thread runtime with
    /// `io_threads = 1`, else a multi-thread one with `io_threads` workers (a value
    /// outside 1–256, which validation refuses, gives one thread).
    ///
    /// Why one thread by default: on the current-thread scheduler a task that another
    /// wakes runs after the tasks already waiting, so the answers of many calls leave in
    /// one socket write, and so do their Redis scripts. The multi-thread scheduler runs a
    /// woken task next (its LIFO slot), so each call's answer and each script is a write
    /// of its own, and its workers park and wake each other: fewer writes and less CPU
    /// per call on one thread (`cargo bench --bench throttle`; docs/performance-log.md).
    ///
    /// # Errors
    /// The I/O error of creating the runtime (its event loop or its threads).
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        match self.io_threads {
            2..=MAX_IO_THREADS => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(self.io_threads)
                .enable_all()
                .build(),
            _ => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        }
    }

    /// Largest message in bytes.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_kib as usize * 1024
    }

    /// A tonic server builder with these limits.
    pub fn builder(&self) -> tonic::transport::Server {
        tonic::transport::Server::builder()
            .max_concurrent_streams(self.max_concurrent_streams)
            .timeout(self.request_timeout)
            .http2_max_header_list_size(self.max_header_list_kib * 1024)
            .http2_keepalive_interval(Some(self.keepalive_interval))
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
            .initial_stream_window_size(self.stream_window_kib * 1024)
            .initial_connection_window_size(self.connection_window_kib * 1024)
            .http2_max_pending_accept_reset_streams(Some(self.max_pending_accept_reset_streams))
            // tonic passes `None` (no bound at all) unless told: h2's own default, 1,024
            // streams the server had to reset on the client's protocol errors, then GOAWAY
            // ENHANCE_YOUR_CALM.
            .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESET_STREAMS))
            .max_frame_size(16 * 1024)
    }
}

impl ServerLimits {
    /// Range-checks every limit. `max_password_bytes` (`verify.max_password_bytes`)
    /// sets the smallest message a `Verify` needs.
    ///
    /// # Errors
    /// [`ConfigError`] naming every setting out of its range.
    pub fn validate(&self, max_password_bytes: usize) -> Result<(), ConfigError> {
        // A Verify request carries the password plus an identifier, a hash and ids.
        let floor = u32::try_from(max_password_bytes / 1024).unwrap_or(u32::MAX).saturating_add(8);
        let mut problems = Problems::default();
        problems.note(between(
            "server.max_message_kib",
            self.max_message_kib,
            Bound::setting("verify.max_password_bytes + 8 KiB", floor),
            Bound::fixed(4096),
        ));
        problems.note(check(
            "server.max_concurrent_streams",
            self.max_concurrent_streams,
            1..=10_000,
        ));
        problems.note(check("server.max_header_list_kib", self.max_header_list_kib, 1..=1024));
        problems.note(check("server.max_connections", self.max_connections, 1..=1_000_000));
        let secs = Duration::from_secs;
        problems.note(check(
            "server.handshake_timeout",
            self.handshake_timeout,
            secs(1)..=secs(60),
        ));
        problems.note(check("server.idle_timeout", self.idle_timeout, secs(1)..=secs(86_400)));
        problems.note(check("server.request_timeout", self.request_timeout, secs(1)..=secs(300)));
        problems.note(check(
            "server.keepalive_interval",
            self.keepalive_interval,
            secs(1)..=secs(3600),
        ));
        problems.note(check(
            "server.keepalive_timeout",
            self.keepalive_timeout,
            secs(1)..=secs(600),
        ));
        // 64 KiB – 1 = HTTP/2's initial window; a smaller one slows nothing these
        // messages need, a larger one lets a client park more bytes per stream.
        problems.note(check("server.stream_window_kib", self.stream_window_kib, 16..=1024));
        problems.note(between(
            "server.connection_window_kib",
            self.connection_window_kib,
            Bound::setting("stream_window_kib", self.stream_window_kib),
            Bound::fixed(16_384),
        ));
        problems.note(check(
            "server.max_pending_accept_reset_streams",
            self.max_pending_accept_reset_streams,
            1..=1000,
        ));
        problems.note(check(
            "server.max_client_resets_per_minute",
            self.max_client_resets_per_minute,
            1..=100_000,
        ));
        problems.note(check(
            "server.max_oversized_messages",
            self.max_oversized_messages,
            1..=1000,
        ));
        problems.note(check("server.io_threads", self.io_threads, 1..=MAX_IO_THREADS));
        problems.note(check("server.abuse_cooldown", self.abuse_cooldown, secs(0)..=secs(3600)));
        problems.finish(())
    }
}
