//! The coordinator's door to consumer groups (KIP-848): which group a ConsumerGroupHeartbeat
//! reaches (a new one, an empty classic group converted, or a refusal), their expiry, and
//! the member checks of offset commits and fetches.

use std::collections::BTreeMap;
use std::time::Instant;

use super::super::consumer_group::{
    unknown_member, Cluster, ConsumerGroup, Heartbeat, HeartbeatAnswer, Refused,
};
use super::super::consumer_records::{ConsumerRecordKey, ConsumerRecordValue};
use super::super::metadata_manager::RecordKv;
use super::{codes, CommitCheck, Coordinator, Group, GroupState};
use crate::config::consumer_groups::ConsumerGroupConfig;

/// The consumer group records as last written: key bytes → value bytes.
type Persisted = BTreeMap<Vec<u8>, Vec<u8>>;

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

    /// The records that bring `__consumer_offsets` to the group's consumer state: changed
    /// records, and tombstones for those that are gone (all of them once the group is no
    /// longer a consumer group); with the state they make, for `written` once they are.
    fn consumer_records(&self) -> (Vec<RecordKv>, Persisted) {
        let mut now: Persisted = BTreeMap::new();
        for (k, v) in self.consumer.iter().flat_map(|c| c.records(&self.id)) {
            match (k.try_encode(), v.try_encode()) {
                (Ok(k), Ok(v)) => {
                    now.insert(k, v);
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(group = %self.id, error = %e, "a consumer group record cannot be written")
                }
            }
        }
        let mut out: Vec<RecordKv> = now
            .iter()
            .filter(|(k, v)| self.persisted.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        out.extend(
            self.persisted
                .keys()
                .filter(|k| !now.contains_key(*k))
                .map(|k| (k.clone(), None)),
        );
        (out, now)
    }

    /// The records of `consumer_records` reached the log.
    fn written(&mut self, state: Persisted) {
        self.persisted = state;
        self.consumer_dirty = false;
    }

    /// The keys of the consumer group records last written, for a deletion's tombstones.
    pub fn persisted_consumer_keys(&self) -> Vec<Vec<u8>> {
        self.persisted.keys().cloned().collect()
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
                return Err(Refused::new(codes::GROUP_ID_NOT_FOUND, message));
            }
            if epoch != 0 {
                // No record of the group reached this coordinator (a classic group, or
                // offsets only): the member is told to rejoin.
                let message = format!("Consumer group {} not found.", self.id);
                return Err(Refused::new(codes::UNKNOWN_MEMBER_ID, message));
            }
            self.protocol_type = Some("consumer".to_string());
            self.protocol_name = None;
            self.leader = None;
        }
        Ok(self.consumer.get_or_insert_with(ConsumerGroup::default))
    }
}

impl Coordinator {
    /// A ConsumerGroupHeartbeat of group `group_id`, over the `cluster`: the answer, and what
    /// `write` made of the group's changed records (`Err`: nothing reached the log, they are
    /// written again with the next change). `write` runs under the group's lock, so the
    /// records of one group reach the log in the order they were made.
    pub fn consumer_heartbeat<W>(
        &self,
        group_id: &str,
        hb: &Heartbeat,
        cluster: &Cluster<'_>,
        now: Instant,
        write: impl FnOnce(&[RecordKv]) -> Result<W, W>,
    ) -> Result<(HeartbeatAnswer, W), Refused> {
        let g = if hb.member_epoch == 0 {
            self.group_or_new(group_id)
        } else {
            // Kafka says GROUP_ID_NOT_FOUND; a member told it is unknown rejoins instead.
            self.group(group_id)
                .ok_or_else(|| unknown_member(group_id, &hb.member_id))?
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if g.state == GroupState::Dead {
            // Deleted while this heartbeat waited for it: the member asks again.
            let message = format!("Group {group_id} was just deleted.");
            return Err(Refused::new(codes::COORDINATOR_NOT_AVAILABLE, message));
        }
        let settings = self.config.consumer.clone();
        let before = g.is_empty();
        let answer = g
            .consumer_group_for(hb.member_epoch)?
            .heartbeat(group_id, hb, cluster, &settings, now);
        if before != g.is_empty() {
            g.state_changed_ms = crate::storage::log::now_ms();
        }
        let (records, state) = g.consumer_records();
        let written = match write(&records) {
            Ok(w) => {
                g.written(state);
                w
            }
            Err(w) => {
                // Nothing reached the log: the clock writes the records again.
                g.consumer_dirty = true;
                w
            }
        };
        answer.map(|a| (a, written))
    }

    /// Hands `write` the records of each consumer group that changed outside a heartbeat,
    /// under the group's lock (so they reach the log in order); a group whose write fails
    /// (`false`) is tried again on the next call.
    pub fn write_dirty_consumer_records(&self, write: impl Fn(&str, &[RecordKv]) -> bool) {
        for g in self.all_groups() {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if !g.consumer_dirty || g.state == GroupState::Dead {
                continue;
            }
            let (records, state) = g.consumer_records();
            if records.is_empty() || write(&g.id, &records) {
                g.written(state);
            }
        }
    }

    /// Replays a consumer group record read from `__consumer_offsets` (`None`: a tombstone);
    /// the group's epoch record makes it a consumer group, its tombstone a classic one again.
    pub fn replay_consumer_record(
        &self,
        key: &ConsumerRecordKey,
        value: Option<ConsumerRecordValue>,
        raw: (&[u8], Option<&[u8]>),
    ) {
        // A tombstone of a group that is gone (deleted) brings nothing back.
        let g = match value {
            Some(_) => self.group_or_new(key.group()),
            None => match self.group(key.group()) {
                Some(g) => g,
                None => return,
            },
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        match raw.1 {
            Some(v) => g.persisted.insert(raw.0.to_vec(), v.to_vec()),
            None => g.persisted.remove(raw.0),
        };
        if matches!(key, ConsumerRecordKey::Metadata { .. }) && value.is_none() {
            g.consumer = None;
            return;
        }
        if value.is_some() && g.consumer.is_none() {
            g.protocol_type = Some("consumer".to_string());
            g.consumer = Some(ConsumerGroup::default());
        }
        if let Some(c) = g.consumer.as_mut() {
            c.replay(key, value, Instant::now());
        }
    }

    /// The groups `loaded` names were read back whole: their revoking members' timeouts start.
    pub fn after_load(&self, loaded: impl Fn(&str) -> bool) {
        let now = Instant::now();
        for g in self.all_groups() {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if !loaded(&g.id) {
                continue;
            }
            if let Some(c) = g.consumer.as_mut() {
                c.after_load(now);
            }
        }
    }

    /// Consumer-protocol members whose session or revocation time ran out leave their groups.
    pub(super) fn expire_consumer_members(&self, g: &mut Group, now: Instant) {
        let Some(c) = g.consumer.as_mut() else {
            return;
        };
        let gone = c.expire(&self.config.consumer, now);
        let emptied = !gone.is_empty() && c.members.is_empty();
        for id in gone {
            tracing::info!(group = %g.id, member = %id, "consumer group member expired");
            g.consumer_dirty = true;
        }
        if emptied {
            // Offset retention counts from here.
            g.state_changed_ms = crate::storage::log::now_ms();
        }
    }

    /// A consumer group's check of an OffsetCommit: an empty group takes commits from outside
    /// any member (admin tools, assign()), a member commits at its epoch with v9 or later.
    pub(super) fn check_consumer_commit(
        c: &ConsumerGroup,
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
        match c.check_member_epoch(member_id, epoch) {
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
            Some(c) => c.check_member_epoch(member_id.unwrap_or_default(), epoch),
            None => Ok(()),
        }
    }

    /// The consumer group's settings (`group.consumer.*`).
    pub fn consumer_settings(&self) -> &ConsumerGroupConfig {
        &self.config.consumer
    }
}
