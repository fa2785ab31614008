//! One call's log lines, as an operator reads them: the text and the JSON line of the
//! attempt that starts a lockout, with its span context, at `trace` and `info`. The
//! daemon's hot path is tuned (docs/performance.md); what a line carries must not
//! change with it, so the lines are written out here in full (less the time).

use portcullis_test_support::*;

const ID: &str = "lines.owner@example.com";

/// The lines the daemon wrote during the attempt that started a lockout (the sixth of
/// one account), timestamps cut off.
async fn lockout_lines(format: &str, level: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("d")).toml();
    let d = DaemonProcess::spawn_at(&config, level, &[("PORTCULLIS_LOG_FORMAT", format)]);
    let mut c = d.client().await;
    for _ in 0..5 {
        c.attempt("default", ID).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = d.logs().len();
    c.attempt("default", ID).await.unwrap();
    d.wait_for_log("an account key used up its window", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let lines = d.logs()[before..]
        .lines()
        .map(|line| match format {
            // `2026-12-05T12:00:00.123456Z  WARN …`: the time is the first word.
            "text" => line.split_once(' ').map_or(line, |(_, rest)| rest).trim_start().to_owned(),
            _ => {
                let mut event: serde_json::Value = serde_json::from_str(line).unwrap();
                event.as_object_mut().unwrap().remove("timestamp");
                event.to_string()
            }
        })
        .collect();
    assert!(d.terminate().await.success());
    lines
}

/// The span context every line of a `RecordAttempt` in realm `default` carries.
const SPAN: &str = r#"rpc{otel.name="portcullis.v1.Governor/RecordAttempt" otel.kind="server" rpc.system="grpc" rpc.service="portcullis.v1.Governor" rpc.method="RecordAttempt" realm="default"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lockout_lines_as_text_carry_their_span_context() {
    let expected = [
        format!(
            r#"INFO {SPAN}: portcullis::event: security event event="portcullis.lockout.started" event.schema="portcullis.security_event/1" realm="default" account="72788f514b7a1268" record="account""#
        ),
        format!(
            "WARN {SPAN}: portcullis::login: lockout: an account key used up its window realm=default"
        ),
    ];
    for level in ["portcullis=trace", "info"] {
        assert_eq!(lockout_lines("text", level).await, expected, "at {level}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lockout_lines_as_json_carry_their_span() {
    let span = serde_json::json!({
        "name": "rpc",
        "otel.kind": "server",
        "otel.name": "portcullis.v1.Governor/RecordAttempt",
        "realm": "default",
        "rpc.method": "RecordAttempt",
        "rpc.service": "portcullis.v1.Governor",
        "rpc.system": "grpc",
    });
    let expected = [
        serde_json::json!({
            "fields": {
                "account": "72788f514b7a1268",
                "event": "portcullis.lockout.started",
                "event.schema": "portcullis.security_event/1",
                "message": "security event",
                "realm": "default",
                "record": "account",
            },
            "level": "INFO",
            "span": span,
            "target": "portcullis::event",
        }),
        serde_json::json!({
            "fields": { "message": "lockout: an account key used up its window", "realm": "default" },
            "level": "WARN",
            "span": span,
            "target": "portcullis::login",
        }),
    ];
    for level in ["portcullis=trace", "info"] {
        let lines = lockout_lines("json", level).await;
        let parsed: Vec<serde_json::Value> =
            lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(parsed, expected, "at {level}");
    }
}
