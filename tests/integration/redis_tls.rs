//! The Redis store over TLS (`rediss://`) in all three shapes, against real TLS
//! `redis-server`s (and `redis-sentinel`s) with certificates made here by rcgen: a
//! private CA from `store.redis_tls_ca_file`, a client certificate for servers that demand
//! one (`tls-auth-clients yes`). Each shape counts exactly as without TLS; a server the CA
//! did not sign, a server that wants a client certificate the daemon lacks, and a plain
//! `redis://` URL to a TLS port all deny (UNAVAILABLE), never allow.

use portcullis::config::{Config, Overrides};
use portcullis::normalize::Normalization;
use portcullis::pb::Decision;
use portcullis_test_support::*;
use tonic::Code;

/// `max_failures` of the `default` realm.
const MAX_FAILURES: u32 = 5;

/// Waits until the daemon reaches its store: its first connection (over TLS, to every
/// cluster node or through the Sentinels) is set up inside a call's 500 ms deadline,
/// which a loaded machine can miss.
/// `Admit` reads only, so its retries count nothing.
async fn reach_store(c: &mut Client) {
    for _ in 0..50 {
        if c.admit("default", "warm-up@example.com").await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the daemon did not reach its store within 10 s");
}

/// Sends `n` attempts on `identifier` one by one; returns how many were allowed.
async fn allowed_of(c: &mut Client, identifier: &str, n: u32) -> u32 {
    let mut allowed = 0;
    for _ in 0..n {
        allowed += u32::from(c.attempt("default", identifier).await.unwrap() == Decision::Allow);
    }
    allowed
}

/// Every call on `daemon` is refused as UNAVAILABLE.
async fn assert_refused(daemon: &Daemon, identifier: &str) {
    let mut c = daemon.client().await;
    for _ in 0..3 {
        let e = c.attempt("default", identifier).await.expect_err("answered without TLS trust");
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    }
    let e = c.admit("default", identifier).await.expect_err("admitted");
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}

/// The configuration error for `config` (a whole TOML file), as text.
fn config_error(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config).unwrap();
    match Config::load(Some(&path), &Overrides::default())
        .and_then(|c| c.validate(Some(SECRET.into())))
    {
        Ok(_) => panic!("configuration accepted"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn standalone_over_mutual_tls_counts_exactly_and_shows_no_key() {
    let tls = RedisTlsFiles::new(true);
    let redis = RedisServer::start_tls(&tls);
    let settings = TestConfig::redis(&redis.tls_url()).extra(&tls.store_toml()).settings();
    let key_pem = std::fs::read_to_string(&tls.client_key_file).unwrap();
    let key_body = key_pem.lines().nth(1).unwrap();
    let shown = format!("{settings:?}");
    assert!(!shown.contains(key_body) && !shown.contains("PRIVATE KEY"), "{shown}");
    let daemon = Daemon::start(settings).await;
    let mut c = daemon.client().await;
    let id = "tls@example.com";
    assert_eq!(allowed_of(&mut c, id, MAX_FAILURES + 3).await, MAX_FAILURES);
    // Counted in this Redis (read back over its plain port).
    let key = record_key("default", Normalization::Email, id);
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, u64::from(MAX_FAILURES + 3));
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_server_the_ca_did_not_sign_is_refused() {
    let tls = RedisTlsFiles::new(false);
    let redis = RedisServer::start_tls(&tls);
    // Trusting another CA.
    let other = RedisTlsFiles::new(false);
    let daemon =
        Daemon::start(TestConfig::redis(&redis.tls_url()).extra(&other.store_toml()).settings())
            .await;
    assert_refused(&daemon, "other-ca@example.com").await;
    daemon.shutdown().await;
    // Trusting the system's roots, which know nothing of the test CA.
    let daemon = Daemon::start(TestConfig::redis(&redis.tls_url()).settings()).await;
    assert_refused(&daemon, "system-roots@example.com").await;
    daemon.shutdown().await;
    assert_eq!(dbsize(&mut redis.conn()), 0, "nothing reached the untrusted server");
}

#[tokio::test]
async fn a_server_that_wants_a_client_certificate_refuses_a_daemon_without_one() {
    let tls = RedisTlsFiles::new(true);
    let redis = RedisServer::start_tls(&tls);
    let ca_only = format!("redis_tls_ca_file = {:?}", tls.ca_file.display().to_string());
    let daemon =
        Daemon::start(TestConfig::redis(&redis.tls_url()).extra(&ca_only).settings()).await;
    assert_refused(&daemon, "no-client-cert@example.com").await;
    daemon.shutdown().await;
    assert_eq!(dbsize(&mut redis.conn()), 0);
}

#[tokio::test]
async fn a_plain_url_to_a_tls_port_fails_closed() {
    let tls = RedisTlsFiles::new(false);
    let redis = RedisServer::start_tls(&tls);
    let plain = format!("redis://127.0.0.1:{}/", redis.tls_port());
    let daemon = Daemon::start(TestConfig::redis(&plain).settings()).await;
    assert_refused(&daemon, "plain@example.com").await;
    daemon.shutdown().await;
    // With TLS files set, a plain URL does not even start.
    let e = config_error(&TestConfig::redis(&plain).extra(&tls.store_toml()).toml());
    assert!(e.contains("store.redis_url") && e.contains("not a rediss://"), "{e}");
}

#[test]
fn tls_settings_are_checked_at_start_up_naming_the_setting() {
    let tls = RedisTlsFiles::new(true);
    let url = "rediss://127.0.0.1:1/";
    let path = |p: &std::path::Path| format!("{:?}", p.display().to_string());
    let e = config_error(
        &TestConfig::redis(url)
            .extra(&format!("redis_tls_cert_file = {}", path(&tls.client_cert_file)))
            .toml(),
    );
    assert!(e.contains("store.redis_tls_key_file"), "{e}");
    let e = config_error(
        &TestConfig::redis(url)
            .extra(&format!("redis_tls_key_file = {}", path(&tls.client_key_file)))
            .toml(),
    );
    assert!(e.contains("store.redis_tls_cert_file"), "{e}");
    // A key that is not the certificate's.
    let e = config_error(
        &TestConfig::redis(url)
            .extra(&format!(
                "redis_tls_cert_file = {}\nredis_tls_key_file = {}",
                path(&tls.client_cert_file),
                path(&tls.key_file)
            ))
            .toml(),
    );
    assert!(e.contains("store.redis_tls_key_file"), "{e}");
    let key_pem = std::fs::read_to_string(&tls.key_file).unwrap();
    assert!(!e.contains(key_pem.lines().nth(1).unwrap()), "{e}");
    // A CA file that holds no certificate (here: a key).
    let e = config_error(
        &TestConfig::redis(url)
            .extra(&format!("redis_tls_ca_file = {}", path(&tls.key_file)))
            .toml(),
    );
    assert!(
        e.contains("store.redis_tls_ca_file") && e.contains("no usable PEM certificate"),
        "{e}"
    );
    let e = config_error(
        &TestConfig::redis(url).extra("redis_tls_ca_file = \"/nonexistent/ca.pem\"").toml(),
    );
    assert!(e.contains("store.redis_tls_ca_file"), "{e}");
    // Verification cannot be switched off.
    let e = config_error(&TestConfig::redis("rediss://127.0.0.1:1/#insecure").toml());
    assert!(e.contains("store.redis_url") && e.contains("#insecure"), "{e}");
    // Every node of a shape must be rediss:// when TLS files are set (and a list never
    // mixes the two schemes).
    let e = config_error(
        &TestConfig::store(&format!(
            "redis_cluster_nodes = [\"rediss://127.0.0.1:1\", \"redis://127.0.0.1:2\"]\n{}",
            tls.store_toml()
        ))
        .toml(),
    );
    assert!(e.contains("store.redis_cluster_nodes") && e.contains("mixes"), "{e}");
    let e = config_error(
        &TestConfig::store(&format!(
            "redis_cluster_nodes = [\"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\"]\n{}",
            tls.store_toml()
        ))
        .toml(),
    );
    assert!(e.contains("store.redis_cluster_nodes") && e.contains("not a rediss://"), "{e}");
    let e = config_error(
        &TestConfig::store(&format!(
            "redis_sentinel = {{ master_name = \"m\", nodes = [\"redis://127.0.0.1:1\"] }}\n{}",
            tls.store_toml()
        ))
        .toml(),
    );
    assert!(e.contains("store.redis_sentinel.nodes") && e.contains("not a rediss://"), "{e}");
}

#[tokio::test]
async fn a_cluster_over_mutual_tls_counts_exactly_on_every_master() {
    let tls = RedisTlsFiles::new(true);
    let cluster = RedisCluster::start_tls(3, 0, &tls);
    let store = format!("redis_cluster_nodes = {}\n{}", cluster.nodes_toml(), tls.store_toml());
    assert!(store.contains("rediss://"), "{store}");
    let daemon = Daemon::start(TestConfig::store(&store).settings()).await;
    let mut c = daemon.client().await;
    reach_store(&mut c).await;
    assert_eq!(allowed_of(&mut c, "cluster-tls@example.com", MAX_FAILURES + 3).await, MAX_FAILURES);
    // Accounts on every master: the daemon reaches each one over TLS.
    for i in 0..30 {
        assert_eq!(allowed_of(&mut c, &format!("spread-{i}@example.com"), 1).await, 1);
    }
    let with_keys = cluster.nodes.iter().filter(|n| dbsize(&mut n.conn()) > 0).count();
    assert_eq!(with_keys, 3, "30 accounts landed on every master");
    daemon.shutdown().await;

    // The same cluster, trusting another CA: refused.
    let other = RedisTlsFiles::new(true);
    let store = format!("redis_cluster_nodes = {}\n{}", cluster.nodes_toml(), other.store_toml());
    let daemon = Daemon::start(TestConfig::store(&store).settings()).await;
    assert_refused(&daemon, "cluster-other-ca@example.com").await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn sentinel_and_master_over_mutual_tls_count_exactly() {
    let tls = RedisTlsFiles::new(true);
    let group = SentinelGroup::start_tls(&tls);
    let store = format!("{}\n{}", group.sentinel_toml(), tls.store_toml());
    assert!(store.contains("rediss://"), "{store}");
    let daemon = Daemon::start(TestConfig::store(&store).settings()).await;
    let mut c = daemon.client().await;
    reach_store(&mut c).await;
    let id = "sentinel-tls@example.com";
    assert_eq!(allowed_of(&mut c, id, MAX_FAILURES + 3).await, MAX_FAILURES);
    let key = record_key("default", Normalization::Email, id);
    assert_eq!(
        read_record(&mut group.master.conn(), &key).unwrap().0,
        u64::from(MAX_FAILURES + 3),
        "counted on the master"
    );
    daemon.shutdown().await;

    // Trusting another CA: neither the Sentinels nor the master are reached.
    let other = RedisTlsFiles::new(true);
    let store = format!("{}\n{}", group.sentinel_toml(), other.store_toml());
    let daemon = Daemon::start(TestConfig::store(&store).settings()).await;
    assert_refused(&daemon, "sentinel-other-ca@example.com").await;
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_tls_url_to_a_plain_port_fails_closed() {
    let tls = RedisTlsFiles::new(false);
    let redis = RedisServer::start();
    let tls_to_plain = redis.url().replacen("redis://", "rediss://", 1);
    let daemon =
        Daemon::start(TestConfig::redis(&tls_to_plain).extra(&tls.store_toml()).settings()).await;
    assert_refused(&daemon, "tls-to-plain@example.com").await;
    daemon.shutdown().await;
    // The handshake bytes are no command Redis runs: nothing was written.
    assert_eq!(dbsize(&mut redis.conn()), 0);
}

#[test]
fn careless_tls_files_are_refused_at_start_up_naming_the_setting() {
    let tls = RedisTlsFiles::new(true);
    let url = "rediss://127.0.0.1:1/";
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, contents: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        format!("{:?}", path.display().to_string())
    };
    let path = |p: &std::path::Path| format!("{:?}", p.display().to_string());
    let ca_pem = std::fs::read_to_string(&tls.ca_file).unwrap();
    let key_pem = std::fs::read_to_string(&tls.client_key_file).unwrap();
    let cert_pem = std::fs::read_to_string(&tls.client_cert_file).unwrap();
    let with = |extra: String| config_error(&TestConfig::redis(url).extra(&extra).toml());
    // A PEM envelope around garbage, alone or after a good CA.
    let garbage_der = "-----BEGIN CERTIFICATE-----\nAAAAAAAAAAAAAAAA\n-----END CERTIFICATE-----\n";
    for contents in [garbage_der.to_owned(), format!("{ca_pem}{garbage_der}")] {
        let e = with(format!("redis_tls_ca_file = {}", file("garbage-ca.pem", &contents)));
        assert!(e.contains("store.redis_tls_ca_file"), "{e}");
    }
    // Base64 that is not base64.
    let e = with(format!(
        "redis_tls_ca_file = {}",
        file("bad-b64.pem", "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
    ));
    assert!(e.contains("store.redis_tls_ca_file"), "{e}");
    // An empty CA file; a directory where a file belongs.
    let e = with(format!("redis_tls_ca_file = {}", file("empty.pem", "")));
    assert!(e.contains("store.redis_tls_ca_file"), "{e}");
    let e = with(format!("redis_tls_ca_file = {}", path(dir.path())));
    assert!(e.contains("store.redis_tls_ca_file"), "{e}");
    let e = with(format!(
        "redis_tls_cert_file = {}\nredis_tls_key_file = {}",
        path(dir.path()),
        path(&tls.client_key_file)
    ));
    assert!(e.contains("store.redis_tls_cert_file"), "{e}");
    let e = with(format!(
        "redis_tls_cert_file = {}\nredis_tls_key_file = {}",
        path(&tls.client_cert_file),
        path(dir.path())
    ));
    assert!(e.contains("store.redis_tls_key_file"), "{e}");
    // Key and certificate swapped; a key file of garbage; a truncated key.
    let e = with(format!(
        "redis_tls_cert_file = {}\nredis_tls_key_file = {}",
        path(&tls.client_key_file),
        path(&tls.client_cert_file)
    ));
    assert!(e.contains("store.redis_tls_cert_file"), "{e}");
    let truncated: String = key_pem.lines().take(2).map(|l| format!("{l}\n")).collect();
    for bad_key in ["not a key".to_owned(), truncated, cert_pem.clone()] {
        let e = with(format!(
            "redis_tls_cert_file = {}\nredis_tls_key_file = {}",
            path(&tls.client_cert_file),
            file("bad.key", &bad_key)
        ));
        assert!(e.contains("store.redis_tls_key_file"), "{e}");
        assert!(!e.contains(key_pem.lines().nth(1).unwrap()), "{e}");
    }
}

#[test]
fn a_password_in_a_tls_url_is_never_shown() {
    let tls = RedisTlsFiles::new(true);
    for url in [
        "rediss://app:urlsecret@127.0.0.1:1/",
        "rediss://:urlsecret@127.0.0.1:1",
        "rediss://127.0.0.1:1?password=urlsecret",
        "rediss://app:url/secret@127.0.0.1:1/",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        std::fs::write(&path, TestConfig::redis(url).extra(&tls.store_toml()).toml()).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        let shown = match config.clone().validate(Some(SECRET.into())) {
            Ok(settings) => format!("{config:?} {settings:?}"),
            Err(e) => format!("{config:?} {e}"),
        };
        assert!(!shown.contains("urlsecret") && !shown.contains("secret@"), "{url}: {shown}");
        let key_pem = std::fs::read_to_string(&tls.client_key_file).unwrap();
        assert!(!shown.contains(key_pem.lines().nth(1).unwrap()), "{url}: {shown}");
    }
}

#[tokio::test]
async fn a_server_certificate_for_another_name_is_refused() {
    let mut tls = RedisTlsFiles::new(false);
    // Signed by the trusted CA, but for another host than the URL's 127.0.0.1.
    let other = tls.ca.leaf(&["redis.other.test"], &[]);
    tls.cert_file =
        portcullis_test_support::pki::write(tls.dir.path(), "other-server.pem", &other.cert_pem);
    tls.key_file =
        portcullis_test_support::pki::write(tls.dir.path(), "other-server.key", &other.key_pem);
    let redis = RedisServer::start_tls(&tls);
    let daemon =
        Daemon::start(TestConfig::redis(&redis.tls_url()).extra(&tls.store_toml()).settings())
            .await;
    assert_refused(&daemon, "other-name@example.com").await;
    daemon.shutdown().await;
    assert_eq!(dbsize(&mut redis.conn()), 0, "nothing reached the misnamed server");
}
