//! Object builders for a KafkaCluster: the ConfigMap with server.properties, the headless and
//! bootstrap Services, the PodDisruptionBudget, the brokers' StatefulSet, the producer proxy's
//! Deployment and Service, and the rebalancer sidecar's ServiceAccount, Role and RoleBinding;
//! and each listener's security in the brokers' configuration (TLS from the Secrets of
//! `certs`, SASL, the authorizer). Pure functions.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::certs::{self, CaKind, CA_CERT};
use super::components;
use super::controller_move::{
    ControllerLayout, SpareListener, CONTROLLER_SPARE_ANNOTATION, SPARE_LISTENER,
};
use super::crd::{
    AuthenticationType, KafkaCluster, KafkaUser, Listener, Proxy, CLUSTER_LABEL, GROUP,
    PROXY_BASIC_NEEDS_SCRAM, PROXY_RESERVED_KEYS, TLS_AUTH_NEEDS_TLS,
};
use super::migration::{self, SECURITY_STAGE_ANNOTATION};
use crate::config::auth::STANDARD_AUTHORIZER;

/// Port of the brokers' `/metrics`, `/healthz` and `/readyz`.
pub const METRICS_PORT: i32 = 9404;
/// Port of the controller quorum listener.
pub const CONTROLLER_PORT: i32 = 9093;
/// The controller listener's name (`controller.listener.names`).
pub const CONTROLLER_LISTENER: &str = "CONTROLLER";
/// Port of the rebalancer sidecar's health and metrics.
pub const SIDECAR_PORT: i32 = 8081;
/// Port of the producer proxy's HTTP API, `/healthz`, `/readyz` and `/metrics`.
pub const PROXY_PORT: i32 = 8080;
/// StatefulSet annotation that records how many pods (the first ones) are controllers: the
/// voters of the metadata quorum, fixed when the cluster is created.
pub const CONTROLLERS_ANNOTATION: &str = "kafka.evenkeel.dev/controllers";
/// A new cluster's first pods vote, up to this many; the others are brokers only.
pub const MAX_CONTROLLERS: i32 = 3;
/// Pod template annotation that carries the hash of the brokers' configuration.
pub const CONFIG_HASH_ANNOTATION: &str = "kafka.evenkeel.dev/config-hash";
/// Where the broker keeps its log directory inside the container.
pub const DATA_DIR: &str = "/var/lib/evenkeel/data";
const CONFIG_DIR: &str = "/etc/evenkeel";
/// The internal listener of a secured cluster (Strimzi's `replication` on 9091): brokers
/// replicate over it, and the operator, the rebalancer sidecar and the producer proxy reach
/// the brokers on it. SSL with client certificates the cluster CA signs: each client is known
/// by its own certificate's subject (docs/security.md).
pub const INTERNAL_LISTENER: &str = "replication";
pub const INTERNAL_PORT: i32 = 9091;
/// Where a secured cluster's certificates are mounted in the broker pods: `brokers/` (the
/// broker Secret), `cluster-ca/` and `clients-ca/` (the CA certificates, `ca.crt`).
pub const TLS_DIR: &str = "/etc/evenkeel-tls";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("KafkaCluster has no {0}")]
    Missing(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("building {kind}: {source}")]
    Serde {
        kind: &'static str,
        source: serde_json::Error,
    },
}

/// Names of the objects that belong to one cluster (Strimzi's naming, so it reads familiar).
pub struct Names {
    pub cluster: String,
    pub namespace: String,
}

impl Names {
    pub fn of(kc: &KafkaCluster) -> Result<Names, BuildError> {
        Ok(Names {
            cluster: kc
                .metadata
                .name
                .clone()
                .ok_or(BuildError::Missing("name"))?,
            namespace: kc
                .metadata
                .namespace
                .clone()
                .ok_or(BuildError::Missing("namespace"))?,
        })
    }
    pub fn statefulset(&self) -> String {
        format!("{}-kafka", self.cluster)
    }
    pub fn config_map(&self) -> String {
        format!("{}-kafka-config", self.cluster)
    }
    pub fn headless_service(&self) -> String {
        format!("{}-kafka-brokers", self.cluster)
    }
    pub fn bootstrap_service(&self) -> String {
        format!("{}-kafka-bootstrap", self.cluster)
    }
    pub fn pdb(&self) -> String {
        format!("{}-kafka", self.cluster)
    }
    /// The NetworkPolicy that keeps a PLAINTEXT controller listener to the cluster's own pods.
    pub fn controller_policy(&self) -> String {
        format!("{}-kafka-controller", self.cluster)
    }
    /// The producer proxy's Deployment and Service.
    pub fn proxy(&self) -> String {
        format!("{}-proxy", self.cluster)
    }
    /// Where clients reach the producer proxy: its Service's port, over HTTPS with `tls`.
    pub fn proxy_url(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!(
            "{scheme}://{}.{}.svc:{PROXY_PORT}",
            self.proxy(),
            self.namespace
        )
    }
    /// The producer proxy's certificate and key (`spec.proxy.tls`, or a secured cluster).
    pub fn proxy_secret(&self) -> String {
        format!("{}-proxy-certs", self.cluster)
    }
    /// The rebalancer sidecar's client certificate and key (a secured cluster).
    pub fn rebalancer_secret(&self) -> String {
        format!("{}-rebalancer-certs", self.cluster)
    }
    /// The rebalancer sidecar's ServiceAccount, Role and RoleBinding (one name for all three).
    pub fn rebalancer(&self) -> String {
        format!("{}-rebalancer", self.cluster)
    }
    pub fn pod(&self, ordinal: i32) -> String {
        format!("{}-{ordinal}", self.statefulset())
    }
    /// The brokers' certificates and keys (`certs::broker_entries`).
    pub fn broker_secret(&self) -> String {
        format!("{}-kafka-brokers", self.cluster)
    }
    /// `host:port` of the bootstrap Service for the listener on `port`.
    pub fn bootstrap_address(&self, port: i32) -> String {
        format!("{}.{}.svc:{port}", self.bootstrap_service(), self.namespace)
    }
    /// The stable DNS name of one broker pod.
    pub fn pod_host(&self, ordinal: &str) -> String {
        format!(
            "{}-{ordinal}.{}.{}.svc",
            self.statefulset(),
            self.headless_service(),
            self.namespace
        )
    }
}

/// Labels on the brokers' objects; the selector is all of them but `managed-by`.
pub fn labels(cluster: &str) -> BTreeMap<String, String> {
    component_labels(cluster, "broker")
}

/// Selects the cluster's broker pods (component `broker`), never its proxy pods.
pub fn selector(cluster: &str) -> BTreeMap<String, String> {
    component_selector(cluster, "broker")
}

/// Whether a pod's `Ready` condition is True.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `labels` as a label selector for a list call (`k=v,k=v`).
pub fn label_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels on the producer proxy's objects and pods: the cluster's, with component `proxy`.
pub fn proxy_labels(cluster: &str) -> BTreeMap<String, String> {
    component_labels(cluster, "proxy")
}

/// Selects the cluster's proxy pods (component `proxy`), never its brokers.
pub fn proxy_selector(cluster: &str) -> BTreeMap<String, String> {
    component_selector(cluster, "proxy")
}

/// Labels on the rebalancer sidecar's ServiceAccount, Role and RoleBinding: the cluster's, with
/// component `rebalancer`.
pub fn rebalancer_labels(cluster: &str) -> BTreeMap<String, String> {
    component_labels(cluster, "rebalancer")
}

/// Labels on a KafkaUser's Secret: the cluster's, with component `user`.
pub fn user_labels(cluster: &str) -> BTreeMap<String, String> {
    component_labels(cluster, "user")
}

fn component_labels(cluster: &str, component: &str) -> BTreeMap<String, String> {
    let mut l = component_selector(cluster, component);
    l.insert(
        "app.kubernetes.io/managed-by".into(),
        "evenkeel-operator".into(),
    );
    l
}

fn component_selector(cluster: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "evenkeel".into()),
        ("app.kubernetes.io/instance".into(), cluster.into()),
        ("app.kubernetes.io/component".into(), component.into()),
        (CLUSTER_LABEL.into(), cluster.into()),
    ])
}

/// Kafka's cluster id for this KafkaCluster: its UID as URL-safe base64 without padding, the
/// form `kafka-storage random-uuid` prints. Stable for the life of the resource.
pub fn cluster_id(kc: &KafkaCluster) -> Result<String, BuildError> {
    use base64::Engine;
    let uid = kc
        .metadata
        .uid
        .as_deref()
        .ok_or(BuildError::Missing("uid"))?;
    let uuid = uuid::Uuid::parse_str(uid)
        .map_err(|e| BuildError::Invalid(format!("metadata.uid {uid:?}: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid.as_bytes()))
}

/// Listener names as Kafka spells them (`plain` → `PLAIN`).
fn listener_name(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// Keys the operator owns: a user's value for them in `spec.config` is refused.
pub const RESERVED_KEYS: &[&str] = &[
    "node.id",
    "broker.id",
    "process.roles",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "controller.listener.names",
    "controller.quorum.voters",
    "inter.broker.listener.name",
    "log.dirs",
    "log.dir",
    "broker.rack",
];

/// StatefulSet annotation that records whether the controller port's listener is SSL (`true`):
/// mutual TLS with the cluster CA on a secured cluster. It changes only through a spare
/// controller listener (`controller_move`), as voters on either side of a single roll that
/// changed it could not reach each other; a secured cluster an earlier operator created has no
/// record, and a PLAINTEXT controller listener that moves.
pub const CONTROLLER_TLS_ANNOTATION: &str = "kafka.evenkeel.dev/controller-tls";

/// The metadata quorum the cluster's pods form, as the StatefulSet fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumShape {
    /// How many of the first pods are controllers.
    pub controllers: i32,
    /// Whether the controller listener is SSL, as recorded; `None` for a new cluster.
    pub tls: Option<bool>,
    /// The spare controller listener while the controller listener moves (`controller_move`).
    pub spare: Option<SpareListener>,
}

impl From<i32> for QuorumShape {
    /// A new cluster's quorum of `controllers` voters.
    fn from(controllers: i32) -> QuorumShape {
        QuorumShape {
            controllers,
            tls: None,
            spare: None,
        }
    }
}

impl QuorumShape {
    /// Whether `kc`'s controller listener is SSL: a secured cluster's is, unless the
    /// StatefulSet records a PLAINTEXT one.
    pub fn controller_tls(&self, kc: &KafkaCluster) -> bool {
        has_internal_listener(kc) && self.tls.unwrap_or(true)
    }

    /// The controller listeners as they are laid out for `kc`.
    pub fn layout(&self, kc: &KafkaCluster) -> ControllerLayout {
        ControllerLayout {
            tls: self.controller_tls(kc),
            spare: self.spare,
        }
    }

    /// This quorum with the controller listeners laid out as `layout`.
    pub fn with_layout(self, layout: ControllerLayout) -> QuorumShape {
        QuorumShape {
            tls: Some(layout.tls),
            spare: layout.spare,
            ..self
        }
    }

    /// The controller listeners that are mutual TLS: they get the pod's keystore and the
    /// cluster CA (only while the brokers have their certificates).
    fn tls_listeners(&self, kc: &KafkaCluster) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.controller_tls(kc) {
            out.push(CONTROLLER_LISTENER);
        }
        if self.spare.is_some_and(|s| s.tls) && has_internal_listener(kc) {
            out.push(SPARE_LISTENER);
        }
        out
    }

    /// The controller ports that are PLAINTEXT on a cluster with the internal listener: the
    /// ones a NetworkPolicy fences.
    pub fn plaintext_ports(&self, kc: &KafkaCluster) -> Vec<i32> {
        if !has_internal_listener(kc) {
            return Vec::new();
        }
        let spare = self.spare.filter(|s| !s.tls).map(|s| s.port);
        let main = (!self.controller_tls(kc)).then_some(CONTROLLER_PORT);
        main.into_iter().chain(spare).collect()
    }
}

/// The quorum of `kc`: what the existing StatefulSet recorded, else a new cluster's.
pub fn quorum_shape(kc: &KafkaCluster, existing: Option<&StatefulSet>) -> QuorumShape {
    let recorded = |s: &StatefulSet| {
        let annotations = s.metadata.annotations.as_ref();
        annotations
            .and_then(|a| a.get(CONTROLLER_TLS_ANNOTATION))
            .map(String::as_str)
            == Some("true")
    };
    let spare = existing
        .and_then(|s| {
            s.metadata
                .annotations
                .as_ref()?
                .get(CONTROLLER_SPARE_ANNOTATION)
        })
        .and_then(|v| SpareListener::parse(v));
    QuorumShape {
        controllers: controller_count(kc, existing),
        tls: existing.map(recorded),
        spare,
    }
}

/// How many of the cluster's first pods are controllers: what the StatefulSet recorded when the
/// cluster was created (a static quorum keeps its voters), else up to three for a new cluster.
pub fn controller_count(kc: &KafkaCluster, existing: Option<&StatefulSet>) -> i32 {
    existing
        .and_then(|s| s.metadata.annotations.as_ref()?.get(CONTROLLERS_ANNOTATION))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or_else(|| kc.spec.replicas.clamp(1, MAX_CONTROLLERS))
}

/// The brokers' server.properties: shared by every pod; `node.id`, `advertised.listeners`,
/// `broker.rack` and a TLS listener's keystore (the pod's own certificate) are per-pod overrides
/// on the command line. `process.roles` is left out: a pod whose node id is one of the voters
/// (the first `controllers` pods) runs broker and controller, every other pod is a broker that
/// follows the quorum.
pub fn server_properties(
    kc: &KafkaCluster,
    quorum: impl Into<QuorumShape>,
) -> Result<String, BuildError> {
    let quorum = quorum.into();
    let controllers = quorum.controllers;
    let names = Names::of(kc)?;
    check_config_keys(kc)?;
    check_listeners(kc)?;
    check_spare_port(kc, quorum)?;
    check_security(kc)?;
    let brokers = broker_listeners(kc);
    let controller = controller_listeners(kc, quorum);
    let listeners: Vec<String> = brokers
        .iter()
        .map(|l| format!("{}://0.0.0.0:{}", l.name, l.port))
        .chain(
            controller
                .iter()
                .map(|(name, port, _)| format!("{name}://0.0.0.0:{port}")),
        )
        .collect();
    let protocol_map: Vec<String> = brokers
        .iter()
        .map(|l| format!("{}:{}", l.name, l.protocol))
        .chain(
            controller
                .iter()
                .map(|(name, _, protocol)| format!("{name}:{protocol}")),
        )
        .collect();
    let dialled = quorum.layout(kc).dialled_port();
    let voters: Vec<String> = (0..controllers)
        .map(|i| format!("{i}@{}:{dialled}", names.pod_host(&i.to_string())))
        .collect();
    let controller_names: Vec<&str> = controller.iter().map(|(name, _, _)| *name).collect();
    let mut out = format!(
        "# Generated by evenkeel-operator for KafkaCluster {}/{}.\n\
         # node.id, advertised.listeners and broker.rack are set per pod on the command line.\n\
         # No process.roles: the voters below run broker and controller, other pods are brokers.\n",
        names.namespace, names.cluster
    );
    let fixed = [
        ("listeners".to_string(), listeners.join(",")),
        (
            "listener.security.protocol.map".into(),
            protocol_map.join(","),
        ),
        (
            "controller.listener.names".into(),
            controller_names.join(","),
        ),
        ("inter.broker.listener.name".into(), brokers[0].name.clone()),
        ("controller.quorum.voters".into(), voters.join(",")),
        ("log.dirs".into(), DATA_DIR.into()),
        (
            "evenkeel.metrics.address".into(),
            format!("0.0.0.0:{METRICS_PORT}"),
        ),
    ];
    let security = security_properties(kc, &quorum.tls_listeners(kc))?;
    for (k, v) in fixed.into_iter().chain(security) {
        out.push_str(&format!("{k}={v}\n"));
    }
    for (k, v) in &kc.spec.config {
        if k.contains(['\n', '=']) || v.contains('\n') {
            return Err(BuildError::Invalid(format!(
                "spec.config.{k}: keys may not contain '=' or newlines, values no newlines"
            )));
        }
        out.push_str(&format!("{k}={v}\n"));
    }
    Ok(out)
}

/// The controller listeners of `quorum` on `kc`, the dialled one first: name, port, protocol.
fn controller_listeners(
    kc: &KafkaCluster,
    quorum: QuorumShape,
) -> Vec<(&'static str, i32, &'static str)> {
    let protocol = |tls: bool| if tls { "SSL" } else { "PLAINTEXT" };
    let layout = quorum.layout(kc);
    let mut out = vec![(CONTROLLER_LISTENER, CONTROLLER_PORT, protocol(layout.tls))];
    if let Some(spare) = layout.spare {
        let tls = spare.tls && has_internal_listener(kc);
        let entry = (SPARE_LISTENER, spare.port, protocol(tls));
        match spare.dialled {
            true => out.insert(0, entry),
            false => out.push(entry),
        }
    }
    out
}

/// Refuses a spec listener on the spare controller listener's port while the controller
/// listener moves.
fn check_spare_port(kc: &KafkaCluster, quorum: QuorumShape) -> Result<(), BuildError> {
    let Some(spare) = quorum.spare else {
        return Ok(());
    };
    match kc.spec.listeners.iter().find(|l| l.port == spare.port) {
        Some(l) => Err(BuildError::Invalid(format!(
            "listener {}: port {} is taken by the spare controller listener while the \
             controller listener moves; choose another port",
            l.name, spare.port
        ))),
        None => Ok(()),
    }
}

/// Refuses a `spec.config` key the operator sets.
fn check_config_keys(kc: &KafkaCluster) -> Result<(), BuildError> {
    let owned = |k: &str| {
        RESERVED_KEYS.contains(&k)
            || (kc.spec.authorization.is_some() && AUTHORIZATION_KEYS.contains(&k))
    };
    match kc.spec.config.keys().find(|k| owned(k)) {
        Some(key) => Err(BuildError::Invalid(format!(
            "spec.config.{key} is set by the operator and cannot be overridden"
        ))),
        None => Ok(()),
    }
}

/// Refuses listeners that are missing, share a name or a port, or take the operator's own.
fn check_listeners(kc: &KafkaCluster) -> Result<(), BuildError> {
    let spec = &kc.spec;
    if spec.listeners.is_empty() {
        return Err(BuildError::Invalid("spec.listeners is empty".into()));
    }
    let secured = has_internal_listener(kc);
    for (i, l) in spec.listeners.iter().enumerate() {
        let internal = secured && (l.name == INTERNAL_LISTENER || l.port == INTERNAL_PORT);
        if ["controller", "metrics"].contains(&l.name.as_str()) || internal {
            return Err(BuildError::Invalid(format!(
                "listener {}: the name or port is taken by the operator's own listeners \
                 (controller, metrics, and {INTERNAL_LISTENER} on {INTERNAL_PORT} when a \
                 listener is secured)",
                l.name
            )));
        }
        if [CONTROLLER_PORT, METRICS_PORT].contains(&l.port) {
            return Err(BuildError::Invalid(format!(
                "listener {}: port {} is taken by the controller or metrics port",
                l.name, l.port
            )));
        }
        if let Some(other) = spec.listeners[..i].iter().find(|o| {
            o.name == l.name || o.port == l.port || listener_name(&o.name) == listener_name(&l.name)
        }) {
            return Err(BuildError::Invalid(format!(
                "listeners {} and {} share a name or a port",
                other.name, l.name
            )));
        }
    }
    Ok(())
}

/// Refuses what the brokers could not secure: client certificates without TLS, and a super
/// user that is no user name. (A listener without authentication under authorization is
/// Kafka's: its clients are `User:ANONYMOUS`, allowed what ACLs give that principal.)
fn check_security(kc: &KafkaCluster) -> Result<(), BuildError> {
    let spec = &kc.spec;
    if let Some(l) = spec
        .listeners
        .iter()
        .find(|l| l.authentication_type() == Some(AuthenticationType::Tls) && !l.tls)
    {
        return Err(BuildError::Invalid(format!(
            "listener {}: {TLS_AUTH_NEEDS_TLS}",
            l.name
        )));
    }
    let Some(authz) = &spec.authorization else {
        return Ok(());
    };
    if let Some(u) = authz
        .super_users
        .iter()
        .find(|u| u.trim().is_empty() || u.contains([';', '\n']))
    {
        return Err(BuildError::Invalid(format!(
            "spec.authorization.superUsers: {u:?} is not a user name (empty, or with ';' or a \
             newline)"
        )));
    }
    Ok(())
}

/// Whether the spec asks for producer proxies: `spec.proxy` with at least one replica.
pub fn wants_proxy(kc: &KafkaCluster) -> bool {
    kc.spec.proxy.as_ref().is_some_and(|p| p.replicas > 0)
}

/// With `spec.proxy.authentication` (basic), the listener the proxy logs its HTTP users in
/// on: a SCRAM-SHA-512 listener, a TLS one when there is one (the passwords cross the network).
/// `None` without basic auth (or without a proxy); an error when no listener takes SCRAM.
pub fn proxy_login_listener(kc: &KafkaCluster) -> Result<Option<&Listener>, BuildError> {
    let basic = kc
        .spec
        .proxy
        .as_ref()
        .is_some_and(|p| p.replicas > 0 && p.authentication.is_some());
    if !basic {
        return Ok(None);
    }
    let scram = |l: &&Listener| l.authentication_type() == Some(AuthenticationType::ScramSha512);
    let listeners = &kc.spec.listeners;
    let found =
        (listeners.iter().filter(scram).find(|l| l.tls)).or_else(|| listeners.iter().find(scram));
    found
        .map(Some)
        .ok_or_else(|| BuildError::Invalid(PROXY_BASIC_NEEDS_SCRAM.into()))
}

/// Where the proxy's pods mount the Secret of its own KafkaUser (with basic auth).
pub fn proxy_user_dir() -> String {
    format!("{TLS_DIR}/proxy-user")
}

/// The producer keys of the proxy's own SCRAM-SHA-512 login on a listener (`tls` or not): its
/// `sasl.jaas.config` read from the mounted Secret of its KafkaUser by Kafka's
/// `DirectoryConfigProvider`, so that the password stands in no pod spec.
fn proxy_scram_properties(tls: bool) -> Vec<(String, String)> {
    let protocol = if tls { "SASL_SSL" } else { "SASL_PLAINTEXT" };
    let mut props = vec![
        ("security.protocol", protocol.to_string()),
        ("sasl.mechanism", "SCRAM-SHA-512".into()),
        ("config.providers", "secrets".into()),
        (
            "config.providers.secrets.class",
            "org.apache.kafka.common.config.provider.DirectoryConfigProvider".into(),
        ),
        (
            "sasl.jaas.config",
            format!(
                "${{secrets:{}:{}}}",
                proxy_user_dir(),
                super::user::JAAS_CONFIG
            ),
        ),
    ];
    if tls {
        props.push(("ssl.truststore.type", "PEM".into()));
        props.push((
            "ssl.truststore.location",
            format!("{TLS_DIR}/cluster-ca/{}", certs::CA_CERT),
        ));
    }
    props.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The proxy's own KafkaUser `<cluster>-proxy` (with basic auth): a SCRAM-SHA-512 login for
/// what the proxy asks as itself (the cluster id, readiness), which needs no ACL — every
/// produce goes through the login of its HTTP user. Owned by the cluster.
pub fn proxy_user(kc: &KafkaCluster) -> Result<KafkaUser, BuildError> {
    let names = Names::of(kc)?;
    let mut spec = json!({
        "clusterRef": names.cluster,
        "authentication": {"type": "scram-sha-512"},
    });
    if kc.spec.authorization.is_some() {
        spec["authorization"] = json!({"type": "simple", "acls": []});
    }
    typed(
        "KafkaUser",
        json!({
            "apiVersion": "kafka.evenkeel.dev/v1alpha1",
            "kind": "KafkaUser",
            "metadata": metadata_labelled(kc, names.proxy(), proxy_labels(&names.cluster))?,
            "spec": spec,
        }),
    )
}

/// Whether the spec asks for producer proxies serving HTTPS (`spec.proxy.tls`, replicas > 0).
pub fn proxy_tls(kc: &KafkaCluster) -> bool {
    kc.spec
        .proxy
        .as_ref()
        .is_some_and(|p| p.tls && p.replicas > 0)
}

/// Whether the brokers have the internal listener (mutual TLS with the cluster CA) and the
/// operator makes the CAs: a secured cluster, and one being secured or unsecured
/// (`migration::stage_of`).
pub fn has_internal_listener(kc: &KafkaCluster) -> bool {
    migration::stage_of(kc).has_internal_listener()
}

/// Whether the brokers replicate on the internal listener, and the operator, the rebalancer
/// sidecar and the producer proxy reach them on it with their certificates.
pub fn internal_listener_in_use(kc: &KafkaCluster) -> bool {
    migration::stage_of(kc).internal_listener_in_use()
}

/// The port the brokers replicate on and the operator, the rebalancer sidecar and the producer
/// proxy reach them on: the internal listener's once it is in use, else the first listener's.
pub fn internal_port(kc: &KafkaCluster) -> i32 {
    if internal_listener_in_use(kc) {
        return INTERNAL_PORT;
    }
    kc.spec.listeners.first().map_or(9092, |l| l.port)
}

/// A broker listener (not the controller's) as Kafka's keys name it.
struct BrokerListener {
    /// Kafka's name (`PLAIN`, `REPLICATION`).
    name: String,
    port: i32,
    protocol: &'static str,
}

/// The brokers' listeners, the inter-broker one first: the internal listener once the brokers
/// replicate on it, else the first client listener (with the internal listener last while a
/// running cluster is secured or unsecured, `migration`).
fn broker_listeners(kc: &KafkaCluster) -> Vec<BrokerListener> {
    let mut out: Vec<BrokerListener> = kc
        .spec
        .listeners
        .iter()
        .map(|l| BrokerListener {
            name: listener_name(&l.name),
            port: l.port,
            protocol: security_protocol(l),
        })
        .collect();
    if has_internal_listener(kc) {
        let internal = BrokerListener {
            name: listener_name(INTERNAL_LISTENER),
            port: INTERNAL_PORT,
            protocol: "SSL",
        };
        match internal_listener_in_use(kc) {
            true => out.insert(0, internal),
            false => out.push(internal),
        }
    }
    out
}

/// Kafka's security protocol for a client listener.
pub fn security_protocol(l: &Listener) -> &'static str {
    match (l.tls, l.authentication_type()) {
        (false, None | Some(AuthenticationType::Tls)) => "PLAINTEXT",
        (true, None | Some(AuthenticationType::Tls)) => "SSL",
        (false, Some(AuthenticationType::ScramSha512)) => "SASL_PLAINTEXT",
        (true, Some(AuthenticationType::ScramSha512)) => "SASL_SSL",
    }
}

/// Keys `spec.authorization` sets.
pub const AUTHORIZATION_KEYS: &[&str] = &["authorizer.class.name", "super.users"];

/// The listeners' TLS and SASL keys and the authorizer's: a TLS listener's PEM keystore type
/// (its location is the pod's own file, `keystore_overrides`), client certificates checked
/// against the clients CA (the cluster CA on the internal listener), SCRAM-SHA-512 on SASL
/// listeners, and `super.users`: the brokers, the operator and the spec's.
fn security_properties(
    kc: &KafkaCluster,
    tls_controllers: &[&'static str],
) -> Result<Vec<(String, String)>, BuildError> {
    let mut out = Vec::new();
    let internal = has_internal_listener(kc).then_some(INTERNAL_LISTENER);
    for name in internal.into_iter().chain(tls_controllers.iter().copied()) {
        let prefix = listener_prefix(name);
        out.push((format!("{prefix}ssl.keystore.type"), "PEM".into()));
        out.extend(client_certificates(&prefix, "cluster-ca"));
    }
    for l in &kc.spec.listeners {
        let prefix = listener_prefix(&l.name);
        if l.tls {
            out.push((format!("{prefix}ssl.keystore.type"), "PEM".into()));
        }
        match l.authentication_type() {
            Some(AuthenticationType::Tls) => out.extend(client_certificates(&prefix, "clients-ca")),
            Some(AuthenticationType::ScramSha512) => {
                out.push((
                    format!("{prefix}sasl.enabled.mechanisms"),
                    "SCRAM-SHA-512".into(),
                ));
            }
            None => {}
        }
    }
    if let Some(authz) = &kc.spec.authorization {
        let names = Names::of(kc)?;
        let mut users = vec![
            certs::principal(&names.statefulset()),
            certs::principal(components::OPERATOR_CN),
        ];
        users.extend(
            authz
                .super_users
                .iter()
                .map(|u| format!("User:{}", u.trim())),
        );
        out.push(("authorizer.class.name".into(), STANDARD_AUTHORIZER.into()));
        out.push(("super.users".into(), users.join(";")));
    }
    Ok(out)
}

/// `listener.name.<name>.` for a listener of the spec (or the internal one).
fn listener_prefix(name: &str) -> String {
    format!("listener.name.{}.", listener_name(name).to_lowercase())
}

/// Client certificates required on the listener of `prefix`, checked against the CA mounted
/// under `TLS_DIR/<ca_dir>`.
fn client_certificates(prefix: &str, ca_dir: &str) -> [(String, String); 3] {
    [
        (format!("{prefix}ssl.client.auth"), "required".into()),
        (format!("{prefix}ssl.truststore.type"), "PEM".into()),
        (
            format!("{prefix}ssl.truststore.location"),
            format!("{TLS_DIR}/{ca_dir}/{CA_CERT}"),
        ),
    ]
}

/// `--override` arguments giving each TLS listener (the internal one included) the pod's own
/// certificate and key (`<pod>.pem` of the broker Secret); `$(POD_NAME)` is expanded by the
/// kubelet.
fn keystore_overrides(kc: &KafkaCluster, tls_controllers: &[&'static str]) -> Vec<String> {
    let internal = has_internal_listener(kc).then_some(INTERNAL_LISTENER);
    let tls = kc
        .spec
        .listeners
        .iter()
        .filter(|l| l.tls)
        .map(|l| l.name.as_str());
    internal
        .into_iter()
        .chain(tls_controllers.iter().copied())
        .chain(tls)
        .flat_map(|name| {
            let prefix = listener_prefix(name);
            [
                "--override".to_string(),
                format!("{prefix}ssl.keystore.location={TLS_DIR}/brokers/$(POD_NAME).pem"),
            ]
        })
        .collect()
}

/// Hash of everything that needs a broker restart to take effect: the properties and the image.
/// The voter list is left out: it is fixed when the cluster is formed (changing a quorum's
/// voters is KIP-853's job), and a recorded voter count must never roll every broker.
pub fn config_hash(properties: &str, image: &str) -> String {
    let mut h = Sha256::new();
    for line in properties
        .lines()
        .filter(|l| !l.starts_with("controller.quorum.voters="))
    {
        h.update(line.as_bytes());
        h.update(b"\n");
    }
    h.update([0]);
    h.update(image.as_bytes());
    crate::security::hex(&h.finalize()[..8])
}

fn owner_refs(kc: &KafkaCluster) -> Result<Value, BuildError> {
    let oref = kc
        .controller_owner_ref(&())
        .ok_or(BuildError::Missing("uid"))?;
    serde_json::to_value(vec![oref]).map_err(|source| BuildError::Serde {
        kind: "OwnerReference",
        source,
    })
}

fn metadata(kc: &KafkaCluster, name: String) -> Result<Value, BuildError> {
    let names = Names::of(kc)?;
    metadata_labelled(kc, name, labels(&names.cluster))
}

fn metadata_labelled(
    kc: &KafkaCluster,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<Value, BuildError> {
    let names = Names::of(kc)?;
    Ok(json!({
        "name": name,
        "namespace": names.namespace,
        "labels": labels,
        "ownerReferences": owner_refs(kc)?,
    }))
}

fn typed<T: serde::de::DeserializeOwned>(kind: &'static str, v: Value) -> Result<T, BuildError> {
    serde_json::from_value(v).map_err(|source| BuildError::Serde { kind, source })
}

/// An object of the cluster with only its metadata (the brokers' labels, the cluster as owner).
pub fn owned_object<T: serde::de::DeserializeOwned>(
    kc: &KafkaCluster,
    api_version: &str,
    kind: &'static str,
    name: String,
) -> Result<T, BuildError> {
    typed(
        kind,
        json!({"apiVersion": api_version, "kind": kind, "metadata": metadata(kc, name)?}),
    )
}

pub fn config_map(
    kc: &KafkaCluster,
    quorum: impl Into<QuorumShape>,
) -> Result<ConfigMap, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "ConfigMap",
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(kc, names.config_map())?,
            "data": config_map_data(kc, quorum.into())?,
        }),
    )
}

/// The brokers' `server.properties`, and on a secured cluster with the rebalancer the sidecar's
/// `rebalancer.properties` (its client keys, `--command-config`).
fn config_map_data(kc: &KafkaCluster, quorum: QuorumShape) -> Result<Value, BuildError> {
    let mut data = json!({ "server.properties": server_properties(kc, quorum)? });
    if internal_listener_in_use(kc) && kc.spec.rebalancer.enabled {
        let keystore = format!("{TLS_DIR}/rebalancer/{}.pem", certs::REBALANCER_ENTRY);
        let props: String = components::client_properties(&keystore)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        data[REBALANCER_PROPERTIES] = json!(props);
    }
    Ok(data)
}

/// The sidecar's client configuration in the brokers' ConfigMap.
const REBALANCER_PROPERTIES: &str = "rebalancer.properties";

fn service_ports(kc: &KafkaCluster, with_controller: bool) -> Vec<Value> {
    let mut ports: Vec<Value> = kc
        .spec
        .listeners
        .iter()
        .map(|l| json!({"name": l.name, "port": l.port, "targetPort": l.port, "protocol": "TCP"}))
        .collect();
    if has_internal_listener(kc) {
        ports.push(json!({"name": INTERNAL_LISTENER, "port": INTERNAL_PORT, "targetPort": INTERNAL_PORT, "protocol": "TCP"}));
    }
    if with_controller {
        ports.push(json!({"name": "controller", "port": CONTROLLER_PORT, "targetPort": CONTROLLER_PORT, "protocol": "TCP"}));
        ports.push(json!({"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"}));
    }
    ports
}

/// Headless Service: stable DNS per broker pod, published before readiness so the quorum forms.
pub fn headless_service(kc: &KafkaCluster) -> Result<Service, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "Service",
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(kc, names.headless_service())?,
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": selector(&names.cluster),
                "ports": service_ports(kc, true),
            },
        }),
    )
}

/// Bootstrap Service: what clients put in `bootstrap.servers`.
pub fn bootstrap_service(kc: &KafkaCluster) -> Result<Service, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "Service",
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(kc, names.bootstrap_service())?,
            "spec": {
                "type": "ClusterIP",
                "selector": selector(&names.cluster),
                "ports": service_ports(kc, false),
            },
        }),
    )
}

/// At most one broker down by voluntary disruption (drains) at a time.
pub fn pod_disruption_budget(kc: &KafkaCluster) -> Result<PodDisruptionBudget, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "PodDisruptionBudget",
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": metadata(kc, names.pdb())?,
            "spec": {
                "maxUnavailable": 1,
                "selector": { "matchLabels": selector(&names.cluster) },
            },
        }),
    )
}

fn resources(r: &Option<super::crd::Resources>) -> Value {
    match r {
        Some(r) => json!({"requests": r.requests, "limits": r.limits}),
        None => json!({}),
    }
}

/// Every container: no privilege escalation, a read-only root filesystem, no capabilities.
fn container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
    })
}

/// Every pod: a non-root UID and the runtime's default seccomp profile.
fn pod_security() -> Value {
    json!({
        "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// With the internal listener but a PLAINTEXT controller listener (a cluster secured while it
/// ran, or by an earlier operator, until its controller listener has moved; a spare one while
/// it moves back), or `still` PLAINTEXT ports pods not yet rolled serve: a NetworkPolicy that
/// lets only the cluster's broker pods reach those ports, and anyone every other TCP port.
/// `None` otherwise: a mutual-TLS controller listener needs none, and an unsecured cluster is
/// open on every listener anyway.
pub fn controller_network_policy(
    kc: &KafkaCluster,
    quorum: QuorumShape,
    still: &[i32],
) -> Result<Option<NetworkPolicy>, BuildError> {
    let mut fenced = quorum.plaintext_ports(kc);
    fenced.extend_from_slice(still);
    fenced.sort_unstable();
    fenced.dedup();
    if fenced.is_empty() {
        return Ok(None);
    }
    let names = Names::of(kc)?;
    let brokers = json!({"matchLabels": selector(&names.cluster)});
    let fenced_ports: Vec<Value> = fenced
        .iter()
        .map(|p| json!({"protocol": "TCP", "port": p}))
        .collect();
    let open: Vec<Value> = open_ranges(&fenced)
        .into_iter()
        .map(|(from, to)| json!({"protocol": "TCP", "port": from, "endPort": to}))
        .collect();
    let policy = typed(
        "NetworkPolicy",
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(kc, names.controller_policy())?,
            "spec": {
                "podSelector": brokers,
                "policyTypes": ["Ingress"],
                "ingress": [
                    {"from": [{"podSelector": brokers}], "ports": fenced_ports},
                    {"ports": open},
                ],
            },
        }),
    )?;
    Ok(Some(policy))
}

/// The ports `policy` (a `controller_network_policy`) fences.
pub fn fenced_ports(policy: &NetworkPolicy) -> Vec<i32> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let rules = policy.spec.as_ref().and_then(|s| s.ingress.as_ref());
    let first = rules.and_then(|r| r.first());
    first
        .and_then(|rule| rule.ports.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| match p.port {
            Some(IntOrString::Int(port)) => Some(port),
            _ => None,
        })
        .collect()
}

/// The TCP port ranges (first, last) left once `fenced` are taken out of 1–65535.
fn open_ranges(fenced: &[i32]) -> Vec<(i32, i32)> {
    let mut fenced = fenced.to_vec();
    fenced.sort_unstable();
    let mut out = Vec::new();
    let mut from = 1;
    for p in fenced {
        if p > from {
            out.push((from, p - 1));
        }
        from = from.max(p + 1);
    }
    if from <= 65535 {
        out.push((from, 65535));
    }
    out
}

/// The brokers' StatefulSet. `updateStrategy: OnDelete`: the operator restarts pods itself, one
/// at a time and only when it is safe, so a config change only changes the template's hash.
pub fn statefulset(
    kc: &KafkaCluster,
    image: &str,
    quorum: impl Into<QuorumShape>,
) -> Result<StatefulSet, BuildError> {
    let quorum = quorum.into();
    let names = Names::of(kc)?;
    let spec = &kc.spec;
    let props = server_properties(kc, quorum)?;
    let hash = config_hash(&props, image);
    let when_deleted = if spec.storage.delete_claim {
        "Delete"
    } else {
        "Retain"
    };
    typed(
        "StatefulSet",
        json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": statefulset_metadata(kc, &names, quorum)?,
            "spec": {
                "replicas": spec.replicas,
                "serviceName": names.headless_service(),
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "OnDelete"},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": when_deleted, "whenScaled": "Retain"},
                "selector": {"matchLabels": selector(&names.cluster)},
                "template": {
                    "metadata": {
                        "labels": labels(&names.cluster),
                        "annotations": {CONFIG_HASH_ANNOTATION: hash},
                    },
                    "spec": broker_pod_spec(kc, &names, image, &quorum.tls_listeners(kc))?,
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data", "labels": selector(&names.cluster)},
                    "spec": data_claim_spec(kc),
                }],
            },
        }),
    )
}

/// A broker pod: the format init container, the broker, and the rebalancer sidecar if asked.
fn broker_pod_spec(
    kc: &KafkaCluster,
    names: &Names,
    image: &str,
    tls_controllers: &[&'static str],
) -> Result<Value, BuildError> {
    let spec = &kc.spec;
    let mut containers = vec![broker_container(kc, names, image, tls_controllers)];
    if spec.rebalancer.enabled {
        containers.push(rebalancer_container(kc, names, image));
    }
    let mut pod_spec = json!({
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": 60,
        "initContainers": [format_container(kc, image, &cluster_id(kc)?, tls_controllers)],
        "containers": containers,
        "volumes": pod_volumes(kc, names),
    });
    if let Some(rack) = &spec.rack {
        pod_spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1,
            "topologyKey": rack.topology_key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(&names.cluster)},
        }]);
    }
    // The pod's only account, so the broker container holds it too: it may write Events and its
    // own cluster's status, nothing else (`rebalancer_role`). The deprecated `serviceAccount` is
    // set too, so that this field manager owns it: the API server copies it back into an empty
    // `serviceAccountName`, and a server-side apply that drops only the latter would never
    // leave the account.
    if spec.rebalancer.enabled {
        pod_spec["serviceAccountName"] = json!(names.rebalancer());
        pod_spec["serviceAccount"] = json!(names.rebalancer());
    }
    Ok(pod_spec)
}

/// The variables every evenkeel container of a broker pod gets from the downward API.
fn pod_env() -> Vec<Value> {
    vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}}),
        json!({"name": "EVENKEEL_LOG", "value": "info"}),
    ]
}

/// The data and config volumes, and a secured cluster's certificates (`tls_volumes`).
fn volume_mounts(kc: &KafkaCluster) -> Value {
    let mut mounts = vec![
        json!({"name": "data", "mountPath": "/var/lib/evenkeel"}),
        json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true}),
    ];
    if has_internal_listener(kc) {
        for (volume, dir) in TLS_VOLUMES {
            mounts.push(
                json!({"name": volume, "mountPath": format!("{TLS_DIR}/{dir}"), "readOnly": true}),
            );
        }
    }
    json!(mounts)
}

/// A secured cluster's certificate volumes and where under `TLS_DIR` they are mounted.
const TLS_VOLUMES: [(&str, &str); 3] = [
    ("broker-certs", "brokers"),
    ("cluster-ca-cert", "cluster-ca"),
    ("clients-ca-cert", "clients-ca"),
];

/// The pod's volumes: the ConfigMap, and a secured cluster's Secrets (`TLS_VOLUMES`).
fn pod_volumes(kc: &KafkaCluster, names: &Names) -> Value {
    let mut volumes = vec![json!({"name": "config", "configMap": {"name": names.config_map()}})];
    if has_internal_listener(kc) {
        let secrets = [
            names.broker_secret(),
            CaKind::Cluster.cert_secret(names),
            CaKind::Clients.cert_secret(names),
        ];
        for ((volume, _), secret) in TLS_VOLUMES.iter().zip(secrets) {
            volumes.push(secret_volume(volume, &secret));
        }
        if kc.spec.rebalancer.enabled {
            volumes.push(secret_volume(
                "rebalancer-certs",
                &names.rebalancer_secret(),
            ));
        }
    }
    json!(volumes)
}

/// A volume of Secret `secret`, readable by the pod's group only.
fn secret_volume(volume: &str, secret: &str) -> Value {
    json!({"name": volume, "secret": {"secretName": secret, "defaultMode": 0o440}})
}

/// `evenkeel format` before the broker starts (a formatted directory is left alone).
/// It reads the whole configuration, so it gets the TLS listeners' keystores too.
fn format_container(
    kc: &KafkaCluster,
    image: &str,
    cluster_id: &str,
    tls_controllers: &[&'static str],
) -> Value {
    // `--cluster-id=ID` in one argument: an id can start with '-' (one cluster in 64: it is
    // the uid's bytes in URL-safe base64), which a parser would take for a flag.
    let mut args = vec![
        "format".to_string(),
        "--config".into(),
        format!("{CONFIG_DIR}/server.properties"),
        format!("--cluster-id={cluster_id}"),
        "--ignore-formatted".into(),
        "--override".into(),
        "node.id=$(POD_INDEX)".into(),
    ];
    args.extend(keystore_overrides(kc, tls_controllers));
    json!({
        "name": "format",
        "image": image,
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}},
        ],
        "securityContext": container_security(),
        "volumeMounts": volume_mounts(kc),
    })
}

/// The broker: its node id from the pod index, its advertised listeners from the pod's DNS
/// name, its rack from the node's topology label.
fn broker_container(
    kc: &KafkaCluster,
    names: &Names,
    image: &str,
    tls_controllers: &[&'static str],
) -> Value {
    let spec = &kc.spec;
    let advertised: Vec<String> = broker_listeners(kc)
        .iter()
        .map(|l| {
            format!(
                "{}://$(POD_NAME).{}.{}.svc:{}",
                l.name,
                names.headless_service(),
                names.namespace,
                l.port
            )
        })
        .collect();
    let mut env = pod_env();
    let mut args = vec![
        "broker".to_string(),
        "--config".into(),
        format!("{CONFIG_DIR}/server.properties"),
        "--override".into(),
        "node.id=$(POD_INDEX)".into(),
        "--override".into(),
        format!("advertised.listeners={}", advertised.join(",")),
    ];
    args.extend(keystore_overrides(kc, tls_controllers));
    if let Some(rack) = &spec.rack {
        env.push(json!({"name": "BROKER_RACK", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{}']", rack.topology_key)}}}));
        args.push("--override".into());
        args.push("broker.rack=$(BROKER_RACK)".into());
    }
    let mut ports: Vec<Value> = spec
        .listeners
        .iter()
        .map(|l| json!({"name": l.name, "containerPort": l.port, "protocol": "TCP"}))
        .collect();
    if has_internal_listener(kc) {
        ports.push(
            json!({"name": INTERNAL_LISTENER, "containerPort": INTERNAL_PORT, "protocol": "TCP"}),
        );
    }
    ports.push(json!({"name": "controller", "containerPort": CONTROLLER_PORT, "protocol": "TCP"}));
    ports.push(json!({"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}));
    json!({
        "name": "broker",
        "image": image,
        "args": args,
        "env": env,
        "ports": ports,
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": METRICS_PORT},
            "periodSeconds": 5, "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": METRICS_PORT},
            "initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 6,
        },
        "resources": resources(&spec.resources),
        "securityContext": container_security(),
        "volumeMounts": volume_mounts(kc),
    })
}

/// The rebalancer sidecar (`spec.rebalancer`), talking to its own broker: over localhost, or on
/// a secured cluster to the pod's name on the internal listener, with its own certificate
/// (`rebalancer.properties`).
fn rebalancer_container(kc: &KafkaCluster, names: &Names, image: &str) -> Value {
    let r = &kc.spec.rebalancer;
    let secured = internal_listener_in_use(kc);
    let host = match secured {
        true => format!(
            "$(POD_NAME).{}.{}.svc",
            names.headless_service(),
            names.namespace
        ),
        false => "localhost".into(),
    };
    let mut args: Vec<String> = [
        "rebalancer",
        "--bootstrap",
        &format!("{host}:{}", internal_port(kc)),
        "--broker-id",
        "$(POD_INDEX)",
        "--metrics-port",
        &METRICS_PORT.to_string(),
        "--listen",
        &format!("0.0.0.0:{SIDECAR_PORT}"),
        "--interval",
        &format!("{}s", r.interval_seconds),
        "--threshold",
        &r.threshold.to_string(),
        "--mute",
        &format!("{}s", r.mute_seconds.max(1)),
        "--min-network-idle-percent",
        &r.min_network_idle_percent.to_string(),
        "--min-handler-idle-percent",
        &r.min_handler_idle_percent.to_string(),
        &format!("--dry-run={}", r.dry_run),
        "--kafka-cluster",
        &names.cluster,
    ]
    .map(String::from)
    .to_vec();
    if secured {
        args.push("--command-config".into());
        args.push(format!("{CONFIG_DIR}/{REBALANCER_PROPERTIES}"));
    }
    let mut container = json!({
        "name": "rebalancer",
        "image": image,
        "args": args,
        "env": pod_env(),
        "ports": [{"name": "rebalancer", "containerPort": SIDECAR_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": SIDECAR_PORT}},
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
        "securityContext": container_security(),
    });
    if secured {
        container["volumeMounts"] = json!([
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": true},
            {"name": "rebalancer-certs", "mountPath": format!("{TLS_DIR}/rebalancer"), "readOnly": true},
            {"name": "cluster-ca-cert", "mountPath": format!("{TLS_DIR}/cluster-ca"), "readOnly": true},
        ]);
    }
    container
}

/// Each broker's data volume (`spec.storage`).
fn data_claim_spec(kc: &KafkaCluster) -> Value {
    let storage = &kc.spec.storage;
    let mut pvc_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    });
    if let Some(class) = &storage.storage_class_name {
        pvc_spec["storageClassName"] = json!(class);
    }
    pvc_spec
}

fn statefulset_metadata(
    kc: &KafkaCluster,
    names: &Names,
    quorum: QuorumShape,
) -> Result<Value, BuildError> {
    let mut m = metadata(kc, names.statefulset())?;
    m["annotations"] = json!({
        CONTROLLERS_ANNOTATION: quorum.controllers.to_string(),
        CONTROLLER_TLS_ANNOTATION: quorum.controller_tls(kc).to_string(),
        SECURITY_STAGE_ANNOTATION: migration::stage_of(kc).as_str(),
    });
    if let Some(spare) = quorum.spare {
        m["annotations"][CONTROLLER_SPARE_ANNOTATION] = json!(spare.annotation());
    }
    Ok(m)
}

/// The arguments of `evenkeel proxy` for `spec.proxy`: the bootstrap Service on the internal
/// port (`internal_port`), the HTTP port, and one `--producer-props key=value` per `spec.proxy.config` entry
/// (sorted by key). A key the operator owns, a key `--producer-props` cannot carry, or a value
/// the proxy would refuse at start (checked by the proxy's own parser) is refused here.
/// Returns them with the configuration the proxy will run with.
fn proxy_args(
    kc: &KafkaCluster,
    proxy: &Proxy,
) -> Result<(Vec<String>, crate::proxy::ProxyConfig), BuildError> {
    let names = Names::of(kc)?;
    if kc.spec.listeners.is_empty() {
        return Err(BuildError::Invalid("spec.listeners is empty".into()));
    }
    let login = proxy_login_listener(kc)?;
    let bootstrap = names.bootstrap_address(login.map_or(internal_port(kc), |l| l.port));
    let listen = std::net::SocketAddr::from(([0, 0, 0, 0], PROXY_PORT as u16));
    for key in proxy.config.keys() {
        let security_key = ["security.", "ssl.", "sasl."]
            .iter()
            .any(|p| key.starts_with(p));
        if PROXY_RESERVED_KEYS.contains(&key.as_str())
            || (security_key && internal_listener_in_use(kc))
        {
            return Err(BuildError::Invalid(format!(
                "spec.proxy.config.{key} is set by the operator and cannot be overridden"
            )));
        }
        if key.is_empty() || key.contains(|c: char| c == '=' || c.is_whitespace()) {
            return Err(BuildError::Invalid(format!(
                "spec.proxy.config: key {key:?} may not be empty or contain '=' or whitespace"
            )));
        }
    }
    let props: Vec<(String, String)> = proxy
        .config
        .iter()
        .map(|(k, v)| (k.clone(), v.trim().to_string()))
        .collect();
    let mut config = crate::proxy::ProxyConfig::new(listen, &bootstrap, &props)
        .map_err(|e| BuildError::Invalid(format!("spec.proxy.config: {e}")))?;
    config.shutdown_delay = PROXY_SHUTDOWN_DELAY;
    let mut args = vec![
        "proxy".to_string(),
        "--bootstrap".into(),
        bootstrap,
        "--listen".into(),
        listen.to_string(),
        "--shutdown-delay-ms".into(),
        PROXY_SHUTDOWN_DELAY.as_millis().to_string(),
    ];
    let keystore = format!("{TLS_DIR}/proxy/{}.pem", certs::PROXY_ENTRY);
    if proxy.tls {
        args.push("--ssl-keystore-location".into());
        args.push(keystore.clone());
    }
    // With basic auth the proxy's producer logs in with SCRAM (its HTTP users' logins replace
    // its own); else, on a secured cluster, with the proxy's certificate. Their files exist
    // only in the pod, so they join after the check above.
    let security = match (login, internal_listener_in_use(kc)) {
        (Some(l), _) => {
            args.push("--authentication-method".into());
            args.push("BASIC".into());
            proxy_scram_properties(l.tls)
        }
        (None, true) => components::client_properties(&keystore),
        (None, false) => Vec::new(),
    };
    for (k, v) in props.into_iter().chain(security) {
        args.push("--producer-props".into());
        args.push(format!("{k}={v}"));
    }
    Ok((args, config))
}

/// How long a stopping proxy pod goes on serving, unready, so that the Service's endpoints
/// drop it before it takes no new connection.
const PROXY_SHUTDOWN_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// The producer proxy's Deployment (`spec.proxy`): `evenkeel proxy` (`proxy_args`) with the
/// brokers' image. Its pods carry component `proxy`, so the brokers' selectors (Services, PDB,
/// StatefulSet) never pick them. A roll starts a new pod before it stops an old one, and a
/// stopping pod gets the time its proxy's shutdown takes (the delay, then its
/// `delivery.timeout.ms` and a margin for the requests it holds) before it is killed.
pub fn proxy_deployment(kc: &KafkaCluster, image: &str) -> Result<Deployment, BuildError> {
    let names = Names::of(kc)?;
    let proxy = kc
        .spec
        .proxy
        .as_ref()
        .ok_or(BuildError::Missing("spec.proxy"))?;
    let (args, config) = proxy_args(kc, proxy)?;
    let grace_seconds = config.shutdown_grace().as_secs() + 5;
    let scheme = if proxy.tls { "HTTPS" } else { "HTTP" };
    let mut container = json!({
        "name": "proxy",
        "image": image,
        "args": args,
        "env": [{"name": "EVENKEEL_LOG", "value": "info"}],
        "ports": [{"name": "http", "containerPort": PROXY_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": PROXY_PORT, "scheme": scheme},
            "periodSeconds": 5, "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": PROXY_PORT, "scheme": scheme},
            "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 6,
        },
        "resources": resources(&proxy.resources),
        "securityContext": container_security(),
    });
    let mut pod = json!({
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": grace_seconds,
    });
    let (mut mounts, mut volumes) = (Vec::new(), Vec::new());
    let login = proxy_login_listener(kc)?;
    if proxy.tls || (internal_listener_in_use(kc) && login.is_none()) {
        mounts.push(json!({"name": "proxy-certs", "mountPath": format!("{TLS_DIR}/proxy"), "readOnly": true}));
        volumes.push(secret_volume("proxy-certs", &names.proxy_secret()));
    }
    if login.is_some() {
        mounts.push(json!({"name": "proxy-user", "mountPath": proxy_user_dir(), "readOnly": true}));
        volumes.push(secret_volume("proxy-user", &names.proxy()));
    }
    if internal_listener_in_use(kc) {
        mounts.push(json!({"name": "cluster-ca-cert", "mountPath": format!("{TLS_DIR}/cluster-ca"), "readOnly": true}));
        volumes.push(secret_volume(
            "cluster-ca-cert",
            &CaKind::Cluster.cert_secret(&names),
        ));
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
        pod["volumes"] = json!(volumes);
    }
    pod["containers"] = json!([container]);
    typed(
        "Deployment",
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata_labelled(kc, names.proxy(), proxy_labels(&names.cluster))?,
            "spec": {
                "replicas": proxy.replicas,
                "selector": {"matchLabels": proxy_selector(&names.cluster)},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {"labels": proxy_labels(&names.cluster)},
                    "spec": pod,
                },
            },
        }),
    )
}

/// The producer proxy's Service: HTTP on 8080 to the proxy pods' `http` port.
pub fn proxy_service(kc: &KafkaCluster) -> Result<Service, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "Service",
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata_labelled(kc, names.proxy(), proxy_labels(&names.cluster))?,
            "spec": {
                "type": "ClusterIP",
                "selector": proxy_selector(&names.cluster),
                "ports": [{"name": "http", "port": PROXY_PORT, "targetPort": "http", "protocol": "TCP"}],
            },
        }),
    )
}

/// The rebalancer sidecar's ServiceAccount (`spec.rebalancer.enabled`), the broker pods' account.
pub fn rebalancer_service_account(kc: &KafkaCluster) -> Result<ServiceAccount, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "ServiceAccount",
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata_labelled(kc, names.rebalancer(), rebalancer_labels(&names.cluster))?,
        }),
    )
}

/// What the rebalancer sidecar may do, and no more: publish Events (core and `events.k8s.io`),
/// read its own KafkaCluster, and read and patch that cluster's status (`status.rebalance`).
/// The operator must hold every rule itself to grant it (RBAC's escalation check).
pub fn rebalancer_role(kc: &KafkaCluster) -> Result<Role, BuildError> {
    let names = Names::of(kc)?;
    let own = [names.cluster.clone()];
    typed(
        "Role",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata_labelled(kc, names.rebalancer(), rebalancer_labels(&names.cluster))?,
            "rules": [
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": [GROUP], "resources": ["kafkaclusters"],
                 "resourceNames": own, "verbs": ["get"]},
                {"apiGroups": [GROUP], "resources": ["kafkaclusters/status"],
                 "resourceNames": own, "verbs": ["get", "patch"]},
            ],
        }),
    )
}

/// Binds `rebalancer_role` to `rebalancer_service_account`.
pub fn rebalancer_role_binding(kc: &KafkaCluster) -> Result<RoleBinding, BuildError> {
    let names = Names::of(kc)?;
    typed(
        "RoleBinding",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata_labelled(kc, names.rebalancer(), rebalancer_labels(&names.cluster))?,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": names.rebalancer(),
            },
            "subjects": [{
                "kind": "ServiceAccount",
                "name": names.rebalancer(),
                "namespace": names.namespace,
            }],
        }),
    )
}

/// The image brokers run: `spec.image`, else the operator's default.
pub fn image_of<'a>(kc: &'a KafkaCluster, default_image: &'a str) -> &'a str {
    kc.spec.image.as_deref().unwrap_or(default_image)
}

/// Name of the KafkaCluster for logs.
pub fn display(kc: &KafkaCluster) -> String {
    format!("{}/{}", kc.namespace().unwrap_or_default(), kc.name_any())
}

#[cfg(test)]
mod tests;
