//! A running cluster's controller listener moved from PLAINTEXT to mutual TLS, the way Kafka
//! moves a static quorum's: three rolling restarts of real processes — a second, SSL controller
//! listener added; voters and brokers dial it (first in `controller.listener.names`, its ports in
//! `controller.quorum.voters`); the PLAINTEXT one removed — with a producer running throughout.
//! Nodes on either side of each roll must keep the quorum (a topic is created after every
//! restart) and nothing acknowledged may be lost; at the end the old ports are closed and the
//! new one admits only certificates of the cluster's CA.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cluster::{admin, client_security, controller_answers, read_partition, until, Cluster};
use evenkeel::client::{ClientSecurity, Connection};
use evenkeel::operator::certs::{self, Ca};
use evenkeel::protocol::errors;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "moved";
const WAIT: Duration = Duration::from_secs(60);
/// The principal of the brokers' certificate: a super user, as the operator makes it.
const BROKERS: &str = "main-kafka";

/// The keys of the SSL controller listener CONTROLLER_SSL (mutual TLS against `ca_file`, the
/// node presenting `keystore` both as server and as client), the authorizer and its super user.
fn tls_overrides(keystore: &Path, ca_file: &Path) -> Vec<String> {
    let prefix = "listener.name.controller_ssl.ssl";
    vec![
        format!("{prefix}.keystore.type=PEM"),
        format!("{prefix}.keystore.location={}", keystore.display()),
        format!("{prefix}.truststore.type=PEM"),
        format!("{prefix}.truststore.location={}", ca_file.display()),
        format!("{prefix}.client.auth=required"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        format!("super.users={}", certs::principal(BROKERS)),
        "allow.everyone.if.no.acl.found=true".into(),
        "min.insync.replicas=2".into(),
    ]
}

/// Writes the brokers' PEM keystore (key, certificate for 127.0.0.1, CA) and the CA file.
fn write_certificates(dir: &Path, ca: &Ca) -> (std::path::PathBuf, std::path::PathBuf) {
    let broker = ca.sign(BROKERS, &["127.0.0.1".to_string()], 30).unwrap();
    let pem = dir.join("broker.pem");
    let chain = format!("{}{}{}", broker.key_pem, broker.cert_pem, ca.cert_pem);
    std::fs::write(&pem, chain).unwrap();
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    (pem, ca_file)
}

/// Sends one record after another to the topic while `flowing` is set; keeps the acknowledged.
struct Flow {
    flowing: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Flow {
    fn start(bootstrap: &str) -> Flow {
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "60000")
            .create()
            .expect("producer");
        let flowing = Arc::new(AtomicBool::new(true));
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let (f, a) = (flowing.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while f.load(Ordering::Acquire) {
                let value = format!("record-{n}");
                n += 1;
                let record = FutureRecord::<(), _>::to(TOPIC)
                    .partition(0)
                    .payload(&value);
                if producer.send(record, Duration::from_secs(60)).await.is_ok() {
                    a.lock().unwrap().insert(value);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Flow {
            flowing,
            acked,
            task,
        }
    }

    async fn stop(self) -> BTreeSet<String> {
        self.flowing.store(false, Ordering::Release);
        let _ = self.task.await;
        let acked = self.acked.lock().unwrap().clone();
        acked
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }
}

/// Which controller listeners a node serves, which it dials, and where the voters are.
struct Layout {
    plaintext: bool,
    tls: bool,
    /// `controller.listener.names`, the dialled one first.
    names: &'static str,
    /// Whether `controller.quorum.voters` names the TLS ports.
    voters_on_tls: bool,
}

/// Rolls every node onto `layout`: its config rewritten, SIGTERM, started again; after each
/// restart a topic is created (the brokers reach the active controller, the voters keep the
/// quorum) and the producer must have gone on.
async fn roll(c: &mut Cluster, tls_ports: &[u16], layout: &Layout, label: &str, flow: &Flow) {
    let voters = |tls: bool| -> String {
        (1..=3)
            .map(|i| {
                let port = match tls {
                    true => tls_ports[i - 1],
                    false => c.nodes[i - 1].ports.controller,
                };
                format!("{i}@127.0.0.1:{port}")
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let voters = voters(layout.voters_on_tls);
    for id in 1..=3 {
        let mut listeners = format!("PLAINTEXT://127.0.0.1:{}", c.nodes[id - 1].ports.client);
        let mut map = "PLAINTEXT:PLAINTEXT".to_string();
        if layout.plaintext {
            let port = c.nodes[id - 1].ports.controller;
            listeners.push_str(&format!(",CONTROLLER://127.0.0.1:{port}"));
            map.push_str(",CONTROLLER:PLAINTEXT");
        }
        if layout.tls {
            let port = tls_ports[id - 1];
            listeners.push_str(&format!(",CONTROLLER_SSL://127.0.0.1:{port}"));
            map.push_str(",CONTROLLER_SSL:SSL");
        }
        c.set_config(
            id,
            &[
                ("listeners", listeners),
                ("listener.security.protocol.map", map),
                ("controller.listener.names", layout.names.into()),
                ("controller.quorum.voters", voters.clone()),
            ],
        );
        assert!(c.stop(id), "{label}: node {id} stops cleanly");
        c.restart(id);
        let topic = format!("{label}-{id}");
        let what = format!("{label}: a topic after node {id}");
        until(&what, WAIT, || async {
            let a = admin(&c.addr(1 + id % 3)).await;
            a.create_topic(&topic, 1, 3, &Default::default()).await.ok()
        })
        .await;
        let before = flow.count();
        until(
            &format!("{label}: records acked after node {id}"),
            WAIT,
            || async { (flow.count() > before + 10).then_some(()) },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_listener_moves_to_tls_in_three_rolls_with_nothing_acked_lost() {
    let tls = tempfile::tempdir().unwrap();
    let ca = Ca::generate("main-cluster-ca").unwrap();
    let (keystore, ca_file) = write_certificates(tls.path(), &ca);
    let overrides = tls_overrides(&keystore, &ca_file);
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let mut c = Cluster::start(3, &overrides);
    let tls_ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let plaintext_ports: Vec<String> = c
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.ports.controller))
        .collect();
    admin(&c.addr(1))
        .await
        .create_topic(TOPIC, 1, 3, &Default::default())
        .await
        .unwrap();
    let flow = Flow::start(&c.bootstrap());

    let added = Layout {
        plaintext: true,
        tls: true,
        names: "CONTROLLER,CONTROLLER_SSL",
        voters_on_tls: false,
    };
    roll(&mut c, &tls_ports, &added, "added", &flow).await;
    let dialled = Layout {
        names: "CONTROLLER_SSL,CONTROLLER",
        voters_on_tls: true,
        ..added
    };
    roll(&mut c, &tls_ports, &dialled, "dialled", &flow).await;
    let removed = Layout {
        plaintext: false,
        names: "CONTROLLER_SSL",
        ..dialled
    };
    roll(&mut c, &tls_ports, &removed, "removed", &flow).await;

    let acked = flow.stop().await;
    let read: BTreeSet<String> = read_partition(&c.bootstrap(), TOPIC, acked.len(), &[])
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let lost: Vec<&String> = acked.difference(&read).collect();
    assert!(
        lost.is_empty() && acked.len() > 60,
        "{} acked, {} lost: {:?}",
        acked.len(),
        lost.len(),
        lost.iter().take(10).collect::<Vec<_>>()
    );

    // The PLAINTEXT controller ports are closed; the TLS ones answer the brokers' certificate
    // and turn away a client without one and plain TCP.
    for addr in &plaintext_ports {
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "{addr} still accepts connections"
        );
    }
    let ca_path = ca_file.display().to_string();
    let brokers = client_security(&[
        ("security.protocol", "SSL"),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", &keystore.display().to_string()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", &ca_path),
    ]);
    let controller = format!("127.0.0.1:{}", tls_ports[0]);
    let (_, quorum) = controller_answers(&controller, &brokers).await.unwrap();
    assert_eq!(quorum, errors::NONE, "DescribeQuorum as the brokers");
    let anonymous = client_security(&[
        ("security.protocol", "SSL"),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", &ca_path),
    ]);
    for (what, security) in [
        ("no certificate", anonymous),
        ("plain TCP", ClientSecurity::plaintext()),
    ] {
        let wait = Duration::from_secs(5);
        let answered = match Connection::connect_with(&controller, wait, &security).await {
            Ok(conn) => conn
                .call_at(
                    &kafka_protocol::messages::DescribeQuorumRequest::default(),
                    1,
                )
                .await
                .is_ok(),
            Err(_) => false,
        };
        assert!(
            !answered,
            "{what} was answered on the TLS controller listener"
        );
    }
}
