//! `--log-format json`: every log line of the real binary is one JSON object; the
//! lockout event names the realm (a field of its own) and no line names the identifier.

use portcullis::pb::Decision::Deny;
use portcullis_test_support::*;

const ID: &str = "Json.Victim@Example.COM";

#[tokio::test]
async fn json_lines_name_the_realm_and_never_the_identifier() {
    let mut redis = RedisServer::start();
    let d = DaemonProcess::spawn_with_env(
        &TestConfig::redis(&redis.url()).toml(),
        &[("PORTCULLIS_LOG_FORMAT", "json")],
    );
    let mut c = d.client().await;
    for _ in 0..6 {
        c.attempt("mfa", ID).await.unwrap();
    }
    assert_eq!(c.attempt("mfa", ID).await.unwrap(), Deny);
    redis.stop();
    c.attempt("mfa", ID).await.unwrap_err();
    // The daemon's stderr is read by a thread: wait for the outage's line to arrive.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !d.logs().contains("store operation failed") && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let logs = d.logs();
    let mut lockout = None;
    for line in logs.lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(event["level"].is_string() && event["fields"]["message"].is_string(), "{line}");
        let message = event["fields"]["message"].as_str().unwrap_or_default();
        if message.starts_with("lockout") {
            lockout = Some(event.clone());
        }
    }
    let lockout = lockout.expect("a lockout event");
    assert_eq!(lockout["fields"]["realm"], "mfa", "{lockout}");
    assert!(logs.contains("store operation failed"), "the outage was logged");
    let lower = logs.to_lowercase();
    for needle in ["json.victim", "victim", "example.com"] {
        assert!(!lower.contains(needle), "a log line names the identifier ({needle})");
    }
}
