//! Test certificates for the integration tests: a CA made by rcgen that signs certificates for
//! localhost and 127.0.0.1, the PEM files a broker or librdkafka reads, and a rustls client
//! that trusts the CA.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA that writes its files into `dir`.
pub struct Pki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    name: String,
    dir: PathBuf,
    ca_file: OnceLock<PathBuf>,
}

/// A certificate and its key.
pub struct Leaf {
    pub name: String,
    pub der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    /// A CA whose subject is `O=acme, CN=<name>`.
    pub fn new(dir: &Path, name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name = dn(name);
        let key = rcgen::KeyPair::generate().unwrap();
        Pki {
            ca: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
            name: name.to_string(),
            dir: dir.to_path_buf(),
            ca_file: OnceLock::new(),
        }
    }

    /// The CA certificate as a PEM file (a truststore), written on first use.
    pub fn ca_file(&self) -> &Path {
        self.ca_file.get_or_init(|| {
            let path = self.dir.join(format!("ca-{}.pem", self.name));
            std::fs::write(&path, self.ca.pem()).unwrap();
            path
        })
    }

    /// A certificate for localhost and 127.0.0.1 whose subject is `O=acme, CN=<name>`.
    pub fn leaf(&self, name: &str) -> Leaf {
        self.sign(name, |_| {})
    }

    /// As `leaf`, valid only in 2001.
    pub fn expired_leaf(&self, name: &str) -> Leaf {
        self.sign(name, |params| {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 12, 31);
        })
    }

    fn sign(&self, name: &str, adjust: impl FnOnce(&mut rcgen::CertificateParams)) -> Leaf {
        let sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name = dn(name);
        adjust(&mut params);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            name: name.to_string(),
            der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A rustls client trusting this CA, presenting `client` when given.
    pub fn connector(&self, client: Option<&Leaf>) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.client_config(client))
    }

    /// The config of `connector`, for a blocking `rustls::StreamOwned`.
    pub fn client_config(&self, client: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match client {
            Some(leaf) => builder
                .with_client_auth_cert(
                    vec![leaf.der.clone()],
                    PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }
}

impl Leaf {
    /// The key and the certificate in one PEM file (a broker's keystore) at `path`.
    pub fn write_keystore(&self, path: &Path) {
        std::fs::write(path, format!("{}{}", self.key_pem, self.cert_pem)).unwrap();
    }

    /// The certificate and the key as two PEM files in `dir` (as librdkafka reads them).
    pub fn write_files(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{}.crt", self.name));
        let key = dir.join(format!("{}.key", self.name));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }
}

/// The subject `O=acme, CN=<cn>` (Java prints it `CN=<cn>,O=acme`).
fn dn(cn: &str) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "acme");
    dn.push(rcgen::DnType::CommonName, cn);
    dn
}

/// A broker's overrides for a PLAINTEXT listener on `plain` (inter-broker) and an SSL listener
/// on `ssl` (advertised first, so Metadata answers with it), with PEM files for its keystore
/// and truststore.
pub fn ssl_listener_overrides(
    plain: u16,
    ssl: u16,
    keystore: &Path,
    truststore: &Path,
) -> Vec<String> {
    vec![
        format!("listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}"),
        format!("advertised.listeners=SSL://127.0.0.1:{ssl},PLAINTEXT://127.0.0.1:{plain}"),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL".into(),
        "inter.broker.listener.name=PLAINTEXT".into(),
        "ssl.keystore.type=PEM".into(),
        format!("ssl.keystore.location={}", keystore.display()),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", truststore.display()),
    ]
}
