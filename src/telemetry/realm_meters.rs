//! A realm's metric handles on the login's hot path, resolved once per realm on first
//! use rather than per call: `metrics::counter!` with labels builds the labels (the
//! realm's name copied into each), hashes them and looks the series up in the registry
//! on every call, which a `RecordAttempt` did three times (docs/performance.md,
//! "Daemon CPU per call"). The series and their labels are those of
//! [`super::metrics`]: `portcullis_attempts_total{realm, decision}` and
//! `portcullis_step_up_total{realm, reason}`.

use std::sync::{Arc, OnceLock};

use metrics::Counter;

use super::metrics::{ATTEMPTS, STEP_UPS};

/// Why an answer asked the gateway to step up (`portcullis_step_up_total`'s `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepUpReason {
    /// The account's window holds `step_up_failures`.
    Account,
    /// The client's network is throttled in a `flag` realm.
    Network,
}

/// One realm's handles, each made on its first use (after the daemon installed its
/// recorder), so a series that never moved is never shown. Clones share them. Not a
/// setting: two realms' meters compare equal.
#[derive(Clone)]
pub struct RealmMeters {
    realm: Arc<str>,
    /// `portcullis_attempts_total`: allowed, denied; then `portcullis_step_up_total`:
    /// account, network.
    handles: Arc<[OnceLock<Counter>; 4]>,
}

impl RealmMeters {
    /// The meters of realm `realm`.
    pub fn new(realm: &str) -> Self {
        Self { realm: realm.into(), handles: Arc::new(std::array::from_fn(|_| OnceLock::new())) }
    }

    fn counter(&self, i: usize) -> &Counter {
        self.handles[i].get_or_init(|| {
            let realm = self.realm.to_string();
            match i {
                0 => metrics::counter!(ATTEMPTS, "realm" => realm, "decision" => "allow"),
                1 => metrics::counter!(ATTEMPTS, "realm" => realm, "decision" => "deny"),
                2 => metrics::counter!(STEP_UPS, "realm" => realm, "reason" => "account"),
                _ => metrics::counter!(STEP_UPS, "realm" => realm, "reason" => "network"),
            }
        })
    }

    /// One counted attempt, by the answer given (`portcullis_attempts_total`).
    pub fn attempt(&self, allowed: bool) {
        self.counter(if allowed { 0 } else { 1 }).increment(1);
    }

    /// One answer asking for step-up (`portcullis_step_up_total`).
    pub fn step_up(&self, reason: StepUpReason) {
        let i = match reason {
            StepUpReason::Account => 2,
            StepUpReason::Network => 3,
        };
        self.counter(i).increment(1);
    }
}

impl std::fmt::Debug for RealmMeters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealmMeters").field("realm", &self.realm).finish()
    }
}

impl PartialEq for RealmMeters {
    /// Meters are not settings: a realm compares by its settings alone.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RealmMeters {}
