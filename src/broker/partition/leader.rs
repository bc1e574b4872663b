//! The leader's side of replication for one partition (Kafka's Partition.scala): each
//! follower's fetch position, the high watermark (the smallest log end over the ISR), and ISR
//! changes: a follower that catches up is proposed for the ISR (maybeExpandIsr), one that stays
//! behind for `replica.lag.time.max.ms` is proposed for removal (maybeShrinkIsr). A proposal is
//! sent to the controller as AlterPartition; until it answers, no other proposal is made and the
//! high watermark counts the larger of the two ISRs.

use std::collections::{BTreeSet, HashMap};

use super::{Partition, ReplicaState, Role};
use crate::protocol::errors;

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy)]
struct FollowerProgress {
    /// The offset the follower asked for last (its log end), -1 before its first fetch.
    log_end_offset: i64,
    /// When the follower last had everything the leader had (Kafka's lastCaughtUpTimeMs).
    last_caught_up_ms: i64,
    /// The leader's log end and the time at the follower's previous fetch.
    last_fetch_leader_leo: i64,
    last_fetch_ms: i64,
    /// The broker epoch the follower fetched with (KIP-903), -1 if it did not say.
    broker_epoch: i64,
}

/// The leader's replication state; empty while following.
#[derive(Debug, Default)]
pub(super) struct LeaderState {
    followers: HashMap<i32, FollowerProgress>,
    /// The ISR an AlterPartition in flight asks for.
    pending: Option<Vec<i32>>,
}

impl LeaderState {
    /// A new leader epoch: followers' positions are unknown; ISR members count as caught up
    /// now, so none is removed before it had `replica.lag.time.max.ms` to fetch.
    pub(super) fn reset(&mut self, local: i32, replicas: &[i32], isr: &[i32], now: i64) {
        self.followers = replicas
            .iter()
            .filter(|r| **r != local)
            .map(|r| {
                let caught_up = if isr.contains(r) { now } else { 0 };
                (
                    *r,
                    FollowerProgress {
                        log_end_offset: -1,
                        last_caught_up_ms: caught_up,
                        last_fetch_leader_leo: -1,
                        last_fetch_ms: 0,
                        broker_epoch: -1,
                    },
                )
            })
            .collect();
        self.pending = None;
    }

    /// The controller committed an ISR change: no proposal is in flight any more, and the
    /// follower set follows the replicas (a reassignment may have changed them).
    pub(super) fn isr_committed(&mut self, replicas: &[i32]) {
        self.pending = None;
        self.followers.retain(|r, _| replicas.contains(r));
        for r in replicas {
            self.followers.entry(*r).or_insert(FollowerProgress {
                log_end_offset: -1,
                last_caught_up_ms: 0,
                last_fetch_leader_leo: -1,
                last_fetch_ms: 0,
                broker_epoch: -1,
            });
        }
    }

    /// The ISR the high watermark must wait for: the committed one and a pending one together.
    fn maximal_isr(&self, isr: &[i32]) -> BTreeSet<i32> {
        let mut all: BTreeSet<i32> = isr.iter().copied().collect();
        if let Some(p) = &self.pending {
            all.extend(p.iter().copied());
        }
        all
    }
}

/// An ISR change for the controller (AlterPartition), at the epochs it was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// `(broker id, broker epoch)`; the epoch is -1 where the leader does not know it.
    pub new_isr: Vec<(i32, i64)>,
}

/// What a follower's fetch changed on the leader.
#[derive(Debug, Default)]
pub struct FollowerFetch {
    /// The new high watermark, if it moved.
    pub high_watermark: Option<i64>,
    /// The follower caught up: an ISR with it, for the controller.
    pub expand: Option<IsrProposal>,
}

impl Partition {
    /// Moves the high watermark to the smallest log end over the (maximal) ISR; never back.
    /// Returns it if it moved.
    pub(super) fn increment_high_watermark(
        &self,
        st: &ReplicaState,
        leader: &mut LeaderState,
    ) -> Option<i64> {
        if st.role != Role::Leader {
            return None;
        }
        let mut l = self.log.lock();
        let mut hw = l.log_end_offset();
        for r in leader.maximal_isr(&st.isr) {
            if r == self.local {
                continue;
            }
            let leo = leader.followers.get(&r).map_or(-1, |f| f.log_end_offset);
            hw = hw.min(leo);
        }
        if hw <= l.high_watermark() {
            return None;
        }
        Some(l.update_high_watermark(hw))
    }

    /// A follower fetched from `fetch_offset` (its log end): records its progress, proposes it
    /// for the ISR if it caught up and `eligible` says its broker may join, and moves the high
    /// watermark. Kafka's updateFollowerFetchState + maybeExpandIsr.
    pub fn update_follower_fetch_state(
        &self,
        replica: i32,
        fetch_offset: i64,
        broker_epoch: i64,
        now: i64,
        eligible: impl Fn(i32) -> bool,
    ) -> FollowerFetch {
        let st = self.state.read();
        if st.role != Role::Leader {
            return FollowerFetch::default();
        }
        let mut leader = self.leader.lock();
        let (leo, hw, epoch_start) = {
            let l = self.log.lock();
            let start = l
                .epoch_cache()
                .entries()
                .iter()
                .find(|(e, _)| *e == st.leader_epoch)
                .map_or(l.log_end_offset(), |(_, o)| *o);
            (l.log_end_offset(), l.high_watermark(), start)
        };
        let Some(f) = leader.followers.get_mut(&replica) else {
            return FollowerFetch::default();
        };
        if fetch_offset >= leo {
            f.last_caught_up_ms = now;
        } else if f.last_fetch_leader_leo >= 0 && fetch_offset >= f.last_fetch_leader_leo {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = fetch_offset;
        f.last_fetch_leader_leo = leo;
        f.last_fetch_ms = now;
        if broker_epoch >= 0 {
            f.broker_epoch = broker_epoch;
        }
        let mut out = FollowerFetch::default();
        let joins = !st.isr.contains(&replica)
            && leader.pending.is_none()
            && fetch_offset >= hw
            && fetch_offset >= epoch_start
            && eligible(replica);
        if joins {
            let mut isr = st.isr.clone();
            isr.push(replica);
            out.expand = Some(self.propose(&st, &mut leader, isr));
        }
        out.high_watermark = self.increment_high_watermark(&st, &mut leader);
        out
    }

    /// Followers of the ISR that have not caught up for `lag_ms`: a smaller ISR for the
    /// controller. Kafka's maybeShrinkIsr.
    pub fn maybe_shrink_isr(&self, now: i64, lag_ms: i64) -> Option<IsrProposal> {
        let st = self.state.read();
        if st.role != Role::Leader {
            return None;
        }
        let mut leader = self.leader.lock();
        if leader.pending.is_some() {
            return None;
        }
        let lagging: Vec<i32> = st
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.local)
            .filter(|r| {
                leader
                    .followers
                    .get(r)
                    .is_none_or(|f| now - f.last_caught_up_ms > lag_ms)
            })
            .collect();
        if lagging.is_empty() {
            return None;
        }
        tracing::info!(
            partition = %self.tp,
            isr = ?st.isr,
            out_of_sync = ?lagging,
            "shrinking the ISR: followers behind for more than replica.lag.time.max.ms"
        );
        let isr: Vec<i32> = st
            .isr
            .iter()
            .copied()
            .filter(|r| !lagging.contains(r))
            .collect();
        Some(self.propose(&st, &mut leader, isr))
    }

    fn propose(&self, st: &ReplicaState, leader: &mut LeaderState, isr: Vec<i32>) -> IsrProposal {
        leader.pending = Some(isr.clone());
        IsrProposal {
            leader_epoch: st.leader_epoch,
            partition_epoch: st.partition_epoch,
            new_isr: isr
                .iter()
                .map(|r| (*r, leader.followers.get(r).map_or(-1, |f| f.broker_epoch)))
                .collect(),
        }
    }

    /// The controller's answer to a proposal made at `leader_epoch`: the committed ISR and
    /// partition epoch, or `None` when it refused (the next metadata image says what holds).
    /// Returns the high watermark if the new ISR moved it.
    pub fn on_isr_change_answer(
        &self,
        leader_epoch: i32,
        committed: Option<(i32, Vec<i32>)>,
    ) -> Option<i64> {
        let mut st = self.state.write();
        if st.role != Role::Leader || st.leader_epoch != leader_epoch {
            return None;
        }
        let mut leader = self.leader.lock();
        leader.pending = None;
        if let Some((partition_epoch, isr)) = committed {
            if partition_epoch > st.partition_epoch {
                st.partition_epoch = partition_epoch;
                st.isr = isr;
            }
        }
        self.increment_high_watermark(&st, &mut leader)
    }

    /// After a metadata change: the high watermark, if the ISR it carried moved it.
    pub fn maybe_increment_high_watermark(&self) -> Option<i64> {
        let st = self.state.read();
        let mut leader = self.leader.lock();
        self.increment_high_watermark(&st, &mut leader)
    }

    /// Whether an acks=all append whose high watermark must reach `required` is done (Kafka's
    /// checkEnoughReplicasReachOffset): `None` while it has not; NOT_LEADER_OR_FOLLOWER once
    /// this replica no longer leads (a new epoch with this broker still the leader keeps the
    /// log, so the append still counts); NOT_ENOUGH_REPLICAS_AFTER_APPEND when it got there with
    /// the ISR below `min.insync.replicas`; NONE otherwise. Produce and the group coordinator's
    /// writes both complete through this one check.
    pub fn check_enough_replicas_reach_offset(&self, required: i64) -> Option<i16> {
        let st = self.state.read();
        if st.role != Role::Leader {
            return Some(errors::NOT_LEADER_OR_FOLLOWER);
        }
        let isr = self.leader.lock().maximal_isr(&st.isr).len();
        let l = self.log.lock();
        if l.high_watermark() < required {
            return None;
        }
        let min_isr = l.config().min_insync_replicas.max(1) as usize;
        Some(if isr < min_isr {
            errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        } else {
            errors::NONE
        })
    }

    /// `(replica, log end offset)` of each follower the leader has heard from.
    pub fn follower_positions(&self) -> Vec<(i32, i64)> {
        self.leader
            .lock()
            .followers
            .iter()
            .map(|(r, f)| (*r, f.log_end_offset))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_expansion_counts_toward_the_maximal_isr() {
        let mut s = LeaderState::default();
        s.reset(1, &[1, 2, 3], &[1, 2], 1000);
        assert_eq!(
            s.maximal_isr(&[1, 2]).into_iter().collect::<Vec<_>>(),
            [1, 2]
        );
        s.pending = Some(vec![1, 2, 3]);
        assert_eq!(
            s.maximal_isr(&[1, 2]).into_iter().collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // A shrink in flight keeps waiting for the larger, committed ISR.
        s.pending = Some(vec![1]);
        assert_eq!(
            s.maximal_isr(&[1, 2]).into_iter().collect::<Vec<_>>(),
            [1, 2]
        );
    }
}
