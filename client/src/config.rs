//! The client's configuration: where the daemons are, every deadline, the retry budget,
//! passive health, TLS and the bearer token (docs/client.md, "Configuration").

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tonic::Status;

/// Client configuration. Every duration comes from here; the defaults are documented
/// and chosen for a daemon on the same network.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Daemon URLs (`http://host:port`); one by default.
    #[serde(default = "default_endpoints")]
    pub endpoints: Vec<String>,
    /// Deadline of one call, retries included; each try sends the time left to the
    /// daemon as `grpc-timeout` (default 2 s).
    #[serde(default = "default_call_timeout", with = "humantime_serde")]
    pub call_timeout: Duration,
    /// Deadline of a TCP connect (default 500 ms).
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Most retries of one call after transport failures (default 2).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Retries allowed as a fraction of calls, in the long run (default 0.2).
    #[serde(default = "default_retry_budget_ratio")]
    pub retry_budget_ratio: f64,
    /// Retries allowed in a burst beyond the ratio (default 10).
    #[serde(default = "default_retry_budget_reserve")]
    pub retry_budget_reserve: u32,
    /// Consecutive transport failures that eject an endpoint (default 3).
    #[serde(default = "default_eject_after")]
    pub eject_after: u32,
    /// First ejection's length; doubles after each failed probe (default 5 s).
    #[serde(default = "default_eject_for", with = "humantime_serde")]
    pub eject_for: Duration,
    /// Longest ejection (default 60 s).
    #[serde(default = "default_eject_max", with = "humantime_serde")]
    pub eject_max: Duration,
    /// Interval of HTTP/2 keepalive pings on each connection (default 30 s, at least
    /// 1 s). A connection that died silently (a NAT or load balancer dropping an idle
    /// flow, a daemon host that froze) is found within `keepalive_time +
    /// keepalive_timeout` and the next call connects anew; without pings every call
    /// would wait out its deadline on it until the OS gives up, minutes later. gRPC's
    /// guidance (A8, "Client-side keepalive") asks for no less than 10 s in production;
    /// the daemon accepts pings at any rate, but a proxy in front of it (Envoy, nginx)
    /// must permit them at least this often or it closes the connection (`GOAWAY
    /// too_many_pings`).
    #[serde(default = "default_keepalive_time", with = "humantime_serde")]
    pub keepalive_time: Duration,
    /// A keepalive ping unanswered for this long closes the connection (default 10 s, at
    /// least 100 ms).
    #[serde(default = "default_keepalive_timeout", with = "humantime_serde")]
    pub keepalive_timeout: Duration,
    /// Ping connections with no call in flight too (default true), so a gateway that was
    /// quiet overnight finds its dead connection before its first login does.
    #[serde(default = "default_keepalive_permit_without_calls")]
    pub keepalive_permit_without_calls: bool,
    /// TLS to the daemon, for `https://` endpoints (see [`ClientTls`]).
    #[serde(default)]
    pub tls: Option<ClientTls>,
    /// File holding this gateway's bearer token, sent as `authorization: Bearer …` on
    /// every call (for daemons that authorize callers by token rather than by client
    /// certificate). One trailing newline is ignored.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

/// `tls`: how the client checks the daemon and, for mutual TLS, proves who it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTls {
    /// PEM CA certificate(s) the daemon's certificate must chain to.
    pub ca_file: PathBuf,
    /// PEM client certificate chain (mutual TLS), with `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name the daemon's certificate must carry, when it is not the endpoint's host.
    #[serde(default)]
    pub domain_name: Option<String>,
}

impl ClientTls {
    /// tonic's client TLS configuration from these files.
    ///
    /// # Errors
    /// [`ClientError::Tls`] naming the file that could not be read, or a certificate
    /// without its key.
    pub fn load(&self) -> Result<tonic::transport::ClientTlsConfig, ClientError> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let read = |setting: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|source| ClientError::Tls { setting, source })
        };
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("tls.ca_file", &self.ca_file)?));
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let key = zeroize::Zeroizing::new(read("tls.key_file", key)?);
                config = config.identity(Identity::from_pem(read("tls.cert_file", cert)?, &*key));
            }
            (None, None) => {}
            _ => {
                return Err(ClientError::Tls {
                    setting: "tls.cert_file",
                    source: std::io::Error::other("cert_file and key_file go together"),
                });
            }
        }
        if let Some(name) = &self.domain_name {
            config = config.domain_name(name.clone());
        }
        Ok(config)
    }
}

/// Adds the bearer token, when one is configured, to every call.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// Sends `Bearer <token>` on every call (`None`: nothing).
    ///
    /// # Errors
    /// [`ClientError::Token`] when the token is not visible ASCII.
    pub fn new(token: Option<&str>) -> Result<Self, ClientError> {
        let Some(token) = token else { return Ok(Self(None)) };
        let mut value: tonic::metadata::MetadataValue<_> =
            format!("Bearer {token}").parse().map_err(|_| ClientError::Token)?;
        value.set_sensitive(true);
        Ok(Self(Some(value)))
    }

    /// Reads the token from `path` (one trailing newline ignored).
    ///
    /// # Errors
    /// [`ClientError::Tls`] (`token_file`) when unreadable, [`ClientError::Token`] when
    /// not visible ASCII.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ClientError> {
        let text = zeroize::Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|source| ClientError::Tls { setting: "token_file", source })?,
        );
        Self::new(Some(text.trim_end_matches(['\r', '\n'])))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = &self.0 {
            req.metadata_mut().insert("authorization", token.clone());
        }
        Ok(req)
    }
}

fn default_endpoints() -> Vec<String> {
    vec!["http://127.0.0.1:50051".to_owned()]
}
const fn default_call_timeout() -> Duration {
    Duration::from_secs(2)
}
const fn default_connect_timeout() -> Duration {
    Duration::from_millis(500)
}
const fn default_max_retries() -> u32 {
    2
}
const fn default_retry_budget_ratio() -> f64 {
    0.2
}
const fn default_retry_budget_reserve() -> u32 {
    10
}
const fn default_eject_after() -> u32 {
    3
}
const fn default_eject_for() -> Duration {
    Duration::from_secs(5)
}
const fn default_eject_max() -> Duration {
    Duration::from_secs(60)
}
const fn default_keepalive_time() -> Duration {
    Duration::from_secs(30)
}
const fn default_keepalive_timeout() -> Duration {
    Duration::from_secs(10)
}
const fn default_keepalive_permit_without_calls() -> bool {
    true
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            endpoints: default_endpoints(),
            call_timeout: default_call_timeout(),
            connect_timeout: default_connect_timeout(),
            max_retries: default_max_retries(),
            retry_budget_ratio: default_retry_budget_ratio(),
            retry_budget_reserve: default_retry_budget_reserve(),
            eject_after: default_eject_after(),
            eject_for: default_eject_for(),
            eject_max: default_eject_max(),
            keepalive_time: default_keepalive_time(),
            keepalive_timeout: default_keepalive_timeout(),
            keepalive_permit_without_calls: default_keepalive_permit_without_calls(),
            tls: None,
            token_file: None,
        }
    }
}

/// A configuration the client cannot use.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("client.endpoints is empty")]
    NoEndpoints,
    #[error("client.endpoints[{index}] is not a valid URL")]
    BadEndpoint {
        index: usize,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("client.{setting} could not be used")]
    Tls {
        setting: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("client.token_file is not a usable token (one line of visible ASCII)")]
    Token,
    #[error("client.{setting} is out of range: allowed {allowed}")]
    OutOfRange { setting: &'static str, allowed: &'static str },
}
