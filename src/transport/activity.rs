//! What a call knows of its connection ([`ConnInfo`]: the peer, its certificate's
//! names, and the calls in flight on it, for the idle timeout and the count of oversized
//! messages: `server.idle_timeout`, `server.max_oversized_messages`).

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use super::cooldown::AbuseCooldown;
use super::tls::PeerIdentity;

/// What a request knows about its connection (in its extensions, from tonic).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The verified client certificate's names (mutual TLS only), judged again on every
    /// call ([`super::tls::ReloadingTls::judge`]).
    pub peer: Option<Arc<PeerIdentity>>,
    /// Calls in flight on this connection.
    pub activity: Arc<Activity>,
}

/// Calls in flight on one connection and when the last one ended, for the idle timeout;
/// its oversized messages and whether it must close (`server.max_oversized_messages`).
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `epoch` of the last call's start or end.
    last_ms: AtomicU64,
    /// Oversized messages refused on this connection.
    oversized: AtomicU32,
    max_oversized: u32,
    /// Set when the connection is to be closed; [`Conn`]'s next read fails.
    close: AtomicBool,
    /// The connection task's waker, so a connection whose client waits is closed too.
    reader: Mutex<Option<Waker>>,
    /// The client's address and the cooldown it enters when closed for abuse.
    peer: (IpAddr, Arc<AbuseCooldown>),
}

impl Activity {
    pub(super) fn new(max_oversized: u32, peer: (IpAddr, Arc<AbuseCooldown>)) -> Self {
        Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            oversized: AtomicU32::new(0),
            max_oversized,
            close: AtomicBool::new(false),
            reader: Mutex::new(None),
            peer,
        }
    }

    /// The connection is being closed for abuse: its address cools down.
    pub(super) fn closed_for_abuse(&self, reason: &'static str) {
        metrics::counter!(crate::telemetry::metrics::CONNECTIONS_CLOSED_ABUSE, "reason" => reason)
            .increment(1);
        let (ip, cooldown) = &self.peer;
        cooldown.hold(*ip);
    }

    /// Counts one message refused for its size; the refusal that reaches
    /// `server.max_oversized_messages` closes the connection.
    fn refused_oversized(&self) {
        let refused = self.oversized.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if refused == self.max_oversized {
            self.closed_for_abuse("oversized");
            tracing::debug!("connection closed: server.max_oversized_messages reached");
            self.close();
        }
    }

    /// Closes the connection at its next read.
    fn close(&self) {
        self.close.store(true, Ordering::Release);
        let reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(waker) = reader {
            waker.wake();
        }
    }

    /// Registers the connection task's waker, then tells whether it must close.
    pub(super) fn must_close(&self, cx: &Context<'_>) -> bool {
        {
            let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
            if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *reader = Some(cx.waker().clone());
            }
        }
        self.close.load(Ordering::Acquire)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Marks a call in flight until the guard drops.
    pub fn begin(self: &Arc<Self>) -> CallGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        CallGuard(self.clone())
    }

    /// When the connection will have been idle for `timeout`, or `None` while a call is
    /// in flight.
    pub(super) fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + timeout)
    }
}

/// A call in flight (see [`Activity::begin`]).
pub struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The tower layer that marks each call in flight on its connection, for the idle
/// timeout (a connection is idle only with no call in flight), and counts the
/// connection's messages refused for their size (`server.max_oversized_messages`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TrackCallsLayer;

impl<S> tower::Layer<S> for TrackCallsLayer {
    type Service = TrackCalls<S>;

    fn layer(&self, inner: S) -> TrackCalls<S> {
        TrackCalls(inner)
    }
}

/// See [`TrackCallsLayer`].
#[derive(Debug, Clone)]
pub struct TrackCalls<S>(S);

/// `grpc-status` 11, OUT_OF_RANGE, in a response's headers: tonic's refusal of a message
/// over `max_decoding_message_size`, sent before the handler runs. The daemon's own
/// handlers never answer OUT_OF_RANGE, so the code alone identifies the refusal.
fn is_oversized_refusal<RB>(response: &http::Response<RB>) -> bool {
    response.headers().get("grpc-status").is_some_and(|code| code.as_bytes() == b"11")
}

impl<S, B, RB> tower::Service<http::Request<B>> for TrackCalls<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let activity = req.extensions().get::<ConnInfo>().map(|c| c.activity.clone());
        let guard = activity.as_ref().map(Activity::begin);
        let answer = self.0.call(req);
        Box::pin(async move {
            let answer = answer.await;
            drop(guard);
            if let (Some(activity), Ok(response)) = (&activity, &answer)
                && is_oversized_refusal(response)
            {
                activity.refused_oversized();
            }
            answer
        })
    }
}
