//! A client's list of refused passwords on one bucket (docs/throttle.md, "Repeated
//! passwords"), independent of any store: what `record_attempt.lua` does to the list
//! when it counts an attempt, and what `repeat_list.lua` does after a failed comparison. The
//! embedded store applies these functions directly; the store conformance tests
//! (`tests/integration/store_conformance/repeats.rs`) hold the scripts to them.
//!
//! A fingerprint is truncated (`repeat_fingerprint_bytes`, 2–8 bytes), so another
//! password, the right one included, can share a listed fingerprint: with 2 bytes and 3
//! entries one login in about 21,845 after a typo. So each entry carries one bit,
//! *forgiven*: the first match on an entry is forgiven without a comparison and sets
//! the bit; a match on an entry whose bit is set is not counted but **is** compared
//! ([`RepeatMatch::Recheck`]), and only a failed comparison clears the bit again
//! ([`RepeatList::note`]). So a right password that shares a listed fingerprint is
//! refused without a comparison at most once before it is compared: its next try from
//! that client is compared and accepts, unless a failed comparison of a password with
//! the same fingerprint from the same client came in between.

/// Most fingerprints a list holds (`repeat_list_length` is at most this).
pub const MAX_REPEAT_LIST: usize = 16;

/// One fingerprint on a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatEntry {
    /// The password's keyed, truncated fingerprint (`crate::defence::repeats`).
    pub fingerprint: u64,
    /// A match on it was already forgiven without a comparison since its last failed
    /// comparison: the next match is compared.
    pub forgiven: bool,
}

/// What a count found on the list ([`RepeatList::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepeatMatch {
    /// The entry was not yet forgiven: the attempt is not counted, not compared, its
    /// network's token goes back; the entry is now forgiven and first.
    Forgiven,
    /// The entry was already forgiven once: the attempt is not counted on its bucket,
    /// but it is compared, and pays its network's token like any comparison that fails.
    Recheck,
}

/// One client's list on one bucket for the bucket's current window, newest first, at
/// most [`MAX_REPEAT_LIST`] entries, no fingerprint twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepeatList {
    /// The entries, newest first.
    pub entries: Vec<RepeatEntry>,
}

impl RepeatList {
    /// The count's read (in the count's atomic step, only while the bucket's window is
    /// current): `None` when `fingerprint` is not listed (the attempt is counted as any
    /// other); [`RepeatMatch::Forgiven`] for an entry not yet forgiven, which is then
    /// marked forgiven and moved first; [`RepeatMatch::Recheck`] for an entry already
    /// forgiven, which is left as it is.
    pub fn claim(&mut self, fingerprint: u64) -> Option<RepeatMatch> {
        let at = self.entries.iter().position(|e| e.fingerprint == fingerprint)?;
        if self.entries[at].forgiven {
            return Some(RepeatMatch::Recheck);
        }
        self.entries.remove(at);
        self.entries.insert(0, RepeatEntry { fingerprint, forgiven: true });
        Some(RepeatMatch::Forgiven)
    }

    /// A failed comparison: `fingerprint` first and not forgiven (re-armed, if it was
    /// listed), the others in their order with their marks, at most `max_len` (1–16)
    /// kept.
    pub fn note(&mut self, fingerprint: u64, max_len: u32) {
        self.entries.retain(|e| e.fingerprint != fingerprint);
        self.entries.insert(0, RepeatEntry { fingerprint, forgiven: false });
        let keep = usize::try_from(max_len).unwrap_or(MAX_REPEAT_LIST).clamp(1, MAX_REPEAT_LIST);
        self.entries.truncate(keep);
    }

    /// Whether `fingerprint` is listed (forgiven or not).
    pub fn holds(&self, fingerprint: u64) -> bool {
        self.entries.iter().any(|e| e.fingerprint == fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[(u64, bool)]) -> RepeatList {
        RepeatList {
            entries: entries
                .iter()
                .map(|&(fingerprint, forgiven)| RepeatEntry { fingerprint, forgiven })
                .collect(),
        }
    }

    #[test]
    fn a_match_is_forgiven_once_then_compared_until_a_failure_re_arms_it() {
        let mut l = RepeatList::default();
        l.note(0xaa11, 3);
        l.note(0xbb22, 3);
        assert_eq!(l, list(&[(0xbb22, false), (0xaa11, false)]));
        assert_eq!(l.claim(0xcc33), None);
        assert_eq!(l.claim(0xaa11), Some(RepeatMatch::Forgiven));
        assert_eq!(l, list(&[(0xaa11, true), (0xbb22, false)]), "forgiven: marked, first");
        // However often it comes again, it is compared, and the list does not move.
        for _ in 0..3 {
            assert_eq!(l.claim(0xaa11), Some(RepeatMatch::Recheck));
        }
        assert_eq!(l, list(&[(0xaa11, true), (0xbb22, false)]));
        // The comparison failed: re-armed, first.
        l.note(0xbb22, 3);
        assert_eq!(l, list(&[(0xbb22, false), (0xaa11, true)]), "another note keeps marks");
        l.note(0xaa11, 3);
        assert_eq!(l, list(&[(0xaa11, false), (0xbb22, false)]));
        assert_eq!(l.claim(0xaa11), Some(RepeatMatch::Forgiven));
    }

    #[test]
    fn the_newest_are_kept() {
        let mut l = RepeatList::default();
        for fp in [1, 2, 3, 4] {
            l.note(fp, 3);
        }
        assert_eq!(l, list(&[(4, false), (3, false), (2, false)]));
        assert!(!l.holds(1));
        for fp in 10..40 {
            l.note(fp, 99);
        }
        assert_eq!(l.entries.len(), MAX_REPEAT_LIST);
        l.note(7, 0);
        assert_eq!(l, list(&[(7, false)]), "max_len is at least 1");
    }
}
