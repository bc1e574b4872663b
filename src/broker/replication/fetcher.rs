//! One replica fetcher (Kafka's ReplicaFetcherThread): a task that fetches its partitions from
//! one source broker in a loop — Fetch with this broker's id and broker epoch (KIP-903), each
//! partition at its log end with the epoch of its last batch — and hands each partition's answer
//! to ReplicaManager: append, truncate where the logs diverge, or start over at the leader's
//! range. A partition that fails, or whose answer changed nothing, waits
//! `replica.fetch.backoff.ms`; one that stays out of the ISR without progress is reported.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::stall::{Observation, StallEvent};
use super::{Assigned, FetcherContext, FetcherShared};
use crate::broker::partition::Divergence;
use crate::broker::replica_manager::ReplicaManager;
use crate::client::Connection;
use crate::config::replication::ReplicationConfig;
use crate::protocol::errors;
use crate::storage::{KafkaUuid, TopicPartition};

/// The partitions of one request, with what each was asked at.
struct Asked {
    tp: TopicPartition,
    topic_id: KafkaUuid,
    leader_epoch: i32,
    fetch_offset: i64,
    last_fetched_epoch: i32,
    log_start_offset: i64,
    throttled: bool,
    behind_retries: u32,
}

/// What one partition's answer did to this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Records appended, or the log truncated or started again: the next fetch asks anew.
    Moved,
    /// No records: the leader has nothing past this log's end (or held it back: a throttle).
    UpToDate,
    /// A divergence or an out-of-range answer that changed nothing here: the next fetch would
    /// ask the same question and get the same answer.
    Stuck,
}

impl Progress {
    /// Why a stalled partition (one that did not move) makes no progress.
    fn reason(self) -> &'static str {
        match self {
            Progress::Moved | Progress::UpToDate => {
                "the leader has nothing newer, yet has not taken this replica back into the ISR"
            }
            Progress::Stuck => {
                "the leader's answer (a divergence or an offset out of range) changes nothing here"
            }
        }
    }
}

pub(super) async fn run(
    ctx: FetcherContext,
    source: i32,
    index: usize,
    shared: Arc<FetcherShared>,
    cfg: ReplicationConfig,
) {
    let requests = ctx.metrics.fetcher_requests.with_label_values(&[
        &format!("ReplicaFetcherThread-{index}-{source}"),
        &source.to_string(),
    ]);
    let mut conn: Option<Connection> = None;
    let backoff = Duration::from_millis(cfg.fetch_backoff_ms.max(10));
    loop {
        let generation = shared.generation.load(Ordering::Acquire);
        let asked = ready_partitions(&ctx, &shared);
        if asked.is_empty() {
            let next = earliest_retry(&shared);
            let wait = next.map_or(Duration::from_secs(1), |t| {
                t.saturating_duration_since(Instant::now())
            });
            let _ = tokio::time::timeout(wait, shared.wake.notified()).await;
            continue;
        }
        if conn.as_ref().is_none_or(|c| c.is_broken()) {
            let addr = shared.address.lock().clone();
            let timeout = Duration::from_millis(cfg.socket_timeout_ms);
            match Connection::connect_with(&addr, timeout, &ctx.security).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    connect_failed(source, &addr, &e);
                    tokio::time::sleep(backoff).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_ref() else { continue };
        requests.inc();
        let Some(result) = fetch_unless_added(&ctx, c, &cfg, &asked, &shared, generation).await
        else {
            // The abandoned request's response would arrive as the next one's: start afresh.
            conn = None;
            continue;
        };
        match result {
            Ok(resp) => handle_response(&ctx, &shared, &cfg, &asked, resp),
            Err(e) => {
                tracing::debug!(source, error = %e, "replica fetch failed");
                conn = None;
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Logs a failed connection to the leader: a refused TLS handshake or SASL login as a WARN
/// (a configuration to fix; the fetcher's backoff paces the retries), anything else, such
/// as a leader that is down, at debug.
fn connect_failed(source: i32, addr: &str, e: &crate::client::ClientError) {
    match e {
        crate::client::ClientError::Security { .. } => {
            tracing::warn!(source, %addr, error = %e, "cannot connect to the leader's inter-broker listener")
        }
        _ => tracing::debug!(source, %addr, error = %e, "cannot reach the leader"),
    }
}

/// The partitions to fetch now: not backing off, still followed, throttled ones only while the
/// follower throttle allows.
fn ready_partitions(ctx: &FetcherContext, shared: &FetcherShared) -> Vec<Asked> {
    let now = Instant::now();
    let throttle_full = ctx.follower_throttle.is_exceeded();
    let Some(rm) = ctx.replicas() else {
        return Vec::new();
    };
    let parts: Vec<(TopicPartition, Assigned)> = shared
        .partitions
        .lock()
        .iter()
        .filter(|(_, a)| a.delayed_until.is_none_or(|t| t <= now))
        .map(|(tp, a)| (tp.clone(), a.clone()))
        .collect();
    let mut out = Vec::with_capacity(parts.len());
    for (tp, a) in parts {
        let throttled = rm.follower_throttled(&tp);
        if throttled && throttle_full {
            continue;
        }
        let Some((fetch_offset, last_fetched_epoch, log_start_offset)) = rm.fetch_position(&tp)
        else {
            continue;
        };
        out.push(Asked {
            tp,
            topic_id: a.topic_id,
            leader_epoch: a.leader_epoch,
            fetch_offset,
            last_fetched_epoch,
            log_start_offset,
            throttled,
            behind_retries: a.behind_retries,
        });
    }
    out
}

fn earliest_retry(shared: &FetcherShared) -> Option<Instant> {
    shared
        .partitions
        .lock()
        .values()
        .filter_map(|a| a.delayed_until)
        .min()
}

/// One fetch, or `None` once a partition not in it should be fetched now: one added to this
/// fetcher, or one whose quick retry after a leader behind on metadata is due. The leader holds
/// a fetch for up to `replica.fetch.wait.max.ms` when nothing new has arrived, and such a
/// partition (an acks=all produce may wait for it) should not wait that long.
async fn fetch_unless_added(
    ctx: &FetcherContext,
    conn: &Connection,
    cfg: &ReplicationConfig,
    asked: &[Asked],
    shared: &FetcherShared,
    generation: u64,
) -> Option<Result<FetchResponse, crate::client::ClientError>> {
    let fetch = fetch_once(ctx, conn, cfg, asked);
    tokio::pin!(fetch);
    let retry = earliest_behind_retry(shared);
    let retry_due = async {
        match retry {
            Some(t) => tokio::time::sleep_until(t.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(retry_due);
    loop {
        tokio::select! {
            r = &mut fetch => return Some(r),
            _ = &mut retry_due => return None,
            _ = shared.wake.notified() => {
                if shared.generation.load(Ordering::Acquire) != generation {
                    return None;
                }
            }
        }
    }
}

/// When the first partition still waiting out a quick retry (`delay_behind`) is due. One whose
/// retry is already due is left out: it is in the fetch being made (or held back by the
/// throttle), and counting it would abandon every fetch at once.
fn earliest_behind_retry(shared: &FetcherShared) -> Option<Instant> {
    let now = Instant::now();
    shared
        .partitions
        .lock()
        .values()
        .filter(|a| a.behind_retries > 0)
        .filter_map(|a| a.delayed_until)
        .filter(|t| *t > now)
        .min()
}

async fn fetch_once(
    ctx: &FetcherContext,
    conn: &Connection,
    cfg: &ReplicationConfig,
    asked: &[Asked],
) -> Result<FetchResponse, crate::client::ClientError> {
    let version = conn
        .version(kafka_protocol::messages::ApiKey::Fetch)
        .ok_or_else(|| {
            crate::client::ClientError::Protocol("the leader speaks no Fetch version 12+".into())
        })?;
    let epoch = (ctx.broker_epoch)();
    let mut topics: Vec<FetchTopic> = Vec::new();
    for a in asked {
        let part = FetchPartition::default()
            .with_partition(a.tp.partition)
            .with_current_leader_epoch(a.leader_epoch)
            .with_fetch_offset(a.fetch_offset)
            .with_last_fetched_epoch(a.last_fetched_epoch)
            .with_log_start_offset(a.log_start_offset)
            .with_partition_max_bytes(cfg.fetch_max_bytes);
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == a.tp.topic => t.partitions.push(part),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(a.tp.topic.clone())))
                    .with_topic_id(uuid::Uuid::from_bytes(a.topic_id.0))
                    .with_partitions(vec![part]),
            ),
        }
    }
    let id = BrokerId(ctx.node_id);
    let mut req = FetchRequest::default()
        .with_max_wait_ms(cfg.fetch_wait_max_ms)
        .with_min_bytes(cfg.fetch_min_bytes)
        .with_max_bytes(cfg.fetch_response_max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    if version >= 15 {
        req = req.with_replica_state(
            ReplicaState::default()
                .with_replica_id(id)
                .with_replica_epoch(epoch),
        );
    } else {
        req = req.with_replica_id(id);
    }
    conn.call_at(&req, version).await
}

fn handle_response(
    ctx: &FetcherContext,
    shared: &FetcherShared,
    cfg: &ReplicationConfig,
    asked: &[Asked],
    resp: FetchResponse,
) {
    let backoff = Duration::from_millis(cfg.fetch_backoff_ms);
    if resp.error_code != errors::NONE {
        tracing::debug!(
            error = errors::error_name(resp.error_code),
            "the leader refused a replica fetch"
        );
        delay_all(shared, asked, backoff);
        return;
    }
    let by_key: HashMap<(&str, i32), &Asked> = asked
        .iter()
        .map(|a| ((a.tp.topic.as_str(), a.tp.partition), a))
        .collect();
    let by_id: HashMap<(KafkaUuid, i32), &Asked> = asked
        .iter()
        .map(|a| ((a.topic_id, a.tp.partition), a))
        .collect();
    for t in resp.responses {
        let id = KafkaUuid(*t.topic_id.as_bytes());
        for p in t.partitions {
            let a = by_key
                .get(&(t.topic.0.as_str(), p.partition_index))
                .or_else(|| by_id.get(&(id, p.partition_index)));
            let Some(a) = a else { continue };
            let code = p.error_code;
            let leader_hw = p.high_watermark;
            match handle_partition(ctx, a, p) {
                Ok(progress) => {
                    if a.behind_retries > 0 {
                        caught_up(shared, a);
                    }
                    if progress == Progress::Stuck {
                        ctx.metrics
                            .replica_fetch_no_progress
                            .with_label_values(&[&a.tp.topic, &a.tp.partition.to_string()])
                            .inc();
                        delay(shared, &a.tp, a.leader_epoch, backoff);
                    }
                    watch_stall(ctx, shared, cfg, a, progress, leader_hw);
                }
                Err(why) => {
                    tracing::debug!(partition = %a.tp, reason = %why, "replica fetch of a partition failed");
                    if leader_is_behind(code) {
                        let d = behind_backoff(a.behind_retries, backoff);
                        delay_behind(shared, a, d);
                    } else {
                        delay(shared, &a.tp, a.leader_epoch, backoff);
                    }
                }
            }
        }
    }
}

fn handle_partition(ctx: &FetcherContext, a: &Asked, p: PartitionData) -> Result<Progress, String> {
    let Some(rm) = ctx.replicas() else {
        return Err("the broker is shutting down".into());
    };
    let rm = &rm;
    match p.error_code {
        errors::NONE => {}
        errors::OFFSET_OUT_OF_RANGE => {
            rm.reset_to_leader_range(&a.tp, a.leader_epoch, p.log_start_offset, p.high_watermark)
                .map_err(|e| e.to_string())?;
            return Ok(after_correction(rm, a));
        }
        code => return Err(errors::error_name(code).to_string()),
    }
    if p.diverging_epoch.epoch >= 0 || p.diverging_epoch.end_offset >= 0 {
        let d = Divergence {
            epoch: p.diverging_epoch.epoch,
            end_offset: p.diverging_epoch.end_offset,
        };
        rm.truncate_to_divergence(&a.tp, a.leader_epoch, d)
            .map_err(|e| e.to_string())?;
        return Ok(after_correction(rm, a));
    }
    let records = p.records.unwrap_or_default();
    if a.throttled {
        ctx.follower_throttle.record(records.len() as i64);
    }
    rm.append_fetched(
        &a.tp,
        a.leader_epoch,
        &records,
        p.high_watermark,
        p.log_start_offset,
    )
    .map_err(|e| e.to_string())?;
    // Batches from the leader always move the log end (or the partition left this fetcher).
    Ok(if records.is_empty() {
        Progress::UpToDate
    } else {
        Progress::Moved
    })
}

/// After a truncation or a reset the leader asked for: stuck when the next fetch would ask
/// exactly what this one asked (a partition no longer followed counts as moved: there is
/// nothing to wait for).
fn after_correction(rm: &ReplicaManager, a: &Asked) -> Progress {
    let same = rm
        .fetch_position(&a.tp)
        .is_some_and(|pos| pos == (a.fetch_offset, a.last_fetched_epoch, a.log_start_offset));
    if same {
        Progress::Stuck
    } else {
        Progress::Moved
    }
}

/// Reports a followed partition that stays out of the ISR while its fetches move nothing and
/// the leader has nothing newer for it, once that has lasted `replica.lag.time.max.ms`: a WARN
/// with the epochs and offsets, and `evenkeel_replica_fetch_stalled` until it moves again.
fn watch_stall(
    ctx: &FetcherContext,
    shared: &FetcherShared,
    cfg: &ReplicationConfig,
    a: &Asked,
    progress: Progress,
    leader_hw: i64,
) {
    let moved = progress == Progress::Moved;
    let seen = Observation {
        moved,
        // Only a partition that did not move needs the ISR looked up.
        in_isr: !moved && ctx.replicas().is_some_and(|rm| rm.in_isr(&a.tp)),
        leader_has_nothing_newer: leader_hw <= a.fetch_offset,
    };
    let lag = Duration::from_millis(cfg.lag_time_max_ms.max(0) as u64);
    let event = {
        let mut parts = shared.partitions.lock();
        let Some(p) = parts
            .get_mut(&a.tp)
            .filter(|p| p.leader_epoch == a.leader_epoch)
        else {
            return;
        };
        p.stall.observe(seen, Instant::now(), lag)
    };
    let Some(event) = event else { return };
    let partition = a.tp.partition.to_string();
    let labels = [a.tp.topic.as_str(), partition.as_str()];
    match event {
        StallEvent::Ended => {
            let _ = ctx
                .metrics
                .replica_fetch_stalled
                .remove_label_values(&labels);
            tracing::info!(partition = %a.tp, "the followed partition makes progress again");
        }
        StallEvent::Began(since) => {
            ctx.metrics
                .replica_fetch_stalled
                .with_label_values(&labels)
                .set(1);
            tracing::warn!(
                partition = %a.tp,
                leader_epoch = a.leader_epoch,
                fetch_offset = a.fetch_offset,
                last_fetched_epoch = a.last_fetched_epoch,
                log_start_offset = a.log_start_offset,
                leader_high_watermark = leader_hw,
                stalled_ms = since.elapsed().as_millis() as u64,
                reason = progress.reason(),
                "a followed partition is out of the ISR and its fetches make no progress"
            );
        }
    }
}

fn delay(shared: &FetcherShared, tp: &TopicPartition, leader_epoch: i32, d: Duration) {
    if let Some(a) = shared.partitions.lock().get_mut(tp) {
        if a.leader_epoch == leader_epoch {
            a.delayed_until = Some(Instant::now() + d);
        }
    }
}

/// Errors with which a leader says it does not know the partition, or not at our epoch: what a
/// new leader answers in the moment before it applies the metadata image that this follower has
/// already applied. They are retried soon, doubling from 10 ms up to `replica.fetch.backoff.ms`,
/// where Kafka waits the full backoff (1 s) at once: an acks=all produce to a new topic waits
/// for its followers' first fetch.
fn leader_is_behind(code: i16) -> bool {
    matches!(
        code,
        errors::UNKNOWN_TOPIC_ID
            | errors::UNKNOWN_TOPIC_OR_PARTITION
            | errors::NOT_LEADER_OR_FOLLOWER
            | errors::UNKNOWN_LEADER_EPOCH
    )
}

fn behind_backoff(retries: u32, backoff: Duration) -> Duration {
    Duration::from_millis(10u64 << retries.min(16)).min(backoff)
}

fn delay_behind(shared: &FetcherShared, a: &Asked, d: Duration) {
    if let Some(p) = shared.partitions.lock().get_mut(&a.tp) {
        if p.leader_epoch == a.leader_epoch {
            p.delayed_until = Some(Instant::now() + d);
            p.behind_retries = p.behind_retries.saturating_add(1);
        }
    }
}

fn caught_up(shared: &FetcherShared, a: &Asked) {
    if let Some(p) = shared.partitions.lock().get_mut(&a.tp) {
        if p.leader_epoch == a.leader_epoch {
            p.behind_retries = 0;
        }
    }
}

fn delay_all(shared: &FetcherShared, asked: &[Asked], d: Duration) {
    for a in asked {
        delay(shared, &a.tp, a.leader_epoch, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_behind_on_metadata_is_retried_soon_then_at_the_backoff() {
        let backoff = Duration::from_millis(1000);
        let waits: Vec<u128> = (0..9)
            .map(|n| behind_backoff(n, backoff).as_millis())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(behind_backoff(u32::MAX, backoff), backoff);
        assert_eq!(
            behind_backoff(0, Duration::from_millis(5)),
            Duration::from_millis(5)
        );
    }

    #[test]
    fn only_metadata_lag_errors_count_as_a_leader_behind() {
        assert!(leader_is_behind(errors::UNKNOWN_TOPIC_ID));
        assert!(leader_is_behind(errors::NOT_LEADER_OR_FOLLOWER));
        assert!(!leader_is_behind(errors::FENCED_LEADER_EPOCH));
        assert!(!leader_is_behind(errors::KAFKA_STORAGE_ERROR));
    }
}
