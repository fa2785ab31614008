//! `portcullis-test-support`: what the integration tests and the benches share, as a
//! normal dependency (no `#[path]` includes). A real `redis-server` per test on a free
//! port (never the shared 6379, never FLUSHDB), Redis Clusters and Sentinel groups, the
//! daemon in-process on `127.0.0.1:0` or as the real binary, test clients, test
//! certificates, and helpers to read the store the way an auditor would.
//!
//! # Layout
//! - [`config`]: the test key secret and realms, the TOML and settings of each shape.
//! - [`server`]: `redis-server` children ([`RedisServer`], cluster and Sentinel [`Node`]s).
//! - [`cluster`]: a Redis Cluster ([`RedisCluster`]).
//! - [`sentinel`]: a Sentinel group ([`SentinelGroup`]).
//! - [`daemon`]: [`Daemon`] (in-process) and [`DaemonProcess`] (the real binary).
//! - [`client`]: [`Client`], [`Caller`], raw gRPC requests.
//! - [`audit`]: records, keys and their expiry as the store holds them.
//! - [`pki`]: test certificates made at test time.
//! - [`bench`], [`load_tools`]: what the benches share (percentiles, outside load tools).

#![allow(dead_code, missing_docs)]

pub mod audit;
pub mod bench;
pub mod client;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod load_tools;
pub mod pki;
pub mod sentinel;
pub mod server;

pub use audit::*;
pub use client::*;
pub use cluster::*;
pub use config::*;
pub use daemon::*;
pub use sentinel::*;
pub use server::*;
