//! Traces (docs/observability.md: OpenTelemetry spans through `tracing-opentelemetry`,
//! exported over OTLP gRPC, configured only by the standard environment variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SDK_DISABLED`), which the SDK reads itself. Without
//! an endpoint, or with `OTEL_SDK_DISABLED=true`, there is no exporter, no propagator and
//! no span is sent anywhere.
//!
//! W3C trace context (`traceparent`, `tracestate`) travels in gRPC metadata: the server
//! extracts it in [`rpc_span`], `portcullis::client` injects the caller's current span
//! (`portcullis_client::trace::inject`).
//!
//! Span attributes name the RPC, the realm, the outcome, the refusal reason, the store
//! operation (script name) and the hash algorithm and cost; never an identifier, key,
//! password or hash.

use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use portcullis_client::rpcs::Rpc;
use tonic::codegen::http;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Service name on exported spans when neither `OTEL_SERVICE_NAME` nor a `service.name`
/// in `OTEL_RESOURCE_ATTRIBUTES` gives one.
pub const DEFAULT_SERVICE_NAME: &str = "portcullis";

/// Why the exporter could not be built (the daemon then runs without it).
pub type ExporterError = opentelemetry_otlp::ExporterBuildError;

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Whether the `OTEL_*` environment asks for an exporter: an OTLP endpoint is set and
/// `OTEL_SDK_DISABLED` is not `true`.
pub fn enabled_by_env() -> bool {
    exporting_requested("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

/// Whether the `OTEL_*` environment asks for the OTLP export of one signal:
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or the signal's own endpoint variable
/// (`signal_endpoint`, `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` for the security events) is
/// set, and `OTEL_SDK_DISABLED` is not `true`.
pub fn exporting_requested(signal_endpoint: &str) -> bool {
    enabled(|name| std::env::var(name).ok(), signal_endpoint)
}

/// [`exporting_requested`] over any variable lookup (for tests).
fn enabled(var: impl Fn(&str) -> Option<String>, signal_endpoint: &str) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set(signal_endpoint))
}

/// The resource every exported span and event carries: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads them, with [`DEFAULT_SERVICE_NAME`] when
/// neither names the service.
pub fn resource() -> opentelemetry_sdk::Resource {
    let named = env_set("OTEL_SERVICE_NAME")
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    let mut resource = opentelemetry_sdk::Resource::builder();
    if !named {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    resource.build()
}

/// The tracer provider the `OTEL_*` environment asks for, with a batch OTLP gRPC
/// exporter, and its tracer; also installs the W3C trace-context propagator. `None`
/// when [`enabled_by_env`] is false. Call inside a tokio runtime.
///
/// # Errors
/// [`ExporterError`] when the exporter cannot be built (a malformed endpoint).
pub fn provider_from_env() -> Result<Option<(SdkTracerProvider, SdkTracer)>, ExporterError> {
    if !enabled_by_env() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic().build()?;
    // The builder's default configuration reads OTEL_TRACES_SAMPLER(_ARG); the resource
    // builder reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    let tracer = provider.tracer("portcullis");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(Some((provider, tracer)))
}

/// Set once an exporter is installed ([`provider_from_env`]).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans are exported. The spans inside a call (store operation, CPU admission,
/// comparison) exist only for the trace; without an exporter they are not made at all,
/// since the log layer would otherwise format their fields on every call for nothing
/// (a large share of the daemon's CPU per `RecordAttempt`; docs/performance-log.md). The RPC
/// span, the logs' context, is always made.
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Longest `tracestate` a caller may send that is carried into the daemon's spans, in
/// bytes: W3C Trace Context (§3.3.1.5) lets a vendor drop a longer one, and asks
/// propagators to carry at least this much.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// Most `tracestate` list members carried (W3C Trace Context §3.3.1.1: at most 32).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A caller's `tracestate` within [`MAX_TRACESTATE_BYTES`] and [`MAX_TRACESTATE_MEMBERS`],
/// else nothing: the whole header is dropped (the trace itself, `traceparent`, is kept),
/// so a caller cannot make every exported span carry kilobytes of its choosing.
fn bounded_tracestate(value: &str) -> Option<&str> {
    let members = value.split(',').filter(|m| !m.trim().is_empty()).count();
    (value.len() <= MAX_TRACESTATE_BYTES && members <= MAX_TRACESTATE_MEMBERS).then_some(value)
}

/// A trace-context header's value as the daemon accepts it (see [`bounded_tracestate`]).
fn bounded<'a>(key: &str, value: Option<&'a str>) -> Option<&'a str> {
    let value = value?;
    if key.eq_ignore_ascii_case("tracestate") { bounded_tracestate(value) } else { Some(value) }
}

/// Reads W3C trace context from incoming gRPC metadata, `tracestate` bounded.
pub struct MetadataExtractor<'a>(pub &'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        bounded(key, self.0.get(key).and_then(|v| v.to_str().ok()))
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(|k| match k {
                KeyRef::Ascii(k) => k.as_str(),
                KeyRef::Binary(k) => k.as_str(),
            })
            .collect()
    }
}

/// Reads W3C trace context from HTTP/2 request headers (what gRPC metadata is on the
/// wire), before tonic has made a [`MetadataMap`] of them; `tracestate` bounded.
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        bounded(key, self.0.get(key).and_then(|v| v.to_str().ok()))
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The server span of one call of an RPC of the contract (for tonic's `trace_fn`),
/// named from the one RPC table (`portcullis_client::rpcs`), so a caller's path never
/// becomes a span name; a child of the caller's context when the request carries one.
/// Other services (health, reflection) get no span. Realm and outcome are recorded by the
/// service as they become known ([`record_realm`], [`record_outcome`]).
pub fn rpc_span(request: &http::Request<()>) -> Span {
    let Some(rpc) = Rpc::from_path(request.uri().path()) else {
        return Span::none();
    };
    let span = tracing::info_span!(
        "rpc",
        otel.name = rpc.full_name(),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = rpc.service().name(),
        rpc.method = rpc.method(),
        rpc.grpc.status_code = Empty,
        realm = Empty,
        flow = Empty,
        outcome = Empty,
        refusal.reason = Empty,
    );
    if !span.is_disabled() {
        let parent = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&HeaderExtractor(request.headers()))
        });
        let _ = span.set_parent(parent);
    }
    span
}

/// Records the realm (a configured name) on the current RPC span.
pub fn record_realm(realm: &str) {
    Span::current().record("realm", realm);
}

/// Records the flow (`second_factor`, `recovery_code`, `password_reset`,
/// `verification_resend`; docs/flows.md) on the current RPC span.
pub fn record_flow(flow: &'static str) {
    Span::current().record("flow", flow);
}

/// Records the outcome (`allow`, `deny`, `accept`, `reject`, `refused`,
/// `unavailable`, `invalid_argument`, `internal`) on the current RPC span, and for a
/// refusal its reason.
pub fn record_outcome(outcome: &'static str, refusal_reason: Option<&'static str>) {
    let span = Span::current();
    span.record("outcome", outcome);
    if let Some(reason) = refusal_reason {
        span.record("refusal.reason", reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> bool {
        let var = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned());
        enabled(var, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    }

    #[test]
    fn an_exporter_only_when_an_endpoint_is_set_and_the_sdk_is_not_disabled() {
        assert!(!with(&[]), "no endpoint, no exporter");
        assert!(!with(&[("OTEL_SERVICE_NAME", "x")]));
        assert!(!with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]));
        assert!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")]));
        assert!(with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317")]));
        for disabled in ["true", "TRUE", " true "] {
            assert!(!with(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_SDK_DISABLED", disabled),
            ]));
        }
        assert!(with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "false"),
        ]));
    }

    #[test]
    fn a_caller_tracestate_is_carried_only_within_the_w3c_limits() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse().unwrap(),
        );
        let get = |headers: &http::HeaderMap, key: &str| {
            HeaderExtractor(headers).get(key).map(str::to_owned)
        };
        headers.insert("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".parse().unwrap());
        assert_eq!(
            get(&headers, "tracestate").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        let long = format!("v={}", "x".repeat(MAX_TRACESTATE_BYTES));
        headers.insert("tracestate", long.parse().unwrap());
        assert_eq!(get(&headers, "tracestate"), None, "over 512 bytes");
        let many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        assert!(many.len() <= MAX_TRACESTATE_BYTES);
        headers.insert("tracestate", many.parse().unwrap());
        assert_eq!(get(&headers, "tracestate"), None, "over 32 members");
        let exactly = (0..32).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        headers.insert("tracestate", exactly.parse().unwrap());
        assert!(get(&headers, "tracestate").is_some());
        // The trace itself is kept.
        assert!(get(&headers, "traceparent").is_some());
    }

    #[test]
    fn only_governor_calls_get_a_span_named_from_a_fixed_table() {
        let request = |path: &str| http::Request::builder().uri(path).body(()).unwrap();
        // No subscriber in this test: spans are disabled, but `none()` is distinguishable
        // by its missing metadata.
        assert!(rpc_span(&request("/grpc.health.v1.Health/Check")).metadata().is_none());
        assert!(
            rpc_span(&request("/portcullis.v1.Governor/Secret@Example.com")).metadata().is_none()
        );
        assert!(rpc_span(&request("/portcullis.v1.Governor/Verify")).metadata().is_some());
    }
}
