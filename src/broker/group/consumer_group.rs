//! A consumer group of Kafka's new protocol (KIP-848): members heartbeat their subscriptions,
//! the group computes a target assignment when its epoch moves, and each member reconciles
//! towards it one heartbeat at a time — a partition is revoked before anyone else gets it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::assignor::{self, Assignment, MemberSpec};
use crate::protocol::errors as codes;
use crate::storage::checkpoint::KafkaUuid;

/// The epoch a member leaves with (-1), and a static member's temporary leave (-2).
pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

use crate::config::consumer_groups::ConsumerGroupConfig;

/// The topics of the cluster a subscription can name: name → (id, partition count).
pub type TopicsView = BTreeMap<String, (KafkaUuid, i32)>;

/// What a heartbeat sees of the cluster: a topic's id and partition count by name, and the
/// topics a regex subscription matches that the caller may see.
pub struct Cluster<'a> {
    pub topic: &'a dyn Fn(&str) -> Option<(KafkaUuid, i32)>,
    pub matching: &'a dyn Fn(&str) -> BTreeSet<String>,
}

/// What a ConsumerGroupHeartbeat says; `None` fields did not change since the last one.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub topic_names: Option<Vec<String>>,
    pub topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// The heartbeat's answer: the member's epoch, and its assignment when it changed or the
/// request was a full one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub assignment: Option<Assignment>,
}

/// A refused heartbeat: Kafka's error code, and its message where Kafka gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: i16,
    pub message: Option<String>,
}

impl Refused {
    /// A refusal with Kafka's message.
    pub fn new(code: i16, message: impl Into<String>) -> Refused {
        Refused {
            code,
            message: Some(message.into()),
        }
    }

    /// A refusal Kafka gives without a message (authorization, coordinator errors).
    pub fn bare(code: i16) -> Refused {
        Refused {
            code,
            message: None,
        }
    }
}

fn refused(code: i16, message: impl Into<String>) -> Refused {
    Refused::new(code, message)
}

/// Where a member stands against the target assignment (Kafka's MemberState).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// It holds what the target gives it at the target's epoch.
    Stable,
    /// It must give up `pending_revocation` before it moves on.
    UnrevokedPartitions,
    /// It is at the target's epoch and waits for partitions others still hold.
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    previous_member_epoch: i32,
    pub state: MemberState,
    pub rebalance_timeout_ms: i32,
    pub topic_names: Vec<String>,
    pub topic_regex: Option<String>,
    /// The topics the regex matched when last resolved; `None` until it is (after a load).
    regex_topics: Option<BTreeSet<String>>,
    pub server_assignor: Option<String>,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
    last_heartbeat: Instant,
    revocation_deadline: Option<Instant>,
}

impl ConsumerMember {
    fn new(id: &str, now: Instant) -> ConsumerMember {
        ConsumerMember {
            member_id: id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            rebalance_timeout_ms: 0,
            topic_names: Vec::new(),
            topic_regex: None,
            regex_topics: None,
            server_assignor: None,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            last_heartbeat: now,
            revocation_deadline: None,
        }
    }

    /// The topic names the member subscribes to, its regex's matches included.
    pub fn subscribed(&self) -> BTreeSet<&str> {
        self.topic_names
            .iter()
            .chain(self.regex_topics.iter().flatten())
            .map(|t| t.as_str())
            .collect()
    }

    /// What moves the group epoch when it changes: the topics subscribed to (a change of
    /// assignor does not, as in Kafka 4.1).
    fn subscription(&self) -> Vec<String> {
        self.subscribed().into_iter().map(String::from).collect()
    }

    /// Resolves the member's regex against the cluster now.
    fn resolve_regex(&mut self, cluster: &Cluster<'_>) {
        self.regex_topics = self.topic_regex.as_deref().map(cluster.matching);
    }

    /// Takes what the heartbeat changed; whether the subscription changed.
    fn update(&mut self, hb: &Heartbeat, cluster: &Cluster<'_>) -> bool {
        if self.topic_regex.is_some() && self.regex_topics.is_none() {
            // Read back from the log: what the regex matches now is not a change.
            self.resolve_regex(cluster);
        }
        let before = self.subscription();
        if hb.instance_id.is_some() {
            self.instance_id = hb.instance_id.clone();
        }
        if hb.rack_id.is_some() {
            self.rack_id = hb.rack_id.clone();
        }
        if hb.rebalance_timeout_ms >= 0 {
            self.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(names) = &hb.topic_names {
            self.topic_names = names.clone();
        }
        if let Some(regex) = &hb.topic_regex {
            self.topic_regex = (!regex.is_empty()).then(|| regex.clone());
        }
        // A regex is resolved on each of the member's heartbeats: new topics join.
        self.resolve_regex(cluster);
        if hb.server_assignor.is_some() {
            self.server_assignor = hb.server_assignor.clone();
        }
        self.client_id = hb.client_id.clone();
        self.client_host = hb.client_host.clone();
        before != self.subscription()
    }
}

/// A group of the consumer protocol.
#[derive(Debug, Default)]
pub struct ConsumerGroup {
    /// Moves on every membership or subscription change.
    pub group_epoch: i32,
    /// The group epoch the target assignment was computed at.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// Each member's target assignment.
    pub target: BTreeMap<String, Assignment>,
    /// The subscribed topics' ids and sizes when the target was last computed.
    subscribed: TopicsView,
    /// Read back from `__consumer_offsets`: the next refresh takes the topics as they are
    /// without moving the epoch (the log does not say what they were).
    loaded: bool,
    /// Members expired since the last refresh (which moved the epoch already).
    expired: bool,
    /// The assignor of the last target.
    pub assignor: Option<String>,
}

impl ConsumerGroup {
    /// Kafka's name of the group's state.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.member_epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// One heartbeat of a member (epoch 0 joins, -1 and -2 leave), judged against the group.
    pub fn heartbeat(
        &mut self,
        group_id: &str,
        hb: &Heartbeat,
        cluster: &Cluster<'_>,
        settings: &ConsumerGroupConfig,
        now: Instant,
    ) -> Result<HeartbeatAnswer, Refused> {
        if hb.member_epoch == LEAVE_EPOCH || hb.member_epoch == STATIC_LEAVE_EPOCH {
            return self.leave(group_id, hb, cluster, settings);
        }
        let before = self.members.get(&hb.member_id).map(|m| m.assigned.clone());
        let mut changed = false;
        if hb.member_epoch == 0 {
            changed = self.join(group_id, hb, settings, now)?;
        } else {
            self.check_epoch(group_id, hb)?;
        }
        let Some(member) = self.members.get_mut(&hb.member_id) else {
            return Err(unknown_member(group_id, &hb.member_id));
        };
        member.last_heartbeat = now;
        changed |= member.update(hb, cluster);
        self.share_regex(&hb.member_id);
        self.refresh(changed, cluster, settings);
        self.reconcile(&hb.member_id, hb.owned.as_ref(), now);
        let member = &self.members[&hb.member_id];
        let subscribes = hb.topic_names.is_some() || hb.topic_regex.is_some();
        let full = hb.member_epoch == 0
            || (hb.rebalance_timeout_ms != -1 && subscribes && hb.owned.is_some());
        let changed = before.as_ref() != Some(&member.assigned);
        Ok(HeartbeatAnswer {
            member_id: member.member_id.clone(),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            assignment: (full || changed).then(|| member.assigned.clone()),
        })
    }

    /// A member (re)joins with epoch 0: a new member, a known one starting over (it gives up
    /// what it held), or a static member taking over its instance id's place. Whether the
    /// membership changed (a new member).
    fn join(
        &mut self,
        group_id: &str,
        hb: &Heartbeat,
        settings: &ConsumerGroupConfig,
        now: Instant,
    ) -> Result<bool, Refused> {
        if let Some(m) = self.members.get_mut(&hb.member_id) {
            m.assigned.clear();
            m.pending_revocation.clear();
            m.revocation_deadline = None;
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = 0;
            m.state = MemberState::Stable;
            return Ok(false);
        }
        if let Some(instance) = &hb.instance_id {
            if let Some(old) = self.static_member(instance) {
                self.replace_static(group_id, instance, &old, &hb.member_id)?;
                return Ok(false);
            }
        }
        if self.members.len() >= settings.max_size {
            return Err(refused(
                codes::GROUP_MAX_SIZE_REACHED,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    settings.max_size
                ),
            ));
        }
        self.members.insert(
            hb.member_id.clone(),
            ConsumerMember::new(&hb.member_id, now),
        );
        Ok(true)
    }

    fn static_member(&self, instance: &str) -> Option<String> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance))
            .map(|m| m.member_id.clone())
    }

    /// A static member rejoining under a new member id takes its old place (assignment and
    /// epoch) if the old one left with epoch -2; an instance id still in use is refused.
    fn replace_static(
        &mut self,
        group_id: &str,
        instance: &str,
        old: &str,
        new: &str,
    ) -> Result<(), Refused> {
        let in_use = self
            .members
            .get(old)
            .is_some_and(|m| m.member_epoch != STATIC_LEAVE_EPOCH);
        if in_use {
            return Err(refused(
                codes::UNRELEASED_INSTANCE_ID,
                format!(
                    "Static member {new} with instance id {instance} cannot join the group \
                     {group_id} because the instance id is owned by {old} member."
                ),
            ));
        }
        if let Some(mut m) = self.members.remove(old) {
            m.member_id = new.to_string();
            m.member_epoch = m.previous_member_epoch;
            self.members.insert(new.to_string(), m);
        }
        if let Some(t) = self.target.remove(old) {
            self.target.insert(new.to_string(), t);
        }
        Ok(())
    }

    /// Kafka's member epoch rules: a known member at its epoch, or at its previous epoch while
    /// it owns exactly what it was given (it lost the answer that moved it on).
    fn check_epoch(&self, group_id: &str, hb: &Heartbeat) -> Result<(), Refused> {
        self.check_instance(hb)?;
        let Some(m) = self.members.get(&hb.member_id) else {
            return Err(unknown_member(group_id, &hb.member_id));
        };
        let received = hb.member_epoch;
        if received > m.member_epoch {
            return Err(refused(
                codes::FENCED_MEMBER_EPOCH,
                format!(
                    "The consumer group member has a greater member epoch ({received}) than the \
                     one known by the group coordinator ({}). The member must abandon all its \
                     partitions and rejoin.",
                    m.member_epoch
                ),
            ));
        }
        if received < m.member_epoch {
            let lost_answer = received == m.previous_member_epoch
                && hb.owned.as_ref().is_some_and(|o| within(o, &m.assigned));
            if !lost_answer {
                return Err(refused(
                    codes::FENCED_MEMBER_EPOCH,
                    format!(
                        "The consumer group member has a smaller member epoch ({received}) than \
                         the one known by the group coordinator ({}). The member must abandon \
                         all its partitions and rejoin.",
                        m.member_epoch
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Gives every member subscribed with the same regex as `id` what it just resolved to, so
    /// a new matching topic moves the group once, not once per member.
    fn share_regex(&mut self, id: &str) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let (Some(regex), Some(topics)) = (m.topic_regex.clone(), m.regex_topics.clone()) else {
            return;
        };
        for other in self.members.values_mut() {
            if other.topic_regex.as_ref() == Some(&regex) {
                other.regex_topics = Some(topics.clone());
            }
        }
    }

    /// Kafka's static member checks of a heartbeat that names an instance id: the instance id
    /// must be known, and held by this member id (a replaced member is fenced).
    fn check_instance(&self, hb: &Heartbeat) -> Result<(), Refused> {
        let Some(instance) = &hb.instance_id else {
            return Ok(());
        };
        match self.static_member(instance) {
            None => Err(refused(
                codes::UNKNOWN_MEMBER_ID,
                format!("Instance id {instance} is unknown."),
            )),
            Some(holder) if holder != hb.member_id => Err(refused(
                codes::FENCED_INSTANCE_ID,
                format!(
                    "Static member {} with instance id {instance} was fenced by member {holder}.",
                    hb.member_id
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// A member leaves (-1), or a static member leaves for now (-2) keeping its place until
    /// its session times out.
    fn leave(
        &mut self,
        group_id: &str,
        hb: &Heartbeat,
        cluster: &Cluster<'_>,
        settings: &ConsumerGroupConfig,
    ) -> Result<HeartbeatAnswer, Refused> {
        let temporary = hb.member_epoch == STATIC_LEAVE_EPOCH;
        self.check_instance(hb)?;
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Err(unknown_member(group_id, &hb.member_id));
        };
        if temporary && m.instance_id.is_some() {
            // It keeps what it holds until it is back or its session ends; what it was
            // giving up is free now.
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = STATIC_LEAVE_EPOCH;
            m.pending_revocation.clear();
            m.revocation_deadline = None;
        } else {
            self.remove_member(&hb.member_id);
            self.refresh(true, cluster, settings);
        }
        Ok(HeartbeatAnswer {
            member_id: hb.member_id.clone(),
            member_epoch: hb.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Drops a member: its partitions are free at once (the caller moves the group epoch on).
    fn remove_member(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
        }
    }

    /// Members whose session ran out, or that did not revoke within their rebalance timeout,
    /// are removed; the group moves to a new epoch, whose target the next heartbeat computes.
    /// Returns who was removed.
    pub fn expire(&mut self, settings: &ConsumerGroupConfig, now: Instant) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now.duration_since(m.last_heartbeat)
                    > Duration::from_millis(settings.session_timeout_ms.max(1) as u64)
                    || m.revocation_deadline.is_some_and(|d| now >= d)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.remove_member(id);
        }
        if !gone.is_empty() {
            self.group_epoch = self.group_epoch.saturating_add(1);
            self.expired = true;
        }
        gone
    }

    /// Once the whole group is read back: a member that was revoking gets its rebalance
    /// timeout from now (a static member away with -2 waits for its session instead).
    pub fn after_load(&mut self, now: Instant) {
        for m in self.members.values_mut() {
            let revoking =
                m.state == MemberState::UnrevokedPartitions && m.member_epoch != STATIC_LEAVE_EPOCH;
            m.revocation_deadline =
                revoking.then(|| now + Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64));
        }
    }

    /// Moves the group epoch (once) when the membership or a subscription `changed` or the
    /// subscribed topics did (created, deleted, grown), and computes a new target when the
    /// group epoch is ahead of it.
    fn refresh(&mut self, changed: bool, cluster: &Cluster<'_>, settings: &ConsumerGroupConfig) {
        for m in self.members.values_mut() {
            if m.topic_regex.is_some() && m.regex_topics.is_none() {
                m.resolve_regex(cluster);
            }
        }
        let subscribed: TopicsView = self
            .members
            .values()
            .flat_map(|m| m.subscribed())
            .filter_map(|t| (cluster.topic)(t).map(|v| (t.to_string(), v)))
            .collect();
        // Members that expired moved the epoch already; the topics they took along do not
        // move it again.
        let expired = std::mem::take(&mut self.expired);
        if std::mem::take(&mut self.loaded) && !changed {
            // The log does not say what the topics were: the target says what it covers.
            if !self.target_covers(&subscribed) {
                self.group_epoch = self.group_epoch.saturating_add(1);
            }
            self.subscribed = subscribed;
        } else if changed || subscribed != self.subscribed {
            let again = changed || !expired;
            self.subscribed = subscribed;
            if again {
                self.group_epoch = self.group_epoch.saturating_add(1);
            }
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(settings);
        }
    }

    /// Whether the target assigns exactly the partitions of `topics` (both assignors give out
    /// every partition of a topic someone subscribes to): false once a topic grew, appeared
    /// or went while nobody watched.
    fn target_covers(&self, topics: &TopicsView) -> bool {
        let wanted: BTreeSet<(KafkaUuid, i32)> = topics
            .values()
            .flat_map(|(id, n)| (0..*n).map(move |p| (*id, p)))
            .collect();
        let given: BTreeSet<(KafkaUuid, i32)> = self
            .target
            .values()
            .flat_map(|a| {
                a.iter()
                    .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            })
            .collect();
        wanted == given
    }

    /// The assignor most members ask for (the configured default when none asks), run over
    /// the members' subscriptions with the current target for stickiness.
    fn compute_target(&mut self, settings: &ConsumerGroupConfig) {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        let default = settings.assignors.first().map_or("uniform", |a| a.as_str());
        let name = votes
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or(default, |(a, _)| a)
            .to_string();
        let specs: BTreeMap<String, MemberSpec> = self
            .members
            .values()
            .map(|m| {
                let topics = m
                    .subscribed()
                    .into_iter()
                    .filter_map(|t| self.subscribed.get(t).map(|(id, _)| *id))
                    .collect();
                let spec = MemberSpec {
                    topics,
                    current: self.target.get(&m.member_id),
                };
                (m.member_id.clone(), spec)
            })
            .collect();
        let partitions = self.subscribed.values().copied().collect();
        self.target = assignor::assign(&name, &specs, &partitions);
        self.assignor = Some(name);
        self.assignment_epoch = self.group_epoch;
    }

    /// The partitions of `topics` held (assigned or pending revocation) by members other than
    /// `me`: one pass over the members, not one per partition.
    fn held_by_others(
        &self,
        me: &str,
        topics: &BTreeSet<&KafkaUuid>,
    ) -> BTreeSet<(KafkaUuid, i32)> {
        let mut held = BTreeSet::new();
        for m in self.members.values().filter(|m| m.member_id != me) {
            for (t, ps) in m.assigned.iter().chain(&m.pending_revocation) {
                if topics.contains(t) {
                    held.extend(ps.iter().map(|p| (*t, *p)));
                }
            }
        }
        held
    }

    /// One step of Kafka's CurrentAssignmentBuilder for member `id`, given the partitions it
    /// says it owns (`None`: it did not say).
    fn reconcile(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let step = match m.state {
            MemberState::Stable => m.member_epoch != self.assignment_epoch,
            // It moves on once it no longer owns what it was asked to revoke.
            MemberState::UnrevokedPartitions => !owns_any(owned, &m.pending_revocation),
            MemberState::UnreleasedPartitions => true,
        };
        if step {
            self.next_assignment(id, owned, now);
        }
    }

    /// The member's next assignment towards its target: while it still owns partitions the
    /// target takes away, only those are revoked (its epoch stays); otherwise it moves to the
    /// target's epoch with every target partition nobody else holds.
    fn next_assignment(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let empty = Assignment::new();
        let target = self.target.get(id).unwrap_or(&empty);
        let Some(m) = self.members.get(id) else {
            return;
        };
        let mut kept = Assignment::new();
        let mut added = Assignment::new();
        let mut revoke = Assignment::new();
        let mut unreleased = false;
        let topics: BTreeSet<&KafkaUuid> = target.keys().chain(m.assigned.keys()).collect();
        let held = self.held_by_others(id, &topics);
        for topic in topics {
            let none = BTreeSet::new();
            let current = m.assigned.get(topic).unwrap_or(&none);
            let wanted = target.get(topic).unwrap_or(&none);
            let keep: BTreeSet<i32> = current.intersection(wanted).copied().collect();
            let gone: BTreeSet<i32> = current.difference(wanted).copied().collect();
            let mut free = BTreeSet::new();
            for p in wanted.difference(current) {
                if held.contains(&(*topic, *p)) {
                    unreleased = true;
                } else {
                    free.insert(*p);
                }
            }
            for (into, set) in [(&mut kept, keep), (&mut revoke, gone), (&mut added, free)] {
                if !set.is_empty() {
                    into.insert(*topic, set);
                }
            }
        }
        let target_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        if !revoke.is_empty() && owns_any(owned, &revoke) {
            m.assigned = kept;
            if m.state != MemberState::UnrevokedPartitions || m.pending_revocation != revoke {
                // A new revocation: the member has its whole rebalance timeout for it.
                let timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
                m.revocation_deadline = Some(now + timeout);
            }
            m.state = MemberState::UnrevokedPartitions;
            m.pending_revocation = revoke;
            return;
        }
        for (topic, ps) in added {
            kept.entry(topic).or_default().extend(ps);
        }
        m.assigned = kept;
        m.pending_revocation.clear();
        m.revocation_deadline = None;
        m.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        if m.member_epoch != target_epoch {
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = target_epoch;
        }
    }

    /// Kafka's check of an OffsetCommit (v9+) or OffsetFetch by a member: it is a member, at
    /// its current epoch.
    pub fn check_member_epoch(&self, member_id: &str, epoch: i32) -> Result<(), i16> {
        let Some(m) = self.members.get(member_id) else {
            return Err(codes::UNKNOWN_MEMBER_ID);
        };
        if epoch != m.member_epoch {
            return Err(codes::STALE_MEMBER_EPOCH);
        }
        Ok(())
    }
}

pub(super) fn unknown_member(group_id: &str, member_id: &str) -> Refused {
    refused(
        codes::UNKNOWN_MEMBER_ID,
        format!("Member {member_id} is not a member of group {group_id}."),
    )
}

/// Whether `owned` holds any partition of `revoke`; a member that did not say what it owns
/// still owns everything.
fn owns_any(owned: Option<&Assignment>, revoke: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    revoke.iter().any(|(t, ps)| {
        owned
            .get(t)
            .is_some_and(|o| ps.iter().any(|p| o.contains(p)))
    })
}

/// Whether every partition of `owned` is in `assigned`.
fn within(owned: &Assignment, assigned: &Assignment) -> bool {
    owned
        .iter()
        .all(|(t, ps)| ps.is_empty() || assigned.get(t).is_some_and(|a| ps.is_subset(a)))
}

mod persist;

#[cfg(test)]
mod tests;
