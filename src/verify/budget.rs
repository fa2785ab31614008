//! The CPU budget: who may run a password-hash comparison, and when (docs/verify.md,
//! "The CPU budget (per daemon)").
//!
//! - a global ceiling of `max_concurrent` comparisons, run on a dedicated pool of exactly
//!   that many threads (never on the async runtime);
//! - a per-client ceiling of `max_per_client` slots: a client at its cap *waits* for its
//!   own earlier call rather than being refused. The client's slot is taken before the
//!   attempt is counted and held until the call ends ([`Ticket::take_turn`]), so one
//!   browser's parallel logins to one account are counted one after the other, each
//!   after the clear of the one before (docs/verify.md, "Parallel logins");
//! - a bounded wait (`max_wait`, and never past the caller's deadline) and a bounded queue
//!   (`max_waiters`); past either the call is refused, counted by reason;
//! - a **trusted lane** for calls with a valid device token (`docs/devices.md`): they
//!   wait in their own bounded queue (`max_trusted_waiters`), which no flood of untrusted
//!   calls can fill, and get a freed slot before untrusted waiters.
//!
//! The lanes share one FIFO semaphore of global slots. Every trusted waiter queues on it
//! directly; untrusted waiters first pass a gate (an async mutex) that lets one of them
//! at a time queue there. So a freed slot goes to the trusted waiters in order, with at
//! most one untrusted waiter ahead of any of them, and the untrusted keep their FIFO
//! order among themselves. This uses tokio's semaphore and mutex as they are, instead of
//! a hand-rolled priority queue of permits.
//!
//! Global slots are `tokio::sync::Semaphore` permits moved into the pool job, so a slot is
//! released only when its comparison really ends, even if the caller went away.
//! Admission knows only the client key, never the identifier, account or password.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::telemetry::episodes::{DEFAULT_QUIET, RefusalEpisodes};
use crate::telemetry::metrics::{REFUSALS, RUNNING, TRUSTED_REFUSALS, WAITING};

/// How long the hashing threads are idle before their kept argon2 working memory is
/// freed ([`CpuBudget::spawn_memory_release`]): short enough that a flood's memory is
/// back with the operating system seconds after it, long enough that steady traffic
/// keeps it.
pub const KEPT_MEMORY_IDLE: Duration = Duration::from_secs(2);

/// The budget's settings, validated by [`crate::config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSettings {
    /// Comparisons at once, and pool threads (default `max(1, cores / 2)`).
    pub max_concurrent: usize,
    /// Slots one client key may hold at once (default 1).
    pub max_per_client: usize,
    /// Longest wait for a slot (default 1 s).
    pub max_wait: Duration,
    /// Most untrusted calls waiting for a slot at once (default 8 × `max_concurrent`).
    pub max_waiters: usize,
    /// Most trusted calls (valid device token) waiting at once, apart from
    /// `max_waiters` (default 8 × `max_concurrent`).
    pub max_trusted_waiters: usize,
}

/// Which queue a call waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Everything without a valid device token.
    Untrusted,
    /// A call with a valid device token for its account: its own queue, served first.
    Trusted,
}

/// Why a call was refused a slot. Refused calls never reach a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `max_waiters` calls were already waiting.
    #[error("queue_full")]
    QueueFull,
    /// No slot within `max_wait`.
    #[error("wait_timeout")]
    WaitTimeout,
    /// No slot before the caller's deadline.
    #[error("deadline")]
    Deadline,
}

impl Refusal {
    /// The reason as a metric label and log field.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::QueueFull => "queue_full",
            Refusal::WaitTimeout => "wait_timeout",
            Refusal::Deadline => "deadline",
        }
    }
}

/// A comparison that was admitted but did not finish normally (it panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the comparison did not complete")]
pub struct Aborted;

/// A point-in-time view of the budget, for tests, health and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetStats {
    /// Comparisons running now.
    pub running: usize,
    /// Most comparisons ever seen running at once.
    pub peak_running: usize,
    /// Calls waiting for a slot now, both lanes.
    pub waiting: usize,
    /// Of those, calls waiting in the trusted lane.
    pub trusted_waiting: usize,
    /// Global slots free now.
    pub free_slots: usize,
    /// Client keys holding or waiting for a slot now.
    pub clients: usize,
    /// Comparisons started since start-up.
    pub comparisons: u64,
    /// Refusals since start-up: queue_full, wait_timeout, deadline.
    pub refused: [u64; 3],
}

/// The CPU budget. Cheap to share behind an `Arc`.
pub struct CpuBudget {
    settings: BudgetSettings,
    global: Arc<Semaphore>,
    /// Per-client semaphores, present only while a client holds or awaits a slot, so the
    /// table is bounded by `max_concurrent + max_waiters`.
    clients: ClientTable,
    /// The dedicated hashing threads.
    pool: rayon::ThreadPool,
    /// Untrusted calls holding a place in the bounded queue (reserved, not yet hashing).
    waiting: Arc<AtomicUsize>,
    /// Trusted calls holding a place in the trusted lane's queue.
    trusted_waiting: Arc<AtomicUsize>,
    /// Lets one untrusted waiter at a time queue on `global`, so trusted waiters are
    /// never behind more than one of them.
    untrusted_gate: Arc<tokio::sync::Mutex<()>>,
    running: Arc<AtomicUsize>,
    peak_running: Arc<AtomicUsize>,
    comparisons: Arc<AtomicU64>,
    refused: [AtomicU64; 3],
    /// Where refusals are logged: a few lines an episode, never one a refusal.
    episodes: Arc<RefusalEpisodes>,
}

impl CpuBudget {
    /// Starts the pool of `settings.max_concurrent` threads.
    ///
    /// # Errors
    /// When the operating system refuses the threads.
    pub fn new(settings: BudgetSettings) -> Result<Self, rayon::ThreadPoolBuildError> {
        Self::with_episodes(settings, RefusalEpisodes::new(DEFAULT_QUIET))
    }

    /// As [`Self::new`], reporting refusals to `episodes`.
    ///
    /// # Errors
    /// When the operating system refuses the threads.
    pub fn with_episodes(
        settings: BudgetSettings,
        episodes: Arc<RefusalEpisodes>,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        // Exported from the start, so dashboards see 0 rather than nothing.
        metrics::gauge!(RUNNING).set(0.0);
        metrics::gauge!(WAITING).set(0.0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(settings.max_concurrent)
            .thread_name(|i| format!("portcullis-hash-{i}"))
            .build()?;
        Ok(Self {
            settings,
            global: Arc::new(Semaphore::new(settings.max_concurrent)),
            clients: Arc::default(),
            pool,
            waiting: Arc::default(),
            trusted_waiting: Arc::default(),
            untrusted_gate: Arc::default(),
            running: Arc::default(),
            peak_running: Arc::default(),
            comparisons: Arc::default(),
            refused: Default::default(),
            episodes,
        })
    }

    /// The refusal episodes this budget reports to (the store's failures join them).
    pub fn episodes(&self) -> &Arc<RefusalEpisodes> {
        &self.episodes
    }

    /// The settings in force.
    pub fn settings(&self) -> BudgetSettings {
        self.settings
    }

    /// Takes a place in the budget for `client_key`, before the attempt is counted: a
    /// slot when one is free now, else a place in the bounded queue. A full queue is
    /// refused here, so the flood's refusals cost no store work (nothing was counted,
    /// nothing needs a refund).
    ///
    /// `lane` is [`Lane::Trusted`] only for a call whose device token checked out.
    ///
    /// # Errors
    /// [`Refusal::QueueFull`] when the lane's queue is full (`max_waiters` untrusted or
    /// `max_trusted_waiters` trusted calls already wait).
    pub fn reserve(self: &Arc<Self>, client_key: &str, lane: Lane) -> Result<Ticket, Refusal> {
        let client =
            ClientSlot::new(self.clients.clone(), client_key, self.settings.max_per_client);
        let own = client.semaphore.clone().try_acquire_owned().ok();
        // A free global slot exists only while nobody queues on `global`, so taking it
        // jumps ahead of no trusted waiter.
        let global = own.as_ref().and_then(|_| self.global.clone().try_acquire_owned().ok());
        let place = if global.is_some() {
            None
        } else {
            let (waiting, max) = self.queue(lane);
            match Queued::enter(waiting.clone(), max) {
                Ok(place) => Some(place),
                Err(refusal) => {
                    self.record_refusal(refusal, lane);
                    return Err(refusal);
                }
            }
        };
        Ok(Ticket {
            budget: self.clone(),
            lane,
            reserved_at: Instant::now(),
            own,
            global,
            place,
            _client: client,
        })
    }

    /// The lane's waiting counter and bound.
    fn queue(&self, lane: Lane) -> (&Arc<AtomicUsize>, usize) {
        match lane {
            Lane::Untrusted => (&self.waiting, self.settings.max_waiters),
            Lane::Trusted => (&self.trusted_waiting, self.settings.max_trusted_waiters),
        }
    }

    /// Frees the hashing threads' kept argon2 working memory
    /// ([`super::hash::release_kept_memory`]) once no comparison has started for a whole
    /// `idle` period (checked every `idle`, so 1–2 × `idle` after the last one). Runs on
    /// the current tokio runtime until the budget is dropped.
    pub fn spawn_memory_release(self: &Arc<Self>, idle: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            // `interval` refuses a zero period.
            let mut ticks = tokio::time::interval(idle.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Comparisons started when last looked (the count starts at 0 with the pool).
            let mut last = 0;
            // Whether a comparison ran since the last release (memory may be kept).
            let mut held = false;
            loop {
                ticks.tick().await;
                let Some(budget) = weak.upgrade() else { return };
                let now = budget.comparisons.load(Ordering::Relaxed);
                if now != last {
                    held = true;
                    last = now;
                } else if held && budget.running.load(Ordering::SeqCst) == 0 {
                    budget.pool.spawn_broadcast(|_| super::hash::release_kept_memory());
                    held = false;
                }
            }
        });
    }

    fn spawn<T: Send + 'static>(
        &self,
        slot: OwnedSemaphorePermit,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<Result<T, Aborted>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let running = self.running.clone();
        let peak = self.peak_running.clone();
        self.comparisons.fetch_add(1, Ordering::Relaxed);
        self.pool.spawn(move || {
            // The global slot moves into the job: it is released when the comparison
            // ends, whether or not anyone still waits for the answer, and before the
            // answer is sent, so a caller that has its answer finds the slot free.
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            metrics::gauge!(RUNNING).set(now as f64);
            let result = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|_| Aborted);
            let now = running.fetch_sub(1, Ordering::SeqCst) - 1;
            metrics::gauge!(RUNNING).set(now as f64);
            drop(slot);
            let _ = tx.send(result);
        });
        rx
    }

    /// When a wait that began with a reservation at `reserved_at` must end, and the
    /// refusal it ends with: `max_wait` after the reservation, or the caller's deadline
    /// when that is sooner.
    fn wait_until(
        &self,
        reserved_at: Instant,
        deadline: Option<Instant>,
    ) -> Result<(Instant, Refusal), Refusal> {
        let by_wait = reserved_at + self.settings.max_wait;
        match deadline {
            Some(d) if d <= Instant::now() => Err(Refusal::Deadline),
            Some(d) if d < by_wait => Ok((d, Refusal::Deadline)),
            _ => Ok((by_wait, Refusal::WaitTimeout)),
        }
    }

    /// A global slot, in `lane`'s order (see the module docs), by `until`.
    async fn global_slot(
        &self,
        lane: Lane,
        until: Instant,
        reason: Refusal,
    ) -> Result<OwnedSemaphorePermit, Refusal> {
        let acquire = async {
            match lane {
                Lane::Trusted => self.global.clone().acquire_owned().await,
                Lane::Untrusted => {
                    let _gate = self.untrusted_gate.lock().await;
                    self.global.clone().acquire_owned().await
                }
            }
        };
        match tokio::time::timeout_at(until.into(), acquire).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(reason),
        }
    }

    fn record_refusal(&self, reason: Refusal, lane: Lane) {
        // QueueFull, WaitTimeout, Deadline: 0, 1, 2, the order of `BudgetStats::refused`.
        let i = reason as usize;
        self.refused[i].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(REFUSALS, "reason" => reason.as_str()).increment(1);
        if lane == Lane::Trusted {
            metrics::counter!(TRUSTED_REFUSALS, "reason" => reason.as_str()).increment(1);
        }
        self.episodes.refused(reason.as_str());
    }

    /// The current state.
    pub fn stats(&self) -> BudgetStats {
        BudgetStats {
            running: self.running.load(Ordering::SeqCst),
            peak_running: self.peak_running.load(Ordering::SeqCst),
            waiting: self.waiting.load(Ordering::SeqCst)
                + self.trusted_waiting.load(Ordering::SeqCst),
            trusted_waiting: self.trusted_waiting.load(Ordering::SeqCst),
            free_slots: self.global.available_permits(),
            clients: self.clients.lock().map(|c| c.len()).unwrap_or(usize::MAX),
            comparisons: self.comparisons.load(Ordering::Relaxed),
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
        }
    }
}

/// Client keys holding or waiting for a slot: each one's semaphore and how many
/// [`ClientSlot`]s refer to it. The holder count is kept under the lock rather than read
/// from the `Arc`'s strong count, which permits also raise and which concurrent drops
/// lower only after their `Drop` ran (two last holders could each see the other and both
/// leave the entry behind).
type ClientTable = Arc<Mutex<HashMap<String, (Arc<Semaphore>, usize)>>>;

/// A reference to one client key's semaphore; the last one out removes the table entry.
struct ClientSlot {
    table: ClientTable,
    key: String,
    semaphore: Arc<Semaphore>,
}

impl ClientSlot {
    fn new(table: ClientTable, key: &str, slots: usize) -> Self {
        let semaphore = {
            let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
            let entry =
                t.entry(key.to_owned()).or_insert_with(|| (Arc::new(Semaphore::new(slots)), 0));
            entry.1 += 1;
            entry.0.clone()
        };
        Self { table, key: key.to_owned(), semaphore }
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = t.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                t.remove(&self.key);
            }
        }
    }
}

/// A place in the budget, taken before the attempt is counted ([`CpuBudget::reserve`]).
/// Dropping it (a closed door, a store error, a caller gone, the end of the call) gives
/// back whatever it holds.
///
/// It holds up to two slots. The client's own slot (`max_per_client`) is taken first,
/// before the attempt is counted ([`Ticket::take_turn`]), and kept until the ticket is
/// dropped, so a client's next call is counted only after this one has finished,
/// comparison *and* clear: six parallel logins of one browser to one account each find
/// the record the one before left (docs/verify.md, "Parallel logins"). The global slot
/// is taken after the count ([`Ticket::compare`]) and released when the comparison
/// ends.
pub struct Ticket {
    budget: Arc<CpuBudget>,
    lane: Lane,
    /// `max_wait` runs from here, across both waits.
    reserved_at: Instant,
    // Field order is drop order: permits and the queue place first, then the client
    // table entry they keep alive.
    /// The client's own slot, once had.
    own: Option<OwnedSemaphorePermit>,
    /// A global slot taken at reservation (both were free), not yet used.
    global: Option<OwnedSemaphorePermit>,
    /// The place in the lane's bounded queue, held until the global slot is had.
    place: Option<Queued>,
    _client: ClientSlot,
}

impl Ticket {
    /// The admission span (zero-length when nothing was waited for). Only for the
    /// trace: without an exporter no span (crate::telemetry::traces::exporting).
    fn admission_span(&self) -> tracing::Span {
        if crate::telemetry::traces::exporting() {
            tracing::info_span!(
                "cpu_admission",
                otel.name = "cpu_admission",
                queued = self.place.is_some(),
                outcome = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        }
    }

    /// The span of a wait for the client's own turn (only made when there is one).
    fn turn_span() -> tracing::Span {
        if crate::telemetry::traces::exporting() {
            tracing::info_span!(
                "client_turn",
                otel.name = "client_turn",
                outcome = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        }
    }

    fn refused(&self, reason: Refusal, span: &tracing::Span) -> Refusal {
        span.record("outcome", reason.as_str());
        self.budget.record_refusal(reason, self.lane);
        reason
    }

    /// Waits for the client's own slot (at most `max_wait` after the reservation, never
    /// past `deadline`), which the ticket then keeps until it is dropped. Call it before
    /// the attempt is counted: a refusal here leaves nothing to refund.
    ///
    /// # Errors
    /// [`Refusal::WaitTimeout`] or [`Refusal::Deadline`] when the slot was not had in time.
    pub async fn take_turn(&mut self, deadline: Option<Instant>) -> Result<(), Refusal> {
        if self.own.is_some() {
            return Ok(());
        }
        let span = Self::turn_span();
        let (until, reason) = match self.budget.wait_until(self.reserved_at, deadline) {
            Ok(bound) => bound,
            Err(reason) => return Err(self.refused(reason, &span)),
        };
        let semaphore = self._client.semaphore.clone();
        let waited = tokio::time::timeout_at(until.into(), semaphore.acquire_owned())
            .instrument(span.clone())
            .await;
        match waited {
            Ok(Ok(own)) => {
                span.record("outcome", "admitted");
                self.own = Some(own);
                Ok(())
            }
            Ok(Err(_)) | Err(_) => Err(self.refused(reason, &span)),
        }
    }

    /// Waits for the client's own slot if [`Self::take_turn`] has not, then for a global
    /// slot (both within `max_wait` of the reservation and never past `deadline`), then
    /// runs `work` on the hashing pool and returns its result. The global slot is
    /// released when `work` ends; the client's own slot stays with the ticket.
    ///
    /// # Errors
    /// `Err(Refusal)` when no slot was had in time: `work` never ran. `Ok(Err(Aborted))`
    /// when `work` panicked (its slot is released all the same).
    pub async fn compare<T: Send + 'static>(
        &mut self,
        deadline: Option<Instant>,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, Aborted>, Refusal> {
        self.take_turn(deadline).await?;
        let span = self.admission_span();
        let global = match self.global.take() {
            Some(global) => global,
            None => {
                let (until, reason) = match self.budget.wait_until(self.reserved_at, deadline) {
                    Ok(bound) => bound,
                    Err(reason) => return Err(self.refused(reason, &span)),
                };
                let waited = self
                    .budget
                    .global_slot(self.lane, until, reason)
                    .instrument(span.clone())
                    .await;
                // The queue place is held until the wait ends, then given back.
                self.place = None;
                match waited {
                    Ok(global) => global,
                    Err(reason) => return Err(self.refused(reason, &span)),
                }
            }
        };
        span.record("outcome", "admitted");
        drop(span);
        Ok(self.budget.spawn(global, work).await.unwrap_or(Err(Aborted)))
    }

    /// Moves a trusted-lane ticket to the untrusted lane (its device token turned out
    /// revoked): a queue place in the untrusted lane instead of the trusted one. A ticket
    /// that already holds its global slot keeps it.
    ///
    /// # Errors
    /// [`Refusal::QueueFull`] when the untrusted queue is full: the ticket is then spent.
    pub fn demote(&mut self) -> Result<(), Refusal> {
        if self.lane == Lane::Untrusted {
            return Ok(());
        }
        if self.place.is_some() {
            let (waiting, max) = self.budget.queue(Lane::Untrusted);
            match Queued::enter(waiting.clone(), max) {
                Ok(place) => self.place = Some(place),
                Err(refusal) => {
                    self.budget.record_refusal(refusal, Lane::Untrusted);
                    return Err(refusal);
                }
            }
        }
        self.lane = Lane::Untrusted;
        Ok(())
    }

    /// [`Self::compare`] for a ticket used for nothing else: the client's own slot is
    /// released with the comparison.
    ///
    /// # Errors
    /// As [`Self::compare`].
    pub async fn run<T: Send + 'static>(
        mut self,
        deadline: Option<Instant>,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, Aborted>, Refusal> {
        self.compare(deadline, work).await
    }
}

/// One place in the bounded queue, given back on drop (also when the caller goes away).
struct Queued(Arc<AtomicUsize>);

impl Queued {
    fn enter(waiting: Arc<AtomicUsize>, max: usize) -> Result<Self, Refusal> {
        let before = waiting.fetch_add(1, Ordering::SeqCst);
        if before >= max {
            waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::QueueFull);
        }
        metrics::gauge!(WAITING).set((before + 1) as f64);
        Ok(Self(waiting))
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let now = self.0.fetch_sub(1, Ordering::SeqCst) - 1;
        metrics::gauge!(WAITING).set(now as f64);
    }
}
