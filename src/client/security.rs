//! How a client secures a connection it opens (`ClientSecurity`: Kafka's security protocol, TLS
//! client config, SASL login), and the TLS handshake and SASL exchange that run before use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::connection::{request, Io};
use super::ClientError;
use crate::config::auth::{client_login, JaasLogin};
use crate::config::security::SecurityProtocol;
use crate::config::ssl::SslConfig;
use crate::config::{invalid, ConfigError};
use crate::protocol::errors;
use crate::protocol::listener::Stream;
use crate::security::sasl::{Mechanism, ScramClient, ScramClientError};
use crate::security::tls::client::TlsClient;
use crate::security::tls::TlsError;

/// A SASL login; the password is never printed.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// How to connect: PLAINTEXT, or TLS (with this client config) and/or SASL (with this login).
#[derive(Clone, Debug)]
pub struct ClientSecurity {
    tls: Option<Tls>,
    sasl: Option<SaslLogin>,
}

/// A TLS client config given as it is, or one that follows its `ssl.*` files.
#[derive(Clone, Debug)]
enum Tls {
    Fixed(Arc<rustls::ClientConfig>),
    Files(Arc<TlsClient>),
}

impl Tls {
    fn config(&self) -> Arc<rustls::ClientConfig> {
        match self {
            Tls::Fixed(c) => c.clone(),
            Tls::Files(c) => c.config(),
        }
    }
}

impl Default for ClientSecurity {
    fn default() -> Self {
        ClientSecurity::plaintext()
    }
}

/// Why a connection could not be secured, by step.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("{protocol} needs {what}")]
    Incomplete {
        protocol: SecurityProtocol,
        what: &'static str,
    },
    #[error("{0}")]
    TlsConfig(#[from] TlsError),
    #[error("{0:?} is not a SASL mechanism evenkeel speaks")]
    UnknownMechanism(String),
    #[error("{host:?} is not a TLS server name")]
    ServerName { host: String },
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] std::io::Error),
    #[error("SaslHandshake: the broker does not enable {mechanism} (it enables {enabled})")]
    UnsupportedMechanism {
        mechanism: Mechanism,
        enabled: String,
    },
    #[error("SaslHandshake failed: {0}")]
    Handshake(String),
    #[error("SaslAuthenticate as {user} with {mechanism} failed: {message}")]
    AuthenticationFailed {
        user: String,
        mechanism: Mechanism,
        message: String,
    },
    #[error("SaslAuthenticate: {0}")]
    Scram(#[from] ScramClientError),
}

impl ClientSecurity {
    pub fn plaintext() -> Self {
        ClientSecurity {
            tls: None,
            sasl: None,
        }
    }

    /// `protocol` with what it needs: a TLS config for SSL and SASL_SSL, a login for
    /// SASL_PLAINTEXT and SASL_SSL (anything else given is left unused).
    pub fn new(
        protocol: SecurityProtocol,
        tls: Option<Arc<rustls::ClientConfig>>,
        sasl: Option<SaslLogin>,
    ) -> Result<Self, SecurityError> {
        Self::assemble(protocol, tls.map(Tls::Fixed), sasl)
    }

    fn assemble(
        protocol: SecurityProtocol,
        tls: Option<Tls>,
        sasl: Option<SaslLogin>,
    ) -> Result<Self, SecurityError> {
        let incomplete = |what| SecurityError::Incomplete { protocol, what };
        let tls = match (protocol.is_tls(), tls) {
            (true, None) => return Err(incomplete("a TLS client config")),
            (true, tls) => tls,
            (false, _) => None,
        };
        let sasl = match (protocol.is_sasl(), sasl) {
            (true, None) => return Err(incomplete("a SASL login")),
            (true, sasl) => sasl,
            (false, _) => None,
        };
        Ok(ClientSecurity { tls, sasl })
    }

    /// How a broker connects to other brokers' listener of `protocol`: with that listener's
    /// `ssl.*` settings (client side; their files read now, and again when they change) and
    /// the broker's inter-broker login.
    pub fn for_listener(
        protocol: SecurityProtocol,
        ssl: Option<&SslConfig>,
        login: Option<&JaasLogin>,
    ) -> Result<Self, SecurityError> {
        let tls = match ssl.filter(|_| protocol.is_tls()) {
            Some(ssl) => Some(Tls::Files(Arc::new(TlsClient::new(ssl)?))),
            None => None,
        };
        let sasl = match login.filter(|_| protocol.is_sasl()) {
            Some(l) => Some(sasl_login(l)?),
            None => None,
        };
        ClientSecurity::assemble(protocol, tls, sasl)
    }

    /// From Kafka's client keys: `security.protocol` (PLAINTEXT), the `ssl.*` keys for SSL and
    /// SASL_SSL (PEM truststore, keystore for mutual TLS, endpoint identification), and
    /// `sasl.mechanism` with `sasl.jaas.config` for SASL_PLAINTEXT and SASL_SSL. The files are
    /// read now: a missing one is an error here, not at the first connect.
    pub fn from_properties(
        props: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let key = "security.protocol";
        let protocol = match props.get(key).map(|v| v.trim()) {
            None | Some("") => SecurityProtocol::Plaintext,
            Some(v) => v.parse().map_err(|_| {
                invalid(key, v, "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
            })?,
        };
        let ssl = protocol
            .is_tls()
            .then(|| SslConfig::for_client(props))
            .transpose()?;
        let login = protocol
            .is_sasl()
            .then(|| client_login(props))
            .transpose()?;
        ClientSecurity::for_listener(protocol, ssl.as_ref(), login.as_ref()).map_err(|e| match e {
            SecurityError::TlsConfig(e) => e.into_config_error(),
            SecurityError::UnknownMechanism(m) => invalid(
                "sasl.mechanism",
                &m,
                "evenkeel speaks PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512",
            ),
            e => invalid(key, protocol.name(), e.to_string()),
        })
    }

    /// The same TLS and SASL mechanism, logged in as `username` with `password` instead;
    /// `None` without a SASL login to replace.
    pub fn with_credentials(&self, username: &str, password: &str) -> Option<ClientSecurity> {
        let mechanism = self.sasl.as_ref()?.mechanism;
        Some(ClientSecurity {
            tls: self.tls.clone(),
            sasl: Some(SaslLogin {
                mechanism,
                username: username.to_string(),
                password: password.to_string(),
            }),
        })
    }

    /// The SASL user this logs in as, if any.
    pub fn username(&self) -> Option<&str> {
        self.sasl.as_ref().map(|l| l.username.as_str())
    }

    /// The TLS client config for the next connection, if any.
    pub(super) fn tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.tls.as_ref().map(Tls::config)
    }

    pub(super) fn sasl(&self) -> Option<&SaslLogin> {
        self.sasl.as_ref()
    }
}

/// The login a JAAS config gives.
fn sasl_login(l: &JaasLogin) -> Result<SaslLogin, SecurityError> {
    Ok(SaslLogin {
        mechanism: Mechanism::from_name(&l.mechanism)
            .ok_or_else(|| SecurityError::UnknownMechanism(l.mechanism.clone()))?,
        username: l.username.clone(),
        password: l.password.clone(),
    })
}

/// The host of `addr` ("host:port", "[v6]:port").
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn refused(addr: &str, source: SecurityError) -> ClientError {
    ClientError::Security {
        addr: addr.to_string(),
        source,
    }
}

/// The client side of the TLS handshake on `tcp`, the server checked as `addr`'s host.
pub(super) async fn tls_handshake(
    tcp: TcpStream,
    addr: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<Stream, ClientError> {
    let host = host_of(addr);
    let name = ServerName::try_from(host.to_string()).map_err(|_| {
        let host = host.to_string();
        refused(addr, SecurityError::ServerName { host })
    })?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| refused(addr, SecurityError::Tls(e)))?;
    Ok(Stream::Tls(Box::new(stream.into())))
}

/// SaslHandshake v1 and SaslAuthenticate with `login`: the session's lifetime when the broker
/// gives one (KIP-368).
pub(super) async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Io<S>,
    addr: &str,
    versions: &HashMap<ApiKey, i16>,
    login: &SaslLogin,
) -> Result<Option<Duration>, ClientError> {
    let version = |key: ApiKey| {
        versions.get(&key).copied().ok_or_else(|| {
            ClientError::Protocol(format!("{key:?}: no version in common with {addr}"))
        })
    };
    let name = StrBytes::from_static_str(login.mechanism.name());
    let req = SaslHandshakeRequest::default().with_mechanism(name);
    let shake = request(io, &req, version(ApiKey::SaslHandshake)?).await?;
    match shake.error_code {
        errors::NONE => {}
        errors::UNSUPPORTED_SASL_MECHANISM => {
            let enabled: Vec<&str> = shake.mechanisms.iter().map(|m| m.as_str()).collect();
            let e = SecurityError::UnsupportedMechanism {
                mechanism: login.mechanism,
                enabled: enabled.join(","),
            };
            return Err(refused(addr, e));
        }
        code => {
            let e = ClientError::kafka("SaslHandshake", code, None).to_string();
            return Err(refused(addr, SecurityError::Handshake(e)));
        }
    }
    let step = AuthStep {
        addr,
        version: version(ApiKey::SaslAuthenticate)?,
        login,
    };
    let last = match login.mechanism.scram() {
        None => {
            let token = format!("\0{}\0{}", login.username, login.password);
            step.send(io, token.into_bytes()).await?
        }
        Some(m) => {
            let scram = |e| refused(addr, SecurityError::Scram(e));
            let mut client = ScramClient::new(m, &login.username, &login.password);
            let first = step.send(io, client.client_first().map_err(scram)?).await?;
            let last = client.server_first(&first.auth_bytes).map_err(scram)?;
            let last = step.send(io, last).await?;
            client.server_final(&last.auth_bytes).map_err(scram)?;
            last
        }
    };
    let lifetime = u64::try_from(last.session_lifetime_ms).unwrap_or(0);
    Ok((lifetime > 0).then(|| Duration::from_millis(lifetime)))
}

/// One SaslAuthenticate round trip.
struct AuthStep<'a> {
    addr: &'a str,
    version: i16,
    login: &'a SaslLogin,
}

impl AuthStep<'_> {
    async fn send<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        io: &mut Io<S>,
        token: Vec<u8>,
    ) -> Result<SaslAuthenticateResponse, ClientError> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
        let resp = request(io, &req, self.version).await?;
        if resp.error_code == errors::NONE {
            return Ok(resp);
        }
        let message = resp
            .error_message
            .as_deref()
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| errors::error_name(resp.error_code).to_string());
        let e = SecurityError::AuthenticationFailed {
            user: self.login.username.clone(),
            mechanism: self.login.mechanism,
            message,
        };
        Err(refused(self.addr, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address_is_its_server_name() {
        assert_eq!(host_of("broker-1.internal:9092"), "broker-1.internal");
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9092"), "::1");
    }

    #[test]
    fn a_protocol_without_what_it_needs_is_refused() {
        let e = ClientSecurity::new(SecurityProtocol::SaslSsl, None, None).unwrap_err();
        assert!(
            e.to_string().contains("SASL_SSL needs a TLS client config"),
            "{e}"
        );
        let login = SaslLogin {
            mechanism: Mechanism::PLAIN,
            username: "a".into(),
            password: "secret".into(),
        };
        let c = ClientSecurity::new(SecurityProtocol::SaslPlaintext, None, Some(login)).unwrap();
        assert!(c.tls().is_none() && c.sasl().is_some());
        assert!(!format!("{c:?}").contains("secret"));
        let plain = ClientSecurity::for_listener(SecurityProtocol::Plaintext, None, None).unwrap();
        assert!(plain.tls().is_none() && plain.sasl().is_none());
    }
}
