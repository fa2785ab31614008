//! The signals an init system, an operator or a log rotator sends: SIGHUP reloads and
//! never ends the daemon, in every configuration (without `[tls]` too); SIGUSR1 and
//! SIGUSR2 are ignored; SIGTERM and SIGINT stop it cleanly (exit 0). A reload reads the
//! configuration file again: an invalid file changes nothing, a valid one puts its
//! `[callers]` in force on open connections, and names what needs a restart.

use std::time::Duration;

use portcullis::pb::Decision;
use portcullis_test_support::*;
use tonic::Code;

fn token_file(dir: &std::path::Path, name: &str, token: &str) -> std::path::PathBuf {
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
    portcullis_test_support::pki::write(dir, name, &format!("{hash}\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_the_user_signals_never_end_a_daemon_without_tls() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data")).toml());
    let mut c = daemon.client().await;
    for (n, signal) in ["HUP", "USR1", "USR2", "HUP"].into_iter().enumerate() {
        daemon.signal(signal);
        match signal {
            "HUP" => daemon.wait_for_log("reload: configuration reloaded", n / 3 + 1).await,
            other => daemon.wait_for_log(&format!("SIG{other} ignored"), 1).await,
        }
        assert_eq!(
            daemon.wait_exit(Duration::from_millis(100)).await,
            None,
            "SIG{signal} ended it"
        );
        assert_eq!(c.attempt("default", "alive@example.com").await.unwrap(), Decision::Allow);
    }
    assert!(daemon.terminate().await.success(), "SIGTERM exits 0");

    let mut daemon = DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data2")).toml());
    daemon.signal("INT");
    let status = daemon.wait_exit(Duration::from_secs(10)).await.expect("SIGINT stops it");
    assert!(status.success(), "SIGINT exits 0: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_callers_on_open_connections_and_refuses_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let (web, ops) =
        ("web-token-0123456789abcdef0123456789", "ops-token-0123456789abcdef0123456789");
    let callers = |with_web: bool| {
        let mut text = format!(
            "[callers.ops]\ntoken_hash_file = {:?}\nrpcs = [\"Inspect\"]\nrealms = [\"*\"]\n",
            token_file(dir.path(), "ops.sha256", ops)
        );
        if with_web {
            text.push_str(&format!(
                "[callers.web]\ntoken_hash_file = {:?}\nrpcs = [\"RecordAttempt\"]\nrealms = [\"*\"]\n",
                token_file(dir.path(), "web.sha256", web)
            ));
        }
        text
    };
    let data = dir.path().join("data");
    let daemon = DaemonProcess::spawn(&TestConfig::embedded(&data).extra(&callers(true)).toml());
    let mut gateway = caller(daemon.addr, None, Some(web)).await.unwrap();
    assert_eq!(gateway.attempt("default", "a@example.com").await.unwrap(), Decision::Allow);

    // An invalid file: refused, everything stays (the gateway keeps its calls).
    std::fs::write(daemon.config_path(), "[realms.default]\nmax_failures = 0\n").unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("reload refused", 1).await;
    assert!(daemon.logs().contains("realms.default.max_failures"), "{}", daemon.logs());
    assert_eq!(gateway.attempt("default", "a@example.com").await.unwrap(), Decision::Allow);

    // The web caller removed: its open connection gets no further call.
    let mut without_web = TestConfig::embedded(&data).extra(&callers(false)).toml();
    std::fs::write(daemon.config_path(), &without_web).unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("reload: configuration reloaded", 1).await;
    let refused = gateway.attempt("default", "a@example.com").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let mut operator = caller(daemon.addr, None, Some(ops)).await.unwrap();
    assert!(operator.inspect("default", "a@example.com").await.is_ok());

    // A change that needs a restart is named, and not applied.
    without_web = without_web.replace("[realms.fast]", "[realms.fast]\nmax_failures = 2");
    std::fs::write(daemon.config_path(), &without_web).unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("take effect after a restart", 1).await;
    assert!(daemon.logs().contains("sections=realms"), "{}", daemon.logs());
    assert!(daemon.terminate().await.success());
}
