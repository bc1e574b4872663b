//! The classic group protocol's state machine: members, generations, protocol selection,
//! rebalances with their timeouts, static membership, and committed offsets per group.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::consumer_group::ConsumerGroup;
use crate::config::consumer_groups::ConsumerGroupConfig;
use crate::storage::log::now_ms;

mod consumer;

/// Kafka error codes of the group APIs.
/// Group error codes live in the one table, `protocol::errors`.
pub use crate::protocol::errors as codes;

/// Settings of the coordinator (Kafka's `group.*` and `offsets.*` broker keys).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub initial_rebalance_delay: Duration,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub max_size: usize,
    pub offset_metadata_max_bytes: usize,
    pub offsets_retention: Duration,
    /// The consumer protocol's `group.consumer.*` settings.
    pub consumer: ConsumerGroupConfig,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay: Duration::from_millis(3000),
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as usize,
            offset_metadata_max_bytes: 4096,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            consumer: ConsumerGroupConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's tools print.
    pub fn name(&self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// What a JoinGroup asks.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    /// JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED and an id.
    pub require_known_member_id: bool,
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinMember>,
}

impl JoinResult {
    fn error(code: i16, member_id: &str) -> JoinResult {
        JoinResult {
            error: code,
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Vec<u8>,
}

impl SyncResult {
    fn error(code: i16) -> SyncResult {
        SyncResult {
            error: code,
            protocol_type: None,
            protocol_name: None,
            assignment: Vec::new(),
        }
    }
}

/// A SyncGroup's answer, and whether it was the leader's, whose assignment must be stored
/// before anyone gets it (then `Coordinator::complete_sync` with the write's outcome).
pub struct SyncStart {
    pub answer: Pending<SyncResult>,
    pub store: bool,
}

impl SyncStart {
    fn now(r: SyncResult) -> SyncStart {
        SyncStart {
            answer: Pending::Now(r),
            store: false,
        }
    }
}

/// Either an answer now, or one that arrives when the rebalance step completes.
pub enum Pending<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

/// Who a JoinGroup joins as, or the answer it gets without waiting.
enum Joiner {
    Member(String),
    AnsweredNow(JoinResult),
}

#[derive(Debug)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub assignment: Vec<u8>,
    join_waiter: Option<oneshot::Sender<JoinResult>>,
    sync_waiter: Option<oneshot::Sender<SyncResult>>,
    last_heartbeat: Instant,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Vec<u8> {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pending: HashSet<String>,
    /// group.instance.id → member id.
    static_members: HashMap<String, String>,
    /// When the current rebalance gives up on members that have not rejoined.
    rebalance_deadline: Option<Instant>,
    /// Earliest time the join may complete (group.initial.rebalance.delay.ms for a new group).
    join_not_before: Option<Instant>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    pub state_changed_ms: i64,
    /// The group's consumer-protocol (KIP-848) state; `None` for a classic group.
    pub consumer: Option<ConsumerGroup>,
    /// The consumer group records as last written (or read back): key bytes → value bytes.
    persisted: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The consumer group changed outside a heartbeat (expiry, conversion): its records are
    /// written by the coordinator's clock.
    consumer_dirty: bool,
}

impl Group {
    fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            protocol_type: None,
            protocol_name: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            pending: HashSet::new(),
            static_members: HashMap::new(),
            rebalance_deadline: None,
            join_not_before: None,
            offsets: BTreeMap::new(),
            state_changed_ms: now_ms(),
            consumer: None,
            persisted: BTreeMap::new(),
            consumer_dirty: false,
        }
    }

    fn transition(&mut self, to: GroupState) {
        self.state = to;
        self.state_changed_ms = now_ms();
    }

    /// The protocol every member supports, chosen by the members' preference votes.
    fn select_protocol(&self) -> Option<String> {
        let mut candidates: Option<Vec<String>> = None;
        for m in self.members.values() {
            let names: Vec<String> = m.protocols.iter().map(|(n, _)| n.clone()).collect();
            candidates = Some(match candidates {
                None => names,
                Some(c) => c.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
        let candidates = candidates?;
        let mut votes: BTreeMap<String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                *votes.entry(n.clone()).or_default() += 1;
            }
        }
        // Most votes; ties go to the earliest candidate in the first member's order.
        candidates
            .iter()
            .max_by_key(|n| {
                (
                    votes.get(*n).copied().unwrap_or(0),
                    std::cmp::Reverse(candidates.iter().position(|c| c == *n)),
                )
            })
            .cloned()
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        // Some protocol must be supported by everyone, the newcomer included.
        let common: Vec<&String> = protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        !common.is_empty()
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            // Members waiting for their assignment must rejoin.
            for m in self.members.values_mut() {
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(SyncResult::error(codes::REBALANCE_IN_PROGRESS));
                }
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
            .max(0);
        self.rebalance_deadline = Some(now + Duration::from_millis(timeout as u64));
        self.transition(GroupState::PreparingRebalance);
    }

    /// Every member with its metadata for `protocol`: what the leader gets in JoinGroup.
    fn join_members(&self, protocol: &str) -> Vec<JoinMember> {
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(protocol),
            })
            .collect()
    }

    fn all_joined(&self) -> bool {
        self.members.values().all(|m| m.join_waiter.is_some())
    }

    /// Finishes the join phase: members that did not rejoin are dropped, a new generation
    /// starts, and every waiting member gets its JoinGroup response.
    fn complete_join(&mut self) {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.join_waiter.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id);
        }
        self.rebalance_deadline = None;
        self.join_not_before = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty);
            return;
        }
        self.protocol_name = self.select_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let everyone = self.join_members(&protocol);
        let (generation, protocol_type) = (self.generation, self.protocol_type.clone());
        for m in self.members.values_mut() {
            m.last_heartbeat = Instant::now();
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult {
                    error: codes::NONE,
                    generation,
                    protocol_type: protocol_type.clone(),
                    protocol_name: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: m.member_id.clone(),
                    members: if m.member_id == leader {
                        everyone.clone()
                    } else {
                        Vec::new()
                    },
                });
            }
        }
    }

    /// Who a JoinGroup joins as: its own member id, checked; a fresh one for a new member; or
    /// the answer that ends the request at once.
    fn joiner(&mut self, req: &JoinRequest, now: Instant) -> Joiner {
        if !req.member_id.is_empty() {
            return match self.check_known_member(req) {
                Ok(()) => Joiner::Member(req.member_id.clone()),
                Err(code) => Joiner::AnsweredNow(JoinResult::error(code, &req.member_id)),
            };
        }
        let fresh = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
        match &req.group_instance_id {
            Some(instance) => match self.replace_static_member(instance, &fresh, req, now) {
                Some(answer) => Joiner::AnsweredNow(answer),
                None => Joiner::Member(fresh),
            },
            None if req.require_known_member_id => {
                self.pending.insert(fresh.clone());
                Joiner::AnsweredNow(JoinResult::error(codes::MEMBER_ID_REQUIRED, &fresh))
            }
            None => Joiner::Member(fresh),
        }
    }

    /// A rejoin with a member id: the id must be a member's or one handed out, and a static
    /// member's instance id must still map to it.
    fn check_known_member(&self, req: &JoinRequest) -> Result<(), i16> {
        let id = &req.member_id;
        if !self.members.contains_key(id) && !self.pending.contains(id) {
            return Err(codes::UNKNOWN_MEMBER_ID);
        }
        let fenced = req
            .group_instance_id
            .as_ref()
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|m| m != id);
        if fenced {
            return Err(codes::FENCED_INSTANCE_ID);
        }
        Ok(())
    }

    /// A static member returning without its member id (KIP-345) takes over its old membership
    /// as `fresh`, and the old id's waiting requests are fenced. In a stable group with the same
    /// subscription there is no rebalance: the answer is the current generation.
    fn replace_static_member(
        &mut self,
        instance: &str,
        fresh: &str,
        req: &JoinRequest,
        now: Instant,
    ) -> Option<JoinResult> {
        let old = self.static_members.get(instance).cloned()?;
        let mut m = self.members.remove(&old)?;
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(JoinResult::error(codes::FENCED_INSTANCE_ID, &old));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncResult::error(codes::FENCED_INSTANCE_ID));
        }
        m.member_id = fresh.to_string();
        let unchanged = m.protocols == req.protocols;
        m.protocols = req.protocols.clone();
        m.last_heartbeat = now;
        if self.leader.as_deref() == Some(old.as_str()) {
            self.leader = Some(fresh.to_string());
        }
        self.members.insert(fresh.to_string(), m);
        self.static_members
            .insert(instance.to_string(), fresh.to_string());
        (self.state == GroupState::Stable && unchanged).then(|| self.current_join_answer(fresh))
    }

    /// The current generation as `member_id`'s JoinGroup answer; the leader's lists every
    /// member with its metadata.
    fn current_join_answer(&self, member_id: &str) -> JoinResult {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.join_members(&protocol)
        } else {
            Vec::new()
        };
        JoinResult {
            error: codes::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    /// Records the join of `member_id`, new or known, with `waiter` for its answer; true when
    /// the group must rebalance for it (a new member, or a changed subscription).
    fn add_or_update_member(
        &mut self,
        member_id: &str,
        req: &JoinRequest,
        waiter: oneshot::Sender<JoinResult>,
        now: Instant,
    ) -> bool {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(m) = self.members.get_mut(member_id) {
            let changed = m.protocols != req.protocols;
            m.protocols = req.protocols.clone();
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            if let Some(w) = m.join_waiter.replace(waiter) {
                let _ = w.send(JoinResult::error(codes::UNKNOWN_MEMBER_ID, member_id));
            }
            m.last_heartbeat = now;
            return changed;
        }
        if let Some(i) = &req.group_instance_id {
            self.static_members.insert(i.clone(), member_id.to_string());
        }
        self.members.insert(
            member_id.to_string(),
            Member {
                member_id: member_id.to_string(),
                group_instance_id: req.group_instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols.clone(),
                assignment: Vec::new(),
                join_waiter: Some(waiter),
                sync_waiter: None,
                last_heartbeat: now,
            },
        );
        true
    }

    /// After a join: a new group waits `initial_delay` for more members; a stable group
    /// rebalances unless a follower rejoined unchanged (answered at once); the join phase ends
    /// when every member has rejoined.
    fn rebalance_after_join(
        &mut self,
        member_id: &str,
        changed: bool,
        now: Instant,
        initial_delay: Duration,
    ) {
        match self.state {
            GroupState::Empty => {
                self.prepare_rebalance(now);
                // group.initial.rebalance.delay.ms
                self.join_not_before = Some(now + initial_delay);
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                let is_leader = self.leader.as_deref() == Some(member_id);
                if changed || is_leader || self.state == GroupState::CompletingRebalance {
                    self.prepare_rebalance(now);
                } else {
                    let answer = self.current_join_answer(member_id);
                    let waiter = self
                        .members
                        .get_mut(member_id)
                        .and_then(|m| m.join_waiter.take());
                    if let Some(w) = waiter {
                        let _ = w.send(answer);
                    }
                }
            }
            GroupState::PreparingRebalance | GroupState::Dead => {}
        }
        if self.state == GroupState::PreparingRebalance
            && self.all_joined()
            && self.join_not_before.is_none_or(|t| now >= t)
        {
            self.complete_join();
        }
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(m) = self.members.remove(member_id) {
            if let Some(i) = &m.group_instance_id {
                if self.static_members.get(i).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(i);
                }
            }
            if let Some(w) = m.join_waiter {
                let _ = w.send(JoinResult::error(codes::UNKNOWN_MEMBER_ID, member_id));
            }
            if let Some(w) = m.sync_waiter {
                let _ = w.send(SyncResult::error(codes::UNKNOWN_MEMBER_ID));
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
        if self.members.is_empty() {
            self.protocol_type = self
                .protocol_type
                .take()
                .filter(|_| !self.offsets.is_empty());
        }
    }

    /// A member left or timed out: the others rebalance, or the join completes without it.
    fn after_member_removed(&mut self, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.generation += 1;
                    self.leader = None;
                    self.protocol_name = None;
                    self.transition(GroupState::Empty);
                } else {
                    self.prepare_rebalance(now);
                }
            }
            GroupState::PreparingRebalance
                if self.all_joined() && self.join_not_before.is_none_or(|t| now >= t) =>
            {
                self.complete_join();
            }
            _ => {}
        }
    }

    /// The subscribed topics are not known to the broker in the classic protocol without
    /// parsing consumer metadata; ConsumerProtocol subscriptions are read for OffsetDelete.
    fn subscribes_to(&self, topic: &str) -> bool {
        if self.protocol_type.as_deref() != Some("consumer") {
            return false;
        }
        let Some(protocol) = &self.protocol_name else {
            return false;
        };
        self.members.values().any(|m| {
            consumer_subscription(&m.metadata_for(protocol))
                .iter()
                .any(|t| t == topic)
        })
    }
}

/// Topics of a ConsumerProtocol subscription (version i16, topics array of strings, ...).
pub fn consumer_subscription(meta: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    if meta.len() < 6 {
        return out;
    }
    let n = i32::from_be_bytes([meta[2], meta[3], meta[4], meta[5]]);
    let mut pos = 6usize;
    for _ in 0..n.max(0) {
        let Some(len) = meta.get(pos..pos + 2) else {
            break;
        };
        let len = i16::from_be_bytes([len[0], len[1]]);
        pos += 2;
        if len < 0 {
            continue;
        }
        let Some(s) = meta.get(pos..pos + len as usize) else {
            break;
        };
        out.push(String::from_utf8_lossy(s).into_owned());
        pos += len as usize;
    }
    out
}

/// All groups of this coordinator.
pub struct Coordinator {
    pub config: GroupConfig,
    groups: Mutex<HashMap<String, Arc<Mutex<Group>>>>,
}

/// Outcome of an OffsetCommit check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitCheck {
    Ok,
    Error(i16),
}

impl Coordinator {
    pub fn new(config: GroupConfig) -> Coordinator {
        Coordinator {
            config,
            groups: Mutex::new(HashMap::new()),
        }
    }

    fn group(&self, id: &str) -> Option<Arc<Mutex<Group>>> {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn group_or_new(&self, id: &str) -> Arc<Mutex<Group>> {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(Group::new(id))))
            .clone()
    }

    /// Every group, for a pass that locks them one at a time.
    fn all_groups(&self) -> Vec<Arc<Mutex<Group>>> {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Runs `f` on the group under its lock.
    pub fn with_group<T>(&self, id: &str, f: impl FnOnce(&mut Group) -> T) -> Option<T> {
        let g = self.group(id)?;
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        Some(f(&mut g))
    }

    /// Ids of every group.
    pub fn group_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// JoinGroup: the member joins (or rejoins) and waits for the join phase to end, unless the
    /// request is refused or can be answered at once.
    pub fn join(&self, req: JoinRequest, now: Instant) -> Pending<JoinResult> {
        if let Err(code) = self.validate_join(&req) {
            return Pending::Now(JoinResult::error(code, &req.member_id));
        }
        let g = self.group_or_new(&req.group_id);
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if g.state == GroupState::Dead {
            return Pending::Now(JoinResult::error(
                codes::COORDINATOR_NOT_AVAILABLE,
                &req.member_id,
            ));
        }
        if g.is_consumer_group() {
            if !g.is_empty() {
                return Pending::Now(JoinResult::error(
                    codes::INCONSISTENT_GROUP_PROTOCOL,
                    &req.member_id,
                ));
            }
            // An empty consumer group becomes a classic one again; its offsets stay.
            g.consumer = None;
            g.consumer_dirty = true;
            g.protocol_type = None;
        }
        if !g.supports(&req.protocol_type, &req.protocols) {
            return Pending::Now(JoinResult::error(
                codes::INCONSISTENT_GROUP_PROTOCOL,
                &req.member_id,
            ));
        }
        let member_id = match g.joiner(&req, now) {
            Joiner::Member(id) => id,
            Joiner::AnsweredNow(answer) => return Pending::Now(answer),
        };
        g.pending.remove(&member_id);
        if !g.members.contains_key(&member_id) && g.members.len() >= self.config.max_size {
            return Pending::Now(JoinResult::error(codes::GROUP_MAX_SIZE_REACHED, &member_id));
        }
        let (tx, rx) = oneshot::channel();
        let changed = g.add_or_update_member(&member_id, &req, tx, now);
        g.rebalance_after_join(
            &member_id,
            changed,
            now,
            self.config.initial_rebalance_delay,
        );
        Pending::Later(rx)
    }

    /// The request's own errors, before any group is looked at.
    fn validate_join(&self, req: &JoinRequest) -> Result<(), i16> {
        if req.group_id.is_empty() {
            return Err(codes::INVALID_GROUP_ID);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return Err(codes::INVALID_SESSION_TIMEOUT);
        }
        Ok(())
    }

    /// A member's SyncGroup. Followers wait for the leader's; the leader's hands the
    /// assignment to every member, but nobody is answered before the caller has stored it
    /// (Kafka's storeGroup) and called `complete_sync`.
    pub fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Vec<u8>)>,
    ) -> SyncStart {
        let Some(g) = self.group(group_id) else {
            return SyncStart::now(SyncResult::error(codes::UNKNOWN_MEMBER_ID));
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if !g.members.contains_key(member_id) {
            return SyncStart::now(SyncResult::error(codes::UNKNOWN_MEMBER_ID));
        }
        if generation != g.generation {
            return SyncStart::now(SyncResult::error(codes::ILLEGAL_GENERATION));
        }
        match g.state {
            GroupState::PreparingRebalance => {
                SyncStart::now(SyncResult::error(codes::REBALANCE_IN_PROGRESS))
            }
            GroupState::Stable => {
                let m = &g.members[member_id];
                SyncStart::now(SyncResult {
                    error: codes::NONE,
                    protocol_type: g.protocol_type.clone(),
                    protocol_name: g.protocol_name.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(m) = g.members.get_mut(member_id) {
                    m.sync_waiter = Some(tx);
                    m.last_heartbeat = Instant::now();
                }
                let store = g.leader.as_deref() == Some(member_id);
                if store {
                    let given: HashMap<String, Vec<u8>> = assignments.into_iter().collect();
                    for m in g.members.values_mut() {
                        m.assignment = given.get(&m.member_id).cloned().unwrap_or_default();
                    }
                }
                SyncStart {
                    answer: Pending::Later(rx),
                    store,
                }
            }
            GroupState::Empty | GroupState::Dead => {
                SyncStart::now(SyncResult::error(codes::UNKNOWN_MEMBER_ID))
            }
        }
    }

    /// The leader's assignment of `generation` was stored (`Ok`), or could not be (the error
    /// for the members): every member waiting in SyncGroup gets its assignment and the group
    /// is Stable; or they all get the error, the assignment is dropped and the group
    /// rebalances (Kafka's storeGroup callback). A group that moved on meanwhile is left alone.
    pub fn complete_sync(&self, group_id: &str, generation: i32, stored: Result<(), i16>) {
        let Some(g) = self.group(group_id) else {
            return;
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if g.state != GroupState::CompletingRebalance || g.generation != generation {
            return;
        }
        let (pt, pn) = (g.protocol_type.clone(), g.protocol_name.clone());
        for m in g.members.values_mut() {
            let answer = match stored {
                Ok(()) => SyncResult {
                    error: codes::NONE,
                    protocol_type: pt.clone(),
                    protocol_name: pn.clone(),
                    assignment: m.assignment.clone(),
                },
                Err(code) => {
                    m.assignment.clear();
                    SyncResult::error(code)
                }
            };
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(answer);
            }
        }
        match stored {
            Ok(()) => g.transition(GroupState::Stable),
            Err(code) => {
                tracing::warn!(
                    group = group_id,
                    generation,
                    error = crate::protocol::errors::error_name(code),
                    "cannot store the group's assignment; rebalancing"
                );
                g.prepare_rebalance(Instant::now());
            }
        }
    }

    pub fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str, now: Instant) -> i16 {
        let Some(g) = self.group(group_id) else {
            return codes::UNKNOWN_MEMBER_ID;
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        let state = g.state;
        let current_generation = g.generation;
        let Some(m) = g.members.get_mut(member_id) else {
            return codes::UNKNOWN_MEMBER_ID;
        };
        m.last_heartbeat = now;
        match state {
            GroupState::Dead => codes::COORDINATOR_NOT_AVAILABLE,
            GroupState::Empty => codes::UNKNOWN_MEMBER_ID,
            _ if generation != current_generation => codes::ILLEGAL_GENERATION,
            GroupState::PreparingRebalance => codes::REBALANCE_IN_PROGRESS,
            GroupState::CompletingRebalance | GroupState::Stable => codes::NONE,
        }
    }

    /// Removes members (by member id, or by instance id for static members); one code each.
    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
        now: Instant,
    ) -> Vec<i16> {
        let Some(g) = self.group(group_id) else {
            return members.iter().map(|_| codes::UNKNOWN_MEMBER_ID).collect();
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut removed = false;
        for (member_id, instance) in members {
            let id = match instance {
                Some(i) => match g.static_members.get(i).cloned() {
                    Some(known) if member_id.is_empty() || *member_id == known => known,
                    Some(_) => {
                        out.push(codes::FENCED_INSTANCE_ID);
                        continue;
                    }
                    None => {
                        out.push(codes::UNKNOWN_MEMBER_ID);
                        continue;
                    }
                },
                None => member_id.clone(),
            };
            if g.members.contains_key(&id) {
                g.remove_member(&id);
                removed = true;
                out.push(codes::NONE);
            } else if g.pending.remove(&id) {
                out.push(codes::NONE);
            } else {
                out.push(codes::UNKNOWN_MEMBER_ID);
            }
        }
        if removed {
            g.after_member_removed(now);
        }
        out
    }

    /// Session expiry, rebalance timeouts and delayed initial joins; call it often.
    pub fn tick(&self, now: Instant) {
        let groups = self.all_groups();
        for g in groups {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            self.expire_consumer_members(&mut g, now);
            let expired: Vec<String> = g
                .members
                .values()
                .filter(|m| {
                    // A member waiting in a join is kept by the rebalance timeout instead.
                    m.join_waiter.is_none()
                        && now.duration_since(m.last_heartbeat)
                            > Duration::from_millis(m.session_timeout_ms.max(0) as u64)
                })
                .map(|m| m.member_id.clone())
                .collect();
            for id in &expired {
                tracing::info!(group = %g.id, member = %id, "member session expired");
                g.remove_member(id);
            }
            if !expired.is_empty() {
                g.after_member_removed(now);
            }
            if g.state == GroupState::PreparingRebalance {
                let delay_over = g.join_not_before.is_none_or(|t| now >= t);
                let timed_out = g.rebalance_deadline.is_some_and(|d| now >= d);
                if (delay_over && g.all_joined()) || timed_out {
                    g.complete_join();
                }
            }
        }
    }

    /// Checks that a commit may be stored (Kafka's rules for generations and members).
    /// A consumer group's members commit at their member epoch instead (v9+).
    pub fn check_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        version: i16,
    ) -> CommitCheck {
        if group_id.is_empty() {
            return CommitCheck::Error(codes::INVALID_GROUP_ID);
        }
        let g = self.group_or_new(group_id);
        let g = g.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = &g.consumer {
            return Self::check_consumer_commit(c, member_id, generation, version);
        }
        if generation < 0 && member_id.is_empty() {
            // A commit from outside any generation (assign() consumers, admin tools).
            return if g.members.is_empty() {
                CommitCheck::Ok
            } else {
                CommitCheck::Error(codes::UNKNOWN_MEMBER_ID)
            };
        }
        if !g.members.contains_key(member_id) {
            return CommitCheck::Error(codes::UNKNOWN_MEMBER_ID);
        }
        if generation != g.generation {
            return CommitCheck::Error(codes::ILLEGAL_GENERATION);
        }
        if g.state == GroupState::CompletingRebalance {
            return CommitCheck::Error(codes::REBALANCE_IN_PROGRESS);
        }
        CommitCheck::Ok
    }

    /// Stores committed offsets (after they are in `__consumer_offsets`).
    pub fn store_offsets(&self, group_id: &str, offsets: Vec<((String, i32), CommittedOffset)>) {
        let g = self.group_or_new(group_id);
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in offsets {
            g.offsets.insert(k, v);
        }
    }

    /// Removes offsets (OffsetDelete, DeleteGroups, retention, or a tombstone on load).
    pub fn remove_offsets(&self, group_id: &str, keys: &[(String, i32)]) {
        if let Some(g) = self.group(group_id) {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            for k in keys {
                g.offsets.remove(k);
            }
        }
    }

    /// Committed offsets of a group (all, or the given partitions).
    pub fn fetch_offsets(&self, group_id: &str) -> BTreeMap<(String, i32), CommittedOffset> {
        self.group(group_id)
            .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()).offsets.clone())
            .unwrap_or_default()
    }

    /// Can `topic`'s offsets be deleted from the group?
    pub fn check_offset_delete(&self, group_id: &str, topic: &str) -> Result<(), i16> {
        let Some(g) = self.group(group_id) else {
            return Err(codes::GROUP_ID_NOT_FOUND);
        };
        let g = g.lock().unwrap_or_else(|p| p.into_inner());
        if !g.is_empty() && (g.subscribes_to(topic) || g.consumer_subscribes_to(topic)) {
            return Err(codes::GROUP_SUBSCRIBED_TO_TOPIC);
        }
        Ok(())
    }

    /// DeleteGroups: only an empty group may go; returns its offsets' keys for tombstones.
    pub fn delete_group(&self, group_id: &str) -> Result<Vec<(String, i32)>, i16> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let Some(g) = groups.get(group_id).cloned() else {
            return Err(codes::GROUP_ID_NOT_FOUND);
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if !g.is_empty() {
            return Err(codes::NON_EMPTY_GROUP);
        }
        g.transition(GroupState::Dead);
        groups.remove(group_id);
        Ok(g.offsets.keys().cloned().collect())
    }

    /// Restores a group's generation and protocol from `__consumer_offsets` at start. Members
    /// are not restored: they rejoin, as after a coordinator move in Kafka.
    pub fn restore_group(&self, group_id: &str, protocol_type: &str, generation: i32) {
        let g = self.group_or_new(group_id);
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        g.generation = g.generation.max(generation);
        if !protocol_type.is_empty() {
            g.protocol_type = Some(protocol_type.to_string());
        }
    }

    /// Drops the groups `leaves` names (their partition moved to another broker); waiting
    /// joins and syncs end. Returns how many went.
    pub fn unload(&self, leaves: impl Fn(&str) -> bool) -> usize {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let before = groups.len();
        groups.retain(|id, _| !leaves(id));
        before - groups.len()
    }

    /// Drops a group record on load (a tombstone for its metadata).
    pub fn forget_group(&self, group_id: &str) {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(group_id);
    }

    /// Offsets of empty groups older than `offsets.retention.minutes`; returns what expired.
    pub fn expire_offsets(&self, now_ms: i64) -> Vec<(String, (String, i32))> {
        let retention = self.config.offsets_retention.as_millis() as i64;
        let groups = self.all_groups();
        let mut out = Vec::new();
        for g in groups {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if !g.is_empty() {
                continue;
            }
            let since = g.state_changed_ms;
            let expired: Vec<(String, i32)> = g
                .offsets
                .iter()
                .filter(|(_, o)| now_ms - o.commit_timestamp.max(since) > retention)
                .map(|(k, _)| k.clone())
                .collect();
            for k in expired {
                g.offsets.remove(&k);
                out.push((g.id.clone(), k));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
