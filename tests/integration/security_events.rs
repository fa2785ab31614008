//! Security events (docs/observability.md, "Security events") at a real OTLP receiver
//! (opentelemetry-proto's `LogsService`, served by tonic on `127.0.0.1:0`) from the real
//! binary (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`): each occurrence arrives exactly once, in
//! the documented schema, with no identifier, password or token in it; with the
//! receiver down, logins go on and the events that could not be delivered are counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use portcullis::pb::{
    Decision, ReleaseNetworkRequest, RevokeDevicesRequest, UnlockReason, UnlockRequest,
};
use portcullis_test_support::*;

/// One received event: its name and its attributes.
type Received = (String, BTreeMap<String, String>);

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Received>>>);

#[tonic::async_trait]
impl LogsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let mut received = self.0.lock().unwrap();
        for resource in request.into_inner().resource_logs {
            for scope in resource.scope_logs {
                for record in scope.log_records {
                    let attributes = record
                        .attributes
                        .iter()
                        .map(|a| {
                            (a.key.clone(), text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                        })
                        .collect();
                    let body = text(record.body.as_ref().and_then(|v| v.value.as_ref()));
                    assert_eq!(body, record.event_name, "the body is the event's name");
                    received.push((record.event_name, attributes));
                }
            }
        }
        Ok(tonic::Response::new(ExportLogsServiceResponse { partial_success: None }))
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

async fn start_receiver() -> (Receiver, String) {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LogsServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (receiver, endpoint)
}

/// A realm whose ceiling is 3, one whose networks hold two failures, one that watches
/// for a password sprayed on ten accounts; bcrypt cost 4.
const REALMS: &str = r#"
[realms.tight]
max_consecutive_failures = 3
[realms.tiny]
network_capacity = 2
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.sprayed]
spray_threshold = 10
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
"#;

const LOCKED: &str = "locked.owner@example.com";
const PASSWORD: &[u8] = b"Spring2026!";

/// Counts by event name once `want` events arrived (or 15 s passed), then a moment
/// more, so one too many would show.
async fn settled(receiver: &Receiver, want: usize) -> Vec<Received> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while receiver.0.lock().unwrap().len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    receiver.0.lock().unwrap().clone()
}

/// How many of each event name arrived.
fn by_name(received: &[Received]) -> BTreeMap<&str, usize> {
    let mut counted = BTreeMap::new();
    for (name, _) in received {
        *counted.entry(name.as_str()).or_default() += 1;
    }
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_occurrence_arrives_once_in_the_schema_and_names_no_one() {
    let (receiver, endpoint) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("data")).extra(REALMS).toml();
    let daemon = DaemonProcess::spawn_with_env(
        &config,
        &[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "events-test")],
    );
    let mut c = daemon.client().await;
    // A lockout: five allowed, the sixth refused and starting it; the seventh not again.
    for _ in 0..7 {
        c.attempt("default", LOCKED).await.unwrap();
    }
    // The ceiling: the third allowed attempt reaches it; the fourth is refused by it.
    for _ in 0..4 {
        c.attempt("tight", "ceiling@example.com").await.unwrap();
    }
    // One network's bucket of two failures: the third failed login from it is throttled.
    for n in 0..3 {
        let who = format!("net{n}@example.com");
        c.verify("tiny", &who, b"guess", "", "203.0.113.9").await.unwrap();
    }
    // One password failing on eleven accounts from eleven networks: one spray episode.
    for n in 0..11 {
        let who = format!("spray{n}@example.com");
        c.verify("sprayed", &who, PASSWORD, "", &format!("198.51.100.{n}")).await.unwrap();
    }
    // The operator's actions, each with a ticket reference.
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    let note = "TICKET-4711";
    let unlock = UnlockRequest {
        account: account("default", LOCKED),
        reason: UnlockReason::OwnerVerified as i32,
        note: note.into(),
        ..Default::default()
    };
    ops.admin.unlock(unlock).await.unwrap();
    assert_eq!(c.attempt("default", LOCKED).await.unwrap(), Decision::Allow);
    let revoke = RevokeDevicesRequest { account: account("default", LOCKED), note: note.into() };
    ops.admin.revoke_devices(revoke).await.unwrap();
    let release = ReleaseNetworkRequest {
        realm: "tiny".into(),
        client_key: "203.0.113.9".into(),
        note: note.into(),
    };
    ops.admin.release_network(release).await.unwrap();
    // A note that could forge a log line is refused, naming the field.
    let forged = RevokeDevicesRequest { account: account("default", LOCKED), note: "a\nb".into() };
    let refused = ops.admin.revoke_devices(forged).await.unwrap_err();
    assert!(refused.message().contains("note"), "{refused:?}");

    let expected: BTreeMap<&str, usize> = [
        ("portcullis.lockout.started", 1),
        ("portcullis.ceiling.reached", 1),
        ("portcullis.network.throttled", 1),
        ("portcullis.spray.started", 1),
        ("portcullis.operator.unlock", 1),
        ("portcullis.lockout.ended", 1),
        ("portcullis.operator.revoke_devices", 1),
        ("portcullis.devices.revoked", 1),
        ("portcullis.operator.release_network", 1),
    ]
    .into();
    let received = settled(&receiver, expected.values().sum()).await;
    assert_eq!(by_name(&received), expected, "{received:#?}");

    for (name, attributes) in &received {
        assert_eq!(attributes["event.schema"], "portcullis.security_event/1", "{name}");
        let all = format!("{name} {attributes:?}");
        for secret in [LOCKED, "ceiling@", "net0@", "spray0@", "Spring2026", "203.0.113.9", SECRET]
        {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
        if name.starts_with("portcullis.operator.") {
            assert_eq!((attributes["caller"].as_str(), attributes["note"].as_str()), ("-", note));
        }
    }
    let of = |name: &str| &received.iter().find(|(n, _)| n == name).unwrap().1;
    let lockout = of("portcullis.lockout.started");
    assert_eq!((lockout["realm"].as_str(), lockout["record"].as_str()), ("default", "account"));
    assert_eq!(lockout["account"].len(), 16, "a keyed account digest: {lockout:?}");
    assert_eq!(lockout["account"], of("portcullis.operator.unlock")["account"], "one account");
    assert_eq!(of("portcullis.operator.unlock")["reason"], "UNLOCK_REASON_OWNER_VERIFIED");
    assert_eq!(of("portcullis.network.throttled")["network"].len(), 16);
    // Each is also a structured log line.
    daemon.wait_for_log("portcullis.operator.release_network", 1).await;
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_receiver_down_logins_go_on_and_lost_events_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let config = TestConfig::embedded(&dir.path().join("data")).admin("0s").toml();
    let daemon =
        DaemonProcess::spawn_with_env(&config, &[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &nobody)]);
    let mut c = daemon.client().await;
    let answers: Vec<Decision> = {
        let mut out = Vec::new();
        for n in 0..7 {
            // Two accounts locked out: two events nobody receives.
            out.push(c.attempt("default", &format!("down{}@example.com", n % 2)).await.unwrap());
            out.push(c.attempt("default", &format!("down{}@example.com", n % 2)).await.unwrap());
        }
        out
    };
    assert_eq!(answers.iter().filter(|d| **d == Decision::Allow).count(), 10, "{answers:?}");
    let admin = daemon.admin_addr();
    let deadline = Instant::now() + Duration::from_secs(20);
    let dropped = loop {
        let (_, metrics) = http_get(admin, "/metrics").await.unwrap();
        let value = metrics
            .lines()
            .find(|l| {
                l.starts_with("portcullis_security_events_dropped_total{reason=\"export_failed\"}")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        if let Some(v) = value.filter(|v| *v >= 2.0) {
            break v;
        }
        assert!(Instant::now() < deadline, "no dropped events counted:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(dropped >= 2.0);
    // The log lines were written all the same.
    daemon.wait_for_log("portcullis.lockout.started", 2).await;
    assert_eq!(c.attempt("default", "another@example.com").await.unwrap(), Decision::Allow);
    assert!(daemon.terminate().await.success());
}

/// The step-up pathway's events (a challenge issued, the device confirmed) and the
/// operator's key-secret adoption, which the command exports itself: each once, with the
/// operator named by the system's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_a_confirmed_device_and_a_key_secret_adoption_arrive_once() {
    use portcullis::pb::{ConfirmDeviceRequest, Verdict};
    use portcullis::verify::hash::{HashParams, StoredHash};
    let (receiver, endpoint) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let stepup = "[realms.stepup]\nunknown_device = \"step_up\"\n\
                  hash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n";
    let config = TestConfig::embedded(&data).extra(stepup).toml();
    let env = [("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", endpoint.as_str())];
    let daemon = DaemonProcess::spawn_with_env(&config, &env);
    let mut c = daemon.client().await;
    let hash = StoredHash::generate(PASSWORD, &HashParams::Bcrypt { cost: 4 }).unwrap();
    let who = "new.device@example.com";
    let r = c.verify("stepup", who, PASSWORD, hash.as_str(), "192.0.2.44").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Challenge);
    let confirm = ConfirmDeviceRequest {
        account: account("stepup", who),
        challenge_token: r.challenge_token,
        stored_hash: hash.as_str().into(),
    };
    let confirmed = c.0.confirm_device(confirm).await.unwrap().into_inner();
    assert!(!confirmed.device_token.is_empty());
    assert!(daemon.terminate().await.success());

    // The operator adopts the key secret of the store the daemon left (stopped).
    let out = std::process::Command::new(daemon_binary())
        .args(["adopt-key-secret", "--forget-counts", "--note", "CHG-7", "--data-dir"])
        .arg(&data)
        .env("PORTCULLIS_KEY_SECRET", SECRET)
        .env("USER", "oncall")
        .env("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("portcullis.operator.adopt_key_secret"), "its JSON line: {stderr}");

    let received = settled(&receiver, 3).await;
    let names: Vec<&str> = received.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "portcullis.challenge.issued",
            "portcullis.device.confirmed",
            "portcullis.operator.adopt_key_secret"
        ],
        "{received:#?}"
    );
    assert_eq!(received[0].1["account"], received[1].1["account"], "one account");
    let adopted = &received[2].1;
    assert_eq!((adopted["caller"].as_str(), adopted["note"].as_str()), ("cli:oncall", "CHG-7"));
    assert!(!format!("{received:?}").contains(who));
}

/// A breached password's grace logins and the change it then requires, and a daemon
/// started with another key secret on the same Redis (it refuses to serve): each
/// occurrence once, naming no one; the grace logins also in the realm's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breached_accepts_a_change_required_and_a_key_secret_refusal_arrive_once() {
    use std::io::Write;

    use portcullis::defence::breach::build::{BuildOptions, build};
    use portcullis::pb::{RealmStatusRequest, Verdict};
    use sha1::Digest;
    const BREACHED: &str = "Summer2026!";
    let (receiver, endpoint) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    let mut out = std::fs::File::create(&corpus).unwrap();
    for p in [BREACHED, "password1", "letmein"] {
        write!(out, "{}:3\r\n", hex::encode_upper(sha1::Sha1::digest(p.as_bytes()))).unwrap();
    }
    drop(out);
    let filter = dir.path().join("breach.filter");
    build(&corpus, &filter, &BuildOptions::default()).unwrap();
    let redis = RedisServer::start();
    let breach = format!("[breach]\nfilter_file = {:?}\n", filter.to_str().unwrap());
    let config = TestConfig::redis(&redis.url()).extra(&breach).toml();
    let otlp = ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", endpoint.as_str());
    let daemon = DaemonProcess::spawn_with_env(&config, &[otlp]);
    let mut c = daemon.client().await;
    let hash = bcrypt::hash(BREACHED, 4).unwrap();
    let mut verdicts = Vec::new();
    for _ in 0..4 {
        let r =
            c.verify("fast", "grace@example.com", BREACHED.as_bytes(), &hash, "192.0.2.9").await;
        verdicts.push(r.unwrap().verdict());
    }
    // Three grace logins (the default), then a change is required.
    assert_eq!(
        verdicts,
        [Verdict::Accept, Verdict::Accept, Verdict::Accept, Verdict::ChangeRequired]
    );
    // Another key secret on the same store: that daemon refuses, and says so once.
    let other_secret = ("PORTCULLIS_KEY_SECRET", "another-secret-0123456789abcdef01234567");
    let refusing = DaemonProcess::spawn_with_env(&config, &[otlp, other_secret]);

    let expected: BTreeMap<&str, usize> = [
        ("portcullis.password.breached_accepted", 3),
        ("portcullis.password.change_required", 1),
        ("portcullis.key_secret.refused", 1),
    ]
    .into();
    let received = settled(&receiver, expected.values().sum()).await;
    assert_eq!(by_name(&received), expected, "{received:#?}");
    let all = format!("{received:?}");
    for secret in ["grace@", BREACHED, SECRET, "another-secret"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
    // The realm's status counts the account on grace logins once.
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let on_grace = loop {
        let request = RealmStatusRequest { realm: "fast".into() };
        let s = ops.admin.realm_status(request).await.unwrap().into_inner();
        if s.accounts_on_grace_logins > 0 || Instant::now() > deadline {
            break s.accounts_on_grace_logins;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(on_grace, 1);
    refusing.kill();
    assert!(daemon.terminate().await.success());
}

/// The end of a spray episode: with `spray_period` at its shortest (a minute), the
/// episode a password sprayed on eleven accounts opened ends once a period passes
/// without it (the daemon looks every 10 s), and its end arrives exactly once, naming
/// the realm and no one. The one slow scenario here: about 70 s of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spray_episode_ends_once_and_its_end_names_no_one() {
    const SPRAYED: &str = r#"
[realms.sprayed]
spray_threshold = 10
spray_period = "1m"
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
"#;
    let (receiver, endpoint) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("data")).extra(SPRAYED).toml();
    let daemon = DaemonProcess::spawn_with_env(
        &config,
        &[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "events-test")],
    );
    let mut c = daemon.client().await;
    for n in 0..11 {
        let who = format!("spray{n}@example.com");
        c.verify("sprayed", &who, PASSWORD, "", &format!("198.51.100.{n}")).await.unwrap();
    }
    let sprayed = Instant::now();
    // A period and two of the daemon's 10 s looks, at most.
    let deadline = sprayed + Duration::from_secs(85);
    let ended =
        |r: &Receiver| r.0.lock().unwrap().iter().any(|(n, _)| n == "portcullis.spray.ended");
    while !ended(&receiver) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(sprayed.elapsed() >= Duration::from_secs(60), "ended before its period");
    let received = settled(&receiver, 2).await;
    let expected: BTreeMap<&str, usize> =
        [("portcullis.spray.started", 1), ("portcullis.spray.ended", 1)].into();
    assert_eq!(by_name(&received), expected, "{received:#?}");
    let (_, end) = received.iter().find(|(n, _)| n == "portcullis.spray.ended").unwrap();
    assert_eq!(end["realm"], "sprayed", "{end:?}");
    let text = format!("{received:?}");
    for secret in ["spray0@", "Spring2026", "198.51.100"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(daemon.terminate().await.success());
}
