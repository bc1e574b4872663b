//! ReplicaManager: the only door to this broker's partitions. It applies each published
//! metadata image (creating logs, making replicas leaders or followers, deleting what the
//! broker no longer hosts), runs appends and reads, and owns the purgatories: an acks=all
//! append waits here (DelayedProduce) until enough replicas have it, a fetch short of
//! `fetch.min.bytes` here (DelayedFetch). It serves followers' fetches (moving the high
//! watermark, proposing ISR changes) and takes what this broker's own fetchers bring back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::partition::{Divergence, FetchIsolation, IsrProposal, Partition, ReadResult, Role};
use super::purgatory::{DelayedOperation, Purgatory};
use super::replication::{FollowTarget, ReplicaFetcherManager, Throttle};
use super::Outcome;
use crate::config::replication::ReplicationConfig;
use crate::config::LogConfig;
use crate::metadata::image::{MetadataImage, TopicImage};
use crate::metadata::is_hidden_topic;
use crate::metrics::BrokerMetrics;
use crate::protocol::errors;
use crate::storage::log::{now_ms, AppendInfo};
use crate::storage::{KafkaUuid, LogManager, StorageError, TopicPartition};

mod fetch;
mod gauges;

/// Why an append or read of a partition was refused: a Kafka error code and message.
pub use super::partition::PartitionError;
pub use fetch::{FetchInfo, FetchParams, FetchPartitionData, Fetcher};
pub use gauges::{PartitionGauges, PartitionLoad};

/// An ISR change for the controller, from this broker as a partition's leader.
#[derive(Debug, Clone)]
pub struct IsrChangeRequest {
    pub tp: TopicPartition,
    pub topic_id: KafkaUuid,
    pub proposal: IsrProposal,
}

/// What a follower's fetch of one partition read.
#[derive(Debug, Default)]
pub struct FollowerRead {
    pub read: ReadResult,
    /// The follower's log diverged: where to truncate to, instead of records.
    pub divergence: Option<Divergence>,
}

/// A local log as DescribeLogDirs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalLog {
    pub tp: TopicPartition,
    /// Bytes in its segments.
    pub size: u64,
    pub offset_lag: i64,
}

/// What a ReplicaManager is made of.
pub struct ReplicaManagerParts {
    pub node_id: i32,
    pub logs: Arc<LogManager>,
    /// `replica.*` settings, for the partitions and their fetchers.
    pub config: ReplicationConfig,
    /// The listener followers reach their leaders on (`inter.broker.listener.name`).
    pub inter_broker_listener: String,
    /// How followers connect to that listener (its security protocol, TLS and SASL login).
    pub inter_broker_security: crate::client::ClientSecurity,
    /// ISR changes and the fetchers' counters land here.
    pub metrics: Arc<BrokerMetrics>,
    /// This broker's registration epoch (KIP-903: followers fetch with it).
    pub broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
    /// Where ISR changes the leaders propose go (the AlterPartition sender).
    pub isr_changes: mpsc::UnboundedSender<IsrChangeRequest>,
}

/// An acks=all append waiting for the ISR: the partition, the leader epoch it was appended
/// under and the offset the high watermark must reach.
#[derive(Debug, Clone)]
pub struct PendingAppend {
    pub tp: TopicPartition,
    /// The topic it was appended to: a topic re-created under the same name is another one.
    topic_id: KafkaUuid,
    required: i64,
}

/// What a metadata change did to this broker's replicas.
#[derive(Debug, Default)]
pub struct ReplicaChanges {
    pub became_leader: Vec<TopicPartition>,
    pub became_follower: Vec<TopicPartition>,
    /// Replicas this broker no longer hosts (their logs are deleted).
    pub removed: Vec<TopicPartition>,
}

pub struct ReplicaManager {
    node_id: i32,
    logs: Arc<LogManager>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// The image the partitions were last brought in line with.
    image: RwLock<Arc<MetadataImage>>,
    /// Serialises `apply_image`.
    apply_lock: Mutex<()>,
    /// Consumer fetches, woken when a high watermark moves.
    fetch_purgatory: Purgatory,
    /// Follower fetches, woken when a leader appends.
    follower_fetch_purgatory: Purgatory,
    /// acks=all appends (produce and the group coordinator's), woken when a high watermark
    /// moves.
    produce_purgatory: Purgatory,
    /// Where ISR changes go to be sent to the controller (AlterPartition).
    isr_changes: mpsc::UnboundedSender<IsrChangeRequest>,
    metrics: Arc<BrokerMetrics>,
    /// Bytes per second this broker may send to followers of throttled replicas
    /// (`leader.replication.throttled.rate`).
    leader_throttle: Throttle,
    /// `replica.selector.class` is Kafka's RackAwareReplicaSelector (KIP-392).
    rack_aware_selector: bool,
    /// The fetchers that follow other brokers' partitions for this one (Kafka's
    /// ReplicaFetcherManager); they hold this ReplicaManager weakly.
    fetchers: ReplicaFetcherManager,
    inter_broker_listener: String,
}

fn topic_config(image: &MetadataImage, t: &TopicImage, defaults: &LogConfig) -> LogConfig {
    let overrides = image.topic_configs(&t.name);
    defaults
        .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(c, _)| c)
        .unwrap_or_else(|_| defaults.clone())
}

/// Whether broker `id` may join an ISR: registered, unfenced, not shutting down.
fn isr_eligible(image: &MetadataImage, id: i32) -> bool {
    image
        .broker(id)
        .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
}

impl ReplicaManager {
    /// The replicas of a broker, with their fetchers (which start once an image makes this
    /// broker a follower).
    pub fn new(parts: ReplicaManagerParts) -> Arc<Self> {
        let ReplicaManagerParts {
            node_id,
            logs,
            config,
            inter_broker_listener,
            inter_broker_security,
            metrics,
            broker_epoch,
            isr_changes,
        } = parts;
        Arc::new_cyclic(|me| ReplicaManager {
            fetchers: ReplicaFetcherManager::new(
                config.clone(),
                me.clone(),
                node_id,
                broker_epoch,
                metrics.clone(),
                inter_broker_security,
            ),
            inter_broker_listener,
            rack_aware_selector: config.rack_aware_selector,
            node_id,
            logs,
            partitions: RwLock::new(HashMap::new()),
            image: RwLock::new(Arc::new(MetadataImage::empty())),
            apply_lock: Mutex::new(()),
            fetch_purgatory: Purgatory::default(),
            follower_fetch_purgatory: Purgatory::default(),
            produce_purgatory: Purgatory::default(),
            isr_changes,
            metrics,
            leader_throttle: Throttle::default(),
        })
    }

    /// Starts ReplicaManager's own background work: every half of `lag_ms`
    /// (`replica.lag.time.max.ms`) the leaders drop followers that fell behind (Kafka's
    /// isr-expiration task), and every second the purgatories drop what completed or timed out.
    pub fn start_background(self: &Arc<Self>, lag_ms: i64) -> Vec<tokio::task::JoinHandle<()>> {
        let rm = self.clone();
        let expiry = tokio::spawn(async move {
            let every = Duration::from_millis((lag_ms / 2).max(10) as u64);
            let mut interval = tokio::time::interval(every);
            loop {
                interval.tick().await;
                rm.maybe_shrink_isrs(lag_ms);
            }
        });
        let rm = self.clone();
        let purge = tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            loop {
                interval.tick().await;
                rm.purge_purgatories();
            }
        });
        vec![expiry, purge]
    }

    fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().get(tp).cloned()
    }

    fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// The directory of this broker's logs.
    pub fn log_dir(&self) -> &std::path::Path {
        self.logs.log_dir()
    }

    /// Every partition's local log that `wanted` names (all when `None`), as DescribeLogDirs
    /// reports it.
    pub fn local_logs(&self, wanted: Option<&HashSet<TopicPartition>>) -> Vec<LocalLog> {
        let mut out: Vec<LocalLog> = self
            .logs
            .all_logs()
            .into_iter()
            // The metadata log is the quorum's, not a partition's (Kafka leaves it out too).
            .filter(|(tp, _)| !is_hidden_topic(&tp.topic) && wanted.is_none_or(|w| w.contains(tp)))
            .map(|(tp, log)| {
                let log = log.lock();
                LocalLog {
                    size: log.size(),
                    // Kafka's: how far the log's end is short of its high watermark.
                    offset_lag: (log.high_watermark() - log.log_end_offset()).max(0),
                    tp,
                }
            })
            .collect();
        out.sort_by(|a, b| a.tp.cmp(&b.tp));
        out
    }

    /// Partitions this broker leads.
    pub fn leader_count(&self) -> usize {
        self.partitions
            .read()
            .values()
            .filter(|p| p.is_leader())
            .count()
    }

    /// The partition if this broker hosts it; otherwise NOT_LEADER_OR_FOLLOWER (with the
    /// leader, KIP-951) when the cluster has it, UNKNOWN_TOPIC_OR_PARTITION when not.
    fn hosted(&self, tp: &TopicPartition) -> Result<Arc<Partition>, PartitionError> {
        if let Some(p) = self.get(tp) {
            return Ok(p);
        }
        let img = self.image.read().clone();
        match img.partition(&tp.topic, tp.partition) {
            Some(p) => Err(PartitionError::not_leader(p.leader, p.leader_epoch)),
            None => Err(PartitionError::new(
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )),
        }
    }

    /// The partition if this broker leads it at `current_leader_epoch` (-1: any).
    fn leader_partition(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        let p = self.hosted(tp)?;
        p.check_leader(current_leader_epoch)?;
        Ok(p)
    }

    /// Whether this broker leads `tp` at `current_leader_epoch` (-1: any): if not, why.
    pub fn check_leader(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<(), PartitionError> {
        self.leader_partition(tp, current_leader_epoch).map(|_| ())
    }

    /// Calls `f` with every batch of `tp`'s log, in order (loading `__consumer_offsets`);
    /// false when this broker does not host `tp`.
    pub fn for_each_batch(&self, tp: &TopicPartition, f: impl FnMut(&[u8])) -> bool {
        let Some(p) = self.get(tp) else {
            return false;
        };
        p.for_each_batch(f);
        true
    }

    /// A partition a consumer may read here at `current_leader_epoch`: its leader, or a
    /// follower (KIP-392; it reads up to the high watermark the leader reported).
    fn readable_partition(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        let p = self.hosted(tp)?;
        p.check_epoch(current_leader_epoch)?;
        Ok(p)
    }

    /// Where a consumer in `rack` should read a partition this broker leads, when Kafka's
    /// RackAwareReplicaSelector is configured: `None` for here, else a replica in the
    /// consumer's rack that has `fetch_offset`, the one furthest ahead.
    fn preferred_read_replica(&self, p: &Partition, rack: &str, fetch_offset: i64) -> Option<i32> {
        if !self.rack_aware_selector || !p.is_leader() {
            return None;
        }
        let image = self.image.read().clone();
        let rack_of = |id: i32| {
            image
                .broker(id)
                .filter(|b| !b.fenced)
                .and_then(|b| b.rack.clone())
        };
        if rack_of(self.node_id).as_deref() == Some(rack) {
            return None;
        }
        p.follower_positions()
            .into_iter()
            .filter(|(id, leo)| *leo >= fetch_offset && rack_of(*id).as_deref() == Some(rack))
            .max_by_key(|(id, leo)| (*leo, -id))
            .map(|(id, _)| id)
    }

    /// Brings the hosted partitions in line with `image`: creates logs for new replicas (a
    /// topic re-created under its name gets a fresh log), makes each replica leader or
    /// follower, applies topic configs, and deletes replicas the broker no longer holds.
    pub fn apply_image(
        &self,
        image: &Arc<MetadataImage>,
        defaults: &LogConfig,
    ) -> Result<ReplicaChanges, StorageError> {
        let _applying = self.apply_lock.lock();
        let prev = self.image.read().clone();
        let mut changes = ReplicaChanges::default();
        let topic_changes = image.topic_changes(&prev);
        let mut touched: Vec<&TopicImage> = topic_changes.changed;
        // Config changes alone leave the topic shared between images: look for them too.
        for t in image.topics() {
            if image.topic_configs_changed(&prev, &t.name)
                && !touched.iter().any(|c| c.name == t.name)
            {
                touched.push(t);
            }
        }
        let current: HashMap<TopicPartition, Arc<Partition>> = self.partitions.read().clone();
        let mut added: Vec<(TopicPartition, Arc<Partition>)> = Vec::new();
        let mut dropped: HashSet<TopicPartition> = HashSet::new();
        for name in &topic_changes.removed {
            for tp in current.keys().filter(|tp| &tp.topic == name) {
                dropped.insert(tp.clone());
            }
        }
        for t in touched {
            if is_hidden_topic(&t.name) {
                continue;
            }
            let cfg = topic_config(image, t, defaults);
            for (id, pimg) in &t.partitions {
                let tp = TopicPartition::new(&t.name, *id);
                if !pimg.replicas.contains(&self.node_id) {
                    if current.contains_key(&tp) {
                        dropped.insert(tp);
                    }
                    continue;
                }
                let existing = current.get(&tp).filter(|p| p.topic_id == t.id);
                let (p, role, changed) = match existing {
                    Some(p) => {
                        p.update_config(cfg.clone());
                        let (role, changed) = p.apply(pimg, self.node_id)?;
                        dropped.remove(&tp);
                        (p.clone(), role, changed)
                    }
                    None => {
                        let p = Arc::new(self.open_partition(&tp, t, pimg, cfg.clone())?);
                        dropped.remove(&tp);
                        let role = if p.is_leader() {
                            Role::Leader
                        } else {
                            Role::Follower
                        };
                        added.push((tp.clone(), p.clone()));
                        (p, role, true)
                    }
                };
                if changed && role == Role::Follower {
                    // Appends waiting here as leader answer now (NOT_LEADER_OR_FOLLOWER): a
                    // follower's log may be truncated under them. A new epoch with this broker
                    // still the leader keeps them waiting, as Kafka's DelayedProduce does.
                    self.produce_purgatory.on_high_watermark(&tp, i64::MAX);
                }
                if changed {
                    match role {
                        Role::Leader => changes.became_leader.push(tp.clone()),
                        Role::Follower => changes.became_follower.push(tp.clone()),
                    }
                }
                if role == Role::Leader {
                    if let Some(hw) = p.maybe_increment_high_watermark() {
                        self.on_high_watermark(&p, hw);
                    }
                }
            }
        }
        {
            let mut map = self.partitions.write();
            for tp in &dropped {
                map.remove(tp);
            }
            for (tp, p) in added {
                map.insert(tp, p);
            }
        }
        for tp in dropped {
            self.produce_purgatory.on_high_watermark(&tp, i64::MAX);
            self.logs.delete_log(&tp)?;
            changes.removed.push(tp);
        }
        *self.image.write() = image.clone();
        Ok(changes)
    }

    fn open_partition(
        &self,
        tp: &TopicPartition,
        t: &TopicImage,
        pimg: &crate::metadata::image::PartitionImage,
        cfg: LogConfig,
    ) -> Result<Partition, StorageError> {
        if let Some(existing) = self.logs.get_log(tp) {
            let same_topic = existing.lock().topic_id().is_none_or(|old| old == t.id);
            if !same_topic {
                // Re-created under the same name: the old log goes, offsets restart at 0.
                self.logs.delete_log(tp)?;
            }
        }
        let log = self
            .logs
            .get_or_create_log(tp, Some(t.id), Some(cfg.clone()))?;
        {
            let mut l = log.lock();
            l.update_config(cfg);
            l.set_topic_id(t.id)?;
        }
        Partition::open(tp.clone(), t.id, log, pimg, self.node_id)
    }

    /// Deletes logs on disk that `image` gives this broker no replica of. Only call this once
    /// the image is caught up, or logs of topics not yet replayed would go.
    pub fn delete_strays(&self, image: &MetadataImage) -> Result<usize, StorageError> {
        let stray: Vec<TopicPartition> = self
            .logs
            .all_logs()
            .into_iter()
            .map(|(tp, _)| tp)
            .filter(|tp| !is_hidden_topic(&tp.topic))
            .filter(|tp| {
                image
                    .partition(&tp.topic, tp.partition)
                    .is_none_or(|p| !p.replicas.contains(&self.node_id))
            })
            .collect();
        for tp in &stray {
            tracing::info!(partition = %tp, "deleting a log this broker holds no replica of");
            self.partitions.write().remove(tp);
            self.logs.delete_log(tp)?;
        }
        Ok(stray.len())
    }

    /// Appends `records` to `tp` as its leader (Kafka's appendRecords, one partition), then
    /// wakes follower fetches waiting for bytes, and (if the append moved the high watermark,
    /// as with an ISR of the leader alone) consumer fetches and acks=all appends. With
    /// acks=-1 it also returns what the answer waits for: see `await_replication`.
    pub fn append_records(
        &self,
        tp: &TopicPartition,
        records: &mut [u8],
        required_acks: i16,
    ) -> Result<(AppendInfo, Option<PendingAppend>), PartitionError> {
        let p = self.leader_partition(tp, -1)?;
        let info = self.append(&p, records, required_acks)?;
        let pending = (required_acks == -1).then(|| PendingAppend {
            tp: tp.clone(),
            topic_id: p.topic_id,
            required: info.last_offset + 1,
        });
        Ok((info, pending))
    }

    /// One error code per pending append, in order, once each is replicated to the ISR or
    /// `timeout` has passed: at once when they all are, else when their DelayedProduce
    /// completes. REQUEST_TIMED_OUT for those still short when the time is up.
    pub fn await_replication(
        self: &Arc<Self>,
        pending: Vec<PendingAppend>,
        timeout: Duration,
    ) -> Outcome<Vec<i16>> {
        if let Some(done) = self.replication_done(&pending) {
            return Outcome::Now(done);
        }
        let op = DelayedOperation::produce(pending.iter().map(|w| (w.tp.clone(), w.required)));
        self.produce_purgatory
            .watch(&op, pending.iter().map(|w| w.tp.clone()));
        // Partitions already settled (an ISR of the leader alone, a leader gone) will see no
        // notification: the operation stops waiting for them now. This also covers a high
        // watermark that moved between the first check and the watch.
        for w in &pending {
            if self.replication_status(w).is_some() {
                op.satisfy(&w.tp);
            }
        }
        if op.is_completed() {
            if let Some(done) = self.replication_done(&pending) {
                return Outcome::Now(done);
            }
        }
        let rm = self.clone();
        Outcome::Later(Box::pin(async move {
            op.wait(timeout).await;
            pending
                .iter()
                .map(|w| {
                    rm.replication_status(w)
                        .unwrap_or(errors::REQUEST_TIMED_OUT)
                })
                .collect()
        }))
    }

    /// Every pending append's code, if none of them waits any more.
    fn replication_done(&self, pending: &[PendingAppend]) -> Option<Vec<i16>> {
        pending.iter().map(|w| self.replication_status(w)).collect()
    }

    fn replication_status(&self, w: &PendingAppend) -> Option<i16> {
        match self.get(&w.tp) {
            Some(p) if p.topic_id == w.topic_id => p.check_enough_replicas_reach_offset(w.required),
            _ => Some(errors::NOT_LEADER_OR_FOLLOWER),
        }
    }

    /// Parks a fetch that has `already` of its `min_bytes` (DelayedFetch): it watches each
    /// partition it read, `seen` with the offset it read up to (the high watermark for a
    /// consumer, the log end for a follower). Completes at once if any of them moved since.
    fn delay_fetch(
        &self,
        follower: bool,
        min_bytes: i64,
        already: i64,
        seen: &[(Arc<Partition>, i64)],
    ) -> Arc<DelayedOperation> {
        let op = DelayedOperation::fetch(min_bytes, already);
        let purgatory = if follower {
            &self.follower_fetch_purgatory
        } else {
            &self.fetch_purgatory
        };
        purgatory.watch(&op, seen.iter().map(|(p, _)| p.tp.clone()));
        let moved = |p: &Partition| {
            if follower {
                p.fetch_position().0
            } else {
                p.high_watermark()
            }
        };
        if seen.iter().any(|(p, upto)| moved(p) > *upto) {
            op.force_complete();
        }
        op
    }

    /// Watch entries of the consumer-fetch and produce purgatories (PurgatorySize).
    pub fn purgatory_sizes(&self) -> (usize, usize) {
        (self.fetch_purgatory.size(), self.produce_purgatory.size())
    }

    /// Drops the watch entries of operations that completed or timed out: on a quiet
    /// partition nothing else visits them (Kafka's purgatories purge the same way).
    fn purge_purgatories(&self) {
        self.fetch_purgatory.purge();
        self.follower_fetch_purgatory.purge();
        self.produce_purgatory.purge();
    }

    fn append(
        &self,
        p: &Partition,
        records: &mut [u8],
        required_acks: i16,
    ) -> Result<AppendInfo, PartitionError> {
        let (info, hw) = p.append_as_leader(records, required_acks)?;
        if info.num_messages > 0 {
            self.follower_fetch_purgatory
                .on_bytes(&p.tp, records.len() as i64);
        }
        if let Some(hw) = hw {
            self.on_high_watermark(p, hw);
        }
        Ok(info)
    }

    /// The high watermark of a partition this broker leads moved to `hw`.
    fn on_high_watermark(&self, p: &Partition, hw: i64) {
        self.produce_purgatory.on_high_watermark(&p.tp, hw);
        let committed = p.take_committed_bytes(hw);
        if committed > 0 {
            self.fetch_purgatory.on_bytes(&p.tp, committed);
        }
    }

    /// A follower's fetch of a partition this broker leads: the divergence check (KIP-320),
    /// the read up to the log end (nothing for a throttled replica over its rate), then the
    /// follower's new position, which may move the high watermark and add it to the ISR.
    #[allow(clippy::too_many_arguments)]
    fn read_for_follower(
        &self,
        p: &Partition,
        replica: i32,
        broker_epoch: i64,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FollowerRead, PartitionError> {
        if let Some(d) = p.diverging_epoch(fetch_offset, last_fetched_epoch) {
            let (hw, start) = p.offsets();
            return Ok(FollowerRead {
                read: ReadResult {
                    records: Vec::new(),
                    high_watermark: hw,
                    log_start_offset: start,
                    log_end_offset: -1,
                },
                divergence: Some(d),
            });
        }
        let throttled = p.leader_throttled();
        let mut read = if throttled && self.leader_throttle.is_exceeded() {
            let (hw, start) = p.offsets();
            ReadResult {
                high_watermark: hw,
                log_start_offset: start,
                ..ReadResult::default()
            }
        } else {
            p.read(
                fetch_offset,
                max_bytes,
                min_one_batch,
                FetchIsolation::LogEnd,
            )?
        };
        if throttled {
            self.leader_throttle.record(read.records.len() as i64);
        }
        let image = self.image.read().clone();
        let update =
            p.update_follower_fetch_state(replica, fetch_offset, broker_epoch, now_ms(), |r| {
                isr_eligible(&image, r)
            });
        if let Some(hw) = update.high_watermark {
            self.on_high_watermark(p, hw);
            read.high_watermark = hw;
        }
        if let Some(proposal) = update.expand {
            tracing::info!(partition = %p.tp, replica, isr = ?proposal.new_isr, "expanding the ISR: the follower caught up");
            self.metrics.isr_expands.inc();
            self.send_isr_change(p, proposal);
        }
        Ok(FollowerRead {
            read,
            divergence: None,
        })
    }

    fn send_isr_change(&self, p: &Partition, proposal: IsrProposal) {
        let req = IsrChangeRequest {
            tp: p.tp.clone(),
            topic_id: p.topic_id,
            proposal,
        };
        let epoch = req.proposal.leader_epoch;
        if self.isr_changes.send(req).is_err() {
            if let Some(hw) = p.on_isr_change_answer(epoch, None) {
                self.on_high_watermark(p, hw);
            }
        }
    }

    /// The controller answered an ISR change of `tp` made at `leader_epoch`.
    pub fn on_isr_change_answer(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        committed: Option<(i32, Vec<i32>)>,
    ) {
        if let Some(p) = self.get(tp) {
            if let Some(hw) = p.on_isr_change_answer(leader_epoch, committed) {
                self.on_high_watermark(&p, hw);
            }
        }
    }

    /// Proposes smaller ISRs where followers fell behind for `lag_ms` (Kafka's isr-expiration
    /// task).
    fn maybe_shrink_isrs(&self, lag_ms: i64) {
        let now = now_ms();
        for p in self.partitions() {
            if let Some(proposal) = p.maybe_shrink_isr(now, lag_ms) {
                self.metrics.isr_shrinks.inc();
                self.send_isr_change(&p, proposal);
            }
        }
    }

    /// The partitions this broker follows, with their leaders' addresses on `listener`.
    fn follow_targets(&self, image: &MetadataImage, listener: &str) -> Vec<FollowTarget> {
        let mut out = Vec::new();
        for p in self.partitions() {
            let st = p.state();
            if st.role != Role::Follower || st.leader < 0 || st.leader == self.node_id {
                continue;
            }
            let Some(addr) = image
                .broker(st.leader)
                .filter(|b| !b.fenced)
                .and_then(|b| b.endpoint(listener))
                .map(|e| format!("{}:{}", e.host, e.port))
            else {
                continue;
            };
            out.push(FollowTarget {
                tp: p.tp.clone(),
                topic_id: p.topic_id,
                leader: st.leader,
                leader_epoch: st.leader_epoch,
                leader_address: addr,
            });
        }
        out
    }

    /// `(log end, epoch of the last batch, log start)` of a partition this broker follows.
    pub fn fetch_position(&self, tp: &TopicPartition) -> Option<(i64, i32, i64)> {
        let p = self.get(tp)?;
        if p.is_leader() {
            return None;
        }
        let (leo, epoch) = p.fetch_position();
        Some((leo, epoch, p.offsets().1))
    }

    /// Whether this broker is in `tp`'s ISR, as the metadata it applied says.
    pub fn in_isr(&self, tp: &TopicPartition) -> bool {
        self.get(tp).is_some_and(|p| p.local_in_isr())
    }

    /// Whether this broker's fetches of `tp` count against the follower throttle.
    pub fn follower_throttled(&self, tp: &TopicPartition) -> bool {
        self.get(tp).is_some_and(|p| p.follower_throttled())
    }

    /// Appends what a leader sent for `tp` (fetched at `leader_epoch`) and takes the leader's
    /// high watermark, waking consumer fetches parked on this follower for what it now covers.
    pub fn append_fetched(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        records: &[u8],
        leader_hw: i64,
        leader_log_start: i64,
    ) -> Result<(), StorageError> {
        let Some(p) = self.get(tp) else {
            return Ok(());
        };
        let appended = p.append_as_follower(leader_epoch, records, leader_hw, leader_log_start)?;
        // Consumers reading this follower (KIP-392) may read what the high watermark now covers.
        let committed = p.take_committed_bytes(appended.high_watermark);
        if committed > 0 {
            self.fetch_purgatory.on_bytes(tp, committed);
        }
        Ok(())
    }

    pub fn truncate_to_divergence(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        d: Divergence,
    ) -> Result<(), StorageError> {
        if let Some(p) = self.get(tp) {
            p.truncate_to_divergence(leader_epoch, d)?;
        }
        Ok(())
    }

    pub fn reset_to_leader_range(
        &self,
        tp: &TopicPartition,
        leader_epoch: i32,
        leader_log_start: i64,
        leader_log_end: i64,
    ) -> Result<(), StorageError> {
        if let Some(p) = self.get(tp) {
            p.reset_to_leader_range(leader_epoch, leader_log_start, leader_log_end)?;
        }
        Ok(())
    }

    /// Points the fetchers at the leaders of the partitions this broker follows in `image`,
    /// and takes the replication throttles from its dynamic broker configs.
    pub fn follow_leaders(&self, image: &MetadataImage) {
        self.fetchers
            .sync(&self.follow_targets(image, &self.inter_broker_listener));
        let rate = |key: &str| {
            image
                .dynamic_broker_config(self.node_id, key)
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        self.leader_throttle
            .set_rate(rate("leader.replication.throttled.rate"));
        self.fetchers
            .follower_throttle
            .set_rate(rate("follower.replication.throttled.rate"));
    }

    /// Stops the fetchers and writes every partition's producer state at its log end (a clean
    /// shutdown; a restart need not rebuild it).
    pub fn shutdown(&self) {
        self.fetchers.shutdown();
        self.snapshot_producer_state();
    }

    /// Writes a producer snapshot at each partition's log end.
    fn snapshot_producer_state(&self) {
        for p in self.partitions() {
            p.snapshot_producer_state();
        }
    }
}

#[cfg(test)]
mod tests;
