//! `cargo bench --bench store_memory`: what a made-up identifier costs the store, and
//! whether a flood of them fills a `noeviction` Redis (docs/store.md, "What a record
//! costs"; docs/deployment.md, "Store memory"). Prints markdown tables.
//!
//! Against the real `portcullis` binary (`PORTCULLIS_BINARY` names another build, e.g.
//! an older one, for a before/after; `PORTCULLIS_BENCH_BASELINE=1` then leaves out
//! settings it does not know) and a private `redis-server`, over gRPC, as a gateway
//! sends them:
//!
//! 1. **Bytes per identifier**: `RecordAttempt` for 20,000 made-up identifiers, without
//!    and with an `attempt_id`; Redis's `used_memory` before and after, per identifier,
//!    and the `PTTL` of one record and of one attempt id's answer.
//! 2. **Filling 8 MB**: a Redis with `maxmemory 8mb` and `noeviction`, made-up
//!    identifiers with attempt ids in the default realm (15-minute windows) until the
//!    first refusal (`UNAVAILABLE`): how many fit.
//! 3. **A sustained flood**: the same 8 MB Redis, a realm with 2-second windows and a
//!    10-second retry horizon, 1,000 made-up identifiers a second with attempt ids for
//!    40 s: `used_memory` every 5 s and the refusals. A store that forgets a record with
//!    its window levels off; one that keeps it for the retention fills.
//! 4. **The embedded store**: the database file's size per made-up identifier (20,000,
//!    with attempt ids), then the same sustained flood as part 3 on it: the file's size
//!    every 5 s (it grows to what the live records need and then reuses freed pages).
//!
//! `PORTCULLIS_BENCH_ROWS=bytes|fill|flood|embedded` runs one part.

use portcullis_test_support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use portcullis::pb::RecordAttemptRequest;
use tonic::Code;

/// The realm of part 3: windows of 2 s, so records of made-up identifiers go within
/// seconds.
const FAST_REALM: &str =
    "[realms.flood]\nfirst_window = \"2s\"\nmax_window = \"8s\"\nretention = \"1h\"\n";

fn used_memory(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(&mut redis.conn()).unwrap();
    portcullis_test_support::bench::info_fields(&info)
        .find_map(|(name, value)| (name == "used_memory").then(|| value.parse().ok()).flatten())
        .expect("used_memory")
}

fn config_set(redis: &RedisServer, name: &str, value: &str) {
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut redis.conn()).unwrap();
}

fn baseline() -> bool {
    std::env::var("PORTCULLIS_BENCH_BASELINE").is_ok_and(|v| v == "1")
}

/// The daemon's configuration: the tests' realms plus [`FAST_REALM`], and (unless
/// measuring a build before it) a 10-second retry horizon.
fn daemon_config(redis: &RedisServer) -> String {
    TestConfig::redis(&redis.url())
        .extra(&format!("{}{FAST_REALM}", horizon()))
        .toml()
        .replace("operation_timeout = \"300ms\"", "operation_timeout = \"2s\"")
}

/// One `RecordAttempt` for a made-up identifier; `Ok(false)` for a refused one
/// (`UNAVAILABLE`: the store refused the write).
async fn attempt(c: &mut Client, realm: &str, n: u64, with_id: bool) -> Result<(), Code> {
    let req = RecordAttemptRequest {
        account: account(realm, &format!("made-up-{n}@example.com")),
        attempt_id: if with_id { uuid::Uuid::new_v4().to_string() } else { String::new() },
        client_key: String::new(),
    };
    c.0.record_attempt(req).await.map(drop).map_err(|s| s.code())
}

async fn bytes_per_identifier() {
    println!("\n## Bytes per made-up identifier (RecordAttempt, 20,000 identifiers)\n");
    println!("| attempt_id | bytes per identifier | PTTL of the record | PTTL of the attempt id |");
    println!("|---|---:|---:|---:|");
    for with_id in [false, true] {
        let redis = RedisServer::start();
        let daemon = DaemonProcess::spawn_quiet(&daemon_config(&redis));
        let mut c = daemon.client().await;
        attempt(&mut c, "default", u64::MAX, with_id).await.unwrap();
        let before = used_memory(&redis);
        const N: u64 = 20_000;
        made_up(&c, N, with_id).await;
        let per = (used_memory(&redis) - before) as f64 / N as f64;
        let mut conn = redis.conn();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        let mut pttl = |want: &dyn Fn(&str) -> bool| {
            keys.iter().find(|k| want(k)).map_or("-".to_owned(), |k| {
                let ms: i64 = redis::cmd("PTTL").arg(k).query(&mut conn).unwrap();
                format!("{:.1} s", ms as f64 / 1e3)
            })
        };
        let record = pttl(&|k| k.ends_with(":r") || k.ends_with(":record"));
        let id = pttl(&|k| k.contains(":a:") || k.contains(":attempt:"));
        println!("| {} | {per:.1} | {record} | {id} |", if with_id { "yes" } else { "no" });
        assert!(daemon.terminate().await.success());
    }
}

async fn fill_8mb() {
    println!(
        "\n## An 8 MB noeviction Redis, made-up identifiers with attempt ids, 15-minute windows\n"
    );
    let redis = RedisServer::start();
    config_set(&redis, "maxmemory-policy", "noeviction");
    let daemon = DaemonProcess::spawn_quiet(&daemon_config(&redis));
    let c = daemon.client().await;
    config_set(&redis, "maxmemory", "8mb");
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (mut c, next, refused) = (c.clone(), next.clone(), refused.clone());
            tokio::spawn(async move {
                while refused.load(Ordering::Relaxed) == 0 && next.load(Ordering::Relaxed) < 500_000
                {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if attempt(&mut c, "default", n, true).await == Err(Code::Unavailable) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let taken = next.load(Ordering::Relaxed);
    println!(
        "identifiers counted before the first refusal: about {taken} (in {:.1} s; dbsize {})",
        started.elapsed().as_secs_f64(),
        dbsize(&mut redis.conn())
    );
    assert!(daemon.terminate().await.success());
}

/// The flood of parts 3 and 4.
const RATE: u64 = 1_000;
const SECONDS: u64 = 40;

/// Sends [`RATE`] made-up identifiers a second for [`SECONDS`] to `daemon` (realm
/// `flood`, with attempt ids) and prints a row every 5 s: what `gauge` reads (a size in
/// bytes) and how many calls were refused.
async fn flood(daemon: &DaemonProcess, gauge: impl Fn() -> (u64, String)) {
    let c = daemon.client().await;
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let total = RATE * SECONDS;
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let (mut c, refused) = (c.clone(), refused.clone());
            tokio::spawn(async move {
                for n in (t..total).step_by(16) {
                    tokio::time::sleep_until(
                        (started + Duration::from_micros(n * 1_000_000 / RATE)).into(),
                    )
                    .await;
                    if attempt(&mut c, "flood", n, true).await.is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    println!("| after | identifiers sent | size | entries | refused |");
    println!("|---:|---:|---:|---:|---:|");
    for tick in 1..=SECONDS / 5 {
        tokio::time::sleep_until((started + Duration::from_secs(tick * 5)).into()).await;
        let (bytes, entries) = gauge();
        println!(
            "| {} s | {} | {:.2} MB | {entries} | {} |",
            tick * 5,
            (RATE * tick * 5).min(total),
            bytes as f64 / 1e6,
            refused.load(Ordering::Relaxed)
        );
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// `RecordAttempt` for made-up identifiers 0..`n`, 16 at a time.
async fn made_up(c: &Client, n: u64, with_id: bool) {
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let mut c = c.clone();
            tokio::spawn(async move {
                for i in (t..n).step_by(16) {
                    attempt(&mut c, "default", i, with_id).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// The retry horizon the bench's daemons run with: 10 s (none for a build before it).
fn horizon() -> &'static str {
    if baseline() { "" } else { "attempt_id_horizon = \"10s\"\n" }
}

async fn sustained_flood() {
    println!(
        "\n## A sustained flood: {RATE} made-up identifiers a second with attempt ids, 2-second windows, 8 MB noeviction Redis\n"
    );
    let redis = RedisServer::start();
    config_set(&redis, "maxmemory-policy", "noeviction");
    let daemon = DaemonProcess::spawn_quiet(&daemon_config(&redis));
    config_set(&redis, "maxmemory", "8mb");
    flood(&daemon, || (used_memory(&redis), dbsize(&mut redis.conn()).to_string())).await;
    assert!(daemon.terminate().await.success());
}

async fn embedded() {
    println!(
        "\n## The embedded store: its file per made-up identifier, and under a sustained flood\n"
    );
    let size = |dir: &std::path::Path| {
        std::fs::metadata(dir.join("portcullis.redb")).map_or(0, |m| m.len())
    };
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn_quiet(
        &TestConfig::embedded(dir.path()).extra(&format!("{}{FAST_REALM}", horizon())).toml(),
    );
    let mut c = daemon.client().await;
    attempt(&mut c, "default", u64::MAX, true).await.unwrap();
    let before = size(dir.path());
    const N: u64 = 20_000;
    made_up(&c, N, true).await;
    println!(
        "file growth per made-up identifier with an attempt id (20,000): {:.1} bytes\n",
        (size(dir.path()) - before) as f64 / N as f64
    );
    assert!(daemon.terminate().await.success());
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn_quiet(
        &TestConfig::embedded(dir.path()).extra(&format!("{}{FAST_REALM}", horizon())).toml(),
    );
    flood(&daemon, || (size(dir.path()), "-".to_owned())).await;
    assert!(daemon.terminate().await.success());
}

#[tokio::main]
async fn main() {
    let rows = std::env::var("PORTCULLIS_BENCH_ROWS").unwrap_or_default();
    println!(
        "# store_memory: {} ({})",
        daemon_binary().display(),
        if baseline() { "baseline settings" } else { "current settings" }
    );
    if rows.is_empty() || rows == "bytes" {
        bytes_per_identifier().await;
    }
    if rows.is_empty() || rows == "fill" {
        fill_8mb().await;
    }
    if rows.is_empty() || rows == "flood" {
        sustained_flood().await;
    }
    if rows.is_empty() || rows == "embedded" {
        embedded().await;
    }
}
