//! What the operators' calls do to the store (docs/security.md, the Admin service), in
//! domain types: what `Unlock` clears for each reason, what `RevokeDevices` raises, and a
//! client network's bucket as `InspectNetwork` reads it and `ReleaseNetwork` fills it, and
//! a realm's status as `RealmStatus` reads it. `crate::rpc::admin` only translates: it
//! validates the request, calls one of these, logs the use for the audit and builds the
//! answer. Every store failure is the caller's `StoreError` (a deny: the operator sees
//! `UNAVAILABLE`), never a partial answer.

use crate::defence::client_network::NetworkPolicy;
use crate::realm::Realm;
use crate::secret::KeySecret;
use crate::store::Store;
use crate::store::candidate_report::CandidateCounts;
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, NetworkKey};
use crate::store::keys::{CandidateKey, TallyKey};
use crate::store::network_bucket::{NetworkOp, NetworkRequest, NetworkState};
use crate::store::realm_tally::{TallyLookbacks, TallyReading};
use crate::throttle::candidate_report::Defence;
use crate::throttle::flow::Flow;
use crate::throttle::realm_tally::{SLOTS, lookback_slots};

/// Why an operator unlocks an account (the wire's `UnlockReason`; a request without one
/// is refused before it gets here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlockReason {
    /// The owner proved who they are out of band: only the count is cleared.
    OwnerVerified,
    /// An attack on the account was stopped: the count is cleared and every device
    /// token is revoked, since the attacker may have got one (docs/devices.md).
    AttackMitigated,
    /// Any other reason: only the count is cleared.
    Other,
}

/// What an [`unlock`] cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// One flow's record only; the login's record and the devices are as they were.
    Flow(Flow),
    /// The account's login record, and with [`UnlockReason::AttackMitigated`] its
    /// device tokens (`devices_revoked`).
    Account {
        /// Every device token of the account was revoked too.
        devices_revoked: bool,
    },
}

/// `Admin/Unlock`: clears `flow`'s record of the account, or (no flow) its login
/// record, revoking its devices when the reason is a mitigated attack.
///
/// # Errors
/// The store's error; a revocation that fails after the clear leaves the account
/// cleared and its devices trusted, and the operator, answered `UNAVAILABLE`, runs the
/// unlock again.
pub async fn unlock(
    store: &dyn Store,
    realm: &Realm,
    key: &AccountKey,
    flow: Option<Flow>,
    reason: UnlockReason,
) -> Result<Unlocked, StoreError> {
    if let Some(flow) = flow {
        store.clear(&key.flow(flow)).await?;
        return Ok(Unlocked::Flow(flow));
    }
    store.clear(key).await?;
    let devices_revoked = reason == UnlockReason::AttackMitigated;
    if devices_revoked {
        revoke_devices(store, realm, key).await?;
    }
    Ok(Unlocked::Account { devices_revoked })
}

/// `Admin/RevokeDevices`: no device token issued before now is trusted again; the
/// epoch is remembered as long as the realm's tokens live (docs/devices.md,
/// "Revocation"). Answers the new epoch.
///
/// # Errors
/// The store's error.
pub async fn revoke_devices(
    store: &dyn Store,
    realm: &Realm,
    key: &AccountKey,
) -> Result<u64, StoreError> {
    store.revoke_devices(key, realm.device_epoch_ttl_ms()).await
}

/// A client network as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkView {
    /// A network the realm trusts (`trusted_networks`): no bucket, never throttled.
    Trusted,
    /// The network's bucket, by its key (whose tag names it in logs and answers).
    Bucket(NetworkKey, NetworkState),
}

/// `Admin/InspectNetwork` (`NetworkOp::Peek`, writes nothing) or `Admin/ReleaseNetwork`
/// (`NetworkOp::Release`, fills the bucket, and the realm's candidate bucket of the
/// network with it) on the network of `client_key` in `realm`.
///
/// # Errors
/// The store's error.
pub async fn network(
    store: &dyn Store,
    secret: &KeySecret,
    realm: &Realm,
    client_key: &str,
    op: NetworkOp,
) -> Result<NetworkView, StoreError> {
    let policy: &NetworkPolicy = &realm.network;
    let Some(key) = policy.key(secret, &realm.name, client_key) else {
        return Ok(NetworkView::Trusted);
    };
    let candidate = realm.candidate.as_ref().and_then(|c| c.network.as_ref());
    let candidate = candidate.filter(|_| op == NetworkOp::Release);
    let request = NetworkRequest { key: &key, op, policy: &policy.bucket, held: None, candidate };
    let state = store.network(&request).await?;
    Ok(NetworkView::Bucket(key, state))
}

/// `Admin/RealmStatus`: `realm`'s tally as the store holds it (docs/observability.md,
/// "A realm's status"), each part over its look-back, and the look-backs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealmStatus {
    /// What the store read.
    pub reading: TallyReading,
    /// The look-backs it was read over, in minutes.
    pub lookbacks: TallyLookbacks,
}

/// Reads `realm`'s status from `store`: lockouts over the realm's `lockout_duration`,
/// throttled networks over one token's refill, sprayed fingerprints over the
/// `spray_period`, the rest over the hour (each in whole minutes, at most 60).
///
/// # Errors
/// The store's error.
pub async fn realm_status(
    store: &dyn Store,
    secret: &KeySecret,
    realm: &Realm,
) -> Result<RealmStatus, StoreError> {
    let spray_ms = crate::throttle::duration_ms(realm.spray.period);
    let lookbacks = TallyLookbacks {
        // Distinct::ALL's order: locked, ceiling, networks, spray, grace.
        distinct: [
            lookback_slots(realm.policy.lockout_ms()),
            SLOTS,
            lookback_slots(realm.network.bucket.interval_ms),
            lookback_slots(spray_ms),
            SLOTS,
        ],
        counts: SLOTS,
    };
    let key = TallyKey::new(secret, &realm.name);
    let reading = store.read_tallies(&key, &lookbacks).await?;
    Ok(RealmStatus { reading, lookbacks })
}

/// A realm's candidate policy and its report as the store holds it.
#[derive(Debug, Clone)]
pub struct CandidateReading {
    /// The candidate's id (16 hex digits).
    pub id: String,
    /// The defences it is tried in ([`crate::realm::Candidate::defences`]).
    pub defences: Vec<Defence>,
    /// Its report.
    pub report: CandidateCounts,
}

/// `Admin/CandidateReport`: the report of `realm`'s candidate policy as the store holds
/// it; `None` when the realm has no candidate.
///
/// # Errors
/// The store's error.
pub async fn candidate_report(
    store: &dyn Store,
    secret: &KeySecret,
    realm: &Realm,
) -> Result<Option<CandidateReading>, StoreError> {
    let Some(candidate) = &realm.candidate else { return Ok(None) };
    let key = CandidateKey::new(secret, &realm.name, &candidate.id);
    let report = store.read_report(&key).await?;
    Ok(Some(CandidateReading { id: candidate.id.clone(), defences: candidate.defences(), report }))
}
