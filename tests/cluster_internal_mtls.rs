//! A secured KafkaCluster's internal and controller listeners as the operator renders them, on
//! real brokers: mutual TLS against the cluster CA; the brokers replicate, and the voters and
//! brokers keep the quorum, as the super user their certificate names; the operator logs in with
//! a certificate it makes itself; the rebalancer sidecar and the producer proxy are allowed only
//! what the ACLs the operator gives them allow, and lose them when the spec turns them off. A
//! client without a certificate, or with one from another CA, gets nowhere; on the controller
//! listener a component's certificate gets CLUSTER_AUTHORIZATION_FAILED.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::cluster::{client_security, controller_answers, until, Cluster};
use evenkeel::client::producer::{Producer, ProducerConfig, ProducerRecord};
use evenkeel::client::{AdminClient, ClientError, ClientSecurity, Connection};
use evenkeel::operator::certs::{self, Ca};
use evenkeel::operator::components;
use evenkeel::operator::crd::KafkaCluster;
use evenkeel::operator::resources::Names;
use evenkeel::protocol::errors;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn kafka_cluster(rebalancer: bool, proxies: i32) -> KafkaCluster {
    let mut kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "main", "namespace": "streams"},
        "spec": {
            "replicas": 3,
            "storage": {"size": "1Gi"},
            "listeners": [{"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}}],
            "authorization": {"type": "simple"},
            "rebalancer": {"enabled": rebalancer},
            "proxy": {"replicas": proxies},
        },
    }))
    .unwrap();
    kc.metadata.uid = Some("0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b".into());
    kc
}

/// Writes a PEM keystore (key, certificate, CA) of `stem` from the Secret entries the
/// operator makes, and returns its path.
fn keystore(dir: &Path, entries: &BTreeMap<String, String>, stem: &str) -> String {
    let path = dir.join(format!("{stem}.pem"));
    std::fs::write(&path, &entries[&format!("{stem}.pem")]).unwrap();
    path.display().to_string()
}

/// The client keys the operator gives a component (`components::client_properties`), with
/// the cluster CA where this test keeps it.
fn component_props(keystore: &str, ca_file: &Path) -> BTreeMap<String, String> {
    let mut props: BTreeMap<String, String> = components::client_properties(keystore)
        .into_iter()
        .collect();
    props.insert(
        "ssl.truststore.location".into(),
        ca_file.display().to_string(),
    );
    props
}

fn component_security(keystore: &str, ca_file: &Path) -> ClientSecurity {
    ClientSecurity::from_properties(&component_props(keystore, ca_file)).unwrap()
}

/// `result` is Kafka's refusal `code`.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, ClientError>, code: i16, what: &str) {
    let e = result.expect_err(what);
    assert_eq!(kafka_code(&e), Some(code), "{what}: {e}");
}

async fn admin_as(bootstrap: &str, security: ClientSecurity) -> Result<AdminClient, ClientError> {
    AdminClient::connect_with(bootstrap, Duration::from_secs(10), security).await
}

fn kafka_code(e: &ClientError) -> Option<i16> {
    match e {
        ClientError::Kafka { code, .. } => Some(*code),
        _ => None,
    }
}

/// The operator's own rendering of `kc`'s internal and controller listeners and authorizer: the
/// `listener.name.replication.*` and `listener.name.controller.*` keys (the pod's certificate
/// paths made this test's), the protocol map, `inter.broker.listener.name`,
/// `authorizer.class.name` and `super.users`.
fn rendered_security(kc: &KafkaCluster, keystore: &Path, ca_file: &Path) -> Vec<String> {
    let props = evenkeel::operator::resources::server_properties(kc, 3).unwrap();
    let pod_ca = format!(
        "{}/cluster-ca/ca.crt",
        evenkeel::operator::resources::TLS_DIR
    );
    let mut out: Vec<String> = props
        .lines()
        .filter(|l| {
            l.starts_with("listener.name.replication.")
                || l.starts_with("listener.name.controller.")
                || l.starts_with("inter.broker.listener.name=")
                || l.starts_with("authorizer.class.name=")
                || l.starts_with("super.users=")
        })
        .map(|l| l.replace(&pod_ca, &ca_file.display().to_string()))
        .collect();
    assert!(
        out.len() >= 10,
        "the operator rendered no internal or controller listener: {props}"
    );
    for l in ["replication", "controller"] {
        out.push(format!(
            "listener.name.{l}.ssl.keystore.location={}",
            keystore.display()
        ));
    }
    // The operator's map, without the client listener this test leaves out.
    assert!(
        props.contains(",CONTROLLER:SSL\n"),
        "the controller listener is not SSL: {props}"
    );
    out.push("listener.security.protocol.map=REPLICATION:SSL,CONTROLLER:SSL".into());
    out
}

/// Four brokers whose only broker listener is the internal one, configured as the operator
/// renders it (`rendered_security`), each serving the certificate the operator issues brokers:
/// the first three are the voters, the fourth a broker that follows the quorum over the
/// controller listener's TLS. With the internal listeners' addresses and the controller
/// listeners'.
fn start(tls: &Path, ca: &Ca, kc: &KafkaCluster) -> (Cluster, Vec<String>, Vec<String>) {
    let names = Names::of(kc).unwrap();
    let broker = ca
        .sign(&names.statefulset(), &["127.0.0.1".to_string()], 30)
        .unwrap();
    let pem = tls.join("broker.pem");
    std::fs::write(
        &pem,
        format!("{}{}{}", broker.key_pem, broker.cert_pem, ca.cert_pem),
    )
    .unwrap();
    let ca_file = tls.join("ca.crt");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let overrides = rendered_security(kc, &pem, &ca_file);
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let internal: Vec<u16> = (0..4).map(|_| common::free_port()).collect();
    let addresses: Vec<String> = internal.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let controllers = std::sync::Mutex::new(Vec::new());
    let c = Cluster::start_prepared(
        4,
        &overrides,
        |id, ports| {
            let (int, ctrl) = (internal[id - 1], ports.controller);
            let mut listeners = format!("REPLICATION://127.0.0.1:{int}");
            if id <= 3 {
                listeners.push_str(&format!(",CONTROLLER://127.0.0.1:{ctrl}"));
                controllers
                    .lock()
                    .unwrap()
                    .push(format!("127.0.0.1:{ctrl}"));
            }
            vec![
                ("listeners".into(), listeners),
                (
                    "advertised.listeners".into(),
                    format!("REPLICATION://127.0.0.1:{int}"),
                ),
            ]
        },
        |_| {},
    );
    let controllers = controllers.into_inner().unwrap();
    (c, addresses, controllers)
}

/// TLS trusting the cluster CA, without a client certificate.
fn anonymous_security(ca_file: &Path) -> ClientSecurity {
    client_security(&[
        ("security.protocol", "SSL"),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", &ca_file.display().to_string()),
    ])
}

async fn produce(producer: &Producer, value: &str) -> Result<(), String> {
    let record = ProducerRecord {
        key: None,
        value: Some(Bytes::from(value.to_string())),
        headers: Vec::new(),
        timestamp: -1,
    };
    let done = producer
        .send("orders", Some(0), record)
        .await
        .map_err(|e| e.to_string())?;
    match done.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the producer dropped the record".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_listener_knows_each_component_by_its_certificate() {
    let tls = tempfile::tempdir().unwrap();
    let kc = kafka_cluster(true, 1);
    let names = Names::of(&kc).unwrap();
    let ca = Ca::generate(&format!("{}-cluster-ca", names.cluster)).unwrap();
    let (c, addresses, controllers) = start(tls.path(), &ca, &kc);
    let bootstrap = addresses.join(",");
    let ca_file = tls.path().join("ca.crt");

    // The operator, with the certificate it makes for itself, is a super user.
    let identities = components::Identities::default();
    let operator = until("the operator to connect", WAIT, || async {
        let security = identities.operator(&ca).unwrap();
        admin_as(&bootstrap, security).await.ok()
    })
    .await;
    let configs = [("min.insync.replicas".to_string(), "2".to_string())].into();
    operator
        .create_topic_with_assignment("orders", &[vec![1, 2, 4]], &configs)
        .await
        .expect("the operator creates a topic");
    let sync = components::sync_component_acls(&operator, &kc).await;
    assert!(sync.error.is_none() && sync.notes.len() == 2, "{sync:?}");
    let again = components::sync_component_acls(&operator, &kc).await;
    assert!(
        again.error.is_none() && again.notes.is_empty(),
        "a second pass changed ACLs: {again:?}"
    );

    // The proxy, with the certificate the operator issues it, writes with acks=all: the
    // brokers replicate to each other over mutual TLS, each known by its certificate.
    let (proxy_entries, _) = certs::proxy_entries(&ca, &names, &BTreeMap::new()).unwrap();
    let proxy_keystore = keystore(tls.path(), &proxy_entries, certs::PROXY_ENTRY);
    let proxy = component_security(&proxy_keystore, &ca_file);
    let mut props = component_props(&proxy_keystore, &ca_file);
    props.insert("bootstrap.servers".into(), bootstrap.clone());
    props.insert("acks".into(), "all".into());
    let producer = Producer::start(ProducerConfig::from_properties(&props).unwrap())
        .await
        .unwrap();
    until(
        "the ISR to hold its three brokers, the broker-only one too",
        WAIT,
        || async {
            let t = operator
                .describe_topics(Some(&["orders".to_string()]))
                .await
                .ok()?;
            (t.first()?.partitions.first()?.isr.len() == 3).then_some(())
        },
    )
    .await;
    for i in 0..20 {
        produce(&producer, &format!("order-{i}"))
            .await
            .unwrap_or_else(|e| panic!("the proxy's write {i} failed: {e}\n{}", c.log_tails(30)));
    }
    // The proxy may not create topics nor alter the cluster.
    let proxy_admin = admin_as(&bootstrap, proxy.clone()).await.unwrap();
    assert_refused(
        proxy_admin
            .create_topic("mine", 1, 1, &BTreeMap::new())
            .await,
        errors::TOPIC_AUTHORIZATION_FAILED,
        "the proxy created a topic",
    );
    assert_refused(
        proxy_admin.list_partition_reassignments().await,
        errors::CLUSTER_AUTHORIZATION_FAILED,
        "the proxy listed reassignments",
    );

    // The sidecar may elect leaders and list reassignments, and write nothing.
    let (sidecar_entries, _) = certs::rebalancer_entries(&ca, &names, &BTreeMap::new()).unwrap();
    let sidecar_keystore = keystore(tls.path(), &sidecar_entries, certs::REBALANCER_ENTRY);
    let sidecar = admin_as(&bootstrap, component_security(&sidecar_keystore, &ca_file))
        .await
        .unwrap();
    sidecar.list_partition_reassignments().await.unwrap();
    let elected = sidecar
        .elect_leaders(true, Some(&[("orders".to_string(), 0)]))
        .await
        .unwrap();
    assert_eq!(elected.len(), 1, "{elected:?}");
    assert_eq!(elected[0].2, errors::ELECTION_NOT_NEEDED, "{elected:?}");
    assert_refused(
        sidecar.create_topic("mine", 1, 1, &BTreeMap::new()).await,
        errors::TOPIC_AUTHORIZATION_FAILED,
        "the sidecar created a topic",
    );
    let mut config = evenkeel::rebalancer::RebalancerConfig::new(&bootstrap);
    config.metrics = evenkeel::rebalancer::MetricsSource::None;
    let mut rebalancer = evenkeel::rebalancer::Rebalancer::connect_with(
        config,
        component_security(&sidecar_keystore, &ca_file),
    )
    .await
    .unwrap();
    rebalancer
        .round()
        .await
        .expect("a rebalancer round as the sidecar");

    // Without a certificate, or with one another CA signed, nothing gets through.
    assert!(
        admin_as(&bootstrap, anonymous_security(&ca_file))
            .await
            .is_err(),
        "a client without a certificate got in"
    );
    let other = Ca::generate("other-cluster-ca").unwrap();
    let (foreign, _) = certs::proxy_entries(&other, &names, &BTreeMap::new()).unwrap();
    let foreign_dir = tempfile::tempdir().unwrap();
    let foreign = keystore(foreign_dir.path(), &foreign, certs::PROXY_ENTRY);
    assert!(
        admin_as(&bootstrap, component_security(&foreign, &ca_file))
            .await
            .is_err(),
        "a certificate of another CA got in"
    );

    // The controller listener: the components' certificates pass the handshake, but neither
    // has CLUSTER_ACTION, so neither may heartbeat as a broker; the sidecar's ALTER on the
    // cluster implies DESCRIBE, so it may describe the quorum, and the proxy may not. Without a
    // certificate, with another CA's, or in plain TCP, nothing gets through.
    let refused = errors::CLUSTER_AUTHORIZATION_FAILED;
    let sidecar_security = component_security(&sidecar_keystore, &ca_file);
    let answers = controller_answers(&controllers[0], &sidecar_security).await;
    assert_eq!(
        answers.ok(),
        Some((refused, errors::NONE)),
        "the sidecar\n{}",
        c.log_tails(20)
    );
    let answers = controller_answers(&controllers[1], &proxy).await;
    assert_eq!(
        answers.ok(),
        Some((refused, refused)),
        "the proxy\n{}",
        c.log_tails(20)
    );
    for (what, security) in [
        ("no certificate", anonymous_security(&ca_file)),
        (
            "another CA's certificate",
            component_security(&foreign, &ca_file),
        ),
        ("plain TCP", ClientSecurity::plaintext()),
    ] {
        let connected =
            Connection::connect_with(&controllers[0], Duration::from_secs(5), &security).await;
        assert!(connected.is_err(), "{what} reached the controller listener");
    }

    // The spec turns both off: their ACLs go, and with them what they could do.
    let sync = components::sync_component_acls(&operator, &kafka_cluster(false, 0)).await;
    assert!(sync.error.is_none() && sync.notes.len() == 2, "{sync:?}");
    until("the sidecar to lose ALTER on the cluster", WAIT, || async {
        let e = sidecar.list_partition_reassignments().await.err()?;
        (kafka_code(&e) == Some(errors::CLUSTER_AUTHORIZATION_FAILED)).then_some(())
    })
    .await;
    until("the proxy to lose WRITE", WAIT, || async {
        produce(&producer, "late").await.err()
    })
    .await;
    drop(c);
}

/// A cluster of one whose controller listener is SSL with a certificate for its DNS name only
/// (as the operator issues them): its broker reaches its own controller by the voter's name,
/// which the certificate carries, not by 127.0.0.1, which it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_voter_reaches_its_ssl_controller_listener_by_the_name_its_certificate_carries() {
    let tls = tempfile::tempdir().unwrap();
    let ca = Ca::generate("solo-cluster-ca").unwrap();
    let node = ca
        .sign("solo-kafka", &["localhost".to_string()], 30)
        .unwrap();
    let pem = tls.path().join("node.pem");
    std::fs::write(
        &pem,
        format!("{}{}{}", node.key_pem, node.cert_pem, ca.cert_pem),
    )
    .unwrap();
    let ca_file = tls.path().join("ca.crt");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let prefix = "listener.name.controller.ssl";
    let overrides = [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL".to_string(),
        format!("{prefix}.keystore.type=PEM"),
        format!("{prefix}.keystore.location={}", pem.display()),
        format!("{prefix}.truststore.type=PEM"),
        format!("{prefix}.truststore.location={}", ca_file.display()),
        format!("{prefix}.client.auth=required"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:CN=solo-kafka,O=evenkeel.dev;User:ANONYMOUS".into(),
    ];
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    // Cluster::start_with waits until the node is ready: registered and unfenced by its own
    // controller over TLS.
    let c = Cluster::start_with(1, &overrides, |_, ports| {
        vec![(
            "controller.quorum.voters".into(),
            format!("1@localhost:{}", ports.controller),
        )]
    });
    // A topic created on the broker is forwarded to the controller over the same TLS.
    let admin = AdminClient::connect(&c.bootstrap(), WAIT).await.unwrap();
    admin
        .create_topic("solo", 1, 1, &BTreeMap::new())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.log_tails(20)));
}
