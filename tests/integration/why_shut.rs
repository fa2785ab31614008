//! Why an account's door is shut, as an operator reads it through the daemon's
//! `Admin/Inspect` (docs/throttle.md, "Why a door is shut"): when it shut and by what
//! (the window or the ceiling), the failures of the untrusted lane and of the account's
//! known devices, and how many client networks the window's counted attempts came from.
//! On both stores, through `RecordAttempt` and `Verify` with and without a device token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use portcullis::pb::{DoorState, InspectResponse, ShutBy, Verdict};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;

const PASSWORD: &[u8] = b"correct horse battery staple";

/// `quick`: windows of a second (so a test sees one end); `tight`: a ceiling of 4.
/// Both compare bcrypt cost 4, as the test realm `fast` (the defaults otherwise).
const REALMS: &str = "[realms.quick]\nfirst_window = \"1s\"\nmax_window = \"2s\"\n\
                      hash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n\
                      [realms.tight]\nmax_consecutive_failures = 4\n\
                      hash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n";

fn stored_hash() -> String {
    StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

async fn inspect(daemon: &Daemon, realm: &str, identifier: &str) -> InspectResponse {
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    ops.inspect(realm, identifier).await.unwrap()
}

/// Both stores, each with its own daemon: `check` runs against each.
async fn on_both_stores<F, Fut>(check: F)
where
    F: Fn(Daemon) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let redis = RedisServer::start();
    check(Daemon::start(TestConfig::redis(&redis.url()).extra(REALMS).settings()).await).await;
    let dir = tempfile::tempdir().unwrap();
    check(Daemon::start(TestConfig::embedded(dir.path()).extra(REALMS).settings()).await).await;
}

/// An attacker shuts the door from three client networks (RecordAttempt and Verify
/// alike), while the owner's laptop, a known device, fails twice in its own lane: the
/// operator sees when the fifth attempt shut the door, that the window shut it, six
/// failures on the untrusted lane and two on one device lane, and three networks (not
/// the laptop's, whose attempts are its own lane's).
async fn a_door_shut_from_three_networks(daemon: Daemon) {
    let mut c = daemon.client().await;
    let (hash, victim) = (stored_hash(), "why-shut@example.com");
    let laptop = c.verify_with_device("fast", victim, PASSWORD, &hash, "198.51.100.9", "").await;
    let token = laptop.unwrap().device_token;
    assert!(!token.is_empty());
    for n in 1..=2 {
        let r = c.verify("fast", victim, b"guess", &hash, &format!("203.0.113.{n}")).await.unwrap();
        assert_eq!(r.verdict(), Verdict::Reject);
    }
    // The third network only through RecordAttempt (a socket address: its port is not
    // the network).
    for key in ["203.0.113.3:4431", "203.0.113.3:4432"] {
        let r = c.attempt_from("fast", victim, key).await.unwrap();
        assert_eq!(r.decision(), portcullis::pb::Decision::Allow);
    }
    let before = now_ms();
    let fifth = c.attempt_from("fast", victim, "203.0.113.3").await.unwrap();
    let after = now_ms();
    assert_eq!(fifth.decision(), portcullis::pb::Decision::Allow, "the fifth shuts the door");
    let sixth = c.verify("fast", victim, b"guess 2", &hash, "203.0.113.1").await.unwrap();
    assert_eq!(sixth.verdict(), Verdict::Reject);
    // Two different typos: a repeated one would be forgiven, not counted.
    for typo in [&b"typo one"[..], b"typo two"] {
        let r = c
            .verify_with_device("fast", victim, typo, &hash, "198.51.100.9", &token)
            .await
            .unwrap();
        assert_eq!(r.verdict(), Verdict::Reject);
    }
    let seen = inspect(&daemon, "fast", victim).await;
    assert_eq!(seen.door, DoorState::Closed as i32, "{seen:?}");
    assert_eq!(seen.shut_by, ShutBy::Window as i32, "{seen:?}");
    assert!((before..=after).contains(&seen.door_shut_unix_ms), "{seen:?}: {before}..={after}");
    assert_eq!((seen.failures, seen.device_lanes, seen.device_failures), (6, 1, 2), "{seen:?}");
    assert_eq!(seen.distinct_networks, 3, "{seen:?}");
    // An account nobody tried: all zero, and open.
    let nobody = inspect(&daemon, "fast", "nobody@example.com").await;
    assert_eq!(nobody, InspectResponse { door: DoorState::Open as i32, ..nobody_fields() });
    daemon.shutdown().await;
}

/// What `Inspect` answers for an account key in `fast` that was never counted.
fn nobody_fields() -> InspectResponse {
    InspectResponse { window_seconds: 900, max_consecutive_failures: 100, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reads_why_a_door_shut_from_three_networks() {
    on_both_stores(a_door_shut_from_three_networks).await;
}

/// The networks are the window's: once it is over Inspect reads none, and the next
/// window starts an empty set.
async fn the_networks_empty_when_the_window_restarts(daemon: Daemon) {
    let mut c = daemon.client().await;
    let victim = "restart@example.com";
    for n in 1..=3 {
        c.attempt_from("quick", victim, &format!("2001:db8:{n}::1")).await.unwrap();
    }
    let seen = inspect(&daemon, "quick", victim).await;
    assert_eq!((seen.failures, seen.distinct_networks), (3, 3), "{seen:?}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(inspect(&daemon, "quick", victim).await.distinct_networks, 0, "window over");
    c.attempt_from("quick", victim, "2001:db8:1::2").await.unwrap();
    let seen = inspect(&daemon, "quick", victim).await;
    assert_eq!((seen.failures, seen.distinct_networks), (1, 1), "{seen:?}");
    // The same /64 is one network; an attempt without client_key adds none.
    c.attempt_from("quick", victim, "2001:db8:1::3").await.unwrap();
    c.attempt("quick", victim).await.unwrap();
    let seen = inspect(&daemon, "quick", victim).await;
    assert_eq!((seen.failures, seen.distinct_networks), (3, 1), "{seen:?}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_set_is_emptied_when_the_window_restarts() {
    on_both_stores(the_networks_empty_when_the_window_restarts).await;
}

/// Four failures in one window reach `tight`'s ceiling of four before the window is
/// exhausted: the ceiling is the cause, from the fourth, and no time reopens it.
async fn the_ceiling_is_the_cause(daemon: Daemon) {
    let mut c = daemon.client().await;
    let victim = "ceiling-cause@example.com";
    for _ in 0..3 {
        c.attempt_from("tight", victim, "192.0.2.7").await.unwrap();
    }
    let open = inspect(&daemon, "tight", victim).await;
    assert_eq!((open.door, open.shut_by), (DoorState::Open as i32, ShutBy::Unspecified as i32));
    let before = now_ms();
    let fourth = c.attempt_from("tight", victim, "192.0.2.7").await.unwrap();
    let after = now_ms();
    assert!(fourth.ceiling_reached, "{fourth:?}");
    let seen = inspect(&daemon, "tight", victim).await;
    assert_eq!(seen.door, DoorState::Closed as i32);
    assert_eq!((seen.shut_by, seen.ceiling_reached), (ShutBy::Ceiling as i32, true), "{seen:?}");
    assert!((before..=after).contains(&seen.door_shut_unix_ms), "{seen:?}");
    assert_eq!((seen.failures, seen.seconds_until_open, seen.distinct_networks), (4, 0, 1));
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_shut_by_the_ceiling_says_so() {
    on_both_stores(the_ceiling_is_the_cause).await;
}
