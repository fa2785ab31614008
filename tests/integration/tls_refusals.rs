//! A refused client certificate is explained on both sides: the daemon logs one line
//! naming the reason and the certificate's subject and SANs (rate-limited), and the
//! gateway library and the CLI say `TLS handshake refused: <reason>` instead of a
//! cancelled call. Every such call is still a deny.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use portcullis::client::{Client, ClientConfig, ClientTls};
use portcullis_test_support::pki::{Ca, Leaf, server_tls, write};
use portcullis_test_support::*;

const GATEWAY: &str = r#"
[callers.gateway]
san_dns = ["gateway.test"]
rpcs = ["Admit", "RecordAttempt", "Verify", "ClearAttempts"]
realms = ["*"]
"#;

/// A bad client certificate, what the daemon's line says and what the client says.
struct Refusal {
    what: &'static str,
    leaf: Option<Leaf>,
    daemon_says: &'static str,
    client_says: &'static str,
}

/// The client's TLS files in `dir`, trusting `ca`, presenting `leaf` when given.
fn client_files(dir: &Path, ca: &Ca, leaf: Option<&Leaf>, tag: &str) -> ClientTls {
    ClientTls {
        ca_file: write(dir, "ca.pem", &ca.pem()),
        cert_file: leaf.map(|l| write(dir, &format!("{tag}.pem"), &l.cert_pem)),
        key_file: leaf.map(|l| write(dir, &format!("{tag}.key"), &l.key_pem)),
        domain_name: None,
    }
}

/// What the gateway library found after its call was denied: its own handshake's
/// reason, which arrives in the background within a few seconds.
async fn library_says(endpoint: &str, tls: ClientTls) -> String {
    let client = Client::new(ClientConfig {
        endpoints: vec![endpoint.to_owned()],
        tls: Some(tls),
        max_retries: 0,
        ..ClientConfig::default()
    })
    .unwrap();
    let answer = client.record_attempt("default", "refused@example.com", None).await;
    assert!(!answer.is_allowed(), "a refused certificate was allowed: {answer:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(Some(reason)) = client.stats().tls_refusals.first() {
            return reason.clone();
        }
        assert!(Instant::now() < deadline, "the client never said why: {:?}", client.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `portcullis attempt` over the same files: its exit status and stderr.
fn cli_says(endpoint: &str, tls: &ClientTls) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["attempt", "--realm", "default", "--identifier", "x", "--addr", endpoint]);
    cmd.arg("--ca-file").arg(&tls.ca_file);
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        cmd.arg("--cert-file").arg(cert).arg("--key-file").arg(key);
    }
    let out = cmd.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn each_refused_client_certificate_is_named_by_the_daemon_and_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let ca = Ca::new("portcullis test CA");
    let other = Ca::new("someone else's CA");
    let tls = server_tls(dir.path(), &ca, Some(&ca.pem()), "");
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(data.path()).extra(&tls).extra(GATEWAY).toml());
    let endpoint = format!("https://localhost:{}", daemon.addr.port());
    let refusals = [
        Refusal {
            what: "no client certificate",
            leaf: None,
            daemon_says: "the client presented no certificate",
            client_says: "the daemon requires a client certificate (mutual TLS)",
        },
        Refusal {
            what: "another CA's certificate",
            leaf: Some(other.leaf(&["gateway.test"], &[])),
            daemon_says: "it is not signed by a CA in tls.client_ca_file",
            client_says: "not signed by a CA the daemon trusts (unknown_ca)",
        },
        Refusal {
            what: "an expired certificate",
            leaf: Some(ca.expired_leaf(&["expired.gateway.test"])),
            daemon_says: "it expired at ",
            client_says: "it has expired or is not yet valid (certificate_expired)",
        },
        Refusal {
            what: "a serverAuth-only certificate",
            leaf: Some(ca.server_only_leaf(&["server-only.gateway.test"])),
            daemon_says: "its extended key usage does not allow client authentication",
            client_says: "does not allow client authentication (clientAuth) \
                          (unsupported_certificate)",
        },
    ];
    for (i, r) in refusals.iter().enumerate() {
        let files = client_files(dir.path(), &ca, r.leaf.as_ref(), &format!("leaf{i}"));
        let said = library_says(&endpoint, files.clone()).await;
        assert!(said.starts_with("TLS handshake refused: "), "{}: {said}", r.what);
        assert!(said.contains(r.client_says), "{}: {said}", r.what);
        let (status, stderr) = cli_says(&endpoint, &files);
        assert_eq!(status, 2, "{}: the CLI must fail: {stderr}", r.what);
        assert!(stderr.contains("TLS handshake refused: "), "{}: {stderr}", r.what);
        assert!(stderr.contains(r.client_says), "{}: {stderr}", r.what);
        // One line in the daemon's log, however often the client came back (the call,
        // the library's own handshake, the CLI's two connections).
        daemon.wait_for_log(r.daemon_says, 1).await;
        let logs = daemon.logs();
        let lines: Vec<&str> = logs.lines().filter(|l| l.contains(r.daemon_says)).collect();
        assert_eq!(lines.len(), 1, "{}: rate-limited to one line: {lines:#?}", r.what);
        if let Some(leaf) = &r.leaf {
            let subject = subject_of(&leaf.cert_pem);
            assert!(
                lines[0].contains(&subject),
                "{}: the line names {subject}: {}",
                r.what,
                lines[0]
            );
        }
    }
    // The subject and SANs are in the certificate lines: the expired one names its DNS SAN.
    assert!(daemon.logs().contains("dns:expired.gateway.test"), "{}", daemon.logs());

    // A v1 certificate: rustls will not present one, so the library and the CLI refuse
    // it before connecting, naming the file and why; a TLS stack that sends it (OpenSSL's,
    // under the TypeScript and Python clients) is refused by the daemon, which names it.
    let v1 = ca.v1_leaf("v1.gateway.test");
    let files = client_files(dir.path(), &ca, Some(&v1), "v1");
    let refused = Client::new(ClientConfig {
        endpoints: vec![endpoint.clone()],
        tls: Some(files.clone()),
        ..ClientConfig::default()
    })
    .err()
    .map(|e| portcullis::setting::error_chain(&e));
    let refused = refused.expect("a client with a v1 certificate");
    assert!(refused.contains("tls.cert_file") && refused.contains("not an X.509 v3"), "{refused}");
    let (status, stderr) = cli_says(&endpoint, &files);
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("--cert-file") && stderr.contains("not an X.509 v3"), "{stderr}");
    let _sent = Command::new("openssl")
        .args(["s_client", "-connect", &format!("localhost:{}", daemon.addr.port())])
        .arg("-cert")
        .arg(files.cert_file.as_ref().unwrap())
        .arg("-key")
        .arg(files.key_file.as_ref().unwrap())
        .arg("-CAfile")
        .arg(&files.ca_file)
        .args(["-alpn", "h2"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    daemon.wait_for_log("it is not an X.509 v3 certificate", 1).await;
    let logs = daemon.logs();
    let line = logs.lines().find(|l| l.contains("not an X.509 v3 certificate")).unwrap();
    assert!(line.contains("CN=v1.gateway.test"), "{line}");

    // A valid certificate naming no caller: UNAUTHENTICATED at the call, naming its SANs,
    // and one line in the daemon's log naming them too.
    let stranger = ca.leaf(&["stranger.test"], &[]);
    let files = client_files(dir.path(), &ca, Some(&stranger), "stranger");
    let (status, stderr) = cli_says(&endpoint, &files);
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.contains("no configured caller") && stderr.contains("dns:stranger.test"),
        "{stderr}"
    );
    let _ = cli_says(&endpoint, &files);
    daemon.wait_for_log("names no configured caller", 1).await;
    let logs = daemon.logs();
    let lines: Vec<&str> =
        logs.lines().filter(|l| l.contains("names no configured caller")).collect();
    assert_eq!(lines.len(), 1, "rate-limited to one line: {lines:#?}");
    assert!(lines[0].contains("dns:stranger.test"), "{}", lines[0]);
    assert!(lines[0].contains("CN=stranger.test"), "the subject too: {}", lines[0]);

    // The other way round: a client that does not trust the daemon's certificate sends
    // the alert, and the daemon's line says the client refused it.
    let distrustful = client_files(dir.path(), &other, Some(&ca.leaf(&["gateway.test"], &[])), "d");
    let (status, stderr) = cli_says(&endpoint, &distrustful);
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.contains("the daemon's certificate is not signed by a CA in --ca-file"),
        "{stderr}"
    );
    daemon.wait_for_log("the client refused the daemon's certificate", 1).await;
    // Plaintext HTTP/2 to the TLS listener.
    let plain = try_attempt(daemon.addr, None, None).await;
    assert!(plain.is_err(), "{plain:?}");
    daemon.wait_for_log("not TLS (plaintext to a TLS listener?", 1).await;

    // The configured caller is served, and its library finds nothing to say.
    let good = ca.leaf(&["gateway.test"], &[]);
    let files = client_files(dir.path(), &ca, Some(&good), "good");
    let client = Client::new(ClientConfig {
        endpoints: vec![endpoint.clone()],
        tls: Some(files.clone()),
        ..ClientConfig::default()
    })
    .unwrap();
    assert!(client.record_attempt("default", "served@example.com", None).await.is_allowed());
    assert_eq!(client.stats().tls_refusals, vec![None]);
    assert_eq!(cli_says(&endpoint, &files).0, 0);
    // An RPC it is not granted: the message and one line name the caller and the RPC.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    cmd.args(["inspect", "--realm", "default", "--identifier", "x", "--addr", &endpoint]);
    cmd.arg("--ca-file").arg(&files.ca_file);
    cmd.arg("--cert-file").arg(files.cert_file.as_ref().unwrap());
    cmd.arg("--key-file").arg(files.key_file.as_ref().unwrap());
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = "caller \"gateway\" may not call portcullis.v1.Admin/Inspect";
    assert!(stderr.contains(named), "{stderr}");
    daemon.wait_for_log(named, 1).await;
    // No key of any certificate reached the log.
    let leaves = refusals.iter().filter_map(|r| r.leaf.as_ref());
    for leaf in leaves.chain([&v1, &stranger, &good]) {
        let body: String = leaf.key_pem.lines().filter(|l| !l.starts_with("-----")).collect();
        assert!(!daemon.logs().contains(&body[..40.min(body.len())]), "a private key was logged");
    }
}

/// The subject as the daemon writes it (`CN=…`, one attribute here), read by openssl.
fn subject_of(cert_pem: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.pem", cert_pem);
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    text.trim_start_matches("subject=").to_owned()
}
