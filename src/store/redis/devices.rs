//! Known devices on Redis: a revocation raises the account's device epoch
//! (`lua/devices/revoke_devices.lua`), and `ConfirmDevice` settles a challenge with the
//! login's records in one `lua/devices/confirm_device.lua` call, in the account's hash
//! tag (one slot on a cluster). Both wait for `store.wait_replicas` (they grant trust).

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::{confirm_device, revoke_devices};
use crate::store::devices::{Confirmation, DeviceConfirmation, DeviceStore};
use crate::store::error::StoreError;
use crate::store::keys::AccountKey;
use crate::throttle::flow::Flow;

#[async_trait]
impl DeviceStore for RedisStore {
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        let keys = revoke_devices::Keys { device_epoch: key.device_epoch() };
        let call = revoke_devices::call(&keys, &revoke_devices::Args { ttl_ms });
        let epoch = revoke_devices::Reply::parse(&[self.invoke_counted(&call).await?])?.epoch;
        u64::try_from(epoch)
            .map_err(|_| StoreError::Protocol("revoke_devices: negative epoch".into()))
    }

    /// One `devices/confirm_device.lua` call, waiting for `store.wait_replicas` as a
    /// counted attempt does (it grants trust).
    async fn confirm_device(&self, c: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
        let second_factor = c.account.flow(Flow::SecondFactor);
        let keys = confirm_device::Keys {
            record: c.account.record(),
            second_factor: second_factor.record(),
            device_epoch: c.account.device_epoch(),
            mark: c.challenge.record(),
            // A flow key always has one (`AccountKey::candidate_record`).
            second_factor_candidate: second_factor.candidate_record().unwrap_or_default(),
            // The account's own always has one too.
            candidate: c.account.candidate_record().unwrap_or_default(),
        };
        let p = c.second_factor;
        let args = confirm_device::Args {
            challenge_epoch: c.challenge_epoch,
            max_failures: p.max_failures,
            first_window_ms: p.window_ms(0),
            max_window_ms: p.window_ms(p.max_step()),
            max_consecutive: p.max_consecutive_failures,
            mark_ttl_ms: c.mark_ttl_ms,
            epoch_ttl_ms: c.epoch_ttl_ms,
        };
        let reply: Vec<i64> = self.invoke_counted(&confirm_device::call(&keys, &args)).await?;
        let confirm_device::Reply { confirmed, detail, code_candidate_refused } =
            confirm_device::Reply::parse(&reply)?;
        match (confirmed, detail, code_candidate_refused) {
            (1, epoch, refused @ (0 | 1)) => u64::try_from(epoch)
                .map(|epoch| Confirmation::Confirmed {
                    epoch,
                    code_candidate_refused: refused == 1,
                })
                .map_err(|_| StoreError::Protocol("confirm_device: negative epoch".into())),
            (0, 1, 0) => Ok(Confirmation::Revoked),
            (0, 2, 0) => Ok(Confirmation::CodeStepShut),
            (0, 3, 0) => Ok(Confirmation::Used),
            _ => Err(StoreError::Protocol(format!("confirm_device returned {reply:?}"))),
        }
    }
}
