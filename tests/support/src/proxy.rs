//! A TCP proxy in front of a gRPC endpoint that loses a response: it forwards whole
//! HTTP/2 frames from the server and, on a connection it cuts, drops both sockets at the
//! first frame of a stream (not stream 0). The request was served; its answer never
//! arrives, and the client sees a reset: the transport failure a client must retry with
//! the same `attempt_id`.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which connections [`response_cutting_proxy`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The first connection only; later ones are forwarded whole (a retry succeeds).
    First,
    /// Every connection (no answer ever arrives).
    Every,
}

/// Listens on a free loopback port and proxies every connection to `upstream`, cutting
/// the ones `cut` names at their first response frame. Answers the proxy's address.
pub async fn response_cutting_proxy(upstream: SocketAddr, cut: Cut) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(upstream).await else { continue };
            let cutting = cut == Cut::Every || std::mem::replace(&mut first, false);
            tokio::spawn(forward(client, server, cutting));
        }
    });
    addr
}

/// Forwards `client`'s bytes to `server` as they come, and `server`'s frame by frame,
/// stopping at the first stream frame when `cutting`.
async fn forward(client: TcpStream, server: TcpStream, cutting: bool) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = match sr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        // An HTTP/2 frame: 3 bytes of length, type, flags, 4 bytes of stream id.
        while buf.len() >= 9 {
            let len =
                (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            if cutting && stream != 0 {
                up.abort();
                return; // drops both sockets: the client sees a reset
            }
            let frame: Vec<u8> = buf.drain(..9 + len).collect();
            if cw.write_all(&frame).await.is_err() {
                return;
            }
        }
    }
}
