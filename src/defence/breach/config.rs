//! `[breach]`: the breached-password filter and the context words of `CheckPassword`
//! (docs/breach.md).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::setting::{ConfigError, Problems, check};

/// Most `service_words`.
pub const MAX_SERVICE_WORDS: usize = 64;
/// Longest service word, in bytes.
pub const MAX_SERVICE_WORD_BYTES: usize = 64;

/// `[breach]`.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct BreachConfig {
    /// The filter file `portcullis breach-filter build` wrote; unset: no screening
    /// (`Verify` never sets `password_breached`, `CheckPassword` answers
    /// `FAILED_PRECONDITION`). A missing or broken file stops the daemon at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_file: Option<PathBuf>,
    /// How often the file is looked at for a change (its size, modification time or
    /// inode), 1 s – 1 h; SIGHUP reloads at once.
    #[default(Duration::from_secs(30))]
    #[serde(with = "humantime_serde")]
    pub reload_interval: Duration,
    /// Words of the service itself (its name, its domain) that `CheckPassword` refuses
    /// inside a new password (NIST SP 800-63B: context-specific words), at most 64 of at
    /// most 64 bytes; compared caseless, words under 4 characters ignored.
    pub service_words: Vec<String>,
}

/// `[breach]`, validated.
#[derive(Debug, Clone)]
pub struct BreachSettings {
    /// The filter file, if any.
    pub filter_file: Option<PathBuf>,
    /// How often the file is looked at for a change.
    pub reload_interval: Duration,
    /// The service words, as configured.
    pub service_words: Vec<String>,
}

impl BreachConfig {
    /// Range-checks the section.
    ///
    /// # Errors
    /// [`ConfigError`] naming `breach.reload_interval` or `breach.service_words`.
    pub fn validate(&self) -> Result<BreachSettings, ConfigError> {
        let mut problems = Problems::default();
        problems.note(check(
            "breach.reload_interval",
            self.reload_interval,
            Duration::from_secs(1)..=Duration::from_secs(3600),
        ));
        problems.note(check(
            "breach.service_words",
            self.service_words.len(),
            0..=MAX_SERVICE_WORDS,
        ));
        if let Some(n) = self.service_words.iter().position(|w| w.len() > MAX_SERVICE_WORD_BYTES) {
            problems.note::<()>(Err(ConfigError::invalid(
                format!("breach.service_words[{n}]"),
                format!("longer than {MAX_SERVICE_WORD_BYTES} bytes"),
            )));
        }
        problems.finish(BreachSettings {
            filter_file: self.filter_file.clone(),
            reload_interval: self.reload_interval,
            service_words: self.service_words.clone(),
        })
    }
}
