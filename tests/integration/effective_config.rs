//! The running configuration (`Admin/EffectiveConfig`, `portcullis config-dump`;
//! docs/observability.md, "The running configuration"): what a daemon runs, defaults
//! filled in; the file's digest, so two replicas with different files tell apart; a
//! reload's pending restart; secrets named, never shown; realms the caller may not use
//! left out; the RPC is an operator's permission like any other.

use std::process::Command;

use portcullis::pb::EffectiveConfigRequest;
use portcullis_test_support::*;
use sha2::{Digest, Sha256};
use tonic::Code;

fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `portcullis config-dump` against `daemon`, parsed; panics on a non-zero exit.
fn config_dump(daemon: &DaemonProcess) -> serde_json::Value {
    let out = Command::new(daemon_binary())
        .args(["config-dump", "--addr", &format!("http://{}", daemon.addr)])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_with_different_files_show_different_digests_and_a_reload_what_waits() {
    let dir = tempfile::tempdir().unwrap();
    let one = TestConfig::embedded(&dir.path().join("one")).toml();
    let two = TestConfig::embedded(&dir.path().join("two"))
        .extra("[verify]\nmax_concurrent = 1\n")
        .toml();
    let (first, second) = (DaemonProcess::spawn(&one), DaemonProcess::spawn(&two));
    let (a, b) = (config_dump(&first), config_dump(&second));

    assert_eq!(a["file_sha256"], sha256_hex(&one), "the digest is the file's bytes'");
    assert_eq!(b["file_sha256"], sha256_hex(&two));
    assert_ne!(a["settings_sha256"], b["settings_sha256"]);
    assert_eq!(b["settings"]["verify"]["max_concurrent"], 1);
    // Defaults filled in: the file names neither.
    assert_eq!(a["settings"]["realms"]["default"]["max_failures"], 5);
    assert_eq!(a["settings"]["store"]["pool_size"], 16);
    assert_eq!(a["restart_pending"], serde_json::json!([]));
    let secrets = a["secrets"].to_string();
    assert!(secrets.contains("from the environment variable PORTCULLIS_KEY_SECRET"), "{secrets}");
    assert!(!a.to_string().contains(SECRET), "the key secret shown");

    // A reload that changes a realm: the file's new digest, the realm still as it runs,
    // and the section named as waiting for a restart.
    let changed = one.replace("[realms.fast]", "[realms.fast]\nmax_failures = 2");
    std::fs::write(first.config_path(), &changed).unwrap();
    first.signal("HUP");
    first.wait_for_log("restart pending: the other changed sections", 1).await;
    let reloaded = config_dump(&first);
    assert_eq!(reloaded["file_sha256"], sha256_hex(&changed));
    assert_eq!(reloaded["restart_pending"], serde_json::json!(["realms"]));
    assert_eq!(reloaded["settings"]["realms"]["fast"]["max_failures"], 5, "applied early");
    assert_eq!(reloaded["settings_sha256"], a["settings_sha256"], "the same settings run");
    assert!(first.terminate().await.success());
    assert!(second.terminate().await.success());
}

#[tokio::test]
async fn an_operator_sees_the_realms_it_may_use_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let (ops, web) =
        ("ops-token-0123456789abcdef0123456789", "web-token-0123456789abcdef0123456789");
    let file = |name: &str, token: &str| {
        pki::write(dir.path(), name, &format!("{}\n", sha256_hex(token.as_bytes())))
    };
    let callers = format!(
        "[callers.ops]\ntoken_hash_file = {:?}\nrpcs = [\"EffectiveConfig\"]\nrealms = [\"default\", \"fast\"]\n\
         [callers.web]\ntoken_hash_file = {:?}\nrpcs = [\"RecordAttempt\"]\nrealms = [\"*\"]\n\
         [callers.mfa-only]\ntoken_hash_file = {:?}\nrpcs = [\"Admit\"]\nrealms = [\"mfa\", \"fast\"]\n",
        file("ops.sha256", ops),
        file("web.sha256", web),
        file("mfa.sha256", "mfa-token-0123456789abcdef0123456789"),
    );
    let daemon =
        Daemon::start(TestConfig::embedded(&dir.path().join("data")).extra(&callers).settings())
            .await;

    let mut operator = caller(daemon.addr, None, Some(ops)).await.unwrap();
    let answer =
        operator.admin.effective_config(EffectiveConfigRequest {}).await.unwrap().into_inner();
    let settings: serde_json::Value = serde_json::from_str(&answer.settings_json).unwrap();
    let realms: Vec<&String> = settings["realms"].as_object().unwrap().keys().collect();
    assert_eq!(realms, ["default", "fast"], "only the realms the caller may use");
    // Nor is a hidden realm named in another caller's list; "*" stays.
    assert_eq!(settings["callers"]["mfa-only"]["realms"], serde_json::json!(["fast"]));
    assert_eq!(settings["callers"]["web"]["realms"], serde_json::json!(["*"]));
    assert!(!answer.settings_json.contains("\"mfa\""), "{}", answer.settings_json);
    assert_eq!(answer.settings_sha256.len(), 64);
    assert!(answer.file_sha256.is_empty(), "a daemon built in-process read no file");
    let named = answer.secrets.join("\n");
    assert!(named.contains("callers.ops.token_hash_file"), "{named}");
    let everything = format!("{answer:?}");
    for secret in [ops, web, SECRET, &sha256_hex(ops.as_bytes()), &sha256_hex(web.as_bytes())] {
        assert!(!everything.contains(secret), "{secret} shown");
    }

    // A gateway without the permission is refused, as for any other Admin RPC.
    let mut gateway = caller(daemon.addr, None, Some(web)).await.unwrap();
    let refused = gateway.admin.effective_config(EffectiveConfigRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    daemon.shutdown().await;
}
