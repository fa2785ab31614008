//! `/metrics` on the admin listener of the real binary, after a scripted run: five
//! attempts and a lockout, a Verify accept, a reject, a CPU-budget refusal and a store
//! outage each show up exactly once, in the right family, with bounded labels and no
//! identifier. Also: the gateway library's own metrics (retries, ejections, breaker)
//! through the `metrics` facade of its process.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use portcullis::pb::Decision::{Allow, Deny};
use portcullis_test_support::*;

const ID: &str = "Metrics.Victim@Example.COM";
const NEEDLES: [&str; 3] = ["metrics.victim", "victim", "example.com"];

/// One sample line: metric name, labels (sorted), value.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// Parses Prometheus text format (the subset the exporter writes).
fn parse(text: &str) -> Samples {
    let mut samples = Samples::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest
                    .trim_end_matches('}')
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (k, v) = l.split_once('=').expect("label=value");
                        (k.to_owned(), v.trim_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
            None => (series.to_owned(), BTreeMap::new()),
        };
        samples.insert((name, labels), value.parse().expect("a number"));
    }
    samples
}

fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    samples.get(&(name.to_owned(), labels)).copied()
}

/// Every sample of the family `name`, whatever its labels.
fn family(samples: &Samples, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    samples.iter().filter(|((n, _), _)| n == name).map(|((_, l), v)| (l.clone(), *v)).collect()
}

async fn scrape(admin: std::net::SocketAddr) -> String {
    let (status, body) = http_get(admin, "/metrics").await.expect("scrape /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_scripted_run_shows_exactly_its_counts() {
    let mut redis = RedisServer::start();
    // One CPU slot and no queue: a second Verify while one compares is refused.
    let config = TestConfig::redis(&redis.url())
        .extra("[verify]\nmax_concurrent = 1\nmax_waiters = 0\n")
        .admin("0s")
        .toml();
    let daemon = DaemonProcess::spawn(&config);
    let admin = daemon.admin_addr();
    let mut c = daemon.client().await;

    // Five attempts and a lockout (the sixth is denied and closes the door).
    for n in 0..6 {
        let want = if n < 5 { Allow } else { Deny };
        assert_eq!(c.attempt("default", ID).await.unwrap(), want);
    }
    // A Verify accept, on the cheap realm.
    let cheap = bcrypt::hash("right", 4).unwrap();
    let accepted = c.verify("fast", "accept@example.com", b"right", &cheap, "k1").await.unwrap();
    assert_eq!(accepted.verdict, portcullis::pb::Verdict::Accept as i32);
    // A reject that holds the only CPU slot a while (cost 12), and a budget refusal
    // sent while it compares.
    let slow = bcrypt::hash("right", 12).unwrap();
    let mut c2 = c.clone();
    let reject = tokio::spawn(async move {
        c2.verify("fast", "reject@example.com", b"wrong", &slow, "k2").await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = parse(&scrape(admin).await);
        if value(&s, "portcullis_verify_running", &[]) == Some(1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the slow comparison never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = c.verify("fast", "refused@example.com", b"x", "", "k3").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let rejected = reject.await.unwrap().unwrap();
    assert_eq!(rejected.verdict, portcullis::pb::Verdict::Reject as i32);
    // A store outage: one call fails.
    redis.stop();
    let down = c.attempt("default", "other@example.com").await.unwrap_err();
    assert_eq!(down.code(), tonic::Code::Unavailable);

    let text = scrape(admin).await;
    let s = parse(&text);
    let v = |name: &str, labels: &[(&str, &str)]| value(&s, name, labels).unwrap_or(0.0);
    let attempts = "portcullis_attempts_total";
    assert_eq!(v(attempts, &[("realm", "default"), ("decision", "allow")]), 5.0);
    assert_eq!(v(attempts, &[("realm", "default"), ("decision", "deny")]), 1.0);
    assert_eq!(v(attempts, &[("realm", "fast"), ("decision", "allow")]), 2.0, "{text}");
    assert_eq!(family(&s, attempts).len(), 3, "no other attempt series: {text}");
    assert_eq!(family(&s, "portcullis_lockouts_total"), [(labels(&[("realm", "default")]), 1.0)]);
    let verdicts = "portcullis_verify_verdicts_total";
    assert_eq!(v(verdicts, &[("realm", "fast"), ("verdict", "accept")]), 1.0);
    assert_eq!(v(verdicts, &[("realm", "fast"), ("verdict", "reject")]), 1.0);
    assert_eq!(family(&s, verdicts).len(), 2, "{text}");
    assert_eq!(
        family(&s, "portcullis_verify_refusals_total"),
        [(labels(&[("reason", "queue_full")]), 1.0)]
    );
    assert_eq!(
        family(&s, "portcullis_store_errors_total"),
        [(labels(&[("operation", "record_attempt")]), 1.0)]
    );
    // Store latency by operation: 6 + 2 Verify counts + the failed one; one clear (the
    // accept); the two Verify counts' spray notes and the accept's match note; each
    // Verify's network token and the accept's give-back; the reject's repeat-list note;
    // no admit, no refund.
    let store_count = "portcullis_store_operation_seconds_count";
    assert_eq!(v(store_count, &[("operation", "record_attempt")]), 9.0);
    assert_eq!(v(store_count, &[("operation", "clear")]), 1.0);
    assert_eq!(v(store_count, &[("operation", "spray")]), 3.0);
    assert_eq!(v(store_count, &[("operation", "network")]), 3.0);
    assert_eq!(v(store_count, &[("operation", "repeat")]), 1.0);
    assert_eq!(family(&s, store_count).len(), 5, "{text}");
    // Each Verify count's spray answer, by realm; nothing was sprayed.
    let spray = "portcullis_spray_distinct_accounts_count";
    assert_eq!(v(spray, &[("realm", "fast")]), 2.0, "{text}");
    assert!(family(&s, "portcullis_spray_suspected_total").is_empty(), "{text}");
    assert!(
        v("portcullis_store_operation_seconds_bucket", &[("operation", "clear"), ("le", "+Inf")])
            == 1.0
    );
    assert_eq!(
        v("portcullis_verify_comparison_seconds_count", &[("algorithm", "bcrypt")]),
        2.0,
        "{text}"
    );
    assert_eq!(v("portcullis_verify_running", &[]), 0.0);
    assert_eq!(v("portcullis_verify_waiting", &[]), 0.0);
    assert_eq!(v("portcullis_refusal_episode_open", &[]), 1.0, "the refusals opened an episode");
    // Every call once, by RPC and code, from the one layer.
    let calls = "portcullis_rpc_calls_total";
    assert_eq!(v(calls, &[("rpc", "RecordAttempt"), ("code", "ok")]), 6.0, "{text}");
    assert_eq!(v(calls, &[("rpc", "RecordAttempt"), ("code", "unavailable")]), 1.0);
    assert_eq!(v(calls, &[("rpc", "Verify"), ("code", "ok")]), 2.0);
    assert_eq!(v(calls, &[("rpc", "Verify"), ("code", "resource_exhausted")]), 1.0);
    assert_eq!(family(&s, calls).len(), 4, "{text}");
    assert_eq!(v("portcullis_rpc_duration_seconds_count", &[("rpc", "Verify")]), 3.0);

    // Bounded labels only, and nothing of the identifiers.
    for (name, labels) in s.keys() {
        for key in labels.keys() {
            assert!(
                [
                    "realm",
                    "decision",
                    "verdict",
                    "reason",
                    "operation",
                    "algorithm",
                    "outcome",
                    "rpc",
                    "code",
                    "event",
                    "candidate",
                    "defence",
                    "le",
                    "quantile"
                ]
                .contains(&key.as_str()),
                "unexpected label {key} on {name}"
            );
        }
    }
    // A security event's label is one of the schema's names, a fixed set.
    let events = portcullis::telemetry::events::EventKind::ALL.map(|k| k.name());
    for (name, labels) in s.keys() {
        if let Some(event) = labels.get("event") {
            assert!(events.contains(&event.as_str()), "{name}: event {event}");
        }
    }
    let lower = text.to_lowercase();
    for needle in NEEDLES.iter().chain(&["accept@", "reject@", "refused@", "other@", "$2b$"]) {
        assert!(!lower.contains(needle), "/metrics contains {needle}");
    }
    let logs = daemon.logs().to_lowercase();
    for needle in NEEDLES {
        assert!(!logs.contains(needle), "a log line contains an identifier ({needle})");
    }

    // Every metric the shipped Grafana dashboard queries is one the daemon exports
    // (the gateway's client metrics come from the gateway's process).
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/portcullis.json"),
        )
        .unwrap(),
    )
    .expect("the dashboard is JSON");
    let exported: std::collections::BTreeSet<&str> = s.keys().map(|(n, _)| n.as_str()).collect();
    let mut queried = queried_metrics(&dashboard);
    assert!(queried.len() >= 10, "the dashboard queries too little: {queried:?}");
    // And every metric the alert rules query.
    let in_rules = crate::consistency::deploy_observability::metrics_in_rules();
    assert!(in_rules.len() >= 5, "the rules query too little: {in_rules:?}");
    queried.extend(in_rules);
    for metric in &queried {
        assert!(
            exported.contains(metric.as_str()) || metric.starts_with("portcullis_client_"),
            "the dashboard or the rules query {metric}, which the daemon does not export"
        );
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The `portcullis_*` metric names in every `expr` of a Grafana dashboard.
fn queried_metrics(dashboard: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(expr)) = map.get("expr") {
                    let mut rest = expr.as_str();
                    while let Some(i) = rest.find("portcullis_") {
                        let name: String = rest[i..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        rest = &rest[i + name.len()..];
                        found.insert(name);
                    }
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

#[tokio::test]
async fn the_client_library_meters_retries_ejections_and_the_breaker() {
    let handle = portcullis::telemetry::metrics::install().expect("our recorder");
    let dead =
        [format!("http://127.0.0.1:{}", free_port()), format!("http://127.0.0.1:{}", free_port())];
    let client = portcullis::client::Client::new(portcullis::client::ClientConfig {
        endpoints: dead.to_vec(),
        max_retries: 1,
        eject_after: 1,
        eject_for: Duration::from_secs(60),
        eject_max: Duration::from_secs(60),
        ..Default::default()
    })
    .unwrap();
    // First call: one endpoint refuses, the retry goes to the other, which refuses too:
    // both are ejected. Second call: the breaker is open and denies without a try.
    assert!(!client.admit("default", ID).await.is_allowed());
    assert!(!client.admit("default", ID).await.is_allowed());
    let s = parse(&handle.render());
    assert_eq!(value(&s, "portcullis_client_retries_total", &[]), Some(1.0));
    for endpoint in &dead {
        assert_eq!(
            value(&s, "portcullis_client_ejections_total", &[("endpoint", endpoint)]),
            Some(1.0)
        );
    }
    assert_eq!(value(&s, "portcullis_client_breaker_open", &[]), Some(1.0));
    assert_eq!(value(&s, "portcullis_client_breaker_denials_total", &[]), Some(1.0));
}

/// A call its client abandons while the daemon works on it (a reset stream) is counted
/// once, as `cancelled`, by the layer that counts every call; a refused one by its code.
#[tokio::test]
async fn an_abandoned_call_is_counted_as_cancelled() {
    let data = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(data.path()).admin("0s").toml();
    let daemon = DaemonProcess::spawn(&config);
    let admin = daemon.admin_addr();
    let mut c = daemon.client().await;
    let bad = c.attempt("default", "").await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    // A comparison that takes a while (cost 12), abandoned once it runs.
    let slow = bcrypt::hash("right", 12).unwrap();
    let mut c2 = c.clone();
    let abandoned = tokio::spawn(async move {
        c2.verify("fast", "abandoned@example.com", b"wrong", &slow, "k").await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&parse(&scrape(admin).await), "portcullis_verify_running", &[]) != Some(1.0) {
        assert!(Instant::now() < deadline, "the slow comparison never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    abandoned.abort();
    let calls = "portcullis_rpc_calls_total";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = parse(&scrape(admin).await);
        if value(&s, calls, &[("rpc", "Verify"), ("code", "cancelled")]) == Some(1.0) {
            assert_eq!(
                value(&s, calls, &[("rpc", "RecordAttempt"), ("code", "invalid_argument")]),
                Some(1.0)
            );
            assert_eq!(family(&s, calls).len(), 2, "no other series: {s:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the abandoned call was never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A mail request the send log refuses gives its network's token back, and on Redis
/// that give-back is a store operation of its own (a `network` sample beside the
/// request's `send_mail`), so a give-back that fails in an outage is counted and opens
/// a refusal episode like any store failure.
#[tokio::test]
async fn a_refused_mails_give_back_is_a_store_operation_of_its_own() {
    use portcullis::pb::{Account, Flow, RecordFlowAttemptRequest};
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).admin("0s").toml());
    let mut c = daemon.client().await;
    // The default reset flow sends one mail a minute per account: the second is refused.
    let mut decisions = Vec::new();
    for _ in 0..2 {
        let request = RecordFlowAttemptRequest {
            account: Some(Account { realm: "default".into(), identifier: ID.into() }),
            flow: Flow::PasswordReset as i32,
            client_key: "203.0.113.9".into(),
            attempt_id: String::new(),
        };
        decisions.push(c.0.record_flow_attempt(request).await.unwrap().into_inner().decision);
    }
    assert_eq!(decisions, [Allow as i32, Deny as i32]);
    let store_count = "portcullis_store_operation_seconds_count";
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = parse(&scrape(daemon.admin_addr()).await);
        let v = |op: &str| value(&s, store_count, &[("operation", op)]).unwrap_or(0.0);
        if v("network") >= 1.0 {
            assert_eq!(v("send_mail"), 2.0, "{:?}", family(&s, store_count));
            assert_eq!(v("network"), 1.0, "the refused mail's give-back, once");
            break;
        }
        assert!(Instant::now() < deadline, "no give-back timed: {:?}", family(&s, store_count));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
