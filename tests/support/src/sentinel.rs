//! A Sentinel-monitored master and its replicas with three Sentinels (`redis-server
//! --sentinel`), on free loopback ports.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::free_port;
use crate::server::{
    Node, RedisTlsFiles, redis_server_binary, spawn_redis_node_tls, wait_for_ping,
};

/// A Sentinel-monitored master with one replica (or more, [`Self::with_replicas`]) and
/// three `redis-sentinel`s (quorum 2) on free loopback ports, failing over within seconds
/// ([`SENTINEL_DOWN_AFTER`]).
pub struct SentinelGroup {
    pub master: Node,
    /// The first replica (the only one of [`Self::start`]).
    pub replica: Node,
    /// The replicas after the first ([`Self::with_replicas`]).
    pub more_replicas: Vec<Node>,
    pub sentinels: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// Name the test Sentinels monitor the master under.
pub const SENTINEL_MASTER_NAME: &str = "portcullis-test";

/// The Sentinels' `down-after-milliseconds`: how long the master must be unreachable
/// before they start a failover.
pub const SENTINEL_DOWN_AFTER: Duration = Duration::from_millis(1000);

impl SentinelGroup {
    pub fn start() -> Self {
        Self::start_with(None, 1)
    }

    /// As [`Self::start`] with `replicas` replicas (at least one), each in sync before
    /// the Sentinels start.
    pub fn with_replicas(replicas: usize) -> Self {
        assert!(replicas >= 1, "a Sentinel group needs a replica to promote");
        Self::start_with(None, replicas)
    }

    /// Every replica, the first one first.
    pub fn replicas(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.replica).chain(&self.more_replicas)
    }

    /// As [`Self::start`], every node and Sentinel also serving TLS, replication and the
    /// Sentinels' own connections over TLS (`tls-replication`), so the Sentinels name the
    /// master's TLS port; [`Self::sentinel_toml`] then lists `rediss://` Sentinels.
    pub fn start_tls(tls: &RedisTlsFiles) -> Self {
        Self::start_with(Some(tls), 1)
    }

    fn start_with(tls: Option<&RedisTlsFiles>, replicas: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sub = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        // One node of the group: its own directory, `args`, and with TLS the replication
        // over TLS and the TLS port's arguments kept for restarts.
        let node = |name: &str, mut args: Vec<String>| {
            if tls.is_some() {
                args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            }
            let str_args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, port, tls_args) = spawn_redis_node_tls(&sub(name), &str_args, tls);
            let tls_port = tls_args.as_ref().map(|(p, _)| *p);
            args.extend(tls_args.into_iter().flat_map(|(_, a)| a));
            Node { child: Some(child), port, dir: sub(name), args, tls_port }
        };
        // Every node as the shipped Redis configuration has it: no wait before a full
        // resync (Redis's default waits 5 s), on the replica promoted too, whose other
        // replica may need one after a failover (it was ahead): until then no `WAIT`.
        let no_sync_delay = || vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
        let master = node("master", no_sync_delay());
        // The port replicas and Sentinels reach the master on: its TLS port with TLS.
        let master_port = master.tls_port.unwrap_or(master.port);
        let mut all: Vec<Node> = (0..replicas)
            .map(|i| {
                let name = if i == 0 { "replica".to_owned() } else { format!("replica{i}") };
                let mut args = no_sync_delay();
                args.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned()]);
                args.push(master_port.to_string());
                node(&name, args)
            })
            .collect();
        // Wait for every replica to be in sync, so a failover has someone to promote.
        let deadline = Instant::now() + Duration::from_secs(10);
        for replica in &all {
            loop {
                let info: String =
                    redis::cmd("INFO").arg("replication").query(&mut replica.conn()).unwrap();
                if info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "replica never synced");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let replica = all.remove(0);
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let sdir = sub(&format!("sentinel{i}"));
            for _ in 0..20 {
                let sport = free_port();
                let stls_port = tls.map(|_| free_port());
                let tls_conf = match (tls, stls_port) {
                    (Some(t), Some(p)) => t.sentinel_conf(p),
                    _ => String::new(),
                };
                let conf = sdir.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {sport}\nbind 127.0.0.1\ndir {}\n{tls_conf}\
                         sentinel monitor {SENTINEL_MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {SENTINEL_MASTER_NAME} {}\n\
                         sentinel failover-timeout {SENTINEL_MASTER_NAME} 3000\n\
                         sentinel parallel-syncs {SENTINEL_MASTER_NAME} 1\n",
                        sdir.display(),
                        SENTINEL_DOWN_AFTER.as_millis()
                    ),
                )
                .unwrap();
                // A Sentinel is `redis-server` in Sentinel mode: no separate package.
                let mut child = Command::new(redis_server_binary())
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed (see .ci/run)");
                if wait_for_ping(sport, &mut child) {
                    sentinels.push(Node {
                        child: Some(child),
                        port: sport,
                        dir: sdir.clone(),
                        args: vec![],
                        tls_port: stls_port,
                    });
                    break;
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        assert_eq!(sentinels.len(), 3, "could not start three sentinels");
        let group = Self { master, replica, more_replicas: all, sentinels, _dir: dir };
        // Every Sentinel knows the replica and the other Sentinels before a test kills anything.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ready = group.sentinels.iter().all(|s| {
                let v: redis::Value = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(SENTINEL_MASTER_NAME)
                    .query(&mut s.conn())
                    .unwrap_or(redis::Value::Nil);
                let text = format!("{v:?}");
                text.contains("num-slaves")
                    && sentinel_field(&v, "num-slaves") == i64::try_from(replicas).ok()
                    && sentinel_field(&v, "num-other-sentinels") == Some(2)
            });
            if ready {
                return group;
            }
            assert!(Instant::now() < deadline, "sentinels never saw the whole group");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The TOML inline table for `store.redis_sentinel`.
    pub fn sentinel_toml(&self) -> String {
        let url = |s: &Node| if s.tls_port.is_some() { s.tls_url() } else { s.url() };
        let nodes: Vec<String> = self.sentinels.iter().map(|s| format!("\"{}\"", url(s))).collect();
        format!(
            "redis_sentinel = {{ master_name = \"{SENTINEL_MASTER_NAME}\", nodes = [{}] }}",
            nodes.join(", ")
        )
    }

    /// The port the Sentinels currently name as master.
    pub fn master_port(&self) -> Option<u16> {
        let s = self.sentinels.iter().find(|s| s.is_running())?;
        let (_host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SENTINEL_MASTER_NAME)
            .query(&mut s.conn())
            .ok()?;
        Some(port)
    }
}

/// An integer field of a `SENTINEL MASTER` reply (a flat name/value array or a map).
fn sentinel_field(value: &redis::Value, name: &str) -> Option<i64> {
    let pairs: Vec<(String, String)> = match value {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| {
                Some((
                    redis::from_redis_value(p.first()?.clone()).ok()?,
                    redis::from_redis_value(p.get(1)?.clone()).ok()?,
                ))
            })
            .collect(),
        redis::Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    redis::from_redis_value(k.clone()).ok()?,
                    redis::from_redis_value(v.clone()).ok()?,
                ))
            })
            .collect(),
        _ => return None,
    };
    pairs.into_iter().find(|(k, _)| k == name)?.1.parse().ok()
}
