//! Unit tests of `certs`: CAs, broker certificates and the names they carry, reuse of what is
//! stored, the Secrets' shape.

use super::*;
use crate::operator::crd::KafkaClusterSpec;

fn names() -> Names {
    Names {
        cluster: "main".into(),
        namespace: "streams".into(),
    }
}

fn cluster(spec: &str) -> KafkaCluster {
    let spec: KafkaClusterSpec = serde_yaml::from_str(spec).expect("spec parses");
    let mut kc = KafkaCluster::new("main", spec);
    kc.metadata.namespace = Some("streams".into());
    kc.metadata.uid = Some("0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b".into());
    kc
}

#[test]
fn a_broker_certificate_names_every_host_a_client_uses_and_the_ca_signs_it() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (entries, issued) = broker_entries(&ca, &names(), 2, &BTreeMap::new()).unwrap();
    assert_eq!(issued, ["main-kafka-0", "main-kafka-1"]);
    let cert = &entries["main-kafka-1.crt"];
    let mut want = vec![
        "main-kafka-1.main-kafka-brokers",
        "main-kafka-1.main-kafka-brokers.streams",
        "main-kafka-1.main-kafka-brokers.streams.svc",
        "main-kafka-1.main-kafka-brokers.streams.svc.cluster.local",
        "main-kafka-bootstrap",
        "main-kafka-bootstrap.streams",
        "main-kafka-bootstrap.streams.svc",
        "main-kafka-bootstrap.streams.svc.cluster.local",
    ];
    want.sort();
    assert_eq!(dns_names(cert).unwrap(), want);
    assert!(signed_by(cert, &ca.cert_pem));
    let other = Ca::generate("other").unwrap();
    assert!(!signed_by(cert, &other.cert_pem));
    // The keystore file: the key, the certificate, then the CA.
    let pem = &entries["main-kafka-1.pem"];
    assert!(pem.starts_with(&entries["main-kafka-1.key"]), "{pem}");
    assert!(pem.ends_with(&ca.cert_pem));
    assert!(pem.contains(cert.as_str()));
    assert_eq!(entries.len(), 6);
}

#[test]
fn the_broker_keystore_is_one_the_tls_listener_loads() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (entries, _) = broker_entries(&ca, &names(), 1, &BTreeMap::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("main-kafka-0.pem");
    std::fs::write(&path, &entries["main-kafka-0.pem"]).unwrap();
    let config = crate::security::tls::test_pki::ssl_config(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", path.to_str().unwrap()),
    ]);
    let server = crate::security::tls::TlsServer::new(config);
    assert!(server.is_ok(), "{:?}", server.err());
}

#[test]
fn stored_certificates_are_kept_and_a_new_broker_gets_one() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (first, _) = broker_entries(&ca, &names(), 2, &BTreeMap::new()).unwrap();
    let (again, issued) = broker_entries(&ca, &names(), 2, &first).unwrap();
    assert!(issued.is_empty());
    assert_eq!(again, first);
    let (scaled, issued) = broker_entries(&ca, &names(), 3, &first).unwrap();
    assert_eq!(issued, ["main-kafka-2"]);
    assert_eq!(scaled["main-kafka-0.crt"], first["main-kafka-0.crt"]);
    let (down, issued) = broker_entries(&ca, &names(), 1, &scaled).unwrap();
    assert!(issued.is_empty());
    assert_eq!(down.len(), 3);
}

#[test]
fn a_certificate_with_other_names_or_another_ca_is_issued_again() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (mut stored, _) = broker_entries(&ca, &names(), 2, &BTreeMap::new()).unwrap();
    let wrong = ca
        .sign("main-kafka", &["elsewhere".to_string()], 1)
        .unwrap();
    stored.insert("main-kafka-0.crt".into(), wrong.cert_pem);
    let (_, issued) = broker_entries(&ca, &names(), 2, &stored).unwrap();
    assert_eq!(issued, ["main-kafka-0"]);
    let new_ca = Ca::generate("main-cluster-ca").unwrap();
    let (fresh, issued) = broker_entries(&new_ca, &names(), 2, &stored).unwrap();
    assert_eq!(issued, ["main-kafka-0", "main-kafka-1"]);
    assert!(signed_by(&fresh["main-kafka-1.crt"], &new_ca.cert_pem));
}

#[test]
fn a_certificate_near_its_end_is_renewed_and_one_with_time_left_is_kept() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (mut stored, _) = broker_entries(&ca, &names(), 2, &BTreeMap::new()).unwrap();
    let dns = broker_dns_names(&names(), 1);
    let ending = ca.sign("main-kafka", &dns, RENEWAL_DAYS - 1).unwrap();
    stored.insert("main-kafka-1.crt".into(), ending.cert_pem);
    stored.insert("main-kafka-1.key".into(), ending.key_pem);
    let lasting = ca.sign(
        "main-kafka",
        &broker_dns_names(&names(), 0),
        RENEWAL_DAYS + 5,
    );
    let lasting = lasting.unwrap();
    stored.insert("main-kafka-0.crt".into(), lasting.cert_pem.clone());
    stored.insert("main-kafka-0.key".into(), lasting.key_pem);
    let (renewed, issued) = broker_entries(&ca, &names(), 2, &stored).unwrap();
    assert_eq!(issued, ["main-kafka-1"]);
    assert_eq!(renewed["main-kafka-0.crt"], lasting.cert_pem);
    assert!(!expires_within(&renewed["main-kafka-1.crt"], RENEWAL_DAYS));
    assert!(expires_within(
        &renewed["main-kafka-1.crt"],
        BROKER_VALIDITY_DAYS + 1
    ));
    assert!(expires_within("not a certificate", 1));
}

#[test]
fn the_proxy_certificate_names_its_service_and_is_kept_until_due() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (entries, issued) = proxy_entries(&ca, &names(), &BTreeMap::new()).unwrap();
    assert!(issued);
    let cert = &entries["proxy.crt"];
    assert!(signed_by(cert, &ca.cert_pem));
    let mut want = service_dns_names("main-proxy", &names().namespace);
    want.sort();
    assert_eq!(dns_names(cert).unwrap(), want);
    assert!(want.contains(&format!("main-proxy.{}.svc", names().namespace)));
    assert!(entries["proxy.pem"].starts_with(&entries["proxy.key"]));
    let (again, issued) = proxy_entries(&ca, &names(), &entries).unwrap();
    assert!(!issued);
    assert_eq!(again, entries);
}

#[test]
fn a_stored_ca_is_read_back_and_signs() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let back = Ca::from_pem(&ca.cert_pem, ca.key_pem.clone(), "s").unwrap();
    let leaf = back.sign("x", &["x.example".to_string()], 1).unwrap();
    assert!(signed_by(&leaf.cert_pem, &ca.cert_pem));
    let err = Ca::from_pem("junk", ca.key_pem.clone(), "main-cluster-ca-cert")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("Secret main-cluster-ca-cert: "), "{err}");
}

#[test]
fn secrets_carry_the_clusters_owner_and_strimzis_names() {
    let kc = cluster("replicas: 1");
    let n = names();
    assert_eq!(CaKind::Cluster.cert_secret(&n), "main-cluster-ca-cert");
    assert_eq!(CaKind::Cluster.key_secret(&n), "main-cluster-ca");
    assert_eq!(CaKind::Clients.cert_secret(&n), "main-clients-ca-cert");
    assert_eq!(CaKind::Clients.key_secret(&n), "main-clients-ca");
    assert_eq!(n.broker_secret(), "main-kafka-brokers");
    let s = secret(&kc, "main-cluster-ca".into(), entry(CA_KEY, "k")).unwrap();
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "KafkaCluster");
    assert_eq!(owner.controller, Some(true));
    assert_eq!(secret_text(&s)["ca.key"], "k");
}

#[test]
fn only_a_secured_spec_wants_certificates() {
    assert!(!wants_certificates(&cluster("replicas: 1")));
    let tls = cluster("replicas: 1\nlisteners:\n- {name: a, port: 9094, tls: true}\n");
    assert!(wants_certificates(&tls));
    let scram = cluster(
        "replicas: 1\nlisteners:\n- {name: a, port: 9094, authentication: {type: scram-sha-512}}\n",
    );
    assert!(wants_certificates(&scram));
}

/// `issued` as a client certificate of the TLS tests.
fn leaf(issued: Issued) -> crate::security::tls::test_pki::Leaf {
    use rustls::pki_types::pem::PemObject;
    let der =
        rustls::pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
    crate::security::tls::test_pki::Leaf {
        cert: issued.cert_pem,
        key: issued.key_pem,
        der,
    }
}

/// A TLS listener as an `authentication: {type: tls}` one gets (resources::security_properties):
/// the PEM keystore `keystore_pem`, client certificates required and checked against
/// `trusted_pem`. Its files are written into `dir`.
fn mtls_server(
    dir: &std::path::Path,
    keystore_pem: &str,
    trusted_pem: &str,
) -> crate::security::tls::TlsServer {
    use crate::security::tls::test_pki::ssl_config;
    let keystore = dir.join("main-kafka-0.pem");
    std::fs::write(&keystore, keystore_pem).unwrap();
    let truststore = dir.join("ca.crt");
    std::fs::write(&truststore, trusted_pem).unwrap();
    crate::security::tls::TlsServer::new(ssl_config(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.to_str().unwrap()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", truststore.to_str().unwrap()),
        ("ssl.client.auth", "required"),
    ]))
    .unwrap()
}

#[tokio::test]
async fn clients_trusting_the_cluster_ca_reach_a_broker_by_every_name_with_a_clients_ca_certificate(
) {
    use crate::security::tls::test_pki::handshake_as;
    let cluster_ca = Ca::generate("main-cluster-ca").unwrap();
    let clients_ca = Ca::generate("main-clients-ca").unwrap();
    let (entries, _) = broker_entries(&cluster_ca, &names(), 1, &BTreeMap::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = mtls_server(
        dir.path(),
        &entries["main-kafka-0.pem"],
        &clients_ca.cert_pem,
    );
    let alice = leaf(clients_ca.sign("alice", &[], 1).unwrap());
    for name in broker_dns_names(&names(), 0) {
        let (_, principal) = handshake_as(&server, &cluster_ca.cert_pem, Some(&alice), &name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(principal.contains("CN=alice"), "{principal}");
    }
    let err = handshake_as(
        &server,
        &cluster_ca.cert_pem,
        Some(&alice),
        "main-kafka-1.main-kafka-brokers",
    )
    .await
    .unwrap_err();
    assert!(err.contains("certificate"), "another broker's name: {err}");
    // A certificate from the cluster CA is not a client's: the brokers trust only the clients CA.
    let mallory = leaf(cluster_ca.sign("mallory", &[], 1).unwrap());
    let refused = handshake_as(
        &server,
        &cluster_ca.cert_pem,
        Some(&mallory),
        "main-kafka-bootstrap",
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn a_user_keystore_holds_the_key_and_the_chain_and_opens_only_with_its_password() {
    use p12_keystore::{KeyStore, KeyStoreEntry};
    use rustls::pki_types::pem::PemObject;
    let ca = Ca::generate("main-clients-ca").unwrap();
    let issued = ca.sign_user("carol", 30).unwrap();
    let p12 = pkcs12(&issued, &ca.cert_pem, "carol", "s3cret").unwrap();
    assert!(KeyStore::from_pkcs12(&p12, "wrong").is_err());
    let store = KeyStore::from_pkcs12(&p12, "s3cret").unwrap();
    assert_eq!(store.entries_count(), 1);
    let Some(KeyStoreEntry::PrivateKeyChain(chain)) = store.entry("carol") else {
        panic!("no key entry named carol: {store:?}");
    };
    let der = |pem: &str| {
        rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    };
    let certs: Vec<Vec<u8>> = chain.chain().iter().map(|c| c.as_der().to_vec()).collect();
    assert_eq!(certs, [der(&issued.cert_pem), der(&ca.cert_pem)]);
    let key =
        rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
    assert_eq!(chain.key(), key.secret_pkcs8_der());
}

/// A renewed CA certificate replaces the old one without a gap: a broker certificate the old
/// one signed is trusted by clients that hold only the new one, and a server that still holds
/// the old one accepts a client certificate signed after the renewal.
#[tokio::test]
async fn a_renewed_ca_keeps_its_key_and_both_certificates_verify_either_side() {
    use crate::security::tls::test_pki::handshake_as;
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (entries, _) = broker_entries(&ca, &names(), 1, &BTreeMap::new()).unwrap();
    let renewed = ca.renewed("main-cluster-ca-cert").unwrap();
    assert_ne!(renewed.cert_pem, ca.cert_pem);
    assert_eq!(renewed.key_pem, ca.key_pem);
    assert_eq!(raw_subject(&renewed.cert_pem), raw_subject(&ca.cert_pem));
    let not_after = |pem: &str| with_certificate(pem, |c| c.validity().not_after).unwrap();
    assert!(not_after(&renewed.cert_pem) >= not_after(&ca.cert_pem));
    assert!(signed_by(&entries["main-kafka-0.crt"], &renewed.cert_pem));

    let dir = tempfile::tempdir().unwrap();
    let server = mtls_server(dir.path(), &entries["main-kafka-0.pem"], &ca.cert_pem);
    let client = leaf(renewed.sign("main-rebalancer", &[], 1).unwrap());
    let (_, principal) = handshake_as(
        &server,
        &renewed.cert_pem,
        Some(&client),
        "main-kafka-bootstrap",
    )
    .await
    .unwrap();
    assert!(principal.contains("CN=main-rebalancer"), "{principal}");
    // Another CA of the same name is not the same CA.
    let impostor = Ca::generate("main-cluster-ca").unwrap();
    let refused = handshake_as(
        &server,
        &impostor.cert_pem,
        Some(&client),
        "main-kafka-bootstrap",
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn a_ca_renewal_is_due_when_asked_for_or_near_its_end_and_counts_generations() {
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let mut secret = Secret::default();
    assert_eq!(generation_of(&secret), 0);
    assert_eq!(renewal_reason(&secret, &ca), None);
    secret.metadata.annotations = Some(BTreeMap::from([
        (FORCE_RENEW.to_string(), "true".to_string()),
        (CA_CERT_GENERATION.to_string(), "4".to_string()),
    ]));
    assert_eq!(generation_of(&secret), 4);
    assert!(renewal_reason(&secret, &ca).unwrap().contains(FORCE_RENEW));
    // A CA with fewer than RENEWAL_DAYS left, as a stored one would be after 11 months.
    let key = KeyPair::generate().unwrap();
    let mut params = ca_params("main-cluster-ca").unwrap();
    params.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(RENEWAL_DAYS - 1);
    let cert = params.self_signed(&key).unwrap();
    let old = Ca::from_pem(&cert.pem(), key.serialize_pem(), "main-cluster-ca-cert").unwrap();
    let why = renewal_reason(&Secret::default(), &old).unwrap();
    assert!(why.contains("expires within 30 days"), "{why}");
    assert_eq!(
        renewal_reason(&Secret::default(), &old.renewed("x").unwrap()),
        None
    );
}

#[test]
fn a_ca_of_another_subject_is_not_renewed() {
    let key = KeyPair::generate().unwrap();
    let mut params = ca_params("main-cluster-ca").unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "main-cluster-ca");
    dn.push(DnType::OrganizationalUnitName, "platform");
    params.distinguished_name = dn;
    let cert = params.self_signed(&key).unwrap();
    let theirs = Ca::from_pem(&cert.pem(), key.serialize_pem(), "main-cluster-ca-cert").unwrap();
    let err = theirs
        .renewed("main-cluster-ca-cert")
        .unwrap_err()
        .to_string();
    assert!(err.contains("renew it yourself"), "{err}");
}

#[test]
fn the_ca_truststore_holds_the_certificate_as_trusted_and_opens_only_with_its_password() {
    use p12_keystore::{KeyStore, KeyStoreEntry};
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let password = new_password();
    assert_eq!(password.len(), 32);
    let data = ca_cert_data(&ca, &password).unwrap();
    assert_eq!(data[CA_CERT].0, ca.cert_pem.as_bytes());
    assert_eq!(data[CA_PASSWORD].0, password.as_bytes());
    let store = KeyStore::from_pkcs12(&data[CA_P12].0, &password).unwrap();
    let entries: Vec<_> = store.entries().collect();
    assert_eq!(entries.len(), 1);
    let (alias, entry) = entries[0];
    assert_eq!(alias, "ca.crt");
    let KeyStoreEntry::Certificate(cert) = entry else {
        panic!("not a trusted certificate entry");
    };
    let der = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes())
        .unwrap()
        .1
        .contents;
    assert_eq!(cert.as_der(), der.as_slice());
    assert!(KeyStore::from_pkcs12(&data[CA_P12].0, "not-the-password").is_err());
}

/// A key replacement's three steps against a real TLS listener: while both certificates are
/// trusted, brokers and clients signed by either key reach each other; once only the new one
/// is, what the old key signed is refused.
#[tokio::test]
async fn during_a_key_replacement_either_key_is_trusted_and_after_it_only_the_new_one() {
    use crate::security::tls::test_pki::handshake_as;
    let old = Ca::generate("main-cluster-ca").unwrap();
    let new = Ca::generate("main-cluster-ca v1").unwrap();
    let bundle = format!("{}{}", old.cert_pem, new.cert_pem);
    // Step 1: the old key signs, both are trusted.
    let trusting = Ca::from_pem(&bundle, old.key_pem.clone(), "s").unwrap();
    // Step 2: the new key signs, both are trusted.
    let signing = Ca::from_pem(&bundle, new.key_pem.clone(), "s").unwrap();
    let host = "main-kafka-bootstrap";
    let dir = tempfile::tempdir().unwrap();
    for (server_ca, client_ca) in [(&trusting, &signing), (&signing, &trusting)] {
        let (entries, _) = broker_entries(server_ca, &names(), 1, &BTreeMap::new()).unwrap();
        let server = mtls_server(dir.path(), &entries["main-kafka-0.pem"], &bundle);
        let client = leaf(client_ca.sign("main-kafka", &[], 1).unwrap());
        for trusted in [&bundle, &server_ca.cert_pem] {
            handshake_as(&server, trusted, Some(&client), host)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // Step 3: only the new certificate: the old key's client certificates are refused.
    let (entries, _) = broker_entries(&signing, &names(), 1, &BTreeMap::new()).unwrap();
    let server = mtls_server(dir.path(), &entries["main-kafka-0.pem"], &new.cert_pem);
    let stale = leaf(trusting.sign("main-kafka", &[], 1).unwrap());
    assert!(handshake_as(&server, &new.cert_pem, Some(&stale), host)
        .await
        .is_err());
    let current = leaf(signing.sign("main-kafka", &[], 1).unwrap());
    handshake_as(&server, &new.cert_pem, Some(&current), host)
        .await
        .unwrap();
    // The Java truststore holds both while both are trusted.
    let data = ca_cert_data(&signing, "pw").unwrap();
    assert_eq!(
        data[CA_CERT].0,
        format!("{}{}", new.cert_pem, old.cert_pem).as_bytes()
    );
    let store = p12_keystore::KeyStore::from_pkcs12(&data[CA_P12].0, "pw").unwrap();
    let mut aliases: Vec<_> = store.entries().map(|(a, _)| a.clone()).collect();
    aliases.sort();
    assert_eq!(aliases, ["ca-1.crt", "ca.crt"]);
}
