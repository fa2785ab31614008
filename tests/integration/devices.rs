//! Known devices (OWASP device cookies): a real user on a device that logged in before
//! keeps logging in while attackers keep the account locked; every token that is not a
//! valid one for this account leaves the call untrusted with today's answers; a stolen
//! token buys only its own device's bucket; the CPU budget serves the trusted lane first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use portcullis::defence::devices::{DeviceTokens, Grant};
use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::{Verdict, VerifyResponse};
use portcullis::secret::KeySecret;
use portcullis::store::keys::AccountKey;
use portcullis::verify::budget::{BudgetSettings, CpuBudget, Lane, Refusal};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use prost::Message;
use tonic::Code;

/// Realm `fast` (bcrypt cost 4) keeps the comparisons cheap.
const REALM: &str = "fast";
const PASSWORD: &[u8] = b"correct horse battery staple";

fn stored_hash() -> String {
    StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

fn account_key(realm: &str, identifier: &str) -> AccountKey {
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    AccountKey::new(&secret, realm, &normalize(Normalization::Email, identifier).unwrap())
}

/// Tokens as the test daemons make them (they share [`SECRET`]).
fn tokens() -> DeviceTokens {
    DeviceTokens::new(&KeySecret::new(SECRET.as_bytes().to_vec()))
}

/// A reject, byte for byte, whatever its step-up signal (which the account's count sets
/// alike for every identifier).
/// The uniform reject, less the signals a count sets alike for every identifier (the
/// step-up, and the gateway-only notice of the attempt that shut the door).
fn is_reject(r: &VerifyResponse) -> bool {
    let r = VerifyResponse {
        step_up: false,
        lockout_started: false,
        ceiling_reached: false,
        ..r.clone()
    };
    r.encode_to_vec() == portcullis::rpc::reject(Default::default()).encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_device_logs_in_while_attackers_keep_the_account_locked() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let hash = stored_hash();
    let victim = "victim@example.com";

    // The victim logs in once from their laptop: an accept carries a device token.
    let first = c.verify_with_device(REALM, victim, PASSWORD, &hash, "home", "").await.unwrap();
    assert_eq!(first.verdict(), Verdict::Accept);
    let mut token = first.device_token;
    assert!(!token.is_empty());

    // Attackers from several client keys lock the account.
    for n in 0..5 {
        let r = c.verify(REALM, victim, b"guess", &hash, &format!("10.6.6.{n}")).await.unwrap();
        assert!(is_reject(&r));
    }
    let record = record_key(REALM, Normalization::Email, victim);
    for round in 0..8 {
        // ... and keep it locked: even the right password from a new device is refused.
        for n in 0..3 {
            let attacker = format!("10.6.{round}.{n}");
            let r = c.verify(REALM, victim, b"guess", &hash, &attacker).await.unwrap();
            assert!(is_reject(&r));
        }
        let new_device = c.verify(REALM, victim, PASSWORD, &hash, "hotel").await.unwrap();
        assert!(is_reject(&new_device), "round {round}: a new device got past the lockout");

        // The known device logs in every time, and gets a fresh token every time.
        let r = c.verify_with_device(REALM, victim, PASSWORD, &hash, "home", &token).await;
        let r = r.unwrap();
        assert_eq!(r.verdict(), Verdict::Accept, "round {round}: the known device was refused");
        assert!(!r.device_token.is_empty() && r.device_token != token);
        token = r.device_token;
    }
    // The known device's logins did not clear the account's lockout for the attackers.
    let mut conn = redis.conn();
    let (failures, _, _) = read_record(&mut conn, &record).expect("the account record");
    assert!(failures >= 5, "the account was unlocked by the known device ({failures})");
    assert_store_clean(&mut conn, &[victim, "victim", &token]);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_that_are_not_valid_for_this_account_change_nothing() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let hash = stored_hash();
    let victim = "victim@example.com";

    // The attacker's own account gives him a real token — for his account only.
    let own = c.verify(REALM, "mallory@example.com", PASSWORD, &hash, "evil").await.unwrap();
    assert_eq!(own.verdict(), Verdict::Accept);
    let victims = c.verify(REALM, victim, PASSWORD, &hash, "home").await.unwrap().device_token;
    let mut tampered = victims.clone().into_bytes();
    tampered[20] = if tampered[20] == b'A' { b'B' } else { b'A' };
    let (fast_key, default_key) = (account_key(REALM, victim), account_key("default", victim));
    let expired = tokens()
        .issue_at(
            &Grant { realm: REALM, account: &fast_key, stored_hash: &hash },
            0,
            SystemTime::now() - Duration::from_secs(91 * 24 * 3600),
        )
        .unwrap();
    let other_realm = tokens()
        .issue(&Grant { realm: "default", account: &default_key, stored_hash: &hash }, 0)
        .unwrap();
    let untrusted = [
        ("the attacker's own account's", own.device_token),
        ("an expired", expired),
        ("a tampered", String::from_utf8(tampered).unwrap()),
        ("another realm's", other_realm),
        ("a garbage", "not-a-token".to_owned()),
    ];

    // Each is counted on the account, as if absent, with the same bytes as no token (but
    // for step_up, which the growing count sets from the third failure on).
    // (Distinct guesses: a repeated wrong password would be forgiven, throttle.md.)
    let plain = c.verify(REALM, victim, b"guess", &hash, "x").await.unwrap();
    for (n, (what, token)) in untrusted[..4].iter().enumerate() {
        let guess = format!("guess-{n}");
        let r = c.verify_with_device(REALM, victim, guess.as_bytes(), &hash, "x", token);
        let r = r.await.unwrap();
        let r = VerifyResponse { step_up: false, ..r };
        assert_eq!(r.encode_to_vec(), plain.encode_to_vec(), "{what} token changed the answer");
    }
    let record = record_key(REALM, Normalization::Email, victim);
    let (failures, _, _) = read_record(&mut redis.conn(), &record).unwrap();
    assert_eq!(failures, 5, "an invalid token's attempt was not counted on the account");
    // The door is closed, and no invalid token opens it, even with the right password.
    for (what, token) in &untrusted {
        let r = c.verify_with_device(REALM, victim, PASSWORD, &hash, "x", token).await.unwrap();
        assert!(is_reject(&r), "{what} token got past the lockout");
    }
    assert_eq!(daemon.budget().trusted_waiting, 0);

    // A token longer than any real one is bad input, named.
    let long = "A".repeat(257);
    let err = c.verify_with_device(REALM, victim, PASSWORD, &hash, "x", &long).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("device_token"), "{}", err.message());
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_token_buys_only_its_own_bucket() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let hash = stored_hash();
    let victim = "victim@example.com";
    let stolen = c.verify(REALM, victim, PASSWORD, &hash, "home").await.unwrap().device_token;

    // Guessing with the stolen token: max_failures (5) guesses, then its bucket closes.
    for n in 0..5 {
        let guess = format!("guess-{n}");
        let r = c.verify_with_device(REALM, victim, guess.as_bytes(), &hash, "thief", &stolen);
        assert!(is_reject(&r.await.unwrap()), "guess {n}");
    }
    let r = c.verify_with_device(REALM, victim, PASSWORD, &hash, "thief", &stolen).await;
    assert!(is_reject(&r.unwrap()), "a closed device bucket let the right password in");
    let comparisons = daemon.budget().comparisons;
    let r = c.verify_with_device(REALM, victim, b"guess", &hash, "thief", &stolen).await;
    assert!(is_reject(&r.unwrap()));
    assert_eq!(daemon.budget().comparisons, comparisons, "a closed bucket still hashed");

    // The guesses were the device's, not the account's: the victim's record is empty,
    // so the victim on another device is not locked out by the thief.
    let record = record_key(REALM, Normalization::Email, victim);
    assert_eq!(read_record(&mut redis.conn(), &record), None);
    let r = c.verify(REALM, victim, PASSWORD, &hash, "phone").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    daemon.shutdown().await;
}

/// Holds the governor's only slot until `release` is sent.
fn hold_the_slot(
    governor: &Arc<CpuBudget>,
) -> (std::sync::mpsc::Sender<()>, tokio::task::JoinHandle<()>) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let ticket = governor.reserve("holder", Lane::Untrusted).expect("a free slot");
    let task = tokio::spawn(async move {
        ticket.run(None, move || held.recv().unwrap()).await.unwrap().unwrap();
    });
    (release, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trusted_lane_is_served_first_and_has_its_own_room() {
    let governor = Arc::new(
        CpuBudget::new(BudgetSettings {
            max_concurrent: 1,
            max_per_client: 1,
            max_wait: Duration::from_secs(30),
            max_waiters: 4,
            max_trusted_waiters: 1,
        })
        .unwrap(),
    );
    let (release, holder) = hold_the_slot(&governor);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    let mut queue = |name: String, lane: Lane| {
        let ticket = governor.reserve(&name, lane).expect("room in the lane");
        let order = order.clone();
        calls.push(tokio::spawn(async move {
            ticket.run(None, move || order.lock().unwrap().push(name)).await.unwrap().unwrap();
        }));
    };
    for n in 0..4 {
        queue(format!("untrusted-{n}"), Lane::Untrusted);
    }
    // The untrusted queue is full: a fifth untrusted call is refused, a trusted one is not.
    assert_eq!(governor.reserve("untrusted-4", Lane::Untrusted).err(), Some(Refusal::QueueFull));
    // Let the untrusted waiters park on the slots before the trusted one arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    queue("trusted".to_owned(), Lane::Trusted);
    assert_eq!(governor.reserve("trusted-2", Lane::Trusted).err(), Some(Refusal::QueueFull));
    assert_eq!(governor.stats().trusted_waiting, 1);
    tokio::time::sleep(Duration::from_millis(100)).await;

    release.send(()).unwrap();
    holder.await.unwrap();
    for call in calls {
        call.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let trusted = order.iter().position(|n| n == "trusted").unwrap();
    // At most the one untrusted waiter already at the semaphore goes first.
    assert!(trusted <= 1, "the trusted call waited behind the untrusted queue: {order:?}");
    // Every untrusted waiter still ran (in the order they reached the queue, which
    // tasks on several threads reach in no fixed order).
    let mut untrusted: Vec<_> = order.iter().filter(|n| n.starts_with("untrusted")).collect();
    untrusted.sort();
    assert_eq!(untrusted, ["untrusted-0", "untrusted-1", "untrusted-2", "untrusted-3"]);
}

/// A token vouches for the credential it was issued against and for the account's
/// device epoch: after the gateway presents another stored hash (a password change), or
/// after an operator revoked the account's devices (`RevokeDevices`, or `Unlock` for a
/// mitigated attack), its holder is an untrusted client, counted on the account, with
/// the same bytes as any reject. A login afterwards issues a token that is trusted.
async fn a_token_outlives_neither_its_credential_nor_a_revocation(daemon: Daemon) {
    let mut c = daemon.client().await;
    let mut ops = portcullis::pb::admin_client::AdminClient::new(
        tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let victim = "stolen-laptop@example.com";
    let old_hash = stored_hash();
    let token = c.verify(REALM, victim, PASSWORD, &old_hash, "home").await.unwrap().device_token;
    // Wrong guess `n` carrying `token` with `hash` as the stored hash (distinct guesses:
    // a repeated wrong password would be forgiven, throttle.md).
    let guess_with = |c: &mut Client, hash: String, token: String, n: usize| {
        let mut c = c.clone();
        async move {
            let guess = format!("guess-{n}");
            let r = c.verify_with_device(REALM, victim, guess.as_bytes(), &hash, "thief", &token);
            r.await.unwrap()
        }
    };

    // The password changed (a new stored hash): five guesses with the old token lock the
    // account itself, as an untrusted client's would.
    let new_password = b"a brand new passphrase";
    let new_hash = StoredHash::generate(new_password, &HashParams::Bcrypt { cost: 4 })
        .unwrap()
        .as_str()
        .to_owned();
    for n in 0..5 {
        assert!(is_reject(&guess_with(&mut c, new_hash.clone(), token.clone(), n).await));
    }
    assert_eq!(
        c.admit(REALM, victim).await.unwrap(),
        portcullis::pb::Decision::Deny,
        "the guesses were not counted on the account"
    );
    ops.unlock(portcullis::pb::UnlockRequest {
        account: account(REALM, victim),
        reason: portcullis::pb::UnlockReason::OwnerVerified as i32,
        ..Default::default()
    })
    .await
    .unwrap();

    // A login with the new password issues a token for the new credential...
    let fresh =
        c.verify(REALM, victim, new_password, &new_hash, "home").await.unwrap().device_token;
    // ... which the operator revokes: its holder is counted on the account again.
    ops.revoke_devices(portcullis::pb::RevokeDevicesRequest {
        account: account(REALM, victim),
        note: String::new(),
    })
    .await
    .unwrap();
    for n in 0..5 {
        assert!(is_reject(&guess_with(&mut c, new_hash.clone(), fresh.clone(), n).await));
    }
    assert_eq!(
        c.admit(REALM, victim).await.unwrap(),
        portcullis::pb::Decision::Deny,
        "a revoked token's guesses were its own bucket's"
    );

    // After an unlock for a mitigated attack, a token issued before it is untrusted too.
    ops.unlock(portcullis::pb::UnlockRequest {
        account: account(REALM, victim),
        reason: portcullis::pb::UnlockReason::OwnerVerified as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    let current =
        c.verify(REALM, victim, new_password, &new_hash, "home").await.unwrap().device_token;
    // It is trusted now: its guesses fill its own bucket, not the account's.
    for n in 0..5 {
        assert!(is_reject(&guess_with(&mut c, new_hash.clone(), current.clone(), n).await));
    }
    assert_eq!(c.admit(REALM, victim).await.unwrap(), portcullis::pb::Decision::Allow);
    ops.unlock(portcullis::pb::UnlockRequest {
        account: account(REALM, victim),
        reason: portcullis::pb::UnlockReason::AttackMitigated as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    for n in 0..5 {
        assert!(is_reject(&guess_with(&mut c, new_hash.clone(), current.clone(), n).await));
    }
    assert_eq!(
        c.admit(REALM, victim).await.unwrap(),
        portcullis::pb::Decision::Deny,
        "an unlock for a mitigated attack left the token trusted"
    );

    // The real user's next login is trusted again with the token it gets.
    ops.unlock(portcullis::pb::UnlockRequest {
        account: account(REALM, victim),
        reason: portcullis::pb::UnlockReason::OwnerVerified as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    let renewed =
        c.verify(REALM, victim, new_password, &new_hash, "home").await.unwrap().device_token;
    let r = c
        .verify_with_device(REALM, victim, new_password, &new_hash, "home", &renewed)
        .await
        .unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_outlives_neither_its_credential_nor_a_revocation_on_redis() {
    let redis = RedisServer::start();
    a_token_outlives_neither_its_credential_nor_a_revocation(
        Daemon::start(TestConfig::redis(&redis.url()).settings()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_outlives_neither_its_credential_nor_a_revocation_on_the_embedded_store() {
    let data = tempfile::tempdir().unwrap();
    a_token_outlives_neither_its_credential_nor_a_revocation(
        Daemon::start(TestConfig::embedded(data.path()).settings()).await,
    )
    .await;
}
