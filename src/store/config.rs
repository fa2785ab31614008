//! `[store]`: which store holds the counters (the embedded default, or one Redis shape)
//! and its settings, defaults and ranges (docs/store.md), and where the key secret comes
//! from.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::redis::settings::{
    Credentials, RedisSettings, RedisShape, RedisTls, redact_url, sentinel_credentials,
};
use crate::secret::KeySecret;
use crate::setting::{ConfigError, Problems, check};

/// Environment variable that may hold the key secret (instead of `store.key_secret_file`).
pub const KEY_SECRET_ENV: &str = "PORTCULLIS_KEY_SECRET";
/// Environment variable that may hold the Redis password (instead of
/// `store.redis_password_file`).
pub const REDIS_PASSWORD_ENV: &str = "PORTCULLIS_REDIS_PASSWORD";

/// `[store]`. At most one of `redis_url`, `redis_cluster_nodes` and `redis_sentinel`;
/// none: the embedded store.
#[derive(Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `redis://host:port/db` (or `rediss://`) of one shared Redis.
    pub redis_url: Option<String>,
    /// Seed nodes of a Redis Cluster, `["redis://host:port", …]`.
    pub redis_cluster_nodes: Option<Vec<String>>,
    /// A Sentinel-monitored master: `{ master_name = "…", nodes = ["redis://host:26379", …] }`.
    pub redis_sentinel: Option<SentinelConfig>,
    /// ACL user for the Redis data nodes (all shapes), unless a URL names its own.
    pub redis_username: Option<String>,
    /// File holding the Redis password (one trailing newline is ignored); or
    /// `PORTCULLIS_REDIS_PASSWORD`. Never inline here.
    pub redis_password_file: Option<PathBuf>,
    /// PEM CA certificates that `rediss://` Redis servers (and Sentinels) must chain to;
    /// unset: the system's root certificates. Requires `rediss://` URLs.
    pub redis_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate chain presented to Redis (mutual TLS, Redis's
    /// `tls-auth-clients`); with `redis_tls_key_file`. Requires `rediss://` URLs.
    pub redis_tls_cert_file: Option<PathBuf>,
    /// PEM private key of `redis_tls_cert_file`.
    pub redis_tls_key_file: Option<PathBuf>,
    /// Serve although Redis's `maxmemory-policy` may evict keys (a lockout record among
    /// them). Off: such a Redis is refused.
    pub allow_eviction: bool,
    /// Replicas that must confirm each counted attempt (Redis `WAIT`) before it is
    /// answered; 0 (default): the master's acknowledgement suffices.
    pub wait_replicas: u32,
    /// Longest wait for `wait_replicas` confirmations; below `operation_timeout`.
    #[default(Duration::from_millis(100))]
    #[serde(with = "humantime_serde")]
    pub wait_timeout: Duration,
    /// The embedded store's data directory (relative paths are from the working
    /// directory). Holds the database, its lock, and the generated key secret.
    #[default(PathBuf::from("portcullis-data"))]
    pub data_dir: PathBuf,
    /// File holding the key secret (at least 32 bytes; one trailing newline is ignored).
    /// The secret may come from `PORTCULLIS_KEY_SECRET` instead; never inline here.
    pub key_secret_file: Option<PathBuf>,
    /// Deadline of one store operation, including taking a pooled connection.
    #[default(Duration::from_millis(500))]
    #[serde(with = "humantime_serde")]
    pub operation_timeout: Duration,
    /// Most Redis connections (each multiplexed, shared by concurrent calls) per pool.
    #[default(16)]
    pub pool_size: usize,
    /// How long an `attempt_id`'s answer is kept, so a retry of the same call counts
    /// once: the retry horizon. After it the same id is a new attempt.
    #[default(crate::store::DEFAULT_ATTEMPT_ID_HORIZON)]
    #[serde(with = "humantime_serde")]
    pub attempt_id_horizon: Duration,
    /// Redis: how long a daemon that finds no key check value at start (a new or a
    /// flushed store) waits, checking every readiness period (1 s), for the daemons
    /// already serving the store to write theirs back before it writes its own, 0 s –
    /// 1 min (docs/store.md, "One key secret per store"). Not ready meanwhile.
    #[default(crate::store::key_check::DEFAULT_KEY_CHECK_CLAIM_WAIT)]
    #[serde(with = "humantime_serde")]
    pub key_check_claim_wait: Duration,
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
            .field("key_check_claim_wait", &self.key_check_claim_wait)
            .finish()
    }
}

impl StoreConfig {
    /// This section as an operator may read it (`Admin/EffectiveConfig`): every URL's
    /// password `***`, every other value as configured (files are named by path).
    pub fn redacted(&self) -> Self {
        let urls = |nodes: &[String]| nodes.iter().map(|n| redact_url(n)).collect();
        let mut shown = self.clone();
        shown.redis_url = self.redis_url.as_deref().map(redact_url);
        shown.redis_cluster_nodes = self.redis_cluster_nodes.as_deref().map(urls);
        if let Some(sentinel) = &mut shown.redis_sentinel {
            sentinel.nodes = urls(&sentinel.nodes);
        }
        shown
    }

    /// The secrets of this section, each named with where it comes from and never its
    /// value: the key secret, the Redis password and the Redis client key.
    /// `secret_from_env` and `redis_password_from_env`: whether `PORTCULLIS_KEY_SECRET`
    /// and `PORTCULLIS_REDIS_PASSWORD` were given.
    pub fn secrets_named(
        &self,
        secret_from_env: bool,
        redis_password_from_env: bool,
    ) -> Vec<String> {
        let redis = self.redis_url.is_some()
            || self.redis_cluster_nodes.is_some()
            || self.redis_sentinel.is_some();
        let mut named = vec![match (&self.key_secret_file, secret_from_env, redis) {
            (Some(path), _, _) => format!("store.key_secret: from the file {}", path.display()),
            (None, true, _) => {
                format!("store.key_secret: from the environment variable {KEY_SECRET_ENV}")
            }
            (None, false, false) => format!(
                "store.key_secret: the embedded store's own, generated in {}",
                self.data_dir.display()
            ),
            (None, false, true) => {
                "store.key_secret: none (a Redis store refuses to start)".to_owned()
            }
        }];
        if redis {
            let password = match (&self.redis_password_file, redis_password_from_env) {
                (Some(path), _) => Some(format!("from the file {}", path.display())),
                (None, true) => Some(format!("from the environment variable {REDIS_PASSWORD_ENV}")),
                (None, false) => None,
            };
            named.extend(password.map(|from| format!("store.redis_password: {from}")));
            // User information, or a query (`?password=`), which the shown URL drops.
            let in_url = |u: &String| {
                u.split_once("://").is_some_and(|(_, rest)| rest.contains(['@', '?', '#']))
            };
            let urls = self.redis_url.iter().chain(self.redis_cluster_nodes.iter().flatten());
            let mut urls = urls.chain(self.redis_sentinel.iter().flat_map(|s| s.nodes.iter()));
            if urls.any(in_url) {
                named.push("store.redis_password: in a URL (not shown)".to_owned());
            }
        }
        if let Some(path) = &self.redis_tls_key_file {
            named.push(format!(
                "store.redis_tls_key_file: the Redis client key, in the file {}",
                path.display()
            ));
        }
        named
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
        /// Deadline of one operation.
        operation_timeout: Duration,
        /// How long an attempt id's answer is kept.
        attempt_id_horizon: Duration,
    },
}

impl StoreConfig {
    /// The store the configuration names, every setting checked, and the configured key
    /// secret: from `store.key_secret_file`, else `secret_from_env` (the value of
    /// `PORTCULLIS_KEY_SECRET`, passed in so tests need not touch the process
    /// environment). Redis requires one; the embedded store otherwise uses its data
    /// directory's own ([`KeySecret::load_or_generate`]). `redis_password_from_env` is
    /// the value of `PORTCULLIS_REDIS_PASSWORD`, used when `redis_password_file` is unset.
    ///
    /// # Errors
    /// [`ConfigError`] naming each setting at fault.
    pub fn validate(
        &self,
        secret_from_env: Option<String>,
        redis_password_from_env: Option<String>,
    ) -> Result<(StoreSettings, Option<KeySecret>), ConfigError> {
        let mut problems = Problems::default();
        problems.note(check(
            "store.operation_timeout",
            self.operation_timeout,
            Duration::from_millis(1)..=Duration::from_secs(60),
        ));
        problems.note(check("store.pool_size", self.pool_size, 1..=1024));
        problems.note(check(
            "store.attempt_id_horizon",
            self.attempt_id_horizon,
            Duration::from_secs(10)..=Duration::from_secs(3600),
        ));
        problems.note(check(
            "store.key_check_claim_wait",
            self.key_check_claim_wait,
            Duration::ZERO..=Duration::from_secs(60),
        ));
        let secret = self.key_secret(secret_from_env);
        let secret_refused = secret.is_err();
        let secret = problems.note(secret).flatten();
        let store = match problems.note(self.redis_shape()) {
            Some(Some(shape)) => {
                // Every daemon sharing a Redis must derive the same keys: a secret made
                // up by one daemon would silently split the counters.
                if secret.is_none() && !secret_refused {
                    problems.note::<()>(Err(ConfigError::invalid(
                        "store.key_secret_file",
                        format!(
                            "a key secret is required with Redis: set store.key_secret_file or {KEY_SECRET_ENV}"
                        ),
                    )));
                }
                problems
                    .note(self.redis_settings(shape, redis_password_from_env))
                    .map(StoreSettings::Redis)
            }
            Some(None) => Some(StoreSettings::Embedded {
                data_dir: self.data_dir.clone(),
                operation_timeout: self.operation_timeout,
                attempt_id_horizon: self.attempt_id_horizon,
            }),
            None => None,
        };
        if let Some(e) = problems.into_error() {
            return Err(e);
        }
        let Some(store) = store else {
            return Err(ConfigError::invalid("[store]", "could not be checked"));
        };
        Ok((store, secret))
    }

    /// The configured key secret: `store.key_secret_file`'s, else `secret_from_env`'s;
    /// `None` when neither is set. A short one is refused naming where it came from
    /// (never its bytes).
    fn key_secret(
        &self,
        secret_from_env: Option<String>,
    ) -> Result<Option<KeySecret>, ConfigError> {
        let (secret, from) = match &self.key_secret_file {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|source| ConfigError::File {
                    setting: "store.key_secret_file",
                    path: path.clone(),
                    source,
                })?;
                (KeySecret::from_file_contents(bytes), format!("store.key_secret_file {path:?}"))
            }
            None => match secret_from_env {
                Some(text) => (KeySecret::new(text.into_bytes()), KEY_SECRET_ENV.to_owned()),
                None => return Ok(None),
            },
        };
        if secret.len() < KeySecret::MIN_BYTES {
            let make = match &self.key_secret_file {
                Some(path) => format!("write a longer one: openssl rand -hex 32 > {path:?}"),
                None => format!(
                    "set a longer one (openssl rand -hex 32), or set store.key_secret_file instead of {KEY_SECRET_ENV}"
                ),
            };
            return Err(ConfigError::invalid(
                from,
                format!(
                    "the key secret is {} bytes long, and it must be at least {} bytes: {make} \
                     (every daemon sharing the store needs the same secret)",
                    secret.len(),
                    KeySecret::MIN_BYTES
                ),
            ));
        }
        if let Some(weakness) = secret.weakness() {
            let make = match &self.key_secret_file {
                Some(path) => format!("write a random one: openssl rand -hex 32 > {path:?}"),
                None => "set a random one (openssl rand -hex 32)".to_owned(),
            };
            return Err(ConfigError::invalid(
                from,
                format!(
                    "the key secret is too predictable: {weakness}; {make} (every daemon \
                     sharing the store needs the same secret)"
                ),
            ));
        }
        if let Some(path) = &self.key_secret_file {
            warn_if_readable_by_others(path);
        }
        Ok(Some(secret))
    }
}

/// One warning when the key secret file can be read by others, or by a group that is not
/// the daemon's own: whoever reads it can key account digests and forge device tokens.
/// A file readable by the daemon's own group only (a Kubernetes Secret volume: owned by
/// root, group `fsGroup`, mode 0440) is not warned about: no other user of the host can
/// read it, and such a mount cannot be given another owner. Names the file and its mode,
/// never its contents.
fn warn_if_readable_by_others(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let Ok(meta) = std::fs::metadata(path) else { return };
        let mode = meta.permissions().mode() & 0o777;
        let own_group = meta.gid() == rustix::process::getegid().as_raw();
        let group_reads = mode & 0o040 != 0 && !own_group;
        if mode & 0o004 != 0 || group_reads {
            tracing::warn!(
                "store.key_secret_file {path:?} is readable by another group or by others \
                 (mode {mode:03o}): make it readable by the daemon's user only (chmod 600)"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
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
        password_from_env: Option<String>,
    ) -> Result<RedisSettings, ConfigError> {
        check("store.wait_replicas", self.wait_replicas, 0..=64)?;
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
                let bytes = std::fs::read(path).map_err(|source| ConfigError::File {
                    setting: "store.redis_password_file",
                    path: path.clone(),
                    source,
                })?;
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
            operation_timeout: self.operation_timeout,
            pool_size: self.pool_size,
            allow_eviction: self.allow_eviction,
            wait_replicas: self.wait_replicas,
            wait_timeout: self.wait_timeout,
            attempt_id_horizon: self.attempt_id_horizon,
            key_check_claim_wait: self.key_check_claim_wait,
        })
    }
}
