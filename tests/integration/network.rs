//! The throttle per client network (docs/throttle.md, "Per client network"): one source
//! trying one password at each of many accounts is refused without a comparison once
//! its bucket is empty, while other sources and a known device behind it still log in;
//! addresses group by prefix, trusted networks never empty; `flag` realms and the
//! step-up signal answer exactly when they should, uniformly for unknown and known
//! accounts; gateways that hash themselves get the same through `RecordAttempt` and
//! `ClearAttempts`; operators inspect and release a bucket; a failed bucket operation
//! is a deny.

use portcullis::pb::{ClearReason, Verdict, VerifyResponse};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use prost::Message;

const RIGHT: &[u8] = b"correct horse battery staple";
const GUESS: &[u8] = b"Winter2026!";

/// `net` (the defaults: 100 failures a day, reject), `tiny` (3 tokens, reject, one
/// trusted network), `flagged` (2 tokens, flag) and `wide` (IPv4 /24); all bcrypt
/// cost 4, so many comparisons stay cheap.
const NETWORK_REALMS: &str = r#"
[realms.net]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.tiny]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 3
trusted_networks = ["10.0.0.0/8", "2001:db8:ffff::/48"]
[realms.flagged]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 2
network_action = "flag"
[realms.wide]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 3
network_ipv4_prefix = 24
"#;

fn hash() -> String {
    StoredHash::generate(RIGHT, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

/// A daemon on the embedded store, or on a fresh Redis, with [`NETWORK_REALMS`].
async fn daemon(redis: Option<&RedisServer>, dir: &tempfile::TempDir) -> Daemon {
    Daemon::on(redis, dir.path(), NETWORK_REALMS).await
}

async fn one_source_at_300_accounts(d: &Daemon) {
    let hash = hash();
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let before = d.budget().comparisons;
    for n in 0..300 {
        let stored = if n % 2 == 0 { hash.as_str() } else { "" };
        let r = c.verify("net", &format!("u{n}@example.com"), GUESS, stored, "203.0.113.7").await;
        assert_eq!(verdict(&r.unwrap()), Verdict::Reject, "account {n}");
    }
    // The bucket's 100 failures were compared; the other 200 were refused unhashed.
    assert_eq!(d.budget().comparisons - before, 100, "refused attempts were hashed");
    // ...and were not counted on their accounts (a blocked attempt is no guess at one).
    assert_eq!(ops.inspect("net", "u150@example.com").await.unwrap().failures, 0);
    assert_eq!(ops.inspect("net", "u50@example.com").await.unwrap().failures, 1);
    // The right password from the throttled address is refused too, without hashing.
    let r = c.verify("net", "u0@example.com", RIGHT, &hash, "203.0.113.7").await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons - before, 100);
    // Another address logs in, and its accept hands the device a token...
    let home = c.verify("net", "u0@example.com", RIGHT, &hash, "198.51.100.1").await.unwrap();
    assert_eq!(verdict(&home), Verdict::Accept);
    // ...with which the user logs in from behind the throttled address.
    let r = c
        .verify_with_device(
            "net",
            "u0@example.com",
            RIGHT,
            &hash,
            "203.0.113.7",
            &home.device_token,
        )
        .await
        .unwrap();
    assert_eq!(verdict(&r), Verdict::Accept, "a known device was throttled by its network");
    let seen = ops.inspect_network("net", "203.0.113.7").await.unwrap();
    assert_eq!((seen.tokens, seen.capacity, seen.trusted), (0, 100, false));
    assert!((86_000..=86_400).contains(&seen.seconds_until_full), "{seen:?}");
    assert_eq!(ops.inspect_network("net", "198.51.100.1").await.unwrap().tokens, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_at_300_accounts_is_refused_unhashed_after_its_bucket_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    one_source_at_300_accounts(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_at_300_accounts_is_refused_unhashed_after_its_bucket_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    one_source_at_300_accounts(&d).await;
    d.shutdown().await;
}

/// Fails `n` logins in `realm` from `client_key` and answers how many were compared.
async fn fail(d: &Daemon, realm: &str, client_key: &str, n: usize) -> u64 {
    let mut c = d.client().await;
    let before = d.budget().comparisons;
    for i in 0..n {
        let id = format!("{}-{i}@example.com", uuid::Uuid::new_v4());
        let r = c.verify(realm, &id, GUESS, "", client_key).await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject);
    }
    d.budget().comparisons - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addresses_group_by_prefix_trusted_networks_never_empty_and_any_key_works() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    // One IPv6 /64 is one bucket, whatever the host part or the port.
    assert_eq!(fail(&d, "tiny", "2001:db8:1:2::1", 2).await, 2);
    assert_eq!(fail(&d, "tiny", "[2001:db8:1:2:ffff::9]:443", 3).await, 1);
    // Another /64 has its own.
    assert_eq!(fail(&d, "tiny", "2001:db8:1:3::1", 3).await, 3);
    // IPv4 by /32 by default; an IPv4-mapped IPv6 address is the IPv4 address.
    assert_eq!(fail(&d, "tiny", "203.0.113.7", 3).await, 3);
    assert_eq!(fail(&d, "tiny", "::ffff:203.0.113.7", 1).await, 0);
    assert_eq!(fail(&d, "tiny", "203.0.113.8", 1).await, 1);
    // A realm with network_ipv4_prefix = 24 groups a /24.
    assert_eq!(fail(&d, "wide", "198.51.100.1", 2).await, 2);
    assert_eq!(fail(&d, "wide", "198.51.100.200:8080", 2).await, 1);
    // Trusted networks never empty.
    assert_eq!(fail(&d, "tiny", "10.1.2.3", 10).await, 10);
    assert_eq!(fail(&d, "tiny", "2001:db8:ffff:7::1", 10).await, 10);
    // A client_key that is no address is its own bucket; odd ones never panic.
    assert_eq!(fail(&d, "tiny", "session-42", 4).await, 3);
    assert_eq!(fail(&d, "tiny", "session-43", 1).await, 1);
    for odd in
        ["999.1.1.1", "1.2.3.4/24", "fe80::1%eth0", "::", "x".repeat(256).as_str(), "ü🦀\u{0}"]
    {
        assert_eq!(fail(&d, "tiny", odd, 1).await, 1, "{odd:?}");
    }
    let mut c = d.client().await;
    let too_long = c.verify("tiny", "a@example.com", GUESS, "", &"x".repeat(257)).await;
    assert_eq!(too_long.unwrap_err().code(), tonic::Code::InvalidArgument);
    // No address in any stored key.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis.conn()).unwrap();
    for key in keys {
        for address in ["2001:db8", "203.0.113", "198.51.100", "10.1.2.3", "session"] {
            assert!(!key.contains(address), "a stored key holds a client key: {key}");
        }
    }
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_and_step_up_answer_exactly_when_they_should_and_uniformly() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    let hash = hash();
    let mut c = d.client().await;
    let signals = |r: &VerifyResponse| (r.step_up, r.network_throttled);
    // Two failures empty the flagged realm's bucket; no signal yet.
    for n in 0..2 {
        let id = format!("k{n}@example.com");
        let r = c.verify("flagged", &id, GUESS, &hash, "203.0.113.9").await.unwrap();
        assert_eq!(signals(&r), (false, false));
    }
    // From now on the network is flagged: compared as usual, on every verdict.
    let before = d.budget().comparisons;
    let known = c.verify("flagged", "k9@example.com", GUESS, &hash, "203.0.113.9").await.unwrap();
    let unknown =
        c.verify("flagged", "nobody@example.com", GUESS, "", "203.0.113.9").await.unwrap();
    assert_eq!(d.budget().comparisons - before, 2, "a flagged network was not compared");
    assert_eq!(signals(&known), (true, true));
    assert_eq!(known.encode_to_vec(), unknown.encode_to_vec(), "known and unknown differ");
    let accept = c.verify("flagged", "k8@example.com", RIGHT, &hash, "203.0.113.9").await.unwrap();
    assert_eq!((verdict(&accept), signals(&accept)), (Verdict::Accept, (true, true)));
    // The account's soft threshold (step_up_failures: max_failures − 2 = 3), from
    // addresses that are never throttled: the same answers for a known and an unknown
    // account, step by step.
    for n in 1..=6u64 {
        let ip = format!("192.0.2.{n}");
        let known = c.verify("flagged", "victim@example.com", GUESS, &hash, &ip).await.unwrap();
        let unknown = c.verify("flagged", "ghost@example.com", GUESS, "", &ip).await.unwrap();
        assert_eq!(known.encode_to_vec(), unknown.encode_to_vec(), "failure {n}");
        assert_eq!(signals(&known), (n >= 3, false), "failure {n}");
    }
    // An accept clears the window: no step-up after it.
    let mut c2 = d.client().await;
    for n in 1..=2 {
        let ip = format!("192.0.2.{}", 10 + n);
        c2.verify("flagged", "fresh@example.com", GUESS, &hash, &ip).await.unwrap();
    }
    let ok = c2.verify("flagged", "fresh@example.com", RIGHT, &hash, "192.0.2.20").await.unwrap();
    assert_eq!((verdict(&ok), signals(&ok)), (Verdict::Accept, (false, false)));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_that_hash_themselves_spend_and_give_back_through_record_and_clear() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let allow = portcullis::pb::Decision::Allow as i32;
    let ip = "203.0.113.50";
    for n in 0..3 {
        let r = c.attempt_from("tiny", &format!("g{n}@example.com"), ip).await.unwrap();
        assert_eq!(r.decision, allow, "attempt {n}");
    }
    // The bucket is empty: denied, and the account's count is not touched.
    let r = c.attempt_from("tiny", "g9@example.com", ip).await.unwrap();
    assert_ne!(r.decision, allow);
    assert_eq!(ops.inspect("tiny", "g9@example.com").await.unwrap().failures, 0);
    // A verified password gives its token back; a completed reset does not.
    let verified = ClearReason::PasswordVerified as i32;
    let reset = ClearReason::PasswordResetCompleted as i32;
    c.clear_from("tiny", "g0@example.com", reset, ip).await.unwrap();
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 0);
    c.clear_from("tiny", "g0@example.com", verified, ip).await.unwrap();
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 1);
    assert_eq!(c.attempt_from("tiny", "g10@example.com", ip).await.unwrap().decision, allow);
    // Without a client_key, RecordAttempt is throttled by account only.
    assert_eq!(c.attempt("tiny", "g11@example.com").await.unwrap() as i32, allow);
    // A closed door gives the token back: the gateway compares nothing.
    let other = "203.0.113.51";
    for _ in 0..5 {
        c.attempt("tiny", "locked@example.com").await.unwrap();
    }
    let closed = c.attempt_from("tiny", "locked@example.com", other).await.unwrap();
    assert_ne!(closed.decision, allow);
    assert!(closed.step_up, "a closed door's answer asks for a step-up");
    assert_eq!(ops.inspect_network("tiny", other).await.unwrap().tokens, 3);
    // An operator releases a throttled network.
    ops.release_network("tiny", ip).await.unwrap();
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 3);
    let trusted = ops.inspect_network("tiny", "10.9.9.9").await.unwrap();
    assert!(trusted.trusted && trusted.network.is_empty());
    let bad = ops.inspect_network("tiny", "").await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    let bad = ops.inspect_network("nope", ip).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    d.shutdown().await;
}

/// `ClearAttempts(PASSWORD_VERIFIED)` gives back only a token a `RecordAttempt` of that
/// account from that network took and holds: a gateway that clears after every answer,
/// denies included, lets nothing more through an emptied network; a second clear of one
/// attempt gives nothing; an account that took nothing there gets nothing back.
async fn clears_give_back_only_what_an_attempt_took(d: &Daemon) {
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let (allow, verified) =
        (portcullis::pb::Decision::Allow as i32, ClearReason::PasswordVerified as i32);
    let ip = "203.0.113.60";
    let mut allowed = 0;
    for n in 0..20 {
        let id = format!("c{n}@example.com");
        let r = c.attempt_from("tiny", &id, ip).await.unwrap();
        allowed += usize::from(r.decision == allow);
        if n >= 3 {
            // A careless gateway: it clears whatever the answer was.
            c.clear_from("tiny", &id, verified, ip).await.unwrap();
        }
    }
    assert_eq!(allowed, 3, "an emptied network let attempts through");
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 0);
    // An account that took nothing from this network gets nothing back.
    c.clear_from("tiny", "never@example.com", verified, ip).await.unwrap();
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 0);
    // An attempt that took a token gives it back once, however often it is cleared.
    for _ in 0..3 {
        c.clear_from("tiny", "c0@example.com", verified, ip).await.unwrap();
    }
    assert_eq!(ops.inspect_network("tiny", ip).await.unwrap().tokens, 1);
    assert_eq!(c.attempt_from("tiny", "c0@example.com", ip).await.unwrap().decision, allow);
    assert_ne!(c.attempt_from("tiny", "c1@example.com", ip).await.unwrap().decision, allow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clears_give_back_only_what_an_attempt_took_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    clears_give_back_only_what_an_attempt_took(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clears_give_back_only_what_an_attempt_took_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    clears_give_back_only_what_an_attempt_took(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_on_a_cluster_spend_one_bucket_exactly() {
    let cluster = RedisCluster::start(3, 0);
    let mut daemons = Vec::new();
    for _ in 0..3 {
        daemons.push(
            Daemon::start(
                TestConfig::store(&format!("redis_cluster_nodes = {}", cluster.nodes_toml()))
                    .extra(NETWORK_REALMS)
                    .settings(),
            )
            .await,
        );
    }
    // 60 concurrent failures from one IPv6 /64 (each host its own client key, so no
    // per-client slot serializes them), spread over the three daemons, against a bucket
    // of 3 ("tiny"): exactly 3 are compared, whatever the interleaving. A call the CPU
    // budget refuses (a full queue) gives its token back and is retried.
    let mut calls = Vec::new();
    for n in 0..60 {
        let addr = daemons[n % 3].addr;
        calls.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            let id = format!("c{n}@example.com");
            let host = format!("2001:db8:77:1::{n:x}");
            loop {
                match c.verify("tiny", &id, GUESS, "", &host).await {
                    Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    other => return other.unwrap(),
                }
            }
        }));
    }
    for call in calls {
        assert_eq!(verdict(&call.await.unwrap()), Verdict::Reject);
    }
    let compared: u64 = daemons.iter().map(|d| d.budget().comparisons).sum();
    assert_eq!(compared, 3, "the fleet compared more than the bucket holds");
    for d in daemons {
        d.shutdown().await;
    }
}

/// A network bucket operation that fails is a deny: the right password included, on
/// `Verify` (the take, and the give-back of an accept) and on `RecordAttempt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_bucket_operation_is_a_deny_even_for_the_right_password() {
    use portcullis::pb::governor_server::Governor;
    use portcullis::store::embedded::{EmbeddedStore, SystemClock};
    use portcullis::store::network_bucket::NetworkOp;
    use std::sync::Arc;

    let hash = hash();
    for fail in [NetworkOp::Take, NetworkOp::GiveBack] {
        let dir = tempfile::tempdir().unwrap();
        let settings =
            TestConfig::embedded(&dir.path().join("cfg")).extra(NETWORK_REALMS).settings();
        let inner = EmbeddedStore::open(
            &dir.path().join("data"),
            std::time::Duration::from_secs(2),
            Arc::new(SystemClock),
        )
        .unwrap();
        let store = Arc::new(FaultyStore { inner: Arc::new(inner), fail: Fault::Network(fail) });
        let service = governor_over(store, settings);
        fn open<T>(message: T) -> tonic::Request<T> {
            let mut request = tonic::Request::new(message);
            request.extensions_mut().insert(portcullis::auth::Authorization::Open);
            request
        }
        let verify = portcullis::pb::VerifyRequest {
            account: account("net", "owner@example.com"),
            password: RIGHT.to_vec(),
            stored_hash: hash.clone(),
            client_key: "203.0.113.7".into(),
            attempt_id: String::new(),
            device_token: String::new(),
        };
        let status = service.verify(open(verify)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{fail:?}: {status:?}");
        if fail == NetworkOp::Take {
            let record = portcullis::pb::RecordAttemptRequest {
                account: account("net", "owner@example.com"),
                attempt_id: String::new(),
                client_key: "203.0.113.7".into(),
            };
            let status = service.record_attempt(open(record)).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        }
    }
}

/// One log line when a network's throttle episode begins, naming the network by its tag
/// (the one `Admin/InspectNetwork` answers), never by address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_episode_is_one_log_line_without_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("data")).extra(NETWORK_REALMS).toml();
    let daemon = DaemonProcess::spawn(&config);
    let mut c = daemon.client().await;
    for n in 0..20 {
        let id = format!("e{n}@example.com");
        let r = c.verify("tiny", &id, GUESS, "", "203.0.113.99").await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject);
    }
    daemon.wait_for_log("network throttle episode began", 1).await;
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    let tag = ops.inspect_network("tiny", "203.0.113.99").await.unwrap().network;
    let logs = daemon.logs();
    assert_eq!(logs.matches("network throttle episode began").count(), 1, "{logs}");
    let began = logs.lines().find(|l| l.contains("network throttle episode began")).unwrap();
    assert!(began.contains(&tag) && began.contains("tiny"), "{began}");
    for needle in ["203.0.113", "e1@example.com", "Winter2026"] {
        assert!(!logs.contains(needle), "a log line holds {needle:?}");
    }
}

/// A throttled network's reject still carries the account's step-up: the window keeps
/// the failures it held (`tiny`: 3 tokens, step-up from 3 failures), for a known and an
/// unknown account alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_reject_keeps_the_accounts_step_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    let hash = hash();
    let mut c = d.client().await;
    let accounts = [
        ("known@example.com", hash.as_str(), "203.0.113.1"),
        ("ghost@example.com", "", "203.0.113.2"),
    ];
    for (id, stored, from) in accounts {
        for n in 1..=5 {
            let guess = format!("guess {n}");
            let r = c.verify("tiny", id, guess.as_bytes(), stored, from).await.unwrap();
            assert_eq!(verdict(&r), Verdict::Reject);
            assert_eq!(r.step_up, n >= 3, "{id}, failure {n}");
        }
    }
    d.shutdown().await;
}
