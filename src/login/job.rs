//! One `Verify` after its reservation in the CPU budget, in its own task (the order of
//! work in the module docs of [`crate::login`]), phase by phase: the client's turn, the
//! count ([`Call::count`]), the checks before any hashing (a revoked device paying its
//! network, [`Call::revoked_device_pays`]; a throttled network; the closed door, a
//! replay or a sprayed password, [`Call::meter`]; a forgiven repeat, [`Call::forgive`]),
//! CPU admission and the comparison ([`compare`]), then the accept ([`Call::accept`]) or
//! the failure's notes ([`Call::fail`]).
//!
//! Every way out of a counted call goes through one step, [`Held::settle`] (its own
//! module, `settle`), which gives back what the call holds by the one rule of [`End`].

use std::sync::Arc;
use std::time::SystemTime;

use tracing::Instrument;
use zeroize::Zeroizing;

use super::settle::{End, Held};
use super::signals::{Turn, signal_failures, signals};
use super::{
    LoginError, LoginRequest, LoginVerdict, Logins, candidate_step_up, note_candidate_step_up,
    note_ceiling, note_count, note_right_password, note_verdict,
};
use crate::defence::breach::BreachList;
use crate::defence::client_network::NetworkWatch;
use crate::defence::devices::{DeviceTokens, Grant, IssueError, KnownDevice, UnknownDevice};
use crate::defence::spray::{SprayAction, SprayWatch};
use crate::realm::Realm;
use crate::store::Store;
use crate::store::attempt_count::{Attempt, DeviceClaim, RepeatClaim, network_tag};
use crate::store::breached_count::{BREACHED_COUNT_TTL_MS, BreachedNoteRequest};
use crate::store::keys::{AccountKey, AttemptKey, NetworkKey, RepeatKey, SprayKey};
use crate::store::realm_tally::TallyBuffer;
use crate::store::repeat_list::RepeatNoteRequest;
use crate::store::spray_window::{SprayNote, SprayNoteRequest};
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::metrics::{BREACHED_ACCEPTS, REPEATS, TRUSTED_CALLS};
use crate::throttle::breached_count;
use crate::throttle::candidate_report::Defence;
use crate::throttle::realm_tally::{Counter, Distinct};
use crate::verify::budget::{Aborted, Lane, Refusal, Ticket};
use crate::verify::{Comparison, Outcome};

impl Logins {
    /// Checks one login (see the module docs). The work after the reservation runs in
    /// its own task, in the current span: the count, a refund and the clear happen even
    /// if the caller goes away, and a comparison that started runs to its end.
    ///
    /// # Errors
    /// [`LoginError`]: the store failed, the CPU budget refused (a full queue before
    /// the count; a wait after it, refunded), the comparison panicked, no device token.
    pub async fn verify(&self, request: LoginRequest) -> Result<LoginVerdict, LoginError> {
        // At most one HMAC, whether or not the account exists: the check tells an
        // observer nothing about the account by time (a malformed token is only cheaper).
        let realm = &request.realm;
        let grant =
            Grant { realm: &realm.name, account: &request.key, stored_hash: &request.stored_hash };
        let device = self.devices.check(
            &request.device_token,
            &grant,
            realm.device_token_ttl,
            SystemTime::now(),
        );
        let lane = if device.is_some() {
            metrics::counter!(TRUSTED_CALLS, "realm" => realm.name.clone()).increment(1);
            Lane::Trusted
        } else {
            Lane::Untrusted
        };
        // Admission knows only the client key and the lane. A full queue is refused
        // here, before any store work: under a flood most calls end at this line.
        let ticket = self
            .verifier
            .budget()
            .reserve(&request.client_key, lane)
            .map_err(LoginError::Refused)?;
        let realm_name = realm.name.clone();
        let network = realm.network.key(&self.secret, &realm.name, &request.client_key);
        // The client's list of refused passwords: always its network's on the account,
        // with or without a device token (which the store may find revoked, making the
        // caller an untrusted client: a list per token would then be shared with
        // whoever else holds it). The store honours it only for the window of the
        // bucket the attempt is counted in.
        let repeat = realm.repeat.is_on().then(|| {
            let list = self.repeats.list(&request.key, &realm.network.scope(&request.client_key));
            let fingerprint = self.repeats.fingerprint(
                &realm.name,
                &list,
                &request.stored_hash,
                &request.password,
                realm.repeat.fingerprint_bytes,
            );
            (list, fingerprint)
        });
        let job = Job {
            store: self.store.clone(),
            devices: self.devices.clone(),
            spray: self.fingerprints.key(&realm.name, &request.password),
            spray_watch: self.spray_watch.clone(),
            network,
            network_watch: self.network_watch.clone(),
            tally: self.tally.clone(),
            breach: self.breach.clone(),
            repeat,
            device,
            ticket,
            request,
        };
        let verdict =
            tokio::spawn(job.run().in_current_span()).await.map_err(|_| LoginError::Gone)??;
        note_verdict(&realm_name, &verdict);
        Ok(verdict)
    }
}

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
    /// What the realm's status counts (`crate::store::realm_tally`).
    pub(super) tally: Arc<TallyBuffer>,
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
    pub(super) ticket: Ticket,
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
            tally,
            breach,
            repeat,
            device,
            mut ticket,
            request,
        } = self;
        let LoginRequest {
            realm, key, password, comparison, stored_hash, attempt, deadline, ..
        } = request;
        let call = Call {
            store: store.as_ref(),
            realm: &realm,
            key: &key,
            attempt: attempt.as_ref(),
            spray: &spray,
            spray_watch: &spray_watch,
            tally: &tally,
            repeat: repeat.as_ref(),
        };
        // The client's turn first: its earlier call (the same browser's parallel login)
        // has then been counted, compared and cleared, so this count sees its clear. A
        // refusal here counted nothing and took no token: there is nothing to settle.
        ticket.take_turn(deadline).await.map_err(LoginError::Refused)?;
        // A count whose round trip failed holds what it does not know it holds (the
        // count may or may not be written, the token taken or not): it keeps it all,
        // the safe side, and settles nothing.
        let (mut held, suspected) = call.count(device.as_ref(), network.clone()).await?;
        if let Err(stopped) =
            call.revoked_device_pays(&mut held, device.is_some(), network, &mut ticket).await
        {
            held.settle(End::NotAGuess).await?;
            return Err(stopped);
        }
        // A throttled network in a `reject` realm: refused before any hashing, and the
        // account's count given back (a blocked attempt is no guess at the account; its
        // network already paid for the guesses it made).
        if held.turn.refuses(&realm, &network_watch, &tally) {
            held.settle(End::NotAGuess).await?;
            // The account's step-up stands on what its window still holds.
            let failures = held.counted.failures_without_this();
            return Ok(LoginVerdict::Reject {
                signals: signals(&realm, suspected, failures, false),
            });
        }
        let pass = call.meter(&held, suspected);
        // A replayed attempt_id is rejected without a comparison: comparing again would
        // be a guess its first call's count does not cover (and after a lockout, a guess
        // behind a closed door), and refunding it would give back a count that paid for
        // a real comparison. The id's first call is the one that counted and compared.
        // The realm refuses comparisons of a sprayed password: no hashing, and the
        // attempt stays counted (it was a guess at the account, whoever made it).
        let counted = held.counted;
        let sprayed = suspected && realm.spray.action == SprayAction::Reject;
        if !counted.allowed || counted.replays > 0 || sprayed {
            held.settle(End::Unhashed).await?;
            return Ok(pass.reject(&realm, &tally));
        }
        // A step-up realm compares every repeat: an unhashed answer to a wrong
        // password's repeat, beside a hashed one to a right password's (a challenge is
        // never forgiven), would tell a checker which was right by time.
        if counted.repeat && !counted.recheck && realm.unknown_device != UnknownDevice::StepUp {
            return call.forgive(&mut held, pass.reject(&realm, &tally)).await;
        }
        let compared = match compare(&mut ticket, deadline, comparison, password, breach).await {
            Ok(Ok(compared)) => compared,
            Err(refusal) => {
                held.settle(End::Unadmitted).await?;
                return Err(LoginError::Refused(refusal));
            }
            // A comparison that did not complete: as one that failed, minus its notes.
            Ok(Err(aborted)) => {
                held.settle(End::Compared { matched: false }).await?;
                return Err(aborted.into());
            }
        };
        if compared.outcome.matched {
            return call.accept(&mut held, &devices, &stored_hash, compared, &pass).await;
        }
        call.fail(&mut held, pass.reject(&realm, &tally)).await
    }
}

/// What the checks before hashing decided, for the answers after them.
struct Pass {
    suspected: bool,
    /// The network is throttled in a `flag` realm.
    flagged: bool,
    /// The answer of every failure from here on.
    reject: LoginVerdict,
    /// Whether the enforced policy and the realm's candidate ask for step-up after
    /// this count: noted in the candidate's report once an answer carries it.
    step_up: (bool, bool),
}

impl Pass {
    /// The answer of a failure, the candidate's step-up beside it noted.
    fn reject(self, realm: &Realm, tally: &TallyBuffer) -> LoginVerdict {
        note_candidate_step_up(realm, tally, self.step_up);
        self.reject
    }
}

/// A comparison's result, with the breach lookup of a match.
struct Compared {
    outcome: Outcome,
    breached: bool,
}

/// What every phase of one call reads.
struct Call<'a> {
    store: &'a dyn Store,
    realm: &'a Realm,
    key: &'a AccountKey,
    attempt: Option<&'a AttemptKey>,
    spray: &'a SprayKey,
    spray_watch: &'a SprayWatch,
    tally: &'a TallyBuffer,
    repeat: Option<&'a (RepeatKey, u64)>,
}

impl<'a> Call<'a> {
    /// Counts the attempt, reads the spray check and takes the network's token, up to
    /// three commands sent at once, each on a pooled multiplexed connection (on a
    /// cluster each to its own node): one round trip of latency. The spray check only
    /// reads: an account is noted only after a real comparison failed, so neither a
    /// closed door, a refund nor a short deadline notes anything, and no answer depends
    /// on whether this account was counted before. A device token is never throttled by
    /// its network, so it takes no token. Answers what the call now holds and whether
    /// the password is being sprayed.
    async fn count(
        &self,
        device: Option<&'a KnownDevice>,
        network: Option<NetworkKey>,
    ) -> Result<(Held<'a>, bool), LoginError> {
        let (store, realm) = (self.store, self.realm);
        let counting = Attempt {
            key: self.key,
            device: device.map(|d| DeviceClaim { bucket: &d.bucket, epoch: d.epoch }),
            attempt_id: self.attempt,
            policy: &realm.policy,
            device_epoch_ttl_ms: realm.device_epoch_ttl_ms(),
            repeat: self
                .repeat
                .map(|(list, fingerprint)| RepeatClaim { list, fingerprint: *fingerprint }),
            read_epoch: realm.unknown_device == UnknownDevice::StepUp,
            // Noted on the counted record, a device's bucket's included (which takes no
            // token of it).
            network: network.as_ref().map(network_tag),
            candidate: realm.candidate.as_ref().map(|c| &c.policy),
        };
        let network = if device.is_some() { None } else { network };
        let spray_check = self.spray_note(SprayNote::Check);
        let (counted, sprayed, turn) = tokio::join!(
            store.count(&counting),
            store.note_spray(&spray_check),
            Turn::take(store, realm, network),
        );
        let counted = counted?;
        let suspected = self.spray_watch.observe(&realm.name, self.spray, sprayed?, &realm.spray);
        let turn = turn?;
        let bucket = match device {
            Some(known) if counted.trusted => &known.bucket,
            _ => self.key,
        };
        let held = Held { store, realm, bucket, attempt: self.attempt, counted, turn };
        Ok((held, suspected))
    }

    /// A revoked device is an untrusted client: its network pays (one more round trip,
    /// on this rare path only), and it waits with the untrusted (a full queue refuses it
    /// there). Either failing stops the call ([`End::NotAGuess`]).
    async fn revoked_device_pays(
        &self,
        held: &mut Held<'_>,
        device: bool,
        network: Option<NetworkKey>,
        ticket: &mut Ticket,
    ) -> Result<(), LoginError> {
        if !device || held.counted.trusted {
            return Ok(());
        }
        held.turn = Turn::take(self.store, self.realm, network).await?;
        ticket.demote().map_err(LoginError::Refused)
    }

    /// Meters the count (a repeat is not counted: its own metric) and reads the answer
    /// every failure gives from here on.
    fn meter(&self, held: &Held<'_>, suspected: bool) -> Pass {
        let (realm, counted) = (self.realm, &held.counted);
        let flagged = held.turn.flagged(realm);
        if counted.repeat {
            // A password this client was refused with, against this stored hash, in
            // this window: not counted. Forgiven unseen (the first match on its list
            // entry), it is not its network's failure either (the phone retrying an old
            // password must not throttle its own network): its token goes back. A
            // recheck is compared and pays as any comparison.
            if !counted.recheck {
                metrics::counter!(REPEATS, "realm" => realm.name.clone()).increment(1);
            }
        } else {
            // A ceiling is noted once the comparison failed ([`Self::fail`]): a match clears it.
            let allowed = counted.allowed && counted.replays == 0;
            note_count(realm, self.tally, held.bucket, counted, (allowed, false));
        }
        let failures = signal_failures(realm, counted);
        let signals = signals(realm, suspected, failures, flagged).with_door(counted);
        let reject = LoginVerdict::Reject { signals };
        let step_up =
            if counted.added() { candidate_step_up(realm, counted) } else { (false, false) };
        Pass { suspected, flagged, reject, step_up }
    }

    /// A repeat is not compared again, once: the same password against the same stored
    /// hash has one answer, which this client was given in this window. Only this
    /// client (its network) on this account can meet its own list, so the saved hash
    /// time tells it nothing it does not know (docs/throttle.md, "Repeated passwords").
    /// It is a failure from here on, as a new wrong password: the same spray note, the
    /// same answer; its list entry was already marked forgiven and moved first by the
    /// count, so it is not noted again (that would re-arm it). A match on an entry
    /// already forgiven (a recheck) is compared instead: a truncated fingerprint may be
    /// the right password's, which must not be refused unseen twice in a row.
    async fn forgive(
        &self,
        held: &mut Held<'_>,
        reject: LoginVerdict,
    ) -> Result<LoginVerdict, LoginError> {
        let bucket = held.bucket;
        let (settled, distinct) =
            tokio::join!(held.settle(End::Unhashed), self.note_failure(bucket, None));
        settled?;
        self.noted_spray(distinct?);
        if held.counted.reached_ceiling {
            note_ceiling(self.realm, self.tally, bucket);
        }
        Ok(reject)
    }

    /// A match: the clear answers the account's device epoch, which the fresh token
    /// carries. A token that cannot be made is an error (deny), never an accept without
    /// it; the user logs in again. A login that succeeded is no failure of its network:
    /// the token goes back in the same round trip.
    ///
    /// In a `step_up` realm, a match counted on the account's record (no device token of
    /// this account and credential, or a revoked one) is a challenge instead: a
    /// challenge token, no device token (docs/devices.md, "Step-up for unknown
    /// devices"), and in the store exactly what a failed comparison leaves ([`Self::fail`]:
    /// the count kept, the network's token spent, the spray failure and the repeat
    /// noted), so no later answer's time tells a right password from a wrong one;
    /// `ConfirmDevice` clears the record. Otherwise a breached password is counted
    /// (docs/breach.md, "Grace logins"), and past the realm's grace logins the answer
    /// requires a change.
    async fn accept(
        &self,
        held: &mut Held<'_>,
        devices: &DeviceTokens,
        stored_hash: &str,
        compared: Compared,
        pass: &Pass,
    ) -> Result<LoginVerdict, LoginError> {
        let (realm, bucket) = (self.realm, held.bucket);
        let grant = Grant { realm: &realm.name, account: self.key, stored_hash };
        let signals = signals(realm, pass.suspected, 0, pass.flagged);
        let event = |kind| SecurityEvent::of_account(kind, &realm.name, self.key.event_tag());
        let shadow = held.counted.shadow;
        note_right_password(realm, self.tally, Defence::Login, shadow.is_some_and(|s| !s.allowed));
        note_right_password(realm, self.tally, Defence::Network, held.turn.candidate_refused());
        if compared.breached {
            metrics::counter!(BREACHED_ACCEPTS, "realm" => realm.name.clone()).increment(1);
        }
        let no_token =
            |e: &IssueError| tracing::error!(realm = %realm.name, error = %e, "no token");
        if realm.unknown_device == UnknownDevice::StepUp && !bucket.is_device() {
            let challenge_token =
                devices.issue_challenge(&grant, held.counted.epoch).inspect_err(no_token)?;
            // A challenge carries the reject's step-up: the candidate's beside it noted.
            note_candidate_step_up(realm, self.tally, pass.step_up);
            self.fail(held, pass.reject.clone()).await?;
            emit(event(EventKind::ChallengeIssued));
            self.tally.count(&realm.name, Counter::Challenges);
            // The signals of the reject a wrong password gets here.
            let signals = pass.reject.signals();
            return Ok(LoginVerdict::Challenge {
                challenge_token,
                password_breached: compared.breached,
                signals,
            });
        }
        let (epoch, settled) = tokio::join!(
            self.store.accept(bucket, self.key, realm.device_epoch_ttl_ms()),
            held.settle(End::Compared { matched: true }),
        );
        let epoch = epoch?;
        settled?;
        if compared.breached {
            let note = BreachedNoteRequest {
                account: self.key,
                credential: devices.credential(&grant),
                ttl_ms: BREACHED_COUNT_TTL_MS,
            };
            let count = self.store.note_breached(&note).await?;
            if breached_count::change_required(count, realm.breached_grace_logins) {
                emit(event(EventKind::ChangeRequired));
                return Ok(LoginVerdict::ChangeRequired { signals });
            }
        }
        let device_token = devices.issue(&grant, epoch).inspect_err(no_token)?;
        if compared.breached {
            emit(event(EventKind::BreachedAccepted));
            self.tally.distinct(&realm.name, Distinct::Grace, &self.key.event_tag());
        }
        Ok(LoginVerdict::Accept {
            needs_rehash: compared.outcome.needs_rehash,
            device_token,
            password_breached: compared.breached,
            signals,
        })
    }

    /// A failed comparison: its token stays spent, and the spray failure and the refused
    /// password's place on the client's list are noted.
    async fn fail(
        &self,
        held: &mut Held<'_>,
        reject: LoginVerdict,
    ) -> Result<LoginVerdict, LoginError> {
        let bucket = held.bucket;
        let (settled, distinct) = tokio::join!(
            held.settle(End::Compared { matched: false }),
            self.note_failure(bucket, self.repeat),
        );
        settled?;
        self.noted_spray(distinct?);
        // The attempt that reached the ceiling stays counted now: its comparison failed.
        if held.counted.reached_ceiling {
            note_ceiling(self.realm, self.tally, bucket);
        }
        Ok(reject)
    }

    /// The spray watch's note of a failure, `distinct` accounts after it; a fingerprint
    /// over the threshold goes into the realm's status too.
    fn noted_spray(&self, distinct: u64) {
        let (realm, spray) = (self.realm, self.spray);
        self.spray_watch.noted(&realm.name, spray, distinct, &realm.spray);
        if distinct >= u64::from(realm.spray.threshold) {
            let fingerprint = format!("{:04x}", spray.fingerprint());
            self.tally.distinct(&realm.name, Distinct::Spray, &fingerprint);
        }
    }

    /// A failed comparison (or a forgiven repeat of one, with `repeat` `None`): the
    /// password's spray note and, with `repeat`, its place first on this client's list
    /// of refused passwords, not forgiven (re-armed), in one round trip. Answers the
    /// spray note's count of distinct accounts. The spray note names the account, not
    /// the device bucket: it counts distinct accounts.
    /// The spray call of this attempt's password fingerprint and account in its realm.
    fn spray_note(&self, note: SprayNote) -> SprayNoteRequest<'_> {
        SprayNoteRequest {
            spray: self.spray,
            account: self.key,
            note,
            period_ms: self.realm.spray.period_ms(),
            limit: self.realm.spray.threshold,
        }
    }

    async fn note_failure(
        &self,
        bucket: &AccountKey,
        repeat: Option<&(RepeatKey, u64)>,
    ) -> Result<u64, LoginError> {
        let (store, realm) = (self.store, self.realm);
        let note_repeat = async {
            match repeat {
                Some((list, fingerprint)) => {
                    store
                        .note_repeat(&RepeatNoteRequest {
                            bucket,
                            list,
                            fingerprint: *fingerprint,
                            max_len: realm.repeat.list_length,
                        })
                        .await
                }
                None => Ok(()),
            }
        };
        let spray_failure = self.spray_note(SprayNote::Failure);
        let (distinct, noted) = tokio::join!(store.note_spray(&spray_failure), note_repeat,);
        noted?;
        Ok(distinct?)
    }
}

/// CPU admission and the comparison, on the hashing thread; on a match only, the breach
/// lookup there too, while the password is there: one SHA-1 and three memory reads, no
/// store work.
async fn compare(
    ticket: &mut Ticket,
    deadline: Option<std::time::Instant>,
    comparison: Comparison,
    password: Zeroizing<Vec<u8>>,
    breach: Arc<BreachList>,
) -> Result<Result<Compared, Aborted>, Refusal> {
    let rpc = tracing::Span::current();
    ticket
        .compare(deadline, move || {
            let outcome = comparison.run(&password, &rpc);
            let breached = outcome.matched && breach.is_breached(&password);
            Compared { outcome, breached }
        })
        .await
}
