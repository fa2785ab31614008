//! The attempt and lockout rules of docs/throttle.md ("The rules"), independent of
//! any store. The Redis Lua scripts (`store/lua/`) implement exactly these functions;
//! the embedded store calls them directly. Time is passed in (milliseconds
//! since the Unix epoch, read from the store's clock), never read here.
//!
//! One file per rule, and each rule's name is its file's in every layer
//! (docs/architecture.md, "One name per rule"): the store's part of a rule X is
//! `store/redis/X.rs`, `store/embedded/X.rs` and `store/lua/X.lua` (or `lua/X/` for a
//! rule with several operations). [`attempt_count`] (an account's, a device's or a
//! flow's count and door), [`network_bucket`] (the token bucket of the throttle per
//! client network), [`repeat_list`] (a client's list of refused passwords),
//! [`spray_window`] (the periods of spray detection), [`send_log`] (the mail flows'
//! send caps), [`breached_count`] (grace logins of a breached password); [`flow`] says
//! which of them each flow uses. Here: the shapes they share (the realm's [`Policy`],
//! the stored [`Record`]).

pub mod attempt_count;
pub mod breached_count;
pub mod candidate_report;
pub mod flow;
pub mod network_bucket;
pub mod realm_tally;
pub mod repeat_list;
pub mod send_log;
pub mod spray_window;

use std::time::Duration;

use crate::setting::{Bound, Problems, below, between, check};

/// Most failures (or replays) a stored record may hold: a record holding more was not
/// written by a daemon and is a store error (docs/store.md, "Stored values"), never an
/// answer. Far above anything counted in a window, far below where arithmetic wraps.
pub const MAX_STORED_COUNT: u64 = 1_000_000_000_000;

/// Latest store-clock time a stored record may hold, in ms since the Unix epoch (about
/// the year 5138); see [`MAX_STORED_COUNT`].
pub const MAX_STORED_TIME_MS: u64 = 100_000_000_000_000;

/// Highest step a stored record may hold (a window length is `first_window * 2^step`
/// in u64 milliseconds); see [`MAX_STORED_COUNT`].
pub const MAX_STORED_STEP: u32 = 63;

/// The most consecutive failures any counted record may hold before its door shuts
/// for good (until a success on it, a completed reset or an operator unlock): NIST SP
/// 800-63B-4 §3.2.2 ("no more than 100"). A realm may set less, never more, never none.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 100;

/// A realm's validated throttle settings. Built by [`crate::config`], which enforces the
/// ranges of docs/architecture.md; the functions here assume them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Attempts allowed per window (1–100).
    pub max_failures: u32,
    /// The ceiling: attempts allowed on one record across windows without a success
    /// on it, 1–[`MAX_CONSECUTIVE_FAILURES`] (NIST SP 800-63B-4 §3.2.2). At the ceiling
    /// the record's door stays shut until the record is cleared.
    pub max_consecutive_failures: u32,
    /// How long a door shut by an attempt stays shut at least, from that attempt,
    /// whatever the age of its window (PCI DSS 4.0 8.3.4: at least 30 minutes);
    /// 1 s – below `retention`.
    pub lockout_duration: Duration,
    /// Length of the window at step 0 (1 s – `max_window`).
    pub first_window: Duration,
    /// Longest window, however many windows in a row were exhausted.
    pub max_window: Duration,
    /// How long a record lives after its last attempt (above `max_window`).
    pub retention: Duration,
    /// A realm with a second factor never escalates: the factor is the real defence,
    /// and a longer lockout would only help an attacker lock users out.
    pub second_factor_required: bool,
}

/// A realm's lockout settings as written (`[realms.NAME]`), before [`Policy::checked`]:
/// the fields of [`Policy`], with `lockout_duration` still optional.
#[derive(Debug, Clone, Copy)]
pub struct PolicySettings {
    /// `max_failures`.
    pub max_failures: u32,
    /// `max_consecutive_failures`.
    pub max_consecutive_failures: u32,
    /// `lockout_duration`; `None`: `first_window`.
    pub lockout_duration: Option<Duration>,
    /// `first_window`.
    pub first_window: Duration,
    /// `max_window`.
    pub max_window: Duration,
    /// `retention`.
    pub retention: Duration,
    /// `second_factor_required`.
    pub second_factor_required: bool,
}

impl Policy {
    /// `realms.REALM`'s lockout rules, checked where they are used (docs/throttle.md,
    /// "The rules"): `max_failures` 1–100, `max_consecutive_failures` 1–
    /// [`MAX_CONSECUTIVE_FAILURES`], `lockout_duration` 1 s – below `retention` (default
    /// `first_window`), `first_window` 1 s – `max_window`, `max_window` below
    /// `retention`, `retention` up to 366 days. Each problem is noted in `problems`,
    /// naming `realms.REALM.FIELD`.
    pub fn checked(realm: &str, s: &PolicySettings, problems: &mut Problems) -> Self {
        let name = realm;
        let key = |field: &str| format!("realms.{name}.{field}");
        problems.note(check(&key("max_failures"), s.max_failures, 1..=100));
        problems.note(check(
            &key("max_consecutive_failures"),
            s.max_consecutive_failures,
            1..=MAX_CONSECUTIVE_FAILURES,
        ));
        if let Some(lockout) = s.lockout_duration {
            problems.note(between(
                &key("lockout_duration"),
                lockout,
                Bound::fixed(Duration::from_secs(1)),
                Bound::setting("retention", s.retention),
            ));
            problems.note(below(
                &key("lockout_duration"),
                lockout,
                Bound::setting("retention", s.retention),
            ));
        }
        problems.note(between(
            &key("first_window"),
            s.first_window,
            Bound::fixed(Duration::from_secs(1)),
            Bound::setting("max_window", s.max_window),
        ));
        problems.note(below(
            &key("max_window"),
            s.max_window,
            Bound::setting("retention", s.retention),
        ));
        // A year bounds every expiry the stores compute, far inside u64 milliseconds.
        problems.note(between(
            &key("retention"),
            s.retention,
            Bound::setting("max_window", s.max_window),
            Bound::fixed(Duration::from_secs(366 * 24 * 3600)),
        ));
        Policy {
            max_failures: s.max_failures,
            max_consecutive_failures: s.max_consecutive_failures,
            lockout_duration: s.lockout_duration.unwrap_or(s.first_window),
            first_window: s.first_window,
            max_window: s.max_window,
            retention: s.retention,
            second_factor_required: s.second_factor_required,
        }
    }
}

impl Default for Policy {
    /// The design's defaults (docs/throttle.md, "The rules"): 5 attempts a window, windows
    /// of 15 min doubling to 1 h, a day's retention, the ceiling at 100, a lockout of at
    /// least the first window.
    fn default() -> Self {
        Policy {
            max_failures: 5,
            max_consecutive_failures: MAX_CONSECUTIVE_FAILURES,
            lockout_duration: Duration::from_secs(15 * 60),
            first_window: Duration::from_secs(15 * 60),
            max_window: Duration::from_secs(3600),
            retention: Duration::from_secs(24 * 3600),
            second_factor_required: false,
        }
    }
}

/// One account key's record: `{failures, window_start, step}` in docs/architecture.md,
/// the repeats forgiven in the window, the consecutive failures across windows and the
/// end of a lockout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Attempts counted in the current window, including refused ones: with repeats
    /// forgiven, the distinct guesses (docs/throttle.md, "Repeated passwords").
    pub failures: u64,
    /// Store-clock time the current window started, in ms since the Unix epoch.
    pub window_start_ms: u64,
    /// Exhausted windows in a row; sets the current window's length.
    pub step: u32,
    /// Attempts in the current window that repeated a password this client had already
    /// been refused with, and were not counted ([`attempt_count::forgive`]): forgiven without a
    /// comparison, or compared again ([`repeat_list::RepeatMatch`]).
    pub repeats: u64,
    /// Attempts allowed on this record since it was last cleared, across windows (the
    /// refused ones never reached a comparison): at [`Policy::max_consecutive_failures`]
    /// the door stays shut until the record is cleared.
    pub consecutive: u64,
    /// Store-clock time before which the door stays shut, in ms since the Unix epoch
    /// (0: none): the attempt that shut the door set it `lockout_duration` ahead.
    pub locked_until_ms: u64,
    /// Store-clock time of the latest attempt that shut the door, in ms since the Unix
    /// epoch (0: none, or a record written before it was kept): the one that exhausted
    /// its window or brought the record to its ceiling. What `Admin/Inspect` answers as
    /// `door_shut_unix_ms` while the door is shut.
    pub shut_at_ms: u64,
}

/// The answer to one counted attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// The attempt may proceed (`failures <= max_failures`).
    pub allowed: bool,
    /// The record after counting.
    pub record: Record,
    /// This attempt added a consecutive failure (an allowed attempt that is no stale
    /// repeat, [`attempt_count::attempt_listed`]): only such an attempt's refund gives one back.
    pub added: bool,
}

impl Record {
    /// Whether every field is within the bounds a daemon writes ([`MAX_STORED_COUNT`],
    /// [`MAX_STORED_TIME_MS`], [`MAX_STORED_STEP`]). A store reads a record outside them
    /// as an error.
    pub fn is_plausible(&self) -> bool {
        self.failures <= MAX_STORED_COUNT
            && self.repeats <= MAX_STORED_COUNT
            && self.consecutive <= MAX_STORED_COUNT
            && self.window_start_ms <= MAX_STORED_TIME_MS
            && self.locked_until_ms <= MAX_STORED_TIME_MS
            && self.shut_at_ms <= MAX_STORED_TIME_MS
            && self.step <= MAX_STORED_STEP
    }
}

impl AttemptOutcome {
    /// This attempt is the one that closed the door (the first refused one of its
    /// window): the moment to emit the single lockout event.
    pub fn locked_now(&self, policy: &Policy) -> bool {
        policy.locks_at(self.record.failures)
    }

    /// This attempt brought the record to its ceiling: the last one allowed until the
    /// record is cleared.
    pub fn reached_ceiling(&self, policy: &Policy) -> bool {
        self.added && policy.at_ceiling(self.record.consecutive)
    }
}

impl Policy {
    /// `window(step) = min(first_window * 2^step, max_window)`, in ms.
    pub fn window_ms(&self, step: u32) -> u64 {
        let first = duration_ms(self.first_window);
        let max = duration_ms(self.max_window);
        first.checked_shl(step).filter(|w| w >> step == first).map_or(max, |w| w.min(max))
    }

    /// The step at which `window(step)` first reaches `max_window`; `step` is capped
    /// there, so it never overflows and a record never stores a meaningless step.
    pub fn max_step(&self) -> u32 {
        (0..64).find(|&s| self.window_ms(s) >= duration_ms(self.max_window)).unwrap_or(63)
    }

    /// `retention` in ms, the expiry pushed on each attempt.
    pub fn retention_ms(&self) -> u64 {
        duration_ms(self.retention)
    }

    /// Whether the attempt that brought a window's count to `failures` is the one that
    /// closed the door (the first refused one): the moment of the single lockout event.
    pub fn locks_at(&self, failures: u64) -> bool {
        failures == u64::from(self.max_failures) + 1
    }

    /// Whether an exhausted window raises the step.
    pub fn escalates(&self) -> bool {
        !self.second_factor_required
    }

    /// Whether a record holding `consecutive` failures is at its ceiling (its door shut
    /// until it is cleared).
    pub fn at_ceiling(&self, consecutive: u64) -> bool {
        consecutive >= u64::from(self.max_consecutive_failures)
    }

    /// `lockout_duration` in ms.
    pub fn lockout_ms(&self) -> u64 {
        duration_ms(self.lockout_duration)
    }
}

/// The expiry of a record that must outlive every clock: one at its ceiling is kept
/// until it is cleared (on Redis: no expiry at all).
pub const KEPT_UNTIL_CLEARED_MS: u64 = u64::MAX;

/// Saturating conversion; configured durations are far below `u64::MAX` ms.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
