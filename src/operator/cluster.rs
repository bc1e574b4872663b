//! The KafkaCluster reconciler: applies the brokers' objects (and the producer proxy's, the
//! rebalancer sidecar's identity and a secured cluster's certificates (`certs`), when the spec
//! asks for them) with server-side apply, restarts stale pods one at a time only when
//! min.insync.replicas allows, refuses unsafe scale-downs.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::certs;
use super::components;
use super::crd::{
    BrokerStatus, KafkaCluster, KafkaClusterStatus, KafkaUser, ListenerStatus, ProxyStatus,
    SecurityStage,
};
use super::kafka::{AdminConnector, ClusterState, TopicAdmin};
use super::migration;
use super::placement;
use super::resources::{self, Names};
use super::status::{self, set_condition};
use super::{Context, Error, FIELD_MANAGER};

/// A broker pod as the roll sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub ordinal: i32,
    pub ready: bool,
    /// Runs an older revision of the pod template than the StatefulSet's.
    pub stale: bool,
    pub terminating: bool,
    /// Why a container of the pod is not running, as the kubelet says
    /// (`ImagePullBackOff: Back-off pulling image …`, `CrashLoopBackOff: …`).
    pub waiting: Option<String>,
}

/// What the rolling restart does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollStep {
    /// Every pod runs the current template.
    Done,
    /// A pod is starting or stopping: one at a time, so wait for it.
    Wait(String),
    /// Delete this pod; the StatefulSet recreates it with the new template.
    Restart(String),
    /// Every stale pod would take a partition below min.insync.replicas.
    Blocked(String),
}

/// Whether broker `id` may go down now. Like Strimzi's KafkaAvailability: refused when it is in
/// the ISR of a partition whose ISR is already at min.insync.replicas or below, unless the
/// replication factor itself is at or below min.insync.replicas (acks=all is already impossible).
pub fn can_restart(id: i32, state: &ClusterState) -> Result<(), String> {
    for p in &state.partitions {
        let min_isr = p.min_insync_replicas.max(1) as usize;
        if p.replicas.len() <= min_isr {
            continue;
        }
        if p.isr.contains(&id) && p.isr.len() <= min_isr {
            return Err(format!(
                "restarting broker {id} would take {}-{} below min.insync.replicas={min_isr} (ISR {:?})",
                p.topic, p.partition, p.isr
            ));
        }
    }
    Ok(())
}

/// The next step of a safe rolling restart. A stale pod that is not ready serves nothing and is
/// restarted first; otherwise pods go in ordinal order with the active controller last, each only
/// when every pod is ready and the broker can go down without losing min.insync.replicas.
pub fn next_roll_step(pods: &[PodView], expected: i32, state: Option<&ClusterState>) -> RollStep {
    let mut stale: Vec<&PodView> = pods.iter().filter(|p| p.stale).collect();
    if stale.is_empty() {
        return RollStep::Done;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return RollStep::Wait(format!("waiting for pod {} to stop", p.name));
    }
    // A deleted pod may be gone before the StatefulSet has recreated it: a missing ordinal is a
    // broker that is down, so nothing else may stop until it is back.
    if let Some(missing) = (0..expected).find(|i| !pods.iter().any(|p| p.ordinal == *i)) {
        return RollStep::Wait(format!("waiting for broker {missing}'s pod to be created"));
    }
    if let Some(p) = stale.iter().find(|p| !p.ready) {
        return RollStep::Restart(p.name.clone());
    }
    if let Some(p) = pods.iter().find(|p| !p.ready) {
        let why = p
            .waiting
            .as_ref()
            .map_or(String::new(), |w| format!(" ({w})"));
        return RollStep::Wait(format!("waiting for pod {} to be ready{why}", p.name));
    }
    let Some(state) = state else {
        return RollStep::Blocked("cannot reach the brokers to check min.insync.replicas".into());
    };
    // Under-replicated partitions mean a restarted broker has not caught up yet.
    let mut under = state
        .partitions
        .iter()
        .filter(|p| p.isr.len() < p.replicas.len());
    if let Some(p) = under.next() {
        let missing: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !p.isr.contains(r))
            .collect();
        return RollStep::Wait(format!(
            "waiting for {}-{} to catch up (ISR {:?} of replicas {:?}: brokers {missing:?} out of \
             it; {} partition(s) under-replicated)",
            p.topic,
            p.partition,
            p.isr,
            p.replicas,
            1 + under.count()
        ));
    }
    stale.sort_by_key(|p| (p.ordinal == state.controller_id, p.ordinal));
    let mut first_refusal = None;
    for p in stale {
        match can_restart(p.ordinal, state) {
            Ok(()) => return RollStep::Restart(p.name.clone()),
            Err(why) => {
                first_refusal.get_or_insert(why);
            }
        }
    }
    RollStep::Blocked(first_refusal.unwrap_or_default())
}

/// Refuses a scale-down while a broker to remove still holds a replica.
pub fn check_scale_down(current: i32, desired: i32, state: &ClusterState) -> Result<(), String> {
    // A broker missing from the metadata may hold replicas nobody can see: fail closed.
    if let Some(b) = (0..current).find(|b| !state.brokers.contains(b)) {
        return Err(format!(
            "cannot scale down from {current} to {desired} brokers: broker {b} is not in the \
             cluster's metadata, so the replicas it holds cannot be checked"
        ));
    }
    let removed: Vec<i32> = (desired..current).collect();
    let held: Vec<String> = state
        .partitions
        .iter()
        .filter(|p| p.replicas.iter().any(|r| removed.contains(r)))
        .map(|p| format!("{}-{}", p.topic, p.partition))
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = held.iter().take(5).map(String::as_str).collect();
    Err(format!(
        "cannot scale down from {current} to {desired} brokers: brokers {removed:?} still hold {} \
         partition replicas ({}{})",
        held.len(),
        shown.join(", "),
        if held.len() > 5 { ", …" } else { "" }
    ))
}

/// Reconciles one KafkaCluster (controller entry point), in a span naming it with a trace id.
#[tracing::instrument(skip_all, fields(
    namespace = kc.metadata.namespace.as_deref().unwrap_or(""),
    name = kc.metadata.name.as_deref().unwrap_or(""),
    trace_id = %super::trace_id(),
))]
pub async fn reconcile<C: AdminConnector>(
    kc: Arc<KafkaCluster>,
    ctx: Arc<Context<C>>,
) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_inner(&kc, &ctx).await;
    ctx.metrics
        .observe("KafkaCluster", started.elapsed(), result.is_ok());
    if result.is_ok() {
        ctx.backoff.succeeded(&super::object_key(kc.as_ref()));
    }
    result
}

async fn reconcile_inner<C: AdminConnector>(
    kc: &KafkaCluster,
    ctx: &Context<C>,
) -> Result<Action, Error> {
    let names = Names::of(kc)?;
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let mut pass = Pass::new(kc);

    let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let existing = sts_api.get_opt(&names.statefulset()).await?;
    let current = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.replicas)
        .unwrap_or(0);
    let image = resources::image_of(kc, &ctx.default_image).to_string();
    let pods = list_broker_pods(ctx, &names).await?;
    let steps = security_steps(kc, existing.as_ref(), &pods);
    let (stage, quorum) = (steps.stage, steps.quorum);
    // From here on the pass works on the spec of the security stage it applies.
    let (real, staged) = (kc, migration::staged(kc, stage));
    let kc = &staged;
    let built =
        migration::check(existing.as_ref()).and_then(|()| Objects::build(kc, &image, quorum));
    let mut objects = match built {
        Ok(objects) => objects,
        Err(resources::BuildError::Invalid(msg)) => {
            return report_invalid_spec(ctx, &clusters, real, pass, msg).await;
        }
        Err(e) => return Err(e.into()),
    };
    let brokers = observe_brokers(ctx, kc, current).await;
    let replicas = decide_replicas(ctx, kc, &brokers, current, quorum.controllers, &mut pass).await;
    objects.set_replicas(replicas);
    // The certificates before the pods that mount them (a new pod finds its own).
    let rollout = certs::Rollout::of(&pods, replicas);
    let cas = certs::reconcile(ctx, kc, &names, replicas, &rollout).await?;
    objects.set_ca_generations(&cas.generations);
    // The sidecar's account before the pods that name it, and gone only after them.
    if let Some(identity) = &objects.rebalancer {
        identity.apply(ctx, &names).await?;
    }
    let applied = objects.apply(ctx, &names).await?;
    reconcile_controller_policy(ctx, kc, real, &names, &steps).await?;
    let proxy = reconcile_proxy(ctx, kc, &names, objects.proxy.as_ref()).await?;
    if objects.rebalancer.is_none() {
        remove_rebalancer_identity(ctx, kc, &names).await?;
    }
    if current != replicas {
        let note = format!("brokers {current} -> {replicas}");
        ctx.event(kc, EventType::Normal, "Scaled", &note).await;
    }

    let views = broker_views(&pods, &applied);
    let step = roll_step(&applied, &views, current.min(replicas), &brokers);
    roll(ctx, kc, &step, &mut pass).await?;
    report_security_stage(ctx, kc, &steps, &mut pass).await;
    spread_after_scale_up(ctx, kc, &brokers, &views, &step, replicas, &mut pass).await;
    sync_component_acls(ctx, kc, &brokers, &mut pass).await;

    let mut st = pass.status.clone();
    st.security_stage = Some(stage);
    fill_status(&mut st, kc, &views, &brokers, &objects.sts)?;
    st.listeners = listener_status(kc, &names, &cas.cluster_ca);
    let (proxy_status, proxy_waiting) = match &proxy {
        Some(d) => {
            let (status, waiting) = proxy_view(d, names.proxy_url(resources::proxy_tls(kc)));
            (Some(status), waiting)
        }
        None => (None, None),
    };
    st.proxy = proxy_status;
    pass.proxy_waiting = proxy_waiting;
    pass.unregistered = unregistered(&views, &brokers);
    let requeue = pass.conclude(ctx, kc, &mut st).await;
    patch_status(&clusters, real, st).await?;
    Ok(Action::requeue(requeue))
}

/// Where a pass takes a cluster being secured or unsecured (`migration`): the security stage
/// and the quorum, with its controller listeners, this pass applies, a step nearer the spec's
/// once every broker runs what the StatefulSet records; and the stage the spec asks for.
struct SecuritySteps {
    stage: SecurityStage,
    quorum: resources::QuorumShape,
    target: SecurityStage,
    /// What the StatefulSet records, and whether every pod runs it.
    recorded_stage: Option<SecurityStage>,
    recorded: resources::QuorumShape,
    rolled_out: bool,
}

fn security_steps(
    kc: &KafkaCluster,
    existing: Option<&StatefulSet>,
    pods: &[Pod],
) -> SecuritySteps {
    let recorded = resources::quorum_shape(kc, existing);
    let recorded_stage = migration::recorded(existing);
    let rolled_out = existing.is_some_and(|s| rolled_out(s, pods));
    let (stage, quorum) = migration::next_steps(kc, recorded_stage, recorded, rolled_out);
    SecuritySteps {
        stage,
        quorum,
        target: SecurityStage::target(kc),
        recorded_stage,
        recorded,
        rolled_out,
    }
}

/// The roll's next step against the StatefulSet as applied. Until the StatefulSet controller
/// has seen a new template its `updateRevision` still names the one before, and every pod
/// would look current: wait for it.
fn roll_step<A>(
    applied: &StatefulSet,
    views: &[PodView],
    expected: i32,
    brokers: &BrokerView<A>,
) -> RollStep {
    let observed = applied.status.as_ref().and_then(|s| s.observed_generation);
    if matches!((observed, applied.metadata.generation), (Some(o), Some(g)) if o < g) {
        return RollStep::Wait("waiting for the StatefulSet to take the new pod template".into());
    }
    next_roll_step(views, expected, brokers.state.as_ref().ok())
}

/// Whether every broker pod runs the StatefulSet's latest template and is ready: the roll of
/// the security stage it records is done.
fn rolled_out(existing: &StatefulSet, pods: &[Pod]) -> bool {
    let observed = existing
        .status
        .as_ref()
        .is_some_and(|s| s.observed_generation == existing.metadata.generation);
    let replicas = existing.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let views = broker_views(pods, existing);
    observed
        && views.len() == usize::try_from(replicas).unwrap_or(0)
        && views.iter().all(|v| v.ready && !v.stale && !v.terminating)
}

/// While a running cluster is secured or unsecured: an event when a step starts, and the step
/// in the Reconciling condition, followed by what the roll waits for.
async fn report_security_stage<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    steps: &SecuritySteps,
    pass: &mut Pass,
) {
    let layout = steps.quorum.layout(kc);
    let Some((reason, message)) = migration::progress(steps.stage, steps.target, layout) else {
        return;
    };
    // A step starts when this pass applies other than what the StatefulSet records.
    if steps.recorded_stage != Some(steps.stage) || steps.recorded != steps.quorum {
        ctx.event(kc, EventType::Normal, &reason, &message).await;
    }
    // The step's reason, with what the roll waits for; a blocked roll keeps its own reason.
    pass.rolling = Some(match pass.rolling.take() {
        Some((roll, why)) if roll == "RollBlocked" => (roll, format!("{message}; {why}")),
        Some((_, why)) => (reason, format!("{message}; {why}")),
        None => (reason, message),
    });
    pass.requeue_within(Duration::from_secs(10));
}

/// What one reconcile pass found: the status it started from, why the cluster is degraded,
/// what is moving or rolling, and when to look again.
struct Pass {
    status: KafkaClusterStatus,
    generation: Option<i64>,
    now: String,
    degraded: Option<(String, String)>,
    /// Partition moves for a scale (drain before a scale-down, spread after a scale-up).
    moving: Option<(String, String)>,
    rolling: Option<(String, String)>,
    /// Why the producer proxy is not ready yet (`proxy_view`); `None` when it is, or when the
    /// spec asks for none.
    proxy_waiting: Option<String>,
    /// Broker pods the cluster's metadata does not list yet (`unregistered`).
    unregistered: Vec<i32>,
    requeue: Option<Duration>,
}

impl Pass {
    fn new(kc: &KafkaCluster) -> Pass {
        Pass {
            status: kc.status.clone().unwrap_or_default(),
            generation: kc.metadata.generation,
            now: status::now_rfc3339(),
            degraded: None,
            moving: None,
            rolling: None,
            proxy_waiting: None,
            unregistered: Vec::new(),
            requeue: None,
        }
    }

    /// Look again within `d` at the latest.
    fn requeue_within(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    /// Sets the Ready, Reconciling and Degraded conditions; returns the requeue delay.
    async fn conclude<C: AdminConnector>(
        mut self,
        ctx: &Context<C>,
        kc: &KafkaCluster,
        st: &mut KafkaClusterStatus,
    ) -> Duration {
        if self.moving.is_some() {
            self.requeue_within(Duration::from_secs(15));
        }
        let rolling = self.rolling.take().or(self.moving.take());
        let brokers_ready = st.ready_brokers == kc.spec.replicas
            && rolling.is_none()
            && self.unregistered.is_empty();
        let (ready, reason, message) = self.ready_condition(kc, st, brokers_ready, &rolling);
        let (g, now) = (self.generation, self.now.clone());
        set_condition(
            &mut st.conditions,
            status::READY,
            ready,
            &reason,
            message,
            g,
            &now,
        );
        let (reconciling, r, m) = match (&rolling, &self.proxy_waiting) {
            (Some((r, m)), _) => (true, r.clone(), m.clone()),
            (None, _) if !brokers_ready => (
                true,
                "BrokersStarting".to_string(),
                format!("{} of {} brokers ready", st.ready_brokers, kc.spec.replicas),
            ),
            (None, Some(why)) => (true, "ProxyNotReady".to_string(), why.clone()),
            (None, None) => (false, "Reconciled".to_string(), String::new()),
        };
        set_condition(
            &mut st.conditions,
            status::RECONCILING,
            reconciling,
            &r,
            m,
            g,
            &now,
        );
        self.set_degraded(ctx, kc, st).await;
        if !brokers_ready || self.proxy_waiting.is_some() {
            self.requeue_within(Duration::from_secs(15));
        }
        if !self.unregistered.is_empty() {
            // Registration follows a pod's readiness within seconds: look again soon, so the
            // status does not wait for the next resync.
            self.requeue_within(Duration::from_secs(2));
        }
        st.observed_generation = g;
        self.requeue.unwrap_or(ctx.resync)
    }

    /// The Ready condition: every broker ready and current, nothing degraded, and the producer
    /// proxy (when the spec asks for one) rolled out and ready. Returns (ready, reason, message).
    fn ready_condition(
        &self,
        kc: &KafkaCluster,
        st: &KafkaClusterStatus,
        brokers_ready: bool,
        rolling: &Option<(String, String)>,
    ) -> (bool, String, String) {
        let brokers = format!("{} of {} brokers ready", st.ready_brokers, kc.spec.replicas);
        if let Some((r, m)) = self.degraded.clone().or(rolling.clone()) {
            return (false, r, m);
        }
        let unregistered = &self.unregistered;
        if st.ready_brokers == kc.spec.replicas && !unregistered.is_empty() {
            // Pods pass their probe before the controller's answer reaches this view.
            return (
                false,
                "BrokersNotRegistered".into(),
                format!("{brokers}; brokers {unregistered:?} not yet in the cluster's metadata"),
            );
        }
        if !brokers_ready {
            return (false, "BrokersNotReady".into(), brokers);
        }
        if let Some(why) = &self.proxy_waiting {
            return (false, "ProxyNotReady".into(), format!("{brokers}; {why}"));
        }
        let mut message = format!("{} brokers ready", st.ready_brokers);
        if let Some(p) = &st.proxy {
            message.push_str(&format!(", {} proxies ready", p.ready_replicas));
        }
        (true, "Ready".into(), message)
    }

    /// Sets the Degraded condition (and its Warning event) from what the pass found.
    async fn set_degraded<C: AdminConnector>(
        &self,
        ctx: &Context<C>,
        kc: &KafkaCluster,
        st: &mut KafkaClusterStatus,
    ) {
        let (g, now) = (self.generation, self.now.as_str());
        match &self.degraded {
            Some((r, m)) => {
                ctx.event(kc, EventType::Warning, r, m).await;
                set_condition(
                    &mut st.conditions,
                    status::DEGRADED,
                    true,
                    r,
                    m.clone(),
                    g,
                    now,
                )
            }
            None => set_condition(
                &mut st.conditions,
                status::DEGRADED,
                false,
                "AsExpected",
                "",
                g,
                now,
            ),
        }
    }
}

/// The broker pods the cluster's metadata does not list as registered and unfenced: a pod can
/// pass its probe a moment before the controller's answer reaches the operator's view. When
/// the brokers cannot be asked, none (readiness then rests on the pods' probes, which turn
/// ready only once each broker is registered).
fn unregistered<A>(views: &[PodView], brokers: &BrokerView<A>) -> Vec<i32> {
    let Ok(state) = brokers.state.as_ref() else {
        return Vec::new();
    };
    views
        .iter()
        .filter(|v| !v.terminating && !state.brokers.contains(&v.ordinal))
        .map(|v| v.ordinal)
        .collect()
}

/// The objects a KafkaCluster becomes.
struct Objects {
    cm: ConfigMap,
    headless: Service,
    bootstrap: Service,
    pdb: PodDisruptionBudget,
    sts: StatefulSet,
    /// Only when the spec asks for a proxy.
    proxy: Option<ProxyObjects>,
    /// Only while the rebalancer is enabled.
    rebalancer: Option<RebalancerIdentity>,
}

/// The producer proxy's objects.
struct ProxyObjects {
    deployment: Deployment,
    service: Service,
    /// Its own KafkaUser, with basic auth.
    user: Option<KafkaUser>,
}

impl ProxyObjects {
    /// `None` when the spec asks for no proxy.
    fn build(
        kc: &KafkaCluster,
        image: &str,
    ) -> Result<Option<ProxyObjects>, resources::BuildError> {
        if !resources::wants_proxy(kc) {
            return Ok(None);
        }
        Ok(Some(ProxyObjects {
            deployment: resources::proxy_deployment(kc, image)?,
            service: resources::proxy_service(kc)?,
            user: match resources::proxy_login_listener(kc)? {
                Some(_) => Some(resources::proxy_user(kc)?),
                None => None,
            },
        }))
    }
}

/// The rebalancer sidecar's identity: its ServiceAccount (the broker pods' account), a Role with
/// exactly what the sidecar calls, and the RoleBinding between them, all `<cluster>-rebalancer`.
struct RebalancerIdentity {
    account: ServiceAccount,
    role: Role,
    binding: RoleBinding,
}

impl RebalancerIdentity {
    /// `None` when the rebalancer is disabled.
    fn build(kc: &KafkaCluster) -> Result<Option<RebalancerIdentity>, resources::BuildError> {
        if !kc.spec.rebalancer.enabled {
            return Ok(None);
        }
        Ok(Some(RebalancerIdentity {
            account: resources::rebalancer_service_account(kc)?,
            role: resources::rebalancer_role(kc)?,
            binding: resources::rebalancer_role_binding(kc)?,
        }))
    }

    /// Server-side apply of the three objects: the account and the Role before the binding.
    async fn apply<C: AdminConnector>(&self, ctx: &Context<C>, names: &Names) -> Result<(), Error> {
        let ns = &names.namespace;
        let name = names.rebalancer();
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), ns);
        accounts
            .patch(&name, &pp, &Patch::Apply(&self.account))
            .await?;
        let roles: Api<Role> = Api::namespaced(ctx.client.clone(), ns);
        roles.patch(&name, &pp, &Patch::Apply(&self.role)).await?;
        let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), ns);
        bindings
            .patch(&name, &pp, &Patch::Apply(&self.binding))
            .await?;
        Ok(())
    }
}

/// Deletes the rebalancer sidecar's RoleBinding, Role and ServiceAccount (in that order) when the
/// KafkaCluster controls them; a `RebalancerRemoved` event says so.
async fn remove_rebalancer_identity<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    names: &Names,
) -> Result<(), Error> {
    let ns = &names.namespace;
    let name = names.rebalancer();
    let owner = kc.uid().ok_or(Error::Missing("uid"))?;
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), ns);
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), ns);
    let binding_removed = delete_if_controlled(&bindings, &name, &owner).await?;
    let role_removed = delete_if_controlled(&roles, &name, &owner).await?;
    let account_removed = delete_if_controlled(&accounts, &name, &owner).await?;
    if binding_removed || role_removed || account_removed {
        let note = format!(
            "removed the rebalancer's ServiceAccount, Role and RoleBinding {name}: \
             spec.rebalancer.enabled is false"
        );
        ctx.event(kc, EventType::Normal, "RebalancerRemoved", &note)
            .await;
    }
    Ok(())
}

impl Objects {
    /// A spec the operator cannot turn into objects is an error, reported before anything is
    /// applied.
    fn build(
        kc: &KafkaCluster,
        image: &str,
        quorum: resources::QuorumShape,
    ) -> Result<Objects, resources::BuildError> {
        Ok(Objects {
            cm: resources::config_map(kc, quorum)?,
            headless: resources::headless_service(kc)?,
            bootstrap: resources::bootstrap_service(kc)?,
            pdb: resources::pod_disruption_budget(kc)?,
            sts: resources::statefulset(kc, image, quorum)?,
            proxy: ProxyObjects::build(kc, image)?,
            rebalancer: RebalancerIdentity::build(kc)?,
        })
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.sts.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }

    /// Puts each renewed CA's generation on the brokers' pod template, and the cluster CA's on
    /// the proxy's (it trusts that CA and presents a certificate from it): a renewal or a step
    /// of a key replacement rolls them, the brokers safely, as a config change does.
    fn set_ca_generations(&mut self, generations: &[(&'static str, u64)]) {
        let cluster_ca = certs::CaKind::Cluster.generation_annotation();
        let proxy = self.proxy.as_mut().map(|p| &mut p.deployment);
        let mut proxy_template = proxy.and_then(|d| Some(&mut d.spec.as_mut()?.template));
        let mut brokers_template = self.sts.spec.as_mut().map(|s| &mut s.template);
        for (name, generation) in generations {
            let templates = [
                brokers_template.as_deref_mut(),
                proxy_template
                    .as_deref_mut()
                    .filter(|_| *name == cluster_ca),
            ];
            for template in templates.into_iter().flatten() {
                template
                    .metadata
                    .get_or_insert_with(Default::default)
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(name.to_string(), generation.to_string());
            }
        }
    }

    /// Server-side apply of every object; returns the StatefulSet as the API server has it.
    async fn apply<C: AdminConnector>(
        &self,
        ctx: &Context<C>,
        names: &Names,
    ) -> Result<StatefulSet, Error> {
        let ns = &names.namespace;
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
        cm_api
            .patch(&names.config_map(), &pp, &Patch::Apply(&self.cm))
            .await?;
        let svc_api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        svc_api
            .patch(
                &names.headless_service(),
                &pp,
                &Patch::Apply(&self.headless),
            )
            .await?;
        svc_api
            .patch(
                &names.bootstrap_service(),
                &pp,
                &Patch::Apply(&self.bootstrap),
            )
            .await?;
        let pdb_api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
        pdb_api
            .patch(&names.pdb(), &pp, &Patch::Apply(&self.pdb))
            .await?;
        let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
        Ok(sts_api
            .patch(&names.statefulset(), &pp, &Patch::Apply(&self.sts))
            .await?)
    }
}

/// Applies the NetworkPolicy that fences PLAINTEXT controller ports
/// (`resources::controller_network_policy`) while any pod may serve one, and removes it once
/// none may. A port the applied step no longer has stays fenced until every pod runs without it:
/// those of the step the StatefulSet records, and until that roll is done, those fenced now.
async fn reconcile_controller_policy<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    real: &KafkaCluster,
    names: &Names,
    steps: &SecuritySteps,
) -> Result<(), Error> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let name = names.controller_policy();
    let owner = kc.uid().ok_or(Error::Missing("uid"))?;
    let mut still = match steps.recorded_stage {
        Some(stage) => steps
            .recorded
            .plaintext_ports(&migration::staged(real, stage)),
        None => Vec::new(),
    };
    if !steps.rolled_out {
        let current = api.get_opt(&name).await?;
        let ours = current.filter(|p| controlled_by(p, &owner));
        still.extend(ours.iter().flat_map(resources::fenced_ports));
    }
    match resources::controller_network_policy(kc, steps.quorum, &still)? {
        Some(p) => {
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&name, &pp, &Patch::Apply(p)).await?;
        }
        None => {
            delete_if_controlled(&api, &name, &owner).await?;
        }
    }
    Ok(())
}

/// Applies the producer proxy's Deployment and Service (and, with basic auth, its own
/// KafkaUser) when the spec asks for a proxy, and returns the Deployment as applied (with its
/// status); removes them when it does not (`spec.proxy` absent or 0 replicas).
async fn reconcile_proxy<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    names: &Names,
    proxy: Option<&ProxyObjects>,
) -> Result<Option<Deployment>, Error> {
    let ns = &names.namespace;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let name = names.proxy();
    reconcile_proxy_user(ctx, kc, names, proxy.and_then(|p| p.user.as_ref())).await?;
    if let Some(p) = proxy {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let applied = deployments
            .patch(&name, &pp, &Patch::Apply(&p.deployment))
            .await?;
        services
            .patch(&name, &pp, &Patch::Apply(&p.service))
            .await?;
        return Ok(Some(applied));
    }
    let owner = kc.uid().ok_or(Error::Missing("uid"))?;
    let deployment_removed = delete_if_controlled(&deployments, &name, &owner).await?;
    let service_removed = delete_if_controlled(&services, &name, &owner).await?;
    if deployment_removed || service_removed {
        let note = format!("removed the producer proxy {name}: spec.proxy asks for none");
        ctx.event(kc, EventType::Normal, "ProxyRemoved", &note)
            .await;
    }
    Ok(None)
}

/// Applies the proxy's own KafkaUser (basic auth: the KafkaUser reconciler makes its password
/// Secret, which the proxy's pods mount, and its SCRAM credential), or deletes the one this
/// cluster owns when basic auth is off (its finalizer removes the credential from Kafka).
async fn reconcile_proxy_user<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    names: &Names,
    user: Option<&KafkaUser>,
) -> Result<(), Error> {
    let users: Api<KafkaUser> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let name = names.proxy();
    if let Some(u) = user {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        users.patch(&name, &pp, &Patch::Apply(u)).await?;
        return Ok(());
    }
    let owner = kc.uid().ok_or(Error::Missing("uid"))?;
    if delete_if_controlled(&users, &name, &owner).await? {
        let note = format!("removed the proxy's KafkaUser {name}: the proxy has no basic auth");
        ctx.event(kc, EventType::Normal, "ProxyUserRemoved", &note)
            .await;
    }
    Ok(())
}

/// `status.proxy` from the proxy's Deployment, and why the proxy is not ready yet: as
/// `kubectl rollout status` has it, the Deployment must have seen its latest spec, every pod must
/// run the current template with no old pod left, and as many pods as asked must be ready.
pub fn proxy_view(d: &Deployment, url: String) -> (ProxyStatus, Option<String>) {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let ready = st.ready_replicas.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let seen = match (d.metadata.generation, st.observed_generation) {
        (Some(g), Some(o)) => o >= g,
        (Some(_), None) => false,
        (None, _) => true,
    };
    let waiting = if !seen {
        Some("the proxy's Deployment has not seen its latest spec yet".to_string())
    } else if updated < desired {
        Some(format!(
            "rolling out the producer proxy: {updated} of {desired} pods updated"
        ))
    } else if total > updated {
        Some(format!(
            "rolling out the producer proxy: {} old pods still running",
            total - updated
        ))
    } else if ready < desired {
        Some(format!("{ready} of {desired} proxies ready"))
    } else {
        None
    };
    let status = ProxyStatus {
        replicas: desired,
        ready_replicas: ready,
        url,
    };
    (status, waiting)
}

/// Deletes object `name` if the KafkaCluster with UID `owner` controls it (an object of that name
/// that someone else made is left alone); one already gone is fine. Returns whether it deleted.
/// Whether `obj`'s controller is the object with uid `owner`.
fn controlled_by<K: Resource>(obj: &K, owner: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|r| r.uid == owner && r.controller == Some(true))
}

async fn delete_if_controlled<K>(api: &Api<K>, name: &str, owner: &str) -> Result<bool, Error>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let Some(obj) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if !controlled_by(&obj, owner) {
        return Ok(false);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn report_invalid_spec<C: AdminConnector>(
    ctx: &Context<C>,
    clusters: &Api<KafkaCluster>,
    kc: &KafkaCluster,
    pass: Pass,
    msg: String,
) -> Result<Action, Error> {
    let mut st = pass.status;
    let (g, now) = (pass.generation, pass.now);
    set_condition(
        &mut st.conditions,
        status::READY,
        false,
        "InvalidSpec",
        msg.clone(),
        g,
        &now,
    );
    set_condition(
        &mut st.conditions,
        status::DEGRADED,
        true,
        "InvalidSpec",
        msg.clone(),
        g,
        &now,
    );
    ctx.event(kc, EventType::Warning, "InvalidSpec", &msg).await;
    st.observed_generation = g;
    patch_status(clusters, kc, st).await?;
    Ok(Action::await_change())
}

/// The brokers' view (partitions, ISR, controller), once brokers exist.
struct BrokerView<A> {
    admin: Result<A, String>,
    state: Result<ClusterState, String>,
}

async fn observe_brokers<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    current: i32,
) -> BrokerView<C::Admin> {
    let admin = if current > 0 {
        ctx.connect(kc).await.map_err(|e| e.to_string())
    } else {
        Err("no brokers yet".to_string())
    };
    let state = match &admin {
        Ok(a) => a.cluster_state().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };
    BrokerView { admin, state }
}

/// Gives the rebalancer sidecar and the producer proxy their ACLs (`components`), once the
/// brokers answer; a failure is logged and tried again soon.
async fn sync_component_acls<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    brokers: &BrokerView<C::Admin>,
    pass: &mut Pass,
) {
    let Ok(admin) = &brokers.admin else {
        return;
    };
    let sync = components::sync_component_acls(admin, kc).await;
    // One event: the recorder counts a second one of the same reason as a repeat of the first
    // and keeps the first note.
    if !sync.notes.is_empty() {
        let note = sync.notes.join("; ");
        ctx.event(kc, EventType::Normal, "AclsChanged", &note).await;
    }
    if let Some(e) = sync.error {
        tracing::warn!(error = %e, "could not set the sidecar's and the proxy's ACLs");
        pass.requeue_within(Duration::from_secs(15));
    }
}

/// The replica count to apply: the spec's, unless a scale-down is unsafe (brokers to remove
/// still hold replicas, or it would remove controllers); then the current one, draining the
/// brokers first when `rebalanceOnScale` allows.
async fn decide_replicas<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    brokers: &BrokerView<C::Admin>,
    current: i32,
    controllers: i32,
    pass: &mut Pass,
) -> i32 {
    let wanted = kc.spec.replicas;
    if wanted >= current {
        return wanted;
    }
    if wanted < controllers {
        pass.degraded = Some((
            "ScaleDownBlocked".into(),
            format!(
                "cannot scale down from {current} to {wanted} brokers: the first {controllers} \
                 pods are the controllers of the metadata quorum, whose voters are fixed"
            ),
        ));
        return current;
    }
    let verdict = match &brokers.state {
        Ok(state) => check_scale_down(current, wanted, state),
        Err(e) => Err(format!(
            "cannot scale down from {current} to {wanted} brokers: cannot check which \
             brokers hold replicas: {e}"
        )),
    };
    let Err(why) = verdict else {
        return wanted;
    };
    match (&brokers.admin, &brokers.state) {
        (Ok(admin), Ok(state)) if kc.spec.rebalance_on_scale => {
            let keep: Vec<i32> = (0..wanted).collect();
            match drain(admin, state, &keep).await {
                Ok(note) => {
                    ctx.event(kc, EventType::Normal, "Draining", &note).await;
                    pass.moving = Some(("Draining".into(), note));
                }
                Err(e) => pass.degraded = Some(("ScaleDownBlocked".into(), format!("{why}; {e}"))),
            }
        }
        _ => pass.degraded = Some(("ScaleDownBlocked".into(), why)),
    }
    current
}

/// The cluster's broker pods.
async fn list_broker_pods<C: AdminConnector>(
    ctx: &Context<C>,
    names: &Names,
) -> Result<Vec<Pod>, Error> {
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let selector = resources::label_selector(&resources::selector(&names.cluster));
    Ok(pod_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// The broker pods as the roll sees them, against the StatefulSet as applied.
fn broker_views(pods: &[Pod], applied: &StatefulSet) -> Vec<PodView> {
    let update_revision = applied
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone());
    pods.iter()
        .filter_map(|p| pod_view(p, update_revision.as_deref()))
        .collect()
}

/// Carries out one step of the rolling restart.
async fn roll<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    step: &RollStep,
    pass: &mut Pass,
) -> Result<(), Error> {
    match step {
        RollStep::Done => {}
        RollStep::Restart(pod) => {
            let ns = kc.namespace().unwrap_or_default();
            let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            pod_api.delete(pod, &DeleteParams::default()).await?;
            let note = format!("restarting {pod} to apply the new configuration");
            ctx.event(kc, EventType::Normal, "RollingRestart", &note)
                .await;
            pass.rolling = Some(("RollingRestart".into(), note));
            pass.requeue_within(Duration::from_secs(10));
        }
        RollStep::Wait(why) => {
            pass.rolling = Some(("RollingRestart".into(), why.clone()));
            pass.requeue_within(Duration::from_secs(10));
        }
        RollStep::Blocked(why) => {
            ctx.event(kc, EventType::Warning, "RollBlocked", why).await;
            pass.rolling = Some(("RollBlocked".into(), why.clone()));
            pass.requeue_within(Duration::from_secs(30));
        }
    }
    Ok(())
}

/// After a scale-up, once every broker serves and has registered, new brokers get replicas.
async fn spread_after_scale_up<C: AdminConnector>(
    ctx: &Context<C>,
    kc: &KafkaCluster,
    brokers: &BrokerView<C::Admin>,
    views: &[PodView],
    step: &RollStep,
    replicas: i32,
    pass: &mut Pass,
) {
    let all_pods_ready =
        views.len() as i32 == replicas && views.iter().all(|v| v.ready && !v.stale);
    let (true, RollStep::Done, true, Ok(admin), Ok(state)) = (
        kc.spec.rebalance_on_scale,
        step,
        all_pods_ready,
        &brokers.admin,
        &brokers.state,
    ) else {
        return;
    };
    let ids: Vec<i32> = (0..replicas).collect();
    // Never while a scale-down is draining brokers: that would move replicas back.
    let scaling_down = replicas != kc.spec.replicas || pass.moving.is_some();
    let registered = !scaling_down && ids.iter().all(|b| state.brokers.contains(b));
    let empty = ids
        .iter()
        .any(|b| !state.partitions.iter().any(|p| p.replicas.contains(b)));
    if !(registered && empty && !state.partitions.is_empty()) {
        return;
    }
    match spread(admin, state, &ids).await {
        Ok(Some(note)) => {
            ctx.event(kc, EventType::Normal, "Rebalancing", &note).await;
            pass.moving = Some(("Rebalancing".into(), note));
        }
        Ok(None) => {}
        Err(e) => {
            ctx.event(kc, EventType::Warning, "RebalanceFailed", &e)
                .await;
            pass.degraded = Some(("RebalanceFailed".into(), e));
        }
    }
}

/// The status fields that describe the brokers, listeners and configuration.
fn fill_status<A>(
    st: &mut KafkaClusterStatus,
    kc: &KafkaCluster,
    views: &[PodView],
    brokers: &BrokerView<A>,
    sts: &StatefulSet,
) -> Result<(), Error> {
    // Leader counts only from a view that has every broker: a partial one would flip the status
    // between passes.
    let leaders = |id: i32| {
        brokers
            .state
            .as_ref()
            .ok()
            .filter(|s| views.iter().all(|v| s.brokers.contains(&v.ordinal)))
            .map(|s| s.partitions.iter().filter(|p| p.leader == id).count() as i32)
    };
    st.brokers = views
        .iter()
        .map(|v| BrokerStatus {
            id: v.ordinal,
            pod: v.name.clone(),
            leaders: leaders(v.ordinal),
            state: if v.terminating {
                "Rolling"
            } else if !v.ready {
                "Starting"
            } else if v.stale {
                "Stale"
            } else {
                "Ready"
            }
            .into(),
        })
        .collect();
    st.brokers.sort_by_key(|b| b.id);
    st.ready_brokers = views
        .iter()
        .filter(|v| v.ready && !v.stale && !v.terminating)
        .count() as i32;
    st.cluster_id = Some(resources::cluster_id(kc)?);
    st.config_hash = sts.spec.as_ref().and_then(|s| {
        s.template
            .metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get(resources::CONFIG_HASH_ANNOTATION)
            .cloned()
    });
    Ok(())
}

/// `status.listeners`: each client listener's bootstrap address, and on a TLS listener the
/// cluster CA certificate its clients trust.
pub fn listener_status(
    kc: &KafkaCluster,
    names: &Names,
    cluster_ca: &[String],
) -> Vec<ListenerStatus> {
    kc.spec
        .listeners
        .iter()
        .map(|l| ListenerStatus {
            name: l.name.clone(),
            bootstrap_servers: names.bootstrap_address(l.port),
            certificates: match l.tls {
                true => cluster_ca.to_vec(),
                false => Vec::new(),
            },
        })
        .collect()
}

/// Moves replicas off the brokers not in `keep`, unless moves are already in progress.
/// Returns what it is doing, for the condition and the event.
async fn drain<A: TopicAdmin>(
    admin: &A,
    state: &ClusterState,
    keep: &[i32],
) -> Result<String, String> {
    let ongoing = admin
        .ongoing_reassignments()
        .await
        .map_err(|e| e.to_string())?;
    if ongoing > 0 {
        return Ok(format!(
            "draining brokers for the scale-down: {ongoing} partition moves in progress"
        ));
    }
    let moves = placement::plan_drain(&state.partitions, keep)?;
    admin.reassign(&moves).await.map_err(|e| e.to_string())?;
    Ok(format!(
        "draining brokers for the scale-down: moving {} partitions onto brokers {keep:?}",
        moves.len()
    ))
}

/// Spreads replicas onto brokers that hold none; `None` when there is nothing to move.
async fn spread<A: TopicAdmin>(
    admin: &A,
    state: &ClusterState,
    brokers: &[i32],
) -> Result<Option<String>, String> {
    if admin
        .ongoing_reassignments()
        .await
        .map_err(|e| e.to_string())?
        > 0
    {
        return Ok(None);
    }
    let moves = placement::plan_spread(&state.partitions, brokers);
    if moves.is_empty() {
        return Ok(None);
    }
    admin.reassign(&moves).await.map_err(|e| e.to_string())?;
    Ok(Some(format!(
        "moving {} partitions to spread replicas over brokers {brokers:?}",
        moves.len()
    )))
}

fn pod_view(pod: &Pod, update_revision: Option<&str>) -> Option<PodView> {
    let name = pod.metadata.name.clone()?;
    let ordinal = name.rsplit('-').next()?.parse().ok()?;
    let ready = resources::pod_ready(pod);
    let revision = pod.labels().get("controller-revision-hash").cloned();
    let stale = match (revision.as_deref(), update_revision) {
        (Some(have), Some(want)) => have != want,
        _ => false,
    };
    Some(PodView {
        name,
        ordinal,
        ready,
        stale,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        waiting: container_waiting(pod),
    })
}

/// Why the pod is not running yet (`reason: message`), if a container waits: an init
/// container's reason first (as `Init:<reason>`, the way kubectl shows it), since the main
/// containers only say `PodInitializing` while one holds them.
fn container_waiting(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let waiting = |prefix: &'static str, statuses: Option<&Vec<ContainerStatus>>| {
        statuses.into_iter().flatten().find_map(move |c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            let reason = w.reason.clone().unwrap_or_else(|| "Waiting".into());
            if reason == "PodInitializing" && !prefix.is_empty() {
                return None;
            }
            Some(match w.message.as_deref() {
                Some(m) if !m.is_empty() => format!("{prefix}{reason}: {m}"),
                _ => format!("{prefix}{reason}"),
            })
        })
    };
    waiting("Init:", status.init_container_statuses.as_ref())
        .or_else(|| waiting("", status.container_statuses.as_ref()))
}

/// Writes the status the pass computed, when it differs from the one read. `status.rebalance`
/// is the sidecar's: it is carried over from what was read before comparing, and left out of the
/// merge patch, so the operator never clears it, never writes back an older one, and does not
/// patch just because the sidecar wrote.
async fn patch_status(
    api: &Api<KafkaCluster>,
    kc: &KafkaCluster,
    mut st: KafkaClusterStatus,
) -> Result<(), Error> {
    st.rebalance = kc.status.as_ref().and_then(|s| s.rebalance.clone());
    if kc.status.as_ref() == Some(&st) {
        return Ok(());
    }
    api.patch_status(
        &kc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(operator_status_patch(&st)?),
    )
    .await?;
    Ok(())
}

/// The merge patch of the operator's part of the status: everything but `rebalance`.
fn operator_status_patch(st: &KafkaClusterStatus) -> Result<serde_json::Value, Error> {
    let mut status = serde_json::to_value(st).map_err(|source| resources::BuildError::Serde {
        kind: "KafkaClusterStatus",
        source,
    })?;
    if let Some(fields) = status.as_object_mut() {
        fields.remove("rebalance");
        // A merge patch keeps what it leaves out: a proxy that went must be cleared by name.
        fields.entry("proxy").or_insert(serde_json::Value::Null);
    }
    Ok(json!({ "status": status }))
}

#[cfg(test)]
mod tests;
