//! `cargo bench --bench verify`: what one password comparison costs, and what a flood of
//! `Verify` calls with made-up identifiers does to the other work on the machine. Prints
//! markdown tables; `docs/performance.md` ("Verify") explains them.
//!
//! 1. **Per comparison**, each algorithm at its default target: the raw comparison
//!    (`StoredHash::matches_keeping`, as the daemon's hashing threads run it) alternated with `Verify` end to end over loopback gRPC (sequential
//!    calls, a fresh identifier each, the matching stored hash, so every call is an accept
//!    at the realm's target), so a drift of the machine's speed moves both alike; then a
//!    wrong password and an unknown account, which the timing rule says cost the same.
//!    The daemon is the real binary in its own process; a first row at argon2's minimum
//!    cost shows what `Verify` adds by itself, and a last table times `Verify` at load
//!    (the hashing thread never idle) against raw comparisons back to back.
//! 2. **The flood** (docs/architecture.md's motivation): 64 attacker connections send `Verify` for
//!    made-up identifiers with an empty `stored_hash` (the unknown-account path, compared
//!    against the realm's argon2id dummy) in a closed loop, while a probe, a child process
//!    (this binary re-run with [`PROBE_ENV`] set), times a fixed unit of SHA-256 work, and
//!    a legitimate user logs in four times a second (a new device each time, so untrusted),
//!    and so does a user on a known device (a device token from a login before the
//!    attack, so the CPU budget's trusted lane). Slowdown = the probe's median unit
//!    time under attack / its median with the daemon idle, and also its units per second
//!    idle / under attack (which sees the time it did not run at all). Each governor
//!    configuration gets its own daemon; a control run sizes the attack to the queue, so
//!    nothing is refused. CPU time per component comes from `/proc`.
//!
//! 3. **Spray detection's cost** (docs/spray.md): the store work of one `Verify` attempt,
//!    the count alone and the count with its spray check sent beside it (as the service
//!    sends them), and the failure note a failed comparison sends after, timed in
//!    alternation on the same Redis and on an embedded store.
//!
//! `PORTCULLIS_BENCH_ROWS=cost` runs part 1 alone, `PORTCULLIS_BENCH_ROWS=spray` part 3.
//!
//! Everything runs against one private `redis-server` (never the shared 6379). The daemon
//! and the attacker run in this process on separate tokio runtimes; the probe and Redis
//! are separate processes. All of them share the machine's cores, as they would in
//! production (except the attacker, who would be elsewhere: see the CPU table).

use portcullis_test_support as common;
use portcullis_test_support::bench as support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::{millis, percentile};

use portcullis::pb::Verdict;
use portcullis::verify::budget::{BudgetSettings, BudgetStats};
use portcullis::verify::hash::{Algorithm, HashParams, StoredHash};
use sha2::{Digest, Sha256};
use tonic::Code;

/// Set in the probe child's environment: the binary then runs [`probe_main`] only.
const PROBE_ENV: &str = "PORTCULLIS_VERIFY_BENCH_PROBE";
/// The probe's buffer: SHA-256 runs over it [`PROBE_PASSES`] times per unit.
const PROBE_BUFFER: usize = 1 << 20;
/// SHA-256 passes over [`PROBE_BUFFER`] per timed unit (about 3 ms here, idle).
const PROBE_PASSES: usize = 4;

/// The password every stored hash in part 1 is made from.
const PASSWORD: &[u8] = b"correct horse battery staple";
/// Timed comparisons per row of part 1 (p99 is then the second slowest).
const RUNS: usize = 100;
/// Untimed comparisons before each row (caches, connection, script load).
const WARM_RUNS: usize = 3;
/// Realms whose targets are the other algorithms, so every accept in part 1 is at its
/// realm's target (`default` is argon2id m=19456 t=2 p=1 already). Appended before
/// `common::REALMS_TOML`.
const EXTRA_REALMS: &str = "[realms.argon2i]\nhash = { algorithm = \"argon2i\" }\n\
    [realms.argon2d]\nhash = { algorithm = \"argon2d\" }\n\
    [realms.bcrypt10]\nhash = { algorithm = \"bcrypt\", bcrypt_cost = 10 }\n";

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
/// Errors quoted per configuration when calls fail in an unexpected way.
const QUOTED_ERRORS: usize = 3;
/// /proc reports CPU time in USER_HZ ticks, 100 a second on Linux.
const TICKS_PER_SECOND: f64 = 100.0;

/// An algorithm at its default target, and the realm targeting it.
struct Target {
    label: &'static str,
    params: HashParams,
    realm: &'static str,
}

/// The argon2 memory of every argon2 target here (OWASP's minimum for argon2id), in KiB.
const ARGON2_TARGET_KIB: u32 = 19_456;

fn targets() -> [Target; 4] {
    let argon2 = |algorithm| HashParams::Argon2 {
        algorithm,
        memory_kib: ARGON2_TARGET_KIB,
        iterations: 2,
        parallelism: 1,
    };
    [
        Target { label: "argon2id", params: argon2(Algorithm::Argon2id), realm: "default" },
        Target { label: "argon2i", params: argon2(Algorithm::Argon2i), realm: "argon2i" },
        Target { label: "argon2d", params: argon2(Algorithm::Argon2d), realm: "argon2d" },
        Target { label: "bcrypt", params: HashParams::Bcrypt { cost: 10 }, realm: "bcrypt10" },
    ]
}

fn describe(params: &HashParams) -> String {
    match params {
        HashParams::Bcrypt { cost } => format!("cost {cost}"),
        HashParams::Argon2 { memory_kib, iterations, parallelism, .. } => {
            format!("m={memory_kib} t={iterations} p={parallelism}")
        }
    }
}

// ---------------------------------------------------------------------------------------
// The probe.

/// The probe child: times units of SHA-256 work forever, one line of nanoseconds per
/// unit on stdout, and exits when the parent stops reading.
fn probe_main() -> ExitCode {
    let mut buffer: Vec<u8> = (0..PROBE_BUFFER).map(|i| (i % 251) as u8).collect();
    let mut out = std::io::stdout().lock();
    loop {
        let start = Instant::now();
        for _ in 0..PROBE_PASSES {
            let digest = Sha256::digest(std::hint::black_box(&buffer));
            // Each pass depends on the last, so none can be skipped.
            buffer[0] ^= digest[0];
        }
        let nanos = start.elapsed().as_nanos();
        if writeln!(out, "{nanos}").and_then(|()| out.flush()).is_err() {
            return ExitCode::SUCCESS;
        }
    }
}

/// The probe child and the thread collecting its unit times.
struct Probe {
    child: Child,
    /// (when the parent read it, how long the unit took).
    units: Arc<Mutex<Vec<(Instant, Duration)>>>,
    reader: Option<JoinHandle<()>>,
}

impl Probe {
    fn start() -> Self {
        let exe = std::env::current_exe().expect("this bench's path");
        let mut child = Command::new(exe)
            .env(PROBE_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the probe");
        let stdout = child.stdout.take().unwrap();
        let units = Arc::new(Mutex::new(Vec::new()));
        let sink = units.clone();
        let reader = std::thread::Builder::new()
            .name("probe-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Ok(nanos) = line.trim().parse::<u64>() {
                        let unit = (Instant::now(), Duration::from_nanos(nanos));
                        sink.lock().unwrap().push(unit);
                    }
                }
            })
            .expect("probe reader thread");
        Self { child, units, reader: Some(reader) }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Unit times reported in `[from, to)`, sorted.
    fn units(&self, from: Instant, to: Instant) -> Vec<Duration> {
        let units = self.units.lock().unwrap();
        let mut v: Vec<Duration> =
            units.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, d)| *d).collect();
        v.sort_unstable();
        v
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// CPU accounting from /proc.

/// Cumulative CPU seconds per component: this process's threads by name, plus the
/// Redis and probe processes.
type CpuTimes = BTreeMap<&'static str, f64>;

const CPU_COLUMNS: [&str; 6] =
    ["hashing pool", "daemon runtime", "redis-server", "attacker", "probe", "other"];

/// utime + stime of a `/proc/.../stat` line, in seconds, and the command name.
fn parse_stat(stat: &str) -> Option<(String, u32, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    // After ") ": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    // cmajflt utime stime ...
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, ppid, (utime + stime) / TICKS_PER_SECOND))
}

fn read_stat(path: &str) -> Option<(String, u32, f64)> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// The private redis-server: this process's child named `redis-server`.
fn find_redis_pid() -> Option<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let (comm, ppid, _) = read_stat(&format!("/proc/{pid}/stat"))?;
        (ppid == me && comm == "redis-server").then_some(pid)
    })
}

fn cpu_snapshot(redis_pid: Option<u32>, probe_pid: u32) -> CpuTimes {
    let mut times = CpuTimes::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.filter_map(Result::ok) {
            let path = task.path().join("stat");
            let Some((comm, _, secs)) = read_stat(&path.to_string_lossy()) else { continue };
            let component = if comm.starts_with("portcullis-hash") {
                "hashing pool"
            } else if comm == "daemon" {
                "daemon runtime"
            } else if comm == "attack" {
                "attacker"
            } else {
                "other"
            };
            *times.entry(component).or_default() += secs;
        }
    }
    if let Some((_, _, secs)) = redis_pid.and_then(|pid| read_stat(&format!("/proc/{pid}/stat"))) {
        times.insert("redis-server", secs);
    }
    if let Some((_, _, secs)) = read_stat(&format!("/proc/{probe_pid}/stat")) {
        times.insert("probe", secs);
    }
    times
}

// ---------------------------------------------------------------------------------------
// Part 1: per comparison.

/// A wrong password, for the rows that compare without a match.
const WRONG_PASSWORD: &[u8] = b"Winter2024!";

struct CostRow {
    label: String,
    params: String,
    /// Sorted raw comparison times.
    raw: Vec<Duration>,
    /// The daemon's CPU time per `Verify` call (all threads), if `/proc` had it.
    cpu: Option<Duration>,
    /// Sorted `Verify` round trips.
    rpc: Vec<Duration>,
}

/// One comparison to time, raw and through `Verify`.
struct Case<'a> {
    realm: &'a str,
    password: &'a [u8],
    /// The hash compared raw: the stored hash, or for the unknown account the same work
    /// its dummy does (an argon2id hash at the target, wrong password).
    raw: &'a StoredHash,
    /// The `stored_hash` sent (empty: the unknown-account path).
    stored_hash: &'a str,
    want: Verdict,
    /// The `needs_rehash` every answer must carry.
    rehash: bool,
    tag: &'a str,
}

/// [`RUNS`] rounds (after [`WARM_RUNS`]) of the raw comparison, as the daemon runs it
/// (`matches_keeping` with the realm's target memory), and one sequential `Verify` call
/// (a fresh identifier each), alternated so both see the machine in the same state;
/// every answer must be `want`. Returns both sets of times, sorted, and the CPU time
/// the daemon (process `daemon_pid`, all its threads) spent per call, from `/proc`.
fn time_case(
    rt: &tokio::runtime::Runtime,
    client: &mut common::Client,
    daemon_pid: u32,
    case: &Case<'_>,
) -> (Vec<Duration>, Vec<Duration>, Option<Duration>) {
    let (mut raw, mut rpc) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    let daemon_cpu = || read_stat(&format!("/proc/{daemon_pid}/stat")).map(|(_, _, secs)| secs);
    let mut cpu_before = None;
    // Every argon2 realm here targets m = ARGON2_TARGET_KIB (bcrypt ignores it).
    let keep_kib = ARGON2_TARGET_KIB;
    for i in 0..WARM_RUNS + RUNS {
        if i == WARM_RUNS {
            cpu_before = daemon_cpu();
        }
        let start = Instant::now();
        let matched = case.raw.matches_keeping(std::hint::black_box(case.password), keep_kib);
        let took = start.elapsed();
        let want = case.want == Verdict::Accept && !case.stored_hash.is_empty();
        assert_eq!(matched, want, "{}: unexpected comparison result", case.tag);
        if i >= WARM_RUNS {
            raw.push(took);
        }
        let identifier = format!("cost-{}-{i}@example.com", case.tag);
        let start = Instant::now();
        let answer = rt
            .block_on(client.verify(
                case.realm,
                &identifier,
                case.password,
                case.stored_hash,
                "bench-cost",
            ))
            .unwrap_or_else(|s| {
                panic!("{}: Verify failed: {:?} {}", case.tag, s.code(), s.message())
            });
        let took = start.elapsed();
        assert_eq!(answer.verdict, case.want as i32, "{}: unexpected verdict", case.tag);
        assert_eq!(answer.needs_rehash, case.rehash, "{}: unexpected needs_rehash", case.tag);
        if i >= WARM_RUNS {
            rpc.push(took);
        }
    }
    let cpu_per_call = cpu_before
        .zip(daemon_cpu())
        .map(|(before, after)| Duration::from_secs_f64((after - before) / RUNS as f64));
    raw.sort_unstable();
    rpc.sort_unstable();
    (raw, rpc, cpu_per_call)
}

/// Calls in flight in the at-load rows: one comparing, the others counted and queued, so
/// the hashing thread always has the next comparison waiting.
const AT_LOAD_IN_FLIGHT: usize = 3;
/// Alternations of the at-load rows, and comparisons of each kind per round: short
/// rounds, many of them, so the machine's drift moves both sides alike.
const AT_LOAD_ROUNDS: usize = 10;
const AT_LOAD_RUNS: usize = 30;

/// `Verify` at load against the raw comparison back to back, alternated
/// [`AT_LOAD_ROUNDS`] times: [`AT_LOAD_RUNS`] raw comparisons in a loop, then as many accepted
/// `Verify` calls from [`AT_LOAD_IN_FLIGHT`] callers with one client key on one account
/// (each accept clears it, so it never locks). Returns ms per comparison, raw and
/// `Verify`, per round.
fn time_at_load(
    rt: &tokio::runtime::Runtime,
    client: &common::Client,
    hash: &StoredHash,
) -> Vec<(f64, f64)> {
    let per_caller = AT_LOAD_RUNS / AT_LOAD_IN_FLIGHT;
    (0..AT_LOAD_ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..AT_LOAD_RUNS {
                let matched =
                    hash.matches_keeping(std::hint::black_box(PASSWORD), ARGON2_TARGET_KIB);
                assert!(matched, "at load: the raw comparison must match");
            }
            let raw = millis(start.elapsed()) / AT_LOAD_RUNS as f64;
            let start = Instant::now();
            rt.block_on(async {
                let mut callers = tokio::task::JoinSet::new();
                for _ in 0..AT_LOAD_IN_FLIGHT {
                    let (mut client, stored) = (client.clone(), hash.as_str().to_owned());
                    callers.spawn(async move {
                        for _ in 0..per_caller {
                            let answer = client
                                .verify(
                                    "default",
                                    "at-load@example.com",
                                    PASSWORD,
                                    &stored,
                                    "bench-load",
                                )
                                .await
                                .unwrap_or_else(|s| {
                                    panic!("at load: Verify failed: {:?} {}", s.code(), s.message())
                                });
                            assert_eq!(
                                answer.verdict,
                                Verdict::Accept as i32,
                                "at load: not accepted"
                            );
                        }
                    });
                }
                callers.join_all().await;
            });
            let verify = millis(start.elapsed()) / (per_caller * AT_LOAD_IN_FLIGHT) as f64;
            (raw, verify)
        })
        .collect()
}

/// The at-load rows: ms per comparison, raw and through `Verify`, and the difference;
/// then the median round.
fn print_at_load(rounds: &[(f64, f64)]) {
    println!(
        "\n## At load: argon2id m={ARGON2_TARGET_KIB} t=2 p=1, {AT_LOAD_IN_FLIGHT} Verify calls in flight against the raw comparison back to back\n"
    );
    println!("| round | raw ms/comparison | Verify ms/call | Verify − raw % |");
    println!("|---:|---:|---:|---:|");
    let share = |(raw, verify): (f64, f64)| 100.0 * (verify - raw) / raw;
    for (i, &(raw, verify)) in rounds.iter().enumerate() {
        println!("| {} | {raw:.2} | {verify:.2} | {:+.1}% |", i + 1, share((raw, verify)));
    }
    let mut shares: Vec<f64> = rounds.iter().copied().map(share).collect();
    shares.sort_by(f64::total_cmp);
    if let Some(median) = shares.get(shares.len() / 2) {
        println!("\nMedian round: Verify − raw {median:+.1}%.");
    }
}

// ---------------------------------------------------------------------------------------
// Part 2: the flood.

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

/// One `Verify` answer, classified.
enum Answer {
    /// The verdict the caller expects (reject for the attacker, accept for the user).
    Expected,
    /// `RESOURCE_EXHAUSTED`: the CPU budget refused it.
    Refused,
    /// `UNAVAILABLE` (the store timed out) or the call's own deadline passed: what an
    /// overloaded daemon answers. Counted, not fatal.
    Failed(String),
    /// Anything else: a bug in the daemon or in this bench.
    Unexpected(String),
}

fn classify(
    answer: Result<portcullis::pb::VerifyResponse, tonic::Status>,
    want: Verdict,
) -> Answer {
    match answer {
        Ok(r) if r.verdict == want as i32 => Answer::Expected,
        Ok(r) => Answer::Unexpected(format!("unexpected answer {r:?}")),
        Err(s) if s.code() == Code::ResourceExhausted => Answer::Refused,
        Err(s)
            if matches!(s.code(), Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded) =>
        {
            Answer::Failed(format!("{:?}: {}", s.code(), s.message()))
        }
        Err(s) => Answer::Unexpected(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// What callers saw inside the measured window (unexpected answers: at any time).
#[derive(Default)]
struct CallReport {
    /// The expected verdict: a comparison ran.
    expected: u64,
    /// Answered `RESOURCE_EXHAUSTED`.
    refused: u64,
    /// Timed out or `UNAVAILABLE`.
    failed: u64,
    /// Anything else, at any time.
    unexpected: u64,
    quoted: Vec<String>,
    expected_latency: Vec<Duration>,
    refused_latency: Vec<Duration>,
}

impl CallReport {
    fn note(&mut self, answer: Answer, took: Duration, in_window: bool) {
        match answer {
            Answer::Expected if in_window => {
                self.expected += 1;
                self.expected_latency.push(took);
            }
            Answer::Refused if in_window => {
                self.refused += 1;
                self.refused_latency.push(took);
            }
            Answer::Failed(e) if in_window => {
                self.failed += 1;
                self.quote(e);
            }
            Answer::Unexpected(e) => {
                self.unexpected += 1;
                self.quote(e);
            }
            _ => {}
        }
    }

    fn quote(&mut self, e: String) {
        if self.quoted.len() < QUOTED_ERRORS && !self.quoted.contains(&e) {
            self.quoted.push(e);
        }
    }

    fn merge(&mut self, other: CallReport) {
        self.expected += other.expected;
        self.refused += other.refused;
        self.failed += other.failed;
        self.unexpected += other.unexpected;
        for e in other.quoted {
            self.quote(e);
        }
        self.expected_latency.extend(other.expected_latency);
        self.refused_latency.extend(other.refused_latency);
    }

    fn sort(&mut self) {
        self.expected_latency.sort_unstable();
        self.refused_latency.sort_unstable();
    }
}

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
    // One client key per connection, as from 64 addresses: the attacker chooses them.
    let client_key = format!("203.0.113.{index}");
    let mut report = CallReport::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let identifier = format!("ghost-{tag}-{index}-{n}@example.invalid");
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
    let daemon =
        daemon_rt.block_on(common::Daemon::start(common::settings(&redis.url(), config.extra)));
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

// ---------------------------------------------------------------------------------------

/// Timed store round trips per spray-cost row (each in both forms, alternating).
const SPRAY_RUNS: usize = 4000;

/// One store's spray cost: the count alone, the count with its spray check, and the
/// failure note.
struct SprayRow {
    store: &'static str,
    count_only: Vec<Duration>,
    with_check: Vec<Duration>,
    failure_note: Vec<Duration>,
}

/// Part 3: times `record_attempt` alone, `record_attempt` joined with the spray check,
/// and the failure note (a fresh account and password fingerprint each time, as a spray
/// would send), in alternation so drift hits all alike.
async fn time_spray(store: &dyn portcullis::store::Store, label: &'static str) -> SprayRow {
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::spray::SprayFingerprints;
    use portcullis::store::SprayNote;
    use portcullis::store::keys::{AccountKey, KeySecret};
    let secret = KeySecret::new(common::SECRET.as_bytes().to_vec());
    let fingerprints = SprayFingerprints::new(&secret);
    let settings = common::settings("redis://127.0.0.1:1", "");
    let realm = settings.realms.get("default").expect("the default realm").clone();
    let mut row = SprayRow {
        store: label,
        count_only: Vec::new(),
        with_check: Vec::new(),
        failure_note: Vec::new(),
    };
    for i in 0..(SPRAY_RUNS + 200) {
        let id = normalize(Normalization::Exact, &format!("spray-bench-{label}-{i}")).unwrap();
        let key = AccountKey::new(&secret, "default", &id);
        let started = Instant::now();
        store.record_attempt(&key, None, &realm.policy).await.expect("record_attempt");
        let count_only = started.elapsed();
        let key = AccountKey::new(
            &secret,
            "default",
            &normalize(Normalization::Exact, &format!("n{i}{label}")).unwrap(),
        );
        let spray = fingerprints.key("default", format!("password {i}").as_bytes());
        let (period, limit) = (realm.spray.period_ms(), realm.spray.threshold);
        let started = Instant::now();
        let (counted, checked) = tokio::join!(
            store.record_attempt(&key, None, &realm.policy),
            store.note_spray(&spray, &key, SprayNote::Check, period, limit),
        );
        let with_check = started.elapsed();
        counted.expect("record_attempt");
        checked.expect("spray check");
        let started = Instant::now();
        store.note_spray(&spray, &key, SprayNote::Failure, period, limit).await.expect("note");
        let failure_note = started.elapsed();
        if i >= 200 {
            row.count_only.push(count_only);
            row.with_check.push(with_check);
            row.failure_note.push(failure_note);
        }
    }
    row.count_only.sort();
    row.with_check.sort();
    row.failure_note.sort();
    row
}

fn spray_costs(redis: &common::RedisServer, rt: &tokio::runtime::Runtime) -> Vec<SprayRow> {
    let data = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let redis_store =
            portcullis::store::redis::RedisStore::new(&redis.url(), Duration::from_secs(2), 4)
                .expect("redis store");
        let embedded = portcullis::store::embedded::EmbeddedStore::open(
            data.path(),
            Duration::from_secs(2),
            Arc::new(portcullis::store::embedded::SystemClock),
        )
        .expect("embedded store");
        eprintln!("spray: redis ...");
        let redis_row = time_spray(&redis_store, "redis").await;
        eprintln!("spray: embedded ...");
        let embedded_row = time_spray(&embedded, "embedded").await;
        vec![redis_row, embedded_row]
    })
}

fn print_spray(rows: &[SprayRow], argon2id_verify_ms: Option<f64>) {
    println!(
        "\n## Spray detection: store work per Verify attempt ({SPRAY_RUNS} sequential calls each)\n"
    );
    println!(
        "| store | count alone µs median / p99 | count + check µs median / p99 | failure note µs median / p99 | added to a failed Verify µs (median) | of an argon2id Verify |"
    );
    println!("|---|---|---|---|---:|---:|");
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    for r in rows {
        let added = micros(percentile(&r.with_check, 500)) - micros(percentile(&r.count_only, 500))
            + micros(percentile(&r.failure_note, 500));
        let share = argon2id_verify_ms
            .map_or_else(|| "—".to_owned(), |ms| format!("{:.2}%", 100.0 * added / (ms * 1e3)));
        println!(
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {added:+.0} | {share} |",
            r.store,
            micros(percentile(&r.count_only, 500)),
            micros(percentile(&r.count_only, 990)),
            micros(percentile(&r.with_check, 500)),
            micros(percentile(&r.with_check, 990)),
            micros(percentile(&r.failure_note, 500)),
            micros(percentile(&r.failure_note, 990)),
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nLoad average after the spray rows: {}.", load.trim());
}

fn main() -> ExitCode {
    if std::env::var_os(PROBE_ENV).is_some() {
        return probe_main();
    }
    let redis = common::RedisServer::start();
    if std::env::var("PORTCULLIS_BENCH_ROWS").is_ok_and(|v| v == "spray") {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        print_spray(&spray_costs(&redis, &rt), None);
        return ExitCode::SUCCESS;
    }
    let redis_pid = find_redis_pid();
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

    // Part 1: per comparison, on a quiet machine (no probe yet), against the real binary
    // in its own process: its allocator and its runtime (`server.io_threads`) are the
    // ones a deployment has.
    let daemon =
        common::DaemonProcess::spawn_quiet(&common::config_toml(&redis.url(), EXTRA_REALMS));
    let mut cost_rows = Vec::new();
    let mut argon2id_hash = None;
    let mut client = attack_rt.block_on(common::Client::connect(daemon.addr));
    // What Verify adds when the hashing costs next to nothing: argon2id at its minimum
    // (m=8 t=1 p=1), below the realm's target, so accepted with `needs_rehash`.
    eprintln!("cost: argon2id at its minimum ...");
    let minimum = HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: 8,
        iterations: 1,
        parallelism: 1,
    };
    let hash = StoredHash::generate(PASSWORD, &minimum).expect("hash");
    let case = Case {
        realm: "default",
        password: PASSWORD,
        raw: &hash,
        stored_hash: hash.as_str(),
        want: Verdict::Accept,
        rehash: true,
        tag: "minimum",
    };
    let (raw, rpc, cpu) = time_case(&attack_rt, &mut client, daemon.pid(), &case);
    let label = "argon2id at its minimum (the daemon's own work)".into();
    cost_rows.push(CostRow { label, params: describe(&minimum), raw, rpc, cpu });
    for target in targets() {
        eprintln!("cost: {} ...", target.label);
        let hash = StoredHash::generate(PASSWORD, &target.params).expect("hash");
        let case = Case {
            realm: target.realm,
            password: PASSWORD,
            raw: &hash,
            stored_hash: hash.as_str(),
            want: Verdict::Accept,
            rehash: false,
            tag: target.label,
        };
        let (raw, rpc, cpu) = time_case(&attack_rt, &mut client, daemon.pid(), &case);
        let params = describe(&target.params);
        cost_rows.push(CostRow { label: target.label.into(), params, raw, rpc, cpu });
        if target.realm == "default" {
            argon2id_hash = Some(hash);
        }
    }
    let argon2id_hash = argon2id_hash.expect("the argon2id target is measured");
    // The timing rule: a wrong password and an unknown identifier cost the same. Both
    // are alternated with the same raw work: the wrong password against the hash.
    for (label, tag, stored_hash) in [
        ("argon2id, wrong password", "wrong", argon2id_hash.as_str()),
        ("unknown account (`stored_hash` empty: argon2id dummy)", "unknown", ""),
    ] {
        eprintln!("cost: {label} ...");
        let case = Case {
            realm: "default",
            password: WRONG_PASSWORD,
            raw: &argon2id_hash,
            stored_hash,
            want: Verdict::Reject,
            rehash: false,
            tag,
        };
        let (raw, rpc, cpu) = time_case(&attack_rt, &mut client, daemon.pid(), &case);
        let params = describe(&argon2id_hash.params());
        cost_rows.push(CostRow { label: label.into(), params, raw, rpc, cpu });
    }
    eprintln!("cost: at load ...");
    let at_load = time_at_load(&attack_rt, &client, &argon2id_hash);
    drop(client);
    let argon2id_hash = argon2id_hash.as_str().to_owned();
    drop(daemon);
    if std::env::var("PORTCULLIS_BENCH_ROWS").is_ok_and(|v| v == "cost") {
        print_cost(&cost_rows);
        print_at_load(&at_load);
        return ExitCode::SUCCESS;
    }

    // Part 2: the flood, with the probe running throughout.
    let probe = Probe::start();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
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

    print_tables(&cost_rows, &at_load, &flood_rows, load_before.trim());
    let argon2id_ms =
        cost_rows.iter().find(|r| r.label == "argon2id").map(|r| millis(percentile(&r.rpc, 500)));
    print_spray(&spray_costs(&redis, &daemon_rt), argon2id_ms);
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

/// Part 1's table: raw and `Verify` times per row; what `Verify` adds to the median, in
/// ms and as a share of the raw median (not for the minimum row, whose raw time is next
/// to nothing); and the daemon's CPU time per call.
fn print_cost(cost: &[CostRow]) {
    println!(
        "## Per comparison (idle machine, {RUNS} timed rounds per row, raw and Verify alternated)\n"
    );
    println!(
        "| algorithm | parameters | raw median ms | raw p99 ms | Verify median ms | Verify p99 ms | Verify − raw (median) ms | Verify − raw (median) % | daemon CPU ms/call |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in cost {
        let raw_p50 = millis(percentile(&r.raw, 500));
        let rpc_p50 = millis(percentile(&r.rpc, 500));
        let share = if raw_p50 >= 1.0 {
            format!("{:+.1}%", 100.0 * (rpc_p50 - raw_p50) / raw_p50)
        } else {
            "—".to_owned()
        };
        let cpu = r.cpu.map_or_else(|| "—".to_owned(), |d| format!("{:.2}", millis(d)));
        println!(
            "| {} | {} | {raw_p50:.2} | {:.2} | {rpc_p50:.2} | {:.2} | {:+.2} | {share} | {cpu} |",
            r.label,
            r.params,
            millis(percentile(&r.raw, 990)),
            millis(percentile(&r.rpc, 990)),
            rpc_p50 - raw_p50,
        );
    }
}

fn print_tables(cost: &[CostRow], at_load: &[(f64, f64)], flood: &[FloodRow], load: &str) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    print_cost(cost);
    print_at_load(at_load);

    println!("\n## Flood: unknown-identifier Verify calls, closed loop ({cores} cores)\n");
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
