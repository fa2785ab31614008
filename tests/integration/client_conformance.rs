//! The Rust client (`portcullis::client`) against `clients/conformance.json`, the table
//! the TypeScript and Python clients pass too: each case gets its own endpoint written
//! here — a tonic server answering the case's fields with raw enum numbers (prost holds
//! enums as `i32`, so unknown values can be sent) or its status, or answering after the
//! deadline; a proxy in front of it that cuts every connection once the answer starts
//! (the request arrived, the answer never does); a listener writing bytes that are not
//! HTTP/2; a closed port. Checked: the decision (the table's `kind` where a deny is one
//! of its own: `Challenge`, `ChangeRequired`), the tokens (a challenge's, a confirmed
//! device's, none on a deny), `retryable`, the answer within the table's deadline, one
//! try for every case the endpoint answered, and for the transport failures retries
//! that all carry the one `attempt_id`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::client::{
    Answer, ClearReason, Client, ClientConfig, Decision, Flow, Login, PasswordCheck,
};
use portcullis::pb::governor_server::{Governor, GovernorServer};
use portcullis::pb::*;
use portcullis_test_support::{Cut, free_port, response_cutting_proxy};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

/// The table, from the repository.
fn table() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/conformance.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// How the fake answers every call.
#[derive(Clone)]
enum Reply {
    /// The response message's fields (enum values as numbers).
    Fields(Value),
    /// This gRPC status code, sent by the "daemon".
    Status(i32),
    /// An allow, after this long.
    Late(Duration),
}

/// A Governor that answers every call with `reply` and keeps each request's
/// `attempt_id` (empty for calls that have none).
#[derive(Clone)]
struct Fake {
    reply: Reply,
    seen: Arc<Mutex<Vec<String>>>,
}

fn field_i32(v: &Value, name: &str) -> i32 {
    v.get(name).and_then(Value::as_i64).map_or(0, |n| i32::try_from(n).unwrap())
}
fn field_bool(v: &Value, name: &str) -> bool {
    v.get(name).and_then(Value::as_bool).unwrap_or(false)
}
fn field_str(v: &Value, name: &str) -> String {
    v.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

impl Fake {
    /// The reply as this RPC's response; `allow` is its allowing message (for `Late`).
    async fn answer<T>(
        &self,
        attempt_id: &str,
        make: impl Fn(&Value) -> T,
        allow: Value,
    ) -> Result<Response<T>, Status> {
        self.seen.lock().unwrap().push(attempt_id.to_owned());
        match &self.reply {
            Reply::Fields(fields) => Ok(Response::new(make(fields))),
            Reply::Status(code) => Err(Status::new(tonic::Code::from_i32(*code), "conformance")),
            Reply::Late(delay) => {
                tokio::time::sleep(*delay).await;
                Ok(Response::new(make(&allow)))
            }
        }
    }
}

#[tonic::async_trait]
impl Governor for Fake {
    async fn admit(&self, _: Request<AdmitRequest>) -> Result<Response<AdmitResponse>, Status> {
        let make = |v: &Value| AdmitResponse { decision: field_i32(v, "decision") };
        self.answer("", make, serde_json::json!({"decision": 1})).await
    }
    async fn record_attempt(
        &self,
        r: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        let make = |v: &Value| RecordAttemptResponse {
            decision: field_i32(v, "decision"),
            step_up: field_bool(v, "step_up"),
            network_throttled: field_bool(v, "network_throttled"),
            lockout_started: field_bool(v, "lockout_started"),
            ceiling_reached: field_bool(v, "ceiling_reached"),
        };
        self.answer(&r.into_inner().attempt_id, make, serde_json::json!({"decision": 1})).await
    }
    async fn verify(&self, r: Request<VerifyRequest>) -> Result<Response<VerifyResponse>, Status> {
        let make = |v: &Value| VerifyResponse {
            verdict: field_i32(v, "verdict"),
            needs_rehash: field_bool(v, "needs_rehash"),
            device_token: field_str(v, "device_token"),
            spray_suspected: field_bool(v, "spray_suspected"),
            step_up: field_bool(v, "step_up"),
            network_throttled: field_bool(v, "network_throttled"),
            password_breached: field_bool(v, "password_breached"),
            challenge_reason: field_i32(v, "challenge_reason"),
            challenge_token: field_str(v, "challenge_token"),
            lockout_started: field_bool(v, "lockout_started"),
            ceiling_reached: field_bool(v, "ceiling_reached"),
        };
        self.answer(&r.into_inner().attempt_id, make, serde_json::json!({"verdict": 1})).await
    }
    async fn clear_attempts(
        &self,
        _: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        self.answer("", |_| ClearAttemptsResponse {}, serde_json::json!({})).await
    }
    async fn record_flow_attempt(
        &self,
        r: Request<portcullis::pb::RecordFlowAttemptRequest>,
    ) -> Result<Response<portcullis::pb::RecordFlowAttemptResponse>, Status> {
        let make = |v: &Value| portcullis::pb::RecordFlowAttemptResponse {
            decision: field_i32(v, "decision"),
            lockout_started: field_bool(v, "lockout_started"),
            ceiling_reached: field_bool(v, "ceiling_reached"),
        };
        self.answer(&r.into_inner().attempt_id, make, serde_json::json!({"decision": 1})).await
    }
    async fn clear_flow(
        &self,
        _: Request<portcullis::pb::ClearFlowRequest>,
    ) -> Result<Response<portcullis::pb::ClearFlowResponse>, Status> {
        self.answer("", |_| portcullis::pb::ClearFlowResponse {}, serde_json::json!({})).await
    }
    async fn confirm_device(
        &self,
        _: Request<portcullis::pb::ConfirmDeviceRequest>,
    ) -> Result<Response<portcullis::pb::ConfirmDeviceResponse>, Status> {
        let make = |v: &Value| portcullis::pb::ConfirmDeviceResponse {
            device_token: field_str(v, "device_token"),
        };
        self.answer("", make, serde_json::json!({"device_token": "t"})).await
    }
    async fn check_password(
        &self,
        _: Request<CheckPasswordRequest>,
    ) -> Result<Response<CheckPasswordResponse>, Status> {
        let make = |v: &Value| CheckPasswordResponse { reason: field_i32(v, "reason") };
        self.answer("", make, serde_json::json!({"reason": 1})).await
    }
}

/// Serves `fake` on a fresh loopback port until the test's runtime ends.
async fn serve(fake: Fake) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(GovernorServer::new(fake))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

/// A listener that answers every connection with bytes that are not HTTP/2.
async fn garbage() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nallow").await;
        }
    });
    addr
}

/// The case's call through the client: the answer (a `PasswordCheck` as the decision
/// and `retryable` it stands for, with no token). A `RecordFlowAttempt` goes through the
/// method of the case's `flow` (`second_factor` when it names none).
async fn call(client: &Client, rpc: &str, flow: Option<&str>) -> Answer {
    let (realm, id) = ("default", "alice@example.com");
    let stored_hash = "$2b$04$abcdefghijklmnopqrstuuN0Bv8ydzWqVShXa8Ry2bBFBl0l7QEgS";
    match rpc {
        "Admit" => client.admit("default", "alice@example.com").await,
        "RecordAttempt" => {
            client.record_attempt_from("default", "alice@example.com", "192.0.2.1", None).await
        }
        "Verify" => {
            client
                .verify(Login {
                    realm: "default",
                    identifier: "alice@example.com",
                    password: b"correct horse battery staple",
                    stored_hash,
                    client_key: "192.0.2.1",
                    attempt_id: None,
                    device_token: None,
                })
                .await
        }
        "ClearAttempts" => {
            client
                .clear_attempts("default", "alice@example.com", ClearReason::PasswordVerified)
                .await
        }
        "RecordFlowAttempt" => match flow.unwrap_or("second_factor") {
            "second_factor" => client.second_factor_attempt(realm, id, None).await,
            "recovery_code" => client.recovery_code_attempt(realm, id, None).await,
            "password_reset" => client.password_reset_request(realm, id, "192.0.2.1", None).await,
            "verification_resend" => {
                client.verification_resend_request(realm, id, "192.0.2.1", None).await
            }
            other => panic!("the table names a flow this test does not call: {other}"),
        },
        "ClearFlow" => client.clear_flow(realm, id, Flow::SecondFactor).await,
        "ConfirmDevice" => {
            client.confirm_device(realm, id, "ct-from-the-challenge", stored_hash).await
        }
        "CheckPassword" => {
            let (decision, retryable) = match client.check_password(realm, id, b"pw").await {
                PasswordCheck::Acceptable => (Decision::Allow, false),
                PasswordCheck::Unchecked { retryable } => (Decision::Deny, retryable),
                PasswordCheck::Breached | PasswordCheck::ContextWord => (Decision::Deny, false),
            };
            Answer { decision, retryable, ..answer_of() }
        }
        other => panic!("the table names an RPC this test does not call: {other}"),
    }
}

/// An answer to build others from (`Answer` has no public constructor).
fn answer_of() -> Answer {
    Answer {
        decision: Decision::Deny,
        needs_rehash: false,
        retryable: false,
        device_token: None,
        spray_suspected: false,
        step_up: false,
        network_throttled: false,
        password_breached: false,
        challenge_token: None,
        lockout_started: false,
        ceiling_reached: false,
    }
}

/// The decision the table's `kind` (else `expect`) names.
fn decision_named(name: &str) -> Decision {
    match name {
        "allow" => Decision::Allow,
        "deny" => Decision::Deny,
        "challenge" => Decision::Challenge,
        "change_required" => Decision::ChangeRequired,
        other => panic!("the table names a decision this test does not know: {other}"),
    }
}

/// Runs one case; every mismatch is a line of the returned list.
async fn run_case(case: &Value, deadline: Duration) -> Vec<String> {
    let name = case["name"].as_str().unwrap();
    let rpc = case["rpc"].as_str().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fake = |reply| Fake { reply, seen: Arc::clone(&seen) };
    let fault = &case["fault"];
    let (addr, answered) = if let Some(fields) = case.get("answer") {
        (serve(fake(Reply::Fields(fields.clone()))).await, true)
    } else if let Some(code) = fault.get("status").and_then(Value::as_i64) {
        (serve(fake(Reply::Status(i32::try_from(code).unwrap()))).await, true)
    } else if let Some(ms) = fault.get("delay_ms").and_then(Value::as_u64) {
        (serve(fake(Reply::Late(Duration::from_millis(ms)))).await, false)
    } else if field_bool(fault, "reset") {
        (
            response_cutting_proxy(
                serve(fake(Reply::Fields(serde_json::json!({})))).await,
                Cut::Every,
            )
            .await,
            false,
        )
    } else if field_bool(fault, "garbage") {
        (garbage().await, false)
    } else if field_bool(fault, "unreachable") {
        (format!("127.0.0.1:{}", free_port()).parse().unwrap(), false)
    } else {
        panic!("{name}: a fault this test does not make: {fault}");
    };
    let client = Client::new(ClientConfig {
        endpoints: vec![format!("http://{addr}")],
        call_timeout: deadline,
        ..ClientConfig::default()
    })
    .unwrap();

    let started = Instant::now();
    let answer = call(&client, rpc, case["flow"].as_str()).await;
    let (decision, retryable) = (answer.decision, answer.retryable);
    let took = started.elapsed();
    let mut wrong = Vec::new();
    // The table's `kind` where a deny is one of its own (a challenge, a change), else
    // `expect`; only `allow` is an allow.
    let expect = decision_named(case["kind"].as_str().unwrap_or(case["expect"].as_str().unwrap()));
    if decision != expect {
        wrong.push(format!("{name}: {decision:?}, the table says {expect:?}"));
    }
    if answer.is_allowed() != (case["expect"] == "allow") {
        wrong.push(format!(
            "{name}: is_allowed {}, the table says {}",
            answer.is_allowed(),
            case["expect"]
        ));
    }
    // The tokens: a challenge carries the answer's challenge token; no deny carries a
    // device token or needs_rehash; a confirmed device carries the answer's token.
    let sent = |field: &str| case["answer"][field].as_str().map(str::to_owned);
    let challenge_token =
        if decision == Decision::Challenge { sent("challenge_token") } else { None };
    if answer.challenge_token != challenge_token {
        wrong.push(format!("{name}: challenge token {:?}", answer.challenge_token));
    }
    if decision != Decision::Allow && (answer.device_token.is_some() || answer.needs_rehash) {
        wrong.push(format!("{name}: a deny with a device token or needs_rehash"));
    }
    if rpc == "ConfirmDevice"
        && decision == Decision::Allow
        && answer.device_token != sent("device_token")
    {
        wrong.push(format!("{name}: device token {:?}", answer.device_token));
    }
    if retryable != case["retryable"].as_bool().unwrap() {
        wrong.push(format!("{name}: retryable {retryable}, the table says {}", !retryable));
    }
    if took > deadline + Duration::from_millis(500) {
        wrong.push(format!("{name}: answered after {took:?}, past the {deadline:?} deadline"));
    }
    let stats = client.stats();
    let seen = seen.lock().unwrap().clone();
    let retried = case.get("retried_with_same_attempt_id").and_then(Value::as_bool);
    // An answer the endpoint sent is never retried: one try. A late answer is not
    // retried either (the daemon may still be working on it).
    if answered && (seen.len() != 1 || stats.retries != 0) {
        wrong.push(format!(
            "{name}: {} tries seen and {} retries, the table says one try",
            seen.len(),
            stats.retries
        ));
    }
    if retried == Some(false) && stats.retries != 0 {
        wrong.push(format!("{name}: retried {} times, the table says never", stats.retries));
    }
    if retried == Some(true) && stats.retries == 0 {
        wrong.push(format!("{name}: a transport failure was not retried"));
    }
    // Every try the endpoint saw of a counting call carries the one generated attempt_id;
    // where the requests arrive (a reset), the retries are seen.
    if matches!(rpc, "RecordAttempt" | "Verify" | "RecordFlowAttempt") && !seen.is_empty() {
        let first = &seen[0];
        if uuid::Uuid::parse_str(first).is_err() || seen.iter().any(|id| id != first) {
            wrong.push(format!("{name}: attempt_ids {seen:?}, not one generated id"));
        }
        if retried == Some(true) && seen.len() < 2 {
            wrong.push(format!("{name}: the endpoint saw {} tries, no retry", seen.len()));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_gives_the_tables_decision_in_every_case() {
    let table = table();
    let deadline = Duration::from_millis(table["call_deadline_ms"].as_u64().unwrap());
    let cases = table["cases"].as_array().unwrap().clone();
    assert!(cases.len() >= 50, "the table has {} cases", cases.len());
    // Cases are independent (an endpoint and a client each): they run together.
    let mut runs = tokio::task::JoinSet::new();
    for case in cases {
        runs.spawn(async move { run_case(&case, deadline).await });
    }
    let mut wrong = Vec::new();
    while let Some(run) = runs.join_next().await {
        wrong.extend(run.unwrap());
    }
    wrong.sort();
    assert!(
        wrong.is_empty(),
        "the Rust client disagrees with clients/conformance.json:\n{}",
        wrong.join("\n")
    );
}
