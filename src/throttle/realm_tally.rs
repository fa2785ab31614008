//! The realm tally (docs/observability.md, "A realm's status"): what a realm's status
//! counts, and the arithmetic of its per-minute slots. A tally keeps the last hour in
//! [`SLOTS`] slots of one minute on the store's clock, slot `minute % SLOTS`; a slot
//! whose minute is not one of the last [`SLOTS`] holds nothing. Its twins on Redis are
//! `realm_tally/note.lua` and `realm_tally/read.lua` (a HyperLogLog per slot for the
//! [`Distinct`] tallies, a hash per slot for the [`Counter`]s, and a hash naming the
//! minute each slot holds); the embedded store counts exactly with [`Ring`].

use crate::throttle::flow::{Flow, FlowRules};

/// Length of one slot, in ms.
pub const SLOT_MS: u64 = 60_000;

/// Slots a tally keeps: the last hour, in minutes. Every look-back is at most this.
pub const SLOTS: u64 = 60;

/// How long a slot's keys live after its last note, in ms: the hour it counts for, and
/// one slot more.
pub const SLOT_TTL_MS: u64 = SLOT_MS * (SLOTS + 1);

/// A tally of distinct members: how many different accounts (or networks, or password
/// fingerprints) something happened to in a look-back. Members are keyed digests, never
/// an identifier or an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distinct {
    /// Accounts whose own login record was shut by an attempt (a lockout began).
    Locked,
    /// Accounts whose login record reached the consecutive-failure ceiling.
    Ceiling,
    /// Client networks that used up their bucket of failed logins.
    Networks,
    /// Password fingerprints over the realm's spray threshold.
    Spray,
    /// Accounts that logged in with a breached password on a grace login.
    Grace,
}

impl Distinct {
    /// Every distinct tally, in the order the stores keep them (`note.lua`'s ARGV).
    pub const ALL: [Distinct; 5] =
        [Distinct::Locked, Distinct::Ceiling, Distinct::Networks, Distinct::Spray, Distinct::Grace];

    /// The tally's name in store keys.
    pub fn name(self) -> &'static str {
        match self {
            Distinct::Locked => "locked",
            Distinct::Ceiling => "ceiling",
            Distinct::Networks => "networks",
            Distinct::Spray => "spray",
            Distinct::Grace => "grace",
        }
    }

    /// Its index in [`Distinct::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A tally of occurrences: how often something happened in a look-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Step-up challenges issued (a right password from an unknown device).
    Challenges,
    /// Devices confirmed by a challenge.
    Confirmed,
    /// Attempts a flow refused (its door shut, its cap, its interval, a replay).
    Refused(Flow),
}

impl Counter {
    /// Every counter, in the order the stores keep them (`read.lua`'s reply).
    pub const ALL: [Counter; 6] = [
        Counter::Challenges,
        Counter::Confirmed,
        Counter::Refused(Flow::SecondFactor),
        Counter::Refused(Flow::RecoveryCode),
        Counter::Refused(Flow::PasswordReset),
        Counter::Refused(Flow::VerificationResend),
    ];

    /// The counter's field name in a slot's hash: `challenges`, `confirmed`, or
    /// `refused_<flow tag>` (`refused_2f`, `refused_rc`, `refused_pr`, `refused_vr`).
    pub fn name(self) -> String {
        match self {
            Counter::Challenges => "challenges".into(),
            Counter::Confirmed => "confirmed".into(),
            Counter::Refused(flow) => format!("refused_{}", flow.key_tag()),
        }
    }

    /// Its index in [`Counter::ALL`].
    pub fn index(self) -> usize {
        match self {
            Counter::Challenges => 0,
            Counter::Confirmed => 1,
            Counter::Refused(Flow::SecondFactor) => 2,
            Counter::Refused(Flow::RecoveryCode) => 3,
            Counter::Refused(Flow::PasswordReset) => 4,
            Counter::Refused(Flow::VerificationResend) => 5,
        }
    }
}

/// The minute (since the Unix epoch) a store-clock instant falls in.
pub fn minute(now_ms: u64) -> u64 {
    now_ms / SLOT_MS
}

/// The slot minute `minute` is kept in.
pub fn slot(minute: u64) -> usize {
    // SLOTS is 60: the remainder fits.
    (minute % SLOTS) as usize
}

/// A look-back of `ms` in whole slots: rounded up, at least one, at most [`SLOTS`].
pub fn lookback_slots(ms: u64) -> u64 {
    ms.div_ceil(SLOT_MS).clamp(1, SLOTS)
}

/// Whether what was noted in minute `held` counts in a look-back of `slots` minutes
/// ending with minute `now` (the current minute is the look-back's last).
pub fn counts(held: u64, now: u64, slots: u64) -> bool {
    held <= now && now - held < slots
}

/// The embedded store's exact tally of one kind: per slot, the notes of its minute (a
/// [`Counter`]), or the members whose latest note fell in that minute (a [`Distinct`]
/// tally, so a sum over slots counts each member once), as of minute `last`: slot `s`
/// holds the minute `m ≡ s (mod SLOTS)` of `last - SLOTS < m <= last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    /// The latest minute noted.
    pub last: u64,
    /// Per slot, its minute's count.
    pub counts: [u32; SLOTS as usize],
}

impl Ring {
    /// An empty ring.
    pub fn new() -> Self {
        Self { last: 0, counts: [0; SLOTS as usize] }
    }

    /// Moves the ring to minute `now`: the slots of the minutes after `last` up to
    /// `now` are emptied (all of them after an hour or more). A `now` before `last` (a
    /// clock that went back) keeps the ring as it is.
    pub fn advance(&mut self, now: u64) {
        if now <= self.last {
            return;
        }
        if now - self.last >= SLOTS {
            self.counts = [0; SLOTS as usize];
        } else {
            for m in self.last + 1..=now {
                self.counts[slot(m)] = 0;
            }
        }
        self.last = now;
    }

    /// The sum over a look-back of `slots` minutes ending with minute `now` (read
    /// only: slots the ring has not yet been advanced past are left out).
    pub fn sum(&self, now: u64, slots: u64) -> u64 {
        let oldest = self.last.saturating_sub(SLOTS - 1);
        (now.saturating_sub(slots.min(SLOTS) - 1)..=now)
            .filter(|&m| m >= oldest && m <= self.last)
            .map(|m| u64::from(self.counts[slot(m)]))
            .sum()
    }

    /// Notes a member whose latest earlier note was in minute `previous` (`None`:
    /// never, or more than an hour ago) at minute `now`, after [`Ring::advance`]: its
    /// count moves from its old slot to now's, so each member counts once.
    pub fn move_member(&mut self, previous: Option<u64>, now: u64) {
        if previous == Some(now) {
            return;
        }
        if let Some(p) = previous.filter(|&p| counts(p, now, SLOTS)) {
            let old = &mut self.counts[slot(p)];
            *old = old.saturating_sub(1);
        }
        let new = &mut self.counts[slot(now)];
        *new = new.saturating_add(1);
    }
}

impl Default for Ring {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_counts_the_last_minutes_and_each_member_once() {
        let t = 29_000_000;
        let mut ring = Ring::new();
        ring.advance(t);
        ring.move_member(None, t);
        ring.move_member(None, t);
        assert_eq!(ring.sum(t, 1), 2);
        // One of them again five minutes later: it moves, the union stays 2.
        ring.advance(t + 5);
        ring.move_member(Some(t), t + 5);
        assert_eq!(ring.sum(t + 5, 60), 2);
        assert_eq!(ring.sum(t + 5, 5), 1, "the other one was noted 5 minutes ago");
        assert_eq!(ring.sum(t + 5, 6), 2);
        // An hour on, the first minute has left the ring.
        ring.advance(t + 60);
        assert_eq!(ring.sum(t + 60, 60), 1);
        ring.advance(t + 200);
        assert_eq!(ring.sum(t + 200, 60), 0, "more than an hour: empty");
    }

    #[test]
    fn a_ring_read_ahead_of_its_notes_leaves_out_what_it_has_not_reached() {
        let mut ring = Ring::new();
        ring.advance(1_000);
        ring.counts[slot(1_000)] = 3;
        assert_eq!(ring.sum(1_000, 1), 3);
        assert_eq!(ring.sum(1_059, 60), 3, "minute 1000 is within the hour of minute 1059");
        assert_eq!(ring.sum(1_060, 60), 0, "an hour on: not counted, though not yet emptied");
        assert_eq!(ring.sum(999, 60), 0, "a reader behind the ring counts nothing after it");
    }

    #[test]
    fn look_backs_are_whole_minutes_within_the_hour() {
        assert_eq!(lookback_slots(1), 1);
        assert_eq!(lookback_slots(900_000), 15);
        assert_eq!(lookback_slots(900_001), 16);
        assert_eq!(lookback_slots(86_400_000), 60);
        assert!(
            counts(10, 10, 1) && counts(1, 10, 10) && !counts(0, 10, 10) && !counts(11, 10, 60)
        );
        assert_eq!(Counter::ALL.map(Counter::index), [0, 1, 2, 3, 4, 5]);
        assert_eq!(Distinct::ALL.map(Distinct::index), [0, 1, 2, 3, 4]);
        assert_eq!(Counter::Refused(Flow::PasswordReset).name(), "refused_pr");
    }
}
