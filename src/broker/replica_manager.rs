//! ReplicaManager: the only door to this broker's partitions. It applies each published
//! metadata image (creating logs, making replicas leaders or followers, deleting what the
//! broker no longer hosts), and runs appends and reads with their purgatory notifications.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::partition::{FetchIsolation, Partition, PartitionError, ReadResult, Role};
use super::purgatory::Purgatory;
use crate::config::LogConfig;
use crate::controller::image::{MetadataImage, TopicImage};
use crate::controller::is_hidden_topic;
use crate::protocol::errors;
use crate::storage::log::AppendInfo;
use crate::storage::{LogManager, StorageError, TopicPartition};

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
    pub fetch_purgatory: Purgatory,
    pub produce_purgatory: Purgatory,
}

fn topic_config(image: &MetadataImage, t: &TopicImage, defaults: &LogConfig) -> LogConfig {
    let overrides = image.topic_configs(&t.name);
    defaults
        .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(c, _)| c)
        .unwrap_or_else(|_| defaults.clone())
}

impl ReplicaManager {
    pub fn new(node_id: i32, logs: Arc<LogManager>) -> Self {
        ReplicaManager {
            node_id,
            logs,
            partitions: RwLock::new(HashMap::new()),
            image: RwLock::new(Arc::new(MetadataImage::empty())),
            apply_lock: Mutex::new(()),
            fetch_purgatory: Purgatory::default(),
            produce_purgatory: Purgatory::default(),
        }
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().get(tp).cloned()
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
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
    pub fn hosted(&self, tp: &TopicPartition) -> Result<Arc<Partition>, PartitionError> {
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
    pub fn leader_partition(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, PartitionError> {
        let p = self.hosted(tp)?;
        p.check_leader(current_leader_epoch)?;
        Ok(p)
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
                let _ = p;
                if changed {
                    match role {
                        Role::Leader => changes.became_leader.push(tp),
                        Role::Follower => changes.became_follower.push(tp),
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
        pimg: &crate::controller::image::PartitionImage,
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

    /// Appends client batches to a partition this broker leads, then wakes fetches waiting
    /// for bytes and acks=all produces waiting for the high watermark.
    pub fn append(
        &self,
        p: &Partition,
        records: &mut [u8],
        required_acks: i16,
    ) -> Result<AppendInfo, PartitionError> {
        let (info, hw) = p.append_as_leader(records, required_acks)?;
        if info.num_messages > 0 {
            self.fetch_purgatory.on_bytes(&p.tp, records.len() as i64);
        }
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
        isolation: FetchIsolation,
    ) -> Result<ReadResult, PartitionError> {
        Ok(p.read(offset, max_bytes, min_one_batch, isolation)?)
    }

    /// Writes a producer snapshot at each partition's log end (clean shutdown).
    pub fn snapshot_producer_state(&self) {
        for p in self.partitions() {
            p.snapshot_producer_state();
        }
    }

    pub fn high_watermark(&self, p: &Partition) -> i64 {
        p.high_watermark()
    }
}
