//! TLS listeners on a running broker, with Kafka's `ssl.*` keys: librdkafka produces and
//! consumes over SSL with a required client certificate; plaintext clients on the TLS port, TLS
//! clients on the plaintext port, untrusted and expired client certificates are refused while
//! the broker goes on serving; a certificate replaced on disk is served to new connections.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, TopicPartitionList};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use common::pki::{ssl_listener_overrides, Leaf, Pki};
use common::BrokerProcess;

const WAIT: Duration = Duration::from_secs(30);

/// A broker with a PLAINTEXT listener and an SSL listener (advertised first, so Metadata
/// answers with it) requiring client certificates from `pki`.
struct TlsBroker {
    _broker: BrokerProcess,
    ssl: String,
    plaintext: String,
    keystore: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(pki: &Pki, dir: tempfile::TempDir, server: &Leaf) -> TlsBroker {
    let keystore = dir.path().join("keystore.pem");
    server.write_keystore(&keystore);
    let (pp, sp) = (common::free_port(), common::free_port());
    let mut overrides = ssl_listener_overrides(pp, sp, &keystore, pki.ca_file());
    overrides.extend([
        "listener.name.ssl.ssl.client.auth=required".into(),
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),O=acme$/$1/,DEFAULT".into(),
    ]);
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let broker = BrokerProcess::start(&overrides);
    TlsBroker {
        _broker: broker,
        ssl: format!("127.0.0.1:{sp}"),
        plaintext: format!("127.0.0.1:{pp}"),
        keystore,
        _dir: dir,
    }
}

/// librdkafka over SSL to `b`, trusting `ca`, with the certificate and key files `client`.
fn rdkafka_ssl(b: &TlsBroker, ca: &Path, (cert, key): &(PathBuf, PathBuf)) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &b.ssl)
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", ca.display().to_string())
        .set("ssl.certificate.location", cert.display().to_string())
        .set("ssl.key.location", key.display().to_string());
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn librdkafka_produces_and_consumes_over_ssl_with_a_required_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let server = pki.leaf("broker");
    let alice = pki.leaf("alice").write_files(dir.path());
    let ca = pki.ca_file().to_path_buf();
    let b = start(&pki, dir, &server);
    let producer: FutureProducer = rdkafka_ssl(&b, &ca, &alice)
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    for i in 0..10 {
        let value = format!("secret-{i}");
        producer
            .send(
                FutureRecord::<(), _>::to("tls-orders").payload(&value),
                WAIT,
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce over SSL: {e}"));
    }
    let consumer: BaseConsumer = rdkafka_ssl(&b, &ca, &alice)
        .set("group.id", "tls-readers")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("tls-orders", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + WAIT;
    while got.len() < 10 {
        assert!(Instant::now() < deadline, "consumed only {got:?}");
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("consume over SSL");
            got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
    }
    assert_eq!(
        got,
        (0..10).map(|i| format!("secret-{i}")).collect::<Vec<_>>()
    );
}

/// ApiVersions v0 as a frame: api key 18, version 0, correlation id 7, no client id.
const API_VERSIONS: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff];

/// Sends ApiVersions on `s`; whether an answer with its correlation id came back.
async fn answers<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> bool {
    let call = async {
        s.write_all(&API_VERSIONS).await?;
        s.flush().await?;
        let size = s.read_i32().await?;
        let correlation = s.read_i32().await?;
        let mut rest = vec![0u8; (size as usize).saturating_sub(4)];
        s.read_exact(&mut rest).await?;
        Ok::<_, std::io::Error>(correlation == 7)
    };
    matches!(tokio::time::timeout(WAIT, call).await, Ok(Ok(true)))
}

/// A TLS connection to `addr` with `client`'s certificate, answered; the server's certificate.
async fn tls_call(
    addr: &str,
    pki: &Pki,
    client: Option<&Leaf>,
) -> Result<CertificateDer<'static>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut s = pki
        .connector(client)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let seen = s.get_ref().1.peer_certificates().unwrap()[0].clone();
    if answers(&mut s).await {
        Ok(seen)
    } else {
        Err("no answer".into())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_clients_are_refused_and_the_broker_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let server = pki.leaf("broker");
    let alice = pki.leaf("alice");
    let expired = pki.expired_leaf("old");
    let mallory = Pki::new(dir.path(), "other-ca").leaf("mallory");
    let b = start(&pki, dir, &server);
    assert!(tls_call(&b.ssl, &pki, Some(&alice)).await.is_ok());

    let mut plain = TcpStream::connect(&b.ssl).await.unwrap();
    assert!(
        !answers(&mut plain).await,
        "a plaintext client on the TLS port"
    );
    assert!(
        tls_call(&b.plaintext, &pki, Some(&alice)).await.is_err(),
        "a TLS client on the plaintext port"
    );
    assert!(
        tls_call(&b.ssl, &pki, None).await.is_err(),
        "no client certificate under ssl.client.auth=required"
    );
    assert!(
        tls_call(&b.ssl, &pki, Some(&mallory)).await.is_err(),
        "a certificate from another CA"
    );
    assert!(
        tls_call(&b.ssl, &pki, Some(&expired)).await.is_err(),
        "an expired certificate"
    );

    assert!(tls_call(&b.ssl, &pki, Some(&alice)).await.is_ok());
    let mut plain = TcpStream::connect(&b.plaintext).await.unwrap();
    assert!(
        answers(&mut plain).await,
        "the plaintext listener still serves"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_replaced_on_disk_is_served_to_the_next_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "ca");
    let first = pki.leaf("broker");
    let alice = pki.leaf("alice");
    let b = start(&pki, dir, &first);
    assert_eq!(
        tls_call(&b.ssl, &pki, Some(&alice)).await.unwrap(),
        first.der
    );
    let second = pki.leaf("broker-rotated");
    // Written aside and renamed over, as a Kubernetes Secret volume swaps its files.
    let staged = b.keystore.with_extension("new");
    second.write_keystore(&staged);
    std::fs::rename(&staged, &b.keystore).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = tls_call(&b.ssl, &pki, Some(&alice)).await.unwrap();
        if seen == second.der {
            break;
        }
        assert_eq!(seen, first.der);
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
