//! Metrics (docs/observability.md: the Prometheus recorder behind the `metrics`
//! facade, and the name of every metric the daemon and `portcullis::client` record.
//! `docs/observability.md` describes each one.
//!
//! Label values are bounded: realm names come from configuration, reasons, decisions,
//! verdicts, operations and algorithms from fixed lists in the code, endpoints from
//! the gateway's configuration. Nothing a caller sends becomes a label.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Gauge: 1 while while a Redis node's `maxmemory-policy` may evict keys and
/// `store.allow_eviction` lets the daemon serve anyway (0 otherwise).
pub const EVICTION_ALLOWED_GAUGE: &str = "portcullis_store_eviction_allowed";

/// Gauge: the store's use, in bytes: Redis `used_memory` (of the node
/// nearest its limit), or the embedded store's file size. Read with each health check
/// (every second). A full `noeviction` Redis refuses every count, so every login is
/// denied: `deploy/prometheus/portcullis-rules.yml` alerts before (docs/deployment.md,
/// "Store memory").
pub const MEMORY_USED_GAUGE: &str = "portcullis_store_memory_used_bytes";

/// Gauge: the store's limit, in bytes: Redis `maxmemory` of the node
/// [`MEMORY_USED_GAUGE`] reports (0: no limit), 0 for the embedded store.
pub const MEMORY_LIMIT_GAUGE: &str = "portcullis_store_memory_limit_bytes";

/// Counter: SIGHUP reloads of the configuration file, by `outcome` (`ok`, `refused`).
pub const CONFIG_RELOADS: &str = "portcullis_config_reloads_total";
/// Gauge: 1 for each configuration `section` a reload found changed that takes effect
/// only after a restart, until the file no longer differs there; 0 once it does.
pub const CONFIG_RESTART_PENDING: &str = "portcullis_config_restart_pending";
/// Counter: answered `portcullis.v1.Admin` calls, by `rpc` and `caller`.
pub const ADMIN_CALLS: &str = "portcullis_admin_calls_total";
/// Counter: calls or connections refused for their identity, by `caller` (`-` when
/// none) and `code` (`unauthenticated`, `permission_denied`, `tls_handshake`, …).
pub const AUTH_REFUSALS: &str = "portcullis_auth_refusals_total";
/// Counter: connections closed for idling past `server.idle_timeout`.
pub const CONNECTIONS_CLOSED_IDLE: &str = "portcullis_connections_closed_idle_total";
/// Counter: connections refused at accept, by `reason` (`abuse_cooldown`,
/// `max_connections`).
pub const CONNECTIONS_REFUSED: &str = "portcullis_connections_refused_total";
/// Counter: connections closed for abuse, by `reason`.
pub const CONNECTIONS_CLOSED_ABUSE: &str = "portcullis_connections_closed_abuse_total";
/// Counter: reloads of the listener's TLS files, by `outcome` (`ok`, `refused`).
pub const TLS_RELOADS: &str = "portcullis_tls_reloads_total";

/// Counter: attempts counted, by `realm` and `decision` (`allow`, `deny`), from
/// `RecordAttempt` and `Verify`.
pub const ATTEMPTS: &str = "portcullis_attempts_total";
/// Counter: flow attempts counted (docs/flows.md), by `realm`, `flow`
/// (`second_factor`, `recovery_code`, `password_reset`, `verification_resend`),
/// `decision` (`allow`, `deny`) and `reason` (`ok`; for a deny `account`: the
/// account's window, interval or daily cap; `network`: the client network's budget;
/// `replay`: an attempt_id replayed too often).
pub const FLOW_ATTEMPTS: &str = "portcullis_flow_attempts_total";
/// Counter: a code flow's door closed (an account used up its window of codes), by
/// `realm` and `flow`.
pub const FLOW_LOCKOUTS: &str = "portcullis_flow_lockouts_total";
/// Counter: code flows cleared by a verified code (`ClearFlow`), by `realm` and `flow`.
pub const FLOW_CLEARS: &str = "portcullis_flow_clears_total";
/// Counter: lockouts started (an account key used up its window), by `realm`.
pub const LOCKOUTS: &str = "portcullis_lockouts_total";
/// Counter: records that reached their ceiling of consecutive failures and stay shut
/// until cleared (docs/throttle.md, "The ceiling"), by `realm` and `record` (`account`:
/// the account's untrusted record; `device`: a known device's; `second_factor`,
/// `recovery_code`: a code flow's).
pub const CEILINGS_REACHED: &str = "portcullis_ceilings_reached_total";
/// Counter: `Verify` verdicts, by `realm` and `verdict` (`accept`, `reject`,
/// `challenge`, `change_required`).
pub const VERDICTS: &str = "portcullis_verify_verdicts_total";
/// Counter: CPU-budget refusals, by `reason` (`queue_full`, `wait_timeout`, `deadline`).
pub const REFUSALS: &str = "portcullis_verify_refusals_total";
/// Counter: device tokens issued by `ConfirmDevice` after a step-up challenge passed,
/// by `realm` (docs/devices.md, "Step-up for unknown devices").
pub const DEVICES_CONFIRMED: &str = "portcullis_devices_confirmed_total";
/// Counter: a known device's bucket closed (a device used up its window), by `realm`.
pub const DEVICE_LOCKOUTS: &str = "portcullis_device_lockouts_total";
/// Counter: `Verify` calls whose device token checked out (the trusted lane), by `realm`.
pub const TRUSTED_CALLS: &str = "portcullis_verify_trusted_total";
/// Counter: CPU-budget refusals in the trusted lane, by `reason`.
pub const TRUSTED_REFUSALS: &str = "portcullis_verify_trusted_refusals_total";
/// Counter: `Verify` calls whose password fingerprint was over `spray_threshold`, by
/// realm and action (docs/spray.md).
pub const SPRAY_SUSPECTED: &str = "portcullis_spray_suspected_total";
/// Gauge: password fingerprints this daemon saw over `spray_threshold` within the last
/// `spray_period`, by realm.
pub const SPRAY_FINGERPRINTS_OVER: &str = "portcullis_spray_fingerprints_over_threshold";
/// Histogram: the distinct-account count the store answered for each `Verify`
/// attempt's password fingerprint, by realm: its calm-time distribution is what
/// `spray_threshold` is chosen above (docs/spray.md).
pub const SPRAY_DISTINCT_ACCOUNTS: &str = "portcullis_spray_distinct_accounts";
/// Counter: password-spray episodes begun, by realm.
pub const SPRAY_EPISODES: &str = "portcullis_spray_episodes_total";
/// Counter: attempts that found their client network's bucket empty, by realm and
/// action (`reject`: refused before hashing; `flag`: answered `network_throttled`);
/// docs/throttle.md, "Per client network". Never an address as a label.
pub const NETWORK_THROTTLED: &str = "portcullis_network_throttled_total";
/// Counter: network throttle episodes begun (a network's first throttled attempt after
/// a quiet spell), by realm.
pub const NETWORK_EPISODES: &str = "portcullis_network_episodes_total";
/// Counter: answers carrying `step_up`, by realm and `reason` (`network`: its bucket is
/// empty in a `flag` realm; `account`: the window holds `step_up_failures`).
pub const STEP_UPS: &str = "portcullis_step_up_total";
/// Counter: `Verify` attempts that repeated a password their client was refused with in
/// the window, and were not counted (docs/throttle.md, "Repeated passwords"), by realm.
pub const REPEATS: &str = "portcullis_repeats_forgiven_total";
/// Counter: `Verify` accepts whose password is in the breach filter (docs/breach.md),
/// by realm.
pub const BREACHED_ACCEPTS: &str = "portcullis_breached_accepts_total";
/// Counter: `CheckPassword` answers, by realm and reason (`ok`, `breached`,
/// `context_word`).
pub const PASSWORD_CHECKS: &str = "portcullis_password_checks_total";
/// Gauge: distinct entries of the breach filter in use (0: none loaded).
pub const BREACH_ENTRIES: &str = "portcullis_breach_filter_entries";
/// Counter: breach filter reloads, by outcome (`ok`, `refused`).
pub const BREACH_RELOADS: &str = "portcullis_breach_filter_reloads_total";
/// Counter: stored hashes a gateway sent that could not be used.
pub const BAD_HASHES: &str = "portcullis_verify_bad_hashes_total";
/// Gauge: comparisons running now.
pub const RUNNING: &str = "portcullis_verify_running";
/// Gauge: calls waiting for a CPU slot now.
pub const WAITING: &str = "portcullis_verify_waiting";
/// Histogram: seconds one comparison took on the hashing pool, by `algorithm`.
pub const COMPARISON_SECONDS: &str = "portcullis_verify_comparison_seconds";
/// Histogram: seconds one store operation took, by `operation`.
pub const STORE_SECONDS: &str = "portcullis_store_operation_seconds";
/// Counter: store operations that failed (each one a denied call), by `operation`.
pub const STORE_ERRORS: &str = "portcullis_store_errors_total";
/// Counter: calls of the contract's RPCs answered (or abandoned: `cancelled`), by `rpc`
/// (method name) and `code` (gRPC status, snake case).
pub const RPC_CALLS: &str = "portcullis_rpc_calls_total";
/// Histogram: seconds from a call's arrival to its answer, by `rpc`.
pub const RPC_SECONDS: &str = "portcullis_rpc_duration_seconds";
/// Gauge: 1 while the daemon is ready (store answers, not draining), else 0.
pub const READY: &str = "portcullis_ready";
/// Gauge: 1 while a refusal episode is open, else 0.
pub const EPISODE_OPEN: &str = "portcullis_refusal_episode_open";
/// Counter: refusal episodes opened.
pub const EPISODES: &str = "portcullis_refusal_episodes_total";
/// Counter: security events emitted, by `event` (its name, `portcullis.lockout.started`,
/// …; docs/observability.md, "Security events").
pub const SECURITY_EVENTS: &str = "portcullis_security_events_total";
/// Counter: security events not delivered, by `reason` (`queue_full`: the writer's
/// queue was full; `export_failed`: the OTLP export failed or timed out; `closed`).
pub const SECURITY_EVENTS_DROPPED: &str = "portcullis_security_events_dropped_total";
/// Counter: notes of a realm's status (docs/observability.md, "A realm's status") lost
/// before they reached the store, by `reason` (`full`: a realm's buffer held its most
/// members; `store`: the store refused the write).
pub const REALM_TALLY_DROPPED: &str = "portcullis_realm_tally_dropped_total";
/// Counter: where a realm's candidate policy and the enforced one answered apart, by
/// `realm`, `candidate` (its id, 16 hex: one per configured candidate), `defence`
/// (`login`, `network`, a flow's name) and `outcome`
/// (`would_refuse`, `would_allow`, `user_locked_out`, `step_up_added`, `step_up_dropped`;
/// docs/throttle.md, "Trying a policy in shadow").
pub const CANDIDATE_OUTCOMES: &str = "portcullis_candidate_outcomes_total";
// The client library's metrics are named in `portcullis_client::metrics`.
pub use portcullis_client::metrics::{
    CLIENT_BREAKER_DENIALS, CLIENT_BREAKER_OPEN, CLIENT_EJECTIONS, CLIENT_RETRIES,
};

/// Histogram buckets in seconds for comparisons: a cheap bcrypt (ms) to a hard argon2 (s).
const COMPARISON_BUCKETS: [f64; 12] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Histogram buckets for spray counts: distinct accounts, from one to far past any
/// threshold.
const SPRAY_BUCKETS: [f64; 12] =
    [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0, 100000.0];
/// Histogram buckets in seconds for whole calls: a sub-millisecond `Admit` to a `Verify`
/// waiting its turn for the CPU budget.
const RPC_BUCKETS: [f64; 12] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
/// Histogram buckets in seconds for store operations: sub-millisecond to the timeout.
const STORE_BUCKETS: [f64; 12] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's Prometheus recorder (once; later calls return the same
/// handle). `None` when another recorder was installed first (a library user's own).
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(COMPARISON_SECONDS.into()),
                    &COMPARISON_BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(STORE_SECONDS.into()), &STORE_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(RPC_SECONDS.into()), &RPC_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(SPRAY_DISTINCT_ACCOUNTS.into()),
                        &SPRAY_BUCKETS,
                    )
                })
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            ::metrics::set_global_recorder(recorder).ok()?;
            describe();
            Some(handle)
        })
        .clone()
}

/// The handle [`install`] made, if it ran.
pub fn handle() -> Option<PrometheusHandle> {
    HANDLE.get().cloned().flatten()
}

fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(RPC_CALLS, "RPC calls answered or abandoned, by rpc and gRPC code");
    describe_histogram!(
        RPC_SECONDS,
        Unit::Seconds,
        "Seconds from a call's arrival to its answer, by rpc"
    );
    describe_counter!(ATTEMPTS, "Attempts counted, by realm and decision");
    describe_counter!(LOCKOUTS, "Lockouts started, by realm");
    describe_counter!(SECURITY_EVENTS, "Security events emitted, by event");
    describe_counter!(SECURITY_EVENTS_DROPPED, "Security events not delivered, by reason");
    describe_counter!(REALM_TALLY_DROPPED, "Realm status notes lost before the store, by reason");
    describe_counter!(
        CANDIDATE_OUTCOMES,
        "Attempts where the candidate policy and the enforced one answered apart, by realm and outcome"
    );
    describe_counter!(
        CEILINGS_REACHED,
        "Records that reached their ceiling of consecutive failures, by realm and record"
    );
    describe_counter!(VERDICTS, "Verify verdicts, by realm and verdict");
    describe_counter!(DEVICES_CONFIRMED, "Device tokens ConfirmDevice issued, by realm");
    describe_counter!(FLOW_ATTEMPTS, "Flow attempts counted, by realm, flow, decision and reason");
    describe_counter!(FLOW_LOCKOUTS, "Code flows' doors closed, by realm and flow");
    describe_counter!(FLOW_CLEARS, "Code flows cleared by a verified code, by realm and flow");
    describe_counter!(REFUSALS, "CPU-budget refusals, by reason");
    describe_counter!(DEVICE_LOCKOUTS, "Known devices' buckets closed, by realm");
    describe_counter!(TRUSTED_CALLS, "Verify calls with a valid device token, by realm");
    describe_counter!(TRUSTED_REFUSALS, "CPU-budget refusals in the trusted lane, by reason");
    describe_counter!(
        SPRAY_SUSPECTED,
        "Verify calls with a sprayed password fingerprint, by realm and action"
    );
    describe_gauge!(
        SPRAY_FINGERPRINTS_OVER,
        "Password fingerprints over spray_threshold now, by realm"
    );
    describe_histogram!(
        SPRAY_DISTINCT_ACCOUNTS,
        "Distinct accounts failing with a Verify's password fingerprint, by realm"
    );
    describe_counter!(SPRAY_EPISODES, "Password-spray episodes begun, by realm");
    describe_counter!(
        NETWORK_THROTTLED,
        "Attempts from a client network with an empty bucket, by realm and action"
    );
    describe_counter!(NETWORK_EPISODES, "Network throttle episodes begun, by realm");
    describe_counter!(STEP_UPS, "Answers asking the gateway to step up, by realm and reason");
    describe_counter!(
        BREACHED_ACCEPTS,
        "Verify accepts of a password in the breach filter, by realm"
    );
    describe_counter!(PASSWORD_CHECKS, "CheckPassword answers, by realm and reason");
    describe_gauge!(BREACH_ENTRIES, "Distinct entries of the breach filter in use");
    describe_counter!(BREACH_RELOADS, "Breach filter reloads, by outcome");
    describe_counter!(
        REPEATS,
        "Verify attempts repeating a refused password, not counted, by realm"
    );
    describe_counter!(BAD_HASHES, "Unusable stored hashes sent by gateways");
    describe_gauge!(RUNNING, "Password comparisons running now");
    describe_gauge!(WAITING, "Verify calls waiting for a CPU slot now");
    describe_histogram!(COMPARISON_SECONDS, Unit::Seconds, "Comparison time, by algorithm");
    describe_histogram!(STORE_SECONDS, Unit::Seconds, "Store operation time, by operation");
    describe_counter!(STORE_ERRORS, "Failed store operations, by operation");
    describe_gauge!(READY, "1 while ready (store answers, not draining)");
    describe_gauge!(
        CONFIG_RESTART_PENDING,
        "1 per configuration section changed on reload that waits for a restart"
    );
    describe_gauge!(EPISODE_OPEN, "1 while a refusal episode is open");
    describe_counter!(EPISODES, "Refusal episodes opened");
}
