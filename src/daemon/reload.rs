//! What the daemon does on the signals an init system, an operator or a log rotator
//! sends besides SIGTERM and SIGINT (docs/deployment.md, "Signals and reloads").
//!
//! - **SIGHUP never ends the daemon.** It reloads what can change without a restart, in
//!   every configuration: the listener's TLS files (`[tls]`), the breach filter file
//!   (`[breach] filter_file`), and the callers (`[callers]`) with their token files. With the configuration file the daemon was
//!   started from (`portcullis serve --config`), that file is read and validated again,
//!   whole: an invalid file is refused with an error log and *everything* stays as it
//!   was; a valid one puts its `[callers]` in force for every request from then on (on
//!   open connections too) and names, in a warning, every other section that differs
//!   from the configuration the daemon started with and so needs a restart (realms,
//!   store, limits, …). That restart stays pending, named on every later reload, in the
//!   readiness text and in `portcullis_config_restart_pending`, until the file no longer
//!   differs there (or the daemon restarts). Without a file (a daemon built from
//!   settings in-process), the token files are read again.
//! - **SIGUSR1 and SIGUSR2** are ignored (logged): log rotators send them to daemons
//!   that write log files, and their default action would end the process. The daemon
//!   logs to standard error, so there is nothing to reopen.
//!
//! The handlers are installed when the daemon starts serving; `portcullis serve`
//! installs them before anything else (`install_handlers`), so a signal during start-up
//! is not fatal either.

use std::sync::{Arc, Mutex, PoisonError};

use crate::auth::CallerTable;
use crate::config::{Config, Settings};
use crate::defence::breach::BreachList;
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::CONFIG_RESTART_PENDING;
use crate::telemetry::running_config::RunningConfig;
use crate::transport::tls::ReloadingTls;

/// Reads and validates the configuration again, as `portcullis serve` did at start-up
/// (the file, its flags and environment variables): the file's text and what it
/// validates to.
pub type SettingsSource = Arc<
    dyn Fn() -> Result<(Config, Settings), Box<dyn std::error::Error + Send + Sync>> + Send + Sync,
>;

/// The reloadable parts of a running daemon.
pub struct Reloader {
    tls: Option<Arc<ReloadingTls>>,
    /// The breach filter, read again on every reload (it logs and counts its own
    /// outcome; a broken file keeps the filter in force and refuses nothing else).
    breach: Arc<BreachList>,
    callers: Arc<CallerTable>,
    /// The configuration file's source and the configuration the daemon started with,
    /// when it was started from one: what runs, except the callers a reload replaced.
    source: Option<(SettingsSource, Config)>,
    /// The sections whose change waits for a restart, as the last reload found them.
    pending: Mutex<Vec<String>>,
    /// Where the readiness text names the pending restart.
    readiness: Option<Arc<Readiness>>,
    /// The configuration in force as `Admin/EffectiveConfig` reports it: a reload that
    /// applies puts its callers, its file's digest and the pending restart there.
    running: Arc<RunningConfig>,
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The callers (and TLS files) in force are the new ones. `restart` names the
    /// sections that changed but take effect only after a restart.
    Applied {
        /// Top-level sections of the file that differ from the configuration the daemon
        /// started with and need a restart (a restart pending).
        restart: Vec<String>,
    },
    /// The configuration (or the TLS files) could not be used: nothing changed.
    Refused,
}

impl Reloader {
    /// The reloadable parts: the listener's TLS, the caller table every request reads,
    /// where the configuration came from (`None`: not from a file) with the one the
    /// daemon started with, the readiness whose text names a pending restart, and the
    /// configuration report in force.
    pub fn new(
        tls: Option<Arc<ReloadingTls>>,
        breach: Arc<BreachList>,
        callers: Arc<CallerTable>,
        source: Option<(SettingsSource, Config)>,
        readiness: Option<Arc<Readiness>>,
        running: Arc<RunningConfig>,
    ) -> Arc<Self> {
        let pending = Mutex::default();
        Arc::new(Self { tls, breach, callers, source, pending, readiness, running })
    }

    /// The sections whose change waits for a restart, as the last reload found them.
    pub fn restart_pending(&self) -> Vec<String> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records what waits for a restart: the gauge per section (0 for one no longer
    /// pending), the readiness text. Names only, never values.
    fn note_pending(&self, restart: &[String]) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in pending.iter().filter(|s| !restart.contains(s)) {
            metrics::gauge!(CONFIG_RESTART_PENDING, "section" => gone.clone()).set(0.0);
        }
        for section in restart {
            metrics::gauge!(CONFIG_RESTART_PENDING, "section" => section.clone()).set(1.0);
        }
        restart.clone_into(&mut pending);
        if let Some(readiness) = &self.readiness {
            readiness.set_restart_pending(restart.to_vec());
        }
    }

    /// One reload (SIGHUP), logged and counted in `portcullis_config_reloads_total` by
    /// outcome.
    pub async fn reload(&self) -> Reloaded {
        let outcome = self.try_reload().await;
        let label = match &outcome {
            Reloaded::Applied { restart } => {
                self.note_pending(restart);
                if restart.is_empty() {
                    tracing::info!("reload: configuration reloaded");
                } else {
                    tracing::warn!(
                        sections = %restart.join(", "),
                        "reload: callers and TLS files reloaded; restart pending: the other changed sections take effect after a restart and still run as started"
                    );
                }
                "ok"
            }
            Reloaded::Refused => {
                let pending = self.restart_pending();
                if !pending.is_empty() {
                    tracing::warn!(
                        sections = %pending.join(", "),
                        "reload refused; restart pending from an earlier reload: these sections still run as started"
                    );
                }
                "refused"
            }
        };
        metrics::counter!(crate::telemetry::metrics::CONFIG_RELOADS, "outcome" => label)
            .increment(1);
        outcome
    }

    async fn try_reload(&self) -> Reloaded {
        // On its own task: a filter file stuck in the kernel (a hung mount) must not hold
        // up the callers and TLS files.
        // One load at a time: a SIGHUP during one is answered by one more after it.
        let _ = self.breach.request_reload(true);
        let mut last_failure = None;
        let tls_ok = match &self.tls {
            Some(tls) => tls.clone().reload_logged(true, &mut last_failure).await,
            None => true,
        };
        let Some((source, started)) = &self.source else {
            // No file: the same callers, their token files read again.
            return match self.callers.current().reread() {
                Ok(callers) if tls_ok => {
                    self.callers.replace(Arc::new(callers));
                    Reloaded::Applied { restart: Vec::new() }
                }
                Ok(_) => Reloaded::Refused,
                Err(e) => {
                    tracing::error!(error = %e, "reload refused: the callers in force stay");
                    Reloaded::Refused
                }
            };
        };
        let source = source.clone();
        // File reads (configuration, token files, certificates) off the I/O thread.
        let loaded = tokio::task::spawn_blocking(move || source()).await;
        let (config, settings) = match loaded {
            Ok(Ok(loaded)) => loaded,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "reload refused: the configuration in force stays");
                return Reloaded::Refused;
            }
            Err(_) => {
                tracing::error!("reload refused: the configuration could not be read");
                return Reloaded::Refused;
            }
        };
        // Against what the daemon started with, not the last reload: a change a restart
        // must apply stays pending, and named, on every reload until then.
        let changed = changed_sections(started, &config);
        if changed.iter().any(|s| s == "tls") {
            // Another listener certificate or client CA *file*, or TLS on or off: the
            // callers' identities depend on it, so nothing is applied before a restart.
            tracing::error!(
                "reload refused: [tls] names other files or turns TLS on or off; restart to apply"
            );
            return Reloaded::Refused;
        }
        if !tls_ok {
            return Reloaded::Refused;
        }
        self.callers.replace(settings.callers.clone());
        let restart: Vec<String> = changed.into_iter().filter(|s| s != "callers").collect();
        self.running.reloaded(&settings.report, &["callers"], restart.clone());
        Reloaded::Applied { restart }
    }

    /// Runs until the daemon stops: SIGHUP reloads, SIGUSR1 and SIGUSR2 are ignored.
    pub async fn handle_signals(self: Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
                signal(SignalKind::hangup()),
                signal(SignalKind::user_defined1()),
                signal(SignalKind::user_defined2()),
            ) else {
                tracing::error!("reload: signal handlers could not be installed");
                return;
            };
            loop {
                tokio::select! {
                    _ = hup.recv() => {
                        tracing::info!("SIGHUP: reloading");
                        self.reload().await;
                    }
                    _ = usr1.recv() => tracing::info!("SIGUSR1 ignored (logs go to standard error)"),
                    _ = usr2.recv() => tracing::info!("SIGUSR2 ignored (logs go to standard error)"),
                }
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    }
}

/// Installs the handlers of SIGHUP, SIGUSR1 and SIGUSR2 for the process, so none of
/// them ends it before [`Reloader::handle_signals`] runs (tokio keeps a handler once
/// installed). Call inside a tokio runtime, first thing.
pub fn install_handlers() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        for kind in [SignalKind::hangup(), SignalKind::user_defined1(), SignalKind::user_defined2()]
        {
            if let Err(e) = signal(kind) {
                tracing::warn!(error = %e, "a signal handler could not be installed");
            }
        }
    }
}

/// Top-level sections (and top-level keys) of `new` that differ from `old`: `tls` when
/// its files, its reload interval or its presence differ. Values are compared, never
/// logged: a store URL may hold a password.
fn changed_sections(old: &Config, new: &Config) -> Vec<String> {
    use figment::value::Value;
    let dict = |c: &Config| match Value::serialize(c) {
        Ok(Value::Dict(_, d)) => d,
        _ => Default::default(),
    };
    let (old, new) = (dict(old), dict(new));
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    names.into_iter().filter(|k| old.get(*k) != new.get(*k)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    fn config(text: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(Some(&path), &Overrides::default()).unwrap()
    }

    /// Ten SIGHUPs while a configuration load is in flight start exactly one more load
    /// after it: at most one load at a time, and the signals during it coalesce.
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sighups_during_a_load_coalesce_into_one_more() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let text = format!("[store]\ndata_dir = {:?}\n", dir.path().join("data"));
        std::fs::write(&path, text).unwrap();
        let secret = || Some("0123456789abcdef".repeat(2));
        let started = Config::load(Some(&path), &Overrides::default()).unwrap();
        let settings = started.validate(secret()).unwrap();
        let loads = Arc::new(AtomicU64::new(0));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let counted = loads.clone();
        let source: SettingsSource = Arc::new(move || {
            // The first load waits until the test has sent every signal.
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = held.lock().unwrap().recv();
            }
            let config = Config::load(Some(&path), &Overrides::default())?;
            let settings = config.validate(secret())?;
            Ok((config, settings))
        });
        let reloader = Reloader::new(
            None,
            Arc::new(BreachList::disabled()),
            CallerTable::new(settings.callers.clone()),
            Some((source, started)),
            None,
            RunningConfig::new(settings.report.clone()),
        );
        install_handlers();
        let signals = tokio::spawn(reloader.handle_signals());
        let hup = || {
            let pid = std::process::id().to_string();
            let sent = std::process::Command::new("kill").args(["-HUP", &pid]).status();
            assert!(sent.unwrap().success());
        };
        let until = async |n: u64| {
            while loads.load(Ordering::SeqCst) < n {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        hup();
        until(1).await;
        for _ in 0..10 {
            hup();
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Let every signal reach the handler's stream before the first load ends.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        release.send(()).unwrap();
        until(2).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(loads.load(Ordering::SeqCst), 2, "loads started for 11 SIGHUPs");
        signals.abort();
    }

    #[test]
    fn changed_sections_are_named_and_nothing_else() {
        let base = "[store]\nredis_url = \"redis://:pw@h/\"\n[realms.default]\n";
        assert!(changed_sections(&config(base), &config(base)).is_empty());
        let more = format!("{base}max_failures = 3\n");
        assert_eq!(changed_sections(&config(base), &config(&more)), ["realms"]);
        let other = "[store]\nredis_url = \"redis://:other@h/\"\n[realms.default]\n";
        assert_eq!(changed_sections(&config(base), &config(other)), ["store"]);
        let listen = format!("listen = \"127.0.0.1:9\"\n{base}");
        assert_eq!(changed_sections(&config(base), &config(&listen)), ["listen"]);
    }
}
