//! Helpers both benches share. A directory module, so cargo does not take it for a bench.

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
