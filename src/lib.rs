//! Portcullis: a login-attempt governor that a fleet of gateways calls over gRPC.
//!
//! It counts login attempts per account key (realm, normalized identifier) in one shared
//! store, so N gateway replicas do not multiply an attacker's allowance by N and a
//! restart does not wipe it, and it compares passwords under one CPU budget, so no flood
//! of made-up usernames can make the fleet hash without bound. `docs/architecture.md`
//! is the contract every module keeps and draws the layers; `docs/throttle.md` explains
//! the rules.
//!
//! # Layout
//! From the bottom up; a module uses only those above it in this list (and the contract
//! crate), never one below (docs/architecture.md, "Layers").
//!
//! - the contract, in the `portcullis-client` crate (`client/`): the wire types, the one
//!   RPC table ([`client::rpcs`]), their [`codec`], identifier
//!   [`normalize`](mod@normalize)ation, and the gateway library itself ([`client`]).
//! - [`pb`]: those wire types with the daemon's server stubs over them, and the
//!   descriptor set reflection serves.
//! - [`setting`]: the configuration error and range checks every section uses.
//! - [`secret`]: the key secret and its purpose-bound sub-keys.
//! - [`telemetry`]: logs, traces, metric names, the HTTP listener of metrics and
//!   health, refusal episodes; `[telemetry]`.
//! - [`throttle`]: the attempt and lockout rules, pure.
//! - [`store`]: the `Store` trait, every key ([`store::keys`]), the embedded (redb)
//!   and Redis (standalone, cluster, Sentinel) backends and their Lua scripts, the
//!   telemetry wrapper of both; `[store]`.
//! - [`verify`]: stored-hash parsing and ceilings, the CPU budget and its lanes, dummy
//!   hashes; `[verify]`.
//! - [`defence`]: one room per defence, and the checklist for adding one: device
//!   tokens (OWASP device cookies), password-spray fingerprints and the realm's watch,
//!   repeated wrong passwords, the throttle per client network, breached passwords
//!   (`[breach]`).
//! - [`realm`]: realms and their policies; `[realms.NAME]`.
//! - [`login`]: the `Verify` flow in domain types (count, checks, admission, compare,
//!   clear or note).
//! - [`flows`]: the flows around the login (one-time and recovery codes, reset and
//!   verification mails) in domain types.
//! - [`operator_rules`]: what the operators' calls do to the store (what `Unlock`
//!   clears for each reason, `RevokeDevices`, a network's inspection and release), in
//!   domain types.
//! - [`transport`]: the listener's connections, split by mechanism (limits, TLS and its
//!   reload, abuse cooldown, call tracking); `[server]`, `[tls]`.
//! - [`auth`]: callers, their identities and permissions; `[callers.NAME]`.
//! - [`validate`]: every request checked before any store or CPU work
//!   (`INVALID_ARGUMENT` naming the field).
//! - [`rpc`]: the gRPC layer, translation only: the one place answers are built,
//!   `Governor` and `Admin`.
//! - [`config`]: the loader and the root of the configuration.
//! - [`daemon`]: the assembly, serving, health, drain, signals and reloads.
//!
//! The binary (`src/main.rs`, `src/cli/`) parses the command line and calls
//! [`daemon::run`] or the operator commands.

pub mod auth;
pub mod config;
pub mod daemon;
pub mod defence;
pub mod flows;
pub mod login;
pub mod operator_rules;
pub mod pb;
pub mod realm;
pub mod rpc;
pub mod secret;
pub mod setting;
pub mod store;
pub mod telemetry;
pub mod throttle;
pub mod transport;
pub mod validate;
pub mod verify;

/// The gateway library (the `portcullis-client` crate), as `portcullis::client`.
pub use portcullis_client as client;
pub use portcullis_client::{codec, normalize};

pub use daemon::{ADMIN_SERVICE_NAME, Daemon, RunError, SERVICE_NAME, SHUTDOWN_GRACE, run};
