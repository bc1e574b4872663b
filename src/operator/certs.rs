//! The cluster CA and the clients CA of a KafkaCluster, and the certificates they sign,
//! Strimzi's way: each CA is a certificate Secret (`<cluster>-cluster-ca-cert`,
//! `<cluster>-clients-ca-cert`, key `ca.crt`) and a key Secret (`<cluster>-cluster-ca`,
//! `<cluster>-clients-ca`, key `ca.key`), made once and never regenerated while they exist; the
//! brokers' certificates and keys live in `<cluster>-kafka-brokers` (`<pod>.crt`, `<pod>.key`,
//! and `<pod>.pem`: key, certificate and CA in one file, the broker's PEM keystore), the producer
//! proxy's in `<cluster>-proxy-certs`, the rebalancer sidecar's in `<cluster>-rebalancer-certs`
//! (the cluster CA signs those two as clients of the internal listener too). A server
//! certificate names every DNS name a client reaches it by, and is issued again when those
//! names change, the cluster CA no longer signs it, or it expires within `RENEWAL_DAYS`.
//! KafkaUsers' certificates (`Ca::sign_user`) come from the clients CA.
//! A CA certificate is made again with the same key (`Ca::renewed`) `RENEWAL_DAYS` before it
//! expires or when its Secret carries `FORCE_RENEW`; its generation then rolls the brokers. Its
//! key is replaced when its Secret carries `FORCE_REPLACE`, in three rolls (`replacement`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;

use super::crd::KafkaCluster;
use super::kafka::AdminConnector;
use super::resources::{self, BuildError, Names};
use super::{Context, Error, FIELD_MANAGER};

/// Days a CA made by the operator is valid (Strimzi's default, 365).
pub const CA_VALIDITY_DAYS: i64 = 365;
/// Days a broker (or proxy) certificate is valid; it is renewed `RENEWAL_DAYS` before the end.
pub const BROKER_VALIDITY_DAYS: i64 = 365;

/// A broker or user certificate that expires within this many days is issued again (Strimzi's
/// default `renewalDays`). The brokers reload their certificate files, so this needs no restart.
pub const RENEWAL_DAYS: i64 = 30;
/// Key of the CA certificate in a `*-ca-cert` Secret.
pub const CA_CERT: &str = "ca.crt";
/// Key of the CA private key in a `*-ca` Secret.
pub const CA_KEY: &str = "ca.key";
/// Key of the CA certificate as a PKCS#12 truststore in a `*-ca-cert` Secret (for Java
/// clients: `ssl.truststore.type=PKCS12`), and of its password.
pub const CA_P12: &str = "ca.p12";
pub const CA_PASSWORD: &str = "ca.password";
/// Length of the passwords the operator generates (SCRAM users', keystores'): alphanumeric,
/// about 190 bits.
const PASSWORD_LEN: usize = 32;
/// Annotation of a `*-ca-cert` Secret: how many times its certificate was renewed (Strimzi's
/// `ca-cert-generation`). The brokers' pod template carries it (`generation_annotation`), so a
/// renewal rolls them.
pub const CA_CERT_GENERATION: &str = "kafka.evenkeel.dev/ca-cert-generation";
/// Annotation a user puts on a `*-ca-cert` Secret to renew that CA's certificate now (Strimzi's
/// `force-renew`); the operator removes it with the renewal.
pub const FORCE_RENEW: &str = "kafka.evenkeel.dev/force-renew";
/// Organization in the subject of every certificate the operator makes.
const ORGANIZATION: &str = "evenkeel.dev";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("making {what}: {source}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("Secret {secret}: {reason}")]
    Stored { secret: String, reason: String },
    #[error("making the PKCS#12 keystore of {what}: {reason}")]
    Keystore { what: String, reason: String },
}

/// Which of a cluster's two CAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKind {
    /// Signs the brokers' certificates; clients trust it.
    Cluster,
    /// Signs client certificates (`authentication: {type: tls}`); the brokers trust it.
    Clients,
}

impl CaKind {
    fn base(self, names: &Names) -> String {
        match self {
            CaKind::Cluster => format!("{}-cluster-ca", names.cluster),
            CaKind::Clients => format!("{}-clients-ca", names.cluster),
        }
    }
    /// The Secret that holds the CA certificate (`ca.crt`).
    pub fn cert_secret(self, names: &Names) -> String {
        format!("{}-cert", self.base(names))
    }
    /// The Secret that holds the CA key (`ca.key`).
    pub fn key_secret(self, names: &Names) -> String {
        self.base(names)
    }
    /// The brokers' pod template annotation that carries this CA's certificate generation.
    pub fn generation_annotation(self) -> &'static str {
        match self {
            CaKind::Cluster => "kafka.evenkeel.dev/cluster-ca-cert-generation",
            CaKind::Clients => "kafka.evenkeel.dev/clients-ca-cert-generation",
        }
    }
}

/// A CA: the certificate that signs and its private key, in PEM, and every certificate of the
/// CA that is trusted now.
#[derive(Clone)]
pub struct Ca {
    /// The certificate whose key signs what the CA issues.
    pub cert_pem: String,
    key_pem: String,
    /// The certificates clients of this CA trust, `cert_pem` first: more than one only while
    /// the CA's key is being replaced (`replacement`).
    trusted: Vec<String>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A certificate and its private key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The Kafka principal of a certificate `Ca::sign` made for `cn`: its subject as Kafka's
/// default `ssl.principal.mapping.rules` read it (RFC 2253, the last RDN first).
pub fn principal(cn: &str) -> String {
    format!("User:CN={cn},O={ORGANIZATION}")
}

fn subject(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(DnType::CommonName, cn);
    dn
}

/// Valid from an hour ago (clock skew between nodes) for `days`.
fn validity(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// A CA certificate's parameters for subject `O=evenkeel.dev, CN=<cn>`.
fn ca_params(cn: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name = subject(cn);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, CA_VALIDITY_DAYS);
    Ok(params)
}

/// Parses a PEM certificate and hands it to `f`.
fn with_certificate<T>(
    cert_pem: &str,
    f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Result<T, String> {
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).map_err(|e| e.to_string())?;
    let cert = pem.parse_x509().map_err(|e| e.to_string())?;
    Ok(f(&cert))
}

/// The common name in a certificate's subject.
pub fn subject_cn(cert_pem: &str) -> Result<String, String> {
    with_certificate(cert_pem, |c| {
        let cn = c.subject().iter_common_name().next()?;
        cn.as_str().ok().map(str::to_string)
    })?
    .ok_or_else(|| "its certificate has no common name".to_string())
}

/// Each certificate of a PEM file, as PEM ending in a newline; anything between them is dropped.
pub fn split_certificates(pem: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let end = start + len + END.len();
        out.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    out
}

/// Whether `cert_pem` certifies `key`'s public key.
fn key_matches(cert_pem: &str, key: &KeyPair) -> bool {
    with_certificate(cert_pem, |c| {
        c.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
    })
    .unwrap_or(false)
}

/// A certificate's subject as encoded, or `None` when it cannot be read.
fn raw_subject(cert_pem: &str) -> Option<Vec<u8>> {
    with_certificate(cert_pem, |c| c.subject().as_raw().to_vec()).ok()
}

impl Ca {
    /// A new self-signed CA whose subject is `O=evenkeel.dev, CN=<cn>`.
    pub fn generate(cn: &str) -> Result<Ca, CertError> {
        let err = |source| CertError::Generate {
            what: format!("CA {cn}"),
            source,
        };
        let key = KeyPair::generate().map_err(err)?;
        let issuer = CertifiedIssuer::self_signed(ca_params(cn).map_err(err)?, key).map_err(err)?;
        Ok(Ca {
            cert_pem: issuer.pem(),
            key_pem: issuer.key().serialize_pem(),
            trusted: vec![issuer.pem()],
        })
    }

    /// A certificate for the CA key `key_pem`, self-signed with subject
    /// `O=evenkeel.dev, CN=<cn>`, valid `CA_VALIDITY_DAYS` from now.
    fn certify(cn: &str, key_pem: &str) -> Result<String, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        Ok(ca_params(cn)?.self_signed(&key)?.pem())
    }

    /// This CA's certificate made again with the same key and subject, valid
    /// `CA_VALIDITY_DAYS` from now: whatever the old certificate signed verifies under the new
    /// one, and the old one still verifies what the new one signs, so nothing is issued again
    /// and no client that trusts either is cut off. `secret` names the CA in errors.
    pub fn renewed(&self, secret: &str) -> Result<Ca, CertError> {
        let stored = |reason: String| CertError::Stored {
            secret: secret.to_string(),
            reason,
        };
        let cn = subject_cn(&self.cert_pem).map_err(stored)?;
        let err = |source| CertError::Generate {
            what: format!("the renewed CA {cn}"),
            source,
        };
        let cert_pem = Ca::certify(&cn, &self.key_pem).map_err(err)?;
        let renewed = Ca {
            cert_pem: cert_pem.clone(),
            key_pem: self.key_pem.clone(),
            trusted: vec![cert_pem],
        };
        if raw_subject(&renewed.cert_pem) != raw_subject(&self.cert_pem) {
            return Err(stored(format!(
                "its subject is not O={ORGANIZATION}, CN={cn} as this operator makes it, so a \
                 renewed certificate would not verify what it signed; renew it yourself"
            )));
        }
        Ok(renewed)
    }

    /// A CA read back from its Secrets: `certs_pem` holds one certificate or several (while
    /// the key is replaced), one of them `key_pem`'s; `secret` names them in errors.
    pub fn from_pem(certs_pem: &str, key_pem: String, secret: &str) -> Result<Ca, CertError> {
        let stored = |reason: String| CertError::Stored {
            secret: secret.to_string(),
            reason,
        };
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|e| stored(format!("its key cannot be read: {e}")))?;
        let mut trusted = split_certificates(certs_pem);
        let Some(signing) = trusted.iter().position(|c| key_matches(c, &key)) else {
            return Err(stored(format!(
                "none of its {} certificates belongs to its key",
                trusted.len()
            )));
        };
        let cert_pem = trusted.remove(signing);
        trusted.insert(0, cert_pem.clone());
        let ca = Ca {
            cert_pem,
            key_pem,
            trusted,
        };
        ca.issuer().map_err(|e| {
            stored(format!(
                "not a CA certificate and key this operator can sign with: {e}"
            ))
        })?;
        Ok(ca)
    }

    /// The certificates clients of this CA trust, the signing one first.
    pub fn trusted(&self) -> &[String] {
        &self.trusted
    }

    /// `trusted` as one PEM file (what `ca.crt` holds).
    pub fn trusted_pem(&self) -> String {
        self.trusted.concat()
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, rcgen::Error> {
        let key = KeyPair::from_pem(&self.key_pem)?;
        Issuer::from_ca_cert_pem(&self.cert_pem, key)
    }

    /// A certificate for `dns_names`, subject `O=evenkeel.dev, CN=<cn>`, for servers and clients
    /// (a broker is a client of the others).
    pub fn sign(&self, cn: &str, dns_names: &[String], days: i64) -> Result<Issued, CertError> {
        self.issue(cn, subject(cn), dns_names, days)
    }

    /// A client certificate for a KafkaUser: subject `CN=<cn>` alone, so that Kafka's default
    /// `ssl.principal.mapping.rules` make its principal `User:CN=<cn>`.
    pub fn sign_user(&self, cn: &str, days: i64) -> Result<Issued, CertError> {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        self.issue(cn, dn, &[], days)
    }

    fn issue(
        &self,
        cn: &str,
        subject: DistinguishedName,
        dns_names: &[String],
        days: i64,
    ) -> Result<Issued, CertError> {
        let err = |source| CertError::Generate {
            what: format!("certificate {cn}"),
            source,
        };
        let mut params = CertificateParams::new(dns_names.to_vec()).map_err(err)?;
        params.distinguished_name = subject;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        validity(&mut params, days);
        let key = KeyPair::generate().map_err(err)?;
        let cert = params
            .signed_by(&key, &self.issuer().map_err(err)?)
            .map_err(err)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Every DNS name a client reaches broker `ordinal` by: its pod's name under the headless
/// Service and the bootstrap Service's, each short, with the namespace, `.svc` and
/// `.svc.cluster.local`.
pub fn broker_dns_names(names: &Names, ordinal: i32) -> Vec<String> {
    let pod = format!("{}.{}", names.pod(ordinal), names.headless_service());
    let mut out = service_dns_names(&pod, &names.namespace);
    out.extend(service_dns_names(
        &names.bootstrap_service(),
        &names.namespace,
    ));
    out
}

/// `host` short, with the namespace, `.svc` and `.svc.cluster.local`.
pub fn service_dns_names(host: &str, namespace: &str) -> Vec<String> {
    vec![
        host.to_string(),
        format!("{host}.{namespace}"),
        format!("{host}.{namespace}.svc"),
        format!("{host}.{namespace}.svc.cluster.local"),
    ]
}

/// The DNS names of a PEM certificate, sorted.
pub fn dns_names(cert_pem: &str) -> Result<Vec<String>, String> {
    with_certificate(cert_pem, |cert| {
        let san = cert.subject_alternative_name().map_err(|e| e.to_string())?;
        let mut out: Vec<String> = san
            .iter()
            .flat_map(|san| san.value.general_names.iter())
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                _ => None,
            })
            .collect();
        out.sort();
        Ok(out)
    })?
}

/// Whether `cert_pem` expires within `days` (or cannot be read: then it is due too).
pub fn expires_within(cert_pem: &str, days: i64) -> bool {
    let deadline = time::OffsetDateTime::now_utc() + time::Duration::days(days);
    with_certificate(cert_pem, |c| {
        c.validity().not_after.to_datetime() <= deadline
    })
    .unwrap_or(true)
}

/// Whether `ca_pem`'s key signed `cert_pem`.
pub fn signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let verified = with_certificate(ca_pem, |ca| {
        with_certificate(cert_pem, |cert| {
            cert.verify_signature(Some(ca.public_key())).is_ok()
        })
    });
    matches!(verified, Ok(Ok(true)))
}

/// A generated password: alphanumeric, `PASSWORD_LEN` long.
pub fn new_password() -> String {
    use rand::distributions::{Alphanumeric, DistString};
    Alphanumeric.sample_string(&mut rand::thread_rng(), PASSWORD_LEN)
}

/// A PKCS#12 truststore (what Java clients load with `ssl.truststore.type=PKCS12`) holding
/// each of `certs_pem` as a trusted certificate, the first under the alias `ca.crt` and the
/// others (a CA whose key is being replaced) as `ca-1.crt`, …, protected by `password`.
pub fn truststore(certs_pem: &[String], password: &str) -> Result<Vec<u8>, CertError> {
    use p12_keystore::{Certificate, KeyStore, KeyStoreEntry};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let err = |reason: String| CertError::Keystore {
        what: "the CA truststore".to_string(),
        reason,
    };
    let mut store = KeyStore::new();
    for (i, pem) in certs_pem.iter().enumerate() {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| err(e.to_string()))?;
        let cert = Certificate::from_der(&der).map_err(|e| err(e.to_string()))?;
        let alias = match i {
            0 => CA_CERT.to_string(),
            i => format!("ca-{i}.crt"),
        };
        // Written with Java's trusted-certificate attribute: without it Java loads no entry.
        store.add_entry(&alias, KeyStoreEntry::Certificate(cert));
    }
    store
        .writer(password)
        .write()
        .map_err(|e| err(e.to_string()))
}

/// A PKCS#12 keystore (what Java clients load with `ssl.keystore.type=PKCS12`) holding
/// `issued`'s key under `alias`, with its certificate and the CA's as the chain, protected by
/// `password`: PBES2 with AES-256 and an HMAC-SHA-256 MAC, which Java reads since 8u301.
pub fn pkcs12(
    issued: &Issued,
    ca_pem: &str,
    alias: &str,
    password: &str,
) -> Result<Vec<u8>, CertError> {
    use p12_keystore::{Certificate, KeyStore, KeyStoreEntry, PrivateKeyChain};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
    let err = |reason: String| CertError::Keystore {
        what: alias.to_string(),
        reason,
    };
    let certificate = |pem: &str| {
        let der = CertificateDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| err(format!("certificate: {e}")))?;
        Certificate::from_der(&der).map_err(|e| err(format!("certificate: {e}")))
    };
    let chain = vec![certificate(&issued.cert_pem)?, certificate(ca_pem)?];
    let key = PrivatePkcs8KeyDer::from_pem_slice(issued.key_pem.as_bytes())
        .map_err(|e| err(format!("key: {e}")))?;
    // Java pairs the key with its certificate by this id; the certificate's digest is one.
    let key_id = {
        use sha2::{Digest, Sha256};
        Sha256::digest(chain[0].as_der())[..20].to_vec()
    };
    let mut store = KeyStore::new();
    let entry = PrivateKeyChain::new(key.secret_pkcs8_der(), key_id, chain);
    store.add_entry(alias, KeyStoreEntry::PrivateKeyChain(entry));
    store
        .writer(password)
        .write()
        .map_err(|e| err(e.to_string()))
}

/// Whether the spec asks for certificates: a TLS listener, or client authentication.
pub fn wants_certificates(kc: &KafkaCluster) -> bool {
    kc.spec
        .listeners
        .iter()
        .any(|l| l.tls || l.authentication.is_some())
}

/// The broker Secret's entries for `replicas` brokers: an entry of `existing` is kept while it
/// names the broker's DNS names, the cluster CA signs it and it has more than `RENEWAL_DAYS`
/// to live, else issued anew. Returns the entries and the pods whose certificate was issued.
pub fn broker_entries(
    ca: &Ca,
    names: &Names,
    replicas: i32,
    existing: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, Vec<String>), CertError> {
    let mut out = BTreeMap::new();
    let mut issued = Vec::new();
    for ordinal in 0..replicas {
        let pod = names.pod(ordinal);
        let dns = broker_dns_names(names, ordinal);
        if server_entries(ca, &names.statefulset(), &dns, &pod, existing, &mut out)? {
            issued.push(pod);
        }
    }
    Ok((out, issued))
}

/// The producer proxy's Secret entries (`proxy.crt`, `proxy.key`, `proxy.pem`), kept or issued
/// again as a broker's are, for every DNS name of the proxy's Service. True when issued.
pub fn proxy_entries(
    ca: &Ca,
    names: &Names,
    existing: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, bool), CertError> {
    let dns = service_dns_names(&names.proxy(), &names.namespace);
    entries_of(ca, &names.proxy(), &dns, PROXY_ENTRY, existing)
}

/// The file name stem of the proxy's certificate in its Secret (`proxy.pem`, …).
pub const PROXY_ENTRY: &str = "proxy";

/// The rebalancer sidecar's Secret entries (`rebalancer.crt`, `.key`, `.pem`): a client
/// certificate (no DNS name) for `<cluster>-rebalancer`, kept or issued again as a broker's are.
/// True when issued.
pub fn rebalancer_entries(
    ca: &Ca,
    names: &Names,
    existing: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, bool), CertError> {
    entries_of(ca, &names.rebalancer(), &[], REBALANCER_ENTRY, existing)
}

/// The file name stem of the rebalancer sidecar's certificate in its Secret.
pub const REBALANCER_ENTRY: &str = "rebalancer";

/// A Secret holding one certificate (`server_entries`), and whether it was issued.
fn entries_of(
    ca: &Ca,
    cn: &str,
    dns: &[String],
    stem: &str,
    existing: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, bool), CertError> {
    let mut out = BTreeMap::new();
    let issued = server_entries(ca, cn, dns, stem, existing, &mut out)?;
    Ok((out, issued))
}

/// Puts `<stem>.crt`, `<stem>.key` and `<stem>.pem` (key, certificate and CA: a PEM keystore)
/// into `out`: those of `existing` while the certificate names exactly `dns` (none for a
/// client-only certificate), `ca` signs it and
/// it has more than `RENEWAL_DAYS` to live, else a new certificate for `cn`. True when issued.
fn server_entries(
    ca: &Ca,
    cn: &str,
    dns: &[String],
    stem: &str,
    existing: &BTreeMap<String, String>,
    out: &mut BTreeMap<String, String>,
) -> Result<bool, CertError> {
    let (crt, key) = (format!("{stem}.crt"), format!("{stem}.key"));
    let kept = match (existing.get(&crt), existing.get(&key)) {
        (Some(c), Some(k)) => {
            let mut wanted = dns.to_vec();
            wanted.sort();
            let current = dns_names(c).is_ok_and(|n| n == wanted);
            let due = expires_within(c, RENEWAL_DAYS);
            (current && signed_by(c, &ca.cert_pem) && !due).then(|| (c.clone(), k.clone()))
        }
        _ => None,
    };
    let issued = kept.is_none();
    let (c, k) = match kept {
        Some(pair) => pair,
        None => {
            let cert = ca.sign(cn, dns, BROKER_VALIDITY_DAYS)?;
            (cert.cert_pem, cert.key_pem)
        }
    };
    out.insert(format!("{stem}.pem"), format!("{k}{c}{}", ca.cert_pem));
    out.insert(crt, c);
    out.insert(key, k);
    Ok(issued)
}

/// A Secret's entries as text; an entry that is not UTF-8 is left out.
pub fn secret_text(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)))
        .collect()
}

/// A Secret of the cluster (`type: Opaque`, the cluster's labels and owner) holding `entries`.
pub fn secret(
    kc: &KafkaCluster,
    name: String,
    entries: BTreeMap<String, String>,
) -> Result<Secret, BuildError> {
    let mut s: Secret = resources::owned_object(kc, "v1", "Secret", name)?;
    set_entries(&mut s, entries);
    Ok(s)
}

/// Adds a binary entry (a keystore) to `s`.
pub fn set_binary_entry(s: &mut Secret, key: &str, value: Vec<u8>) {
    s.data
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), ByteString(value));
}

/// Makes `s` an Opaque Secret holding exactly `entries` (text).
pub fn set_entries(s: &mut Secret, entries: BTreeMap<String, String>) {
    s.type_ = Some("Opaque".into());
    s.data = Some(
        entries
            .into_iter()
            .map(|(k, v)| (k, ByteString(v.into_bytes())))
            .collect(),
    );
}

/// What `reconcile` leaves for the rest of the pass: the cluster CA's certificate (for the
/// status) and the CA generations the brokers' pod template carries.
#[derive(Debug, Default)]
pub struct Cas {
    /// The cluster CA's certificates clients trust (two while its key is replaced); none when
    /// the spec secures nothing.
    pub cluster_ca: Vec<String>,
    /// `(pod template annotation, generation)` of each CA renewed at least once; a CA never
    /// renewed adds nothing, so clusters made before renewal existed do not roll for it.
    pub generations: Vec<(&'static str, u64)>,
}

/// The certificates step of a KafkaCluster pass: when the spec secures a listener, both CAs
/// (made once, renewed when due), the broker Secret for `replicas` brokers and the rebalancer
/// sidecar's Secret; the producer proxy's Secret when the proxy serves HTTPS or reaches a
/// secured cluster.
pub async fn reconcile<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    names: &Names,
    replicas: i32,
    rollout: &Rollout,
) -> Result<Cas, Error> {
    let secured = resources::has_internal_listener(kc);
    let proxy_certificate = resources::proxy_tls(kc) || (secured && resources::wants_proxy(kc));
    if !secured && !proxy_certificate {
        return Ok(Cas::default());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let result = async {
        let mut cas = Cas::default();
        let (cluster_ca, generation) =
            ensure_ca(ctx, &api, kc, names, CaKind::Cluster, rollout).await?;
        if secured {
            cas.add_generation(CaKind::Cluster, generation);
            let (_, generation) = ensure_ca(ctx, &api, kc, names, CaKind::Clients, rollout).await?;
            cas.add_generation(CaKind::Clients, generation);
            let name = names.broker_secret();
            let existing = stored_entries(&api, &name).await?;
            let (entries, issued) = broker_entries(&cluster_ca, names, replicas, &existing)?;
            let note = format!("issued broker certificates for {}", issued.join(", "));
            let note = (!issued.is_empty()).then_some(note);
            apply_entries(ctx, &api, kc, name, existing, entries, note).await?;
        }
        if secured && kc.spec.rebalancer.enabled {
            let name = names.rebalancer_secret();
            let existing = stored_entries(&api, &name).await?;
            let (entries, issued) = rebalancer_entries(&cluster_ca, names, &existing)?;
            let note = issued.then(|| "issued the rebalancer sidecar's certificate".to_string());
            apply_entries(ctx, &api, kc, name, existing, entries, note).await?;
        }
        if proxy_certificate {
            let name = names.proxy_secret();
            let existing = stored_entries(&api, &name).await?;
            let (entries, issued) = proxy_entries(&cluster_ca, names, &existing)?;
            let note = issued.then(|| "issued the producer proxy's certificate".to_string());
            apply_entries(ctx, &api, kc, name, existing, entries, note).await?;
        }
        cas.cluster_ca = cluster_ca.trusted().to_vec();
        Ok(cas)
    }
    .await;
    if let Err(Error::Certs(e @ CertError::Stored { .. })) = &result {
        // Only a person can repair a CA's Secrets: say so where they look.
        let note = e.to_string();
        ctx.event(kc, EventType::Warning, "CaUnusable", &note).await;
    }
    result
}

impl Cas {
    fn add_generation(&mut self, kind: CaKind, generation: u64) {
        if generation > 0 {
            self.generations
                .push((kind.generation_annotation(), generation));
        }
    }
}

/// The CA of `kind`: read from its two Secrets (its key replacement carried a step on when
/// asked for and the brokers have rolled, else renewed when due), or made and stored when
/// neither exists; returned with its certificate's generation. One Secret without the other is
/// an error: a new CA would change every certificate it signed. `rollout`: the brokers' pods
/// (a cluster that secures only the proxy has none to wait for).
async fn ensure_ca<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    names: &Names,
    kind: CaKind,
    rollout: &Rollout,
) -> Result<(Ca, u64), Error> {
    let secured = resources::has_internal_listener(kc);
    let (cert_name, key_name) = (kind.cert_secret(names), kind.key_secret(names));
    match ca_secrets(api, names, kind).await? {
        (Some(cert), Some(key)) => {
            let ca = stored_ca(&cert, &key, &cert_name, &key_name)?;
            let generation = generation_of(&cert);
            let stored = replacement::Stored {
                kind,
                cert: &cert,
                key: &key,
                cert_name: &cert_name,
                key_name: &key_name,
                ca: &ca,
                generation,
            };
            let mut rolled =
                !secured || rollout.rolled_to(kind.generation_annotation(), generation);
            if rolled && kind == CaKind::Clients && ca.trusted().len() > 1 {
                // The old clients certificate stays trusted until every KafkaUser holds one
                // from the key that signs now.
                rolled = replacement::users_signed_by(ctx, api, names, &ca).await?;
            }
            if let Some(replacing) = replacement::advance(ctx, api, kc, stored, rolled).await? {
                return Ok(replacing);
            }
            let password = secret_text(&cert).remove(CA_PASSWORD);
            let Some(why) = renewal_reason(&cert, &ca) else {
                // A Secret an earlier operator made gains the truststore.
                let has_truststore = cert.data.as_ref().is_some_and(|d| d.contains_key(CA_P12));
                if !has_truststore {
                    store_ca_cert(api, &cert_name, &ca, password, None).await?;
                }
                return Ok((ca, generation));
            };
            // A CA that cannot be renewed stays in use (a Warning each pass) rather than
            // stopping the rest of the cluster's reconcile.
            let renewal = Renewal {
                generation,
                why,
                password,
            };
            match renew_ca(ctx, api, kc, &cert_name, &ca, renewal).await {
                Ok(renewed) => Ok((renewed, generation + 1)),
                Err(Error::Certs(e)) => {
                    let note = format!("cannot renew: {e}");
                    ctx.event(kc, EventType::Warning, "CaRenewalFailed", &note)
                        .await;
                    Ok((ca, generation))
                }
                Err(e) => Err(e),
            }
        }
        (None, None) => {
            let ca = Ca::generate(&kind.key_secret(names))?;
            let pp = PostParams::default();
            let key_secret = secret(kc, key_name, entry(CA_KEY, &ca.key_pem))?;
            api.create(&pp, &key_secret).await?;
            let mut cert_secret = secret(kc, cert_name.clone(), BTreeMap::new())?;
            cert_secret.data = Some(ca_cert_data(&ca, &new_password())?);
            api.create(&pp, &cert_secret).await?;
            let note = format!("made the CA {cert_name}");
            ctx.event(kc, EventType::Normal, "CaCreated", &note).await;
            Ok((ca, 0))
        }
        (cert, _) => {
            let (present, missing) = match cert {
                Some(_) => (cert_name, key_name),
                None => (key_name, cert_name),
            };
            Err(CertError::Stored {
                secret: missing,
                reason: format!(
                    "missing while {present} exists: restore it, or delete both to make a new \
                     CA (every certificate it signed changes)"
                ),
            }
            .into())
        }
    }
}

/// The generation a `*-ca-cert` Secret records (0: never renewed).
fn generation_of(cert: &Secret) -> u64 {
    cert.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CA_CERT_GENERATION)?.parse().ok())
        .unwrap_or(0)
}

/// Why a CA's certificate is renewed now, if it is: a user asked (`FORCE_RENEW` on its
/// Secret), or it expires within `RENEWAL_DAYS`.
fn renewal_reason(cert: &Secret, ca: &Ca) -> Option<String> {
    let asked = cert
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(FORCE_RENEW));
    if asked {
        Some(format!("asked for with the annotation {FORCE_RENEW}"))
    } else if expires_within(&ca.cert_pem, RENEWAL_DAYS) {
        Some(format!("it expires within {RENEWAL_DAYS} days"))
    } else {
        None
    }
}

/// Why and from which generation a CA's certificate is renewed, and its truststore's password.
struct Renewal {
    generation: u64,
    why: String,
    password: Option<String>,
}

/// Stores `ca`'s renewed certificate in its Secret `name` with the next generation (and
/// without `FORCE_RENEW`); returns the renewed CA.
async fn renew_ca<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    name: &str,
    ca: &Ca,
    renewal: Renewal,
) -> Result<Ca, Error> {
    let renewed = ca.renewed(name)?;
    let next = renewal.generation + 1;
    let annotations = serde_json::json!({FORCE_RENEW: null});
    store_ca_cert(
        api,
        name,
        &renewed,
        renewal.password,
        Some((next, annotations)),
    )
    .await?;
    let note = format!(
        "renewed the CA certificate {name} with the same key ({}): generation {next}; the \
         brokers roll to load it",
        renewal.why
    );
    ctx.event(kc, EventType::Normal, "CaRenewed", &note).await;
    Ok(renewed)
}

/// Writes `ca`'s trusted certificates and truststore into its Secret `name` (the truststore's
/// `password`, or a new one); with `generation`, records it and sets the annotations given
/// with it (a null removes one).
async fn store_ca_cert(
    api: &Api<Secret>,
    name: &str,
    ca: &Ca,
    password: Option<String>,
    generation: Option<(u64, serde_json::Value)>,
) -> Result<(), Error> {
    let password = password.unwrap_or_else(new_password);
    let mut patch = serde_json::json!({"data": ca_cert_data(ca, &password)?});
    if let Some((next, mut annotations)) = generation {
        annotations[CA_CERT_GENERATION] = next.to_string().into();
        patch["metadata"] = serde_json::json!({"annotations": annotations});
    }
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The entries of a `*-ca-cert` Secret, Strimzi's: the certificate (`ca.crt`) and, for Java
/// clients, a PKCS#12 truststore of it (`ca.p12`) and that truststore's password
/// (`ca.password`).
fn ca_cert_data(ca: &Ca, password: &str) -> Result<BTreeMap<String, ByteString>, CertError> {
    let p12 = truststore(ca.trusted(), password)?;
    Ok(BTreeMap::from([
        (
            CA_CERT.to_string(),
            ByteString(ca.trusted_pem().into_bytes()),
        ),
        (CA_P12.to_string(), ByteString(p12)),
        (
            CA_PASSWORD.to_string(),
            ByteString(password.as_bytes().to_vec()),
        ),
    ]))
}

/// The cluster's CA of `kind`, read from its Secrets; `None` while either is missing (the
/// cluster secures nothing yet, or its operator pass has not made them).
pub async fn stored_ca_of(
    api: &Api<Secret>,
    names: &Names,
    kind: CaKind,
) -> Result<Option<Ca>, Error> {
    let (Some(cert), Some(key)) = ca_secrets(api, names, kind).await? else {
        return Ok(None);
    };
    let (cert_name, key_name) = (kind.cert_secret(names), kind.key_secret(names));
    Ok(Some(stored_ca(&cert, &key, &cert_name, &key_name)?))
}

/// The certificate Secret and the key Secret of the CA of `kind`, each if it exists.
async fn ca_secrets(
    api: &Api<Secret>,
    names: &Names,
    kind: CaKind,
) -> Result<(Option<Secret>, Option<Secret>), Error> {
    let cert = api.get_opt(&kind.cert_secret(names)).await?;
    let key = api.get_opt(&kind.key_secret(names)).await?;
    Ok((cert, key))
}

fn entry(key: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_string(), value.to_string())])
}

/// A CA from its certificate Secret and key Secret.
fn stored_ca(
    cert: &Secret,
    key: &Secret,
    cert_name: &str,
    key_name: &str,
) -> Result<Ca, CertError> {
    let field = |s: &Secret, name: &str, k: &str| {
        secret_text(s).remove(k).ok_or_else(|| CertError::Stored {
            secret: name.to_string(),
            reason: format!("has no {k}"),
        })
    };
    Ca::from_pem(
        &field(cert, cert_name, CA_CERT)?,
        field(key, key_name, CA_KEY)?,
        cert_name,
    )
}

/// The text entries of Secret `name`, none when it does not exist.
async fn stored_entries(api: &Api<Secret>, name: &str) -> Result<BTreeMap<String, String>, Error> {
    Ok(api
        .get_opt(name)
        .await?
        .map(|s| secret_text(&s))
        .unwrap_or_default())
}

/// Applies Secret `name` of the cluster when its entries differ from `existing`; `issued`, when
/// a certificate was issued, becomes a `CertificatesIssued` event.
async fn apply_entries<C: AdminConnector>(
    ctx: &Context<C>,
    api: &Api<Secret>,
    kc: &KafkaCluster,
    name: String,
    existing: BTreeMap<String, String>,
    entries: BTreeMap<String, String>,
    issued: Option<String>,
) -> Result<(), Error> {
    if entries == existing {
        return Ok(());
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let s = secret(kc, name.clone(), entries)?;
    api.patch(&name, &pp, &Patch::Apply(&s)).await?;
    if let Some(note) = issued {
        ctx.event(kc, EventType::Normal, "CertificatesIssued", &note)
            .await;
    }
    Ok(())
}

mod replacement;
pub use replacement::{Rollout, FORCE_REPLACE, REPLACEMENT};

#[cfg(test)]
mod tests;
