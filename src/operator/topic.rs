//! The KafkaTopic reconciler: create, grow, keep configs as the spec says (Strimzi's one-way
//! model), delete through a finalizer, and report conflicts and Kafka errors as conditions.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::Event as Finalizer;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::crd::{
    KafkaCluster, KafkaTopic, KafkaTopicSpec, KafkaTopicStatus, DELETE_POLICY_ANNOTATION,
    TOPIC_FINALIZER,
};
use super::kafka::{AdminConnector, AdminError, TopicAdmin};
use super::status::{self, set_condition};
use super::{Context, Error};

/// What `sync_topic` did to bring the topic in line with its spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicSync {
    pub topic_id: String,
    pub partitions: i32,
    /// One line per change made, for events (`Created`, `PartitionsIncreased 3 -> 6`, …).
    pub actions: Vec<(String, String)>,
    /// A difference the operator cannot fix (replication factor), reported but not an error.
    pub warning: Option<(String, String)>,
}

/// Makes topic `name` in Kafka match `spec`: creates it, adds partitions, sets the configs the
/// spec names and removes every other config set on the topic (drift is reverted).
pub async fn sync_topic<A: TopicAdmin>(
    admin: &A,
    name: &str,
    spec: &KafkaTopicSpec,
) -> Result<TopicSync, AdminError> {
    let Some(state) = admin.describe_topic(name).await? else {
        let topic_id = admin
            .create_topic(name, spec.partitions, spec.replicas, &spec.config)
            .await?;
        return Ok(TopicSync {
            topic_id,
            partitions: spec.partitions,
            actions: vec![(
                "Created".into(),
                format!(
                    "created topic {name} with {} partitions and replication factor {}",
                    spec.partitions, spec.replicas
                ),
            )],
            warning: None,
        });
    };
    let mut sync = TopicSync {
        topic_id: state.topic_id.clone(),
        partitions: state.partitions,
        ..TopicSync::default()
    };
    if spec.partitions < state.partitions {
        return Err(AdminError {
            code: Some(crate::protocol::errors::INVALID_PARTITIONS),
            name: "INVALID_PARTITIONS".into(),
            message: format!(
                "topic {name} has {} partitions and spec.partitions is {}: partitions cannot be \
                 decreased",
                state.partitions, spec.partitions
            ),
        });
    }
    if spec.partitions > state.partitions {
        admin.create_partitions(name, spec.partitions).await?;
        sync.actions.push((
            "PartitionsIncreased".into(),
            format!("partitions {} -> {}", state.partitions, spec.partitions),
        ));
        sync.partitions = spec.partitions;
    }
    let set: std::collections::BTreeMap<String, String> = spec
        .config
        .iter()
        .filter(|(k, v)| state.configs.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let delete: Vec<String> = state
        .configs
        .keys()
        .filter(|k| !spec.config.contains_key(*k))
        .cloned()
        .collect();
    if !set.is_empty() || !delete.is_empty() {
        admin.alter_topic_configs(name, &set, &delete).await?;
        let mut what: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        what.extend(delete.iter().map(|k| format!("{k} (removed)")));
        sync.actions.push((
            "ConfigsChanged".into(),
            format!("configs: {}", what.join(", ")),
        ));
    }
    if state.replication_factor != spec.replicas {
        sync.warning = Some((
            "ReplicationFactorChangeNotSupported".into(),
            format!(
                "topic {name} has replication factor {}; spec.replicas {} cannot be applied: \
                 changing the replication factor is not supported yet",
                state.replication_factor, spec.replicas
            ),
        ));
    }
    Ok(sync)
}

/// The KafkaTopic that owns Kafka topic `name` in `cluster`: the oldest one, by creation time and
/// then by name. The others get a ResourceConflict condition and leave the topic alone.
pub fn owner_of<'a>(topics: &'a [KafkaTopic], cluster: &str, name: &str) -> Option<&'a KafkaTopic> {
    topics
        .iter()
        .filter(|t| t.spec.cluster_ref == cluster && t.kafka_name() == name)
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .min_by(|a, b| {
            let key = |t: &KafkaTopic| {
                (
                    t.metadata.creation_timestamp.as_ref().map(|ts| ts.0),
                    t.name_any(),
                )
            };
            key(a).cmp(&key(b))
        })
}

/// Reconciles one KafkaTopic (controller entry point), in a span naming it with a trace id.
#[tracing::instrument(skip_all, fields(
    namespace = kt.metadata.namespace.as_deref().unwrap_or(""),
    name = kt.metadata.name.as_deref().unwrap_or(""),
    trace_id = %super::trace_id(),
))]
pub async fn reconcile<C: AdminConnector>(
    kt: Arc<KafkaTopic>,
    ctx: Arc<Context<C>>,
) -> Result<Action, Error> {
    let pass_ctx = ctx.clone();
    super::finalized(&ctx, kt, TOPIC_FINALIZER, |api, event| async move {
        match event {
            Finalizer::Apply(kt) => apply(&kt, &pass_ctx, &api).await,
            Finalizer::Cleanup(kt) => cleanup(&kt, &pass_ctx, &api).await,
        }
    })
    .await
}

/// Outcome of one pass, written to status.
struct Outcome {
    ready: bool,
    reason: String,
    message: String,
    conflict: Option<String>,
    sync: Option<TopicSync>,
    requeue: Duration,
}

async fn apply<C: AdminConnector>(
    kt: &KafkaTopic,
    ctx: &Context<C>,
    api: &Api<KafkaTopic>,
) -> Result<Action, Error> {
    let name = kt.kafka_name();
    let outcome = decide(kt, &name, ctx, api).await?;
    if let Some(sync) = &outcome.sync {
        for (reason, note) in &sync.actions {
            ctx.event(kt, EventType::Normal, reason, note).await;
        }
    }
    if !outcome.ready {
        ctx.event(kt, EventType::Warning, &outcome.reason, &outcome.message)
            .await;
    }
    write_status(kt, &name, &outcome, api).await?;
    Ok(Action::requeue(outcome.requeue))
}

async fn decide<C: AdminConnector>(
    kt: &KafkaTopic,
    name: &str,
    ctx: &Context<C>,
    api: &Api<KafkaTopic>,
) -> Result<Outcome, Error> {
    let not_ready = |reason: &str, message: String, requeue| Outcome {
        ready: false,
        reason: reason.into(),
        message,
        conflict: None,
        sync: None,
        requeue,
    };
    let all = api.list(&ListParams::default()).await?.items;
    if let Some(owner) = owner_of(&all, &kt.spec.cluster_ref, name) {
        if owner.name_any() != kt.name_any() {
            let msg = format!(
                "topic {name} in cluster {} is managed by KafkaTopic {}, which is older",
                kt.spec.cluster_ref,
                owner.name_any()
            );
            let mut o = not_ready("ResourceConflict", msg.clone(), ctx.resync);
            o.conflict = Some(msg);
            return Ok(o);
        }
    }
    let ns = kt.namespace().unwrap_or_default();
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cluster) = clusters.get_opt(&kt.spec.cluster_ref).await? else {
        return Ok(not_ready(
            "ClusterNotFound",
            format!(
                "KafkaCluster {} not found in namespace {ns}",
                kt.spec.cluster_ref
            ),
            Duration::from_secs(30),
        ));
    };
    let admin = match ctx.connect(&cluster).await {
        Ok(a) => a,
        Err(e) => return Ok(not_ready(&e.reason(), e.message, Duration::from_secs(30))),
    };
    Ok(match sync_topic(&admin, name, &kt.spec).await {
        Ok(sync) => {
            let (reason, message) = sync.warning.clone().unwrap_or((
                "TopicReady".into(),
                format!("topic {name} matches the spec"),
            ));
            Outcome {
                ready: true,
                reason,
                message,
                conflict: None,
                sync: Some(sync),
                requeue: ctx.resync,
            }
        }
        Err(e) => not_ready(&e.reason(), e.message.clone(), Duration::from_secs(60)),
    })
}

async fn write_status(
    kt: &KafkaTopic,
    name: &str,
    o: &Outcome,
    api: &Api<KafkaTopic>,
) -> Result<(), Error> {
    let now = status::now_rfc3339();
    let generation = kt.metadata.generation;
    let mut st: KafkaTopicStatus = kt.status.clone().unwrap_or_default();
    set_condition(
        &mut st.conditions,
        status::READY,
        o.ready,
        &o.reason,
        o.message.clone(),
        generation,
        &now,
    );
    match &o.conflict {
        Some(msg) => set_condition(
            &mut st.conditions,
            status::RESOURCE_CONFLICT,
            true,
            "ResourceConflict",
            msg.clone(),
            generation,
            &now,
        ),
        None => status::clear_condition(&mut st.conditions, status::RESOURCE_CONFLICT),
    }
    st.observed_generation = generation;
    st.topic_name = Some(name.to_string());
    if let Some(sync) = &o.sync {
        st.topic_id = Some(sync.topic_id.clone());
        st.partitions = Some(sync.partitions);
    }
    if kt.status.as_ref() == Some(&st) {
        return Ok(());
    }
    api.patch_status(
        &kt.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": st })),
    )
    .await?;
    Ok(())
}

async fn cleanup<C: AdminConnector>(
    kt: &KafkaTopic,
    ctx: &Context<C>,
    api: &Api<KafkaTopic>,
) -> Result<Action, Error> {
    let name = kt.kafka_name();
    if kt
        .annotations()
        .get(DELETE_POLICY_ANNOTATION)
        .map(String::as_str)
        == Some("retain")
    {
        ctx.event(
            kt,
            EventType::Normal,
            "TopicRetained",
            &format!("kept topic {name} (delete-policy retain)"),
        )
        .await;
        return Ok(Action::await_change());
    }
    // A conflicting KafkaTopic never owned the topic: deleting it must not touch Kafka. Ownership
    // counts KafkaTopics being deleted too, so that when both go at once only the owner acts.
    let all = api.list(&ListParams::default()).await?.items;
    let mut everyone = all.clone();
    for t in everyone.iter_mut() {
        t.metadata.deletion_timestamp = None;
    }
    if let Some(owner) = owner_of(&everyone, &kt.spec.cluster_ref, &name) {
        if owner.meta().uid != kt.meta().uid {
            return Ok(Action::await_change());
        }
    }
    let ns = kt.namespace().unwrap_or_default();
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // With the cluster gone (or going) there is no topic left to delete, and waiting for it
    // would block namespace deletion forever (Strimzi #11901).
    let cluster = match clusters.get_opt(&kt.spec.cluster_ref).await? {
        Some(c) if c.metadata.deletion_timestamp.is_none() => c,
        _ => return Ok(Action::await_change()),
    };
    let admin = ctx.connect(&cluster).await.map_err(Error::Kafka)?;
    admin.delete_topic(&name).await.map_err(Error::Kafka)?;
    ctx.event(
        kt,
        EventType::Normal,
        "Deleted",
        &format!("deleted topic {name}"),
    )
    .await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests;
