//! `cargo bench --bench abuse`: what abusive clients cost another caller. A victim
//! sends `RecordAttempt` one at a time on its own connection to the real `portcullis`
//! binary (Redis store) while, in turn:
//!
//! 1. nothing else runs (the quiet p99);
//! 2. `oversized`: 8 clients send 1 MiB messages in a loop;
//! 3. `max streams, no body`: 32 connections each open the maximum of streams
//!    (`server.max_concurrent_streams`) and never send a message;
//! 4. `slow headers`: 256 connections trickle the HTTP/2 preface one byte at a time and
//!    never finish it;
//! 5. `rapid reset`: 8 connections open a stream and reset it at once, in a loop
//!    (CVE-2023-44487), reconnecting whenever the daemon closes them.
//!
//! The victim runs on its own thread and Tokio runtime, apart from the abusers' tasks,
//! and connects from another loopback address (127.0.0.2) than the abusers (each phase's
//! from its own, 127.0.1.1–4), as another caller would: `server.abuse_cooldown` refuses
//! the abusers' address only, and one phase's cooldown does not reach the next.
//! On a machine with two or more CPUs the bench pins (with `taskset`) the daemon, Redis
//! and the victim's thread to CPU 0 and the abusers to CPU 1, as if the abusers ran on a
//! machine of their own: what is measured is what the daemon lets them take from
//! another caller, not the CPU the load generator itself burns beside the daemon.
//! `PORTCULLIS_ABUSE_SHARED=1` leaves every process on every CPU. The daemon logs at
//! `info`, as in production.
//!
//! Each row gives the victim's p50/p99 and the p99 as a multiple of the quiet one, the
//! daemon's peak resident memory during the phase and its resident memory 2 s after the
//! phase ended (from `/proc/PID/status`), and the CPU the daemon and this process (the
//! abusers and the victim) used during the measurement, in % of one core. The goal the
//! limits are set for: p99 within 2× of quiet, memory bounded and returned.

use portcullis_test_support as common;
use portcullis_test_support::bench as support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use portcullis::pb::RecordAttemptRequest;
use support::{millis, percentile};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Length of each phase's measurement.
const PHASE: Duration = Duration::from_secs(4);
/// The daemon's limits for the bench (the defaults, with a short idle timeout so the
/// slow-headers connections are seen to end).
const SERVER_TOML: &str = "[server]\nidle_timeout = \"3s\"\nrequest_timeout = \"3s\"\n";
const STREAMS_PER_CONNECTION: usize = 100;
/// The victim's source address; each phase's abusers connect from one of 127.0.1.1–4.
const VICTIM_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) of a process so far, from `/proc/PID/stat`, in clock ticks
/// (`USER_HZ`, 100 a second on Linux).
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (in parentheses, which may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    tick(11) + tick(12)
}

struct Row {
    phase: &'static str,
    p50: Duration,
    p99: Duration,
    calls: usize,
    errors: u64,
    peak_kib: u64,
    after_kib: u64,
    abuse: u64,
    /// CPU used during the measurement, in % of one core: the daemon, this process.
    daemon_cpu: f64,
    bench_cpu: f64,
}

/// Sequential `RecordAttempt`s for [`PHASE`], on a fresh connection, sampling the
/// daemon's memory meanwhile.
async fn victim(addr: SocketAddr, pid: u32, phase: &'static str, abuse: &AtomicU64) -> Row {
    let mut client = common::Client::connect_from(addr, VICTIM_ADDRESS).await;
    let (daemon_ticks, bench_ticks) = (cpu_ticks(&pid.to_string()), cpu_ticks("self"));
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut peak = rss_kib(pid);
    let mut n = 0u64;
    while start.elapsed() < PHASE {
        n += 1;
        let t = Instant::now();
        let req = RecordAttemptRequest {
            account: common::account("default", &format!("victim-{phase}-{n}@example.com")),
            attempt_id: String::new(),
            client_key: String::new(),
        };
        match client.0.record_attempt(req).await {
            Ok(_) => latencies.push(t.elapsed()),
            Err(_) => errors += 1,
        }
        if n.is_multiple_of(50) {
            peak = peak.max(rss_kib(pid));
        }
    }
    let percent = |ticks: u64| ticks as f64 / start.elapsed().as_secs_f64();
    let daemon_cpu = percent(cpu_ticks(&pid.to_string()) - daemon_ticks);
    let bench_cpu = percent(cpu_ticks("self") - bench_ticks);
    latencies.sort();
    Row {
        daemon_cpu,
        bench_cpu,
        phase,
        p50: percentile(&latencies, 500),
        p99: percentile(&latencies, 990),
        calls: latencies.len(),
        errors,
        peak_kib: peak.max(rss_kib(pid)),
        after_kib: 0,
        abuse: abuse.load(Ordering::Relaxed),
    }
}

/// A TCP connection to `addr` from the local address `from`.
async fn tcp_from(from: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(addr).await
}

async fn h2_connect(from: IpAddr, addr: SocketAddr) -> Option<h2::client::SendRequest<Bytes>> {
    let tcp = tcp_from(from, addr).await.ok()?;
    let (client, connection) = h2::client::handshake(tcp).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(client)
}

/// 1 MiB messages, refused before decoding.
async fn oversized(from: IpAddr, addr: SocketAddr, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(from))
        .connect_lazy();
    let mut client = portcullis::pb::governor_client::GovernorClient::new(channel)
        .max_encoding_message_size(2 << 20);
    while !stop.load(Ordering::Relaxed) {
        let req = RecordAttemptRequest {
            account: common::account("default", &"x".repeat(1 << 20)),
            attempt_id: String::new(),
            client_key: String::new(),
        };
        let _ = client.record_attempt(req).await;
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens the maximum of streams on one connection and never sends their messages;
/// opens them again as the daemon times them out.
async fn hold_streams(
    from: IpAddr,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Some(mut client) = h2_connect(from, addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut held = Vec::new();
        for _ in 0..STREAMS_PER_CONNECTION {
            let Ok(ready) = client.clone().ready().await else { break };
            client = ready;
            match client.send_request(common::grpc_request(addr), false) {
                Ok(stream) => {
                    held.push(stream);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => break,
            }
        }
        // Wait for the daemon to end them (request_timeout), then again.
        for (response, _body) in held {
            tokio::select! {
                _ = response => {}
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}

/// Trickles the HTTP/2 client preface one byte every 100 ms, never finishing.
async fn slow_headers(
    from: IpAddr,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r";
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tcp) = tcp_from(from, addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        count.fetch_add(1, Ordering::Relaxed);
        for byte in PREFACE {
            if stop.load(Ordering::Relaxed) || tcp.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Never sends the last byte; waits to be closed.
        let mut buf = [0u8; 64];
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            use tokio::io::AsyncReadExt;
            while tcp.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        })
        .await;
    }
}

/// Opens a stream and resets it at once, as fast as the connection allows.
async fn rapid_reset(from: IpAddr, addr: SocketAddr, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Some(mut client) = h2_connect(from, addr).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let Ok(ready) = client.clone().ready().await else { break };
            client = ready;
            match client.send_request(common::grpc_request(addr), false) {
                Ok((_, mut stream)) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => break,
            }
            // Let the connection task write the frames (and this runtime's other tasks
            // run): without it the loop only queues resets in this process's memory.
            tokio::task::yield_now().await;
        }
    }
}

/// Pins `pid` (with `all_threads`, every thread of it) to `cpu` with `taskset`; false
/// when that failed.
fn pin(pid: u32, cpu: usize, all_threads: bool) -> bool {
    let mut command = std::process::Command::new("taskset");
    if all_threads {
        command.arg("-a");
    }
    command
        .args(["-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The calling thread's id (Linux), from `/proc/thread-self`.
fn thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

type Abuser =
    fn(IpAddr, SocketAddr, Arc<AtomicBool>, Arc<AtomicU64>) -> tokio::task::JoinHandle<()>;

fn main() {
    let redis = common::RedisServer::start();
    let config = common::TestConfig::redis(&redis.url()).extra(SERVER_TOML).toml();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // At the production log level: `spawn` logs at debug, which formats and pipes a
        // line for every HTTP/2 frame an abuser sends (half a million lines a run).
        let daemon = common::DaemonProcess::spawn_quiet(&config);
        let (addr, pid) = (daemon.addr, daemon.pid());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shared = std::env::var_os("PORTCULLIS_ABUSE_SHARED").is_some();
        // This process (the abusers, and the victim's thread until it pins itself) on
        // CPU 1; the daemon and Redis on CPU 0.
        let pinned = cpus >= 2
            && !shared
            && pin(std::process::id(), 1, true)
            && pin(pid, 0, true)
            && redis.pid().is_some_and(|redis| pin(redis, 0, true));
        let placement = if pinned {
            "daemon, Redis and victim pinned to CPU 0, abusers to CPU 1"
        } else {
            "not pinned: daemon, Redis, victim and abusers share every CPU"
        };
        eprintln!("{placement}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle_kib = rss_kib(pid);
        let phases: [(&'static str, usize, Option<Abuser>); 5] = [
            ("quiet", 0, None),
            ("oversized (1 MiB)", 8, Some(|f, a, s, c| tokio::spawn(oversized(f, a, s, c)))),
            ("max streams, no body", 32, Some(|f, a, s, c| tokio::spawn(hold_streams(f, a, s, c)))),
            ("slow headers", 256, Some(|f, a, s, c| tokio::spawn(slow_headers(f, a, s, c)))),
            ("rapid reset", 8, Some(|f, a, s, c| tokio::spawn(rapid_reset(f, a, s, c)))),
        ];
        let mut rows = Vec::new();
        for (n, (phase, clients, abuser)) in (1u8..).zip(phases) {
            eprintln!("{phase} ...");
            // Each phase's abusers from their own address: one phase's abuse cooldown
            // must not refuse the next phase's abusers.
            let from = IpAddr::V4(Ipv4Addr::new(127, 0, 1, n));
            let stop = Arc::new(AtomicBool::new(false));
            let count = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = abuser
                .map(|spawn| {
                    (0..clients).map(|_| spawn(from, addr, stop.clone(), count.clone())).collect()
                })
                .unwrap_or_default();
            // Let the abuse reach its steady state before measuring.
            tokio::time::sleep(Duration::from_secs(1)).await;
            // The victim runs on its own thread and runtime: the abusers' tasks fill this
            // runtime's workers, and queueing behind them is the load generator's cost,
            // not the daemon's.
            let victim_count = count.clone();
            let mut row = tokio::task::spawn_blocking(move || {
                if pinned {
                    assert!(thread_id().is_some_and(|tid| pin(tid, 0, false)), "pin the victim");
                }
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(victim(addr, pid, phase, &victim_count))
            })
            .await
            .unwrap();
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.abort();
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            row.after_kib = rss_kib(pid);
            rows.push(row);
        }
        let quiet = rows[0].p99;
        println!("{placement}");
        println!("daemon resident memory at rest: {:.1} MiB", idle_kib as f64 / 1024.0);
        println!("| phase | abusive ops | victim calls | errors | p50 ms | p99 ms | p99 / quiet | peak RSS MiB | RSS 2 s after MiB | daemon CPU % | bench CPU % |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.0} | {:.0} |",
                r.phase,
                r.abuse,
                r.calls,
                r.errors,
                millis(r.p50),
                millis(r.p99),
                r.p99.as_secs_f64() / quiet.as_secs_f64(),
                r.peak_kib as f64 / 1024.0,
                r.after_kib as f64 / 1024.0,
                r.daemon_cpu,
                r.bench_cpu,
            );
        }
        let _ = daemon.terminate().await;
    });
}
