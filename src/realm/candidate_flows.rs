//! `[realms.NAME.candidate.flows.<flow>]`: a candidate's limits of the flows around the
//! login (docs/throttle.md, "Trying a policy in shadow"; docs/flows.md). Each table takes
//! any of that flow's own settings (`[realms.NAME.flows.<flow>]`: same names, same
//! ranges); an unset one is the enforced value. A flow is tried in shadow only when its
//! table sets a value.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::flow_settings::{FlowsConfig, MailConfig, RecoveryCodeConfig, SecondFactorConfig};
use crate::setting::Problems;
use crate::throttle::flow::CandidateFlows;

/// `[realms.NAME.candidate.flows]`: one table per flow, each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateFlowsConfig {
    /// `second_factor`'s `max_failures` and `window`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_factor: Option<CandidateSecondFactor>,
    /// `recovery_code`'s `max_failures`, `first_window`, `max_window` and `retention`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_code: Option<CandidateRecoveryCode>,
    /// `password_reset`'s `min_interval`, `daily_cap` and `network_budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_reset: Option<CandidateMail>,
    /// `verification_resend`'s, as `password_reset`'s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification_resend: Option<CandidateMail>,
}

/// `[realms.NAME.candidate.flows.second_factor]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateSecondFactor {
    /// `max_failures`, 1–100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// `window`, 1 min – 24 h.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
}

/// `[realms.NAME.candidate.flows.recovery_code]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateRecoveryCode {
    /// `max_failures`, 1–100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// `first_window`, 1 min – `max_window`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub first_window: Option<Duration>,
    /// `max_window`, `first_window` – below `retention`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub max_window: Option<Duration>,
    /// `retention`, `max_window` – 366 days.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub retention: Option<Duration>,
}

/// `[realms.NAME.candidate.flows.password_reset]` and `…verification_resend]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateMail {
    /// `min_interval`, 1 s – 1 h.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub min_interval: Option<Duration>,
    /// `daily_cap`, 1–50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_cap: Option<u32>,
    /// `network_budget`, 1–100,000 an hour: the client network's candidate bucket for
    /// the flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_budget: Option<u32>,
}

impl CandidateSecondFactor {
    /// Whether the table sets a value (the flow is then tried in shadow).
    fn set(&self) -> bool {
        *self != Self::default()
    }
}

impl CandidateRecoveryCode {
    /// Whether the table sets a value.
    fn set(&self) -> bool {
        *self != Self::default()
    }
}

impl CandidateMail {
    /// Whether the table sets a value.
    fn set(&self) -> bool {
        *self != Self::default()
    }

    /// The enforced `realm` table with this table's values over it.
    fn over(&self, realm: &MailConfig) -> MailConfig {
        MailConfig {
            min_interval: self.min_interval.unwrap_or(realm.min_interval),
            daily_cap: self.daily_cap.unwrap_or(realm.daily_cap),
            network_budget: self.network_budget.unwrap_or(realm.network_budget),
        }
    }
}

impl CandidateFlowsConfig {
    /// The candidate's flows of realm `scope` (`NAME.candidate`), whose enforced tables
    /// are `realm`: each flow whose table sets a value, its unset values the realm's,
    /// checked as the realm's own (errors name `realms.NAME.candidate.flows.FLOW.FIELD`);
    /// a code flow's record keeps the candidate's `max_consecutive_failures` as its
    /// ceiling, as the realm's flows keep the realm's.
    pub(super) fn checked(
        &self,
        scope: &str,
        realm: &FlowsConfig,
        max_consecutive_failures: u32,
        problems: &mut Problems,
    ) -> CandidateFlows {
        let prefix = |flow: &str| format!("realms.{scope}.flows.{flow}.");
        let second_factor = self.second_factor.as_ref().filter(|c| c.set()).map(|c| {
            let merged = SecondFactorConfig {
                max_failures: c.max_failures.unwrap_or(realm.second_factor.max_failures),
                window: c.window.unwrap_or(realm.second_factor.window),
            };
            merged.validate(&prefix("second_factor"), max_consecutive_failures, problems)
        });
        let recovery_code = self.recovery_code.as_ref().filter(|c| c.set()).map(|c| {
            let r = &realm.recovery_code;
            let merged = RecoveryCodeConfig {
                max_failures: c.max_failures.unwrap_or(r.max_failures),
                first_window: c.first_window.unwrap_or(r.first_window),
                max_window: c.max_window.unwrap_or(r.max_window),
                retention: c.retention.unwrap_or(r.retention),
            };
            merged.validate(&prefix("recovery_code"), max_consecutive_failures, problems)
        });
        let mail = |c: &Option<CandidateMail>, realm: &MailConfig, flow: &str, p: &mut Problems| {
            c.as_ref().filter(|c| c.set()).map(|c| c.over(realm).validate(&prefix(flow), p))
        };
        let password_reset =
            mail(&self.password_reset, &realm.password_reset, "password_reset", problems);
        let verification_resend = mail(
            &self.verification_resend,
            &realm.verification_resend,
            "verification_resend",
            problems,
        );
        CandidateFlows { second_factor, recovery_code, password_reset, verification_resend }
    }
}
