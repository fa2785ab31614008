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
    /// been refused with, and were not counted ([`forgive`]): forgiven without a
    /// comparison, or compared again ([`repeat_list::RepeatMatch`]).
    pub repeats: u64,
    /// Attempts allowed on this record since it was last cleared, across windows (the
    /// refused ones never reached a comparison): at [`Policy::max_consecutive_failures`]
    /// the door stays shut until the record is cleared.
    pub consecutive: u64,
    /// Store-clock time before which the door stays shut, in ms since the Unix epoch
    /// (0: none): the attempt that shut the door set it `lockout_duration` ahead.
    pub locked_until_ms: u64,
}

/// The answer to one counted attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// The attempt may proceed (`failures <= max_failures`).
    pub allowed: bool,
    /// The record after counting.
    pub record: Record,
    /// This attempt added a consecutive failure (an allowed attempt that is no stale
    /// repeat, [`attempt_listed`]): only such an attempt's refund gives one back.
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

/// Counts one attempt at store time `now_ms` (steps 1–4 of docs/architecture.md). A record that
/// expired is passed as `None`.
///
/// Beside the window's count, two bounds (docs/throttle.md, "The ceiling" and "How long
/// a lockout lasts"): an allowed attempt adds to `consecutive`, and none is allowed once
/// it holds `max_consecutive_failures`; the attempt that exhausts its window shuts the
/// door until at least `lockout_duration` after it, however little of the window is
/// left (the window then lasts until that time: [`window_end_ms`]).
pub fn attempt(policy: &Policy, record: Option<Record>, now_ms: u64) -> AttemptOutcome {
    count(policy, record, now_ms, false)
}

/// [`attempt`] for a password its client was already refused with in an earlier window
/// (on the client's repeat list, its window over: docs/throttle.md, "Repeated
/// passwords"): counted in the window as any attempt, but it adds no consecutive failure,
/// so a stale password a phone keeps retrying never reaches the ceiling. It is no new
/// guess.
pub fn attempt_listed(policy: &Policy, record: Option<Record>, now_ms: u64) -> AttemptOutcome {
    count(policy, record, now_ms, true)
}

fn count(policy: &Policy, record: Option<Record>, now_ms: u64, listed: bool) -> AttemptOutcome {
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
    let allowed = r.failures <= u64::from(policy.max_failures) && !policy.at_ceiling(r.consecutive);
    let added = allowed && !listed;
    if added {
        r.consecutive += 1;
    }
    if allowed && r.failures == u64::from(policy.max_failures) {
        r.locked_until_ms = r.locked_until_ms.max(now_ms.saturating_add(policy.lockout_ms()));
    }
    AttemptOutcome { allowed, record: r, added }
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
    let allowed =
        record.failures < u64::from(policy.max_failures) && !policy.at_ceiling(record.consecutive);
    let record = Record { repeats: record.repeats + 1, ..*record };
    Some(AttemptOutcome { allowed, record, added: false })
}

/// When a record counted at store time `now_ms` may be dropped, in ms since the Unix
/// epoch (docs/throttle.md, "How long a record lives"). A record at its ceiling is
/// kept until it is cleared ([`KEPT_UNTIL_CLEARED_MS`]). One that holds consecutive
/// failures is kept for `retention` after this attempt, so the ceiling counts across
/// windows and the escalation is remembered. One that holds none (every attempt it
/// counted was refused or refunded) at step 0 with its window not exhausted (or in a
/// realm that never escalates) holds nothing the next attempt after its window would
/// read: [`attempt`] resets such a record exactly as if it were absent, so it may go
/// when its window ends. Dropping a record at this time and keeping it give the same
/// answers to every later attempt within the retention (`tests/integration/properties.rs`).
pub fn expiry_ms(policy: &Policy, record: &Record, now_ms: u64) -> u64 {
    if policy.at_ceiling(record.consecutive) {
        return KEPT_UNTIL_CLEARED_MS;
    }
    let forgettable = record.consecutive == 0
        && record.step == 0
        && (record.failures < u64::from(policy.max_failures) || !policy.escalates());
    if forgettable {
        window_end_ms(policy, record)
    } else {
        now_ms.saturating_add(policy.retention_ms())
    }
}

/// Whether the next attempt would be allowed, without counting (`Admit`): the window is
/// over or not exhausted, and the record is below its ceiling.
pub fn is_open(policy: &Policy, record: Option<&Record>, now_ms: u64) -> bool {
    match record {
        None => true,
        Some(r) => {
            (window_over(policy, r, now_ms) || r.failures < u64::from(policy.max_failures))
                && !policy.at_ceiling(r.consecutive)
        }
    }
}

/// Undoes one attempt counted in the window that started at `window_start_ms` (an
/// attempt the CPU budget refused was not a guess): its failure, and its consecutive
/// failure when it was `allowed` (a refused attempt added none: giving one back would
/// reopen a door at its ceiling). A window that has since restarted is left alone.
pub fn refund(record: Option<Record>, window_start_ms: u64, allowed: bool) -> Option<Record> {
    record.map(|mut r| {
        if r.window_start_ms == window_start_ms && r.failures > 0 {
            r.failures -= 1;
            if allowed {
                r.consecutive = r.consecutive.saturating_sub(1);
            }
        }
        r
    })
}

/// When the record's current window ends, in ms on the store's clock: `window(step)`
/// after its start, or later while a lockout set by an attempt in it runs
/// (`locked_until_ms`).
pub fn window_end_ms(policy: &Policy, r: &Record) -> u64 {
    r.window_start_ms.saturating_add(policy.window_ms(r.step)).max(r.locked_until_ms)
}

fn window_over(policy: &Policy, r: &Record, now_ms: u64) -> bool {
    now_ms >= window_end_ms(policy, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn defaults() -> Policy {
        Policy::default()
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
    fn sustained_attack_stops_at_the_ceiling() {
        // Windows of 15, 30, then 60 minutes, 5 guesses each: 130 a day without the
        // ceiling; with it the 100th is the last, in the 20th window (15 + 30 + 17 × 60
        // minutes = 17.75 h), and nothing more in 30 days.
        let p = defaults();
        assert_eq!(allowed_in(&p, 17 * 60 + 45), 95);
        assert_eq!(allowed_in(&p, 17 * 60 + 46), 100);
        assert_eq!(allowed_in(&p, 24 * 60), 100);
        assert_eq!(allowed_in(&p, 30 * 24 * 60), 100);
        // A second-factor realm (windows never escalate) and a lower ceiling alike.
        let sf = Policy { second_factor_required: true, max_consecutive_failures: 40, ..p };
        assert_eq!(allowed_in(&sf, 30 * 24 * 60), 40);
    }

    #[test]
    fn the_ceiling_holds_across_windows_until_the_record_is_cleared() {
        let p = Policy { max_consecutive_failures: 7, ..defaults() };
        let mut rec = None;
        let mut t = 0;
        for n in 1..=7u64 {
            let out = attempt(&p, rec, t);
            assert!(out.allowed, "attempt {n}");
            assert_eq!(out.record.consecutive, n);
            assert_eq!(out.reached_ceiling(&p), n == 7);
            rec = Some(out.record);
            t += 20 * MIN; // a new window for most attempts
        }
        let shut = rec.unwrap();
        assert_eq!(expiry_ms(&p, &shut, t), KEPT_UNTIL_CLEARED_MS, "kept until cleared");
        for later in [t, t + 2 * 3600 * 1000, t + 400 * 24 * 3600 * 1000] {
            assert!(!is_open(&p, Some(&shut), later));
            let out = attempt(&p, Some(shut), later);
            assert!(!out.allowed && !out.reached_ceiling(&p));
            assert_eq!(out.record.consecutive, 7, "a refused attempt adds nothing");
        }
        // Cleared (a success, a reset, an unlock): a fresh record.
        assert!(attempt(&p, None, t).allowed);
        // A refund gives the consecutive failure back with the window's.
        let r = Record { failures: 2, consecutive: 7, window_start_ms: 5, ..Record::default() };
        assert_eq!(refund(Some(r), 5, true).unwrap().consecutive, 6);
        assert_eq!(refund(Some(r), 6, true).unwrap().consecutive, 7);
        // A refused attempt added no consecutive failure: its refund gives none back.
        let refunded = refund(Some(r), 5, false).unwrap();
        assert_eq!((refunded.failures, refunded.consecutive), (1, 7));
    }

    #[test]
    fn a_lockout_lasts_at_least_lockout_duration_from_the_attempt_that_shut_the_door() {
        // One failure, then four just before the window ends: without the rule the door
        // reopened a second after the fifth.
        let p = defaults();
        let mut rec = Some(attempt(&p, None, 0).record);
        let late = 15 * MIN - 1000;
        for _ in 0..4 {
            let out = attempt(&p, rec, late);
            assert!(out.allowed);
            rec = Some(out.record);
        }
        let r = rec.unwrap();
        assert_eq!(r.locked_until_ms, late + 15 * MIN);
        assert!(!is_open(&p, Some(&r), 15 * MIN));
        assert!(!is_open(&p, Some(&r), late + 15 * MIN - 1));
        let refused = attempt(&p, rec, 20 * MIN);
        assert!(!refused.allowed, "still shut in what was the next window");
        assert!(is_open(&p, Some(&r), late + 15 * MIN));
        // Then escalation as before: the next window is the second one.
        let next = attempt(&p, Some(refused.record), late + 15 * MIN);
        assert!(next.allowed);
        assert_eq!((next.record.step, next.record.failures), (1, 1));
        // A longer lockout_duration (PCI DSS 8.3.4: 30 min) holds the same way.
        let pci = Policy { lockout_duration: Duration::from_secs(30 * 60), ..p };
        let mut rec = None;
        for _ in 0..5 {
            rec = Some(attempt(&pci, rec, 1000).record);
        }
        assert!(!is_open(&pci, rec.as_ref(), 1000 + 30 * MIN - 1));
        assert!(is_open(&pci, rec.as_ref(), 1000 + 30 * MIN));
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
        let r = Record { failures: 4, consecutive: 4, ..Record::default() };
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
        let r = Record { failures: 3, window_start_ms: 10, step: 1, ..Record::default() };
        assert_eq!(refund(Some(r), 10, true).unwrap().failures, 2);
        assert_eq!(refund(Some(r), 11, true).unwrap().failures, 3);
        assert_eq!(refund(None, 10, true), None);
    }
}
