//! The spray window (docs/spray.md, "The sliding period"): which period a store-clock instant
//! falls in, when a period's entries expire, and how the counts of a fingerprint roll
//! from one period to the next. Its twin on Redis is `spray_window.lua` (period
//! `floor(TIME / period_ms)`, the keys of parity `p % 2`, two periods counted, every
//! key expiring two periods after its last note); the embedded store calls these.

/// The period `now_ms` falls in, numbered from 1 (0 is "never" in a stored entry):
/// `floor(now_ms / period_ms) + 1`. `period_ms` is at least 1 000 (the realm's
/// `spray_period`, checked at start).
pub fn period(now_ms: u64, period_ms: u64) -> u64 {
    now_ms / period_ms.max(1) + 1
}

/// When the entries noted in `period` expire, in ms on the store's clock: at the end of
/// the period after it (they count for two periods), as `spray_window.lua`'s `PEXPIREAT`.
pub fn expires_ms(period: u64, period_ms: u64) -> u64 {
    // `period` is numbered from 1: period p (stored p + 1) ends at (p + 1) * period_ms.
    period.saturating_add(1).saturating_mul(period_ms)
}

/// A fingerprint's per-period values `[current, previous]` as of period `now`, from the
/// ones held as of period `held`: kept in the same period, shifted by one the period
/// after, empty after a longer gap (the clock never goes back: a `held` after `now` is
/// treated as a gap too).
pub fn roll<T: Copy + Default>(held: Option<(u64, [T; 2])>, now: u64) -> [T; 2] {
    match held {
        Some((p, values)) if p == now => values,
        Some((p, values)) if p + 1 == now => [T::default(), values[0]],
        _ => [T::default(); 2],
    }
}

/// Whether an account last noted in period `last` (0: never) joins the current period's
/// set (`now`), and whether it is new to the union with the period before: the two
/// increments of the count (`PFADD` on the current parity's register, and the union's
/// growth, on Redis).
pub fn joins(last: u64, now: u64) -> (bool, bool) {
    (last != now, last != now && last + 1 != now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_expiry_and_rolls_follow_spray_lua_s_worked_example() {
        let hour = 3_600_000;
        let t = 100 * hour + 5;
        let p = period(t, hour);
        assert_eq!(p, 101);
        assert_eq!(expires_ms(p, hour), 102 * hour, "the end of the next period");
        assert_eq!(roll(Some((p, [3u64, 1])), p), [3, 1]);
        assert_eq!(roll(Some((p - 1, [3u64, 1])), p), [0, 3]);
        assert_eq!(roll(Some((p - 2, [3u64, 1])), p), [0, 0]);
        assert_eq!(roll::<u64>(None, p), [0, 0]);
        assert_eq!(joins(0, p), (true, true), "a new account");
        assert_eq!(joins(p - 1, p), (true, false), "in the union already");
        assert_eq!(joins(p, p), (false, false), "noted this period");
    }
}
