//! What the listener says about the TLS handshakes it refuses (docs/tls.md, "When a
//! handshake is refused"): one warning per refused client certificate, naming the reason
//! and the certificate's subject and subject alternative names, so the operator of a
//! misconfigured gateway finds the certificate at fault from the daemon's log alone.
//!
//! The client learns only the TLS alert (RFC 8446 §6.2: `certificate_expired`,
//! `unknown_ca`, `unsupported_certificate`, …); the line here is the whole story. Lines
//! are rate-limited per (reason, certificate): a gateway that reconnects in a loop with a
//! bad certificate writes one line per [`REPEAT_AFTER`], not one per attempt. Every refusal
//! is still counted in `portcullis_auth_refusals_total{code="tls_handshake"}`.
//!
//! A certificate's subject and names are not secrets (the gateway shows them to every
//! server it connects to); nothing of a key, a token or a password is ever in these lines.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::{Digest, Sha256};

/// How long the same refusal (the same reason for the same certificate, or for the same
/// peer address when there is no certificate) stays quiet after its line.
pub const REPEAT_AFTER: Duration = Duration::from_secs(60);

/// Distinct refusals remembered for [`REPEAT_AFTER`]; past this (a flood of distinct
/// certificates), the oldest are forgotten, so memory stays bounded.
const REMEMBERED: usize = 1024;

/// Refusal lines of all kinds together per [`REPEAT_AFTER`]: a peer that makes up a new
/// certificate for every connection gets this many lines a minute, no more; the next line
/// says how many refusals went unlogged in between (all are counted in the metric).
pub const LINES_PER_INTERVAL: u32 = 20;

/// The rate limit of the refusal lines, shared by every configuration a reload builds.
#[derive(Debug, Default)]
pub struct RefusalLog {
    lines: Mutex<Lines>,
}

#[derive(Debug, Default)]
struct Lines {
    /// When each recent refusal was last logged.
    last: HashMap<[u8; 32], Instant>,
    /// The start of the current interval of [`LINES_PER_INTERVAL`], and the lines in it.
    interval: Option<(Instant, u32)>,
    /// Refusals left unlogged by the cap since the last line.
    unlogged: u64,
}

impl RefusalLog {
    /// Whether a line for `key` is due now: `Some(n)` with the refusals the cap left
    /// unlogged before it (and the line is noted as written), `None` for a repeat within
    /// [`REPEAT_AFTER`] or past [`LINES_PER_INTERVAL`].
    fn due(&self, key: [u8; 32], now: Instant) -> Option<u64> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let lines = &mut *lines;
        if lines.last.get(&key).is_some_and(|at| now.duration_since(*at) < REPEAT_AFTER) {
            return None;
        }
        let (start, written) = match lines.interval {
            Some((start, n)) if now.duration_since(start) < REPEAT_AFTER => (start, n),
            _ => (now, 0),
        };
        if written >= LINES_PER_INTERVAL {
            lines.unlogged += 1;
            return None;
        }
        lines.interval = Some((start, written + 1));
        if lines.last.len() >= REMEMBERED {
            lines.last.retain(|_, at| now.duration_since(*at) < REPEAT_AFTER);
            if lines.last.len() >= REMEMBERED {
                lines.last.clear();
            }
        }
        lines.last.insert(key, now);
        Some(std::mem::take(&mut lines.unlogged))
    }

    /// Logs a refused client certificate, unless the same refusal was logged within
    /// [`REPEAT_AFTER`].
    pub fn certificate_refused(&self, leaf: &CertificateDer<'_>, error: &rustls::Error) {
        let reason = certificate_reason(error);
        let mut key = Sha256::new();
        key.update(reason.as_bytes());
        key.update(leaf.as_ref());
        let Some(unlogged) = self.due(key.finalize().into(), Instant::now()) else {
            return;
        };
        let (subject, names) = describe(leaf);
        tracing::warn!(
            reason = %reason,
            subject = %subject,
            san = %names,
            unlogged_refusals = unlogged,
            "tls: client certificate refused: {reason}"
        );
    }

    /// Logs a handshake that failed for another reason than its certificate (none
    /// presented, no common protocol version, not TLS at all), once per reason and peer
    /// address within [`REPEAT_AFTER`]. Certificate refusals are logged by the verifier
    /// ([`LoggingVerifier`]), which sees the certificate, and are skipped here.
    pub fn handshake_refused(&self, peer: IpAddr, error: &std::io::Error) {
        let rustls_error = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::InvalidCertificate(_)) = rustls_error {
            return;
        }
        let reason = match rustls_error {
            Some(rustls::Error::NoCertificatesPresented) => {
                "the client presented no certificate (mutual TLS: tls.client_ca_file is set)"
                    .to_owned()
            }
            Some(e) => e.to_string(),
            None => format!("not a TLS handshake, or the connection broke off ({error})"),
        };
        let mut key = Sha256::new();
        key.update(reason.as_bytes());
        key.update(peer.to_string().as_bytes());
        let Some(unlogged) = self.due(key.finalize().into(), Instant::now()) else {
            return;
        };
        tracing::warn!(
            reason = %reason,
            peer = %peer,
            unlogged_refusals = unlogged,
            "tls: handshake refused: {reason}"
        );
    }
}

impl RefusalLog {
    /// Logs a verified client certificate whose names (its `dns` and `uri` SANs) belong
    /// to no configured caller, once per set of names within [`REPEAT_AFTER`]; returns
    /// those names as the line shows them (`dns:…,uri:…`, or `no DNS or URI SAN`).
    pub fn no_caller(&self, dns: &[String], uri: &[String]) -> String {
        let names: Vec<String> = (dns.iter().map(|d| format!("dns:{d}")))
            .chain(uri.iter().map(|u| format!("uri:{u}")))
            .collect();
        let names = if names.is_empty() { "no DNS or URI SAN".to_owned() } else { names.join(",") };
        let key: [u8; 32] = Sha256::digest(format!("no caller {names}")).into();
        if let Some(unlogged) = self.due(key, Instant::now()) {
            tracing::warn!(
                san = %names,
                unlogged_refusals = unlogged,
                "tls: the client certificate names no configured caller \
                 ([callers.NAME] san_dns, san_uri): calls are refused UNAUTHENTICATED"
            );
        }
        names
    }
}

/// Why a client certificate was refused, in an operator's words (rustls's own text for
/// the rare cases without one).
pub fn certificate_reason(error: &rustls::Error) -> String {
    let rustls::Error::InvalidCertificate(e) = error else {
        return error.to_string();
    };
    match e {
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("it has expired ({e})")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("it is not valid yet ({e})")
        }
        CertificateError::UnknownIssuer => {
            "it is not signed by a CA in tls.client_ca_file".to_owned()
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "its extended key usage does not allow client authentication (clientAuth)".to_owned()
        }
        CertificateError::BadEncoding => "it is not a well-formed X.509 certificate".to_owned(),
        CertificateError::BadSignature => "its signature does not verify".to_owned(),
        CertificateError::Revoked => "it is revoked".to_owned(),
        CertificateError::Other(other)
            if format!("{other:?}").contains("UnsupportedCertVersion") =>
        {
            "it is not an X.509 v3 certificate (a v1 certificate has no extensions: no SAN, \
             no key usage)"
                .to_owned()
        }
        other => other.to_string(),
    }
}

/// A certificate's subject and its subject alternative names (`dns:…`, `uri:…`,
/// `ip:…`), as written in it; `-` for what it lacks or what does not parse.
pub fn describe(der: &CertificateDer<'_>) -> (String, String) {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return ("-".to_owned(), "-".to_owned());
    };
    let subject = cert.subject().to_string();
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => names.push(format!("dns:{d}")),
                GeneralName::URI(u) => names.push(format!("uri:{u}")),
                GeneralName::IPAddress(ip) => names.push(format!("ip:{}", ip_text(ip))),
                GeneralName::RFC822Name(m) => names.push(format!("email:{m}")),
                _ => {}
            }
        }
    }
    let shown = |s: String| if s.is_empty() { "-".to_owned() } else { s };
    (shown(subject), shown(names.join(",")))
}

/// An `iPAddress` SAN (4 or 16 octets, RFC 5280 §4.2.1.6) as an address.
fn ip_text(octets: &[u8]) -> String {
    if let Ok(v4) = <[u8; 4]>::try_from(octets) {
        IpAddr::from(v4).to_string()
    } else if let Ok(v6) = <[u8; 16]>::try_from(octets) {
        IpAddr::from(v6).to_string()
    } else {
        "?".to_owned()
    }
}

/// The client CA's verifier, logging each certificate it refuses through a
/// [`RefusalLog`]. Everything else is the inner verifier's.
#[derive(Debug)]
pub struct LoggingVerifier {
    /// The verifier that decides (webpki against `tls.client_ca_file`).
    pub inner: Arc<dyn ClientCertVerifier>,
    /// Shared with every configuration a reload builds, so a reload does not reset it.
    pub log: Arc<RefusalLog>,
}

impl ClientCertVerifier for LoggingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|e| self.log.certificate_refused(end_entity, e))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_refusal_is_logged_once_per_interval_and_all_of_them_a_bounded_number() {
        let log = RefusalLog::default();
        let key = |i: usize| {
            let mut key = [0; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            key
        };
        let t0 = Instant::now();
        assert_eq!(log.due(key(0), t0), Some(0));
        assert_eq!(log.due(key(0), t0 + REPEAT_AFTER / 2), None, "a repeat is quiet");
        assert_eq!(log.due(key(1), t0), Some(0), "another refusal has its own line");
        // A flood of distinct refusals: the cap, then the count of what it left out.
        let logged = (2..1000).filter(|i| log.due(key(*i), t0).is_some()).count();
        assert_eq!(logged, LINES_PER_INTERVAL as usize - 2);
        let later = t0 + REPEAT_AFTER;
        assert_eq!(log.due(key(5000), later), Some(1000 - LINES_PER_INTERVAL as u64));
        assert_eq!(log.due(key(0), later), Some(0), "a minute on, the first one again");
        for i in 0..(REMEMBERED * 2) {
            log.due(key(i), later + REPEAT_AFTER * (i as u32 + 1));
        }
        assert!(log.lines.lock().unwrap().last.len() <= REMEMBERED);
    }
}
