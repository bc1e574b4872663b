//! The KafkaCluster reconciler: applies the brokers' objects with server-side apply, restarts
//! stale pods one at a time only when min.insync.replicas allows, refuses unsafe scale-downs.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde_json::json;

use super::crd::{BrokerStatus, KafkaCluster, KafkaClusterStatus, ListenerStatus};
use super::kafka::{AdminConnector, ClusterState, TopicAdmin};
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
        return RollStep::Wait(format!("waiting for pod {} to be ready", p.name));
    }
    let Some(state) = state else {
        return RollStep::Blocked("cannot reach the brokers to check min.insync.replicas".into());
    };
    // Under-replicated partitions mean a restarted broker has not caught up yet.
    if let Some(p) = state
        .partitions
        .iter()
        .find(|p| p.isr.len() < p.replicas.len())
    {
        return RollStep::Wait(format!(
            "waiting for {}-{} to catch up (ISR {:?} of replicas {:?})",
            p.topic, p.partition, p.isr, p.replicas
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

/// Reconciles one KafkaCluster (controller entry point).
pub async fn reconcile<C: AdminConnector>(
    kc: Arc<KafkaCluster>,
    ctx: Arc<Context<C>>,
) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_inner(&kc, &ctx).await;
    ctx.metrics
        .observe("KafkaCluster", started.elapsed(), result.is_ok());
    result
}

async fn reconcile_inner<C: AdminConnector>(
    kc: &KafkaCluster,
    ctx: &Context<C>,
) -> Result<Action, Error> {
    let names = Names::of(kc)?;
    let ns = names.namespace.clone();
    let client = ctx.client.clone();
    let clusters: Api<KafkaCluster> = Api::namespaced(client.clone(), &ns);
    let image = resources::image_of(kc, &ctx.default_image).to_string();
    let mut st = kc.status.clone().unwrap_or_default();
    let now = status::now_rfc3339();
    let generation = kc.metadata.generation;

    // Roles this version does not ship yet are left out and reported, never run to crash-loop.
    let mut unavailable = Vec::new();
    let mut effective = kc.clone();
    if effective.spec.rebalancer.enabled {
        effective.spec.rebalancer.enabled = false;
        unavailable.push(
            "spec.rebalancer.enabled: the rebalancer sidecar is not part of this version yet",
        );
    }
    if effective
        .spec
        .proxy
        .as_ref()
        .is_some_and(|p| p.replicas > 0)
    {
        unavailable.push("spec.proxy: the producer proxy is not part of this version yet");
    }
    let kc = &effective;

    // Objects first: a spec the operator cannot turn into objects is reported, not applied.
    let built = (|| -> Result<_, resources::BuildError> {
        Ok((
            resources::config_map(kc)?,
            resources::headless_service(kc)?,
            resources::bootstrap_service(kc)?,
            resources::pod_disruption_budget(kc)?,
            resources::statefulset(kc, &image)?,
        ))
    })();
    let (cm, headless, bootstrap, pdb, mut sts) = match built {
        Ok(objects) => objects,
        Err(resources::BuildError::Invalid(msg)) => {
            set_condition(
                &mut st.conditions,
                status::READY,
                false,
                "InvalidSpec",
                msg.clone(),
                generation,
                &now,
            );
            set_condition(
                &mut st.conditions,
                status::DEGRADED,
                true,
                "InvalidSpec",
                msg.clone(),
                generation,
                &now,
            );
            ctx.event(kc, EventType::Warning, "InvalidSpec", &msg).await;
            st.observed_generation = generation;
            patch_status(&clusters, kc, st).await?;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e.into()),
    };

    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let existing = sts_api.get_opt(&names.statefulset()).await?;
    let current = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.replicas)
        .unwrap_or(0);

    // The brokers' view: partitions, ISR, controller. Only needed once brokers exist.
    let admin = if current > 0 {
        ctx.connector
            .connect(&ctx.bootstrap_of(kc)?)
            .await
            .map_err(|e| e.to_string())
    } else {
        Err("no brokers yet".to_string())
    };
    let cluster_state = match &admin {
        Ok(a) => a.cluster_state().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.clone()),
    };

    let mut degraded: Option<(String, String)> =
        (!unavailable.is_empty()).then(|| ("RoleUnavailable".to_string(), unavailable.join("; ")));
    // Partition moves in progress for a scale (drain before a scale-down, spread after a scale-up).
    let mut moving: Option<(String, String)> = None;
    let mut replicas = kc.spec.replicas;
    if replicas < current {
        let verdict = match &cluster_state {
            Ok(state) => check_scale_down(current, replicas, state),
            Err(e) => Err(format!(
                "cannot scale down from {current} to {replicas} brokers: cannot check which \
                 brokers hold replicas: {e}"
            )),
        };
        if let Err(why) = verdict {
            replicas = current;
            match (&admin, &cluster_state) {
                (Ok(admin), Ok(state)) if kc.spec.rebalance_on_scale => {
                    let keep: Vec<i32> = (0..kc.spec.replicas).collect();
                    match drain(admin, state, &keep).await {
                        Ok(note) => {
                            ctx.event(kc, EventType::Normal, "Draining", &note).await;
                            moving = Some(("Draining".into(), note));
                        }
                        Err(e) => {
                            degraded = Some(("ScaleDownBlocked".into(), format!("{why}; {e}")))
                        }
                    }
                }
                _ => degraded = Some(("ScaleDownBlocked".into(), why)),
            }
        }
    }
    if let Some(spec) = sts.spec.as_mut() {
        spec.replicas = Some(replicas);
    }

    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cm_api
        .patch(&names.config_map(), &pp, &Patch::Apply(&cm))
        .await?;
    let svc_api: Api<Service> = Api::namespaced(client.clone(), &ns);
    svc_api
        .patch(&names.headless_service(), &pp, &Patch::Apply(&headless))
        .await?;
    svc_api
        .patch(&names.bootstrap_service(), &pp, &Patch::Apply(&bootstrap))
        .await?;
    let pdb_api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    pdb_api
        .patch(&names.pdb(), &pp, &Patch::Apply(&pdb))
        .await?;
    let applied = sts_api
        .patch(&names.statefulset(), &pp, &Patch::Apply(&sts))
        .await?;
    if current != replicas {
        ctx.event(
            kc,
            EventType::Normal,
            "Scaled",
            &format!("brokers {current} -> {replicas}"),
        )
        .await;
    }

    // The rolling restart: pods whose revision is not the StatefulSet's update revision.
    let update_revision = applied
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone());
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = resources::selector(&names.cluster)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods = pod_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let views: Vec<PodView> = pods
        .iter()
        .filter_map(|p| pod_view(p, update_revision.as_deref()))
        .collect();
    let step = next_roll_step(&views, current.min(replicas), cluster_state.as_ref().ok());
    let mut requeue = ctx.resync;
    let mut rolling: Option<(String, String)> = None;
    match &step {
        RollStep::Done => {}
        RollStep::Restart(pod) => {
            pod_api.delete(pod, &DeleteParams::default()).await?;
            let note = format!("restarting {pod} to apply the new configuration");
            ctx.event(kc, EventType::Normal, "RollingRestart", &note)
                .await;
            rolling = Some(("RollingRestart".into(), note));
            requeue = Duration::from_secs(10);
        }
        RollStep::Wait(why) => {
            rolling = Some(("RollingRestart".into(), why.clone()));
            requeue = Duration::from_secs(10);
        }
        RollStep::Blocked(why) => {
            ctx.event(kc, EventType::Warning, "RollBlocked", why).await;
            rolling = Some(("RollBlocked".into(), why.clone()));
            requeue = Duration::from_secs(30);
        }
    }

    // After a scale-up, once every broker serves and has registered, new brokers get replicas.
    let all_pods_ready =
        views.len() as i32 == replicas && views.iter().all(|v| v.ready && !v.stale);
    if let (true, RollStep::Done, true, Ok(admin), Ok(state)) = (
        kc.spec.rebalance_on_scale,
        &step,
        all_pods_ready,
        &admin,
        &cluster_state,
    ) {
        let brokers: Vec<i32> = (0..replicas).collect();
        // Never while a scale-down is draining brokers: that would move replicas back.
        let scaling_down = replicas != kc.spec.replicas || moving.is_some();
        let registered = !scaling_down && brokers.iter().all(|b| state.brokers.contains(b));
        let empty = brokers
            .iter()
            .any(|b| !state.partitions.iter().any(|p| p.replicas.contains(b)));
        if registered && empty && !state.partitions.is_empty() {
            match spread(admin, state, &brokers).await {
                Ok(Some(note)) => {
                    ctx.event(kc, EventType::Normal, "Rebalancing", &note).await;
                    moving = Some(("Rebalancing".into(), note));
                }
                Ok(None) => {}
                Err(e) => {
                    ctx.event(kc, EventType::Warning, "RebalanceFailed", &e)
                        .await;
                    degraded = Some(("RebalanceFailed".into(), e));
                }
            }
        }
    }
    if moving.is_some() {
        requeue = requeue.min(Duration::from_secs(15));
    }
    let rolling = rolling.or(moving);

    // Status.
    // Leader counts only from a view that has every broker: a partial one would flip the status
    // between passes.
    let leaders = |id: i32| {
        cluster_state
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
    st.listeners = kc
        .spec
        .listeners
        .iter()
        .map(|l| ListenerStatus {
            name: l.name.clone(),
            bootstrap_servers: names.bootstrap_address(l.port),
        })
        .collect();
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
    st.observed_generation = generation;

    let all_ready = st.ready_brokers == kc.spec.replicas && rolling.is_none();
    let (ready_reason, ready_msg) = if all_ready && degraded.is_none() {
        (
            "Ready".to_string(),
            format!("{} brokers ready", st.ready_brokers),
        )
    } else if let Some((r, m)) = &degraded {
        (r.clone(), m.clone())
    } else if let Some((r, m)) = &rolling {
        (r.clone(), m.clone())
    } else {
        (
            "BrokersNotReady".to_string(),
            format!("{} of {} brokers ready", st.ready_brokers, kc.spec.replicas),
        )
    };
    set_condition(
        &mut st.conditions,
        status::READY,
        all_ready && degraded.is_none(),
        &ready_reason,
        ready_msg,
        generation,
        &now,
    );
    match &rolling {
        Some((r, m)) => set_condition(
            &mut st.conditions,
            status::RECONCILING,
            true,
            r,
            m.clone(),
            generation,
            &now,
        ),
        None if !all_ready => set_condition(
            &mut st.conditions,
            status::RECONCILING,
            true,
            "BrokersStarting",
            format!("{} of {} brokers ready", st.ready_brokers, kc.spec.replicas),
            generation,
            &now,
        ),
        None => set_condition(
            &mut st.conditions,
            status::RECONCILING,
            false,
            "Reconciled",
            "",
            generation,
            &now,
        ),
    }
    match &degraded {
        Some((r, m)) => {
            ctx.event(kc, EventType::Warning, r, m).await;
            set_condition(
                &mut st.conditions,
                status::DEGRADED,
                true,
                r,
                m.clone(),
                generation,
                &now,
            )
        }
        None => set_condition(
            &mut st.conditions,
            status::DEGRADED,
            false,
            "AsExpected",
            "",
            generation,
            &now,
        ),
    }
    if !all_ready {
        requeue = requeue.min(Duration::from_secs(15));
    }
    patch_status(&clusters, kc, st).await?;
    Ok(Action::requeue(requeue))
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
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
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
    })
}

async fn patch_status(
    api: &Api<KafkaCluster>,
    kc: &KafkaCluster,
    st: KafkaClusterStatus,
) -> Result<(), Error> {
    if kc.status.as_ref() == Some(&st) {
        return Ok(());
    }
    api.patch_status(
        &kc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": st })),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
