//! `cargo bench --bench verify_flood`: what a flood of `Verify` calls with made-up
//! identifiers does to the other work on the machine, and to real users' logins. Prints
//! markdown tables; `docs/performance.md` ("Verify flood") explains them. (The cost of
//! one comparison is `benches/verify_cost.rs`, the spray cost `benches/spray_cost.rs`.)
//!
//! The flood (docs/architecture.md's motivation): 64 attacker connections send `Verify`
//! for made-up identifiers with an empty `stored_hash` (the unknown-account path,
//! compared against the realm's argon2id dummy) in a closed loop, while a probe, a child
//! process (this binary re-run with `PORTCULLIS_VERIFY_BENCH_PROBE` set, see
//! `portcullis_test_support::probe`), times a fixed unit of SHA-256 work, and a
//! legitimate user logs in four times a second (a new device each time, so untrusted),
//! and so does a user on a known device (a device token from a login before the attack,
//! so the CPU budget's trusted lane). Slowdown = the probe's median unit time under
//! attack / its median with the daemon idle, and also its units per second idle / under
//! attack (which sees the time it did not run at all). Each governor configuration gets
//! its own daemon; a control run sizes the attack to the queue, so nothing is refused.
//! CPU time per component comes from `/proc`.
//!
//! Everything runs against one private `redis-server` (never the shared 6379). The daemon
//! and the attacker run in this process on separate tokio runtimes; the probe and Redis
//! are separate processes. All of them share the machine's cores, as they would in
//! production (except the attacker, who would be elsewhere: see the CPU table).

use portcullis_test_support as common;
use portcullis_test_support::bench as support;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::{millis, percentile};

use common::probe::{PROBE_BUFFER, PROBE_PASSES, Probe};
use common::proc_cpu::{process_cpu_seconds, threads_cpu};
use common::verify_bench::{CallReport, PASSWORD, WRONG_PASSWORD, argon2id_target, classify};
use portcullis::pb::Verdict;
use portcullis::verify::budget::{BudgetSettings, BudgetStats};
use portcullis::verify::hash::StoredHash;

/// Attacker connections (one HTTP/2 connection and one client key each).
const ATTACKERS: usize = 64;
/// How long each configuration is attacked.
const ATTACK: Duration = Duration::from_secs(8);
/// The start of the attack that is not measured (connections warm, queue filled).
const ATTACK_SKIP: Duration = Duration::from_secs(1);
/// The probe's idle baseline before each attack ...
const IDLE: Duration = Duration::from_millis(3500);
/// ... of which the start is not used (the daemon just started).
const IDLE_SKIP: Duration = Duration::from_millis(500);
/// A legitimate user logs in this often during the attack (to see what the flood costs
/// real users; its comparisons are inside the same CPU budget).
const LEGIT_INTERVAL: Duration = Duration::from_millis(250);

/// Cumulative CPU seconds per component: this process's threads by name, plus the
/// Redis and probe processes.
type CpuTimes = BTreeMap<&'static str, f64>;

const CPU_COLUMNS: [&str; 6] =
    ["hashing pool", "daemon runtime", "redis-server", "attacker", "probe", "other"];

fn cpu_snapshot(redis_pid: Option<u32>, probe_pid: u32) -> CpuTimes {
    let mut times = threads_cpu(|name| {
        Some(if name.starts_with("portcullis-hash") {
            "hashing pool"
        } else if name == "daemon" {
            "daemon runtime"
        } else if name == "attack" {
            "attacker"
        } else {
            "other"
        })
    });
    if let Some(secs) = redis_pid.and_then(process_cpu_seconds) {
        times.insert("redis-server", secs);
    }
    if let Some(secs) = process_cpu_seconds(probe_pid) {
        times.insert("probe", secs);
    }
    times
}

struct FloodConfig {
    /// `[verify]` settings (appended to the test config).
    extra: &'static str,
    /// Attacker connections; `None`: `max_concurrent + max_waiters - 1`, so every call
    /// (the legitimate user's too) finds a slot or a place in the queue and nothing is
    /// refused: the control, hashing at the ceiling without the traffic of refused calls.
    attackers: Option<usize>,
}

const FLOOD_CONFIGS: [FloodConfig; 4] = [
    FloodConfig { extra: "", attackers: Some(ATTACKERS) },
    FloodConfig { extra: "", attackers: None },
    FloodConfig { extra: "[verify]\nmax_concurrent = 2\n", attackers: Some(ATTACKERS) },
    FloodConfig {
        extra: "[verify]\nmax_concurrent = 64\nmax_waiters = 1000\n",
        attackers: Some(ATTACKERS),
    },
];

struct FloodRow {
    governor: BudgetSettings,
    attackers: usize,
    idle_units: Vec<Duration>,
    idle_window: Duration,
    attack_units: Vec<Duration>,
    window: Duration,
    comparisons: u64,
    refused: [u64; 3],
    peak_running: usize,
    attack: CallReport,
    legit: CallReport,
    /// The user on a known device (trusted lane).
    known: CallReport,
    cpu: BTreeMap<&'static str, f64>,
}

impl FloodRow {
    fn label(&self) -> String {
        format!("{} / {}", self.governor.max_concurrent, self.attackers)
    }

    /// Median probe unit under attack / idle.
    fn median_slowdown(&self) -> f64 {
        percentile(&self.attack_units, 500).as_secs_f64()
            / percentile(&self.idle_units, 500).as_secs_f64()
    }

    /// Probe units completed per second, idle / under attack: counts the time the probe
    /// did not run at all, which a median of completed units does not see.
    fn throughput_slowdown(&self) -> f64 {
        let idle = self.idle_units.len() as f64 / self.idle_window.as_secs_f64();
        let attacked = self.attack_units.len() as f64 / self.window.as_secs_f64();
        idle / attacked
    }
}

fn in_window(at: Instant, from: Instant, to: Instant) -> bool {
    at >= from && at < to
}

/// One attacker connection: unknown identifiers, closed loop, until `stop`.
async fn attacker(
    mut client: common::Client,
    index: usize,
    tag: usize,
    stop: Arc<AtomicBool>,
    from: Instant,
    to: Instant,
) -> CallReport {
    let mut report = CallReport::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let identifier = format!("ghost-{tag}-{index}-{n}@example.invalid");
        // A botnet: an address of its own for every call, so no network bucket empties
        // (the throttle per client network would refuse a few addresses' flood unhashed,
        // docs/throttle.md) and what is measured is the CPU budget.
        let client_key = format!("10.{index}.{}.{}", (n >> 8) & 255, n & 255);
        let start = Instant::now();
        let answer = client.verify("default", &identifier, WRONG_PASSWORD, "", &client_key).await;
        let done = Instant::now();
        report.note(classify(answer, Verdict::Reject), done - start, in_window(done, from, to));
    }
    report
}

/// A real user with a real argon2id hash, every [`LEGIT_INTERVAL`], until `stop`.
async fn legit_user(
    mut client: common::Client,
    hash: String,
    tag: usize,
    stop: Arc<AtomicBool>,
    from: Instant,
    to: Instant,
) -> CallReport {
    let mut report = CallReport::default();
    let mut n = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(next.into()).await;
        next += LEGIT_INTERVAL;
        n += 1;
        let identifier = format!("real-user-{tag}-{n}@example.com");
        let start = Instant::now();
        let answer = client.verify("default", &identifier, PASSWORD, &hash, "198.51.100.7").await;
        let done = Instant::now();
        report.note(classify(answer, Verdict::Accept), done - start, in_window(done, from, to));
    }
    report
}

/// A real user on a device that logged in before the attack: the same account every
/// [`LEGIT_INTERVAL`], sending the device token of its last accept, until `stop`.
async fn known_device_user(
    mut client: common::Client,
    hash: String,
    identifier: String,
    mut token: String,
    stop: Arc<AtomicBool>,
    from: Instant,
    to: Instant,
) -> CallReport {
    let mut report = CallReport::default();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(next.into()).await;
        next += LEGIT_INTERVAL;
        let start = Instant::now();
        let answer = client
            .verify_with_device("default", &identifier, PASSWORD, &hash, KNOWN_CLIENT_KEY, &token)
            .await;
        let done = Instant::now();
        if let Ok(r) = &answer
            && !r.device_token.is_empty()
        {
            token.clone_from(&r.device_token);
        }
        report.note(classify(answer, Verdict::Accept), done - start, in_window(done, from, to));
    }
    report
}

/// The known-device user's client key (its own, like the untrusted user's).
const KNOWN_CLIENT_KEY: &str = "198.51.100.8";

fn sleep_until(at: Instant) {
    if let Some(d) = at.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

#[allow(clippy::too_many_arguments)]
fn run_flood(
    tag: usize,
    config: &FloodConfig,
    redis: &common::RedisServer,
    legit_hash: &str,
    probe: &Probe,
    redis_pid: Option<u32>,
    daemon_rt: &tokio::runtime::Runtime,
    attack_rt: &tokio::runtime::Runtime,
) -> FloodRow {
    let daemon = daemon_rt.block_on(common::Daemon::start(
        common::TestConfig::redis(&redis.url()).extra(config.extra).settings(),
    ));
    let governor = daemon.verifier.budget().settings();
    let attackers =
        config.attackers.unwrap_or(governor.max_concurrent + governor.max_waiters - 1).max(1);
    eprintln!(
        "flood: max_concurrent = {}, max_waiters = {}, {attackers} attackers: idle baseline ...",
        governor.max_concurrent, governor.max_waiters
    );
    let known_identifier = format!("known-device-{tag}@example.com");
    let (clients, legit_client, known_client, known_token) = attack_rt.block_on(async {
        let mut clients = Vec::with_capacity(attackers);
        for _ in 0..attackers {
            clients.push(daemon.client().await);
        }
        // The known device logged in once before the attack.
        let mut known = daemon.client().await;
        let first = known
            .verify_with_device(
                "default",
                &known_identifier,
                PASSWORD,
                legit_hash,
                KNOWN_CLIENT_KEY,
                "",
            )
            .await
            .expect("the known device's first login");
        assert_eq!(first.verdict(), Verdict::Accept, "the known device's first login");
        (clients, daemon.client().await, known, first.device_token)
    });

    let idle_from = Instant::now() + IDLE_SKIP;
    std::thread::sleep(IDLE);
    let idle_to = Instant::now();
    let idle_units = probe.units(idle_from, idle_to);

    eprintln!("flood: attacking for {}s ...", ATTACK.as_secs());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (from, to) = (start + ATTACK_SKIP, start + ATTACK);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| attack_rt.spawn(attacker(client, i, tag, stop.clone(), from, to)))
        .collect();
    let legit = attack_rt.spawn(legit_user(
        legit_client,
        legit_hash.to_owned(),
        tag,
        stop.clone(),
        from,
        to,
    ));
    let known = attack_rt.spawn(known_device_user(
        known_client,
        legit_hash.to_owned(),
        known_identifier,
        known_token,
        stop.clone(),
        from,
        to,
    ));

    sleep_until(from);
    let (stats_from, cpu_from): (BudgetStats, CpuTimes) =
        (daemon.budget(), cpu_snapshot(redis_pid, probe.pid()));
    sleep_until(to);
    let (stats_to, cpu_to) = (daemon.budget(), cpu_snapshot(redis_pid, probe.pid()));
    let window = to - from;
    stop.store(true, Ordering::Relaxed);
    let attack_units = probe.units(from, to);

    let (attack, legit, known) = attack_rt.block_on(async {
        let mut total = CallReport::default();
        for a in tasks {
            total.merge(a.await.expect("attacker task"));
        }
        total.sort();
        let mut legit = legit.await.expect("legit user task");
        legit.sort();
        let mut known = known.await.expect("known-device user task");
        known.sort();
        (total, legit, known)
    });
    // Every client is gone, so the graceful shutdown has nothing to wait for.
    daemon_rt.block_on(daemon.shutdown());

    let secs = window.as_secs_f64();
    let cpu = CPU_COLUMNS
        .iter()
        .map(|&c| {
            let used =
                cpu_to.get(c).copied().unwrap_or(0.0) - cpu_from.get(c).copied().unwrap_or(0.0);
            (c, used / secs)
        })
        .collect();
    FloodRow {
        governor,
        attackers,
        idle_units,
        idle_window: idle_to - idle_from,
        attack_units,
        window,
        comparisons: stats_to.comparisons - stats_from.comparisons,
        refused: std::array::from_fn(|i| stats_to.refused[i] - stats_from.refused[i]),
        peak_running: stats_to.peak_running,
        attack,
        legit,
        known,
        cpu,
    }
}

fn main() -> ExitCode {
    if common::probe::is_probe() {
        return common::probe::probe_main();
    }
    let redis = common::RedisServer::start();
    let redis_pid = redis.pid();
    // The daemon on its own runtime (one worker per core), the clients on another, as if
    // they were separate processes on one machine.
    let daemon_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("daemon")
        .enable_all()
        .build()
        .expect("daemon runtime");
    let attack_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("attack")
        .enable_all()
        .build()
        .expect("attacker runtime");
    // The legitimate users' stored hash: argon2id at the default realm's target.
    let argon2id_hash = StoredHash::generate(PASSWORD, &argon2id_target()).expect("hash");
    let argon2id_hash = argon2id_hash.as_str().to_owned();

    // The flood, with the probe running throughout.
    let probe = Probe::start();
    let load_before = common::proc_cpu::load_average();
    let flood_rows: Vec<FloodRow> = FLOOD_CONFIGS
        .iter()
        .enumerate()
        .map(|(tag, config)| {
            run_flood(
                tag,
                config,
                &redis,
                &argon2id_hash,
                &probe,
                redis_pid,
                &daemon_rt,
                &attack_rt,
            )
        })
        .collect();
    drop(probe);

    print_tables(&flood_rows, &load_before);
    let unexpected: u64 = flood_rows
        .iter()
        .map(|r| r.attack.unexpected + r.legit.unexpected + r.known.unexpected)
        .sum();
    if unexpected > 0 {
        eprintln!("some calls got an unexpected answer (quoted above)");
        // Returned, not `process::exit`, so the private redis-server is still stopped.
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn print_tables(flood: &[FloodRow], load: &str) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("## Flood: unknown-identifier Verify calls, closed loop ({cores} cores)\n");
    println!(
        "| max_concurrent | max_waiters | attackers | probe median ms idle → attacked | slowdown (median unit) | slowdown (units/s) | comparisons/s | refused/s queue_full / wait_timeout / deadline | answered calls/s: compared + refused | failed/s (timeout, unavailable) |"
    );
    println!("|---:|---:|---:|---|---:|---:|---:|---|---|---:|");
    for r in flood {
        let secs = r.window.as_secs_f64();
        let a = &r.attack;
        println!(
            "| {} | {} | {} | {:.2} → {:.2} | {:.2}× | {:.2}× | {:.1} | {:.0} / {:.0} / {:.0} | {:.0}: {:.1} + {:.0} | {:.1} |",
            r.governor.max_concurrent,
            r.governor.max_waiters,
            r.attackers,
            millis(percentile(&r.idle_units, 500)),
            millis(percentile(&r.attack_units, 500)),
            r.median_slowdown(),
            r.throughput_slowdown(),
            r.comparisons as f64 / secs,
            r.refused[0] as f64 / secs,
            r.refused[1] as f64 / secs,
            r.refused[2] as f64 / secs,
            (a.expected + a.refused) as f64 / secs,
            a.expected as f64 / secs,
            a.refused as f64 / secs,
            a.failed as f64 / secs,
        );
    }

    println!("\n## Flood: probe units and attacker answer times\n");
    println!(
        "| max_concurrent / attackers | probe units/s idle → attacked | probe p90 ms idle → attacked | peak comparisons running | compared call ms median / p99 | refused call ms median / p99 |"
    );
    println!("|---:|---|---|---:|---|---|");
    for r in flood {
        let a = &r.attack;
        println!(
            "| {} | {:.0} → {:.0} | {:.2} → {:.2} | {} | {:.0} / {:.0} | {:.1} / {:.1} |",
            r.label(),
            r.idle_units.len() as f64 / r.idle_window.as_secs_f64(),
            r.attack_units.len() as f64 / r.window.as_secs_f64(),
            millis(percentile(&r.idle_units, 900)),
            millis(percentile(&r.attack_units, 900)),
            r.peak_running,
            millis(percentile(&a.expected_latency, 500)),
            millis(percentile(&a.expected_latency, 990)),
            millis(percentile(&a.refused_latency, 500)),
            millis(percentile(&a.refused_latency, 990)),
        );
    }

    println!("\n## Flood: CPU used during the measured window (cores, of {cores})\n");
    println!("| max_concurrent / attackers | {} | total |", CPU_COLUMNS.join(" | "));
    println!("|---:|{}---:|", "---:|".repeat(CPU_COLUMNS.len()));
    for r in flood {
        let cells: Vec<String> = CPU_COLUMNS
            .iter()
            .map(|c| format!("{:.2}", r.cpu.get(c).copied().unwrap_or(0.0)))
            .collect();
        let total: f64 = r.cpu.values().sum();
        println!("| {} | {} | {:.2} |", r.label(), cells.join(" | "), total);
    }

    println!(
        "\n## Flood: legitimate users (own client keys, argon2id hash) logging in every {} ms\n",
        LEGIT_INTERVAL.as_millis()
    );
    println!(
        "| max_concurrent / attackers | device | accepted | refused (RESOURCE_EXHAUSTED) | failed (timeout, unavailable) | accepted share | accepted ms median |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for r in flood {
        for (device, l) in [("new (untrusted)", &r.legit), ("known (device token)", &r.known)] {
            let calls = (l.expected + l.refused + l.failed + l.unexpected).max(1);
            println!(
                "| {} | {device} | {} | {} | {} | {:.0}% | {:.0} |",
                r.label(),
                l.expected,
                l.refused,
                l.failed,
                100.0 * l.expected as f64 / calls as f64,
                millis(percentile(&l.expected_latency, 500)),
            );
        }
    }

    let verdict = |x: f64| if x <= 1.5 { "met" } else { "NOT met" };
    let (median, throughput) = (flood[0].median_slowdown(), flood[0].throughput_slowdown());
    println!(
        "\nTarget (other work at most 1.5× slower with the defaults, {} attackers): by median \
         unit time {} ({median:.2}×); by probe throughput {} ({throughput:.2}×).",
        flood[0].attackers,
        verdict(median),
        verdict(throughput),
    );
    println!(
        "Probe unit: SHA-256 over {} MiB × {PROBE_PASSES} in a child process. Attack: {}s per \
         configuration, the first {}s not measured; idle baseline {:.1}s before each. \
         Load average when the flood started: {load}.",
        PROBE_BUFFER >> 20,
        ATTACK.as_secs(),
        ATTACK_SKIP.as_secs(),
        (IDLE - IDLE_SKIP).as_secs_f64(),
    );
    for r in flood {
        println!(
            "max_concurrent {}: window {:.2}s; attacker: {} failed, {} unexpected; user: {} failed, {} unexpected; known device: {} failed, {} unexpected",
            r.label(),
            r.window.as_secs_f64(),
            r.attack.failed,
            r.attack.unexpected,
            r.legit.failed,
            r.legit.unexpected,
            r.known.failed,
            r.known.unexpected,
        );
        for q in r.attack.quoted.iter().chain(&r.legit.quoted).chain(&r.known.quoted) {
            println!("    {q}");
        }
    }
}
