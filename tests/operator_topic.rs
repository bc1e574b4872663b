//! The operator's KafkaTopic logic (`operator::topic::sync_topic`) against a real evenkeel broker
//! process: create, grow, config change, drift revert, delete. No Kubernetes involved.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use evenkeel::client::{AdminClient, AlterConfigOp, AlterOpType};
use evenkeel::operator::crd::KafkaTopicSpec;
use evenkeel::operator::kafka::{AdminConnector, ClientConnector, TopicAdmin};
use evenkeel::operator::topic::sync_topic;

fn spec(partitions: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
    KafkaTopicSpec {
        cluster_ref: "main".into(),
        topic_name: None,
        partitions,
        replicas: 1,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

async fn connect(bootstrap: &str) -> AdminClient {
    ClientConnector {
        timeout: Duration::from_secs(15),
    }
    .connect(bootstrap, evenkeel::client::ClientSecurity::plaintext())
    .await
    .expect("connects to the broker")
}

#[tokio::test]
async fn topic_lifecycle_create_grow_configure_revert_drift_delete() {
    let broker = common::BrokerProcess::start(&[]);
    let admin = connect(&broker.bootstrap).await;

    // Create.
    let created = sync_topic(&admin, "orders", &spec(3, &[("retention.ms", "3600000")]))
        .await
        .expect("creates");
    assert_eq!(created.actions[0].0, "Created");
    let state = admin
        .describe_topic("orders")
        .await
        .unwrap()
        .expect("topic exists");
    assert_eq!(state.partitions, 3);
    assert_eq!(state.replication_factor, 1);
    assert_eq!(state.topic_id, created.topic_id);
    assert_eq!(
        state.configs,
        BTreeMap::from([("retention.ms".into(), "3600000".into())])
    );

    // Nothing to do on a second pass.
    let again = sync_topic(&admin, "orders", &spec(3, &[("retention.ms", "3600000")]))
        .await
        .unwrap();
    assert!(again.actions.is_empty(), "{:?}", again.actions);

    // Grow and change configs.
    let grown = sync_topic(
        &admin,
        "orders",
        &spec(
            5,
            &[("retention.ms", "7200000"), ("cleanup.policy", "compact")],
        ),
    )
    .await
    .expect("grows");
    assert_eq!(grown.partitions, 5);
    let state = admin.describe_topic("orders").await.unwrap().unwrap();
    assert_eq!(state.partitions, 5);
    assert_eq!(state.configs["retention.ms"], "7200000");
    assert_eq!(state.configs["cleanup.policy"], "compact");

    // Someone changes the topic behind the operator's back; the next pass reverts it.
    admin
        .alter_topic_configs(
            "orders",
            &[
                AlterConfigOp {
                    name: "retention.ms".into(),
                    op: AlterOpType::Set,
                    value: Some("1000".into()),
                },
                AlterConfigOp {
                    name: "segment.bytes".into(),
                    op: AlterOpType::Set,
                    value: Some("1048576".into()),
                },
            ],
        )
        .await
        .expect("drift");
    let reverted = sync_topic(
        &admin,
        "orders",
        &spec(
            5,
            &[("retention.ms", "7200000"), ("cleanup.policy", "compact")],
        ),
    )
    .await
    .expect("reverts");
    assert_eq!(reverted.actions.len(), 1, "{:?}", reverted.actions);
    let state = admin.describe_topic("orders").await.unwrap().unwrap();
    assert_eq!(
        state.configs,
        BTreeMap::from([
            ("cleanup.policy".into(), "compact".into()),
            ("retention.ms".into(), "7200000".into()),
        ])
    );

    // A decrease is refused with Kafka's error name and changes nothing.
    let err = sync_topic(&admin, "orders", &spec(2, &[]))
        .await
        .unwrap_err();
    assert_eq!(err.name, "INVALID_PARTITIONS");
    assert_eq!(
        admin
            .describe_topic("orders")
            .await
            .unwrap()
            .unwrap()
            .partitions,
        5
    );

    // A bad config value is the broker's error, as a condition would show it.
    let err = sync_topic(&admin, "orders", &spec(5, &[("retention.ms", "soon")]))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "InvalidConfig", "{err}");

    // Delete; deleting again is not an error.
    // (the trait's delete, as the reconciler calls it, not AdminClient's own)
    TopicAdmin::delete_topic(&admin, "orders")
        .await
        .expect("deletes");
    assert!(admin.describe_topic("orders").await.unwrap().is_none());
    TopicAdmin::delete_topic(&admin, "orders")
        .await
        .expect("deleting a deleted topic is fine");
}

#[tokio::test]
async fn cluster_state_shows_partitions_leaders_and_min_isr() {
    let broker = common::BrokerProcess::start(&[]);
    let admin = connect(&broker.bootstrap).await;
    sync_topic(&admin, "events", &spec(2, &[("min.insync.replicas", "1")]))
        .await
        .unwrap();
    let state = admin.cluster_state().await.expect("cluster state");
    assert!(!state.cluster_id.is_empty());
    // One node that is broker and controller.
    assert_eq!(state.brokers.len(), 1, "{:?}", state.brokers);
    assert_eq!(state.controller_id, state.brokers[0]);
    let events: Vec<_> = state
        .partitions
        .iter()
        .filter(|p| p.topic == "events")
        .collect();
    assert_eq!(events.len(), 2);
    for p in events {
        assert_eq!(p.leader, state.brokers[0]);
        assert_eq!(p.replicas, vec![p.leader]);
        assert_eq!(p.isr, vec![p.leader]);
        assert_eq!(p.min_insync_replicas, 1);
    }
}
