//! `portcullis::client`: every failure between gateway and daemon is a deny; resilience
//! (retries, health, breaker) never turns into an allow or a double count.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::client::{Answer, ClearReason, Client, ClientConfig, Decision, Flow, Login};
use portcullis::normalize::Normalization;
use portcullis::pb::governor_server::{Governor, GovernorServer};
use portcullis::pb::*;
use portcullis_test_support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

const DENY_RETRYABLE: Answer = Answer {
    decision: Decision::Deny,
    needs_rehash: false,
    retryable: true,
    device_token: None,
    spray_suspected: false,
    step_up: false,
    network_throttled: false,
    password_breached: false,
    challenge_token: None,
    lockout_started: false,
    ceiling_reached: false,
};
const DENY_FINAL: Answer = Answer {
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
};
const ALLOW: Answer = Answer {
    decision: Decision::Allow,
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
};

fn config(endpoints: &[SocketAddr]) -> ClientConfig {
    ClientConfig {
        endpoints: endpoints.iter().map(|a| format!("http://{a}")).collect(),
        call_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(200),
        eject_for: Duration::from_millis(300),
        ..ClientConfig::default()
    }
}

fn login<'a>(client_key: &'a str) -> Login<'a> {
    Login {
        realm: "default",
        identifier: "u@example.com",
        password: b"pw",
        stored_hash: "",
        client_key,
        attempt_id: None,
        device_token: None,
    }
}

/// All four calls, in order: admit, record_attempt, verify, clear.
async fn every_call(client: &Client) -> [Answer; 4] {
    [
        client.admit("default", "u@example.com").await,
        client.record_attempt("default", "u@example.com", None).await,
        client.verify(login("10.0.0.1")).await,
        client.clear_attempts("default", "u@example.com", ClearReason::PasswordVerified).await,
    ]
}

/// What a fake daemon answers. Counts every call it receives.
#[derive(Clone, Copy)]
enum Behaviour {
    Allow,
    Status(tonic::Code),
    /// Known-bad values: DECISION_UNSPECIFIED / VERDICT_UNSPECIFIED.
    Unspecified,
    /// Values this client does not know.
    Unknown,
}

struct Fake {
    behaviour: Behaviour,
    calls: Arc<AtomicU64>,
    /// Client keys seen by Verify, for routing checks.
    keys: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Fake {
    fn decision<T>(&self, make: impl Fn(i32) -> T) -> Result<Response<T>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.behaviour {
            Behaviour::Allow => Ok(Response::new(make(1))),
            Behaviour::Status(code) => Err(Status::new(code, "fake")),
            Behaviour::Unspecified => Ok(Response::new(make(0))),
            Behaviour::Unknown => Ok(Response::new(make(77))),
        }
    }
}

#[tonic::async_trait]
impl Governor for Fake {
    async fn admit(&self, _: Request<AdmitRequest>) -> Result<Response<AdmitResponse>, Status> {
        self.decision(|decision| AdmitResponse { decision })
    }
    async fn record_attempt(
        &self,
        _: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        self.decision(|decision| RecordAttemptResponse { decision, ..Default::default() })
    }
    async fn verify(&self, r: Request<VerifyRequest>) -> Result<Response<VerifyResponse>, Status> {
        self.keys.lock().unwrap().push(r.into_inner().client_key);
        self.decision(|verdict| VerifyResponse {
            verdict,
            needs_rehash: false,
            device_token: String::new(),
            ..Default::default()
        })
    }
    async fn clear_attempts(
        &self,
        _: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        self.decision(|_| ClearAttemptsResponse {})
    }
    async fn record_flow_attempt(
        &self,
        _: Request<portcullis::pb::RecordFlowAttemptRequest>,
    ) -> Result<Response<portcullis::pb::RecordFlowAttemptResponse>, Status> {
        self.decision(|decision| portcullis::pb::RecordFlowAttemptResponse {
            decision,
            ..Default::default()
        })
    }
    async fn clear_flow(
        &self,
        _: Request<portcullis::pb::ClearFlowRequest>,
    ) -> Result<Response<portcullis::pb::ClearFlowResponse>, Status> {
        self.decision(|_| portcullis::pb::ClearFlowResponse {})
    }
    async fn confirm_device(
        &self,
        _: Request<portcullis::pb::ConfirmDeviceRequest>,
    ) -> Result<Response<portcullis::pb::ConfirmDeviceResponse>, Status> {
        self.decision(|_| portcullis::pb::ConfirmDeviceResponse { device_token: "fake".into() })
    }
    async fn check_password(
        &self,
        _: Request<portcullis::pb::CheckPasswordRequest>,
    ) -> Result<Response<portcullis::pb::CheckPasswordResponse>, Status> {
        Err(Status::unimplemented("not faked"))
    }
}

struct FakeDaemon {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    keys: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeDaemon {
    async fn start(behaviour: Behaviour) -> Self {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), behaviour)
    }

    fn start_on(listener: TcpListener, behaviour: Behaviour) -> Self {
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(AtomicU64::new(0));
        let keys = Arc::default();
        let fake = Fake { behaviour, calls: calls.clone(), keys: Arc::clone(&keys) };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(GovernorServer::new(fake))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async move {
                        let _ = stopped.await;
                    },
                )
                .await;
        });
        Self { addr, calls, keys, stop: Some(stop), task }
    }

    /// Stops serving and closes its connections (GOAWAY), as a dying daemon would.
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn daemon_down_is_deny_within_the_timeout() {
    let client =
        Client::new(config(&[format!("127.0.0.1:{}", free_port()).parse().unwrap()])).unwrap();
    let started = Instant::now();
    assert_eq!(every_call(&client).await, [DENY_RETRYABLE; 4]);
    // Refused connections fail fast; nothing waits for a timeout.
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[tokio::test]
async fn daemon_that_accepts_but_never_answers_is_deny_within_the_timeout() {
    // The kernel completes the TCP handshake; nobody ever reads or writes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = Client::new(config(&[silent.local_addr().unwrap()])).unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        for answer in every_call(&client).await {
            assert_eq!(answer, DENY_RETRYABLE);
        }
        // call_timeout (300 ms) bounds each call, retries included.
        assert!(
            started.elapsed() < Duration::from_millis(4 * 300 + 400),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn daemon_answering_garbage_is_deny() {
    // Not HTTP/2 at all: a line of text, then close.
    let garbage = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = garbage.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = garbage.accept().await {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nallow").await;
        }
    });
    let client = Client::new(config(&[addr])).unwrap();
    assert_eq!(every_call(&client).await.map(|a| a.decision), [Decision::Deny; 4]);

    // Valid gRPC with values that do not mean allow.
    for behaviour in [Behaviour::Unspecified, Behaviour::Unknown] {
        let fake = FakeDaemon::start(behaviour).await;
        let client = Client::new(config(&[fake.addr])).unwrap();
        let answers = every_call(&client).await;
        assert_eq!(answers[..3], [DENY_FINAL; 3]);
        // ClearAttempts has no enum in its answer: an OK status is the daemon's word.
        assert_eq!(answers[3], ALLOW);
    }
}

#[tokio::test]
async fn application_answers_are_never_retried_and_never_trip_health() {
    let cases = [
        (Behaviour::Status(tonic::Code::ResourceExhausted), DENY_RETRYABLE),
        (Behaviour::Status(tonic::Code::Unavailable), DENY_RETRYABLE),
        (Behaviour::Status(tonic::Code::Internal), DENY_FINAL),
        (Behaviour::Status(tonic::Code::InvalidArgument), DENY_FINAL),
        (Behaviour::Unspecified, DENY_FINAL),
    ];
    for (behaviour, want) in cases {
        let fake = FakeDaemon::start(behaviour).await;
        let client = Client::new(config(&[fake.addr])).unwrap();
        for _ in 0..25 {
            let [admit, attempt, verify, _] = every_call(&client).await;
            assert_eq!([admit, attempt, verify], [want.clone(), want.clone(), want.clone()]);
        }
        assert_eq!(fake.calls(), 100, "the daemon saw retries");
        let stats = client.stats();
        assert_eq!((stats.retries, stats.transport_failures), (0, 0));
        assert!(!stats.breaker_open);
        assert_eq!(stats.healthy, [true]);
    }
}

/// Accepts connections and drops them at once, counting them.
async fn resetting_listener(
    listener: TcpListener,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<TcpListener>) {
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::mem::forget(stop_tx);
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                r = listener.accept() => {
                    if let Ok((s, _)) = r {
                        count.fetch_add(1, Ordering::SeqCst);
                        drop(s);
                    }
                }
                _ = &mut stop_rx => return listener,
            }
        }
    });
    (accepted, task)
}

#[tokio::test]
async fn breaker_opens_on_transport_failures_denies_offline_and_closes_when_the_daemon_returns() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, task) = resetting_listener(listener).await;
    let client = Client::new(ClientConfig { eject_after: 3, ..config(&[addr]) }).unwrap();

    // Each call tries (with retries) until the endpoint is ejected after 3 failures.
    let mut calls = 0;
    while !client.stats().breaker_open {
        assert_eq!(client.admit("default", "u@example.com").await, DENY_RETRYABLE);
        calls += 1;
        assert!(calls < 10, "the breaker never opened");
    }
    assert_eq!(client.stats().transport_failures, 3);
    let connections = accepted.load(Ordering::SeqCst);
    assert!(connections >= 1);
    // Open: deny without a network call.
    for answer in every_call(&client).await {
        assert_eq!(answer, DENY_RETRYABLE);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), connections, "an open breaker made a network call");
    assert_eq!(client.stats().breaker_denials, 4);

    // The daemon returns on the same address; after the back-off one probe closes it.
    task.abort();
    let _ = task.await;
    let fake = FakeDaemon::start_on(TcpListener::bind(addr).await.unwrap(), Behaviour::Allow);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(client.admit("default", "u@example.com").await, ALLOW);
    assert!(!client.stats().breaker_open);
    assert_eq!(every_call(&client).await, [ALLOW; 4]);
    assert_eq!(fake.calls(), 5);
}

#[tokio::test]
async fn retries_stay_within_the_budget() {
    let port = free_port();
    let cfg = ClientConfig {
        retry_budget_ratio: 0.0,
        retry_budget_reserve: 1,
        eject_after: 100,
        ..config(&[format!("127.0.0.1:{port}").parse().unwrap()])
    };
    let client = Client::new(cfg).unwrap();
    client.admit("default", "u@example.com").await;
    assert_eq!(client.stats().retries, 1, "the reserve allows one retry");
    for _ in 0..5 {
        client.admit("default", "u@example.com").await;
    }
    assert_eq!(client.stats().retries, 1, "no budget left, no retry");
    assert_eq!(client.stats().transport_failures, 7);
}

#[tokio::test]
async fn a_retried_attempt_whose_answer_was_lost_is_counted_once() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let proxy = response_cutting_proxy(daemon.addr, Cut::First).await;
    let client = Client::new(config(&[proxy])).unwrap();
    let answer = client.record_attempt("default", "lost@example.com", None).await;
    assert_eq!(answer, ALLOW);
    assert_eq!(client.stats().retries, 1, "the lost answer was not retried");
    let key = record_key("default", Normalization::Email, "lost@example.com");
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, 1, "counted twice");
    daemon.shutdown().await;
}

#[tokio::test]
async fn verify_routes_by_client_key_and_fails_over_when_an_endpoint_dies() {
    let mut fakes = Vec::new();
    for _ in 0..3 {
        fakes.push(FakeDaemon::start(Behaviour::Allow).await);
    }
    let addrs: Vec<_> = fakes.iter().map(|f| f.addr).collect();
    let client = Client::new(ClientConfig { eject_after: 1, ..config(&addrs) }).unwrap();
    let keys: Vec<String> = (0..30).map(|i| format!("198.51.100.{i}")).collect();
    let before: Vec<String> = keys.iter().map(|k| client.route(k).unwrap()).collect();
    for _ in 0..3 {
        for k in &keys {
            assert!(client.verify(login(k)).await.is_allowed());
        }
    }
    // Every key's calls met exactly the daemon its route names.
    for (fake, addr) in fakes.iter().zip(&addrs) {
        let seen = fake.keys.lock().unwrap().clone();
        for (k, route) in keys.iter().zip(&before) {
            let here = seen.iter().filter(|s| *s == k).count();
            let expected = if *route == format!("http://{addr}") { 3 } else { 0 };
            assert_eq!(here, expected, "key {k}");
        }
    }
    // One daemon dies: its keys fail over (allowed, by the next endpoint); the others stay.
    let dead = format!("http://{}", addrs[1]);
    let victims: Vec<&String> =
        keys.iter().zip(&before).filter(|(_, r)| **r == dead).map(|(k, _)| k).collect();
    assert!(!victims.is_empty());
    fakes.remove(1).stop().await;
    for k in &victims {
        assert!(client.verify(login(k)).await.is_allowed(), "no fail-over");
    }
    assert_eq!(client.stats().healthy, [true, false, true]);
    for (k, b) in keys.iter().zip(&before) {
        let now = client.route(k).unwrap();
        if *b == dead {
            assert_ne!(now, dead);
        } else {
            assert_eq!(&now, b, "a key of a healthy endpoint moved");
        }
    }
}

#[test]
fn bad_configuration_is_refused() {
    let bad = |c: ClientConfig| Client::new(c).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        bad(ClientConfig { endpoints: vec![], ..ClientConfig::default() }).contains("endpoints")
    );
    assert!(
        bad(ClientConfig { endpoints: vec!["not a url".into()], ..ClientConfig::default() })
            .contains("endpoints[0]")
    );
    assert!(
        bad(ClientConfig { retry_budget_ratio: 2.0, ..ClientConfig::default() })
            .contains("retry_budget_ratio")
    );
    assert!(
        bad(ClientConfig { call_timeout: Duration::ZERO, ..ClientConfig::default() })
            .contains("call_timeout")
    );
    assert!(
        bad(ClientConfig { keepalive_time: Duration::from_millis(999), ..ClientConfig::default() })
            .contains("keepalive_time")
    );
    assert!(
        bad(ClientConfig { keepalive_timeout: Duration::ZERO, ..ClientConfig::default() })
            .contains("keepalive_timeout")
    );
    let toml: ClientConfig =
        toml_from("endpoints = [\"http://10.0.0.1:50051\"]\ncall_timeout = \"750ms\"\n");
    assert_eq!(toml.call_timeout, Duration::from_millis(750));
    assert_eq!(toml.max_retries, 2);
    // The keepalive defaults the three clients share (docs/client.md, "Keepalive").
    assert_eq!(
        (toml.keepalive_time, toml.keepalive_timeout, toml.keepalive_permit_without_calls),
        (Duration::from_secs(30), Duration::from_secs(10), true)
    );
}

fn toml_from(text: &str) -> ClientConfig {
    use figment::providers::Format;
    figment::Figment::from(figment::providers::Toml::string(text)).extract().unwrap()
}

#[test]
fn an_answers_debug_output_never_shows_its_device_token() {
    let answer = Answer { device_token: Some("tok-ABCDEF0123456789".into()), ..ALLOW };
    let shown = format!("{answer:?}");
    assert!(!shown.contains("tok-ABCDEF0123456789"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

/// Every flow method (docs/flows.md), in order: the four flows' attempts by their
/// convenience names, one through `record_flow_attempt` with the caller's own id, then
/// `clear_flow` of each code flow.
async fn every_flow_call(client: &Client) -> [Answer; 7] {
    let (realm, id, key) = ("default", "u@example.com", "192.0.2.7");
    [
        client.second_factor_attempt(realm, id, None).await,
        client.recovery_code_attempt(realm, id, None).await,
        client.password_reset_request(realm, id, key, None).await,
        client.verification_resend_request(realm, id, key, None).await,
        client.record_flow_attempt(realm, id, Flow::SecondFactor, "", Some("flow-1")).await,
        client.clear_flow(realm, id, Flow::SecondFactor).await,
        client.clear_flow(realm, id, Flow::RecoveryCode).await,
    ]
}

#[tokio::test]
async fn every_flow_method_fails_closed_on_every_behaviour() {
    // Nobody listening, and bytes that are not HTTP/2: transport failures, retryable.
    let down = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let client = Client::new(config(&[down])).unwrap();
    assert_eq!(every_flow_call(&client).await, [DENY_RETRYABLE; 7]);
    let garbage = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = garbage.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = garbage.accept().await {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nallow").await;
        }
    });
    let client = Client::new(config(&[addr])).unwrap();
    assert_eq!(every_flow_call(&client).await.map(|a| a.decision), [Decision::Deny; 7]);

    // The daemon's answers: (name, behaviour, a flow attempt's answer, a clear's answer).
    // ClearFlow has no enum in its answer: an OK status is the daemon's word.
    use tonic::Code;
    let status = Behaviour::Status;
    let cases = [
        ("allow", Behaviour::Allow, ALLOW, ALLOW),
        ("unspecified", Behaviour::Unspecified, DENY_FINAL, ALLOW),
        ("unknown value", Behaviour::Unknown, DENY_FINAL, ALLOW),
        ("resource exhausted", status(Code::ResourceExhausted), DENY_RETRYABLE, DENY_RETRYABLE),
        ("unavailable", status(Code::Unavailable), DENY_RETRYABLE, DENY_RETRYABLE),
        ("invalid argument", status(Code::InvalidArgument), DENY_FINAL, DENY_FINAL),
        ("permission denied", status(Code::PermissionDenied), DENY_FINAL, DENY_FINAL),
        ("internal", status(Code::Internal), DENY_FINAL, DENY_FINAL),
        // A daemon from before the flows.
        ("unimplemented", status(Code::Unimplemented), DENY_FINAL, DENY_FINAL),
    ];
    for (name, behaviour, attempt, clear) in cases {
        let fake = FakeDaemon::start(behaviour).await;
        let client = Client::new(config(&[fake.addr])).unwrap();
        let answers = every_flow_call(&client).await;
        assert_eq!(
            answers[..5],
            [attempt.clone(), attempt.clone(), attempt.clone(), attempt.clone(), attempt],
            "{name}"
        );
        assert_eq!(answers[5..], [clear.clone(), clear], "{name}");
        assert_eq!(fake.calls(), 7, "{name}: the daemon saw retries");
        let stats = client.stats();
        assert_eq!((stats.retries, stats.transport_failures), (0, 0), "{name}");
        assert_eq!(stats.healthy, [true], "{name}");
    }
}

#[tokio::test]
async fn a_retried_flow_attempt_whose_answer_was_lost_is_counted_once() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let id = "lost-flow@example.com";
    let login = record_key("default", Normalization::Email, id);
    let flow_key = |tag: &str| format!("{}:f:{tag}", login.strip_suffix(":r").unwrap());

    // A code: the retry, with the same attempt_id, is counted once.
    let client =
        Client::new(config(&[response_cutting_proxy(daemon.addr, Cut::First).await])).unwrap();
    assert_eq!(client.second_factor_attempt("default", id, None).await, ALLOW);
    assert_eq!(client.stats().retries, 1, "the lost answer was not retried");
    assert_eq!(read_record(&mut redis.conn(), &flow_key("2f")).unwrap().0, 1, "counted twice");

    // A mail: the retry gets the first call's allow (a second send inside the minute
    // would be refused) and notes no second send.
    let client =
        Client::new(config(&[response_cutting_proxy(daemon.addr, Cut::First).await])).unwrap();
    assert_eq!(client.password_reset_request("default", id, "192.0.2.7", None).await, ALLOW);
    assert_eq!(client.stats().retries, 1, "the lost answer was not retried");
    let log: String = redis::cmd("GET").arg(flow_key("pr")).query(&mut redis.conn()).unwrap();
    assert_eq!(log.split(',').count(), 1, "two sends noted: {log}");
    let again = client.password_reset_request("default", id, "192.0.2.7", None).await;
    assert_eq!(again, DENY_FINAL, "a new request inside the interval");
    daemon.shutdown().await;
}
