//! Send logs in the embedded store (`lua/send_log.lua` on Redis): a mail flow's send
//! log ([`crate::throttle::send_log`]'s rules), and a mail request's network token, send
//! and give-back in one operation of the writer's batch.

use std::sync::Arc;

use async_trait::async_trait;

use super::entry::Entry;
use super::tables::Tables;
use super::{EmbeddedStore, network_bucket};
use crate::store::error::StoreError;
use crate::store::network_bucket::{NetworkOp, NetworkRequest};
#[cfg(doc)]
use crate::store::send_log::take_and_send;
use crate::store::send_log::{MailSent, SendLogStore, SendOp, SendRequest, Sent, settle};
use crate::throttle;
use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::send_log::{self, SendPolicy};

#[async_trait]
impl SendLogStore for EmbeddedStore {
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        let job = SendJob::of(request, throttle::duration_ms(self.attempt_id_horizon));
        self.submit(request.op != SendOp::Peek, move |t| job.apply(t)).await
    }

    fn mail_in_one_step(&self) -> bool {
        true
    }

    /// The network's takes, the send and the give-backs it owes, in one transaction
    /// (one commit, not three).
    async fn send_mail(
        self: Arc<Self>,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        let network = network.map(|n| MailNetwork {
            key: n.key.as_key(),
            policy: *n.policy,
            candidate: n.candidate.map(|c| (n.key.candidate_bucket(), *c)),
        });
        let ttl_ms = throttle::duration_ms(self.attempt_id_horizon);
        let request = SendRequest { op: SendOp::Send, ..*request };
        let jobs = [
            SendJob::of(&request, ttl_ms),
            SendJob::of(&SendRequest { candidate: None, ..request }, ttl_ms),
            SendJob::of(&SendRequest { op: SendOp::Shadow, ..request }, ttl_ms),
        ];
        self.submit(true, move |t| mail(t, network.as_ref(), &jobs)).await
    }
}

/// A mail request's client network: its bucket for the flow, and the candidate's.
struct MailNetwork {
    key: String,
    policy: BucketPolicy,
    /// The network's candidate bucket and the candidate's budget.
    candidate: Option<(String, BucketPolicy)>,
}

/// One send log request, owned by its job.
struct SendJob {
    /// The flow's send log.
    log: String,
    /// The attempt id's key and its request binding.
    attempt: Option<(String, u64)>,
    /// How long the attempt id's answer is kept, in ms.
    attempt_ttl_ms: u64,
    policy: SendPolicy,
    op: SendOp,
    /// The account's candidate send log and the candidate's caps, on a send.
    candidate: Option<(String, SendPolicy)>,
}

impl SendJob {
    /// `request` as a job; an attempt id's answer is kept `attempt_ttl_ms`.
    fn of(request: &SendRequest<'_>, attempt_ttl_ms: u64) -> Self {
        let SendRequest { log, attempt_id, policy, op, candidate } = *request;
        Self {
            log: log.record(),
            attempt: attempt_id.map(|a| (a.as_str().to_owned(), a.binding())),
            attempt_ttl_ms,
            policy: *policy,
            op,
            candidate: candidate
                .filter(|_| op != SendOp::Peek)
                .and_then(|c| Some((log.candidate_record()?, *c))),
        }
    }

    /// `send_log.lua`'s steps.
    fn apply(&self, t: &mut Tables<'_, '_>) -> Result<Sent, StoreError> {
        if self.op == SendOp::Shadow {
            // The candidate's log alone: the enforced log and the attempt id untouched.
            let Some((key, policy)) = &self.candidate else {
                return Err(StoreError::Protocol("a shadow send needs a candidate".into()));
            };
            let held = read_log(t, key)?;
            let shadow = Some(shadow(t, key, &held, policy)?);
            return Ok(Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0, shadow });
        }
        let attempt = self.attempt.as_ref().map(|(k, b)| (k.as_str(), *b));
        if let Some(replayed) = replay(t, attempt, self.op)? {
            return Ok(replayed);
        }
        // Both logs read (and checked) before anything is written: a corrupt candidate
        // log fails the call with nothing noted, as on Redis.
        let held = read_log(t, &self.log)?;
        let candidate = match &self.candidate {
            Some((key, policy)) => Some((key.as_str(), policy, read_log(t, key)?)),
            None => None,
        };
        let mut sent =
            send(t, (&self.log, held), attempt, self.attempt_ttl_ms, &self.policy, self.op)?;
        if let Some((key, policy, held)) = candidate {
            sent.shadow = Some(shadow(t, key, &held, policy)?);
        }
        Ok(sent)
    }
}

/// [`crate::store::send_log::SendLogStore::send_mail`] in one transaction, as
/// [`crate::store::send_log::take_and_send`] and its give-backs: the network's tokens first (the candidate
/// bucket read before anything is written), the send if the enforced one was taken
/// (`jobs`: with the candidate, without it when the candidate's bucket refused, and the
/// candidate's log alone when only its bucket took one), then the tokens owed back.
fn mail(
    t: &mut Tables<'_, '_>,
    network: Option<&MailNetwork>,
    jobs: &[SendJob; 3],
) -> Result<MailSent, StoreError> {
    let [send, without_candidate, shadow_only] = jobs;
    // The send logs, read (and checked) before any token is taken: a corrupt one (the
    // candidate's included) fails the request with nothing written, the tokens too.
    read_log(t, &send.log)?;
    if let Some((key, _)) = &send.candidate {
        read_log(t, key)?;
    }
    let mut took = (true, None);
    if let Some(n) = network {
        if let Some((key, policy)) = &n.candidate {
            network_bucket::network(t, key, NetworkOp::Peek, policy)?;
        }
        let taken = network_bucket::network(t, &n.key, NetworkOp::Take, &n.policy)?.taken;
        let candidate = match &n.candidate {
            Some((key, policy)) => {
                Some(network_bucket::network(t, key, NetworkOp::Take, policy)?.taken)
            }
            None => None,
        };
        took = (taken, candidate);
    }
    let sent = match took {
        (true, Some(false)) => Some(without_candidate.apply(t)?),
        (true, _) => Some(send.apply(t)?),
        (false, Some(true)) if shadow_only.candidate.is_some() => Some(shadow_only.apply(t)?),
        (false, _) => None,
    };
    let (mail, owed) = settle(network.is_some(), took, sent);
    if let Some(n) = network {
        if owed.enforced {
            network_bucket::network(t, &n.key, NetworkOp::GiveBack, &n.policy)?;
        }
        if let (true, Some((key, policy))) = (owed.candidate, &n.candidate) {
            network_bucket::network(t, key, NetworkOp::GiveBack, policy)?;
        }
    }
    Ok(mail)
}

/// A replayed attempt id on a send: its first answer, its replays counted; `None` for a
/// first call (or a peek, which notes no id).
fn replay(
    t: &mut Tables<'_, '_>,
    attempt: Option<(&str, u64)>,
    op: SendOp,
) -> Result<Option<Sent>, StoreError> {
    let (Some((attempt, bound)), SendOp::Send) = (attempt, op) else { return Ok(None) };
    match t.get(attempt)? {
        Some(Entry::Attempt { binding, .. }) if binding != 0 && binding != bound => {
            Err(StoreError::AttemptIdReused)
        }
        Some(Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms }) => {
            let replays = replays + 1;
            let entry = Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms };
            t.put(attempt, entry)?;
            Ok(Some(Sent { allowed, sends: 0, next_in_ms: 0, replays, shadow: None }))
        }
        Some(_) => Err(StoreError::Protocol("an attempt key holds another entry".into())),
        None => Ok(None),
    }
}

/// The send log at `key` (empty when absent); another entry there is a store error.
fn read_log(t: &Tables<'_, '_>, key: &str) -> Result<Vec<u64>, StoreError> {
    match t.get(key)? {
        Some(Entry::Sends { times, len, .. }) => Ok(times[..usize::from(len)].to_vec()),
        None => Ok(Vec::new()),
        Some(_) => Err(StoreError::Protocol("a send log holds another entry".into())),
    }
}

/// Writes `log` (newest first) to `key`, expiring a cap window after its newest send.
fn write_log(t: &mut Tables<'_, '_>, key: &str, log: &[u64]) -> Result<(), StoreError> {
    let mut times = [0u64; super::entry::MAX_SENDS];
    let len = log.len().min(times.len());
    times[..len].copy_from_slice(&log[..len]);
    let expires_ms = send_log::expires_ms(log).unwrap_or(t.now);
    let len = u8::try_from(len).unwrap_or(u8::MAX);
    t.put(key, Entry::Sends { times, len, expires_ms })
}

/// The send asked again of the candidate's log `held` at `key` under its caps: whether
/// the candidate would have allowed it; a send it allows is noted there (`send_log.lua`'s
/// shadow).
fn shadow(
    t: &mut Tables<'_, '_>,
    key: &str,
    held: &[u64],
    policy: &SendPolicy,
) -> Result<bool, StoreError> {
    let outcome = policy.send(held, t.now);
    if outcome.allowed {
        write_log(t, key, &outcome.log)?;
    }
    Ok(outcome.allowed)
}

/// The embedded form of `send_log.lua`'s count: [`send_log`]'s rules on the flow's send
/// log `held` at `key` (read by the caller), noted once per attempt id; a refused send
/// and a peek write nothing but the attempt id.
fn send(
    t: &mut Tables<'_, '_>,
    (key, held): (&str, Vec<u64>),
    attempt: Option<(&str, u64)>,
    attempt_ttl_ms: u64,
    policy: &SendPolicy,
    op: SendOp,
) -> Result<Sent, StoreError> {
    let now = t.now;
    let outcome = policy.send(&held, now);
    let allowed = outcome.allowed;
    if op == SendOp::Send {
        if allowed {
            write_log(t, key, &outcome.log)?;
        }
        if let Some((attempt, binding)) = attempt {
            let expires_ms = now.saturating_add(attempt_ttl_ms);
            let entry =
                Entry::Attempt { allowed, window_start_ms: 0, replays: 0, binding, expires_ms };
            t.put(attempt, entry)?;
        }
    }
    // A peek answers as the log stands (a send now: would it be allowed?).
    let log = if op == SendOp::Send { outcome.log } else { send_log::live(&held, now) };
    Ok(Sent {
        allowed,
        sends: u32::try_from(log.len()).unwrap_or(u32::MAX),
        next_in_ms: policy.next_in_ms(&log, now),
        replays: 0,
        shadow: None,
    })
}
