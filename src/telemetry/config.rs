//! `[telemetry]`: the HTTP listener of metrics and health (docs/observability.md, "The
//! admin listener"). Traces are configured by the standard `OTEL_*` environment
//! variables only.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::setting::ConfigError;

/// `[telemetry]`.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `host:port` of the metrics and health listener (`/metrics`, `/healthz`,
    /// `/readyz`); `""` disables it. On loopback by default: metrics name realms and
    /// load, which is not for everyone.
    #[default("127.0.0.1:9464".to_owned())]
    pub admin_listen: String,
}

impl TelemetryConfig {
    /// The listener's address, `None` when disabled.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `telemetry.admin_listen` when it is not a
    /// `host:port` socket address.
    pub fn validate(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let admin = self.admin_listen.trim();
        if admin.is_empty() {
            return Ok(None);
        }
        admin.parse::<SocketAddr>().map(Some).map_err(|_| {
            ConfigError::invalid(
                "telemetry.admin_listen",
                "not a host:port socket address (use \"\" to disable)",
            )
        })
    }
}
