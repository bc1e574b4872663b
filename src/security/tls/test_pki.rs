//! Test certificates for the crate's unit tests: a CA made by rcgen, the certificates it signs
//! (for localhost), a listener's `SslConfig` from properties, a rustls client config that
//! trusts the CA, and a handshake over loopback.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::ServerName;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::TlsServer;
use crate::config::ssl::SslConfig;

/// A CA and the certificates it signs.
pub(crate) struct Pki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// A certificate for localhost with its key, in PEM, and the certificate in DER.
pub(crate) struct Leaf {
    pub cert: String,
    pub key: String,
    pub der: CertificateDer<'static>,
}

impl Pki {
    /// A CA whose subject is `O=acme, CN=<name>`.
    pub fn new(name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name = dn(name);
        let key = rcgen::KeyPair::generate().unwrap();
        Pki {
            ca: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// A certificate for localhost whose subject is `O=acme, CN=<cn>`.
    pub fn leaf(&self, cn: &str) -> Leaf {
        self.leaf_with_subject(dn(cn))
    }

    /// A certificate for localhost with this subject.
    pub fn leaf_with_subject(&self, subject: rcgen::DistinguishedName) -> Leaf {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name = subject;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }
}

/// The subject `O=acme, CN=<cn>` (Java prints it `CN=<cn>,O=acme`).
pub(crate) fn dn(cn: &str) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "acme");
    dn.push(rcgen::DnType::CommonName, cn);
    dn
}

/// The settings of TLS listener `SSL` from these properties.
pub(crate) fn ssl_config(kv: &[(&str, &str)]) -> SslConfig {
    let props: BTreeMap<String, String> = kv
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    SslConfig::from_props(&props, "SSL").unwrap()
}

/// A client trusting the CAs of `ca_pem`, presenting `client` when given.
pub(crate) fn client_config(ca_pem: &str, client: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(leaf) => builder
            .with_client_auth_cert(
                vec![leaf.der.clone()],
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Connects to `server` as a client trusting `ca`, with `client` as its certificate, asking
/// for the server `name`; returns the server's certificate and the principal the server gave
/// the client.
pub(crate) async fn handshake_as(
    server: &TlsServer,
    ca: &str,
    client: Option<&Leaf>,
    name: &str,
) -> Result<(CertificateDer<'static>, String), String> {
    handshake_with(server, client_config(ca, client), name).await
}

/// Connects to `server` with the client `config`, asking for the server `name`, and exchanges
/// a byte; returns the server's certificate and the principal the server gave the client.
pub(crate) async fn handshake_with(
    server: &TlsServer,
    config: Arc<ClientConfig>,
    name: &str,
) -> Result<(CertificateDer<'static>, String), String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let client = async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut s = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let seen = s.get_ref().1.peer_certificates().unwrap()[0].clone();
        // TLS 1.3 reports a refused client certificate on the first read.
        s.write_all(b"x").await.map_err(|e| e.to_string())?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(seen)
    };
    let serve = echo_one_byte(&listener, server);
    let (seen, principal) = tokio::join!(client, serve);
    Ok((seen?, principal?))
}

/// The server side of a test handshake: accepts one connection on `listener`, echoes one byte
/// and returns the principal the handshake gave the client.
async fn echo_one_byte(listener: &TcpListener, server: &TlsServer) -> Result<String, String> {
    let (tcp, _) = listener.accept().await.unwrap();
    let (mut s, principal) = server.accept(tcp).await.map_err(|e| e.to_string())?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.map_err(|e| e.to_string())?;
    s.write_all(&b).await.map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    Ok(principal)
}
