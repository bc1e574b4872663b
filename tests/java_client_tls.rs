//! Kafka's own Java client over mutual TLS with the PKCS#12 keystore the operator makes for a
//! certificate KafkaUser (`user.p12`): it loads the keystore with its password, the broker takes
//! the certificate's subject as the principal, and a wrong password or an unauthorized user is
//! refused. It builds only with the `tier-kafka-cluster` feature (it runs Kafka's tools through
//! `bench/kafka/tool`, which that tier installs); `.ci/run` runs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::pki::{ssl_listener_overrides, Pki};
use common::BrokerProcess;
use evenkeel::operator::certs::{new_password, pkcs12, truststore, Ca};

/// A broker whose SSL listener serves the PEM keystore `keystore` and requires a client
/// certificate from the clients CA, with the StandardAuthorizer and `User:CN=carol` a super user.
fn broker(dir: &Path, keystore: &Path, clients: &Ca) -> (BrokerProcess, String) {
    let truststore = dir.join("clients-ca.pem");
    std::fs::write(&truststore, &clients.cert_pem).unwrap();
    let (pp, sp) = (common::free_port(), common::free_port());
    let mut overrides = ssl_listener_overrides(pp, sp, keystore, &truststore);
    overrides.extend([
        "listener.name.ssl.ssl.client.auth=required".into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "allow.everyone.if.no.acl.found=false".into(),
        "super.users=User:CN=carol;User:ANONYMOUS".into(),
    ]);
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    (BrokerProcess::start(&overrides), format!("127.0.0.1:{sp}"))
}

/// The keystore of user `cn`, as the operator writes it into the user's Secret.
fn user_keystore(dir: &Path, clients: &Ca, cn: &str, password: &str) -> PathBuf {
    let issued = clients.sign_user(cn, 30).unwrap();
    let path = dir.join(format!("{cn}.p12"));
    std::fs::write(
        &path,
        pkcs12(&issued, &clients.cert_pem, cn, password).unwrap(),
    )
    .unwrap();
    path
}

/// The client properties that trust the CA certificates of the PEM file `ca`.
fn pem_truststore(ca: &Path) -> String {
    format!(
        "ssl.truststore.type=PEM\nssl.truststore.location={}\n",
        ca.display()
    )
}

/// `kafka-topics --create --topic <topic>` over SSL, trusting as `trust` says, with `keystore`
/// opened by `password`.
fn create_topic(
    dir: &Path,
    ssl: &str,
    trust: &str,
    keystore: &Path,
    password: &str,
    topic: &str,
) -> Output {
    let props = dir.join(format!("{topic}.properties"));
    let config = format!(
        "security.protocol=SSL\n{trust}\
         ssl.keystore.type=PKCS12\nssl.keystore.location={}\nssl.keystore.password={password}\n",
        keystore.display()
    );
    std::fs::write(&props, config).unwrap();
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/kafka/tool");
    Command::new(tool)
        .args([
            "kafka-topics",
            "--bootstrap-server",
            ssl,
            "--create",
            "--topic",
            topic,
        ])
        .args(["--partitions", "1", "--command-config"])
        .arg(&props)
        .output()
        .expect("bench/kafka/tool runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_java_client_logs_in_with_the_certificate_users_pkcs12_keystore() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Pki::new(dir.path(), "server-ca");
    let clients = Ca::generate("main-clients-ca").unwrap();
    let keystore = dir.path().join("broker.pem");
    server_ca.leaf("broker").write_keystore(&keystore);
    let (_broker, ssl) = broker(dir.path(), &keystore, &clients);
    let ca = &pem_truststore(server_ca.ca_file());

    let carol = user_keystore(dir.path(), &clients, "carol", "carols-keystore-pw");
    let out = create_topic(
        dir.path(),
        &ssl,
        ca,
        &carol,
        "carols-keystore-pw",
        "by-carol",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Created topic by-carol."),
        "{}",
        text(&out)
    );

    // The keystore opens only with its password.
    let out = create_topic(dir.path(), &ssl, ca, &carol, "not-the-password", "wrong-pw");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("keystore password was incorrect"),
        "{}",
        text(&out)
    );

    // The principal is the certificate's subject: mallory (same CA, no ACLs) may not create.
    let mallory = user_keystore(dir.path(), &clients, "mallory", "mallorys-pw");
    let out = create_topic(dir.path(), &ssl, ca, &mallory, "mallorys-pw", "by-mallory");
    assert!(!out.status.success(), "{}", text(&out));
    // As Kafka answers CreateTopics without CREATE on the cluster or the topic.
    assert!(
        text(&out).contains("TopicAuthorizationException"),
        "{}",
        text(&out)
    );
}

/// The cluster CA Secret's `ca.p12` (Strimzi's truststore for Java clients, with its password
/// in `ca.password`) is one Java's client loads and trusts, and it keeps trusting a broker
/// certificate issued before the CA was renewed (the renewal keeps the CA's key).
#[test]
fn a_java_client_trusts_the_renewed_cluster_cas_pkcs12_truststore() {
    let dir = tempfile::tempdir().unwrap();
    let cluster_ca = Ca::generate("main-cluster-ca").unwrap();
    let clients = Ca::generate("main-clients-ca").unwrap();
    let issued = cluster_ca
        .sign("main-kafka", &["127.0.0.1".to_string()], 30)
        .unwrap();
    let keystore = dir.path().join("broker.pem");
    std::fs::write(&keystore, format!("{}{}", issued.key_pem, issued.cert_pem)).unwrap();
    let (_broker, ssl) = broker(dir.path(), &keystore, &clients);

    let renewed = cluster_ca.renewed("main-cluster-ca-cert").unwrap();
    let password = new_password();
    let p12 = dir.path().join("ca.p12");
    std::fs::write(&p12, truststore(&renewed.cert_pem, &password).unwrap()).unwrap();
    let trust = format!(
        "ssl.truststore.type=PKCS12\nssl.truststore.location={}\nssl.truststore.password={password}\n",
        p12.display()
    );
    let carol = user_keystore(dir.path(), &clients, "carol", "carols-keystore-pw");
    let out = create_topic(
        dir.path(),
        &ssl,
        &trust,
        &carol,
        "carols-keystore-pw",
        "through-ca-p12",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Created topic through-ca-p12."),
        "{}",
        text(&out)
    );
}
