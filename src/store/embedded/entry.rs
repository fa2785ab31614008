//! How an entry of the embedded store is encoded: a record, an attempt id's answer, a
//! spray note or count, a device epoch, a network bucket, a repeat list, each with its
//! expiry.

use crate::store::error::StoreError;
use crate::throttle::candidate_report::{DEFENCES, ReportCounts};
use crate::throttle::realm_tally::{Ring, SLOTS};
use crate::throttle::{MAX_STORED_COUNT, MAX_STORED_TIME_MS, Record};

/// An entry as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "an entry lives for one operation on the writer's stack; a send log's 50 times \
              inline (about 400 bytes) cost less than a Box per read"
)]
pub(super) enum Entry {
    Record {
        record: Record,
        expires_ms: u64,
    },
    /// An attempt id's first answer, and its request's binding (0: none; encoded as a
    /// fifth word only when set, so an answer written before bindings reads as 0).
    Attempt {
        allowed: bool,
        window_start_ms: u64,
        replays: u64,
        binding: u64,
        expires_ms: u64,
    },
    /// One account key under one password fingerprint (docs/spray.md): the latest
    /// period (plus one; 0: never) in which a comparison of it failed.
    Spray {
        failed: u64,
        expires_ms: u64,
    },
    /// An account's device epoch (docs/devices.md, "Revocation").
    Epoch {
        epoch: u64,
        expires_ms: u64,
    },
    /// One client's refused-password fingerprints on one bucket (docs/throttle.md,
    /// "Repeated passwords"), newest first, bound to the record's window start and
    /// expiring with it. Bit `i` of `marks`: entry `i` was already forgiven once without
    /// a comparison (`crate::throttle::repeat_list`). Encoded as tag 7, the window start,
    /// the marks, a zero word, the expiry, then the fingerprints (marks at or above bit
    /// `len` are a corrupt entry; a list written before marks existed has 0 there).
    Repeats {
        window_start_ms: u64,
        fingerprints: [u64; MAX_REPEATS],
        marks: u16,
        len: u8,
        expires_ms: u64,
    },
    /// A client network's token bucket (docs/throttle.md, "Per client network"): its
    /// TAT, which is also when it expires (full again).
    Bucket {
        tat_ms: u64,
    },
    /// Tokens of a network's bucket that `RecordAttempt`s of one account hold
    /// (docs/throttle.md, "Per client network"): what a `ClearAttempts` may give back.
    /// Expires with the bucket's TAT. The candidate's part (`<held>:s`) also counts the
    /// attempts its bucket refused (`refused`; 0 for the enforced count). Encoded as tag
    /// 10, the count, the refused count, a zero word, the expiry.
    Held {
        count: u64,
        refused: u64,
        expires_ms: u64,
    },
    /// A mail flow's send log (docs/flows.md; `crate::throttle::send_log`): send times,
    /// newest first, expiring a cap window after the newest. Encoded as tag 8, the
    /// count, two zero words, the expiry, then the times.
    Sends {
        times: [u64; MAX_SENDS],
        len: u8,
        expires_ms: u64,
    },
    /// An account's accepts of one breached credential (docs/breach.md, "Grace logins").
    Breached {
        credential: u64,
        count: u64,
        expires_ms: u64,
    },
    /// A step-up challenge's one-use mark (docs/devices.md): the challenge confirmed a
    /// device. Encoded as tag 11, three zero words, the expiry.
    Used {
        expires_ms: u64,
    },
    /// One password fingerprint's counts (docs/spray.md) for period `period` (plus one)
    /// and the one before: `[current, previous]` of each.
    SprayCount {
        period: u64,
        counts: [SprayCounts; 2],
        expires_ms: u64,
    },
    /// One kind of a realm's tally (docs/observability.md, "A realm's status";
    /// [`Ring`]). Encoded as tag 12, the ring's latest minute, two zero words, the
    /// expiry, then the 60 per-minute counts, two to a word.
    Tally {
        ring: Ring,
        expires_ms: u64,
    },
    /// One member of a realm's distinct tally: the minute it was last noted. Encoded as
    /// tag 13, the minute, two zero words, the expiry.
    TallyMember {
        minute: u64,
        expires_ms: u64,
    },
    /// A candidate policy's report (docs/throttle.md, "Trying a policy in shadow"): its
    /// start and counts. Encoded as tag 16, the start, two zero words, the expiry, then
    /// the counts, five per defence; one written before the report had a line per
    /// defence holds only the login's five.
    CandidateReport {
        since_ms: u64,
        counts: ReportCounts,
        expires_ms: u64,
    },
    /// The client networks one record's window counted attempts from (docs/throttle.md,
    /// "Why a door is shut"): their keyed tags, bound to the window's start and expiring
    /// with the window. Encoded as tag 14, the window start, the count, a zero word, the
    /// expiry, then the tags.
    Networks {
        window_start_ms: u64,
        tags: [u64; MAX_NETWORKS],
        len: u8,
        expires_ms: u64,
    },
    /// An account's index of its device buckets (docs/devices.md, "Lanes in Inspect"):
    /// each device's tag and when an attempt was last counted in its bucket. Encoded as
    /// tag 15, the count, two zero words, the expiry, then the pairs.
    Devices {
        lanes: [(u64, u64); MAX_DEVICE_LANES],
        len: u8,
        expires_ms: u64,
    },
}

/// One period's spray counts of one fingerprint: how many account keys failed in it, and
/// how many of those had not failed in the period before.
/// `|F(p-1) ∪ F(p)| = failed(p-1) + new_failed(p)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SprayCounts {
    pub(super) failed: u64,
    pub(super) new_failed: u64,
}

/// Most fingerprints an [`Entry::Repeats`] holds (`repeat_list_length` is at most this).
pub(super) const MAX_REPEATS: usize = crate::throttle::repeat_list::MAX_REPEAT_LIST;

/// Most times an [`Entry::Sends`] holds (the highest `daily_cap`).
pub(super) const MAX_SENDS: usize = crate::throttle::send_log::MAX_DAILY_CAP as usize;

/// Most tags an [`Entry::Networks`] holds.
pub(super) const MAX_NETWORKS: usize = crate::throttle::attempt_count::MAX_NETWORKS;

/// Most devices an [`Entry::Devices`] lists.
pub(super) const MAX_DEVICE_LANES: usize = crate::throttle::attempt_count::MAX_DEVICE_LANES;

/// Length of an encoded [`Entry::Record`]: tag, failures, window start, step, expiry,
/// repeats, consecutive failures, the lockout's end, when the door last shut.
const RECORD_LEN: usize = 65;

/// Length of a record written before the time its door shut was kept.
const RECORD_LEN_BEFORE_SHUT_AT: usize = 57;

/// Length of an encoded [`Entry::Tally`]: tag, four words, 60 counts of 4 bytes.
const TALLY_LEN: usize = 33 + 4 * SLOTS as usize;
/// A candidate report's length: 33 bytes of tag, start and expiry, then five counts per
/// defence.
const CANDIDATE_REPORT_LEN: usize = 33 + 8 * 5 * DEFENCES;
/// A candidate report written before it had a line per defence: the login's five.
const CANDIDATE_REPORT_LOGIN_LEN: usize = 33 + 8 * 5;

/// Length of an encoded [`Entry::SprayCount`]: tag, period, four counts, expiry.
pub(super) const SPRAY_COUNT_LEN: usize = 1 + 8 * 6;

impl Entry {
    pub(super) fn expires_ms(&self) -> u64 {
        match *self {
            Entry::Record { expires_ms, .. }
            | Entry::Attempt { expires_ms, .. }
            | Entry::Spray { expires_ms, .. }
            | Entry::Epoch { expires_ms, .. }
            | Entry::Held { expires_ms, .. }
            | Entry::SprayCount { expires_ms, .. }
            | Entry::Repeats { expires_ms, .. }
            | Entry::Sends { expires_ms, .. }
            | Entry::Breached { expires_ms, .. }
            | Entry::Tally { expires_ms, .. }
            | Entry::TallyMember { expires_ms, .. }
            | Entry::CandidateReport { expires_ms, .. }
            | Entry::Networks { expires_ms, .. }
            | Entry::Devices { expires_ms, .. }
            | Entry::Used { expires_ms } => expires_ms,
            Entry::Bucket { tat_ms } => tat_ms,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(33);
        match *self {
            Entry::Record { record, expires_ms } => {
                out.push(1);
                out.extend_from_slice(&record.failures.to_le_bytes());
                out.extend_from_slice(&record.window_start_ms.to_le_bytes());
                out.extend_from_slice(&u64::from(record.step).to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
                // Then the repeats, consecutive failures, lockout's end, shut time
                // (`RECORD_LEN`); older records are shorter (`decode`).
                out.extend_from_slice(&record.repeats.to_le_bytes());
                out.extend_from_slice(&record.consecutive.to_le_bytes());
                out.extend_from_slice(&record.locked_until_ms.to_le_bytes());
                out.extend_from_slice(&record.shut_at_ms.to_le_bytes());
            }
            Entry::Networks { .. } | Entry::Devices { .. } => self.encode_lanes(&mut out),
            Entry::Repeats { window_start_ms, fingerprints, marks, len, expires_ms } => {
                out.push(7);
                out.extend_from_slice(&window_start_ms.to_le_bytes());
                out.extend_from_slice(&u64::from(marks).to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
                for fp in &fingerprints[..usize::from(len).min(MAX_REPEATS)] {
                    out.extend_from_slice(&fp.to_le_bytes());
                }
            }
            Entry::Sends { times, len, expires_ms } => {
                out.push(8);
                out.extend_from_slice(&u64::from(len).to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
                for t in &times[..usize::from(len).min(MAX_SENDS)] {
                    out.extend_from_slice(&t.to_le_bytes());
                }
            }
            Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms } => {
                out.push(2);
                out.extend_from_slice(&u64::from(allowed).to_le_bytes());
                out.extend_from_slice(&window_start_ms.to_le_bytes());
                out.extend_from_slice(&replays.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
                if binding != 0 {
                    out.extend_from_slice(&binding.to_le_bytes());
                }
            }
            Entry::Spray { failed, expires_ms } => {
                out.push(3);
                out.extend_from_slice(&failed.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Breached { credential, count, expires_ms } => {
                out.push(9);
                out.extend_from_slice(&credential.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Used { expires_ms } => {
                out.push(11);
                out.extend_from_slice(&[0u8; 24]);
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Epoch { epoch, expires_ms } => {
                out.push(5);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Held { count, refused, expires_ms } => {
                out.push(10);
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&refused.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&expires_ms.to_le_bytes());
            }
            Entry::Bucket { tat_ms } => {
                out.push(6);
                out.extend_from_slice(&tat_ms.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                out.extend_from_slice(&tat_ms.to_le_bytes());
            }
            Entry::Tally { .. }
            | Entry::TallyMember { .. }
            | Entry::CandidateReport { .. }
            | Entry::SprayCount { .. } => self.encode_counts(&mut out),
        }
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Protocol("corrupt embedded entry".into());
        let fits = match bytes.first() {
            Some(4) => bytes.len() == SPRAY_COUNT_LEN,
            // Today's record, or one written before the ceiling (33 or 41 bytes: no
            // consecutive failures, no lockout) or before the shut time (57).
            Some(1) => matches!(bytes.len(), 33 | 41 | RECORD_LEN_BEFORE_SHUT_AT | RECORD_LEN),
            // An attempt id's answer with its binding carries one more word.
            Some(2) => matches!(bytes.len(), 33 | 41),
            // A repeat list, a send log: the fixed words, then its fingerprints or times.
            Some(7) => tail_fits(bytes, MAX_REPEATS),
            Some(8) => tail_fits(bytes, MAX_SENDS),
            Some(12) => bytes.len() == TALLY_LEN,
            Some(16) => matches!(bytes.len(), CANDIDATE_REPORT_LOGIN_LEN | CANDIDATE_REPORT_LEN),
            Some(14 | 15) => true, // `decode_lanes` checks them
            _ => bytes.len() == 33,
        };
        if !fits {
            return Err(corrupt());
        }
        let word = |i: usize| {
            u64::from_le_bytes(bytes[1 + 8 * i..9 + 8 * i].try_into().unwrap_or_default())
        };
        // Every value within what a daemon writes (src/throttle/mod.rs, MAX_STORED_*):
        // anything else, edited in by hand or by another program, is a store error.
        let count = |i: usize| Some(word(i)).filter(|&n| n <= MAX_STORED_COUNT).ok_or_else(corrupt);
        let time =
            |i: usize| Some(word(i)).filter(|&t| t <= MAX_STORED_TIME_MS).ok_or_else(corrupt);
        let nonzero = |i: usize| Some(word(i)).filter(|&w| w != 0).ok_or_else(corrupt);
        match bytes[0] {
            1 => {
                let record = Record {
                    failures: word(0),
                    window_start_ms: word(1),
                    step: u32::try_from(word(2)).map_err(|_| corrupt())?,
                    repeats: if bytes.len() > 33 { word(4) } else { 0 },
                    consecutive: if bytes.len() > 41 { word(5) } else { 0 },
                    locked_until_ms: if bytes.len() > 41 { word(6) } else { 0 },
                    shut_at_ms: if bytes.len() == RECORD_LEN { word(7) } else { 0 },
                };
                if !record.is_plausible() {
                    return Err(corrupt());
                }
                Ok(Entry::Record { record, expires_ms: word(3) })
            }
            2 => Ok(Entry::Attempt {
                allowed: match word(0) {
                    0 => false,
                    1 => true,
                    _ => return Err(corrupt()),
                },
                window_start_ms: time(1)?,
                replays: count(2)?,
                // A binding is never 0 (`AttemptKey::bound`): 0 in its word is corrupt.
                binding: if bytes.len() == 41 { nonzero(4)? } else { 0 },
                expires_ms: word(3),
            }),
            3 => Ok(Entry::Spray { failed: count(0)?, expires_ms: word(3) }),
            5 => Ok(Entry::Epoch { epoch: count(0)?, expires_ms: word(3) }),
            10 if word(2) == 0 => {
                Ok(Entry::Held { count: count(0)?, refused: count(1)?, expires_ms: word(3) })
            }
            11 if (0..3).all(|i| word(i) == 0) => Ok(Entry::Used { expires_ms: word(3) }),
            9 => Ok(Entry::Breached { credential: word(0), count: count(1)?, expires_ms: word(3) }),
            6 if word(0) == word(3) => Ok(Entry::Bucket { tat_ms: time(0)? }),
            7 => {
                let len = (bytes.len() - 33) / 8;
                let mut fingerprints = [0u64; MAX_REPEATS];
                for (i, fp) in fingerprints.iter_mut().enumerate().take(len) {
                    *fp = word(4 + i);
                }
                // Only the first `len` bits may be set.
                let marks = u16::try_from(word(1))
                    .ok()
                    .filter(|&m| u32::from(m) >> len == 0)
                    .ok_or_else(corrupt)?;
                Ok(Entry::Repeats {
                    window_start_ms: time(0)?,
                    fingerprints,
                    marks,
                    len: u8::try_from(len).map_err(|_| corrupt())?,
                    expires_ms: word(3),
                })
            }
            8 => {
                let len = (bytes.len() - 33) / 8;
                let mut times = [0u64; MAX_SENDS];
                for (i, t) in times.iter_mut().enumerate().take(len) {
                    *t = time(4 + i)?;
                }
                sends(times, len, word(0), word(3)).ok_or_else(corrupt)
            }
            12 | 13 if word(1) == 0 && word(2) == 0 => decode_tally(bytes, time(0)?, word(3)),
            4 | 16 => decode_counts(bytes),
            14 | 15 => decode_lanes(bytes),
            _ => Err(corrupt()),
        }
    }
}

impl Entry {
    /// Writes a [`Entry::Tally`], a [`Entry::TallyMember`], a [`Entry::CandidateReport`]
    /// or a [`Entry::SprayCount`] (nothing for another entry).
    fn encode_counts(&self, out: &mut Vec<u8>) {
        let (tag, minute, counts, expires_ms) = match *self {
            Entry::SprayCount { period, counts, expires_ms } => {
                out.push(4);
                out.extend_from_slice(&period.to_le_bytes());
                for n in counts.iter().flat_map(|c| [c.failed, c.new_failed]) {
                    out.extend_from_slice(&n.to_le_bytes());
                }
                out.extend_from_slice(&expires_ms.to_le_bytes());
                return;
            }
            Entry::Tally { ring, expires_ms } => (12, ring.last, Some(ring.counts), expires_ms),
            Entry::TallyMember { minute, expires_ms } => (13, minute, None, expires_ms),
            Entry::CandidateReport { since_ms, counts, expires_ms } => {
                out.push(16);
                out.extend_from_slice(&since_ms.to_le_bytes());
                out.extend_from_slice(&[0u8; 16]);
                out.extend_from_slice(&expires_ms.to_le_bytes());
                counts.iter().flatten().for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
                return;
            }
            _ => return,
        };
        out.push(tag);
        out.extend_from_slice(&minute.to_le_bytes());
        out.extend_from_slice(&[0u8; 16]);
        out.extend_from_slice(&expires_ms.to_le_bytes());
        for c in counts.iter().flatten() {
            out.extend_from_slice(&c.to_le_bytes());
        }
    }

    /// [`Entry::Networks`] (tag 14: the window start, the count, a zero word, the expiry,
    /// then the tags) and [`Entry::Devices`] (tag 15: the count, two zero words, the
    /// expiry, then each device's tag and time).
    fn encode_lanes(&self, out: &mut Vec<u8>) {
        let (tag, words, tail): (u8, [u64; 4], Vec<u64>) = match *self {
            Entry::Networks { window_start_ms, tags, len, expires_ms } => {
                let tail = tags[..usize::from(len).min(MAX_NETWORKS)].to_vec();
                (14, [window_start_ms, u64::from(len), 0, expires_ms], tail)
            }
            Entry::Devices { lanes, len, expires_ms } => {
                let listed = &lanes[..usize::from(len).min(MAX_DEVICE_LANES)];
                let tail = listed.iter().flat_map(|&(device, at)| [device, at]).collect();
                (15, [u64::from(len), 0, 0, expires_ms], tail)
            }
            _ => return,
        };
        out.push(tag);
        for w in words.iter().chain(&tail) {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

/// A tally's entry (tag 12, its length checked) or a member's (tag 13) of `bytes`,
/// whose first word is `minute` and fourth `expires_ms`.
fn decode_tally(bytes: &[u8], minute: u64, expires_ms: u64) -> Result<Entry, StoreError> {
    if bytes[0] == 13 {
        return Ok(Entry::TallyMember { minute, expires_ms });
    }
    let mut counts = [0u32; SLOTS as usize];
    for (c, word) in counts.iter_mut().zip(bytes[33..].chunks_exact(4)) {
        *c = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
    }
    Ok(Entry::Tally { ring: Ring { last: minute, counts }, expires_ms })
}

/// Decodes an [`Entry::SprayCount`] (tag 4) or an [`Entry::CandidateReport`] (tag 16),
/// their lengths checked: every count and time within what a daemon writes.
fn decode_counts(bytes: &[u8]) -> Result<Entry, StoreError> {
    let corrupt = || StoreError::Protocol("corrupt embedded entry".into());
    let word =
        |i: usize| u64::from_le_bytes(bytes[1 + 8 * i..9 + 8 * i].try_into().unwrap_or_default());
    let count = |i: usize| Some(word(i)).filter(|&n| n <= MAX_STORED_COUNT).ok_or_else(corrupt);
    if bytes[0] == 4 {
        let pair =
            |i| Ok::<_, StoreError>(SprayCounts { failed: count(i)?, new_failed: count(i + 1)? });
        return Ok(Entry::SprayCount {
            period: count(0)?,
            counts: [pair(1)?, pair(3)?],
            expires_ms: word(5),
        });
    }
    if word(1) != 0 || word(2) != 0 || word(0) > MAX_STORED_TIME_MS {
        return Err(corrupt());
    }
    let mut counts = ReportCounts::default();
    let words = (bytes.len() - 33) / 8;
    for (i, c) in counts.iter_mut().flatten().take(words).enumerate() {
        *c = count(4 + i)?;
    }
    Ok(Entry::CandidateReport { since_ms: word(0), counts, expires_ms: word(3) })
}

/// Decodes an [`Entry::Networks`] or [`Entry::Devices`]: its count agrees with its
/// length, within the bound, its zero words zero, a network listed once, times within
/// what a daemon writes.
fn decode_lanes(bytes: &[u8]) -> Result<Entry, StoreError> {
    let corrupt = || StoreError::Protocol("corrupt embedded entry".into());
    let networks = bytes[0] == 14;
    let (max, width) = if networks { (MAX_NETWORKS, 1) } else { (MAX_DEVICE_LANES, 2) };
    if !tail_fits(bytes, max * width) || !((bytes.len() - 33) / 8).is_multiple_of(width) {
        return Err(corrupt());
    }
    let word =
        |i: usize| u64::from_le_bytes(bytes[1 + 8 * i..9 + 8 * i].try_into().unwrap_or_default());
    let len = (bytes.len() - 33) / 8 / width;
    let count = u8::try_from(len).map_err(|_| corrupt())?;
    let plain = if networks {
        word(0) <= MAX_STORED_TIME_MS && word(1) == len as u64 && word(2) == 0
    } else {
        word(0) == len as u64 && word(1) == 0 && word(2) == 0
    };
    if !plain {
        return Err(corrupt());
    }
    if networks {
        let mut tags = [0u64; MAX_NETWORKS];
        for (i, tag) in tags.iter_mut().enumerate().take(len) {
            *tag = word(4 + i);
        }
        if (1..len).any(|i| tags[..i].contains(&tags[i])) {
            return Err(corrupt());
        }
        let window_start_ms = word(0);
        return Ok(Entry::Networks { window_start_ms, tags, len: count, expires_ms: word(3) });
    }
    let mut lanes = [(0u64, 0u64); MAX_DEVICE_LANES];
    for (i, lane) in lanes.iter_mut().enumerate().take(len) {
        *lane = (word(4 + 2 * i), word(5 + 2 * i));
    }
    if lanes[..len].iter().any(|&(_, at)| at > MAX_STORED_TIME_MS) {
        return Err(corrupt());
    }
    Ok(Entry::Devices { lanes, len: count, expires_ms: word(3) })
}

/// Whether `bytes` are the 33 fixed bytes and at most `max` more words.
fn tail_fits(bytes: &[u8], max: usize) -> bool {
    bytes.len() >= 33 && (bytes.len() - 33).is_multiple_of(8) && (bytes.len() - 33) / 8 <= max
}

/// A send log of `len` `times` whose count word says `count`: `None` unless the times
/// are newest first and the count agrees.
fn sends(times: [u64; MAX_SENDS], len: usize, count: u64, expires_ms: u64) -> Option<Entry> {
    let ordered = times[..len].windows(2).all(|w| w[0] >= w[1]);
    let len = u8::try_from(len).ok().filter(|&n| ordered && u64::from(n) == count)?;
    Some(Entry::Sends { times, len, expires_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_written_before_the_shut_time_reads_as_unknown() {
        let record = Record {
            failures: 6,
            window_start_ms: 1_800_000_000_000,
            step: 1,
            repeats: 2,
            consecutive: 11,
            locked_until_ms: 1_800_000_900_000,
            shut_at_ms: 1_800_000_001_000,
        };
        let bytes = Entry::Record { record, expires_ms: 7 }.encode();
        assert_eq!(bytes.len(), RECORD_LEN);
        assert_eq!(Entry::decode(&bytes).unwrap(), Entry::Record { record, expires_ms: 7 });
        // The same record as a daemon before the field wrote it: its first 57 bytes.
        let before = Entry::decode(&bytes[..RECORD_LEN_BEFORE_SHUT_AT]).unwrap();
        let Entry::Record { record: old, expires_ms: 7 } = before else { panic!("{before:?}") };
        assert_eq!(old, Record { shut_at_ms: 0, ..record });
        // A shut time no daemon writes is a store error.
        let mut wild = bytes.clone();
        wild[57..65].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Entry::decode(&wild).is_err());
    }

    #[test]
    fn network_sets_and_device_indexes_round_trip_and_refuse_what_no_daemon_writes() {
        let mut tags = [0u64; MAX_NETWORKS];
        tags[..3].copy_from_slice(&[5, 9, 1]);
        let set = Entry::Networks { window_start_ms: 1000, tags, len: 3, expires_ms: 2000 };
        let bytes = set.encode();
        assert_eq!((bytes.len(), Entry::decode(&bytes).unwrap()), (33 + 3 * 8, set));
        let mut twice = bytes.clone();
        twice[41..49].copy_from_slice(&5u64.to_le_bytes());
        assert!(Entry::decode(&twice).is_err(), "a tag listed twice");
        let mut lanes = [(0u64, 0u64); MAX_DEVICE_LANES];
        lanes[..2].copy_from_slice(&[(0xabc, 1000), (0xdef, 1001)]);
        let index = Entry::Devices { lanes, len: 2, expires_ms: 3000 };
        let bytes = index.encode();
        assert_eq!((bytes.len(), Entry::decode(&bytes).unwrap()), (33 + 2 * 16, index));
        assert!(Entry::decode(&bytes[..bytes.len() - 8]).is_err(), "half a pair");
        let too_long = [&bytes[..], &[0u8; 16 * MAX_DEVICE_LANES]].concat();
        assert!(Entry::decode(&too_long).is_err(), "more than the bound");
    }
}
