//! The idempotent producer's bookkeeping (the part of Java's TransactionManager it needs): the
//! producer id and epoch, each partition's next sequence number, and the sequences in flight.
//!
//! A batch takes its sequence when first drained and keeps it for every retry, so the leader
//! can drop a retried duplicate. When a sequenced batch is lost for good (it failed or expired)
//! the partition's sequence has a gap the leader would refuse: the producer then asks for a new
//! producer id, and batches still queued are sequenced afresh under it.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;

use super::batch::{BatchSequence, ProducerBatch};

/// The producer id and epoch from InitProducerId.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

type Tp = (String, i32);

#[derive(Default)]
struct Inner {
    current: Option<ProducerIdAndEpoch>,
    next_sequence: HashMap<Tp, i32>,
    /// Base sequences sent under `current` and not yet answered for good, per partition.
    in_flight: HashMap<Tp, BTreeSet<i32>>,
}

/// Shared between the sender and the tasks that handle produce responses.
#[derive(Default)]
pub struct IdempotenceState {
    inner: Mutex<Inner>,
}

impl IdempotenceState {
    pub fn producer_id(&self) -> Option<ProducerIdAndEpoch> {
        self.inner.lock().current
    }

    /// Takes a new producer id: every partition starts again at sequence 0.
    pub fn set_producer_id(&self, pid: ProducerIdAndEpoch) {
        let mut s = self.inner.lock();
        s.current = Some(pid);
        s.next_sequence.clear();
        s.in_flight.clear();
    }

    /// Forgets the producer id (a sequenced batch was lost): the sender asks for a new one
    /// before it sends again.
    pub fn reset(&self) {
        let mut s = self.inner.lock();
        s.current = None;
        s.next_sequence.clear();
        s.in_flight.clear();
    }

    /// Gives a drained batch its sequence under the current producer id, unless it already has
    /// one under it (a retry). Returns false without a producer id.
    pub fn sequence(&self, batch: &mut ProducerBatch) -> bool {
        let mut s = self.inner.lock();
        let Some(pid) = s.current else { return false };
        let tp = (batch.topic.clone(), batch.partition);
        let current = batch
            .sequence
            .is_some_and(|q| q.producer_id == pid.producer_id && q.producer_epoch == pid.epoch);
        if !current {
            let next = s.next_sequence.entry(tp.clone()).or_insert(0);
            let base = *next;
            *next = next.wrapping_add(batch.record_count() as i32);
            batch.sequence = Some(BatchSequence {
                producer_id: pid.producer_id,
                producer_epoch: pid.epoch,
                base_sequence: base,
            });
        }
        if let Some(q) = batch.sequence {
            s.in_flight.entry(tp).or_default().insert(q.base_sequence);
        }
        true
    }

    /// The batch's sequence is settled (written, or failed for good).
    pub fn resolved(&self, batch: &ProducerBatch) {
        let Some(q) = batch.sequence else { return };
        let mut s = self.inner.lock();
        if !s
            .current
            .is_some_and(|p| p.producer_id == q.producer_id && p.epoch == q.producer_epoch)
        {
            return;
        }
        let tp = (batch.topic.clone(), batch.partition);
        if let Some(set) = s.in_flight.get_mut(&tp) {
            set.remove(&q.base_sequence);
            if set.is_empty() {
                s.in_flight.remove(&tp);
            }
        }
    }

    /// A batch refused as too large was split (`ProducerBatch::split` handed its sequences on):
    /// in one step its sequence is settled and its parts' are tracked in its place (Java's
    /// `removeInFlightBatch` and `addInFlightBatch`), so that an out-of-order answer for a later
    /// batch always sees them unsettled. Sequences under an older producer id are not tracked;
    /// the parts are then sequenced afresh when drained.
    pub fn split(&self, big: &ProducerBatch, parts: &[ProducerBatch]) {
        let mut s = self.inner.lock();
        let Some(pid) = s.current else { return };
        let current =
            |q: &BatchSequence| q.producer_id == pid.producer_id && q.producer_epoch == pid.epoch;
        let tp = (big.topic.clone(), big.partition);
        let set = s.in_flight.entry(tp.clone()).or_default();
        if let Some(q) = big.sequence.filter(current) {
            set.remove(&q.base_sequence);
        }
        for q in parts.iter().filter_map(|p| p.sequence).filter(current) {
            set.insert(q.base_sequence);
        }
        if set.is_empty() {
            s.in_flight.remove(&tp);
        }
    }

    /// Whether a batch of the same partition with a smaller sequence is still unsettled: then an
    /// OUT_OF_ORDER_SEQUENCE_NUMBER for this one only says its predecessor is being retried.
    pub fn has_earlier_unresolved(&self, batch: &ProducerBatch) -> bool {
        let Some(q) = batch.sequence else {
            return false;
        };
        let s = self.inner.lock();
        s.in_flight
            .get(&(batch.topic.clone(), batch.partition))
            .and_then(|set| set.first())
            .is_some_and(|first| *first < q.base_sequence)
    }

    /// Java's `shouldStopDrainBatchesForPartition`: a batch waits in its queue while it could
    /// overtake a sequenced batch of its partition that is still unsettled — a new batch behind
    /// batches in flight under an older producer id, or a retry that is not the partition's
    /// first unsettled sequence.
    pub fn should_hold(&self, first: &ProducerBatch) -> bool {
        let s = self.inner.lock();
        let Some(pid) = s.current else { return true };
        let tp = (first.topic.clone(), first.partition);
        let in_flight = s.in_flight.get(&tp).and_then(|set| set.first().copied());
        match first.sequence {
            Some(q) if q.producer_id == pid.producer_id && q.producer_epoch == pid.epoch => {
                in_flight.is_some_and(|f| f != q.base_sequence)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::Compression;

    fn batch(partition: i32, records: usize) -> ProducerBatch {
        let mut b = ProducerBatch::new("t", partition, 16384, Compression::None, 1.0, 0);
        for _ in 0..records {
            let r = super::super::ProducerRecord {
                value: Some(bytes::Bytes::from_static(b"v")),
                ..Default::default()
            };
            assert!(b.try_append(r, None).is_ok());
        }
        b
    }

    const PID: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 0,
    };

    #[test]
    fn sequences_count_records_per_partition_and_survive_a_retry() {
        let s = IdempotenceState::default();
        s.set_producer_id(PID);
        let mut a = batch(0, 3);
        let mut b = batch(0, 2);
        let mut c = batch(1, 1);
        assert!(s.sequence(&mut a) && s.sequence(&mut b) && s.sequence(&mut c));
        let base = |x: &ProducerBatch| x.sequence.map(|q| q.base_sequence);
        assert_eq!((base(&a), base(&b), base(&c)), (Some(0), Some(3), Some(0)));
        // A retry keeps its sequence; the next batch continues after both.
        assert!(s.sequence(&mut a));
        assert_eq!(base(&a), Some(0));
        let mut d = batch(0, 1);
        s.sequence(&mut d);
        assert_eq!(base(&d), Some(5));
    }

    #[test]
    fn a_retry_waits_until_it_is_its_partitions_first_unsettled_batch() {
        let s = IdempotenceState::default();
        s.set_producer_id(PID);
        let mut a = batch(0, 1);
        let mut b = batch(0, 1);
        s.sequence(&mut a);
        s.sequence(&mut b);
        // b came back for a retry while a is still in flight: b must not overtake it.
        assert!(s.should_hold(&b));
        assert!(s.has_earlier_unresolved(&b));
        assert!(!s.should_hold(&a));
        s.resolved(&a);
        assert!(!s.should_hold(&b));
        assert!(!s.has_earlier_unresolved(&b));
        // A batch never sent does not wait.
        assert!(!s.should_hold(&batch(0, 1)));
    }

    #[test]
    fn a_new_producer_id_sequences_queued_batches_afresh() {
        let s = IdempotenceState::default();
        s.set_producer_id(PID);
        let mut a = batch(0, 4);
        s.sequence(&mut a);
        s.reset();
        assert!(!s.sequence(&mut a), "no producer id, no sequence");
        assert!(s.should_hold(&a));
        s.set_producer_id(ProducerIdAndEpoch {
            producer_id: 8,
            epoch: 0,
        });
        assert!(s.sequence(&mut a));
        assert_eq!(
            a.sequence,
            Some(BatchSequence {
                producer_id: 8,
                producer_epoch: 0,
                base_sequence: 0
            })
        );
    }

    #[test]
    fn split_parts_take_over_the_refused_batchs_sequences_and_go_one_at_a_time() {
        // SenderTest.testIdempotentSplitBatchAndSend: the next sequence stays where it was, the
        // parts are sent in sequence order, and a later batch's out-of-order answer is retried.
        let s = IdempotenceState::default();
        s.set_producer_id(PID);
        let mut big = ProducerBatch::new("t", 0, 16384, Compression::None, 1.0, 0);
        for _ in 0..2 {
            let r = super::super::ProducerRecord {
                value: Some(bytes::Bytes::from(vec![0; 200])),
                ..Default::default()
            };
            assert!(big.try_append(r, None).is_ok());
        }
        let mut later = batch(0, 1);
        s.sequence(&mut big);
        s.sequence(&mut later);
        // Parts of at most 300 bytes: one 200-byte record each.
        let mut parts = big.split(300, 1.0);
        assert_eq!(parts.len(), 2);
        s.split(&big, &parts);
        let base = |x: &ProducerBatch| x.sequence.map(|q| q.base_sequence);
        assert_eq!((base(&parts[0]), base(&parts[1])), (Some(0), Some(1)));
        assert!(
            s.has_earlier_unresolved(&later),
            "later waits behind the parts"
        );
        assert!(!s.should_hold(&parts[0]));
        assert!(s.should_hold(&parts[1]), "one part at a time, in order");
        // Drained again: a part keeps the sequence it was given.
        assert!(s.sequence(&mut parts[0]));
        assert_eq!(base(&parts[0]), Some(0));
        s.resolved(&parts[0]);
        assert!(!s.should_hold(&parts[1]));
        s.resolved(&parts[1]);
        assert!(!s.has_earlier_unresolved(&later));
        let mut next = batch(0, 1);
        s.sequence(&mut next);
        assert_eq!(base(&next), Some(3), "the split took no new sequences");
    }
}
