//! The flows around the login (docs/flows.md), in the domain's own types: one attempt
//! at a one-time or recovery code, one request to send a reset or verification mail,
//! counted before the gateway acts, on the account's key (the login throttle's
//! normalization and keyed digest) but in a record of the flow's own.
//!
//! - A **code flow** (`second_factor`, `recovery_code`) is the login throttle's count
//!   ([`crate::store::attempt_count::AttemptCountStore::count`], `record_attempt.lua`) on the flow's record with the
//!   flow's policy; a verified code clears it ([`Flows::clear`]). A realm's candidate
//!   that sets the flow's limits counts it again on the flow's candidate record in the
//!   same step (docs/throttle.md, "Trying a policy in shadow").
//! - A **mail flow** (`password_reset`, `verification_resend`) takes a token of the
//!   client network's budget for the flow, then asks the account's send log
//!   ([`crate::store::send_log::SendLogStore::send_mail`], `send_log.lua`). A refused send, or a replayed
//!   `attempt_id`, gives the token back (in the same transaction on the embedded store;
//!   after the answer on Redis, so a refusal takes as long as an allow): the budget
//!   counts the mails a network caused, and a network whose budget is empty touches no
//!   account's log. Nothing a gateway sends clears a send log.
//!
//! Every answer is ALLOW or DENY, from the counts alone: the daemon never knows whether
//! the account exists, so the answer cannot say. Every store error is the caller's
//! deny (`crate::rpc` answers `UNAVAILABLE`).

use std::sync::Arc;

use crate::login::{MAX_REPLAYS, note_right_password};
use crate::realm::Realm;
use crate::secret::KeySecret;
use crate::store::Store;
use crate::store::attempt_count::{Attempt, Inspection};
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey, NetworkKey};
use crate::store::network_bucket::{NetworkOp, NetworkRequest};
use crate::store::realm_tally::TallyBuffer;
use crate::store::send_log::{SendOp, SendRequest, Sent};
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::metrics::{CEILINGS_REACHED, FLOW_ATTEMPTS, FLOW_CLEARS, FLOW_LOCKOUTS};
use crate::throttle::candidate_report::{self, Defence};
use crate::throttle::flow::{Flow, FlowKind, FlowPolicy, FlowRules, MailPolicy};
use crate::throttle::realm_tally::Counter;

/// What a flow attempt answered, and why (the metric's `reason`; never on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowAnswer {
    /// Check the code, or send the mail.
    Allow,
    /// The account's window (a code flow), or its interval or daily cap (a mail flow).
    DenyAccount,
    /// The client network's budget for the flow is spent.
    DenyNetwork,
    /// An `attempt_id` replayed more than [`MAX_REPLAYS`] times.
    DenyReplay,
}

/// What one flow attempt answered, and what it did to a code flow's door: for the
/// gateway only (docs/gateways.md, "When an attempt shuts the door"), never for the end
/// user. A mail flow has no lockout: both are `false` there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRecorded {
    /// Go on, or why not.
    pub answer: FlowAnswer,
    /// The attempt was the first its code flow's record refused in the window.
    pub lockout_started: bool,
    /// The attempt brought its code flow's record to the consecutive-failure ceiling.
    pub ceiling_reached: bool,
}

impl FlowRecorded {
    /// An answer that shut no door.
    fn answer(answer: FlowAnswer) -> Self {
        Self { answer, lockout_started: false, ceiling_reached: false }
    }
}

impl FlowAnswer {
    /// Whether the gateway may go on.
    pub fn allowed(self) -> bool {
        self == FlowAnswer::Allow
    }

    /// The metric's `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            FlowAnswer::Allow => "ok",
            FlowAnswer::DenyAccount => "account",
            FlowAnswer::DenyNetwork => "network",
            FlowAnswer::DenyReplay => "replay",
        }
    }
}

/// One flow attempt, validated (`crate::rpc` checked every field before any store
/// work).
#[derive(Debug, Clone, Copy)]
pub struct FlowAttempt<'a> {
    /// The account's realm.
    pub realm: &'a Realm,
    /// The flow's record of the account ([`AccountKey::flow`]).
    pub key: &'a AccountKey,
    /// Which flow.
    pub flow: Flow,
    /// Where the `attempt_id`'s answer is kept ([`AccountKey::attempt`] of `key`).
    pub attempt: Option<&'a AttemptKey>,
    /// The client's key as the gateway sent it (required for a mail flow; empty or
    /// unused for a code flow).
    pub client_key: &'a str,
}

/// What the operator's `Inspect` reads of a flow's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowInspection {
    /// A code flow's record and the store's clock (read as the login's), and the
    /// flow's throttle that reads them.
    Code(Box<Inspection>, crate::throttle::Policy),
    /// A mail flow's send log, read without a send.
    Mail(Sent),
}

/// Everything a flow attempt needs, shared by every call.
pub struct Flows {
    store: Arc<dyn Store>,
    /// Keys the client networks' budgets.
    secret: KeySecret,
    /// What the realm's status counts: each flow's refusals.
    tally: Arc<TallyBuffer>,
}

impl Flows {
    /// Flows counted in `store`, network budgets keyed by `secret`.
    pub fn new(store: Arc<dyn Store>, secret: &KeySecret) -> Self {
        Self { store, secret: secret.clone(), tally: TallyBuffer::new(secret) }
    }

    /// Notes each flow's refusals in `tally` (the daemon's, which writes it to the
    /// store; by default a buffer of this value's own, never written).
    pub fn with_tally(self, tally: Arc<TallyBuffer>) -> Self {
        Self { tally, ..self }
    }

    /// Counts one attempt (see the module docs) and answers it.
    ///
    /// # Errors
    /// The store's error (the caller denies).
    pub async fn record(&self, attempt: &FlowAttempt<'_>) -> Result<FlowRecorded, StoreError> {
        let FlowAttempt { realm, flow, .. } = *attempt;
        let recorded = match realm.flows.of(flow) {
            FlowPolicy::Code(policy) => self.code(attempt, policy).await?,
            FlowPolicy::Mail(policy) => FlowRecorded::answer(self.mail(attempt, policy).await?),
        };
        let answer = recorded.answer;
        if !answer.allowed() {
            self.tally.count(&realm.name, Counter::Refused(flow));
        }
        metrics::counter!(
            FLOW_ATTEMPTS,
            "realm" => realm.name.clone(),
            "flow" => flow.as_str(),
            "decision" => if answer.allowed() { "allow" } else { "deny" },
            "reason" => answer.reason(),
        )
        .increment(1);
        Ok(recorded)
    }

    /// A code flow: the login throttle's count on the flow's record.
    async fn code(
        &self,
        attempt: &FlowAttempt<'_>,
        policy: &crate::throttle::Policy,
    ) -> Result<FlowRecorded, StoreError> {
        // Its client network is noted on the flow's record for its window (Inspect's
        // distinct_networks), named by the login throttle's tag for it.
        let realm = attempt.realm;
        let network = realm.network.key(&self.secret, &realm.name, attempt.client_key);
        let candidate = candidate_code(attempt);
        let counting = Attempt::new(attempt.key, attempt.attempt, policy).with_candidate(candidate);
        let counted = self.store.count(&counting.from_network(network.as_ref())).await?;
        if let Some(shadow) = counted.shadow {
            self.note_candidate(attempt, counted.allowed, shadow.allowed);
        }
        if counted.locked_now {
            let realm = attempt.realm.name.clone();
            metrics::counter!(FLOW_LOCKOUTS, "realm" => realm, "flow" => attempt.flow.as_str())
                .increment(1);
            tracing::info!(realm = %attempt.realm.name, flow = attempt.flow.as_str(), "a flow's door closed for an account key");
            emit(flow_event(attempt, EventKind::LockoutStarted));
        }
        if counted.reached_ceiling {
            let realm = attempt.realm.name.clone();
            metrics::counter!(CEILINGS_REACHED, "realm" => realm, "record" => attempt.flow.as_str())
                .increment(1);
            tracing::warn!(realm = %attempt.realm.name, record = attempt.flow.as_str(), "ceiling: a record reached its consecutive failures and stays shut until cleared");
            emit(flow_event(attempt, EventKind::CeilingReached));
        }
        let answer = if counted.replays > MAX_REPLAYS {
            FlowAnswer::DenyReplay
        } else if counted.allowed {
            FlowAnswer::Allow
        } else {
            FlowAnswer::DenyAccount
        };
        Ok(FlowRecorded {
            answer,
            lockout_started: counted.locked_now,
            ceiling_reached: counted.reached_ceiling,
        })
    }

    /// A mail flow: the network's budget first, then the account's send log, the token
    /// given back by the store when the send is refused or replayed
    /// ([`SendLogStore::send_mail`]).
    async fn mail(
        &self,
        attempt: &FlowAttempt<'_>,
        policy: &MailPolicy,
    ) -> Result<FlowAnswer, StoreError> {
        let network = self.network_key(attempt);
        let candidate = candidate_mail(attempt);
        let take = network.as_ref().map(|key| NetworkRequest {
            key,
            op: NetworkOp::Take,
            policy: &policy.network,
            held: None,
            candidate: candidate.map(|c| &c.network),
        });
        let request = SendRequest {
            log: attempt.key,
            attempt_id: attempt.attempt,
            policy: &policy.send,
            op: SendOp::Send,
            candidate: candidate.map(|c| &c.send),
        };
        let mail = self.store.clone().send_mail(&request, take.as_ref()).await?;
        let sent = mail.sent;
        // The candidate's whole answer (its budget's, then its log's) beside the enforced.
        if let Some(shadow) = sent.shadow {
            self.note_candidate(attempt, !mail.network_refused && sent.allowed, shadow);
        }
        if mail.network_refused {
            return Ok(FlowAnswer::DenyNetwork);
        }
        Ok(if sent.replays > MAX_REPLAYS {
            FlowAnswer::DenyReplay
        } else if sent.allowed {
            FlowAnswer::Allow
        } else {
            FlowAnswer::DenyAccount
        })
    }

    /// Notes in the realm's candidate report what its candidate answered for one flow
    /// attempt the store counted in shadow beside the enforced answer (`enforced`): a
    /// flow has no step-up, so only `would_refuse` and `would_allow`.
    fn note_candidate(&self, attempt: &FlowAttempt<'_>, enforced: bool, candidate: bool) {
        let Some(c) = &attempt.realm.candidate else { return };
        for outcome in candidate_report::outcomes(enforced, candidate, (false, false)) {
            self.tally.candidate(&attempt.realm.name, &c.id, Defence::Flow(attempt.flow), outcome);
        }
    }

    /// The flow's budget key of the attempt's client network; `None` for a trusted
    /// network (the realm's `trusted_networks`) or an empty `client_key`.
    fn network_key(&self, attempt: &FlowAttempt<'_>) -> Option<NetworkKey> {
        let realm = attempt.realm;
        let network = realm.network.network(attempt.client_key)?;
        Some(NetworkKey::flow(&self.secret, &realm.name, attempt.flow, &network.as_text()))
    }

    /// `ClearFlow`: a verified code clears its code flow's record. A mail flow is never
    /// cleared by a gateway (`crate::rpc` refuses it before this).
    ///
    /// # Errors
    /// The store's error (the caller answers `UNAVAILABLE`); a mail flow is a
    /// [`StoreError::Protocol`] (never reached through the RPC).
    pub async fn clear(&self, realm: &Realm, key: &AccountKey) -> Result<(), StoreError> {
        let Some(flow) = key.flow_of().filter(|f| f.kind() == FlowKind::Code) else {
            return Err(StoreError::Protocol("only a code flow is cleared by a code".into()));
        };
        // A verified code after an attempt the candidate would have refused: a real user
        // its flow's limits would have shut out.
        let candidate_refused = self.store.clear(key).await?;
        note_right_password(realm, &self.tally, Defence::Flow(flow), candidate_refused);
        metrics::counter!(FLOW_CLEARS, "realm" => realm.name.clone(), "flow" => flow.as_str())
            .increment(1);
        Ok(())
    }

    /// The operator's `Inspect` of a flow's record; writes nothing.
    ///
    /// # Errors
    /// The store's error.
    pub async fn inspect(
        &self,
        realm: &Realm,
        key: &AccountKey,
        flow: Flow,
    ) -> Result<FlowInspection, StoreError> {
        match realm.flows.of(flow) {
            FlowPolicy::Mail(policy) => {
                let request = SendRequest {
                    log: key,
                    attempt_id: None,
                    policy: &policy.send,
                    op: SendOp::Peek,
                    candidate: None,
                };
                Ok(FlowInspection::Mail(self.store.send(&request).await?))
            }
            FlowPolicy::Code(policy) => {
                Ok(FlowInspection::Code(Box::new(self.store.inspect(key, policy).await?), *policy))
            }
        }
    }
}

/// The throttle of `attempt`'s code flow under its realm's candidate; `None` when the
/// candidate sets nothing of the flow's (or the realm has none).
fn candidate_code<'a>(attempt: &FlowAttempt<'a>) -> Option<&'a crate::throttle::Policy> {
    match attempt.realm.candidate.as_ref()?.flows.of(attempt.flow)? {
        FlowPolicy::Code(policy) => Some(policy),
        FlowPolicy::Mail(_) => None,
    }
}

/// The limits of `attempt`'s mail flow under its realm's candidate (its send caps and
/// its network budget), as [`candidate_code`].
fn candidate_mail<'a>(attempt: &FlowAttempt<'a>) -> Option<&'a MailPolicy> {
    match attempt.realm.candidate.as_ref()?.flows.of(attempt.flow)? {
        FlowPolicy::Mail(policy) => Some(policy),
        FlowPolicy::Code(_) => None,
    }
}

/// A security event of `kind` on `attempt`'s flow record.
fn flow_event(attempt: &FlowAttempt<'_>, kind: EventKind) -> SecurityEvent {
    SecurityEvent::of_account(kind, &attempt.realm.name, attempt.key.event_tag())
        .record(attempt.flow.as_str())
}
