//! The mail flows' store side (docs/flows.md; the rules are
//! [`crate::throttle::send_log`]): each account's send log per mail flow, and a mail
//! request's way through its network's budget and the log (`lua/send_log.lua`,
//! `embedded/send_log.rs`).

use std::sync::Arc;

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::{AccountKey, AttemptKey};
use super::network_bucket::{NetworkBucketStore, NetworkOp, NetworkRequest};
use crate::throttle::send_log::SendPolicy;

/// What a [`SendLogStore::send`] call does with a mail flow's send log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// A request to send: allowed or not, by the log's interval and daily cap; an
    /// allowed one is noted.
    Send,
    /// Reads the log; writes nothing (`Admin/Inspect`).
    Peek,
    /// Asks only the candidate's send log ([`SendRequest::candidate`], which it needs):
    /// a request the enforced network budget refused and the candidate's took
    /// (docs/throttle.md, "Trying a policy in shadow"). The enforced log and the
    /// attempt id are neither read nor written; [`Sent::shadow`] is the answer.
    Shadow,
}

impl SendOp {
    /// The name the store's script takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SendOp::Send => "send",
            SendOp::Peek => "peek",
            SendOp::Shadow => "shadow",
        }
    }
}

/// One call on a mail flow's send log ([`SendLogStore::send`]; docs/flows.md).
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// The flow's record of the account ([`super::keys::AccountKey::flow`]).
    pub log: &'a AccountKey,
    /// Where the gateway's idempotency id keeps its answer (a retried request is
    /// noted once and gets the first answer).
    pub attempt_id: Option<&'a AttemptKey>,
    /// The flow's interval and daily cap.
    pub policy: &'a SendPolicy,
    /// Send, or read.
    pub op: SendOp,
    /// The realm's candidate caps of the flow (docs/throttle.md, "Trying a policy in
    /// shadow"), with [`SendOp::Send`]: the request is asked again of the account's
    /// candidate send log ([`AccountKey::candidate_record`]) in the same step
    /// ([`Sent::shadow`]); never changes the answer. `None`: none.
    pub candidate: Option<&'a SendPolicy>,
}

/// A send log after one [`SendRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// [`SendOp::Send`]: the mail may be sent (noted in the log); [`SendOp::Peek`]: one
    /// would be now.
    pub allowed: bool,
    /// Sends in the last 24 h after the call (0 ..= [`crate::throttle::send_log::MAX_DAILY_CAP`];
    /// above the daily cap when the cap was lowered under a full log).
    pub sends: u32,
    /// Milliseconds until a send would be allowed (0: now).
    pub next_in_ms: u64,
    /// How often this `attempt_id` was seen before (0: a first call). A replay gets the
    /// first call's `allowed` and notes nothing.
    pub replays: u64,
    /// What the candidate answered ([`SendRequest::candidate`]): `Some(allowed)` for a
    /// send that was no replay; `None` without a candidate, for a replay or a peek.
    pub shadow: Option<bool>,
}

/// What [`SendLogStore::send_mail`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailSent {
    /// The send log's answer (`allowed: false` when the network's budget refused). Its
    /// `shadow` is the candidate's whole answer: its network budget's and its send
    /// log's ([`SendRequest::candidate`], [`NetworkRequest::candidate`]).
    pub sent: Sent,
    /// The network's budget was empty: the log was not asked.
    pub network_refused: bool,
}

/// The tokens a mail request owes back to its client network's buckets: a send refused
/// or replayed gives back what its bucket took, the enforced one's and the candidate's
/// apart (each budget counts the mails its own policy would have sent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owed {
    /// One token back to the enforced bucket.
    pub enforced: bool,
    /// One token back to the candidate's bucket.
    pub candidate: bool,
}

impl Owed {
    /// The operation on `take`'s buckets that pays it back; `None` when nothing is owed.
    pub fn give_back<'a>(self, take: &NetworkRequest<'a>) -> Option<NetworkRequest<'a>> {
        let (op, candidate) = match (self.enforced, self.candidate) {
            (false, false) => return None,
            (true, true) => (NetworkOp::GiveBack, take.candidate),
            (true, false) => (NetworkOp::GiveBack, None),
            (false, true) => (NetworkOp::GiveShadow, take.candidate),
        };
        Some(NetworkRequest { op, candidate, held: None, ..*take })
    }
}

/// Send logs on a store. A mail request needs its network's bucket too.
#[async_trait]
pub trait SendLogStore: NetworkBucketStore + Send + Sync + 'static {
    /// A mail flow's send log (docs/flows.md; [`crate::throttle::send_log`]'s rules):
    /// for [`SendOp::Send`], whether a mail may go to the account now, noting it when it
    /// may, once per `attempt_id`, atomically on the store's clock; [`SendOp::Peek`]
    /// writes nothing.
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError>;

    /// Whether [`SendLogStore::send_mail`] is this store's own single step (the
    /// embedded store's one transaction) rather than the default's steps in turn; a
    /// wrapper that times each step ([`crate::store::instrumented`]) asks it. Default:
    /// no.
    fn mail_in_one_step(&self) -> bool {
        false
    }

    /// A mail flow's request (docs/flows.md): takes `network`'s token first (none: a
    /// trusted network), and only if it was taken asks the send log
    /// ([`SendLogStore::send`]); a refused or replayed send gives the token back, so only
    /// a mail sent spends the network's budget. Default: [`take_and_send`], then the
    /// give-back in a task of its own after the answer ([`give_back_later`]), so a
    /// refusal takes a send's time (a give-back that fails leaves the network
    /// over-counted, the safe side); the embedded store does all three in one
    /// transaction (one commit, not three).
    async fn send_mail(
        self: Arc<Self>,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        let (mail, owed) = take_and_send(&*self, request, network).await?;
        if let Some(give) = network.and_then(|take| owed.give_back(take)) {
            give_back_later(self, &give);
        }
        Ok(mail)
    }
}

/// A mail request's first two steps on `store`: `network`'s token (the candidate's
/// bucket's too, [`NetworkRequest::candidate`]), then (only if the enforced one was
/// taken) the send. Answers what the request got and the tokens it owes back
/// ([`settle`]). A request the enforced budget refused and the candidate's took asks
/// the candidate's send log alone ([`SendOp::Shadow`]).
///
/// # Errors
/// The store's error: nothing is owed back then (a failed take took nothing; after a
/// failed send the token stays spent, the safe side).
pub async fn take_and_send<S: SendLogStore + ?Sized>(
    store: &S,
    request: &SendRequest<'_>,
    network: Option<&NetworkRequest<'_>>,
) -> Result<(MailSent, Owed), StoreError> {
    let mut took = (true, None);
    if let Some(take) = network {
        let state = store.network(take).await?;
        took = (state.taken, take.candidate.and(state.shadow));
    }
    let sent = match took {
        (true, Some(false)) => {
            Some(store.send(&SendRequest { candidate: None, ..*request }).await?)
        }
        (true, _) => Some(store.send(request).await?),
        (false, Some(true)) if request.candidate.is_some() => {
            Some(store.send(&SendRequest { op: SendOp::Shadow, ..*request }).await?)
        }
        (false, _) => None,
    };
    Ok(settle(network.is_some(), took, sent))
}

/// What a mail request answered and owes, from its takes and its send: `network` whether
/// a bucket was asked; `took` whether the enforced bucket took a token and whether the
/// candidate's did (`None`: no candidate bucket); `sent` the send log's answer (a
/// [`SendOp::Shadow`]'s when the enforced bucket took none; `None`: not asked).
pub fn settle(network: bool, took: (bool, Option<bool>), sent: Option<Sent>) -> (MailSent, Owed) {
    let (enforced_took, candidate_took) = took;
    let refused = Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0, shadow: None };
    let mut sent_as = if enforced_took { sent.unwrap_or(refused) } else { refused };
    // The candidate's answer: its bucket's refusal, else its send log's (none for a replay).
    sent_as.shadow = match (candidate_took, sent) {
        (Some(false), Some(s)) if s.replays > 0 => None,
        (Some(false), _) => Some(false),
        (_, Some(s)) => s.shadow,
        (_, None) => None,
    };
    let replayed = sent_as.replays > 0;
    let owed = Owed {
        enforced: network && enforced_took && (!sent_as.allowed || replayed),
        candidate: candidate_took == Some(true) && (replayed || sent_as.shadow != Some(true)),
    };
    (MailSent { sent: sent_as, network_refused: !enforced_took }, owed)
}

/// Pays `give` back to its buckets on `store`, in a task of its own (the answer does
/// not wait for it; a failure leaves the network over-counted).
pub fn give_back_later<S: NetworkBucketStore + ?Sized + 'static>(
    store: Arc<S>,
    give: &NetworkRequest<'_>,
) {
    let (key, op, policy, candidate) =
        (give.key.clone(), give.op, *give.policy, give.candidate.copied());
    tokio::spawn(async move {
        let give_back = NetworkRequest {
            key: &key,
            op,
            policy: &policy,
            held: None,
            candidate: candidate.as_ref(),
        };
        let _ = store.network(&give_back).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENT: Sent = Sent { allowed: true, sends: 1, next_in_ms: 0, replays: 0, shadow: None };

    #[test]
    fn each_bucket_is_owed_back_what_its_own_policy_did_not_send() {
        let with = |shadow| Some(Sent { shadow: Some(shadow), ..SENT });
        let refused = |shadow| Some(Sent { allowed: false, shadow: Some(shadow), ..SENT });
        let owed = |enforced, candidate| Owed { enforced, candidate };
        // (network, (enforced took, candidate took), sent) -> (refused by the network,
        // the candidate's answer, owed)
        let cases = [
            (true, (true, Some(true)), with(true), (false, Some(true), owed(false, false))),
            (true, (true, Some(true)), with(false), (false, Some(false), owed(false, true))),
            (true, (true, Some(true)), refused(true), (false, Some(true), owed(true, false))),
            (true, (true, Some(false)), Some(SENT), (false, Some(false), owed(false, false))),
            (true, (false, Some(true)), with(true), (true, Some(true), owed(false, false))),
            (true, (false, Some(true)), with(false), (true, Some(false), owed(false, true))),
            (true, (false, Some(false)), None, (true, Some(false), owed(false, false))),
            (true, (false, None), None, (true, None, owed(false, false))),
            (false, (true, None), refused(false), (false, Some(false), owed(false, false))),
        ];
        for (network, took, sent, want) in cases {
            let (mail, o) = settle(network, took, sent);
            assert_eq!((mail.network_refused, mail.sent.shadow, o), want, "{took:?} {sent:?}");
            assert!(!mail.network_refused || !mail.sent.allowed, "a refused take sends nothing");
        }
        // A replay: both tokens back, no candidate answer.
        let replay = Some(Sent { replays: 1, ..SENT });
        let (mail, o) = settle(true, (true, Some(true)), replay);
        assert_eq!((mail.sent.shadow, o), (None, owed(true, true)));
        let (mail, o) = settle(true, (true, Some(false)), replay);
        assert_eq!((mail.sent.shadow, o), (None, owed(true, false)));
    }
}
