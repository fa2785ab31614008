//! `cargo bench --bench breach`: the breached-password filter (docs/breach.md). Prints
//! markdown tables; `docs/performance.md` ("Breach filter") explains them.
//!
//! 1. **Build**: a generated corpus of `PORTCULLIS_BENCH_BREACH_LINES` (default 10 M)
//!    random SHA-1 lines in the Pwned Passwords format, built by
//!    `portcullis::defence::breach::build::build` (what `portcullis breach-filter build` runs):
//!    wall time, file size and bytes an entry, which docs/breach.md extrapolates to the
//!    full corpus.
//! 2. **Lookup**: the filter's own cost, in this process: `contains` (one SHA-1 and three
//!    memory reads) for listed and unlisted passwords.
//! 3. **Verify with and without the filter**: two real `portcullis` daemons (the binary,
//!    each in its own process) on one private `redis-server` (never the shared 6379),
//!    one with `[breach] filter_file` naming the built filter, one without; accepts of a
//!    listed password on the bcrypt-cost-4 realm `fast` (the cheapest comparison, so the
//!    lookup's share is as large as it gets) at 16 calls in flight, each caller its own
//!    client key; rounds alternate between the daemons, so drift hits both alike.
//! 4. **CheckPassword**: its rate at 16 in flight on the daemon with the filter.
//!
//! `PORTCULLIS_BENCH_ROWS=rate` runs only `Verify`'s rate on a daemon without a filter
//! (accepts, wrong passwords, repeats), which any build serves: with
//! `PORTCULLIS_BINARY=PATH` for a before/after.

use portcullis_test_support as common;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::defence::breach::BreachFilter;
use portcullis::defence::breach::build::{BuildOptions, build};
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{CheckPasswordRequest, PasswordCheckReason, Verdict};
use sha1::Digest;

/// Calls in flight in the rate rows.
const IN_FLIGHT: usize = 16;
/// Length of one timed round.
const ROUND: Duration = Duration::from_secs(4);
/// Rounds per daemon in the Verify rows.
const ROUNDS: usize = 3;
/// Every bench daemon's queue holds the callers in flight (the default, 8 × max_concurrent,
/// would refuse some of them).
const VERIFY_TOML: &str = "[verify]\nmax_waiters = 64\n";
/// The listed password the Verify rows accept.
const LISTED: &str = "Summer2026!";

fn lines() -> u64 {
    std::env::var("PORTCULLIS_BENCH_BREACH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

/// A corpus of `n` random SHA-1s (from a counter, so no RNG crate) plus [`LISTED`].
fn write_corpus(path: &std::path::Path, n: u64) {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    for i in 0..n {
        let digest = sha1::Sha1::digest(i.to_le_bytes());
        writeln!(out, "{}:{}", hex::encode_upper(digest), i % 50 + 1).unwrap();
    }
    writeln!(out, "{}:9", hex::encode_upper(sha1::Sha1::digest(LISTED.as_bytes()))).unwrap();
    out.flush().unwrap();
}

/// Calls per second of `call` at [`IN_FLIGHT`], over one [`ROUND`].
fn rate<F, Fut>(rt: &tokio::runtime::Runtime, call: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..IN_FLIGHT {
            let (call, stop, done) = (call.clone(), stop.clone(), done.clone());
            tasks.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    call(worker, n).await;
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Warm up, then time a round.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
        tokio::time::sleep(ROUND).await;
        let calls = done.load(Ordering::Relaxed) - before;
        let took = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        while tasks.join_next().await.is_some() {}
        calls as f64 / took.as_secs_f64()
    })
}

/// Which `Verify` a rate row sends.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// The listed password, accepted; `password_breached` as given.
    Accept { breached: bool },
    /// A wrong password on a fresh account from a fresh client key each call.
    Wrong,
    /// One wrong password again and again, one account and client key per caller: after
    /// its first call, every call is a repeat (docs/throttle.md, "Repeated passwords").
    Repeat,
}

fn verify_rate(
    rt: &tokio::runtime::Runtime,
    daemon: &common::DaemonProcess,
    hash: &str,
    kind: Kind,
) -> f64 {
    let client = rt.block_on(common::Client::connect(daemon.addr));
    let hash = hash.to_owned();
    let tag = uuid::Uuid::new_v4();
    rate(rt, move |worker, n| {
        let (mut c, hash) = (client.clone(), hash.clone());
        async move {
            let (id, from, password) = match kind {
                Kind::Accept { .. } => (
                    format!("accept-{tag}-{worker}-{n}@x.example"),
                    format!("10.9.{worker}.1"),
                    LISTED,
                ),
                Kind::Wrong => (
                    format!("wrong-{tag}-{worker}-{n}@x.example"),
                    format!("10.8.{worker}.{}", n % 250),
                    "wrong",
                ),
                Kind::Repeat => (
                    format!("repeat-{tag}-{worker}@x.example"),
                    format!("10.7.{worker}.1"),
                    "wrong",
                ),
            };
            let r = c.verify("fast", &id, password.as_bytes(), &hash, &from).await.expect("Verify");
            match kind {
                Kind::Accept { breached } => {
                    assert_eq!(r.verdict, Verdict::Accept as i32, "not accepted");
                    assert_eq!(r.password_breached, breached, "password_breached");
                }
                Kind::Wrong | Kind::Repeat => assert_eq!(r.verdict, Verdict::Reject as i32),
            }
        }
    })
}

/// `PORTCULLIS_BENCH_ROWS=rate`: `Verify`'s rate alone, on a daemon without a filter
/// (any build, `PORTCULLIS_BINARY`), for a before/after: accepts, wrong passwords and
/// repeats, alternated over [`ROUNDS`] rounds.
fn rates_only() -> ExitCode {
    let redis = common::RedisServer::start();
    let daemon = common::DaemonProcess::spawn_quiet(
        &common::TestConfig::redis(&redis.url()).extra(VERIFY_TOML).toml(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let hash = bcrypt::hash(LISTED, 4).expect("hash");
    let kinds = [
        ("accept", Kind::Accept { breached: false }),
        ("wrong password", Kind::Wrong),
        ("repeated wrong password", Kind::Repeat),
    ];
    let mut rows = vec![Vec::new(); kinds.len()];
    for _ in 0..ROUNDS {
        for (row, (_, kind)) in rows.iter_mut().zip(kinds) {
            row.push(verify_rate(&rt, &daemon, &hash, kind));
        }
    }
    println!(
        "## Verify rate (bcrypt cost 4, {IN_FLIGHT} in flight, {ROUNDS} rounds of {} s, alternated)\n",
        ROUND.as_secs()
    );
    println!("| calls | calls/s (median) | rounds |");
    println!("|---|---:|---|");
    for ((label, _), row) in kinds.iter().zip(rows) {
        let shown = row.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
        println!("| {label} | {:.0} | {shown} |", median(row));
    }
    println!("\nLoad average after the run: {}.", common::proc_cpu::load_average());
    ExitCode::SUCCESS
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    if std::env::var("PORTCULLIS_BENCH_ROWS").as_deref() == Ok("rate") {
        return rates_only();
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = dir.path().join("corpus.txt");
    let filter_path = dir.path().join("breach.filter");
    let n = lines();
    eprintln!("breach: writing a corpus of {n} lines ...");
    write_corpus(&corpus, n);
    let corpus_bytes = std::fs::metadata(&corpus).unwrap().len();
    eprintln!("breach: building ...");
    let built = build(&corpus, &filter_path, &BuildOptions::default()).expect("build");
    std::fs::remove_file(&corpus).unwrap();
    println!("## Build ({} lines, {:.0} MB of corpus)\n", built.lines, corpus_bytes as f64 / 1e6);
    println!("| entries | build s | filter bytes | bytes an entry |");
    println!("|---:|---:|---:|---:|");
    println!(
        "| {} | {:.1} | {} | {:.3} |",
        built.entries,
        built.took.as_secs_f64(),
        built.bytes,
        built.bytes as f64 / built.entries as f64
    );

    let started = Instant::now();
    let filter = BreachFilter::load(&filter_path).expect("load");
    let load_s = started.elapsed().as_secs_f64();
    const LOOKUPS: u64 = 1_000_000;
    let time = |listed: bool| {
        let start = Instant::now();
        let mut found = 0u64;
        for i in 0..LOOKUPS {
            let hit = if listed {
                filter.contains(LISTED.as_bytes())
            } else {
                filter.contains(&i.to_be_bytes())
            };
            found += u64::from(std::hint::black_box(hit));
        }
        (start.elapsed().as_nanos() as f64 / LOOKUPS as f64, found)
    };
    let (hit_ns, hits) = time(true);
    let (miss_ns, false_positives) = time(false);
    assert_eq!(hits, LOOKUPS);
    println!("\n## Lookup (in process; load {load_s:.2} s)\n");
    println!("| password | ns a lookup |");
    println!("|---|---:|");
    println!("| listed | {hit_ns:.0} |");
    println!("| unlisted ({false_positives} false positives in {LOOKUPS}) | {miss_ns:.0} |");
    drop(filter);

    let redis = common::RedisServer::start();
    let breach =
        format!("{VERIFY_TOML}[breach]\nfilter_file = {:?}\n", filter_path.to_str().unwrap());
    let with = common::DaemonProcess::spawn_quiet(
        &common::TestConfig::redis(&redis.url()).extra(&breach).toml(),
    );
    let without = common::DaemonProcess::spawn_quiet(
        &common::TestConfig::redis(&redis.url()).extra(VERIFY_TOML).toml(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let hash = bcrypt::hash(LISTED, 4).expect("hash");
    eprintln!("breach: Verify with and without the filter ...");
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        on.push(verify_rate(&rt, &with, &hash, Kind::Accept { breached: true }));
        off.push(verify_rate(&rt, &without, &hash, Kind::Accept { breached: false }));
    }
    let (on_m, off_m) = (median(on.clone()), median(off.clone()));
    println!(
        "\n## Verify, accepts of a listed password (bcrypt cost 4, {IN_FLIGHT} in flight, {ROUNDS} rounds of {} s each, alternated)\n",
        ROUND.as_secs()
    );
    println!("| daemon | calls/s (median) | rounds |");
    println!("|---|---:|---|");
    let show = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
    println!("| without a filter | {off_m:.0} | {} |", show(&off));
    println!("| with the filter | {on_m:.0} | {} |", show(&on));
    println!("\nWith − without: {:+.1} %.", 100.0 * (on_m - off_m) / off_m);

    eprintln!("breach: CheckPassword ...");
    let channel =
        rt.block_on(GovernorClient::connect(format!("http://{}", with.addr))).expect("connect");
    let checks = rate(&rt, move |worker, n| {
        let mut g = channel.clone();
        async move {
            let password = format!("a new password {worker}-{n}");
            let r = g
                .check_password(CheckPasswordRequest {
                    account: common::account("fast", "setter@example.com"),
                    password: password.into_bytes(),
                })
                .await
                .expect("CheckPassword");
            let reason = r.into_inner().reason;
            assert!(
                reason == PasswordCheckReason::Ok as i32
                    || reason == PasswordCheckReason::Breached as i32
            );
        }
    });
    println!("\n## CheckPassword ({IN_FLIGHT} in flight, one round of {} s)\n", ROUND.as_secs());
    println!("| calls/s |\n|---:|\n| {checks:.0} |");
    drop(with);
    drop(without);
    println!("\nLoad average after the run: {}.", common::proc_cpu::load_average());
    ExitCode::SUCCESS
}
