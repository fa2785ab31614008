//! The configuration: a TOML file (`portcullis.toml`), overridden by command-line flags
//! and their environment variables (`crate::cli`), loaded with figment and validated
//! into [`Settings`]. Unknown keys are errors, every value is range-checked at
//! start-up, and an error names the setting and its allowed range. There is
//! deliberately no setting that turns the throttle off.
//!
//! This is the loader and the root only: each section's struct, defaults (beside each
//! field, `#[default(…)]`) and `validate()` live with the part of the daemon that owns
//! it, and the example `deploy/portcullis.toml` shows every key with its default
//! (a test holds the two together):
//!
//! | section | owner |
//! |---|---|
//! | top level (`listen`, `shutdown_delay`, `allow_plaintext`) | here |
//! | `[telemetry]` | `crate::telemetry::config` |
//! | `[store]` | `crate::store::config` |
//! | `[verify]`, `[realms.NAME.hash]` | `crate::verify::config` |
//! | `[realms.NAME]` | `crate::realm` |
//! | `[tls]` | `crate::transport::tls` |
//! | `[callers.NAME]` | `crate::auth` |
//! | `[server]` | `crate::transport::limits` |
//! | `[breach]` | `crate::defence::breach::config` |

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::auth::{CallerConfig, Callers};
use crate::defence::breach::{BreachConfig, BreachSettings};
use crate::realm::{RealmConfig, Realms};
use crate::secret::KeySecret;
pub use crate::setting::ConfigError;
use crate::setting::{Problems, check};
use crate::store::config::StoreConfig;
pub use crate::store::config::{KEY_SECRET_ENV, REDIS_PASSWORD_ENV, SentinelConfig, StoreSettings};
use crate::store::redis::settings::redact_url;
use crate::telemetry::config::TelemetryConfig;
use crate::telemetry::running_config::ConfigReport;
use crate::transport::ServerLimits;
use crate::transport::tls::{ReloadingTls, TlsConfig};
use crate::verify::VerifySettings;
use crate::verify::config::VerifyConfig;

/// The file format (`portcullis.toml`). Durations are humantime strings (`"15m"`, `"250ms"`).
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address.
    #[default(SocketAddr::from(([127, 0, 0, 1], 50051)))]
    pub listen: SocketAddr,
    /// After SIGTERM, how long the daemon reports not-ready while still answering calls
    /// (so load balancers and Kubernetes endpoints stop sending), before it drains.
    #[default(Duration::from_secs(5))]
    #[serde(with = "humantime_serde")]
    pub shutdown_delay: Duration,
    /// Metrics and health over HTTP.
    pub telemetry: TelemetryConfig,
    /// Where the counters live.
    pub store: StoreConfig,
    /// The CPU budget and hash ceilings of `Verify`.
    pub verify: VerifyConfig,
    /// Realms by name. When the file names none, one realm `default` with the defaults.
    #[default(default_realms())]
    pub realms: BTreeMap<String, RealmConfig>,
    /// Serve without TLS on an address that is not loopback. Passwords then cross the
    /// network in clear; refused unless set explicitly, and warned about when set.
    pub allow_plaintext: bool,
    /// TLS and mutual TLS of the listener (`crate::transport::tls`).
    pub tls: Option<TlsConfig>,
    /// Callers by name and what each may call (see `crate::auth`). None: no
    /// authorization.
    pub callers: BTreeMap<String, CallerConfig>,
    /// Limits of the gRPC listener (see `crate::transport`).
    pub server: ServerLimits,
    /// The breached-password filter and service words (see `crate::defence::breach`).
    pub breach: BreachConfig,
}

fn default_realms() -> BTreeMap<String, RealmConfig> {
    BTreeMap::from([("default".to_owned(), RealmConfig::default())])
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
    /// The configured key secret; `None` with the embedded store when none is
    /// configured: the data directory's own ([`KeySecret::load_or_generate`]).
    pub secret: Option<KeySecret>,
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
    /// The breached-password filter's file and the service words (docs/breach.md); the
    /// daemon loads the file when it starts.
    pub breach: BreachSettings,
    /// These settings as an operator reads them (`Admin/EffectiveConfig`): the
    /// configuration, defaults filled in, with secrets named and never shown.
    pub report: ConfigReport,
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
                return Err(ConfigError::invalid(
                    "--config",
                    format!("{} is not a readable file", path.display()),
                ));
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
    /// Every problem found ([`ConfigError::Several`] when more than one), each naming
    /// its setting and its allowed range.
    pub fn validate(&self, secret_from_env: Option<String>) -> Result<Settings, ConfigError> {
        self.validate_with(secret_from_env, None)
    }

    /// As [`Self::validate`], with the value of [`REDIS_PASSWORD_ENV`] too (used when
    /// `store.redis_password_file` is unset). Each section validates itself beside its
    /// owner; this only puts them together and checks what crosses sections.
    ///
    /// # Errors
    /// Every problem found ([`ConfigError::Several`] when more than one), each naming
    /// its setting and its allowed range.
    pub fn validate_with(
        &self,
        secret_from_env: Option<String>,
        redis_password_from_env: Option<String>,
    ) -> Result<Settings, ConfigError> {
        // Every section is checked even when one before it is not, so an operator sees
        // every bad value at once; a section that depends on another reads the other's
        // values as written.
        let report = self.report(secret_from_env.is_some(), redis_password_from_env.is_some());
        let mut problems = Problems::default();
        let verify = problems.note(self.verify.validate());
        let ceilings = self.verify.ceilings();
        let realms: Vec<_> = self
            .realms
            .iter()
            .filter_map(|(name, r)| problems.note(r.validate(name, &ceilings)))
            .collect();
        let store = problems.note(self.store.validate(secret_from_env, redis_password_from_env));
        problems.note(check(
            "shutdown_delay",
            self.shutdown_delay,
            Duration::ZERO..=Duration::from_secs(300),
        ));
        let admin_listen = problems.note(self.telemetry.validate()).flatten();
        problems.note(self.server.validate(self.verify.max_password_bytes));
        let tls = match &self.tls {
            Some(tls) => problems
                .note(tls.validate().and_then(|tls| {
                    tls.load().map_err(|e| ConfigError::Section {
                        section: "[tls]: ",
                        source: Box::new(e),
                    })
                }))
                .map(Some),
            None => Some(None),
        };
        if self.tls.is_none() && !self.listen.ip().is_loopback() && !self.allow_plaintext {
            problems.note::<()>(Err(ConfigError::invalid(
                "listen",
                format!(
                    "{} is not a loopback address and [tls] is not set: passwords would cross the network in clear; configure [tls], or set allow_plaintext = true to accept that",
                    self.listen
                ),
            )));
        }
        let breach = problems.note(self.breach.validate());
        let names: Vec<&str> = self.realms.keys().map(String::as_str).collect();
        let mutual = self.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        let callers = problems.note(
            Callers::new(&self.callers, &names, mutual)
                .map_err(|e| ConfigError::Section { section: "", source: Box::new(e) }),
        );
        if let Some(e) = problems.into_error() {
            return Err(e);
        }
        let (Some(verify), Some((store, secret)), Some(tls), Some(breach), Some(callers)) =
            (verify, store, tls, breach, callers)
        else {
            return Err(ConfigError::invalid("(configuration)", "a section failed unnamed"));
        };
        let report = with_effective(report, &verify, &realms);
        Ok(Settings {
            listen: self.listen,
            shutdown_delay: self.shutdown_delay,
            admin_listen,
            store,
            secret,
            verify,
            realms: Realms::new(realms),
            tls,
            allow_plaintext: self.allow_plaintext,
            callers: Arc::new(callers),
            server: self.server,
            breach,
            report,
        })
    }

    /// This configuration as an operator may read it (`Admin/EffectiveConfig`,
    /// docs/observability.md, "The running configuration"): every setting with its
    /// default filled in, each section redacted by its owner (a URL's password is
    /// `***`), and every secret named with where it comes from, never its value.
    /// `secret_from_env` and `redis_password_from_env`: whether `PORTCULLIS_KEY_SECRET`
    /// and `PORTCULLIS_REDIS_PASSWORD` were given.
    pub fn report(&self, secret_from_env: bool, redis_password_from_env: bool) -> ConfigReport {
        let shown = Config { store: self.store.redacted(), ..self.clone() };
        // Every value is a plain string, number, list or table with string keys, which
        // JSON holds; should one ever not be, the report says so rather than show less.
        let settings = serde_json::to_value(&shown).unwrap_or_else(|e| {
            serde_json::Value::String(format!("the settings could not be shown: {e}"))
        });
        let mut secrets = self.store.secrets_named(secret_from_env, redis_password_from_env);
        if let Some(tls) = &self.tls {
            secrets.push(format!(
                "tls.key_file: the listener's private key, in the file {}",
                tls.key_file.display()
            ));
        }
        for (name, caller) in &self.callers {
            if let Some(path) = &caller.token_hash_file {
                secrets.push(format!(
                    "callers.{name}.token_hash_file: the digests of its bearer tokens, in the file {}",
                    path.display()
                ));
            }
        }
        ConfigReport::new(settings, secrets)
    }
}

/// `report` with the values a setting left unset came out as: the CPU budget's sizes
/// (from the machine's cores), each realm's `lockout_duration` (its `first_window`) and
/// `step_up_failures` (`max_failures − 2`; `null`: none), and `null` for an unset
/// `breach.filter_file`.
fn with_effective(
    mut report: ConfigReport,
    verify: &VerifySettings,
    realms: &[crate::realm::Realm],
) -> ConfigReport {
    use serde_json::Value;
    let settings = &mut report.settings;
    if let Some(shown) = settings.get_mut("verify").and_then(Value::as_object_mut) {
        let budget = &verify.budget;
        shown.insert("max_concurrent".into(), budget.max_concurrent.into());
        shown.insert("max_waiters".into(), budget.max_waiters.into());
        shown.insert("max_trusted_waiters".into(), budget.max_trusted_waiters.into());
    }
    for realm in realms {
        let shown = settings.get_mut("realms").and_then(|r| r.get_mut(&realm.name));
        let Some(shown) = shown.and_then(Value::as_object_mut) else { continue };
        let lockout = humantime::format_duration(realm.policy.lockout_duration).to_string();
        shown.insert("lockout_duration".into(), lockout.into());
        shown.insert("step_up_failures".into(), realm.step_up_failures.into());
        // The candidate as it runs: every value it takes, inherited ones filled in, and
        // the id its report is kept under (`portcullis candidate-report`).
        if let Some(candidate) = &realm.candidate {
            let p = &candidate.policy;
            let text = |d: std::time::Duration| humantime::format_duration(d).to_string();
            let mut effective = serde_json::json!({
                "id": candidate.id,
                "max_failures": p.max_failures,
                "max_consecutive_failures": p.max_consecutive_failures,
                "lockout_duration": text(p.lockout_duration),
                "first_window": text(p.first_window),
                "max_window": text(p.max_window),
                "retention": text(p.retention),
                "step_up_failures": candidate.step_up_failures,
            });
            if let (Some(b), Some(shown)) = (&candidate.network, effective.as_object_mut()) {
                let period = std::time::Duration::from_millis(b.burst_ms());
                shown.insert("network_capacity".into(), b.capacity.into());
                shown.insert("network_refill_period".into(), text(period).into());
            }
            let flows = candidate_flows(&candidate.flows);
            if let (false, Some(shown)) = (flows.is_empty(), effective.as_object_mut()) {
                shown.insert("flows".into(), flows.into());
            }
            shown.insert("candidate".into(), effective);
        }
    }
    if let Some(breach) = settings.get_mut("breach").and_then(Value::as_object_mut) {
        breach.entry("filter_file").or_insert(Value::Null);
    }
    report
}

/// The flows a candidate tries in shadow as config-dump shows them: each flow's settings
/// as it runs them (unset ones the realm's), by the flow's name; a flow it sets nothing of
/// is left out.
fn candidate_flows(
    flows: &crate::throttle::flow::CandidateFlows,
) -> serde_json::Map<String, serde_json::Value> {
    use crate::throttle::flow::{Flow, FlowPolicy};
    let text = |d: std::time::Duration| humantime::format_duration(d).to_string();
    let mut shown = serde_json::Map::new();
    for flow in Flow::ALL {
        let value = match (flow, flows.of(flow)) {
            (_, None) => continue,
            (Flow::SecondFactor, Some(FlowPolicy::Code(p))) => serde_json::json!({
                "max_failures": p.max_failures,
                "window": text(p.first_window),
            }),
            (_, Some(FlowPolicy::Code(p))) => serde_json::json!({
                "max_failures": p.max_failures,
                "first_window": text(p.first_window),
                "max_window": text(p.max_window),
                "retention": text(p.retention),
            }),
            (_, Some(FlowPolicy::Mail(m))) => serde_json::json!({
                "min_interval": text(std::time::Duration::from_millis(m.send.min_interval_ms)),
                "daily_cap": m.send.daily_cap,
                "network_budget": m.network.capacity,
            }),
        };
        shown.insert(flow.as_str().into(), value);
    }
    shown
}

/// SHA-256 (hex) of the configuration file at `path`, as `Admin/EffectiveConfig`
/// reports it: two daemons reading different files show different digests.
///
/// # Errors
/// [`ConfigError::File`] when the file cannot be read, naming `--config`.
pub fn file_sha256(path: &Path) -> Result<String, ConfigError> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).map_err(|source| ConfigError::File {
        setting: "--config",
        path: path.to_owned(),
        source,
    })?;
    Ok(hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests;
