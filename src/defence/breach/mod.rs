//! Breached passwords (docs/breach.md): NIST SP 800-63B asks a verifier to compare a new
//! password against values known to be compromised, and to force a change on evidence
//! that a password is. The daemon already sees every password it verifies, so it screens
//! offline: a binary fuse filter of a breach corpus's SHA-1s ([`BreachFilter`], built by
//! [`build::build`]), loaded at start and reloaded on change ([`BreachList`]), asked on
//! a `Verify` accept only and by `CheckPassword` at set time ([`BreachList::check`]).
//! No password, hash or SHA-1 leaves this module; nothing is stored.

pub mod build;
pub mod config;
mod file;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

pub use config::{BreachConfig, BreachSettings};
pub use file::{BreachFilter, FALSE_POSITIVE_RATE, FilterError, key_of};

use crate::normalize::{NormalizedIdentifier, caseless};
use crate::telemetry::metrics::{BREACH_ENTRIES, BREACH_RELOADS};

/// Context words shorter than this many characters are not looked for (a two-letter
/// user name would refuse half of all passwords).
pub const MIN_CONTEXT_WORD_CHARS: usize = 4;

/// What `CheckPassword` found, in the order it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordCheck {
    /// In the breach corpus (up to [`FALSE_POSITIVE_RATE`]).
    Breached,
    /// Holds the identifier, its local part or a service word (caseless).
    ContextWord,
    /// Neither.
    Acceptable,
}

impl PasswordCheck {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            PasswordCheck::Breached => "breached",
            PasswordCheck::ContextWord => "context_word",
            PasswordCheck::Acceptable => "ok",
        }
    }
}

/// The file's identity, to see a change without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let meta = std::fs::metadata(path)?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(Stamp { len: meta.len(), modified: meta.modified().ok(), inode })
}

/// The last file a reload refused: its stamp, or that it could not be read.
#[derive(Debug)]
enum Refused {
    Unreadable,
    File(Stamp),
}

#[derive(Debug, Default)]
struct Seen {
    loaded: Option<Stamp>,
    refused: Option<Refused>,
}

/// The filter in force (none without `breach.filter_file`), swapped whole on reload;
/// and the service words, caseless.
#[derive(Debug)]
pub struct BreachList {
    file: Option<PathBuf>,
    reload_interval: Duration,
    current: RwLock<Option<Arc<BreachFilter>>>,
    /// Which file the filter in force came from, and which was last refused.
    seen: Mutex<Seen>,
    service_words: Vec<String>,
    /// The one load that may be in flight, and whether another was asked for meanwhile.
    flight: Mutex<Flight>,
    /// Loads of the file started by [`Self::request_reload`] (each reads a whole filter
    /// beside the one in force).
    loads_started: AtomicU64,
}

/// The reload in flight: at most one, so a burst of SIGHUPs (or one beside the periodic
/// check) never holds more than one filter being read beside the one in force.
#[derive(Debug, Default)]
struct Flight {
    /// A load runs now.
    running: bool,
    /// Asked for while it ran: one more load after it, forced when any request was.
    again: Option<bool>,
}

/// Ends the flight if its load panicked, so later reloads still run.
struct Landing<'a>(&'a Mutex<Flight>);

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Flight::default();
    }
}

impl BreachList {
    /// No filter and no service words: nothing is screened.
    pub fn disabled() -> Self {
        Self {
            file: None,
            reload_interval: Duration::from_secs(30),
            current: RwLock::new(None),
            seen: Mutex::new(Seen::default()),
            service_words: Vec::new(),
            flight: Mutex::new(Flight::default()),
            loads_started: AtomicU64::new(0),
        }
    }

    /// Loads `settings.filter_file` (when set) and logs its size and false-positive rate
    /// once.
    ///
    /// # Errors
    /// [`FilterError`] naming the file: a missing or broken filter stops the daemon.
    pub fn load(settings: &BreachSettings) -> Result<Self, FilterError> {
        let words = settings
            .service_words
            .iter()
            .map(|w| caseless(w))
            .filter(|w| w.chars().count() >= MIN_CONTEXT_WORD_CHARS)
            .collect();
        let mut list = Self { service_words: words, ..Self::disabled() };
        list.reload_interval = settings.reload_interval;
        // Exported from the start, so an alert on a refused reload has a series to
        // watch, and dashboards see 0 entries without a filter.
        for outcome in ["ok", "refused"] {
            metrics::counter!(BREACH_RELOADS, "outcome" => outcome).increment(0);
        }
        metrics::gauge!(BREACH_ENTRIES).set(0.0);
        if let Some(path) = &settings.filter_file {
            let before =
                stamp(path).map_err(|source| FilterError::Read { path: path.clone(), source })?;
            let filter = BreachFilter::load(path)?;
            log_loaded("breach filter loaded", path, &filter);
            *list.current.get_mut().unwrap_or_else(PoisonError::into_inner) =
                Some(Arc::new(filter));
            list.seen.get_mut().unwrap_or_else(PoisonError::into_inner).loaded = Some(before);
            list.file = Some(path.clone());
        }
        Ok(list)
    }

    /// The filter in force, if any.
    pub fn filter(&self) -> Option<Arc<BreachFilter>> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether `password` is in the filter in force; `false` without one.
    pub fn is_breached(&self, password: &[u8]) -> bool {
        self.filter().is_some_and(|f| f.contains(password))
    }

    /// `CheckPassword`'s finding for `password` as the new password of `identifier`:
    /// the filter first, then the context words (NIST SP 800-63B): the identifier, its
    /// part before `@`, and the service words, each looked for caseless inside the
    /// password, when at least [`MIN_CONTEXT_WORD_CHARS`] characters long. `None`
    /// without a filter: the check cannot be made, and a gateway must not take that for
    /// "acceptable".
    pub fn check(
        &self,
        password: &str,
        identifier: &NormalizedIdentifier,
    ) -> Option<PasswordCheck> {
        let filter = self.filter()?;
        if filter.contains(password.as_bytes()) {
            return Some(PasswordCheck::Breached);
        }
        let folded = zeroize::Zeroizing::new(caseless(password));
        let id = caseless(identifier.as_str());
        let local = id.split_once('@').map(|(local, _)| local.to_owned());
        let context = std::iter::once(id.as_str())
            .chain(local.as_deref())
            .chain(self.service_words.iter().map(String::as_str));
        for word in context {
            if word.chars().count() >= MIN_CONTEXT_WORD_CHARS && folded.contains(word) {
                return Some(PasswordCheck::ContextWord);
            }
        }
        Some(PasswordCheck::Acceptable)
    }

    /// Reloads the file when it changed (its size, modification time or inode) or when
    /// `force` (SIGHUP). A file that does not load leaves the filter in force as it was;
    /// it is logged once per distinct file (every time when forced). Answers whether the
    /// filter in force is the file's. Blocking: call off the I/O threads.
    pub fn reload(&self, force: bool) -> bool {
        let Some(path) = &self.file else { return true };
        let current = stamp(path);
        if !force {
            let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            match (&current, &seen.refused) {
                (Ok(s), _) if seen.loaded.as_ref() == Some(s) => return true,
                (Ok(s), Some(Refused::File(r))) if r == s => return false,
                (Err(_), Some(Refused::Unreadable)) => return false,
                _ => {}
            }
        }
        let loaded = current
            .map_err(|source| FilterError::Read { path: path.clone(), source })
            .and_then(|s| BreachFilter::load(path).map(|filter| (s, filter)));
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match loaded {
            Ok((s, filter)) => {
                log_loaded("breach filter reloaded", path, &filter);
                metrics::counter!(BREACH_RELOADS, "outcome" => "ok").increment(1);
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Some(Arc::new(filter));
                *seen = Seen { loaded: Some(s), refused: None };
                true
            }
            Err(e) => {
                tracing::error!(
                    error = %crate::setting::error_chain(&e),
                    "breach filter: reload refused, the filter in force stays"
                );
                metrics::counter!(BREACH_RELOADS, "outcome" => "refused").increment(1);
                seen.refused = Some(stamp(path).map_or(Refused::Unreadable, Refused::File));
                false
            }
        }
    }

    /// Looks at the file every `breach.reload_interval` until `stop` resolves.
    pub async fn watch(self: Arc<Self>, stop: impl Future<Output = ()>) {
        if self.file.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(self.reload_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => {}
            }
            if let Some(load) = self.request_reload(false) {
                let _ = load.await;
            }
        }
    }

    /// [`Self::reload`] on a blocking thread (the file may be large, or on a slow mount),
    /// one at a time: while a load is in flight, a request is noted and answered by one
    /// more load after it (forced when any request it stands for was), however many
    /// requests came meanwhile. The task of a load started here, `None` when the request
    /// joined one in flight. Call inside a tokio runtime.
    pub fn request_reload(self: &Arc<Self>, force: bool) -> Option<tokio::task::JoinHandle<()>> {
        {
            let mut flight = self.flight.lock().unwrap_or_else(PoisonError::into_inner);
            if flight.running {
                flight.again = Some(flight.again.unwrap_or(false) || force);
                return None;
            }
            flight.running = true;
        }
        let this = self.clone();
        Some(tokio::task::spawn_blocking(move || {
            let landing = Landing(&this.flight);
            let mut force = force;
            loop {
                this.loads_started.fetch_add(1, Ordering::Relaxed);
                this.reload(force);
                let mut flight = this.flight.lock().unwrap_or_else(PoisonError::into_inner);
                match flight.again.take() {
                    Some(again) => force = again,
                    None => break,
                }
            }
            drop(landing);
        }))
    }

    /// Loads started by [`Self::request_reload`] since start.
    pub fn loads_started(&self) -> u64 {
        self.loads_started.load(Ordering::Relaxed)
    }
}

fn log_loaded(message: &'static str, path: &Path, filter: &BreachFilter) {
    metrics::gauge!(BREACH_ENTRIES).set(filter.entries() as f64);
    tracing::info!(
        file = %path.display(),
        entries = filter.entries(),
        bytes = filter.bytes(),
        min_count = filter.min_count(),
        false_positive_rate = FALSE_POSITIVE_RATE,
        "{message}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten reload requests while one load is in flight start exactly one more load
    /// after it, not ten: a burst of SIGHUPs holds at most one filter being read.
    #[test]
    fn requests_during_a_load_coalesce_into_one_more() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let list = Arc::new(BreachList {
            file: Some(dir.path().join("missing.filter")),
            ..BreachList::disabled()
        });
        // The first load blocks where it records its outcome until the test lets go.
        let held = list.seen.lock().unwrap();
        let _entered = runtime.enter();
        let first = list.request_reload(true).expect("the first request starts a load");
        for n in 0..9 {
            assert!(list.request_reload(n % 2 == 0).is_none(), "request {n} started a load");
        }
        drop(held);
        runtime.block_on(first).unwrap();
        assert_eq!(list.loads_started(), 2);
        // Idle again: the next request starts a load of its own.
        let next = list.request_reload(false).expect("an idle list starts a load");
        runtime.block_on(next).unwrap();
        assert_eq!(list.loads_started(), 3);
    }
}
