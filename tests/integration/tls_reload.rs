//! Certificate rotation without a restart: the listener's certificate, key and client
//! CA are reloaded when the files change (or on SIGHUP), while calls keep flowing on old
//! and new connections, and no call fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::pb::Decision;
use portcullis_test_support::pki::{Ca, client_tls, write};
use portcullis_test_support::*;

const GATEWAY: &str = r#"
[callers.gateway]
san_dns = ["gateway.test"]
rpcs = ["RecordAttempt"]
realms = ["*"]
"#;

/// Writes the server certificate (from `ca`) and the client CA bundle into `dir`.
fn rotate(dir: &std::path::Path, ca: &Ca, client_cas: &str) {
    let leaf = ca.leaf(&["localhost"], &[]);
    // Key first, then certificate: a reload between the two sees a pair that does not
    // match, refuses it and keeps the previous one until the next look.
    write(dir, "server.key", &leaf.key_pem);
    write(dir, "server.pem", &leaf.cert_pem);
    write(dir, "client-ca.pem", client_cas);
}

fn tls_section(dir: &std::path::Path, reload_interval: &str) -> String {
    format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\nclient_ca_file = {:?}\nreload_interval = \"{reload_interval}\"\n{GATEWAY}",
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("client-ca.pem")
    )
}

/// Waits until a client that trusts only `server_ca` and presents a certificate from
/// `client_ca` is served: the rotation has taken effect.
async fn wait_for_rotation(addr: std::net::SocketAddr, server_ca: &Ca, client_ca: &Ca) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let leaf = client_ca.leaf(&["gateway.test"], &[]);
    loop {
        let tls = client_tls(&server_ca.pem(), Some(&leaf));
        if try_attempt(addr, Some(tls), None).await.is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "the new certificate never took effect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_fails_no_call() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Ca::new("old CA"), Ca::new("new CA"));
    rotate(dir.path(), &old, &old.pem());
    let daemon = Daemon::start(
        TestConfig::redis(&redis.url()).extra(&tls_section(dir.path(), "100ms")).settings(),
    )
    .await;

    // Clients trust both CAs for the server (as they would during a planned rotation)
    // and keep their certificate from the old CA, which stays in the bundle.
    let both = format!("{}{}", old.pem(), new.pem());
    let leaf = Arc::new(old.leaf(&["gateway.test"], &[]));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for worker in 0..4 {
        let (stop, ok, failed, both, leaf) =
            (stop.clone(), ok.clone(), failed.clone(), both.clone(), leaf.clone());
        let addr = daemon.addr;
        load.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A fresh connection every 10 calls: handshakes happen throughout.
                let mut c = match caller(addr, Some(client_tls(&both, Some(&leaf))), None).await {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("connect failed: {e:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                for _ in 0..10 {
                    n += 1;
                    match c.attempt("default", &format!("w{worker}-{n}@example.com")).await {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("call failed: {e:?}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ok.load(Ordering::Relaxed);
    rotate(dir.path(), &new, &both);
    wait_for_rotation(daemon.addr, &new, &new).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert_eq!(failed, 0, "calls failed during the rotation ({ok} succeeded)");
    assert!(before > 0 && ok > before, "no load ran across the rotation: {before} then {ok}");
    // A client that trusts only the old CA is no longer served a certificate it trusts.
    let stale = client_tls(&old.pem(), Some(&leaf));
    assert!(try_attempt(daemon.addr, Some(stale), None).await.is_err());
    daemon.shutdown().await;
}

#[tokio::test]
async fn sighup_reloads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Ca::new("old CA"), Ca::new("new CA"));
    rotate(dir.path(), &old, &old.pem());
    let tls = tls_section(dir.path(), "24h");
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data")).extra(&tls).toml());
    let leaf = old.leaf(&["gateway.test"], &[]);
    assert!(
        try_attempt(daemon.addr, Some(client_tls(&old.pem(), Some(&leaf))), None).await.is_ok()
    );
    // A broken file is refused and the old certificate keeps serving.
    write(
        dir.path(),
        "server.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    );
    let pid = daemon.pid();
    let hup = |pid: u32| {
        std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap()
    };
    assert!(hup(pid).success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        try_attempt(daemon.addr, Some(client_tls(&old.pem(), Some(&leaf))), None).await.is_ok()
    );
    assert!(daemon.logs().contains("reload refused"), "{}", daemon.logs());
    // A certificate written before its key: refused, saying so in words.
    write(dir.path(), "server.pem", &old.leaf(&["localhost"], &[]).cert_pem);
    assert!(hup(pid).success());
    daemon.wait_for_log("tls.key_file is not the key of tls.cert_file's certificate", 1).await;
    assert!(
        try_attempt(daemon.addr, Some(client_tls(&old.pem(), Some(&leaf))), None).await.is_ok()
    );
    rotate(dir.path(), &new, &format!("{}{}", old.pem(), new.pem()));
    assert!(hup(pid).success());
    wait_for_rotation(daemon.addr, &new, &new).await;
    assert!(daemon.logs().contains("reloaded"));
    assert!(daemon.terminate().await.success());
}

/// A caller's identity is judged on every call, not only at the handshake: a client
/// certificate that expires while its connection is open gets no further call through
/// it (UNAUTHENTICATED), and a new connection with it is refused at the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_gets_no_call_through_an_open_connection() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("CA");
    rotate(dir.path(), &ca, &ca.pem());
    let tls = tls_section(dir.path(), "24h");
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(&tls).settings()).await;
    let leaf = ca.leaf_expiring_in(&["gateway.test"], 3);
    let mut open =
        caller(daemon.addr, Some(client_tls(&ca.pem(), Some(&leaf))), None).await.unwrap();
    assert_eq!(open.attempt("default", "a@example.com").await.unwrap(), Decision::Allow);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = open.attempt("default", "a@example.com").await.unwrap_err();
    assert!(
        refused.code() == tonic::Code::Unauthenticated
            || refused.code() == tonic::Code::Unavailable,
        "{refused:?}"
    );
    // Nothing more on that connection, and no new one.
    assert!(open.attempt("default", "a@example.com").await.is_err());
    assert!(
        try_attempt(daemon.addr, Some(client_tls(&ca.pem(), Some(&leaf))), None).await.is_err()
    );
    daemon.shutdown().await;
}

/// A client CA removed by a reload takes its callers' open connections with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_client_ca_gets_no_call_through_an_open_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (server, kept, removed) = (Ca::new("server CA"), Ca::new("kept CA"), Ca::new("removed CA"));
    rotate(dir.path(), &server, &format!("{}{}", kept.pem(), removed.pem()));
    let tls = tls_section(dir.path(), "100ms");
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(&tls).settings()).await;
    let doomed = removed.leaf(&["gateway.test"], &[]);
    let staying = kept.leaf(&["gateway.test"], &[]);
    let mut old =
        caller(daemon.addr, Some(client_tls(&server.pem(), Some(&doomed))), None).await.unwrap();
    let mut other =
        caller(daemon.addr, Some(client_tls(&server.pem(), Some(&staying))), None).await.unwrap();
    assert_eq!(old.attempt("default", "a@example.com").await.unwrap(), Decision::Allow);
    write(dir.path(), "client-ca.pem", &kept.pem());
    // The reload has happened once a new connection with the removed CA is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while try_attempt(daemon.addr, Some(client_tls(&server.pem(), Some(&doomed))), None)
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the client CA was never reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = old.attempt("default", "a@example.com").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    // The kept CA's caller, on its open connection, is served as before.
    assert_eq!(other.attempt("default", "b@example.com").await.unwrap(), Decision::Allow);
    daemon.shutdown().await;
}

/// With mutual TLS there is no session resumption: a client that offers its session
/// again gets a full handshake, its certificate verified afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_never_resumes_a_session() {
    use rustls::pki_types::pem::PemObject;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("CA");
    rotate(dir.path(), &ca, &ca.pem());
    let tls = tls_section(dir.path(), "24h");
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(&tls).settings()).await;
    let leaf = ca.leaf(&["gateway.test"], &[]);
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let chain =
        vec![rustls::pki_types::CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap()];
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    // The client keeps sessions and tickets (rustls's default): it would resume.
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    for n in 0..3 {
        let tcp = tokio::net::TcpStream::connect(daemon.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut stream = connector.connect(name, tcp).await.unwrap();
        // Read a little, so TLS 1.3 tickets (if any were sent) reach the client.
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::io::AsyncReadExt::read(&mut stream, &mut [0u8; 64]),
        )
        .await;
        let kind = stream.get_ref().1.handshake_kind();
        assert_eq!(kind, Some(rustls::HandshakeKind::Full), "connection {n} resumed");
    }
    daemon.shutdown().await;
}
