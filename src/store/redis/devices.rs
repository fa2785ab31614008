//! Known devices on Redis: a revocation raises the account's device epoch
//! (`lua/devices/revoke_devices.lua`), and `ConfirmDevice` settles a challenge with the
//! login's records in one `lua/devices/confirm_device.lua` call, in the account's hash
//! tag (one slot on a cluster). Both wait for `store.wait_replicas` (they grant trust).

use async_trait::async_trait;

use super::{RedisStore, scripts};
use crate::store::StoreError;
use crate::store::devices::{Confirmation, DeviceConfirmation, DeviceStore};
use crate::store::keys::AccountKey;
use crate::throttle::flow::Flow;

#[async_trait]
impl DeviceStore for RedisStore {
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        let mut call = scripts::revoke_devices().key(key.device_epoch());
        call.arg(ttl_ms);
        let epoch: i64 = self.invoke_counted(&call).await?;
        u64::try_from(epoch)
            .map_err(|_| StoreError::Protocol("revoke_devices: negative epoch".into()))
    }

    /// One `devices/confirm_device.lua` call, waiting for `store.wait_replicas` as a
    /// counted attempt does (it grants trust).
    async fn confirm_device(&self, c: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
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
}
