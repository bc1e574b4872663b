//! Kafka's `max.connection.creation.rate` (KIP-612): at most so many new connections a second,
//! broker-wide or on one listener. Over the rate the listener waits before it accepts the next
//! connection (Kafka's acceptor throttles, it does not refuse); a second's worth may come at once.
//! The token bucket is shared with the per-address `connection_creation_rate` quota.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A token bucket: `rate` tokens a second, holding at most `rate`.
#[derive(Debug)]
pub struct CreationRate {
    rate: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl CreationRate {
    /// `None` for an unlimited rate (Kafka's default, Int.MaxValue).
    pub fn new(per_second: u32) -> Option<CreationRate> {
        (per_second < i32::MAX as u32).then(|| CreationRate {
            rate: per_second.max(1) as f64,
            bucket: Mutex::new((per_second.max(1) as f64, Instant::now())),
        })
    }

    /// Takes a token now, or says how long until one is there (taking it then).
    fn take(&self, now: Instant) -> Duration {
        take_token(&mut self.bucket.lock(), self.rate, now)
    }

    /// Waits until one more connection may be created.
    pub async fn acquire(&self) {
        let wait = self.take(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// One token from a bucket of `(tokens, last refill)` that gains `rate` tokens a second and
/// holds at most `rate`: zero when one was there, else how long until it is (taken then).
pub fn take_token(bucket: &mut (f64, Instant), rate: f64, now: Instant) -> Duration {
    let refill = now.saturating_duration_since(bucket.1).as_secs_f64() * rate;
    bucket.0 = (bucket.0 + refill).min(rate);
    bucket.1 = now;
    bucket.0 -= 1.0;
    if bucket.0 >= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64((-bucket.0 / rate).min(3600.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seconds_worth_comes_at_once_then_one_per_interval() {
        let r = CreationRate::new(4).unwrap();
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(r.take(t0), Duration::ZERO);
        }
        let wait = r.take(t0);
        assert!((wait.as_secs_f64() - 0.25).abs() < 1e-6, "{wait:?}");
        let wait = r.take(t0);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        // Two seconds later the bucket is full again, never fuller.
        let later = t0 + Duration::from_secs(2);
        for _ in 0..4 {
            assert_eq!(r.take(later), Duration::ZERO);
        }
        assert!(!r.take(later).is_zero());
    }

    #[test]
    fn kafkas_default_is_no_limit() {
        assert!(CreationRate::new(i32::MAX as u32).is_none());
    }
}
