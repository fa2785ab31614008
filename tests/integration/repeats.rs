//! Repeated wrong passwords (docs/throttle.md, "Repeated passwords"): one client retrying
//! the password it was refused with is not a new guess, so it never locks the account,
//! while distinct guesses do as before; an attacker elsewhere who tries the user's typo
//! learns nothing (same bytes, same count, same time); concurrency never forgives more;
//! a password change makes an old refusal count again; the store keeps no password and
//! no unkeyed digest of one; a failed note is a deny.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use md5::Digest;
use portcullis::pb::Verdict;
use portcullis::pb::governor_server::Governor;
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::bench::ks_statistic;
use portcullis_test_support::*;
use prost::Message;

const RIGHT: &[u8] = b"correct horse battery staple";
const OLD: &[u8] = b"last year's password";

/// `rep`: bcrypt cost 4 (many comparisons stay cheap), a network bucket that the test's
/// hundreds of failures from one address do not empty; a CPU queue that holds 50
/// concurrent calls.
/// `short`: the same with the shortest fingerprints allowed (2 bytes), where a wrong
/// password that shares the right one's fingerprint is found in about 65,536 tries.
const REALMS: &str = r#"
[verify]
max_waiters = 64
[realms.rep]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 100000
[realms.short]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 100000
repeat_fingerprint_bytes = 2
"#;

fn hash_of(password: &[u8]) -> String {
    StoredHash::generate(password, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

/// A daemon on the embedded store, or on a fresh Redis, with [`REALMS`].
async fn daemon(redis: Option<&RedisServer>, dir: &tempfile::TempDir) -> Daemon {
    Daemon::on(redis, dir.path(), REALMS).await
}

async fn retries_never_lock_but_distinct_guesses_do(d: &Daemon) {
    let hash = hash_of(RIGHT);
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let phone = "2001:db8:7:7::1";
    let before = d.budget().comparisons;
    // The phone retries the old password 500 times: one count. A retry is forgiven
    // without a comparison once; the next match on its list entry is compared (a
    // truncated fingerprint may be the right password's) and, failing, re-arms it: so
    // 1 + 249 comparisons, and 250 network tokens (docs/throttle.md, "Repeated
    // passwords", "A fingerprint collision").
    let first = c.verify("rep", "alice@example.com", OLD, &hash, phone).await.unwrap();
    for n in 0..499 {
        // A privacy address that rotates within the /64 is the same client.
        let from = format!("2001:db8:7:7::{:x}", n % 7 + 1);
        let r = c.verify("rep", "alice@example.com", OLD, &hash, &from).await.unwrap();
        assert_eq!(r.encode_to_vec(), first.encode_to_vec(), "retry {n} answered otherwise");
    }
    assert_eq!(verdict(&first), Verdict::Reject);
    assert_eq!(d.budget().comparisons - before, 250, "not every second repeat was compared");
    let seen = ops.inspect("rep", "alice@example.com").await.unwrap();
    assert_eq!((seen.failures, seen.repeats_forgiven), (1, 499));
    assert_eq!(seen.door, portcullis::pb::DoorState::Open as i32);
    // The network paid for its 250 comparisons, not 500 (a token comes back every
    // 864 ms, a few during the test).
    let tokens = ops.inspect_network("rep", phone).await.unwrap().tokens;
    assert!((100000 - 250..100000 - 200).contains(&tokens), "{tokens} tokens left");
    // The user remembers the new password: in, and the record and the list are gone.
    let r = c.verify("rep", "alice@example.com", RIGHT, &hash, phone).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Accept);
    assert_eq!(ops.inspect("rep", "alice@example.com").await.unwrap().failures, 0);
    let r = c.verify("rep", "alice@example.com", OLD, &hash, phone).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons - before, 252, "the list outlived the accept");

    // Five distinct wrong passwords from the same client lock the account, as before.
    for n in 0..5 {
        let guess = format!("guess number {n}");
        let r = c.verify("rep", "bob@example.com", guess.as_bytes(), &hash, phone).await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject);
    }
    let r = c.verify("rep", "bob@example.com", RIGHT, &hash, phone).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject, "five distinct guesses did not lock");
    // Behind the closed door, a repeat is refused too, and nothing is compared.
    let compared = d.budget().comparisons;
    let r = c.verify("rep", "bob@example.com", b"guess number 0", &hash, phone).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons, compared);
    let seen = ops.inspect("rep", "bob@example.com").await.unwrap();
    assert_eq!(seen.door, portcullis::pb::DoorState::Closed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_of_one_wrong_password_never_lock_and_distinct_guesses_do_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    retries_never_lock_but_distinct_guesses_do(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_of_one_wrong_password_never_lock_and_distinct_guesses_do_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    retries_never_lock_but_distinct_guesses_do(&d).await;
    d.shutdown().await;
}

/// The user mistypes on accounts `typo-N` and `other-N` alike; an attacker on his own
/// address then tries the user's exact typo on `typo-N` and another password on
/// `other-N`. The two answers are the same bytes, both are counted, and their times
/// come from one distribution (KS at α = 0.001: a test of sameness, not a time limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attacker_trying_the_users_typo_elsewhere_learns_nothing() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    let hash = hash_of(RIGHT);
    let mut user = d.client().await;
    let mut attacker = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    const PAIRS: usize = 300;
    let (mut on_typo, mut on_other) = (Vec::new(), Vec::new());
    for n in 0..PAIRS {
        // A typo and a guess of each pair's own (one password on hundreds of accounts
        // would be a spray, docs/spray.md, and answered as one).
        let typo = format!("correct horse battery stapel {n}");
        let other = format!("Summer2026! {n}");
        let accounts = [format!("typo-{n}@example.com"), format!("other-{n}@example.com")];
        for id in &accounts {
            let r = user.verify("rep", id, typo.as_bytes(), &hash, "198.51.100.1").await;
            assert_eq!(verdict(&r.unwrap()), Verdict::Reject);
        }
        let before = d.budget().comparisons;
        // Alternate which goes first, so drift in the machine's load hits both alike.
        let mut order = [(0, typo.as_bytes()), (1, other.as_bytes())];
        if n % 2 == 1 {
            order.reverse();
        }
        let mut answers = [Vec::new(), Vec::new()];
        for (which, guess) in order {
            let started = Instant::now();
            let r = attacker.verify("rep", &accounts[which], guess, &hash, "203.0.113.66").await;
            let took = started.elapsed().as_secs_f64();
            answers[which] = r.unwrap().encode_to_vec();
            if which == 0 { on_typo.push(took) } else { on_other.push(took) }
        }
        assert_eq!(answers[0], answers[1], "pair {n}: the typo answered otherwise");
        assert_eq!(d.budget().comparisons - before, 2, "pair {n}: a guess was not compared");
        if n % 50 == 0 {
            for id in &accounts {
                assert_eq!(ops.inspect("rep", id).await.unwrap().failures, 2, "{id}");
            }
        }
    }
    let ks = ks_statistic(&mut on_typo, &mut on_other);
    // c(α = 0.001) = 1.949; n = m = PAIRS.
    let critical = 1.949 * (2.0 / PAIRS as f64).sqrt();
    assert!(ks < critical, "the typo's times differ: KS D = {ks:.3} ≥ {critical:.3}");
    d.shutdown().await;
}

/// 50 concurrent attempts with 50 distinct passwords from 50 addresses on one fresh
/// key compare exactly `max_failures`; sent again, none is compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_never_forgives_more_than_the_refused() {
    for redis in [Some(RedisServer::start()), None] {
        let dir = tempfile::tempdir().unwrap();
        let d = daemon(redis.as_ref(), &dir).await;
        let hash = hash_of(RIGHT);
        let c = d.client().await;
        let wave = || {
            let mut calls = tokio::task::JoinSet::new();
            for n in 0..50 {
                let (mut c, hash) = (c.clone(), hash.clone());
                calls.spawn(async move {
                    let password = format!("distinct guess {n}");
                    let from = format!("203.0.113.{n}");
                    let r = c.verify("rep", "race@example.com", password.as_bytes(), &hash, &from);
                    verdict(&r.await.unwrap_or_else(|e| panic!("{e:?}")))
                });
            }
            calls
        };
        let answers = wave().join_all().await;
        assert!(answers.iter().all(|v| *v == Verdict::Reject));
        assert_eq!(d.budget().comparisons, 5, "store: {}", redis.is_some());
        let answers = wave().join_all().await;
        assert!(answers.iter().all(|v| *v == Verdict::Reject));
        assert_eq!(d.budget().comparisons, 5, "a repeat behind the closed door was compared");
        d.shutdown().await;
    }
}

/// A password refused before a password change is a new attempt against the new stored
/// hash: the user who changed to it logs in (the fingerprint binds the stored hash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_before_a_password_change_is_not_a_repeat_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    let mut c = d.client().await;
    let new_password = b"the password set at the helpdesk";
    let old_hash = hash_of(RIGHT);
    let r = c.verify("rep", "carol@example.com", new_password, &old_hash, "192.0.2.5").await;
    assert_eq!(verdict(&r.unwrap()), Verdict::Reject);
    let new_hash = hash_of(new_password);
    let r = c.verify("rep", "carol@example.com", new_password, &new_hash, "192.0.2.5").await;
    assert_eq!(verdict(&r.unwrap()), Verdict::Accept, "an old refusal shut out the new password");
    d.shutdown().await;
}

/// Every unkeyed digest of `password` a careless design might store, as text: the
/// digests' hex and base64, and their first 4 bytes in hex (a fingerprint's size).
fn unkeyed_digests(password: &[u8]) -> Vec<(String, Vec<u8>)> {
    let digests: [(&str, Vec<u8>); 4] = [
        ("md5", md5::Md5::digest(password).to_vec()),
        ("sha1", sha1::Sha1::digest(password).to_vec()),
        ("sha256", sha2::Sha256::digest(password).to_vec()),
        ("sha512", sha2::Sha512::digest(password).to_vec()),
    ];
    digests.into_iter().map(|(name, d)| (name.to_owned(), d)).collect()
}

fn forms(digest: &[u8]) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    vec![hex::encode(digest), b64.encode(digest), hex::encode(&digest[..4])]
}

/// Every key's name and value as text (strings, hashes, sets, sorted sets).
fn dump(conn: &mut redis::Connection) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    let mut out = String::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).unwrap();
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![redis::cmd("GET").arg(&key).query(conn).unwrap()],
            "hash" => redis::cmd("HGETALL").arg(&key).query(conn).unwrap(),
            "set" => redis::cmd("SMEMBERS").arg(&key).query(conn).unwrap(),
            "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query(conn).unwrap(),
            other => panic!("a key of type {other}"),
        };
        out.push_str(&key);
        for v in values {
            out.push(' ');
            out.push_str(&String::from_utf8_lossy(&v));
        }
        out.push('\n');
    }
    out
}

const SESSION_PASSWORDS: [&[u8]; 4] = [OLD, b"hunter2", b"Summer2026!", b"p@ssw0rd-typo"];

/// A session of refusals and repeats on several accounts and clients.
async fn session(d: &Daemon) {
    let hash = hash_of(RIGHT);
    let mut c = d.client().await;
    for (n, password) in SESSION_PASSWORDS.iter().enumerate() {
        for from in ["203.0.113.7", "2001:db8::1"] {
            for _ in 0..3 {
                let id = format!("dump-{n}@example.com");
                c.verify("rep", &id, password, &hash, from).await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_no_password_and_no_unkeyed_digest_of_one() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    session(&d).await;
    let text = dump(&mut redis.conn()).to_lowercase();
    assert!(text.contains(":p:"), "the session left no repeat list: {text}");
    for password in SESSION_PASSWORDS {
        let clear = String::from_utf8_lossy(password).to_lowercase();
        assert!(!text.contains(&clear), "a password is stored in clear");
        for (name, digest) in unkeyed_digests(password) {
            for form in forms(&digest) {
                assert!(!text.contains(&form.to_lowercase()), "an unkeyed {name} is stored");
            }
        }
    }
    d.shutdown().await;

    // The embedded store's file, byte for byte: no password, no digest, no digest's
    // first 4 bytes in either byte order.
    let d = daemon(None, &dir).await;
    session(&d).await;
    d.shutdown().await;
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("data")).unwrap() {
        bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    for password in SESSION_PASSWORDS {
        assert!(!holds(password), "a password is stored in clear");
        for (name, digest) in unkeyed_digests(password) {
            let mut reversed = digest[..4].to_vec();
            reversed.reverse();
            for needle in [&digest[..], &digest[..4], &reversed] {
                assert!(!holds(needle), "an unkeyed {name} is stored");
            }
        }
    }
}

/// A failed note of the refused password is a store error: UNAVAILABLE, never a reject
/// that forgot to note (which would count the retry) nor an answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_repeat_note_is_a_deny() {
    use portcullis::store::embedded::{EmbeddedStore, SystemClock};
    let dir = tempfile::tempdir().unwrap();
    let settings = TestConfig::embedded(&dir.path().join("cfg")).extra(REALMS).settings();
    let inner = EmbeddedStore::open(
        &dir.path().join("data"),
        std::time::Duration::from_secs(2),
        Arc::new(SystemClock),
    )
    .unwrap();
    let store = Arc::new(FaultyStore { inner: Arc::new(inner), fail: Fault::NoteRepeat });
    let service = governor_over(store, settings);
    let mut request = tonic::Request::new(portcullis::pb::VerifyRequest {
        account: account("rep", "owner@example.com"),
        password: OLD.to_vec(),
        stored_hash: hash_of(RIGHT),
        client_key: "203.0.113.7".into(),
        attempt_id: String::new(),
        device_token: String::new(),
    });
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    let status = service.verify(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}

/// A call that added no count gives none back: a repeat (forgiven, not counted) or a
/// replayed `attempt_id` from a throttled network in a `reject` realm is refused, and
/// the failures earlier calls paid for stay. (Giving one back per call let a throttled
/// network drain an account's count while others guessed: unlimited guesses.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_networks_repeats_and_replays_give_back_nothing() {
    const TIGHT: &str = r#"
[realms.tight]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 1
"#;
    for redis in [Some(RedisServer::start()), None] {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::on(redis.as_ref(), dir.path(), TIGHT).await;
        let hash = hash_of(RIGHT);
        let mut c = d.client().await;
        let mut ops = caller(d.addr, None, None).await.unwrap();
        let victim = "victim@example.com";
        // The throttled network's one guess, compared and counted: its token is spent.
        c.verify("tight", victim, b"first guess", &hash, "203.0.113.9").await.unwrap();
        for n in 1..=4 {
            let (guess, from) = (format!("guess {n}"), format!("198.51.100.{n}"));
            c.verify("tight", victim, guess.as_bytes(), &hash, &from).await.unwrap();
        }
        assert_eq!(ops.inspect("tight", victim).await.unwrap().failures, 5);
        // Its repeats now: refused by its network, and no failure given back.
        for _ in 0..5 {
            let r = c.verify("tight", victim, b"first guess", &hash, "203.0.113.9").await;
            assert_eq!(verdict(&r.unwrap()), Verdict::Reject);
        }
        assert_eq!(ops.inspect("tight", victim).await.unwrap().failures, 5, "a repeat refunded");
        let r = c.verify("tight", victim, RIGHT, &hash, "192.0.2.200").await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject, "the door reopened");

        // A gateway's retry of a RecordAttempt from a network that is throttled now.
        let id = "retry@example.com";
        let record = |c: &mut Client| {
            let mut c = c.clone();
            async move {
                let req = portcullis::pb::RecordAttemptRequest {
                    account: account("tight", id),
                    attempt_id: "a1".into(),
                    client_key: "203.0.113.77".into(),
                };
                c.0.record_attempt(req).await.unwrap().into_inner().decision
            }
        };
        assert_eq!(record(&mut c).await, portcullis::pb::Decision::Allow as i32);
        assert_eq!(record(&mut c).await, portcullis::pb::Decision::Deny as i32);
        assert_eq!(ops.inspect("tight", id).await.unwrap().failures, 1, "a replay refunded");
        d.shutdown().await;
    }
}

/// A revoked device token is an untrusted client: its list is its network's, so a thief
/// holding the token elsewhere finds nothing the user was refused with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_holders_do_not_share_a_list() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    let hash = hash_of(RIGHT);
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let user = "dana@example.com";
    let token = c.verify("rep", user, RIGHT, &hash, "198.51.100.1").await.unwrap().device_token;
    ops.admin
        .revoke_devices(portcullis::pb::RevokeDevicesRequest {
            account: account("rep", user),
            note: String::new(),
        })
        .await
        .unwrap();
    let typo = b"correct horse battery stapel";
    let r = c.verify_with_device("rep", user, typo, &hash, "198.51.100.1", &token).await;
    assert_eq!(verdict(&r.unwrap()), Verdict::Reject);
    let before = d.budget().comparisons;
    let r = c.verify_with_device("rep", user, typo, &hash, "203.0.113.66", &token).await;
    assert_eq!(verdict(&r.unwrap()), Verdict::Reject);
    assert_eq!(d.budget().comparisons - before, 1, "the thief's try was not compared");
    let seen = ops.inspect("rep", user).await.unwrap();
    assert_eq!((seen.failures, seen.repeats_forgiven), (2, 0));
    d.shutdown().await;
}

/// A wrong password whose 2-byte fingerprint on `from`'s list of `identifier` in realm
/// `short` is the right password's, found by brute force with the test's key secret.
fn colliding_password(identifier: &str, hash: &str, from: &str) -> Vec<u8> {
    use portcullis::defence::repeats::RepeatFingerprints;
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::secret::KeySecret;
    use portcullis::store::keys::AccountKey;
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    let id = normalize(Normalization::Email, identifier).unwrap();
    let fingerprints = RepeatFingerprints::new(&secret);
    let list = fingerprints.list(&AccountKey::new(&secret, "short", &id), &format!("ip:{from}/32"));
    let fp = |password: &[u8]| fingerprints.fingerprint("short", &list, hash, password, 2);
    let right = fp(RIGHT);
    (0u64..).map(|n| format!("wrong password {n}").into_bytes()).find(|w| fp(w) == right).unwrap()
}

/// A fingerprint collision costs the user at most one refused try: with 2-byte
/// fingerprints, the user is refused a wrong password that shares the right one's
/// fingerprint on his list (counted, compared); the right password is then refused once
/// without a comparison (the collision) and accepted on its second try, compared.
/// Then, with the wrong password retried once (forgiven, so its entry is marked), the
/// right password is compared and accepted on its first try.
async fn a_collision_costs_at_most_one_refused_try(d: &Daemon) {
    let hash = hash_of(RIGHT);
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let from = "203.0.113.7";
    for (user, wrong_retries, refused_unseen) in
        [("erin@example.com", 0, 1), ("frank@example.com", 1, 0)]
    {
        let wrong = colliding_password(user, &hash, from);
        assert_ne!(wrong, RIGHT);
        let before = d.budget().comparisons;
        let r = c.verify("short", user, &wrong, &hash, from).await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject);
        assert_eq!(d.budget().comparisons - before, 1, "{user}: the wrong password");
        assert_eq!(ops.inspect("short", user).await.unwrap().failures, 1, "{user}");
        for _ in 0..wrong_retries {
            let r = c.verify("short", user, &wrong, &hash, from).await.unwrap();
            assert_eq!(verdict(&r), Verdict::Reject);
        }
        assert_eq!(d.budget().comparisons - before, 1, "{user}: a first retry was compared");
        // The right password, from the same client: accepted by its second try.
        let mut tries = 0;
        let accepted = loop {
            tries += 1;
            let compared = d.budget().comparisons;
            let r = c.verify("short", user, RIGHT, &hash, from).await.unwrap();
            if verdict(&r) == Verdict::Accept {
                break tries;
            }
            assert_eq!(d.budget().comparisons, compared, "{user}: the right password failed");
            assert!(tries < 2, "{user}: the right password was refused {tries} times");
        };
        assert_eq!(accepted, refused_unseen + 1, "{user}: no collision was met");
        assert_eq!(ops.inspect("short", user).await.unwrap().failures, 0, "{user}: not cleared");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fingerprint_collision_costs_at_most_one_refused_try_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), &dir).await;
    a_collision_costs_at_most_one_refused_try(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fingerprint_collision_costs_at_most_one_refused_try_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, &dir).await;
    a_collision_costs_at_most_one_refused_try(&d).await;
    d.shutdown().await;
}
