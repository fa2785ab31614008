//! The throttle bench's rows measured by outside load tools: `h2load` (HTTP/2) against
//! the real `portcullis` binary through the shared `run_h2load_grpc.sh`, and
//! `redis-benchmark` running `EVALSHA` of `record_attempt.lua` straight on Redis, so one
//! run prints the ratio between the daemon and the script it wraps.
//!
//! The h2load script is the team's load driver, kept outside this repository: the bench
//! takes it from `PORTCULLIS_H2LOAD_SCRIPT`, else from the team's usual place beside the
//! checkout ([`H2LOAD_SCRIPT`]); when it or `h2load` is missing, the rows are skipped with
//! a message saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;

/// Where the shared h2load driver is, unless `PORTCULLIS_H2LOAD_SCRIPT` names another.
const H2LOAD_SCRIPT: &str = "../shared/perf/run_h2load_grpc.sh";

/// One load-tool measurement.
pub struct ToolRow {
    /// What was measured.
    pub path: String,
    /// Requests in flight (connections × streams, or clients).
    pub in_flight: usize,
    /// Calls per second.
    pub rate: f64,
    /// p99 latency, in ms (h2load: per request; redis-benchmark: its own p99).
    pub p99_ms: f64,
    /// CPU of the serving process, in percent of one core (h2load rows only).
    pub cpu_percent: Option<f64>,
    /// Redis commands per call besides the script's own, e.g. `ping 1.00`.
    pub commands: String,
}

/// The h2load driver script, or why the h2load rows are skipped.
pub fn h2load_script() -> Result<PathBuf, String> {
    let script = std::env::var_os("PORTCULLIS_H2LOAD_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(H2LOAD_SCRIPT));
    if !script.is_file() {
        return Err(format!("h2load rows skipped: {} not found", script.display()));
    }
    let found = Command::new("h2load").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        return Err("h2load rows skipped: h2load not found (Debian package nghttp2-client)".into());
    }
    Ok(script)
}

/// Writes a gRPC-framed `RecordAttemptRequest` body (flag byte 0, 4-byte big-endian
/// length, the protobuf) for one hot account to `path`.
pub fn write_record_attempt_body(path: &Path, realm: &str, identifier: &str) {
    let request = portcullis::pb::RecordAttemptRequest {
        account: Some(portcullis::pb::Account {
            realm: realm.into(),
            identifier: identifier.into(),
        }),
        attempt_id: String::new(),
    };
    let message = request.encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&u32::try_from(message.len()).expect("small message").to_be_bytes());
    body.extend_from_slice(&message);
    std::fs::write(path, body).expect("write the h2load body");
}

/// What one `run_h2load_grpc.sh` run printed.
pub struct H2loadRun {
    /// Requests per second.
    pub rate: f64,
    /// p99, in ms.
    pub p99_ms: f64,
    /// CPU of `pid`, in percent of one core.
    pub cpu_percent: Option<f64>,
    /// Requests sent, warm-up included (to divide Redis command counts by).
    pub requests: u64,
    /// The script's own line, quoted in the bench output.
    pub line: String,
}

/// Runs `script` once against `addr` with `conns` × `streams` in flight, `requests`
/// measured after `warm_up` unmeasured ones, reporting the CPU of `pid`.
pub fn run_h2load(
    script: &Path,
    addr: std::net::SocketAddr,
    body: &Path,
    (conns, streams): (usize, usize),
    (warm_up, requests): (u64, u64),
    pid: u32,
) -> Result<H2loadRun, String> {
    let output = Command::new("bash")
        .arg(script)
        .args(["-m", "/portcullis.v1.Governor/RecordAttempt", "-d"])
        .arg(body)
        .args(["-a", &addr.to_string()])
        .args(["-c", &conns.to_string(), "-s", &streams.to_string()])
        .args(["-n", &requests.to_string(), "-w", &warm_up.to_string(), "-r", "1"])
        .args(["-l", "recordattempt", "-p", &pid.to_string()])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}{}",
            script.display(),
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // label run req/s mean p50 p90 p99 max status... cpu[pid]=N%
    let line = stdout
        .lines()
        .find(|l| l.starts_with("recordattempt"))
        .ok_or_else(|| format!("no result line in: {stdout}"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let number = |i: usize| -> Result<f64, String> {
        fields.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad line: {line}"))
    };
    let cpu_percent = fields
        .iter()
        .find_map(|f| f.strip_prefix(&format!("cpu[{pid}]=")))
        .and_then(|v| v.trim_end_matches('%').parse().ok());
    if !line.contains(&format!("succeeded={requests}/{requests}")) {
        return Err(format!("not every request succeeded: {line}"));
    }
    Ok(H2loadRun {
        rate: number(2)?,
        p99_ms: number(6)?,
        cpu_percent,
        requests: warm_up + requests,
        line: line.to_owned(),
    })
}

/// `redis-benchmark -c clients EVALSHA sha N keys… args…` on `port`: calls/s and p99 ms.
pub fn run_redis_benchmark(
    port: u16,
    sha: &str,
    keys: &[&str],
    args: &[i64],
    clients: usize,
    requests: u64,
) -> Result<(f64, f64), String> {
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string(), "--csv"])
        .args(["EVALSHA", sha, &keys.len().to_string()])
        .args(keys);
    command.args(args.iter().map(i64::to_string));
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
