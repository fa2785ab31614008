//! `cargo bench --bench throttle`: `RecordAttempt` through the daemon over loopback
//! gRPC, beside the same Lua script called directly with redis-rs, at 1, 16 and 64
//! calls in flight. Prints markdown tables; `docs/performance.md` ("Throttle")
//! explains them.
//!
//! Three paths, each a layer of the one below it:
//! 1. `script`: `record_attempt.lua` with the realm's arguments, on one multiplexed
//!    redis-rs connection: what Redis itself costs.
//! 2. `store`: the service's work without gRPC, in this process: realm lookup,
//!    identifier normalization, the HMAC account key, and the daemon's `RedisStore`
//!    (pool, deadline, script). A second `store` row runs the same with
//!    `store.wait_replicas = 1` against a master with one replica: the cost of `WAIT`.
//! 3. `gRPC`: `RecordAttempt` through a daemon over loopback TCP, HTTP/2.
//!
//! All three run against one private `redis-server` (never the shared 6379). The
//! daemon runs in this process but on its own tokio runtime, so its worker threads are
//! not the load generator's; everything still shares the machine's cores.
//!
//! Besides the table it prints, per cell, the CPU each party spent per call (threads
//! of each runtime from `/proc/self/task`, Redis from `INFO cpu`) and the Redis
//! commands per call (`INFO commandstats`), which say where the daemon's overhead goes.
//!
//! Then load tools outside the in-process client (`load_tools`, `h2_load` in
//! `tests/support`): `redis-benchmark` (Redis's own; Debian: `redis-tools`) runs `EVALSHA` of the
//! same script straight on Redis, and the repository's own HTTP/2 load generator (`own h2
//! load tool` rows: h2load's way, C connections × S streams, one pre-encoded gRPC frame
//! POSTed per call, every answer's `grpc-status` checked) drives the real `portcullis`
//! binary (a separate process, on the same Redis; once more with a candidate policy in the
//! realm, what it costs) with one hot account, every call counted, at 64 and 16 calls in
//! flight, then paced at half the 64-in-flight peak (open loop: latency off the limit); on
//! the Redis daemon, the standard gRPC health check at 64 in flight and at that paced rate
//! (the server stack's floor). The load tool runs on a runtime of its own
//! (`load_tools::tool_rows`); the table prints each rate's ratio to the `EVALSHA` figure
//! of the same run. Besides `redis-server` and `redis-benchmark` nothing outside the repository
//! is needed. `PORTCULLIS_BENCH_ROWS=tools` runs only these rows.
//!
//! `PORTCULLIS_BENCH_STORE_TOML`, if set, is added to the daemon's `[store]` table
//! (for example `pool_size = 64`), to try store settings without editing anything.
//! `PORTCULLIS_BENCH_IO_THREADS=N` sets `[server] io_threads` of the load-tool rows' daemons
//! (default: the daemon's own, 1).

use portcullis_test_support as common;
use portcullis_test_support::bench as support;
use portcullis_test_support::load_tools::{self, commands_per_call, script_args, script_keys};
use portcullis_test_support::proc_cpu::{machine_cpu, threads_cpu};

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{commandstats, millis, percentile, redis_cpu_seconds};

use portcullis::config::StoreSettings;
use portcullis::normalize::normalize;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{Account, Decision, RecordAttemptRequest};
use portcullis::realm::Realms;
use portcullis::secret::KeySecret;
use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::keys::AccountKey;
use portcullis::store::redis::RedisStore;
use portcullis::store::redis::settings::RedisSettings;
use redis::Script;
use redis::aio::MultiplexedConnection;
use tonic::transport::Channel;

/// Calls in flight per cell.
const IN_FLIGHT: [usize; 3] = [1, 16, 64];
/// Calls before this are not measured (connections, pool, script cache, branch caches).
const WARM_UP: Duration = Duration::from_secs(1);
/// Measured time per cell, unless [`MAX_CALLS`] comes first.
const MEASURE: Duration = Duration::from_secs(3);
/// Measured calls per cell, unless [`MEASURE`] runs out first.
const MAX_CALLS: u64 = 1_000_000;
/// Distinct accounts each path cycles over, so no single key is hot.
const ACCOUNTS: u64 = 100_000;
/// Most HTTP/2 connections to the daemon; cell `n` uses `min(n, MAX_CHANNELS)`.
const MAX_CHANNELS: usize = 8;
/// Errors quoted per cell when some calls fail.
const QUOTED_ERRORS: usize = 3;

/// Row names of the three paths (see the top of this file).
const SCRIPT_PATH: &str = "script: record_attempt.lua via redis-rs";
const STORE_PATH: &str = "store: key + RedisStore, in process";
const STORE_WAIT_PATH: &str = "store: key + RedisStore, wait_replicas = 1 (one replica)";
/// `store.wait_timeout` of the WAIT row.
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);

const GRPC_PATH: &str = "gRPC: RecordAttempt via the daemon";
const EMBEDDED_PATH: &str = "gRPC: RecordAttempt via the daemon, embedded store";

/// Next account number, shared by every cell of a path so cells do not reuse keys early.
static NEXT_ACCOUNT: AtomicU64 = AtomicU64::new(0);

/// One way of making one `RecordAttempt` call for account number `n`.
trait Caller: Send + 'static {
    fn call(&mut self, n: u64) -> impl Future<Output = Result<(), String>> + Send;
}

/// Through the daemon: gRPC, validation, normalization, HMAC key, pool, script.
struct GrpcCaller(GovernorClient<Channel>);

impl Caller for GrpcCaller {
    async fn call(&mut self, n: u64) -> Result<(), String> {
        let request = RecordAttemptRequest {
            account: Some(Account {
                realm: "default".into(),
                identifier: format!("user{n}@example.com"),
            }),
            attempt_id: String::new(),
            client_key: String::new(),
        };
        let reply = self
            .0
            .record_attempt(request)
            .await
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?;
        match Decision::try_from(reply.into_inner().decision) {
            Ok(Decision::Allow | Decision::Deny) => Ok(()),
            other => Err(format!("unexpected decision {other:?}")),
        }
    }
}

/// What [`StoreCaller`]s share: a store built as the daemon builds its own.
struct StoreContext {
    store: RedisStore,
    realms: Realms,
    secret: KeySecret,
}

/// The service's `RecordAttempt` without gRPC: realm, normalization, account key, store.
struct StoreCaller(Arc<StoreContext>);

impl Caller for StoreCaller {
    async fn call(&mut self, n: u64) -> Result<(), String> {
        let cx = &*self.0;
        let realm = cx.realms.get("default").ok_or("realm default is not configured")?;
        let identifier = normalize(realm.normalization, &format!("user{n}@example.com"))
            .map_err(|e| e.to_string())?;
        let key = AccountKey::new(&cx.secret, &realm.name, &identifier);
        cx.store
            .record_attempt(&key, None, &realm.policy)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// Straight to Redis: the same script and arguments on one multiplexed connection.
#[derive(Clone)]
struct ScriptCaller {
    script: Arc<Script>,
    conn: MultiplexedConnection,
    /// The store's arguments for an untrusted attempt, made once (they name no account).
    args: Arc<Vec<String>>,
}

impl Caller for ScriptCaller {
    async fn call(&mut self, n: u64) -> Result<(), String> {
        let mut call = self.script.prepare_invoke();
        for key in script_keys(&format!("bench-{n}")) {
            call.key(key);
        }
        for arg in self.args.iter() {
            call.arg(arg);
        }
        let reply: Vec<u8> = call.invoke_async(&mut self.conn).await.map_err(|e| e.to_string())?;
        if portcullis::store::redis::attempt_count::is_record_attempt_reply(&reply) {
            Ok(())
        } else {
            Err(format!("script returned {} bytes", reply.len()))
        }
    }
}

/// What one worker saw during its cell.
#[derive(Default)]
struct WorkerReport {
    latencies: Vec<Duration>,
    errors: u64,
    quoted: Vec<String>,
    last_done: Option<Instant>,
}

/// One row of the table.
struct Row {
    path: &'static str,
    in_flight: usize,
    calls: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    max: Duration,
    errors: u64,
    quoted: Vec<String>,
    /// CPU spent during the measured time.
    cpu: Cpu,
    /// Redis commands run during the measured time, by name, most first (commands a
    /// script runs are counted too).
    commands: Vec<(String, u64)>,
}

/// CPU seconds used so far: by the load generator's and the daemon's runtime threads,
/// by Redis, and by the whole machine (busy, and busy plus idle).
#[derive(Clone, Copy, Default)]
struct Cpu {
    load: f64,
    daemon: f64,
    redis: f64,
    machine_busy: f64,
    machine_total: f64,
}

impl Cpu {
    async fn now(conn: &mut MultiplexedConnection) -> Self {
        // The two runtimes' threads, by name.
        let threads = threads_cpu(|name| {
            ["daemon", "load"].into_iter().find(|runtime| name.starts_with(runtime))
        });
        let runtime = |name| threads.get(name).copied().unwrap_or(0.0);
        let (load, daemon) = (runtime("load"), runtime("daemon"));
        let info: String =
            redis::cmd("INFO").arg("cpu").query_async(conn).await.unwrap_or_default();
        let redis = redis_cpu_seconds(&info);
        let (machine_busy, machine_total) = machine_cpu();
        Self { load, daemon, redis, machine_busy, machine_total }
    }

    fn since(self, earlier: Self) -> Self {
        Self {
            load: self.load - earlier.load,
            daemon: self.daemon - earlier.daemon,
            redis: self.redis - earlier.redis,
            machine_busy: self.machine_busy - earlier.machine_busy,
            machine_total: self.machine_total - earlier.machine_total,
        }
    }

    /// Share of the machine's CPU that neither runtime nor Redis used: other
    /// processes (a compiler, a test run), which make the numbers noisy.
    fn others_percent(&self) -> f64 {
        let ours = self.load + self.daemon + self.redis;
        if self.machine_total > 0.0 {
            ((self.machine_busy - ours) / self.machine_total * 100.0).max(0.0)
        } else {
            0.0
        }
    }

    /// Share of the machine's CPU that was busy.
    fn busy_percent(&self) -> f64 {
        if self.machine_total > 0.0 { self.machine_busy / self.machine_total * 100.0 } else { 0.0 }
    }
}

/// Calls per command since the last `CONFIG RESETSTAT`, most first.
async fn redis_commands(conn: &mut MultiplexedConnection) -> Vec<(String, u64)> {
    let info: String =
        redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap_or_default();
    commandstats(&info)
}

/// Runs one cell: `callers.len()` workers, each with one call in flight, for the warm-up
/// and then until [`MEASURE`] or [`MAX_CALLS`]. Only successful calls started after the
/// warm-up are timed; every failed call, warm-up included, is counted. `probe` (a
/// connection to the same Redis) reads CPU and command counts around the measured time.
async fn run_cell<C: Caller>(
    path: &'static str,
    callers: Vec<C>,
    probe: &mut MultiplexedConnection,
) -> Row {
    let in_flight = callers.len();
    let measure_start = Instant::now() + WARM_UP;
    let end = measure_start + MEASURE;
    let measured = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            let measured = measured.clone();
            tokio::spawn(async move {
                let mut report = WorkerReport::default();
                loop {
                    let start = Instant::now();
                    if start >= end || measured.load(Ordering::Relaxed) >= MAX_CALLS {
                        break;
                    }
                    let n = NEXT_ACCOUNT.fetch_add(1, Ordering::Relaxed) % ACCOUNTS;
                    let result = caller.call(n).await;
                    let done = Instant::now();
                    match result {
                        Ok(()) if start >= measure_start => {
                            report.latencies.push(done - start);
                            report.last_done = Some(done);
                            measured.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(()) => {}
                        Err(e) => {
                            report.errors += 1;
                            if report.quoted.len() < QUOTED_ERRORS {
                                report.quoted.push(e);
                            }
                        }
                    }
                }
                report
            })
        })
        .collect();

    tokio::time::sleep_until(measure_start.into()).await;
    let _: redis::RedisResult<()> = redis::cmd("CONFIG").arg("RESETSTAT").query_async(probe).await;
    let cpu_before = Cpu::now(probe).await;
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut quoted = Vec::new();
    let mut last_done = measure_start;
    for worker in workers {
        let report = worker.await.expect("bench worker panicked");
        latencies.extend(report.latencies);
        errors += report.errors;
        quoted.extend(report.quoted);
        last_done = last_done.max(report.last_done.unwrap_or(measure_start));
    }
    let cpu = Cpu::now(probe).await.since(cpu_before);
    // Without the probe's own INFO and CONFIG RESETSTAT.
    let commands = redis_commands(probe)
        .await
        .into_iter()
        .filter(|(name, _)| name != "info" && !name.starts_with("config"))
        .collect();
    quoted.truncate(QUOTED_ERRORS);
    latencies.sort_unstable();
    Row {
        path,
        in_flight,
        calls: latencies.len() as u64,
        elapsed: last_done - measure_start,
        p50: percentile(&latencies, 500),
        p99: percentile(&latencies, 990),
        p999: percentile(&latencies, 999),
        max: latencies.last().copied().unwrap_or_default(),
        errors,
        quoted,
        cpu,
        commands,
    }
}

fn main() -> ExitCode {
    let redis = common::RedisServer::start();
    let store_toml = std::env::var("PORTCULLIS_BENCH_STORE_TOML").unwrap_or_default();
    let tools_only = std::env::var("PORTCULLIS_BENCH_ROWS").is_ok_and(|v| v == "tools");
    let settings = common::TestConfig::redis(&redis.url()).extra(&store_toml).settings();
    let StoreSettings::Redis(redis_settings) = settings.store.clone() else {
        panic!("the bench settings must select the Redis store");
    };
    let store = Arc::new(StoreContext {
        store: RedisStore::open(&redis_settings).expect("Redis store"),
        realms: settings.realms.clone(),
        secret: settings.secret.clone().expect("a Redis store has a key secret"),
    });
    // The same store with `store.wait_replicas = 1`: each count waits for a replica's
    // confirmation (WAIT pipelined behind the script), to measure what that costs.
    let replica = common::RedisServer::start();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(redis.port)
        .query(&mut replica.conn())
        .expect("REPLICAOF");
    support::wait_for_sync(&replica);
    let waiting = Arc::new(StoreContext {
        store: RedisStore::open(&RedisSettings {
            wait_replicas: 1,
            wait_timeout: WAIT_TIMEOUT,
            ..redis_settings.clone()
        })
        .expect("Redis store"),
        realms: settings.realms.clone(),
        secret: settings.secret.clone().expect("a Redis store has a key secret"),
    });

    // The daemon on its own runtime (default size: one worker per core), the load
    // generator on another, as if they were separate processes on one machine.
    let daemon_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("daemon")
        .enable_all()
        .build()
        .expect("daemon runtime");
    let load_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("load")
        .enable_all()
        .build()
        .expect("load runtime");
    let daemon = daemon_rt.block_on(common::Daemon::start(settings));
    // A second daemon on the embedded store (the default without Redis), in a fresh
    // data directory on the same disk as the build.
    let data_dir = tempfile::tempdir().expect("data directory");
    let embedded = daemon_rt
        .block_on(common::Daemon::start(common::TestConfig::embedded(data_dir.path()).settings()));

    let rows: Vec<Row> = load_rt.block_on(async {
        let script = Arc::new(Script::new(portcullis::store::redis::RECORD_ATTEMPT_SOURCE));
        let conn =
            redis.client().get_multiplexed_async_connection().await.expect("redis connection");
        // A connection of its own, so probing never queues behind the script calls.
        let mut probe =
            redis.client().get_multiplexed_async_connection().await.expect("redis connection");
        let mut rows = Vec::new();
        let in_process = if tools_only { &[][..] } else { &IN_FLIGHT[..] };
        let args = Arc::new(script_args("bench"));
        let script_caller = ScriptCaller { script: script.clone(), conn: conn.clone(), args };
        for &in_flight in in_process {
            eprintln!("script, {in_flight} in flight ...");
            let callers = (0..in_flight).map(|_| script_caller.clone()).collect();
            rows.push(run_cell(SCRIPT_PATH, callers, &mut probe).await);

            eprintln!("store, {in_flight} in flight ...");
            let callers = (0..in_flight).map(|_| StoreCaller(store.clone())).collect();
            rows.push(run_cell(STORE_PATH, callers, &mut probe).await);

            eprintln!("store with WAIT 1, {in_flight} in flight ...");
            let callers = (0..in_flight).map(|_| StoreCaller(waiting.clone())).collect();
            rows.push(run_cell(STORE_WAIT_PATH, callers, &mut probe).await);

            eprintln!("gRPC, {in_flight} in flight ...");
            let mut channels = Vec::new();
            for _ in 0..in_flight.min(MAX_CHANNELS) {
                channels.push(daemon.client().await.0);
            }
            let callers =
                (0..in_flight).map(|i| GrpcCaller(channels[i % channels.len()].clone())).collect();
            rows.push(run_cell(GRPC_PATH, callers, &mut probe).await);

            eprintln!("gRPC on the embedded store, {in_flight} in flight ...");
            let mut channels = Vec::new();
            for _ in 0..in_flight.min(MAX_CHANNELS) {
                channels.push(embedded.client().await.0);
            }
            let callers =
                (0..in_flight).map(|i| GrpcCaller(channels[i % channels.len()].clone())).collect();
            rows.push(run_cell(EMBEDDED_PATH, callers, &mut probe).await);
        }
        rows
    });
    // Every client is gone, so the daemons' graceful shutdown has nothing to wait for.
    daemon_rt.block_on(daemon.shutdown());
    daemon_rt.block_on(embedded.shutdown());
    drop(daemon_rt);

    let (tool_rows, tool_notes) = load_tools::tool_rows(&redis, &store_toml, data_dir.path());

    println!("| path | in flight | calls/s | p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|");
    for row in &rows {
        println!(
            "| {} | {} | {:.0} | {:.3} | {:.3} |",
            row.path,
            row.in_flight,
            row.calls as f64 / row.elapsed.as_secs_f64(),
            millis(row.p50),
            millis(row.p99),
        );
    }
    println!(
        "\n{}s warm-up, then {}s or {} calls per cell; {} distinct accounts per path.",
        WARM_UP.as_secs(),
        MEASURE.as_secs(),
        MAX_CALLS,
        ACCOUNTS
    );

    println!(
        "\n| path | in flight | CPU µs/call: load gen | daemon | redis | machine busy | \
         other processes | Redis commands/call (besides the script's own) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for row in &rows {
        let per_call = |seconds: f64| seconds * 1e6 / row.calls.max(1) as f64;
        let commands = commands_per_call(&row.commands, row.calls);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}% | {} |",
            row.path,
            row.in_flight,
            per_call(row.cpu.load),
            per_call(row.cpu.daemon),
            per_call(row.cpu.redis),
            row.cpu.busy_percent(),
            row.cpu.others_percent(),
            commands,
        );
    }
    if !store_toml.is_empty() {
        println!("\nPORTCULLIS_BENCH_STORE_TOML: {store_toml}");
    }

    load_tools::print_tool_rows(&tool_rows, &tool_notes);

    let mut failed = false;
    for row in &rows {
        println!(
            "{} @ {}: {} calls measured in {:.2}s, p99.9 {:.3} ms, max {:.3} ms, {} errors",
            row.path,
            row.in_flight,
            row.calls,
            row.elapsed.as_secs_f64(),
            millis(row.p999),
            millis(row.max),
            row.errors
        );
        for e in &row.quoted {
            println!("    error: {e}");
        }
        failed |= row.errors > 0;
    }
    if failed {
        eprintln!("some calls failed; the numbers above do not count them");
        // Returned, not `process::exit`, so the private redis-server is still stopped.
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
