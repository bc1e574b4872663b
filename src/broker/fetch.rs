//! Fetch (incremental fetch sessions, `fetch.min.bytes` / `fetch.max.wait.ms` through
//! DelayedFetch, per-partition and per-response byte limits), ListOffsets, OffsetForLeaderEpoch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
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

use super::fetch_session::{self, FetchContext, FetchParams, FetchTarget, PartitionKey};
use super::partition::{Divergence, FetchIsolation, Partition, PartitionError, ReadResult};
use super::{Broker, Outcome};
use crate::protocol::errors;
use crate::storage::log::{EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::storage::TopicPartition;

/// What one read pass found.
struct Pass {
    /// One entry per target, in target order.
    parts: Vec<PartitionData>,
    bytes: i64,
    errors: bool,
    /// The offset reads stop at (high watermark, or log end for followers) per partition, to
    /// detect data that arrives before watching begins.
    seen: Vec<(Arc<Partition>, i64)>,
    /// Leaders named in NOT_LEADER_OR_FOLLOWER answers (KIP-951 node endpoints).
    leaders: Vec<i32>,
}

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
                params: FetchParams {
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

/// Who is fetching: a consumer (from v11 it may read from a follower, KIP-392, and says its
/// rack), or a follower replica with its broker epoch.
#[derive(Debug, Clone)]
enum Fetcher {
    Consumer {
        from_followers: bool,
        rack: Option<String>,
    },
    Replica {
        id: i32,
        broker_epoch: i64,
    },
}

/// Reads every target once, within `max_bytes` for the whole response.
fn read_pass(broker: &Broker, targets: &[FetchTarget], max_bytes: i64, who: &Fetcher) -> Pass {
    let mut pass = Pass {
        parts: Vec::with_capacity(targets.len()),
        bytes: 0,
        errors: false,
        seen: Vec::new(),
        leaders: Vec::new(),
    };
    for t in targets {
        let base = PartitionData::default()
            .with_partition_index(t.key.partition)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1);
        let tp = TopicPartition::new(t.topic.clone(), t.key.partition);
        let epoch = t.params.current_leader_epoch;
        let found = match who {
            Fetcher::Consumer {
                from_followers: true,
                ..
            } => broker.replicas.readable_partition(&tp, epoch),
            _ => broker.replicas.leader_partition(&tp, epoch),
        };
        match found {
            Ok(p) => pass.read_partition(broker, &p, t, max_bytes, who, base),
            Err(e) => pass.not_served(t, e, base),
        }
    }
    pass
}

impl Pass {
    /// A partition this broker does not serve to this fetcher: its error, with the leader
    /// when known (KIP-951).
    fn not_served(&mut self, t: &FetchTarget, e: PartitionError, base: PartitionData) {
        self.errors = true;
        let code = if t.topic.is_empty() {
            errors::UNKNOWN_TOPIC_ID
        } else {
            e.code
        };
        let mut data = base.with_error_code(code).with_records(Some(Bytes::new()));
        let names_leader = matches!(
            code,
            errors::NOT_LEADER_OR_FOLLOWER | errors::FENCED_LEADER_EPOCH
        );
        if let (Some((leader, epoch)), true) = (e.current_leader, names_leader) {
            self.leaders.push(leader);
            data = data.with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch),
            );
        }
        self.parts.push(data);
    }

    /// Reads one served partition into the answer: its records, a preferred read replica
    /// (KIP-392), a diverging epoch for a follower, or the read's error.
    fn read_partition(
        &mut self,
        broker: &Broker,
        p: &Arc<Partition>,
        t: &FetchTarget,
        max_bytes: i64,
        who: &Fetcher,
        base: PartitionData,
    ) {
        if let Some(other) = preferred_read_replica(broker, p, t, who) {
            // Answered at once, without records: the consumer reads from `other`.
            self.errors = true;
            let (hw, start) = p.offsets();
            self.parts.push(
                base.with_high_watermark(hw)
                    .with_last_stable_offset(hw)
                    .with_log_start_offset(start)
                    .with_preferred_read_replica(BrokerId(other))
                    .with_records(Some(Bytes::new())),
            );
            return;
        }
        let budget = (max_bytes - self.bytes).max(0);
        let limit = (t.params.max_bytes.max(0) as i64).min(budget) as usize;
        // Like Kafka, the first partition with data may exceed the limits by one batch.
        let min_one = self.bytes == 0;
        match read_records(broker, p, t, limit, min_one, who) {
            Ok((r, divergence)) => {
                self.bytes += r.records.len() as i64;
                let upto = match who {
                    Fetcher::Consumer { .. } => r.high_watermark,
                    Fetcher::Replica { .. } => p.fetch_position().0,
                };
                self.seen.push((p.clone(), upto));
                let mut data = base
                    .with_high_watermark(r.high_watermark)
                    .with_last_stable_offset(r.high_watermark)
                    .with_log_start_offset(r.log_start_offset)
                    .with_records(Some(Bytes::from(r.records)));
                if let Some(d) = divergence {
                    // Answered at once: the follower truncates before it fetches again.
                    self.errors = true;
                    data = data.with_diverging_epoch(
                        EpochEndOffset::default()
                            .with_epoch(d.epoch)
                            .with_end_offset(d.end_offset),
                    );
                }
                self.parts.push(data);
            }
            Err(e) => {
                self.errors = true;
                let (hw, start) = p.offsets();
                self.parts.push(
                    base.with_error_code(e.code)
                        .with_high_watermark(hw)
                        .with_last_stable_offset(hw)
                        .with_log_start_offset(start)
                        .with_records(Some(Bytes::new())),
                );
            }
        }
    }
}

/// KIP-392: the replica a consumer that named its rack should read from instead, if any.
fn preferred_read_replica(
    broker: &Broker,
    p: &Partition,
    t: &FetchTarget,
    who: &Fetcher,
) -> Option<i32> {
    let Fetcher::Consumer {
        rack: Some(rack), ..
    } = who
    else {
        return None;
    };
    broker
        .replicas
        .preferred_read_replica(p, rack, t.params.fetch_offset)
}

/// A consumer reads up to the high watermark; a follower reads for replication, and may
/// learn that its log diverges from the leader's.
fn read_records(
    broker: &Broker,
    p: &Partition,
    t: &FetchTarget,
    limit: usize,
    min_one: bool,
    who: &Fetcher,
) -> Result<(ReadResult, Option<Divergence>), PartitionError> {
    match who {
        Fetcher::Consumer { .. } => broker
            .replicas
            .read(
                p,
                t.params.fetch_offset,
                limit,
                min_one,
                FetchIsolation::HighWatermark,
            )
            .map(|r| (r, None)),
        Fetcher::Replica { id, broker_epoch } => broker
            .replicas
            .read_for_follower(
                p,
                *id,
                *broker_epoch,
                t.params.fetch_offset,
                t.params.last_fetched_epoch,
                limit,
                min_one,
            )
            .map(|f| (f.read, f.divergence)),
    }
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
    ctx: FetchContext,
    targets: Vec<FetchTarget>,
    pass: Pass,
) -> FetchResponse {
    let endpoints = super::produce::node_endpoints!(NodeEndpoint, broker, &pass.leaders);
    let read: Vec<_> = targets.into_iter().zip(pass.parts).collect();
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

/// Resolves the request's fetch session (KIP-227) and reads once; when fewer than
/// `fetch.min.bytes` are there, parks a DelayedFetch watching every partition read and returns
/// the wait as a future, so the request handler is free at once. The response is assembled by
/// the woken request itself, never by the appending thread.
pub fn fetch(broker: &Arc<Broker>, version: i16, req: FetchRequest) -> Outcome<FetchResponse> {
    let max_bytes = if req.max_bytes <= 0 {
        i64::MAX
    } else {
        req.max_bytes as i64
    };
    let min_bytes = req.min_bytes.max(0) as i64;
    let follower = is_follower(&req);
    let rack = req.rack_id.as_str().trim().to_string();
    let who = if !follower {
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
    let first = read_pass(broker, &targets, max_bytes, &who);
    if !follower {
        for (p, _) in &first.seen {
            p.note_consumer_fetch();
        }
    }
    if first.bytes >= min_bytes || first.errors || req.max_wait_ms <= 0 || targets.is_empty() {
        return Outcome::Now(respond(broker, ctx, targets, first));
    }
    let op = broker
        .replicas
        .delay_fetch(follower, min_bytes, first.bytes, &first.seen);
    let broker = broker.clone();
    let wait = Duration::from_millis(req.max_wait_ms as u64);
    Outcome::Later(Box::pin(async move {
        op.wait(wait).await;
        let pass = read_pass(&broker, &targets, max_bytes, &who);
        respond(&broker, ctx, targets, pass)
    }))
}

pub fn list_offsets(
    broker: &Arc<Broker>,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    // Either isolation level reads up to the high watermark: without transactions the last
    // stable offset is the high watermark.
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut parts = Vec::new();
        for lp in t.partitions {
            let tp = TopicPartition::new(name.clone(), lp.partition_index);
            let base = ListOffsetsPartitionResponse::default()
                .with_partition_index(lp.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let p = match broker
                .replicas
                .leader_partition(&tp, lp.current_leader_epoch)
            {
                Ok(p) => p,
                Err(e) => {
                    parts.push(base.with_error_code(e.code));
                    continue;
                }
            };
            let (hw, found) = match p.offset_for_timestamp(lp.timestamp) {
                Ok((hw, f)) => (hw, Ok(f)),
                Err(e) => (0, Err(e)),
            };
            // Tiered storage (-5) and unknown special values: nothing to report.
            let found = if lp.timestamp < 0
                && !matches!(
                    lp.timestamp,
                    LATEST_TIMESTAMP
                        | EARLIEST_TIMESTAMP
                        | EARLIEST_LOCAL_TIMESTAMP
                        | crate::storage::log::MAX_TIMESTAMP
                ) {
                Ok(None)
            } else {
                found
            };
            let special = matches!(
                lp.timestamp,
                LATEST_TIMESTAMP | EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP
            );
            parts.push(match found {
                // Only committed records (below the high watermark) are answered.
                // leader_epoch is on the wire from v4: older versions cannot carry it.
                Ok(Some(f)) if special || f.offset < hw => base
                    .with_timestamp(f.timestamp)
                    .with_offset(f.offset)
                    .with_leader_epoch(if version >= 4 {
                        f.leader_epoch.unwrap_or(-1)
                    } else {
                        -1
                    }),
                Ok(_) => base,
                Err(e) => base.with_error_code(e.kafka_error_code()),
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
    req: kafka_protocol::messages::OffsetForLeaderEpochRequest,
) -> kafka_protocol::messages::OffsetForLeaderEpochResponse {
    use kafka_protocol::messages::offset_for_leader_epoch_response::{
        EpochEndOffset, OffsetForLeaderTopicResult,
    };
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.topic.0.to_string();
        let mut parts = Vec::new();
        for p in t.partitions {
            let base = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            let tp = TopicPartition::new(name.clone(), p.partition);
            let part = match broker
                .replicas
                .leader_partition(&tp, p.current_leader_epoch)
            {
                Ok(part) => part,
                Err(e) => {
                    parts.push(base.with_error_code(e.code));
                    continue;
                }
            };
            let (epoch, end) = part.end_offset_for_epoch(p.leader_epoch);
            parts.push(base.with_leader_epoch(epoch).with_end_offset(end));
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_partitions(parts),
        );
    }
    kafka_protocol::messages::OffsetForLeaderEpochResponse::default().with_topics(topics)
}
