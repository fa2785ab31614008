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
        let SendRequest { log, attempt_id, policy, op } = *request;
        let log = log.record();
        let attempt = attempt_id.map(|a| (a.as_str().to_owned(), a.binding()));
        let (ttl_ms, policy) = (throttle::duration_ms(self.attempt_id_horizon), *policy);
        self.submit(op == SendOp::Send, move |t| {
            let attempt = attempt.as_ref().map(|(k, b)| (k.as_str(), *b));
            send(t, &log, attempt, ttl_ms, &policy, op)
        })
        .await
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
        let SendRequest { log, attempt_id, policy, .. } = *request;
        let network = network.map(|n| (n.key.as_key(), *n.policy));
        let log = log.record();
        let attempt = attempt_id.map(|a| (a.as_str().to_owned(), a.binding()));
        let (ttl_ms, policy) = (throttle::duration_ms(self.attempt_id_horizon), *policy);
        self.submit(true, move |t| {
            let attempt = attempt.as_ref().map(|(k, b)| (k.as_str(), *b));
            mail(t, network.as_ref(), &log, attempt, ttl_ms, &policy)
        })
        .await
    }
}

/// [`crate::store::send_log::SendLogStore::send_mail`] in one transaction: the network's token
/// first, the send only if it was taken, and the token back when the send is
/// refused or replayed.
fn mail(
    t: &mut Tables<'_, '_>,
    network: Option<&(String, BucketPolicy)>,
    log: &str,
    attempt: Option<(&str, u64)>,
    attempt_ttl_ms: u64,
    policy: &SendPolicy,
) -> Result<MailSent, StoreError> {
    if let Some((key, bucket)) = network
        && !network_bucket::network(t, key, NetworkOp::Take, bucket)?.taken
    {
        let sent = Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0 };
        return Ok(MailSent { sent, network_refused: true });
    }
    let sent = send(t, log, attempt, attempt_ttl_ms, policy, SendOp::Send)?;
    if let Some((key, bucket)) = network
        && (!sent.allowed || sent.replays > 0)
    {
        network_bucket::network(t, key, NetworkOp::GiveBack, bucket)?;
    }
    Ok(MailSent { sent, network_refused: false })
}

/// The embedded form of `send_log.lua`: [`send_log`]'s rules on the flow's send log,
/// once per attempt id; a refused send and a peek write nothing but the attempt id.
fn send(
    t: &mut Tables<'_, '_>,
    key: &str,
    attempt: Option<(&str, u64)>,
    attempt_ttl_ms: u64,
    policy: &SendPolicy,
    op: SendOp,
) -> Result<Sent, StoreError> {
    let now = t.now;
    if let (Some((attempt, bound)), SendOp::Send) = (attempt, op) {
        match t.get(attempt)? {
            Some(Entry::Attempt { binding, .. }) if binding != 0 && binding != bound => {
                return Err(StoreError::AttemptIdReused);
            }
            Some(Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms }) => {
                let replays = replays + 1;
                let entry =
                    Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms };
                t.put(attempt, entry)?;
                return Ok(Sent { allowed, sends: 0, next_in_ms: 0, replays });
            }
            Some(_) => {
                return Err(StoreError::Protocol("an attempt key holds another entry".into()));
            }
            None => {}
        }
    }
    let held = match t.get(key)? {
        Some(Entry::Sends { times, len, .. }) => times[..usize::from(len)].to_vec(),
        None => Vec::new(),
        Some(_) => return Err(StoreError::Protocol("a send log holds another entry".into())),
    };
    let outcome = policy.send(&held, now);
    let allowed = outcome.allowed;
    if op == SendOp::Send {
        if allowed {
            let mut times = [0u64; super::entry::MAX_SENDS];
            let len = outcome.log.len().min(times.len());
            times[..len].copy_from_slice(&outcome.log[..len]);
            let expires_ms = send_log::expires_ms(&outcome.log).unwrap_or(now);
            let len = u8::try_from(len).unwrap_or(u8::MAX);
            t.put(key, Entry::Sends { times, len, expires_ms })?;
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
    })
}
