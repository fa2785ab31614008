//! The shipped alert rules pass `promtool check rules` (when promtool is installed; the
//! test says it skipped otherwise), and the Grafana dashboard is valid JSON whose every
//! query names a metric (tests/metrics.rs checks each one exists in `/metrics`).

use std::path::Path;
use std::process::Command;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn alert_rules_pass_promtool() {
    let rules = repo("deploy/prometheus/portcullis-rules.yml");
    let text = std::fs::read_to_string(&rules).unwrap();
    for alert in [
        "PortcullisRefusalEpisodeLong",
        "PortcullisStoreErrors",
        "PortcullisStoreMemoryHigh",
        "PortcullisLockoutRateAboveBaseline",
        "PortcullisGatewayBreakerOpen",
        "PortcullisPasswordSpray",
    ] {
        assert!(text.contains(&format!("alert: {alert}")), "missing alert {alert}");
    }
    match Command::new("promtool").arg("check").arg("rules").arg(&rules).output() {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check rules failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("SKIPPED: promtool is not installed (Debian package `prometheus`)");
        }
        Err(e) => panic!("promtool could not run: {e}"),
    }
}

#[test]
fn dashboard_is_json_with_a_query_in_every_panel() {
    let text = std::fs::read_to_string(repo("deploy/grafana/portcullis.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8);
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(expr.contains("portcullis_"), "{expr}");
        }
    }
}
