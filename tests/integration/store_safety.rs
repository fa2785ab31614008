//! Store safety: a Redis that may evict lockout records is refused (at start-up, naming
//! the policy, and while serving), unless `store.allow_eviction` says otherwise; an
//! out-of-memory Redis denies; `store.wait_replicas` answers a counted attempt only after
//! a replica confirmed it, and denies when none does.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use portcullis::pb::Decision;
use portcullis_test_support::*;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

fn config_set(redis: &RedisServer, name: &str, value: &str) {
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut redis.conn()).unwrap();
}

/// Runs `portcullis serve` on `config` and expects it to refuse to start: exit status 2
/// within 10 s. Returns its stderr.
fn refused_start(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the daemon started on an evicting Redis");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn an_evicting_policy_refuses_to_start_naming_the_policy() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let redis = RedisServer::start();
        config_set(&redis, "maxmemory-policy", policy);
        let stderr = refused_start(&TestConfig::redis(&redis.url()).toml());
        assert!(
            stderr.contains("refusing to start") && stderr.contains(policy),
            "the refusal does not name {policy}: {stderr}"
        );
        assert!(stderr.contains("store.allow_eviction"), "{stderr}");
    }
}

#[tokio::test]
async fn the_eviction_override_serves_with_a_warning() {
    let redis = RedisServer::start();
    config_set(&redis, "maxmemory-policy", "allkeys-lru");
    let daemon = DaemonProcess::spawn(
        &TestConfig::redis(&redis.url()).extra("allow_eviction = true").toml(),
    );
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "evict@example.com").await.unwrap(), Decision::Allow);
    let logs = daemon.logs();
    assert!(
        logs.contains("WARN") && logs.contains("allkeys-lru") && logs.contains("allow_eviction"),
        "no warning naming the policy: {logs}"
    );
}

async fn health(addr: std::net::SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(CALL_DEADLINE)
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn wait_for_health(h: &mut HealthClient<tonic::transport::Channel>, want: ServingStatus) {
    for _ in 0..100 {
        let req = HealthCheckRequest { service: portcullis::SERVICE_NAME.into() };
        if h.check(req).await.unwrap().into_inner().status() == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("health never became {want:?}");
}

#[tokio::test]
async fn a_policy_turned_evicting_while_serving_denies_until_reverted() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut h = health(daemon.addr).await;
    wait_for_health(&mut h, ServingStatus::Serving).await;
    let mut c = daemon.client().await;
    c.attempt("default", "turned@example.com").await.unwrap();

    config_set(&redis, "maxmemory-policy", "volatile-lru");
    wait_for_health(&mut h, ServingStatus::NotServing).await;
    for _ in 0..3 {
        let e = c.attempt("default", "turned@example.com").await.expect_err("counted anyway");
        assert_eq!(e.code(), Code::Unavailable);
        let e = c.admit("default", "turned@example.com").await.expect_err("admitted anyway");
        assert_eq!(e.code(), Code::Unavailable);
    }

    config_set(&redis, "maxmemory-policy", "noeviction");
    wait_for_health(&mut h, ServingStatus::Serving).await;
    c.attempt("default", "turned@example.com").await.unwrap();
    daemon.shutdown().await;
}

#[tokio::test]
async fn out_of_memory_on_a_write_denies() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "oom@example.com").await.unwrap(), Decision::Allow);
    // Below what Redis already uses: every write is refused with OOM (noeviction).
    config_set(&redis, "maxmemory", "1");
    for _ in 0..3 {
        let e = c.attempt("default", "oom@example.com").await.expect_err("counted under OOM");
        assert_eq!(e.code(), Code::Unavailable);
    }
    config_set(&redis, "maxmemory", "0");
    assert_eq!(c.attempt("default", "oom@example.com").await.unwrap(), Decision::Allow);
    daemon.shutdown().await;
}

/// Makes `replica` a replica of `master` and waits until it is in sync.
fn replicate(replica: &RedisServer, master: &RedisServer) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut replica.conn())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String =
            redis::cmd("INFO").arg("replication").query(&mut replica.conn()).unwrap();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn wait_replicas_answers_after_a_replica_confirms_and_denies_without_one() {
    let master = RedisServer::start();
    let mut replica = RedisServer::start();
    replicate(&replica, &master);
    let daemon = Daemon::start(
        TestConfig::redis(&master.url())
            .extra("wait_replicas = 1\nwait_timeout = \"100ms\"")
            .settings(),
    )
    .await;
    let mut c = daemon.client().await;
    let id = "waited@example.com";
    for _ in 0..3 {
        assert_eq!(c.attempt("default", id).await.unwrap(), Decision::Allow);
    }
    // Confirmed means on the replica when the answer arrives.
    let key = record_key("default", portcullis::normalize::Normalization::Email, id);
    assert_eq!(read_record(&mut replica.conn(), &key).unwrap().0, 3);

    // No replica left to confirm: counted attempts fail closed.
    replica.stop();
    for _ in 0..3 {
        let e = c.attempt("default", id).await.expect_err("answered without a replica");
        assert_eq!(e.code(), Code::Unavailable);
    }
    daemon.shutdown().await;
}

/// A flood of made-up identifiers does not fill a `noeviction` Redis (docs/store.md,
/// "What a record costs"): each costs one record that lives for the realm's retention
/// after its attempt (the ceiling's count needs it), and no longer. A 12 MB Redis holds
/// about 54,000 records (measured: the same flood with an hour's retention is refused
/// from there on); with a 1.5-second retention, about 15,000 live at a time, it takes
/// 80,000 made-up identifiers in eight seconds and keeps absorbing, with no operation
/// refused (an OOM answer would be UNAVAILABLE, every login denied). The live set is a
/// quarter of what fits, so expiry lagging on a loaded machine does not fill it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_identifiers_does_not_fill_a_noeviction_redis() {
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::secret::KeySecret;
    use portcullis::store::attempt_count::AttemptCountStore;
    use portcullis::store::keys::AccountKey;
    let redis = RedisServer::start();
    config_set(&redis, "maxmemory", "12mb");
    config_set(&redis, "maxmemory-policy", "noeviction");
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    let store = std::sync::Arc::new(
        portcullis::store::redis::RedisStore::new(&redis.url(), Duration::from_secs(5), 4).unwrap(),
    );
    let policy = portcullis::throttle::Policy {
        max_failures: 5,
        first_window: Duration::from_secs(1),
        max_window: Duration::from_secs(1),
        retention: Duration::from_millis(1500),
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(1),
        second_factor_required: false,
    };
    const TOTAL: usize = 80_000;
    const TASKS: usize = 32;
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, secret) = (store.clone(), secret.clone());
            tokio::spawn(async move {
                let mut errors = 0;
                for n in (t..TOTAL).step_by(TASKS) {
                    // Ten thousand a second, spread over the eight seconds.
                    let due = started + Duration::from_micros(n as u64 * 100);
                    tokio::time::sleep_until(due.into()).await;
                    let id = normalize(Normalization::Exact, &format!("made-up-{n}")).unwrap();
                    let key = AccountKey::new(&secret, "default", &id);
                    if store.record_attempt(&key, None, &policy).await.is_err() {
                        errors += 1;
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = 0;
    for task in tasks {
        errors += task.await.unwrap();
    }
    assert_eq!(errors, 0, "the flood filled the Redis: operations were refused");
    let keys = dbsize(&mut redis.conn());
    assert!(keys < 30_000, "{keys} records left: they do not expire with their retention");
    // A real user still counts.
    let id = normalize(Normalization::Exact, "real-user").unwrap();
    let key = AccountKey::new(&secret, "default", &id);
    assert!(store.record_attempt(&key, None, &policy).await.unwrap().allowed);
}
