//! The real-API-server tier: the CRDs, the CEL rules, the chart's RBAC and the operator against a
//! real kube-apiserver + etcd (+ kube-controller-manager for garbage collection and namespace
//! deletion), built from the Go module proxy by `scripts/kube-testenv`. See docs/kube-testenv.md.
//!
//! The file builds only with the `tier-kube-apiserver` feature, so a plain `cargo test` (README's
//! command, no Go needed) leaves it out, and it needs EVENKEEL_KUBE_ASSETS naming the directory
//! that `scripts/kube-testenv` prints: without it every test fails saying so. `.ci/run` builds the
//! control plane and runs it.
//!
//! Run: EVENKEEL_KUBE_ASSETS=$(scripts/kube-testenv --print-dir) cargo test --features tier-kube-apiserver --test kube_apiserver -- --test-threads=1
//! (EVENKEEL_KUBE_KEEP=1 keeps the control plane's logs and the operator's in /tmp/evenkeel-kube-*.)

mod common;
mod kubeenv;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use evenkeel::operator::crd::{
    KafkaCluster, KafkaTopic, KafkaUser, PASSWORD_NEEDS_SCRAM, TOPIC_FINALIZER,
};
use evenkeel::operator::kafka::{AdminConnector, ClientConnector, TopicAdmin};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use kubeenv::{condition, wait_for, Operator};

fn cluster(name: &str, replicas: i32, config: &[(&str, &str)]) -> KafkaCluster {
    let config: BTreeMap<&str, &str> = config.iter().copied().collect();
    serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "storage": {"size": "1Gi"}, "config": config},
    }))
    .unwrap()
}

fn topic(name: &str, cluster: &str, partitions: i32, config: &[(&str, &str)]) -> KafkaTopic {
    let config: BTreeMap<&str, &str> = config.iter().copied().collect();
    serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaTopic",
        "metadata": {"name": name},
        "spec": {"clusterRef": cluster, "partitions": partitions, "replicas": 1, "config": config},
    }))
    .unwrap()
}

/// The API server's answer to a request that must be refused: (HTTP code, message).
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected the API server to refuse, got {other:?}"),
    }
}

async fn merge(api: &Api<KafkaTopic>, name: &str, patch: Value) -> Result<KafkaTopic, kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// 1. crds/ is accepted by a real API server: structural schemas (a v1 CRD with a
/// non-structural schema is refused at creation), Established, and unknown fields refused under
/// strict field validation (which only a structural schema can do).
#[tokio::test]
async fn crds_are_accepted_as_structural_and_established() {
    require_kube!();
    let client = kubeenv::admin().await;
    let applied = kubeenv::install_crds(&client).await;
    let names: Vec<String> = applied.iter().map(|c| c.name_any()).collect();
    assert_eq!(
        names,
        [
            "kafkaclusters.kafka.evenkeel.dev",
            "kafkatopics.kafka.evenkeel.dev",
            "kafkausers.kafka.evenkeel.dev"
        ]
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &names {
        let crd = crds.get(name).await.unwrap();
        let conds = crd.status.unwrap().conditions.unwrap_or_default();
        for want in ["Established", "NamesAccepted"] {
            assert!(
                conds.iter().any(|c| c.type_ == want && c.status == "True"),
                "{name}: no {want}=True in {conds:?}"
            );
        }
        assert!(
            !conds.iter().any(|c| c.type_ == "NonStructuralSchema"),
            "{name}: {conds:?}"
        );
    }

    // Structural schemas at work: strict field validation names an unknown field, and the
    // schema's required fields are enforced.
    let ns = kubeenv::test_namespace(&client, "crd").await;
    let topics: Api<KafkaTopic> = Api::namespaced(client.clone(), &ns);
    let mut bad = serde_json::to_value(topic("t", "main", 1, &[])).unwrap();
    bad["spec"]["partitons"] = json!(3);
    let mut strict = PatchParams::apply(kubeenv::TEST_MANAGER);
    strict.field_validation = Some(kube::api::ValidationDirective::Strict);
    // (server-side apply answers an undeclared field with a 500 and this message)
    let (_, msg) = refusal(topics.patch("t", &strict, &Patch::Apply(&bad)).await);
    assert!(
        msg.contains(".spec.partitons: field not declared in schema"),
        "{msg}"
    );
    let clusters: Api<KafkaCluster> = Api::namespaced(client.clone(), &ns);
    let no_replicas = json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaCluster",
        "metadata": {"name": "x"}, "spec": {"storage": {"size": "1Gi"}}
    });
    let (code, msg) = refusal(
        clusters
            .patch("x", &strict, &Patch::Apply(&no_replicas))
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec.replicas: Required value"), "{msg}");
}

/// 2. The CEL rules of KafkaTopic refuse, at admission and with readable messages, a partition
/// decrease and a change to each immutable field; a partition increase passes.
#[tokio::test]
async fn cel_rules_refuse_partition_decrease_and_immutable_changes() {
    require_kube!();
    let client = kubeenv::admin().await;
    kubeenv::install_crds(&client).await;
    let ns = kubeenv::test_namespace(&client, "cel").await;
    let topics: Api<KafkaTopic> = Api::namespaced(client.clone(), &ns);
    topics
        .create(&PostParams::default(), &topic("orders", "main", 3, &[]))
        .await
        .unwrap();

    let cases = [
        (
            json!({"spec": {"partitions": 2}}),
            "spec.partitions",
            "partitions may only grow: Kafka cannot decrease the partition count of a topic",
        ),
        (
            json!({"spec": {"replicas": 3}}),
            "spec.replicas",
            "replicas is immutable: changing the replication factor is not supported yet",
        ),
        (
            json!({"spec": {"clusterRef": "other"}}),
            "spec.clusterRef",
            "clusterRef is immutable",
        ),
        (
            json!({"spec": {"topicName": "renamed"}}),
            "spec",
            "topicName is immutable: create a new KafkaTopic to use another name",
        ),
    ];
    for (patch, field, message) in cases {
        let (code, msg) = refusal(merge(&topics, "orders", patch.clone()).await);
        eprintln!("{patch} -> {code} {msg}");
        assert_eq!(code, 422, "{patch}: {msg}");
        assert!(
            msg.contains(&format!("{field}: Invalid value")) && msg.contains(message),
            "{patch}: {msg}"
        );
    }
    // Nothing changed; growing is allowed.
    let grown = merge(&topics, "orders", json!({"spec": {"partitions": 6}}))
        .await
        .expect("partitions may grow");
    assert_eq!(grown.spec.partitions, 6);
    assert_eq!(grown.spec.replicas, 1);
    assert_eq!(grown.spec.cluster_ref, "main");
}

/// 3. The chart's RBAC (default values) is enough for the operator, run as the chart's
/// ServiceAccount (impersonated) with leader election, and no more than it needs.
#[tokio::test]
async fn operator_runs_with_only_the_charts_rbac() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("rbac").await;
    let sa = kubeenv::as_operator().await;

    // Least privilege: what the operator never needs is refused. It gets, creates and patches
    // a secured cluster's CA and broker Secrets by name; it never lists or deletes Secrets.
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), &ns);
    assert_eq!(
        refusal(secrets.delete("x", &DeleteParams::default()).await).0,
        403
    );
    let (code, msg) = refusal(secrets.list(&ListParams::default()).await);
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.contains(&format!(
            "system:serviceaccount:{}:{}",
            kubeenv::RELEASE_NAMESPACE,
            kubeenv::SERVICE_ACCOUNT
        )),
        "{msg}"
    );
    let sts: Api<StatefulSet> = Api::namespaced(sa.clone(), &ns);
    assert_eq!(
        refusal(sts.delete("x", &DeleteParams::default()).await).0,
        403
    );
    let namespaces: Api<Namespace> = Api::all(sa.clone());
    assert_eq!(
        refusal(namespaces.delete(&ns, &DeleteParams::default()).await).0,
        403
    );
    // ...and a Lease other than its own cannot be read.
    let leases: Api<Lease> = Api::namespaced(sa.clone(), kubeenv::RELEASE_NAMESPACE);
    assert_eq!(refusal(leases.get("someone-else").await).0, 403);
    // It makes Roles (the rebalancer's), but none granting what it does not hold itself.
    let roles: Api<Role> = Api::namespaced(sa.clone(), &ns);
    let wider: Role = serde_json::from_value(json!({
        "metadata": {"name": "wider"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }))
    .unwrap();
    let (code, msg) = refusal(roles.create(&PostParams::default(), &wider).await);
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.contains("attempting to grant RBAC permissions not currently held"),
        "{msg}"
    );

    // Enough: the operator, under that identity, takes the Lease and reconciles a cluster.
    let op = Operator::start(&ns, "127.0.0.1:9", true);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster("main", 1, &[]))
        .await
        .unwrap();
    let admin_leases: Api<Lease> = Api::namespaced(admin.clone(), kubeenv::RELEASE_NAMESPACE);
    let holder = wait_for("the operator to hold its Lease", 60, || async {
        admin_leases
            .get_opt("evenkeel-operator")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    assert_eq!(holder, format!("operator-{ns}"));
    wait_for(
        "KafkaCluster status written by the operator",
        60,
        || async {
            let kc = clusters.get("main").await.ok()?;
            let v = serde_json::to_value(&kc).unwrap();
            condition(&v, "Reconciling").map(|_| ())
        },
    )
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &ns);
    wait_for("the PDB", 30, || async {
        pdbs.get_opt("main-kafka").await.ok()?
    })
    .await;
    // Events are published (a refused publish is only a warning in the log).
    tokio::time::sleep(Duration::from_secs(2)).await;
    op.assert_never_forbidden();
}

/// 4. A KafkaCluster becomes its StatefulSet, Services, ConfigMap and PDB, each owned by it;
/// status carries conditions and the config hash; a config edit gives a new hash; deleting the
/// cluster removes its objects (garbage collection through the owner references).
#[tokio::test]
async fn kafkacluster_objects_status_config_hash_and_cleanup() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("kc").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let created = clusters
        .create(
            &PostParams::default(),
            &cluster("main", 3, &[("log.retention.hours", "168")]),
        )
        .await
        .unwrap();
    let uid = created.uid().unwrap();

    let sts_api: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    let svc_api: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let cm_api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let pdb_api: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &ns);
    let sts = wait_for("StatefulSet main-kafka", 60, || async {
        sts_api.get_opt("main-kafka").await.ok()?
    })
    .await;
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(3));
    let mut owned: Vec<(
        String,
        Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    )> = vec![(
        "StatefulSet main-kafka".into(),
        sts.owner_references().to_vec(),
    )];
    for name in ["main-kafka-brokers", "main-kafka-bootstrap"] {
        let s = wait_for(name, 30, || async { svc_api.get_opt(name).await.ok()? }).await;
        owned.push((format!("Service {name}"), s.owner_references().to_vec()));
    }
    let cm = wait_for("ConfigMap", 30, || async {
        cm_api.get_opt("main-kafka-config").await.ok()?
    })
    .await;
    owned.push((
        "ConfigMap main-kafka-config".into(),
        cm.owner_references().to_vec(),
    ));
    let pdb = wait_for("PDB", 30, || async {
        pdb_api.get_opt("main-kafka").await.ok()?
    })
    .await;
    owned.push((
        "PodDisruptionBudget main-kafka".into(),
        pdb.owner_references().to_vec(),
    ));
    for (what, refs) in &owned {
        assert!(
            refs.iter().any(|r| r.uid == uid
                && r.kind == "KafkaCluster"
                && r.name == "main"
                && r.controller == Some(true)),
            "{what} is not owned by KafkaCluster main: {refs:?}"
        );
    }

    // Status: conditions for this generation and the config hash of the pod template.
    let hash_of = |s: &StatefulSet| {
        s.spec
            .as_ref()?
            .template
            .metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get("kafka.evenkeel.dev/config-hash")
            .cloned()
    };
    let first = wait_for("status with conditions and configHash", 60, || async {
        let kc = clusters.get("main").await.ok()?;
        let v = serde_json::to_value(&kc).unwrap();
        let gen = kc.metadata.generation?;
        let st = kc.status.as_ref()?;
        (st.observed_generation == Some(gen)
            && condition(&v, "Ready").is_some()
            && condition(&v, "Reconciling").is_some()
            && condition(&v, "Degraded").is_some())
        .then(|| (st.config_hash.clone(), v))
    })
    .await;
    let (hash1, v) = first;
    let hash1 = hash1.expect("status.configHash");
    // No pods here (no kubelet): not ready, still reconciling, not degraded.
    assert_eq!(condition(&v, "Ready").unwrap().0, "False", "{v}");
    assert_eq!(condition(&v, "Degraded").unwrap().0, "False", "{v}");
    assert_eq!(
        v["status"]["clusterId"].as_str().map(str::len),
        Some(22),
        "{v}"
    );
    let sts = sts_api.get("main-kafka").await.unwrap();
    assert_eq!(hash_of(&sts).as_deref(), Some(hash1.as_str()));

    // A config edit: new server.properties, new hash on the template and in status.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"log.retention.hours": "24"}}})),
        )
        .await
        .unwrap();
    let hash2 = wait_for("a new configHash", 60, || async {
        let kc = clusters.get("main").await.ok()?;
        let st = kc.status?;
        let h = st.config_hash?;
        (h != hash1 && st.observed_generation == kc.metadata.generation).then_some(h)
    })
    .await;
    let sts = sts_api.get("main-kafka").await.unwrap();
    assert_eq!(hash_of(&sts).as_deref(), Some(hash2.as_str()));
    let cm = cm_api.get("main-kafka-config").await.unwrap();
    let props = cm
        .data
        .unwrap_or_default()
        .into_values()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(props.contains("log.retention.hours=24"), "{props}");
    // One quorum: the first three pods vote, no process.roles (a pod's node id tells it).
    let voters = "controller.quorum.voters=0@main-kafka-0.main-kafka-brokers.";
    assert!(props.contains(voters), "{props}");
    assert!(!props.contains("3@main-kafka-3"), "{props}");
    assert!(!props.contains("process.roles="), "{props}");
    let controllers = |s: &StatefulSet| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kafka.evenkeel.dev/controllers").cloned())
    };
    assert_eq!(controllers(&sts).as_deref(), Some("3"));

    // Scaling out adds broker-only pods: the voters, the file and the hash stay.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    let scaled = wait_for("5 replicas", 60, || async {
        let s = sts_api.get("main-kafka").await.ok()?;
        (s.spec.as_ref()?.replicas == Some(5)).then_some(s)
    })
    .await;
    assert_eq!(controllers(&scaled).as_deref(), Some("3"));
    assert_eq!(hash_of(&scaled).as_deref(), Some(hash2.as_str()));
    let cm = cm_api.get("main-kafka-config").await.unwrap();
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .into_values()
            .collect::<Vec<_>>()
            .join("\n"),
        props,
        "scaling changed server.properties"
    );
    // Below the controllers is refused, with the reason, and nothing is removed.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let refused = wait_for("ScaleDownBlocked", 60, || async {
        let v = serde_json::to_value(clusters.get("main").await.ok()?).unwrap();
        let (status, reason, message) = condition(&v, "Degraded")?;
        (status == "True" && reason == "ScaleDownBlocked").then_some(message)
    })
    .await;
    assert!(
        refused.contains("controllers of the metadata quorum"),
        "{refused}"
    );
    let kept = sts_api.get("main-kafka").await.unwrap();
    assert_eq!(kept.spec.as_ref().unwrap().replicas, Some(5));

    // Deletion: the garbage collector removes everything the cluster owned.
    clusters
        .delete("main", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the owned objects to be garbage-collected", 90, || async {
        let left = sts_api.get_opt("main-kafka").await.ok()?.is_some() as u8
            + svc_api.list(&ListParams::default()).await.ok()?.items.len() as u8
            + cm_api.get_opt("main-kafka-config").await.ok()?.is_some() as u8
            + pdb_api.get_opt("main-kafka").await.ok()?.is_some() as u8
            + clusters.get_opt("main").await.ok()?.is_some() as u8;
        (left == 0).then_some(())
    })
    .await;
    op.assert_never_forbidden();
}

async fn kafka_admin(bootstrap: &str) -> evenkeel::client::AdminClient {
    ClientConnector {
        timeout: Duration::from_secs(15),
    }
    .connect(bootstrap, evenkeel::client::ClientSecurity::plaintext())
    .await
    .expect("connects to the broker")
}

async fn wait_topic_ready(topics: &Api<KafkaTopic>, name: &str, gen_at_least: i64) -> Value {
    wait_for(&format!("KafkaTopic {name} Ready"), 60, || async {
        let kt = topics.get(name).await.ok()?;
        let v = serde_json::to_value(&kt).unwrap();
        let gen = kt.metadata.generation?;
        let observed = kt.status.as_ref()?.observed_generation?;
        let (status, _, _) = condition(&v, "Ready")?;
        (gen >= gen_at_least && observed == gen && status == "True").then_some(v)
    })
    .await
}

/// 5. KafkaTopic against a real evenkeel broker process: create, grow, config change, and
/// deletion through the finalizer (the topic is deleted in Kafka before the resource goes).
#[tokio::test]
async fn kafkatopic_lifecycle_against_a_real_broker() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("kt").await;
    let broker = common::BrokerProcess::start(&[]);
    let op = Operator::start(&ns, &broker.bootstrap, false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster("main", 1, &[]))
        .await
        .unwrap();
    let topics: Api<KafkaTopic> = Api::namespaced(admin.clone(), &ns);
    topics
        .create(
            &PostParams::default(),
            &topic("orders", "main", 3, &[("retention.ms", "3600000")]),
        )
        .await
        .unwrap();
    let kafka = kafka_admin(&broker.bootstrap).await;

    // Create.
    let v = wait_topic_ready(&topics, "orders", 1).await;
    assert_eq!(v["status"]["partitions"], 3, "{v}");
    assert!(
        v["status"]["topicId"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{v}"
    );
    let kt = topics.get("orders").await.unwrap();
    assert!(
        kt.finalizers().iter().any(|f| f == TOPIC_FINALIZER),
        "{:?}",
        kt.finalizers()
    );
    let state = kafka
        .describe_topic("orders")
        .await
        .unwrap()
        .expect("topic in Kafka");
    assert_eq!(state.partitions, 3);
    assert_eq!(
        state.configs.get("retention.ms").map(String::as_str),
        Some("3600000")
    );

    // Grow and change a config.
    let gen = merge(
        &topics,
        "orders",
        json!({"spec": {"partitions": 5, "config": {"retention.ms": "7200000", "cleanup.policy": "compact"}}}),
    )
    .await
    .unwrap()
    .metadata
    .generation
    .unwrap();
    let v = wait_topic_ready(&topics, "orders", gen).await;
    assert_eq!(v["status"]["partitions"], 5, "{v}");
    let state = kafka.describe_topic("orders").await.unwrap().unwrap();
    assert_eq!(state.partitions, 5);
    assert_eq!(state.configs["retention.ms"], "7200000");
    assert_eq!(state.configs["cleanup.policy"], "compact");

    // Delete: the finalizer deletes the Kafka topic, then lets the resource go.
    topics
        .delete("orders", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("KafkaTopic orders to be gone", 60, || async {
        topics.get_opt("orders").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        kafka.describe_topic("orders").await.unwrap().is_none(),
        "the topic is still in Kafka after its KafkaTopic was deleted"
    );
    op.assert_never_forbidden();
}

/// 6. Deleting a namespace whose KafkaCluster goes with it is not blocked by the KafkaTopic
/// finalizer, even though its brokers are gone (Strimzi #11901, Koperator #306).
#[tokio::test]
async fn namespace_deletion_is_not_blocked_by_the_topic_finalizer() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("nsdel").await;
    let mut broker = common::BrokerProcess::start(&[]);
    let op = Operator::start(&ns, &broker.bootstrap, false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster("main", 1, &[]))
        .await
        .unwrap();
    let topics: Api<KafkaTopic> = Api::namespaced(admin.clone(), &ns);
    topics
        .create(&PostParams::default(), &topic("events", "main", 1, &[]))
        .await
        .unwrap();
    wait_topic_ready(&topics, "events", 1).await;
    assert!(topics
        .get("events")
        .await
        .unwrap()
        .finalizers()
        .iter()
        .any(|f| f == TOPIC_FINALIZER));

    // The brokers go with the namespace (their pods are deleted too): nothing answers any more.
    broker.kill();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the namespace to be deleted", 120, || async {
        namespaces.get_opt(&ns).await.ok()?.is_none().then_some(())
    })
    .await;
    op.assert_never_forbidden();
}

/// Converts a schema from the API server's OpenAPI (v2 definitions, or a CRD's openAPIV3Schema)
/// into what kubeconform's -strict expects: JSON Schema where every object with declared
/// properties refuses others, int-or-string and quantities accept both forms, nullable allows null.
fn strict_schema(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let int_or_string = m.get("format").and_then(Value::as_str) == Some("int-or-string")
                || m.get("x-kubernetes-int-or-string") == Some(&json!(true));
            if int_or_string {
                m.remove("type");
                m.remove("format");
                m.insert(
                    "oneOf".into(),
                    json!([{"type": "string"}, {"type": "integer"}]),
                );
            }
            if m.get("nullable") == Some(&json!(true)) {
                if let Some(Value::String(t)) = m.get("type").cloned() {
                    m.insert("type".into(), json!([t, "null"]));
                }
            }
            let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
            if m.contains_key("properties") && !m.contains_key("additionalProperties") && !preserve
            {
                m.insert("additionalProperties".into(), json!(false));
            }
            for (k, child) in m.iter_mut() {
                // Property names are not schemas; their values are.
                if k == "properties" || k == "definitions" || k == "patternProperties" {
                    if let Value::Object(props) = child {
                        for p in props.values_mut() {
                            strict_schema(p);
                        }
                    }
                } else if k != "enum" && k != "default" && k != "example" {
                    strict_schema(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strict_schema),
        _ => {}
    }
}

/// kubeconform's file name for a kind: `{{ .ResourceKind }}{{ .KindSuffix }}.json`.
fn schema_file(group: &str, version: &str, kind: &str) -> String {
    let group_part = if group.is_empty() {
        String::new()
    } else {
        format!("-{}", group.split('.').next().unwrap().to_lowercase())
    };
    format!("{}{group_part}-{version}.json", kind.to_lowercase())
}

/// Writes strict JSON schemas for `kinds` (from the running API server's /openapi/v2) and for
/// our CRDs (from crds/) into `dir`.
async fn write_schemas(client: &Client, kinds: &[(String, String, String)], dir: &Path) -> usize {
    let req = http::Request::get("/openapi/v2").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.expect("GET /openapi/v2");
    let openapi: Value = serde_json::from_str(&text).unwrap();
    let mut defs = openapi["definitions"].clone();
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] =
        json!({"oneOf": [{"type": "string"}, {"type": "number"}]});
    strict_schema(&mut defs);
    let mut written = 0;
    for (name, def) in defs.as_object().unwrap() {
        let Some(gvks) = def["x-kubernetes-group-version-kind"].as_array() else {
            continue;
        };
        for gvk in gvks {
            let (g, v, k) = (
                gvk["group"].as_str().unwrap_or(""),
                gvk["version"].as_str().unwrap(),
                gvk["kind"].as_str().unwrap(),
            );
            if !kinds
                .iter()
                .any(|(kg, kv, kk)| kg == g && kv == v && kk == k)
            {
                continue;
            }
            let schema = json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "$ref": format!("#/definitions/{name}"),
                "definitions": defs,
            });
            fs::write(dir.join(schema_file(g, v, k)), schema.to_string()).unwrap();
            written += 1;
        }
    }
    for f in [
        "kafkaclusters.kafka.evenkeel.dev.yaml",
        "kafkatopics.kafka.evenkeel.dev.yaml",
        "kafkausers.kafka.evenkeel.dev.yaml",
    ] {
        let crd =
            kubeenv::yaml_docs(&fs::read_to_string(kubeenv::repo().join("crds").join(f)).unwrap())
                .remove(0);
        let group = crd["spec"]["group"].as_str().unwrap();
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        for ver in crd["spec"]["versions"].as_array().unwrap() {
            let mut schema = ver["schema"]["openAPIV3Schema"].clone();
            let props = schema["properties"].as_object_mut().unwrap();
            props
                .entry("apiVersion")
                .or_insert(json!({"type": "string"}));
            props.entry("kind").or_insert(json!({"type": "string"}));
            props.entry("metadata").or_insert(json!({"type": "object"}));
            strict_schema(&mut schema);
            let file = schema_file(group, ver["name"].as_str().unwrap(), kind);
            fs::write(dir.join(file), schema.to_string()).unwrap();
            written += 1;
        }
    }
    written
}

/// Runs kubeconform -strict on `input` with the schemas in `dir`; (success, output).
fn kubeconform(dir: &Path, input: &Path) -> (bool, String) {
    let out = Command::new(kubeenv::plane().assets.join("kubeconform"))
        .args(["-strict", "-summary", "-output", "text"])
        .arg("-schema-location")
        .arg(format!(
            "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            dir.display()
        ))
        .arg(input)
        .output()
        .expect("run kubeconform");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// 7. `helm template` of the chart (with its CRDs), and the examples, pass kubeconform -strict
/// against the API server's own schemas and our CRD schemas, with no kind skipped; then the
/// rendered chart is applied to the API server.
#[tokio::test]
async fn helm_chart_passes_kubeconform_strict_and_applies() {
    require_kube!();
    let admin = kubeenv::admin().await;
    kubeenv::install_base(&admin).await;
    let rendered = kubeenv::helm_template(&["--include-crds"]);
    let mut docs = kubeenv::yaml_docs(&rendered);
    let example_files = [
        "examples/kafkacluster.yaml",
        "examples/kafkatopic.yaml",
        "examples/kafkauser.yaml",
    ];
    let examples: Vec<Value> = example_files
        .iter()
        .flat_map(|f| kubeenv::yaml_docs(&fs::read_to_string(kubeenv::repo().join(f)).unwrap()))
        .collect();
    docs.extend(examples.iter().cloned());
    let kinds: Vec<(String, String, String)> = docs
        .iter()
        .map(|d| {
            let av = d["apiVersion"].as_str().unwrap();
            let (g, v) = av.rsplit_once('/').unwrap_or(("", av));
            (
                g.to_string(),
                v.to_string(),
                d["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let written = write_schemas(&admin, &kinds, tmp.path()).await;
    assert!(written >= 5, "{written} schemas");
    let input = tmp.path().join("input.yaml");
    let mut all = rendered.clone();
    for f in example_files {
        all.push_str("\n---\n");
        all.push_str(&fs::read_to_string(kubeenv::repo().join(f)).unwrap());
    }
    kubeenv::write(&input, &all);
    let (ok, out) = kubeconform(tmp.path(), &input);
    eprintln!("{out}");
    assert!(ok, "kubeconform -strict refused the chart:\n{out}");
    let summary = out
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or("");
    assert!(
        summary.contains(&format!("Valid: {},", docs.len())) && summary.contains("Skipped: 0"),
        "{out}"
    );

    // The strict schemas do catch a misspelled field (a guard on the check itself).
    let broken = rendered.replacen("serviceAccountName:", "serviceAcountName:", 1);
    kubeenv::write(&input, &broken);
    let (ok, out) = kubeconform(tmp.path(), &input);
    assert!(!ok && out.contains("serviceAcountName"), "{out}");

    // Applied to the API server: CRDs first, then the rest.
    let (crds, rest): (Vec<Value>, Vec<Value>) = kubeenv::yaml_docs(&rendered)
        .into_iter()
        .partition(|d| d["kind"] == "CustomResourceDefinition");
    assert_eq!(crds.len(), 3);
    kubeenv::apply_all(&admin, &crds, kubeenv::RELEASE_NAMESPACE).await;
    let applied = kubeenv::apply_all(&admin, &rest, kubeenv::RELEASE_NAMESPACE).await;
    let kinds: Vec<String> = applied
        .iter()
        .map(|o| o.types.as_ref().unwrap().kind.clone())
        .collect();
    for want in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
    ] {
        assert!(kinds.iter().any(|k| k == want), "{want} not in {kinds:?}");
    }
    // And the examples are accepted by the CRDs as they are.
    let ns = kubeenv::test_namespace(&admin, "examples").await;
    let dry = PatchParams::apply(kubeenv::TEST_MANAGER).dry_run();
    let kc: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let kt: Api<KafkaTopic> = Api::namespaced(admin.clone(), &ns);
    kc.patch("my-cluster", &dry, &Patch::Apply(&examples[0]))
        .await
        .expect("examples/kafkacluster.yaml is accepted");
    kt.patch("orders", &dry, &Patch::Apply(&examples[1]))
        .await
        .expect("examples/kafkatopic.yaml is accepted");
    let ku: Api<KafkaUser> = Api::namespaced(admin.clone(), &ns);
    ku.patch("orders-app", &dry, &Patch::Apply(&examples[2]))
        .await
        .expect("examples/kafkauser.yaml is accepted");
}

/// 8. `spec.proxy` becomes the producer proxy's Deployment and Service, owned by the cluster,
/// whose selector picks no broker; setting its replicas to 0 deletes both, and the operator does
/// it all under the chart's RBAC.
#[tokio::test]
async fn a_proxy_becomes_a_deployment_and_service_and_goes_when_removed() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("proxy").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let mut kc = cluster("main", 1, &[]);
    kc.spec.proxy = Some(serde_json::from_value(json!({"replicas": 2})).unwrap());
    let uid = clusters
        .create(&PostParams::default(), &kc)
        .await
        .unwrap()
        .uid()
        .unwrap();

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let svc_api: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let d = wait_for("Deployment main-proxy", 60, || async {
        deployments.get_opt("main-proxy").await.ok()?
    })
    .await;
    let s = wait_for("Service main-proxy", 30, || async {
        svc_api.get_opt("main-proxy").await.ok()?
    })
    .await;
    for (what, refs) in [
        ("Deployment", d.owner_references()),
        ("Service", s.owner_references()),
    ] {
        assert!(
            refs.iter()
                .any(|r| r.uid == uid && r.kind == "KafkaCluster" && r.controller == Some(true)),
            "{what} main-proxy is not owned by KafkaCluster main: {refs:?}"
        );
    }
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("evenkeel-test:1"));
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(
        args[..3],
        [
            "proxy",
            "--bootstrap",
            &format!("main-kafka-bootstrap.{ns}.svc:9092")
        ]
    );
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert_eq!(
        s.spec
            .as_ref()
            .unwrap()
            .selector
            .clone()
            .unwrap_or_default(),
        selector
    );
    let sts: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    let brokers = wait_for("StatefulSet main-kafka", 30, || async {
        sts.get_opt("main-kafka").await.ok()?
    })
    .await;
    let broker_labels = brokers
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .labels
        .unwrap();
    assert!(
        !selector
            .iter()
            .all(|(k, v)| broker_labels.get(k) == Some(v)),
        "the proxy's selector picks broker pods: {selector:?}"
    );
    // Status written for this generation: not degraded for want of a proxy role.
    let (degraded, reason, _) = wait_for("a Degraded condition", 60, || async {
        let kc = clusters.get("main").await.ok()?;
        let v = serde_json::to_value(&kc).unwrap();
        (kc.status?.observed_generation == kc.metadata.generation)
            .then(|| condition(&v, "Degraded"))?
    })
    .await;
    assert_eq!(
        (degraded.as_str(), reason.as_str()),
        ("False", "AsExpected")
    );

    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"proxy": {"replicas": 0}}})),
        )
        .await
        .unwrap();
    wait_for("the proxy's objects to be deleted", 60, || async {
        let left = deployments.get_opt("main-proxy").await.ok()?.is_some() as u8
            + svc_api.get_opt("main-proxy").await.ok()?.is_some() as u8;
        (left == 0).then_some(())
    })
    .await;
    assert!(svc_api
        .get_opt("main-kafka-bootstrap")
        .await
        .unwrap()
        .is_some());
    op.assert_never_forbidden();
}

/// The cluster's Ready condition and `status.proxy`, once the status is for the current
/// generation.
async fn ready_and_proxy_status(
    clusters: &Api<KafkaCluster>,
    name: &str,
) -> Option<((String, String, String), Value)> {
    let kc = clusters.get(name).await.ok()?;
    let v = serde_json::to_value(&kc).unwrap();
    (kc.status?.observed_generation == kc.metadata.generation)
        .then(|| Some((condition(&v, "Ready")?, v["status"]["proxy"].clone())))?
}

/// Writes the proxy Deployment's status as the Deployment controller would (none runs here):
/// `updated` pods on the current template (generation seen), `ready` of them ready.
async fn set_deployment_status(api: &Api<Deployment>, name: &str, updated: i32, ready: i32) {
    let generation = api.get(name).await.unwrap().metadata.generation.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "observedGeneration": generation, "replicas": updated, "updatedReplicas": updated,
            "readyReplicas": ready, "availableReplicas": ready,
        }})),
    )
    .await
    .unwrap();
}

/// A broker pod the operator counts as ready (no kubelet here: the test writes its status).
async fn ready_broker_pod(admin: &Client, ns: &str, cluster: &str, ordinal: i32) {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let default: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    if accounts.get_opt("default").await.unwrap().is_none() {
        accounts
            .create(&PostParams::default(), &default)
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let name = format!("{cluster}-kafka-{ordinal}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": evenkeel::operator::resources::labels(cluster)},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "broker", "image": "evenkeel-test:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
}

/// 8b. `spec.proxy.config` is kept by the CRD (and `bootstrap.servers` refused by its CEL rule),
/// becomes `--producer-props` on the Deployment, and a change rolls it (a new generation);
/// `status.proxy` follows the Deployment's status and holds `Ready` until the proxy is rolled
/// out and ready; a config the proxy would refuse is `InvalidSpec` and changes nothing; removing
/// the proxy clears `status.proxy`.
#[tokio::test]
async fn proxy_config_becomes_producer_props_and_its_readiness_enters_the_status() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("proxycfg").await;
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let mut kc = cluster("main", 1, &[]);
    kc.spec.proxy = Some(
        serde_json::from_value(json!({"replicas": 2, "config": {"bootstrap.servers": "x:9092"}}))
            .unwrap(),
    );
    let (code, msg) = refusal(clusters.create(&PostParams::default(), &kc).await);
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.contains("spec.proxy.config.bootstrap.servers is set by the operator"),
        "{msg}"
    );

    let op = Operator::start(&ns, "127.0.0.1:9", false);
    kc.spec.proxy = Some(
        serde_json::from_value(json!({"replicas": 2, "config": {"acks": "1", "linger.ms": "20"}}))
            .unwrap(),
    );
    clusters.create(&PostParams::default(), &kc).await.unwrap();
    let kept = clusters
        .get("main")
        .await
        .unwrap()
        .spec
        .proxy
        .unwrap()
        .config;
    assert_eq!(
        kept.into_iter().collect::<Vec<_>>(),
        [
            ("acks".to_string(), "1".to_string()),
            ("linger.ms".to_string(), "20".to_string())
        ],
        "the CRD pruned spec.proxy.config"
    );
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let args_of = |d: &Deployment| {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap_or_default()
    };
    let d = wait_for("Deployment main-proxy", 60, || async {
        deployments.get_opt("main-proxy").await.ok()?
    })
    .await;
    assert_eq!(
        args_of(&d)[7..],
        [
            "--producer-props",
            "acks=1",
            "--producer-props",
            "linger.ms=20"
        ]
    );

    // Brokers ready, the proxy not yet: Ready waits for the proxy, and says so.
    ready_broker_pod(&admin, &ns, "main", 0).await;
    set_deployment_status(&deployments, "main-proxy", 2, 1).await;
    let url = format!("http://main-proxy.{ns}.svc:8080");
    let ((status, _, message), proxy) = wait_for("ProxyNotReady", 60, || async {
        let (ready, proxy) = ready_and_proxy_status(&clusters, "main").await?;
        (ready.1 == "ProxyNotReady" && proxy["readyReplicas"] == 1).then_some((ready, proxy))
    })
    .await;
    assert_eq!(status, "False");
    assert_eq!(message, "1 of 1 brokers ready; 1 of 2 proxies ready");
    assert_eq!(
        proxy,
        json!({"replicas": 2, "readyReplicas": 1, "url": url})
    );
    set_deployment_status(&deployments, "main-proxy", 2, 2).await;
    let (ready, _) = wait_for("Ready", 60, || async {
        let (ready, proxy) = ready_and_proxy_status(&clusters, "main").await?;
        (ready.0 == "True" && proxy["readyReplicas"] == 2).then_some((ready, proxy))
    })
    .await;
    assert_eq!(ready.2, "1 brokers ready, 2 proxies ready");
    let v = serde_json::to_value(clusters.get("main").await.unwrap()).unwrap();
    assert_eq!(condition(&v, "Degraded").unwrap().0, "False");

    // A config change: new arguments, a new generation the Deployment has not rolled out yet.
    let generation = d.metadata.generation.unwrap();
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"proxy": {"config": {"linger.ms": "50"}}}})),
        )
        .await
        .unwrap();
    let rolled = wait_for("new producer props", 60, || async {
        let d = deployments.get("main-proxy").await.ok()?;
        args_of(&d)
            .contains(&"linger.ms=50".to_string())
            .then_some(d)
    })
    .await;
    assert_eq!(
        args_of(&rolled)[7..],
        [
            "--producer-props",
            "acks=1",
            "--producer-props",
            "linger.ms=50"
        ]
    );
    assert!(rolled.metadata.generation.unwrap() > generation);
    let (ready, _) = wait_for("ProxyNotReady while rolling", 60, || async {
        let (ready, proxy) = ready_and_proxy_status(&clusters, "main").await?;
        (ready.1 == "ProxyNotReady").then_some((ready, proxy))
    })
    .await;
    assert!(
        ready.2.contains("has not seen its latest spec"),
        "{ready:?}"
    );

    // A value the proxy would refuse at start: InvalidSpec, and the Deployment is left as it was.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"proxy": {"config": {"acks": "2"}}}})),
        )
        .await
        .unwrap();
    let (ready, _) = wait_for("InvalidSpec", 60, || async {
        let (ready, proxy) = ready_and_proxy_status(&clusters, "main").await?;
        (ready.1 == "InvalidSpec").then_some((ready, proxy))
    })
    .await;
    assert!(
        ready.2.contains("spec.proxy.config") && ready.2.contains("acks"),
        "{ready:?}"
    );
    assert_eq!(
        args_of(&deployments.get("main-proxy").await.unwrap()),
        args_of(&rolled)
    );

    // No proxy: its objects go, and so does status.proxy.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"proxy": null}})),
        )
        .await
        .unwrap();
    wait_for("status.proxy to be cleared", 60, || async {
        let (ready, proxy) = ready_and_proxy_status(&clusters, "main").await?;
        (ready.0 == "True" && proxy.is_null()).then_some(())
    })
    .await;
    assert!(deployments.get_opt("main-proxy").await.unwrap().is_none());
    op.assert_never_forbidden();
}

/// A KafkaCluster with the rebalancer sidecar enabled.
fn with_rebalancer(name: &str) -> KafkaCluster {
    let mut kc = cluster(name, 1, &[]);
    kc.spec.rebalancer.enabled = true;
    kc
}

/// The rebalancer's ServiceAccount, Role and RoleBinding of cluster `name` in `ns`, once all three
/// exist (as the admin sees them).
async fn rebalancer_identity(
    admin: &Client,
    ns: &str,
    name: &str,
) -> (ServiceAccount, Role, RoleBinding) {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
    let object = format!("{name}-rebalancer");
    wait_for(
        "the rebalancer's ServiceAccount, Role and RoleBinding",
        60,
        || async {
            Some((
                accounts.get_opt(&object).await.ok()??,
                roles.get_opt(&object).await.ok()??,
                bindings.get_opt(&object).await.ok()??,
            ))
        },
    )
    .await
}

/// Event reasons in `ns` (events.k8s.io/v1) about KafkaCluster `name`, with their reporters.
async fn cluster_events(admin: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("KafkaCluster") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.reporting_controller.unwrap_or_default(),
            )
        })
        .collect()
}

/// 9. `spec.rebalancer.enabled: true`: the operator, under the chart's RBAC, makes the sidecar's
/// ServiceAccount, Role (exactly its rules) and RoleBinding, owned by the cluster, and the broker
/// pods run as that account with the sidecar beside the broker; turning it off deletes all three.
#[tokio::test]
async fn the_rebalancer_gets_its_own_account_role_and_binding_and_loses_them_when_disabled() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("rebal").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let uid = clusters
        .create(&PostParams::default(), &with_rebalancer("main"))
        .await
        .unwrap()
        .uid()
        .unwrap();

    let (account, role, binding) = rebalancer_identity(&admin, &ns, "main").await;
    for (what, refs) in [
        ("ServiceAccount", account.owner_references()),
        ("Role", role.owner_references()),
        ("RoleBinding", binding.owner_references()),
    ] {
        assert!(
            refs.iter()
                .any(|r| r.uid == uid && r.kind == "KafkaCluster" && r.controller == Some(true)),
            "{what} main-rebalancer is not owned by KafkaCluster main: {refs:?}"
        );
    }
    assert_eq!(
        serde_json::to_value(&role.rules).unwrap(),
        json!([
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["kafka.evenkeel.dev"], "resources": ["kafkaclusters"],
             "resourceNames": ["main"], "verbs": ["get"]},
            {"apiGroups": ["kafka.evenkeel.dev"], "resources": ["kafkaclusters/status"],
             "resourceNames": ["main"], "verbs": ["get", "patch"]},
        ])
    );
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(binding.role_ref.name, "main-rebalancer");
    let subjects = binding.subjects.clone().unwrap_or_default();
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    assert_eq!(
        (
            subjects[0].kind.as_str(),
            subjects[0].name.as_str(),
            subjects[0].namespace.as_deref()
        ),
        ("ServiceAccount", "main-rebalancer", Some(ns.as_str()))
    );

    let sts: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    let pod_spec = |s: StatefulSet| s.spec?.template.spec;
    let pod = wait_for("the brokers' StatefulSet", 30, || async {
        pod_spec(sts.get_opt("main-kafka").await.ok()??)
    })
    .await;
    assert_eq!(pod.service_account_name.as_deref(), Some("main-rebalancer"));
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["broker", "rebalancer"]);
    let args = pod.containers[1].args.clone().unwrap_or_default();
    assert!(
        args.windows(2).any(|w| w == ["--kafka-cluster", "main"]),
        "{args:?}"
    );
    let (degraded, reason, _) = wait_for("a Degraded condition", 60, || async {
        let kc = clusters.get("main").await.ok()?;
        let v = serde_json::to_value(&kc).unwrap();
        (kc.status?.observed_generation == kc.metadata.generation)
            .then(|| condition(&v, "Degraded"))?
    })
    .await;
    assert_eq!(
        (degraded.as_str(), reason.as_str()),
        ("False", "AsExpected")
    );

    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rebalancer": {"enabled": false}}})),
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
    wait_for("the rebalancer's identity to be deleted", 60, || async {
        let left = accounts.get_opt("main-rebalancer").await.ok()?.is_some() as u8
            + roles.get_opt("main-rebalancer").await.ok()?.is_some() as u8
            + bindings.get_opt("main-rebalancer").await.ok()?.is_some() as u8;
        (left == 0).then_some(())
    })
    .await;
    let pod = pod_spec(sts.get("main-kafka").await.unwrap()).unwrap();
    assert_eq!(pod.service_account_name, None);
    assert_eq!(pod.service_account, None);
    assert_eq!(pod.containers.len(), 1);
    let reasons = wait_for("a RebalancerRemoved event", 30, || async {
        let events = cluster_events(&admin, &ns, "main").await;
        events
            .iter()
            .any(|(r, _)| r == "RebalancerRemoved")
            .then_some(events)
    })
    .await;
    assert!(
        reasons.iter().all(|(_, by)| by == "evenkeel-operator"),
        "{reasons:?}"
    );
    op.assert_never_forbidden();
}

/// 10. Acting as the sidecar's ServiceAccount (impersonated): it may publish Events and read and
/// patch `status.rebalance` of its own KafkaCluster, and nothing more: not the spec, not another
/// KafkaCluster, not a list of them, not Secrets, not RBAC.
#[tokio::test]
async fn the_rebalancers_account_may_report_on_its_own_cluster_and_nothing_more() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("rebsa").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let main = clusters
        .create(&PostParams::default(), &with_rebalancer("main"))
        .await
        .unwrap();
    clusters
        .create(&PostParams::default(), &cluster("other", 1, &[]))
        .await
        .unwrap();
    rebalancer_identity(&admin, &ns, "main").await;
    let sa = kubeenv::as_service_account(&ns, "main-rebalancer").await;
    let own: Api<KafkaCluster> = Api::namespaced(sa.clone(), &ns);

    // What report.rs does: read the cluster, publish an Event, patch status.rebalance.
    assert_eq!(own.get("main").await.unwrap().uid(), main.uid());
    let regarding = json!({"apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaCluster",
                           "name": "main", "namespace": ns, "uid": main.uid()});
    let event: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"generateName": "main-"},
        "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "evenkeel-rebalancer", "reportingInstance": "main-kafka-0",
        "action": "Rebalance", "reason": "RebalancePlanned", "type": "Normal",
        "note": "a dry run", "regarding": regarding,
    }))
    .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(sa.clone(), &ns);
    events
        .create(&PostParams::default(), &event)
        .await
        .expect("the sidecar may create an events.k8s.io Event");
    let core_event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"generateName": "main-"},
        "involvedObject": regarding, "reason": "RebalancePlanned", "message": "a dry run",
        "type": "Normal", "source": {"component": "evenkeel-rebalancer"},
    }))
    .unwrap();
    let core_events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(sa.clone(), &ns);
    core_events
        .create(&PostParams::default(), &core_event)
        .await
        .expect("the sidecar may create a core Event");
    let rebalance = json!({"lastAction": "RebalancePlanned", "lastActionTime": "2026-01-02T03:04:05Z",
                           "moves": 4, "skewBefore": 2.5, "skewAfter": 1.0, "message": "a dry run"});
    let status_patch = PatchParams {
        field_manager: Some("evenkeel-rebalancer".into()),
        ..PatchParams::default()
    };
    own.patch_status(
        "main",
        &status_patch,
        &Patch::Merge(json!({"status": {"rebalance": rebalance}})),
    )
    .await
    .expect("the sidecar may patch its cluster's status");
    let written = clusters.get("main").await.unwrap();
    assert_eq!(
        serde_json::to_value(&written).unwrap()["status"]["rebalance"],
        rebalance
    );

    // And nothing more.
    let who = format!("system:serviceaccount:{ns}:main-rebalancer");
    let (code, msg) = refusal(
        own.patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await,
    );
    assert_eq!(code, 403, "{msg}");
    assert!(msg.contains(&who), "{msg}");
    assert_eq!(refusal(own.get("other").await).0, 403, "another cluster");
    assert_eq!(
        refusal(
            own.patch_status(
                "other",
                &status_patch,
                &Patch::Merge(json!({"status": {"rebalance": rebalance}})),
            )
            .await
        )
        .0,
        403,
        "another cluster's status"
    );
    assert_eq!(refusal(own.list(&ListParams::default()).await).0, 403);
    assert_eq!(
        refusal(own.delete("main", &DeleteParams::default()).await).0,
        403
    );
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), &ns);
    assert_eq!(refusal(secrets.list(&ListParams::default()).await).0, 403);
    assert_eq!(refusal(secrets.get("any").await).0, 403);
    let roles: Api<Role> = Api::namespaced(sa.clone(), &ns);
    assert_eq!(refusal(roles.get("main-rebalancer").await).0, 403);
    assert_eq!(refusal(events.list(&ListParams::default()).await).0, 403);
    op.assert_never_forbidden();
}

/// A topic of `partitions` partitions all led by the lowest broker id of the cluster at
/// `bootstrap` (RF up to 3), settled with full ISRs; returns that broker's id.
async fn topic_led_by_one_broker(bootstrap: &str, topic: &str, partitions: usize) -> i32 {
    let a = evenkeel::client::AdminClient::connect(bootstrap, Duration::from_secs(30))
        .await
        .expect("connects to the Kafka cluster");
    let mut ids: Vec<i32> = a
        .describe_cluster()
        .await
        .unwrap()
        .brokers
        .iter()
        .map(|b| b.id)
        .collect();
    ids.sort();
    assert!(ids.len() >= 2, "a cluster of several brokers: {ids:?}");
    let hot = ids[0];
    let rf = ids.len().min(3);
    // Every partition's preferred leader is the first broker.
    let assignment = evenkeel::perf::skew::skewed_assignment(partitions, &ids, 1.0);
    a.create_topic_with_assignment(topic, &assignment, &BTreeMap::new())
        .await
        .unwrap();
    wait_for("the skewed topic to settle", 90, || async {
        let t = a
            .describe_topics(Some(&[topic.to_string()]))
            .await
            .ok()?
            .into_iter()
            .next()?;
        (t.partitions.len() == partitions
            && t.partitions
                .iter()
                .all(|p| p.leader == hot && p.isr.len() == rf))
        .then_some(())
    })
    .await;
    hot
}

/// 11. The sidecar itself: `evenkeel rebalancer --dry-run --kafka-cluster main` against a
/// 3-broker Kafka (CI's Apache Kafka in EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP, else 3 evenkeel
/// brokers), authenticated as `main-rebalancer` with the Role the operator made, reports a
/// skewed topic's plan as a RebalancePlanned Event and `status.rebalance`; the operator's next
/// status write keeps it; nothing moved.
#[tokio::test]
async fn the_sidecar_reports_a_dry_run_plan_as_an_event_and_status_rebalance() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("rebrun").await;
    let (bootstrap, _local) = match std::env::var("EVENKEEL_KAFKA_CLUSTER_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => (b, None),
        _ => {
            let c = common::cluster::Cluster::start(3, &[]);
            (c.bootstrap(), Some(c))
        }
    };
    let topic = format!("skewed-{ns}");
    let hot = topic_led_by_one_broker(&bootstrap, &topic, 30).await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &with_rebalancer("main"))
        .await
        .unwrap();
    rebalancer_identity(&admin, &ns, "main").await;

    let sidecar = kubeenv::Rebalancer::start(
        &ns,
        "main",
        &bootstrap,
        &["--dry-run", "--no-metrics", "--interval", "1s"],
    );
    let rebalance = wait_for("status.rebalance written by the sidecar", 90, || async {
        let kc = clusters.get("main").await.ok()?;
        kc.status?.rebalance
    })
    .await;
    assert_eq!(rebalance.last_action, "RebalancePlanned", "{rebalance:?}");
    assert!(rebalance.moves >= 1, "{rebalance:?}");
    assert!(
        rebalance.skew_before > rebalance.skew_after && rebalance.skew_before > 1.1,
        "{rebalance:?}"
    );
    assert!(
        rebalance
            .last_action_time
            .parse::<k8s_openapi::jiff::Timestamp>()
            .is_ok(),
        "{rebalance:?}"
    );
    assert!(!rebalance.message.is_empty(), "{rebalance:?}");
    let events = wait_for("the sidecar's RebalancePlanned event", 30, || async {
        let events = cluster_events(&admin, &ns, "main").await;
        events
            .iter()
            .any(|e| e == &("RebalancePlanned".into(), "evenkeel-rebalancer".into()))
            .then_some(events)
    })
    .await;
    eprintln!("events about main: {events:?}");

    // The operator's next status write (a new generation to observe) keeps the sidecar's.
    let generation = clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"log.retention.hours": "24"}}})),
        )
        .await
        .unwrap()
        .metadata
        .generation;
    let after = wait_for("the operator to observe the new generation", 60, || async {
        let st = clusters.get("main").await.ok()?.status?;
        (st.observed_generation == generation).then_some(st)
    })
    .await;
    assert_eq!(after.rebalance.as_ref(), Some(&rebalance));

    // A dry run moves nothing, and the sidecar was never refused.
    let a = evenkeel::client::AdminClient::connect(&bootstrap, Duration::from_secs(30))
        .await
        .unwrap();
    let t = a
        .describe_topics(Some(std::slice::from_ref(&topic)))
        .await
        .unwrap()
        .remove(0);
    assert!(t.partitions.iter().all(|p| p.leader == hot));
    let log = sidecar.log();
    for bad in ["forbidden", "could not", "cannot read the KafkaCluster"] {
        assert!(!log.contains(bad), "the sidecar logged {bad:?}:\n{log}");
    }
    let _ = a.delete_topic(&topic).await;
    op.assert_never_forbidden();
}

/// A KafkaCluster with a TLS listener using SCRAM-SHA-512, a TLS listener using client
/// certificates and simple authorization (`replicas` brokers).
fn secured_cluster(name: &str, replicas: i32) -> KafkaCluster {
    serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "storage": {"size": "1Gi"},
            "listeners": [
                {"name": "tls", "port": 9095, "tls": true, "authentication": {"type": "scram-sha-512"}},
                {"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}},
            ],
            "authorization": {"type": "simple", "superUsers": ["admin"]},
        },
    }))
    .unwrap()
}

/// The text of a Secret's entries.
fn secret_entries(s: &Secret) -> BTreeMap<String, String> {
    evenkeel::operator::certs::secret_text(s)
}

/// Java's keytool opens the certificate user's `user.p12` with its `user.password` and finds
/// one key entry whose chain is the user's certificate (subject `subject`) and the clients CA.
fn java_reads_the_keystore(secret: &Secret, subject: &str) {
    let data = secret.data.as_ref().expect("the user's Secret has data");
    let p12 = &data.get("user.p12").expect("the Secret has user.p12").0;
    let password = String::from_utf8(data["user.password"].0.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.p12");
    fs::write(&path, p12).unwrap();
    let out = Command::new("keytool")
        .args(["-list", "-v", "-storetype", "PKCS12", "-keystore"])
        .arg(&path)
        .args(["-storepass", &password])
        .output()
        .expect("keytool runs (Java 17)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "keytool: {text}");
    assert!(text.contains("Your keystore contains 1 entry"), "{text}");
    assert!(text.contains("Entry type: PrivateKeyEntry"), "{text}");
    assert!(text.contains("Certificate chain length: 2"), "{text}");
    assert!(text.contains(&format!("Owner: {subject}")), "{text}");
    let wrong = Command::new("keytool")
        .args(["-list", "-storetype", "PKCS12", "-keystore"])
        .arg(&path)
        .args(["-storepass", "not-the-password"])
        .output()
        .unwrap();
    assert!(
        !wrong.status.success(),
        "a wrong password opens the keystore"
    );
}

/// The five Secrets of a secured cluster, with their resourceVersions, once they all exist.
async fn security_secrets(api: &Api<Secret>, cluster: &str, brokers: i32) -> Vec<Secret> {
    let names = [
        format!("{cluster}-cluster-ca-cert"),
        format!("{cluster}-cluster-ca"),
        format!("{cluster}-clients-ca-cert"),
        format!("{cluster}-clients-ca"),
        format!("{cluster}-kafka-brokers"),
    ];
    let last = format!("{cluster}-kafka-{}.pem", brokers - 1);
    wait_for("the CA and broker Secrets", 60, || async {
        let mut out = Vec::new();
        for n in &names {
            out.push(api.get_opt(n).await.ok()??);
        }
        secret_entries(&out[4]).contains_key(&last).then_some(out)
    })
    .await
}

/// 9. A secured cluster: the operator makes the cluster and clients CAs (Strimzi's Secret names,
/// owned by the cluster) and a broker Secret whose certificates the cluster CA signs for every
/// name a client uses; the brokers' configuration has SASL_SSL, SSL with client certificates and
/// the authorizer; the pods mount the Secrets; the status carries the CA. Later passes keep the
/// CAs; a scale-up issues only the new broker's certificate. Refused combinations say why.
#[tokio::test]
async fn a_secured_cluster_gets_its_cas_broker_certificates_and_config() {
    use evenkeel::operator::certs::{dns_names, signed_by};
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("sec").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let created = clusters
        .create(&PostParams::default(), &secured_cluster("sec", 2))
        .await
        .unwrap();
    let uid = created.uid().unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let first = security_secrets(&secrets, "sec", 2).await;
    // Created secured: its controller listener is mutual TLS, and needs no NetworkPolicy.
    let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), &ns);
    assert!(policies
        .get_opt("sec-kafka-controller")
        .await
        .unwrap()
        .is_none());
    for s in &first {
        assert!(
            s.owner_references()
                .iter()
                .any(|r| r.uid == uid && r.controller == Some(true)),
            "{} is not owned by the cluster",
            s.name_any()
        );
    }
    let ca = secret_entries(&first[0]).remove("ca.crt").expect("ca.crt");
    assert!(secret_entries(&first[1]).contains_key("ca.key"));
    assert!(secret_entries(&first[2]).contains_key("ca.crt"));
    // Strimzi's truststore for Java clients beside each CA certificate.
    for cert in [&first[0], &first[2]] {
        let data = cert.data.clone().unwrap_or_default();
        assert!(
            data.contains_key("ca.p12"),
            "{} has no ca.p12",
            cert.name_any()
        );
        assert_eq!(data["ca.password"].0.len(), 32, "{}", cert.name_any());
    }
    assert!(secret_entries(&first[3]).contains_key("ca.key"));
    let brokers = secret_entries(&first[4]);
    for pod in ["sec-kafka-0", "sec-kafka-1"] {
        let cert = &brokers[&format!("{pod}.crt")];
        assert!(
            signed_by(cert, &ca),
            "{pod}'s certificate is not signed by the cluster CA"
        );
        let names = dns_names(cert).unwrap();
        for want in [
            format!("{pod}.sec-kafka-brokers.{ns}.svc"),
            format!("{pod}.sec-kafka-brokers.{ns}.svc.cluster.local"),
            format!("sec-kafka-bootstrap.{ns}.svc"),
            "sec-kafka-bootstrap".to_string(),
        ] {
            assert!(names.contains(&want), "{pod}: {want} not in {names:?}");
        }
        assert!(brokers[&format!("{pod}.pem")].contains(cert.as_str()));
    }

    let cm_api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let props = wait_for("the ConfigMap", 30, || async {
        cm_api
            .get_opt("sec-kafka-config")
            .await
            .ok()??
            .data?
            .remove("server.properties")
    })
    .await;
    for line in [
        "listener.security.protocol.map=REPLICATION:SSL,TLS:SASL_SSL,MTLS:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name=REPLICATION",
        "listener.name.replication.ssl.client.auth=required",
        "listener.name.replication.ssl.truststore.location=/etc/evenkeel-tls/cluster-ca/ca.crt",
        "listener.name.controller.ssl.client.auth=required",
        "listener.name.controller.ssl.truststore.location=/etc/evenkeel-tls/cluster-ca/ca.crt",
        "listener.name.tls.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.mtls.ssl.client.auth=required",
        "listener.name.mtls.ssl.truststore.location=/etc/evenkeel-tls/clients-ca/ca.crt",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:CN=sec-kafka,O=evenkeel.dev;User:CN=evenkeel-operator,O=evenkeel.dev;User:admin",
    ] {
        assert!(props.lines().any(|l| l == line), "{line} not in {props}");
    }
    let sts_api: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    // The ConfigMap is applied just before the StatefulSet: wait for that too.
    let sts = wait_for("the StatefulSet", 30, || async {
        sts_api.get_opt("sec-kafka").await.ok()?
    })
    .await;
    let sts = serde_json::to_value(sts).unwrap();
    // A new secured cluster's controller listener is SSL, recorded for the operator's next
    // passes, and each pod presents its own certificate there.
    assert_eq!(
        sts.pointer("/metadata/annotations/kafka.evenkeel.dev~1controller-tls"),
        Some(&json!("true")),
        "{sts}"
    );
    let args = sts
        .pointer("/spec/template/spec/containers/0/args")
        .unwrap()
        .to_string();
    assert!(
        args.contains("listener.name.controller.ssl.keystore.location=/etc/evenkeel-tls/brokers/$(POD_NAME).pem"),
        "{args}"
    );
    let volumes = sts
        .pointer("/spec/template/spec/volumes")
        .unwrap()
        .to_string();
    for secret in [
        "sec-kafka-brokers",
        "sec-cluster-ca-cert",
        "sec-clients-ca-cert",
    ] {
        assert!(
            volumes.contains(&format!("\"secretName\":\"{secret}\"")),
            "{volumes}"
        );
    }
    let args = sts
        .pointer("/spec/template/spec/containers/0/args")
        .unwrap()
        .to_string();
    assert!(
        args.contains(
            "listener.name.tls.ssl.keystore.location=/etc/evenkeel-tls/brokers/$(POD_NAME).pem"
        ),
        "{args}"
    );
    let status = wait_for("status.listeners with the CA", 60, || async {
        let kc = clusters.get("sec").await.ok()?;
        let listeners = kc.status?.listeners;
        (!listeners.is_empty()).then_some(listeners)
    })
    .await;
    assert_eq!(status[0].certificates, std::slice::from_ref(&ca));

    // A spec change is a new pass: no Secret changes. A scale-up issues one certificate more.
    let version = |s: &Secret| s.metadata.resource_version.clone();
    clusters
        .patch(
            "sec",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let scaled = security_secrets(&secrets, "sec", 3).await;
    for (before, after) in first.iter().zip(&scaled).take(4) {
        assert_eq!(
            version(before),
            version(after),
            "{} changed",
            before.name_any()
        );
    }
    let after = secret_entries(&scaled[4]);
    assert_eq!(after["sec-kafka-0.crt"], brokers["sec-kafka-0.crt"]);
    assert!(signed_by(&after["sec-kafka-2.crt"], &ca));
    clusters
        .patch(
            "sec",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"log.retention.hours": "24"}}})),
        )
        .await
        .unwrap();
    wait_for("the config edit to be reconciled", 60, || async {
        let kc = clusters.get("sec").await.ok()?;
        (kc.status?.observed_generation == kc.metadata.generation).then_some(())
    })
    .await;
    let again = security_secrets(&secrets, "sec", 3).await;
    for (before, after) in scaled.iter().zip(&again) {
        assert_eq!(
            version(before),
            version(after),
            "{} changed",
            before.name_any()
        );
    }

    // A renewal of the cluster CA, asked for with the annotation: a new certificate with the
    // same key, generation 1 on its Secret and on the brokers' pod template (which rolls
    // them), the annotation gone; the brokers' certificates are kept (the same key signed
    // them) and their keystores and the listeners' status carry the new CA certificate.
    assert_eq!(template_generation(&sts_api, "sec-kafka").await, None);
    let force = json!({"metadata": {"annotations": {"kafka.evenkeel.dev/force-renew": "true"}}});
    secrets
        .patch(
            "sec-cluster-ca-cert",
            &PatchParams::default(),
            &Patch::Merge(force),
        )
        .await
        .unwrap();
    let renewed = wait_for("the renewed cluster CA", 60, || async {
        let s = secrets.get("sec-cluster-ca-cert").await.ok()?;
        let a = s.metadata.annotations.clone().unwrap_or_default();
        let renewed = a
            .get("kafka.evenkeel.dev/ca-cert-generation")
            .map(String::as_str)
            == Some("1")
            && !a.contains_key("kafka.evenkeel.dev/force-renew");
        renewed.then(|| secret_entries(&s).remove("ca.crt"))?
    })
    .await;
    assert_ne!(renewed, ca);
    let renewed_secret = secrets.get("sec-cluster-ca-cert").await.unwrap();
    let (before, after_renewal) = (
        first[0].data.clone().unwrap_or_default(),
        renewed_secret.data.unwrap_or_default(),
    );
    assert_eq!(before["ca.password"], after_renewal["ca.password"]);
    assert_ne!(before["ca.p12"], after_renewal["ca.p12"]);
    wait_for("generation 1 on the pod template", 60, || async {
        (template_generation(&sts_api, "sec-kafka").await.as_deref() == Some("1")).then_some(())
    })
    .await;
    let keystores = wait_for("the keystores with the renewed CA", 60, || async {
        let entries = secret_entries(&secrets.get("sec-kafka-brokers").await.ok()?);
        entries["sec-kafka-0.pem"]
            .ends_with(renewed.as_str())
            .then_some(entries)
    })
    .await;
    assert_eq!(keystores["sec-kafka-0.crt"], after["sec-kafka-0.crt"]);
    assert!(signed_by(&keystores["sec-kafka-0.crt"], &renewed));
    wait_for("status.listeners with the renewed CA", 60, || async {
        let kc = clusters.get("sec").await.ok()?;
        (kc.status?.listeners[0].certificates == std::slice::from_ref(&renewed)).then_some(())
    })
    .await;
    let events = cluster_events(&admin, &ns, "sec").await;
    assert!(
        events.iter().any(|(reason, _)| reason == "CaRenewed"),
        "{events:?}"
    );

    // Half a CA is not made anew (that would change every certificate it signed): a Warning
    // event says so, and neither Secret is written.
    secrets
        .delete("sec-clients-ca", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("a CaUnusable event", 60, || async {
        let events = cluster_events(&admin, &ns, "sec").await;
        events
            .iter()
            .any(|(reason, _)| reason == "CaUnusable")
            .then_some(())
    })
    .await;
    assert!(secrets.get_opt("sec-clients-ca").await.unwrap().is_none());
    let cert = secrets.get("sec-clients-ca-cert").await.unwrap();
    assert_eq!(version(&cert), version(&again[2]));

    // Client certificates without TLS: refused at admission, with the rule's message.
    let (code, message) = refusal(
        clusters
            .patch(
                "sec",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"listeners": [
                    {"name": "mtls", "port": 9094, "tls": false, "authentication": {"type": "tls"}},
                ]}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("authentication type tls needs tls: true"),
        "{message}"
    );
    // A super user that would smuggle in a second one: the operator refuses it, saying why.
    let mut open = secured_cluster("open", 1);
    if let Some(authz) = open.spec.authorization.as_mut() {
        authz.super_users = vec!["admin;User:mallory".into()];
    }
    clusters
        .create(&PostParams::default(), &open)
        .await
        .unwrap();
    let (_, _, why) = wait_for("InvalidSpec", 60, || async {
        let v = serde_json::to_value(clusters.get("open").await.ok()?).unwrap();
        condition(&v, "Ready").filter(|c| c.1 == "InvalidSpec")
    })
    .await;
    assert!(
        why.contains(r#"spec.authorization.superUsers: "admin;User:mallory" is not a user name"#),
        "{why}"
    );
    assert!(secrets.get_opt("open-cluster-ca").await.unwrap().is_none());
    op.assert_never_forbidden();
}

/// Sets the cluster CA generation a test broker pod was made with.
async fn pod_made_at(pods: &Api<Pod>, name: &str, generation: u64) {
    pod_made_with(pods, name, "cluster", generation).await;
}

/// Sets the generation of CA `ca` (`cluster`, `clients`) a test broker pod was made with.
async fn pod_made_with(pods: &Api<Pod>, name: &str, ca: &str, generation: u64) {
    let annotation = format!("kafka.evenkeel.dev/{ca}-ca-cert-generation");
    let patch = json!({"metadata": {"annotations": {annotation: generation.to_string()}}});
    pods.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// A CA as its Secrets hold it: the certificate Secret's entries and annotations, and the key
/// Secret's entries.
type CaState = (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

/// The CA of `base` once its certificate Secret records `generation` and the key replacement
/// step `step` (`None`: no replacement going on).
async fn ca_at(
    secrets: &Api<Secret>,
    base: &str,
    generation: &str,
    step: Option<&str>,
) -> Option<CaState> {
    let state = ca_state(secrets, base).await?;
    let annotation = |k: &str| state.1.get(k).map(String::as_str);
    (annotation("kafka.evenkeel.dev/ca-cert-generation") == Some(generation)
        && annotation("kafka.evenkeel.dev/ca-key-replacement") == step)
        .then_some(state)
}

/// The cluster CA generation the brokers' pod template of StatefulSet `name` carries.
async fn template_generation(sts_api: &Api<StatefulSet>, name: &str) -> Option<String> {
    sts_api
        .get(name)
        .await
        .ok()?
        .spec?
        .template
        .metadata?
        .annotations?
        .remove("kafka.evenkeel.dev/cluster-ca-cert-generation")
}

/// The CA whose Secrets are `<base>-cert` and `<base>`.
async fn ca_state(secrets: &Api<Secret>, base: &str) -> Option<CaState> {
    let cert = secrets.get(&format!("{base}-cert")).await.ok()?;
    let key = secrets.get(base).await.ok()?;
    Some((
        secret_entries(&cert),
        cert.annotations().clone(),
        secret_entries(&key),
    ))
}

/// Changes the cluster's spec (`log.retention.hours`) and waits for the operator to have
/// reconciled it: one whole pass after the change.
async fn operator_pass(clusters: &Api<KafkaCluster>, name: &str, hours: &str) {
    let patch = json!({"spec": {"config": {"log.retention.hours": hours}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    operator_passed(clusters, name).await;
}

/// Waits for the operator's pass over the cluster's latest spec.
async fn operator_passed(clusters: &Api<KafkaCluster>, name: &str) {
    wait_for("the operator's pass over the change", 60, || async {
        let kc = clusters.get(name).await.ok()?;
        (kc.status?.observed_generation == kc.metadata.generation).then_some(())
    })
    .await;
}

/// 9b. Replacing the cluster CA's key (the annotation `force-replace`) takes three steps, and
/// the operator takes the next only once every broker pod runs the generation the last one
/// raised and is ready: both certificates trusted while the old key signs; the new key signs
/// and the brokers' certificates are issued again; only the new certificate trusted.
#[tokio::test]
async fn a_cas_key_is_replaced_in_three_steps_each_after_the_brokers_roll() {
    use evenkeel::operator::certs::{signed_by, split_certificates, subject_cn};
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("rep").await;
    let _op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &secured_cluster("rep", 2))
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let first = security_secrets(&secrets, "rep", 2).await;
    let old_cert = secret_entries(&first[0]).remove("ca.crt").unwrap();
    let old_key = secret_entries(&first[1]).remove("ca.key").unwrap();
    let brokers_before = secret_entries(&first[4]);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    for ordinal in 0..2 {
        ready_broker_pod(&admin, &ns, "rep", ordinal).await;
    }
    let sts_api: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);

    // Step 1: the new certificate beside the old one; the old key still signs and the
    // brokers' certificates stay.
    let force = json!({"metadata": {"annotations": {"kafka.evenkeel.dev/force-replace": "true"}}});
    secrets
        .patch(
            "rep-cluster-ca-cert",
            &PatchParams::default(),
            &Patch::Merge(force),
        )
        .await
        .unwrap();
    let (cert, annotations, key) = wait_for("step 1: both certificates trusted", 60, || {
        ca_at(&secrets, "rep-cluster-ca", "1", Some("trust-new-key"))
    })
    .await;
    assert!(!annotations.contains_key("kafka.evenkeel.dev/force-replace"));
    let trusted = split_certificates(&cert["ca.crt"]);
    assert_eq!(trusted.len(), 2, "{trusted:?}");
    assert_eq!(trusted[0], old_cert);
    let new_cert = trusted[1].clone();
    // The new CA is named apart from the old one (OpenSSL clients pick an anchor by subject).
    assert_eq!(subject_cn(&new_cert).unwrap(), "rep-cluster-ca v1");
    assert_eq!(key["ca.key"], old_key);
    assert!(key.contains_key("ca-next.key"));
    wait_for("generation 1 on the pod template", 60, || async {
        (template_generation(&sts_api, "rep-kafka").await.as_deref() == Some("1")).then_some(())
    })
    .await;
    let brokers = secret_entries(&secrets.get("rep-kafka-brokers").await.unwrap());
    assert_eq!(
        brokers["rep-kafka-0.crt"],
        brokers_before["rep-kafka-0.crt"]
    );
    wait_for("status.listeners with both certificates", 60, || async {
        let kc = clusters.get("rep").await.ok()?;
        (kc.status?.listeners[0].certificates == trusted).then_some(())
    })
    .await;

    // One broker rolled is not enough: a pass later, still step 1. Both: step 2, the new key
    // signs.
    pod_made_at(&pods, "rep-kafka-0", 1).await;
    operator_pass(&clusters, "rep", "24").await;
    assert!(
        ca_at(&secrets, "rep-cluster-ca", "1", Some("trust-new-key"))
            .await
            .is_some()
    );
    pod_made_at(&pods, "rep-kafka-1", 1).await;
    let (cert, _, key) = wait_for("step 2: the new key signs", 60, || {
        ca_at(&secrets, "rep-cluster-ca", "2", Some("sign-with-new-key"))
    })
    .await;
    assert_eq!(
        split_certificates(&cert["ca.crt"]),
        [new_cert.clone(), old_cert.clone()]
    );
    assert_ne!(key["ca.key"], old_key);
    assert!(!key.contains_key("ca-next.key"));
    let brokers = wait_for("the brokers' certificates from the new key", 60, || async {
        let entries = secret_entries(&secrets.get("rep-kafka-brokers").await.ok()?);
        signed_by(&entries["rep-kafka-1.crt"], &new_cert).then_some(entries)
    })
    .await;
    for pod in ["rep-kafka-0", "rep-kafka-1"] {
        assert!(
            signed_by(&brokers[&format!("{pod}.crt")], &new_cert),
            "{pod}"
        );
        assert!(
            !signed_by(&brokers[&format!("{pod}.crt")], &old_cert),
            "{pod}"
        );
        assert!(
            brokers[&format!("{pod}.pem")].ends_with(new_cert.as_str()),
            "{pod}"
        );
    }
    wait_for("generation 2 on the pod template", 60, || async {
        (template_generation(&sts_api, "rep-kafka").await.as_deref() == Some("2")).then_some(())
    })
    .await;

    // Step 3, once the brokers run generation 2: the old certificate is no longer trusted.
    pod_made_at(&pods, "rep-kafka-0", 2).await;
    pod_made_at(&pods, "rep-kafka-1", 2).await;
    let (cert, _, key) = wait_for("step 3: only the new certificate", 60, || {
        ca_at(&secrets, "rep-cluster-ca", "3", None)
    })
    .await;
    assert_eq!(cert["ca.crt"], new_cert);
    assert!(!key.contains_key("ca-next.key"));
    wait_for(
        "status.listeners with the new certificate only",
        60,
        || async {
            let kc = clusters.get("rep").await.ok()?;
            (kc.status?.listeners[0].certificates == std::slice::from_ref(&new_cert)).then_some(())
        },
    )
    .await;
    let events = cluster_events(&admin, &ns, "rep").await;
    assert!(
        events.iter().any(|(r, _)| r == "CaKeyReplacing"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|(r, _)| r == "CaKeyReplaced"),
        "{events:?}"
    );
    // The replacement is over: a later pass leaves the CA as it is.
    pod_made_at(&pods, "rep-kafka-0", 3).await;
    pod_made_at(&pods, "rep-kafka-1", 3).await;
    operator_pass(&clusters, "rep", "25").await;
    let (cert, annotations, _) = ca_state(&secrets, "rep-cluster-ca").await.unwrap();
    assert_eq!(annotations["kafka.evenkeel.dev/ca-cert-generation"], "3");
    assert_eq!(cert["ca.crt"], new_cert);

    // The clients CA: its old certificate stays trusted until the certificate KafkaUser holds
    // one from the new key.
    let users: Api<KafkaUser> = Api::namespaced(admin.clone(), &ns);
    let mut carl = kafka_user("carl", "tls", json!([]));
    carl.spec.cluster_ref = "rep".into();
    users.create(&PostParams::default(), &carl).await.unwrap();
    let user_cert =
        || async { secret_entries(&secrets.get("carl").await.ok()?).remove("user.crt") };
    let old_clients = secret_entries(&secrets.get("rep-clients-ca-cert").await.unwrap())
        .remove("ca.crt")
        .unwrap();
    let first_user_cert = wait_for("carl's certificate", 60, user_cert).await;
    assert!(signed_by(&first_user_cert, &old_clients));
    let force = json!({"metadata": {"annotations": {"kafka.evenkeel.dev/force-replace": "true"}}});
    secrets
        .patch(
            "rep-clients-ca-cert",
            &PatchParams::default(),
            &Patch::Merge(force),
        )
        .await
        .unwrap();
    wait_for("clients CA step 1", 60, || {
        ca_at(&secrets, "rep-clients-ca", "1", Some("trust-new-key"))
    })
    .await;
    for pod in ["rep-kafka-0", "rep-kafka-1"] {
        pod_made_with(&pods, pod, "clients", 1).await;
    }
    let (both, _, _) = wait_for("clients CA step 2", 60, || {
        ca_at(&secrets, "rep-clients-ca", "2", Some("sign-with-new-key"))
    })
    .await;
    let new_clients = split_certificates(&both["ca.crt"])[0].clone();
    assert_ne!(new_clients, old_clients);
    for pod in ["rep-kafka-0", "rep-kafka-1"] {
        pod_made_with(&pods, pod, "clients", 2).await;
    }
    wait_for("clients CA step 3", 90, || {
        ca_at(&secrets, "rep-clients-ca", "3", None)
    })
    .await;
    // By the time the old certificate is dropped, carl's is from the new key.
    let last_user_cert = user_cert().await.unwrap();
    assert!(signed_by(&last_user_cert, &new_clients));
    assert!(!signed_by(&last_user_cert, &old_clients));
}

/// Writes the StatefulSet's status as its controller would once every pod runs the current
/// template (none runs here), and labels the pods with that revision.
async fn rolled_out(admin: &Client, ns: &str, cluster: &str, replicas: i32) {
    let sts_api: Api<StatefulSet> = Api::namespaced(admin.clone(), ns);
    let name = format!("{cluster}-kafka");
    let generation = sts_api
        .get(&name)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let revision = format!("{name}-rev{generation}");
    sts_api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": generation, "replicas": replicas,
                "readyReplicas": replicas, "updatedReplicas": replicas,
                "currentRevision": revision, "updateRevision": revision,
            }})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    for ordinal in 0..replicas {
        let patch = json!({"metadata": {"labels": {"controller-revision-hash": revision}}});
        pods.patch(
            &format!("{name}-{ordinal}"),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .unwrap();
    }
}

/// The cluster's `status.securityStage` once it is `stage`, with the brokers' server.properties.
async fn at_stage(admin: &Client, ns: &str, cluster: &str, stage: &str) -> String {
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    wait_for(&format!("security stage {stage}"), 60, || async {
        let kc = serde_json::to_value(clusters.get(cluster).await.ok()?).unwrap();
        (kc["status"]["securityStage"] == stage).then_some(())?;
        let cm = cms.get(&format!("{cluster}-kafka-config")).await.ok()?;
        let props = cm.data?.remove("server.properties")?;
        let annotated = Api::<StatefulSet>::namespaced(admin.clone(), ns)
            .get(&format!("{cluster}-kafka"))
            .await
            .ok()?
            .metadata
            .annotations?
            .remove("kafka.evenkeel.dev/security-stage");
        (annotated.as_deref() == Some(stage)).then_some(props)
    })
    .await
}

/// The value of `key` in server.properties text.
fn prop<'a>(props: &'a str, key: &str) -> Option<&'a str> {
    props
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// Checks the brokers' listener protocols, the listener they replicate on, and whether they
/// run an authorizer.
fn assert_brokers(props: &str, protocols: &str, inter_broker: &str, authorizer: bool) {
    assert_eq!(
        prop(props, "listener.security.protocol.map"),
        Some(protocols)
    );
    assert_eq!(
        prop(props, "inter.broker.listener.name"),
        Some(inter_broker)
    );
    assert_eq!(prop(props, "authorizer.class.name").is_some(), authorizer);
}

/// The brokers' server.properties once the cluster is at `stage` with its controller listeners
/// named `names` (`controller.listener.names`, the dialled one first), and the StatefulSet
/// records that step's spare (the ConfigMap is applied just before the StatefulSet: a roll
/// marked done in between would be of the template before).
async fn at_step(admin: &Client, ns: &str, cluster: &str, stage: &str, names: &str) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let sts: Api<StatefulSet> = Api::namespaced(admin.clone(), ns);
    let spare_recorded = |spare: Option<&String>| match spare {
        None => names == "CONTROLLER",
        Some(s) => names.starts_with("CONTROLLER_SPARE") == s.ends_with(":dialled"),
    };
    wait_for(&format!("step {stage} with {names}"), 60, || async {
        at_stage(admin, ns, cluster, stage).await;
        let cm = cms.get(&format!("{cluster}-kafka-config")).await.ok()?;
        let props = cm.data?.remove("server.properties")?;
        (prop(&props, "controller.listener.names") == Some(names)).then_some(())?;
        let annotations = sts
            .get(&format!("{cluster}-kafka"))
            .await
            .ok()?
            .metadata
            .annotations?;
        spare_recorded(annotations.get("kafka.evenkeel.dev/controller-spare")).then_some(props)
    })
    .await
}

/// The ports the NetworkPolicy fencing PLAINTEXT controller listeners lets only the brokers
/// reach, once it exists.
async fn fenced_ports(policies: &Api<NetworkPolicy>, name: &str) -> Value {
    let policy = wait_for(&format!("NetworkPolicy {name}"), 60, || async {
        policies.get_opt(name).await.ok()?
    })
    .await;
    let ingress = serde_json::to_value(policy.spec.unwrap().ingress).unwrap();
    assert_eq!(
        ingress[0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "broker"
    );
    ingress[0]["ports"].clone()
}

async fn policy_removed(policies: &Api<NetworkPolicy>, name: &str) {
    wait_for(&format!("NetworkPolicy {name} removed"), 60, || async {
        policies.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// 9c. A running cluster is secured in five rolls, each only once every broker runs the last:
/// the internal listener and a spare mutual-TLS controller listener added (replication stays
/// on the first listener, PLAINTEXT, no authorizer); replication on the internal listener and
/// everyone dialling the spare; the spec's TLS, SASL and authorizer with the controller port
/// turned mutual TLS; the controller port dialled again; the spare removed. Unsecuring walks
/// back the same way, the controller listener first.
#[tokio::test]
async fn a_running_cluster_is_secured_and_unsecured_one_roll_per_step() {
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("mig").await;
    let _op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster("mig", 2, &[]))
        .await
        .unwrap();
    wait_for("StatefulSet mig-kafka", 60, || async {
        Api::<StatefulSet>::namespaced(admin.clone(), &ns)
            .get_opt("mig-kafka")
            .await
            .ok()?
    })
    .await;
    for ordinal in 0..2 {
        ready_broker_pod(&admin, &ns, "mig", ordinal).await;
    }
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_stage(&admin, &ns, "mig", "unsecured").await;
    assert_eq!(prop(&props, "inter.broker.listener.name"), Some("PLAIN"));

    let secure = json!({"spec": {
        "listeners": [
            {"name": "plain", "port": 9092, "tls": true, "authentication": {"type": "scram-sha-512"}},
        ],
        "authorization": {"type": "simple", "superUsers": ["admin"]},
    }});
    clusters
        .patch("mig", &PatchParams::default(), &Patch::Merge(secure))
        .await
        .unwrap();
    let dial_main = "CONTROLLER,CONTROLLER_SPARE";
    let dial_spare = "CONTROLLER_SPARE,CONTROLLER";
    let props = at_step(&admin, &ns, "mig", "internal", dial_main).await;
    let protocols = "PLAIN:PLAINTEXT,REPLICATION:SSL,CONTROLLER:PLAINTEXT,CONTROLLER_SPARE:SSL";
    assert_brokers(&props, protocols, "PLAIN", false);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    security_secrets(&secrets, "mig", 2).await;
    // The PLAINTEXT controller port is fenced to the brokers while it is there.
    let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), &ns);
    let fenced = fenced_ports(&policies, "mig-kafka-controller").await;
    assert_eq!(fenced, json!([{"protocol": "TCP", "port": 9093}]));
    let kc = serde_json::to_value(clusters.get("mig").await.unwrap()).unwrap();
    let (_, reason, message) = condition(&kc, "Reconciling").unwrap();
    assert_eq!(reason, "Securing", "{message}");
    assert!(message.contains("step internal"), "{message}");
    assert!(
        message.contains("spare controller listener on 9090"),
        "{message}"
    );
    // A pass later with the brokers not rolled yet: still the first step.
    operator_pass(&clusters, "mig", "25").await;
    let props = at_step(&admin, &ns, "mig", "internal", dial_main).await;
    assert_eq!(prop(&props, "log.retention.hours"), Some("25"));

    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "inter-broker", dial_spare).await;
    let protocols = "REPLICATION:SSL,PLAIN:PLAINTEXT,CONTROLLER_SPARE:SSL,CONTROLLER:PLAINTEXT";
    assert_brokers(&props, protocols, "REPLICATION", false);
    assert!(prop(&props, "controller.quorum.voters")
        .unwrap()
        .ends_with(":9090"));

    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "secured", dial_spare).await;
    let protocols = "REPLICATION:SSL,PLAIN:SASL_SSL,CONTROLLER_SPARE:SSL,CONTROLLER:SSL";
    assert_brokers(&props, protocols, "REPLICATION", true);
    // Pods not rolled yet still serve 9093 PLAINTEXT: it stays fenced until the roll is done,
    // a pass later too.
    operator_pass(&clusters, "mig", "26").await;
    let fenced = fenced_ports(&policies, "mig-kafka-controller").await;
    assert_eq!(fenced, json!([{"protocol": "TCP", "port": 9093}]));

    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "secured", dial_main).await;
    policy_removed(&policies, "mig-kafka-controller").await;
    assert!(prop(&props, "controller.quorum.voters")
        .unwrap()
        .ends_with(":9093"));
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "secured", "CONTROLLER").await;
    let protocols = "REPLICATION:SSL,PLAIN:SASL_SSL,CONTROLLER:SSL";
    assert_brokers(&props, protocols, "REPLICATION", true);
    let sts = Api::<StatefulSet>::namespaced(admin.clone(), &ns);
    let annotations = sts
        .get("mig-kafka")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(annotations["kafka.evenkeel.dev/controller-tls"], "true");
    assert!(!annotations.contains_key("kafka.evenkeel.dev/controller-spare"));
    // (The recorder folds the steps' events, of one reason, into one series.)
    let events = cluster_events(&admin, &ns, "mig").await;
    assert!(
        events.iter().any(|(reason, _)| reason == "Securing"),
        "{events:?}"
    );

    // Back: the authorizer and TLS go first (the brokers still replicate on the internal
    // listener); then, a roll each, a PLAINTEXT spare (fenced) and replication on the first
    // listener, everyone dialling the spare and the internal listener gone with the
    // controller port's TLS, the controller port dialled again, the spare removed.
    let unsecure = json!({"spec": {
        "listeners": [{"name": "plain", "port": 9092}],
        "authorization": null,
    }});
    clusters
        .patch("mig", &PatchParams::default(), &Patch::Merge(unsecure))
        .await
        .unwrap();
    operator_passed(&clusters, "mig").await;
    let props = at_step(&admin, &ns, "mig", "secured", "CONTROLLER").await;
    let protocols = "REPLICATION:SSL,PLAIN:PLAINTEXT,CONTROLLER:SSL";
    assert_brokers(&props, protocols, "REPLICATION", false);
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "inter-broker", dial_main).await;
    let protocols = "REPLICATION:SSL,PLAIN:PLAINTEXT,CONTROLLER:SSL,CONTROLLER_SPARE:PLAINTEXT";
    assert_brokers(&props, protocols, "REPLICATION", false);
    let fenced = fenced_ports(&policies, "mig-kafka-controller").await;
    assert_eq!(fenced, json!([{"protocol": "TCP", "port": 9090}]));
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "internal", dial_spare).await;
    assert_eq!(prop(&props, "inter.broker.listener.name"), Some("PLAIN"));
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "unsecured", dial_spare).await;
    let protocols = "PLAIN:PLAINTEXT,CONTROLLER_SPARE:PLAINTEXT,CONTROLLER:PLAINTEXT";
    assert_brokers(&props, protocols, "PLAIN", false);
    rolled_out(&admin, &ns, "mig", 2).await;
    at_step(&admin, &ns, "mig", "unsecured", dial_main).await;
    policy_removed(&policies, "mig-kafka-controller").await;
    rolled_out(&admin, &ns, "mig", 2).await;
    let props = at_step(&admin, &ns, "mig", "unsecured", "CONTROLLER").await;
    assert_brokers(
        &props,
        "PLAIN:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "PLAIN",
        false,
    );
}

fn kafka_user(name: &str, auth: &str, acls: Value) -> KafkaUser {
    serde_json::from_value(json!({
        "apiVersion": "kafka.evenkeel.dev/v1alpha1",
        "kind": "KafkaUser",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": "main",
            "authentication": {"type": auth},
            "authorization": {"type": "simple", "acls": acls},
        },
    }))
    .unwrap()
}

async fn wait_user_ready(users: &Api<KafkaUser>, name: &str) -> Value {
    wait_for(&format!("KafkaUser {name} Ready"), 60, || async {
        let ku = users.get(name).await.ok()?;
        let v = serde_json::to_value(&ku).unwrap();
        let (status, _, _) = condition(&v, "Ready")?;
        (status == "True").then_some(v)
    })
    .await
}

/// Waits until KafkaUser `name` is not ready for `reason`: the condition's message.
async fn wait_user_not_ready(users: &Api<KafkaUser>, name: &str, reason: &str) -> String {
    wait_for(
        &format!("KafkaUser {name} not ready: {reason}"),
        60,
        || async {
            let v = serde_json::to_value(users.get(name).await.ok()?).unwrap();
            let (status, why, message) = condition(&v, "Ready")?;
            (status == "False" && why == reason).then_some(message)
        },
    )
    .await
}

/// One record to `topic` as a SCRAM-SHA-512 user over SASL_PLAINTEXT: the delivery result.
async fn produce_as(
    bootstrap: &str,
    user: &str,
    password: &str,
    topic: &str,
) -> Result<(), String> {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.username", user)
        .set("sasl.password", password)
        .set("message.timeout.ms", "15000")
        .set("enable.idempotence", "false")
        .create()
        .unwrap();
    p.send(
        FutureRecord::to(topic).key("k").payload("v"),
        Duration::from_secs(15),
    )
    .await
    .map(|_| ())
    .map_err(|(e, _)| e.to_string())
}

/// One broker with a SCRAM-SHA-512 listener (SASL_PLAINTEXT) and the StandardAuthorizer, and
/// its address on it. PLAINTEXT's ANONYMOUS is a super user: the operator reaches the broker that
/// way, as it reaches a secured cluster's internal listener.
fn scram_broker() -> (common::cluster::Cluster, String) {
    let sasl_port = common::free_port();
    let overrides = [
        "listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    ];
    let broker = common::cluster::Cluster::start_with(1, &overrides, |_, ports| {
        common::cluster::Cluster::sasl_listeners(ports, sasl_port)
    });
    (broker, format!("127.0.0.1:{sasl_port}"))
}

/// 12. KafkaUser against a real broker with a SCRAM listener and the StandardAuthorizer: a SCRAM
/// user's Secret holds a password that logs in and a ready `sasl.jaas.config`; its ACLs are in
/// Kafka exactly as the spec lists them, so it may write where they allow and is refused where
/// they do not; a certificate user's Secret holds a certificate the clients CA signs for
/// `CN=<name>`, its ACLs name that principal; deleting a KafkaUser removes its credential and
/// ACLs from Kafka and its Secret with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkauser_credentials_and_acls_against_a_real_broker() {
    use evenkeel::operator::certs::signed_by;
    use evenkeel::operator::crd::USER_FINALIZER;
    use evenkeel::operator::kafka::UserAdmin;
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("ku").await;
    let (broker, sasl) = scram_broker();
    let op = Operator::start(&ns, &broker.bootstrap(), false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &secured_cluster("main", 1))
        .await
        .unwrap();
    let kafka = kafka_admin(&broker.bootstrap()).await;
    kafka
        .create_topic("orders", 1, 1, &BTreeMap::new())
        .await
        .unwrap();
    let users: Api<KafkaUser> = Api::namespaced(admin.clone(), &ns);
    let pp = PostParams::default();
    let writer = json!([{"resource": {"type": "topic", "name": "orders"}, "operations": ["Write", "Describe"]}]);
    let reader =
        json!([{"resource": {"type": "topic", "name": "orders"}, "operations": ["Describe"]}]);
    let certified = json!([{"resource": {"type": "group", "name": "carol-", "patternType": "prefix"}, "operations": ["Read"]}]);
    // Admission: a topic rule without a name is refused, saying why.
    let nameless = json!([{"resource": {"type": "topic"}, "operations": ["Read"]}]);
    let (code, msg) = refusal(
        users
            .create(&pp, &kafka_user("nameless", "scram-sha-512", nameless))
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("resource.name is required"), "{msg}");
    let writer_acls = writer.clone();
    for u in [
        kafka_user("alice", "scram-sha-512", writer),
        kafka_user("bob", "scram-sha-512", reader),
        kafka_user("carol", "tls", certified),
    ] {
        users.create(&pp, &u).await.unwrap();
    }
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);

    // SCRAM: the Secret's password logs in; alice may write, bob may not.
    let alice = wait_user_ready(&users, "alice").await;
    assert_eq!(alice["status"]["username"], "alice", "{alice}");
    assert_eq!(alice["status"]["secret"], "alice", "{alice}");
    let alice_secret = secret_entries(&secrets.get("alice").await.unwrap());
    let password = alice_secret["password"].clone();
    assert!(password.len() >= 32, "a short password: {password:?}");
    assert!(
        alice_secret["sasl.jaas.config"].contains(&format!("password=\"{password}\"")),
        "{alice_secret:?}"
    );
    produce_as(&sasl, "alice", &password, "orders")
        .await
        .expect("alice writes to orders");
    wait_user_ready(&users, "bob").await;
    let bob_password = secret_entries(&secrets.get("bob").await.unwrap())["password"].clone();
    assert_ne!(bob_password, password);
    let refused = produce_as(&sasl, "bob", &bob_password, "orders")
        .await
        .expect_err("bob has no Write on orders");
    assert!(refused.contains("authoriz"), "{refused}");
    let wrong = produce_as(&sasl, "alice", "not-the-password", "orders").await;
    assert!(wrong.is_err(), "a wrong password was accepted");

    // A password a person puts in the Secret is the one Kafka gets, and the old one stops
    // working: the Secret records the digest of the password Kafka was last given.
    let by_hand = "a-password-set-by-hand-0123456789";
    let patch = json!({"stringData": {"password": by_hand}});
    secrets
        .patch("alice", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for("the password set by hand to log in", 90, || async {
        produce_as(&sasl, "alice", by_hand, "orders").await.ok()
    })
    .await;
    let old = produce_as(&sasl, "alice", &password, "orders").await;
    assert!(old.is_err(), "the replaced password still logs in");
    let jaas = secret_entries(&secrets.get("alice").await.unwrap())["sasl.jaas.config"].clone();
    assert!(jaas.contains(by_hand), "{jaas}");
    let password = by_hand.to_string();

    // A Secret of the user's name that is not the KafkaUser's is left alone.
    let foreign: Secret = serde_json::from_value(json!({
        "metadata": {"name": "dora"}, "stringData": {"password": "the app's own"},
    }))
    .unwrap();
    secrets.create(&pp, &foreign).await.unwrap();
    users
        .create(&pp, &kafka_user("dora", "scram-sha-512", json!([])))
        .await
        .unwrap();
    wait_user_not_ready(&users, "dora", "SecretConflict").await;
    let dora = secrets.get("dora").await.unwrap();
    assert_eq!(secret_entries(&dora)["password"], "the app's own");
    assert!(dora.owner_references().is_empty());
    assert!(kafka.scram_mechanisms("dora").await.unwrap().is_empty());

    // The certificate user: CN=carol, signed by the clients CA; its ACLs name User:CN=carol.
    let carol = wait_user_ready(&users, "carol").await;
    assert_eq!(carol["status"]["username"], "CN=carol", "{carol}");
    let clients_ca = secret_entries(&secrets.get("main-clients-ca-cert").await.unwrap())
        .remove("ca.crt")
        .unwrap();
    let carol_secret = secret_entries(&secrets.get("carol").await.unwrap());
    assert!(signed_by(&carol_secret["user.crt"], &clients_ca));
    assert!(carol_secret.contains_key("user.key"));
    assert_eq!(carol_secret["ca.crt"], clients_ca);
    java_reads_the_keystore(&secrets.get("carol").await.unwrap(), "CN=carol");
    // A Secret without the keystore (made before it, or edited) gains it again at the next
    // pass, with the same certificate and keystore password.
    let patch = json!({"data": {"user.p12": null}});
    secrets
        .patch("carol", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let restored = wait_for("carol's keystore to be made again", 60, || async {
        let s = secrets.get("carol").await.ok()?;
        s.data.as_ref()?.contains_key("user.p12").then_some(s)
    })
    .await;
    let restored_entries = secret_entries(&restored);
    assert_eq!(restored_entries["user.crt"], carol_secret["user.crt"]);
    assert_eq!(
        restored_entries["user.password"],
        carol_secret["user.password"]
    );
    java_reads_the_keystore(&restored, "CN=carol");
    let carol_acls = kafka.acls_of("User:CN=carol").await.unwrap();
    assert_eq!(carol_acls.len(), 1, "{carol_acls:?}");
    assert_eq!(carol_acls[0].pattern.name, "carol-");
    assert_eq!(kafka.acls_of("User:alice").await.unwrap().len(), 2);

    // A password given in another Secret (Strimzi's password.valueFrom.secretKeyRef) is the
    // one Kafka gets and the user's Secret copies; a missing key is reported, not invented.
    let given: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-passwords"}, "stringData": {"erin": "erins-own-password-42"},
    }))
    .unwrap();
    secrets.create(&pp, &given).await.unwrap();
    let with_password = |name: &str, auth: &str, key: &str| -> KafkaUser {
        let mut u = kafka_user(name, auth, writer_acls.clone());
        u.spec.authentication.as_mut().unwrap().password = Some(
            serde_json::from_value(
                json!({"valueFrom": {"secretKeyRef": {"name": "app-passwords", "key": key}}}),
            )
            .unwrap(),
        );
        u
    };
    let (code, msg) = refusal(
        users
            .create(&pp, &with_password("tina", "tls", "erin"))
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains(PASSWORD_NEEDS_SCRAM), "{msg}");
    users
        .create(&pp, &with_password("erin", "scram-sha-512", "erin"))
        .await
        .unwrap();
    users
        .create(&pp, &with_password("frank", "scram-sha-512", "frank"))
        .await
        .unwrap();
    wait_user_ready(&users, "erin").await;
    let erin_secret = secret_entries(&secrets.get("erin").await.unwrap());
    assert_eq!(erin_secret["password"], "erins-own-password-42");
    assert!(erin_secret["sasl.jaas.config"].contains("erins-own-password-42"));
    produce_as(&sasl, "erin", "erins-own-password-42", "orders")
        .await
        .expect("erin writes with the password she was given");
    let frank = wait_user_not_ready(&users, "frank", "PasswordNotFound").await;
    assert!(
        frank.contains("app-passwords") && frank.contains("frank"),
        "{frank}"
    );
    assert!(kafka.scram_mechanisms("frank").await.unwrap().is_empty());

    // Deleting alice: her credential and ACLs leave Kafka, her Secret goes, bob's stay.
    let ku = users.get("alice").await.unwrap();
    assert!(ku.finalizers().iter().any(|f| f == USER_FINALIZER));
    users
        .delete("alice", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("KafkaUser alice to be gone", 60, || async {
        users.get_opt("alice").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(kafka.acls_of("User:alice").await.unwrap().is_empty());
    assert!(kafka.scram_mechanisms("alice").await.unwrap().is_empty());
    assert!(!kafka.scram_mechanisms("bob").await.unwrap().is_empty());
    assert_eq!(kafka.acls_of("User:bob").await.unwrap().len(), 1);
    let gone = produce_as(&sasl, "alice", &password, "orders").await;
    assert!(
        gone.is_err(),
        "alice still logs in after her KafkaUser was deleted"
    );
    wait_for("alice's Secret to be collected", 60, || async {
        secrets.get_opt("alice").await.ok()?.is_none().then_some(())
    })
    .await;
    op.assert_never_forbidden();
}

/// One REST Proxy v2 POST of `{"n": n}` to `orders` on the proxy at `addr`, with basic
/// credentials when given.
fn post_orders_as(addr: &str, auth: Option<(&str, &str)>, n: u32) -> common::http::Response {
    use base64::Engine;
    let extra: Vec<(&str, String)> = auth
        .map(|(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            ("Authorization", format!("Basic {token}"))
        })
        .into_iter()
        .collect();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = common::http::Head {
        addr,
        method: "POST",
        path: "/topics/orders",
        content_type: "application/vnd.kafka.json.v2+json",
        extra: &extra,
    };
    let body = format!(r#"{{"records":[{{"value":{{"n":{n}}}}}]}}"#);
    common::http::request_on(&mut stream, &head, body.as_bytes())
}

/// The proxy as the pod of `d` would run it, here: the Secrets it mounts at `mounts` (path →
/// Secret) written as files under `root`, its producer on `bootstrap` with SASL_PLAINTEXT (the
/// test broker's SCRAM listener has no TLS).
async fn run_proxy_of(
    d: &Deployment,
    secrets: &Api<Secret>,
    root: &Path,
    bootstrap: &str,
) -> common::http::ProxyProcess {
    let pod = d.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let container = &pod.containers[0];
    let volumes = pod.volumes.unwrap_or_default();
    let mut paths = Vec::new();
    for m in container.volume_mounts.clone().unwrap_or_default() {
        let v = volumes.iter().find(|v| v.name == m.name).unwrap();
        let secret = v.secret.as_ref().unwrap().secret_name.clone().unwrap();
        let local = root.join(m.name.clone());
        fs::create_dir_all(&local).unwrap();
        if let Some(s) = secrets.get_opt(&secret).await.unwrap() {
            for (k, v) in secret_entries(&s) {
                fs::write(local.join(k), v).unwrap();
            }
        }
        paths.push((m.mount_path.clone(), local.display().to_string()));
    }
    let args = container.args.clone().unwrap();
    let (mut props, mut flags) = (Vec::new(), Vec::new());
    let mut items = args.iter().skip(1);
    while let Some(flag) = items.next() {
        let value = items.next().unwrap();
        match flag.as_str() {
            "--bootstrap" | "--listen" => {}
            "--producer-props" if value.starts_with("ssl.") => {}
            "--producer-props" if value.starts_with("security.protocol=") => {
                props.push("security.protocol=SASL_PLAINTEXT".to_string())
            }
            "--producer-props" => props.push(
                paths
                    .iter()
                    .fold(value.clone(), |v, (pod, here)| v.replace(pod, here)),
            ),
            _ => flags.extend([flag.clone(), value.clone()]),
        }
    }
    let props: Vec<&str> = props.iter().map(String::as_str).collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    common::http::ProxyProcess::start_with(bootstrap, &props, &flags)
}

/// 14. `spec.proxy.authentication: {type: basic}`: the operator gives the proxy its own
/// KafkaUser `<cluster>-proxy` (SCRAM, no ACL), owned by the cluster, whose Secret the proxy's
/// pods mount; each HTTP user logs in as their own KafkaUser, so the cluster's ACLs decide what
/// they may write. The proxy runs here as a real process with the Deployment's arguments.
/// Without basic auth again, the KafkaUser and its credential go, and the proxy's certificate
/// gets its ACLs back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_with_basic_auth_logs_each_http_user_in_as_their_kafkauser() {
    use evenkeel::operator::kafka::UserAdmin;
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("pba").await;
    let (broker, sasl) = scram_broker();
    let op = Operator::start(&ns, &broker.bootstrap(), false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let pp = PostParams::default();
    let mut kc = secured_cluster("main", 1);
    kc.spec.proxy =
        serde_json::from_value(json!({"replicas": 1, "authentication": {"type": "basic"}}))
            .unwrap();
    let uid = clusters.create(&pp, &kc).await.unwrap().uid().unwrap();
    let kafka = kafka_admin(&broker.bootstrap()).await;
    kafka
        .create_topic("orders", 1, 1, &BTreeMap::new())
        .await
        .unwrap();
    let users: Api<KafkaUser> = Api::namespaced(admin.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);

    // The proxy's own KafkaUser: SCRAM-SHA-512, no ACL, controlled by the cluster.
    wait_user_ready(&users, "main-proxy").await;
    let own = users.get("main-proxy").await.unwrap();
    assert!(own
        .owner_references()
        .iter()
        .any(|r| r.uid == uid && r.controller == Some(true)));
    assert_eq!(own.acl_bindings(), Some(Vec::new()));
    assert!(!kafka
        .scram_mechanisms("main-proxy")
        .await
        .unwrap()
        .is_empty());
    let certificate = "User:CN=main-proxy,O=evenkeel.dev";
    assert!(
        kafka.acls_of(certificate).await.unwrap().is_empty(),
        "the proxy's certificate got ACLs though its users log in as themselves"
    );
    for u in [
        kafka_user(
            "alice",
            "scram-sha-512",
            json!([{"resource": {"type": "topic", "name": "orders", "patternType": "prefix"}, "operations": ["Write", "Describe"]}]),
        ),
        kafka_user(
            "bob",
            "scram-sha-512",
            json!([{"resource": {"type": "topic", "name": "orders"}, "operations": ["Describe"]}]),
        ),
    ] {
        users.create(&pp, &u).await.unwrap();
    }
    wait_user_ready(&users, "alice").await;
    wait_user_ready(&users, "bob").await;
    let password = |name: &'static str| {
        let secrets = secrets.clone();
        async move { secret_entries(&secrets.get(name).await.unwrap())["password"].clone() }
    };
    let (alice, bob) = (password("alice").await, password("bob").await);

    // The proxy as its pod runs it: its own login from the mounted Secret answers /readyz
    // (no ACL needed), each user's produce is theirs.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let d = deployments.get("main-proxy").await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let proxy = run_proxy_of(&d, &secrets, root.path(), &sasl).await;
    let addr = proxy.addr.clone();
    wait_for("the proxy's /readyz with its own login", 60, || async {
        let r = common::http::request(&addr, "GET", "/readyz", "text/plain", b"");
        (r.status == 200).then_some(())
    })
    .await;
    let no_credentials = post_orders_as(&addr, None, 0);
    assert_eq!(no_credentials.status, 401);
    let wrong = post_orders_as(&addr, Some(("alice", "not-her-password")), 0);
    assert_eq!(wrong.status, 401);
    let r = post_orders_as(&addr, Some(("alice", &alice)), 1);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["offsets"][0]["offset"], 0);
    let r = post_orders_as(&addr, Some(("bob", &bob)), 2);
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    // The load generator with --basic-auth: alice's records all acknowledged and read back.
    let load = Command::new(env!("CARGO_BIN_EXE_evenkeel"))
        .args([
            "perf",
            "proxy",
            "--proxy",
            &addr,
            "--bootstrap",
            &broker.bootstrap(),
        ])
        .args([
            "--topic",
            "orders-load",
            "--partitions",
            "2",
            "--num-records",
            "40",
        ])
        .args(["--clients", "2", "--batch", "10", "--record-size", "64"])
        .args(["--basic-auth", &format!("alice:{alice}")])
        .output()
        .unwrap();
    let report =
        String::from_utf8_lossy(&load.stdout).to_string() + &String::from_utf8_lossy(&load.stderr);
    assert!(load.status.success(), "{report}");
    assert!(
        report.contains("read back: 40 records, 0 missing"),
        "{report}"
    );
    let own_password = password("main-proxy").await;
    let r = post_orders_as(&addr, Some(("main-proxy", &own_password)), 3);
    assert_eq!(
        r.status,
        403,
        "the proxy's own login wrote: {}",
        String::from_utf8_lossy(&r.body)
    );
    drop(proxy);

    // Basic auth off: the KafkaUser and its credential go, the certificate gets its ACLs.
    let off = json!({"spec": {"proxy": {"authentication": null}}});
    clusters
        .patch("main", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    wait_for("KafkaUser main-proxy to be gone", 60, || async {
        users
            .get_opt("main-proxy")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(kafka
        .scram_mechanisms("main-proxy")
        .await
        .unwrap()
        .is_empty());
    wait_for("the proxy's certificate to get its ACLs", 60, || async {
        let acls = kafka.acls_of(certificate).await.ok()?;
        (!acls.is_empty()).then_some(())
    })
    .await;
    let d = deployments.get("main-proxy").await.unwrap();
    let args = d.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(!args.contains(&"BASIC".to_string()), "{args:?}");
    op.assert_never_forbidden();
}

/// 13. `spec.proxy.tls`: the operator makes the cluster CA (the cluster itself secures nothing)
/// and a proxy certificate it signs for the proxy Service's names, in `<cluster>-proxy-certs`,
/// owned by the cluster; the proxy's Deployment mounts it and serves HTTPS.
#[tokio::test]
async fn a_tls_proxy_gets_a_certificate_the_cluster_ca_signs() {
    use evenkeel::operator::certs::{dns_names, signed_by};
    require_kube!();
    let (admin, ns) = kubeenv::operator_test("ptls").await;
    let op = Operator::start(&ns, "127.0.0.1:9", false);
    let clusters: Api<KafkaCluster> = Api::namespaced(admin.clone(), &ns);
    let mut kc = cluster("main", 1, &[]);
    kc.spec.proxy = serde_json::from_value(json!({"replicas": 1, "tls": true})).unwrap();
    let uid = clusters
        .create(&PostParams::default(), &kc)
        .await
        .unwrap()
        .uid()
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let (ca, proxy) = wait_for("the cluster CA and the proxy's Secret", 60, || async {
        let ca = secrets.get_opt("main-cluster-ca-cert").await.ok()??;
        let proxy = secrets.get_opt("main-proxy-certs").await.ok()??;
        Some((ca, proxy))
    })
    .await;
    assert!(proxy
        .owner_references()
        .iter()
        .any(|r| r.uid == uid && r.controller == Some(true)));
    let ca = secret_entries(&ca).remove("ca.crt").unwrap();
    let entries = secret_entries(&proxy);
    assert!(signed_by(&entries["proxy.crt"], &ca));
    let names = dns_names(&entries["proxy.crt"]).unwrap();
    assert!(names.contains(&format!("main-proxy.{ns}.svc")), "{names:?}");
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let d = wait_for("the proxy Deployment", 60, || async {
        deployments.get_opt("main-proxy").await.ok()?
    })
    .await;
    let pod = d.spec.unwrap().template.spec.unwrap();
    let volume = pod.volumes.unwrap_or_default().remove(0);
    assert_eq!(
        volume.secret.unwrap().secret_name.as_deref(),
        Some("main-proxy-certs")
    );
    let args = pod.containers[0].args.clone().unwrap();
    assert!(
        args.contains(&"--ssl-keystore-location".to_string()),
        "{args:?}"
    );
    // No broker listener is secured: the brokers get no internal listener and no clients CA.
    assert!(secrets
        .get_opt("main-clients-ca-cert")
        .await
        .unwrap()
        .is_none());
    op.assert_never_forbidden();
}
