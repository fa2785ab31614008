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
//! `src/throttle/`, exactly as the Lua scripts apply them on Redis, with time from one
//! clock that never goes backwards (the wall clock, held at its high-water mark, which is
//! stored so a restart cannot move it back either).
//!
//! Entries carry their expiry; an expired entry reads as absent (as in Redis), and the
//! writer sweeps expired entries through an expiry index at most every
//! [`SWEEP_INTERVAL`].

use crate::store::{
    BreachedNoteRequest, MailSent, NetworkRequest, RepeatNoteRequest, SendRequest, Sent,
    SprayNoteRequest,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redb::{Database, ReadableTable, TableDefinition};

use super::keys::{self, AccountKey, AttemptKey};
use super::{
    Attempt, Confirmation, Counted, DEFAULT_ATTEMPT_ID_HORIZON, DeviceConfirmation, Inspection,
    KeyCheckMode, NetworkState, Store, StoreError,
};
use crate::secret::KeyCheck;
use crate::throttle::{self, Policy, Record};

mod attempt_count;
mod challenges;
mod entry;
mod mail_logs;
mod repeat_lists;
mod writer;

use writer::{BoxError, Job, Op, Reply, Writer, init};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "portcullis.redb";
/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;
/// How often expired entries are swept: often, so a flood of made-up identifiers, whose
/// records expire with their window (docs/throttle.md, "How long a record lives"), is
/// removed about as fast as it arrives (up to `SWEEP_LIMIT` a second), and the file
/// stops growing instead of keeping expired entries for a minute.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Most expired entries removed by one sweep (the rest wait for the next).
const SWEEP_LIMIT: usize = 10_000;

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
    #[error(
        "{}; the embedded store in {path:?} was keyed by another key secret (its data directory's own key_secret file, unless one was configured)",
        crate::store::KEY_SECRET_MISMATCH
    )]
    KeySecretMismatch { path: PathBuf },
    #[error("database {path:?} cannot be opened")]
    Database {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

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
        Self::open_checked(data_dir, operation_timeout, clock, None)
    }

    /// As [`Self::open`], and proves `check` (this daemon's key secret's,
    /// [`crate::secret::KeySecret::store_check`]) before anything is served: the first
    /// open writes it, every later one compares (docs/store.md, "One key secret per
    /// store"). The daemon opens its store this way.
    ///
    /// # Errors
    /// As [`Self::open`], and [`OpenError::KeySecretMismatch`] when the database was
    /// keyed by another key secret.
    pub fn open_keyed(
        data_dir: &Path,
        operation_timeout: Duration,
        clock: Arc<dyn Clock>,
        check: &KeyCheck,
    ) -> Result<Self, OpenError> {
        Self::open_checked(data_dir, operation_timeout, clock, Some((check, KeyCheckMode::Prove)))
    }

    /// The operator's rotation step on the embedded store (`portcullis adopt-key-secret`,
    /// with the daemon stopped: it holds the data directory's lock): the database's key
    /// check value becomes `check`'s.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn adopt_key_check(data_dir: &Path, check: &KeyCheck) -> Result<(), OpenError> {
        let timeout = Duration::from_secs(5);
        let check = Some((check, KeyCheckMode::Adopt));
        Self::open_checked(data_dir, timeout, Arc::new(SystemClock), check).map(drop)
    }

    fn open_checked(
        data_dir: &Path,
        operation_timeout: Duration,
        clock: Arc<dyn Clock>,
        check: Option<(&KeyCheck, KeyCheckMode)>,
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
        if let Some((check, mode)) = check {
            let held = key_check(&db, check, mode)
                .map_err(|source| OpenError::Database { path: path.clone(), source })?;
            if !check.matches(&held) {
                return Err(OpenError::KeySecretMismatch { path });
            }
        }
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

/// The store's key check value ([`crate::secret::KeyCheck`]), alone in its table.
const KEY_CHECK_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("key_check");

/// Writes `check` in `mode` (when absent, or always for [`KeyCheckMode::Adopt`]) in one
/// durable transaction, as `key_check.lua` does on Redis, and answers the value held
/// after it.
fn key_check(db: &Database, check: &KeyCheck, mode: KeyCheckMode) -> Result<Vec<u8>, BoxError> {
    let txn = db.begin_write()?;
    let held = {
        let mut table = txn.open_table(KEY_CHECK_TABLE)?;
        let held = table.get(keys::KEY_CHECK)?.map(|v| v.value().to_vec());
        match (held, mode) {
            (Some(held), KeyCheckMode::Prove) => held,
            _ => {
                table.insert(keys::KEY_CHECK, check.as_str().as_bytes())?;
                check.as_str().as_bytes().to_vec()
            }
        }
    };
    txn.commit()?;
    Ok(held)
}

fn unexpected() -> StoreError {
    StoreError::Protocol("embedded store answered another operation's reply".into())
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
            attempt: attempt.attempt_id.map(|k| (k.as_str().to_owned(), k.binding())),
            attempt_ttl_ms: throttle::duration_ms(self.attempt_id_horizon),
            policy: *attempt.policy,
            repeat: attempt.repeat.map(|r| (r.list.as_str().to_owned(), r.fingerprint)),
            read_epoch: attempt.read_epoch,
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
        allowed: bool,
    ) -> Result<(), StoreError> {
        let attempt = attempt_id.map(|k| k.as_str().to_owned());
        let op = Op::Refund { record: key.record(), attempt, window_start_ms, allowed };
        self.submit(op).await.map(drop)
    }

    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        let SprayNoteRequest { spray, account, note, period_ms, limit } = *request;
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

    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        let NetworkRequest { key, op, policy, held } = *request;
        let held = held.map(|h| h.as_str().to_owned());
        match self.submit(Op::Network { key: key.as_key(), op, policy: *policy, held }).await? {
            Reply::Network(state) => Ok(state),
            _ => Err(unexpected()),
        }
    }

    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        let op = Op::Breached {
            key: note.account.breached_count(),
            credential: note.credential,
            ttl_ms: note.ttl_ms,
        };
        match self.submit(op).await? {
            Reply::Count(count) => Ok(count),
            _ => Err(unexpected()),
        }
    }

    async fn send_mail(
        &self,
        request: &SendRequest<'_>,
        network: Option<&NetworkRequest<'_>>,
    ) -> Result<MailSent, StoreError> {
        let SendRequest { log, attempt_id, policy, .. } = *request;
        let op = Op::Mail {
            network: network.map(|n| (n.key.as_key(), *n.policy)),
            log: log.record(),
            attempt: attempt_id.map(|a| (a.as_str().to_owned(), a.binding())),
            attempt_ttl_ms: throttle::duration_ms(self.attempt_id_horizon),
            policy: *policy,
        };
        match self.submit(op).await? {
            Reply::Mail { sent, network_refused } => {
                Ok(MailSent { sent, network_refused, give_back_due: false })
            }
            _ => Err(unexpected()),
        }
    }

    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        let SendRequest { log, attempt_id, policy, op } = *request;
        let op = Op::Send {
            log: log.record(),
            attempt: attempt_id.map(|a| (a.as_str().to_owned(), a.binding())),
            attempt_ttl_ms: throttle::duration_ms(self.attempt_id_horizon),
            policy: *policy,
            op,
        };
        match self.submit(op).await? {
            Reply::Sent(sent) => Ok(sent),
            _ => Err(unexpected()),
        }
    }

    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        let RepeatNoteRequest { bucket, list, fingerprint, max_len } = *request;
        let op = Op::NoteRepeat {
            record: bucket.record(),
            list: list.as_str().to_owned(),
            fingerprint,
            max_len,
        };
        self.submit(op).await.map(drop)
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

    async fn confirm_device(&self, c: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
        let op = Op::Confirm {
            record: c.account.record(),
            second_factor: c.account.flow(crate::throttle::flow::Flow::SecondFactor).record(),
            epoch_key: c.account.device_epoch(),
            mark: c.challenge.record(),
            challenge_epoch: c.challenge_epoch,
            policy: *c.second_factor,
            mark_ttl_ms: c.mark_ttl_ms,
            epoch_ttl_ms: c.epoch_ttl_ms,
        };
        match self.submit(op).await? {
            Reply::Confirmed(c) => Ok(c),
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
    /// [`crate::telemetry::metrics::MEMORY_USED_GAUGE`] (no limit: the disk's, which node metrics
    /// watch).
    async fn ping(&self) -> Result<(), StoreError> {
        self.submit(Op::Ping).await?;
        if let Ok(meta) = tokio::fs::metadata(&self.path).await {
            metrics::gauge!(crate::telemetry::metrics::MEMORY_USED_GAUGE).set(meta.len() as f64);
            metrics::gauge!(crate::telemetry::metrics::MEMORY_LIMIT_GAUGE).set(0.0);
        }
        Ok(())
    }
}
