//! `portcullis health`, the probe a container HEALTHCHECK runs: exit 0 only while the
//! daemon's grpc.health.v1 answers SERVING; NOT_SERVING (store down), an unknown service
//! and a daemon that does not answer all exit non-zero.

use std::time::{Duration, Instant};

use portcullis_test_support::*;

/// Runs the real binary's probe against `addr`; returns its exit code and stdout.
async fn probe(addr: &str, extra: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["health", "--addr", addr, "--timeout", "2s"])
        .args(extra)
        .env_remove("PORTCULLIS_ADDR")
        .output()
        .await
        .expect("the binary runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Probes until the exit code is `want` (health follows the store once a second).
async fn probe_until(addr: &str, want: i32) -> (i32, String) {
    probe_until_with(addr, &[], want).await
}

/// As [`probe_until`], with `extra` arguments.
async fn probe_until_with(addr: &str, extra: &[&str], want: i32) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, out) = probe(addr, extra).await;
        if code == want || Instant::now() > deadline {
            return (code, out);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_exits_zero_only_while_serving() {
    let mut redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let addr = format!("http://{}", daemon.addr);

    assert_eq!(probe_until(&addr, 0).await, (0, "SERVING".to_owned()));
    let (code, _) = probe(&addr, &["--service", "portcullis.v1.Governor"]).await;
    assert_eq!(code, 0, "the Governor service is SERVING too");

    // A service the daemon does not know is an error, not a pass.
    let (code, _) = probe(&addr, &["--service", "no.such.Service"]).await;
    assert_eq!(code, 2);

    // The store goes away: the daemon keeps answering, NOT_SERVING, and the probe fails.
    redis.stop();
    assert_eq!(probe_until(&addr, 1).await, (1, "NOT_SERVING".to_owned()));

    // And recovers without a restart.
    redis.restart();
    assert_eq!(probe_until(&addr, 0).await.0, 0);

    // Nothing answers at all: an error, never a pass.
    daemon.shutdown().await;
    let (code, out) = probe(&addr, &[]).await;
    assert_eq!(code, 2, "stdout: {out}");
}

#[tokio::test]
async fn health_fails_when_no_daemon_listens() {
    let addr = format!("http://127.0.0.1:{}", free_port());
    let (code, out) = probe(&addr, &[]).await;
    assert_eq!(code, 2, "stdout: {out}");
    assert!(out.is_empty(), "a refused connection printed a status: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_a_mutual_tls_daemon_with_its_ca_and_a_client_certificate() {
    use portcullis_test_support::pki::{Ca, server_tls, write};
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("portcullis test CA");
    let tls = server_tls(dir.path(), &ca, Some(&ca.pem()), "");
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(&tls).settings()).await;
    let ca_file = write(dir.path(), "ca.pem", &ca.pem()).display().to_string();
    let leaf = ca.leaf(&["probe.test"], &[]);
    let cert = write(dir.path(), "probe.pem", &leaf.cert_pem).display().to_string();
    let key = write(dir.path(), "probe.key", &leaf.key_pem).display().to_string();
    let addr = format!("https://localhost:{}", daemon.addr.port());
    let full = ["--ca-file", &ca_file, "--cert-file", &cert, "--key-file", &key];
    assert_eq!(probe_until_with(&addr, &full, 0).await, (0, "SERVING".to_owned()));

    // Anything less is an error, never a pass.
    let other = Ca::new("someone else's CA");
    let other_ca = write(dir.path(), "other-ca.pem", &other.pem()).display().to_string();
    let stranger = other.leaf(&["probe.test"], &[]);
    let s_cert = write(dir.path(), "s.pem", &stranger.cert_pem).display().to_string();
    let s_key = write(dir.path(), "s.key", &stranger.key_pem).display().to_string();
    let plain = format!("http://{}", daemon.addr);
    let cases: [(&str, &str, Vec<&str>); 6] = [
        ("no client certificate", &addr, vec!["--ca-file", &ca_file]),
        ("no CA", &addr, vec![]),
        (
            "a client certificate without a CA",
            &addr,
            vec!["--cert-file", &cert, "--key-file", &key],
        ),
        (
            "another CA",
            &addr,
            vec!["--ca-file", &other_ca, "--cert-file", &cert, "--key-file", &key],
        ),
        (
            "a client certificate from another CA",
            &addr,
            vec!["--ca-file", &ca_file, "--cert-file", &s_cert, "--key-file", &s_key],
        ),
        ("plaintext", &plain, vec![]),
    ];
    for (what, addr, args) in cases {
        let (code, out) = probe(addr, &args).await;
        assert_eq!(code, 2, "{what}: stdout {out}");
        assert!(out.is_empty(), "{what}: printed a status: {out}");
    }
    daemon.shutdown().await;
}
