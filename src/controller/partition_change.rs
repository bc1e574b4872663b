//! Kafka's PartitionChangeBuilder: from a partition's state and a wanted ISR, replica set and
//! election kind, the PartitionChangeRecord that gets there — completing reassignments whose
//! new replicas are all in the ISR, electing a leader, and forcing a leader-epoch bump when a
//! replica leaves. Nothing is written when nothing changes.

use crate::metadata::image::PartitionImage;
use crate::metadata::records::{PartitionChange, NO_LEADER, NO_LEADER_CHANGE};
use crate::storage::KafkaUuid;

/// How a leader may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// The first replica, if it may lead; else the current leader stays.
    Preferred,
    /// Keep a valid leader, else the first ISR member that may lead.
    Online,
    /// As Online, then any live replica, even outside the ISR (data may be lost).
    Unclean,
}

/// The outcome of an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionResult {
    pub leader: i32,
    pub unclean: bool,
}

pub struct PartitionChangeBuilder<'a> {
    partition: &'a PartitionImage,
    topic_id: KafkaUuid,
    partition_id: i32,
    acceptable: Box<dyn Fn(i32) -> bool + 'a>,
    election: Election,
    target_isr: Vec<i32>,
    target_replicas: Vec<i32>,
    target_removing: Vec<i32>,
    target_adding: Vec<i32>,
}

fn without(v: &[i32], drop: &[i32]) -> Vec<i32> {
    v.iter().copied().filter(|x| !drop.contains(x)).collect()
}

impl<'a> PartitionChangeBuilder<'a> {
    /// `acceptable(r)`: whether broker `r` may lead (registered, unfenced, not shutting down).
    pub fn new(
        partition: &'a PartitionImage,
        topic_id: KafkaUuid,
        partition_id: i32,
        acceptable: impl Fn(i32) -> bool + 'a,
    ) -> Self {
        PartitionChangeBuilder {
            partition,
            topic_id,
            partition_id,
            acceptable: Box::new(acceptable),
            election: Election::Online,
            target_isr: partition.isr.clone(),
            target_replicas: partition.replicas.clone(),
            target_removing: partition.removing_replicas.clone(),
            target_adding: partition.adding_replicas.clone(),
        }
    }

    pub fn election(mut self, e: Election) -> Self {
        self.election = e;
        self
    }

    pub fn target_isr(mut self, isr: Vec<i32>) -> Self {
        self.target_isr = isr;
        self
    }

    pub fn target_replicas(mut self, replicas: Vec<i32>) -> Self {
        self.target_replicas = replicas;
        self
    }

    pub fn target_removing(mut self, removing: Vec<i32>) -> Self {
        self.target_removing = removing;
        self
    }

    pub fn target_adding(mut self, adding: Vec<i32>) -> Self {
        self.target_adding = adding;
        self
    }

    fn valid_leader(&self, r: i32) -> bool {
        self.target_isr.contains(&r) && (self.acceptable)(r)
    }

    /// The election Kafka would hold for this change.
    pub fn elect(&self) -> ElectionResult {
        let current = self.partition.leader;
        let keep = |unclean| ElectionResult {
            leader: current,
            unclean,
        };
        match self.election {
            Election::Preferred => {
                if let Some(&first) = self.target_replicas.first() {
                    if self.valid_leader(first) {
                        return ElectionResult {
                            leader: first,
                            unclean: false,
                        };
                    }
                }
                if current != NO_LEADER && self.valid_leader(current) {
                    return keep(false);
                }
                self.first_valid().unwrap_or(ElectionResult {
                    leader: NO_LEADER,
                    unclean: false,
                })
            }
            Election::Online | Election::Unclean => {
                if current != NO_LEADER && self.valid_leader(current) {
                    return keep(false);
                }
                if let Some(r) = self.first_valid() {
                    return r;
                }
                if self.election == Election::Unclean {
                    if let Some(&r) = self.target_replicas.iter().find(|r| (self.acceptable)(**r)) {
                        return ElectionResult {
                            leader: r,
                            unclean: true,
                        };
                    }
                }
                ElectionResult {
                    leader: NO_LEADER,
                    unclean: false,
                }
            }
        }
    }

    fn first_valid(&self) -> Option<ElectionResult> {
        self.target_replicas
            .iter()
            .copied()
            .find(|r| self.valid_leader(*r))
            .map(|leader| ElectionResult {
                leader,
                unclean: false,
            })
    }

    /// A reassignment is done once the ISR, without the replicas being removed, covers every
    /// replica that stays.
    fn complete_reassignment_if_needed(&mut self) {
        if self.target_removing.is_empty() && self.target_adding.is_empty() {
            return;
        }
        let isr = without(&self.target_isr, &self.target_removing);
        let replicas = without(&self.target_replicas, &self.target_removing);
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_removing.clear();
        self.target_adding.clear();
    }

    /// The record, or `None` when the partition would not change.
    pub fn build(mut self) -> Option<PartitionChange> {
        let p = self.partition;
        let mut rec = PartitionChange {
            partition_id: self.partition_id,
            topic_id: self.topic_id,
            leader: NO_LEADER_CHANGE,
            ..Default::default()
        };
        self.complete_reassignment_if_needed();
        let elected = self.elect();
        if elected.leader != p.leader {
            rec.leader = elected.leader;
            if elected.unclean {
                self.target_isr = vec![elected.leader];
            }
        }
        // A replica leaving the set ends its claim on the leader epoch.
        if rec.leader == NO_LEADER_CHANGE
            && !p.replicas.iter().all(|r| self.target_replicas.contains(r))
        {
            rec.leader = p.leader;
        }
        // Without eligible leader replicas (KIP-966), an ISR never becomes empty: the last
        // member stays listed while the partition has no leader.
        if self.target_isr != p.isr && !self.target_isr.is_empty() {
            rec.isr = Some(self.target_isr.clone());
        }
        if self.target_replicas != p.replicas {
            rec.replicas = Some(self.target_replicas.clone());
        }
        if self.target_removing != p.removing_replicas {
            rec.removing_replicas = Some(self.target_removing.clone());
        }
        if self.target_adding != p.adding_replicas {
            rec.adding_replicas = Some(self.target_adding.clone());
        }
        let changed = rec.leader != NO_LEADER_CHANGE
            || rec.isr.is_some()
            || rec.replicas.is_some()
            || rec.removing_replicas.is_some()
            || rec.adding_replicas.is_some();
        changed.then_some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionImage {
        PartitionImage {
            leader,
            leader_epoch: 3,
            partition_epoch: 7,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            removing_replicas: vec![],
            adding_replicas: vec![],
        }
    }

    fn id() -> KafkaUuid {
        KafkaUuid([5; 16])
    }

    #[test]
    fn fencing_the_leader_elects_the_next_isr_member() {
        let p = part(&[1, 2, 3], &[1, 2, 3], 1);
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |r| r != 1)
            .target_isr(vec![2, 3])
            .build()
            .unwrap();
        assert_eq!((rec.leader, rec.isr), (2, Some(vec![2, 3])));
    }

    #[test]
    fn the_last_isr_member_stays_listed_without_a_leader() {
        let p = part(&[1, 2], &[1], 1);
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |r| r == 2)
            .target_isr(vec![])
            .build()
            .unwrap();
        assert_eq!((rec.leader, rec.isr), (NO_LEADER, None));
        // Unclean: the live replica outside the ISR takes over, alone in the ISR.
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |r| r == 2)
            .target_isr(vec![])
            .election(Election::Unclean)
            .build()
            .unwrap();
        assert_eq!((rec.leader, rec.isr), (2, Some(vec![2])));
    }

    #[test]
    fn preferred_election_moves_to_the_first_replica_or_changes_nothing() {
        let p = part(&[1, 2, 3], &[1, 2, 3], 2);
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |_| true)
            .election(Election::Preferred)
            .build()
            .unwrap();
        assert_eq!(rec.leader, 1);
        // The preferred replica is down: no record (PREFERRED_LEADER_NOT_AVAILABLE).
        assert!(PartitionChangeBuilder::new(&p, id(), 0, |r| r != 1)
            .election(Election::Preferred)
            .build()
            .is_none());
    }

    #[test]
    fn a_reorder_of_the_same_replicas_completes_at_once_without_a_new_leader() {
        let p = part(&[1, 2, 3], &[1, 2, 3], 1);
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |_| true)
            .target_replicas(vec![3, 2, 1])
            .build()
            .unwrap();
        assert_eq!(rec.replicas, Some(vec![3, 2, 1]));
        assert_eq!(rec.leader, NO_LEADER_CHANGE);
    }

    #[test]
    fn a_move_waits_for_the_new_replicas_then_completes() {
        let p = part(&[1, 2], &[1, 2], 1);
        // Move [1, 2] -> [3, 2]: adding 3, removing 1; replicas = target ++ removing.
        let start = PartitionChangeBuilder::new(&p, id(), 0, |_| true)
            .target_replicas(vec![3, 2, 1])
            .target_adding(vec![3])
            .target_removing(vec![1])
            .build()
            .unwrap();
        assert_eq!(start.replicas, Some(vec![3, 2, 1]));
        assert_eq!(start.adding_replicas, Some(vec![3]));
        let mut moving = p.clone();
        moving.merge(&start);
        // 3 joins the ISR: the move completes, 1 leaves, and a new leader is elected.
        let done = PartitionChangeBuilder::new(&moving, id(), 0, |_| true)
            .target_isr(vec![1, 2, 3])
            .build()
            .unwrap();
        assert_eq!(done.replicas, Some(vec![3, 2]));
        assert_eq!(done.isr, Some(vec![2, 3]));
        assert_eq!(done.adding_replicas, Some(vec![]));
        assert_eq!(done.removing_replicas, Some(vec![]));
        assert_eq!(done.leader, 3);
    }

    #[test]
    fn dropping_a_follower_bumps_the_leader_epoch() {
        let p = part(&[1, 2, 3], &[1, 2, 3], 1);
        let rec = PartitionChangeBuilder::new(&p, id(), 0, |_| true)
            .target_replicas(vec![1, 2])
            .target_isr(vec![1, 2])
            .build()
            .unwrap();
        assert_eq!(rec.leader, 1, "the same leader, re-set to move the epoch");
        let mut after = p.clone();
        after.merge(&rec);
        assert_eq!(after.leader_epoch, 4);
    }

    #[test]
    fn nothing_to_change_writes_nothing() {
        let p = part(&[1, 2, 3], &[1, 2, 3], 1);
        assert!(PartitionChangeBuilder::new(&p, id(), 0, |_| true)
            .build()
            .is_none());
    }
}
