//! The producer's own metrics, under the Java producer's names: totals (record-send-total,
//! record-error-total, record-retry-total, batch-split-total) and, over Java's sampled windows
//! (two samples of 30 s, `metrics.num.samples` and `metrics.sample.window.ms`), the rates
//! (record-send-rate, record-error-rate, record-retry-rate) and the averages and maxima of
//! batch-size, record-queue-time and request-latency; plus bytes, records and batches sent per
//! partition, the numbers that show the partitioner at work.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::sender::now_ms;

/// Java's `metrics.num.samples` and `metrics.sample.window.ms` defaults.
const SAMPLES: usize = 2;
const WINDOW_MS: i64 = 30_000;

/// One sample of a windowed statistic (Java's `SampledStat.Sample`).
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// When this sample's window began.
    start_ms: i64,
    count: u64,
    sum: f64,
    max: f64,
}

impl Sample {
    fn new(start_ms: i64) -> Sample {
        Sample {
            start_ms,
            count: 0,
            sum: 0.0,
            max: f64::NEG_INFINITY,
        }
    }
}

/// A statistic over the last `SAMPLES` windows of `WINDOW_MS`, measured as Java's `Avg`, `Max`
/// and `Rate` measure a `SampledStat`: samples older than all the windows are forgotten, and a
/// rate divides by the time the samples cover, but by no less than `SAMPLES - 1` whole windows
/// (so that a rate does not spike right after a start).
#[derive(Debug)]
struct Windowed {
    samples: Mutex<(Vec<Sample>, usize)>,
}

impl Default for Windowed {
    fn default() -> Windowed {
        Windowed {
            samples: Mutex::new((Vec::with_capacity(SAMPLES), 0)),
        }
    }
}

impl Windowed {
    fn record(&self, value: f64, now: i64) {
        let mut guard = self.samples.lock();
        let (samples, current) = &mut *guard;
        if samples.is_empty() {
            samples.push(Sample::new(now));
        }
        if now - samples[*current].start_ms >= WINDOW_MS {
            *current = (*current + 1) % SAMPLES;
            match samples.get_mut(*current) {
                Some(s) => *s = Sample::new(now),
                None => samples.push(Sample::new(now)),
            }
        }
        let s = &mut samples[*current];
        s.count += 1;
        s.sum += value;
        s.max = s.max.max(value);
    }

    /// The samples still inside the windows at `now` (Java's `purgeObsoleteSamples` resets the
    /// others, which then count nothing).
    fn live(&self, now: i64) -> Vec<Sample> {
        let mut guard = self.samples.lock();
        for s in guard.0.iter_mut() {
            if now - s.start_ms >= SAMPLES as i64 * WINDOW_MS {
                *s = Sample::new(now);
            }
        }
        guard.0.clone()
    }

    /// The mean of what was recorded in the windows; NaN when nothing was, as Java's `Avg`.
    fn avg(&self, now: i64) -> f64 {
        let live = self.live(now);
        let count: u64 = live.iter().map(|s| s.count).sum();
        if count == 0 {
            return f64::NAN;
        }
        live.iter().map(|s| s.sum).sum::<f64>() / count as f64
    }

    /// The largest value recorded in the windows; NaN when nothing was, as Java's `Max`.
    fn max(&self, now: i64) -> f64 {
        let live = self.live(now);
        if live.iter().all(|s| s.count == 0) {
            return f64::NAN;
        }
        live.iter().map(|s| s.max).fold(f64::NEG_INFINITY, f64::max)
    }

    /// The sum of what was recorded, per second of the time the samples cover (Java's `Rate`
    /// over a `WindowedSum`).
    fn rate(&self, now: i64) -> f64 {
        let live = self.live(now);
        let oldest = live.iter().map(|s| s.start_ms).min().unwrap_or(now);
        let mut elapsed = now - oldest;
        let full_windows = elapsed / WINDOW_MS;
        let min_full_windows = SAMPLES as i64 - 1;
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * WINDOW_MS;
        }
        // A fold from 0.0, not `sum()`: Rust's empty f64 sum is -0.0, which a scraper prints
        // as "-0" where Java prints 0.0.
        let total = live.iter().fold(0.0, |acc, s| acc + s.sum);
        total / (elapsed as f64 / 1000.0)
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
    send_rate: Windowed,
    error_rate: Windowed,
    retry_rate: Windowed,
    batch_size: Windowed,
    queue_time: Windowed,
    request_latency: Windowed,
    per_partition: Mutex<BTreeMap<(String, i32), PartitionSent>>,
}

/// A copy of the metrics at one moment. Averages and maxima are NaN when nothing was recorded
/// in their windows, as Java's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub record_send_total: u64,
    pub record_error_total: u64,
    pub record_retry_total: u64,
    /// Batches split after a MESSAGE_TOO_LARGE (Java's batch-split-total).
    pub batch_split_total: u64,
    /// Records acknowledged, failed and retried per second.
    pub record_send_rate: f64,
    pub record_error_rate: f64,
    pub record_retry_rate: f64,
    pub batch_size_avg: f64,
    pub batch_size_max: f64,
    pub record_queue_time_avg: f64,
    pub record_queue_time_max: f64,
    pub request_latency_avg: f64,
    pub request_latency_max: f64,
    pub per_partition: BTreeMap<(String, i32), PartitionSent>,
}

impl ProducerMetrics {
    /// A batch leaves its queue for a request after waiting `queued_ms` since it was opened.
    pub fn batch_drained(&self, bytes: usize, queued_ms: i64) {
        let now = now_ms();
        self.batch_size.record(bytes as f64, now);
        self.queue_time.record(queued_ms.max(0) as f64, now);
    }

    /// A produce request was answered after `latency_ms`.
    pub fn request_answered(&self, latency_ms: i64) {
        self.request_latency
            .record(latency_ms.max(0) as f64, now_ms());
    }

    /// A batch of `records` and `bytes` was acknowledged by its partition's leader.
    pub fn batch_acked(&self, topic: &str, partition: i32, records: usize, bytes: usize) {
        self.records_sent
            .fetch_add(records as u64, Ordering::Relaxed);
        self.send_rate.record(records as f64, now_ms());
        let mut m = self.per_partition.lock();
        let e = m.entry((topic.to_string(), partition)).or_default();
        e.records += records as u64;
        e.bytes += bytes as u64;
        e.batches += 1;
    }

    pub fn batch_retried(&self, records: usize) {
        self.record_retries
            .fetch_add(records as u64, Ordering::Relaxed);
        self.retry_rate.record(records as f64, now_ms());
    }

    pub fn batch_split(&self) {
        self.batch_splits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn batch_failed(&self, records: usize) {
        self.record_errors
            .fetch_add(records as u64, Ordering::Relaxed);
        self.error_rate.record(records as f64, now_ms());
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        self.snapshot_at(now_ms())
    }

    fn snapshot_at(&self, now: i64) -> MetricsSnapshot {
        MetricsSnapshot {
            record_send_total: self.records_sent.load(Ordering::Relaxed),
            record_error_total: self.record_errors.load(Ordering::Relaxed),
            record_retry_total: self.record_retries.load(Ordering::Relaxed),
            batch_split_total: self.batch_splits.load(Ordering::Relaxed),
            record_send_rate: self.send_rate.rate(now),
            record_error_rate: self.error_rate.rate(now),
            record_retry_rate: self.retry_rate.rate(now),
            batch_size_avg: self.batch_size.avg(now),
            batch_size_max: self.batch_size.max(now),
            record_queue_time_avg: self.queue_time.avg(now),
            record_queue_time_max: self.queue_time.max(now),
            request_latency_avg: self.request_latency.avg(now),
            request_latency_max: self.request_latency.max(now),
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
        assert_eq!(s.batch_size_max, 300.0);
        assert_eq!(s.record_queue_time_avg, 7.0);
        assert_eq!(s.record_queue_time_max, 10.0);
        assert_eq!(s.record_send_total, 8);
        assert_eq!(s.record_error_total, 3);
        assert!(s.request_latency_avg.is_nan(), "nothing recorded yet");
        assert_eq!(
            s.per_partition[&("t".to_string(), 0)],
            PartitionSent {
                records: 7,
                bytes: 400,
                batches: 2
            }
        );
    }

    #[test]
    fn a_rate_covers_at_least_one_whole_window_as_javas() {
        let w = Windowed::default();
        w.record(400.0, 0);
        w.record(200.0, 10_000);
        // 10 s in: fewer than SAMPLES - 1 full windows, so 10 + 30 s are counted.
        assert_eq!(w.rate(10_000), 600.0 / 40.0);
        // 45 s in: a second sample began at 45 s; the oldest began at 0.
        w.record(900.0, 45_000);
        assert_eq!(w.rate(45_000), 1500.0 / 45.0);
        // 61 s in: the first sample is past both windows and forgotten; the second began 16 s
        // ago, which is again less than one whole window.
        assert_eq!(w.rate(61_000), 900.0 / 46.0);
    }

    #[test]
    fn a_rate_with_nothing_recorded_is_a_plain_zero() {
        let w = Windowed::default();
        let rate = w.rate(5_000);
        assert_eq!(rate, 0.0);
        assert!(rate.is_sign_positive(), "{rate} would print as -0");
    }

    #[test]
    fn a_spike_leaves_the_maximum_once_its_windows_have_passed() {
        let w = Windowed::default();
        w.record(5000.0, 0);
        w.record(10.0, 1_000);
        assert_eq!(w.max(1_000), 5000.0);
        assert_eq!(w.avg(1_000), 2505.0);
        w.record(20.0, 31_000);
        assert_eq!(w.max(59_000), 5000.0, "still inside two windows");
        assert_eq!(w.max(61_000), 20.0, "the spike's sample has gone");
        assert_eq!(w.avg(61_000), 20.0);
        assert!(w.max(200_000).is_nan(), "every sample has gone");
        assert!(w.avg(200_000).is_nan());
    }
}
