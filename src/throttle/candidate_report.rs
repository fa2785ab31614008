//! What a candidate policy's report counts (docs/throttle.md, "Trying a policy in
//! shadow"): per defence (the login's own record, the client network's bucket, each
//! flow), for each counted attempt, what the candidate would have answered beside what
//! the enforced policy answered, and for each right password (or code), whether the
//! candidate would have refused it.

use super::flow::Flow;

/// Where a candidate's outcome was decided: each has a line of its own in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Defence {
    /// The account's own record (the login's limits and windows, step-up).
    Login,
    /// The client network's bucket of the login (`network_capacity`,
    /// `network_refill_period`).
    Network,
    /// A flow's own limits (its record, its send log or its network budget).
    Flow(Flow),
}

/// How many defences a report has a line for: [`Defence::ALL`]'s length.
pub const DEFENCES: usize = 6;

/// A report's counts: per defence (in [`Defence::ALL`]'s order), per outcome (in
/// [`Outcome::ALL`]'s).
pub type ReportCounts = [[u64; 5]; DEFENCES];

impl Defence {
    /// Every defence, in the order the report keeps them.
    pub const ALL: [Defence; DEFENCES] = [
        Defence::Login,
        Defence::Network,
        Defence::Flow(Flow::SecondFactor),
        Defence::Flow(Flow::RecoveryCode),
        Defence::Flow(Flow::PasswordReset),
        Defence::Flow(Flow::VerificationResend),
    ];

    /// The defence's name in the report, the store and metrics (`login`, `network`, or
    /// the flow's name).
    pub fn name(self) -> &'static str {
        match self {
            Defence::Login => "login",
            Defence::Network => "network",
            Defence::Flow(flow) => flow.as_str(),
        }
    }

    /// Its index in [`Defence::ALL`].
    pub fn index(self) -> usize {
        Defence::ALL.iter().position(|&d| d == self).unwrap_or(0)
    }
}

/// One way the candidate and the enforced policy answered apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The enforced policy allowed the attempt; the candidate would have refused it.
    WouldRefuse,
    /// The enforced policy refused the attempt; the candidate would have allowed it.
    WouldAllow,
    /// The attempt the candidate would have refused was the right password (a
    /// `Verify` that matched, or a `ClearAttempts` with `PASSWORD_VERIFIED` after it): a
    /// real user the candidate would have locked out.
    UserLockedOut,
    /// The candidate would have asked for step-up where the enforced policy did not.
    StepUpAdded,
    /// The enforced policy asked for step-up where the candidate would not have.
    StepUpDropped,
}

impl Outcome {
    /// Every outcome, in the order the stores keep them.
    pub const ALL: [Outcome; 5] = [
        Outcome::WouldRefuse,
        Outcome::WouldAllow,
        Outcome::UserLockedOut,
        Outcome::StepUpAdded,
        Outcome::StepUpDropped,
    ];

    /// The outcome's name in the store and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::WouldRefuse => "would_refuse",
            Outcome::WouldAllow => "would_allow",
            Outcome::UserLockedOut => "user_locked_out",
            Outcome::StepUpAdded => "step_up_added",
            Outcome::StepUpDropped => "step_up_dropped",
        }
    }

    /// Its index in [`Outcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What the candidate answered beside the enforced policy for one counted attempt:
/// `enforced` and `candidate` allowed it or not; `step_up` each would have asked for
/// step-up. The outcomes it adds to the report (none when they agree).
pub fn outcomes(enforced: bool, candidate: bool, step_up: (bool, bool)) -> Vec<Outcome> {
    let mut out = Vec::new();
    match (enforced, candidate) {
        (true, false) => out.push(Outcome::WouldRefuse),
        (false, true) => out.push(Outcome::WouldAllow),
        _ => {}
    }
    match step_up {
        (false, true) => out.push(Outcome::StepUpAdded),
        (true, false) => out.push(Outcome::StepUpDropped),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_difference_is_reported() {
        assert!(outcomes(true, true, (false, false)).is_empty());
        assert!(outcomes(false, false, (true, true)).is_empty());
        assert_eq!(
            outcomes(true, false, (false, true)),
            [Outcome::WouldRefuse, Outcome::StepUpAdded]
        );
        assert_eq!(
            outcomes(false, true, (true, false)),
            [Outcome::WouldAllow, Outcome::StepUpDropped]
        );
        assert_eq!(Outcome::ALL.map(Outcome::index), [0, 1, 2, 3, 4]);
        assert_eq!(Defence::ALL.map(Defence::index), [0, 1, 2, 3, 4, 5]);
        let names = Defence::ALL.map(Defence::name);
        assert_eq!(
            names,
            [
                "login",
                "network",
                "second_factor",
                "recovery_code",
                "password_reset",
                "verification_resend"
            ]
        );
    }
}
