//! Reconcile scenarios for KafkaCluster: the restart-safety rules as pure functions, then whole
//! reconciles on kube's mock service: one pod at a time, scale-down refusal, status.

use http::Method;
use serde_json::{json, Value};

use super::*;
use crate::operator::kafka::PartitionState;
use crate::operator::testing::{context, list, FakeApiServer, FakeKafka};

fn partition(topic: &str, p: i32, replicas: &[i32], isr: &[i32], min_isr: i32) -> PartitionState {
    PartitionState {
        topic: topic.into(),
        partition: p,
        leader: isr.first().copied().unwrap_or(-1),
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        min_insync_replicas: min_isr,
    }
}

fn state(controller: i32, partitions: Vec<PartitionState>) -> ClusterState {
    ClusterState {
        cluster_id: "c".into(),
        controller_id: controller,
        brokers: vec![0, 1, 2, 3],
        partitions,
    }
}

fn pods(n: i32, stale: &[i32], not_ready: &[i32]) -> Vec<PodView> {
    (0..n)
        .map(|i| PodView {
            name: format!("main-kafka-{i}"),
            ordinal: i,
            ready: !not_ready.contains(&i),
            stale: stale.contains(&i),
            terminating: false,
            waiting: None,
        })
        .collect()
}

#[test]
fn a_broker_at_the_min_isr_edge_cannot_restart() {
    let s = state(0, vec![partition("t", 0, &[0, 1, 2], &[0, 1], 2)]);
    let err = can_restart(1, &s).unwrap_err();
    assert!(err.contains("t-0 below min.insync.replicas=2"), "{err}");
    // Broker 2 is not in the ISR: taking it down changes nothing.
    assert!(can_restart(2, &s).is_ok());
    // RF at or below min ISR: acks=all is impossible anyway, so the roll may go on (Strimzi).
    let s = state(0, vec![partition("t", 0, &[0, 1], &[0, 1], 2)]);
    assert!(can_restart(0, &s).is_ok());
}

#[test]
fn roll_goes_one_pod_at_a_time_with_the_controller_last() {
    let s = state(1, vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    assert_eq!(
        next_roll_step(&pods(3, &[0, 1, 2], &[]), 3, Some(&s)),
        RollStep::Restart("main-kafka-0".into())
    );
    assert_eq!(
        next_roll_step(&pods(3, &[1, 2], &[]), 3, Some(&s)),
        RollStep::Restart("main-kafka-2".into())
    );
    assert_eq!(
        next_roll_step(&pods(3, &[1], &[]), 3, Some(&s)),
        RollStep::Restart("main-kafka-1".into())
    );
    assert_eq!(
        next_roll_step(&pods(3, &[], &[]), 3, Some(&s)),
        RollStep::Done
    );
}

#[test]
fn roll_waits_for_the_restarted_pod_to_be_ready_and_caught_up() {
    let s = state(0, vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    let step = next_roll_step(&pods(3, &[1, 2], &[0]), 3, Some(&s));
    assert_eq!(
        step,
        RollStep::Wait("waiting for pod main-kafka-0 to be ready".into())
    );
    let mut terminating = pods(3, &[1, 2], &[]);
    terminating[0].terminating = true;
    assert!(matches!(
        next_roll_step(&terminating, 3, Some(&s)),
        RollStep::Wait(_)
    ));
    let behind = state(0, vec![partition("t", 0, &[0, 1, 2], &[1, 2], 2)]);
    let step = next_roll_step(&pods(3, &[1, 2], &[]), 3, Some(&behind));
    assert!(
        matches!(&step, RollStep::Wait(m) if m.contains("catch up")),
        "{step:?}"
    );
}

#[test]
fn a_stale_pod_that_is_not_ready_is_restarted_first() {
    // A broker crash-looping on a bad config serves nothing: restarting it is always safe.
    let s = state(0, vec![]);
    assert_eq!(
        next_roll_step(&pods(3, &[0, 2], &[2]), 3, Some(&s)),
        RollStep::Restart("main-kafka-2".into())
    );
    assert_eq!(
        next_roll_step(&pods(3, &[0, 2], &[2]), 3, None),
        RollStep::Restart("main-kafka-2".into())
    );
}

#[test]
fn roll_waits_while_a_deleted_pod_is_not_recreated_yet() {
    let s = state(0, vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    // Pod 1 was deleted and is gone; pods 0 and 2 are ready and stale.
    let present: Vec<PodView> = pods(3, &[0, 2], &[])
        .into_iter()
        .filter(|p| p.ordinal != 1)
        .collect();
    let step = next_roll_step(&present, 3, Some(&s));
    assert_eq!(
        step,
        RollStep::Wait("waiting for broker 1's pod to be created".into())
    );
}

#[test]
fn roll_is_blocked_without_a_view_of_the_brokers() {
    let step = next_roll_step(&pods(3, &[0], &[]), 3, None);
    assert!(
        matches!(&step, RollStep::Blocked(m) if m.contains("min.insync.replicas")),
        "{step:?}"
    );
}

#[test]
fn scale_down_is_refused_while_removed_brokers_hold_replicas() {
    let s = state(
        0,
        vec![
            partition("t", 0, &[0, 1], &[0, 1], 1),
            partition("t", 1, &[2, 3], &[2, 3], 1),
        ],
    );
    let err = check_scale_down(4, 3, &s).unwrap_err();
    assert_eq!(
        err,
        "cannot scale down from 4 to 3 brokers: brokers [3] still hold 1 partition replicas (t-1)"
    );
    assert!(check_scale_down(4, 2, &s)
        .unwrap_err()
        .contains("brokers [2, 3] still hold 1"));
    let empty = state(0, vec![partition("t", 0, &[0, 1], &[0, 1], 1)]);
    assert!(check_scale_down(4, 3, &empty).is_ok());
    // A broker the metadata does not show may hold anything: refused.
    let mut partial = empty.clone();
    partial.brokers = vec![0, 1, 2];
    let err = check_scale_down(4, 3, &partial).unwrap_err();
    assert!(
        err.contains("broker 3 is not in the cluster's metadata"),
        "{err}"
    );
}

// ---- whole reconciles on the mock API server ----

const NS: &str = "/apis/kafka.evenkeel.dev/v1alpha1/namespaces/ns/kafkaclusters/main";
const STS: &str = "/apis/apps/v1/namespaces/ns/statefulsets/main-kafka";
const PODS: &str = "/api/v1/namespaces/ns/pods";

fn cluster(replicas: i32) -> Arc<KafkaCluster> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": "main", "namespace": "ns", "generation": 3,
                         "uid": "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b"},
            "spec": {"replicas": replicas},
        }))
        .expect("KafkaCluster parses"),
    )
}

fn pod_json(i: i32, revision: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("main-kafka-{i}"), "namespace": "ns",
                     "labels": {"controller-revision-hash": revision}},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    })
}

/// An API server with the cluster, an existing StatefulSet of `current` replicas whose update
/// revision is `rev2`, and `pods`.
fn server(current: i32, pods: Vec<Value>) -> FakeApiServer {
    let s = FakeApiServer::default();
    s.put(NS, serde_json::to_value(&*cluster(current)).unwrap());
    s.put(
        STS,
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "main-kafka", "namespace": "ns"},
               "spec": {"replicas": current, "selector": {}, "template": {}, "serviceName": "x"},
               "status": {"replicas": current, "updateRevision": "rev2"}}),
    );
    s.get(PODS, list("Pod", "v1", pods));
    s
}

fn kafka_with(partitions: Vec<PartitionState>) -> FakeKafka {
    let k = FakeKafka::default();
    *k.cluster.lock().unwrap() = state(0, partitions);
    k
}

fn applied_sts_replicas(s: &FakeApiServer) -> i64 {
    let patches = s.calls_to(Method::PATCH, "statefulsets/main-kafka");
    assert_eq!(patches.len(), 1);
    assert!(
        patches[0].uri.contains("fieldManager=evenkeel-operator"),
        "{}",
        patches[0].uri
    );
    assert!(patches[0].uri.contains("force=true"));
    patches[0].body["spec"]["replicas"]
        .as_i64()
        .expect("replicas")
}

fn status(s: &FakeApiServer) -> Value {
    let patches = s.calls_to(Method::PATCH, "kafkaclusters/main/status");
    assert_eq!(patches.len(), 1);
    patches[0].body["status"].clone()
}

fn condition<'a>(st: &'a Value, type_: &str) -> &'a Value {
    st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn every_object_is_server_side_applied_and_status_reports_ready() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    for path in [
        "configmaps/main-kafka-config",
        "services/main-kafka-brokers",
        "services/main-kafka-bootstrap",
        "poddisruptionbudgets/main-kafka",
        "statefulsets/main-kafka",
    ] {
        let calls = s.calls_to(Method::PATCH, path);
        assert_eq!(calls.len(), 1, "{path} applied once");
        assert!(calls[0].uri.contains("fieldManager=evenkeel-operator"));
    }
    assert_eq!(applied_sts_replicas(&s), 3);
    assert!(s.calls_to(Method::DELETE, "pods").is_empty());
    let st = status(&s);
    assert_eq!(st["readyBrokers"], 3);
    assert_eq!(condition(&st, "Ready")["status"], "True");
    assert_eq!(condition(&st, "Reconciling")["status"], "False");
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    assert_eq!(st["clusterId"], "DyprPB1OT1CKa3yNng8aKw");
    assert_eq!(
        st["listeners"][0]["bootstrapServers"],
        "main-kafka-bootstrap.ns.svc:9092"
    );
    assert_eq!(st["brokers"][0]["leaders"], 1);
    assert_eq!(st["brokers"][1]["leaders"], 0);
    assert_eq!(st["observedGeneration"], 3);
}

#[tokio::test]
async fn ready_pods_of_brokers_not_yet_registered_keep_the_cluster_not_ready_and_requeue_soon() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    let k = kafka_with(vec![partition("t", 0, &[0, 1], &[0, 1], 1)]);
    // Pod 2 passes its probe, but the controller has not registered broker 2 yet.
    k.cluster.lock().unwrap().brokers = vec![0, 1];
    let action = reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    assert_eq!(st["readyBrokers"], 3);
    assert_eq!(condition(&st, "Ready")["status"], "False");
    assert_eq!(condition(&st, "Ready")["reason"], "BrokersNotRegistered");
    assert!(
        condition(&st, "Ready")["message"]
            .as_str()
            .is_some_and(|m| m.contains("[2]")),
        "{st}"
    );
    assert_eq!(
        action,
        Action::requeue(std::time::Duration::from_secs(2)),
        "looked at again soon, not at the next resync"
    );

    // Registered: Ready, with every broker's leader count.
    let s = server(3, (0..3).map(|i| pod_json(i, "rev2", true)).collect());
    k.cluster.lock().unwrap().brokers = vec![0, 1, 2];
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    assert_eq!(condition(&st, "Ready")["status"], "True");
    assert_eq!(st["brokers"][2]["leaders"], 0);
}

const BACK_OFF: &str = "ImagePullBackOff";

/// One container status of a pod that cannot run its image `evenkeel:nope`, waiting with
/// `state` (a reason name, or a whole `waiting` object).
fn waiting(name: &str, state: impl Into<Value>) -> Value {
    let state = match state.into() {
        Value::String(reason) => json!({"reason": reason,
                                        "message": "Back-off pulling image \"evenkeel:nope\""}),
        other => other,
    };
    json!([{"name": name, "image": "evenkeel:nope", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"waiting": state}}])
}

#[tokio::test]
async fn an_init_container_that_cannot_pull_its_image_is_named_in_the_roll() {
    let mut pods: Vec<Value> = (0..3).map(|i| pod_json(i, "rev1", true)).collect();
    pods[2] = pod_json(2, "rev2", false);
    pods[2]["status"]["initContainerStatuses"] = waiting("format", BACK_OFF);
    pods[2]["status"]["containerStatuses"] =
        waiting("broker", json!({"reason": "PodInitializing"}));
    let s = server(3, pods);
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1], 2)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    let message = condition(&st, "Ready")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("Init:ImagePullBackOff: Back-off pulling image"),
        "{st}"
    );
}

#[tokio::test]
async fn a_new_pod_whose_image_cannot_be_pulled_holds_the_roll_and_says_why() {
    let mut pods: Vec<Value> = (0..3).map(|i| pod_json(i, "rev1", true)).collect();
    pods[2] = pod_json(2, "rev2", false);
    pods[2]["status"]["containerStatuses"] = waiting("broker", BACK_OFF);
    let s = server(3, pods);
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1], 2)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(
        s.calls_to(Method::DELETE, "pods/").is_empty(),
        "the old pods keep serving"
    );
    let st = status(&s);
    let message = condition(&st, "Ready")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("main-kafka-2") && message.contains("ImagePullBackOff"),
        "{st}"
    );
}

#[tokio::test]
async fn a_config_roll_deletes_one_pod_per_reconcile() {
    let stale: Vec<Value> = (0..3).map(|i| pod_json(i, "rev1", true)).collect();
    let s = server(3, stale);
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let deletes = s.calls_to(Method::DELETE, "pods/");
    assert_eq!(deletes.len(), 1, "exactly one pod at a time: {deletes:?}");
    assert!(
        deletes[0].path().ends_with("pods/main-kafka-1"),
        "controller (0) last: {}",
        deletes[0].uri
    );
    let st = status(&s);
    assert_eq!(condition(&st, "Reconciling")["reason"], "RollingRestart");
    assert_eq!(condition(&st, "Ready")["status"], "False");
    assert!(s.event_reasons().contains(&"RollingRestart".to_string()));

    // Next pass: pod 1 is back but not ready yet, so nothing else is restarted.
    let mut pods: Vec<Value> = (0..3).map(|i| pod_json(i, "rev1", true)).collect();
    pods[1] = pod_json(1, "rev2", false);
    let s = server(3, pods);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::DELETE, "pods/").is_empty());
    assert!(condition(&status(&s), "Reconciling")["message"]
        .as_str()
        .unwrap()
        .contains("main-kafka-1 to be ready"));
}

#[tokio::test]
async fn scale_down_is_refused_with_a_degraded_condition() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(4, ready);
    let k = kafka_with(vec![partition("t", 0, &[3, 0], &[3, 0], 1)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(
        applied_sts_replicas(&s),
        4,
        "the StatefulSet keeps its 4 brokers"
    );
    let st = status(&s);
    let degraded = condition(&st, "Degraded");
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ScaleDownBlocked");
    assert!(degraded["message"]
        .as_str()
        .unwrap()
        .contains("brokers [3] still hold 1 partition replicas (t-0)"));
    assert_eq!(condition(&st, "Ready")["status"], "False");
    assert!(s.event_reasons().contains(&"ScaleDownBlocked".to_string()));
}

#[tokio::test]
async fn scale_down_of_empty_brokers_goes_ahead() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(4, ready);
    let k = kafka_with(vec![partition("t", 0, &[1, 0], &[1, 0], 1)]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(applied_sts_replicas(&s), 3);
    assert_eq!(condition(&status(&s), "Degraded")["status"], "False");
}

#[tokio::test]
async fn scale_down_is_refused_when_the_brokers_cannot_be_asked() {
    let s = server(4, vec![]);
    let k = FakeKafka::default();
    *k.fail.lock().unwrap() = Some(crate::operator::kafka::AdminError::transport("refused"));
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(applied_sts_replicas(&s), 4);
    assert_eq!(
        condition(&status(&s), "Degraded")["reason"],
        "ScaleDownBlocked"
    );
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_nothing_is_applied() {
    let s = server(3, vec![]);
    let k = FakeKafka::default();
    let mut kc = (*cluster(3)).clone();
    kc.spec.config.insert("log.dirs".into(), "/tmp".into());
    reconcile(Arc::new(kc), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::PATCH, "statefulsets").is_empty());
    let st = status(&s);
    assert_eq!(condition(&st, "Degraded")["reason"], "InvalidSpec");
    assert!(condition(&st, "Ready")["message"]
        .as_str()
        .unwrap()
        .contains("spec.config.log.dirs"));
}

const REBALANCER_ACCOUNT: &str = "/api/v1/namespaces/ns/serviceaccounts/main-rebalancer";
const REBALANCER_ROLE: &str =
    "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/main-rebalancer";
const REBALANCER_BINDING: &str =
    "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/main-rebalancer";

fn with_rebalancer() -> Arc<KafkaCluster> {
    let mut kc = (*cluster(3)).clone();
    kc.spec.rebalancer.enabled = true;
    Arc::new(kc)
}

/// The index in the call log of the first call with `method` whose path contains `fragment`.
fn call_index(s: &FakeApiServer, method: Method, fragment: &str) -> usize {
    s.calls
        .lock()
        .unwrap()
        .iter()
        .position(|c| c.method == method && c.path().contains(fragment))
        .unwrap_or_else(|| panic!("no {method} to {fragment}"))
}

#[tokio::test]
async fn the_rebalancer_runs_as_a_sidecar_under_its_own_service_account() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    reconcile(with_rebalancer(), context(&s, &k))
        .await
        .expect("reconciles");
    let sts = &s.calls_to(Method::PATCH, "statefulsets/main-kafka")[0].body;
    let pod = &sts["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "broker and rebalancer");
    assert_eq!(containers[1]["name"], "rebalancer");
    let args = containers[1]["args"].as_array().unwrap();
    for pair in [["--broker-id", "$(POD_INDEX)"], ["--kafka-cluster", "main"]] {
        assert!(
            args.windows(2).any(|w| w[0] == pair[0] && w[1] == pair[1]),
            "{args:?}"
        );
    }
    assert_eq!(pod["serviceAccountName"], "main-rebalancer");
    for path in [
        "serviceaccounts/main-rebalancer",
        "roles/main-rebalancer",
        "rolebindings/main-rebalancer",
    ] {
        let calls = s.calls_to(Method::PATCH, path);
        assert_eq!(calls.len(), 1, "{path} applied once");
        assert!(calls[0].uri.contains("fieldManager=evenkeel-operator"));
        assert!(calls[0].uri.contains("force=true"));
        assert_eq!(
            calls[0].body["metadata"]["ownerReferences"][0]["uid"], UID,
            "{path} owned by the cluster"
        );
    }
    let role = &s.calls_to(Method::PATCH, "roles/main-rebalancer")[0].body;
    assert_eq!(
        role["rules"][3],
        json!({"apiGroups": ["kafka.evenkeel.dev"], "resources": ["kafkaclusters/status"],
               "resourceNames": ["main"], "verbs": ["get", "patch"]})
    );
    // The account exists before a pod may name it.
    let sts_at = call_index(&s, Method::PATCH, "statefulsets/main-kafka");
    for path in [
        "serviceaccounts/main-rebalancer",
        "roles/main-rebalancer",
        "rolebindings/main-rebalancer",
    ] {
        assert!(call_index(&s, Method::PATCH, path) < sts_at, "{path}");
    }
    assert!(s.calls_to(Method::DELETE, "").is_empty());
    let st = status(&s);
    assert_eq!(
        condition(&st, "Degraded")["status"],
        "False",
        "a rebalancer does not degrade the cluster: {st}"
    );
    assert_eq!(condition(&st, "Ready")["status"], "True");
}

/// An object named `main-rebalancer` controlled by the object with `owner_uid`.
fn rebalancer_object(api_version: &str, kind: &str, owner_uid: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "main-rebalancer", "namespace": "ns", "uid": format!("{kind}-uid"),
                     "ownerReferences": [{"apiVersion": "kafka.evenkeel.dev/v1alpha1",
                                          "kind": "KafkaCluster", "name": "main",
                                          "uid": owner_uid, "controller": true}]},
    })
}

fn put_rebalancer_identity(s: &FakeApiServer, owner_uid: &str) {
    s.put(
        REBALANCER_ACCOUNT,
        rebalancer_object("v1", "ServiceAccount", owner_uid),
    );
    s.put(
        REBALANCER_ROLE,
        rebalancer_object("rbac.authorization.k8s.io/v1", "Role", owner_uid),
    );
    s.put(
        REBALANCER_BINDING,
        rebalancer_object("rbac.authorization.k8s.io/v1", "RoleBinding", owner_uid),
    );
}

#[tokio::test]
async fn disabling_the_rebalancer_deletes_its_identity_after_the_pods_leave_it() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    put_rebalancer_identity(&s, UID);
    let k = kafka_with(vec![]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let deletes = s.calls_to(Method::DELETE, "");
    let deleted: Vec<&str> = deletes.iter().map(|c| c.path()).collect();
    assert_eq!(
        deleted,
        [REBALANCER_BINDING, REBALANCER_ROLE, REBALANCER_ACCOUNT]
    );
    for (call, kind) in deletes
        .iter()
        .zip(["RoleBinding", "Role", "ServiceAccount"])
    {
        assert_eq!(
            call.body["preconditions"]["uid"],
            format!("{kind}-uid"),
            "only the object that was checked"
        );
    }
    assert!(
        call_index(&s, Method::PATCH, "statefulsets/main-kafka")
            < call_index(&s, Method::DELETE, "serviceaccounts/main-rebalancer"),
        "the pods stop naming the account before it goes"
    );
    let sts = &s.calls_to(Method::PATCH, "statefulsets/main-kafka")[0].body;
    for field in ["serviceAccountName", "serviceAccount"] {
        assert!(
            sts["spec"]["template"]["spec"].get(field).is_none(),
            "{field}"
        );
    }
    assert!(s.calls_to(Method::PATCH, "main-rebalancer").is_empty());
    assert!(s.event_reasons().contains(&"RebalancerRemoved".to_string()));
}

#[tokio::test]
async fn without_the_rebalancer_nothing_of_its_name_is_deleted_unless_the_cluster_owns_it() {
    let k = kafka_with(vec![]);
    // Nothing there: nothing deleted, no event.
    let s = server(3, vec![]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::DELETE, "").is_empty());
    assert!(!s.event_reasons().contains(&"RebalancerRemoved".to_string()));
    // Someone else's account, Role and binding of that name are left alone.
    let s = server(3, vec![]);
    put_rebalancer_identity(&s, "11111111-2222-4333-8444-555555555555");
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::DELETE, "").is_empty());
    assert!(!s.event_reasons().contains(&"RebalancerRemoved".to_string()));
}

fn rebalance_status() -> Value {
    json!({"lastAction": "LeadershipRebalanced", "lastActionTime": "2026-01-02T03:04:05Z",
           "moves": 12, "skewBefore": 1.8, "skewAfter": 1.02,
           "message": "moved 12 leaders off broker 1"})
}

#[tokio::test]
async fn the_operator_never_writes_or_clears_the_sidecars_status_rebalance() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    let s = server(3, ready.clone());
    reconcile(with_rebalancer(), context(&s, &k))
        .await
        .expect("reconciles");
    let mut computed = status(&s);
    computed["rebalance"] = rebalance_status();
    let mut kc = (*with_rebalancer()).clone();
    kc.status = Some(serde_json::from_value(computed.clone()).expect("status parses"));

    // The sidecar wrote status.rebalance since: nothing else changed, so no patch at all.
    let s = server(3, ready);
    reconcile(Arc::new(kc.clone()), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(
        s.calls_to(Method::PATCH, "kafkaclusters/main/status")
            .is_empty(),
        "the sidecar's write alone does not make the operator patch"
    );

    // Something else changes (a broker not ready): the patch carries no rebalance, so the
    // sidecar's value stays as the sidecar wrote it.
    let mut pods: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    pods[2] = pod_json(2, "rev2", false);
    let s = server(3, pods);
    s.put(NS, serde_json::to_value(&kc).unwrap());
    reconcile(Arc::new(kc), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    assert_eq!(st["readyBrokers"], 2);
    assert!(st.get("rebalance").is_none(), "{st}");
    let stored = s.object(NS).expect("the cluster");
    assert_eq!(stored["status"]["rebalance"], rebalance_status());
    assert_eq!(stored["status"]["readyBrokers"], 2);
}

const PROXY_DEPLOYMENT: &str = "/apis/apps/v1/namespaces/ns/deployments/main-proxy";
const PROXY_SERVICE: &str = "/api/v1/namespaces/ns/services/main-proxy";
const UID: &str = "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b";

fn with_proxy(replicas: i32) -> Arc<KafkaCluster> {
    let mut kc = (*cluster(3)).clone();
    kc.spec.proxy =
        Some(serde_json::from_value(json!({"replicas": replicas})).expect("proxy parses"));
    Arc::new(kc)
}

/// An object of `kind` at `path` named `main-proxy`, controlled by the object with `owner_uid`.
fn proxy_object(api_version: &str, kind: &str, owner_uid: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "main-proxy", "namespace": "ns", "uid": format!("{kind}-uid"),
                     "ownerReferences": [{"apiVersion": "kafka.evenkeel.dev/v1alpha1",
                                          "kind": "KafkaCluster", "name": "main",
                                          "uid": owner_uid, "controller": true}]},
    })
}

/// The proxy's Deployment as the API server holds it: generation 4, `replicas` asked for, and
/// the status the Deployment controller last wrote.
fn proxy_deployment_with(
    replicas: i32,
    observed: i64,
    updated: i32,
    total: i32,
    ready: i32,
) -> Value {
    let mut d = proxy_object("apps/v1", "Deployment", UID);
    d["metadata"]["generation"] = json!(4);
    d["spec"] = json!({"replicas": replicas});
    d["status"] = json!({"observedGeneration": observed, "updatedReplicas": updated,
                         "replicas": total, "readyReplicas": ready});
    d
}

fn deployment(v: Value) -> Deployment {
    serde_json::from_value(v).expect("Deployment parses")
}

#[test]
fn the_proxy_is_ready_once_rolled_out_with_every_pod_ready() {
    let url = || "http://main-proxy.ns.svc:8080".to_string();
    let (st, waiting) = proxy_view(&deployment(proxy_deployment_with(2, 4, 2, 2, 2)), url());
    assert_eq!(
        st,
        ProxyStatus {
            replicas: 2,
            ready_replicas: 2,
            url: url()
        }
    );
    assert_eq!(waiting, None);
    for (d, want) in [
        (
            proxy_deployment_with(2, 3, 2, 2, 2),
            "the proxy's Deployment has not seen its latest spec yet",
        ),
        (
            proxy_deployment_with(2, 4, 1, 3, 2),
            "rolling out the producer proxy: 1 of 2 pods updated",
        ),
        (
            proxy_deployment_with(2, 4, 2, 3, 2),
            "rolling out the producer proxy: 1 old pods still running",
        ),
        (proxy_deployment_with(2, 4, 2, 2, 1), "1 of 2 proxies ready"),
    ] {
        let (st, waiting) = proxy_view(&deployment(d), url());
        assert_eq!(waiting.as_deref(), Some(want));
        assert_eq!(st.replicas, 2);
    }
    // A Deployment no controller has looked at yet has no status: nothing is ready.
    let mut fresh = proxy_deployment_with(3, 0, 0, 0, 0);
    fresh["status"] = Value::Null;
    let (st, waiting) = proxy_view(&deployment(fresh), url());
    assert_eq!((st.replicas, st.ready_replicas), (3, 0));
    assert!(waiting.is_some());
}

#[tokio::test]
async fn a_proxy_that_is_not_ready_holds_ready_without_degrading_the_cluster() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    s.put(PROXY_DEPLOYMENT, proxy_deployment_with(2, 4, 2, 2, 1));
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    let action = reconcile(with_proxy(2), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(action, Action::requeue(Duration::from_secs(15)));
    let st = status(&s);
    assert_eq!(
        st["proxy"],
        json!({"replicas": 2, "readyReplicas": 1, "url": "http://main-proxy.ns.svc:8080"})
    );
    assert_eq!(condition(&st, "Ready")["status"], "False");
    assert_eq!(condition(&st, "Ready")["reason"], "ProxyNotReady");
    assert_eq!(
        condition(&st, "Ready")["message"],
        "3 of 3 brokers ready; 1 of 2 proxies ready"
    );
    assert_eq!(condition(&st, "Reconciling")["status"], "True");
    assert_eq!(condition(&st, "Reconciling")["reason"], "ProxyNotReady");
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    assert_eq!(st["readyBrokers"], 3);
}

#[tokio::test]
async fn brokers_not_ready_come_before_the_proxy_in_the_ready_reason() {
    let mut pods: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    pods[1] = pod_json(1, "rev2", false);
    let s = server(3, pods);
    s.put(PROXY_DEPLOYMENT, proxy_deployment_with(2, 4, 2, 2, 0));
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    reconcile(with_proxy(2), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    assert_eq!(condition(&st, "Ready")["reason"], "BrokersNotReady");
    assert_eq!(condition(&st, "Reconciling")["reason"], "BrokersStarting");
    assert_eq!(st["proxy"]["readyReplicas"], 0);
}

#[tokio::test]
async fn a_proxy_is_applied_beside_the_brokers_and_does_not_degrade_the_cluster() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let s = server(3, ready);
    s.put(PROXY_DEPLOYMENT, proxy_deployment_with(2, 4, 2, 2, 2));
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    reconcile(with_proxy(2), context(&s, &k))
        .await
        .expect("reconciles");
    let deployment = s.calls_to(Method::PATCH, "deployments/main-proxy");
    assert_eq!(deployment.len(), 1, "the Deployment is applied once");
    assert!(deployment[0].uri.contains("fieldManager=evenkeel-operator"));
    assert!(deployment[0].uri.contains("force=true"));
    let d = &deployment[0].body;
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"], "evenkeel:test",
        "the brokers' image"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["args"][2],
        "main-kafka-bootstrap.ns.svc:9092"
    );
    let service = s.calls_to(Method::PATCH, "services/main-proxy");
    assert_eq!(service.len(), 1, "the Service is applied once");
    assert_eq!(service[0].body["spec"]["ports"][0]["port"], 8080);
    // The brokers are applied as always, and nothing is deleted.
    assert_eq!(applied_sts_replicas(&s), 3);
    assert!(s.calls_to(Method::DELETE, "").is_empty());
    let st = status(&s);
    assert_eq!(
        condition(&st, "Degraded")["status"],
        "False",
        "a proxy does not degrade the cluster: {st}"
    );
    assert_eq!(condition(&st, "Ready")["status"], "True");
    assert_eq!(
        condition(&st, "Ready")["message"],
        "3 brokers ready, 2 proxies ready"
    );
    assert_eq!(condition(&st, "Reconciling")["status"], "False");
    assert_eq!(st["proxy"]["readyReplicas"], 2);
}

#[tokio::test]
async fn removing_the_proxy_deletes_its_objects_and_its_status() {
    for kc in [cluster(3), with_proxy(0)] {
        let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
        let s = server(3, ready);
        // The last pass saw the proxy ready: the stored status still has it.
        let mut kc = (*kc).clone();
        kc.status = Some(
            serde_json::from_value(json!({"proxy": {
                "replicas": 2, "readyReplicas": 2, "url": "http://main-proxy.ns.svc:8080"}}))
            .expect("status parses"),
        );
        s.put(NS, serde_json::to_value(&kc).unwrap());
        let kc = Arc::new(kc);
        s.put(PROXY_DEPLOYMENT, proxy_object("apps/v1", "Deployment", UID));
        s.put(PROXY_SERVICE, proxy_object("v1", "Service", UID));
        let k = kafka_with(vec![]);
        reconcile(kc, context(&s, &k)).await.expect("reconciles");
        let deleted: Vec<String> = s
            .calls_to(Method::DELETE, "")
            .iter()
            .map(|c| c.path().to_string())
            .collect();
        assert_eq!(deleted, [PROXY_DEPLOYMENT, PROXY_SERVICE]);
        let deletes = s.calls_to(Method::DELETE, "");
        assert_eq!(
            deletes[0].body["preconditions"]["uid"], "Deployment-uid",
            "only the object that was checked"
        );
        assert!(s.calls_to(Method::PATCH, "main-proxy").is_empty());
        assert!(s.event_reasons().contains(&"ProxyRemoved".to_string()));
        assert_eq!(condition(&status(&s), "Degraded")["status"], "False");
        let stored = s.object(NS).expect("the cluster");
        assert!(
            stored["status"].get("proxy").is_none(),
            "status.proxy outlived the proxy: {}",
            stored["status"]
        );
        assert_eq!(stored["status"]["readyBrokers"], 3);
    }
}

#[tokio::test]
async fn an_invalid_proxy_config_is_reported_and_nothing_is_applied() {
    let s = server(3, vec![]);
    let k = FakeKafka::default();
    let mut kc = (*with_proxy(1)).clone();
    if let Some(p) = kc.spec.proxy.as_mut() {
        p.config
            .insert("bootstrap.servers".into(), "elsewhere:9092".into());
    }
    reconcile(Arc::new(kc), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::PATCH, "deployments").is_empty());
    assert!(s.calls_to(Method::PATCH, "statefulsets").is_empty());
    let st = status(&s);
    assert_eq!(condition(&st, "Ready")["reason"], "InvalidSpec");
    assert_eq!(condition(&st, "Degraded")["reason"], "InvalidSpec");
    assert_eq!(
        condition(&st, "Ready")["message"],
        "spec.proxy.config.bootstrap.servers is set by the operator and cannot be overridden"
    );
    assert!(s.event_reasons().contains(&"InvalidSpec".to_string()));
}

#[tokio::test]
async fn without_a_proxy_nothing_of_that_name_is_deleted_unless_the_cluster_owns_it() {
    // Nothing there: nothing deleted, no event.
    let s = server(3, vec![]);
    let k = kafka_with(vec![]);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::DELETE, "").is_empty());
    assert!(!s.event_reasons().contains(&"ProxyRemoved".to_string()));
    // Objects someone else made under that name are left alone.
    let s = server(3, vec![]);
    let stranger = "11111111-2222-4333-8444-555555555555";
    s.put(
        PROXY_DEPLOYMENT,
        proxy_object("apps/v1", "Deployment", stranger),
    );
    s.put(PROXY_SERVICE, proxy_object("v1", "Service", stranger));
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(s.calls_to(Method::DELETE, "").is_empty());
}

fn with_rebalance_on_scale(replicas: i32) -> Arc<KafkaCluster> {
    let mut kc = (*cluster(replicas)).clone();
    kc.spec.rebalance_on_scale = true;
    Arc::new(kc)
}

#[tokio::test]
async fn scale_down_with_rebalance_on_scale_drains_the_broker_first() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![
        partition("t", 0, &[3, 0], &[3, 0], 1),
        partition("t", 1, &[0, 1], &[0, 1], 1),
    ]);
    let s = server(4, ready.clone());
    reconcile(with_rebalance_on_scale(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(
        k.log(),
        ["reassign t-0 [2, 0]"],
        "broker 3's replica moves in place"
    );
    assert_eq!(
        applied_sts_replicas(&s),
        4,
        "no broker goes before it is empty"
    );
    let st = status(&s);
    assert_eq!(condition(&st, "Reconciling")["reason"], "Draining");
    assert_eq!(condition(&st, "Degraded")["status"], "False");
    assert!(s.event_reasons().contains(&"Draining".to_string()));

    // The move is done: the next pass scales the StatefulSet down.
    let s = server(4, ready);
    reconcile(with_rebalance_on_scale(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(applied_sts_replicas(&s), 3);
    assert_eq!(k.log().len(), 1, "nothing more to move");
}

#[tokio::test]
async fn drain_waits_while_moves_are_in_progress() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![partition("t", 0, &[3, 0], &[3, 0], 1)]);
    *k.ongoing.lock().unwrap() = 1;
    let s = server(4, ready);
    reconcile(with_rebalance_on_scale(3), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(
        k.log().is_empty(),
        "no second reassignment over a running one"
    );
    assert_eq!(applied_sts_replicas(&s), 4);
    assert!(condition(&status(&s), "Reconciling")["message"]
        .as_str()
        .unwrap()
        .contains("1 partition moves in progress"));
}

#[tokio::test]
async fn a_drain_that_cannot_fit_is_refused() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 1)]);
    let s = server(3, ready);
    reconcile(with_rebalance_on_scale(2), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(k.log().is_empty());
    let degraded = condition(&status(&s), "Degraded").clone();
    assert_eq!(degraded["reason"], "ScaleDownBlocked");
    assert!(degraded["message"]
        .as_str()
        .unwrap()
        .contains("t-0 has 3 replicas, more than the 2 brokers that would remain"));
}

#[tokio::test]
async fn a_new_broker_gets_replicas_after_a_scale_up() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(
        (0..6)
            .map(|i| partition("t", i, &[0, 1, 2], &[0, 1, 2], 2))
            .collect(),
    );
    k.cluster.lock().unwrap().brokers = vec![0, 1, 2, 3];
    let s = server(4, ready.clone());
    reconcile(with_rebalance_on_scale(4), context(&s, &k))
        .await
        .expect("reconciles");
    let moved = k.log();
    assert_eq!(moved.len(), 4, "{moved:?}");
    let on_new = k
        .cluster
        .lock()
        .unwrap()
        .partitions
        .iter()
        .filter(|p| p.replicas.contains(&3))
        .count();
    assert_eq!(on_new, 4);
    assert_eq!(
        condition(&status(&s), "Reconciling")["reason"],
        "Rebalancing"
    );
    // Balanced now: another pass moves nothing.
    let s = server(4, ready);
    reconcile(with_rebalance_on_scale(4), context(&s, &k))
        .await
        .expect("reconciles");
    assert_eq!(k.log().len(), 4);
    assert_eq!(condition(&status(&s), "Ready")["status"], "True");
}

#[tokio::test]
async fn without_rebalance_on_scale_a_new_broker_stays_empty() {
    let ready: Vec<Value> = (0..4).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(
        (0..6)
            .map(|i| partition("t", i, &[0, 1, 2], &[0, 1, 2], 2))
            .collect(),
    );
    k.cluster.lock().unwrap().brokers = vec![0, 1, 2, 3];
    let s = server(4, ready);
    reconcile(cluster(4), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(k.log().is_empty());
}

#[tokio::test]
async fn a_second_pass_over_an_unchanged_cluster_patches_no_status() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![partition("t", 0, &[0, 1, 2], &[0, 1, 2], 2)]);
    let s = server(3, ready.clone());
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let mut kc = (*cluster(3)).clone();
    kc.status = Some(serde_json::from_value(status(&s)).expect("status parses"));
    let s = server(3, ready);
    reconcile(Arc::new(kc), context(&s, &k))
        .await
        .expect("reconciles");
    assert!(
        s.calls_to(Method::PATCH, "kafkaclusters/main/status")
            .is_empty(),
        "nothing changed, so no status patch (and no watch event to loop on)"
    );
}

#[tokio::test]
async fn leader_counts_are_left_out_when_the_metadata_misses_a_broker() {
    let ready: Vec<Value> = (0..3).map(|i| pod_json(i, "rev2", true)).collect();
    let k = kafka_with(vec![partition("t", 0, &[0], &[0], 1)]);
    k.cluster.lock().unwrap().brokers = vec![0];
    let s = server(3, ready);
    reconcile(cluster(3), context(&s, &k))
        .await
        .expect("reconciles");
    let st = status(&s);
    assert!(st["brokers"][0].get("leaders").is_none(), "{st}");
}

#[test]
fn ca_generations_go_on_the_brokers_template_and_the_cluster_cas_on_the_proxys() {
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaCluster",
        "metadata": {"name": "main", "namespace": "ns", "uid": "0f2a6b3c-1d4e-4f50-8a6b-7c8d9e0f1a2b"},
        "spec": {"replicas": 3, "proxy": {"replicas": 1},
                 "listeners": [{"name": "tls", "port": 9095, "tls": true}]},
    }))
    .unwrap();
    let mut objects = Objects::build(&kc, "img", 3.into()).unwrap();
    let cluster_ca = certs::CaKind::Cluster.generation_annotation();
    let clients_ca = certs::CaKind::Clients.generation_annotation();
    objects.set_ca_generations(&[(cluster_ca, 4), (clients_ca, 2)]);
    let annotations = |t: &k8s_openapi::api::core::v1::PodTemplateSpec| {
        t.metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap_or_default()
    };
    let brokers = annotations(&objects.sts.spec.as_ref().unwrap().template);
    assert_eq!(brokers[cluster_ca], "4");
    assert_eq!(brokers[clients_ca], "2");
    let proxy = objects
        .proxy
        .as_ref()
        .unwrap()
        .deployment
        .spec
        .as_ref()
        .unwrap();
    let proxy = annotations(&proxy.template);
    assert_eq!(proxy[cluster_ca], "4");
    assert!(!proxy.contains_key(clients_ca), "{proxy:?}");
}

#[test]
fn the_roll_waits_until_the_statefulset_has_seen_a_new_template() {
    let sts = |generation: i64, observed: Option<i64>| -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "main-kafka", "generation": generation},
            "status": {"replicas": 3, "observedGeneration": observed, "updateRevision": "r1"},
        }))
        .unwrap()
    };
    let brokers = BrokerView::<()> {
        admin: Err("none".into()),
        state: Ok(state(0, Vec::new())),
    };
    // Every pod on revision r1 looks current while the StatefulSet has not seen generation 2.
    let views = pods(3, &[], &[]);
    let pending = roll_step(&sts(2, Some(1)), &views, 3, &brokers);
    assert!(
        matches!(&pending, RollStep::Wait(why) if why.contains("new pod template")),
        "{pending:?}"
    );
    assert_eq!(
        roll_step(&sts(2, Some(2)), &views, 3, &brokers),
        RollStep::Done
    );
    // No status at all (a StatefulSet just made): nothing to wait for.
    assert_eq!(
        roll_step(&sts(1, None), &views, 3, &brokers),
        RollStep::Done
    );
}
