//! Send logs on Redis (docs/flows.md): one `lua/send_log.lua` call on the flow's
//! record, in the account's hash tag (one slot on a cluster). A mail request is the
//! trait's own `send_mail`: the network's take, the send, and the give-back after the
//! answer (the network's key has its own hash tag, so no one script holds both).

use async_trait::async_trait;

use super::{RedisStore, scripts};
use crate::store::error::StoreError;
use crate::store::send_log::{SendLogStore, SendOp, SendRequest, Sent};
use crate::throttle::send_log::{CAP_WINDOW_MS, MAX_DAILY_CAP};

#[async_trait]
impl SendLogStore for RedisStore {
    /// A send waits for `store.wait_replicas` as a counted attempt does (it bounds
    /// mails); a peek does not.
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        let SendRequest { log, attempt_id, policy, op } = *request;
        let mut call = scripts::send_log().key(log.record());
        if let (Some(attempt), SendOp::Send) = (attempt_id, op) {
            call.key(attempt.as_str());
        }
        call.arg(op.as_str())
            .arg(policy.min_interval_ms)
            .arg(policy.daily_cap)
            .arg(CAP_WINDOW_MS)
            .arg(self.attempt_ttl_ms)
            .arg(attempt_id.map_or_else(String::new, |a| a.binding_hex()));
        let reply: Vec<i64> = match op {
            SendOp::Send => self.invoke_counted(&call).await?,
            SendOp::Peek => self.invoke(&call).await?,
        };
        if reply[..] == [-1] {
            return Err(StoreError::AttemptIdReused);
        }
        let [allowed, sends, next_in_ms, replays] = reply[..] else {
            return Err(StoreError::Protocol(format!("send returned {} values", reply.len())));
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
        })
    }
}
