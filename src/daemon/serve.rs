//! Serving: the tonic server with its layers (tracing, call tracking, authorization),
//! every service, health and reflection, the HTTP listener of metrics and health, the
//! signal handlers, and the drain on shutdown (docs/deployment.md, "Rolling restarts").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tonic_reflection::server::{v1, v1alpha};

use super::reload::Reloader;
use super::{Daemon, RunError, SERVICE_NAME, SHUTDOWN_GRACE};
use crate::defence::client_network::NetworkWatch;
use crate::defence::spray::SprayWatch;
use crate::pb;
use crate::store::Store;
use crate::store::error::StoreError;
use crate::store::key_check::KEY_SECRET_MISMATCH;
use crate::store::realm_tally::TallyBuffer;
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::http::Readiness;

/// How often the health task asks the store whether it answers.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// The periodic sweeps: spray and network episodes that ended, the CPU budget's idle
/// memory.
fn spawn_sweeps(
    spray: &Arc<SprayWatch>,
    network: &Arc<NetworkWatch>,
    verifier: &crate::verify::Verifier,
) {
    spray.spawn_expiry(Duration::from_secs(10));
    network.spawn_expiry(Duration::from_secs(10));
    verifier.budget().spawn_memory_release(crate::verify::budget::KEPT_MEMORY_IDLE);
}

/// How long the daemon waits at shutdown for its last notes of the realms' status to
/// reach the store.
const FINAL_FLUSH: Duration = Duration::from_secs(2);

/// The task that writes the daemon's notes of the realms' status to the store.
struct TallyWriter {
    task: JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl TallyWriter {
    fn spawn(tally: Arc<TallyBuffer>, store: Arc<dyn Store>) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        Self { task: tokio::spawn(tally.run(store, stopped)), stop }
    }

    /// Stops the task once its write in flight is done, and lets it write what the last
    /// calls noted, for [`FINAL_FLUSH`] at most, before the daemon exits.
    async fn finish(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(FINAL_FLUSH, self.task).await.is_err() {
            tracing::warn!("the realms' status notes of the last calls were not all written");
        }
    }
}

impl Daemon {
    /// Serves until `shutdown`; see [`super::run`].
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
            governor,
            admin,
            readiness,
            shutdown_delay,
            http_listener,
            spray_watch,
            network_watch,
            tls,
            allow_plaintext,
            callers,
            limits,
            reload_source,
            breach,
            store_target: _,
            running_config,
            tally,
        } = self;
        spawn_sweeps(&spray_watch, &network_watch, &verifier);
        let tally = TallyWriter::spawn(tally, store.clone());
        let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
        warn_of_open_doors(loopback, tls.as_deref(), allow_plaintext, callers.count());
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_service_status("", ServingStatus::NotServing).await;
        health.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
        let (stop_health, health_stopped) = tokio::sync::watch::channel(false);
        let following = follow_the_store(store, readiness.clone(), health.clone(), health_stopped);
        let health_task = tokio::spawn(following);
        let (reflection_v1, reflection_v1alpha) = reflection()?;

        let (draining, drain_started) = tokio::sync::watch::channel(false);
        let drain_readiness = readiness.clone();
        let drain = async move {
            shutdown.await;
            let _ = stop_health.send(true);
            let _ = health_task.await;
            drain(drain_readiness, health, shutdown_delay).await;
            let _ = draining.send(true);
            tracing::info!("shutting down: finishing in-flight calls");
        };

        let (http_stop, http_task) = spawn_http(http_listener, &readiness);
        let watch = tls.clone().map(|t| tokio::spawn(t.watch(std::future::pending())));
        let tls_for_auth = tls.clone();
        let callers = crate::auth::CallerTable::new(callers);
        let breach_watch = tokio::spawn(breach.clone().watch(std::future::pending()));
        let reloader = Reloader::new(
            tls.clone(),
            breach,
            callers.clone(),
            reload_source,
            Some(readiness.clone()),
            running_config,
        );
        let signals = tokio::spawn(reloader.handle_signals());
        let max_message = limits.max_message_bytes();
        let incoming = crate::transport::incoming(listener, tls, limits);
        let server = limits
            .builder()
            .trace_fn(crate::telemetry::traces::rpc_span)
            .layer(crate::telemetry::rpc_calls::RpcCallsLayer::default())
            .layer(crate::transport::TrackCallsLayer)
            .layer(crate::auth::AuthLayer::new(callers, tls_for_auth))
            // Every service, health and reflection too, decodes at most max_message.
            .add_service(health_service.max_decoding_message_size(max_message))
            .add_service(reflection_v1.max_decoding_message_size(max_message))
            .add_service(reflection_v1alpha.max_decoding_message_size(max_message))
            .add_service(
                pb::governor_server::GovernorServer::new(governor)
                    .max_decoding_message_size(max_message)
                    .max_encoding_message_size(max_message),
            )
            .add_service(
                pb::admin_server::AdminServer::new(admin)
                    .max_decoding_message_size(max_message)
                    .max_encoding_message_size(max_message),
            )
            .serve_with_incoming_shutdown(incoming, drain);
        let served = within_grace(server, drain_started).await;
        let _ = http_stop.send(());
        if let Some(task) = http_task
            && let Ok(Err(e)) = task.await
        {
            tracing::warn!("admin listener failed: {e}");
        }
        if let Some(watch) = watch {
            watch.abort();
        }
        breach_watch.abort();
        signals.abort();
        tally.finish().await;
        Ok(served?)
    }
}

/// `server` to its end, or until [`SHUTDOWN_GRACE`] after the drain started (a client
/// that never closes its connection cannot hold the daemon).
async fn within_grace<E>(
    server: impl Future<Output = Result<(), E>>,
    mut drain_started: tokio::sync::watch::Receiver<bool>,
) -> Result<(), E> {
    let grace_expired = async move {
        let _ = drain_started.wait_for(|started| *started).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        served = server => served,
        () = grace_expired => {
            tracing::warn!("shutdown grace expired with connections still open");
            Ok(())
        }
    }
}

/// The admin HTTP listener (metrics, health), when there is one, serving until the
/// answered sender is used.
fn spawn_http(
    listener: Option<TcpListener>,
    readiness: &Arc<Readiness>,
) -> (oneshot::Sender<()>, Option<JoinHandle<std::io::Result<()>>>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!("admin HTTP (metrics, health) at {addr}");
        }
        tokio::spawn(crate::telemetry::http::serve(listener, readiness.clone(), async move {
            let _ = stopped.await;
        }))
    });
    (stop, task)
}

/// Says how the listener's door is kept (TLS, mutual TLS, how many callers), and warns
/// when the daemon serves where its defaults would not: without TLS, or without callers,
/// on an address other than loopback.
fn warn_of_open_doors(
    loopback: bool,
    tls: Option<&crate::transport::tls::ReloadingTls>,
    allow_plaintext: bool,
    callers: usize,
) {
    let transport = match tls {
        None => "plaintext",
        Some(tls) if tls.mutual() => "mutual TLS (client certificates from tls.client_ca_file)",
        Some(_) => "TLS (callers by bearer token)",
    };
    tracing::info!(callers, "transport: {transport}");
    let (tls, callers) = (tls.is_some(), callers > 0);
    if !tls && !loopback && allow_plaintext {
        tracing::warn!(
            "serving WITHOUT TLS on a non-loopback address (allow_plaintext = true): passwords cross the network in clear"
        );
    }
    if !callers && !loopback {
        tracing::warn!(
            "no [callers] configured: every connection may call every RPC, Admin included"
        );
    }
}

/// The health task: asks the store every [`HEALTH_INTERVAL`] whether it is ready, and
/// sets readiness and the gRPC health statuses from it, until `stopped` changes.
async fn follow_the_store(
    store: Arc<dyn Store>,
    readiness: Arc<Readiness>,
    health: HealthReporter,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(HEALTH_INTERVAL);
    // Whether the last check found another daemon's key check value: said once when it
    // starts and once when it ends, not every second.
    let mut keyed_otherwise = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => break,
        }
        let outcome = store.ready().await;
        let mismatch = matches!(outcome, Err(StoreError::KeySecretMismatch));
        if mismatch && !keyed_otherwise {
            tracing::error!("store: {KEY_SECRET_MISMATCH}");
            emit(SecurityEvent::new(EventKind::KeySecretRefused));
        } else if keyed_otherwise && outcome.is_ok() {
            tracing::info!("store: the key check holds again: serving");
        }
        keyed_otherwise = mismatch || keyed_otherwise && outcome.is_err();
        readiness.set_keyed_otherwise(mismatch);
        readiness.set_key_check_pending(matches!(outcome, Err(StoreError::KeyCheckPending)));
        let ready = outcome.is_ok();
        readiness.set_store(ready);
        let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
        health.set_service_status("", status).await;
        health.set_service_status(SERVICE_NAME, status).await;
    }
}

/// gRPC reflection, v1 and v1alpha, of the daemon's services and health.
fn reflection() -> Result<
    (
        v1::ServerReflectionServer<impl v1::ServerReflection>,
        v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>,
    ),
    RunError,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// The first part of the drain: load balancers and Kubernetes endpoints see NOT_SERVING
/// (health and /readyz) while calls are still answered for `shutdown_delay`; only then
/// does the listener close.
async fn drain(readiness: Arc<Readiness>, health: HealthReporter, shutdown_delay: Duration) {
    readiness.set_draining();
    health.set_service_status("", ServingStatus::NotServing).await;
    health.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
    tracing::info!(
        shutdown_delay_ms = shutdown_delay.as_millis() as u64,
        "shutting down: not ready, still serving for shutdown_delay"
    );
    tokio::time::sleep(shutdown_delay).await;
}
