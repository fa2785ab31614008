//! Helpers the benches share: percentiles, what Redis's `INFO` says, a replica's sync.

use std::time::{Duration, Instant};

use crate::RedisServer;

/// Waits until `replica` reports its link to the master up (at most 10 s).
pub fn wait_for_sync(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String =
            redis::cmd("INFO").arg("replication").query(&mut replica.conn()).unwrap_or_default();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "the bench replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Nearest-rank percentile, in per mille (500 = p50, 999 = p99.9), of sorted `values`
/// (zero when there are none).
pub fn percentile(values: &[Duration], per_mille: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let rank = (values.len() * per_mille).div_ceil(1000).max(1);
    values[rank - 1]
}

/// A duration in milliseconds, for tables.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `name:value` lines of an `INFO` reply.
pub fn info_fields(info: &str) -> impl Iterator<Item = (&str, &str)> {
    info.lines().filter_map(|line| line.trim_end().split_once(':'))
}

/// CPU seconds Redis has used so far (`used_cpu_sys` + `used_cpu_user`), from an
/// `INFO cpu` reply.
pub fn redis_cpu_seconds(info: &str) -> f64 {
    info_fields(info)
        .filter(|(name, _)| *name == "used_cpu_sys" || *name == "used_cpu_user")
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// Calls per command of an `INFO commandstats` reply (since the last `CONFIG
/// RESETSTAT`), most first.
pub fn commandstats(info: &str) -> Vec<(String, u64)> {
    let mut commands: Vec<(String, u64)> = info_fields(info)
        .filter_map(|(name, stats)| {
            let name = name.strip_prefix("cmdstat_")?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect();
    commands.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    commands
}

/// Two-sample Kolmogorov–Smirnov statistic D: the largest distance between the samples'
/// empirical distribution functions (sorts both). Two samples of sizes n and m differ at
/// significance α when D > c(α)·√((n+m)/(n·m)), c(0.001) = 1.949. A few lines, so no
/// statistics crate.
pub fn ks_statistic(a: &mut [f64], b: &mut [f64]) -> f64 {
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}
