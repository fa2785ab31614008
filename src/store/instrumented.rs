//! The store as operators see it (docs/observability.md: a [`Store`] that wraps any
//! other and gives each operation a client span (`db.system`, `db.operation` = the
//! operation's name, which docs/architecture.md's "One name per rule" gives its
//! rule and script, never a key), a latency histogram and an error counter by operation,
//! and reports failures to the refusal episodes (one log line an outage, not one a
//! call). Both backends are wrapped where the daemon builds its store, so neither
//! carries telemetry code of its own.
//!
//! `ping` and `ready` (the health checks, once a second) are passed through without a
//! span or a metric, so a health check never moves the operation counts.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use metrics::Histogram;
use tracing::Instrument;
use tracing::field::Empty;

use super::Store;
use super::attempt_count::{Attempt, AttemptCountStore, Counted, Inspection, Shadow};
use super::breached_count::{BreachedCountStore, BreachedNoteRequest};
use super::candidate_report::{CandidateCounts, CandidateReportStore};
use super::devices::{Confirmation, DeviceConfirmation, DeviceStore};
use super::error::StoreError;
use super::keys::{AccountKey, AttemptKey, CandidateKey, TallyKey};
use super::network_bucket::{NetworkBucketStore, NetworkRequest, NetworkState};
use super::realm_tally::{RealmTallyStore, TallyBatch, TallyLookbacks, TallyReading};
use super::repeat_list::{RepeatListStore, RepeatNoteRequest};
use super::send_log::{MailSent, SendLogStore, SendRequest, Sent, give_back_later, take_and_send};
use super::spray_window::{SprayNoteRequest, SprayWindowStore};
use crate::telemetry::episodes::RefusalEpisodes;
use crate::telemetry::metrics::{STORE_ERRORS, STORE_SECONDS};
use crate::throttle::Policy;
use crate::throttle::candidate_report::ReportCounts;

/// The operations this wrapper names, in the order of their latency histograms'
/// handles ([`InstrumentedStore::seconds`]).
const OPERATIONS: [&str; 17] = [
    "record_attempt",
    "admit",
    "network",
    "refund",
    "clear",
    "repeat",
    "spray",
    "tally",
    "candidate",
    "inspect",
    "confirm_device",
    "revoke_devices",
    "send",
    "send_mail",
    "breached",
    "status",
    "candidate_report",
];

/// A [`Store`] with spans, metrics and refusal episodes around another.
pub struct InstrumentedStore {
    inner: Arc<dyn Store>,
    /// `portcullis_store_operation_seconds{operation}`'s handle per operation of
    /// [`OPERATIONS`], made on first use, not looked up per call.
    seconds: [OnceLock<Histogram>; OPERATIONS.len()],
    /// `db.system` of the spans: `redis` or `redb`.
    system: &'static str,
    episodes: Arc<RefusalEpisodes>,
}

impl InstrumentedStore {
    /// Wraps `inner`, whose spans say `db.system = system`.
    pub fn new(
        inner: Arc<dyn Store>,
        system: &'static str,
        episodes: Arc<RefusalEpisodes>,
    ) -> Self {
        Self { inner, system, episodes, seconds: std::array::from_fn(|_| OnceLock::new()) }
    }

    /// Records `seconds` for `operation` on its latency histogram.
    fn took(&self, operation: &'static str, seconds: f64) {
        match OPERATIONS.iter().position(|&o| o == operation) {
            Some(i) => self.seconds[i]
                .get_or_init(|| ::metrics::histogram!(STORE_SECONDS, "operation" => operation))
                .record(seconds),
            // An operation outside the list (none today): looked up as before.
            None => ::metrics::histogram!(STORE_SECONDS, "operation" => operation).record(seconds),
        }
    }

    /// Runs one operation (`operation`: its name, the `operation` label) under its span and
    /// meters.
    async fn operation<T>(
        &self,
        operation: &'static str,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let span = if crate::telemetry::traces::exporting() {
            tracing::info_span!(
                "store",
                otel.name = operation,
                otel.kind = "client",
                db.system = self.system,
                db.operation = operation,
                outcome = Empty,
            )
        } else {
            tracing::Span::none()
        };
        let started = Instant::now();
        let result = work.instrument(span.clone()).await;
        self.took(operation, started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => {
                span.record("outcome", "ok");
            }
            // The caller's error (an attempt_id reused for another request), answered
            // INVALID_ARGUMENT: no store failure, no episode of one.
            Err(StoreError::AttemptIdReused) => {
                span.record("outcome", "invalid_argument");
            }
            Err(err) => {
                span.record("outcome", "error");
                ::metrics::counter!(STORE_ERRORS, "operation" => operation).increment(1);
                if self.episodes.refused("store_unavailable") {
                    // Once an episode: the cause names a setting or a connection, never
                    // an identifier (keys are digests and are not in errors anyway).
                    tracing::error!(
                        operation,
                        error = %err,
                        cause = ?std::error::Error::source(err),
                        "store operation failed"
                    );
                } else {
                    tracing::debug!(operation, error = %err, "store operation failed");
                }
            }
        }
        result
    }
}

#[async_trait]
impl AttemptCountStore for InstrumentedStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        self.operation("admit", self.inner.is_open(key, policy)).await
    }

    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        self.operation("record_attempt", self.inner.count(attempt)).await
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        refunded: (u64, bool),
        candidate: Option<&Shadow>,
    ) -> Result<(), StoreError> {
        self.operation("refund", self.inner.refund(key, attempt_id, refunded, candidate)).await
    }

    async fn clear(&self, key: &AccountKey) -> Result<bool, StoreError> {
        self.operation("clear", self.inner.clear(key)).await
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        self.operation("clear", self.inner.accept(bucket, account, epoch_ttl_ms)).await
    }

    async fn inspect(&self, key: &AccountKey, policy: &Policy) -> Result<Inspection, StoreError> {
        self.operation("inspect", self.inner.inspect(key, policy)).await
    }
}

#[async_trait]
impl DeviceStore for InstrumentedStore {
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        self.operation("revoke_devices", self.inner.revoke_devices(key, ttl_ms)).await
    }

    async fn confirm_device(
        &self,
        confirmation: &DeviceConfirmation<'_>,
    ) -> Result<Confirmation, StoreError> {
        self.operation("confirm_device", self.inner.confirm_device(confirmation)).await
    }
}

#[async_trait]
impl SprayWindowStore for InstrumentedStore {
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        self.operation("spray", self.inner.note_spray(request)).await
    }
}

#[async_trait]
impl NetworkBucketStore for InstrumentedStore {
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        self.operation("network", self.inner.network(request)).await
    }
}

#[async_trait]
impl RepeatListStore for InstrumentedStore {
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        self.operation("repeat", self.inner.note_repeat(request)).await
    }
}

#[async_trait]
impl SendLogStore for InstrumentedStore {
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        self.operation("send", self.inner.send(request)).await
    }

    fn mail_in_one_step(&self) -> bool {
        self.inner.mail_in_one_step()
    }

    /// Timed as one `send_mail` operation: the inner store's own step (the embedded
    /// store's one transaction), or the take and the send in turn; a token owed back
    /// goes back through this wrapper, so the give-back is a `network` operation of its
    /// own, with its span, its metrics and its refusal episode.
    async fn send_mail(
        self: Arc<Self>,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        let inner = self.inner.clone();
        if inner.mail_in_one_step() {
            return self.operation("send_mail", inner.send_mail(request, network)).await;
        }
        let steps = take_and_send(&*inner, request, network);
        let (mail, owed) = self.operation("send_mail", steps).await?;
        if let Some(give) = network.and_then(|take| owed.give_back(take)) {
            give_back_later(self, &give);
        }
        Ok(mail)
    }
}

#[async_trait]
impl BreachedCountStore for InstrumentedStore {
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        self.operation("breached", self.inner.note_breached(note)).await
    }
}

#[async_trait]
impl RealmTallyStore for InstrumentedStore {
    async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError> {
        self.operation("tally", self.inner.add_tallies(batch)).await
    }

    async fn read_tallies(
        &self,
        key: &TallyKey,
        lookbacks: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError> {
        self.operation("status", self.inner.read_tallies(key, lookbacks)).await
    }
}

#[async_trait]
impl CandidateReportStore for InstrumentedStore {
    async fn add_to_report(
        &self,
        key: &CandidateKey,
        counts: &ReportCounts,
    ) -> Result<(), StoreError> {
        self.operation("candidate", self.inner.add_to_report(key, counts)).await
    }

    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        self.operation("candidate_report", self.inner.read_report(key)).await
    }
}

#[async_trait]
impl Store for InstrumentedStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    async fn ready(&self) -> Result<(), StoreError> {
        self.inner.ready().await
    }

    fn refusal(&self) -> Result<(), StoreError> {
        self.inner.refusal()
    }
}

#[cfg(test)]
mod tests {
    use super::OPERATIONS;

    /// Every operation this wrapper names has its handle slot: none falls back to a
    /// registry look-up per call.
    #[test]
    fn every_operation_named_here_has_a_handle() {
        let source = include_str!("instrumented.rs");
        let named: Vec<&str> = source
            .split("self.operation(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert!(named.len() >= OPERATIONS.len(), "{named:?}");
        for name in named {
            assert!(OPERATIONS.contains(&name), "{name} has no handle slot");
        }
    }
}
