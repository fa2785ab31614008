//! The attempt count (docs/throttle.md, "The rules"): counting one attempt in its
//! window, the ceiling across windows, the lockout's least length, a refund, and the
//! door as `Admit` and `Admin/Inspect` see it. Its Redis twins are
//! `lua/attempt_count/record_attempt.lua` (the count), `admit.lua` (open or closed, read
//! at one instant with Redis `TIME`), `refund.lua` and `clear.lua`; `inspect.lua` only
//! reads the record and the store's clock, and [`door`] turns them into the answer, the
//! same for both stores.

use super::{AttemptOutcome, KEPT_UNTIL_CLEARED_MS, Policy, Record};

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
        r.shut_at_ms = now_ms;
    }
    if added && policy.at_ceiling(r.consecutive) {
        r.shut_at_ms = now_ms;
    }
    AttemptOutcome { allowed, record: r, added }
}

/// A repeated wrong password at store time `now_ms` (docs/throttle.md, "Repeated
/// passwords"): an attempt whose password this client was already refused with in the
/// record's current window is not counted, whether its list entry forgives it unseen or
/// asks for a comparison ([`super::repeat_list::RepeatList::claim`]). It may proceed when the door
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

/// Failures `record` holds in its current window at `now_ms` (0 once the window is
/// over, and without a record): what `Admin/Inspect` sums over an account's device
/// lanes (`inspect.lua` mirrors it).
pub fn window_failures(policy: &Policy, record: Option<&Record>, now_ms: u64) -> u64 {
    record.filter(|r| !window_over(policy, r, now_ms)).map_or(0, |r| r.failures)
}

/// Whether `record` is in its current window at `now_ms` (a record, its window not
/// over): what its window's network set is read under.
pub fn window_current(policy: &Policy, record: Option<&Record>, now_ms: u64) -> bool {
    record.is_some_and(|r| !window_over(policy, r, now_ms))
}

/// Most client networks a record's window notes (docs/throttle.md, "Why a door is
/// shut"): past it no new one is noted, and `Admin/Inspect`'s `distinct_networks`
/// reads this many as "this many or more".
pub const MAX_NETWORKS: usize = 64;

/// Whether a window's network set that holds `held` takes `tag` (the keyed tag of a
/// counted attempt's client network): not listed yet, and below [`MAX_NETWORKS`]. A
/// set belongs to one window: a window that restarts starts an empty one.
pub fn takes_network(held: &[u64], tag: u64) -> bool {
    !held.contains(&tag) && held.len() < MAX_NETWORKS
}

/// Most device buckets an account's index lists (docs/devices.md, "Lanes in
/// Inspect"): the one least recently counted in leaves it first.
pub const MAX_DEVICE_LANES: usize = 32;

/// Notes in an account's device index (`(device tag, last counted at)`, any order) that
/// an attempt was counted in `device`'s bucket at `now_ms`, dropping the least recently
/// counted entries (the lowest time, then the lowest tag: Redis's sorted-set order)
/// past [`MAX_DEVICE_LANES`].
pub fn note_device(index: &mut Vec<(u64, u64)>, device: u64, now_ms: u64) {
    match index.iter_mut().find(|(d, _)| *d == device) {
        Some(entry) => entry.1 = now_ms,
        None => index.push((device, now_ms)),
    }
    index.sort_by_key(|&(d, at)| (at, d));
    let excess = index.len().saturating_sub(MAX_DEVICE_LANES);
    index.drain(..excess);
}

/// One account key's door at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Door {
    /// The next attempt would be allowed ([`is_open`], `admit.lua`).
    pub open: bool,
    /// Failures counted in the current window (0 once it is over).
    pub failures: u64,
    /// Exhausted windows in a row (the record's step).
    pub step: u32,
    /// Seconds until the door opens again, rounded up (0 when open, and at the ceiling,
    /// where no time opens it).
    pub seconds_until_open: u64,
    /// Consecutive failures on the record across windows (docs/throttle.md, "The
    /// ceiling").
    pub consecutive: u64,
    /// The record is at its ceiling: shut until it is cleared (a success on it, a
    /// completed reset, an operator unlock).
    pub at_ceiling: bool,
    /// Length of the current window, in ms (the first window's when there is no record).
    pub window_ms: u64,
    /// Repeats forgiven in the current window (0 once it is over).
    pub repeats: u64,
    /// Why and since when the door is shut; `None` while it is open.
    pub shut: Option<Shut>,
}

/// Why a door is shut, and since when (docs/throttle.md, "Why a door is shut").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shut {
    /// What holds it shut.
    pub by: ShutBy,
    /// Store-clock time of the attempt that shut it, in ms since the Unix epoch; 0 when
    /// unknown (a record written before the time was kept).
    pub at_ms: u64,
}

/// What holds a door shut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutBy {
    /// The window is exhausted (or its lockout runs): it opens by itself.
    Window,
    /// The record is at its ceiling: it opens only when cleared.
    Ceiling,
}

/// The door of `record` (none: never counted, cleared or expired) at `now_ms`, on the
/// store's clock.
pub fn door(policy: &Policy, record: Option<&Record>, now_ms: u64) -> Door {
    let Some(record) = record else {
        let window_ms = policy.window_ms(0);
        return Door {
            open: true,
            failures: 0,
            step: 0,
            seconds_until_open: 0,
            window_ms,
            repeats: 0,
            consecutive: 0,
            at_ceiling: false,
            shut: None,
        };
    };
    let window_ms = policy.window_ms(record.step);
    let window_end = window_end_ms(policy, record);
    let over = now_ms >= window_end;
    let open = is_open(policy, Some(record), now_ms);
    let at_ceiling = policy.at_ceiling(record.consecutive);
    let by = if at_ceiling { ShutBy::Ceiling } else { ShutBy::Window };
    Door {
        open,
        failures: if over { 0 } else { record.failures },
        step: record.step,
        seconds_until_open: if open || at_ceiling {
            0
        } else {
            window_end.saturating_sub(now_ms).div_ceil(1000)
        },
        window_ms,
        repeats: if over { 0 } else { record.repeats },
        consecutive: record.consecutive,
        at_ceiling,
        shut: (!open).then_some(Shut { by, at_ms: record.shut_at_ms }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

    fn policy() -> Policy {
        Policy::default()
    }

    #[test]
    fn the_door_follows_admit_lua_s_worked_example() {
        let t = 10_000_000;
        let record = |failures, ago, step| Record {
            failures,
            window_start_ms: t - ago,
            step,
            repeats: 2,
            ..Record::default()
        };
        assert!(door(&policy(), None, t).open);
        let closed = door(&policy(), Some(&record(5, 1000, 0)), t);
        assert_eq!((closed.open, closed.failures, closed.seconds_until_open), (false, 5, 899));
        assert_eq!(closed.repeats, 2);
        let over = door(&policy(), Some(&record(9, 900_000, 0)), t);
        assert_eq!(
            (over.open, over.failures, over.repeats, over.seconds_until_open),
            (true, 0, 0, 0)
        );
        let escalated = door(&policy(), Some(&record(5, 1000, 1)), t);
        assert_eq!((escalated.window_ms, escalated.seconds_until_open), (1_800_000, 1799));
        let open = door(&policy(), Some(&record(4, 1000, 0)), t);
        assert_eq!((open.open, open.failures, open.seconds_until_open), (true, 4, 0));
        // A lockout that outlasts its window: shut until it ends.
        let locked = Record { locked_until_ms: t + 1_200_000, ..record(5, 1000, 0) };
        let held = door(&policy(), Some(&locked), t + 950_000);
        assert_eq!((held.open, held.failures, held.seconds_until_open), (false, 5, 250));
        // At the ceiling: shut with no time to wait, whatever the window.
        let full = Record { consecutive: 100, ..record(1, 9_000_000, 2) };
        let ceiling = door(&policy(), Some(&full), t);
        assert_eq!(
            (ceiling.open, ceiling.at_ceiling, ceiling.seconds_until_open),
            (false, true, 0)
        );
    }

    #[test]
    fn the_door_says_when_it_shut_and_why() {
        let p = Policy { max_consecutive_failures: 7, ..defaults() };
        let mut rec = None;
        for t in 1..=6u64 {
            rec = Some(attempt(&p, rec, t * 1000).record);
        }
        let shut = rec.unwrap();
        assert_eq!(shut.shut_at_ms, 5000, "the fifth exhausted the window; the sixth was refused");
        let seen = door(&p, Some(&shut), 6000);
        assert_eq!(seen.shut, Some(Shut { by: ShutBy::Window, at_ms: 5000 }));
        // Open again: no reason given.
        assert_eq!(door(&p, Some(&shut), 5000 + 15 * MIN).shut, None);
        // Two more in the next window reach the ceiling of 7: shut by it, at the 7th.
        let mut rec = Some(shut);
        for t in [20 * MIN, 20 * MIN + 1000] {
            rec = Some(attempt(&p, rec, t).record);
        }
        let full = rec.unwrap();
        assert_eq!(full.consecutive, 7);
        let seen = door(&p, Some(&full), 30 * MIN);
        assert_eq!(seen.shut, Some(Shut { by: ShutBy::Ceiling, at_ms: 20 * MIN + 1000 }));
        assert_eq!(window_failures(&p, Some(&full), 30 * MIN), 2);
        assert_eq!(window_failures(&p, Some(&full), 20 * MIN + 30 * MIN), 0, "window over");
    }

    #[test]
    fn network_sets_and_device_indexes_are_bounded() {
        let held: Vec<u64> = (0..MAX_NETWORKS as u64).collect();
        assert!(!takes_network(&held, 1000), "full: no new network");
        assert!(!takes_network(&held[..3], 2), "listed already");
        assert!(takes_network(&held[..3], 1000));
        let mut index = Vec::new();
        for d in 0..(MAX_DEVICE_LANES as u64 + 2) {
            note_device(&mut index, d, 100 + d);
        }
        assert_eq!(index.len(), MAX_DEVICE_LANES);
        assert!(!index.iter().any(|&(d, _)| d < 2), "the two least recently counted left");
        note_device(&mut index, 2, 10_000);
        note_device(&mut index, 99, 10_001);
        assert!(index.iter().any(|&(d, _)| d == 2), "a device counted again stays");
        assert!(!index.iter().any(|&(d, _)| d == 3));
    }
}
