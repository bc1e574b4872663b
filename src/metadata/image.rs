//! MetadataImage: the cluster as the metadata records build it — brokers, topics, partitions
//! (replicas, ISR, leaders, epochs), configs, features, producer ids, ACLs and SCRAM credentials. Immutable once
//! published: writers apply records to a copy, and topics are shared between copies, so telling
//! two images apart costs one pointer comparison per unchanged topic.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::quota_image::QuotaImage;
use super::records::{
    BrokerEndpoint, BrokerRegistration, MetadataRecord, PartitionChange, NO_LEADER,
    NO_LEADER_CHANGE, RESOURCE_BROKER, RESOURCE_TOPIC,
};
use super::security_image::SecurityImage;
use crate::storage::KafkaUuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
}

impl PartitionImage {
    /// Applies a PartitionChangeRecord as Kafka's `PartitionRegistration.merge` does: the leader
    /// epoch moves whenever the record names a leader, the partition epoch on every change.
    pub fn merge(&mut self, c: &PartitionChange) {
        if let Some(isr) = &c.isr {
            self.isr = isr.clone();
        }
        if c.leader != NO_LEADER_CHANGE {
            self.leader = c.leader;
            self.leader_epoch += 1;
        }
        if let Some(r) = &c.replicas {
            self.replicas = r.clone();
        }
        if let Some(r) = &c.removing_replicas {
            self.removing_replicas = r.clone();
        }
        if let Some(r) = &c.adding_replicas {
            self.adding_replicas = r.clone();
        }
        self.partition_epoch += 1;
    }

    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// The preferred leader: the first replica.
    pub fn preferred_leader(&self) -> Option<i32> {
        self.replicas.first().copied()
    }

    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: KafkaUuid,
    pub partitions: BTreeMap<i32, PartitionImage>,
}

/// A registered broker and where in the metadata log it registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerImage {
    pub id: i32,
    pub epoch: i64,
    pub incarnation_id: KafkaUuid,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// Offset of the RegisterBrokerRecord: the broker is caught up once it has applied it.
    pub registered_at: i64,
}

impl BrokerImage {
    /// Unfenced and not shutting down: eligible to lead and to hold new replicas.
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }

    /// The endpoint on `listener`, if the broker has one.
    pub fn endpoint(&self, listener: &str) -> Option<&BrokerEndpoint> {
        self.endpoints.iter().find(|e| e.name == listener)
    }
}

#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    topics: BTreeMap<String, Arc<TopicImage>>,
    names_by_id: HashMap<KafkaUuid, String>,
    topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic broker configs by resource name: "" for the cluster-wide default, else a
    /// broker id.
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    brokers: BTreeMap<i32, BrokerImage>,
    features: BTreeMap<String, i16>,
    /// Offset of the last record applied, or -1.
    pub last_offset: i64,
    /// Leader epoch (quorum term) of the last record applied, or -1.
    pub last_epoch: i32,
    /// Append time of the last batch applied, for snapshot headers.
    pub last_timestamp: i64,
    /// The first producer id not yet handed out.
    pub next_producer_id: i64,
    /// ACLs and SCRAM credentials.
    security: SecurityImage,
    /// Client quotas.
    quotas: QuotaImage,
}

/// Sets or (with `None`) removes one config of a resource; a resource left without configs
/// is dropped, so an image rebuilt from a snapshot equals the one that replayed the log.
fn set_config(
    table: &mut BTreeMap<String, BTreeMap<String, String>>,
    resource: &str,
    name: &str,
    value: Option<&str>,
) {
    match value {
        Some(v) => {
            table
                .entry(resource.to_string())
                .or_default()
                .insert(name.to_string(), v.to_string());
        }
        None => {
            if let Some(m) = table.get_mut(resource) {
                m.remove(name);
                if m.is_empty() {
                    table.remove(resource);
                }
            }
        }
    }
}

impl MetadataImage {
    pub fn empty() -> MetadataImage {
        MetadataImage {
            last_offset: -1,
            last_epoch: -1,
            ..MetadataImage::default()
        }
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values().map(|t| t.as_ref())
    }
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name).map(|t| t.as_ref())
    }
    /// The shared handle of a topic, to compare images cheaply.
    pub fn topic_arc(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }
    pub fn topic_by_id(&self, id: &KafkaUuid) -> Option<&TopicImage> {
        self.names_by_id.get(id).and_then(|n| self.topic(n))
    }
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionImage> {
        self.topic(topic).and_then(|t| t.partitions.get(&partition))
    }
    /// Dynamic overrides of one topic (only the keys that were set).
    pub fn topic_configs(&self, name: &str) -> BTreeMap<String, String> {
        self.topic_configs.get(name).cloned().unwrap_or_default()
    }
    /// The dynamic configs of broker resource `name` ("" is the cluster-wide default).
    pub fn broker_configs(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.broker_configs.get(name)
    }

    /// A dynamic broker config as broker `id` sees it: its own value, else the cluster default.
    pub fn dynamic_broker_config(&self, id: i32, key: &str) -> Option<&str> {
        self.broker_configs
            .get(&id.to_string())
            .and_then(|m| m.get(key))
            .or_else(|| self.broker_configs.get("").and_then(|m| m.get(key)))
            .map(String::as_str)
    }
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerImage> {
        self.brokers.values()
    }
    pub fn broker(&self, id: i32) -> Option<&BrokerImage> {
        self.brokers.get(&id)
    }
    /// Unfenced brokers, in id order.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerImage> {
        self.brokers.values().filter(|b| !b.fenced)
    }
    pub fn is_active(&self, broker: i32) -> bool {
        self.broker(broker).is_some_and(BrokerImage::is_active)
    }
    pub fn feature(&self, name: &str) -> Option<i16> {
        self.features.get(name).copied()
    }
    pub fn features(&self) -> &BTreeMap<String, i16> {
        &self.features
    }
    /// The offset after the last record: where the next one will be written.
    pub fn next_offset(&self) -> i64 {
        self.last_offset + 1
    }
    /// Replicas of a partition that are not live (unregistered or fenced), in replica order.
    pub fn offline_replicas(&self, p: &PartitionImage) -> Vec<i32> {
        p.replicas
            .iter()
            .copied()
            .filter(|r| self.broker(*r).is_none_or(|b| b.fenced))
            .collect()
    }
    pub fn partition_count(&self) -> usize {
        self.topics.values().map(|t| t.partitions.len()).sum()
    }
    /// Partitions with no leader (every replica that could lead is gone).
    pub fn offline_partition_count(&self) -> usize {
        self.topics
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|p| !p.has_leader())
            .count()
    }
    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }

    /// Applies one record written at `offset`. Records that refer to unknown topics or brokers
    /// are ignored, as Kafka's replay does.
    pub fn apply(&mut self, rec: &MetadataRecord, offset: i64) {
        self.last_offset = self.last_offset.max(offset);
        match rec {
            MetadataRecord::RegisterBroker(b) => self.register(b, offset),
            MetadataRecord::UnregisterBroker {
                broker_id,
                broker_epoch,
            } => {
                if self
                    .brokers
                    .get(broker_id)
                    .is_some_and(|b| b.epoch == *broker_epoch)
                {
                    self.brokers.remove(broker_id);
                }
            }
            MetadataRecord::FenceBroker { id, epoch } => self.set_fenced(*id, *epoch, 1, 0),
            MetadataRecord::UnfenceBroker { id, epoch } => self.set_fenced(*id, *epoch, -1, 0),
            MetadataRecord::BrokerRegistrationChange {
                broker_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => self.set_fenced(*broker_id, *broker_epoch, *fenced, *in_controlled_shutdown),
            MetadataRecord::Topic { name, topic_id } => {
                self.names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                removing_replicas,
                adding_replicas,
                leader,
                leader_epoch,
                partition_epoch,
            } => {
                if let Some(t) = self.topic_mut(topic_id) {
                    t.partitions.insert(
                        *partition_id,
                        PartitionImage {
                            leader: *leader,
                            leader_epoch: *leader_epoch,
                            partition_epoch: *partition_epoch,
                            replicas: replicas.clone(),
                            isr: isr.clone(),
                            removing_replicas: removing_replicas.clone(),
                            adding_replicas: adding_replicas.clone(),
                        },
                    );
                }
            }
            MetadataRecord::PartitionChange(c) => {
                if let Some(p) = self
                    .topic_mut(&c.topic_id)
                    .and_then(|t| t.partitions.get_mut(&c.partition_id))
                {
                    p.merge(c);
                }
            }
            MetadataRecord::Config {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                let table = match *resource_type {
                    RESOURCE_TOPIC => &mut self.topic_configs,
                    RESOURCE_BROKER => &mut self.broker_configs,
                    _ => return,
                };
                set_config(table, resource_name, name, value.as_deref());
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.names_by_id.remove(topic_id) {
                    self.topics.remove(&name);
                    self.topic_configs.remove(&name);
                }
            }
            MetadataRecord::FeatureLevel { name, level } => {
                if *level == 0 {
                    self.features.remove(name);
                } else {
                    self.features.insert(name.clone(), *level);
                }
            }
            MetadataRecord::NoOp => {}
            other => {
                if !self.security.apply(other) {
                    self.quotas.apply(other);
                }
            }
        }
    }

    /// The ACLs and SCRAM credentials.
    pub fn security(&self) -> &SecurityImage {
        &self.security
    }

    /// The client quotas.
    pub fn quotas(&self) -> &QuotaImage {
        &self.quotas
    }

    fn topic_mut(&mut self, id: &KafkaUuid) -> Option<&mut TopicImage> {
        let name = self.names_by_id.get(id)?;
        self.topics.get_mut(name).map(Arc::make_mut)
    }

    fn register(&mut self, b: &BrokerRegistration, offset: i64) {
        self.brokers.insert(
            b.broker_id,
            BrokerImage {
                id: b.broker_id,
                epoch: b.broker_epoch,
                incarnation_id: b.incarnation_id,
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                registered_at: offset,
            },
        );
    }

    fn set_fenced(&mut self, id: i32, epoch: i64, fenced: i8, in_controlled_shutdown: i8) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if b.epoch != epoch {
            return;
        }
        match fenced {
            1 => b.fenced = true,
            -1 => {
                b.fenced = false;
                b.in_controlled_shutdown = false;
            }
            _ => {}
        }
        if in_controlled_shutdown == 1 {
            b.in_controlled_shutdown = true;
        }
    }

    /// The records that rebuild this image from nothing, for a snapshot: features, brokers,
    /// configs, topics with their partitions, producer ids.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::new();
        for (name, level) in &self.features {
            out.push(MetadataRecord::FeatureLevel {
                name: name.clone(),
                level: *level,
            });
        }
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker(BrokerRegistration {
                broker_id: b.id,
                incarnation_id: b.incarnation_id,
                broker_epoch: b.epoch,
                endpoints: b.endpoints.clone(),
                features: Vec::new(),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
            }));
        }
        for (resource, configs) in &self.broker_configs {
            for (k, v) in configs {
                out.push(MetadataRecord::Config {
                    resource_type: RESOURCE_BROKER,
                    resource_name: resource.clone(),
                    name: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for t in self.topics.values() {
            out.push(MetadataRecord::Topic {
                name: t.name.clone(),
                topic_id: t.id,
            });
            for (k, v) in self.topic_configs.get(&t.name).into_iter().flatten() {
                out.push(MetadataRecord::Config {
                    resource_type: RESOURCE_TOPIC,
                    resource_name: t.name.clone(),
                    name: k.clone(),
                    value: Some(v.clone()),
                });
            }
            for (id, p) in &t.partitions {
                out.push(MetadataRecord::Partition {
                    partition_id: *id,
                    topic_id: t.id,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                    adding_replicas: p.adding_replicas.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                });
            }
        }
        if self.next_producer_id > 0 {
            out.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id,
            });
        }
        self.security.to_records(&mut out);
        self.quotas.to_records(&mut out);
        out
    }

    /// Applies the records of a snapshot. The registration offsets of brokers are not in any
    /// record; a snapshot's brokers count as registered at its last offset.
    pub fn from_snapshot_records(
        records: &[MetadataRecord],
        last_offset: i64,
        last_epoch: i32,
        last_timestamp: i64,
    ) -> MetadataImage {
        let mut img = MetadataImage::empty();
        for r in records {
            img.apply(r, last_offset);
        }
        img.last_offset = last_offset;
        img.last_epoch = last_epoch;
        img.last_timestamp = last_timestamp;
        img
    }

    /// Compares the contents (not the position in the log) of two images.
    pub fn same_contents(&self, other: &MetadataImage) -> bool {
        self.topics.len() == other.topics.len()
            && self
                .topics
                .iter()
                .zip(other.topics.iter())
                .all(|((a, ta), (b, tb))| a == b && ta == tb)
            && self.topic_configs == other.topic_configs
            && self.broker_configs == other.broker_configs
            && self.brokers.len() == other.brokers.len()
            && self
                .brokers
                .iter()
                .zip(other.brokers.iter())
                .all(|((a, ba), (b, bb))| {
                    a == b
                        && ba.epoch == bb.epoch
                        && ba.fenced == bb.fenced
                        && ba.in_controlled_shutdown == bb.in_controlled_shutdown
                        && ba.endpoints == bb.endpoints
                        && ba.rack == bb.rack
                })
            && self.features == other.features
            && self.next_producer_id == other.next_producer_id
            && self.security == other.security
            && self.quotas == other.quotas
    }
}

/// What changed between two images, for the topics this is asked about.
#[derive(Debug, Default)]
pub struct TopicChanges<'a> {
    /// Topics that are new or whose partitions or id changed.
    pub changed: Vec<&'a TopicImage>,
    /// Names of topics that are gone (or were re-created under a new id: also in `changed`).
    pub removed: Vec<String>,
}

impl MetadataImage {
    /// Topics that differ from `prev`: cheap for unchanged topics (shared pointers).
    pub fn topic_changes<'a>(&'a self, prev: &MetadataImage) -> TopicChanges<'a> {
        let mut out = TopicChanges::default();
        for (name, t) in &self.topics {
            match prev.topics.get(name) {
                Some(old) if Arc::ptr_eq(old, t) => {}
                Some(old) => {
                    if old.id != t.id {
                        out.removed.push(name.clone());
                    }
                    out.changed.push(t);
                }
                None => out.changed.push(t),
            }
        }
        for name in prev.topics.keys() {
            if !self.topics.contains_key(name) {
                out.removed.push(name.clone());
            }
        }
        out
    }

    /// Whether topic configs changed for `name`.
    pub fn topic_configs_changed(&self, prev: &MetadataImage, name: &str) -> bool {
        self.topic_configs.get(name) != prev.topic_configs.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(id: KafkaUuid, p: i32, replicas: Vec<i32>) -> MetadataRecord {
        MetadataRecord::Partition {
            partition_id: p,
            topic_id: id,
            isr: replicas.clone(),
            leader: replicas[0],
            replicas,
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }

    /// An image holding one topic `name` (at offset 0), and the topic's id.
    fn image_with_topic(name: &str) -> (KafkaUuid, MetadataImage) {
        let id = KafkaUuid::random();
        let mut img = MetadataImage::empty();
        img.apply(
            &MetadataRecord::Topic {
                name: name.into(),
                topic_id: id,
            },
            0,
        );
        (id, img)
    }

    #[test]
    fn replay_builds_and_removes_topics() {
        let (id, mut img) = image_with_topic("a");
        img.apply(&partition(id, 0, vec![1]), 1);
        img.apply(
            &MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: "a".into(),
                name: "retention.ms".into(),
                value: Some("5".into()),
            },
            2,
        );
        assert_eq!(img.topic("a").unwrap().partitions.len(), 1);
        assert_eq!(img.topic_by_id(&id).unwrap().name, "a");
        assert_eq!(img.topic_configs("a")["retention.ms"], "5");
        assert_eq!(img.last_offset, 2);
        img.apply(&MetadataRecord::RemoveTopic { topic_id: id }, 3);
        assert!(img.topic("a").is_none());
        assert!(img.topic_configs("a").is_empty());
    }

    #[test]
    fn partition_changes_move_epochs_as_kafka_does() {
        let (id, mut img) = image_with_topic("t");
        img.apply(&partition(id, 0, vec![1, 2, 3]), 1);
        // An ISR shrink alone: partition epoch only.
        img.apply(
            &MetadataRecord::PartitionChange(PartitionChange {
                partition_id: 0,
                topic_id: id,
                isr: Some(vec![1, 2]),
                leader: NO_LEADER_CHANGE,
                ..Default::default()
            }),
            2,
        );
        let p = img.partition("t", 0).unwrap().clone();
        assert_eq!(
            (p.isr, p.leader_epoch, p.partition_epoch),
            (vec![1, 2], 0, 1)
        );
        // A new leader: both epochs.
        img.apply(
            &MetadataRecord::PartitionChange(PartitionChange {
                partition_id: 0,
                topic_id: id,
                isr: Some(vec![2]),
                leader: 2,
                ..Default::default()
            }),
            3,
        );
        let p = img.partition("t", 0).unwrap();
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
    }

    #[test]
    fn a_partition_whose_leader_went_with_no_successor_counts_offline() {
        let (id, mut img) = image_with_topic("t");
        img.apply(&partition(id, 0, vec![1, 2]), 1);
        img.apply(&partition(id, 1, vec![1]), 2);
        assert_eq!((img.topic_count(), img.partition_count()), (1, 2));
        assert_eq!(img.offline_partition_count(), 0);
        img.apply(
            &MetadataRecord::PartitionChange(PartitionChange {
                partition_id: 1,
                topic_id: id,
                isr: Some(vec![1]),
                leader: NO_LEADER,
                ..Default::default()
            }),
            3,
        );
        assert_eq!(img.offline_partition_count(), 1);
        assert_eq!(img.partition_count(), 2);
    }

    #[test]
    fn unchanged_topics_are_shared_between_images() {
        let (a, b) = (KafkaUuid::random(), KafkaUuid::random());
        let mut first = MetadataImage::empty();
        for (name, id) in [("a", a), ("b", b)] {
            first.apply(
                &MetadataRecord::Topic {
                    name: name.into(),
                    topic_id: id,
                },
                0,
            );
            first.apply(&partition(id, 0, vec![1]), 1);
        }
        let mut second = first.clone();
        second.apply(&partition(b, 1, vec![1]), 2);
        let changes = second.topic_changes(&first);
        assert_eq!(
            changes
                .changed
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            vec!["b"]
        );
        assert!(changes.removed.is_empty());
        let mut third = second.clone();
        third.apply(&MetadataRecord::RemoveTopic { topic_id: a }, 3);
        assert_eq!(third.topic_changes(&second).removed, vec!["a".to_string()]);
    }

    #[test]
    fn an_image_survives_its_own_snapshot_records() {
        let id = KafkaUuid::random();
        let mut img = MetadataImage::empty();
        img.apply(
            &MetadataRecord::FeatureLevel {
                name: "metadata.version".into(),
                level: 27,
            },
            0,
        );
        img.apply(
            &MetadataRecord::RegisterBroker(BrokerRegistration {
                broker_id: 1,
                incarnation_id: KafkaUuid::random(),
                broker_epoch: 1,
                endpoints: vec![],
                features: vec![],
                rack: Some("r1".into()),
                fenced: false,
                in_controlled_shutdown: false,
            }),
            1,
        );
        img.apply(
            &MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            2,
        );
        img.apply(&partition(id, 0, vec![1]), 3);
        img.apply(
            &MetadataRecord::ProducerIds {
                broker_id: 1,
                broker_epoch: 1,
                next_producer_id: 1000,
            },
            4,
        );
        let back = MetadataImage::from_snapshot_records(&img.to_records(), 4, 0, 0);
        assert!(back.same_contents(&img));
        assert_eq!(back.last_offset, 4);
    }
}
