//! The operator service through the real binary: `portcullis inspect` shows the door,
//! failures, step and time to reopen; `portcullis unlock` clears the record; every use
//! is logged with the caller's name and the realm, never the identifier; a gateway
//! caller is refused.

use std::process::Command;

use portcullis_test_support::*;

const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789";
const GATEWAY_TOKEN: &str = "gateway-token-0123456789abcdef0123456789";
const IDENTIFIER: &str = "locked.out@example.com";

fn operator(daemon: &DaemonProcess, token: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .args(["--realm", "default", "--identifier", IDENTIFIER])
        .args(["--addr", &format!("http://{}", daemon.addr)])
        .arg("--token-file")
        .arg(token)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn operators_inspect_and_unlock_and_every_use_is_logged_without_the_identifier() {
    let dir = tempfile::tempdir().unwrap();
    let hash = |t: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(t.as_bytes()));
    let ops_hashes =
        portcullis_test_support::pki::write(dir.path(), "ops.sha256", &hash(OPERATOR_TOKEN));
    let gw_hashes =
        portcullis_test_support::pki::write(dir.path(), "gw.sha256", &hash(GATEWAY_TOKEN));
    let ops_token = portcullis_test_support::pki::write(
        dir.path(),
        "ops.token",
        &format!("{OPERATOR_TOKEN}\n"),
    );
    let gw_token = portcullis_test_support::pki::write(dir.path(), "gw.token", GATEWAY_TOKEN);
    let callers = format!(
        r#"
[callers.helpdesk]
token_hash_file = {ops_hashes:?}
rpcs = ["Inspect", "Unlock"]
realms = ["default"]
[callers.gateway]
token_hash_file = {gw_hashes:?}
rpcs = ["RecordAttempt", "Admit"]
realms = ["*"]
"#
    );
    let daemon = DaemonProcess::spawn(
        &TestConfig::embedded(&dir.path().join("data")).extra(&callers).admin("0s").toml(),
    );

    let (code, out) = operator(&daemon, &ops_token, &["inspect"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("door: open") && out.contains("failures: 0"), "{out}");
    assert!(out.contains("shut_by: -\ndoor_shut_at: -"), "{out}");

    let mut gw = caller(daemon.addr, None, Some(GATEWAY_TOKEN)).await.unwrap();
    for _ in 0..6 {
        gw.attempt("default", IDENTIFIER).await.unwrap();
    }
    let (code, out) = operator(&daemon, &ops_token, &["inspect"]);
    assert_eq!(code, 1, "a closed door exits 1: {out}");
    assert!(
        out.contains("door: closed") && out.contains("failures: 6") && out.contains("step: 0"),
        "{out}"
    );
    let seconds: u64 =
        out.lines().find_map(|l| l.strip_prefix("seconds_until_open: ")).unwrap().parse().unwrap();
    assert!((890..=900).contains(&seconds), "{out}");
    // Why: the window, since the fifth attempt (RFC 3339 on the store's clock); no device
    // lane; no network (the gateway sent no client_key).
    assert!(out.contains("shut_by: window") && out.contains("door_shut_at: 20"), "{out}");
    assert!(out.contains("device_lanes: 0\ndevice_failures: 0\ndistinct_networks: 0"), "{out}");

    // A gateway may not use the operator service, nor an operator the Governor.
    let (code, out) = operator(&daemon, &gw_token, &["unlock", "--reason", "owner-verified"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("PermissionDenied") || out.contains("permission"), "{out}");
    let (code, out) = operator(&daemon, &ops_token, &["admit"]);
    assert_eq!(code, 2, "{out}");

    let (code, out) = operator(&daemon, &ops_token, &["unlock", "--reason", "owner-verified"]);
    assert_eq!((code, out.trim()), (0, "unlocked"));
    let (code, out) = operator(&daemon, &ops_token, &["inspect"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("door: open"), "{out}");
    assert_eq!(gw.attempt("default", IDENTIFIER).await.unwrap(), portcullis::pb::Decision::Allow);

    // Every use logged with the caller and realm; the identifier nowhere.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let logs = daemon.logs();
    let uses: Vec<&str> = logs.lines().filter(|l| l.contains("portcullis::admin:")).collect();
    assert_eq!(uses.len(), 4, "{logs}");
    assert!(
        uses.iter().all(|l| l.contains("caller=helpdesk") && l.contains("realm=default")),
        "{logs}"
    );
    assert!(uses.iter().any(|l| l.contains("reason=UNLOCK_REASON_OWNER_VERIFIED")), "{logs}");
    for secret in ["locked.out", IDENTIFIER, OPERATOR_TOKEN, GATEWAY_TOKEN] {
        assert!(!logs.contains(secret), "the logs contain a secret or identifier");
    }
    // Every answered operator call counted by RPC and caller, the refused ones not.
    let (status, metrics) = http_get(daemon.admin_addr(), "/metrics").await.unwrap();
    assert_eq!(status, 200);
    let counted = |rpc: &str| {
        let labels = [format!("rpc=\"{rpc}\""), "caller=\"helpdesk\"".to_owned()];
        metrics
            .lines()
            .filter(|l| l.starts_with("portcullis_admin_calls_total{"))
            .find(|l| labels.iter().all(|label| l.contains(label.as_str())))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.to_owned())
    };
    assert_eq!(counted("Inspect").as_deref(), Some("3"), "{metrics}");
    assert_eq!(counted("Unlock").as_deref(), Some("1"), "{metrics}");
    let calls = metrics.lines().filter(|l| l.starts_with("portcullis_admin_calls_total{"));
    assert_eq!(calls.count(), 2, "the gateway's refused Unlock is not counted: {metrics}");
    assert!(daemon.terminate().await.success());
}

/// `portcullis inspect-network` / `release-network` through the real binary, with
/// their own permissions; their audit lines name the network's tag, never the address.
#[tokio::test]
async fn network_operators_inspect_and_release_a_bucket_with_their_own_permission() {
    const NETOPS_TOKEN: &str = "netops-token-0123456789abcdef0123456789ab";
    let dir = tempfile::tempdir().unwrap();
    let hash = |t: &str| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(t.as_bytes()));
    let file = |name: &str, text: &str| portcullis_test_support::pki::write(dir.path(), name, text);
    let (netops_hashes, ops_hashes, gw_hashes) = (
        file("netops.sha256", &hash(NETOPS_TOKEN)),
        file("ops.sha256", &hash(OPERATOR_TOKEN)),
        file("gw.sha256", &hash(GATEWAY_TOKEN)),
    );
    let (netops_token, ops_token) =
        (file("netops.token", NETOPS_TOKEN), file("ops.token", OPERATOR_TOKEN));
    let config = format!(
        r#"
[callers.netops]
token_hash_file = {netops_hashes:?}
rpcs = ["InspectNetwork", "ReleaseNetwork"]
realms = ["tiny"]
[callers.helpdesk]
token_hash_file = {ops_hashes:?}
rpcs = ["Inspect", "Unlock"]
realms = ["*"]
[callers.gateway]
token_hash_file = {gw_hashes:?}
rpcs = ["Verify"]
realms = ["*"]
[realms.tiny]
network_capacity = 2
hash = {{ algorithm = "bcrypt", bcrypt_cost = 4 }}
"#
    );
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data")).extra(&config).toml());
    let mut gw = caller(daemon.addr, None, Some(GATEWAY_TOKEN)).await.unwrap();
    for n in 0..3 {
        let request = portcullis::pb::VerifyRequest {
            account: account("tiny", &format!("n{n}@example.com")),
            password: b"guess".to_vec(),
            client_key: "203.0.113.5".into(),
            ..Default::default()
        };
        gw.governor.verify(request).await.unwrap();
    }
    let network = |token: &std::path::Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(args)
            .args(["--realm", "tiny", "--client-key", "203.0.113.5"])
            .args(["--addr", &format!("http://{}", daemon.addr)])
            .arg("--token-file")
            .arg(token)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    };
    let (code, out) = network(&netops_token, &["inspect-network"]);
    assert_eq!(code, 1, "an empty bucket exits 1: {out}");
    assert!(out.contains("tokens: 0") && out.contains("capacity: 2"), "{out}");
    let tag = out.lines().find_map(|l| l.strip_prefix("network: ")).unwrap().to_owned();
    assert_eq!(tag.len(), 16, "{out}");
    // Inspect and Unlock do not include the network RPCs.
    let (code, out) = network(&ops_token, &["inspect-network"]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = network(&ops_token, &["release-network"]);
    assert_eq!(code, 2, "{out}");
    let (code, out) = network(&netops_token, &["release-network"]);
    assert_eq!((code, out.trim()), (0, "released"));
    let (code, out) = network(&netops_token, &["inspect-network"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("tokens: 2"), "{out}");

    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let logs = daemon.logs();
    let uses: Vec<&str> = logs.lines().filter(|l| l.contains("portcullis::admin:")).collect();
    assert_eq!(uses.len(), 3, "{logs}");
    assert!(uses.iter().all(|l| l.contains("caller=netops") && l.contains(&tag)), "{logs}");
    assert!(!logs.contains("203.0.113"), "a log line holds the client's address");
    assert!(daemon.terminate().await.success());
}
