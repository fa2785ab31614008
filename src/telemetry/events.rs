//! Security events (docs/observability.md, "Security events"): what happened to whom,
//! for the owner's notice, the SIEM and the audit trail, as OpenTelemetry log records
//! exported over OTLP beside the traces and as one structured log line each (target
//! `portcullis::event`), in one versioned schema ([`SCHEMA`]).
//!
//! A record names the realm, a keyed account digest
//! ([`crate::store::keys::AccountKey::event_tag`]), a client network's tag, the
//! operator's caller name and their free-text note, never an identifier, a password, a
//! hash or a token.
//!
//! Delivery never slows or blocks a login: [`emit`] writes the event's log line (as the
//! daemon's other log lines are written) and only puts it on a bounded queue
//! ([`QUEUE`]) for the one task that exports batches. An event that finds the queue
//! full, or whose export failed (the receiver down or slow past [`EXPORT_TIMEOUT`]), is
//! not exported and is counted in `portcullis_security_events_dropped_total{reason}`;
//! every event emitted is counted in `portcullis_security_events_total{event}`.
//! [`flush`] waits, bounded, for the queue at shutdown.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::InstrumentationScope;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry_sdk::logs::{
    LogBatch, LogExporter as _, SdkLogRecord, SdkLogger, SdkLoggerProvider,
};

use super::metrics::{SECURITY_EVENTS, SECURITY_EVENTS_DROPPED};

/// The schema of every event, in each record's `event.schema` attribute and log line:
/// its name and version. A field is only ever added; a change of meaning is a new
/// version.
pub const SCHEMA: &str = "portcullis.security_event/1";

/// Events held for the writer at most; past it, an event is dropped and counted.
pub const QUEUE: usize = 4096;

/// Records exported in one OTLP request at most.
const BATCH: usize = 512;

/// How long one export may take before its records count as dropped: a receiver that
/// takes the connection and never answers holds no more than this.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What happened. Its name ([`Self::name`]) is the record's event name and the log
/// line's `event` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// An attempt was the first its record refused in the window: a lockout began
    /// (`record` says whose: `account`, `device`, or a code flow's name).
    LockoutStarted,
    /// An operator's Unlock opened a record whose door was shut.
    LockoutEnded,
    /// An attempt brought its record to the consecutive-failure ceiling.
    CeilingReached,
    /// A password fingerprint went over the realm's spray threshold: an episode began.
    SprayStarted,
    /// No fingerprint has been over the threshold for a spray period: the episode ended.
    SprayEnded,
    /// A client network used up its bucket of failed logins (`network` names it).
    NetworkThrottled,
    /// A right password that is in the breach filter was accepted (its grace logins).
    BreachedAccepted,
    /// A right, breached password past its grace logins: a change is required.
    ChangeRequired,
    /// A right password from an unknown device got a challenge instead of a session.
    ChallengeIssued,
    /// A challenge passed and its device was confirmed.
    DeviceConfirmed,
    /// Every device token of an account was revoked (an operator, or an Unlock after an
    /// attack).
    DevicesRevoked,
    /// The store is keyed by another key secret: this daemon refuses to serve.
    KeySecretRefused,
    /// An operator cleared an account's (or a flow's) record (`reason`, `note`).
    OperatorUnlock,
    /// An operator revoked an account's devices (`note`).
    OperatorRevokeDevices,
    /// An operator filled a client network's bucket (`note`).
    OperatorReleaseNetwork,
    /// An operator made the store's key secret this daemon's (`portcullis
    /// adopt-key-secret`), forgetting every count kept under the old one.
    OperatorAdoptKeySecret,
}

impl EventKind {
    /// Every kind, in the order docs/observability.md lists them.
    pub const ALL: [EventKind; 16] = [
        EventKind::LockoutStarted,
        EventKind::LockoutEnded,
        EventKind::CeilingReached,
        EventKind::SprayStarted,
        EventKind::SprayEnded,
        EventKind::NetworkThrottled,
        EventKind::BreachedAccepted,
        EventKind::ChangeRequired,
        EventKind::ChallengeIssued,
        EventKind::DeviceConfirmed,
        EventKind::DevicesRevoked,
        EventKind::KeySecretRefused,
        EventKind::OperatorUnlock,
        EventKind::OperatorRevokeDevices,
        EventKind::OperatorReleaseNetwork,
        EventKind::OperatorAdoptKeySecret,
    ];

    /// The event's name, `portcullis.<what>.<happened>`.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::LockoutStarted => "portcullis.lockout.started",
            EventKind::LockoutEnded => "portcullis.lockout.ended",
            EventKind::CeilingReached => "portcullis.ceiling.reached",
            EventKind::SprayStarted => "portcullis.spray.started",
            EventKind::SprayEnded => "portcullis.spray.ended",
            EventKind::NetworkThrottled => "portcullis.network.throttled",
            EventKind::BreachedAccepted => "portcullis.password.breached_accepted",
            EventKind::ChangeRequired => "portcullis.password.change_required",
            EventKind::ChallengeIssued => "portcullis.challenge.issued",
            EventKind::DeviceConfirmed => "portcullis.device.confirmed",
            EventKind::DevicesRevoked => "portcullis.devices.revoked",
            EventKind::KeySecretRefused => "portcullis.key_secret.refused",
            EventKind::OperatorUnlock => "portcullis.operator.unlock",
            EventKind::OperatorRevokeDevices => "portcullis.operator.revoke_devices",
            EventKind::OperatorReleaseNetwork => "portcullis.operator.release_network",
            EventKind::OperatorAdoptKeySecret => "portcullis.operator.adopt_key_secret",
        }
    }

    /// How grave: operator actions, the key-secret refusal, a ceiling and a spray
    /// episode's start are warnings, the rest information.
    fn severity(self) -> (Severity, &'static str) {
        match self {
            EventKind::KeySecretRefused
            | EventKind::OperatorUnlock
            | EventKind::OperatorRevokeDevices
            | EventKind::OperatorReleaseNetwork
            | EventKind::OperatorAdoptKeySecret
            | EventKind::CeilingReached
            | EventKind::SprayStarted => (Severity::Warn, "WARN"),
            _ => (Severity::Info, "INFO"),
        }
    }
}

/// One security event. Every field but `kind` and `time` is optional and, when set,
/// holds no identifier, password, hash or token.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "an event does nothing until emit()"]
pub struct SecurityEvent {
    /// What happened.
    pub kind: EventKind,
    /// When, on this daemon's clock.
    pub time: SystemTime,
    /// The realm.
    pub realm: Option<String>,
    /// The account's keyed digest (16 hex), the same in every event of that account and
    /// on every daemon sharing the key secret.
    pub account: Option<String>,
    /// Which record: `account`, `device`, or a flow's name.
    pub record: Option<&'static str>,
    /// A client network's tag (16 hex of its keyed digest, as the logs name it).
    pub network: Option<String>,
    /// The operator's configured caller name (`-` when authorization is off).
    pub caller: Option<String>,
    /// The operator's reason, by its wire name (`UNLOCK_REASON_OWNER_VERIFIED`, …).
    pub reason: Option<String>,
    /// The operator's free-text note (a ticket reference), as validated.
    pub note: Option<String>,
}

impl SecurityEvent {
    /// An event of `kind`, now, naming nothing yet.
    pub fn new(kind: EventKind) -> Self {
        Self {
            kind,
            time: SystemTime::now(),
            realm: None,
            account: None,
            record: None,
            network: None,
            caller: None,
            reason: None,
            note: None,
        }
    }

    /// An event of `kind` on the account whose keyed digest is `account_tag`, in `realm`.
    pub fn of_account(kind: EventKind, realm: &str, account_tag: String) -> Self {
        Self::new(kind).realm(realm).account(account_tag)
    }

    /// In `realm`.
    pub fn realm(self, realm: &str) -> Self {
        Self { realm: Some(realm.to_owned()), ..self }
    }

    /// Of the account whose keyed digest is `tag`.
    pub fn account(self, tag: String) -> Self {
        Self { account: Some(tag), ..self }
    }

    /// On `record` (`account`, `device`, a flow's name).
    pub fn record(self, record: &'static str) -> Self {
        Self { record: Some(record), ..self }
    }

    /// Of the client network tagged `tag`.
    pub fn network(self, tag: &str) -> Self {
        Self { network: Some(tag.to_owned()), ..self }
    }

    /// Done by the operator `caller`, for `reason`, with the free-text `note` (empty:
    /// none).
    pub fn operator(self, caller: &str, reason: Option<&str>, note: &str) -> Self {
        Self {
            caller: Some(caller.to_owned()),
            reason: reason.map(str::to_owned),
            note: (!note.is_empty()).then(|| note.to_owned()),
            ..self
        }
    }

    /// The record's attributes, in the schema's order: `event.schema`, then each field
    /// set.
    fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("event.schema", SCHEMA.to_owned())];
        let fields = [
            ("realm", self.realm.clone()),
            ("account", self.account.clone()),
            ("record", self.record.map(str::to_owned)),
            ("network", self.network.clone()),
            ("caller", self.caller.clone()),
            ("reason", self.reason.clone()),
            ("note", self.note.clone()),
        ];
        out.extend(fields.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
        out
    }
}

/// Where [`emit`] puts events for export, once [`start`] ran with an exporter.
static QUEUE_TX: OnceLock<tokio::sync::mpsc::Sender<SecurityEvent>> = OnceLock::new();

/// Events queued or being exported: what [`flush`] waits for.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Emits `event`: counted, its log line written, then queued for export without
/// waiting (when [`start`] ran with an exporter). Never blocks on the export; a full
/// queue drops it from the export, counted.
pub fn emit(event: SecurityEvent) {
    metrics::counter!(SECURITY_EVENTS, "event" => event.kind.name()).increment(1);
    write_line(&event);
    let Some(queue) = QUEUE_TX.get() else { return };
    PENDING.fetch_add(1, Ordering::AcqRel);
    if let Err(e) = queue.try_send(event) {
        PENDING.fetch_sub(1, Ordering::AcqRel);
        let reason = match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => "queue_full",
            tokio::sync::mpsc::error::TrySendError::Closed(_) => "closed",
        };
        metrics::counter!(SECURITY_EVENTS_DROPPED, "reason" => reason).increment(1);
    }
}

/// The event's structured log line (target `portcullis::event`), at the record's
/// severity, with the record's attribute names.
fn write_line(event: &SecurityEvent) {
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: "portcullis::event",
                event = event.kind.name(),
                event.schema = SCHEMA,
                realm = event.realm.as_deref(),
                account = event.account.as_deref(),
                record = event.record,
                network = event.network.as_deref(),
                caller = event.caller.as_deref(),
                reason = event.reason.as_deref(),
                note = event.note.as_deref(),
                "security event"
            )
        };
    }
    match event.kind.severity().0 {
        Severity::Warn => line!(warn),
        _ => line!(info),
    }
}

/// Delivers `event` now and waits for it, for a one-shot command (`portcullis
/// adopt-key-secret`) that has no writer: counted, its record as one JSON line on
/// standard error, and exported over OTLP when the `OTEL_*` environment asks for it.
/// `false` when the export was asked for and failed (the line was still written).
pub async fn deliver_now(event: SecurityEvent) -> bool {
    metrics::counter!(SECURITY_EVENTS, "event" => event.kind.name()).increment(1);
    let mut line = serde_json::Map::new();
    line.insert("event".into(), event.kind.name().into());
    for (key, value) in event.attributes() {
        line.insert(key.into(), value.into());
    }
    eprintln!("{}", serde_json::Value::Object(line));
    match Export::from_env() {
        Ok(None) => true,
        Ok(Some(export)) => export.export(std::slice::from_ref(&event)).await,
        Err(_) => false,
    }
}

/// The OTLP side of the writer: the exporter the `OTEL_*` environment asks for, and a
/// logger that makes its records.
pub struct Export {
    exporter: opentelemetry_otlp::LogExporter,
    /// Makes the records (with the traces' resource); made once.
    logger: SdkLogger,
    scope: InstrumentationScope,
}

impl Export {
    /// The log exporter the `OTEL_*` environment asks for (`OTEL_EXPORTER_OTLP_ENDPOINT`
    /// or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, unless `OTEL_SDK_DISABLED=true`), with the
    /// traces' resource; `None` when it asks for none.
    ///
    /// # Errors
    /// The exporter's, when it cannot be built (a malformed endpoint).
    pub fn from_env() -> Result<Option<Self>, opentelemetry_otlp::ExporterBuildError> {
        if !super::traces::exporting_requested("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") {
            return Ok(None);
        }
        let mut exporter = opentelemetry_otlp::LogExporter::builder().with_tonic().build()?;
        let resource = super::traces::resource();
        exporter.set_resource(&resource);
        let logger =
            SdkLoggerProvider::builder().with_resource(resource).build().logger("portcullis");
        let scope = InstrumentationScope::builder("portcullis")
            .with_version(env!("CARGO_PKG_VERSION"))
            .with_schema_url(SCHEMA)
            .build();
        Ok(Some(Self { exporter, logger, scope }))
    }

    fn record(&self, event: &SecurityEvent) -> SdkLogRecord {
        let mut record = self.logger.create_log_record();
        let (number, text) = event.kind.severity();
        record.set_event_name(event.kind.name());
        record.set_timestamp(event.time);
        record.set_observed_timestamp(SystemTime::now());
        record.set_severity_number(number);
        record.set_severity_text(text);
        record.set_body(AnyValue::from(event.kind.name()));
        record.add_attributes(event.attributes());
        record
    }

    /// Exports `events` in one request; `false` when it failed or took longer than
    /// [`EXPORT_TIMEOUT`].
    async fn export(&self, events: &[SecurityEvent]) -> bool {
        let records: Vec<SdkLogRecord> = events.iter().map(|e| self.record(e)).collect();
        let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            records.iter().map(|r| (r, &self.scope)).collect();
        let sent = self.exporter.export(LogBatch::new(&pairs));
        matches!(tokio::time::timeout(EXPORT_TIMEOUT, sent).await, Ok(Ok(())))
    }
}

/// Starts the exporter's task on the current tokio runtime: from now on [`emit`] queues
/// each event, and the task sends them over OTLP in batches. Once per process; a second
/// call leaves the first in place.
pub fn start(export: Export) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SecurityEvent>(QUEUE);
    if QUEUE_TX.set(tx).is_err() {
        return;
    }
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(BATCH);
        while rx.recv_many(&mut batch, BATCH).await > 0 {
            if !export.export(&batch).await {
                let lost = u64::try_from(batch.len()).unwrap_or(u64::MAX);
                metrics::counter!(SECURITY_EVENTS_DROPPED, "reason" => "export_failed")
                    .increment(lost);
            }
            PENDING.fetch_sub(batch.len(), Ordering::AcqRel);
            batch.clear();
        }
    });
}

/// Waits until every queued event was exported (or given up), at most `within`: at
/// shutdown, so the last events are not lost with the process.
pub async fn flush(within: Duration) {
    let deadline = Instant::now() + within;
    while PENDING.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_name_in_the_schema_form() {
        let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
        assert!(names.iter().all(|n| n.starts_with("portcullis.") && n.matches('.').count() == 2));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EventKind::ALL.len());
    }

    #[test]
    fn attributes_name_only_what_is_set_after_the_schema() {
        let event = SecurityEvent::new(EventKind::OperatorUnlock)
            .realm("default")
            .account("0123456789abcdef".into())
            .operator("helpdesk", Some("UNLOCK_REASON_OTHER"), "");
        let names: Vec<&str> = event.attributes().iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["event.schema", "realm", "account", "caller", "reason"]);
        assert_eq!(event.attributes()[0].1, SCHEMA);
    }
}
