//! The flows around the login (docs/flows.md): attempts at a one-time or recovery code,
//! requests to send a reset or verification mail. Each call keeps the outcome table of
//! every other call (docs/client.md, "Every outcome"): only `DECISION_ALLOW` (or an OK
//! `ClearFlow`) allows; every error status, `DECISION_UNSPECIFIED` and every value this
//! client does not know denies; only transport failures are retried, with the same
//! `attempt_id`, so a retried attempt is counted once.

use crate::answer::{decision_answer, failure_answer};
use crate::pb::{ClearFlowRequest, RecordFlowAttemptRequest};
use crate::rpcs::Rpc;
use crate::{Answer, Client, account, new_attempt_id, outgoing, route_key};

/// A flow around the login (`portcullis.v1.Flow`; docs/flows.md). Each has its own
/// record per account, apart from the login throttle's and from the other flows'. The
/// one name of the concept: the daemon counts with this type too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flow {
    /// Attempts at a one-time code (TOTP, a mailed or texted code). By default 5 in 15
    /// minutes, never escalating. Clear it with [`Client::clear_flow`] once a code is
    /// verified.
    SecondFactor,
    /// Attempts at a recovery (backup) code. By default 5 an hour, the window doubling
    /// after each exhausted one up to 24 h, the record kept 7 days. Clear it once a code
    /// is verified.
    RecoveryCode,
    /// Requests to send a password-reset mail. By default at most one a minute and 5 in
    /// any 24 h per account, 30 an hour per client network. Needs a `client_key`; never
    /// cleared by a gateway.
    PasswordReset,
    /// Requests to resend an address-verification mail: as [`Flow::PasswordReset`], with
    /// a record of its own.
    VerificationResend,
}

impl Flow {
    /// Every flow, in wire order.
    pub const ALL: [Flow; 4] =
        [Flow::SecondFactor, Flow::RecoveryCode, Flow::PasswordReset, Flow::VerificationResend];

    /// Whether the flow sends mail (its requests need a `client_key`, and no gateway call
    /// clears its caps) rather than checks a code.
    pub fn is_mail(self) -> bool {
        matches!(self, Flow::PasswordReset | Flow::VerificationResend)
    }

    /// The flow's name (docs/flows.md): the daemon's settings table
    /// (`[realms.NAME.flows.<name>]`), its metric label and the operator CLI's argument.
    pub fn as_str(self) -> &'static str {
        match self {
            Flow::SecondFactor => "second_factor",
            Flow::RecoveryCode => "recovery_code",
            Flow::PasswordReset => "password_reset",
            Flow::VerificationResend => "verification_resend",
        }
    }

    /// The flow named `name` ([`Flow::as_str`]).
    pub fn from_name(name: &str) -> Option<Flow> {
        Flow::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// The wire value.
    pub fn wire(self) -> crate::pb::Flow {
        match self {
            Flow::SecondFactor => crate::pb::Flow::SecondFactor,
            Flow::RecoveryCode => crate::pb::Flow::RecoveryCode,
            Flow::PasswordReset => crate::pb::Flow::PasswordReset,
            Flow::VerificationResend => crate::pb::Flow::VerificationResend,
        }
    }

    /// The flow a wire value names; `None` for `FLOW_UNSPECIFIED`.
    pub fn from_wire(wire: crate::pb::Flow) -> Option<Flow> {
        Flow::ALL.into_iter().find(|f| f.wire() == wire)
    }
}

impl Client {
    /// `RecordFlowAttempt`: counts one attempt at `flow` for the account (`realm`, and
    /// the `identifier` as the user typed it, normalized by the daemon as for a login)
    /// **before** the gateway acts on it: before it checks the code, before it sends the
    /// mail. Act only when [`Answer::is_allowed`]. Call it whether or not the account
    /// exists: the answer is the same for both, and a deny carries no time.
    ///
    /// `client_key` is the end client's address ([`crate::client_key_from_forwarded`]):
    /// required for a mail flow, whose per-network budget it names (empty: the daemon
    /// answers `INVALID_ARGUMENT`, a deny); not used for a code flow (pass `""`).
    /// `attempt_id` makes retries idempotent (at most 128 printable ASCII bytes); one is
    /// generated when `None` and kept across this call's retries.
    ///
    /// Only [`Answer::decision`], [`Answer::retryable`] and, for a code flow,
    /// [`Answer::lockout_started`] and [`Answer::ceiling_reached`] are set; the other
    /// signals are `false`.
    pub async fn record_flow_attempt(
        &self,
        realm: &str,
        identifier: &str,
        flow: Flow,
        client_key: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        let req = RecordFlowAttemptRequest {
            account: account(realm, identifier),
            flow: flow.wire() as i32,
            client_key: client_key.to_owned(),
            attempt_id: attempt_id.map_or_else(new_attempt_id, str::to_owned),
        };
        let answer = self
            .call(Rpc::RecordFlowAttempt, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.record_flow_attempt(req).await.map(|r| r.into_inner()) }
            })
            .await;
        match answer {
            Ok(r) => Answer {
                lockout_started: r.lockout_started,
                ceiling_reached: r.ceiling_reached,
                ..decision_answer(Ok(r.decision))
            },
            Err(f) => decision_answer(Err(f)),
        }
    }

    /// [`Self::record_flow_attempt`] for [`Flow::SecondFactor`]: call it before checking
    /// a one-time code; check the code only on an allow, and on a right code call
    /// [`Self::clear_flow`].
    pub async fn second_factor_attempt(
        &self,
        realm: &str,
        identifier: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        self.record_flow_attempt(realm, identifier, Flow::SecondFactor, "", attempt_id).await
    }

    /// [`Self::record_flow_attempt`] for [`Flow::RecoveryCode`]: call it before checking
    /// a recovery code; check the code only on an allow, and on a right code call
    /// [`Self::clear_flow`].
    pub async fn recovery_code_attempt(
        &self,
        realm: &str,
        identifier: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        self.record_flow_attempt(realm, identifier, Flow::RecoveryCode, "", attempt_id).await
    }

    /// [`Self::record_flow_attempt`] for [`Flow::PasswordReset`]: call it before sending
    /// a reset mail, and send one only on an allow *and* when the account exists. Answer
    /// the end user with the same page either way (docs/flows.md, "No oracle").
    pub async fn password_reset_request(
        &self,
        realm: &str,
        identifier: &str,
        client_key: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        self.record_flow_attempt(realm, identifier, Flow::PasswordReset, client_key, attempt_id)
            .await
    }

    /// [`Self::record_flow_attempt`] for [`Flow::VerificationResend`]: call it before
    /// resending an address-verification mail, and send one only on an allow.
    pub async fn verification_resend_request(
        &self,
        realm: &str,
        identifier: &str,
        client_key: &str,
        attempt_id: Option<&str>,
    ) -> Answer {
        let flow = Flow::VerificationResend;
        self.record_flow_attempt(realm, identifier, flow, client_key, attempt_id).await
    }

    /// `ClearFlow`: a code of `flow` ([`Flow::SecondFactor`] or [`Flow::RecoveryCode`])
    /// was verified for the account; its record is cleared. `Allow` when the daemon
    /// cleared it. A mail flow is refused by the daemon (`INVALID_ARGUMENT`: a deny, not
    /// retryable): nothing a gateway sends clears a mail flow's caps. Clears nothing of
    /// the login throttle (that is [`Self::clear_attempts`]).
    pub async fn clear_flow(&self, realm: &str, identifier: &str, flow: Flow) -> Answer {
        let req =
            ClearFlowRequest { account: account(realm, identifier), flow: flow.wire() as i32 };
        let answer = self
            .call(Rpc::ClearFlow, &route_key(realm, identifier), |mut c, timeout| {
                let req = outgoing(&req, timeout);
                async move { c.clear_flow(req).await.map(drop) }
            })
            .await;
        match answer {
            Ok(()) => Answer::allow(false),
            Err(f) => failure_answer(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_has_its_own_wire_value_and_none_is_unspecified() {
        let mut values: Vec<i32> = Flow::ALL.iter().map(|f| f.wire() as i32).collect();
        values.dedup();
        assert_eq!(values, [1, 2, 3, 4]);
        let mail: Vec<Flow> = Flow::ALL.into_iter().filter(|f| f.is_mail()).collect();
        assert_eq!(mail, [Flow::PasswordReset, Flow::VerificationResend]);
    }
}
