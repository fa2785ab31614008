//! Realms: named sets of end users with their own login rules (Keycloak's term).

use std::collections::BTreeMap;

use crate::normalize::Normalization;
use crate::throttle::Policy;
use crate::verify::hash::HashParams;

/// One configured realm, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Realm {
    /// The configured name, as gateways send it in `Account.realm`.
    pub name: String,
    /// Throttle settings.
    pub policy: Policy,
    /// How identifiers are normalized; must match the realm's account lookup.
    pub normalization: Normalization,
    /// Hash algorithm and parameters new hashes should use: the dummy hash's, and the
    /// bar below which an accepted hash gets `needs_rehash`.
    pub hash_target: HashParams,
    /// How long a device token is valid after its issue (`docs/devices.md`).
    pub device_token_ttl: std::time::Duration,
    /// Password-spray detection (`docs/spray.md`).
    pub spray: crate::spray::SprayPolicy,
}

impl Realm {
    /// How long a device revocation is remembered after an attempt or a revocation, in
    /// ms: `device_token_ttl` plus the clock skew a token check allows, so it outlives
    /// every token issued before it ([`crate::store::Attempt::device_epoch_ttl_ms`]).
    pub fn device_epoch_ttl_ms(&self) -> u64 {
        crate::throttle::duration_ms(self.device_token_ttl + crate::devices::MAX_CLOCK_SKEW)
    }
}

/// All configured realms, looked up by exact name.
#[derive(Debug, Clone, Default)]
pub struct Realms(BTreeMap<String, Realm>);

impl Realms {
    /// Builds the table; names are unique by construction of the config map.
    pub fn new(realms: impl IntoIterator<Item = Realm>) -> Self {
        Self(realms.into_iter().map(|r| (r.name.clone(), r)).collect())
    }

    /// The realm named `name`, or `None` for an unknown realm.
    pub fn get(&self, name: &str) -> Option<&Realm> {
        self.0.get(name)
    }

    /// Every realm, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Realm> {
        self.0.values()
    }
}
