//! The Redis side of the reads and settlements of one account's records beside the
//! count: the operator's `Inspect` (`inspect.lua`) and `ConfirmDevice`'s one step
//! (`confirm_device.lua`), each in the account's hash tag (one slot on a cluster).

use super::{RedisStore, scripts};
use crate::store::keys::AccountKey;
use crate::store::{Confirmation, DeviceConfirmation, Inspection, StoreError};
use crate::throttle::Record;
use crate::throttle::flow::Flow;

impl RedisStore {
    /// [`crate::store::Store::confirm_device`] on Redis: one `confirm_device.lua` call,
    /// waiting for `store.wait_replicas` as a counted attempt does (it grants trust).
    pub(super) async fn confirm_device_op(
        &self,
        c: &DeviceConfirmation<'_>,
    ) -> Result<Confirmation, StoreError> {
        let mut call = scripts::confirm_device().key(c.account.record());
        call.key(c.account.flow(Flow::SecondFactor).record())
            .key(c.account.device_epoch())
            .key(c.challenge.record());
        let p = c.second_factor;
        call.arg(c.challenge_epoch)
            .arg(p.max_failures)
            .arg(p.window_ms(0))
            .arg(p.window_ms(p.max_step()))
            .arg(p.max_consecutive_failures)
            .arg(c.mark_ttl_ms)
            .arg(c.epoch_ttl_ms);
        let reply: Vec<i64> = self.invoke_counted(&call).await?;
        match reply[..] {
            [1, epoch] => u64::try_from(epoch)
                .map(|epoch| Confirmation::Confirmed { epoch })
                .map_err(|_| StoreError::Protocol("confirm_device: negative epoch".into())),
            [0, 1] => Ok(Confirmation::Revoked),
            [0, 2] => Ok(Confirmation::CodeStepShut),
            [0, 3] => Ok(Confirmation::Used),
            _ => Err(StoreError::Protocol(format!("confirm_device returned {reply:?}"))),
        }
    }

    /// [`crate::store::Store::inspect`] on Redis: one `inspect.lua` call (read only).
    pub(super) async fn inspect_op(&self, key: &AccountKey) -> Result<Inspection, StoreError> {
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
