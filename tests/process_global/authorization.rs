//! Caller authorization: each caller may call only its RPCs on its realms; anything
//! else is PERMISSION_DENIED (unknown callers UNAUTHENTICATED), counted by configured
//! caller name, never counted as an attempt and never reaching the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use portcullis::pb::{
    AdmitRequest, ClearAttemptsRequest, ClearReason, UnlockReason, UnlockRequest, Verdict,
    VerifyRequest,
};
use portcullis_test_support::*;
use tonic::Code;

const VERIFIER_TOKEN: &str = "verifier-token-0123456789abcdef0123456789";
const OPERATOR_TOKEN: &str = "operator-token-0123456789abcdef0123456789";

fn token_file(dir: &std::path::Path, name: &str, token: &str) -> std::path::PathBuf {
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
    portcullis_test_support::pki::write(dir, name, &format!("{hash}\n"))
}

/// Counts `portcullis_auth_refusals_total` by its labels: a minimal `metrics` recorder.
#[derive(Default, Clone)]
struct Refusals(Arc<Mutex<BTreeMap<String, u64>>>);

struct Count(Arc<Mutex<BTreeMap<String, u64>>>, String);

impl metrics::CounterFn for Count {
    fn increment(&self, value: u64) {
        *self.0.lock().unwrap().entry(self.1.clone()).or_default() += value;
    }
    fn absolute(&self, _: u64) {}
}

impl metrics::Recorder for Refusals {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() != "portcullis_auth_refusals_total" {
            return metrics::Counter::noop();
        }
        let labels: Vec<String> =
            key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        metrics::Counter::from_arc(Arc::new(Count(self.0.clone(), labels.join(","))))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

fn denied<T>(r: Result<T, tonic::Status>, what: &str) {
    let status = r.err().unwrap_or_else(|| panic!("{what} was allowed"));
    assert_eq!(status.code(), Code::PermissionDenied, "{what}: {}", status.message());
}

#[tokio::test]
async fn each_caller_gets_only_its_rpcs_and_realms() {
    let refusals = Refusals::default();
    metrics::set_global_recorder(refusals.clone()).unwrap();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let callers = format!(
        r#"
[callers.login-web]
token_hash_file = {:?}
rpcs = ["Verify"]
realms = ["default"]
[callers.helpdesk]
token_hash_file = {:?}
rpcs = ["Inspect", "Unlock"]
realms = ["*"]
"#,
        token_file(dir.path(), "web.sha256", VERIFIER_TOKEN),
        token_file(dir.path(), "ops.sha256", OPERATOR_TOKEN),
    );
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(&callers).settings()).await;
    let mut conn = redis.conn();
    let mut web = caller(daemon.addr, None, Some(VERIFIER_TOKEN)).await.unwrap();

    let verify = |realm: &str| VerifyRequest {
        account: account(realm, "v@example.com"),
        password: b"guess".to_vec(),
        stored_hash: String::new(),
        client_key: "c".into(),
        attempt_id: String::new(),
        device_token: String::new(),
    };
    // Another RPC, another realm, the operator service: all PERMISSION_DENIED.
    denied(
        web.governor
            .clear_attempts(ClearAttemptsRequest {
                account: account("default", "v@example.com"),
                reason: ClearReason::PasswordResetCompleted as i32,
                client_key: String::new(),
            })
            .await,
        "ClearAttempts",
    );
    denied(
        web.governor.admit(AdmitRequest { account: account("default", "v@example.com") }).await,
        "Admit",
    );
    denied(web.attempt("default", "v@example.com").await, "RecordAttempt");
    // Testing passwords at will is its own permission, not Verify's.
    denied(
        web.governor
            .check_password(portcullis::pb::CheckPasswordRequest {
                account: account("default", "v@example.com"),
                password: b"a new password".to_vec(),
            })
            .await,
        "CheckPassword",
    );
    denied(web.governor.verify(verify("fast")).await, "Verify on another realm");
    denied(web.inspect("default", "v@example.com").await, "Admin/Inspect");
    denied(
        web.admin
            .unlock(UnlockRequest {
                account: account("default", "v@example.com"),
                reason: UnlockReason::OwnerVerified as i32,
                ..Default::default()
            })
            .await,
        "Admin/Unlock",
    );
    // The operator may not use the Governor.
    let mut ops = caller(daemon.addr, None, Some(OPERATOR_TOKEN)).await.unwrap();
    denied(ops.attempt("default", "v@example.com").await, "operator RecordAttempt");
    // Unknown callers.
    for token in [None, Some("not-a-token"), Some(&VERIFIER_TOKEN[..20])] {
        let mut stranger = caller(daemon.addr, None, token).await.unwrap();
        let e = stranger.governor.verify(verify("default")).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{token:?}");
    }
    assert_eq!(dbsize(&mut conn), 0, "a refused call reached the store");

    // What it may do, it does.
    let r = web.governor.verify(verify("default")).await.unwrap().into_inner();
    assert_eq!(r.verdict(), Verdict::Reject);
    assert_eq!(account_key_count(&mut conn), 1);
    let seen = ops.inspect("default", "v@example.com").await.unwrap();
    assert_eq!(seen.failures, 1, "refused calls were counted as attempts");
    assert_eq!(
        ops.attempt("default", "x").await.map_err(|e| e.code()),
        Err(Code::PermissionDenied)
    );

    // Counted by configured caller name; an unknown caller has none.
    let counts = refusals.0.lock().unwrap().clone();
    assert_eq!(counts.get("caller=login-web,code=permission_denied"), Some(&7), "{counts:?}");
    assert_eq!(counts.get("caller=helpdesk,code=permission_denied"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("caller=-,code=unauthenticated"), Some(&3), "{counts:?}");
    assert!(counts.keys().all(|k| !k.contains("token")), "{counts:?}");
    daemon.shutdown().await;
}

#[test]
fn caller_configuration_errors_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let redis_url = "redis://127.0.0.1:1/";
    let check = |callers: &str, want: &str| {
        let path = dir.path().join("p.toml");
        std::fs::write(&path, TestConfig::redis(redis_url).extra(callers).toml()).unwrap();
        let e = portcullis::config::Config::load(Some(&path), &Default::default())
            .and_then(|c| c.validate(Some(SECRET.into())))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{callers}: {e}");
    };
    let hashes = token_file(dir.path(), "t.sha256", "t");
    check(
        "[callers.a]\nrpcs = [\"Verify\"]\nrealms = [\"default\"]\n",
        "callers.a.san_dns: a caller needs an identity",
    );
    check(
        "[callers.a]\nsan_dns = [\"a.test\"]\nrpcs = [\"Verify\"]\nrealms = [\"default\"]\n",
        "need mutual TLS",
    );
    check(
        &format!(
            "[callers.a]\ntoken_hash_file = {hashes:?}\nrpcs = [\"Verify\"]\nrealms = [\"nope\"]\n"
        ),
        "callers.a.realms",
    );
    check(
        &format!(
            "[callers.a]\ntoken_hash_file = {hashes:?}\nrpcs = [\"Erase\"]\nrealms = [\"*\"]\n"
        ),
        "Erase",
    );
    check(
        &format!("[callers.a]\ntoken_hash_file = {hashes:?}\nrpcs = []\nrealms = [\"*\"]\n"),
        "callers.a.rpcs",
    );
    // A valid caller's token digest never shows in the settings' Debug.
    let path = dir.path().join("ok.toml");
    let ok = format!(
        "[callers.a]\ntoken_hash_file = {hashes:?}\nrpcs = [\"Verify\"]\nrealms = [\"*\"]\n"
    );
    std::fs::write(&path, TestConfig::redis(redis_url).extra(&ok).toml()).unwrap();
    let settings = portcullis::config::Config::load(Some(&path), &Default::default())
        .unwrap()
        .validate(Some(SECRET.into()))
        .unwrap();
    let digest = std::fs::read_to_string(&hashes).unwrap();
    assert!(!format!("{settings:?}").contains(digest.trim()), "a token digest in Debug");
    let bad = portcullis_test_support::pki::write(dir.path(), "bad.sha256", "not hex\n");
    check(
        &format!("[callers.a]\ntoken_hash_file = {bad:?}\nrpcs = [\"Verify\"]\nrealms = [\"*\"]\n"),
        "64 hex digits",
    );
}
