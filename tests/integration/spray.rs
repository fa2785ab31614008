//! Password-spray detection (docs/spray.md): one password tried once against many
//! accounts trips the realm's signal close to `spray_threshold` (exactly on the embedded
//! store, within the HyperLogLog's error on Redis) and flags even a correct login with
//! it; random passwords never trip it; `spray_action = "reject"` refuses sprayed
//! passwords without hashing; a failed spray note is a deny; and nothing stored or
//! logged holds a password, a fingerprint value or an identifier.

use std::sync::Arc;

use portcullis::config::{Config, Overrides, Settings};
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::governor_server::Governor;
use portcullis::pb::{SprayStatusRequest, SprayStatusResponse, Verdict, VerifyRequest};
use portcullis::store::Store;
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::store::spray_window::SprayNote;
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use tonic::Code;

const SPRAYED: &[u8] = b"Winter2026!";
/// Realm `sprayed`: threshold 100, flag. Realm `tight`: the lowest threshold, 10, and
/// `reject`. Both hash at bcrypt cost 4 so 500 comparisons take a moment.
const SPRAY_REALMS: &str = r#"
[realms.sprayed]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
spray_threshold = 100
[realms.tight]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
spray_threshold = 10
spray_action = "reject"
"#;
const THRESHOLD: usize = 100;
/// Three standard errors of Redis's HyperLogLog (1.04/√16384 = 0.81%) at the threshold,
/// rounded up: the embedded store counts exactly.
const ESTIMATOR_MARGIN: usize = 3;

fn hash_of(password: &[u8]) -> String {
    StoredHash::generate(password, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

fn load(toml: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

fn redis_settings(redis: &RedisServer) -> Settings {
    load(&TestConfig::redis(&redis.url()).extra(SPRAY_REALMS).toml())
}

async fn spray_status(daemon: &Daemon, realm: &str) -> SprayStatusResponse {
    let mut admin = AdminClient::connect(format!("http://{}", daemon.addr)).await.unwrap();
    admin.spray_status(SprayStatusRequest { realm: realm.into() }).await.unwrap().into_inner()
}

/// 500 accounts (half known with another password, half unknown), each tried once with
/// [`SPRAYED`] from its own client key. Returns how many distinct accounts had been
/// tried when the first answer carried `spray_suspected`, and checks every later one
/// does; then a correct login with the sprayed password is accepted, flagged.
async fn spray_500(c: &mut Client) -> usize {
    let other = hash_of(b"a password nobody sprays");
    let mut tripped = None;
    for i in 0..500 {
        let stored = if i % 2 == 0 { other.as_str() } else { "" };
        let id = format!("user{i}@example.com");
        let r = c.verify("sprayed", &id, SPRAYED, stored, &format!("198.51.100.{i}")).await;
        let r = r.unwrap();
        assert_eq!(r.verdict(), Verdict::Reject);
        match tripped {
            None if r.spray_suspected => tripped = Some(i + 1),
            Some(_) => assert!(r.spray_suspected, "attempt {} was not flagged", i + 1),
            None => {}
        }
    }
    let tripped = tripped.expect("500 sprayed accounts never tripped the signal");
    // The user whose password it really is logs in: accepted, and flagged.
    let r = c.verify("sprayed", "owner@example.com", SPRAYED, &hash_of(SPRAYED), "owner").await;
    let r = r.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    assert!(r.spray_suspected, "a correct login with the sprayed password was not flagged");
    // Another password in the same realm is not.
    let mine = b"my own long passphrase";
    let r = c.verify("sprayed", "someone@example.com", mine, &hash_of(mine), "x").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    assert!(!r.spray_suspected);
    tripped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sprayed_password_trips_the_signal_near_the_threshold_on_redis() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(redis_settings(&redis)).await;
    let mut c = daemon.client().await;
    // The first flagged call is the one after the threshold's worth of failures.
    let tripped = spray_500(&mut c).await;
    let first = THRESHOLD + 1;
    assert!(
        (first - ESTIMATOR_MARGIN..=first + ESTIMATOR_MARGIN).contains(&tripped),
        "first flagged at account {tripped}, threshold {THRESHOLD} (+1) ± {ESTIMATOR_MARGIN}"
    );
    let status = spray_status(&daemon, "sprayed").await;
    assert_eq!(status.fingerprints_over_threshold, 1);
    assert_eq!(status.episodes.len(), 1);
    assert!(status.episodes[0].began_unix_ms > 0 && status.episodes[0].ended_unix_ms == 0);
    assert_eq!(spray_status(&daemon, "tight").await, SprayStatusResponse::default());

    // Nothing stored holds an identifier or the password, and every key expires.
    let mut conn = redis.conn();
    let mut secrets: Vec<String> = (0..500).map(|i| format!("user{i}")).collect();
    secrets.extend(["owner".into(), String::from_utf8(SPRAYED.to_vec()).unwrap()]);
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    assert_store_clean(&mut conn, &secrets);
    // The spray keys: one fingerprint's (plus the correct logins' own) and nothing else.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*{spray:*").query(&mut conn).unwrap();
    assert!(!keys.is_empty() && keys.len() <= 3 * 5, "{keys:?}");
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sprayed_password_trips_the_signal_at_the_threshold_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let settings = load(&TestConfig::embedded(&data).extra(SPRAY_REALMS).toml());
    let daemon = Daemon::start(settings).await;
    let mut c = daemon.client().await;
    let first = spray_500(&mut c).await;
    assert_eq!(first, THRESHOLD + 1, "the embedded store counts exactly");
    daemon.shutdown().await;
    // Nothing in the database file holds an identifier or the password.
    let bytes = std::fs::read(data.join("portcullis.redb")).unwrap();
    let text = String::from_utf8_lossy(&bytes).to_lowercase();
    for needle in ["user1@", "user499", "owner@", "example.com", "winter2026"] {
        assert!(!text.contains(needle), "the database holds {needle:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_failed_logins_with_random_passwords_never_trip_it() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(redis_settings(&redis)).await;
    let client = daemon.client().await;
    let hash = hash_of(b"the real password");
    // 8 callers, 625 logins each: 10 per account over 500 accounts, each password new.
    let callers: Vec<_> = (0..8)
        .map(|t| {
            let mut c = client.clone();
            let hash = hash.clone();
            tokio::spawn(async move {
                let mut flagged = 0;
                for n in 0..625 {
                    let i = t * 625 + n;
                    let id = format!("user{}@example.com", i % 500);
                    let password = uuid::Uuid::new_v4().to_string();
                    let stored = if i % 3 == 0 { "" } else { hash.as_str() };
                    let client_key = format!("203.0.113.{}", i % 250);
                    let r = c.verify("tight", &id, password.as_bytes(), stored, &client_key).await;
                    let r = r.unwrap();
                    assert_eq!(r.verdict(), Verdict::Reject);
                    flagged += usize::from(r.spray_suspected);
                }
                flagged
            })
        })
        .collect();
    let mut flagged = 0;
    for caller in callers {
        flagged += caller.await.unwrap();
    }
    assert_eq!(flagged, 0, "random passwords tripped the spray signal");
    let status = spray_status(&daemon, "tight").await;
    assert_eq!(status.fingerprints_over_threshold, 0);
    assert!(status.episodes.is_empty());
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reject_action_refuses_a_sprayed_password_without_hashing() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(redis_settings(&redis)).await;
    let mut c = daemon.client().await;
    let owner_hash = hash_of(SPRAYED);
    // Before any spraying the owner logs in.
    let r = c.verify("tight", "owner@example.com", SPRAYED, &owner_hash, "owner").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    assert!(!r.spray_suspected);
    for i in 0..10 {
        let id = format!("victim{i}@example.com");
        c.verify("tight", &id, SPRAYED, "", &format!("192.0.2.{i}")).await.unwrap();
    }
    let before = daemon.budget().comparisons;
    let r = c.verify("tight", "owner@example.com", SPRAYED, &owner_hash, "owner").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Reject, "a sprayed password was compared in a reject realm");
    assert!(r.spray_suspected);
    assert_eq!(daemon.budget().comparisons, before, "the refused comparison was hashed");
    // Other passwords in the realm are compared as usual.
    let mine = b"my own long passphrase";
    let r = c.verify("tight", "someone@example.com", mine, &hash_of(mine), "x").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_real_failed_comparisons_count_and_no_answer_tells_an_accounts_own_history() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(redis_settings(&redis)).await;
    let mut c = daemon.client().await;
    let hash = hash_of(b"the real password");
    // Nine accounts fail with the sprayed password: one below the threshold of `tight`.
    for i in 0..9 {
        let r = c.verify("tight", &format!("a{i}@example.com"), SPRAYED, &hash, "s").await;
        assert!(!r.unwrap().spray_suspected);
    }
    // A locked account tried with it behind its closed door: no comparison, no note.
    for n in 0..5 {
        c.verify("tight", "locked@example.com", format!("x{n}").as_bytes(), &hash, "l")
            .await
            .unwrap();
    }
    for _ in 0..5 {
        let r = c.verify("tight", "locked@example.com", SPRAYED, &hash, "l").await.unwrap();
        assert!(!r.spray_suspected, "closed doors noted the sprayed password");
    }
    // An account already counted and a fresh one get the same answer.
    let again = c.verify("tight", "a0@example.com", SPRAYED, &hash, "s").await.unwrap();
    let fresh = c.verify("tight", "fresh@example.com", SPRAYED, &hash, "s").await.unwrap();
    assert_eq!(again, fresh, "the answer told whether the account was counted before");
    // The fresh account's failure was the tenth: the next call is flagged.
    let next = c.verify("tight", "next@example.com", SPRAYED, &hash, "s").await.unwrap();
    assert!(next.spray_suspected);
    daemon.shutdown().await;
}

#[tokio::test]
async fn spray_episodes_are_logged_by_realm_alone() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn(
        &TestConfig::embedded(&dir.path().join("data")).extra(SPRAY_REALMS).toml(),
    );
    let mut c = daemon.client().await;
    for i in 0..12 {
        let id = format!("sprayed.user{i}@example.com");
        let r = c.verify("tight", &id, SPRAYED, "", &format!("192.0.2.{i}")).await.unwrap();
        // Ten failures before it: the eleventh call is the first flagged.
        assert_eq!(r.spray_suspected, i >= 10, "attempt {}", i + 1);
    }
    // The operator client: exit 1 while a realm is being sprayed, 0 otherwise.
    let status = |realm: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["spray-status", "--realm", realm, "--addr"])
            .arg(format!("http://{}", daemon.addr))
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = status("tight");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("fingerprints_over_threshold: 1") && out.contains("ended ongoing"),
        "{out}"
    );
    let (code, out) = status("sprayed");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "fingerprints_over_threshold: 0\n");
    let logs = daemon.logs();
    assert_eq!(logs.matches("password-spray episode began").count(), 1, "{logs}");
    assert!(logs.contains("tight"), "{logs}");
    for needle in ["sprayed.user", "example.com", "Winter2026"] {
        assert!(!logs.contains(needle), "a log line holds {needle:?}");
    }
}

#[tokio::test]
async fn a_spray_call_that_fails_is_a_deny_even_for_the_right_password() {
    // The check fails on every call, the right password's included; the failure note
    // after a wrong password.
    for (fail, password) in
        [(SprayNote::Check, SPRAYED), (SprayNote::Failure, b"a wrong password".as_slice())]
    {
        let dir = tempfile::tempdir().unwrap();
        let settings =
            load(&TestConfig::embedded(&dir.path().join("cfg")).extra(SPRAY_REALMS).toml());
        let inner = EmbeddedStore::open(
            &dir.path().join("data"),
            std::time::Duration::from_secs(2),
            Arc::new(SystemClock),
        )
        .unwrap();
        let store: Arc<dyn Store> =
            Arc::new(FaultyStore { inner: Arc::new(inner), fail: Fault::Spray(fail) });
        let service = governor_over(store, settings);
        let request = VerifyRequest {
            account: account("sprayed", "owner@example.com"),
            password: password.to_vec(),
            stored_hash: hash_of(SPRAYED),
            client_key: "owner".into(),
            attempt_id: String::new(),
            device_token: String::new(),
        };
        let mut request = tonic::Request::new(request);
        request.extensions_mut().insert(portcullis::auth::Authorization::Open);
        let status = service.verify(request).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{fail:?}: {status:?}");
    }
}

#[tokio::test]
async fn spray_status_needs_its_rpc_and_the_realm() {
    let denied = |r: Result<tonic::Response<SprayStatusResponse>, tonic::Status>, what: &str| {
        let status = r.err().unwrap_or_else(|| panic!("{what} was allowed"));
        assert_eq!(status.code(), Code::PermissionDenied, "{what}: {}", status.message());
    };
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789";
    const WATCHER_TOKEN: &str = "watcher-token-0123456789abcdef0123456789";
    let token_file = |name: &str, token: &str| {
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
        portcullis_test_support::pki::write(dir.path(), name, &format!("{hash}\n"))
    };
    let callers = format!(
        r#"
[callers.helpdesk]
token_hash_file = {:?}
rpcs = ["Inspect", "Unlock"]
realms = ["*"]
[callers.spray-watch]
token_hash_file = {:?}
rpcs = ["SprayStatus"]
realms = ["fast"]
"#,
        token_file("ops.sha256", OPERATOR_TOKEN),
        token_file("watch.sha256", WATCHER_TOKEN),
    );
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(&callers).settings()).await;
    let status = |realm: &str| SprayStatusRequest { realm: realm.into() };
    // Inspect and Unlock do not include SprayStatus.
    let mut ops = caller(daemon.addr, None, Some(OPERATOR_TOKEN)).await.unwrap();
    denied(ops.admin.spray_status(status("default")).await, "SprayStatus without the RPC");
    let mut watch = caller(daemon.addr, None, Some(WATCHER_TOKEN)).await.unwrap();
    denied(watch.admin.spray_status(status("default")).await, "SprayStatus on another realm");
    assert!(watch.admin.spray_status(status("fast")).await.is_ok());
    // Bad realms are bad arguments, naming the field.
    for realm in ["", "nonexistent", "FAST", "fast "] {
        let e = watch.admin.spray_status(status(realm)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{realm:?}: {e:?}");
        assert!(e.message().contains("realm"), "{realm:?}: {e:?}");
    }
    // Strangers are not told anything.
    let mut stranger = caller(daemon.addr, None, Some("not-a-token")).await.unwrap();
    let e = stranger.admin.spray_status(status("fast")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert_eq!(dbsize(&mut redis.conn()), 0, "SprayStatus touched the store");
    daemon.shutdown().await;
}
