//! The door as `Admin/Inspect` reports it: open or closed, the failures of the current
//! window, the time until it opens again (docs/throttle.md, "The rules"). Its twin on
//! Redis is `admit.lua` (open or closed, read at one instant with Redis `TIME`);
//! `inspect.lua` only reads the record and the store's clock, and this arithmetic turns
//! them into the answer, the same for both stores.

use super::{Policy, Record, is_open, window_end_ms};

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
        };
    };
    let window_ms = policy.window_ms(record.step);
    let window_end = window_end_ms(policy, record);
    let over = now_ms >= window_end;
    let open = is_open(policy, Some(record), now_ms);
    let at_ceiling = policy.at_ceiling(record.consecutive);
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
    }
}

#[cfg(test)]
mod tests {

    use super::*;

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
}
