//! The purgatory for DelayedFetch and DelayedProduce, built so it cannot convoy (Kafka's can stall for
//! tens of seconds under wide fetches):
//! an append's completion check costs O(1) atomics per watcher and takes no operation lock;
//! an operation completes exactly once (an atomic flag); the woken request assembles its
//! response itself, off the append path; completed watchers are purged lazily, and all at
//! once by ReplicaManager's periodic `purge`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::storage::TopicPartition;

const SHARDS: usize = 64;

/// One delayed request: completes exactly once, by a notification or a timeout.
pub struct DelayedOperation {
    completed: AtomicBool,
    notify: Notify,
    /// DelayedFetch: bytes seen so far, and the `fetch.min.bytes` target.
    accumulated: AtomicI64,
    min_bytes: i64,
    /// DelayedProduce: required offsets per partition and how many are not yet reached.
    required: HashMap<TopicPartition, (i64, AtomicBool)>,
    remaining: AtomicUsize,
}

impl DelayedOperation {
    /// A fetch that completes once `min_bytes` have arrived (starting from `already`).
    pub fn fetch(min_bytes: i64, already: i64) -> Arc<Self> {
        Arc::new(DelayedOperation {
            completed: AtomicBool::new(false),
            notify: Notify::new(),
            accumulated: AtomicI64::new(already),
            min_bytes,
            required: HashMap::new(),
            remaining: AtomicUsize::new(0),
        })
    }

    /// A produce that completes once each partition's high watermark reaches its offset.
    pub fn produce(required: impl IntoIterator<Item = (TopicPartition, i64)>) -> Arc<Self> {
        let required: HashMap<_, _> = required
            .into_iter()
            .map(|(tp, o)| (tp, (o, AtomicBool::new(false))))
            .collect();
        let n = required.len();
        Arc::new(DelayedOperation {
            completed: AtomicBool::new(false),
            notify: Notify::new(),
            accumulated: AtomicI64::new(0),
            min_bytes: 0,
            required,
            remaining: AtomicUsize::new(n),
        })
    }

    pub fn is_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }

    /// Marks the operation complete; true only for the one caller that did it.
    pub fn force_complete(&self) -> bool {
        if self
            .completed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.notify.notify_one();
            true
        } else {
            false
        }
    }

    fn on_bytes(&self, n: i64) {
        let total = self.accumulated.fetch_add(n, Ordering::AcqRel) + n;
        if total >= self.min_bytes {
            self.force_complete();
        }
    }

    /// A DelayedProduce no longer waits for `tp` (its append is settled, one way or another);
    /// the operation completes once no partition is left.
    pub fn satisfy(&self, tp: &TopicPartition) {
        self.on_high_watermark(tp, i64::MAX);
    }

    fn on_high_watermark(&self, tp: &TopicPartition, hw: i64) {
        if let Some((required, done)) = self.required.get(tp) {
            if hw >= *required
                && !done.swap(true, Ordering::AcqRel)
                && self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
            {
                self.force_complete();
            }
        }
    }

    /// Waits until completed or `timeout`; returns whether it completed (false = timed out, and
    /// then the operation is completed by the timeout so later notifications are ignored).
    pub async fn wait(&self, timeout: Duration) -> bool {
        if self.is_completed() {
            return true;
        }
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Register interest before re-checking, so a completion in between is not missed.
        notified.as_mut().enable();
        if self.is_completed() {
            return true;
        }
        match tokio::time::timeout(timeout, notified).await {
            Ok(()) => true,
            Err(_) => !self.force_complete(),
        }
    }
}

/// Watch lists keyed by partition, sharded so that unrelated partitions never share a lock.
pub struct Purgatory {
    shards: Vec<Mutex<HashMap<TopicPartition, Vec<Weak<DelayedOperation>>>>>,
    watched: AtomicUsize,
}

impl Default for Purgatory {
    fn default() -> Self {
        Purgatory {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            watched: AtomicUsize::new(0),
        }
    }
}

impl Purgatory {
    fn shard(
        &self,
        tp: &TopicPartition,
    ) -> &Mutex<HashMap<TopicPartition, Vec<Weak<DelayedOperation>>>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        tp.hash(&mut h);
        &self.shards[(h.finish() as usize) % SHARDS]
    }

    /// Watches `op` under each key.
    pub fn watch(
        &self,
        op: &Arc<DelayedOperation>,
        keys: impl IntoIterator<Item = TopicPartition>,
    ) {
        for tp in keys {
            let mut shard = self.shard(&tp).lock().unwrap_or_else(|p| p.into_inner());
            shard.entry(tp).or_default().push(Arc::downgrade(op));
            self.watched.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Visits the live watchers of `tp`, dropping completed ones as it goes.
    fn for_each(&self, tp: &TopicPartition, f: impl Fn(&DelayedOperation)) {
        let mut shard = self.shard(tp).lock().unwrap_or_else(|p| p.into_inner());
        let Some(list) = shard.get_mut(tp) else {
            return;
        };
        let before = list.len();
        list.retain(|w| match w.upgrade() {
            Some(op) if !op.is_completed() => {
                f(&op);
                !op.is_completed()
            }
            _ => false,
        });
        let removed = before - list.len();
        if list.is_empty() {
            shard.remove(tp);
        }
        self.watched.fetch_sub(removed, Ordering::Relaxed);
    }

    /// `n` new bytes became readable in `tp`: credit every fetch watching it.
    pub fn on_bytes(&self, tp: &TopicPartition, n: i64) {
        self.for_each(tp, |op| op.on_bytes(n));
    }

    /// The high watermark of `tp` moved: check every produce waiting on it.
    pub fn on_high_watermark(&self, tp: &TopicPartition, hw: i64) {
        self.for_each(tp, |op| op.on_high_watermark(tp, hw));
    }

    /// Watch entries not yet purged (Kafka's PurgatorySize counts watched keys the same way).
    pub fn size(&self) -> usize {
        self.watched.load(Ordering::Relaxed)
    }

    /// Drops entries of completed or abandoned operations everywhere.
    pub fn purge(&self) {
        for shard in &self.shards {
            let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
            let mut removed = 0;
            s.retain(|_, list| {
                let before = list.len();
                list.retain(|w| w.upgrade().is_some_and(|op| !op.is_completed()));
                removed += before - list.len();
                !list.is_empty()
            });
            self.watched.fetch_sub(removed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[tokio::test]
    async fn fetch_completes_once_enough_bytes_arrive() {
        let purg = Purgatory::default();
        let op = DelayedOperation::fetch(100, 10);
        purg.watch(&op, (0..1000).map(tp));
        assert_eq!(purg.size(), 1000);
        purg.on_bytes(&tp(5), 50);
        assert!(!op.is_completed());
        purg.on_bytes(&tp(700), 40);
        assert!(op.is_completed());
        assert!(op.wait(Duration::from_secs(5)).await);
        // Exactly once: a later completion attempt does nothing.
        assert!(!op.force_complete());
        purg.purge();
        assert_eq!(purg.size(), 0);
    }

    #[tokio::test]
    async fn fetch_times_out_without_data() {
        let purg = Purgatory::default();
        let op = DelayedOperation::fetch(100, 0);
        purg.watch(&op, [tp(0)]);
        let start = std::time::Instant::now();
        assert!(!op.wait(Duration::from_millis(50)).await);
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(op.is_completed());
        purg.on_bytes(&tp(0), 1000);
        assert_eq!(
            purg.size(),
            0,
            "the completed watcher is purged on the next visit"
        );
    }

    #[tokio::test]
    async fn produce_completes_when_every_partition_reaches_its_offset() {
        let purg = Purgatory::default();
        let op = DelayedOperation::produce([(tp(0), 10), (tp(1), 5)]);
        purg.watch(&op, [tp(0), tp(1)]);
        purg.on_high_watermark(&tp(0), 10);
        purg.on_high_watermark(&tp(0), 11);
        assert!(!op.is_completed());
        purg.on_high_watermark(&tp(1), 4);
        assert!(!op.is_completed());
        purg.on_high_watermark(&tp(1), 5);
        assert!(op.wait(Duration::from_millis(10)).await);
    }

    #[tokio::test]
    async fn a_notification_racing_the_wait_is_not_lost() {
        for _ in 0..200 {
            let purg = Arc::new(Purgatory::default());
            let op = DelayedOperation::fetch(1, 0);
            purg.watch(&op, [tp(0)]);
            let p2 = purg.clone();
            let h = std::thread::spawn(move || p2.on_bytes(&tp(0), 1));
            assert!(op.wait(Duration::from_secs(5)).await);
            h.join().unwrap();
        }
    }

    #[test]
    fn every_watching_fetch_is_credited_by_each_append() {
        // Seed 003's shape: many wide fetches watching every partition; each append credits
        // each watcher of its own partition once, with no per-operation lock.
        let purg = Purgatory::default();
        let ops: Vec<_> = (0..200)
            .map(|_| DelayedOperation::fetch(i64::MAX, 0))
            .collect();
        for op in &ops {
            purg.watch(op, (0..1000).map(tp));
        }
        for p in 0..1000 {
            purg.on_bytes(&tp(p), 10);
        }
        for op in &ops {
            assert_eq!(op.accumulated.load(Ordering::Relaxed), 10_000);
        }
    }
}
