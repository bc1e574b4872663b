//! Where a keyless record goes: Java's BuiltInPartitioner (KIP-794), one per topic. It stays on a
//! partition until `batch.size` bytes went there, then picks the next one, preferring short queues.
//!
//! The queue lengths come from the accumulator's `ready()`; a partition whose queue is `q` long is
//! picked with weight `max + 1 − q`, so a slow broker (long queues) gets fewer new records, yet no
//! partition starves. The old sticky partitioner (KIP-480) is here too, for the benchmark only.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::cluster::ClusterView;
use crate::protocol::murmur2;

/// A source of non-negative random ints (Java's `Utils.toPositive(random.nextInt())`), injectable
/// so that tests can replay Java's own vectors.
pub trait RandomSource: Send + Sync {
    fn next_positive(&self) -> i32;
}

/// The default source: the thread's RNG.
pub struct ThreadRandom;

impl RandomSource for ThreadRandom {
    fn next_positive(&self) -> i32 {
        murmur2::to_positive(rand::random::<i32>())
    }
}

/// A counter 0, 1, 2, … — the mock Java's partitioner tests use.
#[derive(Default)]
pub struct SequentialRandom(AtomicI32);

impl SequentialRandom {
    /// How many numbers were drawn so far.
    pub fn drawn(&self) -> i32 {
        self.0.load(Ordering::SeqCst)
    }
}

impl RandomSource for SequentialRandom {
    fn next_positive(&self) -> i32 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// The partition currently stuck to and the bytes produced to it. Compared by identity: a new
/// object means a switch happened.
#[derive(Debug)]
pub struct StickyPartitionInfo {
    partition: i32,
    produced_bytes: AtomicI32,
}

impl StickyPartitionInfo {
    fn new(partition: i32) -> Arc<StickyPartitionInfo> {
        Arc::new(StickyPartitionInfo {
            partition,
            produced_bytes: AtomicI32::new(0),
        })
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }
}

/// The cumulative frequency table built from the queue sizes (Java's PartitionLoadStats).
#[derive(Clone, Debug, PartialEq, Eq)]
struct PartitionLoadStats {
    cumulative: Vec<i32>,
    partition_ids: Vec<i32>,
}

/// Java's BuiltInPartitioner for one topic.
pub struct BuiltInPartitioner {
    topic: String,
    sticky_batch_size: i32,
    random: Arc<dyn RandomSource>,
    load_stats: Mutex<Option<Arc<PartitionLoadStats>>>,
    sticky: Mutex<Option<Arc<StickyPartitionInfo>>>,
}

/// `batch.size` below 1 (Java throws IllegalArgumentException).
#[derive(Debug, thiserror::Error)]
#[error("stickyBatchSize must be >= 1 but got {0}")]
pub struct InvalidStickyBatchSize(pub i32);

impl BuiltInPartitioner {
    pub fn new(
        topic: &str,
        sticky_batch_size: i32,
        random: Arc<dyn RandomSource>,
    ) -> Result<BuiltInPartitioner, InvalidStickyBatchSize> {
        if sticky_batch_size < 1 {
            return Err(InvalidStickyBatchSize(sticky_batch_size));
        }
        Ok(BuiltInPartitioner {
            topic: topic.to_string(),
            sticky_batch_size,
            random,
            load_stats: Mutex::new(None),
            sticky: Mutex::new(None),
        })
    }

    /// Java's `partitionForKey`: murmur2 of the serialized key over all partitions.
    pub fn partition_for_key(key: &[u8], num_partitions: usize) -> i32 {
        murmur2::partition_for_key(key, num_partitions as i32)
    }

    /// The next partition: uniform over the available partitions without load stats, otherwise
    /// weighted by the cumulative frequency table.
    fn next_partition(&self, cluster: &ClusterView) -> i32 {
        let random = self.random.next_positive();
        let stats = self.load_stats.lock().clone();
        let partition = match stats {
            None => {
                let available = cluster.available_partitions_for_topic(&self.topic);
                if !available.is_empty() {
                    available[random as usize % available.len()]
                } else {
                    let all = cluster.partitions_for_topic(&self.topic).len().max(1);
                    (random as usize % all) as i32
                }
            }
            Some(stats) => {
                let total = *stats.cumulative.last().unwrap_or(&1);
                let weighted = random % total.max(1);
                // The first entry strictly greater than `weighted`.
                let index = stats.cumulative.partition_point(|&c| c <= weighted);
                stats.partition_ids[index.min(stats.partition_ids.len() - 1)]
            }
        };
        tracing::trace!(topic = %self.topic, partition, "switching partition");
        partition
    }

    /// The partition to lock, creating the sticky choice on first use (step 1 of an append).
    pub fn peek_current_partition_info(&self, cluster: &ClusterView) -> Arc<StickyPartitionInfo> {
        if let Some(info) = self.sticky.lock().as_ref() {
            return info.clone();
        }
        let fresh = StickyPartitionInfo::new(self.next_partition(cluster));
        let mut current = self.sticky.lock();
        // Someone may have raced us; theirs wins, as Java's compareAndSet does.
        current.get_or_insert(fresh).clone()
    }

    /// Whether a concurrent append switched partitions since `info` was peeked (checked under the
    /// partition's queue lock).
    pub fn is_partition_changed(&self, info: Option<&Arc<StickyPartitionInfo>>) -> bool {
        match info {
            None => false,
            Some(info) => !self
                .sticky
                .lock()
                .as_ref()
                .is_some_and(|cur| Arc::ptr_eq(cur, info)),
        }
    }

    /// Counts `appended_bytes` against the sticky partition and switches once `batch.size` bytes
    /// went there and `enable_switch` (the queue's last batch is full), or at twice `batch.size`
    /// regardless, so that a high linger.ms does not cut batches into fractions.
    pub fn update_partition_info(
        &self,
        info: Option<&Arc<StickyPartitionInfo>>,
        appended_bytes: i32,
        cluster: &ClusterView,
        enable_switch: bool,
    ) {
        let Some(info) = info else { return };
        let produced = info
            .produced_bytes
            .fetch_add(appended_bytes, Ordering::SeqCst)
            + appended_bytes;
        let limit = self.sticky_batch_size;
        if (produced >= limit && enable_switch) || produced >= limit.saturating_mul(2) {
            let next = StickyPartitionInfo::new(self.next_partition(cluster));
            *self.sticky.lock() = Some(next);
        }
    }

    /// Rebuilds the frequency table from the queue sizes of the partitions that have a leader
    /// (`queue_sizes[..length]`, in place). `length` is below `queue_sizes.len()` when partitions
    /// were left out for their leader's latency; `None` turns adaptive partitioning off.
    pub fn update_partition_load_stats(
        &self,
        queue_sizes: Option<(&mut [i32], &[i32])>,
        length: usize,
    ) {
        *self.load_stats.lock() = queue_sizes
            .and_then(|(sizes, ids)| load_stats(sizes, ids, length))
            .map(Arc::new);
    }

    /// The end of the random range while load stats exist (Java's test-only `loadStatsRangeEnd`).
    pub fn load_stats_range_end(&self) -> Option<i32> {
        self.load_stats
            .lock()
            .as_ref()
            .and_then(|s| s.cumulative.last().copied())
    }
}

/// The cumulative frequency table of `max + 1 − size`, or None when adaptive partitioning has
/// nothing to decide: fewer than 2 partitions, none available, or every queue the same length
/// with none left out.
fn load_stats(sizes: &mut [i32], ids: &[i32], length: usize) -> Option<PartitionLoadStats> {
    if length < 1 || sizes.len() < 2 || length > sizes.len() || ids.len() != sizes.len() {
        return None;
    }
    let live = &mut sizes[..length];
    let max = *live.iter().max().unwrap_or(&0);
    let all_equal = live.iter().all(|&s| s == live[0]);
    if all_equal && length == ids.len() {
        return None;
    }
    let max_plus_1 = max + 1;
    let mut running = 0;
    for s in live.iter_mut() {
        running += max_plus_1 - *s;
        *s = running;
    }
    Some(PartitionLoadStats {
        cumulative: live.to_vec(),
        partition_ids: ids[..length].to_vec(),
    })
}

/// The KIP-480 sticky partitioner (Java's deprecated DefaultPartitioner / StickyPartitionCache):
/// a keyless record stays on its partition until a new batch is needed, then moves to a random
/// other available partition. Kept so that the benchmark can show the problem KIP-794 fixed.
pub struct StickyPartitionCache {
    random: Arc<dyn RandomSource>,
    current: Mutex<std::collections::HashMap<String, i32>>,
}

impl StickyPartitionCache {
    pub fn new(random: Arc<dyn RandomSource>) -> StickyPartitionCache {
        StickyPartitionCache {
            random,
            current: Mutex::new(Default::default()),
        }
    }

    /// The partition a keyless record of `topic` goes to now.
    pub fn partition(&self, topic: &str, cluster: &ClusterView) -> i32 {
        if let Some(p) = self.current.lock().get(topic) {
            return *p;
        }
        self.next_partition(topic, cluster, -1)
    }

    /// Called when a record would open a new batch on `prev`: moves to another partition.
    pub fn next_partition(&self, topic: &str, cluster: &ClusterView, prev: i32) -> i32 {
        let mut current = self.current.lock();
        let old = current.get(topic).copied();
        if let Some(moved) = old.filter(|o| *o != prev) {
            // Another append already moved on.
            return moved;
        }
        let available = cluster.available_partitions_for_topic(topic);
        let next = if available.is_empty() {
            let all = cluster.partitions_for_topic(topic).len().max(1);
            (self.random.next_positive() as usize % all) as i32
        } else if available.len() == 1 {
            available[0]
        } else {
            loop {
                let p = available[self.random.next_positive() as usize % available.len()];
                if Some(p) != old {
                    break p;
                }
            }
        };
        current.insert(topic.to_string(), next);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::producer::cluster::view;
    use proptest::prelude::*;

    fn seq() -> Arc<SequentialRandom> {
        Arc::new(SequentialRandom::default())
    }

    /// One "record" of `bytes` through the partitioner alone, as BuiltInPartitionerTest does.
    fn pick(p: &BuiltInPartitioner, c: &ClusterView, bytes: i32) -> i32 {
        let info = p.peek_current_partition_info(c);
        p.update_partition_info(Some(&info), bytes, c, true);
        info.partition()
    }

    #[test]
    fn the_partition_is_kept_until_the_sticky_batch_size_is_reached() {
        let c = view("topicA", &[Some(0), Some(1), Some(2)]);
        let p = BuiltInPartitioner::new("topicA", 3, seq()).unwrap();
        let first = pick(&p, &c, 1);
        assert_eq!(pick(&p, &c, 1), first);
        assert_eq!(pick(&p, &c, 1), first);
        assert_ne!(p.peek_current_partition_info(&c).partition(), first);
        // Switching works with one partition too.
        let b = view("topicB", &[Some(0)]);
        let one = BuiltInPartitioner::new("topicB", 1, seq()).unwrap();
        for _ in 0..10 {
            assert_eq!(pick(&one, &b, 1), 0);
        }
    }

    #[test]
    fn unavailable_partitions_are_never_picked_unless_none_is_available() {
        let a = view("topicA", &[Some(0), None, Some(2)]);
        let p = BuiltInPartitioner::new("topicA", 1, Arc::new(ThreadRandom)).unwrap();
        let first = pick(&p, &a, 1);
        assert_ne!(first, 1);
        let mut other = false;
        for _ in 0..100 {
            let next = pick(&p, &a, 1);
            assert_ne!(next, 1);
            other |= next != first;
        }
        assert!(other, "expected a partition other than {first}");
        let b = view("topicB", &[None, Some(0)]);
        let p = BuiltInPartitioner::new("topicB", 1, Arc::new(ThreadRandom)).unwrap();
        for _ in 0..101 {
            assert_eq!(pick(&p, &b, 1), 1);
        }
        let none = view("topicC", &[None]);
        let p = BuiltInPartitioner::new("topicC", 1, Arc::new(ThreadRandom)).unwrap();
        assert_eq!(pick(&p, &none, 1), 0);
        assert_eq!(p.peek_current_partition_info(&none).partition(), 0);
    }

    #[test]
    fn adaptive_picks_follow_the_inverse_queue_sizes_exactly() {
        // BuiltInPartitionerTest.adaptivePartitionsTest: queues {5,0,3,0,1}, sequential random,
        // two cycles of the table's range (2 × 21 = 42 picks) give {2,12,6,12,10}.
        let c = view("topicA", &[Some(0), Some(1), Some(2), Some(11), Some(0)]);
        let p = BuiltInPartitioner::new("topicA", 1, seq()).unwrap();
        let mut sizes = [5, 0, 3, 0, 1];
        p.update_partition_load_stats(Some((&mut sizes, &[0, 1, 2, 3, 4])), 5);
        let picks = p.load_stats_range_end().unwrap() * 2;
        assert_eq!(picks, 42);
        let mut freq = [0; 5];
        for _ in 0..picks {
            freq[pick(&p, &c, 1) as usize] += 1;
        }
        assert_eq!(freq, [2, 12, 6, 12, 10]);
    }

    #[test]
    fn a_sticky_batch_size_below_one_is_refused() {
        assert!(BuiltInPartitioner::new("t", 0, seq()).is_err());
        assert!(BuiltInPartitioner::new("t", 1, seq()).is_ok());
    }

    #[test]
    fn equal_queues_or_a_single_partition_mean_uniform() {
        assert_eq!(load_stats(&mut [2, 2, 2], &[0, 1, 2], 3), None);
        assert_eq!(load_stats(&mut [7], &[0], 1), None);
        assert_eq!(load_stats(&mut [1, 2], &[0, 1], 0), None);
        // Equal, but one left out for latency: still adaptive, over the rest.
        let s = load_stats(&mut [2, 2, 2], &[0, 1, 2], 2).unwrap();
        assert_eq!(s.cumulative, vec![1, 2]);
        assert_eq!(s.partition_ids, vec![0, 1]);
    }

    #[test]
    fn the_table_of_kafkas_comment_example() {
        // Queues 0 3 1 → weights 4 1 3 → table 4 5 8.
        let s = load_stats(&mut [0, 3, 1], &[0, 1, 2], 3).unwrap();
        assert_eq!(s.cumulative, vec![4, 5, 8]);
    }

    #[test]
    fn kip480_moves_only_when_a_new_batch_is_needed_and_never_to_the_same_partition() {
        let c = view("t", &[Some(0), Some(1), Some(2)]);
        let s = StickyPartitionCache::new(Arc::new(ThreadRandom));
        let first = s.partition("t", &c);
        assert_eq!(s.partition("t", &c), first);
        let next = s.next_partition("t", &c, first);
        assert_ne!(next, first);
        assert_eq!(s.partition("t", &c), next);
        // A late caller naming the old partition does not move it again.
        assert_eq!(s.next_partition("t", &c, first), next);
    }

    proptest! {
        /// Every available partition has a positive weight, and a longer queue never weighs more.
        #[test]
        fn no_partition_starves_and_weights_follow_queue_lengths(
            sizes in proptest::collection::vec(0i32..1000, 2..40),
        ) {
            let n = sizes.len();
            let ids: Vec<i32> = (0..n as i32).collect();
            let mut table = sizes.clone();
            match load_stats(&mut table, &ids, n) {
                None => prop_assert!(sizes.iter().all(|&s| s == sizes[0])),
                Some(stats) => {
                    let weights: Vec<i32> = stats.cumulative.iter().enumerate()
                        .map(|(i, &c)| if i == 0 { c } else { c - stats.cumulative[i - 1] })
                        .collect();
                    for i in 0..n {
                        prop_assert!(weights[i] >= 1, "partition {} starves", i);
                        for j in 0..n {
                            if sizes[i] > sizes[j] {
                                prop_assert!(weights[i] < weights[j]);
                            }
                        }
                    }
                    let max = *sizes.iter().max().unwrap();
                    prop_assert_eq!(weights[0], max + 1 - sizes[0]);
                }
            }
        }

        /// Over one full cycle of the random range each partition is picked exactly its weight.
        #[test]
        fn one_cycle_of_the_range_picks_each_partition_its_weight(
            sizes in proptest::collection::vec(0i32..20, 2..8),
        ) {
            prop_assume!(!sizes.iter().all(|&s| s == sizes[0]));
            let n = sizes.len();
            let leaders: Vec<Option<i32>> = (0..n).map(|i| Some(i as i32)).collect();
            let c = view("t", &leaders);
            let p = BuiltInPartitioner::new("t", 1, seq()).unwrap();
            let ids: Vec<i32> = (0..n as i32).collect();
            let mut table = sizes.clone();
            p.update_partition_load_stats(Some((&mut table, &ids)), n);
            let range = p.load_stats_range_end().unwrap();
            let max = *sizes.iter().max().unwrap();
            let mut freq = vec![0; n];
            for _ in 0..range {
                freq[pick(&p, &c, 1) as usize] += 1;
            }
            for i in 0..n {
                prop_assert_eq!(freq[i], max + 1 - sizes[i]);
            }
        }
    }
}
