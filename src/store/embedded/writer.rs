//! The writer thread: every operation in order, batched into one durable commit.

use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use redb::{Database, ReadableTable, TableDefinition};

use super::attempt_count::AttemptId;
use super::entry::{Entry, SprayCounts};
use super::{Clock, MAX_BATCH, SWEEP_INTERVAL, SWEEP_LIMIT, embedded};
use crate::store::{
    Confirmation, Counted, Inspection, NetworkOp, NetworkState, SendOp, Sent, SprayNote, StoreError,
};
use crate::throttle::network_bucket::{BucketPolicy, Spent};
use crate::throttle::send_log::SendPolicy;
use crate::throttle::spray_window;
use crate::throttle::{self, Policy, Record};

/// key → encoded entry (a record, an attempt id's answer, or one account key's spray
/// note), with its expiry.
pub(super) const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// (expiry ms, key): the sweep's index.
pub(super) const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
/// Clock high-water mark and other single values.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// One operation for the writer thread.
pub(super) enum Op {
    IsOpen {
        record: String,
        policy: Policy,
    },
    Attempt {
        record: String,
        /// The device's bucket and its token's epoch, for a device's attempt.
        device: Option<(String, u64)>,
        epoch_key: String,
        epoch_ttl_ms: u64,
        /// The attempt id's key and its request binding (`AttemptKey::bound`).
        attempt: Option<(String, u64)>,
        /// How long the attempt id's answer is kept (`store.attempt_id_horizon`).
        attempt_ttl_ms: u64,
        policy: Policy,
        /// The client's refused-password list on the counted bucket, and the password's
        /// fingerprint.
        repeat: Option<(String, u64)>,
        /// Answer the account's device epoch without a device claim
        /// (`crate::store::Attempt::read_epoch`).
        read_epoch: bool,
    },
    /// A failed comparison's fingerprint onto the client's list of the bucket `record`.
    NoteRepeat {
        record: String,
        list: String,
        fingerprint: u64,
        max_len: u32,
    },
    Revoke {
        epoch_key: String,
        ttl_ms: u64,
    },
    Refund {
        record: String,
        attempt: Option<String>,
        window_start_ms: u64,
        allowed: bool,
    },
    /// `ConfirmDevice` (`confirm_device.lua`).
    Confirm {
        record: String,
        second_factor: String,
        epoch_key: String,
        mark: String,
        challenge_epoch: u64,
        policy: Policy,
        mark_ttl_ms: u64,
        epoch_ttl_ms: u64,
    },
    Clear {
        record: String,
        /// Verify's accept: the account's device epoch to read (and keep so long).
        epoch: Option<(String, u64)>,
    },
    Peek {
        record: String,
    },
    Expiry {
        key: String,
    },
    Inspect {
        record: String,
    },
    Spray {
        /// The fingerprint's counts ([`SprayKey::count`]).
        count: String,
        /// The account's entry under the fingerprint ([`SprayKey::member`]).
        member: String,
        note: SprayNote,
        period_ms: u64,
        limit: u32,
    },
    Network {
        key: String,
        op: NetworkOp,
        policy: BucketPolicy,
        /// The tokens one account's `RecordAttempt`s hold (`NetworkRequest::held`).
        held: Option<String>,
    },
    /// An accept of a breached credential.
    Breached {
        key: String,
        credential: u64,
        ttl_ms: u64,
    },
    /// A mail flow's send log.
    Send {
        log: String,
        attempt: Option<(String, u64)>,
        attempt_ttl_ms: u64,
        policy: SendPolicy,
        op: SendOp,
    },
    /// A mail flow's request: the network's take, the send, the give-back it owes, in
    /// one transaction.
    Mail {
        network: Option<(String, BucketPolicy)>,
        log: String,
        attempt: Option<(String, u64)>,
        attempt_ttl_ms: u64,
        policy: SendPolicy,
    },
    Ping,
}

/// What an operation answered.
pub(super) enum Reply {
    Open(bool),
    Counted(Counted),
    Record(Option<Record>),
    Expiry(Option<u64>),
    Inspected(Inspection),
    Count(u64),
    Network(NetworkState),
    Sent(Sent),
    Mail { sent: Sent, network_refused: bool },
    Confirmed(Confirmation),
    Done,
}

pub(super) type Job = (Op, tokio::sync::oneshot::Sender<Result<Reply, StoreError>>);

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(super) fn init(db: &Database) -> Result<u64, BoxError> {
    let txn = db.begin_write()?;
    let high_water = {
        txn.open_table(ENTRIES)?;
        txn.open_table(EXPIRY)?;
        let meta = txn.open_table(META)?;
        meta.get("clock_ms")?.map_or(0, |v| v.value())
    };
    txn.commit()?;
    Ok(high_water)
}

/// The writer thread's state.
pub(super) struct Writer {
    /// `None` after a failed commit: redb refuses every transaction after an I/O error
    /// until the database is reopened, so the next batch reopens it (a full disk that
    /// was freed must not stay an outage until a restart).
    pub(super) db: Option<Database>,
    /// The database file, for reopening.
    pub(super) path: PathBuf,
    pub(super) clock: Arc<dyn Clock>,
    /// The latest time handed out; time never goes below it.
    pub(super) high_water: u64,
    pub(super) last_sweep: Option<Instant>,
}

impl Writer {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Job>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let now = self.now();
            let sweep = self.last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_INTERVAL);
            let (ops, replies): (Vec<Op>, Vec<_>) = batch.into_iter().unzip();
            match self.reopen().and_then(|db| Self::apply(db, &ops, now, sweep)) {
                Ok(results) => {
                    if sweep {
                        self.last_sweep = Some(Instant::now());
                    }
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(result);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "embedded store commit failed; reopening");
                    // Closed here (and its lock released), reopened by the next batch.
                    self.db = None;
                    let message = e.to_string();
                    for reply in replies {
                        let _ = reply.send(Err(StoreError::Embedded(message.clone())));
                    }
                }
            }
        }
    }

    /// The open database, reopening it after a failure. A reopen that fails answers
    /// this batch with the error; the next batch tries again.
    fn reopen(&mut self) -> Result<&Database, BoxError> {
        if self.db.is_none() {
            let db = Database::create(&self.path)?;
            init(&db)?;
            tracing::info!("embedded store reopened");
            self.db = Some(db);
        }
        self.db.as_ref().ok_or_else(|| "embedded store is not open".into())
    }

    fn now(&mut self) -> u64 {
        self.high_water = self.high_water.max(self.clock.now_ms());
        self.high_water
    }

    /// Applies `ops` in one transaction and commits durably. An operation's own error
    /// (a corrupt entry) answers that operation; a transaction error answers them all.
    fn apply(
        db: &Database,
        ops: &[Op],
        now: u64,
        sweep: bool,
    ) -> Result<Vec<Result<Reply, StoreError>>, BoxError> {
        let txn = db.begin_write()?;
        let mut writes = false;
        let results = {
            let mut entries = txn.open_table(ENTRIES)?;
            let mut expiry = txn.open_table(EXPIRY)?;
            let mut t = Tables { entries: &mut entries, expiry: &mut expiry, now };
            let mut results = Vec::with_capacity(ops.len());
            for op in ops {
                writes |= !matches!(
                    op,
                    Op::IsOpen { .. }
                        | Op::Peek { .. }
                        | Op::Expiry { .. }
                        | Op::Inspect { .. }
                        | Op::Ping
                        | Op::Spray { note: SprayNote::Check, .. }
                        | Op::Network { op: NetworkOp::Peek, .. }
                        | Op::Send { op: SendOp::Peek, .. }
                );
                results.push(t.apply(op));
            }
            if sweep {
                writes |= t.sweep()? > 0;
            }
            if writes {
                txn.open_table(META)?.insert("clock_ms", now)?;
            }
            results
        };
        if writes {
            txn.commit()?;
        } else {
            txn.abort()?;
        }
        Ok(results)
    }
}

pub(super) struct Tables<'a, 't> {
    pub(super) entries: &'a mut redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) expiry: &'a mut redb::Table<'t, (u64, &'static str), ()>,
    pub(super) now: u64,
}

impl Tables<'_, '_> {
    fn apply(&mut self, op: &Op) -> Result<Reply, StoreError> {
        let now = self.now;
        match op {
            Op::IsOpen { record, policy } => {
                Ok(Reply::Open(throttle::attempt_count::is_open(policy, self.record(record)?.as_ref(), now)))
            }
            Op::Peek { record } => Ok(Reply::Record(self.record(record)?)),
            Op::Expiry { key } => Ok(Reply::Expiry(self.get(key)?.map(|e| e.expires_ms()))),
            Op::Inspect { record } => {
                Ok(Reply::Inspected(Inspection { record: self.record(record)?, now_ms: now }))
            }
            Op::Ping => Ok(Reply::Done),
            Op::Network { key, op, policy, held } => {
                self.network_held(key, *op, policy, held.as_deref()).map(Reply::Network)
            }
            Op::Breached { key, credential, ttl_ms } => {
                self.breached(key, *credential, *ttl_ms).map(Reply::Count)
            }
            Op::Mail { network, log, attempt, attempt_ttl_ms, policy } => {
                let attempt = attempt.as_ref().map(|(k, b)| (k.as_str(), *b));
                self.mail(network.as_ref(), log, attempt, *attempt_ttl_ms, policy)
            }
            Op::Send { log, attempt, attempt_ttl_ms, policy, op } => {
                let attempt = attempt.as_ref().map(|(k, b)| (k.as_str(), *b));
                self.send(log, attempt, *attempt_ttl_ms, policy, *op).map(Reply::Sent)
            }
            Op::Spray { count, member, note, period_ms, limit } => {
                self.spray(count, member, *note, *period_ms, *limit).map(Reply::Count)
            }
            Op::Clear { record, epoch } => self.clear(record, epoch.as_ref()),
            Op::Confirm { .. } => self.confirm(op).map(Reply::Confirmed),
            Op::Refund { record, attempt, window_start_ms, allowed } => self
                .refund(record, attempt.as_deref(), *window_start_ms, *allowed)
                .map(|()| Reply::Done),
            Op::Revoke { epoch_key, ttl_ms } => {
                let epoch = self.epoch(epoch_key)? + 1;
                self.put(epoch_key, Entry::Epoch { epoch, expires_ms: now + ttl_ms })?;
                Ok(Reply::Count(epoch))
            }
            Op::Attempt {
                record,
                device,
                epoch_key,
                epoch_ttl_ms,
                attempt,
                attempt_ttl_ms,
                policy,
                repeat,
                read_epoch,
            } => {
                let id = AttemptId {
                    key: attempt.as_ref().map(|(k, _)| k.as_str()),
                    binding: attempt.as_ref().map_or(0, |(_, b)| *b),
                    ttl_ms: *attempt_ttl_ms,
                };
                let (counted, trusted, epoch) = self.counted_in(
                    record,
                    device.as_ref(),
                    (epoch_key, *read_epoch),
                    *epoch_ttl_ms,
                )?;
                let with_epoch = |c: Counted| Reply::Counted(Counted { epoch, ..c });
                if let Some(replay) = self.replay(id)? {
                    return Ok(with_epoch(replay));
                }
                let current = self.record(counted)?;
                if let Some(r) =
                    self.repeat(counted, current, repeat.as_ref(), policy, trusted, id)?
                {
                    return Ok(with_epoch(r));
                }
                let device_ttl_ms = trusted.then_some(*epoch_ttl_ms);
                self.count(counted, current, (policy, repeat.as_ref()), device_ttl_ms, id)
                    .map(with_epoch)
            }
            Op::NoteRepeat { record, list, fingerprint, max_len } => {
                self.note_repeat(record, list, *fingerprint, *max_len).map(|()| Reply::Done)
            }
        }
    }

    /// `ClearAttempts`, or a `Verify` accept: deletes the record; an accept's `epoch`
    /// (the account's device epoch key, and how long to keep it) is read, kept so long
    /// when there is one, and answered.
    fn clear(&mut self, record: &str, epoch: Option<&(String, u64)>) -> Result<Reply, StoreError> {
        self.remove(record)?;
        let Some((epoch_key, ttl_ms)) = epoch else { return Ok(Reply::Done) };
        let current = self.epoch(epoch_key)?;
        if current > 0 {
            self.put(epoch_key, Entry::Epoch { epoch: current, expires_ms: self.now + ttl_ms })?;
        }
        Ok(Reply::Count(current))
    }

    /// Gives back one failure of the window that started at `window_start_ms` (and its
    /// consecutive failure when the attempt was `allowed`), and forgets the attempt id.
    fn refund(
        &mut self,
        record: &str,
        attempt: Option<&str>,
        window_start_ms: u64,
        allowed: bool,
    ) -> Result<(), StoreError> {
        if let Some(attempt) = attempt {
            self.remove(attempt)?;
        }
        if let Some(Entry::Record { record: r, expires_ms }) = self.get(record)?
            && let Some(r) = throttle::attempt_count::refund(Some(r), window_start_ms, allowed)
        {
            // The expiry stays: it was pushed by the attempt being refunded.
            self.put(record, Entry::Record { record: r, expires_ms })?;
        }
        Ok(())
    }

    /// The device epoch at `key` (0 when absent).
    pub(super) fn epoch(&self, key: &str) -> Result<u64, StoreError> {
        match self.get(key)? {
            Some(Entry::Epoch { epoch, .. }) => Ok(epoch),
            None => Ok(0),
            Some(_) => Err(StoreError::Protocol("a device epoch key holds another entry".into())),
        }
    }

    /// The live entry at `key` (an expired one reads as absent, as in Redis).
    pub(super) fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let Some(bytes) = self.entries.get(key).map_err(embedded)? else { return Ok(None) };
        let entry = Entry::decode(bytes.value())?;
        Ok((entry.expires_ms() > self.now).then_some(entry))
    }

    pub(super) fn record(&self, key: &str) -> Result<Option<Record>, StoreError> {
        match self.get(key)? {
            Some(Entry::Record { record, .. }) => Ok(Some(record)),
            Some(
                Entry::Attempt { .. }
                | Entry::Spray { .. }
                | Entry::SprayCount { .. }
                | Entry::Bucket { .. }
                | Entry::Repeats { .. }
                | Entry::Sends { .. }
                | Entry::Breached { .. }
                | Entry::Used { .. }
                | Entry::Held { .. }
                | Entry::Epoch { .. },
            ) => Err(StoreError::Protocol("a record key holds another entry".into())),
            None => Ok(None),
        }
    }

    /// The embedded form of `network_bucket.lua` with its held count (`held`, the key of
    /// `NetworkRequest::held`): a take that takes a token adds it to the count; a give
    /// back gives one only when the count holds one, and takes it off.
    fn network_held(
        &mut self,
        key: &str,
        op: NetworkOp,
        policy: &BucketPolicy,
        held: Option<&str>,
    ) -> Result<NetworkState, StoreError> {
        let Some(held) = held else { return self.network(key, op, policy) };
        let count = match self.get(held)? {
            Some(Entry::Held { count, .. }) => count,
            None => 0,
            Some(_) => return Err(StoreError::Protocol("a held key holds another entry".into())),
        };
        let op = if op == NetworkOp::GiveBack && count == 0 { NetworkOp::Peek } else { op };
        let state = self.network(key, op, policy)?;
        let count = match op {
            NetworkOp::Take if state.taken => count + 1,
            NetworkOp::GiveBack => count - 1,
            _ => return Ok(state),
        };
        if count > 0 && state.full_in_ms > 0 {
            self.put(held, Entry::Held { count, expires_ms: self.now + state.full_in_ms })?;
        } else {
            self.remove(held)?;
        }
        Ok(state)
    }

    /// The embedded form of `network_bucket.lua`: [`BucketPolicy`]'s rules on the entry's TAT;
    /// a refused take and a peek write nothing.
    pub(super) fn network(
        &mut self,
        key: &str,
        op: NetworkOp,
        policy: &BucketPolicy,
    ) -> Result<NetworkState, StoreError> {
        let now = self.now;
        let tat = match self.get(key)? {
            Some(Entry::Bucket { tat_ms }) => Some(tat_ms),
            None => None,
            Some(_) => {
                return Err(StoreError::Protocol("a network key holds another entry".into()));
            }
        };
        let spent = match op {
            NetworkOp::Take => policy.take(tat, now),
            NetworkOp::GiveBack => policy.give_back(tat, now),
            NetworkOp::Peek => Spent { taken: false, tat_ms: tat },
            NetworkOp::Release => Spent { taken: false, tat_ms: None },
        };
        let writes = match op {
            NetworkOp::Take => spent.taken,
            NetworkOp::Peek => false,
            NetworkOp::GiveBack | NetworkOp::Release => true,
        };
        if writes {
            match spent.tat_ms {
                Some(tat_ms) => self.put(key, Entry::Bucket { tat_ms })?,
                None => self.remove(key)?,
            }
        }
        Ok(NetworkState {
            taken: spent.taken,
            tokens: policy.tokens(spent.tat_ms, now),
            full_in_ms: policy.full_in_ms(spent.tat_ms, now),
        })
    }

    /// The embedded form of `spray_window.lua`, exact and in constant time: one entry per
    /// (fingerprint, account key), `member` ([`SprayKey::member`]), noting the latest
    /// period a comparison of it failed in, and one per fingerprint, `count_key`
    /// ([`SprayKey::count`]), holding [`SprayCounts`] of the current and the previous
    /// period. The answer is
    /// `|failed|` over both periods, as on Redis, without reading the members: a count
    /// over a million accounts costs what one over ten does. `Check` reads the count
    /// entry only and writes nothing. Both entries expire at the end of the next period.
    /// `limit` is not needed: the count is exact whatever its size.
    fn spray(
        &mut self,
        count_key: &str,
        key: &str,
        note: SprayNote,
        period_ms: u64,
        _limit: u32,
    ) -> Result<u64, StoreError> {
        if period_ms == 0 {
            return Err(StoreError::Protocol("spray period must not be 0".into()));
        }
        // The spray window's rules (`throttle::spray_window`, the twin of spray_window.lua).
        let noted = spray_window::period(self.now, period_ms);
        let expires_ms = spray_window::expires_ms(noted, period_ms);
        let held = match self.get(count_key)? {
            Some(Entry::SprayCount { period: held, counts, .. }) => Some((held, counts)),
            None => None,
            Some(_) => return Err(StoreError::Protocol("a spray key holds another entry".into())),
        };
        let mut counts = spray_window::roll(held, noted);
        let union = |[current, previous]: [SprayCounts; 2]| previous.failed + current.new_failed;
        if note == SprayNote::Check {
            return Ok(union(counts));
        }
        let last = match self.get(key)? {
            Some(Entry::Spray { failed, .. }) => failed,
            Some(_) => return Err(StoreError::Protocol("a spray key holds another entry".into())),
            None => 0,
        };
        // New to this period's set; new to the union with the period before (a member
        // last noted then is in both).
        let (joins_period, joins_union) = spray_window::joins(last, noted);
        counts[0].failed += u64::from(joins_period);
        counts[0].new_failed += u64::from(joins_union);
        self.put(key, Entry::Spray { failed: noted, expires_ms })?;
        self.put(count_key, Entry::SprayCount { period: noted, counts, expires_ms })?;
        Ok(union(counts))
    }

    pub(super) fn put(&mut self, key: &str, entry: Entry) -> Result<(), StoreError> {
        let old = self.entries.insert(key, entry.encode().as_slice()).map_err(embedded)?;
        if let Some(old) = old
            && let Ok(old) = Entry::decode(old.value())
        {
            self.expiry.remove((old.expires_ms(), key)).map_err(embedded)?;
        }
        self.expiry.insert((entry.expires_ms(), key), ()).map_err(embedded)?;
        Ok(())
    }

    pub(super) fn remove(&mut self, key: &str) -> Result<(), StoreError> {
        if let Some(old) = self.entries.remove(key).map_err(embedded)?
            && let Ok(old) = Entry::decode(old.value())
        {
            self.expiry.remove((old.expires_ms(), key)).map_err(embedded)?;
        }
        Ok(())
    }

    /// Deletes up to [`SWEEP_LIMIT`] entries whose expiry has passed; returns how many.
    fn sweep(&mut self) -> Result<usize, StoreError> {
        let mut due = Vec::new();
        for item in self.expiry.range::<(u64, &str)>(..).map_err(embedded)? {
            let (key, _) = item.map_err(embedded)?;
            let (expires_ms, name) = key.value();
            if expires_ms > self.now || due.len() >= SWEEP_LIMIT {
                break;
            }
            due.push((expires_ms, name.to_owned()));
        }
        for (expires_ms, name) in &due {
            self.expiry.remove((*expires_ms, name.as_str())).map_err(embedded)?;
            self.entries.remove(name.as_str()).map_err(embedded)?;
        }
        if !due.is_empty() {
            tracing::debug!(swept = due.len(), "expired entries removed");
        }
        Ok(due.len())
    }
}
