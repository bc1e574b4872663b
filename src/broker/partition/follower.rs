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

    /// Whether this replica follows `leader_epoch` (a fetch response for an older epoch, or
    /// one that arrives after this broker became leader, is dropped).
    pub fn follows(&self, leader_epoch: i32) -> bool {
        let st = self.state.read();
        st.role == Role::Follower && st.leader_epoch == leader_epoch
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
            l.truncate_to(target)?;
            self.reload_producer_state(&l)?;
        }
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
