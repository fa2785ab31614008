//! The real binary, started the real way: two daemons (one on one I/O thread, the other
//! on four) share one Redis, a restart keeps the count, SIGTERM drains cleanly, the logs
//! carry no identifier, and the operator client works.

use std::process::Command;

use portcullis::pb::Decision::{Allow, Deny};
use portcullis_test_support::*;

const ID: &str = "Victim.User@Example.COM";
/// Spellings of the identifier that must never appear in a log line.
const NEEDLES: [&str; 3] = ["victim.user@example.com", "victim", "example.com"];

/// Threads of a process that are Tokio multi-thread workers (named `tokio-rt-worker`);
/// a current-thread runtime runs on the main thread and has none.
fn runtime_workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim() == "tokio-rt-worker")
        })
        .count()
}

fn assert_logs_clean(logs: &str) {
    let lower = logs.to_lowercase();
    for needle in NEEDLES {
        assert!(!lower.contains(needle), "a log line contains an identifier ({needle})");
    }
}

#[tokio::test]
async fn two_daemons_share_one_allowance_and_a_restart_keeps_the_count() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).toml();
    let a = DaemonProcess::spawn(&config);
    // B serves on a multi-thread runtime, A on the one-thread default.
    let b = DaemonProcess::spawn(
        &TestConfig::redis(&redis.url()).extra("[server]\nio_threads = 4\n").toml(),
    );
    assert_eq!((runtime_workers(a.pid()), runtime_workers(b.pid())), (0, 4));
    let (mut ca, mut cb) = (a.client().await, b.client().await);

    // Alternate between the daemons, as a load balancer would.
    let mut answers = Vec::new();
    for n in 0..10 {
        let c = if n % 2 == 0 { &mut ca } else { &mut cb };
        answers.push(c.attempt("default", ID).await.unwrap());
    }
    assert_eq!(answers.iter().filter(|d| **d == Allow).count(), 5, "{answers:?}");
    assert_eq!(&answers[..5], [Allow; 5]);

    // Restart daemon A: the count lives in Redis, not in the daemon.
    assert!(a.terminate().await.success(), "SIGTERM did not exit cleanly");
    let a = DaemonProcess::spawn(&config);
    let mut ca = a.client().await;
    assert_eq!(ca.admit("default", ID).await.unwrap(), Deny);
    assert_eq!(ca.attempt("default", ID).await.unwrap(), Deny);

    let logs = format!("{}{}", a.logs(), b.logs());
    assert!(logs.contains("lockout"), "no lockout event was logged");
    assert!(
        logs.contains("realm=default") || logs.contains("realm: default"),
        "lockout event names no realm"
    );
    assert_logs_clean(&logs);
    assert_store_clean(&mut redis.conn(), &NEEDLES);
}

#[tokio::test]
async fn store_errors_are_logged_without_identifiers() {
    let mut redis = RedisServer::start();
    let d = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).toml());
    let mut c = d.client().await;
    c.attempt("default", ID).await.unwrap();
    redis.stop();
    assert_eq!(c.attempt("default", ID).await.unwrap_err().code(), tonic::Code::Unavailable);
    assert_eq!(c.admit("default", ID).await.unwrap_err().code(), tonic::Code::Unavailable);
    let err = c.admit("default", "").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let logs = d.logs();
    assert!(logs.contains("store operation failed"), "the store error was not logged");
    assert_logs_clean(&logs);
}

fn portcullis(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn operator_client_attempts_admits_and_clears() {
    let redis = RedisServer::start();
    let d = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).toml());
    let addr = format!("http://{}", d.addr);
    let op = |verb: &str, extra: &[&str]| {
        let mut args =
            vec![verb, "--realm", "default", "--identifier", "ops@example.com", "--addr", &addr];
        args.extend_from_slice(extra);
        portcullis(&args)
    };
    for _ in 0..5 {
        assert_eq!(op("attempt", &[]), (0, "ALLOW\n".into(), String::new()));
    }
    assert_eq!(op("attempt", &[]).0, 1);
    assert_eq!(op("admit", &[]), (1, "DENY\n".into(), String::new()));
    assert_eq!(op("clear", &["--reason", "password-reset-completed"]).0, 0);
    assert_eq!(op("admit", &[]), (0, "ALLOW\n".into(), String::new()));
    // An error is an error (exit 2), never ALLOW.
    let (code, stdout, stderr) =
        portcullis(&["admit", "--realm", "nope", "--identifier", "x", "--addr", &addr]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("account.realm"), "{stderr}");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, stdout, _) =
        portcullis(&["attempt", "--realm", "default", "--identifier", "x", "--addr", &dead]);
    assert_eq!((code, stdout.as_str()), (2, ""));
}

#[test]
fn check_config_names_the_bad_setting() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, TestConfig::redis("redis://127.0.0.1:6379/").toml()).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        TestConfig::redis("redis://127.0.0.1:6379/")
            .toml()
            .replace("[realms.mfa]", "[realms.mfa]\nmax_failures = 500"),
    )
    .unwrap();
    let with_secret = |file: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .arg("check-config")
            .arg(file)
            .env("PORTCULLIS_KEY_SECRET", SECRET)
            .output()
            .unwrap();
        (out.status.code().unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_eq!(with_secret(&good).0, 0);
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/portcullis.toml");
    assert_eq!(with_secret(&shipped), (0, String::new()), "deploy/portcullis.toml must stay valid");
    let (code, stderr) = with_secret(&bad);
    assert_eq!(code, 2);
    assert!(stderr.contains("realms.mfa.max_failures") && stderr.contains("1–100"), "{stderr}");

    // `serve` refuses to start on the same file, naming the setting.
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--config"])
        .arg(&bad)
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("realms.mfa.max_failures"));

    // A value of the wrong type is named by its setting, never echoed: here it holds a
    // Redis password (by both commands; `serve` logs the error's whole chain).
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        TestConfig::redis("redis://127.0.0.1:6379/").toml().replace(
            "redis_url = \"redis://127.0.0.1:6379/\"",
            "redis_cluster_nodes = \"redis://:hunter2secret@10.0.0.1:6379\"",
        ),
    )
    .unwrap();
    for command in ["check-config", "serve"] {
        let mut run = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        match command {
            "serve" => run.args(["serve", "--config"]),
            _ => run.arg(command),
        };
        let out = run.arg(&typo).env("PORTCULLIS_KEY_SECRET", SECRET).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("store.redis_cluster_nodes"), "{command}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{command} echoed a password: {stderr}");
    }
}
