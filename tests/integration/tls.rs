//! TLS and mutual TLS on the listener: a caller without a client certificate, with one
//! from another CA, with an expired one, or with one naming no configured caller is
//! refused, and the call never reaches the store. A listener off loopback without TLS
//! is refused at start-up unless `allow_plaintext = true`, and then warned about.

use portcullis::config::{Config, Overrides};
use portcullis::pb::Decision;
use portcullis_test_support::pki::{Ca, client_tls, server_tls};
use portcullis_test_support::*;
use tonic::Code;

const GATEWAY: &str = r#"
[callers.gateway]
san_dns = ["gateway.test"]
san_uri = ["spiffe://test/gateway"]
rpcs = ["Admit", "RecordAttempt", "Verify", "ClearAttempts"]
realms = ["*"]
"#;

#[tokio::test]
async fn mutual_tls_refuses_every_unverified_caller_before_the_store() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("portcullis test CA");
    let other = Ca::new("someone else's CA");
    let tls = server_tls(dir.path(), &ca, Some(&ca.pem()), "");
    let daemon =
        Daemon::start(TestConfig::redis(&redis.url()).extra(&format!("{tls}{GATEWAY}")).settings())
            .await;
    let mut conn = redis.conn();

    let refused = [
        ("no client certificate", client_tls(&ca.pem(), None)),
        (
            "a certificate from another CA",
            client_tls(&ca.pem(), Some(&other.leaf(&["gateway.test"], &[]))),
        ),
        (
            "an expired certificate",
            client_tls(&ca.pem(), Some(&ca.expired_leaf(&["gateway.test"]))),
        ),
    ];
    for (what, tls) in refused {
        let answer = try_attempt(daemon.addr, Some(tls), None).await;
        assert!(answer.is_err(), "{what}: {answer:?}");
    }
    // Plain HTTP/2 to a TLS listener gets nothing either.
    assert!(try_attempt(daemon.addr, None, None).await.is_err());
    // A valid certificate naming no configured caller: UNAUTHENTICATED.
    let stranger = client_tls(&ca.pem(), Some(&ca.leaf(&["stranger.test"], &[])));
    let answer = try_attempt(daemon.addr, Some(stranger), None).await.unwrap_err();
    assert!(answer.starts_with("Unauthenticated"), "{answer}");
    assert_eq!(dbsize(&mut conn), 0, "a refused call reached the store");

    // The configured caller, by DNS name and by URI, is served.
    for leaf in [ca.leaf(&["Gateway.Test"], &[]), ca.leaf(&[], &["spiffe://test/gateway"])] {
        let answer = try_attempt(daemon.addr, Some(client_tls(&ca.pem(), Some(&leaf))), None).await;
        assert_eq!(answer, Ok(Decision::Allow));
    }
    assert_eq!(dbsize(&mut conn), 1);
    daemon.shutdown().await;
}

#[tokio::test]
async fn the_gateway_client_library_speaks_mutual_tls() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("portcullis test CA");
    let tls = server_tls(dir.path(), &ca, Some(&ca.pem()), "");
    let daemon =
        Daemon::start(TestConfig::redis(&redis.url()).extra(&format!("{tls}{GATEWAY}")).settings())
            .await;
    let leaf = ca.leaf(&["gateway.test"], &[]);
    let client_config = |with_identity: bool| portcullis::client::ClientConfig {
        endpoints: vec![format!("https://localhost:{}", daemon.addr.port())],
        tls: Some(portcullis::client::ClientTls {
            ca_file: portcullis_test_support::pki::write(dir.path(), "ca.pem", &ca.pem()),
            cert_file: with_identity
                .then(|| portcullis_test_support::pki::write(dir.path(), "gw.pem", &leaf.cert_pem)),
            key_file: with_identity
                .then(|| portcullis_test_support::pki::write(dir.path(), "gw.key", &leaf.key_pem)),
            domain_name: None,
        }),
        ..Default::default()
    };
    let client = portcullis::client::Client::new(client_config(true)).unwrap();
    assert!(client.record_attempt("default", "lib@example.com", None).await.is_allowed());
    // Without its certificate the same library is refused: deny, never allow.
    let client = portcullis::client::Client::new(client_config(false)).unwrap();
    assert!(!client.record_attempt("default", "lib@example.com", None).await.is_allowed());
    daemon.shutdown().await;
}

fn validate(toml: &str) -> Result<portcullis::config::Settings, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load(Some(&path), &Overrides::default())
        .map_err(|e| e.to_string())?
        .validate(Some(SECRET.into()))
        .map_err(|e| e.to_string())
}

#[test]
fn plaintext_off_loopback_needs_allow_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("[store]\ndata_dir = {:?}\n", dir.path().display().to_string());
    let e = validate(&format!("listen = \"0.0.0.0:50051\"\n{data}")).unwrap_err();
    assert!(
        e.contains("listen") && e.contains("allow_plaintext = true") && e.contains("[tls]"),
        "{e}"
    );
    let e = validate(&format!("listen = \"[::]:50051\"\n{data}")).unwrap_err();
    assert!(e.contains("allow_plaintext"), "{e}");
    assert!(
        validate(&format!("listen = \"0.0.0.0:50051\"\nallow_plaintext = true\n{data}")).is_ok()
    );
    assert!(validate(&format!("listen = \"127.0.0.1:50051\"\n{data}")).is_ok());
    assert!(validate(&format!("listen = \"[::1]:50051\"\n{data}")).is_ok());
    let ca = Ca::new("ca");
    let tls = server_tls(dir.path(), &ca, None, "");
    assert!(validate(&format!("listen = \"0.0.0.0:50051\"\n{tls}{data}")).is_ok());
    // Unreadable or wrong TLS files stop the daemon, naming the file's setting.
    let e = validate(&format!(
        "{data}[tls]\ncert_file = \"/nonexistent.pem\"\nkey_file = \"/nonexistent.key\"\n"
    ))
    .unwrap_err();
    assert!(e.contains("tls.cert_file"), "{e}");
    let junk = portcullis_test_support::pki::write(dir.path(), "junk.pem", "not a certificate");
    let e =
        validate(&format!("{data}[tls]\ncert_file = {junk:?}\nkey_file = {junk:?}\n")).unwrap_err();
    assert!(e.contains("tls.cert_file") && e.contains("no usable PEM"), "{e}");
}

#[tokio::test]
async fn allow_plaintext_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "listen = \"0.0.0.0:0\"\nallow_plaintext = true\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\n{REALMS_TOML}",
        dir.path().join("data").display().to_string()
    );
    let daemon = DaemonProcess::spawn(&config);
    // The warnings follow the "listening on" line the spawn waited for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !daemon.logs().contains("no [callers] configured") && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let logs = daemon.logs();
    assert!(logs.contains("WITHOUT TLS"), "{logs}");
    assert!(logs.contains("no [callers] configured"), "{logs}");
    // (Not a shutdown test: SIGTERM this early may precede the signal handler.)
    daemon.kill();
}

#[tokio::test]
async fn tls_without_client_certificates_serves_token_callers() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let tls = server_tls(dir.path(), &ca, None, "");
    let token = "0123456789abcdef0123456789abcdef-gateway-token";
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
    let hashes = portcullis_test_support::pki::write(
        dir.path(),
        "gw.sha256",
        &format!("# gateway\n{hash}\n"),
    );
    let callers = format!(
        "[callers.gateway]\ntoken_hash_file = {hashes:?}\nrpcs = [\"RecordAttempt\"]\nrealms = [\"default\"]\n"
    );
    let daemon =
        Daemon::start(TestConfig::redis(&redis.url()).extra(&format!("{tls}{callers}")).settings())
            .await;
    let tls = || Some(client_tls(&ca.pem(), None));
    let e = try_attempt(daemon.addr, tls(), Some("wrong-token")).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated"), "{e}");
    let e = try_attempt(daemon.addr, tls(), None).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated"), "{e}");
    assert_eq!(dbsize(&mut redis.conn()), 0, "a refused call reached the store");
    assert_eq!(try_attempt(daemon.addr, tls(), Some(token)).await, Ok(Decision::Allow));
    daemon.shutdown().await;
}

/// A certificate whose names belong to two configured callers names nobody: its
/// permissions are neither united nor picked by table order (docs/security.md).
#[tokio::test]
async fn a_certificate_naming_two_callers_is_refused() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("portcullis test CA");
    let tls = server_tls(dir.path(), &ca, Some(&ca.pem()), "");
    let callers = r#"
[callers.gateway]
san_dns = ["gateway.test"]
rpcs = ["RecordAttempt"]
realms = ["*"]
[callers.operator]
san_uri = ["spiffe://test/operator"]
rpcs = ["Inspect"]
realms = ["*"]
"#;
    let daemon =
        Daemon::start(TestConfig::redis(&redis.url()).extra(&format!("{tls}{callers}")).settings())
            .await;
    let both = ca.leaf(&["gateway.test"], &["spiffe://test/operator"]);
    let answer = try_attempt(daemon.addr, Some(client_tls(&ca.pem(), Some(&both))), None).await;
    let refused = answer.unwrap_err();
    assert!(
        refused.starts_with("Unauthenticated") && refused.contains("more than one"),
        "{refused}"
    );
    let mut c = caller(daemon.addr, Some(client_tls(&ca.pem(), Some(&both))), None).await.unwrap();
    let inspected = c.inspect("default", "a@example.com").await.unwrap_err();
    assert_eq!(inspected.code(), Code::Unauthenticated);
    // Each name alone is its caller.
    let gateway = ca.leaf(&["gateway.test"], &[]);
    let answer = try_attempt(daemon.addr, Some(client_tls(&ca.pem(), Some(&gateway))), None).await;
    assert_eq!(answer, Ok(Decision::Allow));
    assert_eq!(dbsize(&mut redis.conn()), 1);
    daemon.shutdown().await;
}
