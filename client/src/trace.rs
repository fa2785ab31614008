//! W3C trace context (`traceparent`, `tracestate`) into every call's gRPC metadata, so
//! the daemon's spans join the gateway's trace (docs/observability.md, "Traces"). It
//! goes through the global propagator of the gateway's process: nothing is injected
//! when none was installed.

use opentelemetry::propagation::Injector;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Writes W3C trace context into outgoing gRPC metadata.
pub struct MetadataInjector<'a>(pub &'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) =
            (MetadataKey::from_bytes(key.as_bytes()), MetadataValue::try_from(value))
        {
            self.0.insert(key, value);
        }
    }
}

/// Injects the current span's context into `metadata` (`traceparent`, `tracestate`),
/// through the global propagator: nothing when none was installed.
pub fn inject(metadata: &mut MetadataMap) {
    let context = Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut MetadataInjector(metadata));
    });
}
