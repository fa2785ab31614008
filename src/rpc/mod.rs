//! The gRPC layer: translation only. A request is validated ([`validate`]) before any
//! store or CPU work, handed to the domain (the store, `crate::login`), and its answer
//! built here, in one place each: [`decision`] for the throttle's allow or deny,
//! [`reject`] and [`accept`] for `Verify`, [`store_unavailable`] for every store failure,
//! [`refused`] for the CPU budget's refusals. Nothing below this layer knows gRPC.
//!
//! - [`governor`]: `portcullis.v1.Governor` (Admit, RecordAttempt, Verify, ClearAttempts).
//! - [`admin`]: `portcullis.v1.Admin` (Inspect, Unlock, RevokeDevices, SprayStatus).

pub mod admin;
pub mod governor;
pub mod validate;

pub use admin::AdminService;
pub use governor::{GovernorService, MAX_REPLAYS};

use tonic::Status;

use crate::login::{LoginError, LoginVerdict};
use crate::pb::{Decision, Verdict, VerifyResponse};
use crate::store::StoreError;
use crate::telemetry::traces::record_outcome;
use crate::verify::budget::Refusal;

/// The one place a throttle answer becomes a wire [`Decision`]. A closed door is
/// `DECISION_DENY`, whatever closed it.
pub(crate) fn decision(allowed: bool) -> i32 {
    record_outcome(if allowed { "allow" } else { "deny" }, None);
    if allowed { Decision::Allow as i32 } else { Decision::Deny as i32 }
}

/// The one place a failed login's answer is built. A closed door, an unknown identifier,
/// a wrong password (and a disabled account, which a gateway sends as unknown) all get
/// this value, byte for byte.
/// Whether the call carried a valid device token is never part of it. `spray_suspected`
/// depends on the password's fingerprint and the realm only (docs/spray.md), never on
/// the account, so it tells nothing about the account either.
pub fn reject(spray_suspected: bool) -> VerifyResponse {
    VerifyResponse {
        verdict: Verdict::Reject as i32,
        needs_rehash: false,
        device_token: String::new(),
        spray_suspected,
    }
}

/// The answer to a password that matched, with a fresh device token.
fn accept(needs_rehash: bool, device_token: String, spray_suspected: bool) -> VerifyResponse {
    VerifyResponse { verdict: Verdict::Accept as i32, needs_rehash, device_token, spray_suspected }
}

/// A login check's verdict as the wire answer ([`accept`] or [`reject`]).
fn verdict(verdict: LoginVerdict) -> VerifyResponse {
    match verdict {
        LoginVerdict::Accept { needs_rehash, device_token, spray_suspected } => {
            record_outcome("accept", None);
            accept(needs_rehash, device_token, spray_suspected)
        }
        LoginVerdict::Reject { spray_suspected } => {
            record_outcome("reject", None);
            reject(spray_suspected)
        }
    }
}

/// Every store failure leaves the service here. `UNAVAILABLE` because the failure is
/// the store's, transient, and says nothing about the account; gateways treat it as
/// deny. The cause is not sent; the store wrapper ([`crate::store::instrumented`])
/// counts it and logs it once a refusal episode (it names no identifier).
pub(crate) fn store_unavailable(_err: StoreError) -> Status {
    record_outcome("unavailable", None);
    Status::unavailable("store unavailable")
}

/// A refusal of the CPU budget: retryable, unlike a reject; the attempt is not counted.
pub(crate) fn refused(refusal: Refusal) -> Status {
    record_outcome("refused", Some(refusal.as_str()));
    Status::resource_exhausted(format!(
        "CPU budget refused the comparison ({refusal}); retry later"
    ))
}

/// A login check that gave no verdict, as a status: every one a deny.
fn login_failed(error: LoginError) -> Status {
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
        assert_eq!(reject(false), reject(false));
        assert_eq!(reject(false).verdict, Verdict::Reject as i32);
        assert!(!reject(false).needs_rehash && !reject(false).spray_suspected);
        assert!(reject(true).spray_suspected);
        let from_login = verdict(LoginVerdict::Reject { spray_suspected: false });
        assert_eq!(from_login, reject(false), "a login's reject is built in one place");
    }
}
