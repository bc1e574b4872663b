//! Kafka's own Java client over mutual TLS with the PKCS#12 keystore the operator makes for a
//! certificate KafkaUser (`user.p12`): it loads the keystore with its password, the broker takes
//! the certificate's subject as the principal, and a wrong password or an unauthorized user is
//! refused. And Kafka's `kafka-metadata-quorum --bootstrap-controller` over mutual TLS against
//! an SSL controller listener, allowed only with the right on the cluster. It builds only with
//! the `tier-kafka-cluster` feature (it runs Kafka's tools through `bench/kafka/tool`, which that
//! tier installs); `.ci/run` runs it.

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

/// One of Kafka's tools, run through `bench/kafka/tool`.
fn kafka_tool() -> Command {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/kafka/tool"))
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
    kafka_tool()
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
    std::fs::write(&p12, truststore(renewed.trusted(), &password).unwrap()).unwrap();
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

/// One node whose controller listener is SSL with client certificates against `pki`, the
/// StandardAuthorizer on and `User:CN=node,O=acme` (the node's own certificate) and
/// `User:CN=admin,O=acme` super users. Returns the node and its controller listener's address.
fn ssl_controller_node(dir: &Path, pki: &Pki) -> (common::cluster::Cluster, String) {
    let keystore = dir.join("node.pem");
    pki.leaf("node").write_keystore(&keystore);
    let prefix = "listener.name.controller.ssl";
    let overrides = [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL".to_string(),
        format!("{prefix}.keystore.type=PEM"),
        format!("{prefix}.keystore.location={}", keystore.display()),
        format!("{prefix}.truststore.type=PEM"),
        format!("{prefix}.truststore.location={}", pki.ca_file().display()),
        format!("{prefix}.client.auth=required"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "allow.everyone.if.no.acl.found=false".into(),
        "super.users=User:CN=node,O=acme;User:CN=admin,O=acme;User:ANONYMOUS".into(),
    ];
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let controller = std::sync::Mutex::new(String::new());
    let node = common::cluster::Cluster::start_with(1, &overrides, |_, ports| {
        *controller.lock().unwrap() = format!("127.0.0.1:{}", ports.controller);
        Vec::new()
    });
    let controller = controller.into_inner().unwrap();
    (node, controller)
}

/// `kafka-metadata-quorum --bootstrap-controller <controller> describe --status` over mutual TLS
/// with the PEM keystore of `leaf` (none: TLS without a client certificate).
fn describe_quorum(dir: &Path, pki: &Pki, controller: &str, leaf: Option<&str>) -> Output {
    let mut config = format!("security.protocol=SSL\n{}", pem_truststore(pki.ca_file()));
    if let Some(name) = leaf {
        let keystore = dir.join(format!("{name}.pem"));
        pki.leaf(name).write_keystore(&keystore);
        config.push_str(&format!(
            "ssl.keystore.type=PEM\nssl.keystore.location={}\n",
            keystore.display()
        ));
    }
    let props = dir.join(format!("{}.properties", leaf.unwrap_or("anonymous")));
    std::fs::write(&props, config).unwrap();
    kafka_tool()
        .args([
            "kafka-metadata-quorum",
            "--bootstrap-controller",
            controller,
        ])
        .arg("--command-config")
        .arg(&props)
        .args(["describe", "--status"])
        .output()
        .unwrap()
}

/// Kafka's own `kafka-metadata-quorum --bootstrap-controller` against an SSL controller
/// listener: a super user's certificate reads the quorum; a certificate of the same CA without
/// the right gets Kafka's ClusterAuthorizationException; no certificate gets nowhere.
#[test]
fn kafka_metadata_quorum_reads_an_ssl_controller_listener_only_with_the_right() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "quorum-ca");
    let (_node, controller) = ssl_controller_node(dir.path(), &pki);

    let out = describe_quorum(dir.path(), &pki, &controller, Some("admin"));
    assert!(out.status.success(), "{}", text(&out));
    for line in ["LeaderId:               1", "CurrentVoters:"] {
        assert!(text(&out).contains(line), "{line} not in {}", text(&out));
    }

    let out = describe_quorum(dir.path(), &pki, &controller, Some("mallory"));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("ClusterAuthorizationException"),
        "{}",
        text(&out)
    );

    let out = describe_quorum(dir.path(), &pki, &controller, None);
    assert!(!out.status.success(), "{}", text(&out));
}
