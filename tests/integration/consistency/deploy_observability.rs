//! The shipped alert rules are well-formed PromQL on every machine and pass `promtool
//! check rules` where promtool is installed (required in CI), and the Grafana dashboard is valid JSON whose every
//! query names a metric (tests/integration/metrics.rs checks each one exists in `/metrics`).

use std::path::Path;
use std::process::Command;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The alerts docs/observability.md describes.
const ALERTS: &[&str] = &[
    "PortcullisRefusalEpisodeLong",
    "PortcullisStoreErrors",
    "PortcullisStoreMemoryHigh",
    "PortcullisLockoutRateAboveBaseline",
    "PortcullisGatewayBreakerOpen",
    "PortcullisPasswordSpray",
];

/// Every rule of the shipped rules file, each a YAML mapping.
fn rules() -> Vec<serde_yaml_ng::Value> {
    let text = std::fs::read_to_string(repo("deploy/prometheus/portcullis-rules.yml")).unwrap();
    let file: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("the rules are YAML");
    let groups = file["groups"].as_sequence().expect("groups");
    assert!(!groups.is_empty());
    let mut rules = Vec::new();
    for group in groups {
        assert!(group["name"].as_str().is_some_and(|n| !n.is_empty()), "a group without a name");
        rules.extend(group["rules"].as_sequence().expect("a group's rules").iter().cloned());
    }
    rules
}

/// Checked on every machine, promtool or not: each rule is a recording rule or an alert
/// (never both), its expression is PromQL, an alert's `for` is a duration, and it has a
/// severity and a summary; the alerts docs/observability.md describes are all there.
#[test]
fn alert_rules_are_well_formed_promql() {
    let mut alerts = Vec::new();
    for rule in rules() {
        let alert = rule["alert"].as_str();
        let record = rule["record"].as_str();
        assert!(
            alert.is_some() != record.is_some(),
            "a rule must be an alert or a record: {rule:?}"
        );
        let expr = rule["expr"].as_str().expect("expr");
        if let Err(e) = promql_parser::parser::parse(expr) {
            panic!("{:?}: {expr} is not PromQL: {e}", alert.or(record));
        }
        if let Some(name) = alert {
            let r#for = rule["for"].as_str().expect("an alert's for");
            assert!(humantime::parse_duration(r#for).is_ok(), "{name}: for {for} is no duration");
            let severity = rule["labels"]["severity"].as_str();
            assert!(matches!(severity, Some("warning" | "critical" | "info")), "{name}: severity");
            assert!(rule["annotations"]["summary"].as_str().is_some(), "{name}: no summary");
            alerts.push(name.to_string());
        }
    }
    for alert in ALERTS {
        assert!(alerts.iter().any(|a| a == alert), "missing alert {alert}");
    }
}

#[test]
fn the_promql_check_refuses_what_is_not_promql() {
    assert!(
        promql_parser::parser::parse("sum by (realm) (rate(portcullis_lockouts_total[1d]))")
            .is_ok()
    );
    assert!(
        promql_parser::parser::parse("sum by (realm (rate(portcullis_lockouts_total[1d]))")
            .is_err()
    );
}

/// promtool's own check where it is installed. `.ci/run` installs it and sets
/// `PORTCULLIS_REQUIRE_PROMTOOL=1`, so there a missing promtool fails instead of skipping.
#[test]
fn alert_rules_pass_promtool() {
    let rules = repo("deploy/prometheus/portcullis-rules.yml");
    match Command::new("promtool").arg("check").arg("rules").arg(&rules).output() {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check rules failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("PORTCULLIS_REQUIRE_PROMTOOL").is_none(),
                "PORTCULLIS_REQUIRE_PROMTOOL is set but promtool is not installed"
            );
            println!("SKIPPED: promtool is not installed (Debian package `prometheus`)");
        }
        Err(e) => panic!("promtool could not run: {e}"),
    }
}

/// The `portcullis_*` metrics the rules query (for tests/integration/metrics.rs, which
/// holds them to what the daemon exports).
pub fn metrics_in_rules() -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for rule in rules() {
        let expr = rule["expr"].as_str().unwrap_or_default();
        let mut rest = expr;
        while let Some(i) = rest.find("portcullis_") {
            let start = &rest[i..];
            let name: String =
                start.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // `realm:portcullis_lockouts:rate1d` is a recorded series, not an exported one.
            let recorded = rest[..i].ends_with(':');
            rest = &start[name.len()..];
            if !recorded {
                found.insert(name);
            }
        }
    }
    found
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

/// Every metric the code names (`"portcullis_…"` in `src/` and `client/src/`) is
/// described in docs/observability.md.
#[test]
fn every_metric_the_code_names_is_documented() {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut sources = Vec::new();
    walk(&repo("src"), &mut sources);
    walk(&repo("client/src"), &mut sources);
    let docs = std::fs::read_to_string(repo("docs/observability.md")).unwrap();
    let mut named = std::collections::BTreeSet::new();
    for text in &sources {
        for (at, _) in text.match_indices("\"portcullis_") {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named.insert(name);
        }
    }
    // Not metrics: the client crate's name and the reflection descriptor set's.
    named.remove("portcullis_client");
    named.remove("portcullis_descriptor");
    assert!(named.len() > 30, "too few metric names found: {named:?}");
    let missing: Vec<&String> =
        named.iter().filter(|n| !docs.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "docs/observability.md does not describe {missing:?}");
}
