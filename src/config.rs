//! Typed, validated configuration: a TOML file, overridden by command-line flags and
//! their environment variables (see `main.rs`). Unknown keys are errors, every value
//! is range-checked at start-up, and an error names the setting and its allowed range.
//! There is deliberately no setting that turns the throttle off.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::auth::{CallerConfig, CallerError, Callers};
use crate::normalize::Normalization;
use crate::realm::{Realm, Realms};
use crate::store::keys::KeySecret;
use crate::store::redis::settings::{
    Credentials, RedisSettings, RedisShape, RedisTls, redact_url, sentinel_credentials,
};
use crate::throttle::Policy;
use crate::transport::tls::{ReloadingTls, TlsConfig, TlsError};
use crate::transport::{MAX_IO_THREADS, ServerLimits};
use crate::verify::VerifySettings;
use crate::verify::governor::GovernorSettings;
use crate::verify::hash::{Algorithm, Ceilings, HashParams};

/// Environment variable that may hold the key secret (instead of `store.key_secret_file`).
pub const KEY_SECRET_ENV: &str = "PORTCULLIS_KEY_SECRET";
/// Environment variable that may hold the Redis password (instead of
/// `store.redis_password_file`).
pub const REDIS_PASSWORD_ENV: &str = "PORTCULLIS_REDIS_PASSWORD";

/// A configuration that cannot be used. The daemon refuses to start on any of these.
///
/// `Debug` is the `Display` text: figment's own error (kept in `Parse`, and deliberately
/// not its `source`) repeats the value of a setting of the wrong type, which may be a
/// password or a URL holding one; an error chain or a `{:?}` must never print it.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be read: {}", describe(.0))]
    Parse(Box<figment::Error>),
    #[error("{setting} = {value} is out of range: allowed {allowed}")]
    OutOfRange { setting: String, value: String, allowed: String },
    #[error("{setting}: {problem}")]
    Invalid { setting: String, problem: String },
    #[error("[tls]: {0}")]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Callers(#[from] CallerError),
    #[error("store.key_secret_file {path:?} could not be read: {source}")]
    SecretFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store.redis_password_file {path:?} could not be read: {source}")]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Each problem figment found, as `setting: problem (in SOURCE)`, without figment's
/// profile prefix (`default.`), which names nothing a user wrote.
fn describe(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let setting = if e.path.is_empty() { "(file)".to_owned() } else { e.path.join(".") };
            let source = e.metadata.as_ref().and_then(|m| m.source.as_ref());
            let kind = kind_text(&e.kind);
            match source {
                Some(source) => format!("{setting}: {kind} (in {source})"),
                None => format!("{setting}: {kind}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// figment's problem, without the text the user wrote when a value has the wrong type
/// or value: a string in the wrong place may be a URL with its password
/// (`redis_cluster_nodes = "rediss://:pw@h"` instead of a list).
fn kind_text(kind: &figment::error::Kind) -> String {
    use figment::error::{Actual, Kind};
    let actual = |a: &Actual| match a {
        Actual::Str(_) => "a string".to_owned(),
        Actual::Char(_) => "a character".to_owned(),
        Actual::Bytes(_) => "bytes".to_owned(),
        Actual::Other(_) => "a value".to_owned(),
        other => other.to_string(),
    };
    match kind {
        Kind::InvalidType(a, expected) => {
            format!("invalid type: found {}, expected {expected}", actual(a))
        }
        Kind::InvalidValue(a, expected) => {
            format!("invalid value: found {}, expected {expected}", actual(a))
        }
        Kind::Unsupported(a) => format!("unsupported type {}", actual(a)),
        other => other.to_string(),
    }
}

/// The file format (`portcullis.toml`). Durations are humantime strings (`"15m"`, `"250ms"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// After SIGTERM, how long the daemon reports not-ready while still answering calls
    /// (so load balancers and Kubernetes endpoints stop sending), before it drains.
    #[serde(default = "default_shutdown_delay", with = "humantime_serde")]
    pub shutdown_delay: Duration,
    /// Metrics and health over HTTP.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where the counters live.
    #[serde(default)]
    pub store: StoreConfig,
    /// The CPU budget and hash ceilings of `Verify`.
    #[serde(default)]
    pub verify: VerifyConfig,
    /// Realms by name. When the file names none, one realm `default` with the defaults.
    #[serde(default = "default_realms")]
    pub realms: BTreeMap<String, RealmConfig>,
    /// Serve without TLS on an address that is not loopback. Passwords then cross the
    /// network in clear; refused unless set explicitly, and warned about when set.
    #[serde(default)]
    pub allow_plaintext: bool,
    /// TLS and mutual TLS of the listener (see `crate::transport::tls`).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Callers by name and what each may call (see `crate::auth`). None: no
    /// authorization.
    #[serde(default)]
    pub callers: BTreeMap<String, CallerConfig>,
    /// Limits of the gRPC listener (see `crate::transport`).
    #[serde(default)]
    pub server: ServerLimits,
}

/// `[verify]`: the per-daemon CPU budget (docs/verify.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// Comparisons at once, and hashing threads. Default `max(1, cores / 2)`: half the
    /// machine stays free for everything else.
    #[serde(default)]
    pub max_concurrent: Option<usize>,
    /// Slots one client key may hold at once; excess calls wait for their own.
    #[serde(default = "default_max_per_client")]
    pub max_per_client: usize,
    /// Longest wait for a slot (never past the caller's deadline).
    #[serde(default = "default_max_wait", with = "humantime_serde")]
    pub max_wait: Duration,
    /// Most calls waiting for a slot. Default 8 × `max_concurrent`.
    #[serde(default)]
    pub max_waiters: Option<usize>,
    /// Most calls with a valid device token waiting in the trusted lane, apart from
    /// `max_waiters`, so a flood of untrusted calls cannot fill it. Default 8 ×
    /// `max_concurrent`.
    #[serde(default)]
    pub max_trusted_waiters: Option<usize>,
    /// Longest password accepted, in bytes.
    #[serde(default = "default_max_password_bytes")]
    pub max_password_bytes: usize,
    /// Highest bcrypt cost factor a stored hash may have.
    #[serde(default = "default_max_bcrypt_cost")]
    pub max_bcrypt_cost: u32,
    /// Highest argon2 memory a stored hash may ask for, in KiB.
    #[serde(default = "default_max_argon2_memory_kib")]
    pub max_argon2_memory_kib: u32,
    /// Highest argon2 iterations.
    #[serde(default = "default_max_argon2_iterations")]
    pub max_argon2_iterations: u32,
    /// Highest argon2 lanes.
    #[serde(default = "default_max_argon2_parallelism")]
    pub max_argon2_parallelism: u32,
}

/// `[realms.NAME.hash]`: the realm's hash target, used for the dummy hash an unknown
/// account is compared against and for `needs_rehash`. Defaults are OWASP's first
/// choice (Password Storage Cheat Sheet): argon2id, m = 19 MiB, t = 2, p = 1.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashTargetConfig {
    /// `argon2id`, `argon2i`, `argon2d` or `bcrypt`.
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    /// bcrypt cost factor (log2 of rounds), when `algorithm = "bcrypt"`.
    #[serde(default = "default_bcrypt_cost")]
    pub bcrypt_cost: u32,
    /// argon2 memory in KiB.
    #[serde(default = "default_argon2_memory_kib")]
    pub argon2_memory_kib: u32,
    /// argon2 iterations.
    #[serde(default = "default_argon2_iterations")]
    pub argon2_iterations: u32,
    /// argon2 lanes.
    #[serde(default = "default_argon2_parallelism")]
    pub argon2_parallelism: u32,
}

/// `[telemetry]`: the admin HTTP listener (`/metrics`, `/healthz`, `/readyz`).
/// Traces are configured by the standard `OTEL_*` environment variables only.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `host:port` of the admin listener; `""` disables it. Default `127.0.0.1:9464`
    /// (loopback: metrics name realms and load, which is not for everyone).
    #[serde(default = "default_admin_listen")]
    pub admin_listen: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { admin_listen: default_admin_listen() }
    }
}

/// `[store]`. At most one of `redis_url`, `redis_cluster_nodes` and `redis_sentinel`;
/// none: the embedded store.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `redis://host:port/db` (or `rediss://`) of one shared Redis.
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Seed nodes of a Redis Cluster, `["redis://host:port", …]`.
    #[serde(default)]
    pub redis_cluster_nodes: Option<Vec<String>>,
    /// A Sentinel-monitored master: `{ master_name = "…", nodes = ["redis://host:26379", …] }`.
    #[serde(default)]
    pub redis_sentinel: Option<SentinelConfig>,
    /// ACL user for the Redis data nodes (all shapes), unless a URL names its own.
    #[serde(default)]
    pub redis_username: Option<String>,
    /// File holding the Redis password (one trailing newline is ignored); or
    /// `PORTCULLIS_REDIS_PASSWORD`. Never inline here.
    #[serde(default)]
    pub redis_password_file: Option<PathBuf>,
    /// PEM CA certificates that `rediss://` Redis servers (and Sentinels) must chain to;
    /// unset: the system's root certificates. Requires `rediss://` URLs.
    #[serde(default)]
    pub redis_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate chain presented to Redis (mutual TLS, Redis's
    /// `tls-auth-clients`); with `redis_tls_key_file`. Requires `rediss://` URLs.
    #[serde(default)]
    pub redis_tls_cert_file: Option<PathBuf>,
    /// PEM private key of `redis_tls_cert_file`.
    #[serde(default)]
    pub redis_tls_key_file: Option<PathBuf>,
    /// Serve although Redis's `maxmemory-policy` may evict keys (a lockout record among
    /// them). Off: such a Redis is refused.
    #[serde(default)]
    pub allow_eviction: bool,
    /// Replicas that must confirm each counted attempt (Redis `WAIT`) before it is
    /// answered; 0 (default): the master's acknowledgement suffices.
    #[serde(default)]
    pub wait_replicas: u32,
    /// Longest wait for `wait_replicas` confirmations; below `operation_timeout`.
    #[serde(default = "default_wait_timeout", with = "humantime_serde")]
    pub wait_timeout: Duration,
    /// The embedded store's data directory (relative paths are from the working
    /// directory). Holds the database, its lock, and the generated key secret.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// File holding the key secret (at least 32 bytes; one trailing newline is ignored).
    /// The secret may come from `PORTCULLIS_KEY_SECRET` instead; never inline here.
    #[serde(default)]
    pub key_secret_file: Option<PathBuf>,
    /// Deadline of one store operation, including taking a pooled connection.
    #[serde(default = "default_operation_timeout", with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// Most Redis connections (each multiplexed, shared by concurrent calls) per pool.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// How long an `attempt_id`'s answer is kept, so a retry of the same call counts
    /// once: the retry horizon. After it the same id is a new attempt.
    #[serde(default = "default_attempt_id_horizon", with = "humantime_serde")]
    pub attempt_id_horizon: Duration,
}

/// `store.redis_sentinel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The master's name as the Sentinels monitor it.
    pub master_name: String,
    /// Sentinel URLs, `redis://host:26379` (or `rediss://`).
    pub nodes: Vec<String>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |nodes: &[String]| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>();
        f.debug_struct("StoreConfig")
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("redis_cluster_nodes", &self.redis_cluster_nodes.as_deref().map(urls))
            .field(
                "redis_sentinel",
                &self.redis_sentinel.as_ref().map(|s| (&s.master_name, urls(&s.nodes))),
            )
            .field("redis_username", &self.redis_username)
            .field("redis_password_file", &self.redis_password_file)
            .field("redis_tls_ca_file", &self.redis_tls_ca_file)
            .field("redis_tls_cert_file", &self.redis_tls_cert_file)
            .field("redis_tls_key_file", &self.redis_tls_key_file)
            .field("allow_eviction", &self.allow_eviction)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("data_dir", &self.data_dir)
            .field("key_secret_file", &self.key_secret_file)
            .field("operation_timeout", &self.operation_timeout)
            .field("pool_size", &self.pool_size)
            .field("attempt_id_horizon", &self.attempt_id_horizon)
            .finish()
    }
}

/// `[realms.NAME]`. Defaults are docs/architecture.md's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealmConfig {
    /// Attempts allowed per window, 1–100.
    #[serde(default = "default_max_failures")]
    pub max_failures: u32,
    /// Window length at step 0.
    #[serde(default = "default_first_window", with = "humantime_serde")]
    pub first_window: Duration,
    /// Longest window.
    #[serde(default = "default_max_window", with = "humantime_serde")]
    pub max_window: Duration,
    /// How long a record lives after its last attempt.
    #[serde(default = "default_retention", with = "humantime_serde")]
    pub retention: Duration,
    /// A realm with a second factor never escalates its windows.
    #[serde(default)]
    pub second_factor_required: bool,
    /// Identifier normalization; must match the realm's account lookup.
    #[serde(default)]
    pub normalization: Normalization,
    /// The realm's hash target.
    #[serde(default)]
    pub hash: HashTargetConfig,
    /// How long a device token stays valid after it was issued (OWASP device cookies);
    /// every accept issues a fresh one.
    #[serde(default = "default_device_token_ttl", with = "humantime_serde")]
    pub device_token_ttl: Duration,
    /// Distinct accounts that must fail with one password fingerprint within the
    /// sliding `spray_period` before that fingerprint counts as sprayed, 10–1,000,000
    /// (docs/spray.md).
    #[serde(default = "default_spray_threshold")]
    pub spray_threshold: u32,
    /// `"flag"`: sprayed fingerprints answer `spray_suspected`; `"reject"`: and their
    /// comparisons are refused.
    #[serde(default)]
    pub spray_action: crate::spray::SprayAction,
    /// One period of the spray count, 1 min – 7 days; the window slides over this one
    /// and the one before.
    #[serde(default = "default_spray_period", with = "humantime_serde")]
    pub spray_period: Duration,
}

const fn default_spray_threshold() -> u32 {
    100
}
const fn default_spray_period() -> Duration {
    Duration::from_secs(3600)
}

const fn default_device_token_ttl() -> Duration {
    Duration::from_secs(90 * 24 * 3600)
}
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 50051))
}
fn default_admin_listen() -> String {
    "127.0.0.1:9464".to_owned()
}
const fn default_shutdown_delay() -> Duration {
    Duration::from_secs(5)
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("portcullis-data")
}
const fn default_operation_timeout() -> Duration {
    Duration::from_millis(500)
}
const fn default_pool_size() -> usize {
    16
}
const fn default_attempt_id_horizon() -> Duration {
    crate::store::DEFAULT_ATTEMPT_ID_HORIZON
}
const fn default_wait_timeout() -> Duration {
    Duration::from_millis(100)
}
const fn default_max_failures() -> u32 {
    5
}
const fn default_first_window() -> Duration {
    Duration::from_secs(15 * 60)
}
const fn default_max_window() -> Duration {
    Duration::from_secs(60 * 60)
}
const fn default_retention() -> Duration {
    Duration::from_secs(24 * 60 * 60)
}
const fn default_max_per_client() -> usize {
    1
}
const fn default_max_wait() -> Duration {
    Duration::from_secs(1)
}
const fn default_max_password_bytes() -> usize {
    1024
}
const fn default_max_bcrypt_cost() -> u32 {
    14
}
const fn default_max_argon2_memory_kib() -> u32 {
    128 * 1024
}
const fn default_max_argon2_iterations() -> u32 {
    16
}
const fn default_max_argon2_parallelism() -> u32 {
    8
}
const fn default_algorithm() -> Algorithm {
    Algorithm::Argon2id
}
const fn default_bcrypt_cost() -> u32 {
    10
}
const fn default_argon2_memory_kib() -> u32 {
    19 * 1024
}
const fn default_argon2_iterations() -> u32 {
    2
}
const fn default_argon2_parallelism() -> u32 {
    1
}
fn default_realms() -> BTreeMap<String, RealmConfig> {
    BTreeMap::from([("default".to_owned(), RealmConfig::default())])
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            redis_url: None,
            redis_cluster_nodes: None,
            redis_sentinel: None,
            redis_username: None,
            redis_password_file: None,
            redis_tls_ca_file: None,
            redis_tls_cert_file: None,
            redis_tls_key_file: None,
            allow_eviction: false,
            wait_replicas: 0,
            wait_timeout: default_wait_timeout(),
            data_dir: default_data_dir(),
            key_secret_file: None,
            operation_timeout: default_operation_timeout(),
            pool_size: default_pool_size(),
            attempt_id_horizon: default_attempt_id_horizon(),
        }
    }
}

impl Default for RealmConfig {
    fn default() -> Self {
        Self {
            max_failures: default_max_failures(),
            first_window: default_first_window(),
            max_window: default_max_window(),
            retention: default_retention(),
            second_factor_required: false,
            normalization: Normalization::default(),
            hash: HashTargetConfig::default(),
            device_token_ttl: default_device_token_ttl(),
            spray_threshold: default_spray_threshold(),
            spray_action: crate::spray::SprayAction::default(),
            spray_period: default_spray_period(),
        }
    }
}

impl Default for HashTargetConfig {
    fn default() -> Self {
        Self {
            algorithm: default_algorithm(),
            bcrypt_cost: default_bcrypt_cost(),
            argon2_memory_kib: default_argon2_memory_kib(),
            argon2_iterations: default_argon2_iterations(),
            argon2_parallelism: default_argon2_parallelism(),
        }
    }
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            max_concurrent: None,
            max_per_client: default_max_per_client(),
            max_wait: default_max_wait(),
            max_waiters: None,
            max_trusted_waiters: None,
            max_password_bytes: default_max_password_bytes(),
            max_bcrypt_cost: default_max_bcrypt_cost(),
            max_argon2_memory_kib: default_max_argon2_memory_kib(),
            max_argon2_iterations: default_max_argon2_iterations(),
            max_argon2_parallelism: default_max_argon2_parallelism(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            shutdown_delay: default_shutdown_delay(),
            telemetry: TelemetryConfig::default(),
            store: StoreConfig::default(),
            verify: VerifyConfig::default(),
            realms: default_realms(),
            allow_plaintext: false,
            tls: None,
            callers: BTreeMap::new(),
            server: ServerLimits::default(),
        }
    }
}

/// Values given on the command line (or their environment variables); each one set
/// replaces the file's value. `Debug` redacts URL passwords.
#[derive(Clone, Default)]
pub struct Overrides {
    /// Replaces `listen`.
    pub listen: Option<SocketAddr>,
    /// Replaces `store.redis_url`.
    pub redis_url: Option<String>,
    /// Replaces `store.redis_cluster_nodes`.
    pub redis_cluster_nodes: Option<Vec<String>>,
    /// Replaces `store.redis_sentinel` (both fields together).
    pub redis_sentinel: Option<SentinelConfig>,
    /// Replaces `store.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// Replaces `telemetry.admin_listen` (`""` disables the admin listener).
    pub admin_listen: Option<String>,
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("listen", &self.listen)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("redis_cluster_nodes", &self.redis_cluster_nodes.as_ref().map(Vec::len))
            .field("redis_sentinel", &self.redis_sentinel.as_ref().map(|s| &s.master_name))
            .field("data_dir", &self.data_dir)
            .finish()
    }
}

/// Which store backs the counters.
#[derive(Debug, Clone)]
pub enum StoreSettings {
    /// A shared Redis: one server, a cluster, or a Sentinel-monitored master.
    Redis(RedisSettings),
    /// The embedded store, for one daemon.
    Embedded {
        /// The data directory.
        data_dir: PathBuf,
        /// A configured key secret; `None`: the data directory's own (generated once).
        secret: Option<KeySecret>,
        /// Deadline of one operation.
        operation_timeout: Duration,
        /// How long an attempt id's answer is kept.
        attempt_id_horizon: Duration,
    },
}

/// Everything `run` needs, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// gRPC listen address (used by `main`; `run` takes an already-bound listener).
    pub listen: SocketAddr,
    /// Not-ready-but-serving time after the shutdown signal, before draining (0–5 min).
    pub shutdown_delay: Duration,
    /// The admin HTTP listener's address; `None` when disabled. Bound by `main`.
    pub admin_listen: Option<SocketAddr>,
    /// The store.
    pub store: StoreSettings,
    /// The CPU budget and hash ceilings.
    pub verify: VerifySettings,
    /// The realms.
    pub realms: Realms,
    /// The listener's TLS, loaded (`None`: plain TCP).
    pub tls: Option<Arc<ReloadingTls>>,
    /// Plain TCP off loopback was allowed explicitly (`allow_plaintext`).
    pub allow_plaintext: bool,
    /// The configured callers (empty: no authorization).
    pub callers: Arc<Callers>,
    /// Limits of the gRPC listener.
    pub server: ServerLimits,
}

impl Config {
    /// Reads `path` (when given) over the defaults, then applies `overrides`.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] for a missing file, bad TOML, a wrong type or an unknown key.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = path {
            if !path.is_file() {
                return Err(ConfigError::Invalid {
                    setting: "--config".into(),
                    problem: format!("{} is not a readable file", path.display()),
                });
            }
            // Replace the default realm table rather than merging into it: a file that
            // names its realms gets exactly those.
            figment = Figment::new()
                .merge(Serialized::defaults(Config {
                    realms: BTreeMap::new(),
                    ..Config::default()
                }))
                .merge(Toml::file_exact(path));
        }
        if let Some(listen) = overrides.listen {
            figment = figment.merge(Serialized::default("listen", listen));
        }
        if let Some(url) = &overrides.redis_url {
            figment = figment.merge(Serialized::default("store.redis_url", url));
        }
        if let Some(nodes) = &overrides.redis_cluster_nodes {
            figment = figment.merge(Serialized::default("store.redis_cluster_nodes", nodes));
        }
        if let Some(sentinel) = &overrides.redis_sentinel {
            figment = figment.merge(Serialized::default("store.redis_sentinel", sentinel));
        }
        if let Some(dir) = &overrides.data_dir {
            figment = figment.merge(Serialized::default("store.data_dir", dir));
        }
        if let Some(admin) = &overrides.admin_listen {
            figment = figment.merge(Serialized::default("telemetry.admin_listen", admin));
        }
        let mut config: Config = figment.extract().map_err(|e| ConfigError::Parse(Box::new(e)))?;
        if config.realms.is_empty() {
            config.realms = default_realms();
        }
        Ok(config)
    }

    /// Range-checks every value and resolves the key secret, from
    /// `store.key_secret_file` or else `secret_from_env` (the value of
    /// [`KEY_SECRET_ENV`], passed in so tests need not touch the process environment).
    ///
    /// # Errors
    /// The first [`ConfigError`] found, naming the setting and its allowed range.
    pub fn validate(&self, secret_from_env: Option<String>) -> Result<Settings, ConfigError> {
        self.validate_with(secret_from_env, None)
    }

    /// As [`Self::validate`], with the value of [`REDIS_PASSWORD_ENV`] too (used when
    /// `store.redis_password_file` is unset).
    ///
    /// # Errors
    /// The first [`ConfigError`] found, naming the setting and its allowed range.
    pub fn validate_with(
        &self,
        secret_from_env: Option<String>,
        redis_password_from_env: Option<String>,
    ) -> Result<Settings, ConfigError> {
        let verify = self.verify.validate()?;
        let realms = self
            .realms
            .iter()
            .map(|(name, r)| r.validate(name, &verify.ceilings))
            .collect::<Result<Vec<_>, _>>()?;
        let s = &self.store;
        check_range(
            "store.operation_timeout",
            s.operation_timeout,
            Duration::from_millis(1)..=Duration::from_secs(60),
            "1ms–60s",
        )?;
        check_range("store.pool_size", s.pool_size, 1..=1024, "1–1024")?;
        check_range(
            "store.attempt_id_horizon",
            s.attempt_id_horizon,
            Duration::from_secs(10)..=Duration::from_secs(3600),
            "10s–1h",
        )?;
        let secret = match &s.key_secret_file {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|source| ConfigError::SecretFile { path: path.clone(), source })?;
                Some(KeySecret::from_file_contents(bytes))
            }
            None => secret_from_env.map(String::into_bytes).map(KeySecret::new),
        };
        if let Some(secret) = &secret
            && secret.len() < KeySecret::MIN_BYTES
        {
            return Err(ConfigError::OutOfRange {
                setting: "key secret length".into(),
                value: format!("{} bytes", secret.len()),
                allowed: format!("at least {} bytes", KeySecret::MIN_BYTES),
            });
        }
        let store = match s.redis_shape()? {
            Some(shape) => {
                // Every daemon sharing a Redis must derive the same keys: a secret made
                // up by one daemon would silently split the counters.
                let secret = secret.ok_or_else(|| ConfigError::Invalid {
                    setting: "store.key_secret_file".into(),
                    problem: format!(
                        "a key secret is required with Redis: set store.key_secret_file or {KEY_SECRET_ENV}"
                    ),
                })?;
                StoreSettings::Redis(s.redis_settings(shape, secret, redis_password_from_env)?)
            }
            None => StoreSettings::Embedded {
                data_dir: s.data_dir.clone(),
                secret,
                operation_timeout: s.operation_timeout,
                attempt_id_horizon: s.attempt_id_horizon,
            },
        };
        check_range(
            "shutdown_delay",
            self.shutdown_delay,
            Duration::ZERO..=Duration::from_secs(300),
            "0s–5m",
        )?;
        let admin = self.telemetry.admin_listen.trim();
        let admin_listen = if admin.is_empty() {
            None
        } else {
            Some(admin.parse::<SocketAddr>().map_err(|_| ConfigError::Invalid {
                setting: "telemetry.admin_listen".into(),
                problem: "not a host:port socket address (use \"\" to disable)".into(),
            })?)
        };
        let server = self.validate_server(&verify)?;
        let tls = self.tls.as_ref().map(TlsConfig::load).transpose()?;
        if tls.is_none() && !self.listen.ip().is_loopback() && !self.allow_plaintext {
            return Err(ConfigError::Invalid {
                setting: "listen".into(),
                problem: format!(
                    "{} is not a loopback address and [tls] is not set: passwords would cross the network in clear; configure [tls], or set allow_plaintext = true to accept that",
                    self.listen
                ),
            });
        }
        let names: Vec<&str> = self.realms.keys().map(String::as_str).collect();
        let mutual = self.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        let callers = Arc::new(Callers::new(&self.callers, &names, mutual)?);
        Ok(Settings {
            listen: self.listen,
            shutdown_delay: self.shutdown_delay,
            admin_listen,
            store,
            verify,
            realms: Realms::new(realms),
            tls,
            allow_plaintext: self.allow_plaintext,
            callers,
            server,
        })
    }

    fn validate_server(&self, verify: &VerifySettings) -> Result<ServerLimits, ConfigError> {
        let s = self.server;
        // A Verify request carries the password plus an identifier, a hash and ids.
        let floor = (verify.max_password_bytes / 1024) as u32 + 8;
        check_range(
            "server.max_message_kib",
            s.max_message_kib,
            floor..=4096,
            &format!("{floor} (verify.max_password_bytes + 8 KiB) – 4096"),
        )?;
        check_range(
            "server.max_concurrent_streams",
            s.max_concurrent_streams,
            1..=10_000,
            "1–10000",
        )?;
        check_range("server.max_header_list_kib", s.max_header_list_kib, 1..=1024, "1–1024")?;
        check_range("server.max_connections", s.max_connections, 1..=1_000_000, "1–1000000")?;
        let secs = Duration::from_secs;
        check_range("server.handshake_timeout", s.handshake_timeout, secs(1)..=secs(60), "1s–60s")?;
        check_range("server.idle_timeout", s.idle_timeout, secs(1)..=secs(86_400), "1s–24h")?;
        check_range("server.request_timeout", s.request_timeout, secs(1)..=secs(300), "1s–5m")?;
        check_range(
            "server.keepalive_interval",
            s.keepalive_interval,
            secs(1)..=secs(3600),
            "1s–1h",
        )?;
        check_range(
            "server.keepalive_timeout",
            s.keepalive_timeout,
            secs(1)..=secs(600),
            "1s–10m",
        )?;
        // 64 KiB – 1 = HTTP/2's initial window; a smaller one slows nothing these
        // messages need, a larger one lets a client park more bytes per stream.
        check_range("server.stream_window_kib", s.stream_window_kib, 16..=1024, "16–1024")?;
        check_range(
            "server.connection_window_kib",
            s.connection_window_kib,
            s.stream_window_kib..=16_384,
            "stream_window_kib – 16384",
        )?;
        check_range(
            "server.max_pending_accept_reset_streams",
            s.max_pending_accept_reset_streams,
            1..=1000,
            "1–1000",
        )?;
        check_range(
            "server.max_client_resets_per_minute",
            s.max_client_resets_per_minute,
            1..=100_000,
            "1–100000",
        )?;
        check_range("server.max_oversized_messages", s.max_oversized_messages, 1..=1000, "1–1000")?;
        check_range("server.io_threads", s.io_threads, 1..=MAX_IO_THREADS, "1–256")?;
        check_range("server.abuse_cooldown", s.abuse_cooldown, secs(0)..=secs(3600), "0s–1h")?;
        if let Some(tls) = &self.tls {
            check_range(
                "tls.reload_interval",
                tls.reload_interval,
                Duration::from_millis(100)..=secs(86_400),
                "100ms–24h",
            )?;
        }
        Ok(s)
    }
}

impl StoreConfig {
    /// The one Redis shape configured, checked; `None`: the embedded store.
    fn redis_shape(&self) -> Result<Option<RedisShape>, ConfigError> {
        let set = [
            self.redis_url.is_some().then_some("store.redis_url"),
            self.redis_cluster_nodes.is_some().then_some("store.redis_cluster_nodes"),
            self.redis_sentinel.is_some().then_some("store.redis_sentinel"),
        ];
        let set: Vec<&str> = set.into_iter().flatten().collect();
        if set.len() > 1 {
            return Err(ConfigError::Invalid {
                setting: set.join(", "),
                problem: "choose one Redis shape: store.redis_url, store.redis_cluster_nodes \
                          and store.redis_sentinel are mutually exclusive"
                    .into(),
            });
        }
        let check_url = |setting: &str, url: &str| {
            redis::parse_redis_url(url).ok_or_else(|| ConfigError::Invalid {
                setting: setting.into(),
                problem: format!("{} is not a redis:// or rediss:// URL", redact_url(url)),
            })?;
            // redis-rs's `#insecure` skips certificate verification; this build has no
            // such mode (a connection would fail anyway): say so at start-up.
            if url.contains('#') {
                return Err(ConfigError::Invalid {
                    setting: setting.into(),
                    problem: format!(
                        "{}: a URL fragment (#insecure) is not supported; to trust a private \
                         CA set store.redis_tls_ca_file",
                        redact_url(url)
                    ),
                });
            }
            Ok(())
        };
        let check_nodes = |setting: &str, nodes: &[String]| {
            if nodes.is_empty() {
                return Err(ConfigError::Invalid {
                    setting: setting.into(),
                    problem: "lists no node".into(),
                });
            }
            nodes.iter().try_for_each(|url| check_url(setting, url))
        };
        if let Some(url) = &self.redis_url {
            check_url("store.redis_url", url)?;
            return Ok(Some(RedisShape::Standalone { url: url.clone() }));
        }
        if let Some(nodes) = &self.redis_cluster_nodes {
            check_nodes("store.redis_cluster_nodes", nodes)?;
            return Ok(Some(RedisShape::Cluster { nodes: nodes.clone() }));
        }
        if let Some(sentinel) = &self.redis_sentinel {
            if sentinel.master_name.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    setting: "store.redis_sentinel.master_name".into(),
                    problem: "is empty".into(),
                });
            }
            check_nodes("store.redis_sentinel.nodes", &sentinel.nodes)?;
            sentinel_credentials(&sentinel.nodes).map_err(|_| ConfigError::Invalid {
                setting: "store.redis_sentinel.nodes".into(),
                problem: "every Sentinel URL must carry the same user and password".into(),
            })?;
            return Ok(Some(RedisShape::Sentinel {
                master_name: sentinel.master_name.clone(),
                nodes: sentinel.nodes.clone(),
            }));
        }
        Ok(None)
    }

    fn redis_settings(
        &self,
        shape: RedisShape,
        secret: KeySecret,
        password_from_env: Option<String>,
    ) -> Result<RedisSettings, ConfigError> {
        check_range("store.wait_replicas", self.wait_replicas, 0..=64, "0–64")?;
        if self.wait_timeout.is_zero() || self.wait_timeout >= self.operation_timeout {
            return Err(ConfigError::OutOfRange {
                setting: "store.wait_timeout".into(),
                value: humantime::format_duration(self.wait_timeout).to_string(),
                allowed: format!(
                    "above 0, below store.operation_timeout ({})",
                    humantime::format_duration(self.operation_timeout)
                ),
            });
        }
        let password = match &self.redis_password_file {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|source| ConfigError::PasswordFile { path: path.clone(), source })?;
                let text = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
                    setting: "store.redis_password_file".into(),
                    problem: "is not UTF-8".into(),
                })?;
                Some(
                    text.strip_suffix('\n')
                        .map_or(text.as_str(), |t| t.trim_end_matches('\r'))
                        .to_owned(),
                )
            }
            None => password_from_env,
        };
        let tls = RedisTls::load(
            self.redis_tls_ca_file.as_deref(),
            self.redis_tls_cert_file.as_deref(),
            self.redis_tls_key_file.as_deref(),
        )
        .map_err(|e| ConfigError::Invalid { setting: e.setting.into(), problem: e.problem })?;
        let (setting, urls): (&str, Vec<&String>) = match &shape {
            RedisShape::Standalone { url } => ("store.redis_url", vec![url]),
            RedisShape::Cluster { nodes } => ("store.redis_cluster_nodes", nodes.iter().collect()),
            RedisShape::Sentinel { nodes, .. } => {
                ("store.redis_sentinel.nodes", nodes.iter().collect())
            }
        };
        // One scheme for every node: a list that mixes them would reach some nodes in
        // clear while the operator believes the fleet store is encrypted.
        let encrypted = urls.iter().filter(|u| u.starts_with("rediss://")).count();
        if encrypted != 0 && encrypted != urls.len() {
            return Err(ConfigError::Invalid {
                setting: setting.into(),
                problem: "mixes redis:// and rediss:// URLs: use rediss:// for every node, or \
                          redis:// for every node"
                    .into(),
            });
        }
        if tls.is_set() {
            // Certificates for a plain connection would go unused: refuse, rather than
            // talk to Redis in clear believing it verified.
            let tls_setting = if self.redis_tls_ca_file.is_some() {
                "store.redis_tls_ca_file"
            } else {
                "store.redis_tls_cert_file"
            };
            if let Some(url) = urls.iter().find(|u| !u.starts_with("rediss://")) {
                return Err(ConfigError::Invalid {
                    setting: setting.into(),
                    problem: format!(
                        "{} is not a rediss:// URL, but {tls_setting} is set",
                        redact_url(url)
                    ),
                });
            }
        }
        Ok(RedisSettings {
            shape,
            credentials: Credentials { username: self.redis_username.clone(), password },
            tls,
            secret,
            operation_timeout: self.operation_timeout,
            pool_size: self.pool_size,
            allow_eviction: self.allow_eviction,
            wait_replicas: self.wait_replicas,
            wait_timeout: self.wait_timeout,
            attempt_id_horizon: self.attempt_id_horizon,
        })
    }
}

impl VerifyConfig {
    fn validate(&self) -> Result<VerifySettings, ConfigError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let max_concurrent = self.max_concurrent.unwrap_or((cores / 2).max(1));
        check_range("verify.max_concurrent", max_concurrent, 1..=1024, "1–1024")?;
        check_range(
            "verify.max_per_client",
            self.max_per_client,
            1..=max_concurrent,
            &format!("1 – max_concurrent ({max_concurrent})"),
        )?;
        check_range(
            "verify.max_wait",
            self.max_wait,
            Duration::from_millis(1)..=Duration::from_secs(60),
            "1ms–60s",
        )?;
        let max_waiters = self.max_waiters.unwrap_or(8 * max_concurrent);
        check_range("verify.max_waiters", max_waiters, 0..=100_000, "0–100000")?;
        let max_trusted_waiters = self.max_trusted_waiters.unwrap_or(8 * max_concurrent);
        check_range("verify.max_trusted_waiters", max_trusted_waiters, 0..=100_000, "0–100000")?;
        check_range(
            "verify.max_password_bytes",
            self.max_password_bytes,
            64..=65_536,
            "64–65536 (NIST SP 800-63B asks for at least 64 characters)",
        )?;
        check_range("verify.max_bcrypt_cost", self.max_bcrypt_cost, 4..=31, "4–31")?;
        check_range(
            "verify.max_argon2_memory_kib",
            self.max_argon2_memory_kib,
            8..=4 * 1024 * 1024,
            "8 KiB – 4 GiB",
        )?;
        check_range(
            "verify.max_argon2_iterations",
            self.max_argon2_iterations,
            1..=1024,
            "1–1024",
        )?;
        check_range(
            "verify.max_argon2_parallelism",
            self.max_argon2_parallelism,
            1..=255,
            "1–255",
        )?;
        Ok(VerifySettings {
            governor: GovernorSettings {
                max_concurrent,
                max_per_client: self.max_per_client,
                max_wait: self.max_wait,
                max_waiters,
                max_trusted_waiters,
            },
            ceilings: Ceilings {
                bcrypt_cost: self.max_bcrypt_cost,
                argon2_memory_kib: self.max_argon2_memory_kib,
                argon2_iterations: self.max_argon2_iterations,
                argon2_parallelism: self.max_argon2_parallelism,
            },
            max_password_bytes: self.max_password_bytes,
        })
    }
}

impl HashTargetConfig {
    fn validate(&self, realm: &str, ceilings: &Ceilings) -> Result<HashParams, ConfigError> {
        let key = |field: &str| format!("realms.{realm}.hash.{field}");
        Ok(match self.algorithm {
            Algorithm::Bcrypt => {
                check_range(
                    &key("bcrypt_cost"),
                    self.bcrypt_cost,
                    4..=ceilings.bcrypt_cost,
                    &format!("4 – verify.max_bcrypt_cost ({})", ceilings.bcrypt_cost),
                )?;
                HashParams::Bcrypt { cost: self.bcrypt_cost }
            }
            algorithm => {
                check_range(
                    &key("argon2_parallelism"),
                    self.argon2_parallelism,
                    1..=ceilings.argon2_parallelism,
                    &format!("1 – verify.max_argon2_parallelism ({})", ceilings.argon2_parallelism),
                )?;
                check_range(
                    &key("argon2_memory_kib"),
                    self.argon2_memory_kib,
                    (8 * self.argon2_parallelism)..=ceilings.argon2_memory_kib,
                    &format!(
                        "8 × argon2_parallelism – verify.max_argon2_memory_kib ({})",
                        ceilings.argon2_memory_kib
                    ),
                )?;
                check_range(
                    &key("argon2_iterations"),
                    self.argon2_iterations,
                    1..=ceilings.argon2_iterations,
                    &format!("1 – verify.max_argon2_iterations ({})", ceilings.argon2_iterations),
                )?;
                HashParams::Argon2 {
                    algorithm,
                    memory_kib: self.argon2_memory_kib,
                    iterations: self.argon2_iterations,
                    parallelism: self.argon2_parallelism,
                }
            }
        })
    }
}

impl RealmConfig {
    fn validate(&self, name: &str, ceilings: &Ceilings) -> Result<Realm, ConfigError> {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !valid_name {
            return Err(ConfigError::Invalid {
                setting: format!("realms.{name}"),
                problem: "a realm name is 1–64 characters of A–Z a–z 0–9 . _ -".into(),
            });
        }
        let key = |field: &str| format!("realms.{name}.{field}");
        check_range(&key("max_failures"), self.max_failures, 1..=100, "1–100")?;
        check_range(
            &key("first_window"),
            self.first_window,
            Duration::from_secs(1)..=self.max_window,
            &format!("1s – max_window ({})", humantime::format_duration(self.max_window)),
        )?;
        if self.max_window >= self.retention {
            return Err(ConfigError::OutOfRange {
                setting: key("max_window"),
                value: humantime::format_duration(self.max_window).to_string(),
                allowed: format!(
                    "first_window – below retention ({})",
                    humantime::format_duration(self.retention)
                ),
            });
        }
        // A year bounds every expiry the stores compute, far inside u64 milliseconds.
        check_range(
            &key("retention"),
            self.retention,
            self.max_window..=Duration::from_secs(366 * 24 * 3600),
            "above max_window, at most 366 days",
        )?;
        check_range(
            &key("device_token_ttl"),
            self.device_token_ttl,
            Duration::from_secs(60)..=Duration::from_secs(366 * 24 * 3600),
            "1 min – 366 days",
        )?;
        check_range(&key("spray_threshold"), self.spray_threshold, 10..=1_000_000, "10–1000000")?;
        check_range(
            &key("spray_period"),
            self.spray_period,
            Duration::from_secs(60)..=Duration::from_secs(7 * 24 * 3600),
            "1 min – 7 days",
        )?;
        Ok(Realm {
            name: name.to_owned(),
            policy: Policy {
                max_failures: self.max_failures,
                first_window: self.first_window,
                max_window: self.max_window,
                retention: self.retention,
                second_factor_required: self.second_factor_required,
            },
            normalization: self.normalization,
            hash_target: self.hash.validate(name, ceilings)?,
            device_token_ttl: self.device_token_ttl,
            spray: crate::spray::SprayPolicy {
                threshold: self.spray_threshold,
                action: self.spray_action,
                period: self.spray_period,
            },
        })
    }
}

fn check_range<T: PartialOrd + std::fmt::Debug + Copy>(
    setting: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
    allowed: &str,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            setting: setting.to_owned(),
            value: format!("{value:?}"),
            allowed: allowed.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn from_toml(text: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(Some(&path), &Overrides::default())?.validate(Some(SECRET.into()))
    }

    fn err(text: &str) -> String {
        from_toml(text).unwrap_err().to_string()
    }

    const REDIS: &str = "[store]\nredis_url = \"redis://127.0.0.1:1\"\n";

    #[test]
    fn defaults_match_the_design() {
        let s = from_toml(REDIS).unwrap();
        let realm = s.realms.get("default").unwrap();
        assert_eq!(realm.policy.max_failures, 5);
        assert_eq!(realm.policy.first_window, Duration::from_secs(900));
        assert_eq!(realm.policy.max_window, Duration::from_secs(3600));
        assert_eq!(realm.policy.retention, Duration::from_secs(86400));
        assert!(!realm.policy.second_factor_required);
        assert_eq!(realm.normalization, Normalization::Email);
        assert_eq!(
            realm.hash_target,
            HashParams::Argon2 {
                algorithm: Algorithm::Argon2id,
                memory_kib: 19456,
                iterations: 2,
                parallelism: 1
            }
        );
        let cores = std::thread::available_parallelism().unwrap().get();
        let g = s.verify.governor;
        assert_eq!(g.max_concurrent, (cores / 2).max(1));
        assert_eq!(
            (g.max_per_client, g.max_wait, g.max_waiters),
            (1, Duration::from_secs(1), 8 * g.max_concurrent)
        );
        assert_eq!(g.max_trusted_waiters, 8 * g.max_concurrent);
        assert_eq!(realm.device_token_ttl, Duration::from_secs(90 * 24 * 3600));
    }

    #[test]
    fn device_token_ttl_is_range_checked() {
        let e = err(&format!("{REDIS}[realms.default]\ndevice_token_ttl = \"10s\"\n"));
        assert!(e.contains("realms.default.device_token_ttl"), "{e}");
        let s = from_toml(&format!("{REDIS}[realms.default]\ndevice_token_ttl = \"7days\"\n"));
        assert_eq!(s.unwrap().realms.get("default").unwrap().device_token_ttl.as_secs(), 7 * 86400);
    }

    #[test]
    fn a_node_list_may_not_mix_plain_and_tls_urls() {
        let e = err(
            "[store]\nredis_cluster_nodes = [\"rediss://a:1\", \"redis://b:2\"]\n[realms.default]\n",
        );
        assert!(e.contains("store.redis_cluster_nodes") && e.contains("mixes"), "{e}");
        let e = err(
            "[store]\nredis_sentinel = { master_name = \"m\", nodes = [\"redis://a:1\", \"rediss://b:2\"] }\n[realms.default]\n",
        );
        assert!(e.contains("store.redis_sentinel.nodes") && e.contains("mixes"), "{e}");
        assert!(from_toml("[store]\nredis_cluster_nodes = [\"rediss://a:1\", \"rediss://b:2\"]\n[realms.default]\n").is_ok());
    }

    #[test]
    fn spray_settings_default_and_are_range_checked() {
        let s = from_toml(REDIS).unwrap();
        let spray = s.realms.get("default").unwrap().spray;
        assert_eq!(spray.threshold, 100);
        assert_eq!(spray.action, crate::spray::SprayAction::Flag);
        assert_eq!(spray.period, Duration::from_secs(3600));
        for (line, setting) in [
            ("spray_threshold = 9", "realms.default.spray_threshold"),
            ("spray_threshold = 1000001", "realms.default.spray_threshold"),
            ("spray_period = \"59s\"", "realms.default.spray_period"),
            ("spray_period = \"8days\"", "realms.default.spray_period"),
        ] {
            let e = err(&format!("{REDIS}[realms.default]\n{line}\n"));
            assert!(e.contains(setting), "{line}: {e}");
        }
        let e = err(&format!("{REDIS}[realms.default]\nspray_action = \"block\"\n"));
        assert!(e.contains("spray_action"), "{e}");
        let s = from_toml(&format!(
            "{REDIS}[realms.default]\nspray_threshold = 10\nspray_action = \"reject\"\nspray_period = \"15m\"\n"
        ));
        let spray = s.unwrap().realms.get("default").unwrap().spray;
        assert_eq!(spray.threshold, 10);
        assert_eq!(spray.action, crate::spray::SprayAction::Reject);
        assert_eq!(spray.period, Duration::from_secs(900));
    }

    #[test]
    fn telemetry_settings_default_and_validate() {
        let s = from_toml(REDIS).unwrap();
        assert_eq!(s.admin_listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(s.shutdown_delay, Duration::from_secs(5));
        let s = from_toml(&format!(
            "shutdown_delay = \"250ms\"\n[telemetry]\nadmin_listen = \"\"\n{REDIS}"
        ))
        .unwrap();
        assert_eq!((s.admin_listen, s.shutdown_delay), (None, Duration::from_millis(250)));
        let e = err(&format!("[telemetry]\nadmin_listen = \"localhost\"\n{REDIS}"));
        assert!(e.contains("telemetry.admin_listen"), "{e}");
        let e = err(&format!("shutdown_delay = \"10m\"\n{REDIS}"));
        assert!(e.contains("shutdown_delay") && e.contains("0s–5m"), "{e}");
    }

    #[test]
    fn out_of_range_values_name_the_setting_and_range() {
        let e = err(&format!("{REDIS}[realms.web]\nmax_failures = 101\n"));
        assert!(e.contains("realms.web.max_failures") && e.contains("1–100"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nmax_failures = 0\n"));
        assert!(e.contains("realms.web.max_failures"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nfirst_window = \"500ms\"\n"));
        assert!(e.contains("realms.web.first_window"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nfirst_window = \"2h\"\n"));
        assert!(e.contains("realms.web.first_window"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nmax_window = \"24h\"\n"));
        assert!(e.contains("realms.web.max_window") && e.contains("below retention"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nretention = \"30m\"\n"));
        assert!(e.contains("realms.web."), "{e}");
        let e = err("[store]\nredis_url = \"redis://x\"\noperation_timeout = \"0s\"\n");
        assert!(e.contains("store.operation_timeout"), "{e}");
        let e = err("[store]\nredis_url = \"redis://x\"\npool_size = 0\n");
        assert!(e.contains("store.pool_size"), "{e}");
        let e =
            err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"bcrypt\"\nbcrypt_cost = 15\n"));
        assert!(
            e.contains("realms.web.hash.bcrypt_cost") && e.contains("max_bcrypt_cost (14)"),
            "{e}"
        );
        let e = err(&format!("{REDIS}[realms.web.hash]\nargon2_memory_kib = 200000\n"));
        assert!(e.contains("realms.web.hash.argon2_memory_kib"), "{e}");
        let e = err(&format!("{REDIS}[verify]\nmax_concurrent = 2\nmax_per_client = 3\n"));
        assert!(e.contains("verify.max_per_client") && e.contains("max_concurrent (2)"), "{e}");
        let e = err(&format!("{REDIS}[verify]\nmax_wait = \"2m\"\n"));
        assert!(e.contains("verify.max_wait"), "{e}");
        let e = err(&format!("{REDIS}[verify]\nmax_bcrypt_cost = 32\n"));
        assert!(e.contains("verify.max_bcrypt_cost"), "{e}");
        let e = err(&format!("{REDIS}[verify]\nmax_password_bytes = 10\n"));
        assert!(e.contains("verify.max_password_bytes"), "{e}");
        let e = err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"md5\"\n"));
        assert!(e.contains("md5"), "{e}");
        let e = err(&format!("{REDIS}[realms.\"bad name\"]\n"));
        assert!(e.contains("realms.bad name"), "{e}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = err(&format!("{REDIS}[realms.web]\nmax_failure = 3\n"));
        assert!(e.contains("max_failure"), "{e}");
        let e = err(&format!("{REDIS}[realms.web]\nenabled = false\n"));
        assert!(e.contains("enabled"), "{e}");
        let e = err(&format!("{REDIS}throttle_off = true\n"));
        assert!(e.contains("throttle_off"), "{e}");
        let e = err("[store]\nredis_url = \"redis://x\"\nkey_secret = \"inline\"\n");
        assert!(e.contains("key_secret"), "{e}");
    }

    #[test]
    fn redis_requires_a_long_enough_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, REDIS).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        let e = config.validate(None).unwrap_err().to_string();
        assert!(e.contains("key_secret_file") && e.contains(KEY_SECRET_ENV), "{e}");
        let e = config.validate(Some("short".into())).unwrap_err().to_string();
        assert!(e.contains("at least 32 bytes") && !e.contains("short"), "{e}");
    }

    #[test]
    fn secret_is_redacted_in_debug() {
        let s = from_toml(REDIS).unwrap();
        assert!(!format!("{s:?}").contains(SECRET));
    }

    #[test]
    fn redis_shapes_are_mutually_exclusive_and_checked() {
        let cluster =
            "redis_cluster_nodes = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n";
        let sentinel =
            "redis_sentinel = { master_name = \"main\", nodes = [\"redis://127.0.0.1:26379\"] }\n";
        let s = from_toml(&format!("[store]\n{cluster}")).unwrap();
        assert!(matches!(
            s.store,
            StoreSettings::Redis(RedisSettings { shape: RedisShape::Cluster { ref nodes }, .. })
                if nodes.len() == 2
        ));
        let s = from_toml(&format!("[store]\n{sentinel}")).unwrap();
        assert!(matches!(
            s.store,
            StoreSettings::Redis(RedisSettings { shape: RedisShape::Sentinel { ref master_name, .. }, .. })
                if master_name == "main"
        ));
        let e = err(&format!("{REDIS}{cluster}"));
        assert!(
            e.contains("store.redis_url, store.redis_cluster_nodes")
                && e.contains("mutually exclusive"),
            "{e}"
        );
        let e = err(&format!("[store]\n{cluster}{sentinel}"));
        assert!(e.contains("store.redis_cluster_nodes, store.redis_sentinel"), "{e}");
        let e = err("[store]\nredis_cluster_nodes = []\n");
        assert!(e.contains("store.redis_cluster_nodes") && e.contains("no node"), "{e}");
        let e = err("[store]\nredis_cluster_nodes = [\"http://x\"]\n");
        assert!(e.contains("store.redis_cluster_nodes"), "{e}");
        let e = err("[store]\nredis_sentinel = { master_name = \"\", nodes = [\"redis://h\"] }\n");
        assert!(e.contains("store.redis_sentinel.master_name"), "{e}");
        let e = err("[store]\nredis_sentinel = { master_name = \"m\", nodes = [] }\n");
        assert!(e.contains("store.redis_sentinel.nodes"), "{e}");
        let e = err("[store]\nredis_sentinel = { master_name = \"m\" }\n");
        assert!(e.contains("nodes"), "{e}");
        let e = err(&format!("{REDIS}wait_replicas = 65\n"));
        assert!(e.contains("store.wait_replicas"), "{e}");
        let e = err(&format!("{REDIS}wait_timeout = \"1s\"\n"));
        assert!(e.contains("store.wait_timeout") && e.contains("operation_timeout"), "{e}");
        let s = from_toml(&format!(
            "{REDIS}allow_eviction = true\nwait_replicas = 1\nwait_timeout = \"50ms\"\n"
        ))
        .unwrap();
        let StoreSettings::Redis(r) = s.store else { panic!("not redis") };
        assert!(r.allow_eviction);
        assert_eq!((r.wait_replicas, r.wait_timeout), (1, Duration::from_millis(50)));
    }

    #[test]
    fn redis_passwords_are_redacted_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("redis-password");
        std::fs::write(&file, "filepassword\n").unwrap();
        let text = format!(
            "[store]\nredis_url = \"redis://app:urlpassword@127.0.0.1:1/\"\nredis_username = \"app\"\nredis_password_file = {:?}\n",
            file.display().to_string()
        );
        let path = dir.path().join("p.toml");
        std::fs::write(&path, &text).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        let settings = config.validate(Some(SECRET.into())).unwrap();
        let StoreSettings::Redis(r) = &settings.store else { panic!("not redis") };
        assert_eq!(r.credentials.password.as_deref(), Some("filepassword"));
        let shown = format!("{config:?} {settings:?}");
        assert!(!shown.contains("urlpassword") && !shown.contains("filepassword"), "{shown}");
        let from_env = Config::load(Some(&path), &Overrides::default()).unwrap();
        let mut from_env = from_env;
        from_env.store.redis_password_file = None;
        let settings =
            from_env.validate_with(Some(SECRET.into()), Some("envpassword".into())).unwrap();
        assert!(!format!("{settings:?}").contains("envpassword"));
        let o =
            Overrides { redis_url: Some("redis://:flagpassword@h".into()), ..Overrides::default() };
        assert!(!format!("{o:?}").contains("flagpassword"));
        let e = err("[store]\nredis_url = \"http://:leak@h\"\n");
        assert!(!e.contains("leak"), "{e}");
    }

    #[test]
    fn a_url_in_the_wrong_place_is_not_echoed() {
        for (setting, line) in [
            ("store.redis_cluster_nodes", "redis_cluster_nodes = \"rediss://:leakpw@h:1\""),
            ("store.redis_sentinel", "redis_sentinel = \"rediss://:leakpw@h:1\""),
            ("store.wait_replicas", "wait_replicas = \"rediss://:leakpw@h:1\""),
            ("store.redis_url", "redis_url = [\"rediss://:leakpw@h:1\"]"),
        ] {
            let e = err(&format!("[store]\n{line}\n"));
            assert!(e.contains(setting) && !e.contains("leakpw"), "{e}");
            // Nor in `Debug`, nor anywhere down the error chain (which `serve` logs).
            let error = from_toml(&format!("[store]\n{line}\n")).unwrap_err();
            let mut chain = format!("{error:?}");
            let mut source = std::error::Error::source(&error);
            while let Some(s) = source {
                chain.push_str(&s.to_string());
                source = s.source();
            }
            assert!(!chain.contains("leakpw"), "{chain}");
        }
    }

    #[test]
    fn overrides_replace_file_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, format!("listen = \"127.0.0.1:1\"\n{REDIS}")).unwrap();
        let o = Overrides {
            listen: Some("127.0.0.1:2".parse().unwrap()),
            redis_url: Some("redis://127.0.0.1:3".into()),
            admin_listen: Some(String::new()),
            ..Overrides::default()
        };
        let c = Config::load(Some(&path), &o).unwrap();
        assert_eq!(c.listen.port(), 2);
        assert_eq!(c.telemetry.admin_listen, "");
        assert_eq!(c.store.redis_url.as_deref(), Some("redis://127.0.0.1:3"));
    }
}
