//! A consumer group as records of `__consumer_offsets` (what a new coordinator reads back),
//! and the group rebuilt from them.

use std::time::Instant;

use super::super::consumer_records::{
    ConsumerRecordKey as Key, ConsumerRecordValue as Value, CurrentAssignmentValue,
    MemberMetadataValue,
};
use super::{ConsumerGroup, ConsumerMember, MemberState};

impl MemberState {
    /// Kafka's byte for the state.
    fn value(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    fn from_value(v: i8) -> MemberState {
        match v {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

impl ConsumerGroup {
    /// Every record the group is stored as: its epochs, and each member's subscription,
    /// target and current assignment.
    pub fn records(&self, group: &str) -> Vec<(Key, Value)> {
        let g = || group.to_string();
        let mut out = vec![
            (
                Key::Metadata { group: g() },
                Value::Metadata {
                    epoch: self.group_epoch,
                },
            ),
            (
                Key::TargetAssignmentMetadata { group: g() },
                Value::TargetAssignmentMetadata {
                    assignment_epoch: self.assignment_epoch,
                },
            ),
        ];
        for (id, m) in &self.members {
            let member = || id.clone();
            out.push((
                Key::MemberMetadata {
                    group: g(),
                    member: member(),
                },
                Value::MemberMetadata(MemberMetadataValue {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topic_names: m.topic_names.clone(),
                    topic_regex: m.topic_regex.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: m.server_assignor.clone(),
                }),
            ));
            let target = self.target.get(id).cloned().unwrap_or_default();
            out.push((
                Key::TargetAssignmentMember {
                    group: g(),
                    member: member(),
                },
                Value::TargetAssignmentMember(target),
            ));
            out.push((
                Key::CurrentMemberAssignment {
                    group: g(),
                    member: member(),
                },
                Value::CurrentMemberAssignment(CurrentAssignmentValue {
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    state: m.state.value(),
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                }),
            ));
        }
        out
    }

    /// Applies one record read back from the log (`None`: a tombstone). Members start a new
    /// session; `after_load` gives one that was revoking its rebalance timeout anew.
    pub fn replay(&mut self, key: &Key, value: Option<Value>, now: Instant) {
        self.loaded = true;
        match (key, value) {
            (_, Some(Value::Metadata { epoch })) => self.group_epoch = epoch,
            (_, Some(Value::TargetAssignmentMetadata { assignment_epoch })) => {
                self.assignment_epoch = assignment_epoch
            }
            (Key::MemberMetadata { member, .. }, Some(Value::MemberMetadata(v))) => {
                let m = self.member_mut(member, now);
                m.instance_id = v.instance_id;
                m.rack_id = v.rack_id;
                m.client_id = v.client_id;
                m.client_host = v.client_host;
                m.topic_names = v.topic_names;
                m.topic_regex = v.topic_regex;
                m.rebalance_timeout_ms = v.rebalance_timeout_ms;
                m.server_assignor = v.server_assignor;
            }
            (Key::MemberMetadata { member, .. }, None) => {
                self.members.remove(member);
            }
            (
                Key::TargetAssignmentMember { member, .. },
                Some(Value::TargetAssignmentMember(a)),
            ) => {
                self.target.insert(member.clone(), a);
            }
            (Key::TargetAssignmentMember { member, .. }, None) => {
                self.target.remove(member);
            }
            (
                Key::CurrentMemberAssignment { member, .. },
                Some(Value::CurrentMemberAssignment(c)),
            ) => {
                let m = self.member_mut(member, now);
                m.member_epoch = c.member_epoch;
                m.previous_member_epoch = c.previous_member_epoch;
                m.state = MemberState::from_value(c.state);
                m.assigned = c.assigned;
                m.pending_revocation = c.pending_revocation;
                // Armed by `after_load`, once the member's timeout is read too.
                m.revocation_deadline = None;
            }
            _ => {}
        }
    }

    fn member_mut(&mut self, id: &str, now: Instant) -> &mut ConsumerMember {
        self.members
            .entry(id.to_string())
            .or_insert_with(|| ConsumerMember::new(id, now))
    }
}
