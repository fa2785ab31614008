//! Realms: named sets of end users with their own login rules (Keycloak's term), and
//! `[realms.NAME]`, their settings, defaults and ranges (docs/throttle.md, "The rules").

mod candidate;
mod candidate_flows;
mod flow_settings;

pub use candidate::{Candidate, CandidateConfig};
pub use candidate_flows::{
    CandidateFlowsConfig, CandidateMail, CandidateRecoveryCode, CandidateSecondFactor,
};
pub use flow_settings::{FlowsConfig, MailConfig, RecoveryCodeConfig, SecondFactorConfig};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use ipnet::IpNet;

use crate::defence::client_network::{NetworkAction, NetworkPolicy, NetworkSettings};
use crate::defence::devices::{UnknownDevice, checked_token_ttl};
use crate::defence::repeats::RepeatPolicy;
use crate::defence::spray::{SprayAction, SprayPolicy};
use crate::normalize::Normalization;
use crate::setting::{ConfigError, Problems};
use crate::telemetry::realm_meters::RealmMeters;
use crate::throttle::breached_count::checked_grace_logins;
use crate::throttle::flow::FlowPolicies;
use crate::throttle::{Policy, PolicySettings};
use crate::verify::config::HashTargetConfig;
use crate::verify::hash::{Ceilings, HashParams};

/// One configured realm, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Realm {
    /// The configured name, as gateways send it in `Account.realm`.
    pub name: String,
    /// Throttle settings.
    pub policy: Policy,
    /// How identifiers are normalized; must match the realm's account lookup.
    pub normalization: Normalization,
    /// Hash algorithm and parameters new hashes should use: the dummy hash's, and the
    /// bar below which an accepted hash gets `needs_rehash`.
    pub hash_target: HashParams,
    /// How long a device token is valid after its issue (`docs/devices.md`).
    pub device_token_ttl: std::time::Duration,
    /// Password-spray detection (`docs/spray.md`).
    pub spray: SprayPolicy,
    /// The throttle per client network (docs/throttle.md, "Per client network").
    pub network: NetworkPolicy,
    /// Failures in the account's window from which answers carry `step_up`
    /// (docs/throttle.md, "Step-up before the lockout"); `None`: never (a realm with
    /// `max_failures = 1` has no count below its limit).
    pub step_up_failures: Option<u32>,
    /// Repeated wrong passwords (docs/throttle.md, "Repeated passwords").
    pub repeat: RepeatPolicy,
    /// The flows around the login (docs/flows.md).
    pub flows: FlowPolicies,
    /// What a right password from an unknown device gets (docs/devices.md).
    pub unknown_device: UnknownDevice,
    /// Accepts of a breached password answered `ACCEPT` (with `password_breached`)
    /// before the next one answers `CHANGE_REQUIRED` (docs/breach.md), 0–20.
    pub breached_grace_logins: u32,
    /// The login policy tried in shadow beside the enforced one (docs/throttle.md,
    /// "Trying a policy in shadow"); `None`: none.
    pub candidate: Option<Candidate>,
    /// The realm's metric handles on the login's hot path, made once (not a setting).
    pub meters: RealmMeters,
}

impl Realm {
    /// How long a device revocation is remembered after an attempt or a revocation, in
    /// ms: `device_token_ttl` plus the clock skew a token check allows, so it outlives
    /// every token issued before it ([`crate::store::attempt_count::Attempt::device_epoch_ttl_ms`]).
    pub fn device_epoch_ttl_ms(&self) -> u64 {
        crate::throttle::duration_ms(
            self.device_token_ttl + crate::defence::devices::MAX_CLOCK_SKEW,
        )
    }
}

/// All configured realms, looked up by exact name.
#[derive(Debug, Clone, Default)]
pub struct Realms(BTreeMap<String, Realm>);

impl Realms {
    /// Builds the table; names are unique by construction of the config map.
    pub fn new(realms: impl IntoIterator<Item = Realm>) -> Self {
        Self(realms.into_iter().map(|r| (r.name.clone(), r)).collect())
    }

    /// The realm named `name`, or `None` for an unknown realm.
    pub fn get(&self, name: &str) -> Option<&Realm> {
        self.0.get(name)
    }

    /// Every realm, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Realm> {
        self.0.values()
    }
}

/// `[realms.NAME]`. Defaults are docs/architecture.md's.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct RealmConfig {
    /// Attempts allowed per window, 1–100.
    #[default(5)]
    pub max_failures: u32,
    /// The ceiling: attempts allowed on one record (the account's, a known device's, a
    /// code flow's) across windows without a success on it, 1–100 (NIST SP 800-63B-4
    /// §3.2.2; docs/throttle.md, "The ceiling"). There is no way to turn it off.
    #[default(crate::throttle::MAX_CONSECUTIVE_FAILURES)]
    pub max_consecutive_failures: u32,
    /// How long a door shut by an attempt stays shut at least, from that attempt,
    /// 1 s – below `retention`. Unset: `first_window` (docs/throttle.md, "How long a
    /// lockout lasts"; PCI DSS 4.0 8.3.4 asks for 30 min).
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub lockout_duration: Option<Duration>,
    /// Window length at step 0.
    #[default(Duration::from_secs(15 * 60))]
    #[serde(with = "humantime_serde")]
    pub first_window: Duration,
    /// Longest window.
    #[default(Duration::from_secs(60 * 60))]
    #[serde(with = "humantime_serde")]
    pub max_window: Duration,
    /// How long a record lives after its last attempt.
    #[default(Duration::from_secs(24 * 60 * 60))]
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// A realm with a second factor never escalates its windows.
    pub second_factor_required: bool,
    /// Identifier normalization; must match the realm's account lookup.
    pub normalization: Normalization,
    /// The realm's hash target.
    pub hash: HashTargetConfig,
    /// How long a device token stays valid after it was issued (OWASP device cookies);
    /// every accept issues a fresh one.
    #[default(Duration::from_secs(90 * 24 * 3600))]
    #[serde(with = "humantime_serde")]
    pub device_token_ttl: Duration,
    /// Distinct accounts that must fail with one password fingerprint within the
    /// sliding `spray_period` before that fingerprint counts as sprayed, 10–1,000,000
    /// (docs/spray.md).
    #[default(100)]
    pub spray_threshold: u32,
    /// `"flag"`: sprayed fingerprints answer `spray_suspected`; `"reject"`: and their
    /// comparisons are refused.
    pub spray_action: SprayAction,
    /// One period of the spray count, 1 min – 7 days; the window slides over this one
    /// and the one before.
    #[default(Duration::from_secs(3600))]
    #[serde(with = "humantime_serde")]
    pub spray_period: Duration,
    /// Failed logins one client network may have across the realm's accounts before its
    /// bucket is empty, 1–1,000,000 (docs/throttle.md, "Per client network").
    #[default(100)]
    pub network_capacity: u32,
    /// How long an empty network bucket takes to fill again, 1 min – 30 days: one token
    /// comes back every `network_refill_period / network_capacity` (at least 1 ms).
    #[default(Duration::from_secs(24 * 3600))]
    #[serde(with = "humantime_serde")]
    pub network_refill_period: Duration,
    /// `"reject"`: an empty bucket refuses the attempt before hashing; `"flag"`: compare,
    /// and answer `network_throttled`.
    pub network_action: NetworkAction,
    /// Prefix length IPv4 client addresses are grouped by, 8–32.
    #[default(32)]
    pub network_ipv4_prefix: u8,
    /// Prefix length IPv6 client addresses are grouped by, 16–128 (a host usually holds
    /// a whole /64).
    #[default(64)]
    pub network_ipv6_prefix: u8,
    /// CIDRs never throttled by network (a gateway's NAT egress, an office), at most
    /// 1,000; each a network address (no host bits), at most /8 wide, IPv4 written as
    /// IPv4 (`trusted_network_problem`).
    pub trusted_networks: Vec<IpNet>,
    /// Failures in the account's window from which every answer carries `step_up`, 1 –
    /// `max_failures − 1`. Unset: `max_failures − 2`, at least 1 (none when
    /// `max_failures` is 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_up_failures: Option<u32>,
    /// Refused passwords remembered per client and account in the window, whose repeats
    /// are not counted again, 0–16; 0: every attempt counts (docs/throttle.md,
    /// "Repeated passwords").
    #[default(3)]
    pub repeat_list_length: u32,
    /// Bytes kept of each refused password's keyed fingerprint, 2–8.
    #[default(4)]
    pub repeat_fingerprint_bytes: u8,
    /// The flows around the login (docs/flows.md): `[realms.NAME.flows.second_factor]`,
    /// `.recovery_code`, `.password_reset`, `.verification_resend`.
    pub flows: FlowsConfig,
    /// `"allow"`: a right password from a device without a valid device token is
    /// accepted; `"step_up"`: it answers `VERDICT_CHALLENGE` until `ConfirmDevice`
    /// (docs/devices.md, "Step-up for unknown devices"). Recommended once the gateway
    /// has a second factor to ask for.
    pub unknown_device: UnknownDevice,
    /// Accepts of a breached password answered with `password_breached` before a change
    /// is required (`VERDICT_CHANGE_REQUIRED`), per account and stored hash, counted
    /// fleet-wide, 0–20 (docs/breach.md).
    #[default(3)]
    pub breached_grace_logins: u32,
    /// `[realms.NAME.candidate]`: login limits and windows evaluated in shadow beside
    /// these, reported by `portcullis candidate-report` (docs/throttle.md, "Trying a
    /// policy in shadow").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateConfig>,
}

impl RealmConfig {
    /// The realm `name` with these settings, every range checked; `ceilings` bound its
    /// hash target (`[verify]`).
    ///
    /// # Errors
    /// [`ConfigError`] naming `realms.NAME.FIELD`: a bad name, a value out of range.
    pub fn validate(&self, name: &str, ceilings: &Ceilings) -> Result<Realm, ConfigError> {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !valid_name {
            return Err(ConfigError::invalid(
                format!("realms.{name}"),
                "a realm name is 1–64 characters of A–Z a–z 0–9 . _ -",
            ));
        }
        let mut problems = Problems::default();
        let policy = Policy::checked(name, &self.policy_settings(), &mut problems);
        let device_token_ttl = checked_token_ttl(name, self.device_token_ttl, &mut problems);
        let spray = (self.spray_threshold, self.spray_action, self.spray_period);
        let spray = SprayPolicy::checked(name, spray, &mut problems);
        let network = NetworkPolicy::checked(name, &self.network_settings(), &mut problems);
        let repeats = (self.repeat_list_length, self.repeat_fingerprint_bytes);
        let repeat = RepeatPolicy::checked(name, repeats, &mut problems);
        let step_up_failures = self.step_up_failures(name, &mut problems);
        let flows = self.flows.validate(name, self.max_consecutive_failures, &mut problems);
        let grace = checked_grace_logins(name, self.breached_grace_logins, &mut problems);
        let candidate = self.candidate.as_ref().map(|c| {
            let login = (&self.policy_settings(), self.step_up_failures);
            let network = (self.network_capacity, self.network_refill_period);
            c.checked(name, login, network, &self.flows, &mut problems)
        });
        let hash_target = problems.note(self.hash.validate(name, ceilings));
        if let Some(e) = problems.into_error() {
            return Err(e);
        }
        let Some(hash_target) = hash_target else {
            return Err(ConfigError::invalid(
                format!("realms.{name}.hash"),
                "could not be checked",
            ));
        };
        let parts = Parts {
            policy,
            device_token_ttl,
            hash_target,
            spray,
            network,
            repeat,
            step_up_failures,
            flows,
            grace,
            candidate,
        };
        Ok(self.realm(name, parts))
    }

    /// `step_up_failures`, checked, or its default ([`candidate::checked_step_up`]).
    fn step_up_failures(&self, name: &str, problems: &mut Problems) -> Option<u32> {
        candidate::checked_step_up(name, self.step_up_failures, self.max_failures, problems)
    }

    /// The lockout rules' settings as written.
    fn policy_settings(&self) -> PolicySettings {
        PolicySettings {
            max_failures: self.max_failures,
            max_consecutive_failures: self.max_consecutive_failures,
            lockout_duration: self.lockout_duration,
            first_window: self.first_window,
            max_window: self.max_window,
            retention: self.retention,
            second_factor_required: self.second_factor_required,
        }
    }

    /// The network throttle's settings as written.
    fn network_settings(&self) -> NetworkSettings<'_> {
        NetworkSettings {
            capacity: self.network_capacity,
            refill_period: self.network_refill_period,
            action: self.network_action,
            ipv4_prefix: self.network_ipv4_prefix,
            ipv6_prefix: self.network_ipv6_prefix,
            trusted: &self.trusted_networks,
        }
    }

    /// The realm of these settings, once they are checked (its parts checked by their
    /// owners).
    fn realm(&self, name: &str, parts: Parts) -> Realm {
        Realm {
            name: name.to_owned(),
            policy: parts.policy,
            normalization: self.normalization,
            hash_target: parts.hash_target,
            device_token_ttl: parts.device_token_ttl,
            spray: parts.spray,
            network: parts.network,
            step_up_failures: parts.step_up_failures,
            repeat: parts.repeat,
            flows: parts.flows,
            unknown_device: self.unknown_device,
            breached_grace_logins: parts.grace,
            candidate: parts.candidate,
            meters: RealmMeters::new(name),
        }
    }
}

/// A realm's parts its owners checked ([`RealmConfig::validate`]).
struct Parts {
    policy: Policy,
    device_token_ttl: Duration,
    hash_target: HashParams,
    spray: SprayPolicy,
    network: NetworkPolicy,
    repeat: RepeatPolicy,
    step_up_failures: Option<u32>,
    flows: FlowPolicies,
    grace: u32,
    candidate: Option<Candidate>,
}
