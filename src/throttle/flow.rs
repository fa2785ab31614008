//! The flows around the login (docs/flows.md): their names, the records they keep and
//! their validated limits. Pure: the counting is the login throttle's own rules
//! ([`super::attempt_count::attempt`], for the code flows) and the send log's ([`super::send_log`], for
//! the mail flows); `crate::flows` calls the store.

use std::time::Duration;

use super::Policy;
use super::network_bucket::BucketPolicy;
use super::send_log::SendPolicy;

/// One flow: the contract crate's type (its name, [`Flow::as_str`], is its settings
/// table `[realms.NAME.flows.<name>]`, its metric label and its operator CLI name; its
/// wire value is `portcullis.v1.Flow`). What only the daemon needs of it is
/// [`FlowRules`].
pub use portcullis_client::Flow;

/// How a flow counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    /// A guess at a code: the login throttle's record and rules, its own policy; a
    /// verified code clears it (`ClearFlow`).
    Code,
    /// A request to send a mail: a send log per account and a budget per client
    /// network; nothing a gateway sends clears it.
    Mail,
}

/// What the daemon keeps of a [`Flow`] beside the contract.
pub trait FlowRules {
    /// The two characters naming the flow's record in a store key
    /// (`portcullis:v2:{<digest>}:f:<tag>`; `crate::store::keys`).
    fn key_tag(self) -> &'static str;
    /// How the flow counts.
    fn kind(self) -> FlowKind;
}

impl FlowRules for Flow {
    fn key_tag(self) -> &'static str {
        match self {
            Flow::SecondFactor => "2f",
            Flow::RecoveryCode => "rc",
            Flow::PasswordReset => "pr",
            Flow::VerificationResend => "vr",
        }
    }

    fn kind(self) -> FlowKind {
        if self.is_mail() { FlowKind::Mail } else { FlowKind::Code }
    }
}

/// A mail flow's limits: per account, and per client network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailPolicy {
    /// The account's interval and daily cap.
    pub send: SendPolicy,
    /// The client network's budget: `network_budget` sends an hour, as a token bucket
    /// of that capacity refilled over one hour.
    pub network: BucketPolicy,
}

/// The validated limits of every flow of one realm (`[realms.NAME.flows.*]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPolicies {
    /// `second_factor`: its throttle, never escalating.
    pub second_factor: Policy,
    /// `recovery_code`: its throttle, escalating as the password's does.
    pub recovery_code: Policy,
    /// `password_reset`.
    pub password_reset: MailPolicy,
    /// `verification_resend`.
    pub verification_resend: MailPolicy,
}

/// One flow's limits, by how it counts ([`FlowKind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowPolicy<'a> {
    /// A code flow's throttle.
    Code(&'a Policy),
    /// A mail flow's limits.
    Mail(&'a MailPolicy),
}

impl FlowPolicies {
    /// `flow`'s limits.
    pub fn of(&self, flow: Flow) -> FlowPolicy<'_> {
        match flow {
            Flow::SecondFactor => FlowPolicy::Code(&self.second_factor),
            Flow::RecoveryCode => FlowPolicy::Code(&self.recovery_code),
            Flow::PasswordReset => FlowPolicy::Mail(&self.password_reset),
            Flow::VerificationResend => FlowPolicy::Mail(&self.verification_resend),
        }
    }
}

/// A realm's candidate limits of its flows (`[realms.NAME.candidate.flows.*]`;
/// docs/throttle.md, "Trying a policy in shadow"): `None` for a flow its candidate sets
/// nothing of, which is then not tried in shadow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CandidateFlows {
    /// `second_factor`'s throttle under the candidate.
    pub second_factor: Option<Policy>,
    /// `recovery_code`'s throttle under the candidate.
    pub recovery_code: Option<Policy>,
    /// `password_reset`'s limits under the candidate.
    pub password_reset: Option<MailPolicy>,
    /// `verification_resend`'s limits under the candidate.
    pub verification_resend: Option<MailPolicy>,
}

impl CandidateFlows {
    /// `flow`'s limits under the candidate; `None`: not tried in shadow.
    pub fn of(&self, flow: Flow) -> Option<FlowPolicy<'_>> {
        match flow {
            Flow::SecondFactor => self.second_factor.as_ref().map(FlowPolicy::Code),
            Flow::RecoveryCode => self.recovery_code.as_ref().map(FlowPolicy::Code),
            Flow::PasswordReset => self.password_reset.as_ref().map(FlowPolicy::Mail),
            Flow::VerificationResend => self.verification_resend.as_ref().map(FlowPolicy::Mail),
        }
    }
}

/// The throttle of a code flow that never escalates: windows of `window`, a lockout of
/// at least `window` from the attempt that shut the door, and the ceiling of
/// `max_consecutive_failures` across windows. A record holding consecutive failures is
/// kept [`CODE_RETENTION`] after its last attempt (at least a second past the window), so
/// the ceiling outlives the window ([`super::attempt_count::expiry_ms`]).
pub fn fixed_window(max_failures: u32, window: Duration, max_consecutive_failures: u32) -> Policy {
    Policy {
        max_failures,
        max_consecutive_failures,
        lockout_duration: window,
        first_window: window,
        max_window: window,
        retention: CODE_RETENTION.max(window + Duration::from_secs(1)),
        second_factor_required: true,
    }
}

/// How long a one-time code's record is kept after its last attempt while it holds
/// consecutive failures: a day, as the login's default retention.
pub const CODE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The per-network budget of `per_hour` sends: a bucket of that capacity that fills in an
/// hour.
pub fn hourly_budget(per_hour: u32) -> BucketPolicy {
    BucketPolicy {
        capacity: per_hour,
        interval_ms: (3_600_000 / u64::from(per_hour.max(1))).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_tags_are_distinct() {
        let mut tags: Vec<_> = Flow::ALL.iter().map(|f| f.key_tag()).collect();
        tags.dedup();
        assert_eq!(tags.len(), 4);
        for flow in Flow::ALL {
            assert_eq!(Flow::from_name(flow.as_str()), Some(flow));
        }
        assert_eq!(Flow::from_name("login"), None);
    }

    #[test]
    fn a_second_factor_record_never_escalates_and_keeps_its_ceiling_a_day() {
        let policy = fixed_window(5, Duration::from_secs(900), 100);
        assert!(!policy.escalates());
        let t = 1_800_000_000_000;
        let mut record = None;
        for _ in 0..8 {
            record = Some(crate::throttle::attempt_count::attempt(&policy, record, t).record);
        }
        let record = record.unwrap();
        assert_eq!((record.step, record.consecutive), (0, 5), "never escalates");
        let day = 24 * 3600 * 1000;
        assert_eq!(
            crate::throttle::attempt_count::expiry_ms(&policy, &record, t + 5_000),
            t + 5_000 + day
        );
    }
}
