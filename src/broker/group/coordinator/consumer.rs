//! The coordinator's door to consumer groups (KIP-848): which group a ConsumerGroupHeartbeat
//! reaches (a new one, an empty classic group converted, or a refusal), their expiry, and
//! the member checks of offset commits and fetches.

use std::time::Instant;

use super::super::consumer_group::{
    ConsumerGroup, ConsumerSettings, Heartbeat, HeartbeatAnswer, Refused, TopicsView,
};
use super::{codes, CommitCheck, Coordinator, Group, GroupState};

impl Group {
    /// Whether the group speaks the consumer protocol (KIP-848) rather than the classic one.
    pub fn is_consumer_group(&self) -> bool {
        self.consumer.is_some()
    }

    /// `consumer` or `classic`, as ListGroups' GroupType says.
    pub fn type_name(&self) -> &'static str {
        if self.is_consumer_group() {
            "consumer"
        } else {
            "classic"
        }
    }

    /// The state Kafka's tools print, for either kind of group.
    pub fn state_name(&self) -> &'static str {
        match &self.consumer {
            Some(c) => c.state_name(),
            None => self.state.name(),
        }
    }

    /// No member of either protocol, none joining.
    pub fn is_empty(&self) -> bool {
        match &self.consumer {
            Some(c) => c.members.is_empty(),
            None => self.state == GroupState::Empty && self.members.is_empty(),
        }
    }

    /// Whether a consumer-protocol member subscribes to `topic`.
    pub(super) fn consumer_subscribes_to(&self, topic: &str) -> bool {
        self.consumer
            .as_ref()
            .is_some_and(|c| c.members.values().any(|m| m.subscribed().contains(topic)))
    }

    /// The consumer group a heartbeat reaches: this one, or this group converted when it is an
    /// empty classic group and the member joins (offsets kept). A classic group with members
    /// is not converted online.
    fn consumer_group_for(&mut self, epoch: i32) -> Result<&mut ConsumerGroup, Refused> {
        if self.consumer.is_none() {
            if !self.is_empty() || !self.pending.is_empty() {
                let message = if epoch == 0 {
                    format!(
                        "Cannot upgrade classic group {} to consumer group because online \
                         upgrade is disabled.",
                        self.id
                    )
                } else {
                    format!("Group {} is not a consumer group.", self.id)
                };
                return Err(Refused {
                    code: codes::GROUP_ID_NOT_FOUND,
                    message,
                });
            }
            if epoch != 0 {
                // Membership lives in the coordinator's memory: after a move, members are
                // told to rejoin.
                return Err(Refused {
                    code: codes::UNKNOWN_MEMBER_ID,
                    message: format!("Consumer group {} not found.", self.id),
                });
            }
            self.protocol_type = Some("consumer".to_string());
            self.protocol_name = None;
            self.leader = None;
            self.consumer = Some(ConsumerGroup::default());
        }
        self.consumer.as_mut().ok_or_else(|| Refused {
            code: codes::UNKNOWN_SERVER_ERROR,
            message: "no consumer group".into(),
        })
    }
}

impl Coordinator {
    /// A ConsumerGroupHeartbeat of group `group_id`, over the cluster's `topics`.
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        hb: &Heartbeat,
        topics: &TopicsView,
        now: Instant,
    ) -> Result<HeartbeatAnswer, Refused> {
        let g = if hb.member_epoch == 0 {
            self.group_or_new(group_id)
        } else {
            self.group(group_id).ok_or_else(|| Refused {
                code: codes::UNKNOWN_MEMBER_ID,
                message: format!(
                    "Member {} is not a member of group {group_id}.",
                    hb.member_id
                ),
            })?
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        let settings = self.config.consumer.clone();
        let before = g.is_empty();
        let answer = g
            .consumer_group_for(hb.member_epoch)?
            .heartbeat(group_id, hb, topics, &settings, now);
        if before != g.is_empty() {
            g.state_changed_ms = crate::storage::log::now_ms();
        }
        answer
    }

    /// Consumer-protocol members whose session or revocation time ran out leave their groups.
    pub(super) fn expire_consumer_members(&self, g: &mut Group, now: Instant) {
        let Some(c) = g.consumer.as_mut() else {
            return;
        };
        for id in c.expire(&self.config.consumer, now) {
            tracing::info!(group = %g.id, member = %id, "consumer group member expired");
        }
        if c.members.is_empty() && g.state_changed_ms < crate::storage::log::now_ms() {
            g.state_changed_ms = crate::storage::log::now_ms();
        }
    }

    /// A consumer group's check of an OffsetCommit: an empty group takes commits from outside
    /// any member (admin tools, assign()), a member commits at its epoch with v9 or later.
    pub(super) fn check_consumer_commit(
        c: &ConsumerGroup,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        version: i16,
    ) -> CommitCheck {
        if epoch < 0 && c.members.is_empty() {
            return CommitCheck::Ok;
        }
        if !c.members.contains_key(member_id) {
            return CommitCheck::Error(codes::UNKNOWN_MEMBER_ID);
        }
        if version < 9 {
            return CommitCheck::Error(codes::UNSUPPORTED_VERSION);
        }
        match c.check_member_epoch(group_id, member_id, epoch) {
            Ok(()) => CommitCheck::Ok,
            Err(code) => CommitCheck::Error(code),
        }
    }

    /// OffsetFetch v9+ by a member (`member_id` set or `epoch` ≥ 0): a member of the consumer
    /// group at its epoch. Other callers and classic groups are not checked.
    pub fn check_offset_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        epoch: i32,
    ) -> Result<(), i16> {
        if member_id.is_none() && epoch < 0 {
            return Ok(());
        }
        let Some(g) = self.group(group_id) else {
            return Ok(());
        };
        let g = g.lock().unwrap_or_else(|p| p.into_inner());
        match &g.consumer {
            Some(c) => c.check_member_epoch(group_id, member_id.unwrap_or_default(), epoch),
            None => Ok(()),
        }
    }

    /// The regex a consumer-protocol member subscribed with, if any (a heartbeat that does
    /// not repeat it is resolved against it).
    pub fn member_regex(&self, group_id: &str, member_id: &str) -> Option<String> {
        let g = self.group(group_id)?;
        let g = g.lock().unwrap_or_else(|p| p.into_inner());
        g.consumer
            .as_ref()?
            .members
            .get(member_id)?
            .topic_regex
            .clone()
    }

    /// The consumer group's settings (`group.consumer.*`).
    pub fn consumer_settings(&self) -> &ConsumerSettings {
        &self.config.consumer
    }
}
