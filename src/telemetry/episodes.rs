//! Refusal episodes: how a flood of refusals reaches the log as a few lines (docs/observability.md,
//! "Refusal episodes"; the idea is Culvert's). The first refusal after a quiet period opens an
//! episode: one warning line naming its reason, and the [`EPISODE_OPEN`] gauge at 1.
//! Refusals while it is open are only counted. When no refusal came for a quiet
//! interval the episode closes with one summary line: the count by reason and how long
//! it lasted. Never one line per refusal.
//!
//! Reasons are fixed strings from the code (the CPU budget's `queue_full`,
//! `wait_timeout`, `deadline`; the store's `store_unavailable`), never caller input.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::metrics::{EPISODE_OPEN, EPISODES};

/// Default quiet interval that closes an episode.
pub const DEFAULT_QUIET: Duration = Duration::from_secs(10);

/// The daemon's refusal episodes. Cheap to share behind an `Arc`.
pub struct RefusalEpisodes {
    quiet: Duration,
    open: Mutex<Option<Episode>>,
}

/// The episode open now.
struct Episode {
    started: Instant,
    last: Instant,
    counts: BTreeMap<&'static str, u64>,
}

impl RefusalEpisodes {
    /// Episodes that close after `quiet` without a refusal.
    pub fn new(quiet: Duration) -> Arc<Self> {
        ::metrics::gauge!(EPISODE_OPEN).set(0.0);
        Arc::new(Self { quiet, open: Mutex::new(None) })
    }

    /// Counts one refusal for `reason`. Returns `true` when it opened an episode (the
    /// caller may then log what it knows of the cause, once).
    ///
    /// Inside a tokio runtime, the episode is closed by a timer task; without one it
    /// closes on the next refusal after the quiet interval.
    pub fn refused(self: &Arc<Self>, reason: &'static str) -> bool {
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = open.as_ref().map(|e| e.last)
            && now.duration_since(last) >= self.quiet
        {
            // No timer closed it (no runtime): close it now, before this refusal.
            close(open.take(), last);
        }
        match open.as_mut() {
            Some(episode) => {
                episode.last = now;
                *episode.counts.entry(reason).or_default() += 1;
                false
            }
            None => {
                *open = Some(Episode {
                    started: now,
                    last: now,
                    counts: BTreeMap::from([(reason, 1)]),
                });
                drop(open);
                tracing::warn!(reason, "refusal episode opened: calls are being refused");
                ::metrics::gauge!(EPISODE_OPEN).set(1.0);
                ::metrics::counter!(EPISODES).increment(1);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(self.clone().close_when_quiet());
                }
                true
            }
        }
    }

    /// Whether an episode is open now.
    pub fn is_open(&self) -> bool {
        self.open.lock().map(|o| o.is_some()).unwrap_or(true)
    }

    /// Sleeps until the episode has been quiet for the interval, then closes it.
    async fn close_when_quiet(self: Arc<Self>) {
        loop {
            let due = {
                let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
                let Some(episode) = open.as_ref() else { return };
                let due = episode.last + self.quiet;
                if Instant::now() >= due {
                    let end = episode.last;
                    close(open.take(), end);
                    return;
                }
                due
            };
            tokio::time::sleep_until(due.into()).await;
        }
    }
}

/// Writes the summary line of a closed episode that ended at `end`, its last refusal
/// (the quiet interval after it is not part of it).
fn close(episode: Option<Episode>, end: Instant) {
    let Some(episode) = episode else { return };
    let total: u64 = episode.counts.values().sum();
    let by_reason = episode
        .counts
        .iter()
        .map(|(reason, n)| format!("{reason}={n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let duration = end.duration_since(episode.started);
    tracing::warn!(
        total,
        by_reason = %by_reason,
        duration_ms = duration.as_millis() as u64,
        "refusal episode closed"
    );
    ::metrics::gauge!(EPISODE_OPEN).set(0.0);
}
