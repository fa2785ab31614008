//! Why a TLS connection to the daemon failed, in words (docs/tls.md, "When a handshake
//! is refused").
//!
//! With TLS 1.3 a server checks the client's certificate after the client has finished
//! its side of the handshake, so a daemon that refuses this gateway's certificate is seen
//! by the gRPC stack only as a connection closed under its first call (tonic reports
//! `Cancelled: operation was canceled`). The daemon's reason travels in a TLS alert
//! (RFC 8446 §6.2) that the stack drops. [`diagnose`] makes one handshake of its own with
//! the same files and reads the first record: the alert, or the daemon's HTTP/2 settings
//! when the certificate was accepted. The call itself is a deny either way; this only
//! says why.
//!
//! [`Diagnoses`] runs it after a transport failure of an `https://` endpoint, at most once
//! per [`DIAGNOSE_EVERY`] per endpoint, in the background (it never delays an answer), and
//! logs `TLS handshake refused: <reason>` as a warning; the reason is also in
//! [`crate::ClientStats::tls_refusals`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::AsyncReadExt;

use crate::config::{ClientError, ClientTls};

/// How long after one diagnosis of an endpoint the next may run.
pub const DIAGNOSE_EVERY: Duration = Duration::from_secs(10);

/// The prefix of every reason this module gives.
pub const REFUSED: &str = "TLS handshake refused";

/// What a diagnosis handshakes with: the rustls client configuration the client's TLS
/// files make (the CA, the client certificate, ALPN `h2`, as tonic builds its own), and
/// the verifier of the daemon's certificate, so each diagnosis can tell whether the server
/// proved itself the daemon before an alert came.
#[derive(Clone)]
pub struct DiagnosisConfig {
    config: Arc<rustls::ClientConfig>,
    server: Arc<WebPkiServerVerifier>,
}

/// The [`DiagnosisConfig`] of `tls`'s files.
///
/// # Errors
/// [`ClientError::Tls`] naming the file that could not be read or parsed.
pub fn rustls_config(tls: &ClientTls) -> Result<DiagnosisConfig, ClientError> {
    let bad = |setting: &'static str, what: &str| ClientError::Tls {
        setting,
        source: std::io::Error::other(format!("holds no usable PEM {what}")),
    };
    let read = |setting: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|source| ClientError::Tls { setting, source })
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&read("tls.ca_file", &tls.ca_file)?) {
        roots
            .add(ca.map_err(|_| bad("tls.ca_file", "certificate"))?)
            .map_err(|_| bad("tls.ca_file", "CA certificate"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| ClientError::Tls {
            setting: "tls.ca_file",
            source: std::io::Error::other(e),
        })?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls { setting: "tls", source: std::io::Error::other(e) })?
        .with_webpki_verifier(server.clone());
    let mut config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(&read("tls.cert_file", cert)?)
                .collect::<Result<_, _>>()
                .map_err(|_| bad("tls.cert_file", "certificate"))?;
            let key_pem = zeroize::Zeroizing::new(read("tls.key_file", key)?);
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|_| bad("tls.key_file", "private key"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| ClientError::Tls {
                setting: "tls.cert_file",
                source: std::io::Error::other(unusable_certificate(&e)),
            })?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(ClientError::Tls {
                setting: "tls.cert_file",
                source: std::io::Error::other("cert_file and key_file go together"),
            });
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(DiagnosisConfig { config: Arc::new(config), server })
}

/// The daemon's certificate verifier, noting that the server proved itself.
#[derive(Debug)]
struct Noting {
    inner: Arc<WebPkiServerVerifier>,
    proved: Arc<AtomicBool>,
}

impl ServerCertVerifier for Noting {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        self.proved.store(true, Ordering::Release);
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Why rustls will not present this client certificate (or its key).
fn unusable_certificate(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if format!("{other:?}").contains("UnsupportedCertVersion") =>
        {
            "it is not an X.509 v3 certificate (a v1 certificate has no extensions: no SAN, \
             no key usage); issue a v3 one (docs/tls.md)"
                .to_owned()
        }
        other => format!("it cannot be presented with tls.key_file: {other}"),
    }
}

/// One handshake with the daemon at `url` (`https://HOST:PORT`) under `config`, within
/// `timeout`: `Some("TLS handshake refused: …")` when the daemon refused it or the
/// client could not trust the daemon, `None` when the daemon accepted it or nothing
/// could be learnt (no TCP connection, no answer in time: other failures than TLS). An
/// alert from a server that has not proved itself the daemon (its certificate not yet
/// verified) is said to come from "the server at HOST:PORT", never from the daemon.
pub async fn diagnose(
    url: &str,
    config: &DiagnosisConfig,
    domain_name: Option<&str>,
    timeout: Duration,
) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    if uri.scheme_str() != Some("https") {
        return None;
    }
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let name = ServerName::try_from(domain_name.unwrap_or(&host).to_owned()).ok()?;
    let proved = Arc::new(AtomicBool::new(false));
    let mut rustls = (*config.config).clone();
    rustls.dangerous().set_certificate_verifier(Arc::new(Noting {
        inner: config.server.clone(),
        proved: proved.clone(),
    }));
    let server = format!("{host}:{port}");
    let said = |e: &std::io::Error| reason(e, proved.load(Ordering::Acquire), &server);
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.ok()?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(rustls));
        let mut tls = match connector.connect(name, tcp).await {
            Ok(tls) => tls,
            Err(e) => return Some(said(&e)),
        };
        // The daemon writes its HTTP/2 settings first; a refused certificate gets an
        // alert instead.
        let mut first = [0u8; 1];
        match tls.read(&mut first).await {
            Ok(_) => None,
            Err(e) => Some(said(&e)),
        }
    };
    tokio::time::timeout(timeout, attempt).await.ok().flatten()
}

/// The words for a failed handshake or first read; `proved`: the server's certificate
/// had verified, so an alert is the daemon's.
fn reason(error: &std::io::Error, proved: bool, server: &str) -> String {
    let Some(e) = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return format!("{REFUSED}: the connection failed during the handshake ({error})");
    };
    let said = match e {
        rustls::Error::AlertReceived(alert) if proved => return refused_by_daemon(*alert),
        rustls::Error::AlertReceived(alert) => format!(
            "the server at {server} sent the alert {} before proving it is the daemon (its \
             certificate was not verified): is this the daemon's address?",
            snake(&format!("{alert:?}"))
        ),
        rustls::Error::InvalidCertificate(c) => daemon_certificate(c),
        other => other.to_string(),
    };
    format!("{REFUSED}: {said}")
}

/// The daemon's alert, in words: it refused this client's certificate (or its absence).
fn refused_by_daemon(alert: AlertDescription) -> String {
    let why = match alert {
        AlertDescription::CertificateRequired => {
            return format!(
                "{REFUSED}: the daemon requires a client certificate (mutual TLS): set \
                 tls.cert_file and tls.key_file (certificate_required)"
            );
        }
        AlertDescription::CertificateExpired => "it has expired or is not yet valid",
        AlertDescription::UnknownCA => "it is not signed by a CA the daemon trusts",
        AlertDescription::UnsupportedCertificate => {
            "its extended key usage does not allow client authentication (clientAuth)"
        }
        AlertDescription::BadCertificate => "it is malformed or has an unknown critical extension",
        AlertDescription::CertificateRevoked => "it is revoked",
        AlertDescription::DecryptError => "its signature does not verify",
        AlertDescription::CertificateUnknown => {
            "the daemon could not use it (a v1 certificate, for example); its log names why"
        }
        _ => "the daemon's log names why",
    };
    let code = format!("{alert:?}");
    format!("{REFUSED}: the daemon refused this client certificate: {why} ({})", snake(&code))
}

/// Why this client does not trust the daemon's certificate.
fn daemon_certificate(error: &CertificateError) -> String {
    let why = match error {
        CertificateError::UnknownIssuer => "is not signed by a CA in tls.ca_file".to_owned(),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "does not name the host dialled (add it to the certificate's SANs, or set \
             tls.domain_name)"
                .to_owned()
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "has expired".to_owned()
        }
        other => other.to_string(),
    };
    format!("the daemon's certificate {why}")
}

/// `url` without a `user:password@` part, for a log line.
pub fn without_credentials(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if scheme.is_empty() { format!("{host}{path}") } else { format!("{scheme}://{host}{path}") }
}

/// `CertificateExpired` → `certificate_expired`, the alert's name in RFC 8446.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out.replace("unknown_c_a", "unknown_ca")
}

/// The diagnoses of one client's endpoints: when each last ran and what it found.
pub struct Diagnoses {
    config: DiagnosisConfig,
    domain_name: Option<String>,
    timeout: Duration,
    /// Per endpoint, in configuration order: when the last diagnosis started, and the
    /// refusal it found (`None`: accepted, or not a TLS matter).
    last: Mutex<Vec<(Option<Instant>, Option<String>)>>,
}

impl Diagnoses {
    /// For `endpoints` endpoints reached with `tls`; `timeout` bounds each handshake.
    ///
    /// # Errors
    /// [`ClientError::Tls`] naming a file that does not load.
    pub fn new(tls: &ClientTls, endpoints: usize, timeout: Duration) -> Result<Self, ClientError> {
        Ok(Self {
            config: rustls_config(tls)?,
            domain_name: tls.domain_name.clone(),
            timeout,
            last: Mutex::new(vec![(None, None); endpoints]),
        })
    }

    /// After a transport failure of endpoint `index` at `url`: a diagnosis in the
    /// background, for an `https://` endpoint, unless one ran within [`DIAGNOSE_EVERY`].
    pub fn after_failure(self: &Arc<Self>, index: usize, url: &str) {
        if !url.starts_with("https://") {
            return;
        }
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let Some(slot) = last.get_mut(index) else { return };
            if slot.0.is_some_and(|at| now.duration_since(at) < DIAGNOSE_EVERY) {
                return;
            }
            slot.0 = Some(now);
        }
        let (this, url) = (self.clone(), url.to_owned());
        tokio::spawn(async move {
            let found =
                diagnose(&url, &this.config, this.domain_name.as_deref(), this.timeout).await;
            if let Some(reason) = &found {
                tracing::warn!(endpoint = %without_credentials(&url), "{reason}");
            }
            let mut last = this.last.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = last.get_mut(index) {
                slot.1 = found;
            }
        });
    }

    /// Endpoint `index` answered a call: whatever its last diagnosis found is over.
    pub fn answered(&self, index: usize) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = last.get_mut(index) {
            slot.1 = None;
        }
    }

    /// What the last diagnosis of each endpoint found.
    pub fn found(&self) -> Vec<Option<String>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.iter().map(|(_, found)| found.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(alert: AlertDescription) -> std::io::Error {
        std::io::Error::other(rustls::Error::AlertReceived(alert))
    }

    #[test]
    fn an_alert_is_the_daemons_only_once_the_server_proved_it_is_the_daemon() {
        let proved = reason(&alert(AlertDescription::UnknownCA), true, "h:1");
        assert_eq!(
            proved,
            "TLS handshake refused: the daemon refused this client certificate: it is not \
             signed by a CA the daemon trusts (unknown_ca)"
        );
        let unproved = reason(&alert(AlertDescription::UnknownCA), false, "h:1");
        assert!(
            unproved.starts_with(
                "TLS handshake refused: the server at h:1 sent the alert unknown_ca before proving"
            ),
            "{unproved}"
        );
        let expired = reason(&alert(AlertDescription::CertificateExpired), true, "h:1");
        assert!(expired.ends_with("(certificate_expired)"), "{expired}");
        let required = reason(&alert(AlertDescription::CertificateRequired), true, "h:1");
        assert!(required.contains("requires a client certificate"), "{required}");
    }

    #[test]
    fn a_logged_endpoint_carries_no_credentials() {
        assert_eq!(without_credentials("https://u:s3cr3t@h:1/x"), "https://h:1/x");
        assert_eq!(without_credentials("https://h:1"), "https://h:1");
        assert_eq!(without_credentials("h:1"), "h:1");
    }
}
