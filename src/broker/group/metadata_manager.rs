//! GroupMetadataManager: the group coordinator's store, `__consumer_offsets`. Which partition
//! holds a group, writing commits, group metadata and tombstones to it (acks=all where a write
//! must count before it is answered), and loading or unloading a partition's groups as this
//! broker gains or loses its leadership.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::consumer_records::{ConsumerRecordKey, ConsumerRecordValue};
use super::coordinator::{codes, CommittedOffset, Group};
use super::records::{GroupMetadataValue, GroupRecordKey, MemberMetadata, OffsetCommitValue};
use crate::broker::replica_manager::{PendingAppend, ReplicaChanges};
use crate::broker::{Broker, Outcome};
use crate::metadata::OFFSETS_TOPIC;
use crate::protocol::errors;
use crate::storage::batch::{self, KeyValue};
use crate::storage::TopicPartition;

/// A record for `__consumer_offsets`: key and value (None is a tombstone).
pub(super) type RecordKv = (Vec<u8>, Option<Vec<u8>>);

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
pub(super) fn offsets_replication_factor(broker: &Broker) -> i16 {
    if broker.config.cluster.is_single_node() {
        1
    } else {
        broker.config.cluster.offsets_topic_replication_factor
    }
}

/// `serve`, once `__consumer_offsets` exists: a first group request before any
/// FindCoordinator creates it (as Kafka does), and is answered `unavailable` when it cannot.
pub(super) fn after_offsets_topic<R: Send + 'static>(
    broker: &Arc<Broker>,
    unavailable: impl FnOnce() -> R + Send + 'static,
    serve: impl FnOnce(&Arc<Broker>) -> Outcome<R> + Send + 'static,
) -> Outcome<R> {
    if broker.image().topic(OFFSETS_TOPIC).is_some() {
        return serve(broker);
    }
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        create_offsets_topic(&broker).await;
        if broker.image().topic(OFFSETS_TOPIC).is_none() {
            return unavailable();
        }
        serve(&broker).resolve().await
    }))
}

/// Creates `__consumer_offsets` through the controller, as Kafka does on first use, and
/// waits (bounded) until this broker sees it.
pub(super) async fn create_offsets_topic(broker: &Broker) {
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
pub fn coordinator_partition(broker: &Broker, group: &str) -> Result<TopicPartition, i16> {
    if broker.image().topic(OFFSETS_TOPIC).is_none() {
        return Err(codes::COORDINATOR_NOT_AVAILABLE);
    }
    let p = partition_for_group(group, broker.config.offsets_topic_num_partitions);
    if !broker.coordinated_partitions().contains(&p) {
        return Err(errors::NOT_COORDINATOR);
    }
    let tp = TopicPartition::new(OFFSETS_TOPIC, p);
    match broker.replicas.check_leader(&tp, -1) {
        Ok(()) => Ok(tp),
        Err(_) => Err(errors::NOT_COORDINATOR),
    }
}

/// Appends group records (key, value or tombstone) to the group's `__consumer_offsets`
/// partition with acks=1: the tombstones of deleted and expired groups and offsets.
pub(super) fn append_records(
    broker: &Broker,
    group: &str,
    records: &[RecordKv],
) -> Result<(), i16> {
    if records.is_empty() {
        return Ok(());
    }
    let tp = coordinator_partition(broker, group)?;
    append(broker, group, &tp, records, 1, store_error).map(|_| ())
}

/// How long a coordinator write waits for the ISR (Kafka's `offsets.commit.timeout.ms`).
const OFFSETS_COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes group records with acks=all and answers once the ISR has them, or with the group
/// error for why not (an ISR below `min.insync.replicas`, a lost leadership, the timeout):
/// offset commits and a generation's group metadata count only then, as in Kafka.
pub(super) fn write_replicated(
    broker: &Arc<Broker>,
    group: &str,
    records: &[RecordKv],
) -> Outcome<Result<(), i16>> {
    write_replicated_as(broker, group, records, store_error)
}

/// `write_replicated`, with `map` turning a failed append's code into the group error.
fn write_replicated_as(
    broker: &Arc<Broker>,
    group: &str,
    records: &[RecordKv],
    map: fn(i16) -> i16,
) -> Outcome<Result<(), i16>> {
    if records.is_empty() {
        return Outcome::Now(Ok(()));
    }
    let pending = coordinator_partition(broker, group)
        .and_then(|tp| append(broker, group, &tp, records, -1, map));
    match pending {
        Ok(pending) => broker
            .replicas
            .await_replication(pending.into_iter().collect(), OFFSETS_COMMIT_TIMEOUT)
            .map(move |codes| match codes.first() {
                Some(&code) if code != errors::NONE => Err(map(code)),
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
    map: fn(i16) -> i16,
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
            Err(map(e.code))
        }
    }
}

/// The group error for a failed write of a group's metadata record (Kafka's
/// appendGroupMetadataErrorToResponseError): as for offsets, except that a record too large is
/// the server's problem, not the commit's.
fn group_store_error(code: i16) -> i16 {
    match code {
        errors::MESSAGE_TOO_LARGE | errors::RECORD_LIST_TOO_LARGE => errors::UNKNOWN_SERVER_ERROR,
        other => store_error(other),
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
    let coordinated = broker.coordinated_partitions();
    for tp in changes
        .became_leader
        .iter()
        .filter(|tp| tp.topic == OFFSETS_TOPIC)
    {
        if coordinated.contains(&tp.partition) {
            // Still the leader (a new leader epoch): the groups in memory are current.
            continue;
        }
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
    // What the changes did not say, the partitions' roles do: an image applied only in part
    // (a storage error) leaves some changes unreported, and a later image reports none for them.
    let n = broker.config.offsets_topic_num_partitions;
    let coordinated = broker.coordinated_partitions();
    for p in 0..n {
        let leads = broker
            .replicas
            .check_leader(&TopicPartition::new(OFFSETS_TOPIC, p), -1)
            .is_ok();
        match (leads, coordinated.contains(&p)) {
            (true, false) => {
                records += load_partition(broker, p);
                loaded.push(p);
            }
            (false, true) => {
                groups += unload_partition(broker, p);
                unloaded.push(p);
            }
            _ => {}
        }
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
    let tp = TopicPartition::new(OFFSETS_TOPIC, p);
    // Read under the log's lock, replayed after it: replaying locks groups, and a group's
    // lock is held while its records are appended.
    let mut records: Vec<RecordKv> = Vec::new();
    let hosted = broker.replicas.for_each_batch(&tp, |b| {
        for r in batch::uncompressed_records(b) {
            if let Some(k) = r.key {
                records.push((k.to_vec(), r.value.map(<[u8]>::to_vec)));
            }
        }
    });
    if !hosted {
        return 0;
    }
    for (k, v) in &records {
        apply_record(broker, k, v.as_deref());
    }
    let n = broker.config.offsets_topic_num_partitions;
    broker.groups.after_load(|g| partition_for_group(g, n) == p);
    let loaded = records.len();
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
        Err(_) => apply_consumer_record(broker, key, value),
    }
}

/// A consumer group record (KIP-848) read back; other record types (share and streams
/// groups) are skipped.
fn apply_consumer_record(broker: &Broker, key: &[u8], value: Option<&[u8]>) {
    let k = match ConsumerRecordKey::decode(key) {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(error = %e, "skipping an unknown {OFFSETS_TOPIC} record");
            return;
        }
    };
    let v = match value.map(|v| ConsumerRecordValue::decode(&k, v)) {
        Some(Ok(v)) => Some(v),
        None => None,
        Some(Err(e)) => {
            tracing::warn!(group = k.group(), error = %e, "skipping a bad consumer group record");
            return;
        }
    };
    broker.groups.replay_consumer_record(&k, v, (key, value));
}

/// Writes the group's metadata record of `generation` with the assignment its leader gave
/// (Kafka's storeGroup), acks=all.
pub(super) fn store_group(
    broker: &Arc<Broker>,
    group: &str,
    generation: i32,
) -> Outcome<Result<(), i16>> {
    let value = broker.groups.with_group(group, |g| {
        (g.generation == generation).then(|| group_metadata(g))
    });
    let Some(Some(value)) = value else {
        return Outcome::Now(Err(codes::REBALANCE_IN_PROGRESS));
    };
    let key = GroupRecordKey::GroupMetadata {
        group: group.to_string(),
    };
    write_replicated_as(
        broker,
        group,
        &[(key.encode(), Some(value.encode()))],
        group_store_error,
    )
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

/// The group coordinator's clock: member sessions and rebalance timeouts every 100 ms, offset
/// retention every minute (Kafka's `offsets.retention.check.interval.ms` default, 10 minutes,
/// is coarser; a minute keeps expiry close to `offsets.retention.minutes`).
pub async fn run_clock(broker: Arc<Broker>) {
    let mut interval = tokio::time::interval(std::time::Duration::from_millis(100));
    let mut last_expiry = std::time::Instant::now();
    loop {
        interval.tick().await;
        broker.groups.tick(std::time::Instant::now());
        write_consumer_changes(&broker);
        if last_expiry.elapsed() >= std::time::Duration::from_secs(60) {
            last_expiry = std::time::Instant::now();
            expire_offsets(&broker);
        }
    }
}

/// Writes the records of consumer groups that changed on the clock (expired members,
/// conversions), acks=1 as the other housekeeping writes.
fn write_consumer_changes(broker: &Broker) {
    broker
        .groups
        .write_dirty_consumer_records(|group, records| {
            match append_records(broker, group, records) {
                Ok(()) => true,
                Err(code) => {
                    tracing::warn!(
                        group,
                        code,
                        "consumer group records not written; trying again"
                    );
                    false
                }
            }
        });
}

/// Expires offsets of empty groups past `offsets.retention.minutes` and writes tombstones.
fn expire_offsets(broker: &Broker) {
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
