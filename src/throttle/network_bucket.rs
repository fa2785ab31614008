//! The token bucket of the throttle per client network (docs/throttle.md, "Per client
//! network"), as GCRA (the generic cell rate algorithm, ITU-T I.371): one number per
//! bucket, its *theoretical arrival time* (TAT, store-clock ms), instead of a token count
//! and a refill time. A bucket holds `capacity` tokens and gets one back every
//! `interval_ms`; an absent bucket, or one whose TAT has passed, is full. Both stores
//! apply these rules (`network_bucket.lua` on Redis), and the store conformance tests hold them
//! together.

/// A bucket's shape, from a realm's validated settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketPolicy {
    /// Tokens a full bucket holds (`network_capacity`, 1–1,000,000).
    pub capacity: u32,
    /// Milliseconds for one token to come back (`network_refill_period / capacity`, at
    /// least 1).
    pub interval_ms: u64,
}

/// What one bucket operation found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// A token was taken (`take`) — or, for the other operations, `false`.
    pub taken: bool,
    /// The bucket's TAT after the operation; `None`: full (the store keeps nothing).
    pub tat_ms: Option<u64>,
}

impl BucketPolicy {
    /// How long an empty bucket takes to fill, in ms (`capacity × interval`).
    pub fn burst_ms(&self) -> u64 {
        u64::from(self.capacity).saturating_mul(self.interval_ms)
    }

    /// Takes one token at store time `now_ms` from a bucket whose TAT is `tat_ms`
    /// (`None`: full). An empty bucket is left as it is: a refused take costs nothing.
    pub fn take(&self, tat_ms: Option<u64>, now_ms: u64) -> Spent {
        let base = tat_ms.map_or(now_ms, |t| t.max(now_ms));
        let next = base.saturating_add(self.interval_ms);
        if next - now_ms > self.burst_ms() {
            return Spent { taken: false, tat_ms: tat_ms.filter(|&t| t > now_ms) };
        }
        Spent { taken: true, tat_ms: Some(next) }
    }

    /// Gives one token back (the attempt it was taken for compared nothing or
    /// matched). A full bucket stays full.
    pub fn give_back(&self, tat_ms: Option<u64>, now_ms: u64) -> Spent {
        let tat = tat_ms.map(|t| t.saturating_sub(self.interval_ms)).filter(|&t| t > now_ms);
        Spent { taken: false, tat_ms: tat }
    }

    /// Tokens left at `now_ms` (0 ..= capacity).
    pub fn tokens(&self, tat_ms: Option<u64>, now_ms: u64) -> u32 {
        let debt = tat_ms.map_or(0, |t| t.saturating_sub(now_ms));
        let left = self.burst_ms().saturating_sub(debt) / self.interval_ms.max(1);
        u32::try_from(left).unwrap_or(u32::MAX).min(self.capacity)
    }

    /// Milliseconds until the bucket is full again (0: full).
    pub fn full_in_ms(&self, tat_ms: Option<u64>, now_ms: u64) -> u64 {
        tat_ms.map_or(0, |t| t.saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Auth0's default: 100 a day, one back every 14.4 minutes.
    const DAILY: BucketPolicy = BucketPolicy { capacity: 100, interval_ms: 864_000 };

    #[test]
    fn a_full_bucket_gives_capacity_tokens_then_none() {
        let mut tat = None;
        for n in 0..100 {
            let s = DAILY.take(tat, 1_000);
            assert!(s.taken, "take {n}");
            tat = s.tat_ms;
        }
        assert_eq!(DAILY.tokens(tat, 1_000), 0);
        let refused = DAILY.take(tat, 1_000);
        assert!(!refused.taken);
        assert_eq!(refused.tat_ms, tat, "a refused take changes nothing");
        // One token back after one interval, and the bucket is full after a day.
        assert!(DAILY.take(tat, 1_000 + 864_000).taken);
        assert_eq!(DAILY.full_in_ms(tat, 1_000), 86_400_000);
        assert_eq!(DAILY.tokens(tat, 1_000 + 86_400_000), 100);
    }

    #[test]
    fn a_token_given_back_is_there_again_and_a_full_bucket_stays_full() {
        let one = DAILY.take(None, 0);
        assert_eq!(DAILY.tokens(one.tat_ms, 0), 99);
        let back = DAILY.give_back(one.tat_ms, 0);
        assert_eq!(back.tat_ms, None);
        assert_eq!(DAILY.tokens(back.tat_ms, 0), 100);
        assert_eq!(DAILY.give_back(None, 0).tat_ms, None);
    }

    #[test]
    fn tokens_count_down_and_come_back_one_an_interval() {
        let p = BucketPolicy { capacity: 3, interval_ms: 1_000 };
        let mut tat = None;
        for _ in 0..3 {
            tat = p.take(tat, 0).tat_ms;
        }
        assert_eq!([0, 999, 1_000, 2_500, 3_000].map(|t| p.tokens(tat, t)), [0, 0, 1, 2, 3]);
    }
}
