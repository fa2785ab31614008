//! Reading Redis `INFO` replies: the memory gauges and the eviction rule of
//! docs/deployment.md ("Store memory"), for one node or a cluster's map of nodes.

/// `maxmemory-policy` values under which Redis never deletes a key to make room.
pub(super) const NON_EVICTING_POLICIES: [&str; 1] = ["noeviction"];

/// `used_memory` and `maxmemory` (0: no limit) of the node whose use is nearest its
/// limit, in bytes, from each node's `INFO memory` text: what the
/// [`crate::telemetry::metrics::MEMORY_USED_GAUGE`] and
/// [`crate::telemetry::metrics::MEMORY_LIMIT_GAUGE`] report. A node without a limit
/// counts as nearest only when no node has one.
pub(super) fn fullest_node(texts: &[String]) -> Option<(u64, u64)> {
    let field = |text: &str, name: &str| {
        text.lines().find_map(|l| l.trim_end().strip_prefix(name)?.parse::<u64>().ok())
    };
    texts
        .iter()
        .filter_map(|t| Some((field(t, "used_memory:")?, field(t, "maxmemory:").unwrap_or(0))))
        .max_by(|&(u1, m1), &(u2, m2)| {
            // Nodes with a limit by their share of it, above nodes without, by use.
            let share = |used: u64, limit: u64| used as f64 / limit as f64;
            match (m1 > 0, m2 > 0) {
                (true, true) => share(u1, m1).total_cmp(&share(u2, m2)),
                (false, false) => u1.cmp(&u2),
                (limited, _) => limited.cmp(&!limited),
            }
        })
}

/// Each node's part of an `INFO` reply: one string, or a cluster's map of node to string.
pub(super) fn node_texts(value: &redis::Value) -> Vec<String> {
    match value {
        redis::Value::Map(entries) => entries.iter().map(|(_, v)| info_text(v)).collect(),
        other => vec![info_text(other)],
    }
}

/// Every `maxmemory_policy:` value in `INFO` text (one per node answering).
pub(super) fn eviction_policies(info: &str) -> Vec<String> {
    info.lines()
        .filter_map(|l| l.trim_end().strip_prefix("maxmemory_policy:"))
        .map(str::to_owned)
        .collect()
}

/// The text of an `INFO` reply: one string, or (a cluster's answer from every master) a
/// map of node to string.
pub(super) fn info_text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::VerbatimString { text, .. } => text.clone(),
        redis::Value::SimpleString(text) => text.clone(),
        redis::Value::Map(entries) => {
            entries.iter().map(|(_, v)| info_text(v)).collect::<Vec<_>>().join("\n")
        }
        redis::Value::Array(items) => items.iter().map(info_text).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fullest_node_is_the_one_nearest_its_limit() {
        let node =
            |used: u64, max: u64| format!("# Memory\r\nused_memory:{used}\r\nmaxmemory:{max}\r\n");
        assert_eq!(
            fullest_node(&[node(100, 1000), node(900, 1000), node(5000, 0)]),
            Some((900, 1000))
        );
        assert_eq!(fullest_node(&[node(100, 0), node(300, 0)]), Some((300, 0)));
        assert_eq!(fullest_node(&[node(10, 100), node(50, 100_000)]), Some((10, 100)));
        assert_eq!(fullest_node(&["no memory section".to_owned()]), None);
    }
}
