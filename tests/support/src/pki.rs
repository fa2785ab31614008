//! Test certificates made at test time with rcgen: no private key is ever committed.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};

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

    /// A leaf valid now whose extended key usage is `serverAuth` only: no client may
    /// authenticate with it.
    pub fn server_only_leaf(&self, dns: &[&str]) -> Leaf {
        self.leaf_with(dns, &[], None, vec![ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// An X.509 **v1** leaf (no extensions: no SAN, no key usage) for `common_name`,
    /// signed by this CA with `openssl x509 -req` (rcgen writes v3 only). Panics when
    /// the installed OpenSSL writes another version.
    pub fn v1_leaf(&self, common_name: &str) -> Leaf {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        let ca_cert = write(dir.path(), "ca.pem", &self.pem());
        let ca_key = write(dir.path(), "ca.key", &self.issuer.key().serialize_pem());
        let (key, csr, cert) =
            (dir.path().join("v1.key"), dir.path().join("v1.csr"), dir.path().join("v1.pem"));
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).output().expect("openssl must exist");
            assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let path = |p: &Path| p.display().to_string();
        let subject = format!("/CN={common_name}");
        run(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &subject,
            "-keyout",
            &path(&key),
            "-out",
            &path(&csr),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &path(&csr),
            "-CA",
            &path(&ca_cert),
            "-CAkey",
            &path(&ca_key),
            "-set_serial",
            "7",
            "-days",
            "1",
            "-out",
            &path(&cert),
        ]);
        let text = run(&["x509", "-noout", "-text", "-in", &path(&cert)]);
        assert!(text.contains("Version: 1 (0x0)"), "openssl wrote no v1 certificate:\n{text}");
        Leaf {
            cert_pem: std::fs::read_to_string(&cert).unwrap(),
            key_pem: std::fs::read_to_string(&key).unwrap(),
        }
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
        self.leaf_with(dns, uri, validity, Vec::new())
    }

    fn leaf_with(
        &self,
        dns: &[&str],
        uri: &[&str],
        validity: Option<(time::OffsetDateTime, time::OffsetDateTime)>,
        extended_key_usages: Vec<ExtendedKeyUsagePurpose>,
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
        params.extended_key_usages = extended_key_usages;
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
