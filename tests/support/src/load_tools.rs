//! The throttle bench's rows measured by load tools outside the in-process client: the
//! repository's own HTTP/2 load generator ([`crate::h2_load`], h2load's way of loading a
//! server) against the real `portcullis` binary, and `redis-benchmark` (which ships with
//! `redis-server`) running `EVALSHA` of `record_attempt.lua` straight on Redis, so one run
//! prints the ratio between the daemon and the script it wraps; and `record_attempt.lua`'s
//! keys and arguments as the bench calls it, which its in-process script row shares.
//! [`tool_rows`] runs the whole list, `RecordAttempt` on each daemon and the health
//! check's floor rows. Nothing here needs a tool from outside the repository besides
//! Redis's own.

use std::net::SocketAddr;
use std::process::Command;

use bytes::Bytes;

use crate::h2_load::{self, Load, LoadReport};
use crate::{DaemonProcess, RedisServer, TestConfig};

/// `RecordAttempt`'s path: the method of every load-tool row but the floor rows.
pub const RECORD_ATTEMPT_PATH: &str = "/portcullis.v1.Governor/RecordAttempt";
/// The standard gRPC health check's path: the floor rows' method ([`tool_rows`]).
/// `benches/instructions_per_call.sh` spells it too (`CALL=health`).
pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// What the daemon sends `record_attempt.lua` for an untrusted attempt of account `tag`
/// in realm `default` (the default policy, the default attempt id horizon), in the
/// script's order: taken from the store's own code, so a bench sends what the store
/// sends.
pub fn script_args(tag: &str) -> Vec<String> {
    let secret = portcullis::secret::KeySecret::new(crate::SECRET.as_bytes().to_vec());
    let id = portcullis::normalize::normalize(portcullis::normalize::Normalization::Exact, tag)
        .expect("a bench tag is an identifier");
    let key = portcullis::store::keys::AccountKey::new(&secret, "default", &id);
    let horizon = portcullis::store::DEFAULT_ATTEMPT_ID_HORIZON.as_millis() as u64;
    portcullis::store::redis::attempt_count::record_attempt_argv(
        &key,
        &portcullis::throttle::Policy::default(),
        horizon,
    )
}

/// The keys `record_attempt.lua` takes for account `tag` without a device or an
/// attempt id: the record alone.
pub fn script_keys(tag: &str) -> [String; 1] {
    [format!("portcullis:v2:{{{tag}}}:r")]
}

/// Commands `record_attempt.lua` runs itself, which `INFO commandstats` also counts.
pub const SCRIPT_COMMANDS: [&str; 6] = ["time", "hmget", "hset", "pexpire", "get", "set"];

/// `name 0.00` per call of each command in `commands` (from
/// [`crate::bench::commandstats`]) besides the script's own and a probe's (`INFO`,
/// `CONFIG`), joined with commas.
pub fn commands_per_call(commands: &[(String, u64)], calls: u64) -> String {
    let per_call: Vec<String> = commands
        .iter()
        .filter(|(name, _)| {
            !SCRIPT_COMMANDS.contains(&name.as_str())
                && name != "info"
                && !name.starts_with("config")
        })
        .map(|(name, n)| format!("{name} {:.2}", *n as f64 / calls.max(1) as f64))
        .collect();
    per_call.join(", ")
}

/// One load-tool measurement.
pub struct ToolRow {
    /// What was measured.
    pub path: String,
    /// Requests in flight (connections × streams, or clients).
    pub in_flight: usize,
    /// Calls per second.
    pub rate: f64,
    /// p99 latency, in ms (own h2 load tool: per call; redis-benchmark: its own p99).
    pub p99_ms: f64,
    /// CPU of the serving process, in percent of one core (h2 load tool rows only).
    pub cpu_percent: Option<f64>,
    /// Redis commands per call besides the script's own, e.g. `ping 1.00`.
    pub commands: String,
}

/// A gRPC-framed `RecordAttemptRequest` (flag byte 0, 4-byte big-endian length, the
/// protobuf) for one account, encoded once for every call of a run.
pub fn record_attempt_frame(realm: &str, identifier: &str) -> Bytes {
    h2_load::grpc_frame(&portcullis::pb::RecordAttemptRequest {
        account: Some(portcullis::pb::Account {
            realm: realm.into(),
            identifier: identifier.into(),
        }),
        attempt_id: String::new(),
        client_key: String::new(),
    })
}

/// The gRPC `HealthCheckRequest` for the whole server (`service` empty), framed: the
/// call that does none of the daemon's own work, so its cost is the server stack's floor.
/// Its only field at its default is not encoded (proto3), so the message is empty: the
/// frame is the 5-byte header of a 0-byte message.
pub fn health_check_frame() -> Bytes {
    h2_load::grpc_frame(&())
}

/// The method at `path` with `frame` (what [`record_attempt_frame`] or
/// [`health_check_frame`] made) from the own h2 load tool against `addr`, `conns` ×
/// `streams` in flight, `calls` measured after `warm_up` unmeasured ones (paced at
/// `rate` calls/s if given, [`Load::rate`]), on `threads` threads, sampling the CPU of
/// `pid`. An error unless every measured call was answered with `grpc-status` 0.
/// Blocks; call it outside any tokio runtime.
pub fn run_h2_load(
    addr: SocketAddr,
    (path, frame): (&'static str, &Bytes),
    (conns, streams): (usize, usize),
    (warm_up, calls, rate): (u64, u64, Option<f64>),
    threads: usize,
    pid: u32,
) -> Result<LoadReport, String> {
    let report = h2_load::run(&Load {
        addr,
        path,
        frame: frame.clone(),
        // The bench daemons take calls without a bearer token.
        authorization: None,
        connections: conns,
        streams,
        warm_up,
        calls,
        rate,
        threads,
        cpu_of: Some(pid),
    })?;
    if report.all_ok() {
        Ok(report)
    } else {
        Err(format!("not every call succeeded: {}; {}", report.line(), report.quoted.join("; ")))
    }
}

/// The `redis-benchmark` row: `record_attempt.lua` loaded on `redis`, then `requests`
/// `EVALSHA` calls on one hot key (as the load-tool rows' calls are) from `clients`.
pub fn evalsha_row(redis: &RedisServer, clients: usize, requests: u64) -> Result<ToolRow, String> {
    let source = portcullis::store::redis::RECORD_ATTEMPT_SOURCE;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query(&mut redis.conn())
        .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
    let keys = script_keys("bench-hot");
    let keys = keys.each_ref().map(String::as_str);
    let args = script_args("bench-hot");
    let (rate, p99_ms) = run_redis_benchmark(redis.port, &sha, &keys, &args, clients, requests)?;
    Ok(ToolRow {
        path: "redis-benchmark: EVALSHA record_attempt.lua".into(),
        in_flight: clients,
        rate,
        p99_ms,
        cpu_percent: None,
        commands: String::new(),
    })
}

/// One own-h2-load-tool row `label` against `daemon` ([`run_h2_load`]: `call` is the
/// method's path and frame, `calls` warm-up, measured calls and the pace, if any), with
/// the Redis commands per call that `probe` (a connection to the daemon's Redis, if it
/// has one) counted, warm-up included; the load tool on one thread. Returns the row
/// and the tool's own line.
pub fn h2_load_row(
    label: &str,
    daemon: &DaemonProcess,
    call: (&'static str, &Bytes),
    (conns, streams): (usize, usize),
    calls: (u64, u64, Option<f64>),
    probe: &mut redis::Connection,
) -> Result<(ToolRow, String), String> {
    let _: redis::RedisResult<()> = redis::cmd("CONFIG").arg("RESETSTAT").query(probe);
    let shape = (conns, streams);
    let run = run_h2_load(daemon.addr, call, shape, calls, H2_LOAD_THREADS, daemon.pid())?;
    let info: String = redis::cmd("INFO").arg("commandstats").query(probe).unwrap_or_default();
    let row = ToolRow {
        path: label.into(),
        in_flight: conns * streams,
        rate: run.rate(),
        p99_ms: run.p99_ms(),
        cpu_percent: run.cpu_percent,
        commands: commands_per_call(&crate::bench::commandstats(&info), run.sent),
    };
    Ok((row, format!("{label}, {}", run.line())))
}

/// The load-tool table: each row's rate, its ratio to the `EVALSHA` row's (when that
/// comes first), p99, the daemon's CPU and Redis commands per call; then `notes`.
pub fn print_tool_rows(rows: &[ToolRow], notes: &[String]) {
    let evalsha = rows.first().filter(|r| r.path.starts_with("redis-benchmark")).map(|r| r.rate);
    println!(
        "\n| load tool path | in flight | calls/s | × EVALSHA | p99 ms | daemon CPU (cores) | \
         daemon CPU µs/call | Redis commands/call (besides the script's own) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for row in rows {
        let ratio = evalsha.map_or("".into(), |e| format!("{:.2}", row.rate / e));
        let (cores, per_call) = match row.cpu_percent {
            Some(cpu) => {
                (format!("{:.2}", cpu / 100.0), format!("{:.1}", cpu / 100.0 * 1e6 / row.rate))
            }
            None => (String::new(), String::new()),
        };
        println!(
            "| {} | {} | {:.0} | {} | {:.3} | {} | {} | {} |",
            row.path, row.in_flight, row.rate, ratio, row.p99_ms, cores, per_call, row.commands
        );
    }
    for note in notes {
        println!("    {note}");
    }
}

/// `redis-benchmark -c clients EVALSHA sha N keys… args…` on `port`: calls/s and p99 ms.
pub fn run_redis_benchmark(
    port: u16,
    sha: &str,
    keys: &[&str],
    args: &[String],
    clients: usize,
    requests: u64,
) -> Result<(f64, f64), String> {
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string(), "--csv"])
        .args(["EVALSHA", sha, &keys.len().to_string()])
        .args(keys);
    command.args(args);
    let output = command.output().map_err(|e| format!("redis-benchmark not runnable: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("redis-benchmark failed: {stdout}"));
    }
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = stdout
        .lines()
        .find(|l| l.starts_with("\"EVALSHA"))
        .ok_or_else(|| format!("no EVALSHA row in: {stdout}"))?;
    let values: Vec<f64> =
        row.split("\",\"").skip(1).filter_map(|v| v.trim_matches('"').parse().ok()).collect();
    match values[..] {
        [rps, _avg, _min, _p50, _p95, p99, ..] => Ok((rps, p99)),
        _ => Err(format!("unexpected redis-benchmark row: {row}")),
    }
}

/// Calls per load-tool run after its warm-up.
const H2_LOAD_CALLS: u64 = 100_000;
/// Unmeasured calls before each load-tool run, on the same connections.
const H2_LOAD_WARM_UP: u64 = 10_000;
/// HTTP/2 connections × streams per connection of each load-tool row.
const H2_LOAD_SHAPES: [(usize, usize); 2] = [(4, 16), (4, 4)];
/// Threads of the load tool's runtime (one, as h2load's `-t 1` had it).
const H2_LOAD_THREADS: usize = 1;
/// The redis-benchmark row's `EVALSHA` calls, and its clients (the first row's in flight).
const EVALSHA_REQUESTS: u64 = 300_000;
const EVALSHA_CLIENTS: usize = 64;

/// A candidate for the load-tool rows' realm: what one costs (docs/throttle.md).
const CANDIDATE: &str = "[realms.default.candidate]\nmax_failures = 3\n";

/// The floor rows' label: the health check through the Redis daemon. The load tool
/// checks `grpc-status` 0; the serving status is in the answer's body, so a
/// `NOT_SERVING` answer counts as answered, which is all the floor needs.
const FLOOR_LABEL: &str =
    "own h2 load tool: Health/Check (the server's floor), daemon process, Redis";

/// The throttle bench's load-tool rows (docs/performance.md, "Throttle"), and notes
/// (skips, the load tool's own lines):
/// - `redis-benchmark` `EVALSHA` of `record_attempt.lua` on `redis`;
/// - for each daemon process (on `redis` with `store_toml` in its `[store]`, the same
///   with a candidate policy, the embedded store under `data_dir`): `RecordAttempt` of
///   one hot account at 4 × 16 and 4 × 4 calls in flight, then paced at half the
///   4 × 16 peak;
/// - on the first daemon, the health check at 4 × 16, then paced at that daemon's
///   `RecordAttempt` paced rate: the floor, what the server stack (tonic, hyper, h2,
///   tokio and the daemon's tower layers) costs a call that does none of the daemon's
///   own work (docs/performance.md, "The floor").
///
/// `PORTCULLIS_BENCH_IO_THREADS=N` sets the daemons' `[server] io_threads`. Blocking: the
/// load tool runs on a runtime of its own, so this runs outside any.
pub fn tool_rows(
    redis: &RedisServer,
    store_toml: &str,
    data_dir: &std::path::Path,
) -> (Vec<ToolRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    eprintln!("redis-benchmark EVALSHA, {EVALSHA_CLIENTS} clients ...");
    match evalsha_row(redis, EVALSHA_CLIENTS, EVALSHA_REQUESTS) {
        Ok(row) => rows.push(row),
        Err(e) => notes.push(format!("EVALSHA row skipped: {e}")),
    }

    let record = record_attempt_frame("default", "hot@example.com");
    let health = health_check_frame();
    let embedded_dir = data_dir.join("h2-load");
    // A `[server]` table after everything else (no config here has one of its own).
    let server = std::env::var("PORTCULLIS_BENCH_IO_THREADS")
        .map(|n| format!("\n[server]\nio_threads = {n}\n"))
        .unwrap_or_default();
    // Each daemon, and whether its floor rows are measured.
    let daemons = [
        (
            "own h2 load tool: RecordAttempt, daemon process, Redis",
            TestConfig::redis(&redis.url()).extra(store_toml).toml() + &server,
            true,
        ),
        (
            "own h2 load tool: RecordAttempt with a candidate, daemon process, Redis",
            TestConfig::redis(&redis.url()).extra(store_toml).extra(CANDIDATE).toml() + &server,
            false,
        ),
        (
            "own h2 load tool: RecordAttempt, daemon process, embedded store",
            TestConfig::embedded(&embedded_dir).toml() + &server,
            false,
        ),
    ];
    let mut probe = redis.conn();
    for (label, config, floor) in daemons {
        let daemon = DaemonProcess::spawn_quiet(&config);
        let mut run = |label: &str, call, shape @ (conns, streams): (usize, usize), calls| {
            eprintln!("{label}, {conns}x{streams} in flight ...");
            let result = h2_load_row(label, &daemon, call, shape, calls, &mut probe);
            let (row, line) =
                result.map_err(|e| notes.push(format!("{label} {conns}x{streams}: {e}"))).ok()?;
            notes.push(line);
            rows.push(row);
            rows.last().map(|row| row.rate)
        };
        // Warm-up, measured calls and pace: as fast as answered, or paced at `rate`.
        let unpaced = (H2_LOAD_WARM_UP, H2_LOAD_CALLS, None);
        let paced = |rate| (H2_LOAD_WARM_UP, H2_LOAD_CALLS / 2, Some(rate));
        let record = (RECORD_ATTEMPT_PATH, &record);
        let peaks: Vec<Option<f64>> =
            H2_LOAD_SHAPES.iter().map(|&shape| run(label, record, shape, unpaced)).collect();
        // Off the limit: half the first shape's peak rate, paced, on the same connections.
        let half_peak = peaks[0].map(|peak| peak / 2.0);
        let shape = H2_LOAD_SHAPES[0];
        if let Some(rate) = half_peak {
            let label = format!("{label}, paced at half the peak ({rate:.0} calls/s)");
            run(&label, record, shape, paced(rate));
        }
        if floor {
            let health = (HEALTH_CHECK_PATH, &health);
            run(FLOOR_LABEL, health, shape, unpaced);
            match half_peak {
                Some(rate) => {
                    let label =
                        format!("{FLOOR_LABEL}, paced at RecordAttempt's ({rate:.0} calls/s)");
                    run(&label, health, shape, paced(rate));
                }
                None => notes.push(format!("{FLOOR_LABEL}, paced: skipped, no RecordAttempt peak")),
            }
        }
    }
    (rows, notes)
}
