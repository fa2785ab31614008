//! The gateway's own telemetry, as any service embedding the client would set it up:
//! logs on stderr, spans over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (with the
//! W3C propagator the client injects through), and a Prometheus recorder for the client's
//! metrics.

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub struct Telemetry {
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the buffered spans.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

pub fn init() -> Telemetry {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").is_ok_and(|e| !e.is_empty());
    let provider = endpoint
        .then(|| opentelemetry_otlp::SpanExporter::builder().with_tonic().build().ok())
        .flatten()
        .map(|exporter| {
            opentelemetry_sdk::trace::SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder().with_service_name("gateway").build(),
                )
                .build()
        });
    let spans = provider.as_ref().map(|p| {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        tracing_opentelemetry::layer().with_tracer(p.tracer("gateway"))
    });
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter))
        .with(spans)
        .init();
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only metrics recorder of this process");
    Telemetry { metrics, provider }
}

use tracing_subscriber::Layer as _;
