//! Batches sent and not yet answered, per partition in the order they were sent (Java's
//! `Sender.inFlightBatches`). The sender expires those past `delivery.timeout.ms` while their
//! request is still out (`expired`); the task that waits for the request's answer takes each
//! batch back (`take`), and finds none for a batch that expired meanwhile: a late answer for an
//! expired batch changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::batch::ProducerBatch;

/// One batch in flight. The batch is taken out exactly once: by the answer or by expiry.
pub struct InFlightBatch {
    pub topic: String,
    pub partition: i32,
    created_ms: i64,
    batch: Mutex<Option<ProducerBatch>>,
}

type Tp = (String, i32);

#[derive(Default)]
pub struct InFlightBatches {
    by_partition: Mutex<HashMap<Tp, Vec<Arc<InFlightBatch>>>>,
}

impl InFlightBatches {
    /// Java's `addToInflightBatches`: `batch` is about to be sent.
    pub fn add(&self, batch: ProducerBatch) -> Arc<InFlightBatch> {
        let slot = Arc::new(InFlightBatch {
            topic: batch.topic.clone(),
            partition: batch.partition,
            created_ms: batch.created_ms,
            batch: Mutex::new(Some(batch)),
        });
        let tp = (slot.topic.clone(), slot.partition);
        self.by_partition
            .lock()
            .entry(tp)
            .or_default()
            .push(slot.clone());
        slot
    }

    /// The answer (or the loss of the connection) came for `slot`: its batch, unless it expired.
    pub fn take(&self, slot: &Arc<InFlightBatch>) -> Option<ProducerBatch> {
        let batch = slot.batch.lock().take();
        let tp = (slot.topic.clone(), slot.partition);
        let mut map = self.by_partition.lock();
        if let Some(list) = map.get_mut(&tp) {
            list.retain(|s| !Arc::ptr_eq(s, slot));
            if list.is_empty() {
                map.remove(&tp);
            }
        }
        batch
    }

    /// Java's `getExpiredInflightBatches`: per partition, the batches from the first sent on
    /// whose delivery timeout has passed, up to the first that has time left. They leave the
    /// registry; their answers, when they come, are ignored.
    pub fn expired(&self, now_ms: i64, delivery_timeout_ms: i64) -> Vec<ProducerBatch> {
        let mut out = Vec::new();
        let mut map = self.by_partition.lock();
        map.retain(|_, list| {
            let past = list
                .iter()
                .take_while(|s| delivery_timeout_ms <= now_ms - s.created_ms)
                .count();
            for slot in list.drain(..past) {
                // None: its answer is being handled right now.
                if let Some(b) = slot.batch.lock().take() {
                    out.push(b);
                }
            }
            !list.is_empty()
        });
        out
    }

    /// Batches of `topic`-`partition` in flight.
    pub fn count(&self, topic: &str, partition: i32) -> usize {
        self.by_partition
            .lock()
            .get(&(topic.to_string(), partition))
            .map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::Compression;

    fn batch(partition: i32, created_ms: i64) -> ProducerBatch {
        ProducerBatch::new("t", partition, 100, Compression::None, 1.0, created_ms)
    }

    #[test]
    fn in_flight_batches_expire_on_delivery_timeout_and_their_late_answer_finds_nothing() {
        // SenderTest.testInflightBatchesExpireOnDeliveryTimeout / testExpiredBatchDoesNotRetry.
        let f = InFlightBatches::default();
        let sent = f.add(batch(0, 0));
        assert_eq!(f.count("t", 0), 1);
        assert!(f.expired(1_499, 1_500).is_empty(), "time left");
        let expired = f.expired(1_500, 1_500);
        assert_eq!(expired.len(), 1);
        assert_eq!(f.count("t", 0), 0);
        assert!(f.take(&sent).is_none(), "the late answer is ignored");
    }

    #[test]
    fn expiry_stops_at_a_partitions_first_batch_with_time_left() {
        // Sender.getExpiredInflightBatches walks each partition in send order.
        let f = InFlightBatches::default();
        let _old = f.add(batch(0, 0));
        let young = f.add(batch(0, 900));
        let _older_behind = f.add(batch(0, 100));
        let other = f.add(batch(1, 0));
        let expired = f.expired(1_000, 1_000);
        let got: Vec<(i32, i64)> = expired
            .iter()
            .map(|b| (b.partition, b.created_ms))
            .collect();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&(0, 0)) && got.contains(&(1, 0)), "{got:?}");
        assert_eq!(
            f.count("t", 0),
            2,
            "the batch behind one with time left waits"
        );
        assert!(f.take(&other).is_none());
        assert_eq!(f.take(&young).map(|b| b.created_ms), Some(900));
        assert_eq!(f.count("t", 0), 1);
    }

    #[test]
    fn an_answered_batch_is_never_expired() {
        let f = InFlightBatches::default();
        let sent = f.add(batch(0, 0));
        assert!(f.take(&sent).is_some());
        assert!(f.expired(10_000, 1_000).is_empty());
        assert_eq!(f.count("t", 0), 0);
    }
}
