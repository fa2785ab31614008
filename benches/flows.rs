//! `cargo bench --bench flows`: what a flow call (docs/flows.md) costs beside the
//! `RecordAttempt` it is measured against, through one daemon over loopback gRPC, on a
//! private `redis-server` and on the embedded store.
//!
//! Four paths, in pairs that do the same store work:
//! - `RecordAttempt` without a client key (one script) beside `RecordFlowAttempt` of
//!   `second_factor` (the same script on the flow's record);
//! - `RecordAttempt` with a client key (the count and the network's token: two scripts)
//!   beside `RecordFlowAttempt` of `password_reset` (the network's budget, then the send
//!   log: two scripts, one after the other).
//!
//! Every call names a fresh account and a fresh client address, so every call is
//! allowed and does the full work. The paths take turns, [`ROUNDS`] rounds of
//! [`ROUND`] each at [`IN_FLIGHT`] calls in flight, so drift of the machine falls on
//! all alike; the table gives each path's median rate and its spread over the rounds,
//! and each flow's ratio to its pair. Run it with nothing else busy.

use portcullis_test_support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{Account, Decision, Flow, RecordAttemptRequest, RecordFlowAttemptRequest};
use tonic::transport::Channel;

/// Calls in flight.
const IN_FLIGHT: usize = 16;
/// HTTP/2 connections the calls share.
const CHANNELS: usize = 4;
/// Turns each path gets.
const ROUNDS: usize = 7;
/// Length of one turn.
const ROUND: Duration = Duration::from_secs(2);

/// The four paths (module docs).
#[derive(Clone, Copy)]
enum Path {
    Attempt,
    SecondFactor,
    AttemptWithClient,
    PasswordReset,
}

impl Path {
    const ALL: [Path; 4] =
        [Path::Attempt, Path::SecondFactor, Path::AttemptWithClient, Path::PasswordReset];

    fn name(self) -> &'static str {
        match self {
            Path::Attempt => "RecordAttempt",
            Path::SecondFactor => "RecordFlowAttempt second_factor",
            Path::AttemptWithClient => "RecordAttempt with client_key",
            Path::PasswordReset => "RecordFlowAttempt password_reset",
        }
    }

    /// The path this one is measured against (itself for the two `RecordAttempt`s).
    fn pair(self) -> Path {
        match self {
            Path::Attempt | Path::SecondFactor => Path::Attempt,
            Path::AttemptWithClient | Path::PasswordReset => Path::AttemptWithClient,
        }
    }
}

/// Next account and client number, never reused in a run.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// One call of `path` for a fresh account and client; its decision must be ALLOW.
async fn call(client: &mut GovernorClient<Channel>, path: Path) -> Result<(), String> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let account =
        Some(Account { realm: "default".into(), identifier: format!("u{n}@example.com") });
    // A fresh IPv4 address a call: 10.x.y.z.
    let client_key = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
    let decision = match path {
        Path::Attempt | Path::AttemptWithClient => {
            let client_key = if matches!(path, Path::Attempt) { String::new() } else { client_key };
            let request = RecordAttemptRequest { account, attempt_id: String::new(), client_key };
            client.record_attempt(request).await.map(|r| r.into_inner().decision)
        }
        Path::SecondFactor | Path::PasswordReset => {
            let flow = if matches!(path, Path::SecondFactor) {
                Flow::SecondFactor
            } else {
                Flow::PasswordReset
            };
            let request = RecordFlowAttemptRequest {
                account,
                flow: flow as i32,
                client_key,
                attempt_id: String::new(),
            };
            client.record_flow_attempt(request).await.map(|r| r.into_inner().decision)
        }
    };
    match decision {
        Ok(d) if d == Decision::Allow as i32 => Ok(()),
        Ok(d) => Err(format!("decision {d}")),
        Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// Calls per second of `path` over one [`ROUND`], [`IN_FLIGHT`] at a time.
async fn round(channels: &[GovernorClient<Channel>], path: Path) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + ROUND;
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|i| {
            let mut client = channels[i % channels.len()].clone();
            let done = done.clone();
            tokio::spawn(async move {
                while Instant::now() < end {
                    if let Err(e) = call(&mut client, path).await {
                        panic!("{}: {e}", path.name());
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    for w in workers {
        w.await.expect("worker");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// The median and the spread (min–max) of `rates`.
fn summary(rates: &mut [f64]) -> (f64, f64, f64) {
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() / 2], rates[0], rates[rates.len() - 1])
}

/// The table of one store: every path's rounds, taken in turn.
async fn measure(store: &str, daemon: &common::Daemon) {
    let mut channels = Vec::new();
    for _ in 0..CHANNELS {
        channels.push(daemon.client().await.0);
    }
    // Warm-up: connections, script cache, branch caches.
    for path in Path::ALL {
        round(&channels[..], path).await;
    }
    let mut rates = vec![Vec::new(); Path::ALL.len()];
    for r in 0..ROUNDS {
        eprintln!("{store}: round {} of {ROUNDS} ...", r + 1);
        for (i, path) in Path::ALL.into_iter().enumerate() {
            rates[i].push(round(&channels[..], path).await);
        }
    }
    let medians: Vec<f64> = rates.iter_mut().map(|r| summary(r).0).collect();
    println!(
        "\n### {store}, {IN_FLIGHT} calls in flight, median of {ROUNDS} rounds of {ROUND:?}\n"
    );
    println!("| path | calls/s (median) | min – max | vs its pair |");
    println!("|---|---:|---:|---:|");
    for (i, path) in Path::ALL.into_iter().enumerate() {
        let (median, low, high) = summary(&mut rates[i]);
        let pair =
            medians[Path::ALL.iter().position(|p| p.name() == path.pair().name()).unwrap_or(i)];
        println!(
            "| {} | {median:.0} | {low:.0} – {high:.0} | {:+.1}% |",
            path.name(),
            (median / pair - 1.0) * 100.0
        );
    }
}

fn main() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let redis = common::RedisServer::start();
    runtime.block_on(async {
        let daemon =
            common::Daemon::start(common::TestConfig::redis(&redis.url()).settings()).await;
        measure("Redis", &daemon).await;
        daemon.shutdown().await;
        let data_dir = tempfile::tempdir().expect("data directory");
        let daemon =
            common::Daemon::start(common::TestConfig::embedded(data_dir.path()).settings()).await;
        measure("embedded store", &daemon).await;
        daemon.shutdown().await;
    });
}
