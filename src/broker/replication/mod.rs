//! Follower replication (Kafka's ReplicaFetcherManager): for every partition this broker
//! follows, a fetcher keeps fetching from the partition's leader. Each source broker gets
//! `num.replica.fetchers` fetchers and a partition always goes to the same one of them; the
//! manager adds, moves and removes partitions as each metadata image says who leads what.

mod fetcher;
mod stall;
mod throttle;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::replica_manager::ReplicaManager;
use crate::config::replication::ReplicationConfig;
use crate::metrics::BrokerMetrics;
use crate::storage::{KafkaUuid, TopicPartition};

pub use throttle::Throttle;

/// What the fetchers need of their broker: the replicas they append to, who this broker is
/// (its id, and its registration epoch for KIP-903), its metrics, the follower throttle, and
/// how to connect to the leaders' inter-broker listener.
#[derive(Clone)]
pub struct FetcherContext {
    /// Weak: the ReplicaManager owns the fetchers.
    replicas: Weak<ReplicaManager>,
    pub node_id: i32,
    pub broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
    pub metrics: Arc<BrokerMetrics>,
    follower_throttle: Arc<Throttle>,
    pub security: crate::client::ClientSecurity,
}

impl FetcherContext {
    /// The ReplicaManager, while the broker lives.
    fn replicas(&self) -> Option<Arc<ReplicaManager>> {
        self.replicas.upgrade()
    }
}

/// One partition this broker should follow, as the metadata says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowTarget {
    pub tp: TopicPartition,
    pub topic_id: KafkaUuid,
    pub leader: i32,
    pub leader_epoch: i32,
    /// The leader's inter-broker address, `host:port`.
    pub leader_address: String,
}

/// A fetcher's view of one partition.
#[derive(Debug, Clone)]
struct Assigned {
    topic_id: KafkaUuid,
    leader_epoch: i32,
    /// After an error the partition waits until then (replica.fetch.backoff.ms).
    delayed_until: Option<std::time::Instant>,
    /// Fetches in a row that the leader answered as if it had not yet applied the metadata
    /// that made it the leader (see `fetcher::leader_is_behind`).
    behind_retries: u32,
    /// Whether its fetches have left it out of the ISR without progress (`stall`).
    stall: stall::StallWatch,
}

/// The partitions of one fetcher, shared with its task.
#[derive(Default)]
struct FetcherShared {
    partitions: Mutex<HashMap<TopicPartition, Assigned>>,
    address: Mutex<String>,
    /// Bumped whenever a partition is added or moves to a new leader epoch: a fetch in flight
    /// that was asked before then is abandoned, so a new partition does not wait out another
    /// partition's long poll (`replica.fetch.wait.max.ms`) before its first fetch.
    generation: AtomicU64,
    wake: Notify,
}

struct FetcherHandle {
    shared: Arc<FetcherShared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FetcherHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Drops the stalled gauge of a partition that leaves its fetcher or moves to a new epoch.
fn clear_stall(ctx: &FetcherContext, tp: &TopicPartition, a: &Assigned) {
    if a.stall.reported() {
        let partition = tp.partition.to_string();
        let _ = ctx
            .metrics
            .replica_fetch_stalled
            .remove_label_values(&[tp.topic.as_str(), partition.as_str()]);
    }
}

/// The broker's fetchers, by `(source broker, fetcher index)`.
pub struct ReplicaFetcherManager {
    config: ReplicationConfig,
    context: FetcherContext,
    fetchers: Mutex<HashMap<(i32, usize), FetcherHandle>>,
    /// Bytes per second this broker may fetch for throttled partitions
    /// (`follower.replication.throttled.rate`).
    pub follower_throttle: Arc<Throttle>,
}

fn fetcher_index(tp: &TopicPartition, n: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tp.hash(&mut h);
    (h.finish() % n.max(1) as u64) as usize
}

impl ReplicaFetcherManager {
    /// The fetchers of a broker: they append to `replicas` and fetch as `node_id` with the
    /// registration epoch `broker_epoch` gives (KIP-903), connecting as `security` says.
    pub fn new(
        config: ReplicationConfig,
        replicas: Weak<ReplicaManager>,
        node_id: i32,
        broker_epoch: Arc<dyn Fn() -> i64 + Send + Sync>,
        metrics: Arc<BrokerMetrics>,
        security: crate::client::ClientSecurity,
    ) -> Self {
        let follower_throttle = Arc::new(Throttle::default());
        ReplicaFetcherManager {
            config,
            context: FetcherContext {
                replicas,
                node_id,
                broker_epoch,
                metrics,
                follower_throttle: follower_throttle.clone(),
                security,
            },
            fetchers: Mutex::new(HashMap::new()),
            follower_throttle,
        }
    }

    /// Makes the fetchers follow exactly `targets`: new partitions start fetching, partitions
    /// with a new leader or epoch move, the rest stop. Fetchers left without partitions end.
    pub fn sync(&self, targets: &[FollowTarget]) {
        let ctx = &self.context;
        let mut fetchers = self.fetchers.lock();
        let mut wanted: HashMap<(i32, usize), Vec<&FollowTarget>> = HashMap::new();
        for t in targets {
            let key = (t.leader, fetcher_index(&t.tp, self.config.num_fetchers));
            wanted.entry(key).or_default().push(t);
        }
        fetchers.retain(|key, h| {
            let keep = wanted.contains_key(key);
            if !keep {
                let mut parts = h.shared.partitions.lock();
                for (tp, a) in parts.iter() {
                    clear_stall(ctx, tp, a);
                }
                parts.clear();
            }
            keep
        });
        for (key, ts) in wanted {
            let h = fetchers.entry(key).or_insert_with(|| {
                let shared = Arc::new(FetcherShared::default());
                *shared.address.lock() = ts[0].leader_address.clone();
                let task = tokio::spawn(fetcher::run(
                    ctx.clone(),
                    key.0,
                    key.1,
                    shared.clone(),
                    self.config.clone(),
                ));
                FetcherHandle { shared, task }
            });
            *h.shared.address.lock() = ts[0].leader_address.clone();
            let mut parts = h.shared.partitions.lock();
            parts.retain(|tp, a| {
                let keep = ts.iter().any(|t| &t.tp == tp);
                if !keep {
                    clear_stall(ctx, tp, a);
                }
                keep
            });
            let mut added = false;
            for t in ts {
                let changed = parts
                    .get(&t.tp)
                    .is_none_or(|a| a.leader_epoch != t.leader_epoch);
                if changed {
                    if let Some(a) = parts.get(&t.tp) {
                        clear_stall(ctx, &t.tp, a);
                    }
                    added = true;
                    parts.insert(
                        t.tp.clone(),
                        Assigned {
                            topic_id: t.topic_id,
                            leader_epoch: t.leader_epoch,
                            delayed_until: None,
                            behind_retries: 0,
                            stall: stall::StallWatch::default(),
                        },
                    );
                }
            }
            drop(parts);
            if added {
                h.shared.generation.fetch_add(1, Ordering::AcqRel);
                h.shared.wake.notify_one();
            }
        }
    }

    /// How many partitions are being followed, and from how many fetchers.
    pub fn counts(&self) -> (usize, usize) {
        let f = self.fetchers.lock();
        let parts = f.values().map(|h| h.shared.partitions.lock().len()).sum();
        (parts, f.len())
    }

    /// Stops every fetcher (shutdown).
    pub fn shutdown(&self) {
        self.fetchers.lock().clear();
    }
}
