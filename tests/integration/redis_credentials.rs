//! Redis ACL credentials from `store.redis_username` and a password file or
//! `PORTCULLIS_REDIS_PASSWORD`: the daemon counts with them, never logs the password, and
//! denies with wrong ones. The store shape settings are mutually exclusive whether they
//! come from the file, a flag or the environment.

use std::process::{Command, Stdio};

use portcullis::pb::Decision;
use portcullis_test_support::*;
use tonic::Code;

const PASSWORD: &str = "s3cret-acl-password-for-tests";

/// An ACL user `app` allowed only the store's keys.
fn add_acl_user(redis: &RedisServer) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(format!(">{PASSWORD}"))
        .arg("~portcullis:*")
        .arg("+@all")
        .query(&mut redis.conn())
        .unwrap();
}

#[tokio::test]
async fn an_acl_user_with_a_password_from_the_environment_counts_and_is_never_logged() {
    let redis = RedisServer::start();
    add_acl_user(&redis);
    let config = TestConfig::redis(&redis.url()).extra("redis_username = \"app\"").toml();
    let daemon = DaemonProcess::spawn_with_env(&config, &[("PORTCULLIS_REDIS_PASSWORD", PASSWORD)]);
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "acl@example.com").await.unwrap(), Decision::Allow);
    assert_eq!(c.admit("default", "acl@example.com").await.unwrap(), Decision::Allow);
    let logs = daemon.logs();
    assert!(!logs.contains(PASSWORD), "the password reached a log line");
}

#[tokio::test]
async fn a_password_file_and_a_password_in_the_url_are_redacted() {
    let redis = RedisServer::start();
    add_acl_user(&redis);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let config = TestConfig::redis(&redis.url())
        .extra(&format!(
            "redis_username = \"app\"\nredis_password_file = {:?}",
            file.display().to_string()
        ))
        .toml();
    let daemon = DaemonProcess::spawn(&config);
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "file@example.com").await.unwrap(), Decision::Allow);
    assert!(!daemon.logs().contains(PASSWORD));

    let url = format!("redis://app:{PASSWORD}@127.0.0.1:{}/", redis.port);
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&url).toml());
    let mut c = daemon.client().await;
    assert_eq!(c.attempt("default", "url@example.com").await.unwrap(), Decision::Allow);
    assert!(!daemon.logs().contains(PASSWORD));
}

#[tokio::test]
async fn a_wrong_password_denies() {
    let redis = RedisServer::start();
    add_acl_user(&redis);
    let config = TestConfig::redis(&redis.url()).extra("redis_username = \"app\"").toml();
    let daemon = DaemonProcess::spawn_with_env(&config, &[("PORTCULLIS_REDIS_PASSWORD", "wrong")]);
    let mut c = daemon.client().await;
    let e = c.attempt("default", "wrong@example.com").await.expect_err("answered");
    assert_eq!(e.code(), Code::Unavailable);
    assert!(!daemon.logs().contains(PASSWORD));
}

/// Runs `portcullis serve` with `env` and `args`; expects exit status 2 and returns stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:0\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .args(args)
        .envs(env.iter().copied())
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn shapes_from_flags_and_the_environment_are_mutually_exclusive() {
    let e = refused(
        &["--redis-cluster-nodes", "redis://127.0.0.1:1,redis://127.0.0.1:2"],
        &[("PORTCULLIS_REDIS_URL", "redis://:urlpw@127.0.0.1:3")],
    );
    assert!(e.contains("store.redis_url, store.redis_cluster_nodes"), "{e}");
    assert!(!e.contains("urlpw"), "{e}");
    let e = refused(
        &[],
        &[
            ("PORTCULLIS_REDIS_CLUSTER_NODES", "redis://127.0.0.1:1"),
            ("PORTCULLIS_REDIS_SENTINEL_MASTER_NAME", "main"),
            ("PORTCULLIS_REDIS_SENTINEL_NODES", "redis://127.0.0.1:26379"),
        ],
    );
    assert!(e.contains("store.redis_cluster_nodes, store.redis_sentinel"), "{e}");
    let e = refused(&["--redis-sentinel-master-name", "main"], &[]);
    assert!(e.contains("redis-sentinel-nodes"), "{e}");
}
