//! TLS for a listener: the rustls server config built from its `ssl.*` settings (PEM key,
//! chain and truststore, client auth, versions), the handshake, and reloads on file changes;
//! `client` builds the client side of the same settings (brokers' connections to each other,
//! our producer), which follows its files too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::ssl_principal::ANONYMOUS;
use crate::config::principal_rules::PrincipalError;
use crate::config::ssl::{ClientAuth, Keystore, PemSource, SslConfig, TlsVersion};

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the key and certificate files are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Why a listener's TLS settings cannot be used; each names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: cannot read {}: {source}", path.display())]
    Read {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key}: {reason}")]
    Pem { key: String, reason: String },
    #[error(
        "{key}: the private key is encrypted (ssl.key.password), which evenkeel cannot read; \
         store it unencrypted (openssl pkcs8 -topk8 -nocrypt) and unset ssl.key.password"
    )]
    EncryptedKey { key: String },
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

impl TlsError {
    /// The config key at fault.
    pub fn key(&self) -> &str {
        match self {
            TlsError::Read { key, .. }
            | TlsError::Pem { key, .. }
            | TlsError::EncryptedKey { key }
            | TlsError::Invalid { key, .. } => key,
        }
    }

    /// As a config error naming the key (its value not shown: it may be a key's PEM).
    pub fn into_config_error(self) -> crate::config::ConfigError {
        let key = self.key().to_string();
        let shown = self.to_string();
        let reason = shown.strip_prefix(&format!("{key}: ")).unwrap_or(&shown);
        crate::config::invalid(&key, "(not shown)", reason)
    }
}

/// Why one connection's handshake failed (the connection is closed, nothing else).
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] std::io::Error),
    #[error("TLS handshake not finished within {} ms", .0.as_millis())]
    Timeout(Duration),
    #[error("client certificate refused: {0}")]
    Principal(#[from] PrincipalError),
}

/// One TLS listener: its settings (with the mapping of client certificates to principals) and
/// the config new handshakes use (swapped when the files change).
pub struct TlsServer {
    ssl: SslConfig,
    current: RwLock<Arc<ServerConfig>>,
    /// The digest of the files last read, whether or not they made a config.
    seen: Mutex<[u8; 32]>,
    handshake_timeout: Duration,
    reload_interval: Duration,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("listener", &self.ssl.listener)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Reads the key, certificates and truststore of `ssl` and builds the server config.
    pub fn new(ssl: SslConfig) -> Result<TlsServer, TlsError> {
        let files = Files::read(&ssl);
        let seen = files.digest();
        let config = server_config(&ssl, &files)?;
        Ok(TlsServer {
            ssl,
            current: RwLock::new(config),
            seen: Mutex::new(seen),
            handshake_timeout: HANDSHAKE_TIMEOUT,
            reload_interval: RELOAD_INTERVAL,
        })
    }

    /// The same server with other timings (tests).
    pub fn with_timings(mut self, handshake: Duration, reload_interval: Duration) -> TlsServer {
        self.handshake_timeout = handshake;
        self.reload_interval = reload_interval;
        self
    }

    /// The config the next handshake uses.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// Runs the server side of the handshake on `tcp`, bounded by the handshake timeout;
    /// returns the stream and the client's principal (`User:ANONYMOUS` without a certificate).
    pub async fn accept(
        &self,
        tcp: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, String), HandshakeError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        let stream = tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp))
            .await
            .map_err(|_| HandshakeError::Timeout(self.handshake_timeout))?
            .map_err(HandshakeError::Tls)?;
        let principal = self.principal(stream.get_ref().1.peer_certificates())?;
        Ok((stream, principal))
    }

    /// The principal of a client presenting `certificates` (its own first).
    pub fn principal(
        &self,
        certificates: Option<&[CertificateDer<'_>]>,
    ) -> Result<String, PrincipalError> {
        match certificates.and_then(|c| c.first()) {
            Some(cert) => super::ssl_principal::principal(&self.ssl.principal_mapper, cert),
            None => Ok(ANONYMOUS.to_string()),
        }
    }

    /// Re-reads the files and, when their contents changed, swaps in a config built from what
    /// was read: `Ok(true)` when swapped; an error keeps the old config (and the same contents
    /// are not tried again).
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(files) = changed_files(&self.ssl, &self.seen) else {
            return Ok(false);
        };
        let config = server_config(&self.ssl, &files)?;
        *self.current.write() = config;
        Ok(true)
    }

    /// Checks the files every reload interval until the returned task is aborted; a listener
    /// without files gets no task.
    pub fn watch_files(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if source_files(&self.ssl).is_empty() {
            return None;
        }
        let me = Arc::downgrade(self);
        let every = self.reload_interval;
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                match me.reload() {
                    Ok(true) => {
                        tracing::info!(listener = %me.ssl.listener, "TLS key and certificates reloaded")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(listener = %me.ssl.listener, error = %e, "TLS reload failed; new connections keep the previous certificates")
                    }
                }
            }
        }))
    }
}

/// The files of `ssl` as read now when their contents differ from those `seen` last (which
/// then become the ones seen, whether or not they make a config); `None` when unchanged.
fn changed_files<'a>(ssl: &'a SslConfig, seen: &Mutex<[u8; 32]>) -> Option<Files<'a>> {
    let files = Files::read(ssl);
    let digest = files.digest();
    let mut seen = seen.lock();
    if *seen == digest {
        return None;
    }
    *seen = digest;
    Some(files)
}

/// The files of `ssl`, in a fixed order.
fn source_files(ssl: &SslConfig) -> Vec<&Path> {
    let mut sources: Vec<&PemSource> = Vec::new();
    match &ssl.keystore {
        Some(Keystore::File(s)) => sources.push(s),
        Some(Keystore::Inline { chain, key }) => sources.extend([chain, key]),
        None => {}
    }
    sources.extend(&ssl.truststore);
    sources
        .into_iter()
        .filter_map(|s| match s {
            PemSource::File { path, .. } => Some(path.as_path()),
            PemSource::Inline { .. } => None,
        })
        .collect()
}

/// The contents of a config's files, each read once: a reload hashes them and builds the
/// config from the same bytes.
struct Files<'a> {
    read: Vec<(&'a Path, std::io::Result<Vec<u8>>)>,
}

impl<'a> Files<'a> {
    fn read(ssl: &'a SslConfig) -> Files<'a> {
        let read = source_files(ssl)
            .into_iter()
            .map(|path| (path, std::fs::read(path)))
            .collect();
        Files { read }
    }

    /// A digest of the contents (a file that cannot be read counts as empty).
    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for (_, bytes) in &self.read {
            let bytes = bytes.as_deref().unwrap_or_default();
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        h.finalize().into()
    }

    /// The PEM text of `source` (a file's as read), its blocks re-wrapped (a properties file's
    /// `\` continuations join a PEM value into one line, which Kafka reads).
    fn pem(&self, source: &PemSource) -> Result<String, TlsError> {
        let text = match source {
            PemSource::Inline { pem, .. } => pem.clone(),
            PemSource::File { key, path } => self.text(path).map_err(|e| TlsError::Read {
                key: key.clone(),
                path: path.clone(),
                source: e,
            })?,
        };
        Ok(normalize_pem(&text))
    }

    fn text(&self, path: &Path) -> std::io::Result<String> {
        let read = self.read.iter().find(|(p, _)| *p == path).map(|(_, r)| r);
        match read {
            Some(Ok(bytes)) => String::from_utf8(bytes.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Some(Err(e)) => Err(std::io::Error::new(e.kind(), e.to_string())),
            // `Files::read` reads every file of the config it is given.
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not among the listener's files",
            )),
        }
    }
}

/// The rustls server config of `ssl`, from its files as read.
fn server_config(ssl: &SslConfig, files: &Files) -> Result<Arc<ServerConfig>, TlsError> {
    let Some((chain, key, key_name)) = keystore(ssl, files)? else {
        return Err(TlsError::Invalid {
            key: "ssl.keystore.location".into(),
            reason: format!("listener {} has no keystore", ssl.listener),
        });
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = client_verifier(ssl, files, provider.clone())?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&protocol_versions(ssl))
        .map_err(invalid("ssl.enabled.protocols"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(invalid(&key_name))?;
    Ok(Arc::new(config))
}

/// A rustls error as the fault of config key `key`.
fn invalid(key: &str) -> impl Fn(rustls::Error) -> TlsError {
    let key = key.to_string();
    move |e: rustls::Error| TlsError::Invalid {
        key: key.clone(),
        reason: e.to_string(),
    }
}

/// The certificate chain and private key of `ssl`'s keystore, with the key that names the
/// private key (for messages).
type KeystoreParts = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String);

/// `None` when `ssl` has no keystore (a client without a certificate).
fn keystore(ssl: &SslConfig, files: &Files) -> Result<Option<KeystoreParts>, TlsError> {
    match &ssl.keystore {
        None => Ok(None),
        Some(Keystore::File(source)) => {
            let pem = files.pem(source)?;
            Ok(Some((
                certificates(source, &pem)?,
                private_key(source, &pem)?,
                source.key().to_string(),
            )))
        }
        Some(Keystore::Inline { chain, key }) => Ok(Some((
            certificates(chain, &files.pem(chain)?)?,
            private_key(key, &files.pem(key)?)?,
            key.key().to_string(),
        ))),
    }
}

/// `ssl.enabled.protocols` as rustls versions.
fn protocol_versions(ssl: &SslConfig) -> Vec<&'static SupportedProtocolVersion> {
    ssl.enabled_protocols
        .iter()
        .map(|v| match v {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect()
}

/// The CA certificates of a truststore.
fn root_store(store: &PemSource, files: &Files) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(store, &files.pem(store)?)? {
        roots.add(cert).map_err(|e| TlsError::Invalid {
            key: store.key().to_string(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// `ssl.client.auth` over the truststore's CAs (`SslConfig::from_props` refuses client auth
/// without a truststore; a hand-made config without one gets an empty store, which rustls
/// refuses, rather than no client auth).
fn client_verifier(
    ssl: &SslConfig,
    files: &Files,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    if ssl.client_auth == ClientAuth::None {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    let roots = match &ssl.truststore {
        Some(store) => root_store(store, files)?,
        None => RootCertStore::empty(),
    };
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = match ssl.client_auth {
        ClientAuth::Requested => builder.allow_unauthenticated(),
        _ => builder,
    };
    let key = ssl
        .truststore
        .as_ref()
        .map_or("ssl.truststore.location", PemSource::key);
    builder.build().map_err(|e| TlsError::Invalid {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

/// Every `-----BEGIN X-----…-----END X-----` block of `text` with its base64 on lines of 64;
/// headers (legacy encrypted keys) are kept as they are.
fn normalize_pem(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(body_end) = body_start.find(&end_marker) else {
            break;
        };
        let body = &body_start[..body_end];
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        if body.contains(':') {
            out.push_str(body.trim());
            out.push('\n');
        } else {
            let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            for line in b64.as_bytes().chunks(64) {
                out.push_str(&String::from_utf8_lossy(line));
                out.push('\n');
            }
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_start[body_end + end_marker.len()..];
    }
    out
}

fn certificates(source: &PemSource, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            key: source.key().to_string(),
            reason: format!("bad PEM certificate: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            key: source.key().to_string(),
            reason: "no certificate (-----BEGIN CERTIFICATE-----) found".into(),
        });
    }
    Ok(certs)
}

fn private_key(source: &PemSource, pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let key = source.key().to_string();
    if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || pem.contains("Proc-Type: 4,ENCRYPTED")
    {
        return Err(TlsError::EncryptedKey { key });
    }
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        key,
        reason: format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
    })
}

pub mod client;

#[cfg(test)]
pub(crate) mod test_pki;

#[cfg(test)]
mod tests;
