//! The client side of TLS, for the broker's connections to other brokers and for our producer:
//! a rustls client config from `ssl.*` settings (truststore as roots, keystore, when there is
//! one, as client certificate), built again when its files change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::{
    changed_files, invalid, keystore, protocol_versions, root_store, Files, TlsError,
    RELOAD_INTERVAL,
};
use crate::config::ssl::SslConfig;

/// The client config for connecting to a TLS listener (`ssl.listener` of another broker, or
/// any broker's for a client): its
/// certificate must chain to the truststore and, with `ssl.endpoint.identification.algorithm`
/// `https` (Kafka's default), name the host connected to; the keystore, if any, is the client
/// certificate presented.
pub fn client_config(ssl: &SslConfig) -> Result<Arc<ClientConfig>, TlsError> {
    build(ssl, &Files::read(ssl))
}

/// A client config that follows its files: a connection made after the keystore or truststore
/// changed (Kubernetes rotating a Secret) uses the new ones. The files are checked when a
/// connection asks for the config, at most once a reload interval; a change that makes no
/// config keeps the previous one (and is logged).
pub struct TlsClient {
    ssl: SslConfig,
    current: RwLock<Arc<ClientConfig>>,
    /// The digest of the files last read, whether or not they made a config.
    seen: Mutex<[u8; 32]>,
    checked: Mutex<Instant>,
    reload_interval: Duration,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("listener", &self.ssl.listener)
            .finish_non_exhaustive()
    }
}

impl TlsClient {
    /// Reads the files of `ssl` now (a bad one is an error here, not at the first connect).
    pub fn new(ssl: &SslConfig) -> Result<TlsClient, TlsError> {
        let files = Files::read(ssl);
        let seen = files.digest();
        let config = build(ssl, &files)?;
        Ok(TlsClient {
            ssl: ssl.clone(),
            current: RwLock::new(config),
            seen: Mutex::new(seen),
            checked: Mutex::new(Instant::now()),
            reload_interval: RELOAD_INTERVAL,
        })
    }

    /// The same client, checking its files every `interval` (tests).
    pub fn with_reload_interval(mut self, interval: Duration) -> TlsClient {
        self.reload_interval = interval;
        self
    }

    /// The config for the next connection, built again first when the files changed.
    pub fn config(&self) -> Arc<ClientConfig> {
        let due = {
            let mut checked = self.checked.lock();
            let due = checked.elapsed() >= self.reload_interval;
            if due {
                *checked = Instant::now();
            }
            due
        };
        if due {
            self.reload();
        }
        self.current.read().clone()
    }

    fn reload(&self) {
        let Some(files) = changed_files(&self.ssl, &self.seen) else {
            return;
        };
        match build(&self.ssl, &files) {
            Ok(config) => {
                *self.current.write() = config;
                tracing::info!(listener = %self.ssl.listener, "TLS client key and certificates reloaded");
            }
            Err(e) => {
                tracing::warn!(listener = %self.ssl.listener, error = %e, "TLS client reload failed; new connections keep the previous certificates");
            }
        }
    }
}

fn build(ssl: &SslConfig, files: &Files) -> Result<Arc<ClientConfig>, TlsError> {
    let Some(store) = &ssl.truststore else {
        return Err(TlsError::Invalid {
            key: "ssl.truststore.location".into(),
            reason: format!(
                "listener {} has no truststore to check other brokers' certificates against",
                ssl.listener
            ),
        });
    };
    let roots = Arc::new(root_store(store, files)?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| TlsError::Invalid {
            key: store.key().to_string(),
            reason: e.to_string(),
        })?;
    let verifier: Arc<dyn ServerCertVerifier> = if ssl.endpoint_identification {
        webpki
    } else {
        Arc::new(AnyHostname(webpki))
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&protocol_versions(ssl))
        .map_err(invalid("ssl.enabled.protocols"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match keystore(ssl, files)? {
        Some((chain, key, key_name)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(invalid(&key_name))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain is checked as always, and a
/// certificate that does not name the host connected to is accepted.
#[derive(Debug)]
struct AnyHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // WebPkiServerVerifier checks the chain (trust anchor, validity, usage) first and the
        // name last: a name error means everything else passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
