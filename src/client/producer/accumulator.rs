//! Records waiting to be sent: a queue of batches per partition, the choice of partition at append
//! time, and which brokers have data ready (Java's RecordAccumulator).
//!
//! `append` picks the partition (the built-in partitioner for keyless records), fills the queue's
//! last batch or opens a new one; `ready` finds the brokers with a full or lingered batch and, on
//! the way, hands the queue lengths to the partitioner; `drain` takes batches for those brokers;
//! `reenqueue` and `split_and_reenqueue` put batches back at the head of their queue.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use parking_lot::Mutex;

use super::batch::{
    batch_size_upper_bound, update_compression_ratio, ProducerBatch, ProducerRecord,
};
use super::buffer_pool::{AllocateError, BufferPool};
use super::cluster::ClusterView;
use super::partitioner::{BuiltInPartitioner, RandomSource, StickyPartitionInfo};
use super::Completion;

/// The accumulator's settings, in Kafka's units.
#[derive(Clone, Debug)]
pub struct AccumulatorConfig {
    /// `batch.size`, also the partitioner's sticky limit.
    pub batch_size: usize,
    pub compression: Compression,
    pub linger_ms: i64,
    /// `retry.backoff.ms`: the first retry's wait, doubling per attempt up to
    /// `retry.backoff.max.ms`, with ±20 % jitter (Java 3.7+).
    pub retry_backoff_ms: i64,
    pub retry_backoff_max_ms: i64,
    /// `buffer.memory`.
    pub buffer_memory: u64,
    /// `partitioner.adaptive.partitioning.enable`.
    pub adaptive_partitioning: bool,
    /// `partitioner.availability.timeout.ms` (0: off).
    pub availability_timeout_ms: i64,
}

impl Default for AccumulatorConfig {
    fn default() -> AccumulatorConfig {
        AccumulatorConfig {
            batch_size: 16384,
            compression: Compression::None,
            linger_ms: 5,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1000,
            buffer_memory: 32 * 1024 * 1024,
            adaptive_partitioning: true,
            availability_timeout_ms: 0,
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAppendResult {
    /// Where the record went.
    pub partition: i32,
    /// The partition's queue has a batch ready to send.
    pub batch_is_full: bool,
    pub new_batch_created: bool,
    pub appended_bytes: usize,
}

/// Why an append failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Memory(#[from] AllocateError),
    #[error("producer closed while send in progress")]
    Closed,
    #[error("topic {0} has no partitions")]
    NoPartitions(String),
}

/// The brokers with data to send, and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCheckResult {
    pub ready_nodes: BTreeSet<i32>,
    pub next_ready_check_delay_ms: i64,
    pub unknown_leader_topics: BTreeSet<String>,
}

type Deque = Arc<Mutex<VecDeque<ProducerBatch>>>;

/// What `ready` read of a partition's first batch under the queue's lock.
struct BatchState {
    waited_ms: i64,
    backing_off: bool,
    attempts: u32,
    full: bool,
}

/// Where a drain stands when it comes to a partition.
#[derive(Clone, Copy)]
struct DrainAt {
    /// Bytes already in the request.
    size: usize,
    max_size: usize,
    first_of_request: bool,
    now_ms: i64,
}

/// One partition's turn in a drain.
enum DrainStep {
    Take(ProducerBatch),
    /// Nothing to send here now (empty, muted, backing off).
    Skip,
    /// The request is full.
    Full,
}

/// One topic's queues, its partitioner and its compression estimate.
struct TopicInfo {
    batches: Mutex<BTreeMap<i32, Deque>>,
    partitioner: BuiltInPartitioner,
    compression_ratio: Mutex<f32>,
}

impl TopicInfo {
    fn deque(&self, partition: i32) -> Deque {
        self.batches.lock().entry(partition).or_default().clone()
    }

    fn deques(&self) -> Vec<(i32, Deque)> {
        self.batches
            .lock()
            .iter()
            .map(|(p, d)| (*p, d.clone()))
            .collect()
    }
}

/// When a broker was last ready and last drained (for the availability timeout).
#[derive(Debug, Clone, Copy)]
struct NodeLatencyStats {
    ready_time_ms: i64,
    drain_time_ms: i64,
}

pub struct RecordAccumulator {
    config: AccumulatorConfig,
    random: Arc<dyn RandomSource>,
    topics: Mutex<HashMap<String, Arc<TopicInfo>>>,
    free: BufferPool,
    node_stats: Mutex<HashMap<i32, NodeLatencyStats>>,
    drain_index: Mutex<HashMap<i32, usize>>,
    muted: Mutex<HashSet<(String, i32)>>,
    flushes_in_progress: AtomicUsize,
    closed: AtomicBool,
    /// Batches opened and not yet completed (queued or in flight), for `flush`.
    incomplete: AtomicUsize,
}

/// Memory taken for a new batch, given back on drop unless a batch took it over.
struct Allocation<'a> {
    pool: &'a BufferPool,
    size: u64,
}

impl Allocation<'_> {
    fn into_batch(mut self) -> usize {
        std::mem::take(&mut self.size) as usize
    }
}

impl Drop for Allocation<'_> {
    fn drop(&mut self) {
        if self.size > 0 {
            self.pool.deallocate(self.size);
        }
    }
}

/// The last batch of the queue is full (or there is none): switching partitions now does not
/// leave a fractional batch behind.
fn all_batches_full(q: &VecDeque<ProducerBatch>) -> bool {
    q.back().is_none_or(ProducerBatch::is_full)
}

impl RecordAccumulator {
    pub fn new(config: AccumulatorConfig, random: Arc<dyn RandomSource>) -> RecordAccumulator {
        RecordAccumulator {
            free: BufferPool::new(config.buffer_memory),
            config,
            random,
            topics: Mutex::new(HashMap::new()),
            node_stats: Mutex::new(HashMap::new()),
            drain_index: Mutex::new(HashMap::new()),
            muted: Mutex::new(HashSet::new()),
            flushes_in_progress: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            incomplete: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> &AccumulatorConfig {
        &self.config
    }

    fn topic_info(&self, topic: &str) -> Arc<TopicInfo> {
        let mut topics = self.topics.lock();
        if let Some(t) = topics.get(topic) {
            return t.clone();
        }
        let sticky = (self.config.batch_size.min(i32::MAX as usize) as i32).max(1);
        let partitioner = match BuiltInPartitioner::new(topic, sticky, self.random.clone()) {
            Ok(p) => p,
            Err(_) => unreachable!("the sticky batch size is clamped to at least 1"),
        };
        let info = Arc::new(TopicInfo {
            batches: Mutex::new(BTreeMap::new()),
            partitioner,
            compression_ratio: Mutex::new(1.0),
        });
        topics.insert(topic.to_string(), info.clone());
        info
    }

    /// Appends a record to `partition`, or with `None` to the partition the built-in partitioner
    /// sticks to. Waits up to `max_block` for memory when a new batch is needed.
    #[allow(clippy::too_many_arguments)]
    pub async fn append(
        &self,
        topic: &str,
        partition: Option<i32>,
        record: ProducerRecord,
        done: Completion,
        max_block: Duration,
        mut now_ms: i64,
        cluster: &ClusterView,
    ) -> Result<RecordAppendResult, AppendError> {
        let info = self.topic_info(topic);
        if partition.is_none() && cluster.partitions_for_topic(topic).is_empty() {
            return Err(AppendError::NoPartitions(topic.to_string()));
        }
        let (mut record, mut done) = (record, done);
        let mut buffer: Option<Allocation<'_>> = None;
        // Loop to retry when a concurrent append switched the sticky partition under us.
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(AppendError::Closed);
            }
            // Keyless records follow the sticky partition, peeked before the queue is locked.
            let sticky = partition
                .is_none()
                .then(|| info.partitioner.peek_current_partition_info(cluster));
            let effective = match &sticky {
                Some(s) => s.partition(),
                None => partition.unwrap_or_default(),
            };
            let dq = info.deque(effective);
            {
                let mut q = dq.lock();
                if self.partition_changed(&info, sticky.as_ref(), &q, cluster) {
                    continue;
                }
                match try_append(&mut q, record, done) {
                    Ok((appended, full)) => {
                        let done = (effective, appended, full, false);
                        return Ok(appended_to(&info, sticky.as_ref(), &q, cluster, done));
                    }
                    Err(back) => (record, done) = back,
                }
            }
            if buffer.is_none() {
                let size = self.config.batch_size.max(batch_size_upper_bound(&record)) as u64;
                let waiting = std::time::Instant::now();
                let size = self.free.allocate(size, max_block).await?;
                buffer = Some(Allocation {
                    pool: &self.free,
                    size,
                });
                // The wait for memory counts: the new batch is as old as now, not as the call.
                now_ms += waiting.elapsed().as_millis() as i64;
            }
            let mut q = dq.lock();
            if self.closed.load(Ordering::SeqCst) {
                return Err(AppendError::Closed);
            }
            if self.partition_changed(&info, sticky.as_ref(), &q, cluster) {
                continue;
            }
            // Someone else may have opened a batch while we waited for memory.
            let (appended, full, created) = match try_append(&mut q, record, done) {
                Ok((appended, full)) => (appended, full, false),
                Err((r, d)) => {
                    let Some(memory) = buffer.take() else {
                        unreachable!("memory is allocated before a new batch is opened")
                    };
                    let ratio = *info.compression_ratio.lock();
                    let mut batch = ProducerBatch::new(
                        topic,
                        effective,
                        memory.into_batch(),
                        self.config.compression,
                        ratio,
                        now_ms,
                    );
                    // A new batch counts its header too, as Java's appendNewBatch does.
                    let appended = match batch.try_append(r, d) {
                        Ok(_) => batch.estimated_size_in_bytes(),
                        Err(_) => unreachable!("the first record always fits an empty batch"),
                    };
                    let full = batch.is_full();
                    self.incomplete.fetch_add(1, Ordering::SeqCst);
                    q.push_back(batch);
                    (appended, q.len() > 1 || full, true)
                }
            };
            let done = (effective, appended, full, created);
            return Ok(appended_to(&info, sticky.as_ref(), &q, cluster, done));
        }
    }

    /// Appends a record to `partition` only if the queue's open batch has room for it; otherwise
    /// hands it back untouched. The KIP-480 sticky partitioner (the benchmark's `kip480` mode)
    /// moves to another partition exactly then, before a new batch is opened.
    pub fn append_if_room(
        &self,
        topic: &str,
        partition: i32,
        record: ProducerRecord,
        done: Completion,
    ) -> Result<RecordAppendResult, (ProducerRecord, Completion)> {
        if self.closed.load(Ordering::SeqCst) {
            return Err((record, done));
        }
        let dq = self.topic_info(topic).deque(partition);
        let mut q = dq.lock();
        let (appended, full) = try_append(&mut q, record, done)?;
        Ok(RecordAppendResult {
            partition,
            batch_is_full: full,
            new_batch_created: false,
            appended_bytes: appended,
        })
    }

    /// Under the queue's lock: another append switched partitions, or this queue's batches are all
    /// full now and a switch that was held back for a fractional batch happens.
    fn partition_changed(
        &self,
        info: &TopicInfo,
        sticky: Option<&Arc<StickyPartitionInfo>>,
        q: &VecDeque<ProducerBatch>,
        cluster: &ClusterView,
    ) -> bool {
        if info.partitioner.is_partition_changed(sticky) {
            return true;
        }
        if all_batches_full(q) {
            info.partitioner
                .update_partition_info(sticky, 0, cluster, true);
            if info.partitioner.is_partition_changed(sticky) {
                return true;
            }
        }
        false
    }

    /// The brokers that lead a partition with a sendable batch: full, lingered `linger.ms`, memory
    /// exhausted, flushing or closing. Also refreshes each topic's partitioner with the queue
    /// lengths of the partitions that have a leader.
    pub fn ready(&self, cluster: &ClusterView, now_ms: i64) -> ReadyCheckResult {
        let mut out = ReadyCheckResult {
            ready_nodes: BTreeSet::new(),
            next_ready_check_delay_ms: i64::MAX,
            unknown_leader_topics: BTreeSet::new(),
        };
        let topics: Vec<(String, Arc<TopicInfo>)> = self
            .topics
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (topic, info) in topics {
            self.partition_ready(cluster, now_ms, &topic, &info, &mut out);
        }
        out
    }

    fn partition_ready(
        &self,
        cluster: &ClusterView,
        now_ms: i64,
        topic: &str,
        info: &TopicInfo,
        out: &mut ReadyCheckResult,
    ) {
        let deques = info.deques();
        // Adaptive only once every partition has a queue: a partition without one would never be
        // switched to.
        let adaptive = self.config.adaptive_partitioning
            && deques.len() >= cluster.partitions_for_topic(topic).len();
        let mut queue_sizes = vec![0i32; if adaptive { deques.len() } else { 0 }];
        let mut partition_ids = vec![0i32; queue_sizes.len()];
        let mut index: isize = -1;
        let exhausted = self.free.queued() > 0;
        for (partition, dq) in deques {
            let leader = cluster.leader_for(topic, partition);
            if leader.is_some() && adaptive {
                index += 1;
                partition_ids[index as usize] = partition;
            }
            let epoch = cluster.leader_epoch_for(topic, partition);
            let (waited, backing_off, attempts, size, full) = {
                let mut q = dq.lock();
                let len = q.len();
                let Some(first) = q.front_mut() else { continue };
                let waited = first.waited_time_ms(now_ms);
                first.maybe_update_leader_epoch(epoch);
                let backing_off = self.should_backoff(first, waited);
                let full = len > 1 || first.is_full();
                (waited, backing_off, first.attempts, len, full)
            };
            let Some(leader) = leader else {
                out.unknown_leader_topics.insert(topic.to_string());
                continue;
            };
            if adaptive {
                queue_sizes[index as usize] = size as i32;
            }
            if self.config.availability_timeout_ms > 0 {
                if let Some(s) = self.node_stats.lock().get(&leader) {
                    if s.ready_time_ms - s.drain_time_ms > self.config.availability_timeout_ms {
                        index -= 1;
                    }
                }
            }
            let state = BatchState {
                waited_ms: waited,
                backing_off,
                attempts,
                full,
            };
            self.batch_ready(exhausted, topic, partition, leader, state, out);
        }
        let length = (index + 1).max(0) as usize;
        let stats = adaptive.then_some((&mut queue_sizes[..], &partition_ids[..]));
        info.partitioner.update_partition_load_stats(stats, length);
    }

    fn batch_ready(
        &self,
        exhausted: bool,
        topic: &str,
        partition: i32,
        leader: i32,
        state: BatchState,
        out: &mut ReadyCheckResult,
    ) {
        let BatchState {
            waited_ms,
            backing_off,
            attempts,
            full,
        } = state;
        if out.ready_nodes.contains(&leader) || self.is_muted(topic, partition) {
            return;
        }
        let wait = if backing_off {
            self.retry_backoff(attempts)
        } else {
            self.config.linger_ms
        };
        let expired = waited_ms >= wait;
        let sendable = full
            || expired
            || exhausted
            || self.closed.load(Ordering::SeqCst)
            || self.flushes_in_progress.load(Ordering::SeqCst) > 0;
        if sendable && !backing_off {
            out.ready_nodes.insert(leader);
        } else {
            let left = (wait - waited_ms).max(0);
            out.next_ready_check_delay_ms = out.next_ready_check_delay_ms.min(left);
        }
    }

    /// A retried batch waits out its backoff, unless its partition's leader changed.
    fn should_backoff(&self, batch: &ProducerBatch, waited_ms: i64) -> bool {
        batch.attempts > 0
            && !batch.has_leader_changed_for_the_ongoing_retry()
            && waited_ms < self.retry_backoff(batch.attempts)
    }

    /// The wait before retry number `attempts` (Java's ExponentialBackoff with base 2 and 20 %
    /// jitter over `retry.backoff.ms`..`retry.backoff.max.ms`).
    fn retry_backoff(&self, attempts: u32) -> i64 {
        exponential_backoff(
            self.config.retry_backoff_ms,
            self.config.retry_backoff_max_ms,
            attempts.saturating_sub(1),
            rand::random::<f64>(),
        )
    }

    /// Takes the sendable batches of each ready broker, up to `max_size` bytes per broker,
    /// starting each broker's walk where the last one stopped so that no partition starves.
    pub fn drain(
        &self,
        cluster: &ClusterView,
        nodes: &BTreeSet<i32>,
        max_size: usize,
        now_ms: i64,
    ) -> BTreeMap<i32, Vec<ProducerBatch>> {
        self.drain_holding(cluster, nodes, max_size, now_ms, &|_| false)
    }

    /// `drain`, leaving in its queue any partition whose first batch `hold` says must wait (the
    /// idempotent producer's ordering rule).
    pub fn drain_holding(
        &self,
        cluster: &ClusterView,
        nodes: &BTreeSet<i32>,
        max_size: usize,
        now_ms: i64,
        hold: &dyn Fn(&ProducerBatch) -> bool,
    ) -> BTreeMap<i32, Vec<ProducerBatch>> {
        let mut out = BTreeMap::new();
        for &node in nodes {
            let batches = self.drain_batches_for_one_node(cluster, node, max_size, now_ms, hold);
            out.insert(node, batches);
        }
        out
    }

    fn drain_batches_for_one_node(
        &self,
        cluster: &ClusterView,
        node: i32,
        max_size: usize,
        now_ms: i64,
        hold: &dyn Fn(&ProducerBatch) -> bool,
    ) -> Vec<ProducerBatch> {
        let parts = cluster.partitions_for_node(node);
        let mut ready = Vec::new();
        if parts.is_empty() {
            return ready;
        }
        let mut size = 0usize;
        let start = self.drain_index.lock().get(&node).copied().unwrap_or(0) % parts.len();
        let mut i = start;
        loop {
            let (topic, partition) = &parts[i];
            self.drain_index.lock().insert(node, i);
            i = (i + 1) % parts.len();
            let first = ready.is_empty();
            let at = DrainAt {
                size,
                max_size,
                first_of_request: first,
                now_ms,
            };
            match self.drain_one(cluster, topic, *partition, at, hold) {
                DrainStep::Take(batch) => {
                    size += batch.estimated_size_in_bytes();
                    ready.push(batch);
                }
                DrainStep::Skip => {}
                DrainStep::Full => break,
            }
            if i == start {
                break;
            }
        }
        ready
    }

    /// The first batch of a partition if it may go now and fits the request.
    fn drain_one(
        &self,
        cluster: &ClusterView,
        topic: &str,
        partition: i32,
        at: DrainAt,
        hold: &dyn Fn(&ProducerBatch) -> bool,
    ) -> DrainStep {
        let DrainAt {
            size,
            max_size,
            first_of_request,
            now_ms,
        } = at;
        if self.is_muted(topic, partition) {
            return DrainStep::Skip;
        }
        let Some(info) = self.topics.lock().get(topic).cloned() else {
            return DrainStep::Skip;
        };
        let Some(dq) = info.batches.lock().get(&partition).cloned() else {
            return DrainStep::Skip;
        };
        let mut q = dq.lock();
        let Some(first) = q.front_mut() else {
            return DrainStep::Skip;
        };
        first.maybe_update_leader_epoch(cluster.leader_epoch_for(topic, partition));
        if self.should_backoff(first, first.waited_time_ms(now_ms)) || hold(first) {
            return DrainStep::Skip;
        }
        // A single batch over the request size still goes, alone.
        if size + first.estimated_size_in_bytes() > max_size && !first_of_request {
            return DrainStep::Full;
        }
        match q.pop_front() {
            Some(mut batch) => {
                batch.close_for_record_appends();
                batch.drained(now_ms);
                DrainStep::Take(batch)
            }
            None => DrainStep::Skip,
        }
    }

    /// Records how a broker answered the sender's `ready` check: drained, or not ready (its
    /// connection full). A broker not drained for `partitioner.availability.timeout.ms` gets no
    /// new keyless records.
    pub fn update_node_latency_stats(&self, node: i32, now_ms: i64, can_drain: bool) {
        if self.config.availability_timeout_ms <= 0 {
            return;
        }
        let mut stats = self.node_stats.lock();
        let s = stats.entry(node).or_insert(NodeLatencyStats {
            ready_time_ms: now_ms,
            drain_time_ms: now_ms,
        });
        if can_drain {
            s.drain_time_ms = now_ms;
        }
        s.ready_time_ms = now_ms;
    }

    /// Puts a batch back at the head of its queue for a retry. A sequenced batch goes in
    /// sequence order among the retries already there (Java's `insertInSequenceOrder`), so that
    /// retries of one partition go out in the order they were first sent.
    pub fn reenqueue(&self, mut batch: ProducerBatch, now_ms: i64) {
        batch.reenqueued(now_ms);
        let dq = self.topic_info(&batch.topic).deque(batch.partition);
        insert_in_sequence_order(&mut dq.lock(), batch);
    }

    /// Java's `splitAndReenqueue`, for a batch the leader refused as MESSAGE_TOO_LARGE: the
    /// topic's compression estimate goes back to at least 1.0 (so the parts are not
    /// over-filled again), the batch is split into batches of at most `batch.size` bytes, and
    /// they go to the front of the partition's queue in order, as batches never tried (no
    /// retry backoff) that hold no buffer-pool memory. The refused batch's memory is freed.
    ///
    /// A batch that is itself a part and is refused again is split in halves (at least its
    /// largest record each), as Java does since KAFKA-8350: with `max.message.bytes` under
    /// `batch.size` the first split gives the same batch back, and each later one halves it
    /// until the parts fit.
    ///
    /// `track` sees the refused batch and its parts before they are queued, for the idempotent
    /// producer to hand the refused batch's sequences to the parts. Returns the parts' count.
    pub fn split_and_reenqueue(
        &self,
        mut big: ProducerBatch,
        track: &dyn Fn(&ProducerBatch, &[ProducerBatch]),
    ) -> usize {
        let info = self.topic_info(&big.topic);
        let ratio = big.compression_ratio().max(1.0);
        *info.compression_ratio.lock() = ratio;
        let target = if big.is_split_batch() {
            big.max_record_size().max(big.estimated_size_in_bytes() / 2)
        } else {
            self.config.batch_size
        };
        let parts = big.split(target, ratio);
        tracing::debug!(topic = %big.topic, partition = big.partition, parts = parts.len(), "split a batch refused as too large");
        track(&big, &parts);
        let count = parts.len();
        self.incomplete.fetch_add(count, Ordering::SeqCst);
        self.complete_batch(&big);
        let dq = info.deque(big.partition);
        let mut q = dq.lock();
        for part in parts.into_iter().rev() {
            if part.sequence.is_some() {
                insert_in_sequence_order(&mut q, part);
            } else {
                q.push_front(part);
            }
        }
        count
    }

    /// Folds the ratio a drained batch compressed at (from `ProducerBatch::encode`, called by the
    /// sender right after the drain, as Java closes a batch there) into its topic's estimate.
    pub fn record_compression_ratio(&self, topic: &str, observed: f32) {
        if self.config.compression == Compression::None {
            return;
        }
        if let Some(info) = self.topics.lock().get(topic).cloned() {
            let mut r = info.compression_ratio.lock();
            *r = update_compression_ratio(*r, observed);
        }
    }

    /// Frees the memory of a batch that is done (acknowledged, failed or expired).
    pub fn complete_batch(&self, batch: &ProducerBatch) {
        // A split batch's memory was never the pool's (Java's `deallocate`).
        if !batch.is_split_batch() {
            self.free.deallocate(batch.buffer_size() as u64);
        }
        self.incomplete.fetch_sub(1, Ordering::SeqCst);
    }

    /// Batches appended to and not yet completed, queued or in flight.
    pub fn incomplete_batches(&self) -> usize {
        self.incomplete.load(Ordering::SeqCst)
    }

    /// Batches that have waited longer than `delivery_timeout_ms` since creation, taken out of
    /// their queues (the caller fails them). A drained batch is the sender's to expire.
    pub fn expired_batches(&self, now_ms: i64, delivery_timeout_ms: i64) -> Vec<ProducerBatch> {
        let topics: Vec<Arc<TopicInfo>> = self.topics.lock().values().cloned().collect();
        let mut out = Vec::new();
        for info in topics {
            for (_, dq) in info.deques() {
                let mut q = dq.lock();
                while q
                    .front()
                    .is_some_and(|b| now_ms - b.created_ms >= delivery_timeout_ms)
                {
                    if let Some(mut b) = q.pop_front() {
                        b.close_for_record_appends();
                        out.push(b);
                    }
                }
            }
        }
        out
    }

    /// Every queued batch, taken out of its queue (the caller fails them).
    pub fn take_queued(&self) -> Vec<ProducerBatch> {
        self.expired_batches(i64::MAX, 0)
    }

    /// Queue length per partition, for metrics.
    pub fn queue_lengths(&self) -> Vec<(String, i32, usize)> {
        let topics: Vec<(String, Arc<TopicInfo>)> = self
            .topics
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = Vec::new();
        for (topic, info) in topics {
            for (p, dq) in info.deques() {
                out.push((topic.clone(), p, dq.lock().len()));
            }
        }
        out
    }

    /// Whether any queue holds a batch.
    pub fn has_undrained(&self) -> bool {
        let topics: Vec<Arc<TopicInfo>> = self.topics.lock().values().cloned().collect();
        topics
            .iter()
            .any(|t| t.deques().iter().any(|(_, dq)| !dq.lock().is_empty()))
    }

    /// With several requests in flight per partition order is kept by sequence numbers; with
    /// `max.in.flight.requests.per.connection=1` the sender mutes a partition while its batch flies.
    pub fn mute_partition(&self, topic: &str, partition: i32) {
        self.muted.lock().insert((topic.to_string(), partition));
    }

    pub fn unmute_partition(&self, topic: &str, partition: i32) {
        self.muted.lock().remove(&(topic.to_string(), partition));
    }

    fn is_muted(&self, topic: &str, partition: i32) -> bool {
        self.muted.lock().contains(&(topic.to_string(), partition))
    }

    /// Makes every batch sendable until `end_flush`.
    pub fn begin_flush(&self) {
        self.flushes_in_progress.fetch_add(1, Ordering::SeqCst);
    }

    pub fn end_flush(&self) {
        self.flushes_in_progress.fetch_sub(1, Ordering::SeqCst);
    }

    /// No more appends; what is queued becomes sendable, and appends waiting for memory fail.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.free.close();
    }

    /// The partitioner of `topic`, for tests and metrics.
    pub fn load_stats_range_end(&self, topic: &str) -> Option<i32> {
        self.topics
            .lock()
            .get(topic)
            .and_then(|t| t.partitioner.load_stats_range_end())
    }

    /// The number of batches queued for `topic`-`partition`.
    pub fn queue_len(&self, topic: &str, partition: i32) -> usize {
        self.topics
            .lock()
            .get(topic)
            .and_then(|t| t.batches.lock().get(&partition).map(|d| d.lock().len()))
            .unwrap_or(0)
    }
}

/// After a record went into `q` (under its lock): counts its bytes against the sticky partition,
/// switching only if the queue's batches are all full, and says what happened.
/// `done` is (partition, bytes appended, queue has a full batch, a new batch was opened).
fn appended_to(
    info: &TopicInfo,
    sticky: Option<&Arc<StickyPartitionInfo>>,
    q: &VecDeque<ProducerBatch>,
    cluster: &ClusterView,
    done: (i32, usize, bool, bool),
) -> RecordAppendResult {
    let (partition, appended, full, created) = done;
    let enable = all_batches_full(q);
    info.partitioner
        .update_partition_info(sticky, appended as i32, cluster, enable);
    RecordAppendResult {
        partition,
        batch_is_full: full,
        new_batch_created: created,
        appended_bytes: appended,
    }
}

/// Java's `ExponentialBackoff(initial, 2, max, 0.2).backoff(attempts)`, with `unit` a uniform
/// random number in [0, 1) for the jitter.
fn exponential_backoff(initial_ms: i64, max_ms: i64, attempts: u32, unit: f64) -> i64 {
    let initial = initial_ms.min(max_ms);
    if max_ms <= initial_ms {
        return initial.max(0);
    }
    let exp_max = (max_ms as f64 / initial.max(1) as f64).ln() / 2f64.ln();
    let term = initial as f64 * 2f64.powf((attempts as f64).min(exp_max));
    let jitter = 0.8 + 0.4 * unit;
    ((jitter * term) as i64).min(max_ms)
}

/// Puts a batch back near the head of its queue: before the first batch that has no sequence or
/// a later one (Java's `insertInSequenceOrder`; a batch without a sequence goes first).
fn insert_in_sequence_order(q: &mut VecDeque<ProducerBatch>, batch: ProducerBatch) {
    match batch.sequence {
        None => q.push_front(batch),
        Some(s) => {
            let at = q
                .iter()
                .position(|b| b.sequence.is_none_or(|t| t.base_sequence > s.base_sequence))
                .unwrap_or(q.len());
            q.insert(at, batch);
        }
    }
}

/// Appends to the queue's last batch if it has room; a batch the record does not fit is closed.
/// Returns the bytes appended and whether the queue now has a batch ready to send.
fn try_append(
    q: &mut VecDeque<ProducerBatch>,
    record: ProducerRecord,
    done: Completion,
) -> Result<(usize, bool), (ProducerRecord, Completion)> {
    let len = q.len();
    let Some(last) = q.back_mut() else {
        return Err((record, done));
    };
    match last.try_append(record, done) {
        Ok(appended) => Ok((appended, len > 1 || last.is_full())),
        Err(back) => {
            last.close_for_record_appends();
            Err(back)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::producer::batch::record_size;
    use crate::client::producer::cluster::PartitionLeader;
    use crate::client::producer::partitioner::SequentialRandom;
    use bytes::Bytes;

    const TOPIC: &str = "test";
    const BLOCK: Duration = Duration::from_secs(1);

    /// RecordAccumulatorTest's cluster: partitions 0 and 1 on node 0, partition 2 on node 1.
    fn cluster() -> ClusterView {
        let p = |partition, leader| PartitionLeader {
            partition,
            leader: Some(leader),
            leader_epoch: None,
        };
        ClusterView::new(vec![(TOPIC.to_string(), vec![p(0, 0), p(1, 0), p(2, 1)])])
    }

    fn record(value: &[u8]) -> ProducerRecord {
        ProducerRecord {
            key: None,
            value: Some(Bytes::copy_from_slice(value)),
            headers: Vec::new(),
            timestamp: 0,
        }
    }

    fn accumulator(
        batch_size: usize,
        linger_ms: i64,
        adaptive: bool,
        availability_timeout_ms: i64,
        random: Arc<SequentialRandom>,
    ) -> RecordAccumulator {
        RecordAccumulator::new(
            AccumulatorConfig {
                batch_size,
                compression: Compression::None,
                linger_ms,
                retry_backoff_ms: 100,
                retry_backoff_max_ms: 1000,
                buffer_memory: 1024 * 1024,
                adaptive_partitioning: adaptive,
                availability_timeout_ms,
            },
            random,
        )
    }

    /// Adaptive partitioning and the availability timeout off, Java's mock random.
    fn plain(batch_size: usize, linger_ms: i64) -> RecordAccumulator {
        accumulator(
            batch_size,
            linger_ms,
            false,
            0,
            Arc::new(SequentialRandom::default()),
        )
    }

    async fn append_keyless(a: &RecordAccumulator, c: &ClusterView, value: &[u8], now: i64) -> i32 {
        a.append(TOPIC, None, record(value), None, BLOCK, now, c)
            .await
            .unwrap()
            .partition
    }

    /// A record to a named partition at time 0.
    async fn append_to(
        a: &RecordAccumulator,
        c: &ClusterView,
        partition: i32,
        r: ProducerRecord,
    ) -> RecordAppendResult {
        a.append(TOPIC, Some(partition), r, None, BLOCK, 0, c)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn uniform_built_in_partitioner_switches_after_a_completed_batch() {
        // RecordAccumulatorTest.testUniformBuiltInPartitioner.
        let random = Arc::new(SequentialRandom::default());
        let a = accumulator(1024, 0, false, 0, random.clone());
        let c = cluster();
        let large = [0u8; 1024];
        assert_eq!(append_keyless(&a, &c, b"value", 0).await, 0);
        assert_eq!(random.drawn(), 1);
        // Over the sticky limit, but the batch is not complete: no switch yet.
        assert_eq!(append_keyless(&a, &c, &large, 0).await, 0);
        assert_eq!(random.drawn(), 1);
        assert_eq!(append_keyless(&a, &c, &large, 0).await, 1);
        assert_eq!(random.drawn(), 2);
        assert_eq!(append_keyless(&a, &c, &large, 0).await, 2);
        assert_eq!(random.drawn(), 3);
        assert_eq!(append_keyless(&a, &c, &large, 0).await, 0);
        assert_eq!(random.drawn(), 4);
    }

    #[tokio::test]
    async fn adaptive_built_in_partitioner_follows_queue_sizes_and_avoids_slow_nodes() {
        // RecordAccumulatorTest.testAdaptiveBuiltInPartitioner: queues {1, 7, 2}.
        let random = Arc::new(SequentialRandom::default());
        let a = accumulator(128, 0, true, 100, random.clone());
        let c = cluster();
        let large = [0u8; 128];
        let queue_sizes = [1usize, 7, 2];
        for (p, &n) in queue_sizes.iter().enumerate() {
            for _ in 0..n {
                append_to(&a, &c, p as i32, record(&large)).await;
            }
            assert_eq!(a.queue_len(TOPIC, p as i32), n);
        }
        a.ready(&c, 0);
        // Prime: switching happens on the record after the sticky limit.
        append_keyless(&a, &c, &large, 0).await;
        let picks = a.load_stats_range_end(TOPIC).unwrap() * 2;
        assert_eq!(picks, 28);
        let mut freq = [0; 3];
        for _ in 0..picks {
            freq[append_keyless(&a, &c, &large, 0).await as usize] += 1;
        }
        assert_eq!(freq, [14, 2, 12]);
        // Node 0 not drained for 200 ms > 100: only partition 2 (node 1) is picked.
        a.update_node_latency_stats(0, -200, true);
        a.update_node_latency_stats(0, 0, false);
        a.ready(&c, 0);
        append_keyless(&a, &c, &large, 0).await;
        for _ in 0..10 {
            assert_eq!(append_keyless(&a, &c, &large, 0).await, 2);
        }
    }

    #[tokio::test]
    async fn a_high_linger_does_not_cut_fractional_batches() {
        // RecordAccumulatorTest.testBuiltInPartitionerFractionalBatches.
        let batch_size = 512;
        let a = plain(batch_size, 10);
        let c = cluster();
        let value = [0u8; 32];
        let mut now = 0;
        for _ in 0..10 {
            for _ in 0..(batch_size * 2 / 3 / 32) {
                append_keyless(&a, &c, &value, now).await;
            }
            now += 10;
            let ready = a.ready(&c, now).ready_nodes;
            assert_eq!(ready.len(), 1, "one leader ready");
            let drained = a.drain(&c, &ready, usize::MAX, now);
            let batches: Vec<&ProducerBatch> = drained.values().flatten().collect();
            assert_eq!(batches.len(), 1, "one batch ready");
            let size = batches[0].encode(-1, -1, -1).unwrap().0.len();
            assert!(
                size > batch_size / 2 && size < batch_size,
                "batch of {size} bytes, {} records",
                batches[0].record_count()
            );
        }
    }

    #[tokio::test]
    async fn a_full_batch_makes_its_leader_ready_and_drains_with_every_record() {
        // RecordAccumulatorTest.testFull: batch.size 1025 + 61 holds exactly the appends that fit.
        let batch_size = 1025 + 61;
        let a = plain(batch_size, 10);
        let c = cluster();
        let key_value = |k: &[u8], v: &[u8]| ProducerRecord {
            key: Some(Bytes::copy_from_slice(k)),
            ..record(v)
        };
        // Java's expectedNumAppends: records of growing offset delta until 1025 bytes are full.
        let one = key_value(b"key", b"value");
        let (mut fit, mut used) = (0usize, 0usize);
        while used + record_size(fit as i32, 0, &one) <= 1025 {
            used += record_size(fit as i32, 0, &one);
            fit += 1;
        }
        assert_eq!(fit, 68, "64 records of 15 bytes, then 4 of 16");
        for _ in 0..fit {
            append_to(&a, &c, 0, key_value(b"key", b"value")).await;
            assert_eq!(a.queue_len(TOPIC, 0), 1);
            assert!(
                a.ready(&c, 0).ready_nodes.is_empty(),
                "no partition ready yet"
            );
        }
        append_to(&a, &c, 0, key_value(b"key", b"value")).await;
        assert_eq!(a.queue_len(TOPIC, 0), 2);
        let ready = a.ready(&c, 0).ready_nodes;
        assert_eq!(ready, BTreeSet::from([0]));
        let drained = a.drain(&c, &ready, usize::MAX, 0);
        let batches = &drained[&0];
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].record_count(), fit);
        assert!(batches[0]
            .records()
            .iter()
            .all(|r| r.key.as_deref() == Some(&b"key"[..])
                && r.value.as_deref() == Some(&b"value"[..])));
    }

    #[tokio::test]
    async fn drain_rotates_over_each_nodes_partitions_and_skips_muted_ones() {
        // RecordAccumulatorTest.testDrainBatches: node 0 leads 0 and 1, node 1 leads 2 and 3.
        let p = |partition, leader| PartitionLeader {
            partition,
            leader: Some(leader),
            leader_epoch: None,
        };
        let c = ClusterView::new(vec![(
            TOPIC.to_string(),
            vec![p(0, 0), p(1, 0), p(2, 1), p(3, 1)],
        )]);
        let value = b"value";
        let batch_size = value.len() + 61;
        let a = plain(batch_size, 10);
        let both = BTreeSet::from([0, 1]);
        let put = |ps: &'static [i32]| {
            let a = &a;
            let c = &c;
            async move {
                for &p in ps {
                    let r = ProducerRecord {
                        key: Some(Bytes::from_static(b"key")),
                        ..record(value)
                    };
                    append_to(a, c, p, r).await;
                }
            }
        };
        let drained = |max: usize| -> Vec<i32> {
            a.drain(&c, &both, max, 0)
                .values()
                .flatten()
                .map(|b| b.partition)
                .collect()
        };
        put(&[0, 1, 2, 3]).await;
        assert_eq!(drained(batch_size), vec![0, 2]);
        put(&[0, 2]).await;
        assert_eq!(drained(batch_size), vec![1, 3]);
        assert_eq!(drained(batch_size), vec![0, 2]);
        put(&[1, 2, 3]).await;
        a.mute_partition(TOPIC, 3);
        assert_eq!(drained(batch_size), vec![1, 2]);
        put(&[0, 1, 2]).await;
        a.unmute_partition(TOPIC, 3);
        assert_eq!(drained(usize::MAX), vec![0, 1, 2, 3]);
    }

    #[test]
    fn retry_backoff_doubles_with_jitter_up_to_the_max() {
        // Without jitter (unit 0.5 → factor 1.0): 100, 200, 400, 800, then capped at 1000.
        let b: Vec<i64> = (0..6)
            .map(|a| exponential_backoff(100, 1000, a, 0.5))
            .collect();
        assert_eq!(b, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(exponential_backoff(100, 1000, 0, 0.0), 80, "20 % below");
        assert_eq!(
            exponential_backoff(100, 1000, 1, 0.999_999),
            239,
            "20 % above"
        );
        // max ≤ initial: a constant min(max, initial), no jitter.
        assert_eq!(exponential_backoff(500, 300, 4, 0.9), 300);
    }

    #[test]
    fn a_retry_skips_its_backoff_only_when_the_leader_epoch_moves_forward() {
        let mut b = ProducerBatch::new(TOPIC, 0, 100, Compression::None, 1.0, 0);
        assert!(b.maybe_update_leader_epoch(Some(5)));
        assert!(
            !b.has_leader_changed_for_the_ongoing_retry(),
            "first attempt"
        );
        b.reenqueued(10);
        assert!(!b.has_leader_changed_for_the_ongoing_retry());
        assert!(
            !b.maybe_update_leader_epoch(Some(4)),
            "older metadata is stale"
        );
        assert!(!b.maybe_update_leader_epoch(Some(5)));
        assert!(b.maybe_update_leader_epoch(Some(6)));
        assert!(b.has_leader_changed_for_the_ongoing_retry());
        b.reenqueued(20);
        assert!(
            !b.has_leader_changed_for_the_ongoing_retry(),
            "a new attempt, same leader"
        );
    }

    #[tokio::test]
    async fn kip480_mode_gets_its_record_back_when_it_needs_a_new_batch() {
        let a = plain(100, 0);
        let c = cluster();
        let (r, done) = a
            .append_if_room(TOPIC, 1, record(&[7; 50]), None)
            .expect_err("an empty queue needs a new batch");
        assert_eq!(r, record(&[7; 50]), "handed back untouched");
        assert!(done.is_none());
        assert_eq!(a.queue_len(TOPIC, 1), 0);
        let opened = append_to(&a, &c, 1, r).await;
        assert!(opened.new_batch_created);
        let again = a.append_if_room(TOPIC, 1, record(&[0; 10]), None).unwrap();
        assert!(!again.new_batch_created);
        assert_eq!(a.queue_len(TOPIC, 1), 1);
        assert!(a.append_if_room(TOPIC, 1, record(&[0; 60]), None).is_err());
    }

    #[tokio::test]
    async fn a_full_buffer_refuses_after_max_block_and_memory_comes_back_on_completion() {
        let mut config = AccumulatorConfig {
            batch_size: 1000,
            buffer_memory: 1500,
            ..AccumulatorConfig::default()
        };
        config.linger_ms = 0;
        let a = RecordAccumulator::new(config, Arc::new(SequentialRandom::default()));
        let c = cluster();
        append_to(&a, &c, 0, record(b"a")).await;
        let err = a
            .append(
                TOPIC,
                Some(1),
                record(b"b"),
                None,
                Duration::from_millis(20),
                0,
                &c,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, AppendError::Memory(AllocateError::Exhausted { .. })),
            "{err}"
        );
        let ready = a.ready(&c, 0).ready_nodes;
        let drained = a.drain(&c, &ready, usize::MAX, 0);
        for b in drained.values().flatten() {
            a.complete_batch(b);
        }
        append_to(&a, &c, 1, record(b"b")).await;
    }

    #[tokio::test]
    async fn batches_past_the_delivery_timeout_are_expired_and_their_records_fail() {
        let a = plain(1000, 1000);
        let c = cluster();
        let (tx, rx) = tokio::sync::oneshot::channel();
        a.append(TOPIC, Some(0), record(b"a"), Some(tx), BLOCK, 0, &c)
            .await
            .unwrap();
        assert!(a.expired_batches(119_999, 120_000).is_empty());
        let mut expired = a.expired_batches(120_000, 120_000);
        assert_eq!(expired.len(), 1);
        expired[0].complete(Err(crate::client::producer::ProduceError::Timeout(
            "expired".into(),
        )));
        assert!(rx.await.unwrap().is_err());
        assert!(!a.has_undrained());
    }

    /// An empty batch of partition 0 holding 4 KB of the pool, as if `append` had opened it.
    async fn pooled_batch(a: &RecordAccumulator, created_ms: i64) -> ProducerBatch {
        a.free.allocate(4096, Duration::ZERO).await.unwrap();
        a.incomplete.fetch_add(1, Ordering::SeqCst);
        ProducerBatch::new(TOPIC, 0, 4096, Compression::None, 1.0, created_ms)
    }

    /// Two records of `value_len` bytes in one pooled batch of partition 0, drained as if sent.
    async fn drained_pair(
        a: &RecordAccumulator,
        c: &ClusterView,
        value_len: usize,
    ) -> ProducerBatch {
        let mut b = pooled_batch(a, 0).await;
        for _ in 0..2 {
            b.try_append(record(&vec![0; value_len]), None).unwrap();
        }
        a.reenqueue(b, 0);
        let ready = a.ready(c, 1_000).ready_nodes;
        let mut drained = a.drain(c, &ready, usize::MAX, 1_000);
        drained
            .get_mut(&0)
            .and_then(Vec::pop)
            .expect("the pair is drained")
    }

    #[tokio::test]
    async fn a_split_batch_goes_back_in_parts_of_batch_size_and_every_record_hears_its_own_offset()
    {
        // RecordAccumulatorTest.testSplitAndReenqueue: two 1 KB records in one batch, batch.size 1 KB.
        let a = plain(1024, 10);
        let c = cluster();
        let mut big = pooled_batch(&a, 7).await;
        let (tx1, rx1) = tokio::sync::oneshot::channel();
        let (tx2, rx2) = tokio::sync::oneshot::channel();
        big.try_append(record(&[1; 1024]), Some(tx1)).unwrap();
        big.try_append(record(&[2; 1024]), Some(tx2)).unwrap();
        // A record queued behind the refused batch stays behind its parts.
        append_to(&a, &c, 0, record(b"later")).await;
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let parts = a.split_and_reenqueue(big, &|big, parts| {
            assert_eq!(big.record_count(), 0, "the records moved to the parts");
            seen.store(parts.len(), Ordering::SeqCst);
        });
        assert_eq!((parts, seen.load(Ordering::SeqCst)), (2, 2));
        assert_eq!(a.queue_len(TOPIC, 0), 3);
        assert_eq!(a.incomplete_batches(), 3);
        let nodes = BTreeSet::from([0]);
        let mut offsets = Vec::new();
        for (rx, want) in [(rx1, 1u8), (rx2, 2)] {
            let mut drained = a.drain(&c, &nodes, usize::MAX, 7);
            let mut b = drained.get_mut(&0).and_then(Vec::pop).expect("a part");
            assert!(
                b.is_split_batch() && b.attempts == 0,
                "a part is a batch never tried"
            );
            assert_eq!(b.created_ms, 7, "as old as the refused batch");
            assert_eq!(b.record_count(), 1);
            assert_eq!(b.records()[0].value.as_deref().map(|v| v[0]), Some(want));
            b.complete(Ok((100 + want as i64, None)));
            a.complete_batch(&b);
            offsets.push(rx.await.unwrap().unwrap().offset);
        }
        assert_eq!(offsets, vec![101, 102]);
        let mut drained = a.drain(&c, &nodes, usize::MAX, 7);
        let later = drained.get_mut(&0).and_then(Vec::pop).unwrap();
        assert_eq!(later.records()[0].value.as_deref(), Some(&b"later"[..]));
    }

    #[tokio::test]
    async fn split_batches_are_allocated_off_the_buffer_pool() {
        // RecordAccumulatorTest.testSplitBatchOffAccumulator.
        let a = plain(1024, 0);
        let c = cluster();
        let big = drained_pair(&a, &c, 1024).await;
        let total = a.free.total();
        assert_eq!(a.free.available(), total - 4096);
        a.split_and_reenqueue(big, &|_, _| {});
        assert_eq!(
            a.free.available(),
            total,
            "the refused batch's memory is free"
        );
        let nodes = BTreeSet::from([0]);
        for _ in 0..2 {
            let drained = a.drain(&c, &nodes, usize::MAX, 0);
            for b in drained.values().flatten() {
                a.complete_batch(b);
            }
        }
        assert_eq!(
            a.free.available(),
            total,
            "the parts never held pool memory"
        );
        assert_eq!(a.incomplete_batches(), 0);
    }

    #[tokio::test]
    async fn a_split_batch_refused_again_is_split_in_halves() {
        // KAFKA-8350: batch.size over the broker's max.message.bytes. The first split, at
        // batch.size, gives the same batch back; refused again, it is halved.
        let a = plain(16384, 0);
        let c = cluster();
        let big = drained_pair(&a, &c, 100).await;
        assert_eq!(a.split_and_reenqueue(big, &|_, _| {}), 1);
        let nodes = BTreeSet::from([0]);
        let mut drained = a.drain(&c, &nodes, usize::MAX, 0);
        let part = drained.get_mut(&0).and_then(Vec::pop).unwrap();
        assert!(part.is_split_batch() && part.record_count() == 2);
        assert_eq!(a.split_and_reenqueue(part, &|_, _| {}), 2);
        assert_eq!(a.queue_len(TOPIC, 0), 2);
        assert_eq!(a.incomplete_batches(), 2);
    }

    #[tokio::test]
    async fn split_parts_carry_on_the_refused_batchs_sequences_in_order() {
        // Java's ProducerBatch.split with a sequence; RecordAccumulator.insertInSequenceOrder.
        use crate::client::producer::batch::BatchSequence;
        let a = plain(1024, 0);
        let c = cluster();
        let mut big = drained_pair(&a, &c, 1024).await;
        let q = BatchSequence {
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 40,
        };
        big.sequence = Some(q);
        // A later batch (sequence 42) came back for a retry before the split.
        let mut later = ProducerBatch::new(TOPIC, 0, 100, Compression::None, 1.0, 0);
        later.try_append(record(b"x"), None).unwrap();
        later.sequence = Some(BatchSequence {
            base_sequence: 42,
            ..q
        });
        a.incomplete.fetch_add(1, Ordering::SeqCst);
        a.reenqueue(later, 0);
        a.split_and_reenqueue(big, &|_, _| {});
        let nodes = BTreeSet::from([0]);
        let mut order = Vec::new();
        for _ in 0..3 {
            let drained = a.drain(&c, &nodes, usize::MAX, 10_000);
            for b in drained.values().flatten() {
                let s = b.sequence.unwrap();
                order.push((
                    s.producer_id,
                    s.producer_epoch,
                    s.base_sequence,
                    b.record_count(),
                ));
            }
        }
        assert_eq!(order, vec![(9, 1, 40, 1), (9, 1, 41, 1), (9, 1, 42, 1)]);
    }

    #[tokio::test]
    async fn a_split_resets_the_topics_compression_estimate_to_at_least_one() {
        let mut config = AccumulatorConfig {
            batch_size: 1024,
            compression: Compression::Gzip,
            ..AccumulatorConfig::default()
        };
        config.linger_ms = 0;
        let a = RecordAccumulator::new(config, Arc::new(SequentialRandom::default()));
        let c = cluster();
        let info = a.topic_info(TOPIC);
        a.record_compression_ratio(TOPIC, 0.1);
        assert!(*info.compression_ratio.lock() < 1.0);
        let mut big = drained_pair(&a, &c, 1024).await;
        big.set_compression_ratio(0.4);
        a.split_and_reenqueue(big, &|_, _| {});
        assert_eq!(*info.compression_ratio.lock(), 1.0, "at least 1.0");
        let mut big = drained_pair(&a, &c, 1024).await;
        big.set_compression_ratio(1.3);
        a.split_and_reenqueue(big, &|_, _| {});
        assert_eq!(
            *info.compression_ratio.lock(),
            1.3,
            "or what the refused batch achieved"
        );
    }
}
