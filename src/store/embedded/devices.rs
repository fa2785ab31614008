//! Known devices in the embedded store (`lua/devices/` on Redis): a revocation raises
//! the account's device epoch, and `ConfirmDevice` checks a challenge's epoch, the code
//! step's door and its one use, then clears both records, in one operation of the
//! writer's batch; a refusal writes nothing.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::devices::{Confirmation, DeviceConfirmation, DeviceStore};
use crate::store::error::StoreError;
use crate::store::keys::AccountKey;
use crate::throttle::{self, Policy};

#[async_trait]
impl DeviceStore for EmbeddedStore {
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        let epoch_key = key.device_epoch();
        self.submit(true, move |t| {
            let epoch = t.epoch(&epoch_key)? + 1;
            t.put(&epoch_key, Entry::Epoch { epoch, expires_ms: t.now + ttl_ms })?;
            Ok(epoch)
        })
        .await
    }

    async fn confirm_device(&self, c: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
        let second_factor = c.account.flow(crate::throttle::flow::Flow::SecondFactor);
        let confirm = Confirm {
            record: c.account.record(),
            candidate: c.account.candidate_record(),
            second_factor: second_factor.record(),
            second_factor_candidate: second_factor.candidate_record(),
            epoch_key: c.account.device_epoch(),
            mark: c.challenge.record(),
            challenge_epoch: c.challenge_epoch,
            policy: *c.second_factor,
            mark_ttl_ms: c.mark_ttl_ms,
            epoch_ttl_ms: c.epoch_ttl_ms,
        };
        self.submit(true, move |t| confirm.apply(t)).await
    }
}

/// One `ConfirmDevice` to settle, owned by its job.
struct Confirm {
    record: String,
    /// The account record's candidate record, deleted with it.
    candidate: Option<String>,
    second_factor: String,
    /// The `second_factor` record's candidate record, deleted with it.
    second_factor_candidate: Option<String>,
    epoch_key: String,
    mark: String,
    challenge_epoch: u64,
    policy: Policy,
    mark_ttl_ms: u64,
    epoch_ttl_ms: u64,
}

impl Confirm {
    /// `confirm_device.lua`: the epoch the challenge was issued under, the code step's
    /// door, the challenge's one use, then both clears; a refusal writes nothing.
    fn apply(&self, t: &mut Tables<'_, '_>) -> Result<Confirmation, StoreError> {
        let Confirm {
            record,
            candidate,
            second_factor,
            second_factor_candidate,
            epoch_key,
            mark,
            challenge_epoch,
            policy,
            mark_ttl_ms,
            epoch_ttl_ms,
        } = self;
        let epoch = t.epoch(epoch_key)?;
        if epoch != *challenge_epoch {
            return Ok(Confirmation::Revoked);
        }
        if !throttle::attempt_count::is_open(policy, t.record(second_factor)?.as_ref(), t.now) {
            return Ok(Confirmation::CodeStepShut);
        }
        match t.get(mark)? {
            Some(Entry::Used { .. }) => return Ok(Confirmation::Used),
            Some(_) => return Err(StoreError::Protocol("a mark key holds another entry".into())),
            None => {}
        }
        t.put(mark, Entry::Used { expires_ms: t.now + mark_ttl_ms })?;
        t.remove(record)?;
        t.remove(second_factor)?;
        let mut code_candidate_refused = false;
        if let Some(c) = second_factor_candidate {
            code_candidate_refused = super::candidate_report::forget_candidate(t, c)?;
        }
        if let Some(c) = candidate {
            super::candidate_report::forget_candidate(t, c)?;
        }
        if epoch > 0 {
            t.put(epoch_key, Entry::Epoch { epoch, expires_ms: t.now + epoch_ttl_ms })?;
        }
        Ok(Confirmation::Confirmed { epoch, code_candidate_refused })
    }
}
