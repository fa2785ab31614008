//! `[realms.NAME.flows.*]`: the limits of the flows around the login (docs/flows.md),
//! one table per flow, each value's range checked at start. No setting turns a flow off:
//! a flow a gateway does not call costs nothing.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::setting::{Bound, Problems, below, between, check};
use crate::throttle::Policy;
use crate::throttle::flow::{FlowPolicies, MailPolicy, fixed_window, hourly_budget};
use crate::throttle::send_log::{MAX_DAILY_CAP, SendPolicy};

/// `[realms.NAME.flows]`: one table per flow; a table left out keeps its defaults.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct FlowsConfig {
    /// One-time codes: 5 failures in 15 min.
    pub second_factor: SecondFactorConfig,
    /// Recovery codes: 5 failures an hour, escalating to 24 h.
    pub recovery_code: RecoveryCodeConfig,
    /// Reset mails: one a minute, 5 a day, 30 an hour per client network.
    pub password_reset: MailConfig,
    /// Verification resends: as reset mails.
    pub verification_resend: MailConfig,
}

/// `[realms.NAME.flows.second_factor]`.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct SecondFactorConfig {
    /// Codes that may fail in one window, 1–100. Five in 15 min leaves a 6-digit code
    /// a 1 in 200,000 chance a window (NIST SP 800-63B-4 allows at most 100 failures).
    #[default(5)]
    pub max_failures: u32,
    /// The window, 1 min – 24 h: the door closes for its rest after `max_failures`,
    /// and the record lives exactly this long.
    #[default(Duration::from_secs(15 * 60))]
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

/// `[realms.NAME.flows.recovery_code]`: a password throttle of its own.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryCodeConfig {
    /// Codes that may fail in one window, 1–100.
    #[default(5)]
    pub max_failures: u32,
    /// The first window, 1 min – `max_window`.
    #[default(Duration::from_secs(3600))]
    #[serde(with = "humantime_serde")]
    pub first_window: Duration,
    /// The longest window after exhausted windows in a row, `first_window` – below
    /// `retention`.
    #[default(Duration::from_secs(24 * 3600))]
    #[serde(with = "humantime_serde")]
    pub max_window: Duration,
    /// How long an escalated record is remembered, `max_window` – 366 days.
    #[default(Duration::from_secs(7 * 24 * 3600))]
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
}

/// `[realms.NAME.flows.password_reset]` and `[realms.NAME.flows.verification_resend]`.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// Least time between two mails to one account, 1 s – 1 h.
    #[default(Duration::from_secs(60))]
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// Most mails to one account in any 24 h, 1–50.
    #[default(5)]
    pub daily_cap: u32,
    /// Most requests from one client network an hour, across all accounts, 1–100,000
    /// (one address must not mail thousands of strangers).
    #[default(30)]
    pub network_budget: u32,
}

impl FlowsConfig {
    /// The flows' policies, every range checked; each problem is noted in `problems`
    /// naming `realms.NAME.flows.FLOW.FIELD`.
    /// `max_consecutive_failures` is the realm's ceiling, which every code flow's record
    /// keeps too (NIST SP 800-63B-4 §3.2.2 bounds OTP verifiers alike).
    pub fn validate(
        &self,
        realm: &str,
        max_consecutive_failures: u32,
        problems: &mut Problems,
    ) -> FlowPolicies {
        let prefix = |flow: &str| format!("realms.{realm}.flows.{flow}.");
        FlowPolicies {
            second_factor: self.second_factor.validate(
                &prefix("second_factor"),
                max_consecutive_failures,
                problems,
            ),
            recovery_code: self.recovery_code.validate(
                &prefix("recovery_code"),
                max_consecutive_failures,
                problems,
            ),
            password_reset: self.password_reset.validate(&prefix("password_reset"), problems),
            verification_resend: self
                .verification_resend
                .validate(&prefix("verification_resend"), problems),
        }
    }
}

impl SecondFactorConfig {
    /// The flow's throttle, every range checked; `prefix` is `realms.SCOPE.flows.FLOW.`
    /// (a realm's or its candidate's), `max_consecutive_failures` the ceiling its record
    /// keeps.
    pub(super) fn validate(
        &self,
        prefix: &str,
        max_consecutive_failures: u32,
        problems: &mut Problems,
    ) -> Policy {
        problems.note(check(&format!("{prefix}max_failures"), self.max_failures, 1..=100));
        problems.note(check(
            &format!("{prefix}window"),
            self.window,
            Duration::from_secs(60)..=Duration::from_secs(24 * 3600),
        ));
        fixed_window(self.max_failures, self.window, max_consecutive_failures)
    }
}

impl RecoveryCodeConfig {
    /// The flow's throttle, every range checked; `prefix` as for
    /// [`SecondFactorConfig::validate`].
    pub(super) fn validate(
        &self,
        prefix: &str,
        max_consecutive_failures: u32,
        problems: &mut Problems,
    ) -> Policy {
        problems.note(check(&format!("{prefix}max_failures"), self.max_failures, 1..=100));
        problems.note(between(
            &format!("{prefix}first_window"),
            self.first_window,
            Bound::fixed(Duration::from_secs(60)),
            Bound::setting("max_window", self.max_window),
        ));
        problems.note(below(
            &format!("{prefix}max_window"),
            self.max_window,
            Bound::setting("retention", self.retention),
        ));
        problems.note(check(
            &format!("{prefix}retention"),
            self.retention,
            Duration::from_secs(60)..=Duration::from_secs(366 * 24 * 3600),
        ));
        Policy {
            max_failures: self.max_failures,
            max_consecutive_failures,
            lockout_duration: self.first_window,
            first_window: self.first_window,
            max_window: self.max_window,
            retention: self.retention,
            second_factor_required: false,
        }
    }
}

impl MailConfig {
    /// The flow's limits, every range checked; `prefix` is `realms.SCOPE.flows.FLOW.` (a
    /// realm's or its candidate's).
    pub(super) fn validate(&self, prefix: &str, problems: &mut Problems) -> MailPolicy {
        problems.note(check(
            &format!("{prefix}min_interval"),
            self.min_interval,
            Duration::from_secs(1)..=Duration::from_secs(3600),
        ));
        problems.note(check(&format!("{prefix}daily_cap"), self.daily_cap, 1..=MAX_DAILY_CAP));
        problems.note(check(&format!("{prefix}network_budget"), self.network_budget, 1..=100_000));
        MailPolicy {
            send: SendPolicy {
                min_interval_ms: crate::throttle::duration_ms(self.min_interval),
                daily_cap: self.daily_cap,
            },
            network: hourly_budget(self.network_budget),
        }
    }
}
