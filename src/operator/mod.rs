//! The Kubernetes operator: KafkaCluster, KafkaTopic and KafkaUser CRDs, their reconcilers and
//! the process that runs them (`evenkeel operator`). It reaches brokers only through
//! `crate::client`.

pub mod backoff;
pub mod certs;
pub mod cluster;
pub mod components;
pub mod controller_move;
pub mod crd;
pub mod kafka;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod placement;
pub mod resources;
pub mod status;
#[cfg(test)]
pub mod testing;
pub mod topic;
pub mod user;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::client::ClientSecurity;
use crd::{KafkaCluster, KafkaTopic, KafkaUser};
use kafka::{AdminConnector, AdminError, ClientConnector};

/// Field manager for server-side apply.
pub const FIELD_MANAGER: &str = "evenkeel-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Kafka: {0}")]
    Kafka(AdminError),
    #[error("object has no {0}")]
    Missing(&'static str),
    #[error(transparent)]
    Build(#[from] resources::BuildError),
    #[error("certificates: {0}")]
    Certs(#[from] certs::CertError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

/// What every reconcile needs: the API client, a way to reach brokers, events and metrics.
pub struct Context<C: AdminConnector> {
    pub client: Client,
    pub connector: C,
    pub recorder: Recorder,
    /// Image for clusters whose spec names none.
    pub default_image: String,
    /// How often a healthy resource is checked again (drift correction).
    pub resync: Duration,
    pub metrics: Arc<metrics::Metrics>,
    /// Reach every cluster at this bootstrap address instead of its Service (an operator run
    /// outside the cluster, and tests).
    pub bootstrap_override: Option<String>,
    /// When each object's failed reconcile is tried again.
    pub backoff: backoff::Backoff,
    /// The operator's client certificates for secured clusters' internal listeners.
    pub identities: components::Identities,
}

impl<C: AdminConnector> Context<C> {
    pub fn new(client: Client, connector: C, default_image: String) -> Context<C> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            connector,
            default_image,
            resync: Duration::from_secs(120),
            metrics: Arc::new(metrics::Metrics::default()),
            bootstrap_override: None,
            backoff: backoff::Backoff::default(),
            identities: components::Identities::default(),
        }
    }

    /// Bootstrap list for a cluster's internal port (`resources::internal_port`): broker 0's pod,
    /// then the bootstrap Service.
    pub fn bootstrap_of(&self, kc: &KafkaCluster) -> Result<String, Error> {
        if let Some(addr) = &self.bootstrap_override {
            return Ok(addr.clone());
        }
        let names = resources::Names::of(kc)?;
        let port = resources::internal_port(kc);
        // Broker 0 first, then the Service: while brokers do not form one cluster yet, every pass
        // must see the same broker, or topics and status would differ from pass to pass.
        Ok(format!(
            "{}:{port},{}",
            names.pod_host("0"),
            names.bootstrap_address(port)
        ))
    }

    /// How the operator connects to a cluster: once the brokers replicate on the internal
    /// listener, mutual TLS with its own certificate from the cluster's CA
    /// (`components::Identities`); else, and with
    /// `bootstrap_override` (an operator outside the cluster, and tests), PLAINTEXT.
    pub async fn security_of(&self, kc: &KafkaCluster) -> Result<ClientSecurity, AdminError> {
        if self.bootstrap_override.is_some() || !resources::internal_listener_in_use(kc) {
            return Ok(ClientSecurity::plaintext());
        }
        let transport = |e: String| AdminError::transport(e);
        let names = resources::Names::of(kc).map_err(|e| transport(e.to_string()))?;
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &names.namespace);
        let ca = certs::stored_ca_of(&api, &names, certs::CaKind::Cluster)
            .await
            .map_err(|e| transport(format!("reading the cluster CA: {e}")))?
            .ok_or_else(|| transport("the cluster CA is not made yet".into()))?;
        self.identities
            .operator(&ca)
            .map_err(|e| transport(e.to_string()))
    }

    /// An admin connection to the brokers of `kc` (`bootstrap_of`, `security_of`).
    pub async fn connect(&self, kc: &KafkaCluster) -> Result<C::Admin, AdminError> {
        let bootstrap = self
            .bootstrap_of(kc)
            .map_err(|e| AdminError::transport(e.to_string()))?;
        let security = self.security_of(kc).await?;
        self.connector.connect(&bootstrap, security).await
    }

    /// Publishes a Kubernetes event about `obj`; a failure to publish is only logged.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not publish event");
        }
    }
}

/// `evenkeel operator` options.
#[derive(clap::Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Watch only this namespace (default: every namespace).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub metrics_address: String,
    /// Run without a Lease (only safe with a single replica).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Namespace of the leader-election Lease (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    #[arg(long, default_value = "evenkeel-operator")]
    pub lease_name: String,
    /// Broker image for KafkaClusters that name none.
    #[arg(
        long,
        env = "EVENKEEL_IMAGE",
        default_value = "ghcr.io/evenkeel/evenkeel:latest"
    )]
    pub broker_image: String,
    /// Seconds between checks of a healthy resource (drift correction).
    #[arg(long, default_value_t = 120)]
    pub resync_seconds: u64,
    /// Reach every cluster's brokers at this address, on PLAINTEXT, instead of their bootstrap
    /// Service (an operator run outside the cluster, and tests).
    #[arg(long)]
    pub bootstrap_override: Option<String>,
}

/// Runs the operator until SIGTERM or Ctrl-C.
pub fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(args))
}

async fn run_async(args: OperatorArgs) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let mut ctx = Context::new(
        client.clone(),
        ClientConnector {
            timeout: Duration::from_secs(15),
        },
        args.broker_image.clone(),
    );
    ctx.resync = Duration::from_secs(args.resync_seconds.max(5));
    ctx.bootstrap_override = args.bootstrap_override.clone();
    let ctx = Arc::new(ctx);
    let server = metrics::serve(&args.metrics_address, ctx.metrics.clone()).await?;
    tracing::info!(address = %args.metrics_address, "health and metrics listening");

    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(anyhow::Error::from)?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    };
    let lease = (!args.no_leader_election).then(|| {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("evenkeel-operator-{}", uuid::Uuid::new_v4().simple()));
        tracing::info!(lease = %args.lease_name, %identity, "waiting to lead");
        leader::LeaseLock::new(
            client.clone(),
            &args.lease_namespace,
            &args.lease_name,
            &identity,
        )
    });
    let work = async {
        if let Some(lease) = &lease {
            lease.acquire().await?;
            tracing::info!("leading");
        }
        ctx.metrics.set_leader(true);
        let controllers = run_controllers(client.clone(), args.namespace.clone(), ctx.clone());
        match &lease {
            Some(lease) => {
                tokio::select! {
                    _ = controllers => Ok(()),
                    lost = lease.hold() => {
                        ctx.metrics.set_leader(false);
                        Err(anyhow::anyhow!("lost the leader lease: {lost:?}"))
                    }
                }
            }
            None => {
                controllers.await;
                Ok(())
            }
        }
    };
    let result = tokio::select! {
        r = shutdown => r,
        r = work => r,
    };
    if let Some(lease) = &lease {
        release_lease(lease).await;
    }
    server.abort();
    result
}

/// On the way out, gives the Lease up so a standby leads at once (within 2 s, or not at all:
/// then it expires as if this replica had died).
async fn release_lease(lease: &leader::LeaseLock) {
    match tokio::time::timeout(std::time::Duration::from_secs(2), lease.release()).await {
        Ok(Ok(true)) => tracing::info!("released the leader lease"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not release the leader lease"),
        Err(_) => tracing::warn!("could not release the leader lease within 2 s"),
    }
}

async fn run_controllers(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Context<ClientConnector>>,
) {
    let api = |c: &Client| -> (Api<KafkaCluster>, Api<KafkaTopic>, Api<StatefulSet>) {
        match &namespace {
            Some(ns) => (
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
                Api::namespaced(c.clone(), ns),
            ),
            None => (
                Api::all(c.clone()),
                Api::all(c.clone()),
                Api::all(c.clone()),
            ),
        }
    };
    let (clusters, topics, statefulsets) = api(&client);
    let (config_maps, services): (Api<ConfigMap>, Api<Service>) = match &namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (pods, pdbs): (Api<Pod>, Api<PodDisruptionBudget>) = match &namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    // The producer proxies (`spec.proxy`).
    let deployments: Api<Deployment> = scoped(&client, namespace.as_deref());
    // The rebalancer sidecar's identity (`spec.rebalancer.enabled`).
    let accounts: Api<ServiceAccount> = scoped(&client, namespace.as_deref());
    let roles: Api<Role> = scoped(&client, namespace.as_deref());
    let bindings: Api<RoleBinding> = scoped(&client, namespace.as_deref());
    let owned =
        || watcher::Config::default().labels("app.kubernetes.io/managed-by=evenkeel-operator");
    let broker_pods = watcher::Config::default().labels(
        "app.kubernetes.io/managed-by=evenkeel-operator,app.kubernetes.io/component=broker",
    );
    let cluster_controller = Controller::new(clusters, watcher::Config::default())
        .owns(statefulsets, owned())
        .owns(config_maps, owned())
        .owns(services, owned())
        .owns(pdbs, owned())
        .owns(deployments, owned())
        .owns(accounts, owned())
        .owns(roles, owned())
        .owns(bindings, owned())
        // Broker pods belong to the StatefulSet, not to the KafkaCluster: map them by label so a
        // pod turning ready moves the rolling restart on at once. Proxy pods are the
        // Deployment's business (its changes come through `owns`).
        .watches(pods, broker_pods, |pod: Pod| {
            let cluster = pod.labels().get(crd::CLUSTER_LABEL)?.clone();
            Some(ObjectRef::<KafkaCluster>::new(&cluster).within(&pod.namespace()?))
        })
        // A topic that comes, goes or changes moves leaders: refresh `status.brokers[*].leaders`
        // then, not at the next resync.
        .watches(
            topics.clone(),
            watcher::Config::default(),
            |t: KafkaTopic| {
                Some(ObjectRef::<KafkaCluster>::new(&t.spec.cluster_ref).within(&t.namespace()?))
            },
        )
        .shutdown_on_signal()
        .run(cluster::reconcile, error_policy_cluster, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "KafkaCluster reconcile failed");
            }
        });
    let topic_controller = Controller::new(topics, watcher::Config::default())
        .shutdown_on_signal()
        .run(topic::reconcile, error_policy_topic, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "KafkaTopic reconcile failed");
            }
        });
    let users: Api<KafkaUser> = scoped(&client, namespace.as_deref());
    let user_controller = Controller::new(users, watcher::Config::default())
        .shutdown_on_signal()
        .run(user::reconcile, error_policy_user, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "KafkaUser reconcile failed");
            }
        });
    futures::join!(cluster_controller, topic_controller, user_controller);
}

/// An API over one namespace, or over every namespace when none is given.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn error_policy_cluster(
    kc: Arc<KafkaCluster>,
    err: &Error,
    ctx: Arc<Context<ClientConnector>>,
) -> Action {
    retry_later(&ctx.backoff, &object_key(kc.as_ref()), err)
}

fn error_policy_topic(
    kt: Arc<KafkaTopic>,
    err: &Error,
    ctx: Arc<Context<ClientConnector>>,
) -> Action {
    retry_later(&ctx.backoff, &object_key(kt.as_ref()), err)
}

fn error_policy_user(
    ku: Arc<KafkaUser>,
    err: &Error,
    ctx: Arc<Context<ClientConnector>>,
) -> Action {
    retry_later(&ctx.backoff, &object_key(ku.as_ref()), err)
}

/// The requeue after a failed reconcile of `key`, by the object's own backoff.
fn retry_later(backoff: &backoff::Backoff, key: &str, err: &Error) -> Action {
    let delay = backoff.failed(key);
    tracing::warn!(object = key, error = %err, retry_in_s = delay.as_secs(), "reconcile failed");
    Action::requeue(delay)
}

/// One pass of a namespaced resource kept by `finalizer_name` (KafkaTopic, KafkaUser): `pass`
/// gets the resource's API and the finalizer's event (apply, or clean up before deletion); the
/// pass is counted in the metrics by kind, and a success resets the object's backoff.
pub async fn finalized<K, C, F, Fut>(
    ctx: &Context<C>,
    obj: Arc<K>,
    finalizer_name: &str,
    pass: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
    C: AdminConnector,
    F: FnOnce(Api<K>, kube::runtime::finalizer::Event<K>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let ns = obj
        .namespace()
        .ok_or(Error::Missing("metadata.namespace"))?;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let key = object_key(obj.as_ref());
    let started = std::time::Instant::now();
    let result =
        kube::runtime::finalizer(&api, finalizer_name, obj, |event| pass(api.clone(), event))
            .await
            .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .observe(&K::kind(&()), started.elapsed(), result.is_ok());
    if result.is_ok() {
        ctx.backoff.succeeded(&key);
    }
    result
}

/// `Kind/namespace/name`: an object's key for its backoff.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or(""),
        obj.meta().name.as_deref().unwrap_or("")
    )
}

/// A fresh id for one reconcile's span, so its log lines can be found together.
pub fn trace_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}
