//! The gateway learns that its attempt shut the door (docs/gateways.md, "When an attempt
//! shuts the door"): `lockout_started` on exactly the attempt its record refused first
//! in the window, once per lockout and never on a retry of that attempt id;
//! `ceiling_reached` on the attempt that brought the record to its ceiling; both the
//! same for an identifier with an account and one without, on `RecordAttempt`,
//! `Verify` and a code flow's `RecordFlowAttempt`.

use portcullis::pb::{Flow, RecordAttemptRequest, RecordFlowAttemptRequest, Verdict};
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use prost::Message;

const PASSWORD: &[u8] = b"correct horse battery staple";
/// The defaults' five failures a window, a ceiling of eight; bcrypt cost 4.
const REALM: &str = "[realms.notice]\nmax_consecutive_failures = 8\n\
                     hash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n";

async fn record(c: &mut Client, identifier: &str, attempt_id: &str) -> (bool, bool, bool, Vec<u8>) {
    let req = RecordAttemptRequest {
        account: account("notice", identifier),
        attempt_id: attempt_id.into(),
        client_key: String::new(),
    };
    let r = c.0.record_attempt(req).await.unwrap().into_inner();
    let allowed = r.decision == portcullis::pb::Decision::Allow as i32;
    (allowed, r.lockout_started, r.ceiling_reached, r.encode_to_vec())
}

#[tokio::test]
async fn record_attempt_flags_the_attempt_that_started_the_lockout_once_on_both_stores() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    for config in [TestConfig::embedded(&dir.path().join("data")), TestConfig::redis(&redis.url())]
    {
        let daemon = Daemon::start(config.extra(REALM).settings()).await;
        one_lockout_notice(&daemon).await;
        daemon.shutdown().await;
    }
}

async fn one_lockout_notice(daemon: &Daemon) {
    let mut c = daemon.client().await;
    // Five allowed, then the first refusal starts the lockout, the second does not.
    let mut seen = Vec::new();
    for n in 0..7 {
        let mut answers = Vec::new();
        for identifier in ["member@example.com", "nobody@example.com"] {
            answers.push(record(&mut c, identifier, &format!("id-{n}")).await);
        }
        assert_eq!(answers[0].3, answers[1].3, "attempt {n}: known and unknown differ");
        let (allowed, started, ceiling, _) = answers.swap_remove(0);
        assert!(!ceiling, "attempt {n}");
        seen.push((allowed, started));
    }
    let expected: Vec<(bool, bool)> =
        [(true, false); 5].into_iter().chain([(false, true), (false, false)]).collect();
    assert_eq!(seen, expected);
    // The retry of the attempt that started it gets its decision, not a second notice.
    let (allowed, started, _, _) = record(&mut c, "member@example.com", "id-5").await;
    assert!(!allowed && !started, "a retry is no second lockout");
}

#[tokio::test]
async fn verify_flags_the_lockout_and_the_ceiling_on_rejects_only() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(REALM).settings()).await;
    let mut c = daemon.client().await;
    let hash = StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap();
    let (known, unknown) = ("owner@example.com", "stranger@example.com");
    let mut started_at = Vec::new();
    for n in 0..7 {
        let (from_a, from_b) = (format!("198.51.100.{n}"), format!("203.0.113.{n}"));
        let a = c.verify("notice", known, b"wrong", hash.as_str(), &from_a).await.unwrap();
        let b = c.verify("notice", unknown, b"wrong", "", &from_b).await.unwrap();
        assert_eq!(a.encode_to_vec(), b.encode_to_vec(), "attempt {n}: known and unknown differ");
        assert_eq!(a.verdict(), Verdict::Reject);
        assert!(!a.ceiling_reached);
        if a.lockout_started {
            started_at.push(n);
        }
    }
    assert_eq!(started_at, [5], "the first refused attempt, once");

    // The ceiling at three: the attempt that reaches it says so; the ones after it do
    // not.
    let dir = tempfile::tempdir().unwrap();
    let realm = REALM.replace("max_consecutive_failures = 8", "max_consecutive_failures = 3");
    let daemon2 =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(&realm).settings())
            .await;
    let mut c = daemon2.client().await;
    let flags: Vec<(bool, bool)> = {
        let mut out = Vec::new();
        for n in 0..4 {
            // Another wrong password each time: a repeat is not counted again.
            let wrong = format!("wrong-{n}");
            let r = c.verify("notice", known, wrong.as_bytes(), hash.as_str(), "192.0.2.1");
            let r = r.await.unwrap();
            out.push((r.ceiling_reached, r.lockout_started));
        }
        out
    };
    assert_eq!(flags, [(false, false), (false, false), (true, false), (false, false)]);
    // A right password at the ceiling is refused like any other, and flags nothing.
    let right = c.verify("notice", known, PASSWORD, hash.as_str(), "192.0.2.1").await.unwrap();
    assert_eq!(right.verdict(), Verdict::Reject);
    assert!(!right.ceiling_reached && !right.lockout_started);
    daemon.shutdown().await;
    daemon2.shutdown().await;
}

#[tokio::test]
async fn a_code_flow_flags_its_lockout_and_a_mail_flow_never() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(REALM).settings()).await;
    let mut c = daemon.client().await;
    let flow = |flow: Flow, n: u32| RecordFlowAttemptRequest {
        account: account("notice", "codes@example.com"),
        flow: flow as i32,
        client_key: "198.51.100.7".into(),
        attempt_id: format!("{flow:?}-{n}"),
    };
    let mut started = Vec::new();
    for n in 0..7 {
        let r = c.0.record_flow_attempt(flow(Flow::SecondFactor, n)).await.unwrap().into_inner();
        if r.lockout_started {
            started.push(n);
        }
    }
    assert_eq!(started, [5], "the second factor's first refused code");
    for n in 0..8 {
        let r = c.0.record_flow_attempt(flow(Flow::PasswordReset, n)).await.unwrap().into_inner();
        assert!(!r.lockout_started && !r.ceiling_reached, "a send cap is no lockout");
    }
    daemon.shutdown().await;
}

/// A client retrying a password it was already refused with is no new attempt: behind
/// the door that its own attempts shut, the retry never says again that the lockout
/// started, on either store.
#[tokio::test]
async fn a_repeated_password_after_the_lockout_is_no_second_notice() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let hash = StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap();
    for config in [TestConfig::embedded(&dir.path().join("data")), TestConfig::redis(&redis.url())]
    {
        let daemon = Daemon::start(config.extra(REALM).settings()).await;
        let mut c = daemon.client().await;
        let mut started = Vec::new();
        for n in 0..6 {
            let guess = format!("guess-{n}");
            let r = c.verify(
                "notice",
                "phone@example.com",
                guess.as_bytes(),
                hash.as_str(),
                "192.0.2.7",
            );
            started.push(r.await.unwrap().lockout_started);
        }
        assert_eq!(started, [false, false, false, false, false, true]);
        // The phone retries its last refused password, again and again.
        for _ in 0..3 {
            let r = c.verify("notice", "phone@example.com", b"guess-4", hash.as_str(), "192.0.2.7");
            assert!(!r.await.unwrap().lockout_started, "a repeat is no second lockout");
        }
        daemon.shutdown().await;
    }
}
