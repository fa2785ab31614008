//! Password-spray detection (docs/spray.md).
//!
//! A spray is one or a few common passwords tried once against many accounts, each
//! account staying far below its own lockout limit. Per realm, every failed comparison
//! of `Verify` notes its account key under a short keyed fingerprint of the password
//! ([`SprayFingerprints`]); the store answers how many distinct account keys failed with
//! a fingerprint in the sliding period. Each `Verify` reads that count with its
//! attempt's count, before its comparison: at `spray_threshold` the fingerprint is
//! *sprayed*, and the call answers
//! `spray_suspected = true` (an accept too); with `spray_action = "reject"` it is refused
//! without a comparison.
//!
//! The answer depends on the failures before the call, never on the call's own note:
//! a call cannot learn whether its account was already counted, and a note costs a real,
//! counted comparison of that account (docs/spray.md, "No oracle").
//!
//! The fingerprint is `HMAC-SHA-256(subkey("spray"), …)` truncated to
//! [`FINGERPRINT_BITS`] bits: about 2^16 values for all passwords, so every value is shared
//! by a great many passwords and a stored value is no password equivalent, even to
//! someone holding the key secret.
//!
//! [`SprayWatch`] is this daemon's view: which fingerprints it saw over the threshold in
//! the last period (a number per realm, never the values outside this process), and the
//! realm-level episodes, each logged once when it begins and once when it ends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::secret::{KeySecret, keyed_mac, update_framed};
use crate::setting::{Problems, check};
use crate::store::keys::SprayKey;
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::metrics::{
    SPRAY_DISTINCT_ACCOUNTS, SPRAY_EPISODES, SPRAY_FINGERPRINTS_OVER, SPRAY_SUSPECTED,
};

/// Bits kept of a password's fingerprint: 65,536 values (docs/spray.md, "The fingerprint").
pub const FINGERPRINT_BITS: u32 = 16;

/// Episodes kept per realm for `Admin/SprayStatus` (the oldest are dropped).
pub const EPISODES_KEPT: usize = 32;

/// `realms.NAME.spray_action`: what a sprayed fingerprint changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SprayAction {
    /// Answer `spray_suspected = true`; compare as usual.
    #[default]
    Flag,
    /// Answer `spray_suspected = true` and reject without comparing.
    Reject,
}

impl SprayAction {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            SprayAction::Flag => "flag",
            SprayAction::Reject => "reject",
        }
    }
}

/// A realm's spray settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SprayPolicy {
    /// Distinct account keys that failed without a match under one fingerprint in the
    /// sliding period, at which the fingerprint counts as sprayed (`spray_threshold`).
    pub threshold: u32,
    /// What a sprayed fingerprint changes (`spray_action`).
    pub action: SprayAction,
    /// Length of one period (`spray_period`); the sliding window spans the current
    /// period and the one before, so between one and two periods.
    pub period: Duration,
}

impl SprayPolicy {
    /// `realms.REALM`'s spray settings, checked where they are used: `spray_threshold`
    /// 10–1,000,000 accounts, `spray_period` 60 s – 7 days. Each problem is noted in
    /// `problems`, naming `realms.REALM.FIELD`.
    pub fn checked(
        realm: &str,
        (threshold, action, period): (u32, SprayAction, Duration),
        problems: &mut Problems,
    ) -> Self {
        let key = |field: &str| format!("realms.{realm}.{field}");
        problems.note(check(&key("spray_threshold"), threshold, 10..=1_000_000));
        let week = Duration::from_secs(7 * 24 * 3600);
        problems.note(check(&key("spray_period"), period, Duration::from_secs(60)..=week));
        Self { threshold, action, period }
    }

    /// Period length in ms, as the stores take it.
    pub fn period_ms(&self) -> u64 {
        u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Derives [`SprayKey`]s: one subkey of the key secret, so every daemon of a fleet
/// derives the same fingerprints and no other key says anything about them.
#[derive(Clone)]
pub struct SprayFingerprints {
    key: [u8; 32],
}

impl std::fmt::Debug for SprayFingerprints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SprayFingerprints(<key redacted>)")
    }
}

impl SprayFingerprints {
    /// Keyed by `secret.subkey(crate::secret::SubKey::Spray)`.
    pub fn new(secret: &KeySecret) -> Self {
        Self { key: secret.subkey(crate::secret::SubKey::Spray) }
    }

    fn mac(&self) -> Hmac<Sha256> {
        keyed_mac(&self.key)
    }

    /// The spray key of `password` in `realm`: `HMAC(key, "password\0" ‖ len(realm) ‖
    /// realm ‖ password)` truncated to [`FINGERPRINT_BITS`], and a keyed tag of the realm
    /// (so a realm's name is not in the store's keys either).
    pub fn key(&self, realm: &str, password: &[u8]) -> SprayKey {
        let mut mac = self.mac();
        mac.update(b"password\0");
        // Realm names are at most 64 bytes.
        update_framed(&mut mac, realm.as_bytes());
        mac.update(password);
        let digest = mac.finalize().into_bytes();
        let fingerprint = u16::from_be_bytes([digest[0], digest[1]]);
        let mut mac = self.mac();
        mac.update(b"realm\0");
        mac.update(realm.as_bytes());
        let realm_tag = hex::encode(&mac.finalize().into_bytes()[..8]);
        SprayKey::new(realm_tag, fingerprint)
    }
}

/// One realm-level spray episode: from the first fingerprint over the threshold to the
/// moment none has been for a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SprayEpisode {
    /// When the first fingerprint passed the threshold.
    pub began: SystemTime,
    /// When the last one fell back (`None`: still going on).
    pub ended: Option<SystemTime>,
    /// Most fingerprints over the threshold at once during the episode.
    pub peak_fingerprints: u32,
}

/// A realm's spray state as this daemon sees it (`Admin/SprayStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SprayStatus {
    /// Fingerprints seen over the threshold within the last period.
    pub fingerprints_over_threshold: u32,
    /// The latest episodes, oldest first, at most [`EPISODES_KEPT`].
    pub episodes: Vec<SprayEpisode>,
}

/// How often a `Verify` answer may walk a realm's fingerprints over the threshold to
/// forget the aged ones ([`SprayWatch::observe`]): the walk is up to 65,536 entries
/// under the watch's lock, so it is not made on every call.
pub const EXPIRY_EVERY: Duration = Duration::from_secs(1);

/// One realm's watch.
#[derive(Default)]
struct RealmWatch {
    /// Fingerprint → when it was last seen over the threshold, and its period. At most
    /// 2^[`FINGERPRINT_BITS`] entries.
    over: HashMap<u16, (Instant, Duration)>,
    episodes: VecDeque<SprayEpisode>,
    /// When `over` was last walked by [`Self::expire`].
    expired_at: Option<Instant>,
}

impl RealmWatch {
    fn open(&self) -> bool {
        self.episodes.back().is_some_and(|e| e.ended.is_none())
    }

    /// Whether `fingerprint` is over the threshold now (seen within its period).
    fn is_over(&self, fingerprint: u16, now: Instant) -> bool {
        self.over
            .get(&fingerprint)
            .is_some_and(|(seen, period)| now.duration_since(*seen) < *period)
    }

    /// Forgets fingerprints not seen over the threshold for their period, and ends the
    /// episode when none is left.
    fn expire(&mut self, realm: &str, now: Instant) {
        self.expired_at = Some(now);
        self.over.retain(|_, (seen, period)| now.duration_since(*seen) < *period);
        ::metrics::gauge!(SPRAY_FINGERPRINTS_OVER, "realm" => realm.to_owned())
            .set(self.over.len() as f64);
        if self.over.is_empty()
            && let Some(episode) = self.episodes.back_mut()
            && episode.ended.is_none()
        {
            let ended = SystemTime::now();
            episode.ended = Some(ended);
            let lasted = ended.duration_since(episode.began).unwrap_or_default();
            tracing::info!(
                realm,
                lasted = %humantime::format_duration(Duration::from_secs(lasted.as_secs())),
                peak_fingerprints = episode.peak_fingerprints,
                "password-spray episode ended: no password fingerprint over spray_threshold \
                 for a spray_period"
            );
            emit(SecurityEvent::new(EventKind::SprayEnded).realm(realm));
        }
    }
}

/// This daemon's view of spraying, per realm: fingerprints over the threshold and
/// episodes. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct SprayWatch {
    realms: Mutex<BTreeMap<String, RealmWatch>>,
}

impl SprayWatch {
    /// An empty watch.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Records the store's answer to one `Verify`'s check, `distinct` accounts for its
    /// fingerprint before the call, and answers whether the fingerprint is sprayed
    /// (`distinct` at or above the threshold), counting the suspected call by action.
    /// Opens an episode (one warning, the episode counter) when it is the realm's first
    /// such fingerprint. Never logs the fingerprint.
    pub fn observe(
        &self,
        realm: &str,
        key: &SprayKey,
        distinct: u64,
        policy: &SprayPolicy,
    ) -> bool {
        ::metrics::histogram!(SPRAY_DISTINCT_ACCOUNTS, "realm" => realm.to_owned())
            .record(distinct as f64);
        let suspected = distinct >= u64::from(policy.threshold);
        if suspected {
            ::metrics::counter!(SPRAY_SUSPECTED, "realm" => realm.to_owned(), "action" => policy.action.as_str())
                .increment(1);
        }
        self.mark(realm, key, suspected, policy);
        suspected
    }

    /// Records the store's answer to a failure note, `distinct` accounts after it: the
    /// failure that takes a fingerprint to the threshold opens the episode at once
    /// (the next call with it is the first answered `spray_suspected`).
    pub fn noted(&self, realm: &str, key: &SprayKey, distinct: u64, policy: &SprayPolicy) {
        self.mark(realm, key, distinct >= u64::from(policy.threshold), policy);
    }

    /// Marks `key` over the threshold (or not) and opens an episode for the realm's
    /// first fingerprint over it.
    fn mark(&self, realm: &str, key: &SprayKey, suspected: bool, policy: &SprayPolicy) {
        let now = Instant::now();
        let mut realms = self.realms.lock().unwrap_or_else(|e| e.into_inner());
        // The realm's name is copied once, the first time it is seen, not on every call.
        if !realms.contains_key(realm) {
            realms.insert(realm.to_owned(), RealmWatch::default());
        }
        let Some(watch) = realms.get_mut(realm) else { return };
        // The walk is made at most every EXPIRY_EVERY, and whenever a fingerprint comes
        // (back) over the threshold, so an episode that ended is ended before another
        // one begins.
        if watch.expired_at.is_none_or(|t| now.duration_since(t) >= EXPIRY_EVERY)
            || (suspected && !watch.is_over(key.fingerprint(), now))
        {
            watch.expire(realm, now);
        }
        if !suspected {
            return;
        }
        watch.over.insert(key.fingerprint(), (now, policy.period));
        let over = u32::try_from(watch.over.len()).unwrap_or(u32::MAX);
        ::metrics::gauge!(SPRAY_FINGERPRINTS_OVER, "realm" => realm.to_owned())
            .set(f64::from(over));
        if watch.open() {
            if let Some(episode) = watch.episodes.back_mut() {
                episode.peak_fingerprints = episode.peak_fingerprints.max(over);
            }
            return;
        }
        if watch.episodes.len() == EPISODES_KEPT {
            watch.episodes.pop_front();
        }
        watch.episodes.push_back(SprayEpisode {
            began: SystemTime::now(),
            ended: None,
            peak_fingerprints: over,
        });
        ::metrics::counter!(SPRAY_EPISODES, "realm" => realm.to_owned()).increment(1);
        tracing::warn!(
            realm,
            threshold = policy.threshold,
            action = policy.action.as_str(),
            "password-spray episode began: one password fingerprint failed on spray_threshold \
             or more distinct accounts within spray_period"
        );
        emit(SecurityEvent::new(EventKind::SprayStarted).realm(realm));
    }

    /// The realm's state now (episodes that ended for lack of traffic are closed first).
    pub fn status(&self, realm: &str) -> SprayStatus {
        let mut realms = self.realms.lock().unwrap_or_else(|e| e.into_inner());
        let Some(watch) = realms.get_mut(realm) else { return SprayStatus::default() };
        watch.expire(realm, Instant::now());
        SprayStatus {
            fingerprints_over_threshold: u32::try_from(watch.over.len()).unwrap_or(u32::MAX),
            episodes: watch.episodes.iter().copied().collect(),
        }
    }

    /// Closes episodes whose fingerprints all aged out, every `interval`, so the gauge
    /// and the end line come without traffic. Runs until the watch is dropped.
    pub fn spawn_expiry(self: &Arc<Self>, interval: Duration) {
        super::spawn_ticks(self, interval, |watch: &Self, now| {
            let mut realms = watch.realms.lock().unwrap_or_else(|e| e.into_inner());
            for (realm, w) in realms.iter_mut() {
                w.expire(realm, now);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threshold 10, flag, a 50 ms period the tests wait out.
    const POLICY: SprayPolicy =
        SprayPolicy { threshold: 10, action: SprayAction::Flag, period: Duration::from_millis(50) };

    fn fingerprints() -> SprayFingerprints {
        SprayFingerprints::new(&KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec()))
    }

    #[test]
    fn many_passwords_share_each_fingerprint() {
        // 2^18 distinct passwords over 2^16 values: each value is shared by about 4 of
        // them (Poisson), and 98% of the values are taken.
        let f = fingerprints();
        let mut seen = vec![0u32; 1 << FINGERPRINT_BITS];
        for i in 0..(1u32 << 18) {
            seen[usize::from(f.key("default", format!("password{i}").as_bytes()).fingerprint())] +=
                1;
        }
        let taken = seen.iter().filter(|&&n| n > 0).count();
        assert!(taken > 63_000, "only {taken} values taken");
        assert!(seen.iter().all(|&n| n < 32), "a value was taken by far too many passwords");
    }

    #[test]
    fn keys_separate_realms_and_show_nothing() {
        let f = fingerprints();
        let a = f.key("default", b"Winter2026!");
        assert_eq!(a, f.key("default", b"Winter2026!"));
        assert_ne!(a.prefix(), f.key("staff", b"Winter2026!").prefix());
        let prefix = a.prefix();
        assert!(prefix.starts_with("portcullis:v2:{spray:") && prefix.ends_with("}:"));
        assert!(!prefix.contains("default") && !prefix.contains("Winter"));
        assert_eq!(format!("{a:?}"), "SprayKey(<redacted>)");
        // One hash tag for every key of the script.
        let tag = &prefix[prefix.find('{').unwrap()..=prefix.find('}').unwrap()];
        assert!(a.redis_keys().iter().all(|k| k.starts_with(&prefix) && k.contains(tag)));
        // Another secret, other fingerprints.
        let other = SprayFingerprints::new(&KeySecret::new(vec![7; 32]));
        assert_ne!(other.key("default", b"Winter2026!").prefix(), prefix);
    }

    #[test]
    fn an_episode_begins_once_and_ends_when_its_fingerprints_age_out() {
        let f = fingerprints();
        let watch = SprayWatch::new();
        let policy = POLICY;
        assert_eq!(watch.status("default"), SprayStatus::default());
        assert!(!watch.observe("default", &f.key("default", b"a"), 9, &policy));
        assert!(watch.status("default").episodes.is_empty());
        assert!(watch.observe("default", &f.key("default", b"a"), 10, &policy));
        assert!(watch.observe("default", &f.key("default", b"a"), 11, &policy));
        let status = watch.status("default");
        assert_eq!(status.fingerprints_over_threshold, 1);
        assert_eq!(status.episodes.len(), 1);
        assert_eq!(status.episodes[0].ended, None);
        std::thread::sleep(Duration::from_millis(80));
        let status = watch.status("default");
        assert_eq!(status.fingerprints_over_threshold, 0);
        assert_eq!(status.episodes.len(), 1);
        assert!(status.episodes[0].ended.is_some());
        assert_eq!(status.episodes[0].peak_fingerprints, 1);
        assert!(watch.status("staff").episodes.is_empty());
    }

    #[test]
    fn answers_below_the_threshold_do_not_walk_the_watch_on_every_call() {
        let f = fingerprints();
        let watch = SprayWatch::new();
        // A period the 1,000 observations below fit in even on a loaded machine (with
        // 50 ms, early ones aged out before the loop ended and the peak outgrew `over`).
        let policy = SprayPolicy { period: Duration::from_millis(300), ..POLICY };
        let count = |watch: &SprayWatch| {
            let realms = watch.realms.lock().unwrap();
            realms.get("default").map_or(0, |w| w.over.len())
        };
        // Many fingerprints over the threshold at once.
        for i in 0..1000 {
            let key = f.key("default", format!("p{i}").as_bytes());
            assert!(watch.observe("default", &key, 10, &policy));
        }
        let over = count(&watch);
        assert!(over > 900, "{over}");
        std::thread::sleep(Duration::from_millis(350));
        // Within EXPIRY_EVERY of the last walk, an answer below the threshold leaves
        // the aged entries for the next walk.
        assert!(!watch.observe("default", &f.key("default", b"calm"), 1, &policy));
        assert_eq!(count(&watch), over);
        // A fingerprint coming over the threshold walks first: the old episode ends,
        // a new one begins.
        assert!(watch.observe("default", &f.key("default", b"new"), 10, &policy));
        assert_eq!(count(&watch), 1);
        let status = watch.status("default");
        assert_eq!(status.episodes.len(), 2);
        assert!(status.episodes[0].ended.is_some() && status.episodes[1].ended.is_none());
        assert_eq!(status.episodes[0].peak_fingerprints, u32::try_from(over).unwrap());
    }
}
