//! The attempt count on Redis: one `lua/attempt_count/` script per operation on the
//! record's key (and the keys in its hash tag: one slot on a cluster). A count waits for
//! `store.wait_replicas`; a read, a refund and a clear do not.

use async_trait::async_trait;

use super::{RedisStore, repeat_list, scripts};
use crate::store::StoreError;
use crate::store::attempt_count::{Attempt, AttemptCountStore, Counted, Inspection};
use crate::store::keys::{AccountKey, AttemptKey};
use crate::throttle::{Policy, Record};

#[async_trait]
impl AttemptCountStore for RedisStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        let mut call = scripts::admit().key(key.record());
        call.arg(policy.max_failures)
            .arg(policy.window_ms(0))
            .arg(policy.window_ms(policy.max_step()))
            .arg(policy.max_consecutive_failures);
        let open: i64 = self.invoke(&call).await?;
        match open {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(StoreError::Protocol(format!("admit returned {other}"))),
        }
    }

    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        let (key, policy) = (attempt.key, attempt.policy);
        let mut call = scripts::record_attempt().key(key.record());
        if let Some(claim) = &attempt.device {
            call.key(claim.bucket.record()).key(key.device_epoch());
        } else if attempt.read_epoch {
            call.key(key.device_epoch());
        }
        if let Some(attempt_key) = attempt.attempt_id {
            call.key(attempt_key.as_str());
        }
        if let Some(repeat) = &attempt.repeat {
            call.key(repeat.list.as_str());
        }
        // -1: no device token (the script then reads no epoch); -2: none, but answer
        // the account's epoch.
        let no_token = if attempt.read_epoch { -2 } else { -1 };
        let device_epoch =
            attempt.device.map_or(no_token, |d| i64::try_from(d.epoch).unwrap_or(i64::MAX));
        call.arg(policy.max_failures)
            .arg(policy.window_ms(0))
            .arg(policy.window_ms(policy.max_step()))
            .arg(policy.retention_ms())
            .arg(u8::from(policy.escalates()))
            .arg(policy.max_step())
            .arg(device_epoch)
            .arg(attempt.device_epoch_ttl_ms)
            .arg(self.attempt_ttl_ms)
            .arg(attempt.repeat.map_or_else(String::new, |r| repeat_list::hex(r.fingerprint)))
            .arg(policy.max_consecutive_failures)
            .arg(policy.lockout_ms())
            .arg(attempt.attempt_id.map_or_else(String::new, |a| a.binding_hex()));
        let reply: Vec<i64> = self.invoke_counted(&call).await?;
        if reply[..] == [-1] {
            return Err(StoreError::AttemptIdReused);
        }
        let [
            allowed,
            failures,
            _step,
            window_start_ms,
            replays,
            trusted,
            repeat,
            consecutive,
            epoch,
            added,
        ] = reply[..]
        else {
            return Err(StoreError::Protocol(format!(
                "record_attempt returned {} values",
                reply.len()
            )));
        };
        let flag = |v: i64, name: &str| match v {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(StoreError::Protocol(format!("record_attempt {name}={other}"))),
        };
        let number = |v: i64, name: &str| {
            u64::try_from(v)
                .map_err(|_| StoreError::Protocol(format!("record_attempt: negative {name}")))
        };
        let allowed = flag(allowed, "allowed")?;
        Ok(Counted {
            allowed,
            // A replay and a repeat report no new consecutive failure: never the ceiling.
            reached_ceiling: added == 1
                && u64::try_from(consecutive).is_ok_and(|c| policy.at_ceiling(c)),
            // A replay reports failures = -1: never a lockout.
            locked_now: u64::try_from(failures).is_ok_and(|f| policy.locks_at(f)),
            failures: u64::try_from(failures).unwrap_or(0),
            window_start_ms: number(window_start_ms, "window start")?,
            epoch: number(epoch, "device epoch")?,
            consecutive_added: flag(added, "added")?,
            replays: number(replays, "replay count")?,
            trusted: flag(trusted, "trusted")? && attempt.device.is_some(),
            // 1: forgiven without a comparison; 2: a repeat to compare (record_attempt.lua).
            repeat: matches!(repeat, 1 | 2) && attempt.repeat.is_some(),
            recheck: match repeat {
                0 | 1 => false,
                2 => attempt.repeat.is_some(),
                other => {
                    return Err(StoreError::Protocol(format!("record_attempt repeat={other}")));
                }
            },
        })
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        window_start_ms: u64,
        allowed: bool,
    ) -> Result<(), StoreError> {
        let mut call = scripts::refund().key(key.record());
        if let Some(attempt_key) = attempt_id {
            call.key(attempt_key.as_str());
        }
        call.arg(window_start_ms).arg(u8::from(allowed));
        let _refunded: i64 = self.invoke(&call).await?;
        Ok(())
    }

    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError> {
        let call = scripts::clear().key(key.record());
        let _reply: Vec<i64> = self.invoke(&call).await?;
        Ok(())
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let mut call = scripts::clear().key(bucket.record());
        call.key(account.device_epoch()).arg(epoch_ttl_ms);
        let reply: Vec<i64> = self.invoke(&call).await?;
        match reply[..] {
            [_deleted, epoch] => u64::try_from(epoch)
                .map_err(|_| StoreError::Protocol("clear: negative device epoch".into())),
            _ => Err(StoreError::Protocol(format!("clear returned {} values", reply.len()))),
        }
    }

    /// One `attempt_count/inspect.lua` call (read only).
    async fn inspect(&self, key: &AccountKey) -> Result<Inspection, StoreError> {
        let call = scripts::inspect().key(key.record());
        let reply: Vec<i64> = self.invoke(&call).await?;
        let [exists, failures, window_start_ms, step, now_ms, repeats, consecutive, locked_until] =
            reply[..]
        else {
            return Err(StoreError::Protocol(format!("inspect returned {} values", reply.len())));
        };
        let field = |v: i64, name: &str| {
            u64::try_from(v).map_err(|_| StoreError::Protocol(format!("inspect: negative {name}")))
        };
        let record = match exists {
            0 => None,
            1 => Some(Record {
                failures: field(failures, "failures")?,
                window_start_ms: field(window_start_ms, "window start")?,
                step: u32::try_from(step)
                    .map_err(|_| StoreError::Protocol("inspect: step out of range".into()))?,
                repeats: field(repeats, "repeats")?,
                consecutive: field(consecutive, "consecutive")?,
                locked_until_ms: field(locked_until, "locked until")?,
            }),
            other => return Err(StoreError::Protocol(format!("inspect exists={other}"))),
        };
        Ok(Inspection { record, now_ms: field(now_ms, "time")? })
    }
}
