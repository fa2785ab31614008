//! A real Redis Cluster on free loopback ports, made with `redis-cli --cluster create`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::server::{Node, RedisTlsFiles, spawn_redis_node_tls};

/// A real Redis Cluster on free loopback ports: `masters` masters with `replicas` each,
/// created with `redis-cli --cluster create`, with a short `cluster-node-timeout` so a
/// failover takes seconds.
pub struct RedisCluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// `cluster-node-timeout` of test clusters, in ms: failure detection and failover
/// within a few seconds.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_with(masters, replicas, None)
    }

    /// As [`Self::start`], every node also serving TLS, the cluster bus and replication
    /// over TLS (`tls-cluster`, `tls-replication`); [`Self::urls`] are then `rediss://`.
    pub fn start_tls(masters: usize, replicas: usize, tls: &RedisTlsFiles) -> Self {
        Self::start_with(masters, replicas, Some(tls))
    }

    fn start_with(masters: usize, replicas: usize, tls: Option<&RedisTlsFiles>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for i in 0..masters * (1 + replicas) {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let mut args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                // A replica of a dead master takes over at once, however stale.
                "--cluster-replica-validity-factor",
                "0",
                // Replicas sync at once, not after the default 5 s wait for company.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if tls.is_some() {
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
            }
            let str_args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, port, tls_args) = spawn_redis_node_tls(&node_dir, &str_args, tls);
            let tls_port = tls_args.as_ref().map(|(p, _)| *p);
            args.extend(tls_args.into_iter().flat_map(|(_, a)| a));
            nodes.push(Node { child: Some(child), port, dir: node_dir, args, tls_port });
        }
        // With TLS the cluster is made over the TLS ports (the bus port follows them).
        let addrs: Vec<String> =
            nodes.iter().map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port))).collect();
        let out = Command::new("redis-cli")
            .args(tls.map(RedisTlsFiles::cli_args).unwrap_or_default())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (see .ci/run)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes, _dir: dir };
        cluster.wait_until_ok(Duration::from_secs(20));
        cluster.wait_for_replicas(masters * replicas, Duration::from_secs(20));
        cluster
    }

    /// Seed URLs for `store.redis_cluster_nodes` (`rediss://` when started with TLS).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| if n.tls_port.is_some() { n.tls_url() } else { n.url() })
            .collect()
    }

    /// The TOML array of [`Self::urls`].
    pub fn nodes_toml(&self) -> String {
        let urls: Vec<String> = self.urls().iter().map(|u| format!("\"{u}\"")).collect();
        format!("[{}]", urls.join(", "))
    }

    /// Waits until every running node reports `cluster_state:ok` and agrees on the
    /// masters (all 16384 slots served).
    pub fn wait_until_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let mut c = n.conn();
                let info: String =
                    redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `count` running nodes are replicas in sync with their master.
    pub fn wait_for_replicas(&self, count: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let synced = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .filter(|n| {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut n.conn())
                        .unwrap_or_default();
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
                .count();
            if synced >= count {
                return;
            }
            assert!(Instant::now() < deadline, "only {synced} of {count} replicas in sync");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Index of the running master that serves `key`'s slot.
    pub fn master_of(&self, key: &str) -> usize {
        let node = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let slot: u16 =
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut node.conn()).unwrap();
        self.master_of_slot(slot)
    }

    /// Index of the running master that serves `slot`, as the cluster sees it now.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let node = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let shards: Vec<(u16, u16, Vec<redis::Value>)> = {
            let value: redis::Value =
                redis::cmd("CLUSTER").arg("SLOTS").query(&mut node.conn()).unwrap();
            let redis::Value::Array(ranges) = value else { panic!("CLUSTER SLOTS: {value:?}") };
            ranges
                .into_iter()
                .map(|r| {
                    let redis::Value::Array(mut parts) = r else { panic!("slot range") };
                    let master = parts.remove(2);
                    let start: u16 = redis::from_redis_value(parts[0].clone()).unwrap();
                    let end: u16 = redis::from_redis_value(parts[1].clone()).unwrap();
                    let redis::Value::Array(master) = master else { panic!("master") };
                    (start, end, master)
                })
                .collect()
        };
        for (start, end, master) in shards {
            if (start..=end).contains(&slot) {
                let port: u16 = redis::from_redis_value(master[1].clone()).unwrap();
                return self.nodes.iter().position(|n| n.port == port).unwrap();
            }
        }
        panic!("slot {slot} is not served");
    }

    /// Indexes of the running masters.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running() && self.nodes[i].is_master())
            .collect()
    }

    /// Reads a record wherever its slot lives, through a cluster connection.
    pub fn read_record(&self, key: &str) -> Option<(u64, u64, u32)> {
        let client = redis::cluster::ClusterClient::new(
            self.nodes.iter().filter(|n| n.is_running()).map(Node::url).collect::<Vec<_>>(),
        )
        .unwrap();
        let mut conn = client.get_connection().unwrap();
        let (f, ws, st): (Option<u64>, Option<u64>, Option<u32>) =
            redis::cmd("HMGET").arg(key).arg("f").arg("ws").arg("st").query(&mut conn).unwrap();
        Some((f?, ws?, st?))
    }
}

/// Waits until `master`'s replica has everything written to `master` so far, `key`'s
/// record included: a write in `key`'s hash tag from this connection, then `WAIT 1`.
/// (Replication is asynchronous: a failover test that kills a master before its replica
/// caught up measures Redis's replication lag, not the daemon; the loss it can cause is
/// measured separately.)
pub fn replicated(master: &Node, key: &str) {
    let mut conn = master.conn();
    let barrier = format!("{key}:test-barrier");
    let _: () =
        redis::cmd("SET").arg(&barrier).arg(1).arg("PX").arg(60_000).query(&mut conn).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut conn).unwrap();
    assert_eq!(acked, 1, "the replica did not catch up within 10 s");
}
