//! One behavioural suite, run against every store backend (embedded and Redis), so the
//! backends cannot drift: the Lua scripts and `src/throttle/` (which the embedded store
//! applies) must give the same answers, the spray counts included. Time is moved per
//! backend: the embedded store's clock is injected; on Redis, whose clock is `TIME`, a
//! record's window start is aged.

use portcullis::store::network_bucket::NetworkRequest;
use portcullis::store::spray_window::SprayNoteRequest;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use portcullis::defence::spray::SprayFingerprints;
use portcullis::normalize::{Normalization, normalize};
use portcullis::secret::KeySecret;
use portcullis::store::Store;
use portcullis::store::embedded::{Clock, EmbeddedStore};
use portcullis::store::keys::{AccountKey, AttemptId, HeldKey, NetworkKey};
use portcullis::store::network_bucket::NetworkOp;
use portcullis::store::redis::RedisStore;
use portcullis::store::spray_window::SprayNote;
use portcullis::throttle::Policy;
use portcullis::throttle::network_bucket::BucketPolicy;
use portcullis_test_support::*;

const MIN: u64 = 60_000;

fn policy(second_factor_required: bool) -> Policy {
    Policy {
        max_failures: 5,
        first_window: Duration::from_secs(15 * 60),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(24 * 3600),
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(15 * 60),
        second_factor_required,
    }
}

fn secret() -> KeySecret {
    KeySecret::new(SECRET.as_bytes().to_vec())
}

fn key(identifier: &str) -> AccountKey {
    AccountKey::new(&secret(), "default", &normalize(Normalization::Email, identifier).unwrap())
}

/// A lifetime (ms) at most `want` and within 2 s of it (the time the test took).
fn near(ttl: Option<u64>, want: u64) -> bool {
    ttl.is_some_and(|t| t <= want && t + 2_000 >= want)
}

fn id(s: &str) -> AttemptId {
    AttemptId::parse(s).unwrap().unwrap()
}

/// What the suite needs from a backend besides the `Store` trait.
#[async_trait]
trait Backend: Send + Sync {
    fn store(&self) -> Arc<dyn Store>;
    /// As if `ms` passed for this key's record.
    async fn advance(&self, key: &AccountKey, ms: u64);
    /// As if the record's retention passed without an attempt.
    async fn expire(&self, key: &AccountKey);
    /// `(failures, step)` of the record.
    async fn record(&self, key: &AccountKey) -> Option<(u64, u32)>;
    /// How long `key` (a store key) lives from now, in ms; `None` without one.
    async fn ttl_ms(&self, key: &str) -> Option<u64>;
    /// Whether [`Backend::advance`] moves the record's stored times back (Redis, whose
    /// clock cannot move) rather than the clock forward.
    fn ages_records(&self) -> bool;
}

struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Embedded {
    store: Arc<EmbeddedStore>,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

impl Embedded {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
        let store = EmbeddedStore::open(dir.path(), Duration::from_secs(5), clock.clone()).unwrap();
        Self { store: Arc::new(store), clock, _dir: dir }
    }
}

#[async_trait]
impl Backend for Embedded {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn advance(&self, _: &AccountKey, ms: u64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }
    async fn expire(&self, _: &AccountKey) {
        self.clock.0.fetch_add(24 * 60 * MIN, Ordering::SeqCst);
    }
    async fn record(&self, key: &AccountKey) -> Option<(u64, u32)> {
        self.store.record(key).await.unwrap().map(|r| (r.failures, r.step))
    }
    async fn ttl_ms(&self, key: &str) -> Option<u64> {
        let at = self.store.expires_at(key).await.unwrap()?;
        // Kept until cleared: no expiry, as Redis's PTTL -1.
        (at != portcullis::throttle::KEPT_UNTIL_CLEARED_MS)
            .then(|| at - self.clock.0.load(Ordering::SeqCst))
    }
    fn ages_records(&self) -> bool {
        false
    }
}

struct Redis {
    server: RedisServer,
    store: Arc<RedisStore>,
}

impl Redis {
    fn new() -> Self {
        let server = RedisServer::start();
        let store = RedisStore::new(&server.url(), Duration::from_secs(5), 8).unwrap();
        Self { server, store: Arc::new(store) }
    }
}

#[async_trait]
impl Backend for Redis {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
    async fn advance(&self, key: &AccountKey, ms: u64) {
        age_record(&mut self.server.conn(), &key.record(), ms);
    }
    async fn expire(&self, key: &AccountKey) {
        let _: () =
            redis::cmd("PEXPIRE").arg(key.record()).arg(1).query(&mut self.server.conn()).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    async fn record(&self, key: &AccountKey) -> Option<(u64, u32)> {
        read_record(&mut self.server.conn(), &key.record()).map(|(f, _, st)| (f, st))
    }
    async fn ttl_ms(&self, key: &str) -> Option<u64> {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut self.server.conn()).unwrap();
        u64::try_from(ttl).ok()
    }
    fn ages_records(&self) -> bool {
        true
    }
}

async fn allowed(b: &dyn Backend, k: &AccountKey, p: &Policy, n: usize) -> Vec<bool> {
    let store = b.store();
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(store.record_attempt(k, None, p).await.unwrap().allowed);
    }
    out
}

const FIVE_THEN_DENY: [bool; 6] = [true, true, true, true, true, false];

async fn lockout_schedule(b: &dyn Backend) {
    let (k, p) = (key("schedule@example.com"), policy(false));
    let store = b.store();
    let first = store.record_attempt(&k, None, &p).await.unwrap();
    assert!(first.allowed && !first.locked_now);
    let mut rest = allowed(b, &k, &p, 5).await;
    rest.insert(0, true);
    assert_eq!(rest, FIVE_THEN_DENY);
    let mut window = 15;
    for (step, next) in [(1, 30), (2, 60), (2, 60)] {
        b.advance(&k, window * MIN - 1000).await;
        assert!(!store.record_attempt(&k, None, &p).await.unwrap().allowed, "{window}-min window");
        b.advance(&k, 1000).await;
        assert_eq!(allowed(b, &k, &p, 6).await, FIVE_THEN_DENY);
        assert_eq!(b.record(&k).await, Some((6, step)));
        window = next;
    }
}

async fn lockout_event_once_per_window(b: &dyn Backend) {
    let (k, p) = (key("event@example.com"), policy(false));
    let store = b.store();
    let mut locked = Vec::new();
    for _ in 0..8 {
        locked.push(store.record_attempt(&k, None, &p).await.unwrap().locked_now);
    }
    assert_eq!(locked, [false, false, false, false, false, true, false, false]);
}

async fn second_factor_never_escalates(b: &dyn Backend) {
    let (k, p) = (key("mfa@example.com"), policy(true));
    for _ in 0..4 {
        assert_eq!(allowed(b, &k, &p, 6).await, FIVE_THEN_DENY);
        assert_eq!(b.record(&k).await.unwrap().1, 0);
        b.advance(&k, 15 * MIN).await;
    }
}

async fn retention_forgets(b: &dyn Backend) {
    let (k, p) = (key("quiet@example.com"), policy(false));
    allowed(b, &k, &p, 6).await;
    b.advance(&k, 15 * MIN).await;
    allowed(b, &k, &p, 6).await;
    assert_eq!(b.record(&k).await, Some((6, 1)));
    b.expire(&k).await;
    assert_eq!(b.record(&k).await, None);
    assert_eq!(allowed(b, &k, &p, 6).await, FIVE_THEN_DENY);
    assert_eq!(b.record(&k).await, Some((6, 0)));
}

async fn admit_reads_only(b: &dyn Backend) {
    let (k, p) = (key("admit@example.com"), policy(false));
    let store = b.store();
    assert!(store.is_open(&k, &p).await.unwrap());
    assert_eq!(b.record(&k).await, None);
    allowed(b, &k, &p, 4).await;
    for _ in 0..10 {
        assert!(store.is_open(&k, &p).await.unwrap());
    }
    assert_eq!(b.record(&k).await, Some((4, 0)));
    allowed(b, &k, &p, 1).await;
    assert!(!store.is_open(&k, &p).await.unwrap());
    b.advance(&k, 15 * MIN).await;
    assert!(store.is_open(&k, &p).await.unwrap());
    assert_eq!(b.record(&k).await, Some((5, 0)));
}

/// `Inspect` reads the record and the store's clock, writes nothing, and its answer
/// (door, failures, step, time to reopen) follows the throttle rules.
async fn inspect_reads_only(b: &dyn Backend) {
    let (k, p) = (key("inspect@example.com"), policy(false));
    let store = b.store();
    let seen = store.inspect(&k, &p).await.unwrap();
    assert_eq!(seen.record, None);
    assert!(seen.now_ms > 1_600_000_000_000, "the store's clock, in ms");
    assert_eq!(b.record(&k).await, None, "inspect wrote a record");
    allowed(b, &k, &p, 6).await;
    let seen = store.inspect(&k, &p).await.unwrap();
    let record = seen.record.unwrap();
    assert_eq!((record.failures, record.step), (6, 0));
    let answer = portcullis::rpc::admin::inspection(&p, &seen);
    assert_eq!(answer.door, portcullis::pb::DoorState::Closed as i32);
    assert_eq!(answer.failures, 6);
    assert!((899..=900).contains(&answer.seconds_until_open), "{answer:?}");
    for _ in 0..5 {
        store.inspect(&k, &p).await.unwrap();
    }
    assert_eq!(b.record(&k).await, Some((6, 0)), "inspect changed the record");
    b.advance(&k, 10 * MIN).await;
    let answer = portcullis::rpc::admin::inspection(&p, &store.inspect(&k, &p).await.unwrap());
    assert!((299..=300).contains(&answer.seconds_until_open), "{answer:?}");
    b.advance(&k, 5 * MIN).await;
    let answer = portcullis::rpc::admin::inspection(&p, &store.inspect(&k, &p).await.unwrap());
    assert_eq!((answer.door, answer.failures, answer.seconds_until_open), (1, 0, 0));
}

async fn attempt_ids_deduplicate(b: &dyn Backend) {
    let (k, p) = (key("dedup@example.com"), policy(false));
    let store = b.store();
    let first =
        store.record_attempt(&k, Some(&k.attempt(&secret(), &id("one"))), &p).await.unwrap();
    assert_eq!(first.replays, 0);
    for n in 1..=3 {
        let again =
            store.record_attempt(&k, Some(&k.attempt(&secret(), &id("one"))), &p).await.unwrap();
        assert_eq!(
            (again.allowed, again.window_start_ms, again.replays),
            (true, first.window_start_ms, n)
        );
    }
    assert_eq!(b.record(&k).await, Some((1, 0)));
    allowed(b, &k, &p, 5).await;
    assert!(
        store
            .record_attempt(&k, Some(&k.attempt(&secret(), &id("one"))), &p)
            .await
            .unwrap()
            .allowed,
        "first answer kept"
    );
    assert_eq!(b.record(&k).await, Some((6, 0)));
}

async fn refunds(b: &dyn Backend) {
    let (k, p) = (key("refund@example.com"), policy(false));
    let store = b.store();
    allowed(b, &k, &p, 2).await;
    let c = store.record_attempt(&k, Some(&k.attempt(&secret(), &id("r1"))), &p).await.unwrap();
    assert_eq!(b.record(&k).await, Some((3, 0)));
    store
        .refund(&k, Some(&k.attempt(&secret(), &id("r1"))), (c.window_start_ms, true), None)
        .await
        .unwrap();
    assert_eq!(b.record(&k).await, Some((2, 0)));
    // The id was forgotten: the retry counts afresh.
    assert_eq!(
        store.record_attempt(&k, Some(&k.attempt(&secret(), &id("r1"))), &p).await.unwrap().replays,
        0
    );
    assert_eq!(b.record(&k).await, Some((3, 0)));
    // A refund for a window that has moved on changes nothing.
    b.advance(&k, 15 * MIN).await;
    allowed(b, &k, &p, 1).await;
    store.refund(&k, None, (c.window_start_ms, true), None).await.unwrap();
    assert_eq!(b.record(&k).await, Some((1, 0)));
    // No record: nothing to refund, nothing created.
    let other = key("none@example.com");
    store.refund(&other, None, (c.window_start_ms, true), None).await.unwrap();
    assert_eq!(b.record(&other).await, None);
}

async fn clear_forgets(b: &dyn Backend) {
    let (k, p) = (key("clear@example.com"), policy(false));
    let store = b.store();
    allowed(b, &k, &p, 7).await;
    store.clear(&k).await.unwrap();
    assert_eq!(b.record(&k).await, None);
    assert_eq!(allowed(b, &k, &p, 6).await, FIVE_THEN_DENY);
    store.clear(&key("never-seen@example.com")).await.unwrap();
}

async fn concurrent_attempts_count_once_each(b: &dyn Backend) {
    let (k, p) = (key("race@example.com"), policy(false));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (store, k) = (b.store(), k.clone());
        calls.spawn(async move { store.record_attempt(&k, None, &p).await.unwrap().allowed });
    }
    let allowed = calls.join_all().await.into_iter().filter(|a| *a).count();
    assert_eq!(allowed, 5);
    assert_eq!(b.record(&k).await, Some((50, 0)));
}

/// Spray counts (docs/spray.md): distinct failed accounts per fingerprint, a check that
/// writes nothing, fingerprints apart, concurrent notes each counted once. (Period
/// boundaries are tested per backend in tests/integration/spray.rs: the clocks move differently.)
async fn spray_counts_distinct_failed_accounts(b: &dyn Backend) {
    let store = b.store();
    let fingerprints = SprayFingerprints::new(&secret());
    let sprayed = fingerprints.key("default", b"Winter2026!");
    let other = fingerprints.key("default", b"another password");
    const PERIOD: u64 = 60 * MIN;
    let note = |who: &str, fingerprint: &portcullis::store::keys::SprayKey, n: SprayNote| {
        let (store, who, fingerprint) = (store.clone(), key(who), fingerprint.clone());
        async move {
            store
                .note_spray(&SprayNoteRequest {
                    spray: &fingerprint,
                    account: &who,
                    note: n,
                    period_ms: PERIOD,
                    limit: 100,
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(note("a@example.com", &sprayed, SprayNote::Check).await, 0);
    assert_eq!(note("a@example.com", &sprayed, SprayNote::Failure).await, 1);
    assert_eq!(note("b@example.com", &sprayed, SprayNote::Failure).await, 2);
    assert_eq!(note("a@example.com", &sprayed, SprayNote::Failure).await, 2, "a again");
    assert_eq!(note("c@example.com", &sprayed, SprayNote::Check).await, 2);
    assert_eq!(note("c@example.com", &sprayed, SprayNote::Failure).await, 3, "c was not noted");
    assert_eq!(note("a@example.com", &other, SprayNote::Check).await, 0, "fingerprints apart");
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..12 {
        calls.spawn(note(&format!("many{i}@example.com"), &sprayed, SprayNote::Failure));
    }
    calls.join_all().await;
    assert_eq!(note("z@example.com", &sprayed, SprayNote::Check).await, 15);
    // A spray note touches no account record.
    assert_eq!(b.record(&key("a@example.com")).await, None);
}

/// How long a record lives follows what it holds (docs/throttle.md, "How long a record
/// lives"): holding consecutive failures, for the retention after its last attempt (the
/// ceiling counts across windows), in a realm with a second factor too; at its ceiling,
/// until it is cleared (no expiry); an attempt id's answer for the retry horizon (5 min
/// by default).
async fn lifetime_follows_content(b: &dyn Backend) {
    let store = b.store();
    let (p, mfa) = (policy(false), policy(true));
    let k = key("one-failure@example.com");
    store.record_attempt(&k, Some(&k.attempt(&secret(), &id("a1"))), &p).await.unwrap();
    assert!(near(b.ttl_ms(&k.record()).await, 24 * 60 * MIN), "{:?}", b.ttl_ms(&k.record()).await);
    let answer = k.attempt(&secret(), &id("a1"));
    assert!(
        near(b.ttl_ms(answer.as_str()).await, 5 * MIN),
        "{:?}",
        b.ttl_ms(answer.as_str()).await
    );
    // Ten minutes later, a second failure: the retention from this attempt.
    b.advance(&k, 10 * MIN).await;
    store.record_attempt(&k, None, &p).await.unwrap();
    assert!(near(b.ttl_ms(&k.record()).await, 24 * 60 * MIN));
    // At step 1, kept: the step must be remembered.
    for _ in 0..3 {
        store.record_attempt(&k, None, &p).await.unwrap();
    }
    b.advance(&k, 15 * MIN).await;
    store.record_attempt(&k, None, &p).await.unwrap();
    assert_eq!(b.record(&k).await, Some((1, 1)));
    assert!(near(b.ttl_ms(&k.record()).await, 24 * 60 * MIN));
    // A realm with a second factor never escalates, and keeps the count all the same.
    let m = key("mfa@example.com");
    for _ in 0..6 {
        store.record_attempt(&m, None, &mfa).await.unwrap();
    }
    assert_eq!(b.record(&m).await, Some((6, 0)));
    assert!(near(b.ttl_ms(&m.record()).await, 24 * 60 * MIN), "{:?}", b.ttl_ms(&m.record()).await);
    // At its ceiling (7 here): no expiry, refused in every later window until cleared.
    let low = Policy { max_consecutive_failures: 7, ..p };
    let c = key("ceiling@example.com");
    let mut allowed = 0;
    for window in 0..3 {
        for _ in 0..5 {
            allowed += usize::from(store.record_attempt(&c, None, &low).await.unwrap().allowed);
        }
        if window < 2 {
            b.advance(&c, 60 * MIN).await;
        }
    }
    assert_eq!(allowed, 7);
    assert_eq!(b.ttl_ms(&c.record()).await, None, "a record at its ceiling expires");
    b.advance(&c, 60 * MIN).await;
    assert!(!store.is_open(&c, &low).await.unwrap());
    assert!(!store.record_attempt(&c, None, &low).await.unwrap().allowed);
    store.clear(&c).await.unwrap();
    assert!(store.record_attempt(&c, None, &low).await.unwrap().allowed, "cleared");
}

/// The network bucket (`network_bucket.lua`, `throttle::network_bucket`): a fresh bucket is full,
/// takes count down and stop at empty without writing, a token given back is there
/// again, a peek changes nothing, a release fills it, and each key lives until its
/// bucket is full again.
async fn network_buckets(b: &dyn Backend) {
    let store = b.store();
    // An hour a token: no refill during the test on Redis's real clock.
    let p = BucketPolicy { capacity: 3, interval_ms: 3_600_000 };
    let n = NetworkKey::new(&secret(), "default", "ip:203.0.113.7/32");
    let other = NetworkKey::new(&secret(), "default", "ip:203.0.113.8/32");
    let op = |key: &NetworkKey, op: NetworkOp| {
        let store = store.clone();
        let key = key.clone();
        async move {
            store
                .network(&NetworkRequest { key: &key, op, policy: &p, held: None, candidate: None })
                .await
                .unwrap()
        }
    };
    let peek = op(&n, NetworkOp::Peek).await;
    assert_eq!((peek.taken, peek.tokens, peek.full_in_ms), (false, 3, 0));
    assert_eq!(b.ttl_ms(&n.as_key()).await, None, "a peek wrote");
    for left in [2, 1, 0] {
        let took = op(&n, NetworkOp::Take).await;
        assert!(took.taken);
        assert_eq!(took.tokens, left);
    }
    let full_in = op(&n, NetworkOp::Peek).await.full_in_ms;
    assert!(near(Some(full_in), 3 * 3_600_000), "{full_in}");
    assert!(near(b.ttl_ms(&n.as_key()).await, 3 * 3_600_000), "the key outlives its debt");
    let refused = op(&n, NetworkOp::Take).await;
    assert!(!refused.taken);
    assert_eq!(refused.tokens, 0);
    assert!(near(Some(op(&n, NetworkOp::Peek).await.full_in_ms), 3 * 3_600_000));
    // Another network is untouched.
    assert_eq!(op(&other, NetworkOp::Peek).await.tokens, 3);
    let back = op(&n, NetworkOp::GiveBack).await;
    assert_eq!((back.taken, back.tokens), (false, 1));
    assert!(op(&n, NetworkOp::Take).await.taken);
    let released = op(&n, NetworkOp::Release).await;
    assert_eq!((released.tokens, released.full_in_ms), (3, 0));
    assert_eq!(b.ttl_ms(&n.as_key()).await, None, "a full bucket keeps a key");
    // Giving back to a full bucket leaves it full.
    assert_eq!(op(&other, NetworkOp::GiveBack).await.tokens, 3);
}

/// Concurrent takes never spend more than the bucket holds.
async fn concurrent_takes_stop_at_capacity(b: &dyn Backend) {
    let store = b.store();
    let p = BucketPolicy { capacity: 10, interval_ms: 3_600_000 };
    let n = NetworkKey::new(&secret(), "default", "key:concurrent");
    let takes = (0..50).map(|_| {
        let (store, n) = (store.clone(), n.clone());
        tokio::spawn(async move {
            store
                .network(&NetworkRequest {
                    key: &n,
                    op: NetworkOp::Take,
                    policy: &p,
                    held: None,
                    candidate: None,
                })
                .await
                .unwrap()
                .taken
        })
    });
    let mut taken = 0;
    for t in takes {
        taken += usize::from(t.await.unwrap());
    }
    assert_eq!(taken, 10);
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&Embedded::new()).await;
                }
            )*
        }
        mod redis_backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&Redis::new()).await;
                }
            )*
        }
    };
}

conformance!(
    lockout_schedule,
    lockout_event_once_per_window,
    second_factor_never_escalates,
    retention_forgets,
    lockout_lasts_lockout_duration,
    the_ceiling_holds_across_windows,
    confirm_device_once,
    a_stale_password_never_reaches_the_ceiling,
    admit_reads_only,
    inspect_reads_only,
    attempt_ids_deduplicate,
    refunds,
    clear_forgets,
    concurrent_attempts_count_once_each,
    spray_counts_distinct_failed_accounts,
    lifetime_follows_content,
    network_buckets,
    concurrent_takes_stop_at_capacity,
    repeat_lists,
    repeat_lists_follow_the_twin,
    concurrent_new_fingerprints_allow_max_failures,
    why_a_door_shut_from_three_networks,
    the_network_set_restarts_with_the_window,
    the_ceiling_shows_as_the_cause,
    the_device_index_is_bounded,
    a_candidate_bucket_counts_beside_the_network,
    a_looser_candidate_takes_what_the_network_refuses,
    an_attempts_own_give_back_leaves_the_others_part,
    a_give_without_its_keys_is_refused,
    a_refund_gives_the_attempt_back_on_the_candidate_record,
);

mod candidate;
mod candidate_flows;
mod ceiling;
mod corrupt;
mod network_candidate;
mod realm_tally;
mod repeats;
mod send_log;
mod why_shut;
use candidate::a_refund_gives_the_attempt_back_on_the_candidate_record;
use ceiling::{
    a_stale_password_never_reaches_the_ceiling, confirm_device_once,
    lockout_lasts_lockout_duration, the_ceiling_holds_across_windows,
};
use network_candidate::{
    a_candidate_bucket_counts_beside_the_network, a_give_without_its_keys_is_refused,
    a_looser_candidate_takes_what_the_network_refuses,
    an_attempts_own_give_back_leaves_the_others_part,
};
use repeats::{
    concurrent_new_fingerprints_allow_max_failures, repeat_lists, repeat_lists_follow_the_twin,
};
use why_shut::{
    the_ceiling_shows_as_the_cause, the_device_index_is_bounded,
    the_network_set_restarts_with_the_window, why_a_door_shut_from_three_networks,
};
