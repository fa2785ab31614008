//! The spray count's sliding window (docs/spray.md, "The sliding period"): `spray_window.lua`
//! called straight on Redis and the embedded store on a manual clock count this period and
//! the last, forget what an older period held, never mix two fingerprints' keys, and
//! refuse arguments a daemon never sends.

use portcullis::store::spray_window::SprayNoteRequest;
use std::sync::Arc;

use portcullis::secret::KeySecret;
use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::embedded::EmbeddedStore;
use portcullis::store::keys::{AccountKey, SprayKey};
use portcullis::store::spray_window::SprayNote;
use portcullis::store::spray_window::SprayWindowStore;
use portcullis::throttle::Policy;
use portcullis_test_support::*;

const SPRAYED: &[u8] = b"Winter2026!";

/// `spray_window.lua` called directly, as the store calls it, on a fingerprint's three keys.
struct SprayScript {
    script: redis::Script,
    keys: Vec<String>,
}

impl SprayScript {
    fn new(fingerprint: &str) -> Self {
        let p = format!("portcullis:v2:{{spray:0123456789abcdef:{fingerprint}}}:");
        Self {
            script: redis::Script::new(include_str!("../../src/store/lua/spray_window.lua")),
            keys: ["failed:0", "failed:1", "periods"].iter().map(|k| format!("{p}{k}")).collect(),
        }
    }

    fn note(&self, conn: &mut redis::Connection, note: &str, member: &str, period_ms: u64) -> i64 {
        let mut call = self.script.prepare_invoke();
        for key in &self.keys {
            call.key(key);
        }
        call.arg(note).arg(member).arg(period_ms).invoke(conn).unwrap()
    }
}

/// Redis `TIME` in ms.
fn redis_now_ms(conn: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    s * 1000 + us / 1000
}

/// Sleeps until Redis's clock is just past the start of the next `period_ms` period;
/// returns that period's number.
fn next_period(conn: &mut redis::Connection, period_ms: u64) -> u64 {
    let now = redis_now_ms(conn);
    let next = now / period_ms + 1;
    std::thread::sleep(std::time::Duration::from_millis(next * period_ms - now + 20));
    assert_eq!(redis_now_ms(conn) / period_ms, next, "slept past the next period");
    next
}

#[test]
fn the_spray_script_counts_this_period_and_the_last_and_empties_a_stale_parity() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let s = SprayScript::new("0001");
    const PERIOD: u64 = 1000;
    next_period(&mut conn, PERIOD);
    assert_eq!(s.note(&mut conn, "failure", "a", PERIOD), 1);
    assert_eq!(s.note(&mut conn, "failure", "b", PERIOD), 2);
    assert_eq!(s.note(&mut conn, "failure", "a", PERIOD), 2, "one account counts once");
    // The next period counts the previous one too.
    next_period(&mut conn, PERIOD);
    assert_eq!(s.note(&mut conn, "failure", "c", PERIOD), 3);
    assert_eq!(s.note(&mut conn, "failure", "a", PERIOD), 3, "a is in both periods, once");
    assert_eq!(s.note(&mut conn, "failure", "d", PERIOD), 4, "{{a, b, c, d}}");
    // A check reads the same count and writes nothing.
    assert_eq!(s.note(&mut conn, "check", "z", PERIOD), 4);
    assert_eq!(s.note(&mut conn, "failure", "z", PERIOD), 5, "the check did not note z");
    // Two periods on, the first is forgotten: its parity is emptied, not counted.
    next_period(&mut conn, PERIOD);
    assert_eq!(s.note(&mut conn, "check", "-", PERIOD), 4, "{{a, c, d, z}}");
    assert_eq!(s.note(&mut conn, "failure", "e", PERIOD), 5, "{{a, c, d, z, e}}");
    next_period(&mut conn, PERIOD);
    assert_eq!(s.note(&mut conn, "failure", "f", PERIOD), 2, "only {{e, f}}");
    // A period with no note at all: both parities are stale.
    next_period(&mut conn, PERIOD);
    next_period(&mut conn, PERIOD);
    assert_eq!(s.note(&mut conn, "failure", "g", PERIOD), 1);
    // Every key expires (two periods after its last note).
    for key in &s.keys {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
        assert!(ttl == -2 || (0..=2 * PERIOD as i64).contains(&ttl), "{key}: {ttl}");
    }
}

#[test]
fn the_spray_script_ignores_what_a_parity_held_in_another_period() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // A long period, so the test stays in one; what the parities held is written here.
    const PERIOD: u64 = 1_000_000_000;
    let p = redis_now_ms(&mut conn) / PERIOD;
    let (cur, prev) = (p % 2, 1 - p % 2);
    let fill = |conn: &mut redis::Connection, s: &SprayScript, key: usize, n: usize| {
        let members: Vec<String> = (0..n).map(|i| format!("old{key}-{i}")).collect();
        let _: i64 = redis::cmd("PFADD").arg(&s.keys[key]).arg(&members).query(conn).unwrap();
    };
    let held = |conn: &mut redis::Connection, s: &SprayScript, parity: u64, period: u64| {
        let _: i64 =
            redis::cmd("HSET").arg(&s.keys[2]).arg(parity).arg(period).query(conn).unwrap();
    };
    // The current parity holds p - 2: not counted by a check, emptied by a failure.
    let s = SprayScript::new("0002");
    fill(&mut conn, &s, cur as usize, 50);
    held(&mut conn, &s, cur, p - 2);
    assert_eq!(s.note(&mut conn, "check", "-", PERIOD), 0);
    assert_eq!(s.note(&mut conn, "failure", "x", PERIOD), 1);
    assert_eq!(s.note(&mut conn, "failure", "y", PERIOD), 2);
    // The other parity holds p - 1: counted, by a check too.
    let s = SprayScript::new("0003");
    fill(&mut conn, &s, prev as usize, 50);
    held(&mut conn, &s, prev, p - 1);
    assert_eq!(s.note(&mut conn, "check", "-", PERIOD), 50);
    assert_eq!(s.note(&mut conn, "failure", "x", PERIOD), 51);
    // The other parity holds p - 3 (no note for a while): not counted, not emptied by a
    // count (it is emptied by the first note of its own next period).
    let s = SprayScript::new("0004");
    fill(&mut conn, &s, prev as usize, 50);
    held(&mut conn, &s, prev, p - 3);
    assert_eq!(s.note(&mut conn, "failure", "x", PERIOD), 1);
    // The other parity claims a future period (a clock that went back on failover):
    // not counted either.
    let s = SprayScript::new("0005");
    fill(&mut conn, &s, prev as usize, 50);
    held(&mut conn, &s, prev, p + 1);
    assert_eq!(s.note(&mut conn, "failure", "x", PERIOD), 1);
}

#[test]
fn the_spray_script_refuses_bad_arguments() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let s = SprayScript::new("0007");
    for (note, member, period) in [
        ("fail", "a", "1000"),
        ("match", "a", "1000"),
        ("failure", "", "1000"),
        ("failure", "a", "999"),
        ("failure", "a", "x"),
    ] {
        let mut call = s.script.prepare_invoke();
        for key in &s.keys {
            call.key(key);
        }
        let r: redis::RedisResult<i64> = call.arg(note).arg(member).arg(period).invoke(&mut conn);
        assert!(r.is_err(), "{note} {member:?} {period}: {r:?}");
    }
    assert_eq!(dbsize(&mut conn), 0, "a refused call wrote");
}

struct ManualClock(std::sync::atomic::AtomicU64);

impl portcullis::store::embedded::Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An embedded store on a clock the test moves.
fn embedded_on_manual_clock() -> (EmbeddedStore, Arc<ManualClock>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    // 1_800_000_000_000 is a whole number of minutes: the start of a period.
    let clock = Arc::new(ManualClock(std::sync::atomic::AtomicU64::new(1_800_000_000_000)));
    let store =
        EmbeddedStore::open(dir.path(), std::time::Duration::from_secs(5), clock.clone()).unwrap();
    (store, clock, dir)
}

fn account_key(realm: &str, identifier: &str) -> AccountKey {
    let identifier =
        portcullis::normalize::normalize(portcullis::normalize::Normalization::Email, identifier)
            .unwrap();
    AccountKey::new(&KeySecret::new(SECRET.as_bytes().to_vec()), realm, &identifier)
}

#[tokio::test]
async fn the_embedded_spray_count_slides_over_two_periods_and_never_mixes_keys() {
    use portcullis::defence::spray::SprayFingerprints;
    let (store, clock, _dir) = embedded_on_manual_clock();
    let advance = |ms: u64| clock.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    const PERIOD: u64 = 60_000;
    let f = SprayFingerprints::new(&KeySecret::new(SECRET.as_bytes().to_vec()));
    let spray = f.key("sprayed", SPRAYED);
    let note = |spray: &SprayKey, who: &str, n: SprayNote, limit: u32| {
        let (store, spray, who) = (&store, spray.clone(), account_key("sprayed", who));
        async move {
            store
                .note_spray(&SprayNoteRequest {
                    spray: &spray,
                    account: &who,
                    note: n,
                    period_ms: PERIOD,
                    limit,
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(note(&spray, "a", SprayNote::Failure, 100).await, 1);
    assert_eq!(note(&spray, "b", SprayNote::Failure, 100).await, 2);
    assert_eq!(note(&spray, "a", SprayNote::Failure, 100).await, 2);
    // The last millisecond of the period, then the first of the next.
    advance(PERIOD - 1);
    assert_eq!(note(&spray, "c", SprayNote::Failure, 100).await, 3);
    advance(1);
    assert_eq!(note(&spray, "d", SprayNote::Failure, 100).await, 4);
    assert_eq!(note(&spray, "b", SprayNote::Failure, 100).await, 4, "b is in both, once");
    // A check reads the same count and writes nothing.
    assert_eq!(note(&spray, "z", SprayNote::Check, 100).await, 4);
    assert_eq!(note(&spray, "e", SprayNote::Failure, 100).await, 5, "the check did not note z");
    // Two periods after the first: a and c (noted in it only) are forgotten.
    advance(PERIOD);
    assert_eq!(note(&spray, "z", SprayNote::Check, 100).await, 3, "{{b, d, e}}");
    assert_eq!(note(&spray, "f", SprayNote::Failure, 100).await, 4, "{{b, d, e, f}}");
    // Nothing of another fingerprint, another realm, or the accounts' own records and
    // attempt ids, is counted.
    let other_password = f.key("sprayed", b"another password");
    assert_ne!(other_password.prefix(), spray.prefix());
    assert_eq!(note(&other_password, "d", SprayNote::Failure, 100).await, 1);
    let other_realm = f.key("tight", SPRAYED);
    assert_eq!(note(&other_realm, "d", SprayNote::Failure, 100).await, 1);
    let policy = Policy {
        max_failures: 5,
        first_window: std::time::Duration::from_secs(900),
        max_window: std::time::Duration::from_secs(3600),
        retention: std::time::Duration::from_secs(86400),
        max_consecutive_failures: 100,
        lockout_duration: std::time::Duration::from_secs(900),
        second_factor_required: false,
    };
    for who in ["a", "b", "d"] {
        let key = account_key("sprayed", who);
        let id = portcullis::store::keys::AttemptId::parse("attempt-1").unwrap().unwrap();
        let answer = key.attempt(&KeySecret::new(SECRET.as_bytes().to_vec()), &id);
        store.record_attempt(&key, Some(&answer), &policy).await.unwrap();
    }
    assert_eq!(note(&spray, "g", SprayNote::Failure, 100).await, 5, "{{b, d, e, f, g}}");
    // The count is kept, not read off the members up to the limit: exact past it.
    for i in 0..20 {
        note(&spray, &format!("many{i}"), SprayNote::Failure, 100).await;
    }
    assert_eq!(note(&spray, "h", SprayNote::Failure, 10).await, 26);
    assert_eq!(note(&spray, "h", SprayNote::Failure, 100).await, 26);
    // Two idle periods: everything has expired.
    advance(2 * PERIOD);
    assert_eq!(note(&spray, "i", SprayNote::Failure, 100).await, 1);
}

/// The rules of `portcullis::throttle::spray_window` (the embedded store's), applied by
/// hand: per account the last period noted, per fingerprint `[current, previous]` of
/// (set size, growth of the union with the period before).
#[derive(Default)]
struct PureSpray {
    last: std::collections::HashMap<String, u64>,
    held: Option<(u64, [(u64, u64); 2])>,
}

impl PureSpray {
    fn note(&mut self, note: &str, member: &str, now_ms: u64, period_ms: u64) -> u64 {
        use portcullis::throttle::spray_window::{joins, period, roll};
        let now = period(now_ms, period_ms);
        let mut counts = roll(self.held, now);
        let union = |c: [(u64, u64); 2]| c[1].0 + c[0].1;
        if note == "check" {
            return union(counts);
        }
        let (joins_period, joins_union) = joins(self.last.get(member).copied().unwrap_or(0), now);
        counts[0].0 += u64::from(joins_period);
        counts[0].1 += u64::from(joins_union);
        self.last.insert(member.to_owned(), now);
        self.held = Some((now, counts));
        union(counts)
    }
}

/// `spray_window.lua` and its pure twin (`throttle::spray_window`) give the same count at every
/// step of a run over periods, gaps included.
#[test]
fn the_spray_script_and_its_pure_twin_count_alike() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let s = SprayScript::new("0003");
    let mut pure = PureSpray::default();
    const PERIOD: u64 = 1000;
    let steps: [&[(&str, &str)]; 5] = [
        &[("failure", "a"), ("failure", "b"), ("failure", "a"), ("check", "-")],
        &[("failure", "c"), ("failure", "a"), ("check", "z"), ("failure", "d")],
        &[("check", "-"), ("failure", "e")],
        &[],
        &[("failure", "f"), ("failure", "e")],
    ];
    for notes in steps {
        next_period(&mut conn, PERIOD);
        for (note, member) in notes {
            let now = redis_now_ms(&mut conn);
            let script = s.note(&mut conn, note, member, PERIOD);
            let twin = pure.note(note, member, now, PERIOD) as i64;
            assert_eq!(script, twin, "{note} {member} at {now}");
        }
    }
}
