//! Validated Redis settings: which shape (one URL, a cluster, a Sentinel-watched master),
//! the credentials shared by every shape, the eviction override and the replication
//! requirement, the TLS trust and identity for `rediss://`. Built by `config.rs` from
//! `[store]`; every URL and password is redacted in `Debug`, and no certificate or key
//! appears there, so logging a whole `Settings` leaks no credential.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::{ClientTlsConfig, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use zeroize::Zeroizing;

/// Where the Redis store lives: exactly one of `store.redis_url`,
/// `store.redis_cluster_nodes`, `store.redis_sentinel`.
#[derive(Clone)]
pub enum RedisShape {
    /// `store.redis_url`: one Redis (or a proxy in front of one).
    Standalone {
        /// `redis://` or `rediss://` URL.
        url: String,
    },
    /// `store.redis_cluster_nodes`: a Redis Cluster, found from any of these nodes; the
    /// library follows MOVED/ASK and refreshes the slot map.
    Cluster {
        /// Seed node URLs.
        nodes: Vec<String>,
    },
    /// `store.redis_sentinel`: the master Sentinel names `master_name`, asked of `nodes`
    /// (the Sentinels, usually port 26379) on every new connection.
    Sentinel {
        /// The monitored master's name (`sentinel monitor <name> …`).
        master_name: String,
        /// Sentinel URLs.
        nodes: Vec<String>,
    },
}

/// An ACL user and password for the data nodes (Redis 6 `AUTH user password`), applied to
/// every URL of the shape; a URL's own credentials win. Read from `store.redis_username`
/// and `store.redis_password_file` or `PORTCULLIS_REDIS_PASSWORD`.
#[derive(Clone, Default)]
pub struct Credentials {
    /// ACL user name (`default` when unset and a password is given).
    pub username: Option<String>,
    /// The password; never logged.
    pub password: Option<String>,
}

/// Trust and identity of `rediss://` connections, for every shape (the data nodes and,
/// with Sentinel, the Sentinels too). Unset: the system's root certificates and no
/// client certificate. Read from `store.redis_tls_ca_file`, `store.redis_tls_cert_file`
/// and `store.redis_tls_key_file` at start-up ([`RedisTls::load`]).
#[derive(Clone, Default)]
pub struct RedisTls {
    /// PEM CA certificates trusted instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to Redis (mutual TLS).
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain and its key, PEM; the key is wiped when dropped.
#[derive(Clone)]
pub struct ClientIdentity {
    /// Certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Arc<Zeroizing<Vec<u8>>>,
}

/// Why the Redis TLS files are unusable: the setting at fault and the problem (the
/// path, never the contents).
#[derive(Debug)]
pub struct TlsFileError {
    /// `store.redis_tls_*`.
    pub setting: &'static str,
    /// What is wrong.
    pub problem: String,
}

impl RedisTls {
    /// Reads and checks the files: the CA file must hold at least one certificate, the
    /// certificate and key files come both or neither, and must make an identity rustls
    /// accepts (a key that parses and matches the leaf). Checked here so a bad file stops
    /// the daemon at start-up, not at the first connection.
    ///
    /// # Errors
    /// [`TlsFileError`] naming the setting.
    pub fn load(
        ca_file: Option<&Path>,
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
    ) -> Result<Self, TlsFileError> {
        let err = |setting, problem: String| TlsFileError { setting, problem };
        let read = |setting, path: &Path| {
            std::fs::read(path)
                .map_err(|e| err(setting, format!("{} could not be read: {e}", path.display())))
        };
        let certs = |setting, path: &Path, pem: &[u8]| {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_default();
            if certs.is_empty() {
                return Err(err(
                    setting,
                    format!("{} holds no usable PEM certificate", path.display()),
                ));
            }
            Ok(certs)
        };
        let mut roots = rustls::RootCertStore::empty();
        let ca_pem = match ca_file {
            Some(path) => {
                let pem = read("store.redis_tls_ca_file", path)?;
                for ca in certs("store.redis_tls_ca_file", path, &pem)? {
                    roots.add(ca).map_err(|e| {
                        err(
                            "store.redis_tls_ca_file",
                            format!("{} holds an unusable CA certificate: {e}", path.display()),
                        )
                    })?;
                }
                Some(pem)
            }
            None => None,
        };
        let client = match (cert_file, key_file) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "store.redis_tls_key_file",
                    "is required with store.redis_tls_cert_file".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(err(
                    "store.redis_tls_cert_file",
                    "is required with store.redis_tls_key_file".into(),
                ));
            }
            (Some(cert_path), Some(key_path)) => {
                let cert_pem = read("store.redis_tls_cert_file", cert_path)?;
                let chain = certs("store.redis_tls_cert_file", cert_path, &cert_pem)?;
                let key_pem = Zeroizing::new(read("store.redis_tls_key_file", key_path)?);
                let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
                    err(
                        "store.redis_tls_key_file",
                        format!("{} holds no usable PEM private key", key_path.display()),
                    )
                })?;
                // The same check redis-rs makes when it connects, made now.
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .and_then(|b| b.with_root_certificates(roots).with_client_auth_cert(chain, key))
                .map_err(|e| {
                    err(
                        "store.redis_tls_key_file",
                        format!(
                            "{} and store.redis_tls_cert_file do not make a client \
                             certificate rustls accepts: {e}",
                            key_path.display()
                        ),
                    )
                })?;
                Some(ClientIdentity { cert_pem, key_pem: Arc::new(key_pem) })
            }
        };
        Ok(Self { ca_pem, client })
    }

    /// Whether anything is configured (then every URL must be `rediss://`).
    pub fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.client.is_some()
    }

    /// The certificates for redis-rs, or `None` to use its defaults (the system's
    /// roots, no client certificate).
    pub(super) fn certificates(&self) -> Option<TlsCertificates> {
        self.is_set().then(|| TlsCertificates {
            client_tls: self.client.as_ref().map(|c| ClientTlsConfig {
                client_cert: c.cert_pem.clone(),
                client_key: c.key_pem.as_ref().to_vec(),
            }),
            root_cert: self.ca_pem.clone(),
        })
    }
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &if self.ca_pem.is_some() { "from file" } else { "system roots" })
            .field("client_certificate", &self.client.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity(<redacted>)")
    }
}

/// Everything the Redis store needs.
#[derive(Clone)]
pub struct RedisSettings {
    /// Which Redis.
    pub shape: RedisShape,
    /// Credentials for the data nodes.
    pub credentials: Credentials,
    /// CA and client certificate of `rediss://` connections.
    pub tls: RedisTls,
    /// Deadline of one operation (checkout or connect, script, reply, `WAIT`).
    pub operation_timeout: Duration,
    /// Most multiplexed connections per pool.
    pub pool_size: usize,
    /// Serve although `maxmemory-policy` may evict keys (a lockout record among them).
    pub allow_eviction: bool,
    /// Replicas that must confirm a counted attempt (`WAIT N`) before it is answered; 0:
    /// answer on the master's acknowledgement.
    pub wait_replicas: u32,
    /// Longest wait for those confirmations, below `operation_timeout`.
    pub wait_timeout: Duration,
    /// How long an attempt id's answer is kept (`store.attempt_id_horizon`).
    pub attempt_id_horizon: Duration,
    /// How long a daemon that finds no key check value before it ever proved its own
    /// waits for the fleet to write it back (`store.key_check_claim_wait`).
    pub key_check_claim_wait: Duration,
}

impl RedisSettings {
    /// Settings for one Redis at `url` with the defaults for everything else (benches
    /// and tests build stores this way).
    pub fn standalone(url: &str, operation_timeout: Duration, pool_size: usize) -> Self {
        Self {
            shape: RedisShape::Standalone { url: url.to_owned() },
            credentials: Credentials::default(),
            tls: RedisTls::default(),
            operation_timeout,
            pool_size,
            allow_eviction: false,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
            attempt_id_horizon: crate::store::DEFAULT_ATTEMPT_ID_HORIZON,
            // Benches and tests open stores nothing else serves: claim at once.
            key_check_claim_wait: Duration::ZERO,
        }
    }
}

/// `url` with its credentials applied: the URL's own user or password win.
pub(super) fn connection_info(
    url: &str,
    credentials: &Credentials,
) -> redis::RedisResult<ConnectionInfo> {
    let info = url.into_connection_info()?;
    let mut redis = info.redis_settings().clone();
    if redis.username().is_none()
        && let Some(user) = &credentials.username
    {
        redis = redis.set_username(user);
    }
    if redis.password().is_none()
        && let Some(password) = &credentials.password
    {
        redis = redis.set_password(password);
    }
    Ok(info.set_redis_settings(redis))
}

/// The one user and password the Sentinel URLs carry (redis-rs applies one pair to
/// every Sentinel).
///
/// # Errors
/// A URL redis-rs cannot parse, or URLs whose credentials differ.
pub fn sentinel_credentials(
    nodes: &[String],
) -> redis::RedisResult<(Option<String>, Option<String>)> {
    let mut pairs = nodes.iter().map(|url| {
        let info = url.as_str().into_connection_info()?;
        let redis = info.redis_settings();
        Ok::<_, redis::RedisError>((
            redis.username().map(str::to_owned),
            redis.password().map(str::to_owned),
        ))
    });
    let first = pairs.next().transpose()?.unwrap_or_default();
    for pair in pairs {
        if pair? != first {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "every Sentinel URL must carry the same user and password",
            )));
        }
    }
    Ok(first)
}

/// `url` with any password replaced by `***`, for logs and `Debug`. Everything before
/// the last `@` is taken for user information, whatever an operator left unencoded in
/// it (`/`, `?`, `#`, `@`), and only the user name before its first `:` is shown; a query
/// or fragment (which may carry `?password=`) is dropped. When what stands before the
/// last `@` holds a query parameter (`?pass=ab@cd`: the `@` is the password's, and what
/// follows it too), nothing after the scheme is shown. A URL mangled this way may lose
/// more than its password, never less.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<not a URL>".into();
    };
    let (userinfo, location) = match rest.rsplit_once('@') {
        Some((userinfo, location)) => (Some(userinfo), location),
        None => (None, rest),
    };
    if userinfo.is_some_and(|u| u.split_once(['?', '#']).is_some_and(|(_, q)| q.contains('='))) {
        return format!("{scheme}://<redacted>");
    }
    let location = location.split(['?', '#']).next().unwrap_or_default();
    let userinfo = match userinfo {
        None => String::new(),
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@"),
            None if !userinfo.is_empty() => "***@".into(),
            None => "@".into(),
        },
    };
    format!("{scheme}://{userinfo}{location}")
}

/// `url` without its user information (user name and password) nor query, for the
/// messages an operator reads: `redis://host:port/db`.
pub fn url_without_credentials(url: &str) -> String {
    let redacted = redact_url(url);
    match redacted.split_once("://") {
        Some((scheme, rest)) => {
            let location = rest.rsplit_once('@').map_or(rest, |(_, location)| location);
            format!("{scheme}://{location}")
        }
        None => redacted,
    }
}

impl RedisShape {
    /// Where this store is, for an operator: its setting and its URLs, without user
    /// names or passwords.
    pub fn describe(&self) -> String {
        let urls = |nodes: &[String]| {
            nodes.iter().map(|n| url_without_credentials(n)).collect::<Vec<_>>().join(", ")
        };
        match self {
            RedisShape::Standalone { url } => {
                format!("Redis at {} (store.redis_url)", url_without_credentials(url))
            }
            RedisShape::Cluster { nodes } => {
                format!("Redis Cluster at {} (store.redis_cluster_nodes)", urls(nodes))
            }
            RedisShape::Sentinel { master_name, nodes } => format!(
                "Redis master {master_name:?} via the Sentinels at {} (store.redis_sentinel)",
                urls(nodes)
            ),
        }
    }
}

impl std::fmt::Debug for RedisShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |nodes: &[String]| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>();
        match self {
            RedisShape::Standalone { url } => {
                f.debug_struct("Standalone").field("url", &redact_url(url)).finish()
            }
            RedisShape::Cluster { nodes } => {
                f.debug_struct("Cluster").field("nodes", &urls(nodes)).finish()
            }
            RedisShape::Sentinel { master_name, nodes } => f
                .debug_struct("Sentinel")
                .field("master_name", master_name)
                .field("nodes", &urls(nodes))
                .finish(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("shape", &self.shape)
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .field("operation_timeout", &self.operation_timeout)
            .field("pool_size", &self.pool_size)
            .field("allow_eviction", &self.allow_eviction)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("key_check_claim_wait", &self.key_check_claim_wait)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:1/2?password=pw"), "redis://h:1/2");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        let c = Credentials { username: Some("app".into()), password: Some("hunter2".into()) };
        let shape = RedisShape::Sentinel {
            master_name: "m".into(),
            nodes: vec!["redis://:sentinelpw@h:26379".into()],
        };
        let text = format!("{c:?} {shape:?}");
        assert!(!text.contains("hunter2") && !text.contains("sentinelpw"), "{text}");
    }

    #[test]
    fn careless_urls_lose_their_passwords_too() {
        // A query without a path, a fragment, and passwords an operator did not
        // percent-encode ('/', '?', '#', '@'): none is shown, whatever redis-rs makes of it.
        for (url, secret) in [
            ("redis://h:1?password=qsecret", "qsecret"),
            ("rediss://h:1#password=fsecret", "fsecret"),
            ("redis://:sla/shsecret@h:1/0", "shsecret"),
            ("redis://:sla/shsecret@h:1", "sla"),
            ("redis://u:qu?estion@h:1/0", "estion"),
            ("redis://u:ha#shsecret@h:1/0", "shsecret"),
            ("redis://u:a@tsecret@h:1/0", "tsecret"),
            ("redis://:sla/sh@h:1/0?password=qsecret", "qsecret"),
            ("redis+unix:///s.sock?pass=ab@cdsecret", "cdsecret"),
            ("redis://h:1/0?password=x@ysecret", "ysecret"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} shown as {shown}");
        }
        assert_eq!(redact_url("redis://u:sla/sh@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact_url("redis://h:1?password=pw"), "redis://h:1");
        assert_eq!(redact_url("rediss://h:1/#insecure"), "rediss://h:1/");
    }

    #[test]
    fn rediss_means_verified_tls() {
        let info = connection_info("rediss://h:1", &Credentials::default()).unwrap();
        assert!(
            matches!(info.addr(), redis::ConnectionAddr::TcpTls { insecure: false, .. }),
            "{:?}",
            info.addr()
        );
    }

    #[test]
    fn tls_settings_check_their_files_and_show_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = RedisTls::load(Some(&missing), None, None).unwrap_err();
        assert_eq!(e.setting, "store.redis_tls_ca_file");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = RedisTls::load(Some(&junk), None, None).unwrap_err();
        assert_eq!(e.setting, "store.redis_tls_ca_file");
        assert!(e.problem.contains("no usable PEM certificate"), "{}", e.problem);
        let e = RedisTls::load(None, Some(&junk), None).unwrap_err();
        assert_eq!(e.setting, "store.redis_tls_key_file");
        let e = RedisTls::load(None, None, Some(&junk)).unwrap_err();
        assert_eq!(e.setting, "store.redis_tls_cert_file");
        let tls = RedisTls {
            ca_pem: Some(b"CA-PEM-BYTES".to_vec()),
            client: Some(ClientIdentity {
                cert_pem: b"CERT-PEM-BYTES".to_vec(),
                key_pem: Arc::new(Zeroizing::new(b"KEY-PEM-BYTES".to_vec())),
            }),
        };
        let text = format!("{tls:?} {:?}", tls.certificates());
        assert!(!text.contains("PEM-BYTES") && !text.contains("80, 69, 77"), "{text}");
    }

    #[test]
    fn credentials_apply_unless_the_url_has_its_own() {
        let c = Credentials { username: Some("app".into()), password: Some("pw".into()) };
        let info = connection_info("redis://h:1", &c).unwrap();
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        let info = connection_info("redis://own:ownpw@h:1", &c).unwrap();
        assert_eq!(info.redis_settings().username(), Some("own"));
        assert_eq!(info.redis_settings().password(), Some("ownpw"));
    }
}
