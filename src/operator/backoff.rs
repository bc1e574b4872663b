//! When a failed reconcile is tried again: per object, 5 s after the first failure, doubling
//! with each failure in a row up to 5 minutes, and back to 5 s once a reconcile succeeds. One
//! broken object never slows the others, and a lasting failure does not hammer the API server.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

pub struct Backoff {
    /// Failures in a row, by object (`kind/namespace/name`).
    failures: Mutex<HashMap<String, u32>>,
    first: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_secs(5), Duration::from_secs(300))
    }
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            failures: Mutex::new(HashMap::new()),
            first,
            max,
        }
    }

    /// A reconcile of `key` failed: how long until the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let doublings = (*n - 1).min(16);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }

    /// A reconcile of `key` succeeded: its next failure starts from the first delay again.
    pub fn succeeded(&self, key: &str) {
        self.failures.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_per_object_up_to_the_cap_and_reset_on_success() {
        let b = Backoff::default();
        let secs = |d: Duration| d.as_secs();
        let delays: Vec<u64> = (0..9).map(|_| secs(b.failed("KafkaTopic/ns/a"))).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        // Another object starts from the beginning.
        assert_eq!(secs(b.failed("KafkaTopic/ns/b")), 5);
        b.succeeded("KafkaTopic/ns/a");
        assert_eq!(secs(b.failed("KafkaTopic/ns/a")), 5);
        // No overflow however long it fails.
        for _ in 0..100 {
            b.failed("KafkaTopic/ns/c");
        }
        assert_eq!(secs(b.failed("KafkaTopic/ns/c")), 300);
    }
}
