//! The writer thread: every operation in order, batched into one durable commit. An
//! operation is a [`Job`]: its work on the batch's [`Tables`] (each rule's file writes
//! its own), answered only once the batch has committed.

use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableTable, TableDefinition};

use super::tables::Tables;
use crate::store::error::StoreError;

/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;
/// How often expired entries are swept: often, so a flood of made-up identifiers, whose
/// records expire with their window (docs/throttle.md, "How long a record lives"), is
/// removed about as fast as it arrives (up to `SWEEP_LIMIT` a second), and the file
/// stops growing instead of keeping expired entries for a minute.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// key → encoded entry (a record, an attempt id's answer, or one account key's spray
/// note), with its expiry.
pub(super) const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// (expiry ms, key): the sweep's index.
pub(super) const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
/// Clock high-water mark and other single values.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

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
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, crate::throttle::duration_ms)
    }
}

/// What delivers one operation's answer once its batch is settled: `None` when the batch
/// committed, or was aborted because nothing in it writes (the work's own result goes
/// out), else the batch's error, which every
/// operation of it answers instead (nothing of the batch was written).
type Delivery = Box<dyn FnOnce(Option<&str>) + Send>;

/// The work of one operation in its batch's transaction: given the tables (or the
/// error that kept the batch from starting), it does its part and answers how its
/// result is delivered.
type Work =
    Box<dyn for<'a, 'b, 'c> FnOnce(Result<&'a mut Tables<'b, 'c>, &str>) -> Delivery + Send>;

/// One operation for the writer thread.
pub(super) struct Job {
    /// The operation may write (a read-only batch is aborted, not committed).
    writes: bool,
    work: Work,
}

/// One operation (`work`, which `writes` or only reads) and where its answer arrives:
/// `work`'s result once its batch committed, or [`StoreError::Embedded`] when the batch
/// could not be committed (or the database not reopened).
pub(super) fn job<T: Send + 'static>(
    writes: bool,
    work: impl FnOnce(&mut Tables<'_, '_>) -> Result<T, StoreError> + Send + 'static,
) -> (Job, tokio::sync::oneshot::Receiver<Result<T, StoreError>>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let work: Work = Box::new(move |tables| {
        let result = tables.map_err(|e| StoreError::Embedded(e.to_owned())).and_then(work);
        Box::new(move |failed: Option<&str>| {
            let _ = tx.send(match failed {
                None => result,
                Some(e) => Err(StoreError::Embedded(e.to_owned())),
            });
        })
    });
    (Job { writes, work }, rx)
}

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
            let (deliveries, outcome) = match self.reopen() {
                Ok(db) => Self::apply(db, batch, now, sweep),
                Err(e) => {
                    let message = e.to_string();
                    let deliveries = batch.into_iter().map(|job| (job.work)(Err(&message)));
                    (deliveries.collect(), Err(e))
                }
            };
            match outcome {
                Ok(()) => {
                    if sweep {
                        self.last_sweep = Some(Instant::now());
                    }
                    for deliver in deliveries {
                        deliver(None);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "embedded store commit failed; reopening");
                    // Closed here (and its lock released), reopened by the next batch.
                    self.db = None;
                    let message = e.to_string();
                    for deliver in deliveries {
                        deliver(Some(&message));
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

    /// Runs `batch` in one transaction and commits durably. An operation's own error
    /// (a corrupt entry) answers that operation; a transaction error answers them all.
    /// Every job's work runs (with the tables, or with the error that kept the
    /// transaction from opening), so every caller is answered.
    fn apply(
        db: &Database,
        batch: Vec<Job>,
        now: u64,
        sweep: bool,
    ) -> (Vec<Delivery>, Result<(), BoxError>) {
        let mut deliveries = Vec::with_capacity(batch.len());
        let mut pending = batch.into_iter();
        let outcome = (|| {
            let txn = db.begin_write()?;
            let mut writes = false;
            {
                let mut entries = txn.open_table(ENTRIES)?;
                let mut expiry = txn.open_table(EXPIRY)?;
                let mut t = Tables { entries: &mut entries, expiry: &mut expiry, now };
                for job in pending.by_ref() {
                    writes |= job.writes;
                    deliveries.push((job.work)(Ok(&mut t)));
                }
                if sweep {
                    writes |= t.sweep()? > 0;
                }
                if writes {
                    txn.open_table(META)?.insert("clock_ms", now)?;
                }
            }
            if writes {
                txn.commit()?;
            } else {
                txn.abort()?;
            }
            Ok::<(), BoxError>(())
        })();
        if let Err(e) = &outcome {
            // Jobs the failure kept from running are answered with it too.
            let message = e.to_string();
            deliveries.extend(pending.map(|job| (job.work)(Err(&message))));
        }
        (deliveries, outcome)
    }
}
