//! Brokers replicate to each other over a SASL_SSL inter-broker listener with SCRAM-SHA-512,
//! authorized as the super user `admin` (User:ANONYMOUS is no super user): acks=all writes reach
//! every replica; a broker with the wrong inter-broker password stays out of the ISR, says why
//! in its log, and does not hammer the leader with logins.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::{admin, partition, produce, producer, until, values, Cluster};
use common::pki::Pki;
use evenkeel::metadata::records::{MetadataRecord, ScramCredentialRecord};
use evenkeel::security::acl::{
    AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
};

const WAIT: Duration = Duration::from_secs(60);
const TOPIC: &str = "replicated";

/// One CA and the certificate every broker serves (and presents as a client), valid for
/// 127.0.0.1: a PEM keystore and truststore in `dir`.
fn certificates(dir: &Path) -> (PathBuf, PathBuf) {
    let pki = Pki::new(dir, "ca");
    let keystore = dir.join("broker.pem");
    pki.leaf("broker").write_keystore(&keystore);
    (keystore, pki.ca_file().to_path_buf())
}

/// What the cluster starts with: `admin`'s SCRAM-SHA-512 credential, and ACLs that let the
/// plaintext clients (User:ANONYMOUS) use topics and groups, but not the cluster.
fn bootstrap_records() -> Vec<MetadataRecord> {
    let scram = evenkeel::security::sasl::parse_add_scram(
        "SCRAM-SHA-512=[name=admin,password=admin-secret]",
    )
    .unwrap();
    let mut records = vec![MetadataRecord::UserScramCredential(
        ScramCredentialRecord::new(&scram.user, scram.mechanism, scram.credential),
    )];
    for resource_type in [ResourceType::Topic, ResourceType::Group] {
        records.push(MetadataRecord::AccessControlEntry {
            id: evenkeel::storage::KafkaUuid::random(),
            acl: AclBinding {
                pattern: ResourcePattern {
                    resource_type,
                    name: "*".into(),
                    pattern_type: PatternType::Literal,
                },
                principal: "User:ANONYMOUS".into(),
                host: "*".into(),
                operation: AclOperation::All,
                permission: PermissionType::Allow,
            },
        });
    }
    records
}

/// Three nodes: clients on PLAINTEXT, brokers among themselves on INTERNAL (SASL_SSL,
/// SCRAM-SHA-512), each logging in with `password(node)`.
fn start(tls: &Path, password: impl Fn(usize) -> &'static str, extra: &[&str]) -> Cluster {
    let (keystore, truststore) = certificates(tls);
    let internal: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let mut overrides =
        vec![
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"
            .to_string(),
        "inter.broker.listener.name=INTERNAL".into(),
        "listener.name.internal.ssl.keystore.type=PEM".into(),
        format!("listener.name.internal.ssl.keystore.location={}", keystore.display()),
        "listener.name.internal.ssl.truststore.type=PEM".into(),
        format!("listener.name.internal.ssl.truststore.location={}", truststore.display()),
        "listener.name.internal.sasl.enabled.mechanisms=SCRAM-SHA-512".into(),
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512".into(),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        "super.users=User:admin".into(),
    ];
    overrides.extend(extra.iter().map(|s| s.to_string()));
    let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
    let records = bootstrap_records();
    Cluster::start_prepared(
        3,
        &overrides,
        |id, ports| {
            let (client, ctrl, int) = (ports.client, ports.controller, internal[id - 1]);
            let jaas = format!(
                "org.apache.kafka.common.security.scram.ScramLoginModule required \
                 username=\"admin\" password=\"{}\";",
                password(id)
            );
            vec![
                (
                    "listeners".into(),
                    format!("PLAINTEXT://127.0.0.1:{client},INTERNAL://127.0.0.1:{int},CONTROLLER://127.0.0.1:{ctrl}"),
                ),
                (
                    "advertised.listeners".into(),
                    format!("PLAINTEXT://127.0.0.1:{client},INTERNAL://127.0.0.1:{int}"),
                ),
                (
                    "listener.name.internal.scram-sha-512.sasl.jaas.config".into(),
                    jaas,
                ),
            ]
        },
        |dir| evenkeel::metadata::bootstrap::write(dir, &records).unwrap(),
    )
}

/// Creates the topic on nodes 1, 2, 3 (1 leads) with min.insync.replicas=2.
async fn create_topic(c: &Cluster) {
    let configs = [("min.insync.replicas".to_string(), "2".to_string())]
        .into_iter()
        .collect();
    admin(&c.addr(1))
        .await
        .create_topic_with_assignment(TOPIC, &[vec![1, 2, 3]], &configs)
        .await
        .unwrap();
}

/// The ISR of partition 0, sorted, as node 1 describes it.
async fn isr(c: &Cluster) -> Option<Vec<i32>> {
    let mut isr = partition(&c.addr(1), TOPIC, 0).await?.isr;
    isr.sort_unstable();
    Some(isr)
}

/// Node `id`'s first segment of partition 0.
fn segment(c: &Cluster, id: usize) -> Vec<u8> {
    let path = c
        .data
        .join(format!("broker-{id}"))
        .join(format!("{TOPIC}-0"))
        .join("00000000000000000000.log");
    std::fs::read(path).unwrap_or_default()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread")]
async fn brokers_replicate_over_sasl_ssl_as_the_admin_super_user() {
    let tls = tempfile::tempdir().unwrap();
    let c = start(tls.path(), |_| "admin-secret", &[]);
    create_topic(&c).await;
    until("all three replicas in the ISR", WAIT, || async {
        isr(&c).await.filter(|i| i == &[1, 2, 3])
    })
    .await;
    let p = producer(&c.bootstrap(), "all");
    let sent = values("secured-", 20);
    let offsets = produce(&p, TOPIC, sent.clone()).await;
    assert_eq!(offsets, (0..20).collect::<Vec<i64>>());
    for id in 1..=3 {
        until(&format!("every record on node {id}"), WAIT, || async {
            let log = segment(&c, id);
            sent.iter().all(|v| contains(&log, v)).then_some(())
        })
        .await;
    }
    assert_eq!(isr(&c).await, Some(vec![1, 2, 3]));
    for id in 1..=3 {
        let log = c.log(id);
        assert!(
            !log.contains("cannot connect to the leader's inter-broker listener"),
            "node {id}:\n{}",
            c.log_tails(30)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_with_the_wrong_inter_broker_password_stays_out_of_the_isr_without_spinning() {
    let tls = tempfile::tempdir().unwrap();
    let password = |id| if id == 3 { "wrong" } else { "admin-secret" };
    let c = start(tls.path(), password, &["replica.lag.time.max.ms=3000"]);
    create_topic(&c).await;
    until("node 3 dropped from the ISR", WAIT, || async {
        isr(&c).await.filter(|i| i == &[1, 2])
    })
    .await;
    let p = producer(&c.bootstrap(), "all");
    let sent = values("kept-out-", 5);
    produce(&p, TOPIC, sent.clone()).await;
    until("the refused login in node 3's log", WAIT, || async {
        let log = c.log(3);
        (log.contains("cannot connect to the leader's inter-broker listener")
            && log.contains("SaslAuthenticate as admin with SCRAM-SHA-512 failed"))
        .then_some(())
    })
    .await;
    let failed = |c: &Cluster| {
        c.metric(
            1,
            "kafka_server_socket_server_metrics_failed_authentication_total",
        )
        .unwrap_or(0.0)
    };
    let (start, before) = (Instant::now(), failed(&c));
    assert!(before >= 1.0, "the leader counted no failed login");
    // Watch for a while: node 3 never comes back into the ISR, and never gets the records.
    let watched = common::cluster::eventually(Duration::from_secs(5), || async {
        assert_eq!(isr(&c).await, Some(vec![1, 2]), "node 3 joined the ISR");
        None::<()>
    })
    .await;
    assert!(watched.is_none());
    let seconds = start.elapsed().as_secs_f64();
    let rate = (failed(&c) - before) / seconds;
    assert!(
        rate <= 3.0,
        "{rate:.1} failed logins a second at the leader"
    );
    assert!(!contains(&segment(&c, 3), &sent[0]));
}
