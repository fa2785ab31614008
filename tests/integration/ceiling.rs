//! The ceiling on consecutive failures through the daemon (docs/throttle.md, "The
//! ceiling"; NIST SP 800-63B-4 §3.2.2): once the account's record holds
//! `max_consecutive_failures`, every caller without a device token of the account is
//! refused, in every later window, with the same answer an unknown account gets; a known
//! device keeps its own lane with its own ceiling; a success, a completed reset or an
//! operator's unlock, and nothing else, opens it again. On both stores.

use portcullis::normalize::Normalization;
use portcullis::pb::{ClearReason, Decision, UnlockReason, UnlockRequest, Verdict, VerifyResponse};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use prost::Message;

/// A realm whose ceiling is 4, so a test reaches it in a few calls; bcrypt cost 4.
const TIGHT: &str = "[realms.tight]\nmax_consecutive_failures = 4\n\
                     hash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n";
const PASSWORD: &[u8] = b"correct horse battery staple";

fn stored_hash() -> String {
    StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

/// The answer without the signals the account's count sets alike for every identifier
/// (the step-up, and the gateway-only notice of the attempt that shut the door), as
/// bytes.
fn answer(r: &VerifyResponse) -> Vec<u8> {
    VerifyResponse { step_up: false, lockout_started: false, ceiling_reached: false, ..r.clone() }
        .encode_to_vec()
}

async fn the_ceiling_shuts_every_caller_without_a_device_token(daemon: &Daemon, age: impl Fn(u64)) {
    let mut c = daemon.client().await;
    let hash = stored_hash();
    let victim = "ceiling-victim@example.com";
    let reject = portcullis::rpc::reject(Default::default()).encode_to_vec();

    // The owner logs in once from the laptop: a device token.
    let first = c.verify_with_device("tight", victim, PASSWORD, &hash, "home", "").await.unwrap();
    assert_eq!(first.verdict(), Verdict::Accept);
    let token = first.device_token;

    // Four wrong passwords from four networks, across two windows: the ceiling.
    for n in 0..4 {
        let r = c.verify("tight", victim, b"guess", &hash, &format!("10.9.9.{n}")).await.unwrap();
        assert_eq!(answer(&r), reject, "guess {n}");
        assert_eq!(r.ceiling_reached, n == 3, "guess {n}: the fourth reaches the ceiling");
        if n == 1 {
            age(16 * 60_000);
        }
    }
    // From now on every caller without the device token is refused, the right password
    // too, in this window and in every later one, with the unknown account's answer.
    for round in 0..3 {
        let right = c.verify("tight", victim, PASSWORD, &hash, "hotel").await.unwrap();
        assert_eq!(
            answer(&right),
            reject,
            "round {round}: the right password got past the ceiling"
        );
        assert_eq!(c.admit("tight", victim).await.unwrap(), Decision::Deny);
        assert_eq!(c.attempt("tight", victim).await.unwrap(), Decision::Deny);
        age(2 * 3_600_000);
    }
    // A RecordAttempt at the ceiling, early in a fresh window (on Redis: the rounds aged
    // the record), answers as any closed door, step-up signal included, as one whose
    // window is used up does.
    let raw = |who: &str| portcullis::pb::RecordAttemptRequest {
        account: account("tight", who),
        attempt_id: String::new(),
        client_key: String::new(),
    };
    let exhausted = "ceiling-exhausted@example.com";
    // Five allowed, then the first refusal (which alone tells the gateway it started the
    // lockout); the next refusal is the closed door's plain answer.
    for n in 0..6 {
        let r = c.0.record_attempt(raw(exhausted)).await.unwrap().into_inner();
        assert_eq!(r.lockout_started, n == 5);
    }
    let closed = c.0.record_attempt(raw(exhausted)).await.unwrap().into_inner();
    let at_ceiling = c.0.record_attempt(raw(victim)).await.unwrap().into_inner();
    assert_eq!(at_ceiling, closed, "the ceiling's deny tells itself apart");
    // An unknown identifier with the same history answers alike.
    let ghost = "ceiling-ghost@example.com";
    for n in 0..4 {
        c.verify("tight", ghost, b"guess", &hash, &format!("10.8.8.{n}")).await.unwrap();
    }
    let unknown = c.verify("tight", ghost, PASSWORD, &hash, "hotel").await.unwrap();
    assert_eq!(answer(&unknown), reject);

    // The owner's laptop keeps its own lane.
    let known = c.verify_with_device("tight", victim, PASSWORD, &hash, "home", &token).await;
    let known = known.unwrap();
    assert_eq!(known.verdict(), Verdict::Accept, "a known device was shut out by the ceiling");
    let token = known.device_token;
    // ... with its own ceiling: four wrong passwords on the laptop (four different ones:
    // a repeat is not counted again) shut its lane too.
    for n in 0..4 {
        let typo = format!("typo {n}");
        let r = c.verify_with_device("tight", victim, typo.as_bytes(), &hash, "home", &token).await;
        assert_eq!(answer(&r.unwrap()), reject);
    }
    let shut = c.verify_with_device("tight", victim, PASSWORD, &hash, "home", &token).await;
    assert_eq!(answer(&shut.unwrap()), reject, "a device lane has no ceiling");

    // The operator sees it, and an Unlock opens the account's record again.
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    let seen = ops.inspect("tight", victim).await.unwrap();
    assert!(seen.ceiling_reached, "{seen:?}");
    assert_eq!((seen.consecutive_failures, seen.max_consecutive_failures), (4, 4));
    let unlock = UnlockRequest {
        account: account("tight", victim),
        reason: UnlockReason::OwnerVerified as i32,
        ..Default::default()
    };
    ops.admin.unlock(unlock).await.unwrap();
    let open = c.verify("tight", victim, PASSWORD, &hash, "hotel").await.unwrap();
    assert_eq!(open.verdict(), Verdict::Accept, "an unlock did not clear the ceiling");

    // A completed reset clears it too (ClearAttempts from a gateway that compares).
    for _ in 0..4 {
        c.attempt("tight", victim).await.unwrap();
    }
    assert_eq!(c.admit("tight", victim).await.unwrap(), Decision::Deny);
    c.clear("tight", victim, ClearReason::PasswordResetCompleted as i32).await.unwrap();
    assert_eq!(c.admit("tight", victim).await.unwrap(), Decision::Allow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ceiling_on_redis() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(TIGHT).settings()).await;
    let key = record_key("tight", Normalization::Email, "ceiling-victim@example.com");
    the_ceiling_shuts_every_caller_without_a_device_token(&daemon, |ms| {
        let mut conn = redis.conn();
        if read_record(&mut conn, &key).is_some() {
            age_record(&mut conn, &key, ms);
        }
    })
    .await;
    // A record at its ceiling has no expiry, but a device's bucket at its ceiling lives
    // only as long as a token that reaches it may; every other key has one.
    let mut conn = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*:d:*").query(&mut conn).unwrap();
    assert!(!keys.is_empty(), "no device bucket");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        assert!(ttl > 0, "a device bucket at its ceiling is kept for good (PTTL {ttl})");
    }
    for _ in 0..4 {
        daemon.client().await.attempt("tight", "kept@example.com").await.unwrap();
    }
    let kept = record_key("tight", Normalization::Email, "kept@example.com");
    let ttl: i64 = redis::cmd("PTTL").arg(&kept).query(&mut conn).unwrap();
    assert_eq!(ttl, -1, "a record at its ceiling expires");
    assert_store_clean(&mut conn, &["ceiling-victim", "ceiling-ghost", "kept@"]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ceiling_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(TestConfig::embedded(dir.path()).extra(TIGHT).settings()).await;
    // The embedded store's clock cannot be moved from outside: the windows stay, which
    // the ceiling does not need (it holds within a window too).
    the_ceiling_shuts_every_caller_without_a_device_token(&daemon, |_| {}).await;
    daemon.shutdown().await;
}
