//! One attempt's turn at its client network's bucket (docs/throttle.md, "Per client
//! network"), and the signals every answer of a counted attempt carries.
//!
//! A token is *taken before* the comparison, sent in the same round trip as the count,
//! and *given back* when the attempt turns out to be no failed comparison (a closed
//! door, a replay, a refusal of the CPU budget, a sprayed password refused unhashed, a
//! match). Only a failed comparison keeps it spent, and because it was taken first,
//! concurrent attempts can never spend more than the bucket holds, on any number of
//! daemons.

use crate::defence::client_network::{NetworkAction, NetworkWatch};
use crate::realm::Realm;
use crate::store::Store;
use crate::store::attempt_count::Counted;
use crate::store::error::StoreError;
use crate::store::keys::{HeldKey, NetworkKey};
use crate::store::network_bucket::NetworkOp;
use crate::store::network_bucket::NetworkRequest;
use crate::store::realm_tally::TallyBuffer;
use crate::telemetry::realm_meters::StepUpReason;
use crate::throttle::candidate_report::{self, Defence};
use crate::throttle::network_bucket::BucketPolicy;
use crate::throttle::realm_tally::Distinct;

/// What every answer of a counted attempt carries besides its verdict (the wire's
/// `spray_suspected`, `step_up`, `network_throttled`, `lockout_started` and
/// `ceiling_reached`). None of them depends on whether the account exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    /// The password's fingerprint is being sprayed across the realm (docs/spray.md).
    pub spray_suspected: bool,
    /// Challenge the client before its next attempt: the account's window holds
    /// `step_up_failures`, or `network_throttled`.
    pub step_up: bool,
    /// The client's network has no token left and the realm flags rather than rejects.
    pub network_throttled: bool,
    /// This attempt was the first its record refused in the window: it started a
    /// lockout ([`Counted::locked_now`]). For the gateway, which may tell the owner
    /// (docs/gateways.md, "When an attempt shuts the door"); never for the end user.
    pub lockout_started: bool,
    /// This attempt brought its record to the consecutive-failure ceiling
    /// ([`Counted::reached_ceiling`]; docs/throttle.md, "The ceiling").
    pub ceiling_reached: bool,
}

impl Signals {
    /// These signals with what `counted` did to its record's door: a lockout started, the
    /// ceiling reached. A replay of an `attempt_id` did neither (its first call did).
    #[must_use]
    pub fn with_door(self, counted: &Counted) -> Self {
        Self {
            lockout_started: counted.locked_now,
            ceiling_reached: counted.reached_ceiling,
            ..self
        }
    }
}

/// The signals of an answer: `failures` in the window after this attempt (0 after an
/// accept, which cleared it), and whether the network is throttled in a `flag` realm.
/// Meters each step-up by reason.
pub fn signals(realm: &Realm, spray_suspected: bool, failures: u64, flagged: bool) -> Signals {
    let near_lockout = realm.step_up_failures.is_some_and(|n| failures >= u64::from(n));
    if near_lockout {
        realm.meters.step_up(StepUpReason::Account);
    }
    if flagged {
        realm.meters.step_up(StepUpReason::Network);
    }
    Signals {
        spray_suspected,
        step_up: near_lockout || flagged,
        network_throttled: flagged,
        ..Signals::default()
    }
}

/// The window's failures a counted call's signals are read from: as counted, except that
/// a door refused by the ceiling reads as a window used up (`max_failures + 1`), so its
/// answer is every other closed door's, step-up signal included (docs/throttle.md, "The
/// ceiling": one uniform deny).
pub fn signal_failures(realm: &Realm, counted: &Counted) -> u64 {
    if counted.allowed || counted.replays > 0 {
        return counted.failures;
    }
    counted.failures.max(u64::from(realm.policy.max_failures) + 1)
}

/// What the bucket said to one attempt.
pub struct Turn {
    /// The bucket; `None`: this attempt is not throttled by network (no client key, a
    /// trusted network, a valid device token).
    key: Option<NetworkKey>,
    /// A token was taken and is held until the attempt's outcome is known.
    taken: bool,
    /// `RecordAttempt`'s turn: the token is noted as held by the account
    /// ([`NetworkKey::held_by`]), for a later `ClearAttempts` to give back.
    held: Option<HeldKey>,
    /// Whether the realm's candidate bucket took a token for this attempt, and holds it
    /// (docs/throttle.md, "Trying a policy in shadow"); `None`: no candidate for the
    /// network, or no turn.
    shadow: Option<bool>,
}

/// The realm's candidate bucket for its client networks, if it tries one.
fn candidate_bucket(realm: &Realm) -> Option<&BucketPolicy> {
    realm.candidate.as_ref().and_then(|c| c.network.as_ref())
}

impl Turn {
    /// An attempt the network throttle does not apply to.
    pub fn exempt() -> Self {
        Self { key: None, taken: false, held: None, shadow: None }
    }

    /// Takes a token of `key`'s bucket (nothing when `key` is `None`).
    ///
    /// # Errors
    /// The store's error: the attempt is then denied (fail closed).
    pub async fn take(
        store: &dyn Store,
        realm: &Realm,
        key: Option<NetworkKey>,
    ) -> Result<Self, StoreError> {
        Self::take_held(store, realm, key, None).await
    }

    /// As [`Turn::take`], noting a token taken as held by `held` (`RecordAttempt`'s
    /// account), in the same store operation: only what is noted there can be given
    /// back by [`give_held_back`]. The realm's candidate bucket is tried in the same
    /// operation.
    ///
    /// # Errors
    /// The store's error: the attempt is then denied (fail closed).
    pub async fn take_held(
        store: &dyn Store,
        realm: &Realm,
        key: Option<NetworkKey>,
        held: Option<HeldKey>,
    ) -> Result<Self, StoreError> {
        let Some(key) = key else { return Ok(Self::exempt()) };
        let state = store
            .network(&NetworkRequest {
                key: &key,
                op: NetworkOp::Take,
                policy: &realm.network.bucket,
                held: held.as_ref(),
                candidate: candidate_bucket(realm),
            })
            .await?;
        Ok(Self { key: Some(key), taken: state.taken, held, shadow: state.shadow })
    }

    /// The bucket had no token: the network is throttled.
    pub fn throttled(&self) -> bool {
        self.key.is_some() && !self.taken
    }

    /// Notes what the realm's candidate bucket did beside the enforced one in its
    /// report (`would_refuse`, `would_allow` of the network), then a throttled attempt in
    /// the watch (its episode, its metric) and the realm's status, and answers whether
    /// the realm refuses it (`reject`) rather than flags it.
    pub fn refuses(&self, realm: &Realm, watch: &NetworkWatch, tally: &TallyBuffer) -> bool {
        if let (Some(shadow), Some(candidate)) = (self.shadow, &realm.candidate) {
            for outcome in candidate_report::outcomes(self.taken, shadow, (false, false)) {
                tally.candidate(&realm.name, &candidate.id, Defence::Network, outcome);
            }
        }
        let Some(key) = self.key.as_ref().filter(|_| !self.taken) else { return false };
        watch.throttled(&realm.name, key, &realm.network);
        tally.distinct(&realm.name, Distinct::Networks, key.tag());
        realm.network.action == NetworkAction::Reject
    }

    /// Whether the answer carries `network_throttled`: throttled in a `flag` realm.
    pub fn flagged(&self, realm: &Realm) -> bool {
        self.throttled() && realm.network.action == NetworkAction::Flag
    }

    /// The enforced bucket took a token for the attempt and the candidate's refused it:
    /// if the attempt is the right password, a real user the candidate would have shut
    /// out (the network's `users_locked_out`).
    pub fn candidate_refused(&self) -> bool {
        self.taken && self.shadow == Some(false)
    }

    /// Gives the token back: the attempt was no failed comparison. Nothing when none
    /// was taken. The candidate's bucket gets back what it took for the attempt (with
    /// a held count, what the count says); when only the candidate's took one, only
    /// it, and only without a held count (with one, the enforced count of the account
    /// may hold other attempts' tokens: the candidate's stays spent, the safe side).
    ///
    /// # Errors
    /// The store's error (the caller denies; the token stays spent, the safe side).
    pub async fn give_back(&mut self, store: &dyn Store, realm: &Realm) -> Result<(), StoreError> {
        let Some(key) = self.key.as_ref() else { return Ok(()) };
        let shadow_took = self.shadow == Some(true);
        let (op, candidate) = match (self.taken, shadow_took, &self.held) {
            // With a held count: this attempt's own part, not another attempt's.
            (true, candidate_took, Some(_)) => {
                (NetworkOp::GiveOwn { candidate_took }, candidate_bucket(realm))
            }
            (true, true, None) => (NetworkOp::GiveBack, candidate_bucket(realm)),
            (true, false, None) => (NetworkOp::GiveBack, None),
            (false, true, None) => (NetworkOp::GiveShadow, candidate_bucket(realm)),
            (false, _, _) => return Ok(()),
        };
        let policy = &realm.network.bucket;
        let held = self.held.as_ref();
        store.network(&NetworkRequest { key, op, policy, held, candidate }).await?;
        self.taken = false;
        self.shadow = self.shadow.map(|_| false);
        Ok(())
    }
}

/// Gives back one token of `key`'s bucket that a `RecordAttempt` of the account (`held`)
/// took and still holds; nothing when it holds none (its attempt was denied, a replay,
/// or already given back). One store operation: the count and the bucket change
/// together, the realm's candidate bucket with them. Answers whether the token given
/// back was one the candidate's bucket had refused (the network's cue for a real user
/// the candidate would have shut out).
///
/// # Errors
/// The store's error (the caller answers `UNAVAILABLE`; the token stays spent).
pub async fn give_held_back(
    store: &dyn Store,
    realm: &Realm,
    key: &NetworkKey,
    held: &HeldKey,
) -> Result<bool, StoreError> {
    let state = store
        .network(&NetworkRequest {
            key,
            op: NetworkOp::GiveBack,
            policy: &realm.network.bucket,
            held: Some(held),
            candidate: candidate_bucket(realm),
        })
        .await?;
    Ok(state.shadow == Some(true))
}
