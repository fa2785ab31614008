//! `ConfirmDevice` in the embedded store (`confirm_device.lua` on Redis): a challenge's
//! epoch, the code step's door, its one use, then both clears, in the writer's one
//! transaction.

use super::entry::Entry;
use super::writer::{Op, Tables};
use crate::store::{Confirmation, StoreError};
use crate::throttle;

impl Tables<'_, '_> {
    /// `confirm_device.lua`: the epoch the challenge was issued under, the code step's
    /// door, the challenge's one use, then both clears; a refusal writes nothing.
    pub(super) fn confirm(&mut self, op: &Op) -> Result<Confirmation, StoreError> {
        let Op::Confirm {
            record,
            second_factor,
            epoch_key,
            mark,
            challenge_epoch,
            policy,
            mark_ttl_ms,
            epoch_ttl_ms,
        } = op
        else {
            return Err(StoreError::Protocol("not a confirmation".into()));
        };
        let epoch = self.epoch(epoch_key)?;
        if epoch != *challenge_epoch {
            return Ok(Confirmation::Revoked);
        }
        if !throttle::attempt_count::is_open(policy, self.record(second_factor)?.as_ref(), self.now) {
            return Ok(Confirmation::CodeStepShut);
        }
        match self.get(mark)? {
            Some(Entry::Used { .. }) => return Ok(Confirmation::Used),
            Some(_) => return Err(StoreError::Protocol("a mark key holds another entry".into())),
            None => {}
        }
        self.put(mark, Entry::Used { expires_ms: self.now + mark_ttl_ms })?;
        self.remove(record)?;
        self.remove(second_factor)?;
        if epoch > 0 {
            self.put(epoch_key, Entry::Epoch { epoch, expires_ms: self.now + epoch_ttl_ms })?;
        }
        Ok(Confirmation::Confirmed { epoch })
    }
}
