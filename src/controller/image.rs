//! MetadataImage: the cluster's topics, partitions and configs as the metadata records build them.
//! Immutable once published; writers apply records to a copy and publish the copy.

use std::collections::{BTreeMap, HashMap};

use super::records::{MetadataRecord, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::storage::KafkaUuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: KafkaUuid,
    pub partitions: BTreeMap<i32, PartitionImage>,
}

#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    topics: BTreeMap<String, TopicImage>,
    names_by_id: HashMap<KafkaUuid, String>,
    topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    broker_configs: BTreeMap<String, String>,
    /// Offset of the last record applied, or -1.
    pub last_offset: i64,
    /// The first producer id not yet handed out.
    pub next_producer_id: i64,
}

impl MetadataImage {
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }
    pub fn topic_by_id(&self, id: &KafkaUuid) -> Option<&TopicImage> {
        self.names_by_id.get(id).and_then(|n| self.topics.get(n))
    }
    /// Dynamic overrides of one topic (only the keys that were set).
    pub fn topic_configs(&self, name: &str) -> BTreeMap<String, String> {
        self.topic_configs.get(name).cloned().unwrap_or_default()
    }
    pub fn broker_configs(&self) -> &BTreeMap<String, String> {
        &self.broker_configs
    }

    /// Applies one record. Records that refer to unknown topics are ignored, as Kafka's replay does.
    pub fn apply(&mut self, rec: &MetadataRecord) {
        match rec {
            MetadataRecord::Topic { name, topic_id } => {
                self.names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
            } => {
                if let Some(name) = self.names_by_id.get(topic_id) {
                    if let Some(t) = self.topics.get_mut(name) {
                        t.partitions.insert(
                            *partition_id,
                            PartitionImage {
                                leader: *leader,
                                leader_epoch: *leader_epoch,
                                partition_epoch: *partition_epoch,
                                replicas: replicas.clone(),
                                isr: isr.clone(),
                            },
                        );
                    }
                }
            }
            MetadataRecord::Config {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                let map = match *resource_type {
                    RESOURCE_TOPIC => self.topic_configs.entry(resource_name.clone()).or_default(),
                    RESOURCE_BROKER => &mut self.broker_configs,
                    _ => return,
                };
                match value {
                    Some(v) => {
                        map.insert(name.clone(), v.clone());
                    }
                    None => {
                        map.remove(name);
                    }
                }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_builds_and_removes_topics() {
        let id = KafkaUuid::random();
        let mut img = MetadataImage::default();
        img.apply(&MetadataRecord::Topic {
            name: "a".into(),
            topic_id: id,
        });
        img.apply(&MetadataRecord::Partition {
            partition_id: 0,
            topic_id: id,
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
        });
        img.apply(&MetadataRecord::Config {
            resource_type: RESOURCE_TOPIC,
            resource_name: "a".into(),
            name: "retention.ms".into(),
            value: Some("5".into()),
        });
        assert_eq!(img.topic("a").unwrap().partitions.len(), 1);
        assert_eq!(img.topic_by_id(&id).unwrap().name, "a");
        assert_eq!(img.topic_configs("a")["retention.ms"], "5");
        img.apply(&MetadataRecord::RemoveTopic { topic_id: id });
        assert!(img.topic("a").is_none());
        assert!(img.topic_configs("a").is_empty());
    }
}
