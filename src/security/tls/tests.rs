//! Unit tests of `security::tls`: certificates made by rcgen, handshakes over loopback.

use super::test_pki::{handshake_as, handshake_with, ssl_config as ssl, Leaf, Pki};
use super::*;

/// A properties-file value continued over lines with `\`: the lines joined, without newlines.
fn one_line(pem: &str) -> String {
    pem.lines().collect::<Vec<_>>().join("")
}

/// `handshake_as` for localhost, the name of `Pki`'s certificates.
async fn handshake(
    server: &TlsServer,
    ca: &str,
    client: Option<&Leaf>,
) -> Result<(CertificateDer<'static>, String), String> {
    handshake_as(server, ca, client, "localhost").await
}

#[tokio::test]
async fn an_inline_pem_keystore_serves_tls_without_client_auth() {
    let pki = Pki::new("ca");
    let server = pki.leaf("broker");
    let chain = one_line(&server.cert);
    let key = one_line(&server.key);
    let tls = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", &chain),
        ("ssl.keystore.key", &key),
    ]))
    .unwrap();
    let (seen, principal) = handshake(&tls, &pki.ca_pem(), None).await.unwrap();
    assert_eq!(seen, server.der);
    assert_eq!(principal, "User:ANONYMOUS");
}

#[tokio::test]
async fn a_pem_file_with_key_and_chain_and_a_required_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("ca");
    let server = pki.leaf("broker");
    let keystore = dir.path().join("server.pem");
    std::fs::write(&keystore, format!("{}{}", server.key, server.cert)).unwrap();
    let truststore = dir.path().join("ca.pem");
    std::fs::write(&truststore, pki.ca_pem()).unwrap();
    let tls = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.to_str().unwrap()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", truststore.to_str().unwrap()),
        ("ssl.client.auth", "required"),
        (
            "ssl.principal.mapping.rules",
            "RULE:^CN=(.*?),O=acme$/$1/U,DEFAULT",
        ),
    ]))
    .unwrap();
    let alice = pki.leaf("alice");
    let (_, principal) = handshake(&tls, &pki.ca_pem(), Some(&alice)).await.unwrap();
    assert_eq!(principal, "User:ALICE");
    assert!(handshake(&tls, &pki.ca_pem(), None).await.is_err());
    let stranger = Pki::new("other ca").leaf("mallory");
    assert!(handshake(&tls, &pki.ca_pem(), Some(&stranger))
        .await
        .is_err());
}

#[tokio::test]
async fn requested_client_auth_lets_clients_without_a_certificate_in_as_anonymous() {
    let pki = Pki::new("ca");
    let server = pki.leaf("broker");
    let ca = pki.ca_pem();
    let tls = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", &server.cert),
        ("ssl.keystore.key", &server.key),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", &ca),
        ("ssl.client.auth", "requested"),
    ]))
    .unwrap();
    let (_, anonymous) = handshake(&tls, &ca, None).await.unwrap();
    assert_eq!(anonymous, "User:ANONYMOUS");
    let (_, bob) = handshake(&tls, &ca, Some(&pki.leaf("bob"))).await.unwrap();
    assert_eq!(bob, "User:CN=bob,O=acme");
}

#[test]
fn bad_keys_are_refused_by_name() {
    let pki = Pki::new("ca");
    let server = pki.leaf("broker");
    let encrypted =
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n";
    for (key, chain, words) in [
        (encrypted, server.cert.as_str(), "encrypted"),
        ("not a key", server.cert.as_str(), "no usable private key"),
        (server.key.as_str(), "no cert", "no certificate"),
    ] {
        let e = TlsServer::new(ssl(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", chain),
            ("ssl.keystore.key", key),
            ("ssl.key.password", "secret"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("ssl.keystore."), "{e}");
        assert!(e.contains(words), "{e}");
    }
    let other = pki.leaf("other");
    let e = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", &server.cert),
        ("ssl.keystore.key", &other.key),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("ssl.keystore.key"), "{e}");
    let e = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", "/no/such/file.pem"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("ssl.keystore.location: cannot read"), "{e}");
}

#[tokio::test]
async fn a_replaced_keystore_file_is_served_after_a_reload_and_a_bad_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("ca");
    let first = pki.leaf("broker");
    let keystore = dir.path().join("server.pem");
    std::fs::write(&keystore, format!("{}{}", first.cert, first.key)).unwrap();
    let tls = TlsServer::new(ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.to_str().unwrap()),
    ]))
    .unwrap();
    assert!(!tls.reload().unwrap(), "nothing changed");
    let second = pki.leaf("broker");
    std::fs::write(&keystore, format!("{}{}", second.cert, second.key)).unwrap();
    assert!(tls.reload().unwrap());
    let (seen, _) = handshake(&tls, &pki.ca_pem(), None).await.unwrap();
    assert_eq!(seen, second.der);
    std::fs::write(&keystore, "half written").unwrap();
    assert!(tls.reload().is_err());
    assert!(
        !tls.reload().unwrap(),
        "the same bad contents are not retried"
    );
    let (seen, _) = handshake(&tls, &pki.ca_pem(), None).await.unwrap();
    assert_eq!(seen, second.der, "the previous certificate is kept");
}

#[tokio::test]
async fn the_watcher_swaps_the_certificate_when_the_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("ca");
    let first = pki.leaf("broker");
    let keystore = dir.path().join("server.pem");
    std::fs::write(&keystore, format!("{}{}", first.cert, first.key)).unwrap();
    let tls = Arc::new(
        TlsServer::new(ssl(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", keystore.to_str().unwrap()),
        ]))
        .unwrap()
        .with_timings(HANDSHAKE_TIMEOUT, Duration::from_millis(20)),
    );
    let watcher = tls.watch_files().unwrap();
    let before = tls.config();
    let second = pki.leaf("broker");
    std::fs::write(&keystore, format!("{}{}", second.cert, second.key)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Arc::ptr_eq(&before, &tls.config()) {
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (seen, _) = handshake(&tls, &pki.ca_pem(), None).await.unwrap();
    assert_eq!(seen, second.der);
    watcher.abort();
}

#[test]
fn pem_joined_into_one_line_is_rewrapped() {
    let pki = Pki::new("ca");
    let leaf = pki.leaf("x");
    let joined = one_line(&leaf.cert);
    assert!(!joined.contains('\n'));
    let back = normalize_pem(&joined);
    let der = CertificateDer::from_pem_slice(back.as_bytes()).unwrap();
    assert_eq!(der, leaf.der);
}

/// Connects to `server` with the broker's own client side of `client` (`client::client_config`)
/// as host `host`; returns the principal the server gave this client.
async fn client_handshake(
    server: &TlsServer,
    client: &SslConfig,
    host: &str,
) -> Result<String, String> {
    let config = client::client_config(client).map_err(|e| e.to_string())?;
    handshake_with(server, config, host)
        .await
        .map(|(_, principal)| principal)
}

/// One listener's settings, used as brokers use them on both sides: `leaf` as the keystore,
/// `ca` as the truststore, client certificates required; `extra` added.
fn listener_ssl(leaf: &Leaf, ca: &str, extra: &[(&str, &str)]) -> SslConfig {
    let (chain, key, ca) = (one_line(&leaf.cert), one_line(&leaf.key), one_line(ca));
    let mut kv = vec![
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", chain.as_str()),
        ("ssl.keystore.key", key.as_str()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", ca.as_str()),
        ("ssl.client.auth", "required"),
    ];
    kv.extend_from_slice(extra);
    ssl(&kv)
}

#[tokio::test]
async fn the_client_side_presents_the_keystore_and_checks_the_servers_name() {
    let pki = Pki::new("ca");
    let c = listener_ssl(&pki.leaf("broker-1"), &pki.ca_pem(), &[]);
    let server = TlsServer::new(c.clone()).unwrap();
    let principal = client_handshake(&server, &c, "localhost").await.unwrap();
    assert_eq!(principal, "User:CN=broker-1,O=acme");
    let e = client_handshake(&server, &c, "elsewhere.example")
        .await
        .unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");
}

#[tokio::test]
async fn without_endpoint_identification_any_name_passes_but_the_chain_is_still_checked() {
    let pki = Pki::new("ca");
    let off = [("ssl.endpoint.identification.algorithm", "")];
    let c = listener_ssl(&pki.leaf("broker-1"), &pki.ca_pem(), &off);
    let server = TlsServer::new(c.clone()).unwrap();
    client_handshake(&server, &c, "elsewhere.example")
        .await
        .unwrap();
    let other = Pki::new("other-ca");
    let stranger = listener_ssl(&other.leaf("broker-2"), &other.ca_pem(), &[]);
    let untrusted = TlsServer::new(stranger).unwrap();
    let e = client_handshake(&untrusted, &c, "localhost")
        .await
        .unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
}

#[test]
fn a_client_side_without_a_truststore_is_refused() {
    let pki = Pki::new("ca");
    let leaf = pki.leaf("broker-1");
    let (chain, key) = (one_line(&leaf.cert), one_line(&leaf.key));
    let c = ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", &chain),
        ("ssl.keystore.key", &key),
    ]);
    let e = client::client_config(&c).unwrap_err().to_string();
    assert!(
        e.contains("ssl.truststore.location") && e.contains("no truststore"),
        "{e}"
    );
}

#[test]
fn client_auth_without_a_truststore_is_refused_not_turned_off() {
    let pki = Pki::new("ca");
    let leaf = pki.leaf("broker");
    let mut c = listener_ssl(&leaf, &pki.ca_pem(), &[]);
    c.truststore = None;
    let e = server_config(&c, &Files::read(&c)).unwrap_err().to_string();
    assert!(e.starts_with("ssl.truststore.location"), "{e}");
}

#[tokio::test]
async fn the_client_side_presents_a_rotated_keystore_to_its_next_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("ca");
    let server_side = listener_ssl(&pki.leaf("broker-2"), &pki.ca_pem(), &[]);
    let server = TlsServer::new(server_side).unwrap();
    let keystore = dir.path().join("client.pem");
    let write = |leaf: &Leaf| {
        std::fs::write(&keystore, format!("{}{}", leaf.key, leaf.cert)).unwrap();
    };
    write(&pki.leaf("broker-1"));
    let ca = one_line(&pki.ca_pem());
    let client_side = ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.to_str().unwrap()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", &ca),
    ]);
    let client = client::TlsClient::new(&client_side)
        .unwrap()
        .with_reload_interval(Duration::ZERO);
    let principal = |config| async {
        handshake_with(&server, config, "localhost")
            .await
            .map(|(_, p)| p)
            .unwrap()
    };
    assert_eq!(principal(client.config()).await, "User:CN=broker-1,O=acme");
    // Kubernetes rotates the Secret: the next connection presents the new certificate.
    write(&pki.leaf("broker-1-renewed"));
    assert_eq!(
        principal(client.config()).await,
        "User:CN=broker-1-renewed,O=acme"
    );
    // A half-written file makes no config: the last good one is kept.
    std::fs::write(&keystore, "half written").unwrap();
    assert_eq!(
        principal(client.config()).await,
        "User:CN=broker-1-renewed,O=acme"
    );
}

#[tokio::test]
async fn the_client_side_checks_its_files_at_most_once_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("ca");
    let truststore = dir.path().join("ca.pem");
    std::fs::write(&truststore, pki.ca_pem()).unwrap();
    let leaf = pki.leaf("broker-1");
    let (chain, key) = (one_line(&leaf.cert), one_line(&leaf.key));
    let client = client::TlsClient::new(&ssl(&[
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.certificate.chain", &chain),
        ("ssl.keystore.key", &key),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", truststore.to_str().unwrap()),
    ]))
    .unwrap()
    .with_reload_interval(Duration::from_secs(3600));
    let before = client.config();
    std::fs::write(&truststore, Pki::new("another-ca").ca_pem()).unwrap();
    assert!(
        Arc::ptr_eq(&before, &client.config()),
        "the files were read again within the interval"
    );
}
