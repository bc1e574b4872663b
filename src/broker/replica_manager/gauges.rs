//! The partition gauges ReplicaManager reports (Kafka's LeaderCount, PartitionCount,
//! UnderReplicatedPartitions, UnderMinIsr/AtMinIsr counts, follower lag and log sizes).

use super::ReplicaManager;
use crate::broker::partition::Role;
use crate::storage::TopicPartition;

/// One hosted replica's size and, for a leader, the consumer fetches it served.
#[derive(Debug, Clone)]
pub struct PartitionLoad {
    pub tp: TopicPartition,
    pub size: u64,
    /// Consumer fetches served since the partition became leader here; `None` on a follower.
    pub consumer_fetches: Option<u64>,
}

/// The hosted replicas, counted as Kafka's ReplicaManager gauges count them.
#[derive(Debug, Clone, Default)]
pub struct PartitionGauges {
    pub partitions: usize,
    pub leaders: i64,
    /// Led partitions whose ISR is smaller than their replica set.
    pub under_replicated: i64,
    pub under_min_isr: i64,
    pub at_min_isr: i64,
    /// The largest lag, in offsets, of a partition this broker follows.
    pub max_follower_lag: i64,
    pub loads: Vec<PartitionLoad>,
}

impl ReplicaManager {
    /// The gauges over every hosted replica, now.
    pub fn gauges(&self) -> PartitionGauges {
        let parts = self.partitions();
        let mut g = PartitionGauges {
            partitions: parts.len(),
            ..PartitionGauges::default()
        };
        for p in parts {
            let st = p.state();
            let leader = st.role == Role::Leader;
            if leader {
                g.leaders += 1;
                let (isr, min_isr) = (st.isr.len(), p.min_insync_replicas());
                g.under_replicated += i64::from(isr < st.replicas.len());
                g.under_min_isr += i64::from(isr < min_isr);
                g.at_min_isr += i64::from(isr == min_isr);
            } else {
                g.max_follower_lag = g.max_follower_lag.max(p.follower_lag());
            }
            g.loads.push(PartitionLoad {
                tp: p.tp.clone(),
                size: p.size(),
                consumer_fetches: leader.then(|| p.consumer_fetches()),
            });
        }
        g
    }
}
