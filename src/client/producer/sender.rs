//! The sender (Java's Sender): one task that turns the accumulator's ready batches into Produce
//! requests, over one pipelined connection per broker with up to
//! `max.in.flight.requests.per.connection` requests each, and settles every batch from its
//! answer: written, put back for a retry, or failed.
//!
//! Answers are handled by a task per request, which wakes the sender. Metadata is refreshed by
//! its own task when a leader is unknown or has moved, and every `metadata.max.age.ms`.
//!
//! As Java's Sender: a batch of several records refused as MESSAGE_TOO_LARGE is split and its
//! parts queued again (`RecordAccumulator::split_and_reenqueue`); batches past
//! `delivery.timeout.ms` fail, whether queued or in flight (`InFlightBatches`), and an answer
//! that comes for an expired batch is ignored.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;

use super::batch::ProducerBatch;
use super::idempotence::ProducerIdAndEpoch;
use super::in_flight::InFlightBatch;
use super::kafka_producer::Shared;
use super::ProduceError;
use crate::client::pipeline::{PipelinedConnection, Sent};
use crate::client::{ClientError, ClientSecurity, Connection};
use crate::protocol::errors;

/// Milliseconds since the Unix epoch, the producer's clock (Kafka's timestamps).
pub(super) use crate::storage::log::now_ms;

/// The longest the sender sleeps without a reason to wake (expiry checks need a tick).
const MAX_IDLE: Duration = Duration::from_millis(100);

/// One broker's connection as the sender sees it.
enum NodeConn {
    Connecting,
    Ready(Arc<PipelinedConnection>),
    /// The last attempt failed; try again after `reconnect.backoff.ms`.
    Backoff(Instant),
}

type Connections = Arc<Mutex<HashMap<i32, NodeConn>>>;

pub(super) async fn run(shared: Arc<Shared>) {
    let conns: Connections = Arc::default();
    // Stops the refresher however this task ends, an abort (the producer dropped) included.
    let _refresher = AbortOnDrop(tokio::spawn(refresh_metadata(shared.clone())));
    loop {
        if shared.config.enable_idempotence && shared.idempotence.producer_id().is_none() {
            // Asked for once there is something to send: a producer that never sends (one
            // the cluster refuses to describe its topic to) asks nothing.
            if stop_now(&shared) {
                break;
            }
            if shared.accumulator.incomplete_batches() == 0 {
                let _ = tokio::time::timeout(MAX_IDLE, shared.wake.notified()).await;
                continue;
            }
            if let Err(e) = init_producer_id(&shared).await {
                tracing::warn!(error = %e, "cannot get a producer id");
                fail_expired(&shared, now_ms());
                let wait = if is_refusal(&e) {
                    // As Java's fatal error: what is queued fails now, with the refusal.
                    fail_queued(&shared, refusal(&e));
                    reconnect_backoff(&shared, &e)
                } else {
                    retry_backoff(&shared)
                };
                if stop_now(&shared) {
                    break;
                }
                tokio::time::sleep(wait).await;
                continue;
            }
        }
        let sent = run_once(&shared, &conns);
        if stop_now(&shared) {
            break;
        }
        match sent {
            Some(delay) => {
                let _ = tokio::time::timeout(delay, shared.wake.notified()).await;
            }
            // Something was sent: go again, after the tasks that wait for answers had a turn.
            None => tokio::task::yield_now().await,
        }
    }
    shared.stopped.notify_waiters();
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// After `close`, the sender stops once no batch is left.
fn stop_now(shared: &Shared) -> bool {
    shared.closing.load(Ordering::SeqCst) && shared.accumulator.incomplete_batches() == 0
}

fn retry_backoff(shared: &Shared) -> Duration {
    Duration::from_millis(shared.config.accumulator.retry_backoff_ms.max(1) as u64)
}

/// One pass: expire, find ready brokers, drain, send. Returns how long to wait before the next
/// pass (`None`: go again at once, something was sent).
fn run_once(shared: &Arc<Shared>, conns: &Connections) -> Option<Duration> {
    let now = now_ms();
    fail_expired(shared, now);
    let view = shared.metadata.view();
    let ready = shared.accumulator.ready(&view, now);
    if !ready.unknown_leader_topics.is_empty() {
        shared.metadata.request_update();
    }
    let mut nodes = BTreeSet::new();
    let mut usable = HashMap::new();
    for node in ready.ready_nodes {
        let conn = connection(shared, conns, node);
        shared
            .accumulator
            .update_node_latency_stats(node, now, conn.is_some());
        if let Some(c) = conn {
            nodes.insert(node);
            usable.insert(node, c);
        }
    }
    let idempotent = shared.config.enable_idempotence;
    let hold = |b: &ProducerBatch| idempotent && shared.idempotence.should_hold(b);
    let max = shared.config.max_request_size;
    let drained = shared
        .accumulator
        .drain_holding(&view, &nodes, max, now, &hold);
    let mut sent = false;
    for (node, batches) in drained {
        if batches.is_empty() {
            continue;
        }
        if let Some(conn) = usable.remove(&node) {
            send_produce(shared, conns, node, conn, batches, now);
            sent = true;
        }
    }
    if sent {
        return None;
    }
    let next = ready
        .next_ready_check_delay_ms
        .clamp(1, MAX_IDLE.as_millis() as i64);
    Some(Duration::from_millis(next as u64))
}

/// The connection to `node` if it can take another request; otherwise starts connecting (in
/// the background, so that a dead broker holds up no other) and returns `None`.
fn connection(
    shared: &Arc<Shared>,
    conns: &Connections,
    node: i32,
) -> Option<Arc<PipelinedConnection>> {
    let mut map = conns.lock();
    match map.get(&node) {
        Some(NodeConn::Ready(c)) if !c.is_broken() => {
            return (c.in_flight() < shared.config.max_in_flight).then(|| c.clone());
        }
        Some(NodeConn::Connecting) => return None,
        Some(NodeConn::Backoff(until)) if Instant::now() < *until => return None,
        _ => {}
    }
    let Some(addr) = shared.metadata.node_address(node) else {
        shared.metadata.request_update();
        return None;
    };
    map.insert(node, NodeConn::Connecting);
    let (shared, conns) = (shared.clone(), conns.clone());
    tokio::spawn(async move {
        let timeout = request_timeout(&shared);
        let security = &shared.config.security;
        let state = match PipelinedConnection::connect(&addr, timeout, security).await {
            Ok(c) => NodeConn::Ready(Arc::new(c)),
            Err(e) => {
                tracing::debug!(node, %addr, error = %e, "cannot connect to the broker");
                shared.metadata.request_update();
                NodeConn::Backoff(Instant::now() + reconnect_backoff(&shared, &e))
            }
        };
        conns.lock().insert(node, state);
        shared.wake.notify_one();
    });
    None
}

/// How long to wait before connecting again after `e`: `reconnect.backoff.ms`, or
/// `reconnect.backoff.max.ms` when the cluster refused this client (its login or its rights),
/// which a quick retry cannot change.
fn reconnect_backoff(shared: &Shared, e: &ClientError) -> Duration {
    let ms = if is_refusal(e) {
        shared.config.reconnect_backoff_max_ms
    } else {
        shared.config.reconnect_backoff_ms
    };
    Duration::from_millis(ms.max(1) as u64)
}

/// A refused login, or an authorization error.
fn is_refusal(e: &ClientError) -> bool {
    e.is_login_refused()
        || e.code().is_some_and(|c| {
            matches!(
                c,
                errors::CLUSTER_AUTHORIZATION_FAILED | errors::TOPIC_AUTHORIZATION_FAILED
            )
        })
}

fn request_timeout(shared: &Shared) -> Duration {
    Duration::from_millis(shared.config.request_timeout_ms.max(1) as u64)
}

/// Drops the connection to `node` if it is still `conn` (its requests in flight fail and are
/// retried).
fn drop_connection(conns: &Connections, node: i32, conn: &Arc<PipelinedConnection>) {
    let mut map = conns.lock();
    if let Some(NodeConn::Ready(c)) = map.get(&node) {
        if Arc::ptr_eq(c, conn) {
            map.remove(&node);
        }
    }
}

/// Sequences and encodes the batches, queues one Produce request on the connection, and leaves
/// its answer to a task of its own.
fn send_produce(
    shared: &Arc<Shared>,
    conns: &Connections,
    node: i32,
    conn: Arc<PipelinedConnection>,
    batches: Vec<ProducerBatch>,
    now: i64,
) {
    let Some(version) = conn.version(ApiKey::Produce) else {
        let e = ClientError::Protocol(format!("broker {node} speaks no Produce version 3+"));
        for b in batches {
            fail(shared, b, ProduceError::Metadata(e.to_string()));
        }
        return;
    };
    let (batches, topics) = encode_all(shared, batches, now);
    if batches.is_empty() {
        return;
    }
    let acks = shared.config.acks;
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(shared.config.request_timeout_ms.min(i32::MAX as i64) as i32)
        .with_topic_data(topics);
    if shared.config.max_in_flight == 1 {
        for b in &batches {
            shared.accumulator.mute_partition(&b.topic, b.partition);
        }
    }
    let batches: Vec<Arc<InFlightBatch>> = batches
        .into_iter()
        .map(|b| shared.in_flight.add(b))
        .collect();
    let started = Instant::now();
    match conn.send(&req, version, acks != 0) {
        Err(e) => {
            drop_connection(conns, node, &conn);
            settle_all(shared, batches, Err(e));
        }
        Ok(Sent::Written(written)) => {
            // acks=0: nothing comes back; the records count as sent, with no offset, once
            // their request is written (Java's completion of a request it expects no answer to).
            let (shared, conns) = (shared.clone(), conns.clone());
            tokio::spawn(async move {
                match written.wait().await {
                    Ok(()) => {
                        let answered = batches
                            .into_iter()
                            .map(|b| (b, PartitionProduceResponse::default().with_base_offset(-1)))
                            .collect();
                        settle_answered(&shared, answered);
                    }
                    Err(e) => {
                        drop_connection(&conns, node, &conn);
                        settle_all(&shared, batches, Err(e));
                    }
                }
                shared.wake.notify_one();
            });
        }
        Ok(Sent::Answer(answer)) => {
            let (shared, conns) = (shared.clone(), conns.clone());
            let timeout = request_timeout(&shared) + Duration::from_secs(1);
            tokio::spawn(async move {
                let result = answer.wait(timeout).await;
                shared
                    .metrics
                    .request_answered(started.elapsed().as_millis() as i64);
                if result.is_err() {
                    drop_connection(&conns, node, &conn);
                }
                settle_all(&shared, batches, result);
                shared.wake.notify_one();
            });
        }
    }
}

/// Gives each batch its sequence (idempotence) and encodes it; a batch that cannot be encoded
/// fails on its own.
fn encode_all(
    shared: &Shared,
    batches: Vec<ProducerBatch>,
    now: i64,
) -> (Vec<ProducerBatch>, Vec<TopicProduceData>) {
    let mut kept = Vec::with_capacity(batches.len());
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for mut b in batches {
        if shared.config.enable_idempotence && !shared.idempotence.sequence(&mut b) {
            // The producer id was lost since the drain: back to the queue until a new one.
            shared.accumulator.reenqueue(b, now);
            continue;
        }
        let (pid, epoch, seq) = b.sequence.map_or((-1, -1, -1), |q| {
            (q.producer_id, q.producer_epoch, q.base_sequence)
        });
        let records = match b.encode(pid, epoch, seq) {
            Ok((bytes, ratio)) => {
                shared.accumulator.record_compression_ratio(&b.topic, ratio);
                b.set_compression_ratio(ratio);
                bytes
            }
            Err(e) => {
                shared.idempotence.resolved(&b);
                fail(shared, b, ProduceError::Metadata(e));
                continue;
            }
        };
        shared
            .metrics
            .batch_drained(records.len(), now - b.created_ms);
        let part = PartitionProduceData::default()
            .with_index(b.partition)
            .with_records(Some(records));
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == b.topic => t.partition_data.push(part),
            _ => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(b.topic.clone())))
                    .with_partition_data(vec![part]),
            ),
        }
        kept.push(b);
    }
    (kept, topics)
}

/// Settles the batches of one request from its answer, or from the failure to get one (a
/// lost connection: every batch is retried, and the metadata refreshed).
fn settle_all(
    shared: &Shared,
    batches: Vec<Arc<InFlightBatch>>,
    result: Result<ProduceResponse, ClientError>,
) {
    let resp = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "a produce request got no answer");
            shared.metadata.request_update();
            let why = PartitionProduceResponse::default()
                .with_error_code(errors::NETWORK_EXCEPTION)
                .with_error_message(Some(StrBytes::from_string(e.to_string())));
            let answered = batches.into_iter().map(|b| (b, why.clone())).collect();
            return settle_answered(shared, answered);
        }
    };
    let mut by_partition: HashMap<(String, i32), PartitionProduceResponse> = HashMap::new();
    for t in resp.responses {
        for p in t.partition_responses {
            by_partition.insert((t.name.0.to_string(), p.index), p);
        }
    }
    let answered = batches
        .into_iter()
        .map(|b| {
            let p = by_partition
                .remove(&(b.topic.clone(), b.partition))
                .unwrap_or_else(|| {
                    PartitionProduceResponse::default()
                        .with_error_code(errors::UNKNOWN_SERVER_ERROR)
                        .with_error_message(Some(StrBytes::from_static_str(
                            "the produce response left out this partition",
                        )))
                });
            (b, p)
        })
        .collect();
    settle_answered(shared, answered);
}

/// Settles each answered batch that is still in flight; one that expired meanwhile was failed
/// already and its answer changes nothing (Java: a batch in a final state stays in it).
fn settle_answered(shared: &Shared, answered: Vec<(Arc<InFlightBatch>, PartitionProduceResponse)>) {
    let now = now_ms();
    for (slot, p) in answered {
        if shared.config.max_in_flight == 1 {
            shared
                .accumulator
                .unmute_partition(&slot.topic, slot.partition);
        }
        match shared.in_flight.take(&slot) {
            Some(b) => settle(shared, b, &p, now),
            None => {
                tracing::debug!(topic = %slot.topic, partition = slot.partition, error = errors::error_name(p.error_code), "ignoring the answer for an expired batch")
            }
        }
    }
}

/// What a partition's answer means for its batch.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Written,
    Retry,
    /// Retry under a new producer id (the leader lost or fenced ours).
    RetryAfterReset,
    /// Too large for the leader: split it and send the parts (it holds more than one record).
    Split,
    Fail,
}

/// Kafka's rules for a produce error: which are retried, which say the sequence is broken, which
/// split the batch (Java's `Sender.completeBatch`; attempts and the delivery timeout do not
/// stop a split).
fn verdict(code: i16, earlier_unresolved: bool, record_count: usize) -> Verdict {
    match code {
        errors::MESSAGE_TOO_LARGE if record_count > 1 => Verdict::Split,
        // DUPLICATE_SEQUENCE_NUMBER: the leader has the batch already (an earlier attempt).
        errors::NONE | errors::DUPLICATE_SEQUENCE_NUMBER => Verdict::Written,
        errors::UNKNOWN_PRODUCER_ID | errors::INVALID_PRODUCER_EPOCH => Verdict::RetryAfterReset,
        // Out of order behind a batch that is being retried: it will follow it.
        errors::OUT_OF_ORDER_SEQUENCE_NUMBER if earlier_unresolved => Verdict::Retry,
        c if errors::is_retriable(c) => Verdict::Retry,
        _ => Verdict::Fail,
    }
}

fn settle(shared: &Shared, b: ProducerBatch, p: &PartitionProduceResponse, now: i64) {
    let code = p.error_code;
    if errors::is_invalid_metadata(code) {
        shared.metadata.request_update();
    }
    let earlier = shared.idempotence.has_earlier_unresolved(&b);
    let mut v = verdict(code, earlier, b.record_count());
    let can_retry = b.attempts < shared.config.retries
        && now - b.created_ms < shared.config.delivery_timeout_ms;
    if matches!(v, Verdict::Retry | Verdict::RetryAfterReset) && !can_retry {
        v = Verdict::Fail;
    }
    match v {
        Verdict::Written => {
            shared.idempotence.resolved(&b);
            let log_append_time = (p.log_append_time_ms >= 0).then_some(p.log_append_time_ms);
            succeed(shared, b, p.base_offset, log_append_time);
        }
        Verdict::Split => split(shared, b, p),
        Verdict::Retry | Verdict::RetryAfterReset => {
            if v == Verdict::RetryAfterReset {
                reset_producer_id(shared, &b);
            }
            tracing::debug!(topic = %b.topic, partition = b.partition, error = errors::error_name(code), attempt = b.attempts + 1, "retrying a batch");
            shared.metrics.batch_retried(b.record_count());
            shared.accumulator.reenqueue(b, now);
        }
        Verdict::Fail => {
            // A sequenced batch that is lost leaves a gap the leader would refuse.
            shared.idempotence.resolved(&b);
            if b.sequence.is_some() {
                reset_producer_id(shared, &b);
            }
            let message = p.error_message.as_ref().map(|m| m.to_string());
            let e = ProduceError::Kafka {
                code,
                name: errors::error_name(code),
                message: message.filter(|m| !m.is_empty()),
            };
            fail(shared, b, e);
        }
    }
}

/// Java's split on MESSAGE_TOO_LARGE: the parts take the batch's place in its queue, each
/// record's waiter now the part's, and the idempotent producer's sequences with them.
fn split(shared: &Shared, b: ProducerBatch, p: &PartitionProduceResponse) {
    let (topic, partition, records) = (b.topic.clone(), b.partition, b.record_count());
    let track = |big: &ProducerBatch, parts: &[ProducerBatch]| {
        if shared.config.enable_idempotence {
            shared.idempotence.split(big, parts);
        }
    };
    let parts = shared.accumulator.split_and_reenqueue(b, &track);
    shared.metrics.batch_split();
    let message = p.error_message.as_deref().map(|m| m.to_string());
    tracing::warn!(%topic, partition, records, parts, error = ?message, "a batch refused as MESSAGE_TOO_LARGE is split and sent again");
}

/// Forgets the producer id a lost batch was sequenced under (not a newer one).
fn reset_producer_id(shared: &Shared, b: &ProducerBatch) {
    if !shared.config.enable_idempotence {
        return;
    }
    let current = shared.idempotence.producer_id();
    let under = b.sequence.map(|q| ProducerIdAndEpoch {
        producer_id: q.producer_id,
        epoch: q.producer_epoch,
    });
    if under.is_none() || under == current {
        shared.idempotence.reset();
    }
}

fn succeed(shared: &Shared, mut b: ProducerBatch, base_offset: i64, log_append_time: Option<i64>) {
    shared.metrics.batch_acked(
        &b.topic,
        b.partition,
        b.record_count(),
        b.estimated_size_in_bytes(),
    );
    b.complete(Ok((base_offset, log_append_time)));
    shared.accumulator.complete_batch(&b);
}

fn fail(shared: &Shared, mut b: ProducerBatch, e: ProduceError) {
    shared.metrics.batch_failed(b.record_count());
    b.complete(Err(e));
    shared.accumulator.complete_batch(&b);
}

/// Fails the batches older than `delivery.timeout.ms`, queued or in flight (Java's message). A
/// sequenced one leaves its partition's sequence unknown: the producer takes a new id.
fn fail_expired(shared: &Shared, now: i64) {
    let timeout = shared.config.delivery_timeout_ms;
    let mut expired = shared.in_flight.expired(now, timeout);
    expired.extend(shared.accumulator.expired_batches(now, timeout));
    for b in expired {
        let e = ProduceError::Timeout(format!(
            "Expiring {} record(s) for {}-{}:{} ms has passed since batch creation",
            b.record_count(),
            b.topic,
            b.partition,
            now - b.created_ms
        ));
        shared.idempotence.resolved(&b);
        if b.sequence.is_some() {
            reset_producer_id(shared, &b);
        }
        fail(shared, b, e);
    }
}

/// The error a refused producer's records fail with: the Kafka error, or for a refused login
/// SASL_AUTHENTICATION_FAILED with the broker's words.
fn refusal(e: &ClientError) -> ProduceError {
    let code = e.code().unwrap_or(errors::SASL_AUTHENTICATION_FAILED);
    ProduceError::Kafka {
        code,
        name: errors::error_name(code),
        message: Some(e.to_string()),
    }
}

/// Fails every queued batch with `e`.
fn fail_queued(shared: &Shared, e: ProduceError) {
    for b in shared.accumulator.take_queued() {
        fail(shared, b, e.clone());
    }
}

/// Asks any broker for a producer id (InitProducerId without a transactional id).
async fn init_producer_id(shared: &Shared) -> Result<(), ClientError> {
    let view_nodes = shared.metadata.node_addresses();
    let bootstrap: Vec<String> = shared
        .config
        .bootstrap
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut last = ClientError::NoBroker("no broker to ask for a producer id".into());
    for addr in view_nodes.iter().chain(bootstrap.iter()) {
        match init_producer_id_at(addr, request_timeout(shared), &shared.config.security).await {
            Ok(pid) => {
                tracing::debug!(
                    producer_id = pid.producer_id,
                    epoch = pid.epoch,
                    "got a producer id"
                );
                shared.idempotence.set_producer_id(pid);
                return Ok(());
            }
            Err(e) if e.is_login_refused() => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

async fn init_producer_id_at(
    addr: &str,
    timeout: Duration,
    security: &ClientSecurity,
) -> Result<ProducerIdAndEpoch, ClientError> {
    let conn = Connection::connect_with(addr, timeout, security).await?;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let resp = conn.call(&req).await?;
    if resp.error_code != errors::NONE {
        return Err(ClientError::kafka("InitProducerId", resp.error_code, None));
    }
    Ok(ProducerIdAndEpoch {
        producer_id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    })
}

/// Refreshes the metadata when asked (at most once per `retry.backoff.ms`) and every
/// `metadata.max.age.ms`, waking the sender after each.
async fn refresh_metadata(shared: Arc<Shared>) {
    let max_age = Duration::from_millis(shared.config.metadata_max_age_ms.max(1) as u64);
    let mut last = Instant::now();
    loop {
        let asked = shared.metadata.take_update_request();
        if asked || last.elapsed() >= max_age {
            let mut wait = retry_backoff(&shared).min(Duration::from_millis(50));
            if let Err(e) = shared.metadata.refresh().await {
                tracing::debug!(error = %e, "metadata refresh failed");
                shared.metadata.request_update();
                if is_refusal(&e) {
                    wait = reconnect_backoff(&shared, &e);
                }
            }
            last = Instant::now();
            shared.wake.notify_one();
            tokio::time::sleep(wait).await;
            continue;
        }
        tokio::time::sleep(retry_backoff(&shared).min(Duration::from_millis(50))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_errors_are_retried_or_failed_as_kafka_does() {
        let verdict = |code, earlier| super::verdict(code, earlier, 5);
        assert_eq!(verdict(errors::NONE, false), Verdict::Written);
        assert_eq!(
            verdict(errors::DUPLICATE_SEQUENCE_NUMBER, false),
            Verdict::Written
        );
        assert_eq!(
            verdict(errors::NOT_LEADER_OR_FOLLOWER, false),
            Verdict::Retry
        );
        assert_eq!(verdict(errors::NOT_ENOUGH_REPLICAS, false), Verdict::Retry);
        assert_eq!(verdict(errors::NETWORK_EXCEPTION, false), Verdict::Retry);
        assert_eq!(
            verdict(errors::OUT_OF_ORDER_SEQUENCE_NUMBER, true),
            Verdict::Retry
        );
        assert_eq!(
            verdict(errors::OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            Verdict::Fail
        );
        assert_eq!(
            verdict(errors::UNKNOWN_PRODUCER_ID, false),
            Verdict::RetryAfterReset
        );
        assert_eq!(verdict(errors::MESSAGE_TOO_LARGE, false), Verdict::Split);
        assert_eq!(
            super::verdict(errors::MESSAGE_TOO_LARGE, false, 1),
            Verdict::Fail,
            "one record cannot be split"
        );
        assert_eq!(verdict(errors::INVALID_RECORD, false), Verdict::Fail);
    }
}
