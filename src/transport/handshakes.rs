//! What the listener says about the TLS handshakes it refuses (docs/tls.md, "When a
//! handshake is refused"): one warning per refused client certificate, naming the reason
//! and the certificate's subject and subject alternative names, so the operator of a
//! misconfigured gateway finds the certificate at fault from the daemon's log alone.
//!
//! The client learns only the TLS alert (RFC 8446 §6.2: `certificate_expired`,
//! `unknown_ca`, `unsupported_certificate`, …); the line here is the whole story. Lines
//! are rate-limited per (kind of refusal, certificate): a gateway that reconnects in a
//! loop with a bad certificate writes one line per [`REPEAT_AFTER`], not one per attempt;
//! and all of them together, for the process ([`refusal_log`]), by a token bucket of
//! [`LINES_PER_INTERVAL`] a minute. Every refusal is still counted in
//! `portcullis_auth_refusals_total{code="tls_handshake"}`.
//!
//! A certificate's subject and names are not secrets (the gateway shows them to every
//! server it connects to), but they are the peer's own text, logged before the peer has
//! proved anything: control characters are escaped (no forged line, no terminal escape)
//! and the text is cut to a bound ([`MAX_SUBJECT_CHARS`], [`MAX_NAMES`]). Nothing of a
//! key, a token or a password is ever in these lines.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex};
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

/// Refusal lines of all kinds together per [`REPEAT_AFTER`], a token bucket of this many
/// refilled evenly over the interval: a peer that makes up a new certificate for every
/// connection gets this many lines a minute, no more; the next line says how many
/// refusals went unlogged in between (all are counted in the metric).
pub const LINES_PER_INTERVAL: u32 = 20;

/// The subject is cut to this many characters in a line.
pub const MAX_SUBJECT_CHARS: usize = 256;
/// Subject alternative names shown in a line (then `(+N more)`), each cut to
/// [`MAX_SUBJECT_CHARS`] / 2.
pub const MAX_NAMES: usize = 8;

/// The refusal log of the process: the listener's and the caller table's lines share one
/// budget, and a reload (of the TLS files or the callers) keeps it.
pub fn refusal_log() -> &'static RefusalLog {
    static LOG: LazyLock<RefusalLog> = LazyLock::new(RefusalLog::default);
    &LOG
}

/// The rate limit of the refusal lines.
#[derive(Debug, Default)]
pub struct RefusalLog {
    lines: Mutex<Lines>,
}

#[derive(Debug, Default)]
struct Lines {
    /// When each recent refusal was last logged.
    last: HashMap<[u8; 32], Instant>,
    /// The token bucket of lines: tokens spent and when it was last refilled (`None`:
    /// full).
    bucket: Option<(f64, Instant)>,
    /// Refusals left unlogged by the bucket since the last line.
    unlogged: u64,
}

impl RefusalLog {
    /// Whether a line for `key` is due now: `Some(n)` with the refusals the bucket left
    /// unlogged before it (and the line is noted as written), `None` for a repeat within
    /// [`REPEAT_AFTER`] or with the bucket empty.
    fn due(&self, key: [u8; 32], now: Instant) -> Option<u64> {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let lines = &mut *lines;
        if lines.last.get(&key).is_some_and(|at| now.duration_since(*at) < REPEAT_AFTER) {
            return None;
        }
        let capacity = f64::from(LINES_PER_INTERVAL);
        let per_second = capacity / REPEAT_AFTER.as_secs_f64();
        let spent = lines.bucket.map_or(0.0, |(spent, at)| {
            (spent - now.saturating_duration_since(at).as_secs_f64() * per_second).max(0.0)
        });
        if spent + 1.0 > capacity {
            lines.bucket = Some((spent, now));
            lines.unlogged += 1;
            return None;
        }
        lines.bucket = Some((spent + 1.0, now));
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
        let (kind, reason) = certificate_reason(error);
        let mut key = Sha256::new();
        key.update(kind.as_bytes());
        key.update(leaf.as_ref());
        let Some(unlogged) = self.due(key.finalize().into(), Instant::now()) else {
            return;
        };
        let (subject, names) = describe(leaf);
        tracing::warn!(
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
            Some(rustls::Error::AlertReceived(alert)) => format!(
                "the client refused the daemon's certificate (alert {alert:?}): it does not \
                 trust the CA that signed tls.cert_file, or the certificate does not name the \
                 host the client dialled"
            ),
            Some(rustls::Error::InvalidMessage(_)) => {
                "not TLS (plaintext to a TLS listener? the client must use https://)".to_owned()
            }
            Some(e) => e.to_string(),
            // A TCP probe (a load balancer's, a port scan) connects and closes: no
            // handshake to speak of.
            None if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!(peer = %peer, "tls: connection closed before a handshake");
                return;
            }
            None => format!("not a TLS handshake ({error})"),
        };
        let mut key = Sha256::new();
        key.update(reason.as_bytes());
        key.update(peer.to_string().as_bytes());
        let Some(unlogged) = self.due(key.finalize().into(), Instant::now()) else {
            return;
        };
        tracing::warn!(peer = %peer, unlogged_refusals = unlogged, "tls: handshake refused: {reason}");
    }
}

impl RefusalLog {
    /// Logs a verified client certificate whose names (its `dns` and `uri` SANs) belong
    /// to no configured caller, with its `subject` (already [`printable`]), once per set
    /// of names within [`REPEAT_AFTER`]; returns those names as the line shows them
    /// (`dns:…,uri:…`, or `no DNS or URI SAN`).
    pub fn no_caller(&self, subject: &str, dns: &[String], uri: &[String]) -> String {
        let names: Vec<String> = (dns.iter().map(|d| format!("dns:{d}")))
            .chain(uri.iter().map(|u| format!("uri:{u}")))
            .collect();
        let names =
            if names.is_empty() { "no DNS or URI SAN".to_owned() } else { shown_names(&names) };
        let key: [u8; 32] = Sha256::digest(format!("no caller {subject} {names}")).into();
        if let Some(unlogged) = self.due(key, Instant::now()) {
            tracing::warn!(
                subject = %subject,
                san = %names,
                unlogged_refusals = unlogged,
                "tls: the client certificate names no configured caller \
                 ([callers.NAME] san_dns, san_uri): calls are refused UNAUTHENTICATED"
            );
        }
        names
    }
}

impl RefusalLog {
    /// Logs a call refused on an authenticated connection: `what` (a fixed phrase: the
    /// refusal) for `who` (a configured caller's name, or a certificate's [`printable`]
    /// subject), once per both within [`REPEAT_AFTER`].
    pub fn call_refused(&self, what: &str, who: &str) {
        let key: [u8; 32] = Sha256::digest(format!("call {what} {who}")).into();
        if let Some(unlogged) = self.due(key, Instant::now()) {
            tracing::warn!(who = %who, unlogged_refusals = unlogged, "auth: call refused: {what}");
        }
    }
}

/// `text` with every control character escaped (`\n` as `\u{a}`), cut to `max`
/// characters (then `…`): the peer's own text, safe in a line of the text log.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// At most [`MAX_NAMES`] names, each [`printable`], comma-separated, then `(+N more)`.
fn shown_names(names: &[String]) -> String {
    let mut shown: Vec<String> =
        names.iter().take(MAX_NAMES).map(|n| printable(n, MAX_SUBJECT_CHARS / 2)).collect();
    if names.len() > MAX_NAMES {
        shown.push(format!("(+{} more)", names.len() - MAX_NAMES));
    }
    shown.join(",")
}

/// Why a client certificate was refused: the kind of refusal (stable, for the rate
/// limit: rustls's text of an expired certificate carries the time of the check) and the
/// operator's words for it (rustls's own text for the rare cases without any).
pub fn certificate_reason(error: &rustls::Error) -> (&'static str, String) {
    let rustls::Error::InvalidCertificate(e) = error else {
        return ("other", error.to_string());
    };
    match e {
        CertificateError::ExpiredContext { time, not_after } => {
            ("expired", format!("it expired at {} (now {})", utc(*not_after), utc(*time)))
        }
        CertificateError::Expired => ("expired", "it has expired".to_owned()),
        CertificateError::NotValidYetContext { time, not_before } => (
            "not_yet_valid",
            format!("it is not valid before {} (now {})", utc(*not_before), utc(*time)),
        ),
        CertificateError::NotValidYet => ("not_yet_valid", "it is not valid yet".to_owned()),
        CertificateError::UnknownIssuer => {
            ("unknown_issuer", "it is not signed by a CA in tls.client_ca_file".to_owned())
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => (
            "purpose",
            "its extended key usage does not allow client authentication (clientAuth)".to_owned(),
        ),
        CertificateError::BadEncoding => {
            ("encoding", "it is not a well-formed X.509 certificate".to_owned())
        }
        CertificateError::BadSignature => ("signature", "its signature does not verify".to_owned()),
        CertificateError::Revoked => ("revoked", "it is revoked".to_owned()),
        CertificateError::Other(other)
            if format!("{other:?}").contains("UnsupportedCertVersion") =>
        {
            (
                "version",
                "it is not an X.509 v3 certificate (a v1 certificate has no extensions: no \
                 SAN, no key usage)"
                    .to_owned(),
            )
        }
        other => ("other_certificate", other.to_string()),
    }
}

/// A certificate time as RFC 3339 in UTC, to the second.
fn utc(time: UnixTime) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(time.as_secs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A certificate's subject and its subject alternative names (`dns:…`, `uri:…`,
/// `ip:…`, `email:…`), [`printable`] and bounded; `-` for what it lacks or what does not
/// parse.
pub fn describe(der: &CertificateDer<'_>) -> (String, String) {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return ("-".to_owned(), "-".to_owned());
    };
    let subject = printable(&cert.subject().to_string(), MAX_SUBJECT_CHARS);
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
    (shown(subject), shown(shown_names(&names)))
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

/// The client CA's verifier, logging each certificate it refuses through the process's
/// [`refusal_log`]. Everything else is the inner verifier's.
#[derive(Debug)]
pub struct LoggingVerifier {
    /// The verifier that decides (webpki against `tls.client_ca_file`).
    pub inner: Arc<dyn ClientCertVerifier>,
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
            .inspect_err(|e| refusal_log().certificate_refused(end_entity, e))
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

    fn key(i: usize) -> [u8; 32] {
        let mut key = [0; 32];
        key[..8].copy_from_slice(&(i as u64).to_le_bytes());
        key
    }

    #[test]
    fn the_same_refusal_is_logged_once_per_interval_and_all_of_them_a_bounded_number() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.due(key(0), t0), Some(0));
        assert_eq!(log.due(key(0), t0 + REPEAT_AFTER / 2), None, "a repeat is quiet");
        assert_eq!(log.due(key(1), t0), Some(0), "another refusal has its own line");
        // A flood of distinct refusals: the bucket, then the count of what it left out.
        let logged = (2..1000).filter(|i| log.due(key(*i), t0).is_some()).count();
        assert_eq!(logged, LINES_PER_INTERVAL as usize - 2);
        // The bucket refills evenly: one line per interval / LINES_PER_INTERVAL.
        let one = REPEAT_AFTER / LINES_PER_INTERVAL;
        assert_eq!(log.due(key(5000), t0 + one / 2), None);
        assert_eq!(log.due(key(5001), t0 + one), Some(1000 - LINES_PER_INTERVAL as u64 + 1));
        assert_eq!(log.due(key(5002), t0 + one), None, "one token, one line");
        let later = t0 + REPEAT_AFTER * 2;
        assert_eq!(log.due(key(0), later), Some(1), "a full bucket, the first one again");
        for i in 0..(REMEMBERED * 2) {
            log.due(key(i), later + REPEAT_AFTER * (i as u32 + 1));
        }
        assert!(log.lines.lock().unwrap().last.len() <= REMEMBERED);
    }

    #[test]
    fn no_window_edge_lets_a_burst_past_the_bucket() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        let mut logged = 0;
        // Two bursts a moment apart, around where a fixed window would have restarted.
        for (i, at) in
            [t0 + REPEAT_AFTER - REPEAT_AFTER / 100, t0 + REPEAT_AFTER].iter().enumerate()
        {
            logged += (0..100).filter(|n| log.due(key(i * 1000 + n), *at).is_some()).count();
        }
        assert!(logged <= LINES_PER_INTERVAL as usize + 1, "{logged} lines in a burst");
    }

    #[test]
    fn an_expired_certificate_is_one_refusal_whatever_the_time_of_the_check() {
        let at = |secs: u64| {
            rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(Duration::from_secs(secs)),
                not_after: UnixTime::since_unix_epoch(Duration::from_secs(100)),
            })
        };
        let (kind, first) = certificate_reason(&at(1_000));
        let (same, second) = certificate_reason(&at(1_001));
        assert_eq!(kind, same);
        assert_eq!(first, "it expired at 1970-01-01T00:01:40Z (now 1970-01-01T00:16:40Z)");
        assert_ne!(first, second, "the words still give the time");
        let log = RefusalLog::default();
        let leaf = CertificateDer::from(vec![1, 2, 3]);
        log.certificate_refused(&leaf, &at(1_000));
        log.certificate_refused(&leaf, &at(1_001));
        assert_eq!(log.lines.lock().unwrap().last.len(), 1, "one key for both");
    }

    #[test]
    fn a_peers_text_cannot_forge_a_line_or_fill_one() {
        let forged = "x\n2026-12-04T03:21:25Z  INFO portcullis::rpc::admin: unlock\u{1b}[2J\r";
        let shown = printable(forged, MAX_SUBJECT_CHARS);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("\\u{a}") && shown.contains("\\u{1b}"), "{shown:?}");
        assert_eq!(printable(&"a".repeat(10_000), 10).chars().count(), 11);
        let many: Vec<String> =
            (0..3_300).map(|i| format!("dns:{}", "n".repeat(i % 500))).collect();
        let line = shown_names(&many);
        assert!(line.len() < 2_000 && line.ends_with("(+3292 more)"), "{}", line.len());
        let names = refusal_log().no_caller("CN=x", &[forged.to_owned()], &[]);
        assert!(!names.chars().any(char::is_control));
    }
}
