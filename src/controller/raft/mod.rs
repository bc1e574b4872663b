//! The metadata quorum: openraft replicating `__cluster_metadata-0` among the voters of
//! `controller.quorum.voters`. The Raft leader is the active controller; every voter applies
//! committed entries to its MetadataImage. Broker-only nodes follow as observers (`observer`).

pub mod election;
pub mod entries;
pub mod log_store;
pub mod network;
pub mod observer;
pub mod quorum_state;
pub mod snapshot;
pub mod state_machine;
mod voter_change;
pub mod voters;

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::config::cluster::Voter;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataRecord;
use crate::storage::{KafkaUuid, LogManager, StorageError};
use election::ElectionTimer;
use entries::EntryContext;
use log_store::{LogStore, MetadataLog};
use network::{ClusterMismatch, Network};
use state_machine::{SnapshotPolicy, StateMachine};
use voters::VoterNode;

pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The quorum's types: entries carry encoded metadata records.
    pub TypeConfig:
        D = MetadataBatch,
        R = Applied,
        NodeId = NodeId,
        Node = voters::VoterNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Entry = openraft::Entry<TypeConfig>;
pub type Raft = openraft::Raft<TypeConfig>;

/// One metadata change: the encoded values of its records, committed atomically.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MetadataBatch {
    pub records: Vec<Vec<u8>>,
}

/// Where a committed entry landed in the metadata log.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Applied {
    pub base_offset: i64,
    pub last_offset: i64,
}

/// Why a write did not commit.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This node does not lead the quorum; the leader, if known.
    #[error("this node is not the active controller")]
    NotLeader(Option<i32>),
    #[error("the metadata quorum failed: {0}")]
    Fatal(String),
}

#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("the metadata quorum cannot start: {0}")]
    Raft(String),
}

/// How this node takes part in the quorum.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: i32,
    pub cluster_id: String,
    pub voters: Vec<Voter>,
    /// The controller listener's name, written into voter records.
    pub listener: String,
    /// How this voter connects to the others' controller listeners (PLAINTEXT or TLS).
    pub security: crate::client::ClientSecurity,
    pub election_timeout_ms: u64,
    pub snapshot: SnapshotPolicy,
    pub segment_bytes: u64,
    /// The directory ids of `voters` (a dynamic quorum's; a static quorum has none).
    pub directories: BTreeMap<i32, KafkaUuid>,
    /// A dynamic quorum (`kraft.version` 1): its voters carry directory ids and change with
    /// AddRaftVoter and RemoveRaftVoter; `voters` holds only the first voters of a new quorum,
    /// or nobody on a controller that waits to be added.
    pub dynamic: bool,
}

/// A voter's progress as the leader sees it (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub id: i32,
    /// Zero when unknown (a static quorum's voters, observers).
    pub directory_id: KafkaUuid,
    /// -1 when unknown.
    pub log_end_offset: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

/// The quorum as the leader describes it.
#[derive(Debug, Clone)]
pub struct QuorumStatus {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<ReplicaProgress>,
    pub observers: Vec<ReplicaProgress>,
}

/// Times of the last acknowledged request per peer, kept by this node as leader.
#[derive(Default)]
struct Contacts {
    last_ack: network::Acks,
    caught_up: HashMap<i32, i64>,
    observers: HashMap<i32, (i64, i64, i64)>,
}

/// This node's part in the metadata quorum.
pub struct Quorum {
    raft: Raft,
    log: Arc<MetadataLog>,
    sm: StateMachine,
    node_id: i32,
    cluster_id: String,
    mismatch: ClusterMismatch,
    contacts: Arc<parking_lot::Mutex<Contacts>>,
    election: ElectionTimer,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    dynamic: bool,
    /// The first of `controller.listener.names`: the listener a new voter must name.
    listener: String,
    /// Held while a voter is added or removed: one change at a time.
    changing: tokio::sync::Mutex<()>,
}

/// openraft's timers from Kafka's. A follower that stops hearing from the leader waits out the
/// leader's lease (openraft takes `election_timeout_max`) and then a random election timeout
/// (drawn afresh for every wait by `election`, which stands in for openraft's trigger), so
/// `controller.quorum.election.timeout.ms` (1 s) as the maximum gives 1.5-2 s before a vote,
/// close to Kafka's `controller.quorum.fetch.timeout.ms` (2 s). Heartbeats go out four times
/// per election timeout. openraft also gives every AppendEntries the heartbeat interval to
/// answer: a follower catching up must receive, write and fsync a payload within it, so the
/// interval is a quarter (250 ms), not less, and a payload is at most 100 entries. With an
/// eighth (125 ms) and 500 entries, a restarted voter on a loaded two-core machine timed out
/// on every catch-up request and never caught up.
fn openraft_config(cfg: &QuorumConfig) -> Result<openraft::Config, QuorumError> {
    let election = cfg.election_timeout_ms.max(50);
    openraft::Config {
        cluster_name: cfg.cluster_id.clone(),
        heartbeat_interval: (election / 4).max(10),
        election_timeout_min: election / 2,
        election_timeout_max: election,
        install_snapshot_timeout: 10_000,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        max_payload_entries: 100,
        // `election` decides when to stand.
        enable_elect: false,
        ..Default::default()
    }
    .validate()
    .map_err(|e| QuorumError::Raft(e.to_string()))
}

/// The election timer's waits, as openraft would take them from `config`: the leader's lease
/// is `election_timeout_max`, and a voter that met a longer log waits twice that more.
fn election_timeouts(config: &openraft::Config) -> election::Timeouts {
    election::Timeouts {
        min: Duration::from_millis(config.election_timeout_min),
        max: Duration::from_millis(config.election_timeout_max),
        lease: Duration::from_millis(config.election_timeout_max),
        defer: Duration::from_millis(config.election_timeout_max * 2),
    }
}

/// The voters' configured addresses; a voter without a port (a cluster of one on an
/// ephemeral port) has none and is dialled where the membership says.
fn configured_addresses(voters: &[Voter]) -> HashMap<NodeId, String> {
    voters
        .iter()
        .filter(|v| v.port != 0)
        .map(|v| (v.id as NodeId, v.address()))
        .collect()
}

impl Quorum {
    /// Opens the metadata log and snapshot, starts openraft and, on a fresh log, writes the
    /// voter set. Every voter writes the same first entry, so the order of start-up is free.
    pub async fn start(logs: &LogManager, cfg: QuorumConfig) -> Result<Quorum, QuorumError> {
        // The snapshot lives in the log's directory; find it before opening the log.
        let dir = logs
            .log_dir()
            .join(format!("{}-0", log_store::METADATA_TOPIC));
        let snap = snapshot::latest(&dir)?.map(|(_, s)| s);
        let log = Arc::new(MetadataLog::open(
            logs,
            cfg.segment_bytes,
            snap.as_ref().map(log_store::anchor_of),
            context(&cfg),
        )?);
        let (sm, _images, snapshot_due) = StateMachine::new(
            log.clone(),
            snap.as_ref(),
            cfg.listener.clone(),
            cfg.snapshot,
        );
        let mismatch = ClusterMismatch::default();
        let contacts: Arc<parking_lot::Mutex<Contacts>> = Arc::default();
        let config = openraft_config(&cfg)?;
        let election = ElectionTimer::new(election_timeouts(&config));
        let net = Network::new(
            &cfg.cluster_id,
            cfg.node_id,
            cfg.security.clone(),
            mismatch.clone(),
            contacts.lock().last_ack.clone(),
            election.clone(),
            // A dynamic quorum dials its voters where its membership says.
            match cfg.dynamic {
                true => HashMap::new(),
                false => configured_addresses(&cfg.voters),
            },
        );
        let raft = Raft::new(
            cfg.node_id as NodeId,
            Arc::new(config),
            net,
            LogStore::new(log.clone()),
            sm.clone(),
        )
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
        initialize_if_new(&raft, &cfg).await?;
        let mut tasks = vec![tokio::spawn(election::run(
            raft.clone(),
            cfg.node_id as NodeId,
            election.clone(),
        ))];
        let r = raft.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                snapshot_due.notified().await;
                if r.trigger().snapshot().await.is_err() {
                    return;
                }
            }
        }));
        tasks.push(tokio::spawn(track_contacts(raft.clone(), contacts.clone())));
        Ok(Quorum {
            raft,
            log,
            sm,
            node_id: cfg.node_id,
            cluster_id: cfg.cluster_id,
            mismatch,
            contacts,
            election,
            tasks,
            dynamic: cfg.dynamic,
            listener: cfg.listener,
            changing: tokio::sync::Mutex::new(()),
        })
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The published images of this node's state machine.
    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.sm.subscribe()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.sm.subscribe().borrow().clone()
    }

    pub fn metadata_log(&self) -> &Arc<MetadataLog> {
        &self.log
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<i32> {
        self.raft
            .metrics()
            .borrow()
            .current_leader
            .map(|n| n as i32)
    }

    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.node_id as NodeId)
    }

    /// The current term (Kafka's quorum epoch).
    pub fn epoch(&self) -> i32 {
        self.raft.metrics().borrow().current_term as i32
    }

    /// Leadership changes, as the leader id this node knows of.
    pub fn leader_changes(&self) -> watch::Receiver<Option<i32>> {
        let (tx, rx) = watch::channel(self.leader());
        let mut metrics = self.raft.metrics();
        tokio::spawn(async move {
            while metrics.changed().await.is_ok() {
                let leader = metrics.borrow().current_leader.map(|n| n as i32);
                tx.send_if_modified(|cur| {
                    let changed = *cur != leader;
                    *cur = leader;
                    changed
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        rx
    }

    /// Why this node's part in the quorum cannot go on: a voter of another cluster answered,
    /// or openraft stopped on an error (its storage failed). The message to exit with.
    pub fn fatal(&self) -> Option<String> {
        if let Some(m) = self.mismatch.get() {
            return Some(m);
        }
        match &self.raft.metrics().borrow().running_state {
            Ok(()) => None,
            Err(e) => Some(format!(
                "the metadata quorum stopped on node {}: {e}",
                self.node_id
            )),
        }
    }

    /// Commits `records` as one entry and waits until this node has applied it.
    pub async fn write(&self, records: &[MetadataRecord]) -> Result<Applied, WriteError> {
        let batch = MetadataBatch {
            records: records.iter().map(MetadataRecord::encode).collect(),
        };
        match self.raft.client_write(batch).await {
            Ok(r) => Ok(r.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(WriteError::NotLeader(f.leader_id.map(|n| n as i32)))
            }
            Err(e) => Err(WriteError::Fatal(e.to_string())),
        }
    }

    /// Confirms with a quorum that this node still leads and has applied everything
    /// committed before now.
    pub async fn ensure_leader(&self) -> Result<(), WriteError> {
        self.raft
            .ensure_linearizable()
            .await
            .map(|_| ())
            .map_err(|_| WriteError::NotLeader(self.leader()))
    }

    /// Answers a quorum request from another voter (see `network`).
    pub async fn serve(&self, frame: &[u8]) -> Result<Vec<u8>, network::WireError> {
        network::serve(&self.raft, &self.cluster_id, &self.election, frame).await
    }

    /// Notes an observer's fetch position (DescribeQuorum lists observers).
    pub fn observer_fetched(&self, id: i32, fetch_offset: i64, caught_up: bool) {
        let now = crate::storage::log::now_ms();
        let mut c = self.contacts.lock();
        let prev = c.observers.get(&id).map_or(-1, |o| o.2);
        c.observers
            .insert(id, (fetch_offset, now, if caught_up { now } else { prev }));
    }

    /// The committed end of the metadata log as this node has applied it.
    pub fn applied_end_offset(&self) -> i64 {
        self.image().next_offset()
    }

    /// The quorum as this node (the leader) sees it; `None` when it is not the leader.
    pub fn status(&self) -> Option<QuorumStatus> {
        if !self.is_leader() {
            return None;
        }
        let m = self.raft.metrics().borrow().clone();
        let now = crate::storage::log::now_ms();
        let c = self.contacts.lock();
        let membership = m.membership_config.membership();
        // A leader that removed itself is no voter while it steps down.
        let mut voters: Vec<ReplicaProgress> = membership
            .voter_ids()
            .any(|id| id == self.node_id as NodeId)
            .then(|| ReplicaProgress {
                id: self.node_id,
                directory_id: directory_of(membership, self.node_id as NodeId),
                log_end_offset: self.log.log_end_offset(),
                last_fetch_ms: now,
                last_caught_up_ms: now,
            })
            .into_iter()
            .collect();
        let others = membership
            .voter_ids()
            .filter(|id| *id != self.node_id as NodeId);
        voters.extend(others.map(|id| self.replica_progress(&m, &c, id)));
        let mut observers: Vec<ReplicaProgress> = c
            .observers
            .iter()
            .filter(|(_, o)| now - o.1 < 300_000)
            .map(|(id, o)| ReplicaProgress {
                id: *id,
                directory_id: KafkaUuid::ZERO,
                log_end_offset: o.0,
                last_fetch_ms: o.1,
                last_caught_up_ms: o.2,
            })
            .collect();
        // Learners (a controller being added, or a removed voter that stays) are observers to
        // Kafka's tools.
        let learners = membership.learner_ids();
        observers.extend(learners.map(|id| self.replica_progress(&m, &c, id)));
        Some(QuorumStatus {
            leader_id: self.node_id,
            leader_epoch: m.current_term as i32,
            high_watermark: self.applied_end_offset(),
            voters,
            observers,
        })
    }

    /// How far the leader has replicated to member `id` (a voter or a learner).
    fn replica_progress(
        &self,
        m: &openraft::RaftMetrics<NodeId, VoterNode>,
        c: &Contacts,
        id: NodeId,
    ) -> ReplicaProgress {
        let matched = m
            .replication
            .as_ref()
            .and_then(|r| r.get(&id).cloned().flatten());
        let i = id as i32;
        ReplicaProgress {
            id: i,
            directory_id: directory_of(m.membership_config.membership(), id),
            log_end_offset: matched
                .and_then(|l| self.log.end_offset_of(l.index))
                .unwrap_or(-1),
            last_fetch_ms: c.last_ack.lock().get(&i).copied().unwrap_or(-1),
            last_caught_up_ms: c.caught_up.get(&i).copied().unwrap_or(-1),
        }
    }

    /// Stops openraft; the log stays as it is.
    pub async fn shutdown(&self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
    }
}

/// On a fresh log, writes the first voters. Every voter writes the same first entry, so the order
/// of start-up is free; a controller of a dynamic quorum that is not one of its first voters
/// starts empty and waits for the leader to add it.
async fn initialize_if_new(raft: &Raft, cfg: &QuorumConfig) -> Result<(), QuorumError> {
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
    if initialized || cfg.voters.is_empty() {
        return Ok(());
    }
    let members: BTreeMap<NodeId, VoterNode> = cfg
        .voters
        .iter()
        .map(|v| (v.id as NodeId, initial_node(cfg, v)))
        .collect();
    match raft.initialize(members).await {
        Ok(()) | Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => {
            Ok(())
        }
        Err(e) => Err(QuorumError::Raft(e.to_string())),
    }
}

/// The directory id the membership records for `id` (zero when none).
fn directory_of(m: &openraft::Membership<NodeId, VoterNode>, id: NodeId) -> KafkaUuid {
    m.get_node(&id).map_or(KafkaUuid::ZERO, |n| n.directory_id)
}

/// A first voter as the new log's membership names it, with its directory id if known.
fn initial_node(cfg: &QuorumConfig, v: &Voter) -> VoterNode {
    let dir = cfg.directories.get(&v.id).copied().unwrap_or_default();
    VoterNode::new(v.address(), dir)
}

fn context(cfg: &QuorumConfig) -> EntryContext {
    EntryContext {
        leader: -1,
        leader_term: 0,
        voters: cfg.voters.iter().map(|v| v.id).collect(),
        listener: cfg.listener.clone(),
    }
}

/// While leading, notes for each voter when it was last seen caught up: its matched entry is
/// the leader's last one and it answered recently.
async fn track_contacts(raft: Raft, contacts: Arc<parking_lot::Mutex<Contacts>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let m = raft.metrics().borrow().clone();
        if m.state == ServerState::Shutdown {
            return;
        }
        let Some(rep) = m.replication else {
            continue;
        };
        let mut c = contacts.lock();
        let acks = c.last_ack.lock().clone();
        for (id, matched) in rep {
            let id = id as i32;
            let current =
                matched.map(|l| l.index).is_some() && matched.map(|l| l.index) == m.last_log_index;
            if let (true, Some(at)) = (current, acks.get(&id)) {
                c.caught_up.insert(id, *at);
            }
        }
    }
}
