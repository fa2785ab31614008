//! `[realms.NAME.candidate]`: a tighter (or looser) policy evaluated in shadow beside
//! the enforced one (docs/throttle.md, "Trying a policy in shadow"). It never changes an
//! answer, never causes a comparison and never spends the CPU budget: each counted
//! attempt on an account's own record is counted again on the candidate's own record,
//! each token taken from a client network's bucket is taken again from the candidate's
//! bucket of that network, each flow attempt on the flow's candidate record or send log,
//! in the same store step, and what the two would have answered is reported per defence.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::candidate_flows::CandidateFlowsConfig;
use super::flow_settings::FlowsConfig;
use crate::defence::client_network::checked_bucket;
use crate::setting::{Bound, Problems, between};
use crate::throttle::candidate_report::Defence;
use crate::throttle::flow::{CandidateFlows, Flow};
use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::{Policy, PolicySettings};

/// `[realms.NAME.candidate]`: any of the realm's login limits and windows, its network
/// bucket's size and (`[realms.NAME.candidate.flows.<flow>]`) its flows' limits; an unset
/// one is the enforced value. Ranges as for the realm's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CandidateConfig {
    /// `max_failures`, 1–100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// `max_consecutive_failures`, 1–100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_consecutive_failures: Option<u32>,
    /// `lockout_duration`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub lockout_duration: Option<Duration>,
    /// `first_window`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub first_window: Option<Duration>,
    /// `max_window`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub max_window: Option<Duration>,
    /// `retention`.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub retention: Option<Duration>,
    /// `step_up_failures`, 1 – the candidate's `max_failures − 1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_up_failures: Option<u32>,
    /// `network_capacity`, 1–1,000,000 tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_capacity: Option<u32>,
    /// `network_refill_period`, 1 min – 30 days.
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub network_refill_period: Option<Duration>,
    /// `[realms.NAME.candidate.flows.<flow>]`: the flows' own settings.
    #[serde(skip_serializing_if = "is_unset")]
    pub flows: CandidateFlowsConfig,
}

/// Whether no candidate flow table is written (config-dump then shows none).
fn is_unset(flows: &CandidateFlowsConfig) -> bool {
    *flows == CandidateFlowsConfig::default()
}

/// A realm's candidate, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The candidate's lockout rules.
    pub policy: Policy,
    /// Failures in the candidate's window from which it would answer `step_up`; `None`:
    /// never.
    pub step_up_failures: Option<u32>,
    /// The client network's bucket under the candidate (docs/throttle.md, "Per client
    /// network"); `None` when the candidate sets neither `network_capacity` nor
    /// `network_refill_period`: the network is then not tried in shadow.
    pub network: Option<BucketPolicy>,
    /// The flows' limits under the candidate (docs/flows.md); a flow it sets nothing of
    /// is not tried in shadow.
    pub flows: CandidateFlows,
    /// 16 hex digits naming these rules: the report is kept per candidate, so an edited
    /// candidate starts a report of its own.
    pub id: String,
}

/// `realms.SCOPE.step_up_failures` as written (`value`), checked against `max_failures`
/// (1 – `max_failures − 1`), or its default: `max_failures − 2` (at least 1), none when
/// that is not below `max_failures`. The rule of a realm and of its candidate alike.
pub(super) fn checked_step_up(
    scope: &str,
    value: Option<u32>,
    max_failures: u32,
    problems: &mut Problems,
) -> Option<u32> {
    match value {
        Some(n) => {
            problems.note(between(
                &format!("realms.{scope}.step_up_failures"),
                n,
                Bound::fixed(1),
                Bound::setting("max_failures − 1", max_failures.saturating_sub(1)),
            ));
            Some(n)
        }
        None => Some(max_failures.saturating_sub(2).max(1)).filter(|&n| n < max_failures),
    }
}

impl CandidateConfig {
    /// The candidate of realm `name`, whose enforced settings are `realm`,
    /// `realm_step_up`, `network` (`network_capacity`, `network_refill_period`; as
    /// written) and `flows`: each unset field the realm's, every range checked as the
    /// realm's own (errors name `realms.NAME.candidate.FIELD` and
    /// `realms.NAME.candidate.flows.FLOW.FIELD`).
    pub(super) fn checked(
        &self,
        name: &str,
        (realm, realm_step_up): (&PolicySettings, Option<u32>),
        network: (u32, Duration),
        flows: &FlowsConfig,
        problems: &mut Problems,
    ) -> Candidate {
        let merged = PolicySettings {
            max_failures: self.max_failures.unwrap_or(realm.max_failures),
            max_consecutive_failures: self
                .max_consecutive_failures
                .unwrap_or(realm.max_consecutive_failures),
            lockout_duration: self.lockout_duration.or(realm.lockout_duration),
            first_window: self.first_window.unwrap_or(realm.first_window),
            max_window: self.max_window.unwrap_or(realm.max_window),
            retention: self.retention.unwrap_or(realm.retention),
            second_factor_required: realm.second_factor_required,
        };
        // The realm's step-up count only while it fits the candidate's window.
        let step_up = self.step_up_failures.or(realm_step_up.filter(|&n| n < merged.max_failures));
        let scope = format!("{name}.candidate");
        let policy = Policy::checked(&scope, &merged, problems);
        let step_up_failures = checked_step_up(&scope, step_up, merged.max_failures, problems);
        let tried = self.network_capacity.is_some() || self.network_refill_period.is_some();
        let network = tried.then(|| {
            let capacity = self.network_capacity.unwrap_or(network.0);
            let period = self.network_refill_period.unwrap_or(network.1);
            checked_bucket(&scope, capacity, period, problems)
        });
        let flows = self.flows.checked(&scope, flows, policy.max_consecutive_failures, problems);
        // The network's part and each flow's are named only when set, so a candidate
        // written before them keeps its id (and its report).
        let mut text = format!("{policy:?} {step_up_failures:?}");
        if let Some(bucket) = &network {
            text.push_str(&format!(" {bucket:?}"));
        }
        for flow in Flow::ALL {
            if let Some(rules) = flows.of(flow) {
                text.push_str(&format!(" {}={rules:?}", flow.as_str()));
            }
        }
        let id = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
        Candidate { policy, step_up_failures, network, flows, id }
    }
}

impl Candidate {
    /// The defences this candidate is tried in, in the report's order: the login always,
    /// the network when it sets the bucket's size, a flow when it sets a value of the
    /// flow's.
    pub fn defences(&self) -> Vec<Defence> {
        Defence::ALL
            .into_iter()
            .filter(|d| match d {
                Defence::Login => true,
                Defence::Network => self.network.is_some(),
                Defence::Flow(flow) => self.flows.of(*flow).is_some(),
            })
            .collect()
    }
}
