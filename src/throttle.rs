//! The attempt and lockout rules of docs/throttle.md ("The rules"), independent of
//! any store. The Redis Lua scripts (`store/lua/*.lua`) implement exactly these
//! functions; the embedded store calls them directly. Time is passed in (milliseconds
//! since the Unix epoch, read from the store's clock), never read here.
//!
//! Every rule a Lua script mirrors is here, naming its script: [`bucket`] (the token
//! bucket of the throttle per client network, `network.lua`), [`repeat_list`] (a
//! client's list of refused passwords, `record_attempt.lua` and `repeat.lua`),
//! [`spray_window`] (the periods of spray detection, `spray.lua`), [`door`] (the door
//! `Admin/Inspect` reports, `admit.lua`), [`send_log`] (the mail flows' send caps,
//! `send.lua`), [`breached_count`] (grace logins of a breached password,
//! `breached.lua`), and this module's own rules
//! (`record_attempt.lua`, `admit.lua`, `refund.lua`).

pub mod breached_count;
pub mod bucket;
pub mod door;
pub mod flow;
pub mod repeat_list;
pub mod send_log;
pub mod spray_window;

use std::time::Duration;

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

/// A realm's validated throttle settings. Built by [`crate::config`], which enforces the
/// ranges of docs/architecture.md; the functions here assume them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Attempts allowed per window (1–100).
    pub max_failures: u32,
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

/// One account key's record: `{failures, window_start, step}` in docs/architecture.md,
/// and the repeats forgiven in the window.
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
    /// been refused with, and were not counted ([`forgive`]): forgiven without a
    /// comparison, or compared again ([`repeat_list::RepeatMatch`]).
    pub repeats: u64,
}

/// The answer to one counted attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// The attempt may proceed (`failures <= max_failures`).
    pub allowed: bool,
    /// The record after counting.
    pub record: Record,
}

impl Record {
    /// Whether every field is within the bounds a daemon writes ([`MAX_STORED_COUNT`],
    /// [`MAX_STORED_TIME_MS`], [`MAX_STORED_STEP`]). A store reads a record outside them
    /// as an error.
    pub fn is_plausible(&self) -> bool {
        self.failures <= MAX_STORED_COUNT
            && self.repeats <= MAX_STORED_COUNT
            && self.window_start_ms <= MAX_STORED_TIME_MS
            && self.step <= MAX_STORED_STEP
    }
}

impl AttemptOutcome {
    /// This attempt is the one that closed the door (the first refused one of its
    /// window): the moment to emit the single lockout event.
    pub fn locked_now(&self, policy: &Policy) -> bool {
        policy.locks_at(self.record.failures)
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
}

/// Saturating conversion; configured durations are far below `u64::MAX` ms.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Counts one attempt at store time `now_ms` (steps 1–4 of docs/architecture.md). A record that
/// expired is passed as `None`.
pub fn attempt(policy: &Policy, record: Option<Record>, now_ms: u64) -> AttemptOutcome {
    let mut r = record.unwrap_or(Record { window_start_ms: now_ms, ..Record::default() });
    if window_over(policy, &r, now_ms) {
        if r.failures >= u64::from(policy.max_failures) && policy.escalates() {
            r.step = (r.step + 1).min(policy.max_step());
        }
        r.failures = 0;
        r.repeats = 0;
        r.window_start_ms = now_ms;
    }
    r.failures += 1;
    AttemptOutcome { allowed: r.failures <= u64::from(policy.max_failures), record: r }
}

/// A repeated wrong password at store time `now_ms` (docs/throttle.md, "Repeated
/// passwords"): an attempt whose password this client was already refused with in the
/// record's current window is not counted, whether its list entry forgives it unseen or
/// asks for a comparison ([`repeat_list::RepeatList::claim`]). It may proceed when the door
/// is open (the next attempt would be allowed), and the window's repeats go up by one.
/// `None` when the window is over: the attempt is then counted as any other
/// ([`attempt`]), so a repeat never carries over into a new window.
pub fn forgive(policy: &Policy, record: &Record, now_ms: u64) -> Option<AttemptOutcome> {
    if window_over(policy, record, now_ms) {
        return None;
    }
    let allowed = record.failures < u64::from(policy.max_failures);
    Some(AttemptOutcome { allowed, record: Record { repeats: record.repeats + 1, ..*record } })
}

/// When a record counted at store time `now_ms` may be dropped, in ms since the Unix
/// epoch (docs/throttle.md, "How long a record lives"). At step 0 with its window not
/// exhausted (or in a realm that never escalates), it holds nothing the next attempt
/// after its window would read: [`attempt`] resets such a record exactly as if it were
/// absent, so it may go when its window ends. Otherwise (a step above 0, an exhausted
/// window) it is kept for `retention` after this attempt, so the escalation is
/// remembered. Dropping it at this time and keeping it give the same answers to every
/// later attempt (`tests/integration/properties.rs`).
pub fn expiry_ms(policy: &Policy, record: &Record, now_ms: u64) -> u64 {
    let forgettable = record.step == 0
        && (record.failures < u64::from(policy.max_failures) || !policy.escalates());
    if forgettable {
        record.window_start_ms.saturating_add(policy.window_ms(0))
    } else {
        now_ms.saturating_add(policy.retention_ms())
    }
}

/// Whether the next attempt would be allowed, without counting (`Admit`).
pub fn is_open(policy: &Policy, record: Option<&Record>, now_ms: u64) -> bool {
    match record {
        None => true,
        Some(r) => window_over(policy, r, now_ms) || r.failures < u64::from(policy.max_failures),
    }
}

/// Undoes one attempt counted in the window that started at `window_start_ms` (an
/// attempt the CPU budget refused was not a guess). A window that has since restarted
/// is left alone.
pub fn refund(record: Option<Record>, window_start_ms: u64) -> Option<Record> {
    record.map(|mut r| {
        if r.window_start_ms == window_start_ms {
            r.failures = r.failures.saturating_sub(1);
        }
        r
    })
}

fn window_over(policy: &Policy, r: &Record, now_ms: u64) -> bool {
    now_ms.saturating_sub(r.window_start_ms) >= policy.window_ms(r.step)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn defaults() -> Policy {
        Policy {
            max_failures: 5,
            first_window: Duration::from_secs(15 * 60),
            max_window: Duration::from_secs(3600),
            retention: Duration::from_secs(24 * 3600),
            second_factor_required: false,
        }
    }

    /// Drives a sustained attack: one attempt whenever the door is open.
    fn allowed_in(policy: &Policy, minutes: u64) -> usize {
        let mut rec = None;
        let mut allowed = 0;
        for t in (0..minutes * MIN).step_by(1000) {
            if is_open(policy, rec.as_ref(), t) {
                let out = attempt(policy, rec, t);
                assert!(out.allowed, "is_open and attempt disagree at t={t}");
                allowed += 1;
                rec = Some(out.record);
            }
        }
        allowed
    }

    #[test]
    fn windows_double_then_cap() {
        let p = defaults();
        assert_eq!(p.window_ms(0), 15 * MIN);
        assert_eq!(p.window_ms(1), 30 * MIN);
        assert_eq!(p.window_ms(2), 60 * MIN);
        assert_eq!(p.window_ms(3), 60 * MIN);
        assert_eq!(p.window_ms(200), 60 * MIN);
        assert_eq!(p.max_step(), 2);
    }

    #[test]
    fn sixth_attempt_is_refused_and_counted() {
        let p = defaults();
        let mut rec = None;
        for n in 1..=7u64 {
            let out = attempt(&p, rec, 1000);
            assert_eq!(out.allowed, n <= 5, "attempt {n}");
            assert_eq!(out.record.failures, n);
            assert_eq!(out.locked_now(&p), n == 6);
            rec = Some(out.record);
        }
        assert!(!is_open(&p, rec.as_ref(), 1000 + 15 * MIN - 1));
        assert!(is_open(&p, rec.as_ref(), 1000 + 15 * MIN));
    }

    #[test]
    fn sustained_attack_gets_130_guesses_a_day() {
        let per_day = allowed_in(&defaults(), 24 * 60);
        // Windows of 15, 30, then 60 minutes: 3 windows in the first 105 minutes and 23
        // more starting in the remaining 1,335, 5 guesses each: 26 × 5 = 130 a day.
        assert_eq!(per_day, 130);
    }

    #[test]
    fn second_factor_realm_never_escalates() {
        let p = Policy { second_factor_required: true, ..defaults() };
        let mut rec = None;
        for window in 0..10u64 {
            let t = window * 15 * MIN;
            for _ in 0..6 {
                rec = Some(attempt(&p, rec, t).record);
            }
            assert_eq!(rec.unwrap().step, 0);
        }
        assert_eq!(allowed_in(&p, 60), 20);
    }

    #[test]
    fn a_repeat_is_not_counted_and_never_outlives_its_window() {
        let p = defaults();
        let r = Record { failures: 4, window_start_ms: 0, step: 0, repeats: 0 };
        let f = forgive(&p, &r, 1000).unwrap();
        assert!(f.allowed);
        assert_eq!((f.record.failures, f.record.repeats), (4, 1));
        // At the limit a repeat is refused like any attempt behind a closed door.
        let full = Record { failures: 5, ..r };
        assert!(!forgive(&p, &full, 1000).unwrap().allowed);
        // After the window, it is counted (and the new window forgets the repeats).
        assert_eq!(forgive(&p, &f.record, 15 * MIN), None);
        let counted = attempt(&p, Some(f.record), 15 * MIN);
        assert_eq!((counted.record.failures, counted.record.repeats), (1, 0));
    }

    #[test]
    fn refund_only_touches_its_window() {
        let r = Record { failures: 3, window_start_ms: 10, step: 1, repeats: 0 };
        assert_eq!(refund(Some(r), 10).unwrap().failures, 2);
        assert_eq!(refund(Some(r), 11).unwrap().failures, 3);
        assert_eq!(refund(None, 10), None);
    }
}
