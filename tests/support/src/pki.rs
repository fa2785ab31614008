//! Test certificates made at test time with rcgen: no private key is ever committed.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, in PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf valid now, naming `dns` and `uri` as subject alternative names.
    pub fn leaf(&self, dns: &[&str], uri: &[&str]) -> Leaf {
        self.leaf_valid(dns, uri, None)
    }

    /// A leaf valid since an hour ago that expires `seconds` from now.
    pub fn leaf_expiring_in(&self, dns: &[&str], seconds: i64) -> Leaf {
        let now = time::OffsetDateTime::now_utc();
        self.leaf_valid(
            dns,
            &[],
            Some((now - time::Duration::hours(1), now + time::Duration::seconds(seconds))),
        )
    }

    /// A leaf that expired yesterday.
    pub fn expired_leaf(&self, dns: &[&str]) -> Leaf {
        let now = time::OffsetDateTime::now_utc();
        self.leaf_valid(
            dns,
            &[],
            Some((now - time::Duration::days(30), now - time::Duration::days(1))),
        )
    }

    fn leaf_valid(
        &self,
        dns: &[&str],
        uri: &[&str],
        validity: Option<(time::OffsetDateTime, time::OffsetDateTime)>,
    ) -> Leaf {
        let mut params =
            CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>()).unwrap();
        for u in uri {
            params.subject_alt_names.push(SanType::URI((*u).try_into().unwrap()));
        }
        params.distinguished_name.push(DnType::CommonName, dns.first().copied().unwrap_or("leaf"));
        if let Some((from, to)) = validity {
            params.not_before = from;
            params.not_after = to;
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }
}

/// Writes `text` to `dir/name` atomically (a rename), as an operator's tooling would.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// A daemon's `[tls]` section over files in `dir`: its certificate for `localhost`
/// from `ca`, and `client_ca` (PEM) for mutual TLS when given.
pub fn server_tls(dir: &Path, ca: &Ca, client_ca: Option<&str>, extra: &str) -> String {
    let leaf = ca.leaf(&["localhost"], &[]);
    let cert = write(dir, "server.pem", &leaf.cert_pem);
    let key = write(dir, "server.key", &leaf.key_pem);
    let mut toml = format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n{extra}\n", cert, key);
    if let Some(client_ca) = client_ca {
        let path = write(dir, "client-ca.pem", client_ca);
        toml.push_str(&format!("client_ca_file = {:?}\n", path));
    }
    toml
}

/// A client configuration for `https://localhost:PORT` trusting `ca_pem`, with an
/// optional client certificate.
pub fn client_tls(ca_pem: &str, identity: Option<&Leaf>) -> tonic::transport::ClientTlsConfig {
    let mut config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        config =
            config.identity(tonic::transport::Identity::from_pem(&leaf.cert_pem, &leaf.key_pem));
    }
    config
}
