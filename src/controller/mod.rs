//! The controller of a single-node cluster: validates topic changes, writes them as KRaft-style
//! records to `__cluster_metadata-0` through the storage engine, and publishes the MetadataImage.

pub mod image;
pub mod records;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use image::{MetadataImage, TopicImage};
use records::{MetadataRecord, RESOURCE_TOPIC};

use crate::config::LogConfig;
use crate::storage::batch::{self, build_batch, KeyValue};
use crate::storage::{KafkaUuid, LogManager, LogRef, StorageError, TopicPartition};

pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// Kafka's limit on topic name length.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// A refused change, with Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ControllerError {
    pub code: i16,
    pub message: String,
}

impl ControllerError {
    fn new(code: i16, message: impl Into<String>) -> Self {
        ControllerError {
            code,
            message: message.into(),
        }
    }
}

/// Kafka error codes used here.
pub mod codes {
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_CONFIG: i16 = 40;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
}

impl From<StorageError> for ControllerError {
    fn from(e: StorageError) -> Self {
        ControllerError::new(codes::KAFKA_STORAGE_ERROR, e.to_string())
    }
}

/// Kafka's `Topic.validate`: legal characters, length, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ControllerError> {
    let bad = |m: String| Err(ControllerError::new(codes::INVALID_TOPIC_EXCEPTION, m));
    if name.is_empty() {
        return bad("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return bad("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > MAX_TOPIC_NAME_LENGTH {
        return bad(format!(
            "Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

/// Kafka's internal topics: users may not create, delete or produce to them.
pub fn is_internal_topic(name: &str) -> bool {
    name == METADATA_TOPIC || name == "__consumer_offsets"
}

/// Topics not shown in Metadata at all (the metadata log).
pub fn is_hidden_topic(name: &str) -> bool {
    name == METADATA_TOPIC
}

pub struct Controller {
    node_id: i32,
    log: LogRef,
    image: RwLock<Arc<MetadataImage>>,
    /// Serialises validate-then-write so two requests cannot both create one topic.
    write: Mutex<()>,
}

/// What a topic creation should look like.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

impl Controller {
    /// Opens `__cluster_metadata-0` and replays it into the image.
    pub fn open(logs: &LogManager, node_id: i32) -> Result<Controller, ControllerError> {
        let cfg = LogConfig {
            retention_ms: -1,
            retention_bytes: -1,
            ..LogConfig::default()
        };
        let tp = TopicPartition::new(METADATA_TOPIC, 0);
        let log = logs.get_or_create_log(&tp, None, Some(cfg.clone()))?;
        let mut image = MetadataImage::default();
        image.last_offset = -1;
        {
            let mut l = log.lock();
            l.update_config(cfg);
            let end = l.log_end_offset();
            l.update_high_watermark(end);
            let mut at = l.log_start_offset();
            while at < end {
                let data = l.read(at, 1 << 20, None, true)?;
                if data.is_empty() {
                    break;
                }
                for info in batch::validate_batches(&data)? {
                    let b = &data[info.position..info.position + info.header.size()];
                    for r in batch::uncompressed_records(b) {
                        let Some(value) = r.value else { continue };
                        match MetadataRecord::decode(value) {
                            Ok(Some(rec)) => image.apply(&rec),
                            Ok(None) => {}
                            Err(e) => {
                                return Err(ControllerError::new(
                                    codes::KAFKA_STORAGE_ERROR,
                                    format!("cannot replay the metadata log: {e}"),
                                ))
                            }
                        }
                    }
                    image.last_offset = info.header.last_offset();
                    at = info.header.next_offset();
                }
            }
        }
        tracing::info!(topics = image.topics().count(), "replayed the metadata log");
        Ok(Controller {
            node_id,
            log,
            image: RwLock::new(Arc::new(image)),
            write: Mutex::new(()),
        })
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The current image (cheap: an `Arc` clone).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Appends records as one batch, fsyncs, and publishes the new image.
    fn commit(&self, recs: Vec<MetadataRecord>) -> Result<Arc<MetadataImage>, ControllerError> {
        let values: Vec<Vec<u8>> = recs.iter().map(MetadataRecord::encode).collect();
        let kvs: Vec<KeyValue<'_>> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
        let now = crate::storage::log::now_ms();
        let mut b = build_batch(&kvs, now);
        let last_offset = {
            let mut l = self.log.lock();
            let info = l.append_as_leader(&mut b, 0)?;
            l.flush()?;
            l.update_high_watermark(info.last_offset + 1);
            info.last_offset
        };
        let mut next = (*self.image()).clone();
        for r in &recs {
            next.apply(r);
        }
        next.last_offset = last_offset;
        let next = Arc::new(next);
        if let Ok(mut g) = self.image.write() {
            *g = next.clone();
        }
        Ok(next)
    }

    fn lock_writes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Validates a new topic against the current image without writing it.
    pub fn validate_new_topic(
        &self,
        t: &NewTopic,
        defaults: &LogConfig,
    ) -> Result<(), ControllerError> {
        validate_topic_name(&t.name)?;
        let img = self.image();
        if img.topic(&t.name).is_some() {
            return Err(ControllerError::new(
                codes::TOPIC_ALREADY_EXISTS,
                format!("Topic '{}' already exists.", t.name),
            ));
        }
        let unified = unify_collision_chars(&t.name);
        if let Some(other) = img
            .topics()
            .find(|o| unify_collision_chars(&o.name) == unified)
        {
            return Err(ControllerError::new(
                codes::INVALID_TOPIC_EXCEPTION,
                format!(
                    "Topic '{}' collides with existing topic: {}",
                    t.name, other.name
                ),
            ));
        }
        if is_internal_topic(&t.name) {
            return Err(ControllerError::new(
                codes::INVALID_TOPIC_EXCEPTION,
                format!("Creation of internal topic {} is prohibited.", t.name),
            ));
        }
        if t.partitions <= 0 {
            return Err(ControllerError::new(
                codes::INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            ));
        }
        if t.replication_factor <= 0 {
            return Err(ControllerError::new(
                codes::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        if t.replication_factor > 1 {
            return Err(ControllerError::new(
                codes::INVALID_REPLICATION_FACTOR,
                format!(
                    "Unable to replicate the partition {} time(s): The target replication factor of {} cannot be reached because only 1 broker(s) are registered.",
                    t.replication_factor, t.replication_factor
                ),
            ));
        }
        validate_topic_configs(&t.configs, defaults)?;
        Ok(())
    }

    /// Creates a topic: a TopicRecord, a PartitionRecord per partition, a ConfigRecord per override.
    pub fn create_topic(
        &self,
        t: &NewTopic,
        defaults: &LogConfig,
    ) -> Result<TopicImage, ControllerError> {
        let _w = self.lock_writes();
        self.validate_new_topic(t, defaults)?;
        self.write_new_topic(t)
    }

    /// Creates an internal topic (`__consumer_offsets`) on the broker's own behalf.
    pub fn create_internal_topic(
        &self,
        t: &NewTopic,
        defaults: &LogConfig,
    ) -> Result<TopicImage, ControllerError> {
        let _w = self.lock_writes();
        if self.image().topic(&t.name).is_some() {
            return Err(ControllerError::new(
                codes::TOPIC_ALREADY_EXISTS,
                format!("Topic '{}' already exists.", t.name),
            ));
        }
        validate_topic_configs(&t.configs, defaults)?;
        self.write_new_topic(t)
    }

    fn write_new_topic(&self, t: &NewTopic) -> Result<TopicImage, ControllerError> {
        let id = KafkaUuid::random();
        let mut recs = vec![MetadataRecord::Topic {
            name: t.name.clone(),
            topic_id: id,
        }];
        for (k, v) in &t.configs {
            recs.push(MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: t.name.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            });
        }
        for p in 0..t.partitions {
            recs.push(self.partition_record(id, p));
        }
        let img = self.commit(recs)?;
        img.topic(&t.name).cloned().ok_or_else(|| {
            ControllerError::new(codes::KAFKA_STORAGE_ERROR, "topic vanished after creation")
        })
    }

    fn partition_record(&self, topic_id: KafkaUuid, partition_id: i32) -> MetadataRecord {
        MetadataRecord::Partition {
            partition_id,
            topic_id,
            replicas: vec![self.node_id],
            isr: vec![self.node_id],
            leader: self.node_id,
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }

    /// Deletes a topic by name.
    pub fn delete_topic(&self, name: &str) -> Result<KafkaUuid, ControllerError> {
        let _w = self.lock_writes();
        let Some(t) = self.image().topic(name).cloned() else {
            return Err(ControllerError::new(
                codes::UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            ));
        };
        if is_internal_topic(name) {
            return Err(ControllerError::new(
                codes::INVALID_TOPIC_EXCEPTION,
                format!("Deletion of internal topic {name} is prohibited."),
            ));
        }
        self.commit(vec![MetadataRecord::RemoveTopic { topic_id: t.id }])?;
        Ok(t.id)
    }

    /// Grows a topic to `count` partitions; a decrease is refused with Kafka's message.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let _w = self.lock_writes();
        let Some(t) = self.image().topic(name).cloned() else {
            return Err(ControllerError::new(
                codes::UNKNOWN_TOPIC_OR_PARTITION,
                format!("Topic '{name}' does not exist."),
            ));
        };
        let current = t.partitions.len() as i32;
        if count < current {
            return Err(ControllerError::new(
                codes::INVALID_PARTITIONS,
                format!(
                    "The topic {name} currently has {current} partition(s); {count} would not be an increase."
                ),
            ));
        }
        if count == current {
            return Err(ControllerError::new(
                codes::INVALID_PARTITIONS,
                format!("Topic already has {current} partition(s)."),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let recs = (current..count)
            .map(|p| self.partition_record(t.id, p))
            .collect();
        self.commit(recs)?;
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) topic config overrides, validated first.
    pub fn alter_topic_configs(
        &self,
        name: &str,
        changes: &[(String, Option<String>)],
        defaults: &LogConfig,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let _w = self.lock_writes();
        let img = self.image();
        if img.topic(name).is_none() {
            return Err(ControllerError::new(
                codes::UNKNOWN_TOPIC_OR_PARTITION,
                format!("Topic {name} does not exist."),
            ));
        }
        let mut after = img.topic_configs(name);
        for (k, v) in changes {
            match v {
                Some(v) => after.insert(k.clone(), v.clone()),
                None => after.remove(k),
            };
        }
        validate_topic_configs(&after, defaults)?;
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let recs = changes
            .iter()
            .map(|(k, v)| MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: name.to_string(),
                name: k.clone(),
                value: v.clone(),
            })
            .collect();
        self.commit(recs)?;
        Ok(())
    }
}

impl Controller {
    /// Hands out a block of `count` producer ids, recorded in the metadata log so that no id
    /// is ever given twice, across restarts too (Kafka's ProducerIdsRecord, blocks of 1000).
    pub fn allocate_producer_ids(
        &self,
        count: i64,
    ) -> Result<std::ops::Range<i64>, ControllerError> {
        let _w = self.lock_writes();
        let start = self.image().next_producer_id;
        self.commit(vec![MetadataRecord::ProducerIds {
            broker_id: self.node_id,
            broker_epoch: 0,
            next_producer_id: start + count,
        }])?;
        Ok(start..start + count)
    }
}

/// Topic config overrides must be known keys with valid values.
pub fn validate_topic_configs(
    configs: &BTreeMap<String, String>,
    defaults: &LogConfig,
) -> Result<LogConfig, ControllerError> {
    let (cfg, unknown) = defaults
        .with_overrides(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| ControllerError::new(codes::INVALID_CONFIG, e.to_string()))?;
    if let Some(k) = unknown.first() {
        return Err(ControllerError::new(
            codes::INVALID_CONFIG,
            format!("Unknown topic config name: {k}"),
        ));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LogManagerConfig;

    fn topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert!(validate_topic_name("orders.eu-1_a").is_ok());
        for bad in ["", ".", "..", "a b", "ä", &"x".repeat(250)] {
            assert_eq!(validate_topic_name(bad).unwrap_err().code, 17, "{bad}");
        }
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
    }

    #[test]
    fn topics_survive_a_restart_through_the_metadata_log() {
        let dir = tempfile::tempdir().unwrap();
        let d = LogConfig::default();
        let id;
        {
            let logs = LogManager::open(LogManagerConfig::new(dir.path(), d.clone())).unwrap();
            let c = Controller::open(&logs, 1).unwrap();
            let mut t = topic("orders", 3);
            t.configs.insert("retention.ms".into(), "1000".into());
            id = c.create_topic(&t, &d).unwrap().id;
            c.create_partitions("orders", 5, false).unwrap();
            c.create_topic(&topic("gone", 1), &d).unwrap();
            c.delete_topic("gone").unwrap();
            logs.shutdown().unwrap();
        }
        let logs = LogManager::open(LogManagerConfig::new(dir.path(), d)).unwrap();
        let c = Controller::open(&logs, 1).unwrap();
        let img = c.image();
        let t = img.topic("orders").unwrap();
        assert_eq!(t.id, id);
        assert_eq!(t.partitions.len(), 5);
        assert_eq!(img.topic_configs("orders")["retention.ms"], "1000");
        assert!(img.topic("gone").is_none());
        assert!(dir.path().join("__cluster_metadata-0").is_dir());
        let a = c.allocate_producer_ids(1000).unwrap();
        let b = c.allocate_producer_ids(1000).unwrap();
        assert_eq!((a.start, b.start), (0, 1000));
        drop(c);
        logs.shutdown().unwrap();
        drop(logs);
        let logs =
            LogManager::open(LogManagerConfig::new(dir.path(), LogConfig::default())).unwrap();
        let c = Controller::open(&logs, 1).unwrap();
        assert_eq!(c.allocate_producer_ids(10).unwrap().start, 2000);
    }

    #[test]
    fn bad_topic_changes_get_kafkas_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = LogConfig::default();
        let logs = LogManager::open(LogManagerConfig::new(dir.path(), d.clone())).unwrap();
        let c = Controller::open(&logs, 1).unwrap();
        c.create_topic(&topic("a.b", 3), &d).unwrap();
        assert_eq!(c.create_topic(&topic("a.b", 3), &d).unwrap_err().code, 36);
        let e = c.create_topic(&topic("a_b", 1), &d).unwrap_err();
        assert_eq!(e.code, 17);
        assert!(e.message.contains("collides"), "{e}");
        assert_eq!(c.create_topic(&topic("z", 0), &d).unwrap_err().code, 37);
        let mut rf = topic("r", 1);
        rf.replication_factor = 3;
        assert_eq!(c.create_topic(&rf, &d).unwrap_err().code, 38);
        let mut cfg = topic("c", 1);
        cfg.configs.insert("retention.ms".into(), "soon".into());
        assert_eq!(c.create_topic(&cfg, &d).unwrap_err().code, 40);
        let e = c.create_partitions("a.b", 2, false).unwrap_err();
        assert_eq!(e.code, 37);
        assert_eq!(
            e.message,
            "The topic a.b currently has 3 partition(s); 2 would not be an increase."
        );
        assert_eq!(c.delete_topic("nope").unwrap_err().code, 3);
    }
}
