//! The embedded store: the default when no Redis is configured. One daemon, one data
//! directory, counters that survive a restart (or a `kill -9`).
//!
//! Built on **redb**: a pure-Rust embedded key-value store with ACID transactions and
//! fsync-on-commit durability, kept by an active maintainer, with no C toolchain or
//! background compaction to tune. fjall (an LSM tree) was the alternative; its strength,
//! heavy write throughput over large data, is not our shape: small records, read-modify-
//! write on every attempt, and a need for one simple durable commit.
//!
//! Every operation goes to one writer thread. It takes all the operations waiting at that
//! moment (up to [`MAX_BATCH`]), applies them in order in one write transaction, commits
//! once (durably), and only then answers each: concurrent attempts share one fsync, and
//! each operation is atomic because operations never interleave. The rules are those of
//! `src/throttle.rs`, exactly as the Lua scripts apply them on Redis, with time from one
//! clock that never goes backwards (the wall clock, held at its high-water mark, which is
//! stored so a restart cannot move it back either).
//!
//! Entries carry their expiry; an expired entry reads as absent (as in Redis), and the
//! writer sweeps expired entries through an expiry index at most every
//! [`SWEEP_INTERVAL`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redb::{Database, ReadableTable, TableDefinition};

use super::keys::{AccountKey, AttemptKey, SprayKey};
use super::{
    Attempt, Counted, DEFAULT_ATTEMPT_ID_HORIZON, Inspection, SprayNote, Store, StoreError,
};
use crate::throttle::{self, MAX_STORED_COUNT, MAX_STORED_TIME_MS, Policy, Record};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "portcullis.redb";
/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;
/// How often expired entries are swept: often, so a flood of made-up identifiers, whose
/// records expire with their window (docs/throttle.md, "How long a record lives"), is
/// removed about as fast as it arrives (up to [`SWEEP_LIMIT`] a second), and the file
/// stops growing instead of keeping expired entries for a minute.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Most expired entries removed by one sweep (the rest wait for the next).
const SWEEP_LIMIT: usize = 10_000;

/// key → encoded entry (a record, an attempt id's answer, or one account key's spray
/// note), with its expiry.
const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// (expiry ms, key): the sweep's index.
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
/// Clock high-water mark and other single values.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Where time comes from. Production uses [`SystemClock`]; tests move a manual one.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, throttle::duration_ms)
    }
}

/// Why the embedded store could not open. Each names the path at fault.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data directory {path:?} cannot be created or written")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "data directory is in use by another daemon: the lock on {path:?} is held (one daemon per data directory)"
    )]
    Locked { path: PathBuf },
    #[error("database {path:?} cannot be opened")]
    Database {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// An entry as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Record {
        record: Record,
        expires_ms: u64,
    },
    Attempt {
        allowed: bool,
        window_start_ms: u64,
        replays: u64,
        expires_ms: u64,
    },
    /// One account key under one password fingerprint (docs/spray.md): the latest
    /// period (plus one; 0: never) in which a comparison of it failed.
    Spray {
        failed: u64,
        expires_ms: u64,
    },
    /// An account's device epoch (docs/devices.md, "Revocation").
    Epoch {
        epoch: u64,
        expires_ms: u64,
    },
    /// One password fingerprint's counts (docs/spray.md) for period `period` (plus one)
    /// and the one before: `[current, previous]` of each.
    SprayCount {
        period: u64,
        counts: [SprayCounts; 2],
        expires_ms: u64,
    },
}

/// One period's spray counts of one fingerprint: how many account keys failed in it, and
/// how many of those had not failed in the period before.
/// `|F(p-1) ∪ F(p)| = failed(p-1) + new_failed(p)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SprayCounts {
    failed: u64,
    new_failed: u64,
}

/// Length of an encoded [`Entry::SprayCount`]: tag, period, four counts, expiry.
const SPRAY_COUNT_LEN: usize = 1 + 8 * 6;

impl Entry {
    fn expires_ms(&self) -> u64 {
        match *self {
            Entry::Record { expires_ms, .. }
            | Entry::Attempt { expires_ms, .. }
            | Entry::Spray { expires_ms, .. }
            | Entry::Epoch { expires_ms, .. }
            | Entry::SprayCount { expires_ms, .. } => expires_ms,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(33);
        match *self {
            Entry::Record { record, expires_ms } => {
                out.push(1);
                out.extend_from_slice(&record.failures.to_le_bytes());
                out.extend_from_slice(&record.window_start_ms.to_le_bytes());
                out.extend_from_slice(&u64::from(record.step).to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Attempt { allowed, window_start_ms, replays, expires_ms } => {
                out.push(2);
                out.extend_from_slice(&u64::from(allowed).to_le_bytes());
                out.extend_from_slice(&window_start_ms.to_le_bytes());
                out.extend_from_slice(&replays.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Spray { failed, expires_ms } => {
                out.push(3);
                out.extend_from_slice(&failed.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Epoch { epoch, expires_ms } => {
                out.push(5);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::SprayCount { period, counts, expires_ms } => {
                out.push(4);
                out.extend_from_slice(&period.to_le_bytes());
                for c in counts {
                    for n in [c.failed, c.new_failed] {
                        out.extend_from_slice(&n.to_le_bytes());
                    }
                }
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Protocol("corrupt embedded entry".into());
        let expected = match bytes.first() {
            Some(4) => SPRAY_COUNT_LEN,
            _ => 33,
        };
        if bytes.len() != expected {
            return Err(corrupt());
        }
        let word = |i: usize| {
            u64::from_le_bytes(bytes[1 + 8 * i..9 + 8 * i].try_into().unwrap_or_default())
        };
        // Every value within what a daemon writes (src/throttle.rs, MAX_STORED_*):
        // anything else, edited in by hand or by another program, is a store error.
        let count = |i: usize| Some(word(i)).filter(|&n| n <= MAX_STORED_COUNT).ok_or_else(corrupt);
        let time =
            |i: usize| Some(word(i)).filter(|&t| t <= MAX_STORED_TIME_MS).ok_or_else(corrupt);
        let counts = |first: usize| -> Result<SprayCounts, StoreError> {
            Ok(SprayCounts { failed: count(first)?, new_failed: count(first + 1)? })
        };
        match bytes[0] {
            1 => {
                let record = Record {
                    failures: word(0),
                    window_start_ms: word(1),
                    step: u32::try_from(word(2)).map_err(|_| corrupt())?,
                };
                if !record.is_plausible() {
                    return Err(corrupt());
                }
                Ok(Entry::Record { record, expires_ms: word(3) })
            }
            2 => Ok(Entry::Attempt {
                allowed: match word(0) {
                    0 => false,
                    1 => true,
                    _ => return Err(corrupt()),
                },
                window_start_ms: time(1)?,
                replays: count(2)?,
                expires_ms: word(3),
            }),
            3 => Ok(Entry::Spray { failed: count(0)?, expires_ms: word(3) }),
            5 => Ok(Entry::Epoch { epoch: count(0)?, expires_ms: word(3) }),
            4 => Ok(Entry::SprayCount {
                period: count(0)?,
                counts: [counts(1)?, counts(3)?],
                expires_ms: word(5),
            }),
            _ => Err(corrupt()),
        }
    }
}

/// One operation for the writer thread.
enum Op {
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
        attempt: Option<String>,
        /// How long the attempt id's answer is kept (`store.attempt_id_horizon`).
        attempt_ttl_ms: u64,
        policy: Policy,
    },
    Revoke {
        epoch_key: String,
        ttl_ms: u64,
    },
    Refund {
        record: String,
        attempt: Option<String>,
        window_start_ms: u64,
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
    Ping,
}

/// What an operation answered.
enum Reply {
    Open(bool),
    Counted(Counted),
    Record(Option<Record>),
    Expiry(Option<u64>),
    Inspected(Inspection),
    Count(u64),
    Done,
}

type Job = (Op, tokio::sync::oneshot::Sender<Result<Reply, StoreError>>);

/// Attempt records in an embedded redb database.
pub struct EmbeddedStore {
    /// `None` only while dropping: closing the channel stops the writer.
    jobs: Option<mpsc::Sender<Job>>,
    /// Joined on drop, so the database (and its lock) is closed when the store is.
    writer: Option<std::thread::JoinHandle<()>>,
    operation_timeout: Duration,
    /// How long an attempt id's answer is kept ([`DEFAULT_ATTEMPT_ID_HORIZON`]).
    attempt_id_horizon: Duration,
    /// The database file, whose size the health check reports.
    path: PathBuf,
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl EmbeddedStore {
    /// Opens (creating when needed) the data directory and its database, and starts the
    /// writer thread. (The directory's key secret, when none is configured, is
    /// `crate::secret::KeySecret::load_or_generate`'s: the store holds no secret.)
    ///
    /// # Errors
    /// [`OpenError`] naming the path: the directory cannot be created or written, another
    /// daemon holds the lock, or the database cannot be opened.
    pub fn open(
        data_dir: &Path,
        operation_timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, OpenError> {
        let dir_error = |source| OpenError::DataDir { path: data_dir.to_owned(), source };
        // Owner-only: the directory holds the key secret and every account's counts.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(data_dir).map_err(dir_error)?;
        tracing::info!(data_dir = %data_dir.display(), "store: embedded");
        let path = data_dir.join(DB_FILE);
        // Created owner-only before redb opens it (redb would create it 0644).
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&path).map_err(dir_error)?;
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(OpenError::Locked { path });
            }
            Err(e) => return Err(OpenError::Database { path, source: Box::new(e) }),
        };
        // Create the tables and read the clock's high-water mark; this also proves the
        // directory is writable before the daemon serves.
        let high_water =
            init(&db).map_err(|source| OpenError::Database { path: path.clone(), source })?;
        let (jobs, rx) = mpsc::channel::<Job>();
        let writer = std::thread::Builder::new()
            .name("portcullis-embedded".into())
            .spawn({
                let path = path.clone();
                move || Writer { db: Some(db), path, clock, high_water, last_sweep: None }.run(rx)
            })
            .map_err(|source| OpenError::DataDir { path: data_dir.to_owned(), source })?;
        Ok(Self {
            jobs: Some(jobs),
            writer: Some(writer),
            operation_timeout,
            attempt_id_horizon: DEFAULT_ATTEMPT_ID_HORIZON,
            path,
        })
    }

    /// Keeps each attempt id's answer for `horizon` (`store.attempt_id_horizon`)
    /// instead of [`DEFAULT_ATTEMPT_ID_HORIZON`].
    pub fn with_attempt_id_horizon(mut self, horizon: Duration) -> Self {
        self.attempt_id_horizon = horizon;
        self
    }

    /// Reads one account key's record, for operators and tests. Never writes.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot answer.
    pub async fn record(&self, key: &AccountKey) -> Result<Option<Record>, StoreError> {
        match self.submit(Op::Peek { record: key.record() }).await? {
            Reply::Record(r) => Ok(r),
            _ => Err(unexpected()),
        }
    }

    /// When the live entry at `key` (a record, an attempt id's answer, a device epoch)
    /// expires, in ms since the Unix epoch on the store's clock; `None` when there is
    /// none. For operators and tests. Never writes.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot answer.
    pub async fn expires_at(&self, key: &str) -> Result<Option<u64>, StoreError> {
        match self.submit(Op::Expiry { key: key.to_owned() }).await? {
            Reply::Expiry(at) => Ok(at),
            _ => Err(unexpected()),
        }
    }

    async fn submit(&self, op: Op) -> Result<Reply, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let jobs = self.jobs.as_ref().ok_or(StoreError::Closed)?;
        jobs.send((op, tx)).map_err(|_| StoreError::Closed)?;
        match tokio::time::timeout(self.operation_timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(StoreError::Closed),
            Err(_) => Err(StoreError::Timeout(self.operation_timeout)),
        }
    }
}

fn unexpected() -> StoreError {
    StoreError::Protocol("embedded store answered another operation's reply".into())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn init(db: &Database) -> Result<u64, BoxError> {
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
struct Writer {
    /// `None` after a failed commit: redb refuses every transaction after an I/O error
    /// until the database is reopened, so the next batch reopens it (a full disk that
    /// was freed must not stay an outage until a restart).
    db: Option<Database>,
    /// The database file, for reopening.
    path: PathBuf,
    clock: Arc<dyn Clock>,
    /// The latest time handed out; time never goes below it.
    high_water: u64,
    last_sweep: Option<Instant>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
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

struct Tables<'a, 't> {
    entries: &'a mut redb::Table<'t, &'static str, &'static [u8]>,
    expiry: &'a mut redb::Table<'t, (u64, &'static str), ()>,
    now: u64,
}

impl Tables<'_, '_> {
    fn apply(&mut self, op: &Op) -> Result<Reply, StoreError> {
        let now = self.now;
        match op {
            Op::IsOpen { record, policy } => {
                Ok(Reply::Open(throttle::is_open(policy, self.record(record)?.as_ref(), now)))
            }
            Op::Peek { record } => Ok(Reply::Record(self.record(record)?)),
            Op::Expiry { key } => Ok(Reply::Expiry(self.get(key)?.map(|e| e.expires_ms()))),
            Op::Inspect { record } => {
                Ok(Reply::Inspected(Inspection { record: self.record(record)?, now_ms: now }))
            }
            Op::Ping => Ok(Reply::Done),
            Op::Spray { count, member, note, period_ms, limit } => {
                self.spray(count, member, *note, *period_ms, *limit).map(Reply::Count)
            }
            Op::Clear { record, epoch } => {
                self.remove(record)?;
                let Some((epoch_key, ttl_ms)) = epoch else { return Ok(Reply::Done) };
                let current = self.epoch(epoch_key)?;
                if current > 0 {
                    self.put(epoch_key, Entry::Epoch { epoch: current, expires_ms: now + ttl_ms })?;
                }
                Ok(Reply::Count(current))
            }
            Op::Refund { record, attempt, window_start_ms } => {
                if let Some(attempt) = attempt {
                    self.remove(attempt)?;
                }
                if let Some(Entry::Record { record: r, expires_ms }) = self.get(record)?
                    && let Some(r) = throttle::refund(Some(r), *window_start_ms)
                {
                    // The expiry stays: it was pushed by the attempt being refunded.
                    self.put(record, Entry::Record { record: r, expires_ms })?;
                }
                Ok(Reply::Done)
            }
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
            } => {
                // A device's bucket only under the account's current epoch, which is then
                // kept (record_attempt.lua); an attempt without a token reads no epoch.
                let mut counted = record;
                let mut trusted = false;
                if let Some((bucket, token_epoch)) = device {
                    let epoch = self.epoch(epoch_key)?;
                    if epoch > 0 {
                        self.put(
                            epoch_key,
                            Entry::Epoch { epoch, expires_ms: now + epoch_ttl_ms },
                        )?;
                    }
                    if *token_epoch == epoch {
                        (counted, trusted) = (bucket, true);
                    }
                }
                if let Some(key) = attempt
                    && let Some(Entry::Attempt { allowed, window_start_ms, replays, expires_ms }) =
                        self.get(key)?
                {
                    let replays = replays + 1;
                    self.put(
                        key,
                        Entry::Attempt { allowed, window_start_ms, replays, expires_ms },
                    )?;
                    return Ok(Reply::Counted(Counted {
                        allowed,
                        locked_now: false,
                        window_start_ms,
                        replays,
                        trusted: false,
                    }));
                }
                let out = throttle::attempt(policy, self.record(counted)?, now);
                let expires_ms = throttle::expiry_ms(policy, &out.record, now);
                self.put(counted, Entry::Record { record: out.record, expires_ms })?;
                if let Some(key) = attempt {
                    let window_start_ms = out.record.window_start_ms;
                    let entry = Entry::Attempt {
                        allowed: out.allowed,
                        window_start_ms,
                        replays: 0,
                        expires_ms: now + attempt_ttl_ms,
                    };
                    self.put(key, entry)?;
                }
                Ok(Reply::Counted(Counted {
                    allowed: out.allowed,
                    locked_now: out.locked_now(policy),
                    window_start_ms: out.record.window_start_ms,
                    replays: 0,
                    trusted,
                }))
            }
        }
    }

    /// The device epoch at `key` (0 when absent).
    fn epoch(&self, key: &str) -> Result<u64, StoreError> {
        match self.get(key)? {
            Some(Entry::Epoch { epoch, .. }) => Ok(epoch),
            None => Ok(0),
            Some(_) => Err(StoreError::Protocol("a device epoch key holds another entry".into())),
        }
    }

    /// The live entry at `key` (an expired one reads as absent, as in Redis).
    fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let Some(bytes) = self.entries.get(key).map_err(embedded)? else { return Ok(None) };
        let entry = Entry::decode(bytes.value())?;
        Ok((entry.expires_ms() > self.now).then_some(entry))
    }

    fn record(&self, key: &str) -> Result<Option<Record>, StoreError> {
        match self.get(key)? {
            Some(Entry::Record { record, .. }) => Ok(Some(record)),
            Some(
                Entry::Attempt { .. }
                | Entry::Spray { .. }
                | Entry::SprayCount { .. }
                | Entry::Epoch { .. },
            ) => Err(StoreError::Protocol("a record key holds another entry".into())),
            None => Ok(None),
        }
    }

    /// The embedded form of `spray.lua`, exact and in constant time: one entry per
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
        let period = self.now / period_ms;
        // Periods are stored plus one, so 0 means never.
        let noted = period + 1;
        let expires_ms = (period + 2).saturating_mul(period_ms);
        // [current, previous] as of this period; the clock never goes back.
        let mut counts = match self.get(count_key)? {
            Some(Entry::SprayCount { period: held, counts, .. }) if held == noted => counts,
            Some(Entry::SprayCount { period: held, counts, .. }) if held + 1 == noted => {
                [SprayCounts::default(), counts[0]]
            }
            Some(Entry::SprayCount { .. }) | None => [SprayCounts::default(); 2],
            Some(_) => return Err(StoreError::Protocol("a spray key holds another entry".into())),
        };
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
        counts[0].failed += u64::from(last != noted);
        counts[0].new_failed += u64::from(last != noted && last + 1 != noted);
        self.put(key, Entry::Spray { failed: noted, expires_ms })?;
        self.put(count_key, Entry::SprayCount { period: noted, counts, expires_ms })?;
        Ok(union(counts))
    }

    fn put(&mut self, key: &str, entry: Entry) -> Result<(), StoreError> {
        let old = self.entries.insert(key, entry.encode().as_slice()).map_err(embedded)?;
        if let Some(old) = old
            && let Ok(old) = Entry::decode(old.value())
        {
            self.expiry.remove((old.expires_ms(), key)).map_err(embedded)?;
        }
        self.expiry.insert((entry.expires_ms(), key), ()).map_err(embedded)?;
        Ok(())
    }

    fn remove(&mut self, key: &str) -> Result<(), StoreError> {
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

fn embedded(e: impl std::fmt::Display) -> StoreError {
    StoreError::Embedded(e.to_string())
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        match self.submit(Op::IsOpen { record: key.record(), policy: *policy }).await? {
            Reply::Open(open) => Ok(open),
            _ => Err(unexpected()),
        }
    }

    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        let key = attempt.key;
        let op = Op::Attempt {
            record: key.record(),
            device: attempt.device.map(|d| (d.bucket.record(), d.epoch)),
            epoch_key: key.device_epoch(),
            epoch_ttl_ms: attempt.device_epoch_ttl_ms,
            attempt: attempt.attempt_id.map(|k| k.as_str().to_owned()),
            attempt_ttl_ms: throttle::duration_ms(self.attempt_id_horizon),
            policy: *attempt.policy,
        };
        match self.submit(op).await? {
            Reply::Counted(c) => Ok(c),
            _ => Err(unexpected()),
        }
    }

    async fn revoke_devices(&self, key: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        match self.submit(Op::Revoke { epoch_key: key.device_epoch(), ttl_ms }).await? {
            Reply::Count(epoch) => Ok(epoch),
            _ => Err(unexpected()),
        }
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        window_start_ms: u64,
    ) -> Result<(), StoreError> {
        let attempt = attempt_id.map(|k| k.as_str().to_owned());
        self.submit(Op::Refund { record: key.record(), attempt, window_start_ms }).await.map(drop)
    }

    async fn note_spray(
        &self,
        spray: &SprayKey,
        account: &AccountKey,
        note: SprayNote,
        period_ms: u64,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let op = Op::Spray {
            count: spray.count(),
            member: spray.member(account),
            note,
            period_ms,
            limit,
        };
        match self.submit(op).await? {
            Reply::Count(n) => Ok(n),
            _ => Err(unexpected()),
        }
    }

    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError> {
        self.submit(Op::Clear { record: key.record(), epoch: None }).await.map(drop)
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let epoch = Some((account.device_epoch(), epoch_ttl_ms));
        match self.submit(Op::Clear { record: bucket.record(), epoch }).await? {
            Reply::Count(epoch) => Ok(epoch),
            _ => Err(unexpected()),
        }
    }

    async fn inspect(&self, key: &AccountKey) -> Result<Inspection, StoreError> {
        match self.submit(Op::Inspect { record: key.record() }).await? {
            Reply::Inspected(i) => Ok(i),
            _ => Err(unexpected()),
        }
    }

    /// Health: the writer answers; also reports the database file's size as
    /// [`super::redis::MEMORY_USED_GAUGE`] (no limit: the disk's, which node metrics
    /// watch).
    async fn ping(&self) -> Result<(), StoreError> {
        self.submit(Op::Ping).await?;
        if let Ok(meta) = tokio::fs::metadata(&self.path).await {
            metrics::gauge!(super::redis::MEMORY_USED_GAUGE).set(meta.len() as f64);
            metrics::gauge!(super::redis::MEMORY_LIMIT_GAUGE).set(0.0);
        }
        Ok(())
    }
}
