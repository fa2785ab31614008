//! One trace from the gateway library to the store: a real OTLP gRPC trace service
//! (opentelemetry-proto's `TraceService`, served by tonic on `127.0.0.1:0`) receives the
//! client library's spans from this process and the daemon's from the real binary
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` pointing at it, flushed when it shuts down). The
//! client span is the parent of the daemon's RPC span, which is the parent of the store
//! span and, for Verify, of the CPU admission and comparison spans. No exported span
//! name or attribute contains the identifier, its key digest, the password, the hash or
//! the password's SHA-1 (the daemon screens it against a breach filter).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use portcullis::client::{Client, ClientConfig, Login};
use portcullis_test_support::*;
use tracing_subscriber::layer::SubscriberExt;

const ID: &str = "Traced.Victim@Example.COM";
const PASSWORD: &str = "correct horse battery staple";

/// What the collector received: (service name, span).
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<(String, Span)>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push((service.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
}

/// A collector on `127.0.0.1:0` and its endpoint URL.
async fn start_collector() -> (Collector, String) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (collector, endpoint)
}

/// A caller's trace state reaches the exported spans only within W3C's limits (512
/// bytes, 32 members): a 7.5 KB `tracestate` is dropped whole (each span would otherwise
/// carry it), the trace it names is still joined, and a small one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_trace_state_is_bounded_in_exported_spans() {
    let (collector, endpoint) = start_collector().await;
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn_with_env(
        &TestConfig::redis(&redis.url()).toml(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "portcullis-test")],
    );
    let mut c = portcullis_test_support::Client::connect(daemon.addr).await;
    let huge = (0..30).map(|i| format!("v{i}={}", "x".repeat(240))).collect::<Vec<_>>().join(",");
    assert!(huge.len() > 7_000);
    let traces = [
        ("4bf92f3577b34da6a3ce929d0e0e4736", huge.as_str()),
        ("0af7651916cd43dd8448eb211c80319c", "rojo=00f067aa0ba902b7"),
    ];
    for (trace_id, state) in traces {
        let mut request = tonic::Request::new(portcullis::pb::RecordAttemptRequest {
            account: account("default", "traced@example.com"),
            attempt_id: String::new(),
            client_key: String::new(),
        });
        let parent = format!("00-{trace_id}-00f067aa0ba902b7-01");
        request.metadata_mut().insert("traceparent", parent.parse().unwrap());
        request.metadata_mut().insert("tracestate", state.parse().unwrap());
        c.0.record_attempt(request).await.unwrap();
    }
    assert!(daemon.terminate().await.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = collector.0.lock().unwrap().clone();
        let servers: Vec<Span> = spans
            .into_iter()
            .filter(|(_, s)| s.kind == SpanKind::Server as i32)
            .map(|(_, s)| s)
            .collect();
        if servers.len() >= 2 {
            break servers;
        }
        assert!(Instant::now() < deadline, "spans did not arrive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (trace_id, state) in traces {
        let span = spans
            .iter()
            .find(|s| hex::encode(&s.trace_id) == trace_id)
            .expect("the caller's trace was joined");
        if state.len() > 512 {
            assert_eq!(span.trace_state, "", "an oversized tracestate was exported");
        } else {
            assert_eq!(span.trace_state, state);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_client_through_the_daemon_to_the_store() {
    let (collector, endpoint) = start_collector().await;

    // The daemon, exporting to it, with a breach filter that lists the password (so the
    // accept and a CheckPassword find it: neither may export it, nor its SHA-1).
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sha1 = hex::encode_upper(<sha1::Sha1 as sha1::Digest>::digest(PASSWORD.as_bytes()));
    std::fs::write(dir.path().join("corpus.txt"), format!("{sha1}:3\n")).unwrap();
    let filter = dir.path().join("breach.filter");
    let options = portcullis::defence::breach::build::BuildOptions::default();
    portcullis::defence::breach::build::build(&dir.path().join("corpus.txt"), &filter, &options)
        .unwrap();
    let breach = format!("[breach]\nfilter_file = {:?}\n", filter.to_str().unwrap());
    let daemon = DaemonProcess::spawn_with_env(
        &TestConfig::redis(&redis.url()).extra(&breach).toml(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "portcullis-test")],
    );

    // The gateway side: this process's spans, exported to the same collector.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&endpoint)
        .build()
        .unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(opentelemetry_sdk::Resource::builder().with_service_name("gateway").build())
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("gateway")));
    let _default = tracing::subscriber::set_default(subscriber);

    let client = Client::new(ClientConfig {
        endpoints: vec![format!("http://{}", daemon.addr)],
        call_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    })
    .unwrap();
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    assert!(client.record_attempt("fast", ID, None).await.is_allowed());
    let login = Login {
        realm: "fast",
        identifier: ID,
        password: PASSWORD.as_bytes(),
        stored_hash: &hash,
        client_key: "198.51.100.7",
        attempt_id: None,
        device_token: None,
    };
    let answer = client.verify(login).await;
    assert!(answer.is_allowed() && answer.password_breached, "{answer:?}");
    let mut governor =
        portcullis::pb::governor_client::GovernorClient::connect(format!("http://{}", daemon.addr))
            .await
            .unwrap();
    let checked = governor
        .check_password(portcullis::pb::CheckPasswordRequest {
            account: account("fast", ID),
            password: PASSWORD.as_bytes().to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(checked.reason, portcullis::pb::PasswordCheckReason::Breached as i32);

    // Flush both sides: the client's provider, and the daemon's on SIGTERM.
    tokio::task::spawn_blocking(move || provider.shutdown()).await.unwrap().unwrap();
    assert!(daemon.terminate().await.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = collector.0.lock().unwrap().clone();
        let daemon_rpcs = spans
            .iter()
            .filter(|(svc, s)| svc == "portcullis-test" && s.kind == SpanKind::Server as i32)
            .count();
        if daemon_rpcs >= 3 && spans.iter().filter(|(svc, _)| svc == "gateway").count() >= 2 {
            break spans;
        }
        assert!(Instant::now() < deadline, "spans did not arrive: {spans:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let by_name = |service: &str, name: &str| -> Vec<&Span> {
        spans.iter().filter(|(svc, s)| svc == service && s.name == name).map(|(_, s)| s).collect()
    };
    let children = |parent: &Span, name: &str| -> Vec<&Span> {
        spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| {
                s.name == name
                    && s.trace_id == parent.trace_id
                    && s.parent_span_id == parent.span_id
            })
            .collect()
    };
    for (method, store_ops) in
        [("RecordAttempt", &["record_attempt"][..]), ("Verify", &["record_attempt", "clear"][..])]
    {
        let full = format!("portcullis.v1.Governor/{method}");
        let client_spans = by_name("gateway", &full);
        assert_eq!(client_spans.len(), 1, "client span of {method}");
        let client_span = client_spans[0];
        assert_eq!(client_span.kind, SpanKind::Client as i32);
        assert!(client_span.parent_span_id.is_empty(), "the client span is the trace's root");

        let rpcs = children(client_span, &full);
        assert_eq!(rpcs.len(), 1, "the daemon's {method} span is the client span's child");
        let rpc = rpcs[0];
        assert_eq!(rpc.kind, SpanKind::Server as i32);
        assert_eq!(attr(rpc, "rpc.system").as_deref(), Some("grpc"));
        assert_eq!(attr(rpc, "rpc.service").as_deref(), Some("portcullis.v1.Governor"));
        assert_eq!(attr(rpc, "rpc.method").as_deref(), Some(method));
        assert_eq!(attr(rpc, "rpc.grpc.status_code").as_deref(), Some("IntValue(0)"), "{method}");
        assert_eq!(attr(rpc, "realm").as_deref(), Some("fast"));
        let outcome = if method == "Verify" { "accept" } else { "allow" };
        assert_eq!(attr(rpc, "outcome").as_deref(), Some(outcome));

        for op in store_ops {
            let store = children(rpc, op);
            assert_eq!(store.len(), 1, "the store span {op} is the {method} span's child");
            assert_eq!(store[0].kind, SpanKind::Client as i32);
            assert_eq!(attr(store[0], "db.system").as_deref(), Some("redis"));
            assert_eq!(attr(store[0], "db.operation").as_deref(), Some(*op));
        }
        if method == "Verify" {
            assert_eq!(children(rpc, "cpu_admission").len(), 1, "admission span");
            let comparison = children(rpc, "password_comparison");
            assert_eq!(comparison.len(), 1, "comparison span");
            assert_eq!(attr(comparison[0], "hash.algorithm").as_deref(), Some("bcrypt"));
            assert_eq!(attr(comparison[0], "hash.cost").as_deref(), Some("4"));
        }
    }

    // Nothing secret anywhere in what was exported.
    let normalized = ID.to_lowercase();
    let key = record_key("fast", portcullis::normalize::Normalization::Email, ID);
    let digest = key.split(['{', '}']).nth(1).unwrap().to_owned();
    let (sha1_lower, key_prefix) = (sha1.to_lowercase(), sha1[..16].to_lowercase());
    let needles = [
        ID,
        &normalized,
        "victim",
        &digest,
        &digest[..16],
        PASSWORD,
        &hash,
        "$2b$",
        "$2y$",
        &sha1,
        &sha1_lower,
        &key_prefix,
    ];
    for (_, span) in &spans {
        let mut exported = vec![span.name.to_lowercase()];
        for a in &span.attributes {
            exported.push(a.key.to_lowercase());
            exported.push(text(a.value.as_ref().and_then(|v| v.value.as_ref())).to_lowercase());
        }
        for e in &span.events {
            exported.push(e.name.to_lowercase());
            for a in &e.attributes {
                exported.push(text(a.value.as_ref().and_then(|v| v.value.as_ref())).to_lowercase());
            }
        }
        for value in &exported {
            for needle in &needles {
                assert!(
                    !value.contains(&needle.to_lowercase()),
                    "span {:?} exports something secret ({value:?})",
                    span.name
                );
            }
        }
    }
}
