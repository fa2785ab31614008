//! The one place every answer is built: `decision` for the throttle's allow or deny,
//! [`reject`] and `accept` for `Verify`, `store_unavailable` for every store failure,
//! `refused` for the CPU budget's refusals. A closed door, an unknown identifier, a
//! wrong password and a disabled account cannot drift apart: they are one value here.

use tonic::Status;

use crate::login::{LoginError, LoginVerdict, Signals};
use crate::pb::{ChallengeReason, Decision, Verdict, VerifyResponse};
use crate::store::error::StoreError;
use crate::telemetry::traces::record_outcome;
use crate::verify::budget::Refusal;

/// The one place a throttle answer becomes a wire [`Decision`]. A closed door is
/// `DECISION_DENY`, whatever closed it.
pub(super) fn decision(allowed: bool) -> i32 {
    record_outcome(if allowed { "allow" } else { "deny" }, None);
    if allowed { Decision::Allow as i32 } else { Decision::Deny as i32 }
}

/// The one place a failed login's answer is built. A closed door, an unknown identifier,
/// a wrong password (and a disabled account, which a gateway sends as unknown) all get
/// this value, byte for byte.
/// Whether the call carried a valid device token is never part of it. Its [`Signals`]
/// depend on the password's fingerprint and the realm (`spray_suspected`,
/// docs/spray.md), the account key's count, kept for every identifier alike
/// (`step_up`, and the door this attempt shut: `lockout_started`, `ceiling_reached`,
/// for the gateway only), and the client's network (`network_throttled`), never on
/// whether the account exists.
pub fn reject(signals: Signals) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::Reject as i32,
        needs_rehash: false,
        device_token: String::new(),
        spray_suspected: signals.spray_suspected,
        step_up: signals.step_up,
        network_throttled: signals.network_throttled,
        password_breached: false,
        challenge_reason: ChallengeReason::Unspecified as i32,
        challenge_token: String::new(),
        lockout_started: signals.lockout_started,
        ceiling_reached: signals.ceiling_reached,
    }
}

/// The answer to a password that matched, with a fresh device token. A match clears
/// its record, so no door it shut stays shut: no `lockout_started`, no
/// `ceiling_reached`.
pub(super) fn accept(
    needs_rehash: bool,
    device_token: String,
    password_breached: bool,
    signals: Signals,
) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::Accept as i32,
        needs_rehash,
        device_token,
        spray_suspected: signals.spray_suspected,
        step_up: signals.step_up,
        network_throttled: signals.network_throttled,
        password_breached,
        challenge_reason: ChallengeReason::Unspecified as i32,
        challenge_token: String::new(),
        lockout_started: false,
        ceiling_reached: false,
    }
}

/// A right password that needs a second factor first (docs/devices.md, "Step-up for
/// unknown devices"): its own verdict, no device token, no `needs_rehash` (a new stored
/// hash before `ConfirmDevice` would orphan the challenge token). The attempt stays
/// counted until `ConfirmDevice`, so it carries the door it shut (`ceiling_reached`) as
/// a reject would.
pub(super) fn challenge(
    challenge_token: String,
    password_breached: bool,
    signals: Signals,
) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::Challenge as i32,
        challenge_reason: ChallengeReason::NewDevice as i32,
        challenge_token,
        password_breached,
        lockout_started: signals.lockout_started,
        ceiling_reached: signals.ceiling_reached,
        ..accept(false, String::new(), false, signals)
    }
}

/// A right, breached password whose grace logins are spent (docs/breach.md): its own
/// verdict, no device token.
pub(super) fn change_required(signals: Signals) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::ChangeRequired as i32,
        ..accept(false, String::new(), true, signals)
    }
}

/// A login check's verdict as the wire answer ([`accept`], [`challenge`],
/// [`change_required`] or [`reject`]).
pub(super) fn verdict(verdict: LoginVerdict) -> VerifyResponse {
    match verdict {
        LoginVerdict::Accept { needs_rehash, device_token, password_breached, signals } => {
            record_outcome("accept", None);
            accept(needs_rehash, device_token, password_breached, signals)
        }
        LoginVerdict::Challenge { challenge_token, password_breached, signals } => {
            record_outcome("challenge", None);
            challenge(challenge_token, password_breached, signals)
        }
        LoginVerdict::ChangeRequired { signals } => {
            record_outcome("change_required", None);
            change_required(signals)
        }
        LoginVerdict::Reject { signals } => {
            record_outcome("reject", None);
            reject(signals)
        }
    }
}

/// Every store failure leaves the service here. `UNAVAILABLE` because the failure is
/// the store's, transient, and says nothing about the account; gateways treat it as
/// deny. The cause is not sent; the store wrapper ([`crate::store::instrumented`])
/// counts it and logs it once a refusal episode (it names no identifier).
pub(crate) fn store_unavailable(err: StoreError) -> Status {
    if matches!(err, StoreError::AttemptIdReused) {
        record_outcome("invalid_argument", None);
        return Status::invalid_argument(
            "attempt_id was already used for another request (another client_key, password, \
             stored_hash or device_token): make one attempt_id per logical attempt",
        );
    }
    record_outcome("unavailable", None);
    Status::unavailable("store unavailable")
}

/// A refusal of the CPU budget: retryable, unlike a reject; the attempt is not counted.
pub(super) fn refused(refusal: Refusal) -> Status {
    record_outcome("refused", Some(refusal.as_str()));
    Status::resource_exhausted(format!(
        "CPU budget refused the comparison ({refusal}); retry later"
    ))
}

/// A login check that gave no verdict, as a status: every one a deny.
pub(super) fn login_failed(error: LoginError) -> Status {
    match error {
        LoginError::Store(e) => store_unavailable(e),
        LoginError::Refused(refusal) => refused(refusal),
        LoginError::Aborted(_) => Status::internal("the comparison did not complete"),
        LoginError::NoDeviceToken(_) | LoginError::Gone => {
            Status::internal("the verification did not complete")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_is_one_value() {
        let none = Signals::default();
        assert_eq!(reject(none), reject(none));
        assert_eq!(reject(none).verdict, Verdict::Reject as i32);
        assert!(!reject(none).needs_rehash && !reject(none).spray_suspected);
        assert!(reject(none).device_token.is_empty());
        assert!(!reject(none).step_up && !reject(none).network_throttled);
        let all = Signals {
            spray_suspected: true,
            step_up: true,
            network_throttled: true,
            lockout_started: true,
            ceiling_reached: true,
        };
        let flagged = reject(all);
        assert!(flagged.spray_suspected && flagged.step_up && flagged.network_throttled);
        assert!(flagged.lockout_started && flagged.ceiling_reached);
        let accepted = accept(false, String::new(), false, all);
        assert!(!accepted.lockout_started && !accepted.ceiling_reached, "a match cleared it");
        let from_login = verdict(LoginVerdict::Reject { signals: all });
        assert_eq!(from_login, reject(all), "a login's reject is built in one place");
    }
}
