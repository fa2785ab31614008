//! Known devices' store side (docs/devices.md): the account's device epoch (raised by
//! a revocation) and a challenge's one use, settled with the login's records in one
//! atomic step (`lua/devices/` on Redis, `embedded/devices.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::AccountKey;
use crate::throttle::Policy;

/// One `ConfirmDevice` to settle ([`DeviceStore::confirm_device`]; docs/devices.md, "Step-up
/// for unknown devices").
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfirmation<'a> {
    /// The account: its login record (cleared), its `second_factor` record (read, then
    /// cleared) and its device epoch (read).
    pub account: &'a AccountKey,
    /// The challenge's one-use mark ([`AccountKey::challenge`]).
    pub challenge: &'a AccountKey,
    /// The device epoch the challenge was issued under.
    pub challenge_epoch: u64,
    /// The realm's `second_factor` throttle: while its door is shut, no device is
    /// confirmed.
    pub second_factor: &'a Policy,
    /// How long the one-use mark is kept, in ms: the challenge's lifetime plus clock
    /// skew.
    pub mark_ttl_ms: u64,
    /// How long an existing device epoch is kept from now, in ms (the new token's
    /// `device_token_ttl` plus clock skew).
    pub epoch_ttl_ms: u64,
}

/// What [`DeviceStore::confirm_device`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// Confirmed: the challenge is used up, the account's login and `second_factor`
    /// records are cleared; the device token is issued under this epoch.
    Confirmed {
        /// The account's device epoch.
        epoch: u64,
        /// The `second_factor` record's candidate record said its last code was one the
        /// enforced policy allowed and the realm's candidate would have refused: the code
        /// was right, so a real user the candidate would have shut out (docs/throttle.md,
        /// "Trying a policy in shadow").
        code_candidate_refused: bool,
    },
    /// The account's devices were revoked after the challenge was issued.
    Revoked,
    /// The account's code step is shut (its `second_factor` door refuses the next code).
    CodeStepShut,
    /// The challenge confirmed a device already.
    Used,
}

/// Device epochs and challenges on a store.
#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// `Admin/RevokeDevices`: raises the account's device epoch, so no device token
    /// issued before is trusted again (docs/devices.md, "Revocation"); the epoch is
    /// remembered for at least `ttl_ms` (the realm's `device_token_ttl` plus clock skew).
    /// Answers the new epoch.
    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError>;

    /// `ConfirmDevice`, in one atomic step: the challenge confirms only under the epoch
    /// it was issued under, while the account's code step is open, and once; then the
    /// account's login record and `second_factor` record (with its candidate record,
    /// [`AccountKey::candidate_record`]) are deleted together. A refusal writes nothing.
    async fn confirm_device(
        &self,
        confirmation: &DeviceConfirmation<'_>,
    ) -> Result<Confirmation, StoreError>;
}
