//! Kafka's `ssl.*` keys of one TLS listener, with their `listener.name.<name>.ssl.*` overrides:
//! where its key, certificates and trusted CAs are (PEM only), client auth, protocol versions.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::principal_rules::PrincipalMapper;
use super::{invalid as bad, ConfigError};

/// The `ssl.*` keys read here, and the Kafka ones accepted without effect.
pub const KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm",
    // Accepted without effect: rustls chooses its suites and algorithms.
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "ssl.provider",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
];

/// Whether `key` is an `ssl.*` key, plain or under a listener's prefix.
pub fn is_known(key: &str) -> bool {
    if KEYS.contains(&key) {
        return true;
    }
    key.strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(_, k)| KEYS.contains(&k))
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// A TLS version of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// Where PEM text comes from: inline in the config, or a file; `key` is the config key that
/// named it (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    Inline { key: String, pem: String },
    File { key: String, path: PathBuf },
}

impl PemSource {
    /// The config key that named this source.
    pub fn key(&self) -> &str {
        match self {
            PemSource::Inline { key, .. } | PemSource::File { key, .. } => key,
        }
    }
}

/// The private key and its certificate chain: both inline (KIP-651), or one PEM file holding
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keystore {
    Inline { chain: PemSource, key: PemSource },
    File(PemSource),
}

/// The TLS settings of one listener.
#[derive(Debug, Clone)]
pub struct SslConfig {
    pub listener: String,
    /// Always set for a listener; a client's is its certificate for mutual TLS, if any.
    pub keystore: Option<Keystore>,
    pub truststore: Option<PemSource>,
    pub client_auth: ClientAuth,
    pub enabled_protocols: Vec<TlsVersion>,
    /// `ssl.principal.mapping.rules`, parsed (applied by the listener).
    pub principal_mapper: PrincipalMapper,
    /// `ssl.endpoint.identification.algorithm` (https): whether the broker, connecting to
    /// this listener of another broker, checks that the certificate names the host it
    /// connected to (`https`) or not (an empty value). The chain is checked either way.
    pub endpoint_identification: bool,
}

/// The keys of one listener: `listener.name.<name lowercased>.ssl.X` wins over `ssl.X`.
struct Keys<'a> {
    props: &'a BTreeMap<String, String>,
    prefix: String,
}

impl Keys<'_> {
    /// The value of `ssl.X` for this listener, with the key it came from.
    fn get(&self, key: &str) -> Option<(String, &str)> {
        let prefixed = format!("{}{key}", self.prefix);
        if let Some(v) = self.props.get(&prefixed) {
            return Some((prefixed, v.as_str()));
        }
        self.props.get(key).map(|v| (key.to_string(), v.as_str()))
    }

    /// The key a message should name for `ssl.X` when it is not set.
    fn name(&self, key: &str) -> String {
        self.get(key).map_or_else(|| key.to_string(), |(k, _)| k)
    }

    fn non_empty(&self, key: &str) -> Option<(String, &str)> {
        self.get(key).filter(|(_, v)| !v.trim().is_empty())
    }
}

/// A value that must not be printed (a key or a password).
const HIDDEN: &str = "[hidden]";

/// What a client connecting with TLS is called in messages (it has no listener).
pub const CLIENT: &str = "client";

impl SslConfig {
    /// The settings of the TLS listener `listener`; a server listener must have a keystore,
    /// and a truststore when it asks clients for certificates.
    pub fn from_props(
        props: &BTreeMap<String, String>,
        listener: &str,
    ) -> Result<SslConfig, ConfigError> {
        let keys = Keys {
            props,
            prefix: format!("listener.name.{}.", listener.to_lowercase()),
        };
        let c = SslConfig::read(&keys, listener)?;
        if c.keystore.is_none() {
            let reason = format!(
                "listener {listener} uses TLS and needs a keystore: ssl.keystore.location, or \
                 ssl.keystore.key with ssl.keystore.certificate.chain"
            );
            return Err(bad(&keys.name("ssl.keystore.location"), "", reason));
        }
        if c.client_auth != ClientAuth::None && c.truststore.is_none() {
            let reason = format!(
                "listener {listener} asks clients for certificates (ssl.client.auth) and needs \
                 a truststore: ssl.truststore.location or ssl.truststore.certificates"
            );
            return Err(bad(&keys.name("ssl.truststore.location"), "", reason));
        }
        Ok(c)
    }

    /// A client's settings (Kafka's client `ssl.*` keys, no listener prefix): a truststore to
    /// check the brokers' certificates against (PEM; there is no JVM default to fall back
    /// on), and a keystore only for mutual TLS.
    pub fn for_client(props: &BTreeMap<String, String>) -> Result<SslConfig, ConfigError> {
        let keys = Keys {
            props,
            prefix: String::new(),
        };
        let c = SslConfig::read(&keys, CLIENT)?;
        if c.truststore.is_none() {
            let reason = "TLS needs a truststore to check the brokers' certificates against: \
                          ssl.truststore.location or ssl.truststore.certificates (PEM)";
            return Err(bad("ssl.truststore.location", "", reason));
        }
        Ok(c)
    }

    fn read(keys: &Keys, listener: &str) -> Result<SslConfig, ConfigError> {
        Ok(SslConfig {
            listener: listener.to_string(),
            keystore: keystore(keys)?,
            truststore: truststore(keys)?,
            client_auth: client_auth(keys)?,
            enabled_protocols: enabled_protocols(keys)?,
            principal_mapper: principal_mapper(keys)?,
            endpoint_identification: endpoint_identification(keys)?,
        })
    }
}

/// `ssl.keystore.type`/`ssl.truststore.type`: PEM only in this version (Kafka's default is
/// JKS, so a file without a type is refused too).
fn pem_type(keys: &Keys, key: &str) -> Result<(), ConfigError> {
    let (name, v) = keys
        .get(key)
        .map_or((keys.name(key), "JKS"), |(k, v)| (k, v.trim()));
    if v.eq_ignore_ascii_case("PEM") {
        return Ok(());
    }
    Err(bad(
        &name,
        v,
        "only PEM stores are supported (JKS, Kafka's default, and PKCS12 are not): set it to PEM",
    ))
}

fn keystore(keys: &Keys) -> Result<Option<Keystore>, ConfigError> {
    let location = keys.non_empty("ssl.keystore.location");
    let key = keys.non_empty("ssl.keystore.key");
    let chain = keys.non_empty("ssl.keystore.certificate.chain");
    if location.is_none() && key.is_none() && chain.is_none() {
        return Ok(None);
    }
    pem_type(keys, "ssl.keystore.type")?;
    if let Some((k, _)) = keys.non_empty("ssl.keystore.password") {
        let reason = "a PEM keystore has no password; only ssl.key.password may be set";
        return Err(bad(&k, HIDDEN, reason));
    }
    match (location, key, chain) {
        (Some((k, path)), None, None) => Ok(Some(Keystore::File(PemSource::File {
            key: k,
            path: PathBuf::from(path.trim()),
        }))),
        (None, Some((kk, key)), Some((ck, chain))) => Ok(Some(Keystore::Inline {
            chain: PemSource::Inline {
                key: ck,
                pem: chain.to_string(),
            },
            key: PemSource::Inline {
                key: kk,
                pem: key.to_string(),
            },
        })),
        (Some((k, v)), _, _) => Err(bad(
            &k,
            v,
            "set either ssl.keystore.location or ssl.keystore.key with \
             ssl.keystore.certificate.chain, not both",
        )),
        (None, Some((k, _)), None) => Err(bad(
            &k,
            HIDDEN,
            "ssl.keystore.certificate.chain must be set with it",
        )),
        (None, None, Some((k, _))) => Err(bad(&k, "", "ssl.keystore.key must be set with it")),
        (None, None, None) => Ok(None),
    }
}

fn truststore(keys: &Keys) -> Result<Option<PemSource>, ConfigError> {
    let location = keys.non_empty("ssl.truststore.location");
    let certs = keys.non_empty("ssl.truststore.certificates");
    if location.is_none() && certs.is_none() {
        return Ok(None);
    }
    pem_type(keys, "ssl.truststore.type")?;
    if let Some((k, _)) = keys.non_empty("ssl.truststore.password") {
        return Err(bad(&k, HIDDEN, "a PEM truststore has no password"));
    }
    match (location, certs) {
        (Some((k, v)), Some(_)) => Err(bad(
            &k,
            v,
            "set either ssl.truststore.location or ssl.truststore.certificates, not both",
        )),
        (Some((k, path)), None) => Ok(Some(PemSource::File {
            key: k,
            path: PathBuf::from(path.trim()),
        })),
        (None, Some((k, pem))) => Ok(Some(PemSource::Inline {
            key: k,
            pem: pem.to_string(),
        })),
        (None, None) => Ok(None),
    }
}

fn client_auth(keys: &Keys) -> Result<ClientAuth, ConfigError> {
    let Some((k, v)) = keys.get("ssl.client.auth") else {
        return Ok(ClientAuth::None);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "none" => Ok(ClientAuth::None),
        "requested" => Ok(ClientAuth::Requested),
        "required" => Ok(ClientAuth::Required),
        _ => Err(bad(&k, v, "must be one of none, requested, required")),
    }
}

/// `ssl.enabled.protocols` (TLSv1.2,TLSv1.3): rustls speaks no older version.
fn enabled_protocols(keys: &Keys) -> Result<Vec<TlsVersion>, ConfigError> {
    let Some((k, v)) = keys.get("ssl.enabled.protocols") else {
        return Ok(vec![TlsVersion::Tls12, TlsVersion::Tls13]);
    };
    let mut out = Vec::new();
    for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let version = match p {
            "TLSv1.2" => TlsVersion::Tls12,
            "TLSv1.3" => TlsVersion::Tls13,
            _ => {
                let reason = format!("{p} is not supported: the versions are TLSv1.2 and TLSv1.3");
                return Err(bad(&k, v, reason));
            }
        };
        if !out.contains(&version) {
            out.push(version);
        }
    }
    if out.is_empty() {
        return Err(bad(&k, v, "no protocol enabled"));
    }
    Ok(out)
}

fn principal_mapper(keys: &Keys) -> Result<PrincipalMapper, ConfigError> {
    let (k, v) = keys
        .get("ssl.principal.mapping.rules")
        .unwrap_or_else(|| ("ssl.principal.mapping.rules".to_string(), "DEFAULT"));
    PrincipalMapper::parse(v).map_err(|e| bad(&k, v, e.to_string()))
}

/// `ssl.endpoint.identification.algorithm`: `https` (Kafka's default) or empty (none).
fn endpoint_identification(keys: &Keys) -> Result<bool, ConfigError> {
    let Some((k, v)) = keys.get("ssl.endpoint.identification.algorithm") else {
        return Ok(true);
    };
    match v.trim() {
        "" => Ok(false),
        a if a.eq_ignore_ascii_case("https") => Ok(true),
        _ => Err(bad(
            &k,
            v,
            "must be https (the certificate must name the host) or empty (no hostname check)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(kv: &[(&str, &str)]) -> String {
        SslConfig::from_props(&props(kv), "EXTERNAL")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_pem_file_keystore_with_kafkas_defaults() {
        let c = SslConfig::from_props(
            &props(&[
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", "/etc/tls/server.pem"),
            ]),
            "SSL",
        )
        .unwrap();
        assert_eq!(
            c.keystore,
            Some(Keystore::File(PemSource::File {
                key: "ssl.keystore.location".into(),
                path: "/etc/tls/server.pem".into()
            }))
        );
        assert_eq!(c.client_auth, ClientAuth::None);
        assert_eq!(
            c.enabled_protocols,
            vec![TlsVersion::Tls12, TlsVersion::Tls13]
        );
        let subject = "CN=alice,O=acme";
        assert_eq!(
            c.principal_mapper.name(subject).unwrap(),
            subject,
            "DEFAULT"
        );
        assert_eq!(c.truststore, None);
        assert!(c.endpoint_identification, "https by default");
    }

    #[test]
    fn an_empty_endpoint_identification_algorithm_turns_the_hostname_check_off() {
        let base = [
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
        ];
        let with = |kv: (&str, &str)| {
            let mut p = props(&base);
            p.insert(kv.0.into(), kv.1.into());
            SslConfig::from_props(&p, "EXTERNAL")
        };
        let off = with((
            "listener.name.external.ssl.endpoint.identification.algorithm",
            "",
        ));
        assert!(!off.unwrap().endpoint_identification);
        let on = with(("ssl.endpoint.identification.algorithm", "HTTPS"));
        assert!(on.unwrap().endpoint_identification);
        let e = with(("ssl.endpoint.identification.algorithm", "ldaps"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("configuration ssl.endpoint.identification.algorithm:"),
            "{e}"
        );
    }

    #[test]
    fn listener_prefixed_keys_win_over_the_plain_ones() {
        let c = SslConfig::from_props(
            &props(&[
                ("ssl.keystore.type", "JKS"),
                ("ssl.keystore.location", "/plain.jks"),
                ("listener.name.external.ssl.keystore.type", "PEM"),
                ("listener.name.external.ssl.keystore.location", "/ext.pem"),
                ("ssl.truststore.type", "PEM"),
                ("ssl.truststore.certificates", "-----BEGIN CERTIFICATE-----"),
                ("listener.name.external.ssl.client.auth", "required"),
            ]),
            "EXTERNAL",
        )
        .unwrap();
        let Some(Keystore::File(PemSource::File { key, path })) = c.keystore else {
            panic!("{:?}", c.keystore);
        };
        assert_eq!(key, "listener.name.external.ssl.keystore.location");
        assert_eq!(path, PathBuf::from("/ext.pem"));
        assert_eq!(c.client_auth, ClientAuth::Required);
        assert!(matches!(c.truststore, Some(PemSource::Inline { .. })));
    }

    #[test]
    fn bad_values_are_refused_by_key() {
        let pem = ("ssl.keystore.type", "PEM");
        let file = ("ssl.keystore.location", "/k.pem");
        for (kv, key, words) in [
            (vec![file], "ssl.keystore.type", "only PEM"),
            (
                vec![("ssl.keystore.type", "PKCS12"), file],
                "ssl.keystore.type",
                "only PEM",
            ),
            (vec![pem], "ssl.keystore.location", "needs a keystore"),
            (
                vec![pem, ("ssl.keystore.key", "k")],
                "ssl.keystore.key",
                "certificate.chain must be set",
            ),
            (
                vec![pem, file, ("ssl.keystore.password", "secret")],
                "ssl.keystore.password",
                "no password",
            ),
            (
                vec![pem, file, ("ssl.client.auth", "always")],
                "ssl.client.auth",
                "none, requested, required",
            ),
            (
                vec![pem, file, ("ssl.client.auth", "required")],
                "ssl.truststore.location",
                "needs a truststore",
            ),
            (
                vec![pem, file, ("ssl.enabled.protocols", "TLSv1.1,TLSv1.2")],
                "ssl.enabled.protocols",
                "TLSv1.1 is not supported",
            ),
            (
                vec![pem, file, ("ssl.principal.mapping.rules", "default")],
                "ssl.principal.mapping.rules",
                "Invalid rule",
            ),
            (
                vec![pem, file, ("ssl.truststore.location", "/t.jks")],
                "ssl.truststore.type",
                "only PEM",
            ),
        ] {
            let e = err(&kv);
            assert!(
                e.contains(&format!("configuration {key}:")) && e.contains(words),
                "{kv:?}: {e}"
            );
        }
    }

    #[test]
    fn secrets_are_not_printed_in_errors() {
        let e = err(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
            ("ssl.keystore.password", "hunter2"),
        ]);
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_client_needs_a_truststore_and_a_keystore_only_for_mutual_tls() {
        let trust = [
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/ca.pem"),
        ];
        let c = SslConfig::for_client(&props(&trust)).unwrap();
        assert_eq!(c.keystore, None);
        assert!(matches!(c.truststore, Some(PemSource::File { .. })));
        assert!(c.endpoint_identification);
        let e = SslConfig::for_client(&props(&[])).unwrap_err().to_string();
        assert!(e.contains("configuration ssl.truststore.location:"), "{e}");
        let mut with_cert = props(&trust);
        with_cert.insert("ssl.keystore.type".into(), "PEM".into());
        with_cert.insert("ssl.keystore.location".into(), "/me.pem".into());
        with_cert.insert("ssl.endpoint.identification.algorithm".into(), "".into());
        let c = SslConfig::for_client(&with_cert).unwrap();
        assert!(matches!(c.keystore, Some(Keystore::File(_))));
        assert!(!c.endpoint_identification);
    }

    #[test]
    fn prefixed_ssl_keys_are_known() {
        assert!(is_known("ssl.keystore.location"));
        assert!(is_known("listener.name.external.ssl.client.auth"));
        assert!(!is_known("listener.name.external.ssl.no.such"));
        assert!(!is_known("ssl.no.such"));
    }
}
