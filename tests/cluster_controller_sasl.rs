//! The controller listener on SASL, as Kafka configures it (`sasl.mechanism.controller.protocol`
//! and the listener's JAAS config): three voters and a broker-only node keep the quorum and
//! register with their login; a caller without a login gets nothing, a wrong password is
//! refused, and a login that is not a super user gets CLUSTER_AUTHORIZATION_FAILED.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::{client_security, controller_answers, until, Cluster};
use evenkeel::client::{ClientError, ClientSecurity};
use evenkeel::protocol::errors;

const WAIT: Duration = Duration::from_secs(60);

const JAAS: &str = "listener.name.controller.plain.sasl.jaas.config=\
    org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"quorum\" password=\"quorum-secret\" \
    user_quorum=\"quorum-secret\" user_intruder=\"intruder-secret\";";

/// Four nodes: 1-3 the voters, 4 a broker that follows the quorum; every node logs in to the
/// controller listener with PLAIN as `quorum`, a super user. The client listener is PLAINTEXT
/// (User:ANONYMOUS, a super user too, for the test's admin calls).
fn start() -> (Cluster, Vec<String>) {
    let overrides = [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        JAAS,
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:quorum;User:ANONYMOUS",
        // Sessions end after 1 s (KIP-368): the quorum's pooled connections and the brokers'
        // controller channels must log in again as they go on.
        "connections.max.reauth.ms=1000",
        // A broker that loses its heartbeats for 3 s is fenced: the test would see it.
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=500",
    ];
    let controllers = std::sync::Mutex::new(Vec::new());
    let c = Cluster::start_with(4, &overrides, |id, ports| {
        if id <= 3 {
            let addr = format!("127.0.0.1:{}", ports.controller);
            controllers.lock().unwrap().push(addr);
        }
        Vec::new()
    });
    let mut controllers = controllers.into_inner().unwrap();
    controllers.sort();
    (c, controllers)
}

fn plain_login(user: &str, password: &str) -> ClientSecurity {
    let jaas = format!(
        "org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"{user}\" password=\"{password}\";"
    );
    client_security(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.jaas.config", &jaas),
    ])
}

#[test]
fn a_sasl_controller_listener_serves_only_logged_in_callers_with_the_right() {
    // The nodes (children of this, the file's only test) log why connections close, to show
    // that sessions did end; set before the runtime starts its threads.
    std::env::set_var("EVENKEEL_LOG", "warn,evenkeel::protocol::listener=info");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(scenario());
}

async fn scenario() {
    let (c, controllers) = start();
    // Every node started, the broker-only one included: it registered and was unfenced over
    // the SASL controller listener, and the voters elected a leader over it.
    let admin = common::cluster::admin(&c.bootstrap()).await;
    until("four registered brokers", WAIT, || async {
        let cluster = admin.describe_cluster().await.ok()?;
        (cluster.brokers.len() == 4).then_some(())
    })
    .await;
    admin
        .create_topic_with_assignment("orders", &[vec![1, 2, 4]], &BTreeMap::new())
        .await
        .expect("a topic on a voter and the broker-only node");
    let p = until("orders-0 fully in sync", WAIT, || async {
        let p = common::cluster::partition(&c.bootstrap(), "orders", 0).await?;
        (p.isr.len() == 3).then_some(p)
    })
    .await;
    assert!(p.isr.contains(&4), "{p:?}");

    let quorum = plain_login("quorum", "quorum-secret");
    for controller in &controllers {
        let answers = controller_answers(controller, &quorum).await;
        let (heartbeat, describe) = answers.expect("the quorum's login is served");
        assert_ne!(heartbeat, errors::CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(describe, errors::NONE);
    }

    let intruder = plain_login("intruder", "intruder-secret");
    let answers = controller_answers(&controllers[0], &intruder).await;
    let refused = errors::CLUSTER_AUTHORIZATION_FAILED;
    assert_eq!(answers.expect("a login is served"), (refused, refused));

    let wrong = plain_login("quorum", "not-the-secret");
    let e = controller_answers(&controllers[0], &wrong)
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::Security { .. })
            && e.to_string().contains("Authentication failed"),
        "{e}"
    );
    // Without a login the controller answers nothing but ApiVersions: the heartbeat closes
    // the connection.
    let e = controller_answers(&controllers[0], &ClientSecurity::plaintext())
        .await
        .unwrap_err();
    assert!(!matches!(e, ClientError::Kafka { .. }), "{e}");

    // Several session lifetimes later (every session has ended and been logged in again), the
    // broker-only node is still registered and unfenced, and the quorum still commits: a topic
    // on it and two voters is made and fully in sync.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cluster = admin
        .describe_cluster()
        .await
        .expect("describe the cluster");
    let mut ids: Vec<i32> = cluster.brokers.iter().map(|b| b.id).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4], "a broker was fenced: {cluster:?}");
    admin
        .create_topic_with_assignment("later", &[vec![4, 2, 3]], &BTreeMap::new())
        .await
        .expect("a topic after the sessions ended");
    until("later-0 fully in sync", WAIT, || async {
        let p = common::cluster::partition(&c.bootstrap(), "later", 0).await?;
        (p.isr.len() == 3 && p.leader == 4).then_some(())
    })
    .await;
    let quorum = admin.describe_quorum().await.expect("describe the quorum");
    assert!(quorum.leader_id >= 1 && quorum.leader_id <= 3, "{quorum:?}");
    // The sessions did end on the voters (a connection used after its end is closed).
    let expired = "the SASL session on CONTROLLER expired";
    assert!(
        (1..=3).any(|id| c.log(id).contains(expired)),
        "no controller listener session ended: {}",
        c.log_tails(20)
    );
}
