//! A realm's status, fleet-wide (`Admin/RealmStatus`, `portcullis status`;
//! docs/observability.md, "A realm's status"): what the daemons sharing a store noted,
//! read from the store, so two daemons answer the same; each part counted once per
//! account, network or flow refusal; bounded after a flood of made-up identifiers; no
//! identifier or address in the answer or the store's keys; a store that fails is
//! `UNAVAILABLE`, never a status.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::pb::admin_server::Admin;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{Flow, RealmStatusRequest, RealmStatusResponse, RecordFlowAttemptRequest};
use portcullis::rpc::AdminService;
use portcullis::store::Store;
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::telemetry::running_config::RunningConfig;
use portcullis_test_support::*;
use tonic::Code;

/// `tight`: a ceiling of 3 (bcrypt cost 4, for Verify); `tiny`: networks hold two
/// failures; `quick`: one failure a window, so every second attempt starts a lockout.
const REALMS: &str = r#"
[realms.tight]
max_consecutive_failures = 3
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.tiny]
network_capacity = 2
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.quick]
max_failures = 1
"#;

async fn status(daemon: &DaemonProcess, realm: &str) -> RealmStatusResponse {
    let mut c = caller(daemon.addr, None, None).await.unwrap();
    let request = RealmStatusRequest { realm: realm.into() };
    c.admin.realm_status(request).await.unwrap().into_inner()
}

/// The status of `realm` from `daemon` once `done` holds of it (the daemons write their
/// notes every 2 s), or after 20 s.
async fn status_when(
    daemon: &DaemonProcess,
    realm: &str,
    done: impl Fn(&RealmStatusResponse) -> bool,
) -> RealmStatusResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = status(daemon, realm).await;
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The same status without the read's own time.
fn without_time(mut s: RealmStatusResponse) -> RealmStatusResponse {
    s.store_time_unix_ms = 0;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_on_one_redis_answer_the_same_and_name_no_one() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).extra(REALMS).toml();
    let (first, second) = (DaemonProcess::spawn(&config), DaemonProcess::spawn(&config));
    let (mut a, mut b) = (first.client().await, second.client().await);
    // Three accounts shut, one of them by both daemons: three accounts, not four.
    for who in ["one@example.com", "two@example.com", "three@example.com"] {
        for _ in 0..6 {
            a.attempt("default", who).await.unwrap();
        }
    }
    for _ in 0..7 {
        b.attempt("default", "one@example.com").await.unwrap();
    }
    // The ceiling reached through Verify: three wrong passwords (each another: a repeat
    // is not counted), the third reaching it.
    for n in 0..4 {
        let guess = format!("guess{n}");
        b.verify("tight", "ceiling@example.com", guess.as_bytes(), "", "198.51.100.1")
            .await
            .unwrap();
    }
    // One network used up its two failures: throttled from the third on, on both daemons.
    for n in 0..4 {
        let c = if n % 2 == 0 { &mut a } else { &mut b };
        c.verify("tiny", &format!("net{n}@example.com"), b"guess", "", "203.0.113.9")
            .await
            .unwrap();
    }
    // Six one-time codes: the sixth refused.
    let mut governor = GovernorClient::connect(format!("http://{}", first.addr)).await.unwrap();
    for _ in 0..6 {
        let request = RecordFlowAttemptRequest {
            account: account("default", "codes@example.com"),
            flow: Flow::SecondFactor as i32,
            client_key: String::new(),
            attempt_id: String::new(),
        };
        governor.record_flow_attempt(request).await.unwrap();
    }

    let wanted = |s: &RealmStatusResponse| s.accounts_locked == 3;
    let (one, two) = (
        status_when(&first, "default", wanted).await,
        status_when(&second, "default", wanted).await,
    );
    assert_eq!(one.accounts_locked, 3, "{one:?}");
    assert_eq!(one.lockout_minutes, 15);
    let refused: Vec<(i32, u64)> = one.flow_refusals.iter().map(|f| (f.flow, f.refused)).collect();
    assert_eq!(refused, [(1, 1), (2, 0), (3, 0), (4, 0)], "the sixth code refused");
    assert_eq!((one.estimate_error, one.lag_seconds), (0.0081, 2));
    assert_eq!(without_time(one.clone()), without_time(two), "both daemons read the store");
    let tight = status_when(&second, "tight", |s| s.accounts_at_ceiling == 1).await;
    assert_eq!(tight.accounts_at_ceiling, 1, "{tight:?}");
    assert_eq!(tight.accounts_locked, 0, "the ceiling is no lockout of the window");
    let tiny = status_when(&first, "tiny", |s| s.networks_throttled == 1).await;
    assert_eq!(tiny.networks_throttled, 1, "{tiny:?}");
    assert_eq!(tiny.network_minutes, 60, "one token back every 12 h: the hour at most");
    let quiet = status(&first, "quick").await;
    assert_eq!((quiet.accounts_locked, quiet.accounts_at_ceiling), (0, 0), "realms apart");

    // `portcullis status` prints it.
    let out = Command::new(daemon_binary())
        .args(["status", "--realm", "default", "--addr", &format!("http://{}", second.addr)])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains("accounts_locked: 3 (last 15 min)"), "{printed}");
    assert!(printed.contains("refused second_factor: 1 (last 60 min)"), "{printed}");
    assert!(printed.contains("standard error 0.81%"), "{printed}");

    // Nothing names anyone: not the answer, not a key of the store.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis.conn()).unwrap();
    let shown = format!("{one:?}{keys:?}{printed}");
    for secret in ["example.com", "one@", "203.0.113", "198.51.100", "default", "tight"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(first.terminate().await.success());
    assert!(second.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_identifiers_is_estimated_within_its_error_in_bounded_keys() {
    const FLOOD: usize = 10_000;
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).extra(REALMS).toml();
    let daemon = DaemonProcess::spawn(&config);
    let mut tasks = Vec::new();
    for part in 0..16 {
        let mut c = daemon.client().await;
        tasks.push(tokio::spawn(async move {
            for n in (part..FLOOD).step_by(16) {
                let who = format!("made-up-{n}@example.com");
                // The second attempt of a one-failure window shuts the door.
                c.attempt("quick", &who).await.unwrap();
                c.attempt("quick", &who).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let near = |s: &RealmStatusResponse| s.accounts_locked.abs_diff(FLOOD as u64) <= 300;
    let s = status_when(&daemon, "quick", near).await;
    // HyperLogLog: 0.81% standard error; 3% is more than three of them.
    assert!(near(&s), "{} accounts locked, estimated as {}", FLOOD, s.accounts_locked);
    // Bounded: the realm's tally is its labels and at most six keys a minute of the
    // hour, however many accounts were noted (docs/observability.md, "A realm's status").
    let keys: Vec<String> =
        redis::cmd("KEYS").arg("portcullis:v2:{t:*").query(&mut redis.conn()).unwrap();
    assert!(!keys.is_empty() && keys.len() <= 1 + 60 * 6, "{} tally keys", keys.len());
    let bytes: u64 = keys
        .iter()
        .map(|k| redis::cmd("MEMORY").arg("USAGE").arg(k).query::<u64>(&mut redis.conn()).unwrap())
        .sum();
    assert!(bytes < 64 * 1024, "the tally holds {bytes} bytes after the flood");
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_is_unavailable_never_a_status() {
    let dir = tempfile::tempdir().unwrap();
    let settings = TestConfig::embedded(dir.path()).settings();
    let embedded =
        EmbeddedStore::open(&dir.path().join("s"), Duration::from_secs(2), Arc::new(SystemClock))
            .unwrap();
    let inner: Arc<dyn Store> = Arc::new(embedded);
    let store: Arc<dyn Store> = Arc::new(FaultyStore { inner: inner.clone(), fail: Fault::Tally });
    let secret = portcullis::secret::KeySecret::new(SECRET.as_bytes().to_vec());
    let realms = Arc::new(settings.realms.clone());
    let running = RunningConfig::new(settings.report.clone());
    let spray = portcullis::defence::spray::SprayWatch::new();
    let admin = AdminService::new(realms.clone(), store, secret.clone(), spray.clone(), running);
    let mut request = tonic::Request::new(RealmStatusRequest { realm: "default".into() });
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    let status = admin.realm_status(request).await.expect_err("a status from a failed store");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // The same store without the fault answers, exactly: the embedded store counts.
    let running = RunningConfig::new(settings.report.clone());
    let admin = AdminService::new(realms, inner, secret, spray, running);
    let mut request = tonic::Request::new(RealmStatusRequest { realm: "default".into() });
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    let answer = admin.realm_status(request).await.unwrap().into_inner();
    assert_eq!((answer.accounts_locked, answer.estimate_error), (0, 0.0));
    // An unknown realm is the caller's error, named.
    let mut request = tonic::Request::new(RealmStatusRequest { realm: "nowhere".into() });
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    let refused = admin.realm_status(request).await.expect_err("an unknown realm");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("realm"), "{}", refused.message());
}
