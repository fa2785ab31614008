//! Error messages an operator reads: each names the setting or flag, the address or path,
//! the cause, and what to do; none holds a password, key secret or identifier; none is a
//! panic. The real binary, run the way an operator runs it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use portcullis_test_support::*;

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command.env_remove("PORTCULLIS_ADDR").env_remove("PORTCULLIS_KEY_SECRET").env("NO_COLOR", "1");
    command
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = binary().args(args).output().unwrap();
    text(&out)
}

fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_has(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

fn check_config(file: &Path, secret: Option<&str>) -> (i32, String, String) {
    let mut command = binary();
    command.arg("check-config").arg(file);
    if let Some(secret) = secret {
        command.env("PORTCULLIS_KEY_SECRET", secret);
    }
    text(&command.output().unwrap())
}

fn serve(file: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = binary()
        .args(["serve", "--config"])
        .arg(file)
        .args(extra)
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .output()
        .unwrap();
    text(&out)
}

/// `portcullis health` (the container's health check) and the operator commands name the
/// address they could not reach, the OS's reason, and what to check.
#[test]
fn a_refused_connection_names_the_address_and_the_cause() {
    let port = free_port();
    let addr = format!("http://127.0.0.1:{port}");
    for args in [
        vec!["health", "--addr", &addr],
        vec!["attempt", "--realm", "default", "--identifier", "x", "--addr", &addr],
        vec!["inspect-network", "--realm", "default", "--client-key", "10.0.0.1", "--addr", &addr],
    ] {
        let (code, stdout, stderr) = run(&args);
        assert_eq!((code, stdout.as_str()), (2, ""), "{args:?}: {stderr}");
        assert_has(
            &stderr,
            &[&format!("127.0.0.1:{port}"), "Connection refused", "portcullis serve", "--addr"],
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `--addr HOST:PORT` reaches the daemon as http:// (https:// with --ca-file); another
/// scheme, or https:// without a CA, is refused saying what to write instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_without_a_scheme_reaches_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::on(None, dir.path(), "").await;
    let bare = daemon.addr.to_string();
    let probe = bare.clone();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        // Health follows the store once a second: wait for SERVING.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let answer = run(&["health", "--addr", &probe]);
            if answer.0 == 0 || std::time::Instant::now() > deadline {
                return answer;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    })
    .await
    .unwrap();
    assert_eq!((code, stdout.as_str()), (0, "SERVING\n"), "{stderr}");
    let (code, stdout, stderr) =
        run(&["admit", "--realm", "default", "--identifier", "x", "--addr", &bare]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "ALLOW\n", ""));

    let (code, _, stderr) = run(&["health", "--addr", &format!("redis://user:pw@{bare}")]);
    assert_eq!(code, 2);
    assert_has(&stderr, &["--addr", "http://HOST:PORT", "not redis://"]);
    assert!(!stderr.contains("pw@"), "a password was printed: {stderr}");
    let (code, _, stderr) = run(&["health", "--addr", &format!("https://{bare}")]);
    assert_eq!(code, 2);
    assert_has(&stderr, &["--addr", "https://", "--ca-file"]);
    daemon.shutdown().await;
}

/// Every printing command whose reader closes the pipe early (`| head -1`) exits with
/// its own status, quietly: no panic, nothing on standard error. The identifier or
/// client key is read from standard input, so the pipe is closed before anything is
/// printed, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_output_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::on(None, dir.path(), "").await;
    let addr = format!("http://{}", daemon.addr);
    let cases: [(&[&str], &str, i32); 6] = [
        (&["inspect-network", "--realm", "default", "--client-key", "-"], "10.0.0.1", 0),
        (&["release-network", "--realm", "default", "--client-key", "-"], "10.0.0.1", 0),
        (&["inspect", "--realm", "default", "--identifier", "-"], "pipe@example.com", 0),
        (&["admit", "--realm", "default", "--identifier", "-"], "pipe@example.com", 0),
        (&["attempt", "--realm", "default", "--identifier", "-"], "pipe@example.com", 0),
        (
            &["unlock", "--realm", "default", "--identifier", "-", "--reason", "other"],
            "pipe@example.com",
            0,
        ),
    ];
    for (args, input, want) in cases {
        let addr = addr.clone();
        let (code, stderr) = tokio::task::spawn_blocking(move || {
            let mut child = binary()
                .args(args)
                .args(["--addr", &addr])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            drop(child.stdout.take()); // the reader is gone before a line is written
            let mut stdin = child.stdin.take().unwrap();
            writeln!(stdin, "{input}").unwrap();
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
        })
        .await
        .unwrap();
        assert_eq!((code, stderr.as_str()), (want, ""), "{args:?}");
    }
    daemon.shutdown().await;
}

/// A missing or damaged filter names `breach.filter_file`, the OS's reason, and the
/// command that rebuilds it; `check-config` and `serve` alike.
#[test]
fn a_missing_or_damaged_breach_filter_says_to_rebuild_it() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.filter");
    std::fs::write(&damaged, b"PCBFUSE\0 and then nothing").unwrap();
    let missing = dir.path().join("missing.filter");
    for (path, cause) in [(&missing, "No such file or directory"), (&damaged, "truncated")] {
        let config = dir.path().join("portcullis.toml");
        let breach = format!("[breach]\nfilter_file = {:?}\n", path.display().to_string());
        std::fs::write(
            &config,
            TestConfig::embedded(&dir.path().join("data")).extra(&breach).toml(),
        )
        .unwrap();
        let shown = path.display().to_string();
        let needles =
            ["breach.filter_file", &shown, cause, "portcullis breach-filter build", "--out"];
        let (code, _, stderr) = check_config(&config, None);
        assert_eq!(code, 2, "{stderr}");
        assert_has(&stderr, &needles);
        let (code, _, stderr) = serve(&config, &[]);
        assert_eq!(code, 2, "{stderr}");
        assert_has(&stderr, &needles);
        assert_eq!(stderr.matches(cause).count(), 1, "the cause is printed once: {stderr}");
    }
}

/// `check-config` prints the whole error chain: the OS's reason for a file it could not
/// read, not only that it could not.
#[test]
fn check_config_prints_the_operating_systems_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portcullis.toml");
    let cert = dir.path().join("absent-cert.pem").display().to_string();
    let key = dir.path().join("absent-key.pem").display().to_string();
    let tls = format!("[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\n");
    std::fs::write(&config, TestConfig::embedded(&dir.path().join("data")).extra(&tls).toml())
        .unwrap();
    let (code, _, stderr) = check_config(&config, None);
    assert_eq!(code, 2);
    assert_has(&stderr, &["tls.cert_file", "absent-cert.pem", "No such file or directory"]);
}

/// A Redis that does not answer is named by its setting and URL (without its user name
/// or password) with the cause, and the daemon says what it does meanwhile.
#[test]
fn an_unreachable_redis_is_named_with_its_url_and_cause() {
    let port = free_port();
    let url = format!("redis://alice:hunter2secret@127.0.0.1:{port}/");
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&url).toml());
    let logs = daemon.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("does not answer yet"))
        .unwrap_or_else(|| panic!("no line about the store: {logs}"));
    assert_has(
        line,
        &["store.redis_url", &format!("redis://127.0.0.1:{port}/"), "Connection refused"],
    );
    assert!(!line.contains("alice"), "the user name was printed: {line}");
    assert!(!logs.contains("hunter2secret"), "the password was logged: {logs}");
}

/// A short key secret says where it came from (the file, named, or the environment
/// variable) and how to make a good one; never its bytes.
#[test]
fn a_short_key_secret_says_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portcullis.toml");
    let secret_file = dir.path().join("key_secret");
    std::fs::write(&secret_file, "tooshort-secret-value\n").unwrap();
    std::fs::write(&config, TestConfig::embedded(&dir.path().join("data")).toml()).unwrap();
    let (code, _, stderr) = check_config(&config, Some("tooshort-secret-value"));
    assert_eq!(code, 2);
    assert_has(&stderr, &["PORTCULLIS_KEY_SECRET", "21 bytes", "at least 32", "openssl rand"]);
    assert!(!stderr.contains("store.key_secret_file \""), "{stderr}");
    assert!(!stderr.contains("tooshort-secret-value"), "the secret was printed: {stderr}");

    let with_file = TestConfig::embedded(&dir.path().join("data")).toml().replacen(
        "[store]\n",
        &format!("[store]\nkey_secret_file = {secret_file:?}\n"),
        1,
    );
    std::fs::write(&config, with_file).unwrap();
    let (code, _, stderr) = check_config(&config, None);
    assert_eq!(code, 2);
    let path = secret_file.display().to_string();
    assert_has(&stderr, &["store.key_secret_file", &path, "at least 32", "openssl rand"]);
    assert!(!stderr.contains("PORTCULLIS_KEY_SECRET"), "{stderr}");
    assert!(!stderr.contains("tooshort-secret-value"), "the secret was printed: {stderr}");
}

/// Several bad values are reported together, each by its setting, by `check-config` and
/// `serve` alike.
#[test]
fn every_bad_value_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portcullis.toml");
    let toml = TestConfig::embedded(&dir.path().join("data"))
        .extra("pool_size = 0\n[server]\nmax_connections = 0\n[verify]\nmax_bcrypt_cost = 99\n")
        .toml()
        .replacen("shutdown_delay = \"0s\"", "shutdown_delay = \"1h\"", 1)
        .replacen("[realms.mfa]\n", "[realms.mfa]\nmax_failures = 500\nnetwork_capacity = 0\n", 1);
    std::fs::write(&config, toml).unwrap();
    let settings = [
        "shutdown_delay",
        "store.pool_size",
        "server.max_connections",
        "verify.max_bcrypt_cost",
        "realms.mfa.max_failures",
        "realms.mfa.network_capacity",
    ];
    let (code, _, stderr) = check_config(&config, Some(SECRET));
    assert_eq!(code, 2);
    assert_has(&stderr, &settings);
    assert_has(&stderr, &["6 problems"]);
    let (code, _, stderr) = serve(&config, &[]);
    assert_eq!(code, 2);
    assert_has(&stderr, &settings);
}

/// A port in use names the setting it came from (the file's key or the flag), the
/// address and the cause.
#[test]
fn a_port_in_use_names_its_setting_the_address_and_the_cause() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portcullis.toml");
    let data = dir.path().join("data");
    let file = |listen: &str, admin: &str| {
        let toml = TestConfig::embedded(&data)
            .toml()
            .replacen("listen = \"127.0.0.1:0\"", &format!("listen = \"{listen}\""), 1)
            .replacen("admin_listen = \"\"", &format!("admin_listen = \"{admin}\""), 1);
        std::fs::write(&config, toml).unwrap();
    };
    let in_use = "Address already in use";
    file(&addr, "");
    let (code, _, stderr) = serve(&config, &[]);
    assert_eq!(code, 2);
    assert_has(&stderr, &[&format!("cannot listen on {addr} (listen)"), in_use, "free port"]);
    file("127.0.0.1:0", "");
    let (code, _, stderr) = serve(&config, &["--listen", &addr]);
    assert_eq!(code, 2);
    assert_has(&stderr, &[&format!("cannot listen on {addr} (--listen)"), in_use]);
    file("127.0.0.1:0", &addr);
    let (code, _, stderr) = serve(&config, &[]);
    assert_eq!(code, 2);
    assert_has(&stderr, &[&format!("cannot listen on {addr} (telemetry.admin_listen)"), in_use]);
    file("127.0.0.1:0", "");
    let (code, _, stderr) = serve(&config, &["--admin-listen", &addr]);
    assert_eq!(code, 2);
    assert_has(&stderr, &[&format!("cannot listen on {addr} (--admin-listen)"), in_use]);
    drop(held);
}
