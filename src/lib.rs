//! Portcullis: a login-attempt governor that a fleet of gateways calls over gRPC.
//!
//! It counts login attempts per account key (realm, normalized identifier) in one shared
//! store, so N gateway replicas do not multiply an attacker's allowance by N and a
//! restart does not wipe it. `docs/architecture.md` is the contract every module keeps;
//! `docs/throttle.md` explains the rules.
//!
//! # Layout
//! - [`config`]: the TOML file and flags, validated into [`config::Settings`].
//! - [`realm`]: configured realms and their policies.
//! - [`normalize`]: identifier normalization, shared with gateways.
//! - [`throttle`]: the attempt/lockout rules, independent of any store.
//! - [`store`]: the `Store` trait, key layout ([`store::keys`]), the Redis backend (one
//!   module per shape: standalone, cluster, Sentinel), the embedded (redb) default, and
//!   the telemetry wrapper of both ([`store::instrumented`]).
//! - [`verify`]: stored-hash parsing and ceilings, dummy hashes, the CPU governor.
//! - [`devices`]: device tokens (OWASP device cookies): issue, check, the device bucket.
//! - [`service`]: gRPC ↔ domain mapping; the one place answers are built.
//! - [`auth`]: callers, their identities (certificate names, bearer tokens) and
//!   permissions per RPC and realm; the one place requests are authorized.
//! - [`admin`]: the operator service `portcullis.v1.Admin` (Inspect, Unlock,
//!   SprayStatus).
//! - [`spray`]: password-spray detection: fingerprints, the realm's watch and episodes.
//! - [`reload`]: SIGHUP (TLS files, callers, the configuration file) and the other
//!   signals that must not end the daemon.
//! - [`transport`]: the listener's connections: TLS and its reload, connection bound,
//!   idle timeout, HTTP/2 limits.
//! - [`telemetry`]: logs, traces, metrics, the admin HTTP listener, refusal episodes.
//! - [`codec`]: the protobuf codec with small per-call buffers.
//! - [`client`]: the gateway library: endpoint pool, retries, health, circuit breaker.
//! - [`run`]: serves the API, health and reflection on a bound listener until shutdown.

#![warn(missing_docs)]

pub mod admin;
pub mod auth;
pub mod config;
pub mod devices;
pub mod realm;
pub mod reload;
pub mod service;
pub mod spray;
pub mod store;
pub mod telemetry;
pub mod throttle;
pub mod transport;
pub mod verify;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic_health::ServingStatus;

use config::{Settings, StoreSettings};
use store::Store;
use store::embedded::{EmbeddedStore, SystemClock};
use store::instrumented::InstrumentedStore;
use store::redis::RedisStore;
use telemetry::admin::Readiness;

/// The gateway library (the `portcullis-client` crate), as `portcullis::client`.
pub use portcullis_client as client;
pub use portcullis_client::{codec, normalize};

/// The wire types of `proto/portcullis/v1` (from `portcullis-client`) and the daemon's
/// server stubs over them.
pub mod pb {
    #![allow(missing_docs, clippy::all)]
    pub use portcullis_client::pb::*;
    tonic::include_proto!("portcullis.v1");

    /// Encoded file descriptor set, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("portcullis_descriptor");
}

/// Name of the operator gRPC service.
pub const ADMIN_SERVICE_NAME: &str = "portcullis.v1.Admin";

/// Name of the gRPC service, as health checks ask for it.
pub const SERVICE_NAME: &str = "portcullis.v1.Governor";

/// How often the health task asks the store whether it answers.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// How long shutdown waits for in-flight calls and open connections after the
/// shutdown signal; a client that never closes its connection cannot hold the daemon.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the daemon stopped with an error.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the store could not be set up")]
    Store(#[from] store::StoreError),
    #[error("the embedded store could not open")]
    Embedded(#[from] store::embedded::OpenError),
    #[error("the gRPC server failed")]
    Transport(#[from] tonic::transport::Error),
    #[error("the reflection service could not be built")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the verifier could not be built")]
    Verifier(#[from] verify::VerifierError),
}

/// Serves `portcullis.v1.Governor`, `grpc.health.v1.Health` and reflection (v1 and
/// v1alpha) on `listener` until `shutdown` resolves; then reports NOT_SERVING (health
/// and `/readyz`) while still answering calls for `shutdown_delay`, so load balancers
/// stop sending, then stops accepting and returns once in-flight calls have finished
/// (at most [`SHUTDOWN_GRACE`] later).
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

/// A built daemon: store, verifier and service, not yet serving. Tests build one to
/// watch its CPU governor; [`run`] is the usual entry point.
pub struct Daemon {
    store: Arc<dyn Store>,
    verifier: Arc<verify::Verifier>,
    service: service::GovernorService,
    /// What `/readyz` and `grpc.health.v1` report.
    readiness: Arc<Readiness>,
    /// Not-ready-but-serving time after the shutdown signal.
    shutdown_delay: Duration,
    /// The admin HTTP listener (`/metrics`, `/healthz`, `/readyz`), when one was given.
    admin_listener: Option<TcpListener>,
    /// The operator service `portcullis.v1.Admin`.
    admin_service: admin::AdminService,
    /// Spray episodes, closed by a timer when their fingerprints age out.
    spray_watch: Arc<spray::SprayWatch>,
    /// The listener's TLS (`None`: plain TCP), the callers and the listener's limits.
    tls: Option<Arc<transport::tls::ReloadingTls>>,
    allow_plaintext: bool,
    callers: Arc<auth::Callers>,
    limits: transport::ServerLimits,
    /// Where SIGHUP reads the configuration again, and the configuration in force.
    reload_source: Option<(reload::SettingsSource, config::Config)>,
}

impl Daemon {
    /// Builds the store (connecting lazily), the realms' dummy hashes and the CPU
    /// governor's thread pool.
    ///
    /// # Errors
    /// [`RunError::Store`], [`RunError::Embedded`] (naming the path at fault) or
    /// [`RunError::Verifier`].
    pub fn new(settings: Settings) -> Result<Self, RunError> {
        let (store, secret, system): (Arc<dyn Store>, _, _) = match settings.store {
            StoreSettings::Redis(redis) => {
                // URLs may carry passwords: the shape is logged redacted.
                tracing::info!(shape = ?redis.shape, pool_size = redis.pool_size, "store: redis");
                (Arc::new(RedisStore::open(&redis)?), redis.secret.clone(), "redis")
            }
            StoreSettings::Embedded { data_dir, secret, operation_timeout, attempt_id_horizon } => {
                let store = EmbeddedStore::open(
                    &data_dir,
                    secret,
                    operation_timeout,
                    Arc::new(SystemClock),
                )?
                .with_attempt_id_horizon(attempt_id_horizon);
                let secret = store.secret().clone();
                (Arc::new(store), secret, "redb")
            }
        };
        let verifier = Arc::new(verify::Verifier::new(settings.verify, &settings.realms)?);
        // One wrapper for both backends: spans, store metrics, and store failures in the
        // same refusal episodes as the CPU budget's refusals.
        let episodes = verifier.governor().episodes().clone();
        let store: Arc<dyn Store> = Arc::new(InstrumentedStore::new(store, system, episodes));
        let realms = Arc::new(settings.realms);
        let spray_watch = spray::SprayWatch::new();
        let admin_service = admin::AdminService::new(
            realms.clone(),
            store.clone(),
            secret.clone(),
            spray_watch.clone(),
        );
        let service = service::GovernorService::new(
            realms,
            store.clone(),
            secret,
            verifier.clone(),
            spray_watch.clone(),
        );
        Ok(Self {
            store,
            verifier,
            service,
            readiness: Readiness::new(),
            shutdown_delay: settings.shutdown_delay,
            admin_listener: None,
            admin_service,
            spray_watch,
            tls: settings.tls,
            allow_plaintext: settings.allow_plaintext,
            callers: settings.callers,
            limits: settings.server,
            reload_source: None,
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

    /// Also serves the admin HTTP endpoints (`/metrics`, `/healthz`, `/readyz`) on
    /// `listener` (bound by the caller, like the gRPC one), until the gRPC server stops.
    pub fn with_admin_listener(mut self, listener: TcpListener) -> Self {
        self.admin_listener = Some(listener);
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
    /// [`RunError::Store`] with [`store::StoreError::Unsafe`], naming the policy.
    pub async fn preflight(&self) -> Result<(), RunError> {
        match self.store.ping().await {
            Err(e @ store::StoreError::Unsafe(_)) => Err(RunError::Store(e)),
            Err(e) => {
                tracing::warn!("store: not answering yet ({e}); serving NOT_SERVING until it does");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// The verifier, whose governor reports running comparisons, waiters and refusals.
    pub fn verifier(&self) -> &Arc<verify::Verifier> {
        &self.verifier
    }

    /// Serves until `shutdown`; see [`run`].
    ///
    /// # Errors
    /// [`RunError`] when the server fails.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunError> {
        let Daemon {
            store,
            verifier,
            service,
            readiness,
            shutdown_delay,
            admin_listener,
            admin_service,
            spray_watch,
            tls,
            allow_plaintext,
            callers,
            limits,
            reload_source,
        } = self;
        spray_watch.spawn_expiry(Duration::from_secs(10));
        verifier.governor().spawn_memory_release(verify::governor::KEPT_MEMORY_IDLE);
        let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
        if tls.is_none() && !loopback && allow_plaintext {
            tracing::warn!(
                "serving WITHOUT TLS on a non-loopback address (allow_plaintext = true): passwords cross the network in clear"
            );
        }
        if !callers.enforced() && !loopback {
            tracing::warn!(
                "no [callers] configured: every connection may call every RPC, Admin included"
            );
        }
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_service_status("", ServingStatus::NotServing).await;
        health.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
        let (stop_health, mut health_stopped) = tokio::sync::watch::channel(false);
        let health_task = tokio::spawn({
            let health = health.clone();
            let readiness = readiness.clone();
            async move {
                let mut tick = tokio::time::interval(HEALTH_INTERVAL);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = health_stopped.changed() => break,
                    }
                    let ready = store.ready().await.is_ok();
                    readiness.set_store(ready);
                    let status =
                        if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
                    health.set_service_status("", status).await;
                    health.set_service_status(SERVICE_NAME, status).await;
                }
            }
        });

        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;

        let (draining, mut drain_started) = tokio::sync::watch::channel(false);
        let drain_readiness = readiness.clone();
        let drain = async move {
            shutdown.await;
            // Load balancers and Kubernetes endpoints see NOT_SERVING (health and
            // /readyz) while calls are still answered for shutdown_delay; only then does
            // the listener close.
            let _ = stop_health.send(true);
            let _ = health_task.await;
            drain_readiness.set_draining();
            health.set_service_status("", ServingStatus::NotServing).await;
            health.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
            tracing::info!(
                shutdown_delay_ms = shutdown_delay.as_millis() as u64,
                "shutting down: not ready, still serving for shutdown_delay"
            );
            tokio::time::sleep(shutdown_delay).await;
            let _ = draining.send(true);
            tracing::info!("shutting down: finishing in-flight calls");
        };

        let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
        let admin_task = admin_listener.map(|listener| {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!("admin HTTP (metrics, health) at {addr}");
            }
            tokio::spawn(telemetry::admin::serve(listener, readiness.clone(), async move {
                let _ = admin_stopped.await;
            }))
        });

        let watch = tls.clone().map(|t| tokio::spawn(t.watch(std::future::pending())));
        let tls_for_auth = tls.clone();
        let callers = auth::CallerTable::new(callers);
        let reloader = reload::Reloader::new(tls.clone(), callers.clone(), reload_source);
        let signals = tokio::spawn(reloader.handle_signals());
        let max_message = limits.max_message_bytes();
        let incoming = transport::incoming(listener, tls, limits);
        let server = limits
            .builder()
            .trace_fn(telemetry::traces::rpc_span)
            .layer(transport::TrackCallsLayer)
            .layer(auth::AuthLayer::new(callers, tls_for_auth))
            // Every service, health and reflection too, decodes at most max_message.
            .add_service(health_service.max_decoding_message_size(max_message))
            .add_service(reflection_v1.max_decoding_message_size(max_message))
            .add_service(reflection_v1alpha.max_decoding_message_size(max_message))
            .add_service(
                pb::governor_server::GovernorServer::new(service)
                    .max_decoding_message_size(max_message)
                    .max_encoding_message_size(max_message),
            )
            .add_service(
                pb::admin_server::AdminServer::new(admin_service)
                    .max_decoding_message_size(max_message)
                    .max_encoding_message_size(max_message),
            )
            .serve_with_incoming_shutdown(incoming, drain);
        let grace_expired = async move {
            let _ = drain_started.wait_for(|started| *started).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let served = tokio::select! {
            served = server => served,
            () = grace_expired => {
                tracing::warn!("shutdown grace expired with connections still open");
                Ok(())
            }
        };
        let _ = admin_stop.send(());
        if let Some(task) = admin_task
            && let Ok(Err(e)) = task.await
        {
            tracing::warn!("admin listener failed: {e}");
        }
        if let Some(watch) = watch {
            watch.abort();
        }
        signals.abort();
        Ok(served?)
    }
}
