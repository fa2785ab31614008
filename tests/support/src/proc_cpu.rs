//! CPU time from `/proc`, for the benches' CPU tables: a process's (all its threads),
//! this process's threads grouped by name, and the whole machine's. Everything reads
//! zero (or `None`) where `/proc` is not readable.

use std::collections::BTreeMap;

/// `/proc` counts in USER_HZ, which Linux fixes at 100 a second.
pub const TICKS_PER_SECOND: f64 = 100.0;

/// The command name, the parent pid and utime + stime in seconds of a
/// `/proc/.../stat` line.
pub fn parse_stat(stat: &str) -> Option<(String, u32, f64)> {
    // "pid (comm) state ...": the name may hold spaces and parentheses, so split at the
    // last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    // After ") ": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    // cmajflt utime stime ...
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, ppid, (utime + stime) / TICKS_PER_SECOND))
}

/// [`parse_stat`] of the file at `path`.
pub fn read_stat(path: impl AsRef<std::path::Path>) -> Option<(String, u32, f64)> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// CPU seconds process `pid` (all its threads) has used so far.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    read_stat(format!("/proc/{pid}/stat")).map(|(_, _, seconds)| seconds)
}

/// CPU seconds of this process's threads so far, summed per group: `group` maps a
/// thread's name to its group, `None` leaves the thread out.
pub fn threads_cpu(group: impl Fn(&str) -> Option<&'static str>) -> BTreeMap<&'static str, f64> {
    let mut times = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return times;
    };
    for task in tasks.flatten() {
        let Some((name, _, seconds)) = read_stat(task.path().join("stat")) else {
            continue;
        };
        if let Some(group) = group(&name) {
            *times.entry(group).or_default() += seconds;
        }
    }
    times
}

/// Busy and total CPU seconds of the whole machine (all cores) from `/proc/stat`.
pub fn machine_cpu() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0.0, 0.0);
    };
    let Some(line) = stat.lines().find(|line| line.starts_with("cpu ")) else {
        return (0.0, 0.0);
    };
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let ticks: Vec<u64> =
        line.split_whitespace().skip(1).take(8).filter_map(|v| v.parse().ok()).collect();
    if ticks.len() < 8 {
        return (0.0, 0.0);
    }
    let total: u64 = ticks.iter().sum();
    let idle = ticks[3] + ticks[4];
    ((total - idle) as f64 / TICKS_PER_SECOND, total as f64 / TICKS_PER_SECOND)
}

/// The machine's load averages, as `/proc/loadavg` has them (empty if unreadable).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_owned()
}
