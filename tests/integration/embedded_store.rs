//! The embedded store as an operator meets it: the default with nothing else
//! installed, durable across `kill -9`, one daemon per data directory, a generated key
//! secret kept private, and a data directory that turns read-only or full answering
//! errors, never an allow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::Decision;
use portcullis::secret::KeySecret;
use portcullis::secret::SECRET_FILE;
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::store::keys::AccountKey;
use portcullis_test_support::*;

/// Reads a record straight from a data directory no daemon holds.
async fn failures_in(data_dir: &Path, secret: KeySecret, identifier: &str) -> Option<u64> {
    let store = EmbeddedStore::open(data_dir, Duration::from_secs(5), Arc::new(SystemClock))
        .expect("the data directory opens after the daemon is gone");
    let key =
        AccountKey::new(&secret, "default", &normalize(Normalization::Email, identifier).unwrap());
    store.record(&key).await.unwrap().map(|r| r.failures)
}

fn test_secret() -> KeySecret {
    KeySecret::new(SECRET.as_bytes().to_vec())
}

/// Runs `portcullis serve` expecting it to refuse to start; returns its stderr.
fn refused_start(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("NO_COLOR", "1")
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "the daemon started: {stderr}");
    assert!(!stderr.contains("listening on"), "it took the port before failing: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_attempt_survives_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(data.path()).toml();
    let daemon = DaemonProcess::spawn(&config);
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let mut c = daemon.client().await;
        let (answered, stop) = (answered.clone(), stop.clone());
        burst.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match c.attempt("default", "burst@example.com").await {
                    Ok(_) => answered.fetch_add(1, Ordering::SeqCst),
                    Err(_) => return,
                };
            }
        });
    }
    while answered.load(Ordering::SeqCst) < 300 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    daemon.kill(); // mid-burst
    stop.store(true, Ordering::SeqCst);
    while burst.join_next().await.is_some() {}
    let answered = answered.load(Ordering::SeqCst);
    let counted = failures_in(data.path(), test_secret(), "burst@example.com").await.unwrap();
    assert!(counted >= answered, "{answered} attempts were answered but only {counted} survived");

    // And the daemon starts again on the same directory, with the count.
    let daemon = DaemonProcess::spawn(&config);
    let mut c = daemon.client().await;
    assert_eq!(c.admit("default", "burst@example.com").await.unwrap(), Decision::Deny);
}

#[tokio::test]
async fn a_second_daemon_on_the_same_data_directory_refuses_naming_the_lock() {
    let data = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(data.path()).toml();
    let _first = DaemonProcess::spawn(&config);
    let stderr = refused_start(&config);
    assert!(stderr.contains("lock") && stderr.contains("portcullis.redb"), "{stderr}");
}

#[tokio::test]
async fn the_generated_secret_is_private_kept_and_never_logged() {
    let data = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(data.path()).toml();
    let first = DaemonProcess::spawn_with_secret(&config, None);
    let mut c = first.client().await;
    for _ in 0..6 {
        c.attempt("default", "kept@example.com").await.unwrap();
    }
    let secret_path = data.path().join(SECRET_FILE);
    let secret = std::fs::read_to_string(&secret_path).unwrap();
    assert_eq!(secret.len(), 64);
    assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key secret is readable by others");
    }
    let logs = first.logs();
    assert!(first.terminate().await.success());
    assert!(!logs.contains(&secret[..16]), "the key secret reached a log line");

    // A restart reads the same secret, so the same keys, so the same counts.
    let second = DaemonProcess::spawn_with_secret(&config, None);
    let mut c = second.client().await;
    assert_eq!(c.admit("default", "kept@example.com").await.unwrap(), Decision::Deny);
    assert_eq!(std::fs::read_to_string(&secret_path).unwrap(), secret);
    assert!(!second.logs().contains(&secret[..16]), "the key secret reached a log line");
}

#[test]
fn an_uncreatable_data_directory_stops_the_start_naming_it() {
    let file = tempfile::NamedTempFile::new().unwrap();
    // A path below a regular file can never be a directory, even for root.
    let bad = file.path().join("data");
    let stderr = refused_start(&TestConfig::embedded(&bad).toml());
    assert!(
        stderr.contains("data directory") && stderr.contains(&bad.display().to_string()),
        "{stderr}"
    );
}

/// A small tmpfs mounted for one test (needs root, as CI runs; elsewhere the test says
/// so and does nothing). Linux refuses to remount a file system read-only while a file
/// on it is open for writing, so a directory turning read-only under a serving daemon
/// cannot be staged; a full one can, and is.
struct Tmpfs(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("mnt");
        std::fs::create_dir(&point).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&point)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs failed as root");
        Some(Self(point, dir))
    }

    fn remount_read_only(&self) {
        let ok = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount,ro failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_read_only_data_directory_stops_the_start() {
    let Some(fs) = Tmpfs::mount("4m") else { return };
    fs.remount_read_only();
    let stderr = refused_start(&TestConfig::embedded(&fs.0.join("data")).toml());
    assert!(stderr.contains("data directory"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_directory_never_answers_allow_without_a_durable_count() {
    let Some(fs) = Tmpfs::mount("3m") else { return };
    let daemon = DaemonProcess::spawn(&TestConfig::embedded(&fs.0).toml());
    let mut c = daemon.client().await;
    // Fill what is left of the file system.
    let filler = fs.0.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let mut allowed = Vec::new();
    let mut errors = 0;
    for n in 0..3000 {
        let id = format!("fill{n}@example.com");
        match c.attempt("default", &id).await {
            Ok(Decision::Allow) => allowed.push(id),
            Ok(other) => panic!("a first attempt answered {other:?}"),
            Err(s) => {
                assert_eq!(s.code(), tonic::Code::Unavailable);
                errors += 1;
                if errors >= 20 {
                    break;
                }
            }
        }
    }
    assert!(errors >= 20, "the file system never filled");
    // Space comes back: the daemon recovers without a restart.
    std::fs::remove_file(&filler).unwrap();
    let mut recovered = false;
    for n in 0..50 {
        let id = format!("after{n}@example.com");
        if let Ok(Decision::Allow) = c.attempt("default", &id).await {
            allowed.push(id);
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the embedded store stayed unavailable after space was freed");
    daemon.kill();
    for id in &allowed {
        assert_eq!(
            failures_in(&fs.0, test_secret(), id).await,
            Some(1),
            "an allow was not durable"
        );
    }
}
