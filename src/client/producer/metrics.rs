//! The producer's own counters, under the Java producer's metric names where one exists
//! (record-send-total, batch-size-avg, record-queue-time-avg/max, request-latency-avg,
//! record-retry-total, record-error-total, batch-split-total), plus bytes and records sent per partition: the
//! numbers that show the partitioner at work.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A sum and a count, for an average.
#[derive(Default)]
struct Avg {
    sum: AtomicU64,
    count: AtomicU64,
}

impl Avg {
    fn record(&self, v: u64) {
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn avg(&self) -> f64 {
        let n = self.count.load(Ordering::Relaxed);
        if n == 0 {
            return 0.0;
        }
        self.sum.load(Ordering::Relaxed) as f64 / n as f64
    }
}

/// Per partition: records, bytes (encoded batch size) and batches acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionSent {
    pub records: u64,
    pub bytes: u64,
    pub batches: u64,
}

#[derive(Default)]
pub struct ProducerMetrics {
    records_sent: AtomicU64,
    record_errors: AtomicU64,
    record_retries: AtomicU64,
    batch_splits: AtomicU64,
    batch_size: Avg,
    queue_time: Avg,
    queue_time_max: AtomicI64,
    request_latency: Avg,
    per_partition: Mutex<BTreeMap<(String, i32), PartitionSent>>,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub record_send_total: u64,
    pub record_error_total: u64,
    pub record_retry_total: u64,
    /// Batches split after a MESSAGE_TOO_LARGE (Java's batch-split-total).
    pub batch_split_total: u64,
    pub batch_size_avg: f64,
    pub record_queue_time_avg: f64,
    pub record_queue_time_max: f64,
    pub request_latency_avg: f64,
    pub per_partition: BTreeMap<(String, i32), PartitionSent>,
}

impl ProducerMetrics {
    /// A batch leaves its queue for a request after waiting `queued_ms` since it was opened.
    pub fn batch_drained(&self, bytes: usize, queued_ms: i64) {
        self.batch_size.record(bytes as u64);
        self.queue_time.record(queued_ms.max(0) as u64);
        self.queue_time_max.fetch_max(queued_ms, Ordering::Relaxed);
    }

    /// A produce request was answered after `latency_ms`.
    pub fn request_answered(&self, latency_ms: i64) {
        self.request_latency.record(latency_ms.max(0) as u64);
    }

    /// A batch of `records` and `bytes` was acknowledged by its partition's leader.
    pub fn batch_acked(&self, topic: &str, partition: i32, records: usize, bytes: usize) {
        self.records_sent
            .fetch_add(records as u64, Ordering::Relaxed);
        let mut m = self.per_partition.lock();
        let e = m.entry((topic.to_string(), partition)).or_default();
        e.records += records as u64;
        e.bytes += bytes as u64;
        e.batches += 1;
    }

    pub fn batch_retried(&self, records: usize) {
        self.record_retries
            .fetch_add(records as u64, Ordering::Relaxed);
    }

    pub fn batch_split(&self) {
        self.batch_splits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn batch_failed(&self, records: usize) {
        self.record_errors
            .fetch_add(records as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            record_send_total: self.records_sent.load(Ordering::Relaxed),
            record_error_total: self.record_errors.load(Ordering::Relaxed),
            record_retry_total: self.record_retries.load(Ordering::Relaxed),
            batch_split_total: self.batch_splits.load(Ordering::Relaxed),
            batch_size_avg: self.batch_size.avg(),
            record_queue_time_avg: self.queue_time.avg(),
            record_queue_time_max: self.queue_time_max.load(Ordering::Relaxed).max(0) as f64,
            request_latency_avg: self.request_latency.avg(),
            per_partition: self.per_partition.lock().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_and_per_partition_counts_follow_what_was_recorded() {
        let m = ProducerMetrics::default();
        m.batch_drained(100, 4);
        m.batch_drained(300, 10);
        m.batch_acked("t", 0, 5, 100);
        m.batch_acked("t", 0, 2, 300);
        m.batch_acked("t", 1, 1, 50);
        m.batch_failed(3);
        let s = m.snapshot();
        assert_eq!(s.batch_size_avg, 200.0);
        assert_eq!(s.record_queue_time_avg, 7.0);
        assert_eq!(s.record_queue_time_max, 10.0);
        assert_eq!(s.record_send_total, 8);
        assert_eq!(s.record_error_total, 3);
        assert_eq!(
            s.per_partition[&("t".to_string(), 0)],
            PartitionSent {
                records: 7,
                bytes: 400,
                batches: 2
            }
        );
    }
}
