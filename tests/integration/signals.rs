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

/// A SIGHUP while the daemon is still starting never ends it, and a SIGTERM then is kept
/// until it serves and stops it cleanly: the handlers are installed first thing in `main`,
/// before the configuration file is read. A configuration padded with comments is slow
/// to read, so the signals land while it is being read.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_while_the_configuration_is_read_are_handled() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let padding = format!("# {}\n", "a configuration slow to read ".repeat(3)).repeat(200_000);
    for (round, signal) in ["HUP", "TERM"].into_iter().enumerate() {
        let data = dir.path().join(format!("data{round}"));
        let config = dir.path().join(format!("slow{round}.toml"));
        std::fs::write(&config, format!("{}{padding}", TestConfig::embedded(&data).toml()))
            .unwrap();
        let log = dir.path().join(format!("stderr{round}"));
        let mut child = Command::new(daemon_binary())
            .args(["serve", "--config"])
            .arg(&config)
            .env("PORTCULLIS_KEY_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let logs = || std::fs::read_to_string(&log).unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for _ in 0..3 {
            assert!(!logs().contains("listening on"), "the configuration was read too fast");
            let sent = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status()
                .unwrap();
            assert!(sent.success());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if signal == "HUP" && logs().contains("listening on") {
                break child.try_wait().unwrap();
            }
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            assert!(std::time::Instant::now() < deadline, "no start; logs:\n{}", logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match signal {
            "HUP" => {
                assert_eq!(status, None, "SIGHUP during start-up ended it; logs:\n{}", logs());
                let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
                assert!(child.wait().unwrap().success(), "SIGTERM exits 0");
            }
            _ => {
                let status = status.unwrap();
                assert!(status.success(), "SIGTERM during start-up: {status:?}; logs:\n{}", logs());
                assert!(logs().contains("shutdown signal received"), "logs:\n{}", logs());
            }
        }
    }
}

/// A change that needs a restart stays pending until the restart: every later SIGHUP
/// names it again (never "configuration reloaded" while the old settings run), and so do
/// `/readyz`'s text and `portcullis_config_restart_pending`, by section name only; once
/// the file is as the daemon started with it, nothing is pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_restart_is_named_on_every_reload_until_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("data")).admin("0s").toml();
    let daemon = DaemonProcess::spawn(&config);
    let admin = daemon.admin_addr();
    let readyz = async || http_get(admin, "/readyz").await.unwrap();
    let gauge = async || {
        let (_, metrics) = http_get(admin, "/metrics").await.unwrap();
        metrics
            .lines()
            .find(|l| l.starts_with("portcullis_config_restart_pending{section=\"realms\"}"))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
    };
    assert!(readyz().await.1.contains("restart pending: none"));

    let changed = config.replace("[realms.fast]", "[realms.fast]\nmax_failures = 2");
    std::fs::write(daemon.config_path(), &changed).unwrap();
    for n in 1..=3 {
        daemon.signal("HUP");
        daemon.wait_for_log("restart pending: the other changed sections", n).await;
        let (status, text) = readyz().await;
        assert_eq!(status, 200, "a pending restart is no reason to stop serving");
        assert!(text.contains("restart pending: realms"), "{text}");
        assert_eq!(gauge().await.as_deref(), Some("1"));
    }
    assert!(!daemon.logs().contains("reload: configuration reloaded"), "{}", daemon.logs());
    assert!(!daemon.logs().contains("max_failures = 2"), "a value in the logs");

    // The file as the daemon started: nothing pending any more.
    std::fs::write(daemon.config_path(), &config).unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("reload: configuration reloaded", 1).await;
    assert!(readyz().await.1.contains("restart pending: none"));
    assert_eq!(gauge().await.as_deref(), Some("0"));
    assert!(daemon.terminate().await.success());
}
