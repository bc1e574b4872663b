//! Produce: validation and append per partition, acks 0 / 1 / -1; acks=-1 waits in the
//! purgatory (DelayedProduce) until the high watermark covers the batch or the timeout passes.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{
    BrokerId, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
    ProducerId,
};
use kafka_protocol::protocol::StrBytes;

use super::auth::{Action, Session};
use super::replica_manager::{PartitionError, PendingAppend};
use super::{msg, Broker, Outcome};
use crate::protocol::errors;
use crate::security::acl::AclOperation;
use crate::storage::TopicPartition;

/// A refused partition: its code and message, the refused records of an INVALID_RECORD batch,
/// and with NOT_LEADER_OR_FOLLOWER the leader this broker knows of (KIP-951, Produce v10+).
fn refused(index: i32, e: PartitionError, leaders: &mut Vec<i32>) -> PartitionProduceResponse {
    let record_errors = e
        .record_errors
        .into_iter()
        .map(|(i, m)| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(i)
                .with_batch_index_error_message(Some(StrBytes::from_string(m)))
        })
        .collect();
    let r = partition_error(index, e.code, Some(e.message)).with_record_errors(record_errors);
    match e.current_leader {
        Some((leader, epoch)) if e.code == errors::NOT_LEADER_OR_FOLLOWER => {
            if leader >= 0 && !leaders.contains(&leader) {
                leaders.push(leader);
            }
            r.with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch),
            )
        }
        _ => r,
    }
}

/// The `NodeEndpoint`s (of Produce or Fetch responses, KIP-951) of the leaders named in
/// NOT_LEADER_OR_FOLLOWER answers.
macro_rules! node_endpoints {
    ($ty:ty, $broker:expr, $session:expr, $leaders:expr) => {
        $crate::broker::produce::leader_endpoints($broker, $session, $leaders)
            .into_iter()
            .map(|(id, host, port, rack)| {
                <$ty>::default()
                    .with_node_id(BrokerId(id))
                    .with_host(StrBytes::from_string(host))
                    .with_port(port)
                    .with_rack(rack.map(StrBytes::from_string))
            })
            .collect::<Vec<$ty>>()
    };
}
pub(crate) use node_endpoints;

/// The endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers.
pub(crate) fn leader_endpoints(
    broker: &Broker,
    session: &Session,
    leaders: &[i32],
) -> Vec<(i32, String, i32, Option<String>)> {
    let img = broker.image();
    let listener = super::metadata::client_listener(broker, session);
    leaders
        .iter()
        .filter_map(|id| {
            let (host, port) = super::metadata::broker_endpoint(&img, *id, &listener)?;
            let rack = img.broker(*id).and_then(|b| b.rack.clone());
            Some((*id, host, port, rack))
        })
        .collect()
}

fn partition_error(index: i32, code: i16, message: Option<String>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(message.and_then(msg))
}

pub fn produce(
    broker: &Arc<Broker>,
    session: &Session,
    req: ProduceRequest,
) -> Outcome<Option<ProduceResponse>> {
    let mut appends = Appends {
        broker,
        acks: req.acks,
        waiting: Vec::new(),
        leaders: Vec::new(),
    };
    let mut responses = Vec::with_capacity(req.topic_data.len());
    let image = broker.image();
    for (ti, topic) in req.topic_data.into_iter().enumerate() {
        let name = if topic.name.0.is_empty() {
            image
                .topic_by_id(&topic.topic_id.into())
                .map(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            topic.name.0.to_string()
        };
        let may_write = broker.authorize(session, Action::topic(AclOperation::Write, &name));
        let parts = topic
            .partition_data
            .into_iter()
            .enumerate()
            .map(|(pi, pd)| match may_write {
                true => appends.partition(&name, (ti, pi), pd),
                false => partition_error(pd.index, errors::TOPIC_AUTHORIZATION_FAILED, None),
            })
            .collect();
        responses.push(
            TopicProduceResponse::default()
                .with_name(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(name),
                ))
                .with_topic_id(topic.topic_id)
                .with_partition_responses(parts),
        );
    }
    if appends.acks == 0 {
        return Outcome::Now(None);
    }
    let endpoints = node_endpoints!(NodeEndpoint, broker, session, &appends.leaders);
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    respond_when_replicated(broker, responses, appends.waiting, endpoints, timeout)
}

/// The appends of one Produce request: what waits for replication (acks=all) and the leaders
/// named in NOT_LEADER_OR_FOLLOWER answers.
struct Appends<'a> {
    broker: &'a Arc<Broker>,
    acks: i16,
    /// Each acks=all append, by its (topic, partition) position in the request.
    waiting: Vec<((usize, usize), PendingAppend)>,
    leaders: Vec<i32>,
}

impl Appends<'_> {
    /// Validates and appends one partition's records; `at` is its (topic, partition) position
    /// in the request.
    fn partition(
        &mut self,
        name: &str,
        at: (usize, usize),
        pd: PartitionProduceData,
    ) -> PartitionProduceResponse {
        if !matches!(self.acks, -1..=1) {
            return partition_error(pd.index, errors::INVALID_REQUIRED_ACKS, None);
        }
        if crate::metadata::is_internal_topic(name) {
            return partition_error(
                pd.index,
                errors::INVALID_TOPIC_EXCEPTION,
                Some(format!("Cannot append to internal topic {name}")),
            );
        }
        let tp = TopicPartition::new(name.to_string(), pd.index);
        let Some(records) = pd.records else {
            if let Err(e) = self.broker.replicas.check_leader(&tp, -1) {
                return refused(pd.index, e, &mut self.leaders);
            }
            return partition_error(
                pd.index,
                errors::CORRUPT_MESSAGE,
                Some("the request holds no record set".into()),
            );
        };
        let mut buf = records.to_vec();
        let (info, pending) = match self
            .broker
            .replicas
            .append_records(&tp, &mut buf, self.acks)
        {
            Ok(appended) => appended,
            Err(e) => {
                tracing::debug!(partition = %tp, error = %e.message, "produce refused");
                return refused(pd.index, e, &mut self.leaders);
            }
        };
        let m = &self.broker.metrics;
        m.bytes_in
            .with_label_values(&[name])
            .inc_by(info.valid_bytes as u64);
        m.messages_in
            .with_label_values(&[name])
            .inc_by(info.num_messages.max(0) as u64);
        if let Some(pending) = pending {
            self.waiting.push((at, pending));
        }
        PartitionProduceResponse::default()
            .with_index(pd.index)
            .with_base_offset(info.first_offset)
            .with_log_append_time_ms(info.log_append_time)
            .with_log_start_offset(info.log_start_offset)
    }
}

/// The answer, at once when nothing waits for replication or the ISR already has it all;
/// otherwise once ReplicaManager's DelayedProduce completes or `timeout` passes. An append
/// that did not reach enough replicas gets its error (Kafka's DelayedProduce onComplete).
fn respond_when_replicated(
    broker: &Arc<Broker>,
    mut responses: Vec<TopicProduceResponse>,
    waiting: Vec<((usize, usize), PendingAppend)>,
    endpoints: Vec<NodeEndpoint>,
    timeout: Duration,
) -> Outcome<Option<ProduceResponse>> {
    let (at, pending): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
    broker
        .replicas
        .await_replication(pending, timeout)
        .map(move |codes| {
            for ((topic, partition), code) in at.into_iter().zip(codes) {
                if code != errors::NONE {
                    let r = &mut responses[topic].partition_responses[partition];
                    r.error_code = code;
                    r.base_offset = -1;
                }
            }
            Some(
                ProduceResponse::default()
                    .with_responses(responses)
                    .with_node_endpoints(endpoints),
            )
        })
}

/// InitProducerId for idempotent producers: a fresh id at epoch 0, or (v3+, KIP-360) the same
/// id with its epoch bumped when the producer presents the id and epoch it had. Transactional
/// ids are refused until transactions are implemented.
pub fn init_producer_id(
    broker: &Arc<Broker>,
    session: &Session,
    req: InitProducerIdRequest,
) -> Outcome<InitProducerIdResponse> {
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if req.transactional_id.is_some() {
        return Outcome::Now(resp.with_error_code(errors::INVALID_REQUEST));
    }
    if !may_write_idempotently(broker, session) {
        return Outcome::Now(resp.with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED));
    }
    // A known producer with an epoch left to bump keeps its id; otherwise a new id, as Kafka does.
    if req.producer_id.0 >= 0 && (0..i16::MAX - 1).contains(&req.producer_epoch) {
        return Outcome::Now(
            resp.with_producer_id(req.producer_id)
                .with_producer_epoch(req.producer_epoch + 1),
        );
    }
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        match broker.next_producer_id().await {
            Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
            Err(code) => {
                tracing::warn!(
                    error = errors::error_name(code),
                    broker_epoch = broker.broker_epoch(),
                    "cannot allocate producer ids"
                );
                resp.with_error_code(init_producer_id_error(code))
            }
        }
    }))
}

/// An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on any topic (Kafka
/// 3.0's rule).
fn may_write_idempotently(broker: &Broker, session: &Session) -> bool {
    let Some(decisions) = broker.acl_decisions() else {
        return true;
    };
    if broker.authorize(session, Action::cluster(AclOperation::IdempotentWrite)) {
        return true;
    }
    let any_topic = decisions.authorize_any(
        &session.principal,
        &session.client_host,
        AclOperation::Write,
        crate::security::acl::ResourceType::Topic,
    ) == crate::security::authorizer::Decision::Allowed;
    broker.count_decision(any_topic);
    any_topic
}

/// What a client is told when no producer id could be had from the controller: retriable
/// codes, as Kafka's producer id manager answers while it waits for a block (a broker that is
/// still registering, or re-registering after a restart, has a stale epoch for a while).
fn init_producer_id_error(code: i16) -> i16 {
    match code {
        errors::REQUEST_TIMED_OUT => errors::COORDINATOR_NOT_AVAILABLE,
        errors::STALE_BROKER_EPOCH => errors::COORDINATOR_LOAD_IN_PROGRESS,
        other => other,
    }
}
