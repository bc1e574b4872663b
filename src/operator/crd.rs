//! The KafkaCluster, KafkaTopic and KafkaUser custom resources (`kafka.evenkeel.dev/v1alpha1`):
//! spec, status, defaults, printer columns and the CEL rules the API server enforces at admission.

use std::collections::BTreeMap;

use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod user;
pub use user::*;

pub const GROUP: &str = "kafka.evenkeel.dev";
pub const VERSION: &str = "v1alpha1";
/// Finalizer that makes a KafkaTopic's deletion delete the Kafka topic first.
pub const TOPIC_FINALIZER: &str = "kafka.evenkeel.dev/topic";
/// `kafka.evenkeel.dev/delete-policy: retain` keeps the Kafka topic when its KafkaTopic goes.
pub const DELETE_POLICY_ANNOTATION: &str = "kafka.evenkeel.dev/delete-policy";
/// Label on every object the operator makes for a cluster.
pub const CLUSTER_LABEL: &str = "kafka.evenkeel.dev/cluster";

/// A Kafka-compatible evenkeel cluster: N brokers run as a StatefulSet.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kafka.evenkeel.dev",
    version = "v1alpha1",
    kind = "KafkaCluster",
    plural = "kafkaclusters",
    shortname = "kc",
    namespaced,
    cel,
    status = "KafkaClusterStatus",
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready Brokers","type":"integer","jsonPath":".status.readyBrokers"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Bootstrap","type":"string","jsonPath":".status.listeners[0].bootstrapServers","priority":1}"#,
    printcolumn = r#"{"name":"Cluster ID","type":"string","jsonPath":".status.clusterId","priority":1}"#,
    printcolumn = r#"{"name":"Ready Proxies","type":"integer","jsonPath":".status.proxy.readyReplicas","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.proxy) || !has(self.proxy.authentication) || (has(self.listeners) && self.listeners.exists(l, has(l.authentication) && l.authentication.type == 'scram-sha-512'))").message(PROXY_BASIC_NEEDS_SCRAM),
)]
pub struct KafkaClusterSpec {
    /// Number of brokers.
    #[schemars(range(min = 1, max = 100))]
    pub replicas: i32,
    /// Container image for brokers and sidecars; the operator's default image when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Client listeners. Default: one plaintext listener `plain` on 9092.
    #[serde(default = "default_listeners")]
    pub listeners: Vec<Listener>,
    /// Persistent storage for each broker's log directory.
    #[serde(default)]
    pub storage: Storage,
    /// Broker properties, with Kafka's names (`num.io.threads`, `log.retention.hours`, …).
    /// A change rolls the brokers one at a time.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Spread brokers across failure domains: `broker.rack` comes from this node label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<Rack>,
    /// CPU and memory for the broker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// The leadership rebalancer sidecar.
    #[serde(default)]
    pub rebalancer: Rebalancer,
    /// The HTTP producer proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Proxy>,
    /// Move partitions onto new brokers after a scale-up, and off brokers before a scale-down.
    #[serde(default)]
    pub rebalance_on_scale: bool,
    /// Kafka's ACLs on the client listeners: `{type: simple, superUsers: [...]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("!has(self.authentication) || self.authentication.type != 'tls' || (has(self.tls) && self.tls)").message(TLS_AUTH_NEEDS_TLS),
)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Listener name (letters, digits, `-`), also the Service port name.
    #[schemars(length(min = 1, max = 15), regex(pattern = r"^[a-z][a-z0-9-]*$"))]
    pub name: String,
    #[schemars(range(min = 1024, max = 65535))]
    pub port: i32,
    /// TLS on this listener, with a certificate the cluster CA signs (Secret
    /// `<cluster>-cluster-ca-cert` holds the CA clients trust).
    #[serde(default)]
    pub tls: bool,
    /// How clients authenticate: `{type: scram-sha-512}` (SASL) or `{type: tls}` (a client
    /// certificate the clients CA signs; needs `tls: true`). None: anyone may connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<ListenerAuthentication>,
}

/// Why a listener with `authentication: {type: tls}` and no TLS is refused (CEL and operator).
pub const TLS_AUTH_NEEDS_TLS: &str =
    "a listener with authentication type tls needs tls: true (client certificates come over TLS)";

/// `spec.listeners[].authentication`, Strimzi's shape.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ListenerAuthentication {
    /// `scram-sha-512`: SASL SCRAM-SHA-512 (SASL_PLAINTEXT, or SASL_SSL on a TLS listener);
    /// `tls`: a client certificate the clients CA signs (needs `tls: true`).
    #[serde(rename = "type")]
    pub type_: AuthenticationType,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
// No doc comments on the variants: they would make the schema a `oneOf`, not an `enum`.
pub enum AuthenticationType {
    // SASL SCRAM-SHA-512 (SASL_PLAINTEXT, or SASL_SSL on a TLS listener).
    #[serde(rename = "scram-sha-512")]
    ScramSha512,
    // Mutual TLS: clients present a certificate signed by the clients CA.
    #[serde(rename = "tls")]
    Tls,
}

/// `spec.authorization`, Strimzi's shape: `{type: simple, superUsers: [CN=admin, ...]}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// `simple`: Kafka's ACLs (the StandardAuthorizer), managed with the Admin API.
    #[serde(rename = "type")]
    pub type_: AuthorizationType,
    /// Users allowed everything, by name (`admin`, `CN=admin,O=acme`); `User:` is added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub super_users: Vec<String>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationType {
    // Kafka's ACLs (the StandardAuthorizer), managed with the Admin API.
    #[serde(rename = "simple")]
    Simple,
}

impl Listener {
    /// Whether clients must authenticate on this listener.
    pub fn authentication_type(&self) -> Option<AuthenticationType> {
        self.authentication.as_ref().map(|a| a.type_)
    }
}

pub fn default_listeners() -> Vec<Listener> {
    vec![Listener {
        name: "plain".into(),
        port: 9092,
        tls: false,
        authentication: None,
    }]
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Volume size per broker, e.g. `100Gi`.
    #[serde(default = "default_storage_size")]
    pub size: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Delete the brokers' PersistentVolumeClaims when the KafkaCluster is deleted.
    #[serde(default)]
    pub delete_claim: bool,
}

fn default_storage_size() -> String {
    "10Gi".into()
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            size: default_storage_size(),
            storage_class_name: None,
            delete_claim: false,
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rack {
    /// Node label whose value becomes `broker.rack`, e.g. `topology.kubernetes.io/zone`.
    pub topology_key: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// e.g. `{cpu: "1", memory: 2Gi}`
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rebalancer {
    /// Run the `evenkeel rebalancer` sidecar beside each broker (the one beside the active
    /// controller acts).
    #[serde(default)]
    pub enabled: bool,
    /// Plan and report moves without making them.
    #[serde(default)]
    pub dry_run: bool,
    /// Seconds between rounds.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 1, max = 86400))]
    pub interval_seconds: i64,
    /// Act when the largest leader count is over this ratio to the mean; the target band is
    /// mean × (1 ± 0.9 × (threshold − 1)).
    #[serde(default = "default_threshold")]
    #[schemars(range(min = 1.0, max = 10.0))]
    pub threshold: f64,
    /// Seconds to wait after acting before acting again.
    #[serde(default = "default_mute")]
    #[schemars(range(min = 0))]
    pub mute_seconds: i64,
    /// A broker whose NetworkProcessorAvgIdlePercent falls below this (0–100) counts as
    /// overloaded: it may lose leaders, never gain them.
    #[serde(default = "default_min_idle")]
    #[schemars(range(min = 0, max = 100))]
    pub min_network_idle_percent: i32,
    /// A broker whose RequestHandlerAvgIdlePercent falls below this (0–100) counts as
    /// overloaded, as above.
    #[serde(default = "default_min_idle")]
    #[schemars(range(min = 0, max = 100))]
    pub min_handler_idle_percent: i32,
}

fn default_interval() -> i64 {
    30
}

fn default_threshold() -> f64 {
    1.1
}

fn default_mute() -> i64 {
    300
}

fn default_min_idle() -> i32 {
    30
}

impl Default for Rebalancer {
    fn default() -> Self {
        Rebalancer {
            enabled: false,
            dry_run: false,
            interval_seconds: default_interval(),
            threshold: default_threshold(),
            mute_seconds: default_mute(),
            min_network_idle_percent: default_min_idle(),
            min_handler_idle_percent: default_min_idle(),
        }
    }
}

/// The HTTP producer proxy (`evenkeel proxy`), run as the Deployment `<cluster>-proxy`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    /// Proxy pods; 0 removes the proxy's Deployment and Service.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: i32,
    /// CPU and memory for the proxy container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// HTTPS instead of HTTP, with a certificate the cluster CA signs for the proxy Service's
    /// names (Secret `<cluster>-proxy-certs`); clients trust `<cluster>-cluster-ca-cert`.
    #[serde(default)]
    pub tls: bool,
    /// Java producer properties for the proxy's producer (`acks`, `linger.ms`,
    /// `compression.type`, `batch.size`, …), as Strimzi's KafkaBridge `spec.producer.config`.
    /// `bootstrap.servers` is the operator's. A change rolls the proxy pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("!('bootstrap.servers' in self)").message("spec.proxy.config.bootstrap.servers is set by the operator (the cluster's bootstrap Service)"))]
    pub config: BTreeMap<String, String>,
    /// How HTTP clients authenticate: `{type: basic}` (REST Proxy's BASIC): each request's
    /// user name and password are a SCRAM-SHA-512 login of that user on the cluster (a
    /// KafkaUser), so its ACLs apply to what the user produces. Needs a listener with
    /// `authentication: {type: scram-sha-512}`. None: anyone who reaches the proxy may produce,
    /// as the proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<ProxyAuthentication>,
}

/// Why `spec.proxy.authentication` is refused without a SCRAM listener (CEL and operator).
pub const PROXY_BASIC_NEEDS_SCRAM: &str = "spec.proxy.authentication needs a listener with \
     authentication type scram-sha-512: the proxy logs each HTTP user in to the cluster with \
     SCRAM-SHA-512";

/// `spec.proxy.authentication`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ProxyAuthentication {
    /// `basic`: HTTP basic auth, each user's login passed on to the cluster (SCRAM-SHA-512).
    #[serde(rename = "type")]
    pub type_: ProxyAuthenticationType,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyAuthenticationType {
    // HTTP basic auth mapped to SCRAM-SHA-512 logins.
    #[serde(rename = "basic")]
    Basic,
}

/// Keys of `spec.proxy.config` the operator owns.
pub const PROXY_RESERVED_KEYS: &[&str] = &["bootstrap.servers"];

/// A status condition, as in `metav1.Condition`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Ready, Reconciling, Degraded, ResourceConflict, …
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    /// One CamelCase word saying why.
    pub reason: String,
    /// What a person needs to know.
    #[serde(default)]
    pub message: String,
    /// RFC 3339 time the status last changed.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Brokers whose pod is ready and runs the current configuration.
    #[serde(default)]
    pub ready_brokers: i32,
    #[serde(default)]
    pub brokers: Vec<BrokerStatus>,
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Hash of the broker configuration the brokers should run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// The rebalancer sidecar's last action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<RebalanceStatus>,
    /// The producer proxy's Deployment, while `spec.proxy` asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyStatus>,
    /// How far the brokers are secured: `unsecured`, `internal` (the internal listener added),
    /// `inter-broker` (the brokers replicate on it), `secured` (the spec's listeners and
    /// authorization). A running cluster is secured or unsecured one roll per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_stage: Option<SecurityStage>,
}

/// The steps of securing a running cluster, in order (unsecuring walks them back): each is a
/// rolling restart, and brokers on either side of it can still replicate from each other.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
// No doc comments on the variants: they would make the schema a `oneOf`, not an `enum`.
pub enum SecurityStage {
    // No internal listener: the brokers replicate on the first listener, PLAINTEXT.
    #[serde(rename = "unsecured")]
    Unsecured,
    // The internal listener (mutual TLS) is there, unused; the listeners stay PLAINTEXT.
    #[serde(rename = "internal")]
    Internal,
    // The brokers replicate on the internal listener; the listeners stay PLAINTEXT.
    #[serde(rename = "inter-broker")]
    InterBroker,
    // The spec's listeners (TLS, SASL) and authorization.
    #[serde(rename = "secured")]
    Secured,
}

/// The producer proxy as its Deployment reports it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    /// Proxy pods asked for (`spec.proxy.replicas`).
    pub replicas: i32,
    /// Proxy pods that pass `/readyz` (the Deployment's `readyReplicas`).
    pub ready_replicas: i32,
    /// Where clients POST: `http://<cluster>-proxy.<namespace>.svc:8080`.
    pub url: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatus {
    pub id: i32,
    pub pod: String,
    /// Partitions this broker leads (from the cluster's metadata), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaders: Option<i32>,
    /// Pending, Starting, Ready, Rolling, Stale (old configuration) or Unreachable.
    pub state: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    pub bootstrap_servers: String,
    /// On a TLS listener, the cluster CA certificate (PEM) clients trust (as Strimzi's
    /// `status.listeners[].certificates`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<String>,
}

/// What the rebalancer sidecar last did, written by the sidecar (field manager
/// `evenkeel-rebalancer`); the operator never writes it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceStatus {
    /// LeadershipRebalanced, RebalancePlanned (dry run) or RebalanceAbandoned.
    pub last_action: String,
    /// RFC 3339 time of the last action.
    pub last_action_time: String,
    /// Leadership changes made (planned, in a dry run).
    pub moves: i32,
    /// Largest leader count over the mean, before and after.
    pub skew_before: f64,
    pub skew_after: f64,
    /// Why it acted and what happened.
    #[serde(default)]
    pub message: String,
}

/// A Kafka topic in a KafkaCluster of the same namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kafka.evenkeel.dev",
    version = "v1alpha1",
    kind = "KafkaTopic",
    plural = "kafkatopics",
    shortname = "kt",
    namespaced,
    cel,
    status = "KafkaTopicStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterRef"}"#,
    printcolumn = r#"{"name":"Topic","type":"string","jsonPath":".status.topicName"}"#,
    printcolumn = r#"{"name":"Partitions","type":"integer","jsonPath":".spec.partitions"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Topic ID","type":"string","jsonPath":".status.topicId","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = Rule::new("has(self.topicName) == has(oldSelf.topicName) && (!has(self.topicName) || self.topicName == oldSelf.topicName)").message("topicName is immutable: create a new KafkaTopic to use another name"),
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicSpec {
    /// Name of the KafkaCluster (same namespace) that holds the topic.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable"))]
    pub cluster_ref: String,
    /// Kafka topic name; defaults to metadata.name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    pub topic_name: Option<String>,
    /// Partition count. It may only grow.
    #[schemars(range(min = 1, max = 100000))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("partitions may only grow: Kafka cannot decrease the partition count of a topic"))]
    pub partitions: i32,
    /// Replication factor. Immutable (changing it is not supported yet).
    #[schemars(range(min = 1, max = 32767))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("replicas is immutable: changing the replication factor is not supported yet"))]
    pub replicas: i32,
    /// Topic configs with Kafka's names (`retention.ms`, `cleanup.policy`, …). Anything else set
    /// on the topic behind the operator's back is reverted.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
}

impl KafkaTopic {
    /// The Kafka topic this resource names: `spec.topicName`, else `metadata.name`.
    pub fn kafka_name(&self) -> String {
        self.spec
            .topic_name
            .clone()
            .unwrap_or_else(|| self.metadata.name.clone().unwrap_or_default())
    }
}

/// The committed CRD files, by file name.
pub fn crd_files() -> Vec<(&'static str, String)> {
    let render = |crd| {
        let mut s = String::from("# Generated by `evenkeel crdgen`; do not edit.\n");
        s.push_str(&serde_yaml::to_string(&crd).unwrap_or_default());
        s
    };
    vec![
        (
            "kafkaclusters.kafka.evenkeel.dev.yaml",
            render(KafkaCluster::crd()),
        ),
        (
            "kafkatopics.kafka.evenkeel.dev.yaml",
            render(KafkaTopic::crd()),
        ),
        (
            "kafkausers.kafka.evenkeel.dev.yaml",
            render(KafkaUser::crd()),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(partitions: i32, replicas: i32, name: Option<&str>) -> KafkaTopic {
        KafkaTopic::new(
            "orders",
            KafkaTopicSpec {
                cluster_ref: "main".into(),
                topic_name: name.map(String::from),
                partitions,
                replicas,
                config: BTreeMap::new(),
            },
        )
    }

    #[test]
    fn partition_decrease_is_refused_by_cel() {
        let old = topic(6, 3, None);
        let err = topic(3, 3, None).validate_cel_update(&old).unwrap_err();
        assert!(
            format!("{err:?}").contains("partitions may only grow"),
            "{err:?}"
        );
        assert!(topic(12, 3, None).validate_cel_update(&old).is_ok());
    }

    #[test]
    fn replicas_and_topic_name_are_immutable_by_cel() {
        let old = topic(6, 3, Some("a"));
        let err = topic(6, 1, Some("a"))
            .validate_cel_update(&old)
            .unwrap_err();
        assert!(
            format!("{err:?}").contains("replicas is immutable"),
            "{err:?}"
        );
        let err = topic(6, 3, Some("b"))
            .validate_cel_update(&old)
            .unwrap_err();
        assert!(
            format!("{err:?}").contains("topicName is immutable"),
            "{err:?}"
        );
        let err = topic(6, 3, None).validate_cel_update(&old).unwrap_err();
        assert!(
            format!("{err:?}").contains("topicName is immutable"),
            "{err:?}"
        );
    }

    #[test]
    fn the_crd_refuses_every_proxy_key_the_operator_owns_at_admission() {
        // The CEL rule spells the keys out; this keeps it in step with PROXY_RESERVED_KEYS.
        let schema = serde_json::to_string(&KafkaCluster::crd()).unwrap();
        for key in PROXY_RESERVED_KEYS {
            assert!(
                schema.contains(&format!("!('{key}' in self)")),
                "no CEL rule refuses spec.proxy.config.{key}"
            );
        }
    }

    #[test]
    fn cluster_crd_has_short_name_status_and_printer_columns() {
        let crd = KafkaCluster::crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.short_names, Some(vec!["kc".to_string()]));
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, VERSION);
        assert!(v
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some());
        let cols: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            cols,
            [
                "Replicas",
                "Ready Brokers",
                "Ready",
                "Reason",
                "Bootstrap",
                "Cluster ID",
                "Ready Proxies",
                "Age"
            ]
        );
        let topic = KafkaTopic::crd();
        assert_eq!(topic.spec.names.short_names, Some(vec!["kt".to_string()]));
    }

    #[test]
    fn proxy_bootstrap_servers_is_refused_by_cel() {
        let with_proxy_config = |config: serde_json::Value| {
            let spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
                "replicas": 3, "proxy": {"replicas": 1, "config": config},
            }))
            .expect("spec parses");
            KafkaCluster::new("main", spec)
        };
        let err = with_proxy_config(serde_json::json!({"bootstrap.servers": "x:9092"}))
            .validate_cel()
            .unwrap_err();
        assert!(
            format!("{err:?}")
                .contains("spec.proxy.config.bootstrap.servers is set by the operator"),
            "{err:?}"
        );
        assert!(
            with_proxy_config(serde_json::json!({"acks": "1", "linger.ms": "20"}))
                .validate_cel()
                .is_ok()
        );
    }

    #[test]
    fn proxy_basic_auth_without_a_scram_listener_is_refused_by_cel() {
        let with = |listeners: serde_json::Value| {
            let spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
                "replicas": 3, "listeners": listeners,
                "proxy": {"replicas": 1, "authentication": {"type": "basic"}},
            }))
            .expect("spec parses");
            KafkaCluster::new("main", spec)
        };
        for refused in [
            serde_json::json!([{"name": "plain", "port": 9092}]),
            serde_json::json!([{"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}}]),
        ] {
            let err = with(refused).validate_cel().unwrap_err();
            assert!(
                format!("{err:?}").contains(PROXY_BASIC_NEEDS_SCRAM),
                "{err:?}"
            );
        }
        let ok = with(serde_json::json!([
            {"name": "plain", "port": 9092},
            {"name": "scram", "port": 9095, "authentication": {"type": "scram-sha-512"}},
        ]));
        assert!(ok.validate_cel().is_ok());
        assert_eq!(
            ok.spec
                .proxy
                .and_then(|p| p.authentication)
                .map(|a| a.type_),
            Some(ProxyAuthenticationType::Basic)
        );
    }

    #[test]
    fn strimzis_listener_and_authorization_shapes_parse_and_cel_refuses_tls_auth_without_tls() {
        let with_listener = |listener: serde_json::Value| {
            let spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({
                "replicas": 3, "listeners": [listener],
                "authorization": {"type": "simple", "superUsers": ["admin"]},
            }))
            .expect("spec parses");
            KafkaCluster::new("main", spec)
        };
        let scram = with_listener(
            serde_json::json!({"name": "tls", "port": 9095, "tls": true, "authentication": {"type": "scram-sha-512"}}),
        );
        assert_eq!(
            scram.spec.listeners[0].authentication_type(),
            Some(AuthenticationType::ScramSha512)
        );
        assert_eq!(
            scram
                .spec
                .authorization
                .as_ref()
                .map(|a| a.super_users.clone()),
            Some(vec!["admin".to_string()])
        );
        assert!(scram.validate_cel().is_ok());
        let err = with_listener(
            serde_json::json!({"name": "m", "port": 9094, "authentication": {"type": "tls"}}),
        )
        .validate_cel()
        .unwrap_err();
        assert!(format!("{err:?}").contains(TLS_AUTH_NEEDS_TLS), "{err:?}");
        assert!(with_listener(
            serde_json::json!({"name": "m", "port": 9094, "tls": true, "authentication": {"type": "tls"}})
        )
        .validate_cel()
        .is_ok());
        let bad: Result<KafkaClusterSpec, _> = serde_json::from_value(serde_json::json!({
            "replicas": 1,
            "listeners": [{"name": "a", "port": 9094, "authentication": {"type": "gssapi"}}],
        }));
        assert!(bad.is_err());
    }

    #[test]
    fn spec_defaults_fill_in_what_a_user_leaves_out() {
        let spec: KafkaClusterSpec = serde_json::from_value(serde_json::json!({"replicas": 3}))
            .expect("minimal spec parses");
        assert_eq!(spec.listeners, default_listeners());
        assert_eq!(spec.storage.size, "10Gi");
        assert!(!spec.rebalancer.enabled);
        assert_eq!(spec.rebalancer.interval_seconds, 30);
        assert_eq!(spec.rebalancer.threshold, 1.1);
        assert!(!spec.rebalance_on_scale);
    }
}
