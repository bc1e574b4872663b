//! The producer's view of the cluster: each topic's partitions in the order Metadata listed them,
//! with their leaders, and the partitions each broker leads (the order the drain walks them in).

use std::collections::HashMap;

/// One partition as the producer knows it: no leader means "not available".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLeader {
    pub partition: i32,
    pub leader: Option<i32>,
    pub leader_epoch: Option<i32>,
}

/// An immutable snapshot of the metadata the accumulator and partitioner read (Java's `Cluster`).
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    topics: HashMap<String, Vec<PartitionLeader>>,
    by_node: HashMap<i32, Vec<(String, i32)>>,
}

impl ClusterView {
    /// Builds the view from `(topic, partitions)` pairs; a topic's partitions keep the given order,
    /// and each broker's list follows the order of `topics` and then of the partitions.
    pub fn new(topics: Vec<(String, Vec<PartitionLeader>)>) -> ClusterView {
        let mut by_node: HashMap<i32, Vec<(String, i32)>> = HashMap::new();
        for (topic, parts) in &topics {
            for p in parts {
                if let Some(l) = p.leader {
                    by_node
                        .entry(l)
                        .or_default()
                        .push((topic.clone(), p.partition));
                }
            }
        }
        ClusterView {
            topics: topics.into_iter().collect(),
            by_node,
        }
    }

    /// Every partition of `topic` (empty when the topic is unknown).
    pub fn partitions_for_topic(&self, topic: &str) -> &[PartitionLeader] {
        self.topics.get(topic).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The partitions of `topic` that have a leader, in order.
    pub fn available_partitions_for_topic(&self, topic: &str) -> Vec<i32> {
        self.partitions_for_topic(topic)
            .iter()
            .filter(|p| p.leader.is_some())
            .map(|p| p.partition)
            .collect()
    }

    pub fn leader_for(&self, topic: &str, partition: i32) -> Option<i32> {
        self.find(topic, partition).and_then(|p| p.leader)
    }

    pub fn leader_epoch_for(&self, topic: &str, partition: i32) -> Option<i32> {
        self.find(topic, partition).and_then(|p| p.leader_epoch)
    }

    /// The partitions `node` leads, over all topics.
    pub fn partitions_for_node(&self, node: i32) -> &[(String, i32)] {
        self.by_node.get(&node).map(Vec::as_slice).unwrap_or(&[])
    }

    fn find(&self, topic: &str, partition: i32) -> Option<&PartitionLeader> {
        self.partitions_for_topic(topic)
            .iter()
            .find(|p| p.partition == partition)
    }
}

#[cfg(test)]
pub(crate) fn view(topic: &str, leaders: &[Option<i32>]) -> ClusterView {
    ClusterView::new(vec![(
        topic.to_string(),
        leaders
            .iter()
            .enumerate()
            .map(|(i, l)| PartitionLeader {
                partition: i as i32,
                leader: *l,
                leader_epoch: None,
            })
            .collect(),
    )])
}
