//! What a flow's answer tells, and what it refuses: the same bytes for an identifier with
//! an account and one without, a DENY that carries nothing but the decision; a flow this
//! version does not know, a mail flow without a client, a gateway clearing a mail cap and
//! out-of-range settings refused, naming what to fix.

use std::collections::BTreeMap;
use std::time::Duration;

use portcullis::config::{Config, Overrides};
use portcullis::pb::{Flow, InspectRequest, RecordFlowAttemptResponse, Verdict};
use portcullis::verify::hash::{HashParams, StoredHash};
use prost::Message;
use tonic::Code;

use super::*;

const RIGHT: &[u8] = b"correct horse battery staple";

/// The header names of an answer (their values hold a date).
fn header_names<T>(r: &tonic::Response<T>) -> Vec<String> {
    let mut names: Vec<String> =
        r.metadata().clone().into_headers().keys().map(|k| k.as_str().to_owned()).collect();
    names.sort();
    names
}

/// One identifier with an account and a history (a login, a failure) and one nobody
/// ever used, asked the same of every flow in turn from the same client: the same bytes
/// at every step, allows and denies alike; a DENY is the decision and nothing else.
async fn known_and_unknown_get_the_same_bytes(d: &Daemon) {
    let mut c = d.client().await;
    let (known, unknown) = ("member@example.com", "stranger@example.com");
    let hash = StoredHash::generate(RIGHT, &HashParams::Bcrypt { cost: 4 }).unwrap();
    let accepted = c.verify("fast", known, RIGHT, hash.as_str(), "203.0.113.5").await.unwrap();
    assert_eq!(verdict(&accepted), Verdict::Accept);
    c.attempt("fast", known).await.unwrap();
    let mut denies: BTreeMap<i32, Vec<u8>> = BTreeMap::new();
    for (flow, _) in BUDGETS {
        // Seven attempts, then the first one's id again (a retry).
        let ids = (0..7).chain([0]).map(|n| format!("{}-{n}", flow.as_str_name()));
        for (n, attempt_id) in ids.enumerate() {
            let mut answers = Vec::new();
            for identifier in [known, unknown] {
                let req = request("fast", identifier, flow, "203.0.113.5", &attempt_id);
                answers.push(c.0.record_flow_attempt(req).await.unwrap());
            }
            assert_eq!(header_names(&answers[0]), header_names(&answers[1]), "{flow:?} {n}");
            let bytes: Vec<Vec<u8>> = answers.iter().map(|a| a.get_ref().encode_to_vec()).collect();
            assert_eq!(bytes[0], bytes[1], "{flow:?}, attempt {n}: known and unknown differ");
            if decision(answers[0].get_ref()) == Decision::Deny {
                denies.insert(flow as i32, bytes[0].clone());
            }
        }
        if flow == Flow::SecondFactor || flow == Flow::RecoveryCode {
            for identifier in [known, unknown] {
                clear_flow(&mut c, "fast", identifier, flow).await.unwrap();
            }
            let after: Vec<Vec<u8>> = {
                let mut out = Vec::new();
                for identifier in [known, unknown] {
                    let r = try_flow(&mut c, "fast", identifier, flow, "", "").await.unwrap();
                    out.push(r.encode_to_vec());
                }
                out
            };
            assert_eq!(after[0], after[1], "{flow:?} after ClearFlow");
        }
    }
    let deny = RecordFlowAttemptResponse { decision: Decision::Deny as i32, ..Default::default() }
        .encode_to_vec();
    assert_eq!(deny, [0x08, 0x02], "field 1, DECISION_DENY");
    assert_eq!(denies.len(), 4, "every flow denied at some step: {denies:?}");
    for (flow, bytes) in denies {
        assert_eq!(bytes, deny, "flow {flow}: a DENY carries more than its decision");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_and_unknown_identifiers_get_byte_identical_flow_answers_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    known_and_unknown_get_the_same_bytes(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_and_unknown_identifiers_get_byte_identical_flow_answers_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    known_and_unknown_get_the_same_bytes(&d).await;
    d.shutdown().await;
}

fn invalid(r: Result<impl std::fmt::Debug, tonic::Status>, field: &str, what: &str) {
    let status = r.expect_err(what);
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    assert!(status.message().contains(field), "{what}: {field} not named: {status:?}");
}

/// `FLOW_UNSPECIFIED` and values this version does not know are refused naming `flow`
/// (never guessed at), on both RPCs and the Admin service; a mail flow without a
/// `client_key` is refused naming it, and a gateway may not clear a mail flow's caps.
/// Nothing refused was counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_flows_missing_client_keys_and_clearing_a_mail_cap_are_invalid_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let id = "refused@example.com";
    for value in [0, 5, 99, -1, i32::MAX] {
        let mut req = request("default", id, Flow::SecondFactor, "203.0.113.5", "x");
        req.flow = value;
        invalid(c.0.record_flow_attempt(req).await, "flow", &format!("RecordFlowAttempt {value}"));
        let req = ClearFlowRequest { account: account("default", id), flow: value };
        invalid(c.0.clear_flow(req).await, "flow", &format!("ClearFlow {value}"));
        if value != 0 {
            let req = InspectRequest { account: account("default", id), flow: value };
            invalid(ops.admin.inspect(req).await, "flow", &format!("Inspect {value}"));
            let req = UnlockRequest {
                account: account("default", id),
                reason: UnlockReason::OwnerVerified as i32,
                flow: value,
                note: String::new(),
            };
            invalid(ops.admin.unlock(req).await, "flow", &format!("Unlock {value}"));
        }
    }
    for flow in [Flow::PasswordReset, Flow::VerificationResend] {
        let r = try_flow(&mut c, "default", id, flow, "", "").await;
        invalid(r, "client_key", &format!("{flow:?} without a client"));
        invalid(clear_flow(&mut c, "default", id, flow).await, "flow", &format!("clear {flow:?}"));
    }
    let long = "x".repeat(257);
    for (flow, _) in BUDGETS {
        let r = try_flow(&mut c, "default", id, flow, &long, "").await;
        invalid(r, "client_key", &format!("{flow:?} with a 257-byte client key"));
        let r = try_flow(&mut c, "default", "", flow, "203.0.113.5", "").await;
        invalid(r, "identifier", &format!("{flow:?} without an identifier"));
        let mut req = request("default", id, flow, "203.0.113.5", "");
        req.account = None;
        invalid(c.0.record_flow_attempt(req).await, "account", &format!("{flow:?} no account"));
        let r = try_flow(&mut c, "nowhere", id, flow, "203.0.113.5", "").await;
        invalid(r, "realm", &format!("{flow:?} in a realm that is not configured"));
    }
    for (flow, _) in BUDGETS {
        let seen = inspect_flow(&mut ops, "default", id, flow).await;
        assert_eq!(seen.failures, 0, "a refused call was counted on {flow:?}");
    }
    // A code flow needs no client.
    let answer = flow_from(&mut c, "default", id, Flow::SecondFactor, "").await;
    assert_eq!(answer, Decision::Allow);
    d.shutdown().await;
}

/// `[realms.default]` and `flows` loaded and validated as the daemon does at start: the
/// error's text.
fn start_error(flows: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    let toml = format!("[store]\nredis_url = \"redis://127.0.0.1:1/\"\n[realms.default]\n{flows}");
    std::fs::write(&path, toml).unwrap();
    let settings = Config::load(Some(&path), &Overrides::default())
        .and_then(|config| config.validate(Some(SECRET.into())));
    settings.err().map(|e| e.to_string())
}

/// Every flow setting out of its range refuses start, naming
/// `realms.NAME.flows.FLOW.FIELD`; an unknown field or flow names itself; the edges of
/// each range start.
#[test]
fn out_of_range_flow_settings_refuse_start_naming_the_setting() {
    let cases = [
        ("password_reset", "daily_cap = 0"),
        ("password_reset", "daily_cap = 51"),
        ("password_reset", "min_interval = \"500ms\""),
        ("password_reset", "min_interval = \"2h\""),
        ("password_reset", "network_budget = 0"),
        ("verification_resend", "network_budget = 100001"),
        ("verification_resend", "daily_cap = 0"),
        ("second_factor", "window = \"10s\""),
        ("second_factor", "window = \"25h\""),
        ("second_factor", "max_failures = 0"),
        ("second_factor", "max_failures = 101"),
        ("recovery_code", "max_failures = 0"),
        ("recovery_code", "first_window = \"30s\""),
        ("recovery_code", "max_window = \"8d\""),
        ("recovery_code", "retention = \"400d\""),
    ];
    for (flow, line) in cases {
        let field = line.split(' ').next().unwrap();
        let setting = format!("realms.default.flows.{flow}.{field}");
        let error = start_error(&format!("[realms.default.flows.{flow}]\n{line}\n"));
        let error = error.unwrap_or_else(|| panic!("{setting}: `{line}` started"));
        assert!(error.contains(&setting), "{line}: {setting} not named in: {error}");
    }
    let error = start_error("[realms.default.flows.second_factor]\nmax_failure = 3\n").unwrap();
    assert!(error.contains("max_failure"), "{error}");
    let error = start_error("[realms.default.flows.magic_link]\nmin_interval = \"1m\"\n").unwrap();
    assert!(error.contains("magic_link"), "{error}");
    let edges = "[realms.default.flows.second_factor]\nmax_failures = 100\nwindow = \"1m\"\n\
                 [realms.default.flows.recovery_code]\nmax_failures = 1\nfirst_window = \"1m\"\n\
                 [realms.default.flows.password_reset]\nmin_interval = \"1s\"\ndaily_cap = 50\n\
                 network_budget = 100000\n\
                 [realms.default.flows.verification_resend]\nmin_interval = \"1h\"\ndaily_cap = 1\n\
                 network_budget = 1\n";
    assert_eq!(start_error(edges), None);
    assert_eq!(start_error("[realms.default.flows.second_factor]\nwindow = \"24h\"\n"), None);
}

/// The real binary refuses to serve with a flow setting out of range: it exits at once
/// (never listening) and says which setting.
#[test]
fn the_daemon_refuses_to_start_with_a_flow_setting_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let toml = TestConfig::embedded(&dir.path().join("data"))
        .extra("[realms.default.flows.password_reset]\ndaily_cap = 0\n")
        .toml();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the daemon started with daily_cap = 0");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("realms.default.flows.password_reset.daily_cap"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
