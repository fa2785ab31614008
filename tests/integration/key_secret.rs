//! One key secret per store (docs/store.md, "One key secret per store"): a daemon whose
//! key secret is not the one its store was first used with would count every account
//! afresh, a second allowance. It must refuse to serve instead (not ready, every call
//! `UNAVAILABLE`, a log line naming the setting and what to do), on every store shape,
//! at start and on every reconnect; rotation is the operator's explicit
//! `portcullis adopt-key-secret`.

use std::process::Command;
use std::time::{Duration, Instant};

use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::Decision;
use portcullis::secret::KeySecret;
use portcullis::store::Store;
use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::error::StoreError;
use portcullis::store::keys::AccountKey;
use portcullis::store::keys::KEY_CHECK;
use portcullis::store::redis::RedisStore;
use portcullis::throttle::Policy;
use portcullis_test_support::*;

/// Another daemon's key secret: long enough, and not [`SECRET`].
const OTHER_SECRET: &str = "another-secret-0123456789abcdef0123456789";

/// What every refusing daemon's log line must name.
const NAMES: [&str; 3] = ["store.key_secret_file", "PORTCULLIS_KEY_SECRET", "adopt-key-secret"];

/// Polls `/readyz` until it answers `status` (10 s at most); a 503 must say why.
async fn wait_ready(d: &DaemonProcess, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (got, body) = http_get(d.admin_addr(), "/readyz").await.expect("/readyz answers");
        if got == status && (status == 200 || body.contains("keyed by another key secret")) {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {got} ({body:?}), wanted {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Locks `victim` through `d`: five attempts allowed, the sixth denied.
async fn lock(d: &DaemonProcess, victim: &str) {
    let mut c = d.client().await;
    for _ in 0..5 {
        assert_eq!(c.attempt("default", victim).await.unwrap(), Decision::Allow);
    }
    assert_eq!(c.attempt("default", victim).await.unwrap(), Decision::Deny);
}

/// A daemon keyed otherwise on a store `first` already serves: it never serves (not
/// ready, its calls `UNAVAILABLE`, one log line naming the settings), and the first
/// keeps the lockout it counted.
async fn another_secret_is_refused(store_toml: &str) {
    let config = TestConfig::store(store_toml).admin("0s").toml();
    let first = DaemonProcess::spawn(&config);
    wait_ready(&first, 200).await;
    let victim = format!("victim-{}@example.com", uuid::Uuid::new_v4());
    lock(&first, &victim).await;

    let other = DaemonProcess::spawn_with_secret(&config, Some(OTHER_SECRET));
    other.wait_for_log("key secret is not the one this store is keyed with", 1).await;
    let logs = other.logs();
    for name in NAMES {
        assert!(logs.contains(name), "the refusal does not name {name}:\n{logs}");
    }
    assert!(!logs.contains(OTHER_SECRET) && !logs.contains(SECRET), "a secret in the logs");
    wait_ready(&other, 503).await;
    let mut c = other.client().await;
    for identifier in [victim.as_str(), "someone-else@example.com"] {
        let status = c.attempt("default", identifier).await.expect_err("never an answer");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
    // Still refused a while later: the readiness check proves again, and fails again,
    // and says so once, not every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(c.attempt("default", &victim).await.unwrap_err().code(), tonic::Code::Unavailable);
    // The health check's line (operations' own failures are logged apart, per call).
    let said = other.logs().matches("store: this daemon's key secret is not the one").count();
    assert_eq!(said, 1, "{}", other.logs());

    // ConfirmDevice too: its challenge is never checked with a key secret the store
    // refused, so the gateway is told the daemon is unavailable, not that the user's
    // challenge is bad.
    let confirm = portcullis::pb::ConfirmDeviceRequest {
        account: Some(portcullis::pb::Account {
            realm: "default".into(),
            identifier: victim.clone(),
        }),
        challenge_token: "a-challenge-token".into(),
        stored_hash: "$2b$04$abcdefghijklmnopqrstuu5/8kC1nCaC3YXYaNVXJl2dnCoMsZaFW".into(),
    };
    let status = c.0.confirm_device(confirm).await.expect_err("never an answer");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    let mut c = first.client().await;
    assert_eq!(c.attempt("default", &victim).await.unwrap(), Decision::Deny);
    wait_ready(&first, 200).await;
}

#[tokio::test]
async fn another_key_secret_is_refused_on_a_standalone_redis() {
    let redis = RedisServer::start();
    another_secret_is_refused(&format!("redis_url = \"{}\"", redis.url())).await;
}

#[tokio::test]
async fn another_key_secret_is_refused_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    another_secret_is_refused(&format!("redis_cluster_nodes = {}", cluster.nodes_toml())).await;
}

#[tokio::test]
async fn another_key_secret_is_refused_behind_sentinels() {
    let sentinels = SentinelGroup::start();
    another_secret_is_refused(&sentinels.sentinel_toml()).await;
}

/// `portcullis adopt-key-secret` against `redis_url` with `secret` and `flags`.
fn adopt(redis_url: &str, secret: &str, flags: &[&str]) -> std::process::Output {
    Command::new(daemon_binary())
        .args(["adopt-key-secret", "--redis-url", redis_url])
        .args(flags)
        .env("PORTCULLIS_KEY_SECRET", secret)
        .env_remove("PORTCULLIS_CONFIG")
        .output()
        .unwrap()
}

#[tokio::test]
async fn rotation_is_an_explicit_operator_step() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).admin("0s").toml();
    let old = DaemonProcess::spawn(&config);
    wait_ready(&old, 200).await;
    let new = DaemonProcess::spawn_with_secret(&config, Some(OTHER_SECRET));
    wait_ready(&new, 503).await;

    // Without the acknowledgement nothing changes, and the message says what it would do.
    let refused = adopt(&redis.url(), OTHER_SECRET, &[]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--forget-counts") && said.contains("forgotten"), "{said}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    wait_ready(&old, 200).await;
    wait_ready(&new, 503).await;

    // While the store is rotated, never do both daemons answer: the store is closed to
    // every secret first. Sampled every few ms, one call to each daemon in turn.
    let url = redis.url();
    let rotation = std::thread::spawn(move || adopt(&url, OTHER_SECRET, &["--forget-counts"]));
    let (mut c_old, mut c_new) = (old.client().await, new.client().await);
    let (mut old_answers, mut new_answers) = (0, 0);
    for i in 0.. {
        let id = format!("during-{i}@example.com");
        let old_answered = c_old.attempt("default", &id).await.is_ok();
        let new_answered = c_new.attempt("default", &id).await.is_ok();
        assert!(!(old_answered && new_answered), "both secrets served at sample {i}");
        old_answers += usize::from(old_answered);
        new_answers += usize::from(new_answered);
        if rotation.is_finished() && new_answered {
            break;
        }
        assert!(i < 5000, "the new secret never served");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(old_answers > 0 && new_answers > 0, "{old_answers} {new_answers}");
    let done = rotation.join().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(said.contains("Redis at redis://127.0.0.1:") && said.contains("closing"), "{said}");
    // The new secret serves, the old one stops: never both.
    wait_ready(&new, 200).await;
    wait_ready(&old, 503).await;
    let mut c = new.client().await;
    assert_eq!(c.attempt("default", "rotated@example.com").await.unwrap(), Decision::Allow);
    let mut c = old.client().await;
    let status = c.attempt("default", "rotated@example.com").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    old.wait_for_log("key secret is not the one this store is keyed with", 1).await;
    new.wait_for_log("the key check holds again", 1).await;
}

/// A store's calls after its connection was dropped and the store's value changed
/// meanwhile: the new connection proves the secret before any call uses it, so not one
/// call is answered, even before the next readiness check.
#[tokio::test]
async fn a_reconnect_proves_the_key_secret_before_it_is_used() {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 2)
        .unwrap()
        .with_key_check(KeySecret::new(SECRET.into()).store_check());
    store.ready().await.expect("the first daemon writes its value");
    let mut conn = redis.conn();
    let held: String = redis::cmd("GET").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert_eq!(held, KeySecret::new(SECRET.into()).store_check().as_str());
    assert!(!held.contains(SECRET), "the check value is not the secret");

    let identifier = normalize(Normalization::Email, "reconnect@example.com").unwrap();
    let key = AccountKey::new(&KeySecret::new(SECRET.into()), "default", &identifier);
    let policy = Policy {
        max_failures: 5,
        first_window: Duration::from_secs(15 * 60),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(24 * 3600),
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(15 * 60),
        second_factor_required: false,
    };
    store.record_attempt(&key, None, &policy).await.expect("proven: it counts");

    // Another daemon's value, then every connection dropped (a restart, a failover).
    let other = KeySecret::new(OTHER_SECRET.into()).store_check();
    let _: () = redis::cmd("SET").arg(KEY_CHECK).arg(other.as_str()).query(&mut conn).unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut conn)
        .or_else(|_| Ok::<(), redis::RedisError>(()))
        .unwrap();
    let mut refused = 0;
    for _ in 0..5 {
        match store.record_attempt(&key, None, &policy).await {
            Ok(counted) => panic!("counted under another key secret: {counted:?}"),
            Err(StoreError::KeySecretMismatch) => refused += 1,
            // The call that found its connection dropped.
            Err(_) => {}
        }
    }
    assert!(refused >= 4, "refused {refused} of 5 for the key secret");
    assert!(matches!(store.ready().await, Err(StoreError::KeySecretMismatch)));
}

/// The embedded store keeps its check value in its database: a daemon started on it
/// with another key secret stops at start, naming the settings; after
/// `adopt-key-secret` (daemon stopped) it serves.
#[tokio::test]
async fn the_embedded_store_refuses_another_key_secret_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config_path = dir.path().join("portcullis.toml");
    std::fs::write(&config_path, TestConfig::embedded(&data).toml()).unwrap();
    let first = DaemonProcess::spawn(&TestConfig::embedded(&data).toml());
    lock(&first, "embedded@example.com").await;
    first.terminate().await;

    // A daemon that serves (the fault this guards against) is stopped after 10 s and
    // reported as having started.
    let serve = |secret: &str| {
        let mut child = Command::new(daemon_binary())
            .args(["serve", "--config"])
            .arg(&config_path)
            .env("PORTCULLIS_KEY_SECRET", secret)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("the daemon served under another key secret");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    let refused = serve(OTHER_SECRET);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    for name in NAMES {
        assert!(said.contains(name), "the refusal does not name {name}:\n{said}");
    }

    let adopt = Command::new(daemon_binary())
        .args(["adopt-key-secret", "--forget-counts", "--config"])
        .arg(&config_path)
        .env("PORTCULLIS_KEY_SECRET", OTHER_SECRET)
        .output()
        .unwrap();
    assert!(adopt.status.success(), "{}", String::from_utf8_lossy(&adopt.stderr));
    let second =
        DaemonProcess::spawn_with_secret(&TestConfig::embedded(&data).toml(), Some(OTHER_SECRET));
    let mut c = second.client().await;
    assert_eq!(c.attempt("default", "embedded@example.com").await.unwrap(), Decision::Allow);
    second.terminate().await;
    // The first secret is now the other one.
    assert!(!serve(SECRET).status.success());
}

/// Both modes of the script on an empty store, then with a value: `prove` writes only
/// when absent, `adopt` always (the script's worked example).
#[tokio::test]
async fn the_key_check_script_follows_its_worked_example() {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 1).unwrap();
    let ours = KeySecret::new(SECRET.into()).store_check();
    let theirs = KeySecret::new(OTHER_SECRET.into()).store_check();
    let mut conn = redis.conn();
    let held = |conn: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(KEY_CHECK).query(conn).unwrap()
    };
    assert_eq!(held(&mut conn), None);
    let proven = RedisStore::new(&redis.url(), Duration::from_secs(2), 1)
        .unwrap()
        .with_key_check(ours.clone());
    proven.ready().await.unwrap();
    assert_eq!(held(&mut conn).as_deref(), Some(ours.as_str()));
    let ttl: i64 = redis::cmd("PTTL").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert_eq!(ttl, -1, "the check value never expires");
    store.adopt_key_check(&theirs).await.unwrap();
    assert_eq!(held(&mut conn).as_deref(), Some(theirs.as_str()));
    assert!(matches!(proven.ready().await, Err(StoreError::KeySecretMismatch)));
}

/// Redis answers the key check with something no daemon wrote (another type there):
/// a serving daemon refuses from its next check, rather than serving on.
#[tokio::test]
async fn a_key_check_of_another_type_refuses_a_serving_daemon() {
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 1)
        .unwrap()
        .with_key_check(KeySecret::new(SECRET.into()).store_check());
    store.ready().await.unwrap();
    let mut conn = redis.conn();
    let _: () = redis::cmd("DEL").arg(KEY_CHECK).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET").arg(KEY_CHECK).arg("a").arg("b").query(&mut conn).unwrap();
    assert!(matches!(store.ready().await, Err(StoreError::KeySecretMismatch)));
    let key = AccountKey::new(
        &KeySecret::new(SECRET.into()),
        "default",
        &normalize(Normalization::Email, "wrongtype@example.com").unwrap(),
    );
    let policy = Policy {
        max_failures: 5,
        first_window: Duration::from_secs(900),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(86_400),
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(900),
        second_factor_required: false,
    };
    assert!(matches!(
        store.record_attempt(&key, None, &policy).await,
        Err(StoreError::KeySecretMismatch)
    ));
}

/// A daemon that was refused never claims the store when its value vanishes (a `DEL`,
/// a flush): the daemons that proved it before write it back, the refused one keeps
/// refusing.
#[tokio::test]
async fn a_refused_daemon_never_claims_a_store_whose_value_vanished() {
    let redis = RedisServer::start();
    let open = |secret: &str| {
        RedisStore::new(&redis.url(), Duration::from_secs(2), 1)
            .unwrap()
            .with_key_check(KeySecret::new(secret.into()).store_check())
    };
    let (ours, theirs) = (open(SECRET), open(OTHER_SECRET));
    ours.ready().await.unwrap();
    assert!(matches!(theirs.ready().await, Err(StoreError::KeySecretMismatch)));
    let mut conn = redis.conn();
    let _: () = redis::cmd("DEL").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert!(matches!(theirs.ready().await, Err(StoreError::KeySecretMismatch)));
    let held: Option<String> = redis::cmd("GET").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert_eq!(held, None, "the refused daemon wrote its value");
    ours.ready().await.unwrap();
    assert!(matches!(theirs.ready().await, Err(StoreError::KeySecretMismatch)));
}

/// A daemon that finds the store empty at start (a flush just before it started) waits
/// `store.key_check_claim_wait` for the daemons serving the store to write their value
/// back: keyed otherwise, it is then refused instead of claiming the store and making
/// the fleet unready. Alone, it claims the store once the wait is over.
#[tokio::test]
async fn a_new_daemon_on_an_emptied_store_lets_the_fleet_write_its_value_first() {
    let redis = RedisServer::start();
    let open = |secret: &str, wait_ms: u64| {
        RedisStore::new(&redis.url(), Duration::from_secs(2), 1)
            .unwrap()
            .with_key_check(KeySecret::new(secret.into()).store_check())
            .with_claim_wait(Duration::from_millis(wait_ms))
    };
    let ours = open(SECRET, 0);
    ours.ready().await.unwrap();
    let mut conn = redis.conn();
    let _: () = redis::cmd("DEL").arg(KEY_CHECK).query(&mut conn).unwrap();
    let newcomer = open(OTHER_SECRET, 60_000);
    for _ in 0..3 {
        let early = newcomer.ready().await;
        assert!(matches!(early, Err(StoreError::KeyCheckPending)), "{early:?}");
    }
    let held: Option<String> = redis::cmd("GET").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert_eq!(held, None, "the newcomer claimed the store before the fleet could");
    let identifier = normalize(Normalization::Email, "a@example.com").unwrap();
    let key = AccountKey::new(&KeySecret::new(OTHER_SECRET.into()), "default", &identifier);
    let policy = Policy::default();
    let counted = newcomer.record_attempt(&key, None, &policy).await;
    assert!(matches!(counted, Err(StoreError::KeyCheckPending)), "{counted:?}");
    // The fleet writes its value back at its next readiness check; the newcomer is
    // refused from then on, and the fleet stays ready.
    ours.ready().await.unwrap();
    assert!(matches!(newcomer.ready().await, Err(StoreError::KeySecretMismatch)));
    ours.ready().await.unwrap();

    // Alone on an empty store, a daemon claims it once its wait is over.
    let _: () = redis::cmd("DEL").arg(KEY_CHECK).query(&mut conn).unwrap();
    let alone = open(SECRET, 300);
    assert!(matches!(alone.ready().await, Err(StoreError::KeyCheckPending)));
    tokio::time::sleep(Duration::from_millis(350)).await;
    alone.ready().await.unwrap();
    let held: Option<String> = redis::cmd("GET").arg(KEY_CHECK).query(&mut conn).unwrap();
    assert!(held.is_some(), "the lone daemon did not claim the store");
}

/// A daemon that cannot take its port exits before it touches the store: an empty
/// store is not claimed by a start that never served.
#[tokio::test]
async fn a_start_that_cannot_listen_writes_no_key_check() {
    let redis = RedisServer::start();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = Command::new(daemon_binary())
        .args(["serve", "--redis-url", &redis.url(), "--admin-listen", ""])
        .args(["--listen", &taken.local_addr().unwrap().to_string()])
        .env("PORTCULLIS_KEY_SECRET", OTHER_SECRET)
        .env_remove("PORTCULLIS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let held: Option<String> = redis::cmd("GET").arg(KEY_CHECK).query(&mut redis.conn()).unwrap();
    assert_eq!(held, None);
}

/// `adopt-key-secret` with no store named does not make an embedded store to adopt.
#[test]
fn adopt_without_a_store_adopts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(daemon_binary())
        .args(["adopt-key-secret", "--forget-counts"])
        .current_dir(dir.path())
        .env("PORTCULLIS_KEY_SECRET", OTHER_SECRET)
        .env_remove("PORTCULLIS_CONFIG")
        .env_remove("PORTCULLIS_REDIS_URL")
        .env_remove("PORTCULLIS_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("nothing to adopt") && said.contains("--redis-url"), "{said}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "it made a store");
}

/// Rotation on Redis closes the store to every key secret (a value no secret gives) for
/// three readiness checks before it opens it to the new one: every daemon on the old
/// secret has stopped before any on the new one starts.
#[tokio::test]
async fn rotation_closes_the_store_before_it_opens_it() {
    let redis = RedisServer::start();
    let old = RedisStore::new(&redis.url(), Duration::from_secs(2), 1)
        .unwrap()
        .with_key_check(KeySecret::new(SECRET.into()).store_check());
    old.ready().await.unwrap();
    let new = KeySecret::new(OTHER_SECRET.into()).store_check();
    let operator = RedisStore::new(&redis.url(), Duration::from_secs(2), 1).unwrap();
    let started = Instant::now();
    let rotation = tokio::spawn(async move { operator.adopt_key_check(&new).await });
    let mut conn = redis.conn();
    let (mut closed_at, mut opened_at) = (None, None);
    while opened_at.is_none() {
        let held: String = redis::cmd("GET").arg(KEY_CHECK).query(&mut conn).unwrap();
        if held == "0".repeat(64) {
            closed_at.get_or_insert(started.elapsed());
        } else if held == KeySecret::new(OTHER_SECRET.into()).store_check().as_str() {
            opened_at = Some(started.elapsed());
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the rotation never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rotation.await.unwrap().unwrap();
    let (closed_at, opened_at) =
        (closed_at.expect("the store was never closed"), opened_at.unwrap());
    assert!(opened_at - closed_at >= Duration::from_millis(2900), "{closed_at:?} {opened_at:?}");
    assert!(matches!(old.ready().await, Err(StoreError::KeySecretMismatch)));
}

/// A key secret file others (or a group not the daemon's) can read starts the daemon
/// with one warning naming the file and what to do, never the secret; a file only its
/// owner, or its owner and the daemon's own group, reads (a Kubernetes Secret volume,
/// 0440 under `fsGroup`) gets none.
#[cfg(unix)]
#[tokio::test]
async fn a_secret_file_others_can_read_is_warned_about_once() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let own = std::fs::metadata(dir.path()).unwrap().gid();
    // (mode, group, warned); another group only where this test may give the file one.
    let mut cases = vec![(0o644u32, own, true), (0o600, own, false), (0o440, own, false)];
    let probe = dir.path().join("probe");
    std::fs::write(&probe, "").unwrap();
    if std::os::unix::fs::chown(&probe, None, Some(own + 1)).is_ok() {
        cases.push((0o440, own + 1, true));
    }
    for (n, (mode, group, warn)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("key_secret{n}"));
        std::fs::write(&file, format!("{SECRET}\n")).unwrap();
        std::os::unix::fs::chown(&file, None, Some(group)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let config = TestConfig::embedded(&dir.path().join(format!("data{n}")))
            .extra(&format!("key_secret_file = {:?}\n", file.display().to_string()))
            .toml();
        let d = DaemonProcess::spawn_with_secret(&config, None);
        let logs = d.logs();
        let warned = logs.matches("is readable by another group or by others").count();
        assert_eq!(warned, usize::from(warn), "mode {mode:o}, group {group}:\n{logs}");
        if warn {
            assert!(
                logs.contains("chmod 600") && logs.contains(&format!("mode {mode:03o}")),
                "{logs}"
            );
        }
        assert!(!logs.contains(SECRET), "the secret in the logs");
        assert!(d.terminate().await.success());
    }
}
