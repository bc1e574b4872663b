//! A replication throttle (Kafka's ReplicationQuotaManager): the bytes of throttled replicas
//! moved per second, measured over the last few one-second windows, against a rate that the
//! dynamic broker configs `leader.replication.throttled.rate` / `follower.replication.throttled.rate`
//! set. When the rate is exceeded, throttled partitions are left out of fetches until it drops.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// Windows the rate is measured over (Kafka: 11 samples of 1 s).
const WINDOWS: usize = 11;

pub struct Throttle {
    /// Bytes per second; `i64::MAX` is unlimited.
    rate: AtomicI64,
    windows: Mutex<Windows>,
}

struct Windows {
    start: Instant,
    /// Bytes per one-second window, indexed by second since `start`, modulo WINDOWS.
    bytes: [i64; WINDOWS],
    /// The second each slot holds.
    second: [u64; WINDOWS],
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            rate: AtomicI64::new(i64::MAX),
            windows: Mutex::new(Windows {
                start: Instant::now(),
                bytes: [0; WINDOWS],
                second: [u64::MAX; WINDOWS],
            }),
        }
    }
}

impl Throttle {
    pub fn set_rate(&self, bytes_per_second: Option<i64>) {
        self.rate.store(
            bytes_per_second.filter(|r| *r >= 0).unwrap_or(i64::MAX),
            Ordering::Release,
        );
    }

    pub fn rate(&self) -> Option<i64> {
        let r = self.rate.load(Ordering::Acquire);
        (r != i64::MAX).then_some(r)
    }

    /// Counts `n` bytes of throttled replication now.
    pub fn record(&self, n: i64) {
        if n <= 0 {
            return;
        }
        let mut w = self.windows.lock();
        let sec = w.start.elapsed().as_secs();
        let slot = (sec % WINDOWS as u64) as usize;
        if w.second[slot] != sec {
            w.second[slot] = sec;
            w.bytes[slot] = 0;
        }
        w.bytes[slot] += n;
    }

    /// Whether throttled replication is above the rate over the windows measured so far.
    pub fn is_exceeded(&self) -> bool {
        let rate = self.rate.load(Ordering::Acquire);
        if rate == i64::MAX {
            return false;
        }
        let w = self.windows.lock();
        let elapsed = w.start.elapsed().as_secs_f64();
        let now_sec = elapsed as u64;
        let oldest = now_sec.saturating_sub(WINDOWS as u64 - 1);
        let total: i64 = (0..WINDOWS)
            .filter(|i| w.second[*i] != u64::MAX && w.second[*i] >= oldest)
            .map(|i| w.bytes[i])
            .sum();
        // The measured span: whole windows behind us and the part of the current one.
        let span = (elapsed - oldest as f64).clamp(1.0, WINDOWS as f64);
        total as f64 / span > rate as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_is_exceeded_only_above_its_rate() {
        let t = Throttle::default();
        t.record(1 << 30);
        assert!(!t.is_exceeded(), "no rate, no throttle");
        t.set_rate(Some(10_000_000));
        assert!(t.is_exceeded(), "1 GiB in under a second is over 10 MB/s");
        let t = Throttle::default();
        t.set_rate(Some(10_000_000));
        t.record(5_000_000);
        assert!(!t.is_exceeded());
        t.set_rate(None);
        assert_eq!(t.rate(), None);
    }
}
