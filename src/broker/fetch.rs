//! Fetch (incremental fetch sessions, `fetch.min.bytes` / `fetch.max.wait.ms` through
//! DelayedFetch, per-partition and per-response byte limits), ListOffsets, OffsetForLeaderEpoch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::auth::{Action, Session};
use super::fetch_session::{self, FetchContext, FetchTarget, PartitionKey};
use super::replica_manager::{FetchInfo, FetchParams, FetchPartitionData, Fetcher};
use super::{Broker, Outcome};
use crate::protocol::errors;
use crate::security::acl::AclOperation;
use crate::storage::TopicPartition;

fn topic_name(broker: &Broker, name: &TopicName, id: &uuid::Uuid) -> String {
    if name.0.is_empty() {
        broker
            .image()
            .topic_by_id(&(*id).into())
            .map(|t| t.name.clone())
            .unwrap_or_default()
    } else {
        name.0.to_string()
    }
}

/// The partitions a request names and the ones it forgets, keyed the way a session of this
/// version keys them (topic ids from v13, names before).
fn request_targets(
    broker: &Broker,
    version: i16,
    req: &FetchRequest,
) -> (Vec<FetchTarget>, Vec<PartitionKey>) {
    let ids = version >= fetch_session::TOPIC_ID_VERSION;
    let mut targets = Vec::new();
    for t in &req.topics {
        let name = topic_name(broker, &t.topic, &t.topic_id);
        for fp in &t.partitions {
            targets.push(FetchTarget {
                key: PartitionKey::new(ids, t.topic_id, &name, fp.partition),
                topic: name.clone(),
                topic_id: t.topic_id,
                info: FetchInfo {
                    fetch_offset: fp.fetch_offset,
                    max_bytes: fp.partition_max_bytes,
                    current_leader_epoch: fp.current_leader_epoch,
                    last_fetched_epoch: fp.last_fetched_epoch,
                    log_start_offset: fp.log_start_offset,
                },
            });
        }
    }
    let forgotten = req
        .forgotten_topics_data
        .iter()
        .flat_map(|f| {
            f.partitions
                .iter()
                .map(move |&p| PartitionKey::new(ids, f.topic_id, &f.topic.0, p))
        })
        .collect();
    (targets, forgotten)
}

/// One partition's answer from what ReplicaManager read; `leaders` collects the leaders it
/// names (KIP-951 node endpoints).
fn partition_data(t: &FetchTarget, d: FetchPartitionData, leaders: &mut Vec<i32>) -> PartitionData {
    let error = if t.topic.is_empty() && d.error != errors::NONE {
        errors::UNKNOWN_TOPIC_ID
    } else {
        d.error
    };
    let mut data = PartitionData::default()
        .with_partition_index(t.key.partition)
        .with_error_code(error)
        .with_high_watermark(d.high_watermark)
        .with_last_stable_offset(d.high_watermark)
        .with_log_start_offset(d.log_start_offset)
        .with_records(Some(d.records));
    if let (Some((leader, epoch)), false) = (d.current_leader, error == errors::UNKNOWN_TOPIC_ID) {
        leaders.push(leader);
        data = data.with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch),
        );
    }
    if let Some(other) = d.preferred_read_replica {
        data = data.with_preferred_read_replica(BrokerId(other));
    }
    if let Some(div) = d.diverging_epoch {
        data = data.with_diverging_epoch(
            EpochEndOffset::default()
                .with_epoch(div.epoch)
                .with_end_offset(div.end_offset),
        );
    }
    data
}

/// Groups consecutive partitions of one topic, as Kafka's FetchResponse does.
fn group(read: Vec<(FetchTarget, PartitionData)>) -> Vec<FetchableTopicResponse> {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (t, data) in read {
        match topics.last_mut() {
            Some(last) if last.topic_id == t.topic_id && last.topic.0.as_str() == t.topic => {
                last.partitions.push(data)
            }
            _ => topics.push(
                FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_string(t.topic)))
                    .with_topic_id(t.topic_id)
                    .with_partitions(vec![data]),
            ),
        }
    }
    topics
}

/// Builds the response the context calls for from what the pass read: every partition for a
/// full or sessionless fetch (opening the session for a full one), only the changes for an
/// incremental one.
fn respond(
    broker: &Broker,
    session: &Session,
    ctx: FetchContext,
    targets: Vec<FetchTarget>,
    read: Vec<FetchPartitionData>,
) -> FetchResponse {
    let mut leaders = Vec::new();
    let read: Vec<_> = targets
        .into_iter()
        .zip(read)
        .map(|(t, d)| {
            let data = partition_data(&t, d, &mut leaders);
            (t, data)
        })
        .collect();
    let endpoints = super::produce::node_endpoints!(NodeEndpoint, broker, session, &leaders);
    let (session_id, topics) = match ctx {
        FetchContext::Sessionless => (fetch_session::INVALID_SESSION_ID, group(read)),
        FetchContext::Full {
            privileged,
            uses_topic_ids,
        } => {
            let id =
                broker
                    .fetch_sessions
                    .create(privileged, uses_topic_ids, &read, Instant::now());
            (id, group(read))
        }
        FetchContext::Incremental { session, epoch } => {
            let mut s = session.lock();
            if s.epoch() != epoch {
                // A later request of this session overtook this one (a duplicate).
                return error_response(errors::INVALID_FETCH_SESSION_EPOCH, s.id);
            }
            let read = s.filter_response(read);
            (s.id, group(read))
        }
    };
    for t in &topics {
        let bytes: usize = t
            .partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum();
        if bytes > 0 {
            broker
                .metrics
                .bytes_out
                .with_label_values(&[t.topic.0.as_str()])
                .inc_by(bytes as u64);
        }
    }
    FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(topics)
        .with_node_endpoints(endpoints)
}

fn error_response(code: i16, session_id: i32) -> FetchResponse {
    FetchResponse::default()
        .with_error_code(code)
        .with_session_id(session_id)
}

/// A fetch from a replica (replica id in the request, or in its replica state from v15).
pub fn is_follower(req: &FetchRequest) -> bool {
    req.replica_id.0 >= 0 || req.replica_state.replica_id.0 >= 0
}

/// Resolves the request's fetch session (KIP-227) and has ReplicaManager read (parking the
/// fetch there while it is short of `fetch.min.bytes`); the answer is assembled by the request
/// itself once the read is done, never by the appending thread.
pub fn fetch(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: FetchRequest,
) -> Outcome<FetchResponse> {
    let follower = is_follower(&req);
    let params = FetchParams {
        fetcher: fetcher(version, &req),
        max_wait: Duration::from_millis(req.max_wait_ms.max(0) as u64),
        min_bytes: req.min_bytes.max(0) as i64,
        max_bytes: if req.max_bytes <= 0 {
            i64::MAX
        } else {
            req.max_bytes as i64
        },
    };
    let (targets, forgotten) = request_targets(broker, version, &req);
    let context = broker.fetch_sessions.new_context(
        version,
        req.session_id,
        req.session_epoch,
        follower,
        targets,
        &forgotten,
        Instant::now(),
    );
    let (ctx, targets) = match context {
        Ok(c) => c,
        Err(code) => return Outcome::Now(error_response(code, fetch_session::INVALID_SESSION_ID)),
    };
    let denied = denied_targets(broker, session, follower, &targets);
    let infos = targets
        .iter()
        .enumerate()
        .filter(|(i, _)| denied.as_ref().is_none_or(|d| !d[*i]))
        .map(|(_, t)| {
            let tp = TopicPartition::new(t.topic.clone(), t.key.partition);
            (tp, t.info.clone())
        })
        .collect();
    let b = broker.clone();
    let session = session.clone();
    broker
        .replicas
        .fetch_messages(params, infos)
        .map(move |read| {
            let read = match &denied {
                Some(d) => with_denied(read, d),
                None => read,
            };
            respond(&b, &session, ctx, targets, read)
        })
}

/// Which targets the session may not read: all of a follower's without CLUSTER_ACTION, and a
/// consumer's in topics it may not READ (asked once per topic). `None` without an authorizer,
/// so an open broker's fetches pay nothing for it.
fn denied_targets(
    broker: &Broker,
    session: &Session,
    follower: bool,
    targets: &[FetchTarget],
) -> Option<Vec<bool>> {
    broker.acl_decisions()?;
    if follower {
        let ok = broker.authorize(session, Action::cluster(AclOperation::ClusterAction));
        return Some(vec![!ok; targets.len()]);
    }
    let mut by_topic: HashMap<&str, bool> = HashMap::new();
    let denied = targets
        .iter()
        .map(|t| {
            !*by_topic.entry(&t.topic).or_insert_with(|| {
                broker.authorize(session, Action::topic(AclOperation::Read, &t.topic))
            })
        })
        .collect();
    Some(denied)
}

/// The read results of the allowed targets, with TOPIC_AUTHORIZATION_FAILED in the places of
/// the denied ones.
fn with_denied(read: Vec<FetchPartitionData>, denied: &[bool]) -> Vec<FetchPartitionData> {
    let mut read = read.into_iter();
    denied
        .iter()
        .map(|d| match d {
            true => FetchPartitionData {
                error: errors::TOPIC_AUTHORIZATION_FAILED,
                ..FetchPartitionData::default()
            },
            false => read.next().unwrap_or_default(),
        })
        .collect()
}

/// Who fetches: a consumer (from v11 it may read from a follower, KIP-392, and say its rack),
/// or a follower replica (its broker epoch is in the request from v15).
fn fetcher(version: i16, req: &FetchRequest) -> Fetcher {
    if !is_follower(req) {
        let rack = req.rack_id.as_str().trim().to_string();
        Fetcher::Consumer {
            from_followers: version >= 11,
            rack: (version >= 11 && !rack.is_empty()).then_some(rack),
        }
    } else if version >= 15 {
        Fetcher::Replica {
            id: req.replica_state.replica_id.0,
            broker_epoch: req.replica_state.replica_epoch,
        }
    } else {
        Fetcher::Replica {
            id: req.replica_id.0,
            broker_epoch: -1,
        }
    }
}

pub fn list_offsets(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    // Either isolation level reads up to the high watermark: without transactions the last
    // stable offset is the high watermark.
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let may = broker.authorize(session, Action::topic(AclOperation::Describe, &name));
        let mut parts = Vec::new();
        for lp in t.partitions {
            let tp = TopicPartition::new(name.clone(), lp.partition_index);
            let base = ListOffsetsPartitionResponse::default()
                .with_partition_index(lp.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let found = match may {
                true => broker.replicas.fetch_offset_for_timestamp(
                    &tp,
                    lp.current_leader_epoch,
                    lp.timestamp,
                ),
                false => Err(errors::TOPIC_AUTHORIZATION_FAILED),
            };
            parts.push(match found {
                // leader_epoch is on the wire from v4: older versions cannot carry it.
                Ok(Some(f)) => base
                    .with_timestamp(f.timestamp)
                    .with_offset(f.offset)
                    .with_leader_epoch(if version >= 4 {
                        f.leader_epoch.unwrap_or(-1)
                    } else {
                        -1
                    }),
                Ok(None) => base,
                Err(code) => base.with_error_code(code),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(parts),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// OffsetForLeaderEpoch: where `leader_epoch` ended in this log (Kafka's `endOffsetForEpoch`),
/// after checking the caller's view of the current leader epoch.
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    session: &Session,
    req: kafka_protocol::messages::OffsetForLeaderEpochRequest,
) -> kafka_protocol::messages::OffsetForLeaderEpochResponse {
    // A follower asks as a broker (CLUSTER_ACTION); a consumer needs DESCRIBE on the topic.
    let follower = req.replica_id.0 >= 0;
    let cluster_ok =
        follower && broker.authorize(session, Action::cluster(AclOperation::ClusterAction));
    use kafka_protocol::messages::offset_for_leader_epoch_response::{
        EpochEndOffset, OffsetForLeaderTopicResult,
    };
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.topic.0.to_string();
        let denied = match follower {
            true => (!cluster_ok).then_some(errors::CLUSTER_AUTHORIZATION_FAILED),
            false => (!broker.authorize(session, Action::topic(AclOperation::Describe, &name)))
                .then_some(errors::TOPIC_AUTHORIZATION_FAILED),
        };
        let mut parts = Vec::new();
        for p in t.partitions {
            let base = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let tp = TopicPartition::new(name.clone(), p.partition);
            let found = match denied {
                Some(code) => Err(code),
                None => broker.replicas.last_offset_for_leader_epoch(
                    &tp,
                    p.current_leader_epoch,
                    p.leader_epoch,
                ),
            };
            parts.push(match found {
                Ok((epoch, end)) => base.with_leader_epoch(epoch).with_end_offset(end),
                Err(code) => base.with_error_code(code),
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_partitions(parts),
        );
    }
    kafka_protocol::messages::OffsetForLeaderEpochResponse::default().with_topics(topics)
}
