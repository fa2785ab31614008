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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use async_trait::async_trait;
use redb::Database;

use super::error::StoreError;
use super::key_check::KeyCheckMode;
use super::keys::AccountKey;
use super::{DEFAULT_ATTEMPT_ID_HORIZON, Store};
use crate::secret::KeyCheck;
use crate::throttle::Record;

mod attempt_count;
mod breached_count;
mod candidate_report;
mod devices;
mod entry;
mod key_check;
mod network_bucket;
mod realm_tally;
mod repeat_list;
mod send_log;
mod spray_window;
mod tables;
mod writer;

use key_check::key_check;
use tables::Tables;
pub use writer::{Clock, MAX_BATCH, SWEEP_INTERVAL, SystemClock};
use writer::{Job, Writer, init};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "portcullis.redb";
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
        crate::store::key_check::KEY_SECRET_MISMATCH
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
        let record = key.record();
        self.submit(false, move |t| t.record(&record)).await
    }

    /// When the live entry at `key` (a record, an attempt id's answer, a device epoch)
    /// expires, in ms since the Unix epoch on the store's clock; `None` when there is
    /// none. For operators and tests. Never writes.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot answer.
    pub async fn expires_at(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let key = key.to_owned();
        self.submit(false, move |t| Ok(t.get(&key)?.map(|e| e.expires_ms()))).await
    }

    /// Runs `work` (which `writes`, or only reads) as one operation of the writer's next
    /// batch, and answers its result once the batch has committed: each rule's file
    /// submits its operations this way.
    async fn submit<T: Send + 'static>(
        &self,
        writes: bool,
        work: impl FnOnce(&mut Tables<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (job, rx): (Job, _) = writer::job(writes, work);
        let jobs = self.jobs.as_ref().ok_or(StoreError::Closed)?;
        jobs.send(job).map_err(|_| StoreError::Closed)?;
        match tokio::time::timeout(self.operation_timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(StoreError::Closed),
            Err(_) => Err(StoreError::Timeout(self.operation_timeout)),
        }
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    /// Health: the writer answers; also reports the database file's size as
    /// [`crate::telemetry::metrics::MEMORY_USED_GAUGE`] (no limit: the disk's, which node metrics
    /// watch).
    async fn ping(&self) -> Result<(), StoreError> {
        self.submit(false, |_| Ok(())).await?;
        if let Ok(meta) = tokio::fs::metadata(&self.path).await {
            metrics::gauge!(crate::telemetry::metrics::MEMORY_USED_GAUGE).set(meta.len() as f64);
            metrics::gauge!(crate::telemetry::metrics::MEMORY_LIMIT_GAUGE).set(0.0);
        }
        Ok(())
    }
}
