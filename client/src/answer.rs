//! What a call answers ([`Answer`], its [`Decision`]: allow, deny, challenge or change
//! required), the inputs of a
//! `Verify` ([`Login`]), and how a daemon's answer or a failure becomes an [`Answer`]:
//! every failure is a deny.

use tonic::Code;

use crate::Failure;

/// The answer's decision. Every failure is `Deny`; only `Allow` lets a login through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The daemon explicitly allowed (`DECISION_ALLOW`, `VERDICT_ACCEPT`, or a completed
    /// `ClearAttempts`).
    Allow,
    /// Anything else.
    Deny,
    /// `Verify` only (`VERDICT_CHALLENGE`): the password is right, but the device is new
    /// to the account in a realm with `unknown_device = "step_up"`: no session before a
    /// second factor (docs/devices.md, "Step-up for unknown devices"). Send a code,
    /// check it with [`crate::Flow::SecondFactor`], then exchange
    /// [`Answer::challenge_token`] with [`crate::Client::confirm_device`]. Show the
    /// end user the same challenge page as for a `Deny` from an unknown device, so the
    /// form tells a checker nothing. Not an allow.
    Challenge,
    /// `Verify` only (`VERDICT_CHANGE_REQUIRED`): the password is right, but it is
    /// breached and its grace logins are spent (docs/breach.md): no session before the
    /// password is changed. Not an allow.
    ChangeRequired,
}

/// What a call answered.
#[derive(Clone, PartialEq, Eq)]
pub struct Answer {
    /// Allow or deny; the only field that decides a login.
    pub decision: Decision,
    /// On an allowed `Verify` only: store a new hash at the realm's target.
    pub needs_rehash: bool,
    /// On a deny only: the daemon refused for capacity or could not be reached or could
    /// not reach its store, so the same login may succeed later (answer 503 with
    /// `Retry-After`). `false` for a reject, a closed door and bad input.
    pub retryable: bool,
    /// On an allowed `Verify` only: the fresh device token for this account
    /// (`docs/devices.md`). Keep it on the end user's device (an `HttpOnly; Secure;
    /// SameSite=Strict` cookie) and send it back in [`Login::device_token`].
    pub device_token: Option<String>,
    /// On a `Verify` the daemon answered: the password is being sprayed across this
    /// realm's accounts (`docs/spray.md`). On an allow, demand a second factor before
    /// letting the login through; on a deny, nothing changes for the user (the same
    /// uniform failure), but a gateway may count it.
    pub spray_suspected: bool,
    /// On a `Verify` or `RecordAttempt` the daemon answered: challenge the end client
    /// (CAPTCHA, second factor) before its next attempt at this account: the account is
    /// close to its lockout, or the client's network is throttled (docs/throttle.md,
    /// "Step-up before the lockout"). Says nothing about whether the account exists.
    pub step_up: bool,
    /// On a `Verify` or `RecordAttempt` the daemon answered: the client's network used
    /// up its bucket of failed logins in a realm whose `network_action` is `flag`.
    /// Implies `step_up`.
    pub network_throttled: bool,
    /// On an allowed `Verify` only: the password is in the daemon's breach filter
    /// (docs/breach.md). Let the login through, then force a password change (NIST SP
    /// 800-63B: a compromised password must be changed). Also set on
    /// [`Decision::Challenge`] (ask for the change once the challenge passed) and
    /// [`Decision::ChangeRequired`].
    pub password_breached: bool,
    /// On [`Decision::Challenge`] only: what [`crate::Client::confirm_device`] takes once
    /// the challenge passed (within 15 minutes, with the same stored hash). Keep it in
    /// the gateway's server-side session, never in a URL or a page.
    pub challenge_token: Option<String>,
    /// On a deny of `Verify`, `RecordAttempt` or a code flow's `RecordFlowAttempt`: this
    /// very attempt started a lockout (the first its record refused in the window). For
    /// the gateway only, which may tell the account's owner (it knows the address and
    /// the client's network); show the end user the same page as for any deny. Set once
    /// per lockout, never on a retry of the same attempt id (docs/gateways.md, "When an
    /// attempt shuts the door").
    pub lockout_started: bool,
    /// This attempt brought its record to the consecutive-failure ceiling
    /// (docs/throttle.md, "The ceiling"): after a `Verify` deny (or challenge) the door
    /// stays shut until a success, a completed reset or an operator's unlock; after an
    /// allowed `RecordAttempt`, so it does if the password turns out wrong. For the
    /// gateway only.
    pub ceiling_reached: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The device token is a credential for the device's bucket: never printed.
        f.debug_struct("Answer")
            .field("decision", &self.decision)
            .field("needs_rehash", &self.needs_rehash)
            .field("retryable", &self.retryable)
            .field("device_token", &self.device_token.as_ref().map(|_| "<redacted>"))
            .field("spray_suspected", &self.spray_suspected)
            .field("step_up", &self.step_up)
            .field("network_throttled", &self.network_throttled)
            .field("password_breached", &self.password_breached)
            .field("challenge_token", &self.challenge_token.as_ref().map(|_| "<redacted>"))
            .field("lockout_started", &self.lockout_started)
            .field("ceiling_reached", &self.ceiling_reached)
            .finish()
    }
}

impl Answer {
    pub(crate) fn allow(needs_rehash: bool) -> Self {
        Self {
            decision: Decision::Allow,
            needs_rehash,
            retryable: false,
            device_token: None,
            spray_suspected: false,
            step_up: false,
            network_throttled: false,
            password_breached: false,
            challenge_token: None,
            lockout_started: false,
            ceiling_reached: false,
        }
    }

    pub(crate) fn deny(retryable: bool) -> Self {
        Self { decision: Decision::Deny, retryable, ..Self::allow(false) }
    }

    /// `decision == Decision::Allow`: false for a deny, a challenge and a change
    /// requirement alike.
    pub fn is_allowed(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// What `CheckPassword` found for a new password (docs/breach.md). Only `Acceptable`
/// accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordCheck {
    /// Neither in the breach filter nor holding a context word.
    Acceptable,
    /// In the breach filter: ask for another password.
    Breached,
    /// Holds the identifier, its part before `@` or a service word: ask for another.
    ContextWord,
    /// The check was not made (no filter configured, the daemon unreachable, any other
    /// failure): refuse the password; `retryable` says whether the same check may succeed
    /// later.
    Unchecked {
        /// Capacity or reachability, not the password.
        retryable: bool,
    },
}

impl PasswordCheck {
    /// `self == PasswordCheck::Acceptable`.
    pub fn is_acceptable(&self) -> bool {
        *self == PasswordCheck::Acceptable
    }
}

/// The inputs of one `Verify`.
#[derive(Clone, Copy)]
pub struct Login<'a> {
    /// Realm name.
    pub realm: &'a str,
    /// What the user typed to name the account.
    pub identifier: &'a str,
    /// What the user typed as the password.
    pub password: &'a [u8],
    /// The account's stored hash; empty for an unknown or disabled account.
    pub stored_hash: &'a str,
    /// The end client's IP address or connection identity: for the CPU budget's
    /// per-client ceiling and the throttle per client network. Behind proxies, derive it
    /// with [`crate::client_key_from_forwarded`].
    pub client_key: &'a str,
    /// Idempotency id; generated when `None`.
    pub attempt_id: Option<&'a str>,
    /// The device token an earlier accept of this account returned to this device,
    /// if the device has one ([`Answer::device_token`]).
    pub device_token: Option<&'a str>,
}

impl std::fmt::Debug for Login<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("realm", &self.realm).finish_non_exhaustive()
    }
}

/// `DECISION_ALLOW` is the only allow; `DENY`, `UNSPECIFIED` and unknown values deny.
pub(crate) fn decision_answer(answer: Result<i32, Failure>) -> Answer {
    match answer {
        Ok(d) if d == crate::pb::Decision::Allow as i32 => Answer::allow(false),
        Ok(_) => Answer::deny(false),
        Err(f) => failure_answer(f),
    }
}

/// Every failure is a deny; some are worth trying again later.
pub(crate) fn failure_answer(failure: Failure) -> Answer {
    let retryable = match failure {
        Failure::Answered(s) => matches!(s.code(), Code::ResourceExhausted | Code::Unavailable),
        Failure::Transport | Failure::Timeout | Failure::BreakerOpen => true,
    };
    Answer::deny(retryable)
}

/// Whether `status` is the call's own deadline running out at the server rather than the
/// daemon's answer: `DEADLINE_EXCEEDED` once the deadline passed, or with the details
/// gRPC's own servers and proxies send when the `grpc-timeout` a call sent ran out
/// (`Deadline exceeded`), from a timer that may fire before the client's. Such a call is
/// a timeout (a retryable deny); the TypeScript and Python clients read it the same way.
pub(crate) fn is_own_deadline(status: &tonic::Status, deadline_passed: bool) -> bool {
    status.code() == Code::DeadlineExceeded
        && (deadline_passed || status.message().eq_ignore_ascii_case("deadline exceeded"))
}

#[cfg(test)]
mod own_deadline {
    use super::*;

    /// gRPC's own wording, or any `DEADLINE_EXCEEDED` past the deadline, is the call's
    /// timeout; the same status with the daemon's own words before it is its answer.
    #[test]
    fn a_servers_deadline_timer_is_a_timeout_and_the_daemons_status_its_answer() {
        let grpc = tonic::Status::deadline_exceeded("Deadline exceeded");
        let daemon = tonic::Status::deadline_exceeded("injected by the conformance endpoint");
        assert!(is_own_deadline(&grpc, false));
        assert!(is_own_deadline(&daemon, true));
        assert!(!is_own_deadline(&daemon, false));
        assert!(!is_own_deadline(&tonic::Status::cancelled("Deadline exceeded"), false));
    }
}
