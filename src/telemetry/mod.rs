//! Telemetry (docs/observability.md): what operators see of the daemon, and never
//! whom it protects. No log line, metric label or span attribute carries an
//! identifier, account key, password, hash or password fingerprint; the tests read the
//! daemon's logs, its `/metrics` and its exported spans to hold that.
//!
//! - [`traces`]: OpenTelemetry spans through `tracing-opentelemetry`, exported over OTLP
//!   gRPC when the standard `OTEL_*` variables name an endpoint; W3C trace context
//!   carried in gRPC metadata.
//! - [`metrics`]: the Prometheus recorder behind the `metrics` facade and every metric's
//!   name and labels.
//! - [`http`]: the HTTP listener of metrics and health (`/metrics`, `/healthz`,
//!   `/readyz`; `telemetry.admin_listen`) and the
//!   readiness it reports.
//! - [`config`]: the `[telemetry]` settings.
//! - [`episodes`]: refusal episodes, so a flood of refusals is a few log lines.
//! - [`events`]: security events (lockouts, sprays, operator actions, …) as
//!   OpenTelemetry log records over OTLP and structured log lines, on a bounded queue.
//! - [`rpc_calls`]: the one layer that counts, times and records the status of every
//!   call of the contract's RPCs.
//! - [`span_fields`]: span fields formatted only for a log line that shows them.
//! - [`running_config`]: the configuration in force as an operator reads it
//!   (`Admin/EffectiveConfig`), secrets named and never shown.
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default `info`): human-readable by
//! default, one JSON object a line with `--log-format json`.

pub mod config;
pub mod episodes;
pub mod events;
pub mod http;
pub mod metrics;
pub mod realm_meters;
pub mod rpc_calls;
pub mod running_config;
pub mod span_fields;
pub mod traces;

use tracing_subscriber::fmt::{
    self,
    format::{DefaultFields, JsonFields},
};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line an event (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object a line, with the fields and the enclosing spans' fields.
    Json,
}

/// What [`init`] started; [`Telemetry::shutdown`] flushes it.
#[must_use = "call shutdown() before exit, or buffered spans are lost"]
pub struct Telemetry {
    /// `None` when no `OTEL_*` endpoint is set or `OTEL_SDK_DISABLED=true`.
    tracer_provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.tracer_provider.is_some()
    }

    /// Exports the spans still buffered and stops the exporter. Call once, after the
    /// server stopped; it blocks on the export, so it runs off the async workers.
    pub async fn shutdown(self) {
        // The last security events first, bounded: an export stuck on a dead receiver
        // must not hold the exit.
        events::flush(events::EXPORT_TIMEOUT).await;
        if let Some(provider) = self.tracer_provider {
            let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if !matches!(done, Ok(Ok(()))) {
                eprintln!("portcullis: spans could not all be exported at shutdown");
            }
        }
    }
}

/// Installs the global subscriber (logs, and the span exporter when `OTEL_*` ask for
/// one) and the Prometheus recorder. Call once, from `main`, inside the tokio runtime
/// (the OTLP exporter's channel lives on it).
pub fn init(format: LogFormat) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal, never in a file or the journal.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Span fields are kept as recorded and formatted only for a line that shows them
    // (`span_fields`); the lines are what the stock formatters write.
    let logs = match format {
        // On a terminal, with colours: the stock layer, span fields formatted as they come.
        LogFormat::Text if ansi => tracing_subscriber::fmt::layer()
            .with_ansi(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => {
            type Fields = span_fields::Deferred<DefaultFields>;
            span_fields::KeepSpanValues::<Fields>::default()
                .and_then(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .fmt_fields(Fields::new(DefaultFields::new()))
                        .event_format(span_fields::FormatSpansFirst::new(fmt::format()))
                        .with_writer(std::io::stderr),
                )
                .with_filter(filter)
                .boxed()
        }
        LogFormat::Json => {
            type Fields = span_fields::Deferred<JsonFields>;
            let json = fmt::format().json().with_current_span(true).with_span_list(false);
            span_fields::KeepSpanValues::<Fields>::default()
                .and_then(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .fmt_fields(Fields::new(JsonFields::new()))
                        .event_format(span_fields::FormatSpansFirst::new(json))
                        .with_writer(std::io::stderr),
                )
                .with_filter(filter)
                .boxed()
        }
    };
    let (tracer_provider, spans) = match traces::provider_from_env() {
        Ok(Some((provider, tracer))) => {
            // Spans at info and above: the RPC, store, admission and comparison spans.
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
            (Some(provider), Some(layer))
        }
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("portcullis: traces are not exported: {e}");
            (None, None)
        }
    };
    tracing_subscriber::registry().with(logs).with(spans).init();
    metrics::install();
    match events::Export::from_env() {
        Ok(Some(export)) => events::start(export),
        Ok(None) => {}
        Err(e) => eprintln!("portcullis: security events are not exported: {e}"),
    }
    Telemetry { tracer_provider }
}
