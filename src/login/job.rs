//! One `Verify` after its reservation in the CPU budget, in its own task (the order of
//! work in the module docs of [`crate::login`]).

use std::sync::Arc;

use super::signals::{Turn, signals};
use super::{LoginError, LoginRequest, LoginVerdict, note_count};
use crate::defence::breach::BreachList;
use crate::defence::devices::{DeviceTokens, Grant, KnownDevice};
use crate::defence::client_network::NetworkWatch;
use crate::realm::Realm;
use crate::defence::spray::{SprayAction, SprayWatch};
use crate::store::keys::{AccountKey, AttemptKey, NetworkKey, RepeatKey, SprayKey};
use crate::store::{Attempt, Counted, DeviceClaim, RepeatClaim, SprayNote, Store, StoreError};
use crate::telemetry::metrics::{BREACHED_ACCEPTS, REPEATS};

/// One login after its reservation, in its own task.
pub(super) struct Job {
    pub(super) store: Arc<dyn Store>,
    pub(super) devices: DeviceTokens,
    /// Where the password's fingerprint is counted (docs/spray.md).
    pub(super) spray: SprayKey,
    pub(super) spray_watch: Arc<SprayWatch>,
    /// The client network's bucket; `None` for a client key that is never throttled.
    pub(super) network: Option<NetworkKey>,
    pub(super) network_watch: Arc<NetworkWatch>,
    /// Accepted passwords are looked up in it.
    pub(super) breach: Arc<BreachList>,
    /// The client's refused-password list and this password's fingerprint on it; `None`
    /// in a realm that counts every attempt.
    pub(super) repeat: Option<(RepeatKey, u64)>,
    /// The known device, when the token checked out for this account and stored hash:
    /// the attempt is counted (and refunded, and cleared) in its bucket instead of on
    /// the account's record, unless the store finds its epoch revoked.
    pub(super) device: Option<KnownDevice>,
    /// The place in the CPU budget, taken before counting. Its client slot is had
    /// before the count and kept until the job ends (after the clear).
    pub(super) ticket: crate::verify::budget::Ticket,
    pub(super) request: LoginRequest,
}

impl Job {
    pub(super) async fn run(self) -> Result<LoginVerdict, LoginError> {
        let Job {
            store,
            devices,
            spray,
            spray_watch,
            network,
            network_watch,
            breach,
            repeat,
            device,
            mut ticket,
            request,
        } = self;
        let LoginRequest {
            realm, key, password, comparison, stored_hash, attempt, deadline, ..
        } = request;
        let store = store.as_ref();
        // The client's turn first: its earlier call (the same browser's parallel login)
        // has then been counted, compared and cleared, so this count sees its clear. A
        // refusal here counted nothing, so there is nothing to refund.
        ticket.take_turn(deadline).await.map_err(LoginError::Refused)?;
        // Up to three commands sent at once, each on a pooled multiplexed connection (on
        // a cluster each to its own node): one round trip of latency. The spray check
        // only reads: an account is noted only after a real comparison failed (below),
        // so neither a closed door, a refund nor a short deadline notes anything, and no
        // answer depends on whether this account was counted before. A device token is
        // never throttled by its network, so it takes no token.
        let counting = Attempt {
            key: &key,
            device: device.as_ref().map(|d| DeviceClaim { bucket: &d.bucket, epoch: d.epoch }),
            attempt_id: attempt.as_ref(),
            policy: &realm.policy,
            device_epoch_ttl_ms: realm.device_epoch_ttl_ms(),
            repeat: repeat
                .as_ref()
                .map(|(list, fingerprint)| RepeatClaim { list, fingerprint: *fingerprint }),
        };
        let network_key = if device.is_some() { None } else { network.clone() };
        let (counted, sprayed, turn) = tokio::join!(
            store.count(&counting),
            store.note_spray(
                &spray,
                &key,
                SprayNote::Check,
                realm.spray.period_ms(),
                realm.spray.threshold
            ),
            Turn::take(store, &realm, network_key),
        );
        let counted = counted?;
        let suspected = spray_watch.observe(&realm.name, &spray, sprayed?, &realm.spray);
        let mut turn = turn?;
        // Where it was counted: the device's bucket, or (no token, or a revoked one) the
        // account's own record.
        let bucket = match &device {
            Some(known) if counted.trusted => &known.bucket,
            _ => &key,
        };
        if device.is_some() && !counted.trusted {
            // A revoked device is an untrusted client: its network pays (one more round
            // trip, on this rare path only), and it waits with the untrusted (a full
            // queue refuses it there, and its count is given back).
            turn = match Turn::take(store, &realm, network).await {
                Ok(turn) => turn,
                Err(e) => {
                    refund_if_added(store, bucket, attempt.as_ref(), &counted).await?;
                    return Err(e.into());
                }
            };
            if let Err(refusal) = ticket.demote() {
                turn.give_back(store, &realm).await?;
                refund_if_added(store, bucket, attempt.as_ref(), &counted).await?;
                return Err(LoginError::Refused(refusal));
            }
        }
        // A throttled network in a `reject` realm: refused before any hashing, and the
        // account's count given back (a blocked attempt is no guess at the account;
        // its network already paid for the guesses it made). Only a count this call
        // added: a replay or a repeat added none, and giving one back would erase a
        // failure an earlier call paid for.
        if turn.refuses(&realm, &network_watch) {
            refund_if_added(store, bucket, attempt.as_ref(), &counted).await?;
            // The account's step-up stands on what its window still holds.
            let failures = counted.failures_without_this();
            return Ok(LoginVerdict::Reject {
                signals: signals(&realm, suspected, failures, false),
            });
        }
        let flagged = turn.flagged(&realm);
        if counted.repeat {
            // A password this client was refused with, against this stored hash, in
            // this window: not counted. Forgiven unseen (the first match on its list
            // entry), it is not its network's failure either (the phone retrying an old
            // password must not throttle its own network): its token goes back on every
            // path below. A recheck is compared below and pays as any comparison.
            if !counted.recheck {
                metrics::counter!(REPEATS, "realm" => realm.name.clone()).increment(1);
            }
        } else {
            note_count(&realm, bucket, &counted, counted.allowed && counted.replays == 0);
        }
        let reject =
            LoginVerdict::Reject { signals: signals(&realm, suspected, counted.failures, flagged) };
        // A replayed attempt_id is rejected without a comparison: comparing again would be
        // a guess its first call's count does not cover (and after a lockout, a guess
        // behind a closed door), and refunding it would give back a count that paid for
        // a real comparison. The id's first call is the one that counted and compared.
        if !counted.allowed || counted.replays > 0 {
            turn.give_back(store, &realm).await?;
            return Ok(reject);
        }
        // The realm refuses comparisons of a sprayed password: no hashing, and the
        // attempt stays counted (it was a guess at the account, whoever made it).
        if suspected && realm.spray.action == SprayAction::Reject {
            turn.give_back(store, &realm).await?;
            return Ok(reject);
        }
        // A repeat is not compared again, once: the same password against the same
        // stored hash has one answer, which this client was given in this window. Only
        // this client (its network) on this account can meet its own list, so the saved
        // hash time tells it nothing it does not know (docs/throttle.md, "Repeated
        // passwords"). It is a failure from here on, as a new wrong password: the same
        // spray note, the same answer; its list entry was already marked forgiven and
        // moved first by the count, so it is not noted again (that would re-arm it).
        // A match on an entry already forgiven (a recheck) is compared below: a
        // truncated fingerprint may be the right password's, which must not be refused
        // unseen twice in a row.
        if counted.repeat && !counted.recheck {
            let (given, distinct) = tokio::join!(
                turn.give_back(store, &realm),
                note_failure(store, &spray, &key, bucket, None, &realm),
            );
            given?;
            spray_watch.noted(&realm.name, &spray, distinct?, &realm.spray);
            return Ok(reject);
        }
        let rpc = tracing::Span::current();
        // On a match only, the breach lookup, on the hashing thread while the password
        // is there: one SHA-1 and three memory reads, no store work.
        let compared = ticket
            .compare(deadline, move || {
                let outcome = comparison.run(&password, &rpc);
                let breached = outcome.matched && breach.is_breached(&password);
                (outcome, breached)
            })
            .await;
        let outcome = match compared {
            Err(refusal) => {
                // A recheck added no count: only its attempt_id is forgotten (a refund
                // in a window that never starts gives back nothing), so a retry is
                // compared afresh instead of replaying this refusal.
                let window = if counted.added() { counted.window_start_ms } else { NO_WINDOW };
                let (refunded, given) = tokio::join!(
                    store.refund(bucket, attempt.as_ref(), window),
                    turn.give_back(store, &realm),
                );
                refunded?;
                given?;
                return Err(LoginError::Refused(refusal));
            }
            Ok(outcome) => outcome?,
        };
        let (outcome, password_breached) = outcome;
        if outcome.matched {
            // The clear answers the account's device epoch, which the fresh token
            // carries. A token that cannot be made is an error (deny), never an accept
            // without it; the user logs in again. A login that succeeded is no failure
            // of its network: the token goes back in the same round trip.
            let (epoch, given) = tokio::join!(
                store.accept(bucket, &key, realm.device_epoch_ttl_ms()),
                turn.give_back(store, &realm),
            );
            let epoch = epoch?;
            given?;
            let grant = Grant { realm: &realm.name, account: &key, stored_hash: &stored_hash };
            let device_token = devices.issue(&grant, epoch).inspect_err(|e| {
                tracing::error!(realm = %realm.name, error = %e, "no device token");
            })?;
            if password_breached {
                metrics::counter!(BREACHED_ACCEPTS, "realm" => realm.name.clone()).increment(1);
            }
            return Ok(LoginVerdict::Accept {
                needs_rehash: outcome.needs_rehash,
                device_token,
                password_breached,
                signals: signals(&realm, suspected, 0, flagged),
            });
        }
        let distinct = note_failure(store, &spray, &key, bucket, repeat.as_ref(), &realm).await?;
        spray_watch.noted(&realm.name, &spray, distinct, &realm.spray);
        Ok(reject)
    }
}

/// A window start no record holds (above `crate::throttle::MAX_STORED_TIME_MS`): a
/// refund naming it gives back no failure and only forgets the attempt id.
const NO_WINDOW: u64 = u64::MAX;

/// Gives back the count this call added, if it added one ([`Counted::added`]).
async fn refund_if_added(
    store: &dyn Store,
    bucket: &AccountKey,
    attempt: Option<&AttemptKey>,
    counted: &Counted,
) -> Result<(), StoreError> {
    if counted.added() {
        store.refund(bucket, attempt, counted.window_start_ms).await?;
    }
    Ok(())
}

/// A failed comparison (or a forgiven repeat of one, with `repeat` `None`): the
/// password's spray note and, with `repeat`, its place first on this client's list of
/// refused passwords, not forgiven (re-armed), in one round trip. Answers the spray
/// note's count of distinct accounts. The spray note names the account, not the device
/// bucket: it counts distinct accounts. The network's token stays spent (a forgiven
/// repeat's was given back).
async fn note_failure(
    store: &dyn Store,
    spray: &SprayKey,
    account: &AccountKey,
    bucket: &AccountKey,
    repeat: Option<&(RepeatKey, u64)>,
    realm: &Realm,
) -> Result<u64, LoginError> {
    let note_repeat = async {
        match repeat {
            Some((list, fingerprint)) => {
                store.note_repeat(bucket, list, *fingerprint, realm.repeat.list_length).await
            }
            None => Ok(()),
        }
    };
    let (distinct, noted) = tokio::join!(
        store.note_spray(
            spray,
            account,
            SprayNote::Failure,
            realm.spray.period_ms(),
            realm.spray.threshold,
        ),
        note_repeat,
    );
    noted?;
    Ok(distinct?)
}
