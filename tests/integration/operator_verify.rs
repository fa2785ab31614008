//! `portcullis verify` and `portcullis check-password`, the real binary against a real
//! daemon (embedded store, a breach filter built by `portcullis breach-filter build`):
//! the password comes from standard input with only its line end removed, the verdict
//! and every signal are printed, the device token only when asked, the exit status is
//! 0 accept/ok, 1 reject/refused, 2 error, and no password is ever echoed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use portcullis_test_support::{DaemonProcess, REALMS_TOML, TEST_TOP_LEVEL, free_port};
use sha1::Digest;

const RIGHT: &str = "correct horse battery staple";
/// In the test corpus.
const BREACHED: &str = "Password123!";

/// Runs the binary with `args`, writing `stdin` to its standard input.
fn portcullis(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that exits before reading (a usage error) closes the pipe: ignored.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A breach filter of `passwords`, built by the binary's own command.
fn filter_of(dir: &Path, passwords: &[&str]) -> std::path::PathBuf {
    let corpus = dir.join("corpus.txt");
    let lines: String = passwords
        .iter()
        .map(|p| format!("{}:3\r\n", hex::encode_upper(sha1::Sha1::digest(p.as_bytes()))))
        .collect();
    std::fs::write(&corpus, lines).unwrap();
    let out = dir.join("breach.filter");
    let (code, _, stderr) = portcullis(
        &[
            "breach-filter",
            "build",
            "--from",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(code, 0, "breach-filter build: {stderr}");
    out
}

/// A daemon on an embedded store in `dir`, with the test realms and `extra` TOML.
fn daemon(dir: &Path, extra: &str) -> DaemonProcess {
    DaemonProcess::spawn(&format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\n{extra}\n{REALMS_TOML}",
        dir.join("data").display().to_string()
    ))
}

fn with_filter(dir: &Path) -> DaemonProcess {
    let filter = filter_of(dir, &[BREACHED, "123456", "qwerty123"]);
    daemon(
        dir,
        &format!(
            "[breach]\nfilter_file = {:?}\nservice_words = [\"acme\"]\n",
            filter.display().to_string()
        ),
    )
}

/// What `verify` prints: the verdict, then the signals in order.
fn printed(
    verdict: &str,
    needs_rehash: bool,
    token: &str,
    step_up: bool,
    breached: bool,
) -> String {
    format!(
        "{verdict}\nneeds_rehash: {needs_rehash}\ndevice_token: {token}\nspray_suspected: false\nstep_up: {step_up}\nnetwork_throttled: false\npassword_breached: {breached}\n"
    )
}

const ISSUED: &str = "issued (--show-device-token prints it)";

#[tokio::test]
async fn verify_reads_the_password_and_prints_the_verdict_and_signals() {
    let dir = tempfile::tempdir().unwrap();
    let d = with_filter(dir.path());
    let addr = format!("http://{}", d.addr);
    let hash = bcrypt::hash(RIGHT, 4).unwrap();
    let verify = |identifier: &str, hash: &str, extra: &[&str], stdin: &str| {
        let mut args = vec![
            "verify",
            "--realm",
            "fast",
            "--identifier",
            identifier,
            "--stored-hash",
            hash,
            "--client-key",
            "192.0.2.10",
            "--addr",
            &addr,
        ];
        args.extend_from_slice(extra);
        portcullis(&args, stdin)
    };

    // An accept: exit 0, a device token issued but not printed.
    let (code, stdout, stderr) = verify("alice@example.com", &hash, &[], &format!("{RIGHT}\n"));
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, &*printed("ACCEPT", false, ISSUED, false, false), "")
    );

    // Only the line end is removed: spaces are the password's, and CRLF is a line end.
    let spaced = bcrypt::hash(" spaced  pw ", 4).unwrap();
    assert_eq!(verify("spaces@example.com", &spaced, &[], " spaced  pw \r\n").0, 0);
    assert_eq!(verify("spaces@example.com", &spaced, &[], "spaced  pw\n").0, 1);
    // No line end at all (the end of input ends the line).
    assert_eq!(verify("spaces@example.com", &spaced, &[], " spaced  pw ").0, 0);

    // --show-device-token prints it; sent back, it is accepted like any device's.
    let (code, stdout, _) =
        verify("alice@example.com", &hash, &["--show-device-token"], &format!("{RIGHT}\n"));
    assert_eq!(code, 0);
    let token = stdout
        .lines()
        .find_map(|l| l.strip_prefix("device_token: "))
        .expect("a device_token line")
        .to_owned();
    assert!(token.len() > 16 && !token.contains(' '), "{token:?}");
    let (code, stdout, _) =
        verify("alice@example.com", &hash, &["--device-token", &token], &format!("{RIGHT}\n"));
    assert_eq!((code, stdout.as_str()), (0, &*printed("ACCEPT", false, ISSUED, false, false)));

    // Wrong passwords: exit 1, REJECT, no token; step_up from the third failure
    // (the default max_failures 5 less 2), the password never echoed.
    let mut step_ups = Vec::new();
    for n in 1..=3 {
        let guess = format!("wrong guess {n}");
        let (code, stdout, stderr) = verify("bob@example.com", &hash, &[], &format!("{guess}\n"));
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(!stdout.contains(&guess) && !stderr.contains(&guess));
        assert!(
            stdout.starts_with("REJECT\n") && stdout.contains("device_token: none\n"),
            "{stdout}"
        );
        step_ups.push(stdout.contains("step_up: true"));
    }
    assert_eq!(step_ups, [false, false, true]);

    // An unknown account (an empty stored hash): a reject.
    assert_eq!(verify("nobody@example.com", "", &[], &format!("{RIGHT}\n")).0, 1);

    // A breached password that matches: an accept that says so.
    let breached_hash = bcrypt::hash(BREACHED, 4).unwrap();
    let (code, stdout, _) =
        verify("carol@example.com", &breached_hash, &[], &format!("{BREACHED}\n"));
    assert_eq!((code, stdout.as_str()), (0, &*printed("ACCEPT", false, ISSUED, false, true)));

    // A hash below the realm's target (bcrypt cost 4 in the argon2id `default` realm).
    let mut args = vec!["verify", "--realm", "default", "--identifier", "dave@example.com"];
    args.extend(["--stored-hash", &hash, "--client-key", "192.0.2.10", "--addr", &addr]);
    let (code, stdout, _) = portcullis(&args, &format!("{RIGHT}\n"));
    assert_eq!((code, stdout.as_str()), (0, &*printed("ACCEPT", true, ISSUED, false, false)));

    // --stored-hash-file, and --identifier - (the identifier's line, then the password's).
    let hash_file = dir.path().join("hash.txt");
    std::fs::write(&hash_file, format!("{hash}\n")).unwrap();
    let (code, stdout, _) = portcullis(
        &[
            "verify",
            "--realm",
            "fast",
            "--identifier",
            "-",
            "--stored-hash-file",
            hash_file.to_str().unwrap(),
            "--client-key",
            "192.0.2.10",
            "--addr",
            &addr,
        ],
        &format!("erin@example.com\n{RIGHT}\n"),
    );
    assert_eq!((code, stdout.as_str()), (0, &*printed("ACCEPT", false, ISSUED, false, false)));
}

#[tokio::test]
async fn verify_errors_exit_2_naming_the_cause_and_take_no_password_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(dir.path(), "");
    let addr = format!("http://{}", d.addr);
    let base = ["verify", "--realm", "fast", "--identifier", "a@example.com", "--client-key", "k"];
    let run = |extra: &[&str], stdin: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        portcullis(&args, stdin)
    };

    // No password on standard input.
    let (code, stdout, stderr) = run(&["--stored-hash", "", "--addr", &addr], "");
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("no password on standard input"), "{stderr}");

    // A daemon that is not there: the address and the cause.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, stdout, stderr) = run(&["--stored-hash", "", "--addr", &dead], "pw\n");
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains(&format!("cannot reach the daemon at {dead}")), "{stderr}");

    // The daemon's refusal (a realm it does not have), naming the field.
    let (code, stdout, stderr) = portcullis(
        &[
            "verify",
            "--realm",
            "nope",
            "--identifier",
            "a",
            "--client-key",
            "k",
            "--stored-hash",
            "",
            "--addr",
            &addr,
        ],
        "pw\n",
    );
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("account.realm") && stderr.contains(&addr), "{stderr}");
    assert!(!stderr.contains("pw"), "{stderr}");

    // A malformed stored hash is the daemon's INVALID_ARGUMENT, not a reject.
    let (code, _, stderr) = run(&["--stored-hash", "$2b$nonsense", "--addr", &addr], "pw\n");
    assert_eq!(code, 2, "{stderr}");

    // Usage errors (clap's exit status is 2 too): no hash option, and no password flag.
    let (code, _, stderr) = run(&["--addr", &addr], "pw\n");
    assert_eq!(code, 2);
    assert!(stderr.contains("--stored-hash"), "{stderr}");
    let (code, _, stderr) =
        run(&["--stored-hash", "", "--password", "hunter22", "--addr", &addr], "");
    assert_eq!(code, 2);
    assert!(stderr.contains("unexpected argument"), "{stderr}");
    let missing = dir.path().join("missing.txt");
    let (code, _, stderr) =
        run(&["--stored-hash-file", missing.to_str().unwrap(), "--addr", &addr], "pw\n");
    assert_eq!(code, 2);
    assert!(stderr.contains("--stored-hash-file") && stderr.contains("missing.txt"), "{stderr}");
}

#[tokio::test]
async fn check_password_prints_the_reason_and_exits_0_only_when_ok() {
    let dir = tempfile::tempdir().unwrap();
    let d = with_filter(dir.path());
    let addr = format!("http://{}", d.addr);
    let check = |identifier: &str, password: &str| {
        portcullis(
            &["check-password", "--realm", "fast", "--identifier", identifier, "--addr", &addr],
            &format!("{password}\n"),
        )
    };
    assert_eq!(
        check("alice@example.com", "a fresh long passphrase"),
        (0, "ok\n".into(), String::new())
    );
    assert_eq!(check("alice@example.com", BREACHED), (1, "breached\n".into(), String::new()));
    assert_eq!(
        check("alice@example.com", "alice-rocks-2024"),
        (1, "context-word\n".into(), String::new())
    );
    assert_eq!(
        check("bob@example.com", "my acme pass 9"),
        (1, "context-word\n".into(), String::new())
    );
    // The identifier from standard input too.
    let (code, stdout, _) = portcullis(
        &["check-password", "--realm", "fast", "--identifier", "-", "--addr", &addr],
        &format!("alice@example.com\n{BREACHED}\n"),
    );
    assert_eq!((code, stdout.as_str()), (1, "breached\n"));

    // An empty password is the daemon's INVALID_ARGUMENT: an error, not a verdict.
    let (code, stdout, stderr) = check("alice@example.com", "");
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("password is required"), "{stderr}");

    // Without a filter the check is not made: an error naming the setting, never "ok".
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = daemon(plain_dir.path(), "");
    let plain_addr = format!("http://{}", plain.addr);
    let (code, stdout, stderr) = portcullis(
        &[
            "check-password",
            "--realm",
            "fast",
            "--identifier",
            "a@example.com",
            "--addr",
            &plain_addr,
        ],
        "a fresh long passphrase\n",
    );
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("filter_file") && stderr.contains(&plain_addr), "{stderr}");
    assert!(!stderr.contains("passphrase"), "{stderr}");

    // Unreachable.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, _, stderr) = portcullis(
        &["check-password", "--realm", "fast", "--identifier", "a", "--addr", &dead],
        "pw\n",
    );
    assert_eq!(code, 2);
    assert!(stderr.contains(&format!("cannot reach the daemon at {dead}")), "{stderr}");
}

/// docs/gateways.md's walkthrough, its operator-client half: each `$ portcullis ...` line
/// of its console block, run against a daemon on its embedded defaults, prints what the
/// page shows (the steps the grpcurl half makes, without grpcurl).
#[test]
fn the_gateways_walkthrough_prints_what_the_page_shows() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/gateways.md"))
            .unwrap();
    let section = page.split("## A walkthrough with grpcurl").nth(1).expect("the walkthrough");
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for block in section.split("```console").skip(1) {
        for line in block.split("```").next().unwrap().lines() {
            if let Some(command) = line.strip_prefix("$ ") {
                steps.push((command.to_owned(), Vec::new()));
            } else if let Some((_, shown)) = steps.last_mut()
                && !line.is_empty()
            {
                shown.push(line.to_owned());
            }
        }
    }
    assert!(steps.len() >= 6, "{steps:?}");
    let dir = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(&format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\n",
        dir.path().display().to_string()
    ));
    // `portcullis` is the built binary, pointed at this daemon.
    let prelude = format!(
        "portcullis() {{ local command=$1; shift; '{}' \"$command\" --addr http://{} \"$@\"; }}",
        env!("CARGO_BIN_EXE_portcullis"),
        d.addr
    );
    for (command, shown) in &steps {
        let out = Command::new("bash").arg("-c").arg(format!("{prelude}\n{command}")).output();
        let out = out.unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        let printed: Vec<&str> = printed.lines().collect();
        assert_eq!(
            printed,
            *shown,
            "`{command}` printed {printed:?}, docs/gateways.md shows {shown:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
