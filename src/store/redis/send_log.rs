//! Send logs on Redis (docs/flows.md): one `lua/send_log.lua` call on the flow's
//! record (and its candidate send log), in the account's hash tag (one slot on a
//! cluster). A mail request is the
//! trait's own `send_mail`: the network's take, the send, and the give-back after the
//! answer (the network's key has its own hash tag, so no one script holds both).

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::send_log;
use crate::store::error::StoreError;
use crate::store::send_log::{SendLogStore, SendOp, SendRequest, Sent};
use crate::throttle::send_log::{CAP_WINDOW_MS, MAX_DAILY_CAP};

#[async_trait]
impl SendLogStore for RedisStore {
    /// A send waits for `store.wait_replicas` as a counted attempt does (it bounds
    /// mails); a peek does not.
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        let SendRequest { log, attempt_id, policy, op, candidate } = *request;
        // A candidate's log is asked only on a send (or alone), and only when the key has
        // one.
        let candidate = candidate
            .filter(|_| op != SendOp::Peek)
            .and_then(|c| Some((log.candidate_record()?, c)));
        let keys = send_log::Keys {
            log: log.record(),
            attempt: attempt_id.filter(|_| op == SendOp::Send).map(|a| a.as_str().to_owned()),
            candidate: candidate.as_ref().map(|(key, _)| key.clone()),
        };
        let args = send_log::Args {
            op: op.as_str(),
            min_interval_ms: policy.min_interval_ms,
            daily_cap: policy.daily_cap,
            cap_window_ms: CAP_WINDOW_MS,
            attempt_ttl_ms: self.attempt_ttl_ms,
            binding: attempt_id.map_or_else(String::new, |a| a.binding_hex()),
            candidate: candidate.map_or_else(String::new, |(_, c)| {
                format!("{},{}", c.min_interval_ms, c.daily_cap)
            }),
        };
        let call = send_log::call(&keys, &args);
        let reply: Vec<i64> = match op {
            SendOp::Send | SendOp::Shadow => self.invoke_counted(&call).await?,
            SendOp::Peek => self.invoke(&call).await?,
        };
        if reply[..] == [-1] {
            return Err(StoreError::AttemptIdReused);
        }
        let send_log::Reply { allowed, sends, next_in_ms, replays, shadow } =
            send_log::Reply::parse(&reply)?;
        let shadow = match shadow {
            -1 => None,
            _ if keys.candidate.is_none() => None,
            1 => Some(true),
            0 => Some(false),
            other => return Err(StoreError::Protocol(format!("send shadow={other}"))),
        };
        let allowed = match allowed {
            1 => true,
            0 => false,
            other => return Err(StoreError::Protocol(format!("send allowed={other}"))),
        };
        // A log holds at most MAX_DAILY_CAP times, and more than today's cap when the cap
        // was lowered under it (a refusal writes nothing): that is an answer, not an error.
        let sends = u32::try_from(sends)
            .ok()
            .filter(|&s| s <= MAX_DAILY_CAP)
            .ok_or_else(|| StoreError::Protocol("send returned sends out of range".into()))?;
        let number = |v: i64, name: &str| {
            u64::try_from(v).map_err(|_| StoreError::Protocol(format!("send: negative {name}")))
        };
        Ok(Sent {
            allowed,
            sends,
            next_in_ms: number(next_in_ms, "wait")?,
            replays: number(replays, "replay count")?,
            shadow,
        })
    }
}
