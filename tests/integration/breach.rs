//! Breached passwords (docs/breach.md): a corpus the test makes itself (a million SHA-1s
//! plus known passwords) built into a filter flags every listed password and fresh ones
//! at most at the documented rate; `Verify` says so on an accept only; `CheckPassword`
//! answers its reason codes; a missing or broken file stops the start naming it, a broken
//! one at reload keeps the filter in force, and reloads under load fail no call; no
//! password, hash or SHA-1 of one reaches a log or a metric.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::client::PasswordCheck::{Breached, ContextWord, Unchecked};
use portcullis::defence::breach::build::{BuildOptions, build};
use portcullis::defence::breach::{BreachFilter, FALSE_POSITIVE_RATE};
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{CheckPasswordRequest, PasswordCheckReason, Verdict};
use portcullis_test_support::*;
use prost::Message;
use sha1::Digest;

/// Passwords every test corpus lists, beside the generated ones.
const KNOWN: [&str; 3] = ["Summer2026!", "password1", "correct horse battery staple"];
/// A password no corpus here lists.
const UNLISTED: &str = "a passphrase nobody has leaked, 7f3a";

fn sha1_hex(password: &str) -> String {
    hex::encode_upper(sha1::Sha1::digest(password.as_bytes()))
}

/// Writes a Pwned-Passwords-format corpus of `passwords` (`HASH:count`, CRLF like the
/// downloads), in the order given.
fn write_corpus(path: &Path, passwords: impl Iterator<Item = String>) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (n, p) in passwords.enumerate() {
        write!(out, "{}:{}\r\n", sha1_hex(&p), n % 7 + 1).unwrap();
    }
    out.flush().unwrap();
}

fn filter_of(dir: &Path, name: &str, passwords: &[&str]) -> PathBuf {
    let corpus = dir.join(format!("{name}.txt"));
    write_corpus(&corpus, passwords.iter().map(|p| (*p).to_owned()));
    let out = dir.join(format!("{name}.filter"));
    build(&corpus, &out, &BuildOptions::default()).unwrap();
    out
}

#[test]
fn a_generated_million_is_flagged_whole_and_fresh_passwords_at_the_documented_rate() {
    const LISTED: usize = 1_000_000;
    const FRESH: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    let listed = (0..LISTED).map(|n| format!("listed password {n}"));
    write_corpus(&corpus, listed.chain(KNOWN.iter().map(|p| (*p).to_owned())));
    let out = dir.path().join("breach.filter");
    let built = build(&corpus, &out, &BuildOptions::default()).unwrap();
    assert_eq!((built.lines, built.entries), ((LISTED + KNOWN.len()) as u64, (LISTED + 3) as u64));
    let filter = BreachFilter::load(&out).unwrap();
    assert_eq!(filter.bytes(), std::fs::metadata(&out).unwrap().len());
    eprintln!(
        "{} entries: built in {:.2} s, {} bytes ({:.2} bytes an entry)",
        built.entries,
        built.took.as_secs_f64(),
        built.bytes,
        built.bytes as f64 / built.entries as f64
    );
    // Every listed password is flagged: a filter has no false negatives.
    for n in 0..LISTED {
        assert!(filter.contains(format!("listed password {n}").as_bytes()), "listed {n} missed");
    }
    for p in KNOWN {
        assert!(filter.contains(p.as_bytes()), "{p} missed");
    }
    // Fresh passwords: 2^-16 each, so about 1.5 in 100,000. The passwords are fixed, so
    // the count is too; 8 is the 99.99 % quantile of the expected Poisson count.
    let flagged = (0..FRESH).filter(|n| filter.contains(format!("fresh {n}").as_bytes())).count();
    let rate = flagged as f64 / FRESH as f64;
    eprintln!(
        "false positives: {flagged} of {FRESH} ({rate:.6}; documented {FALSE_POSITIVE_RATE:.6})"
    );
    assert!(flagged <= 8, "{flagged} false positives in {FRESH}");

    // --min-count leaves out the rarer lines (counts cycle 1..=7: 2 and up keeps 6 in 7).
    let at_least_2 = dir.path().join("common.filter");
    let options = BuildOptions { min_count: 2, ..BuildOptions::default() };
    let common = build(&corpus, &at_least_2, &options).unwrap();
    let total = (LISTED + KNOWN.len()) as u64;
    assert_eq!(common.below_min_count, total.div_ceil(7));
    assert_eq!(common.entries, total - total.div_ceil(7));
    assert_eq!(BreachFilter::load(&at_least_2).unwrap().min_count(), 2);
}

#[test]
fn the_command_builds_a_filter_and_names_a_bad_line_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    write_corpus(&corpus, KNOWN.iter().map(|p| (*p).to_owned()));
    let out = dir.path().join("breach.filter");
    let run = |from: &Path| {
        Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["breach-filter", "build", "--from"])
            .arg(from)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    let done = run(&corpus);
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(stdout.contains("3 entries") && stdout.contains("1 in 65536"), "{stdout}");
    assert!(BreachFilter::load(&out).unwrap().contains(b"Summer2026!"));
    // Line 2 holds a password in clear: refused, named by its number, never echoed; the
    // filter written before stays as it was.
    let bad = dir.path().join("bad.txt");
    let first = sha1_hex("x");
    std::fs::write(&bad, format!("{first}:1\nhunter2-in-clear\n")).unwrap();
    let refused = run(&bad);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr.contains("line 2") && stderr.contains("not a SHA-1"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the line was echoed: {stderr}");
    assert!(BreachFilter::load(&out).unwrap().contains(b"Summer2026!"), "a failed build broke it");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".portcullis-breach"))
        .collect();
    assert!(leftovers.is_empty(), "the build left {leftovers:?}");
}

#[test]
fn a_damaged_file_is_refused_whatever_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let good = filter_of(dir.path(), "good", &KNOWN);
    let bytes = std::fs::read(&good).unwrap();
    let damaged = dir.path().join("damaged.filter");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", bytes[..bytes.len() - 1].to_vec()),
        ("one more byte", [&bytes[..], &[0]].concat()),
        ("a flipped fingerprint bit", {
            let mut b = bytes.clone();
            let at = b.len() - 40;
            b[at] ^= 1;
            b
        }),
        ("another magic", [&b"NOTAFILT"[..], &bytes[8..]].concat()),
        ("a corpus instead", sha1_hex("x").into_bytes()),
    ];
    for (what, content) in cases {
        std::fs::write(&damaged, content).unwrap();
        let e = BreachFilter::load(&damaged).unwrap_err().to_string();
        assert!(e.contains("damaged.filter"), "{what}: the error does not name the file: {e}");
    }
    // Not a regular file: refused at once, never opened (a FIFO would block the reload,
    // and with it SIGHUP and shutdown).
    let fifo = dir.path().join("fifo.filter");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for path in [fifo, dir.path().to_owned()] {
        let e = BreachFilter::load(&path).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}

#[test]
fn the_builder_keeps_the_corpus_and_bounds_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    write_corpus(&corpus, KNOWN.iter().map(|p| (*p).to_owned()));
    let before = std::fs::read(&corpus).unwrap();
    let e = build(&corpus, &corpus, &BuildOptions::default()).unwrap_err().to_string();
    assert!(e.contains("the corpus itself"), "{e}");
    assert_eq!(std::fs::read(&corpus).unwrap(), before, "the corpus was overwritten");
    // An empty corpus (or one --min-count empties) makes no filter: it would accept all.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\r\n\n").unwrap();
    let e = build(&empty, &dir.path().join("e.filter"), &BuildOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no entry"), "{e}");
    let options = BuildOptions { min_count: 1_000, ..BuildOptions::default() };
    assert!(build(&corpus, &dir.path().join("e.filter"), &options).is_err());
    assert!(!dir.path().join("e.filter").exists());
    // A file without newlines is refused at its first line, not read into memory whole.
    let long = dir.path().join("long.txt");
    std::fs::write(&long, "A".repeat(1 << 20)).unwrap();
    let e = build(&long, &dir.path().join("x.filter"), &BuildOptions::default()).unwrap_err();
    assert!(e.to_string().contains("line 1") && e.to_string().contains("longer"), "{e}");
}

fn breach_toml(filter: &Path, extra: &str) -> String {
    format!(
        "[breach]\nfilter_file = {:?}\nreload_interval = \"1s\"\nservice_words = [\"Portcullis\", \"acme\"]\n{extra}",
        filter.to_str().unwrap()
    )
}

async fn check(
    c: &mut GovernorClient<tonic::transport::Channel>,
    identifier: &str,
    password: &[u8],
) -> Result<PasswordCheckReason, tonic::Status> {
    let r = c
        .check_password(CheckPasswordRequest {
            account: account("fast", identifier),
            password: password.to_vec(),
        })
        .await?;
    Ok(PasswordCheckReason::try_from(r.into_inner().reason).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_flags_a_breached_password_on_accept_only_and_check_password_names_why() {
    let dir = tempfile::tempdir().unwrap();
    let filter = filter_of(dir.path(), "breach", &KNOWN);
    let d = Daemon::start(
        TestConfig::embedded(&dir.path().join("data")).extra(&breach_toml(&filter, "")).settings(),
    )
    .await;
    let mut c = d.client().await;
    let breached = bcrypt::hash("Summer2026!", 4).unwrap();
    let fine = bcrypt::hash(UNLISTED, 4).unwrap();
    let r =
        c.verify("fast", "a@example.com", b"Summer2026!", &breached, "192.0.2.1").await.unwrap();
    assert_eq!((verdict(&r), r.password_breached), (Verdict::Accept, true));
    let r =
        c.verify("fast", "b@example.com", UNLISTED.as_bytes(), &fine, "192.0.2.1").await.unwrap();
    assert_eq!((verdict(&r), r.password_breached), (Verdict::Accept, false));
    // A reject says nothing about the password: a breached wrong password and an unlisted
    // one get the same bytes.
    let wrong_breached =
        c.verify("fast", "c@example.com", b"password1", &fine, "192.0.2.2").await.unwrap();
    let wrong_unlisted =
        c.verify("fast", "d@example.com", b"not listed 9", &fine, "192.0.2.3").await.unwrap();
    assert_eq!(verdict(&wrong_breached), Verdict::Reject);
    assert_eq!(wrong_breached.encode_to_vec(), wrong_unlisted.encode_to_vec());

    let mut g = GovernorClient::connect(format!("http://{}", d.addr)).await.unwrap();
    let cases: [(&str, &[u8], PasswordCheckReason); 6] = [
        ("alice@example.com", b"Summer2026!", PasswordCheckReason::Breached),
        ("alice@example.com", b"ALICE@example.com rocks", PasswordCheckReason::ContextWord),
        (
            "alice@example.com",
            b"my name is \xC3\x81lice? no: alice!",
            PasswordCheckReason::ContextWord,
        ),
        ("bo@example.com", b"bo is short, 4 chars minimum", PasswordCheckReason::Ok),
        ("carol@example.com", b"i love PORTCULLIS so much", PasswordCheckReason::ContextWord),
        ("carol@example.com", UNLISTED.as_bytes(), PasswordCheckReason::Ok),
    ];
    for (identifier, password, want) in cases {
        let got = check(&mut g, identifier, password).await.unwrap();
        assert_eq!(got, want, "{identifier} / {}", String::from_utf8_lossy(password));
    }
    // Bad input is INVALID_ARGUMENT naming the field, and the password is never echoed.
    for (password, field) in [
        (Vec::new(), "password"),
        (vec![b'x'; 4097], "password"),
        (b"\xff\xfe not utf-8".to_vec(), "password"),
    ] {
        let e = check(&mut g, "alice@example.com", &password).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains(field), "{}", e.message());
    }
    let e = check(&mut g, "", b"whatever").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // The gateway library: only Acceptable accepts.
    let library = gateway_client(d.addr);
    assert_eq!(library.check_password("fast", "a@example.com", b"password1").await, Breached);
    assert_eq!(
        library.check_password("fast", "alice@example.com", b"alice2026!").await,
        ContextWord
    );
    assert!(
        library.check_password("fast", "a@example.com", UNLISTED.as_bytes()).await.is_acceptable()
    );
    assert_eq!(
        library.check_password("fast", "a@example.com", b"").await,
        Unchecked { retryable: false },
        "bad input"
    );
    let addr = d.addr;
    d.shutdown().await;
    let gone = library.check_password("fast", "a@example.com", UNLISTED.as_bytes()).await;
    assert_eq!(gone, Unchecked { retryable: true }, "an unreachable daemon: {addr}");

    // Without a filter the check cannot be made: FAILED_PRECONDITION, never "ok".
    let d = Daemon::start(TestConfig::embedded(&dir.path().join("data2")).settings()).await;
    let mut g = GovernorClient::connect(format!("http://{}", d.addr)).await.unwrap();
    let e = check(&mut g, "alice@example.com", UNLISTED.as_bytes()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let unchecked = gateway_client(d.addr).check_password("fast", "a@example.com", b"x1").await;
    assert_eq!(unchecked, Unchecked { retryable: false });
    d.shutdown().await;
}

fn gateway_client(addr: std::net::SocketAddr) -> portcullis::client::Client {
    portcullis::client::Client::new(portcullis::client::ClientConfig {
        endpoints: vec![format!("http://{addr}")],
        call_timeout: Duration::from_secs(2),
        ..portcullis::client::ClientConfig::default()
    })
    .unwrap()
}

/// `serve` and `check-config` refuse a missing or broken filter file, naming it.
#[test]
fn a_missing_or_broken_filter_stops_the_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.filter");
    std::fs::write(&broken, b"PCBFUSE\0 but nothing else").unwrap();
    for (what, path) in [("missing", dir.path().join("missing.filter")), ("broken", broken)] {
        let config = dir.path().join("portcullis.toml");
        let toml =
            TestConfig::embedded(&dir.path().join("data")).extra(&breach_toml(&path, "")).toml();
        std::fs::write(&config, toml).unwrap();
        for command in ["check-config", "serve"] {
            let mut run = Command::new(env!("CARGO_BIN_EXE_portcullis"));
            match command {
                "serve" => run.args(["serve", "--config"]),
                _ => run.arg(command),
            };
            let out = run.arg(&config).env("NO_COLOR", "1").output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{what}, {command}: started");
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(stderr.contains(name), "{what}, {command}: the file is not named: {stderr}");
        }
    }
}

/// Logins run on while the file is replaced: a broken file keeps the filter in force,
/// a new one comes into force within the reload interval, and no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_no_call_and_a_broken_file_keeps_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.filter");
    let first = filter_of(dir.path(), "first", &KNOWN);
    std::fs::copy(&first, &live).unwrap();
    let d = Daemon::start(
        TestConfig::embedded(&dir.path().join("data")).extra(&breach_toml(&live, "")).settings(),
    )
    .await;
    let hash = bcrypt::hash("Summer2026!", 4).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, flagged) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let (mut c, hash, stop) = (d.client().await, hash.clone(), stop.clone());
        let (calls, flagged) = (calls.clone(), flagged.clone());
        load.spawn(async move {
            let mut n = 0u64;
            let from = format!("10.0.{worker}.1");
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("load-{worker}-{n}@example.com");
                let r = c.verify("fast", &id, b"Summer2026!", &hash, &from);
                let r = r.await.expect("a call failed during a reload");
                assert_eq!(verdict(&r), Verdict::Accept);
                calls.fetch_add(1, Ordering::Relaxed);
                flagged.fetch_add(u64::from(r.password_breached), Ordering::Relaxed);
            }
        });
    }
    let mut c = d.client().await;
    let probe = |c: &mut Client, password: &'static str| {
        let mut c = c.clone();
        async move {
            let hash = bcrypt::hash(password, 4).unwrap();
            let id = format!("probe-{}@example.com", uuid::Uuid::new_v4());
            c.verify("fast", &id, password.as_bytes(), &hash, "192.0.2.9").await.unwrap()
        }
    };
    assert!(probe(&mut c, "Summer2026!").await.password_breached);
    // A broken file (a copy cut short) over the live one: the filter in force stays.
    let bytes = std::fs::read(&first).unwrap();
    std::fs::write(&live, &bytes[..bytes.len() / 2]).unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(probe(&mut c, "Summer2026!").await.password_breached, "a broken file replaced it");
    // A new filter, renamed into place: in force within the interval.
    let second = filter_of(dir.path(), "second", &["NewlyLeaked#1"]);
    std::fs::rename(&second, &live).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe(&mut c, "NewlyLeaked#1").await.password_breached {
        assert!(Instant::now() < deadline, "the new filter never came into force");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!probe(&mut c, "Summer2026!").await.password_breached, "the old filter is in force");
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = load.join_next().await {
        done.unwrap();
    }
    let (calls, flagged) = (calls.load(Ordering::Relaxed), flagged.load(Ordering::Relaxed));
    assert!(calls > 20 && flagged > 0 && flagged < calls, "{calls} calls, {flagged} flagged");
    d.shutdown().await;
}

/// SIGHUP reloads the filter at once (the interval is an hour here); logs and metrics
/// name no password, hash or SHA-1 of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_it_and_nothing_secret_reaches_logs_or_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.filter");
    std::fs::copy(filter_of(dir.path(), "first", &KNOWN), &live).unwrap();
    let toml =
        breach_toml(&live, "").replace("reload_interval = \"1s\"", "reload_interval = \"1h\"");
    let config = TestConfig::embedded(&dir.path().join("data")).extra(&toml).admin("0s").toml();
    let daemon = DaemonProcess::spawn(&config);
    daemon.wait_for_log("breach filter loaded", 1).await;
    let mut c = daemon.client().await;
    let hash = bcrypt::hash("Summer2026!", 4).unwrap();
    let r = c.verify("fast", "e@example.com", b"Summer2026!", &hash, "192.0.2.1").await.unwrap();
    assert!(r.password_breached);
    let mut g = GovernorClient::connect(format!("http://{}", daemon.addr)).await.unwrap();
    assert_eq!(
        check(&mut g, "e@example.com", b"password1").await.unwrap(),
        PasswordCheckReason::Breached
    );

    std::fs::copy(filter_of(dir.path(), "second", &["NewlyLeaked#1"]), &live).unwrap();
    daemon.signal("HUP");
    daemon.wait_for_log("breach filter reloaded", 1).await;
    let r = c.verify("fast", "f@example.com", b"Summer2026!", &hash, "192.0.2.1").await.unwrap();
    assert!(!r.password_breached, "SIGHUP did not reload the filter");

    let (status, metrics) = http_get(daemon.admin_addr(), "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("portcullis_breached_accepts_total{realm=\"fast\"} 1"), "{metrics}");
    assert!(
        metrics.contains("portcullis_password_checks_total{realm=\"fast\",reason=\"breached\"} 1")
    );
    assert!(metrics.contains("portcullis_breach_filter_entries 1"), "{metrics}");
    let logs = daemon.logs();
    for password in ["Summer2026!", "password1", "NewlyLeaked#1"] {
        let sha = sha1_hex(password);
        let needles =
            [password.to_owned(), sha.clone(), sha.to_lowercase(), sha[..16].to_lowercase()];
        for needle in needles.iter().chain([&hash]) {
            assert!(!logs.contains(needle.as_str()), "a log line holds a secret");
            assert!(!metrics.contains(needle.as_str()), "a metric holds a secret");
        }
    }
}
