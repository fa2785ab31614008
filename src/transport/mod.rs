//! The gRPC listener's connections (docs/security.md): TLS or plain
//! TCP, a bound on open connections, a handshake deadline, an idle timeout, and the
//! HTTP/2 limits of `[server]`.
//!
//! [`Incoming`] accepts on the bound listener, handshakes TLS in a task per connection
//! (so one slow handshake never holds up the others), and hands tonic finished
//! [`Conn`]s. Each `Conn` carries a [`ConnInfo`] (peer identity, activity) that tonic
//! puts into every request's extensions, where `crate::auth` reads it.

pub mod handshakes;
pub mod limits;
pub mod tls;

pub use limits::{MAX_IO_THREADS, ServerLimits};

mod activity;
mod cooldown;
mod frames;

pub use activity::{Activity, CallGuard, ConnInfo, TrackCalls, TrackCallsLayer};
pub use cooldown::AbuseCooldown;

use crate::telemetry::metrics::{AUTH_REFUSALS, CONNECTIONS_CLOSED_IDLE, CONNECTIONS_REFUSED};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tonic::transport::server::Connected;

use tls::{PeerIdentity, ReloadingTls};

use frames::{FrameScan, ResetBudget};

enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
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
                    metrics::counter!(CONNECTIONS_CLOSED_IDLE).increment(1);
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
                metrics::counter!(CONNECTIONS_REFUSED, "reason" => "abuse_cooldown").increment(1);
                drop(tcp);
                continue;
            }
            let Ok(place) = places.clone().try_acquire_owned() else {
                metrics::counter!(CONNECTIONS_REFUSED, "reason" => "max_connections").increment(1);
                tracing::debug!("connection refused: server.max_connections reached");
                drop(tcp);
                continue;
            };
            // TCP_NODELAY: a gRPC answer is a few small frames; Nagle's algorithm held
            // some back until the peer's delayed ACK (docs/performance-log.md).
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
                                // refused here, before any call is read, and said in
                                // the log (rate-limited) so the operator can tell why.
                                handshakes::refusal_log().handshake_refused(remote.ip(), &e);
                                metrics::counter!(AUTH_REFUSALS, "caller" => "-", "code" => "tls_handshake").increment(1);
                                return;
                            }
                            Err(_) => {
                                metrics::counter!(AUTH_REFUSALS, "caller" => "-", "code" => "tls_handshake_timeout").increment(1);
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
