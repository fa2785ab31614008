//! The flows' and the grace logins' entries of the embedded store (docs/flows.md,
//! docs/breach.md): a mail flow's send log ([`crate::throttle::send_log`]'s rules, as
//! `send_log.lua` applies them on Redis), a mail request's network token and send in one
//! transaction, and the count of a breached credential's accepts (`breached_count.lua`).

use super::entry::Entry;
use super::writer::{Reply, Tables};
use crate::store::{NetworkOp, SendOp, Sent, StoreError};
use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::send_log::{self, SendPolicy};

impl Tables<'_, '_> {
    /// The embedded form of `breached_count.lua` ([`crate::throttle::breached_count::note`]).
    pub(super) fn breached(
        &mut self,
        key: &str,
        credential: u64,
        ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let held = match self.get(key)? {
            Some(Entry::Breached { credential, count, .. }) => Some((credential, count)),
            None => None,
            Some(_) => {
                return Err(StoreError::Protocol("a breached count holds another entry".into()));
            }
        };
        let count = crate::throttle::breached_count::note(held, credential);
        let expires_ms = self.now.saturating_add(ttl_ms);
        self.put(key, Entry::Breached { credential, count, expires_ms })?;
        Ok(count)
    }

    /// [`crate::store::Store::send_mail`] in one transaction: the network's token
    /// first, the send only if it was taken, and the token back when the send is
    /// refused or replayed.
    pub(super) fn mail(
        &mut self,
        network: Option<&(String, BucketPolicy)>,
        log: &str,
        attempt: Option<(&str, u64)>,
        attempt_ttl_ms: u64,
        policy: &SendPolicy,
    ) -> Result<Reply, StoreError> {
        if let Some((key, bucket)) = network
            && !self.network(key, NetworkOp::Take, bucket)?.taken
        {
            let sent = Sent { allowed: false, sends: 0, next_in_ms: 0, replays: 0 };
            return Ok(Reply::Mail { sent, network_refused: true });
        }
        let sent = self.send(log, attempt, attempt_ttl_ms, policy, SendOp::Send)?;
        if let Some((key, bucket)) = network
            && (!sent.allowed || sent.replays > 0)
        {
            self.network(key, NetworkOp::GiveBack, bucket)?;
        }
        Ok(Reply::Mail { sent, network_refused: false })
    }

    /// The embedded form of `send_log.lua`: [`send_log`]'s rules on the flow's send log,
    /// once per attempt id; a refused send and a peek write nothing but the attempt id.
    pub(super) fn send(
        &mut self,
        key: &str,
        attempt: Option<(&str, u64)>,
        attempt_ttl_ms: u64,
        policy: &SendPolicy,
        op: SendOp,
    ) -> Result<Sent, StoreError> {
        let now = self.now;
        if let (Some((attempt, bound)), SendOp::Send) = (attempt, op) {
            match self.get(attempt)? {
                Some(Entry::Attempt { binding, .. }) if binding != 0 && binding != bound => {
                    return Err(StoreError::AttemptIdReused);
                }
                Some(Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms }) => {
                    let replays = replays + 1;
                    let entry =
                        Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms };
                    self.put(attempt, entry)?;
                    return Ok(Sent { allowed, sends: 0, next_in_ms: 0, replays });
                }
                Some(_) => {
                    return Err(StoreError::Protocol("an attempt key holds another entry".into()));
                }
                None => {}
            }
        }
        let held = match self.get(key)? {
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
                self.put(key, Entry::Sends { times, len, expires_ms })?;
            }
            if let Some((attempt, binding)) = attempt {
                let expires_ms = now.saturating_add(attempt_ttl_ms);
                let entry =
                    Entry::Attempt { allowed, window_start_ms: 0, replays: 0, binding, expires_ms };
                self.put(attempt, entry)?;
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
}
