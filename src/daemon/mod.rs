//! The daemon: its assembly from validated [`Settings`] ([`Daemon::new`]: the key
//! secret, the store, the CPU budget, the login check, the services), its serving
//! (`serve`: the tonic server, its layers, health, reflection, drain), and what its
//! signals do ([`reload`]). Everything the daemon is made of is built here and nowhere
//! else; the parts know nothing of each other's construction.

mod serve;

pub mod reload;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{Settings, StoreSettings};
use crate::defence::client_network::NetworkWatch;
use crate::defence::spray::SprayWatch;
use crate::login::Logins;
use crate::rpc::{AdminService, GovernorService};
use crate::secret::{KeySecret, SecretError};
use crate::store::Store;
use crate::store::embedded::{EmbeddedStore, SystemClock};
use crate::store::instrumented::InstrumentedStore;
use crate::store::realm_tally::TallyBuffer;
use crate::store::redis::RedisStore;
use crate::telemetry::http::Readiness;
use crate::telemetry::running_config::RunningConfig;
use crate::{auth, config, store, transport, verify};

/// How long shutdown waits for in-flight calls and open connections after the
/// shutdown signal; a client that never closes its connection cannot hold the daemon.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Name of the operator gRPC service.
pub const ADMIN_SERVICE_NAME: &str = "portcullis.v1.Admin";

/// Name of the gRPC service, as health checks ask for it.
pub const SERVICE_NAME: &str = "portcullis.v1.Governor";

/// Why the daemon stopped with an error.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the store could not be set up")]
    Store(#[from] store::error::StoreError),
    #[error("the embedded store could not open")]
    Embedded(#[from] store::embedded::OpenError),
    #[error("the key secret could not be had")]
    Secret(#[from] SecretError),
    #[error("the gRPC server failed")]
    Transport(#[from] tonic::transport::Error),
    #[error("the reflection service could not be built")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the verifier could not be built")]
    Verifier(#[from] verify::VerifierError),
    #[error("the breach filter could not be loaded")]
    Breach(#[from] crate::defence::breach::FilterError),
}

/// Serves `portcullis.v1.Governor`, `portcullis.v1.Admin`, `grpc.health.v1.Health` and
/// reflection (v1 and v1alpha) on `listener` until `shutdown` resolves; then reports
/// NOT_SERVING (health and `/readyz`) while still answering calls for `shutdown_delay`,
/// so load balancers stop sending, then stops accepting and returns once in-flight calls
/// have finished (at most [`SHUTDOWN_GRACE`] later).
///
/// Health is NOT_SERVING until the store is ready ([`Store::ready`]), and follows the
/// store after.
///
/// # Errors
/// [`RunError`] when the store or verifier cannot be built or the server fails.
pub async fn run(
    settings: Settings,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    Daemon::new(settings)?.serve(listener, shutdown).await
}

/// A built daemon: store, verifier and services, not yet serving. Tests build one to
/// watch its CPU budget; [`run`] is the usual entry point.
pub struct Daemon {
    store: Arc<dyn Store>,
    verifier: Arc<verify::Verifier>,
    governor: GovernorService,
    /// The operator service `portcullis.v1.Admin`.
    admin: AdminService,
    /// What `/readyz` and `grpc.health.v1` report.
    readiness: Arc<Readiness>,
    /// Not-ready-but-serving time after the shutdown signal.
    shutdown_delay: Duration,
    /// The HTTP listener of metrics and health (`/metrics`, `/healthz`, `/readyz`;
    /// `telemetry.admin_listen`), when one was given.
    http_listener: Option<TcpListener>,
    /// Spray episodes, closed by a timer when their fingerprints age out.
    spray_watch: Arc<SprayWatch>,
    /// Throttle episodes of client networks, ended by a periodic walk.
    network_watch: Arc<NetworkWatch>,
    /// The listener's TLS (`None`: plain TCP), the callers and the listener's limits.
    tls: Option<Arc<transport::tls::ReloadingTls>>,
    allow_plaintext: bool,
    callers: Arc<auth::Callers>,
    limits: transport::ServerLimits,
    /// Where SIGHUP reads the configuration again, and the configuration in force.
    reload_source: Option<(reload::SettingsSource, config::Config)>,
    /// The breached-password filter in force, reloaded on change and on SIGHUP.
    breach: Arc<crate::defence::breach::BreachList>,
    /// Where the store is, for messages (no credentials).
    store_target: String,
    /// The configuration in force as `Admin/EffectiveConfig` reports it; a reload that
    /// applies replaces what it applied.
    running_config: Arc<RunningConfig>,
    /// This daemon's notes for the realms' status, written to the store in batches.
    tally: Arc<TallyBuffer>,
}

impl Daemon {
    /// Builds the daemon: the key secret (configured, or the embedded store's data
    /// directory's own), the store (connecting lazily), the realms' dummy hashes and the
    /// CPU budget's thread pool, the login check and the services.
    ///
    /// # Errors
    /// [`RunError::Breach`], [`RunError::Secret`] or [`RunError::Embedded`] (naming the
    /// path at fault), [`RunError::Store`] or [`RunError::Verifier`].
    pub fn new(settings: Settings) -> Result<Self, RunError> {
        // First: a missing or broken filter file stops the start, naming the file.
        let breach = Arc::new(crate::defence::breach::BreachList::load(&settings.breach)?);
        let secret = match (settings.secret, &settings.store) {
            (Some(secret), _) => secret,
            (None, StoreSettings::Embedded { data_dir, .. }) => {
                KeySecret::load_or_generate(data_dir)?
            }
            // Validation requires a configured secret with Redis; fail closed regardless.
            (None, StoreSettings::Redis(_)) => {
                return Err(RunError::Store(store::error::StoreError::Unsafe(
                    "a key secret is required with Redis".into(),
                )));
            }
        };
        let store_target = match &settings.store {
            StoreSettings::Redis(redis) => redis.shape.describe(),
            StoreSettings::Embedded { data_dir, .. } => {
                format!("the embedded store in {} (store.data_dir)", data_dir.display())
            }
        };
        let (store, system): (Arc<dyn Store>, _) = match settings.store {
            StoreSettings::Redis(redis) => {
                // URLs may carry passwords: the shape is logged redacted.
                tracing::info!(shape = ?redis.shape, pool_size = redis.pool_size, "store: redis");
                let store = RedisStore::open(&redis)?.with_key_check(secret.store_check());
                (Arc::new(store), "redis")
            }
            StoreSettings::Embedded { data_dir, operation_timeout, attempt_id_horizon } => {
                let clock = Arc::new(SystemClock);
                let check = secret.store_check();
                let store = EmbeddedStore::open_keyed(&data_dir, operation_timeout, clock, &check)?
                    .with_attempt_id_horizon(attempt_id_horizon);
                (Arc::new(store), "redb")
            }
        };
        let targets = settings.realms.iter().map(|r| (r.name.as_str(), &r.hash_target));
        let verifier = Arc::new(verify::Verifier::new(settings.verify, targets)?);
        // One wrapper for both backends: spans, store metrics, and store failures in the
        // same refusal episodes as the CPU budget's refusals.
        let episodes = verifier.budget().episodes().clone();
        let store: Arc<dyn Store> = Arc::new(InstrumentedStore::new(store, system, episodes));
        let realms = Arc::new(settings.realms);
        let spray_watch = SprayWatch::new();
        let running_config = RunningConfig::new(settings.report);
        let tally = TallyBuffer::new(&secret);
        let admin = AdminService::new(
            realms.clone(),
            store.clone(),
            secret.clone(),
            spray_watch.clone(),
            running_config.clone(),
        );
        let network_watch = NetworkWatch::new();
        let logins = Arc::new(
            Logins::new(
                store.clone(),
                verifier.clone(),
                &secret,
                spray_watch.clone(),
                network_watch.clone(),
            )
            .with_breach(breach.clone())
            .with_tally(tally.clone()),
        );
        let governor = GovernorService::new(realms, store.clone(), secret, logins);
        Ok(Self {
            store,
            verifier,
            governor,
            admin,
            readiness: Readiness::new(),
            shutdown_delay: settings.shutdown_delay,
            http_listener: None,
            spray_watch,
            network_watch,
            tls: settings.tls,
            allow_plaintext: settings.allow_plaintext,
            callers: settings.callers,
            limits: settings.server,
            reload_source: None,
            breach,
            store_target,
            running_config,
            tally,
        })
    }

    /// On SIGHUP, read the configuration again from `source` (the file the daemon was
    /// started from, with its flags and environment) instead of only the files the
    /// running configuration names; `running` is the configuration in force
    /// ([`reload`]).
    pub fn with_reload_source(
        mut self,
        source: reload::SettingsSource,
        running: config::Config,
    ) -> Self {
        self.reload_source = Some((source, running));
        self
    }

    /// Also serves metrics and health over HTTP (`/metrics`, `/healthz`, `/readyz`) on
    /// `listener` (bound by the caller, like the gRPC one), until the gRPC server stops.
    pub fn with_admin_listener(mut self, listener: TcpListener) -> Self {
        self.http_listener = Some(listener);
        self
    }

    /// The readiness that `/readyz` and `grpc.health.v1` report.
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// Start-up check of the store, before the port is taken: a store that answers and
    /// is unsafe (a Redis whose `maxmemory-policy` evicts keys, without
    /// `store.allow_eviction`) stops the start. A store that does not answer yet does
    /// not: the daemon serves NOT_SERVING and denies until it does.
    ///
    /// # Errors
    /// [`RunError::Store`] with [`store::error::StoreError::Unsafe`], naming the policy.
    pub async fn preflight(&self) -> Result<(), RunError> {
        match self.store.ping().await {
            Err(e @ store::error::StoreError::Unsafe(_)) => Err(RunError::Store(e)),
            // Not an unreachable store: the health check says what to do, and keeps
            // checking, so a rotation to this daemon's secret lets it serve.
            Err(store::error::StoreError::KeySecretMismatch) => Ok(()),
            // An empty store: the health check proves again every second and claims it
            // once `store.key_check_claim_wait` has passed with no fleet writing it back.
            Err(e @ store::error::StoreError::KeyCheckPending) => {
                tracing::info!("store: {e}");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    "store: {} does not answer yet: {}; serving NOT_SERVING (every call denied) \
                     until it does: check that it runs and that this host can reach it",
                    self.store_target,
                    crate::setting::error_chain(&e)
                );
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// The verifier, whose CPU budget reports running comparisons, waiters and refusals.
    pub fn verifier(&self) -> &Arc<verify::Verifier> {
        &self.verifier
    }
}
