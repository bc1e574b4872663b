//! Test doubles for reconcile scenarios: a fake API server on kube's tower-test mock service that
//! answers by route and records every call, and an in-memory Kafka behind `TopicAdmin` and `UserAdmin`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

use super::kafka::{
    AdminConnector, AdminError, ClusterState, Reassignment, TopicAdmin, TopicState, UserAdmin,
};
use super::Context;
use crate::security::acl::AclBinding;
use crate::security::sasl::ScramMechanism;

/// One request the operator made.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    /// Path and query, e.g. `/api/v1/namespaces/ns/pods?labelSelector=…`.
    pub uri: String,
    pub body: Value,
}

impl Call {
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or(&self.uri)
    }
}

type Route = Box<dyn Fn(&Call) -> Option<(StatusCode, Value)> + Send + Sync>;

/// Answers the operator's requests from routes; what no route answers is a 404 for GET and an
/// echo of the body for writes (as a server that accepted it would).
#[derive(Clone, Default)]
pub struct FakeApiServer {
    routes: Arc<Mutex<Vec<Route>>>,
    /// Objects by path: served on GET, and the base a PATCH is merged into.
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    pub calls: Arc<Mutex<Vec<Call>>>,
}

impl FakeApiServer {
    /// Serves `obj` at `path` and merges patches to `path` (or `path/status`) into it.
    pub fn put(&self, path: &str, obj: Value) -> &Self {
        self.objects.lock().unwrap().insert(path.to_string(), obj);
        self
    }

    /// The object stored at `path`, with the patches made to it so far.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.objects.lock().unwrap().get(path).cloned()
    }

    fn answer_default(&self, call: &Call) -> (StatusCode, Value) {
        let path = call.path().trim_end_matches("/status").to_string();
        let mut objects = self.objects.lock().unwrap();
        match (call.method.clone(), objects.get_mut(&path)) {
            (Method::GET, Some(obj)) => (StatusCode::OK, obj.clone()),
            (Method::GET, None) => (StatusCode::NOT_FOUND, not_found(call)),
            (Method::PATCH, Some(obj)) => {
                if call.body.is_object() {
                    merge(obj, call.body.clone());
                }
                (StatusCode::OK, obj.clone())
            }
            _ => {
                let mut body = call.body.clone();
                if body.is_object() && body.get("metadata").is_none() {
                    let name = path.rsplit('/').next().unwrap_or_default();
                    body["metadata"] = json!({"name": name});
                }
                (StatusCode::OK, body)
            }
        }
    }

    /// `GET path` (without query) answers `body`.
    pub fn get(&self, path: &str, body: Value) -> &Self {
        let path = path.to_string();
        self.route(move |c| {
            (c.method == Method::GET && c.path() == path).then(|| (StatusCode::OK, body.clone()))
        })
    }

    pub fn route(
        &self,
        f: impl Fn(&Call) -> Option<(StatusCode, Value)> + Send + Sync + 'static,
    ) -> &Self {
        self.routes.lock().unwrap().push(Box::new(f));
        self
    }

    /// A kube client whose requests this server answers.
    pub fn client(&self) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let me = self.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (parts, body) = req.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let call = Call {
                    method: parts.method.clone(),
                    uri: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let answer = me.routes.lock().unwrap().iter().find_map(|r| r(&call));
                let (status, body) = answer.unwrap_or_else(|| me.answer_default(&call));
                me.calls.lock().unwrap().push(call);
                let resp = Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
                    .expect("response builds");
                send.send_response(resp);
            }
        });
        Client::new(service, "default")
    }

    /// The calls made so far with this method whose path contains `fragment`.
    pub fn calls_to(&self, method: Method, fragment: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == method && c.path().contains(fragment))
            .cloned()
            .collect()
    }

    /// Every `reason` of the events published so far.
    pub fn event_reasons(&self) -> Vec<String> {
        self.calls_to(Method::POST, "/events")
            .iter()
            .filter_map(|c| c.body["reason"].as_str().map(String::from))
            .collect()
    }
}

/// JSON merge patch (RFC 7386) of `b` into `a`.
pub fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(&k);
                } else {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (a, b) => *a = b,
    }
}

fn not_found(call: &Call) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("{} not found", call.path()), "reason": "NotFound", "code": 404,
    })
}

/// A list response of `kind` holding `items`.
pub fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})
}

/// In-memory topics, shared by every "connection", with a log of the changes made.
#[derive(Clone, Default)]
pub struct FakeKafka {
    pub topics: Arc<Mutex<BTreeMap<String, TopicState>>>,
    pub cluster: Arc<Mutex<ClusterState>>,
    pub log: Arc<Mutex<Vec<String>>>,
    /// When set, every call fails with this error.
    pub fail: Arc<Mutex<Option<AdminError>>>,
    /// What `ongoing_reassignments` answers.
    pub ongoing: Arc<Mutex<usize>>,
    /// SCRAM credentials: user, mechanism, password.
    pub scram: Arc<Mutex<Vec<(String, ScramMechanism, String)>>>,
    pub acls: Arc<Mutex<Vec<AclBinding>>>,
    /// When set, the ACL calls answer SECURITY_DISABLED (a cluster without an authorizer).
    pub acls_disabled: Arc<Mutex<bool>>,
}

impl FakeKafka {
    /// A Kafka that already has topic `name` with these partitions and topic configs (RF 3).
    pub fn with_topic(name: &str, partitions: i32, configs: &[(&str, &str)]) -> FakeKafka {
        let k = FakeKafka::default();
        k.topics.lock().unwrap().insert(
            name.into(),
            TopicState {
                topic_id: "id-existing".into(),
                partitions,
                replication_factor: 3,
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        );
        k
    }

    fn check(&self) -> Result<(), AdminError> {
        match self.fail.lock().unwrap().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl TopicAdmin for FakeKafka {
    async fn describe_topic(&self, name: &str) -> Result<Option<TopicState>, AdminError> {
        self.check()?;
        Ok(self.topics.lock().unwrap().get(name).cloned())
    }
    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: &BTreeMap<String, String>,
    ) -> Result<String, AdminError> {
        self.check()?;
        let id = format!("id-{name}");
        self.topics.lock().unwrap().insert(
            name.into(),
            TopicState {
                topic_id: id.clone(),
                partitions,
                replication_factor,
                configs: configs.clone(),
            },
        );
        self.log
            .lock()
            .unwrap()
            .push(format!("create {name} {partitions} {replication_factor}"));
        Ok(id)
    }
    async fn create_partitions(&self, name: &str, total: i32) -> Result<(), AdminError> {
        self.check()?;
        if let Some(t) = self.topics.lock().unwrap().get_mut(name) {
            t.partitions = total;
        }
        self.log
            .lock()
            .unwrap()
            .push(format!("partitions {name} {total}"));
        Ok(())
    }
    async fn alter_topic_configs(
        &self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), AdminError> {
        self.check()?;
        if let Some(t) = self.topics.lock().unwrap().get_mut(name) {
            t.configs.extend(set.clone());
            for k in delete {
                t.configs.remove(k);
            }
        }
        self.log
            .lock()
            .unwrap()
            .push(format!("alter {name} set {set:?} delete {delete:?}"));
        Ok(())
    }
    async fn delete_topic(&self, name: &str) -> Result<(), AdminError> {
        self.check()?;
        self.topics.lock().unwrap().remove(name);
        self.log.lock().unwrap().push(format!("delete {name}"));
        Ok(())
    }
    async fn cluster_state(&self) -> Result<ClusterState, AdminError> {
        self.check()?;
        Ok(self.cluster.lock().unwrap().clone())
    }
    /// Reassignments complete at once: the replicas and ISR become the new list.
    async fn reassign(&self, moves: &[Reassignment]) -> Result<(), AdminError> {
        self.check()?;
        let mut cluster = self.cluster.lock().unwrap();
        for m in moves {
            if let Some(p) = cluster
                .partitions
                .iter_mut()
                .find(|p| p.topic == m.topic && p.partition == m.partition)
            {
                p.replicas = m.replicas.clone();
                p.isr = m.replicas.clone();
                p.leader = m.replicas[0];
            }
            self.log.lock().unwrap().push(format!(
                "reassign {}-{} {:?}",
                m.topic, m.partition, m.replicas
            ));
        }
        Ok(())
    }
    async fn ongoing_reassignments(&self) -> Result<usize, AdminError> {
        self.check()?;
        Ok(*self.ongoing.lock().unwrap())
    }
}

impl UserAdmin for FakeKafka {
    async fn scram_mechanisms(&self, user: &str) -> Result<Vec<ScramMechanism>, AdminError> {
        self.check()?;
        let scram = self.scram.lock().unwrap();
        Ok(scram.iter().filter(|c| c.0 == user).map(|c| c.1).collect())
    }
    async fn set_scram_password(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
    ) -> Result<(), AdminError> {
        self.check()?;
        let mut scram = self.scram.lock().unwrap();
        scram.retain(|c| !(c.0 == user && c.1 == mechanism));
        scram.push((user.into(), mechanism, password.into()));
        self.log
            .lock()
            .unwrap()
            .push(format!("scram {user} {}", mechanism.name()));
        Ok(())
    }
    async fn delete_scram(
        &self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<(), AdminError> {
        self.check()?;
        let mut scram = self.scram.lock().unwrap();
        scram.retain(|c| !(c.0 == user && mechanisms.contains(&c.1)));
        self.log
            .lock()
            .unwrap()
            .push(format!("delete scram {user}"));
        Ok(())
    }
    async fn acls_of(&self, principal: &str) -> Result<Vec<AclBinding>, AdminError> {
        self.check()?;
        if *self.acls_disabled.lock().unwrap() {
            return Err(AdminError {
                code: Some(crate::protocol::errors::SECURITY_DISABLED),
                name: "SECURITY_DISABLED".into(),
                message: "No Authorizer is configured.".into(),
            });
        }
        let acls = self.acls.lock().unwrap();
        Ok(acls
            .iter()
            .filter(|a| a.principal == principal)
            .cloned()
            .collect())
    }
    async fn create_acls(&self, acls: &[AclBinding]) -> Result<(), AdminError> {
        self.check()?;
        let mut stored = self.acls.lock().unwrap();
        for a in acls {
            if !stored.contains(a) {
                stored.push(a.clone());
            }
            self.log.lock().unwrap().push(format!(
                "acl+ {} {} {}",
                a.principal, a.operation, a.pattern.name
            ));
        }
        Ok(())
    }
    async fn delete_acls(&self, acls: &[AclBinding]) -> Result<(), AdminError> {
        self.check()?;
        self.acls.lock().unwrap().retain(|a| !acls.contains(a));
        for a in acls {
            self.log.lock().unwrap().push(format!(
                "acl- {} {} {}",
                a.principal, a.operation, a.pattern.name
            ));
        }
        Ok(())
    }
}

impl AdminConnector for FakeKafka {
    type Admin = FakeKafka;
    async fn connect(
        &self,
        _bootstrap: &str,
        _security: crate::client::ClientSecurity,
    ) -> Result<FakeKafka, AdminError> {
        Ok(self.clone())
    }
}

/// A context on the fake API server and fake Kafka.
pub fn context(server: &FakeApiServer, kafka: &FakeKafka) -> Arc<Context<FakeKafka>> {
    Arc::new(Context::new(
        server.client(),
        kafka.clone(),
        "evenkeel:test".into(),
    ))
}
