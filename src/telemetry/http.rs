//! The admin HTTP listener (`[telemetry] admin_listen`, docs/observability.md:
//!
//! - `GET /metrics`: Prometheus text format, rendered by the recorder of
//!   [`super::metrics`] (`metrics-exporter-prometheus`; its own HTTP listener cannot also
//!   serve health, so its handle is rendered here, on axum, which tonic already brings).
//! - `GET /healthz`: 200 while the process serves HTTP at all (liveness).
//! - `GET /readyz`: 200 when the store answers its readiness check (on Redis `INFO
//!   memory` and the eviction rule) and the daemon is not draining; 503 otherwise. The
//!   body names each component.
//!
//! [`Readiness`] is the one per-component state that `/readyz`, `grpc.health.v1` and
//! the [`READY`] gauge all read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;

use super::metrics::READY;

/// How often the Prometheus recorder's histograms are compacted.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The daemon's readiness, per component (envoyproxy/ratelimit's shape: store, shutdown).
#[derive(Debug, Default)]
pub struct Readiness {
    /// The store answered its last readiness check.
    store: AtomicBool,
    /// The shutdown signal came: not ready, whatever the store says.
    draining: AtomicBool,
    /// The store's key check value is another daemon's (docs/store.md, "One key secret
    /// per store"): `/readyz` says so rather than "not answering".
    keyed_otherwise: AtomicBool,
    /// The store holds no key check value and this daemon, just started, waits
    /// `store.key_check_claim_wait` for the fleet to write it back.
    key_check_pending: AtomicBool,
    /// Configuration sections a reload found changed that take effect only after a
    /// restart (names, never values): the readiness text says so; readiness does not
    /// depend on it.
    restart_pending: std::sync::Mutex<Vec<String>>,
}

impl Readiness {
    /// Not ready: the store has not answered yet.
    pub fn new() -> Arc<Self> {
        ::metrics::gauge!(READY).set(0.0);
        Arc::default()
    }

    /// Records the store's last answer to a readiness check.
    pub fn set_store(&self, answers: bool) {
        self.store.store(answers, Ordering::SeqCst);
        self.publish();
    }

    /// Records whether the store's last key check found another daemon's key secret
    /// (readiness then also follows [`Self::set_store`]).
    pub fn set_keyed_otherwise(&self, differs: bool) {
        self.keyed_otherwise.store(differs, Ordering::SeqCst);
    }

    /// Records whether the store's last key check is waiting for the fleet to write the
    /// value back (readiness then also follows [`Self::set_store`]).
    pub fn set_key_check_pending(&self, waiting: bool) {
        self.key_check_pending.store(waiting, Ordering::SeqCst);
    }

    /// Records the configuration sections whose change waits for a restart (empty:
    /// none).
    pub fn set_restart_pending(&self, sections: Vec<String>) {
        *self.restart_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = sections;
    }

    /// From now on the daemon is draining: not ready.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// Whether calls should be sent here: the store answers and the daemon is not
    /// draining.
    pub fn is_ready(&self) -> bool {
        self.store.load(Ordering::SeqCst) && !self.draining.load(Ordering::SeqCst)
    }

    fn publish(&self) {
        ::metrics::gauge!(READY).set(if self.is_ready() { 1.0 } else { 0.0 });
    }

    fn report(&self) -> String {
        let store = if self.store.load(Ordering::SeqCst) {
            "ok"
        } else if self.keyed_otherwise.load(Ordering::SeqCst) {
            "keyed by another key secret (see the log)"
        } else if self.key_check_pending.load(Ordering::SeqCst) {
            "no key check value yet: waiting store.key_check_claim_wait for the fleet's"
        } else {
            "not answering"
        };
        let draining = if self.draining.load(Ordering::SeqCst) { "yes" } else { "no" };
        let pending = self
            .restart_pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join(", ");
        let pending = if pending.is_empty() { "none".to_owned() } else { pending };
        format!("store: {store}\ndraining: {draining}\nrestart pending: {pending}\n")
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown` resolves.
/// `/metrics` answers 503 when this process has no Prometheus recorder of ours.
///
/// # Errors
/// The listener's accept error.
pub async fn serve(
    listener: TcpListener,
    readiness: Arc<Readiness>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = super::metrics::handle();
    let upkeep = metrics.clone().map(|handle| {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        })
    });
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    match metrics {
                        Some(handle) => (StatusCode::OK, handle.render()),
                        None => (StatusCode::SERVICE_UNAVAILABLE, "no recorder\n".to_owned()),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(readiness);
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    if let Some(upkeep) = upkeep {
        upkeep.abort();
    }
    served
}

async fn readyz(State(readiness): State<Arc<Readiness>>) -> (StatusCode, String) {
    let status =
        if readiness.is_ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, readiness.report())
}
