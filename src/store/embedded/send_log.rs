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
use crate::store::send_log::{MailSent, SendLogStore, SendOp, SendRequest, Sent};
use crate::throttle;
use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::send_log::{self, SendPolicy};

#[async_trait]
impl SendLogStore for EmbeddedStore {
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        let job = SendJob::of(request, throttle::duration_ms(self.attempt_id_horizon));
        self.submit(request.op == SendOp::Send, move |t| job.apply(t)).await
    }

    fn mail_in_one_step(&self) -> bool {
        true
    }

    /// The network's take, the send and the give-back it owes, in one transaction (one
    /// commit, not three).
    async fn send_mail(
        self: Arc<Self>,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        let network = network.map(|n| (n.key.as_key(), *n.policy));
        let request = SendRequest { op: SendOp::Send, ..*request };
        let job = SendJob::of(&request, throttle::duration_ms(self.attempt_id_horizon));
        self.submit(true, move |t| mail(t, network.as_ref(), &job)).await
    }
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
                .filter(|_| op == SendOp::Send)
                .and_then(|c| Some((log.candidate_record()?, *c))),
        }
    }

    /// `send_log.lua`'s steps.
    fn apply(&self, t: &mut Tables<'_, '_>) -> Result<Sent, StoreError> {
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

/// [`crate::store::send_log::SendLogStore::send_mail`] in one transaction: the network's token
/// first, the send only if it was taken, and the token back when the send is
/// refused or replayed.
fn mail(
    t: &mut Tables<'_, '_>,
    network: Option<&(String, BucketPolicy)>,
    job: &SendJob,
) -> Result<MailSent, StoreError> {
    if let Some((key, bucket)) = network
        && !network_bucket::network(t, key, NetworkOp::Take, bucket)?.taken
    {
        let sent = Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0, shadow: None };
        return Ok(MailSent { sent, network_refused: true });
    }
    let sent = job.apply(t)?;
    if let Some((key, bucket)) = network
        && (!sent.allowed || sent.replays > 0)
    {
        network_bucket::network(t, key, NetworkOp::GiveBack, bucket)?;
    }
    Ok(MailSent { sent, network_refused: false })
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
