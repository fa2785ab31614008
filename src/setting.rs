//! What every configuration section shares: the one error type of a configuration the
//! daemon refuses ([`ConfigError`]), and range checks that write their error text from
//! the range itself, so a range is written once (`check(…, 1..=100)` reads "allowed
//! 1–100"). Each section's struct, defaults and `validate()` live beside its owner
//! (`crate::config` lists them); this module is below all of them.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// A configuration that cannot be used. The daemon refuses to start on any of these, and
/// a reload (SIGHUP) keeps the configuration in force.
///
/// `Debug` is the `Display` text: figment's own error (kept in `Parse`, and deliberately
/// not its `source`) repeats the value of a setting of the wrong type, which may be a
/// password or a URL holding one; an error chain or a `{:?}` must never print it.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be read: {}", describe(.0))]
    Parse(Box<figment::Error>),
    #[error("{setting} = {value} is out of range: allowed {allowed}")]
    OutOfRange { setting: String, value: String, allowed: String },
    #[error("{setting}: {problem}")]
    Invalid { setting: String, problem: String },
    /// A section whose owner reports its own errors (`[tls]`, `[callers]`): the text
    /// names the setting, never a value.
    #[error("{section}{source}")]
    Section {
        section: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{setting} {path:?} could not be read: {source}")]
    File {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// More than one problem: each one, so an operator fixes them all in one pass.
    #[error("{} problems in the configuration, fix each: {}", .0.len(), several(.0))]
    Several(Vec<ConfigError>),
}

fn several(problems: &[ConfigError]) -> String {
    problems.iter().map(|p| error_chain(p)).collect::<Vec<_>>().join("; ")
}

impl std::fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl ConfigError {
    /// `setting: problem`.
    pub fn invalid(setting: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid { setting: setting.into(), problem: problem.into() }
    }

    /// Each problem this error reports (one, or those of [`ConfigError::Several`]).
    pub fn problems(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Several(all) => all.iter().collect(),
            one => vec![one],
        }
    }
}

/// The problems a validation found so far: a section notes every check instead of
/// stopping at the first, so a configuration with several bad values reports all of
/// them at once ([`ConfigError::Several`]).
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    /// Notes `result`'s error (each of a [`ConfigError::Several`]); its value, if any.
    pub fn note<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(ConfigError::Several(all)) => {
                self.0.extend(all);
                None
            }
            Err(e) => {
                self.0.push(e);
                None
            }
        }
    }

    /// Whether no problem was noted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `None` when no problem was noted; else the one problem, or all of them.
    pub fn into_error(mut self) -> Option<ConfigError> {
        match self.0.len() {
            0 => None,
            1 => Some(self.0.remove(0)),
            _ => Some(ConfigError::Several(self.0)),
        }
    }

    /// `value` when no problem was noted; else the one problem, or all of them.
    ///
    /// # Errors
    /// The problems noted.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        match self.into_error() {
            None => Ok(value),
            Some(e) => Err(e),
        }
    }
}

/// An error and its causes, `: `-separated, each cause once: a cause whose text the
/// message already holds (an error that prints its source in its own text) is not
/// repeated. Every error of this crate names a setting or a path, never a secret or an
/// identifier, so the chain may be printed and logged whole.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let cause = s.to_string();
        if !cause.is_empty() && !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = s.source();
    }
    text
}

/// Each problem figment found, as `setting: problem (in SOURCE)`, without figment's
/// profile prefix (`default.`), which names nothing a user wrote.
fn describe(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let setting = if e.path.is_empty() { "(file)".to_owned() } else { e.path.join(".") };
            let source = e.metadata.as_ref().and_then(|m| m.source.as_ref());
            let kind = kind_text(&e.kind);
            match source {
                Some(source) => format!("{setting}: {kind} (in {source})"),
                None => format!("{setting}: {kind}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// figment's problem, without the text the user wrote when a value has the wrong type
/// or value: a string in the wrong place may be a URL with its password
/// (`redis_cluster_nodes = "rediss://:pw@h"` instead of a list).
fn kind_text(kind: &figment::error::Kind) -> String {
    use figment::error::{Actual, Kind};
    let actual = |a: &Actual| match a {
        Actual::Str(_) => "a string".to_owned(),
        Actual::Char(_) => "a character".to_owned(),
        Actual::Bytes(_) => "bytes".to_owned(),
        Actual::Other(_) => "a value".to_owned(),
        other => other.to_string(),
    };
    match kind {
        Kind::InvalidType(a, expected) => {
            format!("invalid type: found {}, expected {expected}", actual(a))
        }
        Kind::InvalidValue(a, expected) => {
            format!("invalid value: found {}, expected {expected}", actual(a))
        }
        Kind::Unsupported(a) => format!("unsupported type {}", actual(a)),
        other => other.to_string(),
    }
}

/// A value a range check can compare and print: numbers as written, durations as
/// humantime writes them (`15m`, `1day`), as the TOML takes them.
pub trait Value: PartialOrd + Copy {
    /// The value as the configuration file would write it.
    fn text(&self) -> String;

    /// The value as the daemon uses it, which range checks compare: itself, or for a
    /// duration its whole milliseconds (the stores' unit), so a range that holds for
    /// the configured values holds for the values the stores are given (`1h 500us` is
    /// not above `1h` there).
    fn as_used(&self) -> Self {
        *self
    }
}

macro_rules! plain_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn text(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
plain_value!(u8, u32, u64, usize, f64);

impl Value for Duration {
    fn text(&self) -> String {
        humantime::format_duration(*self).to_string()
    }

    fn as_used(&self) -> Self {
        Duration::from_millis(u64::try_from(self.as_millis()).unwrap_or(u64::MAX))
    }
}

/// One end of a range: a fixed value, or another setting's value (then named in the
/// error text, `max_window (1h)`).
#[derive(Debug, Clone, Copy)]
pub struct Bound<T> {
    value: T,
    name: Option<&'static str>,
}

impl<T: Value> Bound<T> {
    /// The bound `value`.
    pub fn fixed(value: T) -> Self {
        Self { value, name: None }
    }

    /// The value of the setting `name`.
    pub fn setting(name: &'static str, value: T) -> Self {
        Self { value, name: Some(name) }
    }
}

impl<T: Value> Display for Bound<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name {
            Some(name) => write!(f, "{name} ({})", self.value.text()),
            None => f.write_str(&self.value.text()),
        }
    }
}

/// `setting` must lie in `range` (both ends included); the error says so in the range's
/// own terms (`allowed 1–100`).
///
/// # Errors
/// [`ConfigError::OutOfRange`] naming the setting, its value and the range.
pub fn check<T: Value>(
    setting: &str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), ConfigError> {
    between(setting, value, Bound::fixed(*range.start()), Bound::fixed(*range.end()))
}

/// As [`check`], with a `note` after the range (a standard it comes from).
///
/// # Errors
/// [`ConfigError::OutOfRange`] naming the setting, its value and the range.
pub fn check_noted<T: Value>(
    setting: &str,
    value: T,
    range: RangeInclusive<T>,
    note: &str,
) -> Result<(), ConfigError> {
    check(setting, value, range).map_err(|e| match e {
        ConfigError::OutOfRange { setting, value, allowed } => {
            ConfigError::OutOfRange { setting, value, allowed: format!("{allowed} ({note})") }
        }
        other => other,
    })
}

/// `setting` must lie between two bounds (both included), either of which may be
/// another setting (`1s – max_window (1h)`).
///
/// # Errors
/// [`ConfigError::OutOfRange`] naming the setting, its value and both bounds.
pub fn between<T: Value>(
    setting: &str,
    value: T,
    low: Bound<T>,
    high: Bound<T>,
) -> Result<(), ConfigError> {
    let used = value.as_used();
    if low.value.as_used() <= used && used <= high.value.as_used() {
        return Ok(());
    }
    let separator = if low.name.is_some() || high.name.is_some() { " – " } else { "–" };
    Err(ConfigError::OutOfRange {
        setting: setting.to_owned(),
        value: value.text(),
        allowed: format!("{low}{separator}{high}"),
    })
}

/// `setting` must be strictly below `limit` (another setting: `below retention (24h)`).
///
/// # Errors
/// [`ConfigError::OutOfRange`] naming the setting, its value and the limit.
pub fn below<T: Value>(setting: &str, value: T, limit: Bound<T>) -> Result<(), ConfigError> {
    if value.as_used() < limit.value.as_used() {
        return Ok(());
    }
    Err(ConfigError::OutOfRange {
        setting: setting.to_owned(),
        value: value.text(),
        allowed: format!("below {limit}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_text_is_written_from_the_range() {
        let e = check("realms.web.max_failures", 101u32, 1..=100).unwrap_err().to_string();
        assert_eq!(e, "realms.web.max_failures = 101 is out of range: allowed 1–100");
        let secs = Duration::from_secs;
        let e = check("shutdown_delay", secs(600), secs(0)..=secs(300)).unwrap_err().to_string();
        assert!(e.ends_with("allowed 0s–5m"), "{e}");
        let max = Bound::setting("max_window", secs(3600));
        let e = between("first_window", secs(7200), Bound::fixed(secs(1)), max);
        assert!(e.unwrap_err().to_string().ends_with("allowed 1s – max_window (1h)"));
        let e = below("max_window", secs(90_000), Bound::setting("retention", secs(86_400)));
        assert!(e.unwrap_err().to_string().ends_with("allowed below retention (1day)"));
        let e = check_noted("verify.max_password_bytes", 10usize, 64..=65_536, "NIST");
        assert!(e.unwrap_err().to_string().ends_with("allowed 64–65536 (NIST)"));
        assert!(check("x", 5u32, 5..=5).is_ok() && below("x", 1u32, Bound::fixed(2)).is_ok());
    }

    #[test]
    fn durations_are_compared_as_the_stores_use_them_in_whole_milliseconds() {
        let hour = Duration::from_secs(3600);
        let over = hour + Duration::from_micros(500);
        // 1h 500us is 3,600,000 ms, as 1h: not above it where a script compares them.
        assert!(below("max_window", hour, Bound::setting("retention", over)).is_err());
        assert!(below("max_window", hour, Bound::setting("retention", over + hour)).is_ok());
        let low = Bound::fixed(Duration::from_millis(1000));
        assert!(between("w", Duration::from_micros(999_999), low, Bound::fixed(hour)).is_err());
    }
}
