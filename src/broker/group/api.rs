//! The group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete; and the
//! `__consumer_offsets` topic they write to and load from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::*;

use super::coordinator::{codes, CommitCheck, CommittedOffset, JoinRequest, Pending};
use super::records::{GroupRecordKey, OffsetCommitValue};
use crate::broker::auth::{Action, Session};
use crate::broker::{msg, Broker, Outcome};
use crate::protocol::errors;
use crate::security::acl::AclOperation;

use super::metadata_manager::{
    after_offsets_topic, append_records, coordinator_partition, create_offsets_topic,
    partition_for_group, store_group, write_replicated, RecordKv,
};
use crate::metadata::OFFSETS_TOPIC;

/// Committed offsets per topic, `None` where nothing is committed.
type OffsetsByTopic = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

use crate::protocol::str_bytes as s;

pub fn find_coordinator(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: FindCoordinatorRequest,
) -> Outcome<FindCoordinatorResponse> {
    let listener = crate::broker::metadata::client_listener(broker, session);
    if req.key_type == 0 && broker.image().topic(OFFSETS_TOPIC).is_none() {
        let broker = broker.clone();
        let session = session.clone();
        return Outcome::Later(Box::pin(async move {
            create_offsets_topic(&broker).await;
            coordinator_answer(&broker, &session, version, &req, &listener)
        }));
    }
    Outcome::Now(coordinator_answer(
        broker, session, version, &req, &listener,
    ))
}

/// The coordinator of each key: the leader of its `__consumer_offsets` partition.
fn coordinator_answer(
    broker: &Broker,
    session: &Session,
    version: i16,
    req: &FindCoordinatorRequest,
    listener: &str,
) -> FindCoordinatorResponse {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    let img = broker.image();
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
        if !broker.authorize(session, Action::group(AclOperation::Describe, key)) {
            return base.with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
        }
        let p = partition_for_group(key, broker.config.offsets_topic_num_partitions);
        let leader = img.partition(OFFSETS_TOPIC, p).map(|p| p.leader);
        match leader.and_then(|l| {
            crate::broker::metadata::broker_endpoint(&img, l, listener).map(|e| (l, e))
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
        // A first join before any FindCoordinator.
        let (client_id, client_host) = (client_id.to_string(), client_host.to_string());
        let unavailable = move || refuse(codes::COORDINATOR_NOT_AVAILABLE);
        return after_offsets_topic(broker, unavailable, move |broker| {
            join_group(broker, version, &client_id, &client_host, req)
        });
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
    session: &Session,
    version: i16,
    req: OffsetCommitRequest,
) -> Outcome<OffsetCommitResponse> {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let group = req.group_id.0.to_string();
    let check = match coordinator_partition(broker, &group) {
        Ok(_) => broker.groups.check_commit(
            &group,
            req.generation_id_or_member_epoch,
            req.member_id.as_str(),
            version,
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
        let may_read = broker.authorize(session, Action::topic(AclOperation::Read, &name));
        let mut parts = Vec::new();
        for p in &t.partitions {
            let metadata = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let code = match check {
                CommitCheck::Error(code) => code,
                CommitCheck::Ok if !may_read => errors::TOPIC_AUTHORIZATION_FAILED,
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
    session: &Session,
    version: i16,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    use offset_fetch_response::*;
    // Which (topic, partitions) of which group; None = every committed offset the session may
    // DESCRIBE the topic of (a topic named without DESCRIBE is answered
    // TOPIC_AUTHORIZATION_FAILED, below).
    let may_describe =
        |t: &str| broker.authorize(session, Action::topic(AclOperation::Describe, t));
    let topic_code = |t: &str| match may_describe(t) {
        true => errors::NONE,
        false => errors::TOPIC_AUTHORIZATION_FAILED,
    };
    let lookup = |group: &str, wanted: Option<Vec<(String, Vec<i32>)>>| -> OffsetsByTopic {
        let mut committed = broker.groups.fetch_offsets(group);
        committed.retain(|(t, _), _| may_describe(t));
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
                let member = g.member_id.as_ref().map(|m| m.as_str());
                let refused = fetch_refusal(broker, session, &g.group_id.0, member, g.member_epoch);
                if let Err(code) = refused {
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
                        let code = topic_code(&t);
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|(p, o)| {
                                        let (off, epoch, md) = fill(o);
                                        OffsetFetchResponsePartitions::default()
                                            .with_error_code(code)
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
    if let Err(code) = fetch_refusal(broker, session, &req.group_id.0, None, -1) {
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
            let code = topic_code(&t);
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, o)| {
                            let (off, epoch, md) = fill(o);
                            let mut r = OffsetFetchResponsePartition::default()
                                .with_error_code(code)
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

/// Why an OffsetFetch of `group` is refused, if it is: GROUP_AUTHORIZATION_FAILED without
/// DESCRIBE on it, a coordinator error, or (v9) a consumer group member not at its epoch.
fn fetch_refusal(
    broker: &Broker,
    session: &Session,
    group: &str,
    member: Option<&str>,
    epoch: i32,
) -> Result<(), i16> {
    if !broker.authorize(session, Action::group(AclOperation::Describe, group)) {
        return Err(errors::GROUP_AUTHORIZATION_FAILED);
    }
    coordinator_partition(broker, group)?;
    broker.groups.check_offset_fetch(group, member, epoch)
}

pub fn list_groups(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    // DESCRIBE on the cluster lists every group; otherwise the groups the session may DESCRIBE.
    let all = broker.authorize(session, Action::cluster(AclOperation::Describe));
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let mut groups = Vec::new();
    for id in broker.groups.group_ids() {
        if !all && !broker.authorize(session, Action::group(AclOperation::Describe, &id)) {
            continue;
        }
        let Some((state, protocol_type, kind)) = broker.groups.with_group(&id, |g| {
            let protocol_type = g.protocol_type.clone().unwrap_or_default();
            (g.state_name(), protocol_type, g.type_name())
        }) else {
            continue;
        };
        if !states.is_empty() && !states.contains(&state.to_lowercase()) {
            continue;
        }
        if !types.is_empty() && !types.iter().any(|t| t == kind) {
            continue;
        }
        let mut g = list_groups_response::ListedGroup::default()
            .with_group_id(GroupId(s(id)))
            .with_protocol_type(s(protocol_type));
        if version >= 4 {
            g = g.with_group_state(s(state));
        }
        if version >= 5 {
            g = g.with_group_type(s(kind));
        }
        groups.push(g);
    }
    ListGroupsResponse::default().with_groups(groups)
}

pub fn describe_groups(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    use describe_groups_response::{DescribedGroup, DescribedGroupMember};
    let groups = req
        .groups
        .into_iter()
        .map(|gid| {
            if !broker.authorize(session, Action::group(AclOperation::Describe, &gid.0)) {
                return DescribedGroup::default()
                    .with_group_id(gid)
                    .with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
            }
            if let Err(code) = coordinator_partition(broker, &gid.0) {
                return DescribedGroup::default()
                    .with_group_id(gid)
                    .with_error_code(code);
            }
            let described = broker.groups.with_group(gid.0.as_str(), |g| {
                if g.is_consumer_group() {
                    // Not a classic group: v0-5 say Dead (v6, not served, adds an error).
                    return DescribedGroup::default()
                        .with_group_id(gid.clone())
                        .with_group_state(s("Dead"));
                }
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

pub fn delete_groups(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .into_iter()
        .map(|gid| {
            let group = gid.0.to_string();
            let may = broker.authorize(session, Action::group(AclOperation::Delete, &group));
            // A consumer group's own records go with it.
            let consumer_keys = broker
                .groups
                .with_group(&group, |g| g.persisted_consumer_keys())
                .unwrap_or_default();
            let code = match may
                .then_some(())
                .ok_or(errors::GROUP_AUTHORIZATION_FAILED)
                .and_then(|_| coordinator_partition(broker, &group))
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
                    tombstones.extend(consumer_keys.into_iter().map(|k| (k, None)));
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

pub fn offset_delete(
    broker: &Arc<Broker>,
    session: &Session,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    let group = req.group_id.0.to_string();
    if !broker.authorize(session, Action::group(AclOperation::Delete, &group)) {
        return OffsetDeleteResponse::default().with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
    }
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
        let check = match broker.authorize(session, Action::topic(AclOperation::Read, &name)) {
            true => broker.groups.check_offset_delete(&group, &name),
            false => Err(errors::TOPIC_AUTHORIZATION_FAILED),
        };
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
