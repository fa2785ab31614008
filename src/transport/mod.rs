//! The gRPC listener's connections (docs/security.md): TLS or plain
//! TCP, a bound on open connections, a handshake deadline, an idle timeout, and the
//! HTTP/2 limits of `[server]`.
//!
//! [`Incoming`] accepts on the bound listener, handshakes TLS in a task per connection
//! (so one slow handshake never holds up the others), and hands tonic finished
//! [`Conn`]s. Each `Conn` carries a [`ConnInfo`] (peer identity, activity) that tonic
//! puts into every request's extensions, where `crate::auth` reads it.

pub mod limits;
pub mod tls;

pub use limits::{MAX_IO_THREADS, ServerLimits};

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tonic::transport::server::Connected;

use tls::{PeerIdentity, ReloadingTls};

/// Most addresses held in an [`AbuseCooldown`] at once; past it, forgotten ones are
/// dropped, and while it stays full a new address is not held (the per-connection
/// limits still apply to it).
const MAX_COOLING_ADDRESSES: usize = 65_536;

/// Most doublings of the cooldown for an address that keeps offending: 2^5 = 32 times
/// `server.abuse_cooldown`.
const MAX_COOLDOWN_DOUBLINGS: u32 = 5;

/// Addresses whose connection was closed for abuse, each with the time until which new
/// connections from it are closed at accept (`server.abuse_cooldown`). An IPv6 address
/// counts by its /64 network, which one host is usually given whole. An address closed
/// for abuse again within one cooldown's length after its last cooldown ended gets twice
/// the last cooldown, up to 32 times the setting: a client that resumes its abuse at
/// every cooldown's end comes back ever more rarely. One clean cooldown's length forgets
/// it.
pub struct AbuseCooldown {
    period: Duration,
    held: Mutex<HashMap<IpAddr, Hold>>,
}

/// The period and how many addresses are held, never the addresses.
impl std::fmt::Debug for AbuseCooldown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().map_or(0, |held| held.len());
        f.debug_struct("AbuseCooldown").field("period", &self.period).field("held", &held).finish()
    }
}

/// The key of `ip` in an [`AbuseCooldown`]: an IPv4 address (IPv4-mapped IPv6 included)
/// as it is, an IPv6 address as its /64 network.
fn cooldown_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// One address's cooldown.
#[derive(Debug, Clone, Copy)]
struct Hold {
    /// New connections are refused until then.
    until: Instant,
    /// Length of this cooldown: `period` × 2^doublings.
    length: Duration,
    doublings: u32,
}

impl Hold {
    /// Whether the address is remembered at `now`: cooling down, or within one
    /// cooldown's length after.
    fn remembered(&self, now: Instant) -> bool {
        now < self.until + self.length
    }
}

impl AbuseCooldown {
    /// A cooldown of `period` (zero: none).
    pub fn new(period: Duration) -> Self {
        Self { period, held: Mutex::new(HashMap::new()) }
    }

    /// Holds `ip`: one connection from it was closed for abuse.
    fn hold(&self, ip: IpAddr) {
        self.hold_at(ip, Instant::now());
    }

    fn hold_at(&self, ip: IpAddr, now: Instant) {
        if self.period.is_zero() {
            return;
        }
        let ip = cooldown_key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let doublings = match held.get(&ip) {
            // Another connection of the same client, closed during its cooldown (it
            // opened before): the same offence.
            Some(last) if now < last.until => return,
            Some(last) if last.remembered(now) => (last.doublings + 1).min(MAX_COOLDOWN_DOUBLINGS),
            _ => 0,
        };
        if !held.contains_key(&ip) && held.len() >= MAX_COOLING_ADDRESSES {
            held.retain(|_, h| h.remembered(now));
            if held.len() >= MAX_COOLING_ADDRESSES {
                return;
            }
        }
        let length = self.period * 2u32.pow(doublings);
        held.insert(ip, Hold { until: now + length, length, doublings });
    }

    /// Whether a new connection from `ip` is to be closed at accept.
    fn refuses(&self, ip: IpAddr) -> bool {
        self.refuses_at(ip, Instant::now())
    }

    fn refuses_at(&self, ip: IpAddr, now: Instant) -> bool {
        if self.period.is_zero() {
            return false;
        }
        let ip = cooldown_key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        match held.get(&ip) {
            Some(h) if now < h.until => true,
            Some(h) if !h.remembered(now) => {
                held.remove(&ip);
                false
            }
            _ => false,
        }
    }
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
    fn new(max_oversized: u32, peer: (IpAddr, Arc<AbuseCooldown>)) -> Self {
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
    fn closed_for_abuse(&self, reason: &'static str) {
        metrics::counter!("portcullis_connections_closed_abuse_total", "reason" => reason)
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
    fn must_close(&self, cx: &Context<'_>) -> bool {
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
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
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

/// What a request knows about its connection (in its extensions, from tonic).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The verified client certificate's names (mutual TLS only), judged again on every
    /// call ([`tls::ReloadingTls::judge`]).
    pub peer: Option<Arc<PeerIdentity>>,
    /// Calls in flight on this connection.
    pub activity: Arc<Activity>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Finds the RST_STREAM frames in what a client sends: skips the client preface, then
/// reads each frame's 9-byte header (RFC 9113 §4.1) and skips its payload. h2 counts a
/// client's resets only while the reset streams wait to be accepted; this counts all.
struct FrameScan {
    /// Bytes still to skip: the preface, then the current frame's payload.
    skip: usize,
    head: [u8; 9],
    head_len: usize,
}

impl FrameScan {
    const PREFACE_LEN: usize = 24;
    const RST_STREAM: u8 = 0x3;

    fn new() -> Self {
        Self { skip: Self::PREFACE_LEN, head: [0; 9], head_len: 0 }
    }

    /// RST_STREAM frames whose header ends in `bytes`.
    fn resets(&mut self, mut bytes: &[u8]) -> u32 {
        let mut resets = 0;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.head.len() - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == self.head.len() {
                let [a, b, c, kind, ..] = self.head;
                if kind == Self::RST_STREAM {
                    resets += 1;
                }
                self.skip = u32::from_be_bytes([0, a, b, c]) as usize;
                self.head_len = 0;
            }
        }
        resets
    }
}

/// `server.max_client_resets_per_minute` as a token bucket: the limit at once, refilled
/// at the limit per minute.
struct ResetBudget {
    per_minute: f64,
    left: f64,
    at: Instant,
}

impl ResetBudget {
    fn new(per_minute: u32) -> Self {
        let per_minute = f64::from(per_minute);
        Self { per_minute, left: per_minute, at: Instant::now() }
    }

    /// Spends `resets`; `false` once the budget is overdrawn.
    fn spend(&mut self, resets: u32) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_minute / 60.0;
        self.left = (self.left + refill).min(self.per_minute) - f64::from(resets);
        self.at = now;
        self.left >= 0.0
    }
}

/// One accepted connection: holds its place under `max_connections` until it closes,
/// and ends itself (an I/O error hyper closes on) after `idle_timeout` without a call,
/// when its client resets streams beyond `max_client_resets_per_minute`, or at its
/// `max_oversized_messages`th oversized message.
pub struct Conn {
    stream: Stream,
    info: ConnInfo,
    idle_timeout: Duration,
    idle: Pin<Box<tokio::time::Sleep>>,
    frames: FrameScan,
    resets: ResetBudget,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl Conn {
    /// Polls the idle timer; `Err` when the connection has been idle too long.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        while self.idle.as_mut().poll(cx).is_ready() {
            match self.info.activity.idle_deadline(self.idle_timeout) {
                Some(at) if at <= Instant::now() => {
                    metrics::counter!("portcullis_connections_closed_idle_total").increment(1);
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout"));
                }
                Some(at) => self.idle.as_mut().reset(at.into()),
                // A call in flight: look again one timeout later.
                None => self.idle.as_mut().reset((Instant::now() + self.idle_timeout).into()),
            }
        }
        Ok(())
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Err(e) = this.check_idle(cx) {
            return Poll::Ready(Err(e));
        }
        if this.info.activity.must_close(cx) {
            return Poll::Ready(Err(io::Error::other("connection closed by the daemon")));
        }
        let before = buf.filled().len();
        let read = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if let Poll::Ready(Ok(())) = read {
            let resets = this.frames.resets(&buf.filled()[before..]);
            if resets > 0 && !this.resets.spend(resets) {
                this.info.activity.closed_for_abuse("resets");
                tracing::debug!("connection closed: server.max_client_resets_per_minute reached");
                return Poll::Ready(Err(io::Error::other("too many stream resets")));
            }
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// The stream of connections tonic serves: accepted, under the bound, handshaken.
pub type Incoming = tokio_stream::wrappers::ReceiverStream<io::Result<Conn>>;

/// Accepts on `listener` until the returned stream is dropped (tonic drops it when it
/// stops accepting at shutdown).
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ReloadingTls>>,
    limits: ServerLimits,
) -> Incoming {
    // Handshakes finish in their own tasks; a few may wait here for tonic to take them.
    let (tx, rx) = mpsc::channel::<io::Result<Conn>>(64);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let cooldown = Arc::new(AbuseCooldown::new(limits.abuse_cooldown));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if cooldown.refuses(remote.ip()) {
                metrics::counter!("portcullis_connections_refused_total", "reason" => "abuse_cooldown")
                    .increment(1);
                drop(tcp);
                continue;
            }
            let Ok(place) = places.clone().try_acquire_owned() else {
                metrics::counter!("portcullis_connections_refused_total", "reason" => "max_connections").increment(1);
                tracing::debug!("connection refused: server.max_connections reached");
                drop(tcp);
                continue;
            };
            // TCP_NODELAY: a gRPC answer is a few small frames; Nagle's algorithm held
            // some back for 40 ms (the throttle bench's p99 at 64 calls in flight).
            let _ = tcp.set_nodelay(true);
            let tls = tls.as_ref().map(|t| t.current());
            let tx = tx.clone();
            let cooling = (remote.ip(), cooldown.clone());
            tokio::spawn(async move {
                let stream = match tls {
                    None => Stream::Plain(tcp),
                    Some(ref current) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(current.config.clone());
                        match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp))
                            .await
                        {
                            Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                            Ok(Err(e)) => {
                                // No certificate, an unknown CA, an expired certificate:
                                // refused here, before any call is read.
                                tracing::debug!(error = %e, "tls handshake refused");
                                metrics::counter!("portcullis_auth_refusals_total", "caller" => "-", "code" => "tls_handshake").increment(1);
                                return;
                            }
                            Err(_) => {
                                metrics::counter!("portcullis_auth_refusals_total", "caller" => "-", "code" => "tls_handshake_timeout").increment(1);
                                return;
                            }
                        }
                    }
                };
                let peer = match (&stream, &tls) {
                    (Stream::Tls(s), Some(current)) => {
                        s.get_ref().1.peer_certificates().filter(|chain| !chain.is_empty()).map(
                            |chain| Arc::new(PeerIdentity::from_chain(chain, current.generation)),
                        )
                    }
                    _ => None,
                };
                let info = ConnInfo {
                    remote: Some(remote),
                    tls: matches!(stream, Stream::Tls(_)),
                    peer,
                    activity: Arc::new(Activity::new(limits.max_oversized_messages, cooling)),
                };
                let conn = Conn {
                    stream,
                    info,
                    idle_timeout: limits.idle_timeout,
                    idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
                    frames: FrameScan::new(),
                    resets: ResetBudget::new(limits.max_client_resets_per_minute),
                    _place: place,
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn v4(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn an_abusive_address_is_refused_for_the_cooldown_and_others_are_not() {
        let cooldown = AbuseCooldown::new(SECOND);
        let t0 = Instant::now();
        cooldown.hold_at(v4(1), t0);
        assert!(cooldown.refuses_at(v4(1), t0 + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(2), t0 + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(1), t0 + SECOND));
        // The IPv4-mapped IPv6 form of the address is the same client.
        cooldown.hold_at(v4(3), t0);
        let mapped: IpAddr = "::ffff:10.0.0.3".parse().unwrap();
        assert!(cooldown.refuses_at(mapped, t0 + SECOND / 2));
        // IPv6 by /64: another address in the network is the same client, another
        // network is not.
        cooldown.hold_at("2001:db8:1:2::1".parse().unwrap(), t0);
        assert!(cooldown.refuses_at("2001:db8:1:2:ffff::9".parse().unwrap(), t0));
        assert!(!cooldown.refuses_at("2001:db8:1:3::1".parse().unwrap(), t0));
        // Its Debug shows no address.
        let debug = format!("{cooldown:?}");
        assert!(!debug.contains("10.0.0") && !debug.contains("2001"), "{debug}");
    }

    #[test]
    fn repeated_abuse_doubles_the_cooldown_up_to_32_times_and_a_clean_spell_forgets_it() {
        let cooldown = AbuseCooldown::new(SECOND);
        let mut now = Instant::now();
        let mut lengths = Vec::new();
        for _ in 0..8 {
            cooldown.hold_at(v4(1), now);
            // Another connection closed during the cooldown changes nothing.
            cooldown.hold_at(v4(1), now + Duration::from_millis(10));
            let mut length = Duration::ZERO;
            while cooldown.refuses_at(v4(1), now + length) {
                length += SECOND / 4;
            }
            lengths.push(length.as_secs());
            // Abuse again as soon as the cooldown ends.
            now += length;
        }
        assert_eq!(lengths, [1, 2, 4, 8, 16, 32, 32, 32]);
        // A clean spell as long as the last cooldown: back to one period.
        now += Duration::from_secs(33);
        assert!(!cooldown.refuses_at(v4(1), now));
        cooldown.hold_at(v4(1), now);
        assert!(cooldown.refuses_at(v4(1), now + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(1), now + SECOND));
    }

    #[test]
    fn a_zero_cooldown_refuses_nothing() {
        let cooldown = AbuseCooldown::new(Duration::ZERO);
        let t0 = Instant::now();
        cooldown.hold_at(v4(1), t0);
        assert!(!cooldown.refuses_at(v4(1), t0));
    }
}
