//! The door as `Admin/Inspect` reports it: open or closed, the failures of the current
//! window, the time until it opens again (docs/throttle.md, "The rules"). Its twin on
//! Redis is `admit.lua` (open or closed, read at one instant with Redis `TIME`);
//! `inspect.lua` only reads the record and the store's clock, and this arithmetic turns
//! them into the answer, the same for both stores.

use super::{Policy, Record, is_open};

/// One account key's door at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Door {
    /// The next attempt would be allowed ([`is_open`], `admit.lua`).
    pub open: bool,
    /// Failures counted in the current window (0 once it is over).
    pub failures: u64,
    /// Exhausted windows in a row (the record's step).
    pub step: u32,
    /// Seconds until the door opens again, rounded up (0 when open).
    pub seconds_until_open: u64,
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
        };
    };
    let window_ms = policy.window_ms(record.step);
    let window_end = record.window_start_ms.saturating_add(window_ms);
    let over = now_ms >= window_end;
    let open = is_open(policy, Some(record), now_ms);
    Door {
        open,
        failures: if over { 0 } else { record.failures },
        step: record.step,
        seconds_until_open: if open { 0 } else { (window_end - now_ms).div_ceil(1000) },
        window_ms,
        repeats: if over { 0 } else { record.repeats },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy() -> Policy {
        Policy {
            max_failures: 5,
            first_window: Duration::from_secs(900),
            max_window: Duration::from_secs(3600),
            retention: Duration::from_secs(86_400),
            second_factor_required: false,
        }
    }

    #[test]
    fn the_door_follows_admit_lua_s_worked_example() {
        let t = 10_000_000;
        let record =
            |failures, ago, step| Record { failures, window_start_ms: t - ago, step, repeats: 2 };
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
    }
}
