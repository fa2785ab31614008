//! Helpers the benches share: percentiles, and what Redis's `INFO` says.

use std::time::Duration;

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
