//! TLS and mutual TLS on the gRPC listener (`[tls]`), with rustls, and the reload of
//! the certificate, key and client CA without a restart.
//!
//! The listener owns its handshakes (see [`super::Incoming`]): each new connection takes
//! the [`ServerConfig`] that is current when it arrives. A reload builds a whole new
//! `ServerConfig` from the files and swaps it in; connections already open keep the
//! session they negotiated, so no call is dropped. (tonic's own `ServerTlsConfig` builds
//! its config once, which is why the handshake is done here with tokio-rustls.)
//!
//! A reload is tried when SIGHUP arrives (`crate::reload`) and whenever the files'
//! contents change (they are read every `tls.reload_interval`). Files that do not make a
//! valid configuration (a half-written certificate, a key that does not match) are
//! refused with an error log, and the previous configuration stays in use.
//!
//! With mutual TLS a caller's identity is judged again on **every call**, against the
//! current time and the current client CA ([`ReloadingTls::judge`]): a certificate that
//! expired since the handshake, or whose CA a reload removed, gets no further call
//! through its open connection. There is no session resumption with mutual TLS (no
//! session cache, no tickets), so no resumed session carries an identity past its
//! certificate either (docs/security.md, "Identity over time").

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::handshakes::{LoggingVerifier, MAX_SUBJECT_CHARS, printable};
use crate::setting::{ConfigError, check};

/// `[tls]`: the listener's certificate and, for mutual TLS, the CA its callers'
/// certificates must chain to.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of the listener, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_file: PathBuf,
    /// PEM CA certificates. When set, every connection must present a client certificate
    /// that chains to one of them and is valid now (mutual TLS); when unset, callers
    /// authenticate with bearer tokens (`[callers.NAME] token_hash_file`).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// How often the files are read to notice a change (SIGHUP reloads at once).
    #[serde(default = "default_reload_interval", with = "humantime_serde")]
    pub reload_interval: Duration,
}

const fn default_reload_interval() -> Duration {
    Duration::from_secs(10)
}

/// Why the TLS files do not make a configuration. Names the file, never its contents.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{setting} {path:?} could not be read")]
    Read {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{setting} {path:?} holds no usable PEM {what}")]
    Pem { setting: &'static str, path: PathBuf, what: &'static str },
    #[error("tls.client_ca_file {path:?} cannot verify client certificates")]
    ClientCa {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    #[error("tls.cert_file and tls.key_file do not make a certificate rustls accepts")]
    Config(#[source] rustls::Error),
    #[error(
        "tls.key_file is not the key of tls.cert_file's certificate (a key written before its \
         certificate, or another certificate's key)"
    )]
    KeyMismatch,
}

impl TlsConfig {
    /// Range-checks `tls.reload_interval`.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming it.
    pub fn validate(&self) -> Result<&Self, ConfigError> {
        check(
            "tls.reload_interval",
            self.reload_interval,
            Duration::from_millis(100)..=Duration::from_secs(86_400),
        )?;
        Ok(self)
    }

    /// Builds the configuration once, so bad files stop
    /// the daemon at start-up instead of at the first connection.
    ///
    /// # Errors
    /// [`TlsError`] naming the file at fault.
    pub fn load(&self) -> Result<Arc<ReloadingTls>, TlsError> {
        let (built, fingerprint) = build(self, 0)?;
        Ok(Arc::new(ReloadingTls {
            files: self.clone(),
            current: RwLock::new(Arc::new(built)),
            fingerprint: RwLock::new(fingerprint),
            generations: AtomicU64::new(0),
        }))
    }
}

/// One built configuration: what connections arriving now are handshaken with, and
/// what calls on every connection are judged by.
pub struct Current {
    /// The rustls configuration of new connections.
    pub config: Arc<ServerConfig>,
    /// The client certificate verifier of `config` (mutual TLS only).
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// Which build this is: 0 at start-up, one more each reload.
    pub generation: u64,
}

/// The listener's TLS configuration, swapped whole on reload.
pub struct ReloadingTls {
    files: TlsConfig,
    current: RwLock<Arc<Current>>,
    /// SHA-256 of the files' contents the current configuration was built from.
    fingerprint: RwLock<[u8; 32]>,
    /// The last generation handed out.
    generations: AtomicU64,
}

/// Why a connection's client certificate no longer names a caller
/// ([`ReloadingTls::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    /// A certificate of its chain is past its `notAfter`.
    #[error("the client certificate has expired")]
    Expired,
    /// The chain does not verify against the current client CA (a reload removed it).
    #[error("the client certificate is no longer trusted")]
    NoLongerTrusted,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls").field("files", &self.files).finish_non_exhaustive()
    }
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The files had not changed.
    Unchanged,
    /// A new configuration is in use for new connections.
    Swapped,
}

impl ReloadingTls {
    /// The configuration a connection arriving now is handshaken with.
    pub fn current(&self) -> Arc<Current> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Judges a connection's client certificate for one call, at `now`: every certificate
    /// of its chain within its validity, and the chain verified by the current client CA.
    /// The verification runs once per configuration (the connection remembers the
    /// generation it was last verified under); the time check runs every call.
    ///
    /// # Errors
    /// [`Untrusted`]: the connection's identity counts for nothing any more.
    pub fn judge(&self, peer: &PeerIdentity, now: SystemTime) -> Result<(), Untrusted> {
        let seconds = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if seconds >= peer.not_after {
            return Err(Untrusted::Expired);
        }
        let current = self.current();
        if peer.verified.load(Ordering::Acquire) == current.generation {
            return Ok(());
        }
        let verifier = current.verifier.as_ref().ok_or(Untrusted::NoLongerTrusted)?;
        let (leaf, intermediates) = peer.chain.split_first().ok_or(Untrusted::NoLongerTrusted)?;
        verifier
            .verify_client_cert(
                leaf,
                intermediates,
                UnixTime::since_unix_epoch(
                    now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
                ),
            )
            .map_err(|_| Untrusted::NoLongerTrusted)?;
        peer.verified.store(current.generation, Ordering::Release);
        Ok(())
    }

    /// Whether connections must present a client certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca_file.is_some()
    }

    /// Reads the files and, when their contents changed (or `force`), swaps in a
    /// configuration built from them.
    ///
    /// # Errors
    /// [`TlsError`] when the files do not make a configuration; the previous one stays.
    pub fn reload(&self, force: bool) -> Result<Reloaded, TlsError> {
        let fingerprint = fingerprint(&self.files)?;
        if !force && fingerprint == *self.fingerprint.read().unwrap_or_else(|e| e.into_inner()) {
            return Ok(Reloaded::Unchanged);
        }
        let generation = self.generations.fetch_add(1, Ordering::AcqRel) + 1;
        let (built, fingerprint) = build(&self.files, generation)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(built);
        *self.fingerprint.write().unwrap_or_else(|e| e.into_inner()) = fingerprint;
        Ok(Reloaded::Swapped)
    }

    /// Reloads on a change of the files' contents, looked at every `tls.reload_interval`,
    /// until `stop` resolves (SIGHUP reloads at once through [`Self::reload_logged`]). A
    /// failed reload is logged (naming the file) once per distinct content, and the
    /// previous configuration stays in use.
    pub async fn watch(self: Arc<Self>, stop: impl Future<Output = ()>) {
        let mut tick = tokio::time::interval(self.files.reload_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = std::pin::pin!(stop);
        let mut last_failure: Option<[u8; 32]> = None;
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => {}
            }
            self.clone().reload_logged(false, &mut last_failure).await;
        }
    }

    /// One reload off the I/O thread (the daemon may serve every connection on one
    /// thread, `server.io_threads`, and the files may sit on a slow mount), logged and
    /// counted. `force` (SIGHUP) rebuilds even unchanged files and always logs a
    /// refusal; otherwise a refusal is logged once per distinct content
    /// (`last_failure`). Returns whether the configuration in use is now the files'.
    pub async fn reload_logged(
        self: Arc<Self>,
        force: bool,
        last_failure: &mut Option<[u8; 32]>,
    ) -> bool {
        let this = self.clone();
        let read = tokio::task::spawn_blocking(move || {
            let outcome = this.reload(force);
            let seen = outcome.is_err().then(|| fingerprint(&this.files).ok()).flatten();
            (outcome, seen)
        })
        .await;
        let Ok((outcome, seen)) = read else {
            tracing::error!("tls: reload failed, the previous certificate stays in use");
            return false;
        };
        match outcome {
            Ok(Reloaded::Swapped) => {
                *last_failure = None;
                tracing::info!("tls: certificate, key and client CA reloaded");
                metrics::counter!(crate::telemetry::metrics::TLS_RELOADS, "outcome" => "ok")
                    .increment(1);
                true
            }
            Ok(Reloaded::Unchanged) => true,
            Err(e) => {
                if force || seen.is_none() || seen != *last_failure {
                    tracing::error!(error = %e, cause = ?std::error::Error::source(&e), "tls: reload refused, the previous certificate stays in use");
                    metrics::counter!(crate::telemetry::metrics::TLS_RELOADS, "outcome" => "refused")
                        .increment(1);
                }
                *last_failure = seen;
                false
            }
        }
    }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { setting, path: path.to_owned(), source })
}

fn fingerprint(files: &TlsConfig) -> Result<[u8; 32], TlsError> {
    let mut digest = Sha256::new();
    for (setting, path) in paths(files) {
        let bytes = read(setting, path)?;
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(&bytes);
    }
    Ok(digest.finalize().into())
}

fn paths(files: &TlsConfig) -> impl Iterator<Item = (&'static str, &Path)> {
    [("tls.cert_file", files.cert_file.as_path()), ("tls.key_file", files.key_file.as_path())]
        .into_iter()
        .chain(files.client_ca_file.as_deref().map(|p| ("tls.client_ca_file", p)))
}

fn certificates(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(setting, path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::Pem { setting, path: path.to_owned(), what: "certificate" })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { setting, path: path.to_owned(), what: "certificate" });
    }
    Ok(certs)
}

/// The ring provider, named explicitly so nothing depends on a process-wide default.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(files: &TlsConfig, generation: u64) -> Result<(Current, [u8; 32]), TlsError> {
    // Fingerprint first: a file replaced between the two reads is read again next time.
    let fingerprint = fingerprint(files)?;
    let chain = certificates("tls.cert_file", &files.cert_file)?;
    let key_pem = zeroize::Zeroizing::new(read("tls.key_file", &files.key_file)?);
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::Pem {
        setting: "tls.key_file",
        path: files.key_file.clone(),
        what: "private key",
    })?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let mut client_verifier: Option<Arc<dyn ClientCertVerifier>> = None;
    let builder = match &files.client_ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates("tls.client_ca_file", path)? {
                roots.add(ca).map_err(|_| TlsError::Pem {
                    setting: "tls.client_ca_file",
                    path: path.clone(),
                    what: "CA certificate",
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|source| TlsError::ClientCa { path: path.clone(), source })?;
            client_verifier = Some(verifier.clone());
            builder.with_client_cert_verifier(Arc::new(LoggingVerifier { inner: verifier }))
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch,
        e => TlsError::Config(e),
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    if client_verifier.is_some() {
        // No resumption with mutual TLS: a resumed session would carry the identity of
        // its first handshake without verifying the certificate again.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok((Current { config: Arc::new(config), verifier: client_verifier, generation }, fingerprint))
}

/// What a connection's verified client certificate says: its subject alternative names
/// of the DNS (lower-cased) and URI kinds, which authorization (`crate::auth`) matches
/// callers by, and what [`ReloadingTls::judge`] needs to judge it again on every call.
#[derive(Debug, Default)]
pub struct PeerIdentity {
    /// `dNSName` entries, lower-cased (DNS names compare without case, RFC 4343).
    pub dns: Vec<String>,
    /// `uniformResourceIdentifier` entries (SPIFFE IDs, for example), as written.
    pub uri: Vec<String>,
    /// The leaf's subject, for log lines only ([`printable`], bounded): callers are
    /// matched by SAN, never by subject.
    pub subject: String,
    /// The chain the client presented, leaf first, for a verification after a reload.
    chain: Vec<CertificateDer<'static>>,
    /// The earliest `notAfter` of the chain, in seconds since the Unix epoch: from then
    /// on the identity is expired.
    not_after: u64,
    /// The configuration generation the chain was last verified under.
    verified: AtomicU64,
}

impl PeerIdentity {
    /// The identity of a chain the handshake of configuration `generation` verified. An
    /// unparsable certificate names nobody and is expired (it passed the verifier, so
    /// this does not happen in practice: fail closed anyway).
    pub fn from_chain(chain: &[CertificateDer<'_>], generation: u64) -> Self {
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let mut identity = PeerIdentity {
            chain: chain.iter().map(|c| c.clone().into_owned()).collect(),
            verified: AtomicU64::new(generation),
            ..PeerIdentity::default()
        };
        let mut not_after = u64::MAX;
        for (i, der) in chain.iter().enumerate() {
            let Ok((_, cert)) = X509Certificate::from_der(der) else {
                return PeerIdentity::default();
            };
            let expires = u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0);
            not_after = not_after.min(expires);
            if i > 0 {
                continue;
            }
            identity.subject = printable(&cert.subject().to_string(), MAX_SUBJECT_CHARS);
            if let Ok(Some(san)) = cert.subject_alternative_name() {
                for name in &san.value.general_names {
                    match name {
                        GeneralName::DNSName(d) => identity.dns.push(d.to_ascii_lowercase()),
                        GeneralName::URI(u) => identity.uri.push((*u).to_owned()),
                        _ => {}
                    }
                }
            }
        }
        identity.not_after = if chain.is_empty() { 0 } else { not_after };
        identity
    }
}
