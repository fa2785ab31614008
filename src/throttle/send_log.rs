//! The send caps of the mail flows (`password_reset`, `verification_resend`;
//! docs/flows.md): a minimum interval between two sends to one account and a cap on
//! sends in any [`CAP_WINDOW_MS`] (24 h), kept as a *send log*, the times of the sends
//! still inside the cap window, newest first. A log is exact where a counter per fixed
//! day is not: a cap of 5 allows 5 in any 24 h, never 10 across a day's edge.
//!
//! Twin: `send_log.lua` (the Redis script); the embedded store calls these functions, and the
//! store conformance tests hold the two together. Time is passed in (store-clock ms).

use super::MAX_STORED_TIME_MS;

/// The cap window: the daily cap counts the sends of the last 24 h, in ms.
pub const CAP_WINDOW_MS: u64 = 24 * 3600 * 1000;

/// Highest daily cap a realm may set: a log holds at most this many times.
pub const MAX_DAILY_CAP: u32 = 50;

/// One mail flow's validated caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPolicy {
    /// Least time between two sends to one account, in ms (1 s – 1 h).
    pub min_interval_ms: u64,
    /// Most sends to one account in any 24 h (1–[`MAX_DAILY_CAP`]).
    pub daily_cap: u32,
}

/// What one send request found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOutcome {
    /// The mail may be sent.
    pub allowed: bool,
    /// The log after the request (a refused request writes nothing: the log as read,
    /// without the times that left the cap window).
    pub log: Vec<u64>,
}

impl SendPolicy {
    /// A send request at store time `now_ms` on the log `held` (newest first; `[]`:
    /// none): allowed when the newest send is at least `min_interval_ms` old and fewer
    /// than `daily_cap` sends are inside the cap window; an allowed send goes first in
    /// the log. A newest send later than `now_ms` (a clock that went back) refuses.
    pub fn send(&self, held: &[u64], now_ms: u64) -> SendOutcome {
        let mut log = live(held, now_ms);
        let allowed = self.next_in_ms(&log, now_ms) == 0;
        if allowed {
            log.insert(0, now_ms);
            log.truncate(self.daily_cap as usize);
        }
        SendOutcome { allowed, log }
    }

    /// Milliseconds until a send would be allowed on `held` at `now_ms` (0: now): the
    /// later of the interval's end and the moment the oldest capped send leaves the
    /// window. For the operator's `Inspect` only: a gateway's answer never carries it
    /// (docs/flows.md, "No oracle").
    pub fn next_in_ms(&self, held: &[u64], now_ms: u64) -> u64 {
        let log = live(held, now_ms);
        // A newest send from the future (a clock that went back) waits more than the
        // interval: min_interval_ms is at least a second.
        let interval = log.first().map_or(0, |&newest| {
            newest.saturating_add(self.min_interval_ms).saturating_sub(now_ms)
        });
        let cap = self.daily_cap as usize;
        let full = if log.len() >= cap {
            // The send that must leave the window for one more to fit.
            log[cap - 1].saturating_add(CAP_WINDOW_MS).saturating_sub(now_ms).max(1)
        } else {
            0
        };
        interval.max(full)
    }
}

/// The times of `held` still inside the cap window at `now_ms`.
pub fn live(held: &[u64], now_ms: u64) -> Vec<u64> {
    held.iter().copied().filter(|&t| t.saturating_add(CAP_WINDOW_MS) > now_ms).collect()
}

/// When a log may be dropped: a cap window after its newest send (`None`: an empty log
/// keeps nothing).
pub fn expires_ms(log: &[u64]) -> Option<u64> {
    log.first().map(|&newest| newest.saturating_add(CAP_WINDOW_MS))
}

/// Reads a log as `send_log.lua` stores it: 1 to [`MAX_DAILY_CAP`] decimal times,
/// comma-separated, newest first (non-increasing), each at most [`MAX_STORED_TIME_MS`]
/// (an empty log is never stored: an allowed send writes its own time). Anything else
/// was not written by a daemon: `None` (a store error, a deny).
pub fn parse(text: &str) -> Option<Vec<u64>> {
    let mut log = Vec::new();
    for part in text.split(',') {
        if part.is_empty() || part.len() > 15 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let t: u64 = part.parse().ok()?;
        let ordered = log.last().is_none_or(|&prev| t <= prev);
        if t > MAX_STORED_TIME_MS || !ordered || log.len() >= MAX_DAILY_CAP as usize {
            return None;
        }
        log.push(t);
    }
    Some(log)
}

/// The stored text of a log (the inverse of [`parse`]).
pub fn text(log: &[u64]) -> String {
    log.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000_000;
    const RESET: SendPolicy = SendPolicy { min_interval_ms: 60_000, daily_cap: 5 };

    #[test]
    fn the_interval_and_the_daily_cap_both_hold() {
        let first = RESET.send(&[], T);
        assert!(first.allowed);
        assert_eq!(first.log, vec![T]);
        let early = RESET.send(&first.log, T + 59_999);
        assert!(!early.allowed, "inside the interval");
        assert_eq!(early.log, vec![T], "a refusal writes nothing new");
        let mut log = first.log;
        for i in 1..5 {
            let sent = RESET.send(&log, T + i * 60_000);
            assert!(sent.allowed, "send {i}");
            log = sent.log;
        }
        assert_eq!(log.len(), 5);
        assert!(!RESET.send(&log, T + 3_600_000).allowed, "the sixth in 24 h");
        assert_eq!(RESET.next_in_ms(&log, T + 3_600_000), CAP_WINDOW_MS - 3_600_000);
        // The first send leaves the window: one more fits, not two, until the second
        // leaves it too (a sliding 24 h, not a calendar day).
        let later = RESET.send(&log, T + CAP_WINDOW_MS);
        assert!(later.allowed);
        assert_eq!(later.log.len(), 5);
        let full = SendPolicy { min_interval_ms: 1_000, ..RESET };
        assert!(!full.send(&later.log, T + CAP_WINDOW_MS + 59_999).allowed, "cap");
        assert!(full.send(&later.log, T + CAP_WINDOW_MS + 60_000).allowed);
    }

    #[test]
    fn a_clock_that_went_back_refuses() {
        assert!(!RESET.send(&[T], T - 1).allowed);
        assert!(RESET.next_in_ms(&[T], T - 1) > 0);
    }

    #[test]
    fn stored_logs_read_strictly() {
        assert_eq!(parse(""), None, "an empty log is never written");
        assert_eq!(parse(&text(&[T, T - 5])), Some(vec![T, T - 5]));
        for bad in ["x", "1,", ",1", "1,2", "-1", "1 ", "99999999999999999999", "1.5"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        let long = text(&vec![T; MAX_DAILY_CAP as usize + 1]);
        assert_eq!(parse(&long), None, "more times than any cap");
        assert_eq!(expires_ms(&[T, T - 5]), Some(T + CAP_WINDOW_MS));
        assert_eq!(expires_ms(&[]), None);
    }
}
