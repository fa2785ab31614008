//! The names of the metrics the client records through the `metrics` facade of the
//! gateway's process (docs/observability.md, "Gateway (`portcullis_client`)"). Labels are bounded: `endpoint`
//! is a configured URL, never anything a caller sent.

/// Counter (client): tries repeated after a transport failure.
pub const CLIENT_RETRIES: &str = "portcullis_client_retries_total";
/// Counter (client): endpoint ejections by passive health, by `endpoint` (configured URL).
pub const CLIENT_EJECTIONS: &str = "portcullis_client_ejections_total";
/// Gauge (client): 1 while the circuit breaker is open (no endpoint may be tried).
pub const CLIENT_BREAKER_OPEN: &str = "portcullis_client_breaker_open";
/// Counter (client): calls denied by the open breaker without a network call.
pub const CLIENT_BREAKER_DENIALS: &str = "portcullis_client_breaker_denials_total";
