//! The challenge: replayed right passwords get challenges only, never a device token, until
//! `ConfirmDevice`; no token but the challenge's own buys one; `ConfirmDevice` is a
//! permission of its own.

use super::*;

/// 1,000 right (identifier, password) pairs, replayed from 100 networks against accounts
/// no device of which the realm knows, get 1,000 challenges: no accept, no device token.
/// Each challenge passed (`ConfirmDevice`), the same pairs from those devices are 1,000
/// plain accepts, without a challenge; the device token a login answers keeps working.
async fn replayed_pairs_are_challenged_until_each_device_is_confirmed(d: &Daemon) {
    const PAIRS: usize = 1_000;
    const NETWORKS: usize = 100;
    const WORKERS: usize = 8;
    let pairs: Arc<Vec<(String, String, String)>> = Arc::new(
        (0..PAIRS)
            .map(|n| {
                let password = format!("leaked password {n} of the combo list");
                let hash = hash_of(password.as_bytes());
                (format!("victim-{n}@example.com"), password, hash)
            })
            .collect(),
    );
    let network = |n: usize| format!("10.0.{}.7", n % NETWORKS);
    let before = d.budget().comparisons;
    let started = Instant::now();

    // The replay: every pair is right, every answer a challenge.
    let mut work = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let (mut c, pairs) = (d.client().await, pairs.clone());
        work.spawn(async move {
            let mut challenges = Vec::new();
            for n in (w..PAIRS).step_by(WORKERS) {
                let (id, password, hash) = &pairs[n];
                let r = c.verify("stepup", id, password.as_bytes(), hash, &network(n)).await;
                let r = r.unwrap_or_else(|e| panic!("pair {n}: {e:?}"));
                assert_ne!(verdict(&r), Verdict::Accept, "pair {n}: a replayed password got in");
                challenges.push((n, challenged(&r, false, &format!("pair {n}"))));
            }
            challenges
        });
    }
    let mut challenges = Vec::new();
    while let Some(done) = work.join_next().await {
        challenges.extend(done.unwrap());
    }
    assert_eq!(challenges.len(), PAIRS, "every pair was answered with a challenge");
    assert_eq!(d.budget().comparisons - before, PAIRS as u64, "every pair was compared");
    let replay_took = started.elapsed();

    // The owners pass the gateway's challenge: each challenge token buys a device token.
    let mut c = d.client().await;
    let mut devices = vec![String::new(); PAIRS];
    for (n, challenge) in &challenges {
        let (id, _, hash) = &pairs[*n];
        let token = confirm(&mut c, "stepup", id, challenge, hash).await.unwrap();
        assert!(!token.is_empty() && token != *challenge, "pair {n}: no device token");
        devices[*n] = token;
    }

    // The same pairs from the confirmed devices: plain accepts, never a challenge, and
    // the fresh token of each accept is trusted at the next login.
    let devices = Arc::new(devices);
    let mut work = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let (mut c, pairs, devices) = (d.client().await, pairs.clone(), devices.clone());
        work.spawn(async move {
            let mut accepts = 0;
            for n in (w..PAIRS).step_by(WORKERS) {
                let (id, password, hash) = &pairs[n];
                let from = network(n);
                let r = c.verify_with_device(
                    "stepup",
                    id,
                    password.as_bytes(),
                    hash,
                    &from,
                    &devices[n],
                );
                let r = r.await.unwrap_or_else(|e| panic!("pair {n}: {e:?}"));
                assert_ne!(verdict(&r), Verdict::Challenge, "pair {n}: a known device challenged");
                let fresh = accepted(&r, false, &format!("pair {n}, confirmed device"));
                if n % 100 == 0 {
                    let r = c.verify_with_device(
                        "stepup",
                        id,
                        password.as_bytes(),
                        hash,
                        &from,
                        &fresh,
                    );
                    accepted(&r.await.unwrap(), false, &format!("pair {n}, the fresh token"));
                }
                accepts += 1;
            }
            accepts
        });
    }
    let mut accepts = 0;
    while let Some(done) = work.join_next().await {
        accepts += done.unwrap();
    }
    assert_eq!(accepts, PAIRS);
    eprintln!(
        "{PAIRS} replayed pairs from {NETWORKS} networks: {PAIRS} challenges in {:.1} s, then {PAIRS} confirmed devices accepted ({:.1} s in all)",
        replay_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_passwords_from_a_hundred_networks_get_only_challenges_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    replayed_pairs_are_challenged_until_each_device_is_confirmed(&d).await;
    d.shutdown().await;
    assert_store_clean(&mut redis.conn(), &["victim-", "leaked password", "$2b$"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_passwords_from_a_hundred_networks_get_only_challenges_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, dir.path(), false).await;
    replayed_pairs_are_challenged_until_each_device_is_confirmed(&d).await;
    d.shutdown().await;
}

/// No device token before the challenge passed: a challenge carries none, whatever
/// token came with the call (none, garbage, another account's, the challenge token
/// itself, a revoked device's); `ConfirmDevice` answers FAILED_PRECONDITION and no token
/// for an altered challenge token, another account's, realm's or fleet's, one for
/// another stored hash, and a device token; bad input is INVALID_ARGUMENT naming the
/// field. The real challenge token then buys a token that is trusted, and a revocation
/// between the challenge and its confirmation leaves that token untrusted.
async fn no_device_token_before_the_challenge_passed(d: &Daemon) {
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let hash = hash_of(PASSWORD);
    let (alice, bob) = ("alice@example.com", "bob@example.com");
    // Two wrong guesses first: the challenge leaves the store as a failed comparison
    // does (the count kept, its network's token spent), so no later answer's time tells
    // it from a wrong password; ConfirmDevice clears the record (below).
    for n in 0..2 {
        let guess = format!("guess {n}");
        let r = c.verify("stepup", alice, guess.as_bytes(), &hash, "192.0.2.1").await.unwrap();
        assert_eq!(verdict(&r), Verdict::Reject);
    }
    assert_eq!(ops.inspect("stepup", alice).await.unwrap().failures, 2);
    let network_tokens = ops.inspect_network("stepup", "192.0.2.1").await.unwrap().tokens;
    let first = c.verify("stepup", alice, PASSWORD, &hash, "192.0.2.1").await.unwrap();
    let challenge = challenged(&first, false, "no token");
    assert_eq!(ops.inspect("stepup", alice).await.unwrap().failures, 3, "a challenge counts");
    let after = ops.inspect_network("stepup", "192.0.2.1").await.unwrap().tokens;
    assert!(
        after < network_tokens,
        "the challenge gave its network's token back ({network_tokens} -> {after})"
    );
    let bobs = challenged(
        &c.verify("stepup", bob, PASSWORD, &hash, "192.0.2.2").await.unwrap(),
        false,
        "bob",
    );

    // Whatever token comes with a right password, the answer is a challenge and no
    // device token: garbage, the account's own challenge token, another account's
    // device token, a device token of another realm.
    let bob_device = confirm(&mut c, "stepup", bob, &bobs, &hash).await.unwrap();
    let key = account_key("stepup", alice);
    let other_realm = tokens()
        .issue(
            &Grant {
                realm: "stepgrace",
                account: &account_key("stepgrace", alice),
                stored_hash: &hash,
            },
            0,
        )
        .unwrap();
    let expired = tokens()
        .issue_at(
            &Grant { realm: "stepup", account: &key, stored_hash: &hash },
            0,
            std::time::SystemTime::now() - Duration::from_secs(91 * 24 * 3600),
        )
        .unwrap();
    for (what, token) in [
        ("a garbage", "not-a-token".to_owned()),
        ("an expired device", expired),
        ("its own challenge", challenge.clone()),
        ("another account's device", bob_device.clone()),
        ("another realm's device", other_realm),
    ] {
        let r = c.verify_with_device("stepup", alice, PASSWORD, &hash, "192.0.2.1", &token);
        challenged(&r.await.unwrap(), false, &format!("with {what} token"));
    }

    // ConfirmDevice refuses every token that is not this challenge's.
    let mut altered = challenge.clone().into_bytes();
    altered[30] = if altered[30] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let other_hash = hash_of(b"the password after a change");
    let device_of_alice =
        tokens().issue(&Grant { realm: "stepup", account: &key, stored_hash: &hash }, 0).unwrap();
    let other_fleet =
        DeviceTokens::new(&KeySecret::new(b"another fleet's key secret, 0123456789".to_vec()))
            .issue_challenge(&Grant { realm: "stepup", account: &key, stored_hash: &hash }, 0)
            .unwrap();
    let other_realm_challenge = tokens()
        .issue_challenge(
            &Grant {
                realm: "stepgrace",
                account: &account_key("stepgrace", alice),
                stored_hash: &hash,
            },
            0,
        )
        .unwrap();
    let truncated = challenge[..challenge.len() - 1].to_owned();
    let refused: [(&str, &str, &str, &str); 8] = [
        ("an altered", alice, &altered, &hash),
        ("a truncated", alice, &truncated, &hash),
        ("another account's", alice, &bobs, &hash),
        ("the right token for another account", bob, &challenge, &hash),
        ("the right token with another stored hash", alice, &challenge, &other_hash),
        ("a device token as a", alice, &device_of_alice, &hash),
        ("another fleet's", alice, &other_fleet, &hash),
        ("another realm's", alice, &other_realm_challenge, &hash),
    ];
    for (what, who, token, stored) in refused {
        let e = confirm(&mut c, "stepup", who, token, stored).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{what} challenge token: {e:?}");
        assert!(e.message().contains("no device token"), "{what}: {}", e.message());
    }
    // Bad input: INVALID_ARGUMENT, naming the field.
    for (what, req, field) in [
        (
            "no account",
            ConfirmDeviceRequest {
                account: None,
                challenge_token: challenge.clone(),
                stored_hash: hash.clone(),
            },
            "account",
        ),
        (
            "no identifier",
            ConfirmDeviceRequest {
                account: account("stepup", ""),
                challenge_token: challenge.clone(),
                stored_hash: hash.clone(),
            },
            "identifier",
        ),
        (
            "no realm",
            ConfirmDeviceRequest {
                account: account("", alice),
                challenge_token: challenge.clone(),
                stored_hash: hash.clone(),
            },
            "realm",
        ),
        (
            "no challenge token",
            ConfirmDeviceRequest {
                account: account("stepup", alice),
                challenge_token: String::new(),
                stored_hash: hash.clone(),
            },
            "challenge_token",
        ),
        (
            "a challenge token too long",
            ConfirmDeviceRequest {
                account: account("stepup", alice),
                challenge_token: "A".repeat(257),
                stored_hash: hash.clone(),
            },
            "challenge_token",
        ),
        (
            "no stored hash",
            ConfirmDeviceRequest {
                account: account("stepup", alice),
                challenge_token: challenge.clone(),
                stored_hash: String::new(),
            },
            "stored_hash",
        ),
        (
            "a stored hash too long",
            ConfirmDeviceRequest {
                account: account("stepup", alice),
                challenge_token: challenge.clone(),
                stored_hash: "$".repeat(1025),
            },
            "stored_hash",
        ),
    ] {
        let e = c.0.confirm_device(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        assert!(e.message().contains(field), "{what}: {}", e.message());
    }
    // None of it made alice's device known.
    let r = c.verify("stepup", alice, PASSWORD, &hash, "192.0.2.1").await.unwrap();
    let again = challenged(&r, false, "after the refused confirmations");

    // The challenge passed: the token is trusted at the next login, and a plain accept.
    assert!(ops.inspect("stepup", alice).await.unwrap().failures > 0);
    let device = confirm(&mut c, "stepup", alice, &again, &hash).await.unwrap();
    let cleared = ops.inspect("stepup", alice).await.unwrap().failures;
    assert_eq!(cleared, 0, "ConfirmDevice left the login record");
    let r = c.verify_with_device("stepup", alice, PASSWORD, &hash, "192.0.2.1", &device).await;
    let renewed = accepted(&r.unwrap(), false, "the confirmed device");
    // It vouches for its credential only: with another stored hash (a password change),
    // a challenge again.
    let new_password = b"the password after a change";
    let r = c.verify_with_device("stepup", alice, new_password, &other_hash, "192.0.2.1", &renewed);
    challenged(&r.await.unwrap(), false, "a known device after a password change");

    // Revoked: the device's right password is a challenge again, without a device token.
    let r = c.verify_with_device("stepup", bob, PASSWORD, &hash, "192.0.2.2", &bob_device).await;
    let bob_device = accepted(&r.unwrap(), false, "bob's confirmed device");
    let late = challenged(
        &c.verify("stepup", bob, PASSWORD, &hash, "192.0.2.3").await.unwrap(),
        false,
        "bob's second device",
    );
    ops.admin
        .revoke_devices(RevokeDevicesRequest {
            account: account("stepup", bob),
            note: String::new(),
        })
        .await
        .unwrap();
    let r = c.verify_with_device("stepup", bob, PASSWORD, &hash, "192.0.2.2", &bob_device).await;
    challenged(&r.unwrap(), false, "a revoked device");
    // A challenge from before the revocation is void after it (OWASP ASVS 5.0 6.5.1:
    // revoking the devices voids the outstanding challenges); one issued after it
    // confirms, once.
    let void = confirm(&mut c, "stepup", bob, &late, &hash).await.unwrap_err();
    assert_eq!(void.code(), Code::FailedPrecondition, "{void:?}");
    let fresh = challenged(
        &c.verify("stepup", bob, PASSWORD, &hash, "192.0.2.3").await.unwrap(),
        false,
        "bob's second device, after the revocation",
    );
    let confirmed = confirm(&mut c, "stepup", bob, &fresh, &hash).await.unwrap();
    let r = c.verify_with_device("stepup", bob, PASSWORD, &hash, "192.0.2.3", &confirmed).await;
    accepted(&r.unwrap(), false, "a token confirmed after a revocation");
    // The same challenge token again: no second device (it confirmed one, once).
    let again = confirm(&mut c, "stepup", bob, &fresh, &hash).await.unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition, "{again:?}");

    // A wrong password is a plain reject, token or not (the account's count is below
    // its step-up: alice's record was cleared by her ConfirmDevice).
    let r = c.verify("stepup", alice, b"wrong", &hash, "192.0.2.1").await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert!(r.device_token.is_empty() && r.challenge_token.is_empty());

    // The challenge asks for no rehash (a new stored hash would orphan its token); the
    // accept of the confirmed device does.
    let below_target = hash_of(PASSWORD);
    let r = c.verify("stepup5", "carol@example.com", PASSWORD, &below_target, "192.0.2.5").await;
    let challenge = challenged(&r.unwrap(), false, "a hash below the realm's target");
    let device = confirm(&mut c, "stepup5", "carol@example.com", &challenge, &below_target);
    let device = device.await.unwrap();
    let r = c.verify_with_device(
        "stepup5",
        "carol@example.com",
        PASSWORD,
        &below_target,
        "192.0.2.5",
        &device,
    );
    let r = r.await.unwrap();
    assert_eq!((verdict(&r), r.needs_rehash), (Verdict::Accept, true));
    assert!(!r.device_token.is_empty() && r.challenge_token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_device_token_before_the_challenge_passed_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    no_device_token_before_the_challenge_passed(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_device_token_before_the_challenge_passed_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, dir.path(), false).await;
    no_device_token_before_the_challenge_passed(&d).await;
    d.shutdown().await;
}

/// `ConfirmDevice` is a permission of its own: a caller allowed only `Verify` cannot
/// turn a challenge token into a device token, nor a caller for another realm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_device_is_a_permission_of_its_own() {
    const VERIFY_ONLY: &str = "verify-only-token-0123456789abcdef0123";
    const CONFIRMS: &str = "confirms-token-0123456789abcdef01234567";
    const OTHER_REALM: &str = "other-realm-token-0123456789abcdef0123";
    let dir = tempfile::tempdir().unwrap();
    let digest = |t: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(t.as_bytes()));
    let file = |name: &str, token: &str| pki::write(dir.path(), name, &digest(token));
    let callers = format!(
        "[callers.login]\ntoken_hash_file = {:?}\nrpcs = [\"Verify\"]\nrealms = [\"*\"]\n\
         [callers.stepup]\ntoken_hash_file = {:?}\nrpcs = [\"Verify\", \"ConfirmDevice\"]\nrealms = [\"stepup\"]\n\
         [callers.fast]\ntoken_hash_file = {:?}\nrpcs = [\"Verify\", \"ConfirmDevice\"]\nrealms = [\"fast\"]\n",
        file("login.sha256", VERIFY_ONLY),
        file("stepup.sha256", CONFIRMS),
        file("fast.sha256", OTHER_REALM),
    );
    let settings =
        TestConfig::embedded(&dir.path().join("data")).extra(&(callers + REALMS)).settings();
    let d = Daemon::start(settings).await;
    let hash = hash_of(PASSWORD);
    let confirm_as = async |token: &str, challenge: &str| {
        let mut c = caller(d.addr, None, Some(token)).await.unwrap();
        let req = ConfirmDeviceRequest {
            account: account("stepup", "frank@example.com"),
            challenge_token: challenge.into(),
            stored_hash: hash.clone(),
        };
        c.governor.confirm_device(req).await.map(|r| r.into_inner().device_token)
    };
    let mut login = caller(d.addr, None, Some(VERIFY_ONLY)).await.unwrap();
    let req = VerifyRequest {
        account: account("stepup", "frank@example.com"),
        password: PASSWORD.to_vec(),
        stored_hash: hash.clone(),
        client_key: "192.0.2.70".into(),
        attempt_id: String::new(),
        device_token: String::new(),
    };
    let r = login.governor.verify(req).await.unwrap().into_inner();
    let challenge = challenged(&r, false, "through a caller");
    for (who, token) in
        [("a Verify-only caller", VERIFY_ONLY), ("another realm's caller", OTHER_REALM)]
    {
        let e = confirm_as(token, &challenge).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{who}: {e:?}");
    }
    let e = confirm_as("no-such-token-0123456789abcdef0123456789", &challenge).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let device = confirm_as(CONFIRMS, &challenge).await.unwrap();
    assert!(!device.is_empty());
    d.shutdown().await;
}
