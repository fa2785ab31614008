//! `portcullis-test-support`: what the integration tests and the benches share, as a
//! normal dependency (no `#[path]` includes). A real `redis-server` per test on a free
//! port (never the shared 6379, never FLUSHDB), Redis Clusters and Sentinel groups, the
//! daemon in-process on `127.0.0.1:0` or as the real binary, test clients, test
//! certificates, and helpers to read the store the way an auditor would.
//!
//! # Layout
//! - [`config`]: the test key secret and realms, and [`TestConfig`]: the TOML and
//!   settings of each store shape.
//! - [`server`]: `redis-server` children ([`RedisServer`], cluster and Sentinel [`Node`]s).
//! - [`cluster`]: a Redis Cluster ([`RedisCluster`]).
//! - [`sentinel`]: a Sentinel group ([`SentinelGroup`]).
//! - [`daemon`]: [`Daemon`] (in-process) and [`DaemonProcess`] (the real binary).
//! - [`client`]: [`Client`], [`Caller`], raw gRPC requests.
//! - [`audit`]: records, keys and their expiry as the store holds them.
//! - [`faulty`]: a store that fails one chosen operation, and a service over it.
//! - [`pki`]: test certificates made at test time.
//! - [`proxy`]: a TCP proxy that loses a gRPC response (a reset after the request was
//!   served).
//! - [`bench`](mod@bench), [`proc_cpu`]: what the benches share (percentiles, Redis `INFO`, CPU
//!   time from `/proc`).
//! - [`h2_load`], [`load_tools`]: the own HTTP/2 gRPC load generator, and the throttle
//!   bench's load-tool rows (it and `redis-benchmark`).
//! - [`probe`], [`verify_bench`]: what the Verify benches share (the flood's probe
//!   process, one `Verify` timed against the raw comparison).

#![allow(dead_code, missing_docs)]

pub mod audit;
pub mod bench;
pub mod client;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod faulty;
pub mod h2_load;
pub mod load_tools;
pub mod pki;
pub mod probe;
pub mod proc_cpu;
pub mod proxy;
pub mod reports;
pub mod sentinel;
pub mod server;
pub mod verify_bench;

// What the tests and benches use by name from the crate root (`use
// portcullis_test_support::*;`); the rest is reached through its module.
pub use audit::{
    account_key_count, age_record, assert_store_clean, dbsize, http_get, read_record, record_key,
};
pub use client::{
    CALL_DEADLINE, Caller, Client, account, caller, grpc_request, try_attempt, verdict,
};
pub use cluster::{RedisCluster, replicated};
pub use config::{REALMS_TOML, SECRET, TEST_TOP_LEVEL, TestConfig, free_port};
pub use daemon::{Daemon, DaemonProcess, daemon_binary};
pub use faulty::{Fault, FaultyStore, governor_over};
pub use proxy::{Cut, response_cutting_proxy};
pub use reports::{candidate_report_printed, candidate_report_when};
pub use sentinel::{SENTINEL_DOWN_AFTER, SentinelGroup};
pub use server::{Node, RedisServer, RedisTlsFiles};
