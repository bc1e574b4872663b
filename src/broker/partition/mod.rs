//! Partition: this broker's replica of one topic-partition — its log, its role (leader or
//! follower), the leader and partition epochs, the replica set and ISR from the metadata, the
//! high watermark and the idempotent-producer state. ReplicaManager is the only way to one.
//! As leader it tracks each follower's progress (`leader`); as follower it appends what the
//! leader sent and truncates where the logs diverge (`follower`).

mod follower;
mod leader;
mod uncommitted;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use follower::Divergence;
pub use leader::IsrProposal;
use leader::LeaderState;
use uncommitted::Uncommitted;

use super::producer_state::{ProducerStateManager, SequenceCheck};
use crate::config::LogConfig;
use crate::metadata::image::PartitionImage;
use crate::protocol::errors;
use crate::storage::batch::{self, BatchHeader, LOG_OVERHEAD};
use crate::storage::log::{now_ms, AppendInfo};
use crate::storage::{KafkaUuid, LogRef, StorageError, TimestampAndOffset, TopicPartition};

/// Whether this broker leads the partition or follows its leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

/// The replica's view of its partition, as the last metadata change left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub role: Role,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A failed partition operation: Kafka error code, message, and for NOT_LEADER_OR_FOLLOWER the
/// leader this broker knows of (KIP-951).
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: i16,
    pub message: String,
    /// `(leader id, leader epoch)` when known.
    pub current_leader: Option<(i32, i32)>,
    /// The refused records of a batch (Produce's `record_errors`): index in the batch, why.
    pub record_errors: Vec<(i32, String)>,
}

impl PartitionError {
    pub fn new(code: i16, message: impl Into<String>) -> PartitionError {
        PartitionError {
            code,
            message: message.into(),
            current_leader: None,
            record_errors: Vec::new(),
        }
    }

    pub fn not_leader(leader: i32, epoch: i32) -> PartitionError {
        PartitionError {
            code: errors::NOT_LEADER_OR_FOLLOWER,
            message: "This server is not the leader for that topic-partition.".into(),
            current_leader: Some((leader, epoch)),
            record_errors: Vec::new(),
        }
    }
}

impl From<StorageError> for PartitionError {
    fn from(e: StorageError) -> Self {
        let mut p = PartitionError::new(e.kafka_error_code(), e.to_string());
        if let StorageError::RecordErrors(errors) = e {
            p.record_errors = errors
                .into_iter()
                .map(|r| (r.batch_index, r.message))
                .collect();
        }
        p
    }
}

/// What a read found: whole batches and the partition's offsets at the time.
#[derive(Debug, Default)]
pub struct ReadResult {
    pub records: Vec<u8>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// Up to where a fetch may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchIsolation {
    /// Consumers: committed records only.
    HighWatermark,
    /// Follower replicas: everything the leader has.
    LogEnd,
}

/// Locks are taken in this order: `state`, `leader`, `log`, `producers`, `uncommitted`.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: KafkaUuid,
    /// This broker's id.
    local: i32,
    log: LogRef,
    /// Idempotent-producer state; always locked after `log`. The log's cleaner asks it for
    /// each producer's last batch (with no log lock held).
    producers: Arc<Mutex<ProducerStateManager>>,
    state: RwLock<ReplicaState>,
    /// While leader: the followers' progress and an ISR change in flight.
    leader: Mutex<LeaderState>,
    /// Appends the high watermark has not passed yet (for waking parked consumer fetches).
    uncommitted: Mutex<Uncommitted>,
    /// Whether the topic's throttled-replica lists name this replica, on the leader's side
    /// (`leader.replication.throttled.replicas`) and the follower's.
    leader_throttled: AtomicBool,
    follower_throttled: AtomicBool,
    /// While following: the high watermark the leader last reported (for the lag metric).
    leader_high_watermark: AtomicI64,
    /// Consumer fetch requests that read this partition (how much fetch work its leadership
    /// brings, for the rebalancer's load weights).
    consumer_fetches: AtomicU64,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("tp", &self.tp)
            .field("state", &*self.state.read())
            .finish()
    }
}

impl Partition {
    /// A replica over `log`, taking its role from `image` (this broker is `local`).
    pub fn open(
        tp: TopicPartition,
        topic_id: KafkaUuid,
        log: LogRef,
        image: &PartitionImage,
        local: i32,
    ) -> Result<Partition, StorageError> {
        let producers = Arc::new(Mutex::new(ProducerStateManager::load(&log.lock())?));
        let state = Arc::downgrade(&producers);
        log.lock().set_producer_last_batches(Some(Arc::new(move || {
            state.upgrade().map(|p| p.lock().last_batches())
        })));
        let p = Partition {
            tp,
            topic_id,
            local,
            log,
            producers,
            leader: Mutex::new(LeaderState::default()),
            uncommitted: Mutex::new(Uncommitted::default()),
            leader_throttled: AtomicBool::new(false),
            follower_throttled: AtomicBool::new(false),
            leader_high_watermark: AtomicI64::new(-1),
            consumer_fetches: AtomicU64::new(0),
            state: RwLock::new(ReplicaState {
                role: Role::Follower,
                leader: -1,
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
            }),
        };
        let cfg = p.log.lock().config().clone();
        p.set_throttles(&cfg);
        p.apply(image, local)?;
        Ok(p)
    }

    pub fn state(&self) -> ReplicaState {
        self.state.read().clone()
    }

    pub fn is_leader(&self) -> bool {
        self.state.read().role == Role::Leader
    }

    /// Whether the metadata this broker applied has it in the partition's ISR.
    pub fn local_in_isr(&self) -> bool {
        self.state.read().isr.contains(&self.local)
    }

    /// Takes the role the metadata gives this broker: `make_leader` or `make_follower`.
    /// Returns the role, and whether it changed (a new leader epoch counts as a change).
    pub fn apply(&self, image: &PartitionImage, local: i32) -> Result<(Role, bool), StorageError> {
        let role = if image.leader == local {
            Role::Leader
        } else {
            Role::Follower
        };
        let before = self.state.read().clone();
        match role {
            Role::Leader => self.make_leader(image)?,
            Role::Follower => self.make_follower(image),
        }
        let changed = before.role != role || before.leader_epoch != image.leader_epoch;
        Ok((role, changed))
    }

    /// Becomes (or stays) the leader at the image's epoch: a new epoch starts at the log end
    /// and every follower's progress is unknown until it fetches. The high watermark stays
    /// where it was; it moves once the ISR has fetched past it.
    fn make_leader(&self, image: &PartitionImage) -> Result<(), StorageError> {
        let mut st = self.state.write();
        let new_epoch = st.role != Role::Leader || st.leader_epoch != image.leader_epoch;
        if new_epoch {
            let mut l = self.log.lock();
            if l.epoch_cache()
                .latest_epoch()
                .is_none_or(|e| e < image.leader_epoch)
            {
                let leo = l.log_end_offset();
                l.epoch_cache_mut().assign(image.leader_epoch, leo)?;
            }
            drop(l);
            self.leader
                .lock()
                .reset(self.local, &image.replicas, &image.isr, now_ms());
        } else if image.partition_epoch > st.partition_epoch {
            // The controller changed the ISR (ours committed, or a fenced follower removed).
            self.leader.lock().isr_committed(&image.replicas);
        }
        if new_epoch || image.partition_epoch >= st.partition_epoch {
            *st = ReplicaState {
                role: Role::Leader,
                leader: image.leader,
                leader_epoch: image.leader_epoch,
                partition_epoch: image.partition_epoch,
                replicas: image.replicas.clone(),
                isr: image.isr.clone(),
            };
        }
        Ok(())
    }

    /// Follows the image's leader.
    fn make_follower(&self, image: &PartitionImage) {
        *self.state.write() = ReplicaState {
            role: Role::Follower,
            leader: image.leader,
            leader_epoch: image.leader_epoch,
            partition_epoch: image.partition_epoch,
            replicas: image.replicas.clone(),
            isr: image.isr.clone(),
        };
        *self.leader.lock() = LeaderState::default();
    }

    pub fn update_config(&self, cfg: LogConfig) {
        self.set_throttles(&cfg);
        self.log.lock().update_config(cfg);
    }

    fn set_throttles(&self, cfg: &LogConfig) {
        let (p, me) = (self.tp.partition, self.local);
        self.leader_throttled.store(
            crate::config::throttles(&cfg.leader_throttled_replicas, p, me),
            Ordering::Release,
        );
        self.follower_throttled.store(
            crate::config::throttles(&cfg.follower_throttled_replicas, p, me),
            Ordering::Release,
        );
    }

    pub fn leader_throttled(&self) -> bool {
        self.leader_throttled.load(Ordering::Acquire)
    }

    pub fn follower_throttled(&self) -> bool {
        self.follower_throttled.load(Ordering::Acquire)
    }

    /// The topic's `min.insync.replicas`.
    pub fn min_insync_replicas(&self) -> usize {
        self.log.lock().config().min_insync_replicas.max(1) as usize
    }

    /// While following: how far this log is behind the high watermark the leader reported.
    pub fn follower_lag(&self) -> i64 {
        let leader_hw = self.leader_high_watermark.load(Ordering::Acquire);
        if leader_hw < 0 {
            return 0;
        }
        (leader_hw - self.log.lock().log_end_offset()).max(0)
    }

    /// `Err` unless this broker leads, or when the caller's epoch is not ours.
    pub fn check_leader(&self, current_leader_epoch: i32) -> Result<ReplicaState, PartitionError> {
        let st = self.check_epoch(current_leader_epoch)?;
        if st.role != Role::Leader {
            return Err(PartitionError::not_leader(st.leader, st.leader_epoch));
        }
        Ok(st)
    }

    /// `Err` when the caller's leader epoch is not the one this replica knows.
    pub fn check_epoch(&self, current_leader_epoch: i32) -> Result<ReplicaState, PartitionError> {
        let st = self.state.read().clone();
        if current_leader_epoch >= 0 && current_leader_epoch < st.leader_epoch {
            return Err(PartitionError {
                code: errors::FENCED_LEADER_EPOCH,
                message: format!(
                    "The leader epoch in the request is older than the epoch on the broker ({})",
                    st.leader_epoch
                ),
                current_leader: Some((st.leader, st.leader_epoch)),
                record_errors: Vec::new(),
            });
        }
        if current_leader_epoch > st.leader_epoch {
            return Err(PartitionError::new(
                errors::UNKNOWN_LEADER_EPOCH,
                "The leader epoch in the request is newer than the epoch on the broker.",
            ));
        }
        Ok(st)
    }

    /// Appends client batches as leader. Idempotent batches are checked first: a duplicate is
    /// answered with the offsets it already has and nothing is written; a sequence gap or
    /// stale epoch is refused. With `acks=all`, an ISR below `min.insync.replicas` refuses the
    /// append (NOT_ENOUGH_REPLICAS). Returns what was appended and the high watermark if the
    /// append moved it (an ISR of the leader alone).
    pub fn append_as_leader(
        &self,
        records: &mut [u8],
        required_acks: i16,
    ) -> Result<(AppendInfo, Option<i64>), PartitionError> {
        let st = self.check_leader(-1)?;
        let mut l = self.log.lock();
        let min_isr = l.config().min_insync_replicas.max(1) as usize;
        if required_acks == -1 && st.isr.len() < min_isr {
            return Err(PartitionError::new(
                errors::NOT_ENOUGH_REPLICAS,
                format!(
                    "The size of the current ISR {:?} is insufficient to satisfy the min.isr requirement of {min_isr} for partition {}",
                    st.isr, self.tp
                ),
            ));
        }
        let mut psm = self.producers.lock();
        for h in headers(records) {
            match psm.check(&h) {
                Ok(SequenceCheck::Append) => {}
                Ok(SequenceCheck::Duplicate(m)) => {
                    return Ok((
                        AppendInfo {
                            first_offset: m.first_offset,
                            last_offset: m.last_offset,
                            max_timestamp: m.timestamp,
                            log_append_time: -1,
                            num_messages: 0,
                            valid_bytes: 0,
                            log_start_offset: l.log_start_offset(),
                        },
                        None,
                    ));
                }
                Err(e) => return Err(PartitionError::new(e.code, e.message)),
            }
        }
        let active_before = l.segments().last().map(|s| s.base_offset());
        let info = l.append_as_leader(records, st.leader_epoch)?;
        if l.segments().last().map(|s| s.base_offset()) != active_before {
            // A roll: snapshot the producer state as of the new segment's base, as Kafka does.
            if let Err(e) = psm.take_snapshot(info.first_offset) {
                tracing::warn!(partition = %self.tp, error = %e, "cannot write a producer snapshot");
            }
        }
        for h in headers(records) {
            psm.record(&h);
        }
        drop(psm);
        self.uncommitted
            .lock()
            .appended(info.last_offset + 1, info.valid_bytes as i64);
        drop(l);
        let mut leader = self.leader.lock();
        let hw = self.increment_high_watermark(&st, &mut leader);
        Ok((info, hw))
    }

    /// Bytes appended below `hw` that consumers could not read before (for waking their
    /// fetches when the high watermark moves).
    pub fn take_committed_bytes(&self, hw: i64) -> i64 {
        self.uncommitted.lock().take_committed(hw)
    }

    /// Whole batches from `offset` up to the high watermark (consumers) or the log end
    /// (followers).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        isolation: FetchIsolation,
    ) -> Result<ReadResult, StorageError> {
        let l = self.log.lock();
        let hw = l.high_watermark();
        let upto = match isolation {
            FetchIsolation::HighWatermark => hw,
            FetchIsolation::LogEnd => l.log_end_offset(),
        };
        let records = l.read(offset, max_bytes, Some(upto), min_one_batch)?;
        Ok(ReadResult {
            records,
            high_watermark: hw,
            log_start_offset: l.log_start_offset(),
            log_end_offset: l.log_end_offset(),
        })
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.lock().high_watermark()
    }

    /// `(high watermark, log start offset)`.
    pub fn offsets(&self) -> (i64, i64) {
        let l = self.log.lock();
        (l.high_watermark(), l.log_start_offset())
    }

    pub fn size(&self) -> u64 {
        self.log.lock().size()
    }

    /// Counts one consumer fetch request that read this partition.
    pub fn note_consumer_fetch(&self) {
        self.consumer_fetches.fetch_add(1, Ordering::Relaxed);
    }

    /// Consumer fetch requests that read this partition since it was opened here.
    pub fn consumer_fetches(&self) -> u64 {
        self.consumer_fetches.load(Ordering::Relaxed)
    }

    /// ListOffsets: the high watermark for LATEST, else the log's answer for the timestamp.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<(i64, Option<TimestampAndOffset>), StorageError> {
        use crate::storage::log::LATEST_TIMESTAMP;
        let l = self.log.lock();
        let hw = l.high_watermark();
        if timestamp == LATEST_TIMESTAMP {
            return Ok((
                hw,
                Some(TimestampAndOffset {
                    timestamp: -1,
                    offset: hw,
                    leader_epoch: l.epoch_cache().epoch_for_offset(hw.max(1) - 1),
                }),
            ));
        }
        Ok((hw, l.fetch_offset_by_timestamp(timestamp)?))
    }

    /// OffsetForLeaderEpoch: where `epoch` ended in this log.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let l = self.log.lock();
        l.epoch_cache().end_offset_for(epoch, l.log_end_offset())
    }

    /// DeleteRecords: moves the log start to `offset` (-1: the high watermark).
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, StorageError> {
        let mut l = self.log.lock();
        let target = if offset == -1 {
            l.high_watermark()
        } else {
            offset
        };
        l.delete_records_before(target)
    }

    /// Calls `f` with every batch of the log, in order (for loading `__consumer_offsets`).
    pub fn for_each_batch(&self, mut f: impl FnMut(&[u8])) {
        let l = self.log.lock();
        let mut at = l.log_start_offset();
        while at < l.log_end_offset() {
            let Ok(data) = l.read(at, 1 << 20, None, true) else {
                return;
            };
            if data.is_empty() {
                return;
            }
            // Stored validation: a cleaned `__consumer_offsets` has batches with offset gaps
            // and empty batches, which a produce request may not carry but a log may hold.
            let Ok(infos) = batch::validate_stored_batches(&data) else {
                return;
            };
            for info in infos {
                f(&data[info.position..info.position + info.header.size()]);
                at = info.header.next_offset();
            }
        }
    }

    /// Writes a producer snapshot at the log end (clean shutdown).
    pub fn snapshot_producer_state(&self) {
        let l = self.log.lock();
        let psm = self.producers.lock();
        if let Err(e) = psm
            .take_snapshot(l.log_end_offset())
            .and_then(|_| psm.delete_snapshots_before(l.log_start_offset()))
        {
            tracing::warn!(partition = %self.tp, error = %e, "cannot write a producer snapshot");
        }
    }
}

/// Headers of the batches in a produce request's records, without validation (the append
/// validates); stops at the first batch that does not fit.
fn headers(records: &[u8]) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some((_, len)) = batch::peek_offset_and_size(&records[pos..]) {
        let size = LOG_OVERHEAD as i64 + len as i64;
        if len < 0 || pos as i64 + size > records.len() as i64 {
            break;
        }
        match BatchHeader::parse(&records[pos..]) {
            Ok(h) => out.push(h),
            Err(_) => break,
        }
        pos += size as usize;
    }
    out
}
