//! Reconcile scenarios for KafkaTopic on kube's mock service with an in-memory Kafka: finalizer
//! add and remove, create, grow, drift revert, conflicts, errors as conditions.

use http::Method;
use serde_json::{json, Value};

use super::*;
use crate::operator::testing::{context, list, merge, FakeApiServer, FakeKafka};

const TOPICS: &str = "/apis/kafka.evenkeel.dev/v1alpha1/namespaces/ns/kafkatopics";
const CLUSTER: &str = "/apis/kafka.evenkeel.dev/v1alpha1/namespaces/ns/kafkaclusters/main";

fn topic_json(name: &str, created: &str, extra: Value) -> Value {
    let mut t = json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaTopic",
        "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"), "generation": 2,
            "resourceVersion": "7", "creationTimestamp": created,
            "finalizers": [TOPIC_FINALIZER],
        },
        "spec": {"clusterRef": "main", "partitions": 6, "replicas": 3,
                 "config": {"retention.ms": "3600000"}},
    });
    merge(&mut t, extra);
    t
}

fn cluster_json() -> Value {
    json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaCluster",
        "metadata": {"name": "main", "namespace": "ns", "uid": "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b"},
        "spec": {"replicas": 3},
    })
}

fn parse(v: &Value) -> Arc<KafkaTopic> {
    Arc::new(serde_json::from_value(v.clone()).expect("KafkaTopic parses"))
}

/// A server that lists `topics` in the namespace and has the cluster.
fn server_with(topics: &[Value]) -> FakeApiServer {
    let s = FakeApiServer::default();
    s.get(
        TOPICS,
        list("KafkaTopic", "kafka.evenkeel.dev/v1alpha1", topics.to_vec()),
    );
    for t in topics {
        s.put(
            &format!("{TOPICS}/{}", t["metadata"]["name"].as_str().unwrap()),
            t.clone(),
        );
    }
    s.put(CLUSTER, cluster_json());
    s
}

fn status_patch(s: &FakeApiServer, name: &str) -> Value {
    let patches = s.calls_to(Method::PATCH, &format!("kafkatopics/{name}/status"));
    assert_eq!(patches.len(), 1, "one status patch for {name}: {patches:?}");
    patches[0].body["status"].clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn finalizer_is_added_before_anything_else() {
    let mut t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    t["metadata"]["finalizers"] = json!([]);
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    let patches = s.calls_to(Method::PATCH, "kafkatopics/orders");
    assert_eq!(patches.len(), 1);
    let ops = patches[0].body.as_array().expect("a JSON patch");
    assert!(
        ops.iter()
            .any(|op| op["op"] == "add" && op["value"] == json!([TOPIC_FINALIZER])),
        "{ops:?}"
    );
    assert!(
        kafka.log().is_empty(),
        "no Kafka change before the finalizer is there"
    );
}

#[tokio::test]
async fn new_topic_is_created_and_ready_in_status() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(kafka.log(), ["create orders 6 3"]);
    let created = kafka.topics.lock().unwrap()["orders"].clone();
    assert_eq!(created.configs["retention.ms"], "3600000");
    let st = status_patch(&s, "orders");
    let ready = condition(&st, "Ready");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "TopicReady");
    assert_eq!(st["topicId"], "id-orders");
    assert_eq!(st["topicName"], "orders");
    assert_eq!(st["partitions"], 6);
    assert_eq!(st["observedGeneration"], 2);
    assert_eq!(s.event_reasons(), ["Created"]);
}

#[tokio::test]
async fn partitions_grow_and_drifted_configs_are_reverted() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::with_topic(
        "orders",
        3,
        &[("retention.ms", "1000"), ("segment.bytes", "1048576")],
    );
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(
        kafka.log(),
        [
            "partitions orders 6",
            "alter orders set {\"retention.ms\": \"3600000\"} delete [\"segment.bytes\"]",
        ]
    );
    let st = status_patch(&s, "orders");
    assert_eq!(st["partitions"], 6);
    assert_eq!(st["topicId"], "id-existing");
    assert_eq!(s.event_reasons(), ["PartitionsIncreased", "ConfigsChanged"]);
    // A second pass finds nothing to change.
    let before = kafka.log().len();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(kafka.log().len(), before);
}

#[tokio::test]
async fn the_younger_of_two_topics_with_one_name_gets_a_resource_conflict() {
    let older = topic_json(
        "a",
        "2026-11-01T00:00:00Z",
        json!({"spec": {"topicName": "shared"}}),
    );
    let younger = topic_json(
        "b",
        "2026-11-02T00:00:00Z",
        json!({"spec": {"topicName": "shared", "partitions": 12}}),
    );
    let s = server_with(&[older.clone(), younger.clone()]);
    let kafka = FakeKafka::default();
    reconcile(parse(&younger), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(
        kafka.log().is_empty(),
        "the younger topic must not touch Kafka: {:?}",
        kafka.log()
    );
    let st = status_patch(&s, "b");
    assert_eq!(condition(&st, "ResourceConflict")["status"], "True");
    let ready = condition(&st, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "ResourceConflict");
    assert!(
        ready["message"].as_str().unwrap().contains("KafkaTopic a"),
        "{ready}"
    );
    // The older one owns it.
    reconcile(parse(&older), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(kafka.log(), ["create shared 6 3"]);
}

#[tokio::test]
async fn deletion_deletes_the_topic_then_removes_the_finalizer() {
    let t = topic_json(
        "orders",
        "2026-11-01T00:00:00Z",
        json!({"metadata": {"deletionTimestamp": "2026-11-03T00:00:00Z"}}),
    );
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::with_topic("orders", 6, &[]);
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(kafka.log(), ["delete orders"]);
    let patches = s.calls_to(Method::PATCH, "kafkatopics/orders");
    assert_eq!(patches.len(), 1);
    let ops = patches[0].body.as_array().expect("a JSON patch");
    assert!(
        ops.iter()
            .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
        "{ops:?}"
    );
}

#[tokio::test]
async fn deletion_with_retain_policy_keeps_the_topic() {
    let t = topic_json(
        "orders",
        "2026-11-01T00:00:00Z",
        json!({"metadata": {"deletionTimestamp": "2026-11-03T00:00:00Z",
                            "annotations": {DELETE_POLICY_ANNOTATION: "retain"}}}),
    );
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(kafka.log().is_empty());
    assert_eq!(
        s.calls_to(Method::PATCH, "kafkatopics/orders").len(),
        1,
        "finalizer removed"
    );
    assert_eq!(s.event_reasons(), ["TopicRetained"]);
}

#[tokio::test]
async fn deletion_is_not_blocked_when_the_cluster_is_gone() {
    let t = topic_json(
        "orders",
        "2026-11-01T00:00:00Z",
        json!({"metadata": {"deletionTimestamp": "2026-11-03T00:00:00Z"}}),
    );
    let s = FakeApiServer::default();
    s.get(
        TOPICS,
        list("KafkaTopic", "kafka.evenkeel.dev/v1alpha1", vec![t.clone()]),
    );
    s.put(&format!("{TOPICS}/orders"), t.clone());
    let kafka = FakeKafka::default();
    *kafka.fail.lock().unwrap() = Some(AdminError::transport("no brokers"));
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert_eq!(
        s.calls_to(Method::PATCH, "kafkatopics/orders").len(),
        1,
        "finalizer removed"
    );
}

#[tokio::test]
async fn deletion_waits_while_the_cluster_exists_but_is_unreachable() {
    let t = topic_json(
        "orders",
        "2026-11-01T00:00:00Z",
        json!({"metadata": {"deletionTimestamp": "2026-11-03T00:00:00Z"}}),
    );
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    *kafka.fail.lock().unwrap() = Some(AdminError::transport("connection refused"));
    assert!(reconcile(parse(&t), context(&s, &kafka)).await.is_err());
    assert!(
        s.calls_to(Method::PATCH, "kafkatopics/orders").is_empty(),
        "finalizer kept"
    );
}

#[tokio::test]
async fn kafka_errors_become_conditions() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    *kafka.fail.lock().unwrap() = Some(AdminError {
        code: Some(40),
        name: "INVALID_CONFIG".into(),
        message: "Invalid value abc for configuration retention.ms".into(),
    });
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("an error in Kafka is a status");
    let st = status_patch(&s, "orders");
    let ready = condition(&st, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidConfig");
    assert_eq!(
        ready["message"],
        "Invalid value abc for configuration retention.ms"
    );
    assert!(s.event_reasons().contains(&"InvalidConfig".to_string()));
}

#[tokio::test]
async fn missing_cluster_is_a_condition_not_a_crash() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = FakeApiServer::default();
    s.get(
        TOPICS,
        list("KafkaTopic", "kafka.evenkeel.dev/v1alpha1", vec![t.clone()]),
    );
    s.put(&format!("{TOPICS}/orders"), t.clone());
    let kafka = FakeKafka::default();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    let st = status_patch(&s, "orders");
    assert_eq!(condition(&st, "Ready")["reason"], "ClusterNotFound");
    assert!(kafka.log().is_empty());
}

#[tokio::test]
async fn a_partition_decrease_is_reported_and_nothing_changes() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::with_topic("orders", 8, &[]);
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(kafka.log().is_empty(), "{:?}", kafka.log());
    let ready = condition(&status_patch(&s, "orders"), "Ready").clone();
    assert_eq!(ready["reason"], "InvalidPartitions");
    assert!(ready["message"]
        .as_str()
        .unwrap()
        .contains("cannot be decreased"));
}

#[tokio::test]
async fn when_both_conflicting_topics_are_deleted_only_the_owner_deletes_the_topic() {
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-11-03T00:00:00Z"}});
    let mut older = topic_json(
        "a",
        "2026-11-01T00:00:00Z",
        json!({"spec": {"topicName": "shared"},
        "metadata": {"annotations": {DELETE_POLICY_ANNOTATION: "retain"}}}),
    );
    merge(&mut older, deleting.clone());
    let mut younger = topic_json(
        "b",
        "2026-11-02T00:00:00Z",
        json!({"spec": {"topicName": "shared"}}),
    );
    merge(&mut younger, deleting);
    let s = server_with(&[older.clone(), younger.clone()]);
    let kafka = FakeKafka::with_topic("shared", 6, &[]);
    reconcile(parse(&younger), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(
        kafka.log().is_empty(),
        "the younger one never owned the topic: {:?}",
        kafka.log()
    );
    reconcile(parse(&older), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(
        kafka.log().is_empty(),
        "the owner retains it: {:?}",
        kafka.log()
    );
}

#[tokio::test]
async fn a_second_pass_over_an_unchanged_topic_patches_no_status() {
    let t = topic_json("orders", "2026-11-01T00:00:00Z", json!({}));
    let s = server_with(std::slice::from_ref(&t));
    let kafka = FakeKafka::default();
    reconcile(parse(&t), context(&s, &kafka))
        .await
        .expect("reconciles");
    let mut again = t.clone();
    again["status"] = status_patch(&s, "orders");
    let s = server_with(std::slice::from_ref(&again));
    reconcile(parse(&again), context(&s, &kafka))
        .await
        .expect("reconciles");
    assert!(s
        .calls_to(Method::PATCH, "kafkatopics/orders/status")
        .is_empty());
}
