//! `RecordAttempt` and `ClearAttempts` for gateways that compare hashes themselves,
//! with the throttle per client network: `RecordAttempt` with a `client_key` takes the
//! network's token as `Verify` does, before the gateway compares, noted in the store as
//! held by the account; `ClearAttempts` with reason `PASSWORD_VERIFIED` and the same
//! `client_key` gives back a token so held (the comparison matched), and nothing when
//! none is (the attempt was denied, or its token already given back). A gateway that
//! sends no `client_key` gets no network throttle.

use super::note_right_password;
use super::signals::{Turn, give_held_back, signal_failures, signals};
use super::{Clearing, Logins, MAX_REPLAYS, Recorded, note_ceiling, note_count};
use crate::realm::Realm;
use crate::store::attempt_count::Attempt;
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey};
use crate::throttle::candidate_report::Defence;
use crate::throttle::flow::Flow;

impl Logins {
    /// Counts one attempt of a gateway that hashes itself, and, with a `client_key`,
    /// takes a token of its network's bucket in the same round trip. A throttled
    /// network in a `reject` realm is denied and the account's count given back; a
    /// closed door, a replay or a deny gives the token back (the gateway compares
    /// nothing).
    ///
    /// # Errors
    /// The store's error (the caller denies).
    pub async fn record_attempt(
        &self,
        realm: &Realm,
        key: &AccountKey,
        attempt: Option<&AttemptKey>,
        client_key: &str,
    ) -> Result<Recorded, StoreError> {
        let store = self.store.as_ref();
        let network = realm.network.key(&self.secret, &realm.name, client_key);
        let held = network.as_ref().map(|n| n.held_by(key));
        let counting = Attempt::new(key, attempt, &realm.policy)
            .from_network(network.as_ref())
            .with_candidate(realm.candidate.as_ref().map(|c| &c.policy));
        let (counted, turn) =
            tokio::join!(store.count(&counting), Turn::take_held(store, realm, network, held),);
        let counted = counted?;
        let mut turn = turn?;
        if turn.refuses(realm, &self.network_watch, &self.tally) {
            // Only a count this call added: a replay's first call counted, and giving
            // it back here would erase a failure that call paid for.
            if counted.added() {
                store
                    .refund(
                        key,
                        attempt,
                        (counted.window_start_ms, counted.consecutive_added),
                        counted.shadow.as_ref(),
                    )
                    .await?;
            }
            let failures = counted.failures_without_this();
            return Ok(Recorded {
                allowed: false,
                signals: signals(realm, false, failures, false),
            });
        }
        let allowed = counted.allowed && counted.replays <= MAX_REPLAYS;
        note_count(realm, &self.tally, key, &counted, (allowed, true));
        // The gateway compares the password itself: the ceiling is noted as counted.
        if counted.reached_ceiling {
            note_ceiling(realm, &self.tally, key);
        }
        // A replay is no new attempt, and a deny leaves nothing to compare.
        if !allowed || counted.replays > 0 {
            turn.give_back(store, realm).await?;
        }
        let failures = signal_failures(realm, &counted);
        let signals = signals(realm, false, failures, turn.flagged(realm)).with_door(&counted);
        Ok(Recorded { allowed, signals })
    }

    /// `ClearAttempts`: deletes the record. [`Clearing::Verified`] with a client key (the
    /// `client_key` of a `RecordAttempt` whose password matched) gives back its
    /// network's token in the same round trip, only when a `RecordAttempt` of this
    /// account from that network took one and holds it still (a denied attempt took
    /// none). [`Clearing::ResetCompleted`] also clears the account's code flows'
    /// records (`second_factor`, `recovery_code`): the owner proved the mailbox, and a
    /// code step shut at its ceiling opens again (docs/throttle.md, "The ceiling").
    ///
    /// # Errors
    /// The store's error (the caller answers `UNAVAILABLE`).
    pub async fn clear(
        &self,
        realm: &Realm,
        key: &AccountKey,
        clearing: Clearing<'_>,
    ) -> Result<(), StoreError> {
        let store = self.store.as_ref();
        let verified_from = match clearing {
            Clearing::Verified(from) => from,
            Clearing::ResetCompleted => None,
        };
        let codes = async {
            if clearing != Clearing::ResetCompleted {
                return Ok(());
            }
            let (codes, backups) = (key.flow(Flow::SecondFactor), key.flow(Flow::RecoveryCode));
            let (second_factor, recovery_code) =
                tokio::join!(store.clear(&codes), store.clear(&backups));
            second_factor.and(recovery_code).map(drop)
        };
        let network = verified_from.and_then(|c| realm.network.key(&self.secret, &realm.name, c));
        let give_back = async {
            match &network {
                Some(n) => give_held_back(store, realm, n, &n.held_by(key)).await,
                None => Ok(false),
            }
        };
        let (cleared, given, codes) = tokio::join!(store.clear(key), give_back, codes);
        // The password verified after an attempt the candidate would have refused: a
        // real user it would have locked out (on the account's record, or at its
        // network's bucket).
        let (verified, cleared, given) =
            (matches!(clearing, Clearing::Verified(_)), cleared?, given?);
        note_right_password(realm, &self.tally, Defence::Login, verified && cleared);
        note_right_password(realm, &self.tally, Defence::Network, verified && given);
        codes
    }
}
