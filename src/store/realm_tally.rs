//! A realm's tally on a store (docs/observability.md, "A realm's status"; the slots are
//! [`crate::throttle::realm_tally`]): per realm, what happened in each of the last 60
//! minutes, fleet-wide, so every daemon answers `Admin/RealmStatus` the same
//! (`lua/realm_tally/` on Redis, `embedded/realm_tally.rs`).
//!
//! The login never waits for it: what happens is noted in this daemon's
//! [`TallyBuffer`], and [`TallyBuffer::run`] writes the notes to the store in batches,
//! every [`FLUSH_EVERY`] or as soon as one realm holds [`BATCH_MEMBERS`] members. A
//! failed write loses its batch (counted), never an answer: the tally is what an
//! operator reads, never what a login is decided on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::candidate_report::CandidateReportStore;
use super::error::StoreError;
use super::keys::{CandidateKey, TallyKey};
use crate::secret::KeySecret;
use crate::telemetry::metrics::{CANDIDATE_OUTCOMES, REALM_TALLY_DROPPED};
use crate::throttle::candidate_report::{Defence, Outcome, ReportCounts};
use crate::throttle::realm_tally::{Counter, Distinct};

/// How often a daemon writes its notes to the store at most: how far `RealmStatus` lags
/// behind what happened.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// Members one store call writes at most (about 17 bytes each on the wire).
pub const BATCH_MEMBERS: usize = 1_000;

/// Members one realm's tally of one kind holds between two writes; more are dropped
/// and counted (`portcullis_realm_tally_dropped_total{reason="full"}`).
pub const MAX_PENDING_MEMBERS: usize = 16_384;

/// One write of a realm's notes ([`RealmTallyStore::add_tallies`]).
#[derive(Debug, Clone)]
pub struct TallyBatch<'a> {
    /// The realm's tally.
    pub key: &'a TallyKey,
    /// Per [`Distinct`] tally (in [`Distinct::ALL`]'s order), the members noted: keyed
    /// digests in hex (an account's event tag, a network's tag, a fingerprint).
    pub members: [Vec<String>; 5],
    /// Per [`Counter`] (in [`Counter::ALL`]'s order), the notes to add.
    pub counts: [u64; 6],
}

/// How far back each part of a reading looks, in whole minutes (1 to 60).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TallyLookbacks {
    /// Per [`Distinct`] tally, in [`Distinct::ALL`]'s order.
    pub distinct: [u64; 5],
    /// For every [`Counter`].
    pub counts: u64,
}

/// What a realm's tally held when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TallyReading {
    /// Per [`Distinct`] tally, the distinct members noted in its look-back: an estimate
    /// on Redis (HyperLogLog, standard error 0.81%), exact on the embedded store.
    pub distinct: [u64; 5],
    /// Per [`Counter`], the notes in the look-back.
    pub counts: [u64; 6],
    /// The store's clock when it was read, in ms since the Unix epoch.
    pub now_ms: u64,
    /// The distinct counts are exact (the embedded store), not estimates (Redis's
    /// HyperLogLog, relative standard error [`HLL_STANDARD_ERROR`]).
    pub exact: bool,
}

/// The relative standard error of Redis's HyperLogLog estimates (the Redis docs'
/// `PFCOUNT`: 0.81%).
pub const HLL_STANDARD_ERROR: f64 = 0.0081;

/// A realm's tally on a store: every operation one atomic step on the store's clock.
#[async_trait]
pub trait RealmTallyStore: Send + Sync {
    /// Adds `batch` to the current minute's slot of its realm (emptying the slot first
    /// when it still holds an older minute).
    async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError>;

    /// Reads the realm's tally over `lookbacks`. Never writes. Bounded work whatever was
    /// noted: on Redis at most 60 slots of one hash and five HyperLogLogs each.
    async fn read_tallies(
        &self,
        key: &TallyKey,
        lookbacks: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError>;
}

/// One realm's notes not yet written.
#[derive(Debug, Default)]
struct Pending {
    members: [HashSet<String>; 5],
    counts: [u64; 6],
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.members.iter().all(HashSet::is_empty) && self.counts.iter().all(|&c| c == 0)
    }

    /// Takes at most [`BATCH_MEMBERS`] members and every count.
    fn take_batch(&mut self) -> ([Vec<String>; 5], [u64; 6]) {
        let mut left = BATCH_MEMBERS;
        let members = std::array::from_fn(|i| {
            let set = &mut self.members[i];
            let take: Vec<String> = set.iter().take(left).cloned().collect();
            for m in &take {
                set.remove(m);
            }
            left -= take.len();
            take
        });
        (members, std::mem::take(&mut self.counts))
    }
}

/// `realm`'s notes in `pending`, made on its first note: a throttled network notes on
/// every refused attempt, so the realm's name is not copied each time.
fn of_realm<'p>(pending: &'p mut HashMap<String, Pending>, realm: &str) -> Option<&'p mut Pending> {
    if !pending.contains_key(realm) {
        pending.insert(realm.to_owned(), Pending::default());
    }
    pending.get_mut(realm)
}

/// This daemon's notes for the realms' tallies, until [`TallyBuffer::run`] writes them.
/// Noting takes a lock for a hash-set insert: never a store call.
#[derive(Debug)]
pub struct TallyBuffer {
    secret: KeySecret,
    pending: Mutex<HashMap<String, Pending>>,
    /// Per realm, and per candidate id in it (one while the daemon runs), the outcomes
    /// of its report not yet written (`crate::store::candidate_report`): looked up by
    /// borrowed names, copied only on a candidate's first note.
    reports: Mutex<HashMap<String, Vec<(String, ReportCounts)>>>,
    wake: tokio::sync::Notify,
}

impl TallyBuffer {
    /// An empty buffer; realms' tally keys derived from `secret`.
    pub fn new(secret: &KeySecret) -> Arc<Self> {
        Arc::new(Self {
            secret: secret.clone(),
            pending: Mutex::new(HashMap::new()),
            reports: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// Notes `member` (a keyed digest in hex, never an identifier or an address) in
    /// `realm`'s `tally`.
    pub fn distinct(&self, realm: &str, tally: Distinct, member: &str) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(notes) = of_realm(&mut pending, realm) else { return };
        let set = &mut notes.members[tally.index()];
        if set.len() >= MAX_PENDING_MEMBERS {
            metrics::counter!(REALM_TALLY_DROPPED, "reason" => "full").increment(1);
            return;
        }
        set.insert(member.to_owned());
        if set.len() >= BATCH_MEMBERS {
            self.wake.notify_one();
        }
    }

    /// Notes one occurrence of `counter` in `realm`.
    pub fn count(&self, realm: &str, counter: Counter) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(notes) = of_realm(&mut pending, realm) else { return };
        let count = &mut notes.counts[counter.index()];
        *count = count.saturating_add(1);
    }

    /// Notes one `outcome` of `defence` in candidate `id`'s report in `realm` (and its
    /// metric).
    pub fn candidate(&self, realm: &str, id: &str, defence: Defence, outcome: Outcome) {
        metrics::counter!(
            CANDIDATE_OUTCOMES,
            "realm" => realm.to_owned(),
            "candidate" => id.to_owned(),
            "defence" => defence.name(),
            "outcome" => outcome.name()
        )
        .increment(1);
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if !reports.contains_key(realm) {
            reports.insert(realm.to_owned(), Vec::new());
        }
        let Some(candidates) = reports.get_mut(realm) else { return };
        let at = match candidates.iter().position(|(held, _)| held == id) {
            Some(at) => at,
            None => {
                candidates.push((id.to_owned(), ReportCounts::default()));
                candidates.len() - 1
            }
        };
        let counts = &mut candidates[at].1;
        let count = &mut counts[defence.index()][outcome.index()];
        *count = count.saturating_add(1);
    }

    /// Writes every note held now to `store`, a batch at a time, and returns: notes made
    /// meanwhile wait for the next flush, so one busy realm never keeps the others (or
    /// the candidates' reports) from being written. A batch the store refuses is
    /// dropped and counted (`reason="store"`).
    pub async fn flush<S: RealmTallyStore + CandidateReportStore + ?Sized>(&self, store: &S) {
        let reports = std::mem::take(&mut *self.reports.lock().unwrap_or_else(|e| e.into_inner()));
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        for (realm, candidates) in reports {
            for (id, counts) in candidates {
                let key = CandidateKey::new(&self.secret, &realm, &id);
                if let Err(e) = store.add_to_report(&key, &counts).await {
                    tracing::warn!(realm, "a candidate policy's report lost some counts: {e}");
                    metrics::counter!(REALM_TALLY_DROPPED, "reason" => "store")
                        .increment(counts.iter().flatten().sum());
                }
            }
        }
        for (realm, mut notes) in pending {
            let key = TallyKey::new(&self.secret, &realm);
            while !notes.is_empty() {
                let (members, counts) = notes.take_batch();
                let lost =
                    members.iter().map(Vec::len).sum::<usize>() as u64 + counts.iter().sum::<u64>();
                let batch = TallyBatch { key: &key, members, counts };
                if let Err(e) = store.add_tallies(&batch).await {
                    tracing::warn!(realm, "a realm's status notes were lost: {e}");
                    metrics::counter!(REALM_TALLY_DROPPED, "reason" => "store").increment(lost);
                }
            }
        }
    }

    /// Writes the notes to `store` every [`FLUSH_EVERY`], or as soon as a realm holds
    /// [`BATCH_MEMBERS`] members of one kind, until `stop` turns true; then writes what
    /// is left once more and returns (never dropped mid-batch: the daemon awaits it at
    /// shutdown).
    pub async fn run<S: RealmTallyStore + CandidateReportStore + ?Sized>(
        self: Arc<Self>,
        store: Arc<S>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let stopping = tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => false,
                () = self.wake.notified() => false,
                changed = stop.changed() => changed.is_err() || *stop.borrow(),
            };
            self.flush(&*store).await;
            if stopping {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::candidate_report::CandidateCounts;

    /// A store that records the realms written and, while realm "a" is written, notes
    /// more in realm "a": a busy realm.
    struct Busy {
        buffer: Arc<TallyBuffer>,
        written: Mutex<Vec<TallyKey>>,
    }

    #[async_trait]
    impl RealmTallyStore for Busy {
        async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError> {
            self.written.lock().unwrap().push(batch.key.clone());
            self.buffer.count("a", Counter::Challenges);
            Ok(())
        }
        async fn read_tallies(
            &self,
            _: &TallyKey,
            _: &TallyLookbacks,
        ) -> Result<TallyReading, StoreError> {
            Err(StoreError::Closed)
        }
    }

    #[async_trait]
    impl CandidateReportStore for Busy {
        async fn add_to_report(
            &self,
            _: &CandidateKey,
            _: &ReportCounts,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        async fn read_report(&self, _: &CandidateKey) -> Result<CandidateCounts, StoreError> {
            Err(StoreError::Closed)
        }
    }

    #[tokio::test]
    async fn a_flush_writes_what_it_found_and_returns_though_a_realm_stays_busy() {
        let secret = KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let buffer = TallyBuffer::new(&secret);
        for realm in ["a", "b", "c"] {
            buffer.count(realm, Counter::Confirmed);
        }
        let store = Busy { buffer: buffer.clone(), written: Mutex::new(Vec::new()) };
        buffer.flush(&store).await;
        let written = store.written.lock().unwrap().clone();
        assert_eq!(written.len(), 3, "each realm once, the busy one's new notes left for later");
        for realm in ["a", "b", "c"] {
            assert!(written.contains(&TallyKey::new(&secret, realm)), "{realm} written");
        }
        let left = buffer.pending.lock().unwrap();
        assert_eq!(left.len(), 1, "what realm a noted meanwhile waits: {left:?}");
    }

    #[test]
    fn a_batch_takes_at_most_its_members_and_every_count() {
        let mut p = Pending::default();
        for i in 0..1_500 {
            p.members[i % 2].insert(format!("{i:016x}"));
        }
        p.counts[3] = 7;
        let (members, counts) = p.take_batch();
        assert_eq!(members.iter().map(Vec::len).sum::<usize>(), BATCH_MEMBERS);
        assert_eq!(counts[3], 7);
        let (members, counts) = p.take_batch();
        assert_eq!(members.iter().map(Vec::len).sum::<usize>(), 500);
        assert_eq!(counts, [0; 6]);
        assert!(p.is_empty());
    }
}
