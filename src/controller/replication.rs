//! What the controller decides about topics and partitions, as Kafka's
//! ReplicationControlManager does: the records for creating and deleting topics, adding
//! partitions, elections when brokers come and go, preferred and unclean elections,
//! reassignments and ISR changes. Pure functions of the image; the caller commits the records.

use std::collections::{BTreeMap, BTreeSet};

use super::partition_change::{Election, PartitionChangeBuilder};
use super::placement::{self, PlacementRandom, UsableBroker};
use super::{
    is_internal_topic, unify_collision_chars, validate_topic_configs, validate_topic_name,
    ControllerError,
};
use crate::config::LogConfig;
use crate::metadata::image::{MetadataImage, PartitionImage, TopicImage};
use crate::metadata::records::{MetadataRecord, RESOURCE_TOPIC};
use crate::protocol::errors;
use crate::storage::KafkaUuid;

/// The broker-level defaults topic decisions use.
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    pub log: LogConfig,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
}

impl TopicDefaults {
    /// `unclean.leader.election.enable` for a topic: its override, else the broker default.
    pub fn unclean_enabled(&self, image: &MetadataImage, topic: &str) -> bool {
        image
            .topic_configs(topic)
            .get("unclean.leader.election.enable")
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(self.log.unclean_leader_election_enable)
    }

    fn election_for(&self, image: &MetadataImage, topic: &str) -> Election {
        if self.unclean_enabled(image, topic) {
            Election::Unclean
        } else {
            Election::Online
        }
    }
}

fn err(code: i16, message: impl Into<String>) -> ControllerError {
    ControllerError::new(code, message)
}

/// A CreateTopics entry.
#[derive(Debug, Clone, Default)]
pub struct TopicSpec {
    pub name: String,
    /// -1 for `num.partitions`.
    pub num_partitions: i32,
    /// -1 for `default.replication.factor`.
    pub replication_factor: i16,
    /// Explicit replica lists by partition index (`--replica-assignment`).
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: BTreeMap<String, String>,
}

/// A topic as it will be created.
#[derive(Debug, Clone)]
pub struct CreatedTopic {
    pub id: KafkaUuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// Brokers placement may use: registered, unfenced and not in controlled shutdown. (Kafka
/// also places replicas on fenced brokers; a fenced broker is most likely down, so evenkeel
/// does not start a partition under-replicated.)
pub fn usable_brokers(image: &MetadataImage) -> Vec<UsableBroker> {
    image
        .brokers()
        .filter(|b| b.is_active())
        .map(|b| UsableBroker {
            id: b.id,
            rack: b.rack.clone(),
            fenced: b.fenced,
        })
        .collect()
}

/// Checks a topic name against the image: legal, new, not colliding, not internal (unless
/// `internal_ok`, for the broker's own `__consumer_offsets`).
pub fn validate_new_name(
    image: &MetadataImage,
    name: &str,
    internal_ok: bool,
) -> Result<(), ControllerError> {
    validate_topic_name(name)?;
    if image.topic(name).is_some() {
        return Err(err(
            errors::TOPIC_ALREADY_EXISTS,
            format!("Topic '{name}' already exists."),
        ));
    }
    let unified = unify_collision_chars(name);
    if let Some(other) = image
        .topics()
        .find(|o| unify_collision_chars(&o.name) == unified)
    {
        return Err(err(
            errors::INVALID_TOPIC_EXCEPTION,
            format!(
                "Topic '{name}' collides with existing topic: {}",
                other.name
            ),
        ));
    }
    if is_internal_topic(name) && !internal_ok {
        return Err(err(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("Creation of internal topic {name} is prohibited."),
        ));
    }
    Ok(())
}

/// Kafka's `validateManualPartitionAssignment`: a non-empty list of registered, distinct
/// brokers of the expected length.
fn validate_assignment(
    image: &MetadataImage,
    replicas: &[i32],
    expected_rf: Option<usize>,
) -> Result<(), ControllerError> {
    let bad = |m: String| err(errors::INVALID_REPLICA_ASSIGNMENT, m);
    if replicas.is_empty() {
        return Err(bad(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    for (i, b) in sorted.iter().enumerate() {
        if image.broker(*b).is_none() {
            return Err(bad(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
        if i > 0 && sorted[i - 1] == *b {
            return Err(bad(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
    }
    if let Some(rf) = expected_rf {
        if replicas.len() != rf {
            return Err(bad(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                replicas.len()
            )));
        }
    }
    Ok(())
}

/// The PartitionRecord of a new partition: the ISR is its active replicas, the leader the
/// first of them.
fn new_partition(
    image: &MetadataImage,
    topic_id: KafkaUuid,
    partition: i32,
    replicas: Vec<i32>,
    rf_for_message: usize,
) -> Result<MetadataRecord, ControllerError> {
    let isr: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|r| image.is_active(*r))
        .collect();
    let Some(&leader) = isr.first() else {
        return Err(err(
            errors::INVALID_REPLICATION_FACTOR,
            format!(
                "Unable to replicate the partition {rf_for_message} time(s): All brokers are currently fenced or in controlled shutdown."
            ),
        ));
    };
    Ok(MetadataRecord::Partition {
        partition_id: partition,
        topic_id,
        replicas,
        isr,
        removing_replicas: vec![],
        adding_replicas: vec![],
        leader,
        leader_epoch: 0,
        partition_epoch: 0,
    })
}

/// Replica lists for a new topic: the explicit assignment, or placement.
fn topic_assignment(
    image: &MetadataImage,
    spec: &TopicSpec,
    defaults: &TopicDefaults,
    rng: &mut dyn PlacementRandom,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    if !spec.assignments.is_empty() {
        if spec.replication_factor != -1 {
            return Err(err(
                errors::INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not set to -1.",
            ));
        }
        if spec.num_partitions != -1 {
            return Err(err(
                errors::INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ));
        }
        let mut by_index: BTreeMap<i32, &Vec<i32>> = BTreeMap::new();
        for (p, replicas) in &spec.assignments {
            if by_index.insert(*p, replicas).is_some() {
                return Err(err(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!("Found multiple manual partition assignments for partition {p}"),
                ));
            }
        }
        let mut rf = None;
        for (i, (p, replicas)) in by_index.iter().enumerate() {
            if *p != i as i32 {
                return Err(err(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    "partitions should be a consecutive 0-based integer sequence",
                ));
            }
            validate_assignment(image, replicas, rf)?;
            rf.get_or_insert(replicas.len());
            if !replicas.iter().any(|r| image.is_active(*r)) {
                return Err(err(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."
                    ),
                ));
            }
        }
        return Ok(by_index.into_values().cloned().collect());
    }
    let partitions = match spec.num_partitions {
        -1 => defaults.num_partitions,
        n if n <= 0 => {
            return Err(err(
                errors::INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            ))
        }
        n => n,
    };
    let rf = match spec.replication_factor {
        -1 => defaults.default_replication_factor,
        n if n <= 0 => {
            return Err(err(
                errors::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ))
        }
        n => n,
    };
    placement::place(rng, &usable_brokers(image), &[], partitions, rf as i32).map_err(|e| {
        err(
            errors::INVALID_REPLICATION_FACTOR,
            format!("Unable to replicate the partition {rf} time(s): {e}"),
        )
    })
}

/// The records of a new topic: TopicRecord, ConfigRecords, PartitionRecords.
pub fn create_topic(
    image: &MetadataImage,
    spec: &TopicSpec,
    defaults: &TopicDefaults,
    rng: &mut dyn PlacementRandom,
    internal_ok: bool,
) -> Result<(Vec<MetadataRecord>, CreatedTopic), ControllerError> {
    validate_new_name(image, &spec.name, internal_ok)?;
    let assignment = topic_assignment(image, spec, defaults, rng)?;
    validate_topic_configs(&spec.configs, &defaults.log)?;
    let id = KafkaUuid::random();
    let mut recs = vec![MetadataRecord::Topic {
        name: spec.name.clone(),
        topic_id: id,
    }];
    for (k, v) in &spec.configs {
        recs.push(MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: spec.name.clone(),
            name: k.clone(),
            value: Some(v.clone()),
        });
    }
    let rf = assignment.first().map_or(0, Vec::len);
    for (p, replicas) in assignment.iter().enumerate() {
        recs.push(new_partition(image, id, p as i32, replicas.clone(), rf)?);
    }
    Ok((
        recs,
        CreatedTopic {
            id,
            num_partitions: assignment.len() as i32,
            replication_factor: rf as i16,
            configs: spec.configs.clone(),
        },
    ))
}

/// The RemoveTopicRecord for a topic named or identified.
pub fn delete_topic(
    image: &MetadataImage,
    name: &str,
) -> Result<(MetadataRecord, KafkaUuid), ControllerError> {
    let Some(t) = image.topic(name) else {
        return Err(err(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        ));
    };
    if is_internal_topic(name) {
        return Err(err(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("Deletion of internal topic {name} is prohibited."),
        ));
    }
    Ok((MetadataRecord::RemoveTopic { topic_id: t.id }, t.id))
}

/// The PartitionRecords that grow a topic to `count` partitions.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
    rng: &mut dyn PlacementRandom,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let Some(t) = image.topic(name) else {
        return Err(err(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Topic '{name}' does not exist."),
        ));
    };
    let current = t.partitions.len() as i32;
    if count < current {
        return Err(err(
            errors::INVALID_PARTITIONS,
            format!(
                "The topic {name} currently has {current} partition(s); {count} would not be an increase."
            ),
        ));
    }
    if count == current {
        return Err(err(
            errors::INVALID_PARTITIONS,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    let additional = count - current;
    let rf = t.partitions.values().next().map_or(1, |p| p.replicas.len());
    let lists = match assignments {
        Some(a) => {
            if a.len() as i32 != additional {
                return Err(err(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                        a.len()
                    ),
                ));
            }
            for (i, replicas) in a.iter().enumerate() {
                validate_assignment(image, replicas, Some(rf))?;
                if !replicas.iter().any(|r| image.is_active(*r)) {
                    return Err(err(
                        errors::INVALID_REPLICA_ASSIGNMENT,
                        format!(
                            "All brokers specified in the manual partition assignment for partition {} are fenced or in controlled shutdown.",
                            current + i as i32
                        ),
                    ));
                }
            }
            a.to_vec()
        }
        None => {
            let existing: Vec<Vec<i32>> =
                t.partitions.values().map(|p| p.replicas.clone()).collect();
            placement::place(
                rng,
                &usable_brokers(image),
                &existing,
                additional,
                rf as i32,
            )
            .map_err(|e| err(errors::INVALID_REPLICATION_FACTOR, e.0))?
        }
    };
    lists
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| new_partition(image, t.id, current + i as i32, replicas, rf))
        .collect()
}

/// Elections for every partition `broker` is in the ISR of, as it leaves (fenced, shut down or
/// unregistered): it is removed from the ISR and may not lead.
pub fn remove_from_isrs(
    image: &MetadataImage,
    broker: i32,
    defaults: &TopicDefaults,
) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        let election = defaults.election_for(image, &t.name);
        for (id, p) in &t.partitions {
            if !p.isr.contains(&broker) && p.leader != broker {
                continue;
            }
            let isr = p.isr.iter().copied().filter(|r| *r != broker).collect();
            let change =
                PartitionChangeBuilder::new(p, t.id, *id, |r| r != broker && image.is_active(r))
                    .election(election)
                    .target_isr(isr)
                    .build();
            if let Some(c) = change {
                out.push(MetadataRecord::PartitionChange(c));
            }
        }
    }
    out
}

/// Elections for leaderless partitions once `broker` is back (unfenced).
pub fn elect_with_returning(
    image: &MetadataImage,
    broker: i32,
    defaults: &TopicDefaults,
) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        let election = defaults.election_for(image, &t.name);
        for (id, p) in &t.partitions {
            if p.has_leader() || !p.replicas.contains(&broker) {
                continue;
            }
            let change =
                PartitionChangeBuilder::new(p, t.id, *id, |r| r == broker || image.is_active(r))
                    .election(election)
                    .build();
            if let Some(c) = change {
                out.push(MetadataRecord::PartitionChange(c));
            }
        }
    }
    out
}

/// One partition's answer to ElectLeaders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionOutcome {
    pub topic: String,
    pub partition: i32,
    pub code: i16,
    pub message: Option<String>,
}

/// ElectLeaders: PREFERRED or UNCLEAN for the named partitions (`None`: all, and partitions
/// needing no election are left out of the answer).
pub fn elect_leaders(
    image: &MetadataImage,
    election: Election,
    partitions: Option<&[(String, i32)]>,
) -> (Vec<ElectionOutcome>, Vec<MetadataRecord>) {
    let mut outcomes = Vec::new();
    let mut recs = Vec::new();
    let all: Vec<(String, i32)>;
    let wanted = match partitions {
        Some(p) => p,
        None => {
            all = image
                .topics()
                .flat_map(|t| t.partitions.keys().map(|p| (t.name.clone(), *p)))
                .collect();
            &all
        }
    };
    for (topic, partition) in wanted {
        let outcome = |code: i16, message: Option<String>| ElectionOutcome {
            topic: topic.clone(),
            partition: *partition,
            code,
            message,
        };
        let Some(t) = image.topic(topic) else {
            outcomes.push(outcome(
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(format!("No such topic as {topic}")),
            ));
            continue;
        };
        let Some(p) = t.partitions.get(partition) else {
            outcomes.push(outcome(
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(format!("No such partition as {topic}-{partition}")),
            ));
            continue;
        };
        let not_needed = match election {
            Election::Preferred => p.preferred_leader() == Some(p.leader),
            _ => p.has_leader(),
        };
        if not_needed {
            if partitions.is_some() {
                outcomes.push(outcome(
                    errors::ELECTION_NOT_NEEDED,
                    Some("Leader election not needed for topic partition.".into()),
                ));
            }
            continue;
        }
        let change = PartitionChangeBuilder::new(p, t.id, *partition, |r| image.is_active(r))
            .election(election)
            .build();
        match change {
            Some(c) => {
                recs.push(MetadataRecord::PartitionChange(c));
                outcomes.push(outcome(errors::NONE, None));
            }
            None if election == Election::Preferred => outcomes.push(outcome(
                errors::PREFERRED_LEADER_NOT_AVAILABLE,
                Some("The preferred leader was not available.".into()),
            )),
            None => outcomes.push(outcome(
                errors::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                Some("Eligible topic partition leaders are not available.".into()),
            )),
        }
    }
    (outcomes, recs)
}

/// Auto leader rebalance: a preferred election for every partition not led by its first
/// replica, where that replica can lead (at most `max` records).
/// Leaderless partitions of topics that allow `unclean.leader.election.enable`: a live
/// replica outside the ISR takes over (what was only on the lost ISR is gone). Kafka's
/// controller does this on a timer, so enabling the config brings such partitions back.
pub fn unclean_elections(
    image: &MetadataImage,
    defaults: &TopicDefaults,
    max: usize,
) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        if !defaults.unclean_enabled(image, &t.name) {
            continue;
        }
        for (id, p) in &t.partitions {
            if out.len() >= max {
                return out;
            }
            if p.leader >= 0 {
                continue;
            }
            if let Some(c) = PartitionChangeBuilder::new(p, t.id, *id, |r| image.is_active(r))
                .election(Election::Unclean)
                .build()
            {
                out.push(MetadataRecord::PartitionChange(c));
            }
        }
    }
    out
}

pub fn rebalance_preferred_leaders(image: &MetadataImage, max: usize) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for t in image.topics() {
        for (id, p) in &t.partitions {
            if out.len() >= max {
                return out;
            }
            if p.preferred_leader() == Some(p.leader) {
                continue;
            }
            if let Some(c) = PartitionChangeBuilder::new(p, t.id, *id, |r| image.is_active(r))
                .election(Election::Preferred)
                .build()
            {
                out.push(MetadataRecord::PartitionChange(c));
            }
        }
    }
    out
}

/// One partition of AlterPartitionReassignments: target replicas, or `None` to cancel.
#[derive(Debug, Clone)]
pub struct ReassignmentSpec {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

/// AlterPartitionReassignments on the metadata: validates every partition first and writes
/// nothing unless all are valid (Kafka applies the request atomically).
pub fn alter_reassignments(
    image: &MetadataImage,
    specs: &[ReassignmentSpec],
    defaults: &TopicDefaults,
) -> (Vec<ElectionOutcome>, Vec<MetadataRecord>) {
    let mut outcomes = Vec::new();
    let mut recs = Vec::new();
    for s in specs {
        let outcome = |r: Result<(), ControllerError>| {
            let (code, message) = match r {
                Ok(()) => (errors::NONE, None),
                Err(e) => (e.code, Some(e.message)),
            };
            ElectionOutcome {
                topic: s.topic.clone(),
                partition: s.partition,
                code,
                message,
            }
        };
        match reassign_one(image, s, defaults) {
            Ok(Some(r)) => {
                recs.push(r);
                outcomes.push(outcome(Ok(())));
            }
            Ok(None) => outcomes.push(outcome(Ok(()))),
            Err(e) => outcomes.push(outcome(Err(e))),
        }
    }
    if outcomes.iter().any(|o| o.code != errors::NONE) {
        recs.clear();
    }
    (outcomes, recs)
}

fn lookup<'a>(
    image: &'a MetadataImage,
    topic: &str,
    partition: i32,
) -> Result<(&'a TopicImage, &'a PartitionImage), ControllerError> {
    let t = image.topic(topic).ok_or_else(|| {
        err(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Unable to find a topic named {topic}."),
        )
    })?;
    let p = t.partitions.get(&partition).ok_or_else(|| {
        err(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Unable to find partition {topic}:{partition}."),
        )
    })?;
    Ok((t, p))
}

fn reassign_one(
    image: &MetadataImage,
    s: &ReassignmentSpec,
    defaults: &TopicDefaults,
) -> Result<Option<MetadataRecord>, ControllerError> {
    let (t, p) = lookup(image, &s.topic, s.partition)?;
    let acceptable = |r: i32| image.is_active(r);
    let Some(target) = &s.replicas else {
        // Cancel: back to the replicas before the reassignment.
        if !p.is_reassigning() {
            return Err(err(
                errors::NO_REASSIGNMENT_IN_PROGRESS,
                "No partition reassignment is in progress.",
            ));
        }
        let replicas: Vec<i32> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| !p.adding_replicas.contains(r))
            .collect();
        let mut isr: Vec<i32> = p
            .isr
            .iter()
            .copied()
            .filter(|r| !p.adding_replicas.contains(r))
            .collect();
        let mut election = defaults.election_for(image, &t.name);
        if isr.is_empty() {
            if election != Election::Unclean {
                return Err(err(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "Unable to revert partition assignment for {}:{} because it would require an unclean leader election.",
                        s.topic, s.partition
                    ),
                ));
            }
            isr = replicas.first().copied().into_iter().collect();
            election = Election::Unclean;
        }
        return Ok(
            PartitionChangeBuilder::new(p, t.id, s.partition, acceptable)
                .election(election)
                .target_replicas(replicas)
                .target_isr(isr)
                .target_adding(vec![])
                .target_removing(vec![])
                .build()
                .map(MetadataRecord::PartitionChange),
        );
    };
    validate_assignment(image, target, None)?;
    let current: BTreeSet<i32> = p.replicas.iter().copied().collect();
    let wanted: BTreeSet<i32> = target.iter().copied().collect();
    let removing: Vec<i32> = current.difference(&wanted).copied().collect();
    let adding: Vec<i32> = wanted.difference(&current).copied().collect();
    let mut replicas = target.clone();
    replicas.extend(&removing);
    Ok(
        PartitionChangeBuilder::new(p, t.id, s.partition, acceptable)
            .election(defaults.election_for(image, &t.name))
            .target_replicas(replicas)
            .target_removing(removing)
            .target_adding(adding)
            .build()
            .map(MetadataRecord::PartitionChange),
    )
}

/// The partitions being reassigned, by topic (ListPartitionReassignments).
pub fn list_reassignments(
    image: &MetadataImage,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Vec<(String, Vec<(i32, PartitionImage)>)> {
    let mut out = Vec::new();
    let mut push = |t: &TopicImage, only: Option<&[i32]>| {
        let parts: Vec<(i32, PartitionImage)> = t
            .partitions
            .iter()
            .filter(|(id, p)| p.is_reassigning() && only.is_none_or(|o| o.contains(id)))
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        if !parts.is_empty() {
            out.push((t.name.clone(), parts));
        }
    };
    match topics {
        None => image.topics().for_each(|t| push(t, None)),
        Some(list) => {
            for (name, parts) in list {
                if let Some(t) = image.topic(name) {
                    push(t, Some(parts));
                }
            }
        }
    }
    out
}

/// One partition of an AlterPartition request from its leader.
#[derive(Debug, Clone)]
pub struct IsrChange {
    pub topic_id: KafkaUuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
    /// The broker epoch of each `new_isr` member as the leader saw it (AlterPartition v3,
    /// KIP-903), -1 where not given.
    pub new_isr_epochs: Vec<i64>,
}

/// Whether a new ISR member's broker epoch, as the leader gave it, is not the registration the
/// controller has (the member restarted since it fetched: KIP-903).
fn stale_broker_epoch(image: &MetadataImage, c: &IsrChange) -> bool {
    c.new_isr
        .iter()
        .zip(&c.new_isr_epochs)
        .any(|(r, e)| *e >= 0 && image.broker(*r).is_some_and(|b| b.epoch != *e))
}

/// AlterPartition: validates a leader's ISR change against the current epochs (a stale one is
/// refused) and builds its record, completing a reassignment the new ISR finishes. Returns the
/// error code per partition and the records.
pub fn alter_isr(
    image: &MetadataImage,
    broker: i32,
    changes: &[IsrChange],
) -> (Vec<(i16, Option<PartitionImage>)>, Vec<MetadataRecord>) {
    let mut results = Vec::new();
    let mut recs = Vec::new();
    for c in changes {
        let Some(t) = image.topic_by_id(&c.topic_id) else {
            results.push((errors::UNKNOWN_TOPIC_OR_PARTITION, None));
            continue;
        };
        let Some(p) = t.partitions.get(&c.partition) else {
            results.push((errors::UNKNOWN_TOPIC_OR_PARTITION, None));
            continue;
        };
        let code = if c.leader_epoch > p.leader_epoch || c.partition_epoch > p.partition_epoch {
            errors::NOT_CONTROLLER
        } else if c.leader_epoch < p.leader_epoch {
            errors::FENCED_LEADER_EPOCH
        } else if broker != p.leader {
            errors::INVALID_REQUEST
        } else if c.partition_epoch < p.partition_epoch {
            errors::INVALID_UPDATE_VERSION
        } else if !c.new_isr.contains(&p.leader)
            || c.new_isr.iter().any(|r| !p.replicas.contains(r))
        {
            errors::INVALID_REQUEST
        } else if c
            .new_isr
            .iter()
            .any(|r| *r != broker && !image.is_active(*r))
            || stale_broker_epoch(image, c)
        {
            errors::INELIGIBLE_REPLICA
        } else {
            errors::NONE
        };
        if code != errors::NONE {
            results.push((code, None));
            continue;
        }
        let change = PartitionChangeBuilder::new(p, t.id, c.partition, |r| image.is_active(r))
            .target_isr(c.new_isr.clone())
            .build();
        let mut after = p.clone();
        if let Some(ch) = change {
            after.merge(&ch);
            let led_elsewhere = after.leader != broker;
            recs.push(MetadataRecord::PartitionChange(ch));
            if led_elsewhere {
                results.push((errors::NEW_LEADER_ELECTED, None));
                continue;
            }
        }
        results.push((errors::NONE, Some(after)));
    }
    (results, recs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::BrokerRegistration;
    use rand::SeedableRng;

    fn image_with_brokers(ids: &[(i32, Option<&str>)]) -> MetadataImage {
        let mut img = MetadataImage::empty();
        for (i, (id, rack)) in ids.iter().enumerate() {
            img.apply(
                &MetadataRecord::RegisterBroker(BrokerRegistration {
                    broker_id: *id,
                    incarnation_id: KafkaUuid::random(),
                    broker_epoch: i as i64,
                    endpoints: vec![],
                    features: vec![],
                    rack: rack.map(String::from),
                    fenced: false,
                    in_controlled_shutdown: false,
                }),
                i as i64,
            );
        }
        img
    }

    fn defaults() -> TopicDefaults {
        TopicDefaults {
            log: LogConfig::default(),
            num_partitions: 1,
            default_replication_factor: 1,
        }
    }

    fn apply(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            let at = img.next_offset();
            img.apply(r, at);
        }
    }

    fn create(img: &mut MetadataImage, name: &str, partitions: i32, rf: i16) {
        let spec = TopicSpec {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (recs, _) = create_topic(img, &spec, &defaults(), &mut rng, false).unwrap();
        apply(img, &recs);
    }

    #[test]
    fn created_partitions_start_with_every_replica_in_sync_and_the_first_leading() {
        let mut img = image_with_brokers(&[(1, None), (2, None), (3, None)]);
        create(&mut img, "t", 6, 3);
        let t = img.topic("t").unwrap();
        assert_eq!(t.partitions.len(), 6);
        let mut leaders = BTreeSet::new();
        for p in t.partitions.values() {
            assert_eq!(p.isr, p.replicas);
            assert_eq!(p.leader, p.replicas[0]);
            leaders.insert(p.leader);
        }
        assert_eq!(leaders.len(), 3, "leaders spread over every broker");
    }

    #[test]
    fn a_replication_factor_above_the_brokers_is_refused_with_kafkas_message() {
        let img = image_with_brokers(&[(1, None)]);
        let spec = TopicSpec {
            name: "t".into(),
            num_partitions: 1,
            replication_factor: 3,
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let e = create_topic(&img, &spec, &defaults(), &mut rng, false).unwrap_err();
        assert_eq!(e.code, errors::INVALID_REPLICATION_FACTOR);
        assert_eq!(
            e.message,
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because only 1 broker(s) are registered and unfenced."
        );
    }

    #[test]
    fn explicit_assignments_are_honoured_and_checked() {
        let img = image_with_brokers(&[(1, None), (2, None), (3, None)]);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let spec = |a: Vec<(i32, Vec<i32>)>| TopicSpec {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: a,
            ..Default::default()
        };
        let (recs, created) = create_topic(
            &img,
            &spec(vec![(0, vec![3, 1]), (1, vec![2, 3])]),
            &defaults(),
            &mut rng,
            false,
        )
        .unwrap();
        assert_eq!(created.num_partitions, 2);
        assert!(
            matches!(&recs[1], MetadataRecord::Partition { replicas, leader: 3, .. } if replicas == &vec![3, 1])
        );
        for (bad, code, text) in [
            (
                vec![(0, vec![4])],
                errors::INVALID_REPLICA_ASSIGNMENT,
                "broker 4, but no such broker",
            ),
            (
                vec![(0, vec![1, 1])],
                errors::INVALID_REPLICA_ASSIGNMENT,
                "more than once",
            ),
            (
                vec![(0, vec![1]), (1, vec![1, 2])],
                errors::INVALID_REPLICA_ASSIGNMENT,
                "not consistent",
            ),
            (
                vec![(1, vec![1])],
                errors::INVALID_REPLICA_ASSIGNMENT,
                "consecutive",
            ),
        ] {
            let e = create_topic(&img, &spec(bad), &defaults(), &mut rng, false).unwrap_err();
            assert_eq!(e.code, code);
            assert!(e.message.contains(text), "{}", e.message);
        }
    }

    #[test]
    fn fencing_a_leader_moves_leadership_within_the_isr() {
        let mut img = image_with_brokers(&[(1, None), (2, None), (3, None)]);
        create(&mut img, "t", 3, 3);
        let led_by_1: Vec<i32> = img
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .filter(|(_, p)| p.leader == 1)
            .map(|(i, _)| *i)
            .collect();
        apply(
            &mut img,
            &[MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                broker_epoch: 0,
                fenced: 1,
                in_controlled_shutdown: 0,
            }],
        );
        let recs = remove_from_isrs(&img, 1, &defaults());
        apply(&mut img, &recs);
        for (i, p) in &img.topic("t").unwrap().partitions {
            assert!(!p.isr.contains(&1) && p.leader != 1, "partition {i}: {p:?}");
            if led_by_1.contains(i) {
                assert_eq!(p.leader_epoch, 1);
            }
        }
    }

    #[test]
    fn preferred_election_reports_kafkas_codes() {
        let mut img = image_with_brokers(&[(1, None), (2, None)]);
        let spec = TopicSpec {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![(0, vec![1, 2])],
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (recs, _) = create_topic(&img, &spec, &defaults(), &mut rng, false).unwrap();
        apply(&mut img, &recs);
        let ask = [("t".to_string(), 0)];
        let (o, r) = elect_leaders(&img, Election::Preferred, Some(&ask));
        assert_eq!((o[0].code, r.len()), (errors::ELECTION_NOT_NEEDED, 0));
        // Broker 1 goes: 2 leads; a preferred election cannot bring 1 back while it is down.
        apply(
            &mut img,
            &[MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                broker_epoch: 0,
                fenced: 1,
                in_controlled_shutdown: 0,
            }],
        );
        let recs = remove_from_isrs(&img, 1, &defaults());
        apply(&mut img, &recs);
        let (o, r) = elect_leaders(&img, Election::Preferred, Some(&ask));
        assert_eq!(
            (o[0].code, r.len()),
            (errors::PREFERRED_LEADER_NOT_AVAILABLE, 0)
        );
        let (o, _) = elect_leaders(&img, Election::Preferred, Some(&[("nope".into(), 0)]));
        assert_eq!(o[0].code, errors::UNKNOWN_TOPIC_OR_PARTITION);
    }

    #[test]
    fn a_reassignment_naming_an_unknown_broker_changes_nothing() {
        let mut img = image_with_brokers(&[(1, None), (2, None)]);
        create(&mut img, "t", 2, 1);
        let specs = vec![
            ReassignmentSpec {
                topic: "t".into(),
                partition: 0,
                replicas: Some(vec![2]),
            },
            ReassignmentSpec {
                topic: "t".into(),
                partition: 1,
                replicas: Some(vec![9]),
            },
        ];
        let (o, r) = alter_reassignments(&img, &specs, &defaults());
        assert_eq!(o[1].code, errors::INVALID_REPLICA_ASSIGNMENT);
        assert!(
            r.is_empty(),
            "nothing applied when one partition is invalid"
        );
    }

    #[test]
    fn stale_isr_changes_are_refused() {
        let mut img = image_with_brokers(&[(1, None), (2, None)]);
        let spec = TopicSpec {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![(0, vec![1, 2])],
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (recs, _) = create_topic(&img, &spec, &defaults(), &mut rng, false).unwrap();
        apply(&mut img, &recs);
        let id = img.topic("t").unwrap().id;
        let change = |pe: i32| IsrChange {
            topic_id: id,
            partition: 0,
            leader_epoch: 0,
            partition_epoch: pe,
            new_isr: vec![1],
            new_isr_epochs: vec![-1],
        };
        let (res, recs) = alter_isr(&img, 1, &[change(0)]);
        assert_eq!(res[0].0, errors::NONE);
        apply(&mut img, &recs);
        let (res, recs) = alter_isr(&img, 1, &[change(0)]);
        assert_eq!((res[0].0, recs.len()), (errors::INVALID_UPDATE_VERSION, 0));
        let (res, _) = alter_isr(&img, 2, &[change(1)]);
        assert_eq!(
            res[0].0,
            errors::INVALID_REQUEST,
            "only the leader changes the ISR"
        );
    }
}
