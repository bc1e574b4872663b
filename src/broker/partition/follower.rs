//! The follower's side of replication for one partition: where to fetch from, appending the
//! leader's batches exactly as the leader stored them (offsets, epochs and CRCs unchanged,
//! idempotent-producer state rebuilt from them), the high watermark the leader reports, and
//! truncation where this log and the leader's diverge (KIP-101/279/320: the leader's diverging
//! epoch, compared with this log's own epoch cache).

use super::{Partition, Role};
use crate::storage::epoch::{UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
use crate::storage::log::AppendInfo;
use crate::storage::StorageError;

/// The leader's answer that this log diverged: the largest epoch it has at or below the one
/// the follower last fetched, and where that epoch ends on the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence {
    pub epoch: i32,
    pub end_offset: i64,
}

/// What appending a fetch response did.
#[derive(Debug, Default)]
pub struct FollowerAppend {
    pub info: Option<AppendInfo>,
    pub high_watermark: i64,
}

impl Partition {
    /// `(log end offset, epoch of the last batch)`: the next fetch's offset and
    /// `last_fetched_epoch`.
    pub fn fetch_position(&self) -> (i64, i32) {
        let l = self.log.lock();
        (
            l.log_end_offset(),
            l.epoch_cache().latest_epoch().unwrap_or(UNDEFINED_EPOCH),
        )
    }

    /// Appends batches fetched from the leader at `leader_epoch`, then takes the leader's high
    /// watermark (up to this log's end) and log start. Nothing is written if this replica no
    /// longer follows that epoch.
    pub fn append_as_follower(
        &self,
        leader_epoch: i32,
        records: &[u8],
        leader_hw: i64,
        leader_log_start: i64,
    ) -> Result<FollowerAppend, StorageError> {
        let st = self.state.read();
        if st.role != Role::Follower || st.leader_epoch != leader_epoch {
            return Ok(FollowerAppend::default());
        }
        let mut l = self.log.lock();
        let mut out = FollowerAppend::default();
        if !records.is_empty() {
            let mut psm = self.producers.lock();
            let active_before = l.segments().last().map(|s| s.base_offset());
            let info = l.append_as_follower(records)?;
            if l.segments().last().map(|s| s.base_offset()) != active_before {
                if let Err(e) = psm.take_snapshot(info.first_offset) {
                    tracing::warn!(partition = %self.tp, error = %e, "cannot write a producer snapshot");
                }
            }
            for h in super::headers(records) {
                psm.record(&h);
            }
            self.uncommitted
                .lock()
                .appended(info.last_offset + 1, info.valid_bytes as i64);
            out.info = Some(info);
        }
        if leader_log_start > l.log_start_offset() && leader_log_start <= l.log_end_offset() {
            l.delete_records_before(leader_log_start)?;
        }
        let leo = l.log_end_offset();
        let hw = leader_hw.min(leo).max(l.high_watermark());
        out.high_watermark = l.update_high_watermark(hw);
        self.leader_high_watermark
            .store(leader_hw, std::sync::atomic::Ordering::Release);
        Ok(out)
    }

    /// Truncates after the leader reported a divergence. Returns the new log end, and whether
    /// the truncation is complete (otherwise the next fetch, with this log's new last epoch,
    /// narrows it further). Kafka's getOffsetTruncationState.
    pub fn truncate_to_divergence(
        &self,
        leader_epoch: i32,
        d: Divergence,
    ) -> Result<(i64, bool), StorageError> {
        let st = self.state.read();
        let mut l = self.log.lock();
        let leo = l.log_end_offset();
        if st.role != Role::Follower || st.leader_epoch != leader_epoch {
            return Ok((leo, true));
        }
        let (target, complete) =
            if d.end_offset == UNDEFINED_EPOCH_OFFSET || d.epoch == UNDEFINED_EPOCH {
                // The leader knows no epoch at or below ours: keep what is committed.
                (l.high_watermark().min(leo), true)
            } else {
                let (ours, our_end) = l.epoch_cache().end_offset_for(d.epoch, leo);
                if ours == UNDEFINED_EPOCH || our_end == UNDEFINED_EPOCH_OFFSET {
                    (d.end_offset.min(leo), true)
                } else if ours != d.epoch {
                    (our_end.min(leo), false)
                } else {
                    (d.end_offset.min(our_end).min(leo), true)
                }
            };
        if target < leo {
            if target < l.high_watermark() {
                // Only after an unclean election: records this replica knew as committed go.
                tracing::warn!(
                    partition = %self.tp,
                    from = leo,
                    to = target,
                    high_watermark = l.high_watermark(),
                    leader_epoch,
                    diverging_epoch = d.epoch,
                    "truncating below the high watermark: the leader was elected uncleanly and lacks committed records"
                );
            } else {
                tracing::warn!(
                    partition = %self.tp,
                    from = leo,
                    to = target,
                    leader_epoch,
                    diverging_epoch = d.epoch,
                    "truncating: this log diverged from the leader's (records the leader never committed)"
                );
            }
        }
        // Also when no record goes: epochs this log names past `target` (one it led without
        // writing a batch) would make the next fetch report the same divergence again.
        if l.truncate_to(target)? {
            self.reload_producer_state(&l)?;
        }
        self.uncommitted.lock().truncate(l.log_end_offset());
        Ok((l.log_end_offset(), complete))
    }

    /// The leader no longer has what this replica asked for (OFFSET_OUT_OF_RANGE): past the
    /// leader's end, truncate to it; before the leader's start, start over there.
    pub fn reset_to_leader_range(
        &self,
        leader_epoch: i32,
        leader_log_start: i64,
        leader_log_end: i64,
    ) -> Result<i64, StorageError> {
        let st = self.state.read();
        let mut l = self.log.lock();
        if st.role != Role::Follower || st.leader_epoch != leader_epoch {
            return Ok(l.log_end_offset());
        }
        let leo = l.log_end_offset();
        if leader_log_end >= 0 && leo > leader_log_end {
            tracing::warn!(
                partition = %self.tp,
                from = leo,
                to = leader_log_end,
                "truncating to the leader's log end"
            );
            l.truncate_to(leader_log_end)?;
        } else if leader_log_start > leo {
            tracing::info!(
                partition = %self.tp,
                start = leader_log_start,
                "this log ends before the leader's starts: starting again at the leader's start"
            );
            l.truncate_fully_and_start_at(leader_log_start)?;
        }
        self.reload_producer_state(&l)?;
        self.uncommitted.lock().truncate(l.log_end_offset());
        Ok(l.log_end_offset())
    }

    fn reload_producer_state(&self, l: &crate::storage::log::Log) -> Result<(), StorageError> {
        *self.producers.lock() = super::ProducerStateManager::load(l)?;
        Ok(())
    }

    /// The leader's side of a fetch's divergence check (KIP-320): `None` when this log has
    /// `last_fetched_epoch` ending at or after `fetch_offset`.
    pub fn diverging_epoch(
        &self,
        fetch_offset: i64,
        last_fetched_epoch: i32,
    ) -> Option<Divergence> {
        if last_fetched_epoch < 0 {
            return None;
        }
        let l = self.log.lock();
        let (epoch, end) = l
            .epoch_cache()
            .end_offset_for(last_fetched_epoch, l.log_end_offset());
        if epoch != last_fetched_epoch || end < fetch_offset {
            Some(Divergence {
                epoch,
                end_offset: end,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::config::LogConfig;
    use crate::metadata::image::PartitionImage;
    use crate::storage::batch::build_batch;
    use crate::storage::log::{LoadParams, Log};
    use crate::storage::{KafkaUuid, TopicPartition};

    /// Replicas [1, 0], both in the ISR, led by `leader` at `epoch`.
    fn image(leader: i32, epoch: i32) -> PartitionImage {
        PartitionImage {
            leader,
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: vec![1, 0],
            isr: vec![1, 0],
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
        }
    }

    fn replica(dir: &Path, local: i32, img: &PartitionImage) -> Partition {
        let tp = TopicPartition::new("orders", 3);
        let log = Log::open(dir, tp.clone(), LogConfig::default(), LoadParams::default())
            .expect("log opens");
        let log = Arc::new(parking_lot::Mutex::new(log));
        Partition::open(tp, KafkaUuid([7; 16]), log, img, local).expect("partition opens")
    }

    /// What the follower's next fetch would be told: the fetcher asks at its fetch position.
    fn next_fetch(leader: &Partition, follower: &Partition) -> Option<Divergence> {
        let (offset, epoch) = follower.fetch_position();
        leader.diverging_epoch(offset, epoch)
    }

    /// The shape a roll leaves: broker 0 led epoch 2 without a batch being written, then
    /// leadership went back to broker 1 (epoch 3), which never had epoch 2. Broker 0's epoch
    /// cache still starts epoch 2 at its log end.
    #[test]
    fn a_follower_that_led_an_epoch_without_records_stops_diverging_after_one_truncation() {
        let (d1, d0) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let b1 = replica(d1.path(), 1, &image(1, 1));
        let b0 = replica(d0.path(), 0, &image(1, 1));
        let mut batch = build_batch(&[(None, Some(b"a")), (None, Some(b"b"))], 1000);
        b1.append_as_leader(&mut batch, 1).expect("leader append");
        b0.append_as_follower(1, &batch, 2, 0)
            .expect("follower append");
        // Broker 1 shuts down: broker 0 leads epoch 2, and nothing is produced.
        b0.apply(&image(0, 2), 0).unwrap();
        b1.apply(&image(0, 2), 1).unwrap();
        // The preferred election: broker 1 leads again at epoch 3.
        b1.apply(&image(1, 3), 1).unwrap();
        b0.apply(&image(1, 3), 0).unwrap();
        assert_eq!(
            b0.fetch_position(),
            (2, 2),
            "broker 0 names the epoch it led"
        );

        let d = next_fetch(&b1, &b0).expect("the leader never had epoch 2: a divergence");
        assert_eq!(
            d,
            Divergence {
                epoch: 1,
                end_offset: 2
            }
        );
        let (end, complete) = b0.truncate_to_divergence(3, d).unwrap();
        assert_eq!((end, complete), (2, true), "no record goes");
        assert_eq!(
            next_fetch(&b1, &b0),
            None,
            "the same question again would be a follower spinning on one divergence"
        );
        assert_eq!(b0.fetch_position(), (2, 1));
    }
}
