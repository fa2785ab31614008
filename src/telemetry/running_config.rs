//! The running configuration as an operator reads it (`Admin/EffectiveConfig`,
//! `portcullis config-dump`; docs/observability.md, "The running configuration"): every
//! setting in force with its default filled in, as JSON, with the secrets named and
//! never shown; the configuration file's SHA-256 and when it was read; the sections a
//! restart would still change. Envoy's `/config_dump` and envoy ratelimit's `/rlconfig`
//! answer the same question: what does *this* replica run?
//!
//! The report is made by the configuration's owner (`crate::config`) and replaced by a
//! reload that applied (`crate::daemon::reload`); this module only keeps it, so the
//! operator service reads it without knowing how a file is read.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// One configuration as it runs. No field holds a secret: a password in a URL is `***`
/// in `settings`, and every secret is named in `secrets` by where it comes from (a
/// file's path, an environment variable's name), never by value.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigReport {
    /// Every setting, defaults filled in, as the file's TOML keys (durations in
    /// humantime text, `"15m"`), with URL passwords `***`.
    pub settings: serde_json::Value,
    /// SHA-256 (hex) of the configuration file's bytes as last read and applied; `None`
    /// for a daemon not started from a file.
    pub file_sha256: Option<String>,
    /// When that file (or the settings) were read.
    pub loaded_at: SystemTime,
    /// Top-level sections of the file, as last read, that differ from what runs and take
    /// effect only after a restart (docs/deployment.md, "Signals and reloads").
    pub restart_pending: Vec<String>,
    /// Each secret the daemon holds, named with where it comes from
    /// (`"store.key_secret: from the file /etc/portcullis/key-secret"`), never its value.
    pub secrets: Vec<String>,
}

impl ConfigReport {
    /// A report of `settings` (already redacted) with its `secrets` named, read now, not
    /// from a file.
    pub fn new(settings: serde_json::Value, secrets: Vec<String>) -> Self {
        Self {
            settings,
            file_sha256: None,
            loaded_at: SystemTime::now(),
            restart_pending: Vec::new(),
            secrets,
        }
    }

    /// The same report, read from a file whose bytes hash to `file_sha256`.
    #[must_use]
    pub fn from_file(mut self, file_sha256: String) -> Self {
        self.file_sha256 = Some(file_sha256);
        self
    }
}

/// SHA-256 (hex) of `settings` as compact JSON (its keys in the order the settings
/// serialize them, the same in every daemon of one build): two daemons that run the same
/// settings, from whatever file, show the same digest.
pub fn settings_sha256(settings: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(settings.to_string()))
}

/// The configuration report in force, shared by the operator service and the reloader.
#[derive(Debug)]
pub struct RunningConfig(RwLock<Arc<ConfigReport>>);

impl RunningConfig {
    /// Keeps `report` as the one in force.
    pub fn new(report: ConfigReport) -> Arc<Self> {
        Arc::new(Self(RwLock::new(Arc::new(report))))
    }

    /// The report in force.
    pub fn current(&self) -> Arc<ConfigReport> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// After a reload that applied `reread`'s `applied` sections (the callers): those
    /// sections and its secrets are in force, the file is `reread`'s, read now, and
    /// `restart_pending` still waits for a restart. Every other section stays as it
    /// runs.
    pub fn reloaded(&self, reread: &ConfigReport, applied: &[&str], restart_pending: Vec<String>) {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = ConfigReport::clone(&current);
        if let (Some(running), Some(read)) =
            (next.settings.as_object_mut(), reread.settings.as_object())
        {
            for section in applied {
                match read.get(*section) {
                    Some(value) => running.insert((*section).to_owned(), value.clone()),
                    None => running.remove(*section),
                };
            }
        }
        next.file_sha256.clone_from(&reread.file_sha256);
        next.loaded_at = reread.loaded_at;
        next.restart_pending = restart_pending;
        // The secrets of the sections now in force: the running ones' for every other
        // section (a key secret file named by the new file is not in use before a
        // restart).
        let applied_secret = |s: &String| applied.iter().any(|a| s.starts_with(&format!("{a}.")));
        next.secrets.retain(|s| !applied_secret(s));
        next.secrets.extend(reread.secrets.iter().filter(|s| applied_secret(s)).cloned());
        *current = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reload_puts_only_the_applied_sections_in_force() {
        let started = ConfigReport::new(
            json!({"callers": {"a": {}}, "realms": {"default": {"max_failures": 5}}}),
            vec!["callers.a.tokens: from the file /a".into()],
        )
        .from_file("11".repeat(32));
        let running = RunningConfig::new(started.clone());
        let reread = ConfigReport::new(
            json!({"callers": {"b": {}}, "realms": {"default": {"max_failures": 3}}}),
            vec![
                "store.key_secret: from the file /new".into(),
                "callers.b.tokens: from the file /b".into(),
            ],
        )
        .from_file("22".repeat(32));
        running.reloaded(&reread, &["callers"], vec!["realms".into()]);
        let now = running.current();
        assert_eq!(now.settings["callers"], json!({"b": {}}));
        assert_eq!(now.settings["realms"]["default"]["max_failures"], 5, "realms wait");
        assert_eq!(now.file_sha256.as_deref(), Some("22".repeat(32).as_str()));
        assert_eq!(now.restart_pending, ["realms"]);
        assert_eq!(
            now.secrets,
            ["callers.b.tokens: from the file /b"],
            "no secret before a restart"
        );
        assert_ne!(settings_sha256(&now.settings), settings_sha256(&started.settings));
    }

    #[test]
    fn the_settings_digest_follows_the_settings_only() {
        let a = ConfigReport::new(json!({"listen": "127.0.0.1:1"}), Vec::new());
        let b =
            ConfigReport::new(json!({"listen": "127.0.0.1:1"}), Vec::new()).from_file("f".into());
        let c = ConfigReport::new(json!({"listen": "127.0.0.1:2"}), Vec::new());
        assert_eq!(settings_sha256(&a.settings), settings_sha256(&b.settings));
        assert_ne!(settings_sha256(&a.settings), settings_sha256(&c.settings));
        assert_eq!(settings_sha256(&a.settings).len(), 64);
    }
}
