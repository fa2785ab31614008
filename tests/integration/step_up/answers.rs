//! What a `step_up` realm answers beside its challenges: no oracle (bytes or time), `allow`
//! as before, bad settings refused.

use super::*;

/// In a `step_up` realm an unknown account, a wrong password and a closed door are the
/// same bytes at every count of the window (the step_up signal included); the right
/// password from an unknown device is a challenge, which differs (the gateway shows the
/// same challenge page for all, docs/devices.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_up_realm_tells_no_unknown_account_from_a_wrong_password_or_a_closed_door() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    let mut c = d.client().await;
    let hash = hash_of(PASSWORD);
    // `known` guesses five times, then tries the right password behind the closed door;
    // `unknown` (no stored hash) and `wrong` (wrong passwords only) take the same steps.
    for step in 0..8 {
        let guess = format!("guess {step}");
        let password = if step < 5 { guess.as_bytes() } else { PASSWORD };
        let known = c.verify("stepup5", "known@example.com", password, &hash, "192.0.2.30");
        let known = known.await.unwrap();
        let unknown = c.verify("stepup5", "nobody@example.com", password, "", "192.0.2.31");
        let unknown = unknown.await.unwrap();
        let wrong = c.verify("stepup5", "wrong@example.com", guess.as_bytes(), &hash, "192.0.2.32");
        let wrong = wrong.await.unwrap();
        assert_eq!(verdict(&known), Verdict::Reject, "step {step}");
        assert_eq!(known.encode_to_vec(), unknown.encode_to_vec(), "step {step}: unknown account");
        assert_eq!(known.encode_to_vec(), wrong.encode_to_vec(), "step {step}: wrong password");
        assert!(known.challenge_token.is_empty() && known.challenge_reason == 0);
    }
    let closed = portcullis::rpc::reject(Signals { step_up: true, ..Signals::default() });
    let r = c.verify("stepup5", "known@example.com", PASSWORD, &hash, "192.0.2.30").await.unwrap();
    assert_eq!(r.encode_to_vec(), closed.encode_to_vec(), "a closed door let the password in");
    // The right password from an unknown device on an open door: a challenge, not a
    // reject.
    let r = c.verify("stepup5", "open@example.com", PASSWORD, &hash, "192.0.2.33").await.unwrap();
    challenged(&r, false, "open door");
    let plain = portcullis::rpc::reject(Signals::default()).encode_to_vec();
    assert_ne!(r.encode_to_vec(), plain);
    d.shutdown().await;
}

/// What a checker can make a step-up realm do after a candidate password gives it
/// nothing to time: the same password again, or five wrong ones after it, are compared
/// (hashed) exactly as often, and leave the same count, whether the candidate was right
/// (a challenge) or wrong (a reject). A challenge leaves the store as a failure does;
/// a repeat is compared, never forgiven unhashed; ConfirmDevice clears the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_cannot_tell_a_right_candidate_by_what_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, dir.path(), false).await;
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let hash = hash_of(PASSWORD);
    // Each sequence on an account of its own, from a client of its own; answers the
    // comparisons it caused and the count it left.
    let mut run = async |who: &str, candidate: &[u8], then: &[&[u8]]| {
        let before = d.budget().comparisons;
        let client = format!("192.0.2.{}", who.len());
        c.verify("stepup5", who, candidate, &hash, &client).await.unwrap();
        for password in then {
            c.verify("stepup5", who, password, &hash, &client).await.unwrap();
        }
        let failures = ops.inspect("stepup5", who).await.unwrap().failures;
        (d.budget().comparisons - before, failures)
    };
    // The same candidate twice.
    let right = run("twice-right@example.com", PASSWORD, &[PASSWORD]).await;
    let wrong = run("twice-wrong@example.com", b"not it", &[b"not it"]).await;
    assert_eq!(right, wrong, "a repeat of the right password and of a wrong one differ");
    assert_eq!(right.0, 2, "a repeat was answered unhashed");
    // The candidate, then five wrong passwords: the door closes at the same step.
    let fives: Vec<&[u8]> = vec![b"w1", b"w2", b"w3", b"w4", b"w5"];
    let right = run("five-right@example.com", PASSWORD, &fives).await;
    let wrong = run("five-wrong-x@example.com", b"not it", &fives).await;
    assert_eq!(right, wrong, "the door state after a right candidate and a wrong one differ");
    d.shutdown().await;
}

/// In a `step_up` realm an unknown account and a wrong password take one time: per pair
/// `known-N` (a wrong password) and `unknown-N` (no stored hash), alternating which goes
/// first; the same bytes, and their times from one distribution (KS at α = 0.001: a test
/// of sameness, not a time limit), as tests/integration/repeats.rs holds elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_up_realm_tells_no_unknown_account_by_time() {
    const PAIRS: usize = 300;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    let mut c = d.client().await;
    let hash = hash_of(PASSWORD);
    let (mut on_known, mut on_unknown) = (Vec::new(), Vec::new());
    for n in 0..PAIRS {
        let guess = format!("guess of pair {n}");
        let (known, unknown) =
            (format!("known-{n}@example.com"), format!("unknown-{n}@example.com"));
        let mut order = [(0, known.as_str(), hash.as_str()), (1, unknown.as_str(), "")];
        if n % 2 == 1 {
            order.reverse();
        }
        let mut answers = [Vec::new(), Vec::new()];
        for (which, id, stored) in order {
            let started = Instant::now();
            let r = c.verify("stepup", id, guess.as_bytes(), stored, "203.0.113.66").await;
            let took = started.elapsed().as_secs_f64();
            answers[which] = r.unwrap().encode_to_vec();
            if which == 0 { on_known.push(took) } else { on_unknown.push(took) }
        }
        assert_eq!(answers[0], answers[1], "pair {n}: the unknown account answered otherwise");
    }
    let ks = ks_statistic(&mut on_known, &mut on_unknown);
    let critical = 1.949 * (2.0 / PAIRS as f64).sqrt();
    assert!(ks < critical, "an unknown account's times differ: KS D = {ks:.3} ≥ {critical:.3}");
    d.shutdown().await;
}

/// `unknown_device = "allow"` (the default, and written out) keeps today's answers: a
/// right password from an unknown device is a plain accept with a device token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_keeps_accepting_unknown_devices_with_a_device_token() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    let mut c = d.client().await;
    let hash = hash_of(PASSWORD);
    for realm in ["fast", "allowed"] {
        let r = c.verify(realm, "dana@example.com", PASSWORD, &hash, "192.0.2.40").await.unwrap();
        let token = accepted(&r, false, realm);
        let r =
            c.verify_with_device(realm, "dana@example.com", PASSWORD, &hash, "192.0.2.40", &token);
        accepted(&r.await.unwrap(), false, &format!("{realm}, known device"));
        // A device token is no challenge token here either.
        let e = confirm(&mut c, realm, "dana@example.com", &token, &hash).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition);
    }
    // Without a breach filter nothing is counted as breached: no change is required.
    let listed = hash_of(BREACHED.as_bytes());
    for n in 0..5 {
        let r = c.verify("grace", "erin@example.com", BREACHED.as_bytes(), &listed, "192.0.2.41");
        accepted(&r.await.unwrap(), false, &format!("no filter, accept {n}"));
    }
    let settings = TestConfig::redis(&redis.url()).settings();
    let fast = settings.realms.get("fast").unwrap();
    assert_eq!(fast.unknown_device, portcullis::defence::devices::UnknownDevice::Allow);
    assert_eq!(fast.breached_grace_logins, 3);
    d.shutdown().await;
}

/// Every pathway to a session meets step-up (OWASP ASVS 5.0 6.3.3): in a `step_up`
/// realm a gateway that compares hashes itself (`RecordAttempt`, then
/// `ClearAttempts(PASSWORD_VERIFIED)`) is refused with FAILED_PRECONDITION saying why,
/// and counts nothing and clears nothing; a completed reset still clears, and `allow`
/// realms are as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_up_realm_refuses_the_gateway_side_clear_of_a_verified_password() {
    use portcullis::pb::ClearReason;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), false).await;
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let who = "side-door@example.com";
    let recorded = c.attempt("stepup", who).await.unwrap_err();
    assert_eq!(recorded.code(), Code::FailedPrecondition, "{recorded:?}");
    assert!(recorded.message().contains("RecordAttempt"), "{recorded:?}");
    assert_eq!(ops.inspect("stepup", who).await.unwrap().failures, 0, "the refusal counted");
    // A wrong password through Verify, then the gateway-side clear: refused, kept.
    let r = c.verify("stepup", who, b"wrong", &hash_of(PASSWORD), "192.0.2.44").await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    let verified = ClearReason::PasswordVerified as i32;
    let refused = c.clear("stepup", who, verified).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("step_up") && refused.message().contains("Verify"),
        "{refused:?}"
    );
    assert_eq!(ops.inspect("stepup", who).await.unwrap().failures, 1, "the refusal cleared");
    c.clear("stepup", who, ClearReason::PasswordResetCompleted as i32).await.unwrap();
    assert_eq!(ops.inspect("stepup", who).await.unwrap().failures, 0);
    assert_eq!(c.attempt("fast", who).await.unwrap(), Decision::Allow);
    c.clear("fast", who, verified).await.unwrap();
    d.shutdown().await;
}

/// A value out of range or of no kind stops the start, naming the setting, whether the
/// configuration is checked (`check-config`) or served; the bounds themselves start.
#[test]
fn bad_step_up_and_grace_settings_stop_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portcullis.toml");
    let with = |lines: &str| {
        TestConfig::embedded(&dir.path().join("data"))
            .extra(&format!("[realms.web]\n{lines}\n"))
            .toml()
    };
    for (lines, setting) in [
        ("breached_grace_logins = 21", "realms.web.breached_grace_logins"),
        ("breached_grace_logins = -1", "breached_grace_logins"),
        ("unknown_device = \"maybe\"", "unknown_device"),
        ("unknown_device = \"stepup\"", "unknown_device"),
    ] {
        std::fs::write(&config, with(lines)).unwrap();
        let loaded = Config::load(Some(&config), &Overrides::default())
            .and_then(|c| c.validate(Some(SECRET.into())).map(drop));
        let e = loaded.expect_err(lines).to_string();
        assert!(e.contains(setting), "{lines}: the error does not name {setting}: {e}");
        for command in ["check-config", "serve"] {
            let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
            match command {
                "serve" => run.args(["serve", "--config"]),
                _ => run.arg(command),
            };
            let out = run.arg(&config).env("PORTCULLIS_KEY_SECRET", SECRET).env("NO_COLOR", "1");
            let out = out.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{lines}, {command}: started");
            assert!(stderr.contains(setting), "{lines}, {command}: {setting} not named: {stderr}");
        }
    }
    for lines in
        ["breached_grace_logins = 0", "breached_grace_logins = 20\nunknown_device = \"step_up\""]
    {
        std::fs::write(&config, with(lines)).unwrap();
        let settings = Config::load(Some(&config), &Overrides::default())
            .unwrap()
            .validate(Some(SECRET.into()))
            .unwrap_or_else(|e| panic!("{lines}: {e}"));
        assert!(settings.realms.get("web").is_some());
    }
}
