//! ReplicaManager: the partitions this broker hosts, kept in step with the metadata image;
//! appends (advancing the high watermark, notifying the purgatory) and reads for fetches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::producer_state::{ProducerStateManager, SequenceCheck};
use super::purgatory::Purgatory;
use crate::config::LogConfig;
use crate::controller::image::MetadataImage;
use crate::controller::is_hidden_topic;
use crate::storage::batch::{self, BatchHeader, LOG_OVERHEAD};
use crate::storage::log::AppendInfo;
use crate::storage::{KafkaUuid, LogManager, LogRef, StorageError, TopicPartition};

/// One hosted partition.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: KafkaUuid,
    pub leader_epoch: i32,
    pub log: LogRef,
    /// Idempotent-producer state; always locked after `log`.
    pub producers: Mutex<ProducerStateManager>,
}

/// What a read found: whole batches and the partition's offsets at the time.
#[derive(Debug, Default)]
pub struct ReadResult {
    pub records: Vec<u8>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// A failed partition operation: Kafka error code and message.
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: i16,
    pub message: String,
}

impl From<StorageError> for PartitionError {
    fn from(e: StorageError) -> Self {
        PartitionError {
            code: e.kafka_error_code(),
            message: e.to_string(),
        }
    }
}

fn lock_err() -> PartitionError {
    PartitionError {
        code: crate::protocol::errors::KAFKA_STORAGE_ERROR,
        message: "partition lock poisoned".into(),
    }
}

pub struct ReplicaManager {
    node_id: i32,
    logs: Arc<LogManager>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Serialises `apply_image`.
    apply_lock: Mutex<()>,
    pub fetch_purgatory: Purgatory,
    pub produce_purgatory: Purgatory,
}

impl ReplicaManager {
    pub fn new(node_id: i32, logs: Arc<LogManager>) -> Self {
        ReplicaManager {
            node_id,
            logs,
            partitions: RwLock::new(HashMap::new()),
            apply_lock: Mutex::new(()),
            fetch_purgatory: Purgatory::default(),
            produce_purgatory: Purgatory::default(),
        }
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().ok()?.get(tp).cloned()
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Makes the hosted partitions match `image`: creates logs for new partitions (and for a
    /// topic re-created under the same name), applies topic configs, deletes removed partitions.
    pub fn apply_image(
        &self,
        image: &MetadataImage,
        defaults: &LogConfig,
    ) -> Result<(), StorageError> {
        let mut wanted: HashMap<TopicPartition, (KafkaUuid, i32, LogConfig)> = HashMap::new();
        for t in image.topics() {
            if is_hidden_topic(&t.name) {
                continue;
            }
            let overrides = image.topic_configs(&t.name);
            let cfg = defaults
                .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map(|(c, _)| c)
                .unwrap_or_else(|_| defaults.clone());
            for (p, img) in &t.partitions {
                if img.replicas.contains(&self.node_id) {
                    wanted.insert(
                        TopicPartition::new(&t.name, *p),
                        (t.id, img.leader_epoch, cfg.clone()),
                    );
                }
            }
        }
        // One change at a time; readers keep the partition map until the new one is ready, so
        // creating a thousand logs (fsyncs) never stalls produce or fetch.
        let _applying = self.apply_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current: HashMap<TopicPartition, Arc<Partition>> = self
            .partitions
            .read()
            .map(|m| m.clone())
            .unwrap_or_default();
        let lock_err = || StorageError::DirectoryLocked(self.logs.log_dir().to_path_buf());
        // Removed partitions, and logs on disk that the image no longer names.
        let stale: Vec<TopicPartition> = self
            .logs
            .all_logs()
            .into_iter()
            .map(|(tp, _)| tp)
            .filter(|tp| !is_hidden_topic(&tp.topic) && !wanted.contains_key(tp))
            .collect();
        let mut next: HashMap<TopicPartition, Arc<Partition>> = HashMap::new();
        for (tp, (id, epoch, cfg)) in wanted {
            if let Some(p) = current.get(&tp) {
                if p.topic_id == id {
                    p.log.lock().update_config(cfg);
                    next.insert(tp, p.clone());
                    continue;
                }
            }
            if let Some(existing) = self.logs.get_log(&tp) {
                let same_topic = existing.lock().topic_id().is_none_or(|old| old == id);
                if !same_topic {
                    // Re-created under the same name: the old log goes, offsets restart at 0.
                    self.logs.delete_log(&tp)?;
                }
            }
            let log = self
                .logs
                .get_or_create_log(&tp, Some(id), Some(cfg.clone()))?;
            let producers = {
                let mut l = log.lock();
                l.update_config(cfg);
                l.set_topic_id(id)?;
                if l.epoch_cache().latest_epoch().is_none_or(|e| e < epoch) {
                    let leo = l.log_end_offset();
                    l.epoch_cache_mut().assign(epoch, leo)?;
                }
                // A single node is the whole ISR: everything it has is committed.
                let leo = l.log_end_offset();
                l.update_high_watermark(leo);
                ProducerStateManager::load(&l)?
            };
            next.insert(
                tp.clone(),
                Arc::new(Partition {
                    tp,
                    topic_id: id,
                    leader_epoch: epoch,
                    log,
                    producers: Mutex::new(producers),
                }),
            );
        }
        *self.partitions.write().map_err(|_| lock_err())? = next;
        for tp in stale {
            self.logs.delete_log(&tp)?;
        }
        Ok(())
    }

    /// Appends client batches as leader; the high watermark follows (the ISR is this node).
    /// Idempotent batches are checked first: a duplicate is answered with the offsets it
    /// already has and nothing is written; a sequence gap or stale epoch is refused.
    pub fn append(&self, p: &Partition, records: &mut [u8]) -> Result<AppendInfo, PartitionError> {
        let (info, hw) = {
            let mut l = p.log.lock();
            let mut psm = p.producers.lock().map_err(|_| lock_err())?;
            for h in headers(records) {
                match psm.check(&h) {
                    Ok(SequenceCheck::Append) => {}
                    Ok(SequenceCheck::Duplicate(m)) => {
                        return Ok(AppendInfo {
                            first_offset: m.first_offset,
                            last_offset: m.last_offset,
                            max_timestamp: m.timestamp,
                            log_append_time: -1,
                            num_messages: 0,
                            valid_bytes: 0,
                            log_start_offset: l.log_start_offset(),
                        });
                    }
                    Err(e) => {
                        return Err(PartitionError {
                            code: e.code,
                            message: e.message,
                        })
                    }
                }
            }
            let active_before = l.segments().last().map(|s| s.base_offset());
            let info = l.append_as_leader(records, p.leader_epoch)?;
            if l.segments().last().map(|s| s.base_offset()) != active_before {
                // A roll: snapshot the producer state as of the new segment's base, as Kafka does.
                if let Err(e) = psm.take_snapshot(info.first_offset) {
                    tracing::warn!(partition = %p.tp, error = %e, "cannot write a producer snapshot");
                }
            }
            for h in headers(records) {
                psm.record(&h);
            }
            let hw = l.update_high_watermark(info.last_offset + 1);
            (info, hw)
        };
        self.fetch_purgatory.on_bytes(&p.tp, records.len() as i64);
        self.produce_purgatory.on_high_watermark(&p.tp, hw);
        Ok(info)
    }

    /// Reads whole batches from `offset`, up to the high watermark for consumers.
    pub fn read(
        &self,
        p: &Partition,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<ReadResult, PartitionError> {
        let l = p.log.lock();
        let hw = l.high_watermark();
        let records = l.read(offset, max_bytes, Some(hw), min_one_batch)?;
        Ok(ReadResult {
            records,
            high_watermark: hw,
            log_start_offset: l.log_start_offset(),
        })
    }

    /// Writes a producer snapshot at each partition's log end (clean shutdown).
    pub fn snapshot_producer_state(&self) {
        for p in self.partitions() {
            let l = p.log.lock();
            let Ok(psm) = p.producers.lock() else {
                continue;
            };
            if let Err(e) = psm
                .take_snapshot(l.log_end_offset())
                .and_then(|_| psm.delete_snapshots_before(l.log_start_offset()))
            {
                tracing::warn!(partition = %p.tp, error = %e, "cannot write a producer snapshot");
            }
        }
    }

    pub fn high_watermark(&self, p: &Partition) -> i64 {
        p.log.lock().high_watermark()
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
