//! The group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete; and the
//! `__consumer_offsets` topic they write to and load from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::coordinator::{codes, CommitCheck, CommittedOffset, Group, JoinRequest, Pending};
use super::records::{GroupMetadataValue, GroupRecordKey, MemberMetadata, OffsetCommitValue};
use crate::broker::partition::Partition;
use crate::broker::replica_manager::{PendingAppend, ReplicaChanges};
use crate::broker::{msg, Broker, Outcome};
use crate::protocol::errors;
use crate::storage::batch::{self, KeyValue};
use crate::storage::TopicPartition;

use crate::metadata::OFFSETS_TOPIC;

/// A record for `__consumer_offsets`: key and value (None is a tombstone).
type RecordKv = (Vec<u8>, Option<Vec<u8>>);
/// Committed offsets per topic, `None` where nothing is committed.
type OffsetsByTopic = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Java's `String.hashCode` over UTF-16 code units.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`.
pub fn partition_for_group(group: &str, partitions: i32) -> i32 {
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// The replication factor `__consumer_offsets` is created with: `offsets.topic.replication.factor`,
/// except on a cluster of one node, which has one replica to give.
fn offsets_replication_factor(broker: &Broker) -> i16 {
    if broker.config.cluster.is_single_node() {
        1
    } else {
        broker.config.cluster.offsets_topic_replication_factor
    }
}

/// Creates `__consumer_offsets` through the controller, as Kafka does on first use, and
/// waits (bounded) until this broker sees it.
async fn create_offsets_topic(broker: &Broker) {
    let segment_bytes = broker.config.offsets_topic_segment_bytes.to_string();
    super::super::metadata::create_missing(
        broker,
        &[OFFSETS_TOPIC.to_string()],
        broker.config.offsets_topic_num_partitions,
        offsets_replication_factor(broker),
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", &segment_bytes),
            ("compression.type", "producer"),
        ],
    )
    .await;
    broker
        .wait_for_image(|img| {
            img.topic(OFFSETS_TOPIC)
                .is_some_and(|t| t.partitions.values().all(|p| p.has_leader()))
        })
        .await;
}

/// The `__consumer_offsets` partition of `group`, if this broker coordinates it: it leads the
/// partition and has loaded its groups. NOT_COORDINATOR otherwise, or COORDINATOR_NOT_AVAILABLE
/// while the topic does not exist.
pub fn coordinator_partition(broker: &Broker, group: &str) -> Result<Arc<Partition>, i16> {
    if broker.image().topic(OFFSETS_TOPIC).is_none() {
        return Err(codes::COORDINATOR_NOT_AVAILABLE);
    }
    let p = partition_for_group(group, broker.config.offsets_topic_num_partitions);
    if !broker.coordinated_partitions().contains(&p) {
        return Err(errors::NOT_COORDINATOR);
    }
    broker
        .replicas
        .leader_partition(&TopicPartition::new(OFFSETS_TOPIC, p), -1)
        .map_err(|_| errors::NOT_COORDINATOR)
}

/// Appends group records (key, value or tombstone) to the group's `__consumer_offsets`
/// partition with acks=1: the tombstones of deleted and expired groups and offsets.
fn append_records(broker: &Broker, group: &str, records: &[RecordKv]) -> Result<(), i16> {
    if records.is_empty() {
        return Ok(());
    }
    let part = coordinator_partition(broker, group)?;
    append(broker, group, &part.tp, records, 1).map(|_| ())
}

/// How long a coordinator write waits for the ISR (Kafka's `offsets.commit.timeout.ms`).
const OFFSETS_COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes group records with acks=all and answers once the ISR has them, or with the group
/// error for why not (an ISR below `min.insync.replicas`, a lost leadership, the timeout):
/// offset commits and a generation's group metadata count only then, as in Kafka.
fn write_replicated(
    broker: &Arc<Broker>,
    group: &str,
    records: &[RecordKv],
) -> Outcome<Result<(), i16>> {
    if records.is_empty() {
        return Outcome::Now(Ok(()));
    }
    let pending = coordinator_partition(broker, group)
        .and_then(|part| append(broker, group, &part.tp, records, -1));
    match pending {
        Ok(pending) => broker
            .replicas
            .await_replication(pending.into_iter().collect(), OFFSETS_COMMIT_TIMEOUT)
            .map(|codes| match codes.first() {
                Some(&code) if code != errors::NONE => Err(store_error(code)),
                _ => Ok(()),
            }),
        Err(code) => Outcome::Now(Err(code)),
    }
}

/// One batch of group records appended to `tp`, the group's partition.
fn append(
    broker: &Broker,
    group: &str,
    tp: &TopicPartition,
    records: &[RecordKv],
    acks: i16,
) -> Result<Option<PendingAppend>, i16> {
    let kvs: Vec<KeyValue<'_>> = records
        .iter()
        .map(|(k, v)| (Some(k.as_slice()), v.as_deref()))
        .collect();
    let mut b = batch::build_batch(&kvs, crate::storage::log::now_ms());
    match broker.replicas.append_records(tp, &mut b, acks) {
        Ok((_, pending)) => Ok(pending),
        Err(e) => {
            tracing::warn!(group, error = %e.message, "cannot write to {OFFSETS_TOPIC}");
            Err(store_error(e.code))
        }
    }
}

/// The group error for a failed `__consumer_offsets` write (Kafka's group coordinator).
fn store_error(code: i16) -> i16 {
    match code {
        errors::NOT_LEADER_OR_FOLLOWER | errors::KAFKA_STORAGE_ERROR => errors::NOT_COORDINATOR,
        errors::UNKNOWN_TOPIC_OR_PARTITION
        | errors::NOT_ENOUGH_REPLICAS
        | errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | errors::REQUEST_TIMED_OUT => errors::COORDINATOR_NOT_AVAILABLE,
        errors::MESSAGE_TOO_LARGE | errors::RECORD_LIST_TOO_LARGE => {
            errors::INVALID_COMMIT_OFFSET_SIZE
        }
        _ => errors::NOT_COORDINATOR,
    }
}

/// Loads or unloads coordinators as this broker gains or loses `__consumer_offsets` leaders.
pub fn on_partition_changes(broker: &Broker, changes: &ReplicaChanges) {
    let (mut loaded, mut records) = (Vec::new(), 0);
    for tp in changes
        .became_leader
        .iter()
        .filter(|tp| tp.topic == OFFSETS_TOPIC)
    {
        records += load_partition(broker, tp.partition);
        loaded.push(tp.partition);
    }
    let (mut unloaded, mut groups) = (Vec::new(), 0);
    for tp in changes
        .became_follower
        .iter()
        .chain(&changes.removed)
        .filter(|tp| tp.topic == OFFSETS_TOPIC)
    {
        groups += unload_partition(broker, tp.partition);
        unloaded.push(tp.partition);
    }
    if !loaded.is_empty() {
        tracing::info!(partitions = ?loaded, records, "loaded group coordinators of {OFFSETS_TOPIC}");
    }
    if !unloaded.is_empty() {
        tracing::info!(partitions = ?unloaded, groups, "unloaded group coordinators of {OFFSETS_TOPIC}");
    }
}

/// Replays one `__consumer_offsets` partition into the coordinator: this broker now leads it.
/// Returns the records replayed.
fn load_partition(broker: &Broker, p: i32) -> usize {
    let Some(part) = broker.replicas.get(&TopicPartition::new(OFFSETS_TOPIC, p)) else {
        return 0;
    };
    let mut loaded = 0usize;
    part.for_each_batch(|b| {
        for r in batch::uncompressed_records(b) {
            if let Some(k) = r.key {
                apply_record(broker, k, r.value);
                loaded += 1;
            }
        }
    });
    broker.set_coordinated(p, true);
    loaded
}

/// Drops the groups of a partition this broker no longer leads; their members find the new
/// coordinator. Returns how many groups went.
fn unload_partition(broker: &Broker, p: i32) -> usize {
    broker.set_coordinated(p, false);
    let n = broker.config.offsets_topic_num_partitions;
    broker.groups.unload(|g| partition_for_group(g, n) == p)
}

fn apply_record(broker: &Broker, key: &[u8], value: Option<&[u8]>) {
    let c = &broker.groups;
    match GroupRecordKey::decode(key) {
        Ok(GroupRecordKey::OffsetCommit {
            group,
            topic,
            partition,
        }) => match value.map(OffsetCommitValue::decode) {
            Some(Ok(v)) => c.store_offsets(
                &group,
                vec![(
                    (topic, partition),
                    CommittedOffset {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_timestamp: v.commit_timestamp,
                    },
                )],
            ),
            Some(Err(e)) => tracing::warn!(group, error = %e, "skipping a bad offset record"),
            None => c.remove_offsets(&group, &[(topic, partition)]),
        },
        Ok(GroupRecordKey::GroupMetadata { group }) => {
            match value.map(GroupMetadataValue::decode) {
                Some(Ok(v)) => c.restore_group(&group, &v.protocol_type, v.generation),
                Some(Err(e)) => tracing::warn!(group, error = %e, "skipping a bad group record"),
                None => c.forget_group(&group),
            }
        }
        Err(e) => tracing::warn!(error = %e, "skipping an unknown {OFFSETS_TOPIC} record"),
    }
}

pub fn find_coordinator(
    broker: &Arc<Broker>,
    version: i16,
    req: FindCoordinatorRequest,
) -> Outcome<FindCoordinatorResponse> {
    if req.key_type == 0 && broker.image().topic(OFFSETS_TOPIC).is_none() {
        let broker = broker.clone();
        return Outcome::Later(Box::pin(async move {
            create_offsets_topic(&broker).await;
            coordinator_answer(&broker, version, &req)
        }));
    }
    Outcome::Now(coordinator_answer(broker, version, &req))
}

/// The coordinator of each key: the leader of its `__consumer_offsets` partition.
fn coordinator_answer(
    broker: &Broker,
    version: i16,
    req: &FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    let img = broker.image();
    let listener = crate::broker::metadata::client_listener(broker);
    let answer = |key: &str| -> Coordinator {
        let base = Coordinator::default()
            .with_key(s(key))
            .with_node_id(BrokerId(-1))
            .with_port(-1);
        if req.key_type != 0 {
            return base
                .with_error_code(codes::COORDINATOR_NOT_AVAILABLE)
                .with_error_message(msg("Transaction coordinators are not supported yet."));
        }
        let p = partition_for_group(key, broker.config.offsets_topic_num_partitions);
        let leader = img.partition(OFFSETS_TOPIC, p).map(|p| p.leader);
        match leader.and_then(|l| {
            crate::broker::metadata::broker_endpoint(&img, l, &listener).map(|e| (l, e))
        }) {
            Some((id, (host, port))) => base
                .with_node_id(BrokerId(id))
                .with_host(s(host))
                .with_port(port),
            None => base.with_error_code(codes::COORDINATOR_NOT_AVAILABLE),
        }
    };
    if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| answer(k.as_str()))
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let c = answer(req.key.as_str());
        FindCoordinatorResponse::default()
            .with_error_code(c.error_code)
            .with_error_message(c.error_message)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port)
    }
}

fn join_response(r: super::coordinator::JoinResult) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation)
        .with_protocol_type(r.protocol_type.map(s))
        .with_protocol_name(r.protocol_name.map(s))
        .with_leader(s(r.leader))
        .with_member_id(s(r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    join_group_response::JoinGroupResponseMember::default()
                        .with_member_id(s(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(s))
                        .with_metadata(Bytes::from(m.metadata))
                })
                .collect(),
        )
}

pub fn join_group(
    broker: &Arc<Broker>,
    version: i16,
    client_id: &str,
    client_host: &str,
    req: JoinGroupRequest,
) -> Outcome<JoinGroupResponse> {
    let refuse = |code| {
        JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1)
    };
    if req.group_id.0.is_empty() {
        return Outcome::Now(refuse(codes::INVALID_GROUP_ID));
    }
    if broker.image().topic(OFFSETS_TOPIC).is_none() {
        // A first join before any FindCoordinator: create the topic, then join.
        let (broker, client_id, client_host) = (
            broker.clone(),
            client_id.to_string(),
            client_host.to_string(),
        );
        return Outcome::Later(Box::pin(async move {
            create_offsets_topic(&broker).await;
            if broker.image().topic(OFFSETS_TOPIC).is_none() {
                return refuse(codes::COORDINATOR_NOT_AVAILABLE);
            }
            match join_group(&broker, version, &client_id, &client_host, req) {
                Outcome::Now(r) => r,
                Outcome::Later(f) => f.await,
            }
        }));
    }
    if let Err(code) = coordinator_partition(broker, &req.group_id.0) {
        return Outcome::Now(refuse(code));
    }
    let j = JoinRequest {
        group_id: req.group_id.0.to_string(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.map(|i| i.to_string()),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout serves, as in Kafka.
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata.to_vec()))
            .collect(),
        require_known_member_id: version >= 4,
    };
    match broker.groups.join(j, Instant::now()) {
        Pending::Now(r) => Outcome::Now(join_response(r)),
        Pending::Later(rx) => Outcome::Later(Box::pin(async move {
            match rx.await {
                Ok(r) => join_response(r),
                // The coordinator moved while the member waited.
                Err(_) => JoinGroupResponse::default()
                    .with_error_code(errors::NOT_COORDINATOR)
                    .with_generation_id(-1),
            }
        })),
    }
}

fn sync_response(r: super::coordinator::SyncResult) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_error_code(r.error)
        .with_protocol_type(r.protocol_type.map(s))
        .with_protocol_name(r.protocol_name.map(s))
        .with_assignment(Bytes::from(r.assignment))
}

pub fn sync_group(broker: &Arc<Broker>, req: SyncGroupRequest) -> Outcome<SyncGroupResponse> {
    let group = req.group_id.0.to_string();
    if let Err(code) = coordinator_partition(broker, &group) {
        return Outcome::Now(SyncGroupResponse::default().with_error_code(code));
    }
    let member = req.member_id.to_string();
    // v5: the protocol the member thinks it is in must be the group's.
    let mismatch = broker
        .groups
        .with_group(&group, |g| {
            req.protocol_type
                .as_ref()
                .is_some_and(|t| g.protocol_type.as_deref() != Some(t.as_str()))
                || req
                    .protocol_name
                    .as_ref()
                    .is_some_and(|n| g.protocol_name.as_deref() != Some(n.as_str()))
        })
        .unwrap_or(false);
    if mismatch {
        return Outcome::Now(
            SyncGroupResponse::default().with_error_code(codes::INCONSISTENT_GROUP_PROTOCOL),
        );
    }
    let assignments = req
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
        .collect();
    let generation = req.generation_id;
    let start = broker.groups.sync(&group, generation, &member, assignments);
    let answer = match start.answer {
        Pending::Now(r) => Outcome::Now(sync_response(r)),
        Pending::Later(rx) => Outcome::Later(Box::pin(async move {
            match rx.await {
                Ok(r) => sync_response(r),
                Err(_) => SyncGroupResponse::default().with_error_code(errors::NOT_COORDINATOR),
            }
        })),
    };
    if !start.store {
        return answer;
    }
    // The leader's assignment reaches the members once the ISR has the group's record.
    let written = store_group(broker, &group, generation);
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        let stored = written.resolve().await;
        broker.groups.complete_sync(&group, generation, stored);
        answer.resolve().await
    }))
}

/// Writes the group's metadata record of `generation` with the assignment its leader gave
/// (Kafka's storeGroup), acks=all.
fn store_group(broker: &Arc<Broker>, group: &str, generation: i32) -> Outcome<Result<(), i16>> {
    let value = broker.groups.with_group(group, |g| {
        (g.generation == generation).then(|| group_metadata(g))
    });
    let Some(Some(value)) = value else {
        return Outcome::Now(Err(codes::REBALANCE_IN_PROGRESS));
    };
    let key = GroupRecordKey::GroupMetadata {
        group: group.to_string(),
    };
    write_replicated(broker, group, &[(key.encode(), Some(value.encode()))])
}

/// A group's metadata record: its generation, protocol, leader and members with their
/// subscriptions and assignments.
fn group_metadata(g: &Group) -> GroupMetadataValue {
    GroupMetadataValue {
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        generation: g.generation,
        protocol: g.protocol_name.clone(),
        leader: g.leader.clone(),
        current_state_timestamp: g.state_changed_ms,
        members: g
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: g
                    .protocol_name
                    .as_ref()
                    .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    }
}

pub fn heartbeat(broker: &Arc<Broker>, req: HeartbeatRequest) -> HeartbeatResponse {
    if let Err(code) = coordinator_partition(broker, &req.group_id.0) {
        return HeartbeatResponse::default().with_error_code(code);
    }
    let code = broker.groups.heartbeat(
        req.group_id.0.as_str(),
        req.generation_id,
        req.member_id.as_str(),
        Instant::now(),
    );
    HeartbeatResponse::default().with_error_code(code)
}

pub fn leave_group(
    broker: &Arc<Broker>,
    version: i16,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group = req.group_id.0.to_string();
    if let Err(code) = coordinator_partition(broker, &group) {
        return LeaveGroupResponse::default().with_error_code(code);
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let codes_out = broker.groups.leave(&group, &members, Instant::now());
    if version >= 3 {
        let results = members
            .iter()
            .zip(&codes_out)
            .map(|((m, i), c)| {
                leave_group_response::MemberResponse::default()
                    .with_member_id(s(m.clone()))
                    .with_group_instance_id(i.clone().map(s))
                    .with_error_code(*c)
            })
            .collect();
        LeaveGroupResponse::default().with_members(results)
    } else {
        LeaveGroupResponse::default().with_error_code(codes_out.first().copied().unwrap_or(0))
    }
}

pub fn offset_commit(
    broker: &Arc<Broker>,
    req: OffsetCommitRequest,
) -> Outcome<OffsetCommitResponse> {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let group = req.group_id.0.to_string();
    let check = match coordinator_partition(broker, &group) {
        Ok(_) => broker.groups.check_commit(
            &group,
            req.generation_id_or_member_epoch,
            req.member_id.as_str(),
        ),
        Err(code) => CommitCheck::Error(code),
    };
    let image = broker.image();
    let now = crate::storage::log::now_ms();
    let mut records = Vec::new();
    let mut stored = Vec::new();
    let mut topics = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let mut parts = Vec::new();
        for p in &t.partitions {
            let metadata = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let code = match check {
                CommitCheck::Error(code) => code,
                CommitCheck::Ok
                    if metadata.len() > broker.groups.config.offset_metadata_max_bytes =>
                {
                    codes::OFFSET_METADATA_TOO_LARGE
                }
                CommitCheck::Ok
                    if image
                        .topic(&name)
                        .is_none_or(|ti| !ti.partitions.contains_key(&p.partition_index)) =>
                {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                }
                CommitCheck::Ok => {
                    let key = GroupRecordKey::OffsetCommit {
                        group: group.clone(),
                        topic: name.clone(),
                        partition: p.partition_index,
                    };
                    let value = OffsetCommitValue {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: metadata.clone(),
                        commit_timestamp: now,
                        expire_timestamp: -1,
                    };
                    records.push((key.encode(), Some(value.encode())));
                    stored.push((
                        (name.clone(), p.partition_index),
                        CommittedOffset {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata,
                            commit_timestamp: now,
                        },
                    ));
                    codes::NONE
                }
            };
            parts.push(
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code),
            );
        }
        topics.push(
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(parts),
        );
    }
    let fail = |topics: &mut Vec<OffsetCommitResponseTopic>, code: i16| {
        for t in topics.iter_mut() {
            for p in t.partitions.iter_mut() {
                if p.error_code == codes::NONE {
                    p.error_code = code;
                }
            }
        }
    };
    // The commit counts (and the cache takes it) once the ISR has it, as in Kafka.
    let b = broker.clone();
    write_replicated(broker, &group, &records).map(move |written| {
        match written {
            Ok(()) => b.groups.store_offsets(&group, stored),
            Err(code) => fail(&mut topics, code),
        }
        OffsetCommitResponse::default().with_topics(topics)
    })
}

pub fn offset_fetch(
    broker: &Arc<Broker>,
    version: i16,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    use offset_fetch_response::*;
    // Which (topic, partitions) of which group; None = every committed offset.
    let lookup = |group: &str, wanted: Option<Vec<(String, Vec<i32>)>>| -> OffsetsByTopic {
        let committed = broker.groups.fetch_offsets(group);
        match wanted {
            Some(w) => w
                .into_iter()
                .map(|(t, ps)| {
                    let parts = ps
                        .into_iter()
                        .map(|p| (p, committed.get(&(t.clone(), p)).cloned()))
                        .collect();
                    (t, parts)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                    BTreeMap::new();
                for ((t, p), o) in committed {
                    by_topic.entry(t).or_default().push((p, Some(o)));
                }
                by_topic.into_iter().collect()
            }
        }
    };
    let fill = |o: &Option<CommittedOffset>| match o {
        Some(o) => (o.offset, o.leader_epoch, o.metadata.clone()),
        None => (-1, -1, String::new()),
    };
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                if let Err(code) = coordinator_partition(broker, &g.group_id.0) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code);
                }
                let wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let topics = lookup(g.group_id.0.as_str(), wanted)
                    .into_iter()
                    .map(|(t, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|(p, o)| {
                                        let (off, epoch, md) = fill(o);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(off)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(s(md)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if let Err(code) = coordinator_partition(broker, &req.group_id.0) {
        return OffsetFetchResponse::default().with_error_code(code);
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let topics = lookup(req.group_id.0.as_str(), wanted)
        .into_iter()
        .map(|(t, parts)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, o)| {
                            let (off, epoch, md) = fill(o);
                            let mut r = OffsetFetchResponsePartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(off)
                                .with_metadata(Some(s(md)));
                            if version >= 5 {
                                r = r.with_committed_leader_epoch(epoch);
                            }
                            r
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

pub fn list_groups(
    broker: &Arc<Broker>,
    version: i16,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut groups = Vec::new();
    for id in broker.groups.group_ids() {
        let Some((state, protocol_type)) = broker.groups.with_group(&id, |g| {
            (g.state.name(), g.protocol_type.clone().unwrap_or_default())
        }) else {
            continue;
        };
        if !states.is_empty() && !states.contains(&state.to_lowercase()) {
            continue;
        }
        if !types.is_empty() && !types.contains(&"classic".to_string()) {
            continue;
        }
        let mut g = list_groups_response::ListedGroup::default()
            .with_group_id(GroupId(s(id)))
            .with_protocol_type(s(protocol_type));
        if version >= 4 {
            g = g.with_group_state(s(state));
        }
        if version >= 5 {
            g = g.with_group_type(s("classic"));
        }
        groups.push(g);
    }
    ListGroupsResponse::default().with_groups(groups)
}

pub fn describe_groups(
    broker: &Arc<Broker>,
    version: i16,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    use describe_groups_response::{DescribedGroup, DescribedGroupMember};
    let groups = req
        .groups
        .into_iter()
        .map(|gid| {
            if let Err(code) = coordinator_partition(broker, &gid.0) {
                return DescribedGroup::default()
                    .with_group_id(gid)
                    .with_error_code(code);
            }
            let described = broker.groups.with_group(gid.0.as_str(), |g| {
                let protocol = g.protocol_name.clone().unwrap_or_default();
                let stable = matches!(
                    g.state,
                    super::coordinator::GroupState::Stable
                        | super::coordinator::GroupState::CompletingRebalance
                );
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let meta = m
                            .protocols
                            .iter()
                            .find(|(n, _)| *n == protocol)
                            .map(|(_, md)| md.clone())
                            .unwrap_or_default();
                        let mut d = DescribedGroupMember::default()
                            .with_member_id(s(m.member_id.clone()))
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_member_metadata(Bytes::from(meta))
                            .with_member_assignment(Bytes::from(if stable {
                                m.assignment.clone()
                            } else {
                                Vec::new()
                            }));
                        if version >= 4 {
                            d = d.with_group_instance_id(m.group_instance_id.clone().map(s));
                        }
                        d
                    })
                    .collect();
                DescribedGroup::default()
                    .with_group_id(gid.clone())
                    .with_group_state(s(g.state.name()))
                    .with_protocol_type(s(g.protocol_type.clone().unwrap_or_default()))
                    .with_protocol_data(s(protocol))
                    .with_members(members)
            });
            described.unwrap_or_else(|| {
                DescribedGroup::default()
                    .with_group_id(gid)
                    .with_group_state(s("Dead"))
            })
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub fn delete_groups(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .into_iter()
        .map(|gid| {
            let group = gid.0.to_string();
            let code = match coordinator_partition(broker, &group)
                .and_then(|_| broker.groups.delete_group(&group))
            {
                Ok(offsets) => {
                    let mut tombstones: Vec<RecordKv> = offsets
                        .into_iter()
                        .map(|(topic, partition)| {
                            let k = GroupRecordKey::OffsetCommit {
                                group: group.clone(),
                                topic,
                                partition,
                            };
                            (k.encode(), None)
                        })
                        .collect();
                    tombstones.push((
                        GroupRecordKey::GroupMetadata {
                            group: group.clone(),
                        }
                        .encode(),
                        None,
                    ));
                    append_records(broker, &group, &tombstones)
                        .err()
                        .unwrap_or(codes::NONE)
                }
                Err(code) => code,
            };
            delete_groups_response::DeletableGroupResult::default()
                .with_group_id(gid)
                .with_error_code(code)
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}

pub fn offset_delete(broker: &Arc<Broker>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    let group = req.group_id.0.to_string();
    if let Err(code) = coordinator_partition(broker, &group) {
        return OffsetDeleteResponse::default().with_error_code(code);
    }
    if broker.groups.with_group(&group, |_| ()).is_none() {
        return OffsetDeleteResponse::default().with_error_code(codes::GROUP_ID_NOT_FOUND);
    }
    let mut topics = Vec::new();
    let mut gone = Vec::new();
    let mut tombstones = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let check = broker.groups.check_offset_delete(&group, &name);
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                let code = match check {
                    Ok(()) => {
                        gone.push((name.clone(), p.partition_index));
                        tombstones.push((
                            GroupRecordKey::OffsetCommit {
                                group: group.clone(),
                                topic: name.clone(),
                                partition: p.partition_index,
                            }
                            .encode(),
                            None,
                        ));
                        codes::NONE
                    }
                    Err(c) => c,
                };
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
            })
            .collect();
        topics.push(
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    if let Err(code) = append_records(broker, &group, &tombstones) {
        return OffsetDeleteResponse::default().with_error_code(code);
    }
    broker.groups.remove_offsets(&group, &gone);
    OffsetDeleteResponse::default().with_topics(topics)
}

/// Expires offsets of empty groups past `offsets.retention.minutes` and writes tombstones.
pub fn expire_offsets(broker: &Broker) {
    let expired = broker.groups.expire_offsets(crate::storage::log::now_ms());
    let mut by_group: BTreeMap<String, Vec<RecordKv>> = BTreeMap::new();
    for (group, (topic, partition)) in expired {
        let k = GroupRecordKey::OffsetCommit {
            group: group.clone(),
            topic,
            partition,
        };
        by_group.entry(group).or_default().push((k.encode(), None));
    }
    for (group, tombstones) in by_group {
        tracing::info!(group = %group, offsets = tombstones.len(), "expired committed offsets");
        let _ = append_records(broker, &group, &tombstones);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_partition_matches_javas_string_hash() {
        // "".hashCode() == 0; "a".hashCode() == 97; "group".hashCode() == 98629247.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("group"), 98629247);
        assert_eq!(partition_for_group("group", 50), 98629247 % 50);
        // Negative hashes use Utils.abs: "polygenelubricants".hashCode() == Integer.MIN_VALUE → 0.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for_group("polygenelubricants", 50), 0);
    }
}
