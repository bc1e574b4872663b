//! A broker-only node's view of the quorum: it follows the active controller as an observer,
//! fetching committed batches of `__cluster_metadata-0` (Kafka's raft Fetch on the controller
//! listener), keeping them in its own log and snapshots, and applying them to its image.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_snapshot_request::{
    PartitionSnapshot, SnapshotId, TopicSnapshot,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchSnapshotRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use openraft::StoredMembership;
use tokio::sync::watch;

use super::entries::{decode_entry, EntryContext};
use super::log_store::{anchor_of, MetadataLog, METADATA_TOPIC, METADATA_TOPIC_ID};
use super::network::ClusterMismatch;
use super::snapshot::{self, SnapshotFile};
use super::state_machine::{apply_entry, SnapshotPolicy};
use super::voters::VoterNode;
use super::NodeId;
use crate::client::{ClientSecurity, Connection};
use crate::metadata::image::MetadataImage;
use crate::protocol::errors;
use crate::storage::batch::BatchHeader;
use crate::storage::{LogManager, StorageError};

/// Fetch version the observer speaks (cluster id, replica state, current leader).
const FETCH_VERSION: i16 = 16;
const MAX_FETCH_BYTES: i32 = 8 << 20;

#[derive(Debug, Clone)]
pub struct ObserverConfig {
    pub node_id: i32,
    pub cluster_id: String,
    /// `(voter id, host:port)`; the id is -1 for bootstrap servers.
    pub controllers: Vec<(i32, String)>,
    pub listener: String,
    /// How to connect to the controller listener (PLAINTEXT or TLS).
    pub security: ClientSecurity,
    pub segment_bytes: u64,
    pub snapshot: SnapshotPolicy,
    pub request_timeout: Duration,
}

struct State {
    image: Arc<MetadataImage>,
    membership: StoredMembership<NodeId, VoterNode>,
    bytes_since_snapshot: u64,
}

/// The observer: its log, its image, and the leader it follows.
pub struct Observer {
    cfg: ObserverConfig,
    log: Arc<MetadataLog>,
    state: parking_lot::Mutex<State>,
    image_tx: watch::Sender<Arc<MetadataImage>>,
    leader_tx: watch::Sender<Option<i32>>,
    mismatch: ClusterMismatch,
}

fn ctx(cfg: &ObserverConfig) -> EntryContext {
    EntryContext {
        leader: -1,
        leader_term: 0,
        voters: cfg
            .controllers
            .iter()
            .map(|(id, _)| *id)
            .filter(|i| *i >= 0)
            .collect(),
        listener: cfg.listener.clone(),
    }
}

impl Observer {
    /// Loads the newest snapshot and replays the local log after it.
    pub fn open(logs: &LogManager, cfg: ObserverConfig) -> Result<Arc<Observer>, StorageError> {
        let dir = logs.log_dir().join(format!("{METADATA_TOPIC}-0"));
        let snap = snapshot::latest(&dir)?.map(|(_, s)| s);
        let log = Arc::new(MetadataLog::open(
            logs,
            cfg.segment_bytes,
            snap.as_ref().map(anchor_of),
            ctx(&cfg),
        )?);
        let (mut image, membership) = match &snap {
            Some(s) => (s.image(), s.membership.clone()),
            None => (MetadataImage::empty(), StoredMembership::default()),
        };
        let mut membership = membership;
        let start = log.log_start_offset();
        let end = log.log_end_offset();
        let mut at = start;
        while at < end {
            let data = log.read(at, 4 << 20, end)?;
            if data.is_empty() {
                break;
            }
            at = apply_batches(&log, &data, &mut image, &mut membership).0;
        }
        let image = Arc::new(image);
        let (image_tx, _) = watch::channel(image.clone());
        let (leader_tx, _) = watch::channel(None);
        Ok(Arc::new(Observer {
            cfg,
            log,
            state: parking_lot::Mutex::new(State {
                image,
                membership,
                bytes_since_snapshot: 0,
            }),
            image_tx,
            leader_tx,
            mismatch: ClusterMismatch::default(),
        }))
    }

    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image_tx.subscribe()
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.state.lock().image.clone()
    }

    pub fn leader_changes(&self) -> watch::Receiver<Option<i32>> {
        self.leader_tx.subscribe()
    }

    pub fn leader(&self) -> Option<i32> {
        *self.leader_tx.borrow()
    }

    pub fn cluster_mismatch(&self) -> Option<String> {
        self.mismatch.get()
    }

    fn set_leader(&self, leader: Option<i32>) {
        self.leader_tx.send_if_modified(|cur| {
            let changed = *cur != leader;
            *cur = leader;
            changed
        });
    }

    /// Follows the quorum until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let mut next = 0usize;
        let mut conn: Option<(i32, Connection)> = None;
        let mut outage = Outage::default();
        loop {
            if conn.as_ref().is_none_or(|(_, c)| c.is_broken()) {
                let (id, addr) = self.pick(&mut next);
                let timeout = self.cfg.request_timeout;
                match Connection::connect_with(&addr, timeout, &self.cfg.security).await {
                    Ok(c) => conn = Some((id, c)),
                    Err(e) => {
                        outage.failed(&format!("cannot connect to {addr}: {e}"));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let Some((_, c)) = conn.as_ref() else {
                continue;
            };
            match self.fetch_once(c).await {
                Ok(true) => outage.ended(),
                Ok(false) => {
                    // Not the leader: try the one it named, or the next address.
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    outage.failed(&format!("metadata fetch failed: {e}"));
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// The voters the metadata log names, with their controller addresses: a dynamic
    /// quorum's voters may be none of the bootstrap servers.
    pub fn voter_addresses(&self) -> Vec<(i32, String)> {
        let st = self.state.lock();
        super::voters::addresses(&super::voters::voters_of(st.membership.membership()))
    }

    /// The controller to ask next: the known leader, else the next address in turn.
    fn pick(&self, next: &mut usize) -> (i32, String) {
        let known = super::voters::contacts(&self.cfg.controllers, &self.voter_addresses());
        if let Some(l) = self.leader() {
            if let Some((id, addr)) = known.iter().find(|(id, _)| *id == l) {
                return (*id, addr.clone());
            }
        }
        let n = known.len().max(1);
        let (id, addr) = known[*next % n].clone();
        *next += 1;
        (id, addr)
    }

    /// One fetch; `Ok(false)` when the controller asked is not the leader.
    async fn fetch_once(&self, c: &Connection) -> Result<bool, String> {
        let (epoch, end) = self.log.last_epoch_and_end();
        let req = FetchRequest::default()
            .with_cluster_id(Some(StrBytes::from_string(self.cfg.cluster_id.clone())))
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(self.cfg.node_id))
                    .with_replica_epoch(-1),
            )
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(MAX_FETCH_BYTES)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                .with_topic_id(uuid::Uuid::from_bytes(METADATA_TOPIC_ID.0))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(end)
                    .with_last_fetched_epoch(epoch)
                    .with_partition_max_bytes(MAX_FETCH_BYTES)])]);
        let resp = c
            .call_at(&req, FETCH_VERSION)
            .await
            .map_err(|e| e.to_string())?;
        if resp.error_code == errors::INCONSISTENT_CLUSTER_ID {
            self.mismatch.report(format!(
                "the controller at {} belongs to another cluster than {} (this node's meta.properties)",
                c.addr(),
                self.cfg.cluster_id
            ));
            return Err("the controller belongs to another cluster".into());
        }
        let Some(p) = resp.responses.first().and_then(|t| t.partitions.first()) else {
            return Err(format!(
                "fetch answered {}",
                errors::error_name(resp.error_code)
            ));
        };
        let leader = p.current_leader.leader_id.0;
        self.set_leader((leader >= 0).then_some(leader));
        if p.error_code == errors::NOT_LEADER_OR_FOLLOWER {
            return Ok(false);
        }
        if p.error_code != errors::NONE {
            return Err(format!(
                "fetch answered {}",
                errors::error_name(p.error_code)
            ));
        }
        if p.snapshot_id.end_offset >= 0 {
            let id = (p.snapshot_id.end_offset, p.snapshot_id.epoch);
            self.install_snapshot(c, id).await?;
            return Ok(true);
        }
        let records = p.records.clone().unwrap_or_default();
        if !records.is_empty() {
            self.append(&records).map_err(|e| e.to_string())?;
        }
        Ok(true)
    }

    fn append(&self, records: &Bytes) -> Result<(), StorageError> {
        self.log.append_fetched(records)?;
        let mut st = self.state.lock();
        let mut img = (*st.image).clone();
        let mut membership = st.membership.clone();
        let (_, bytes) = apply_batches(&self.log, records, &mut img, &mut membership);
        st.bytes_since_snapshot += bytes;
        st.membership = membership;
        let img = Arc::new(img);
        st.image = img.clone();
        let due = self.cfg.snapshot.max_bytes > 0
            && st.bytes_since_snapshot >= self.cfg.snapshot.max_bytes;
        if due {
            st.bytes_since_snapshot = 0;
        }
        let membership = st.membership.clone();
        drop(st);
        self.image_tx.send_replace(img.clone());
        if due {
            if let Err(e) = self.write_snapshot(&img, membership) {
                tracing::warn!(error = %e, "cannot write a metadata snapshot");
            }
        }
        Ok(())
    }

    /// Writes a snapshot of `img` and drops the log it covers.
    fn write_snapshot(
        &self,
        img: &MetadataImage,
        membership: StoredMembership<NodeId, VoterNode>,
    ) -> Result<(), StorageError> {
        let end = img.next_offset();
        let Some(last) = self.log.log_id_containing(end - 1) else {
            return Ok(());
        };
        let snap = SnapshotFile {
            end_offset: end,
            epoch: last.leader_id.term as i32,
            last_log_id: last,
            membership,
            last_timestamp: img.last_timestamp,
            records: img.to_records(),
        };
        let bytes = snapshot::encode(&snap, &self.cfg.listener);
        let dir = self.log.dir().to_path_buf();
        snapshot::write(&dir, &bytes, end, snap.epoch)?;
        snapshot::remove_older(&dir, end)?;
        self.log.set_anchor(anchor_of(&snap));
        self.log.purge_before(end)?;
        tracing::info!(end_offset = end, "wrote a metadata snapshot");
        Ok(())
    }

    /// Fetches the leader's snapshot `(end offset, epoch)` whole and starts over from it.
    async fn install_snapshot(&self, c: &Connection, id: (i64, i32)) -> Result<(), String> {
        let mut bytes = Vec::new();
        loop {
            let req = FetchSnapshotRequest::default()
                .with_cluster_id(Some(StrBytes::from_string(self.cfg.cluster_id.clone())))
                .with_replica_id(BrokerId(self.cfg.node_id))
                .with_max_bytes(4 << 20)
                .with_topics(vec![TopicSnapshot::default()
                    .with_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                    .with_partitions(vec![PartitionSnapshot::default()
                        .with_partition(0)
                        .with_snapshot_id(
                            SnapshotId::default().with_end_offset(id.0).with_epoch(id.1),
                        )
                        .with_position(bytes.len() as i64)])]);
            let resp = c.call_at(&req, 1).await.map_err(|e| e.to_string())?;
            let Some(p) = resp.topics.first().and_then(|t| t.partitions.first()) else {
                return Err("FetchSnapshot answered no partition".into());
            };
            if p.error_code != errors::NONE {
                return Err(format!(
                    "FetchSnapshot answered {}",
                    errors::error_name(p.error_code)
                ));
            }
            bytes.extend_from_slice(&p.unaligned_records);
            if bytes.len() as i64 >= p.size || p.unaligned_records.is_empty() {
                break;
            }
        }
        let snap = snapshot::decode(&bytes).map_err(|e| e.to_string())?;
        let dir = self.log.dir().to_path_buf();
        snapshot::write(&dir, &bytes, snap.end_offset, snap.epoch).map_err(|e| e.to_string())?;
        snapshot::remove_older(&dir, snap.end_offset).map_err(|e| e.to_string())?;
        self.log
            .restart_at(anchor_of(&snap))
            .map_err(|e| e.to_string())?;
        let img = Arc::new(snap.image());
        {
            let mut st = self.state.lock();
            st.image = img.clone();
            st.membership = snap.membership.clone();
            st.bytes_since_snapshot = 0;
        }
        tracing::info!(
            end_offset = snap.end_offset,
            "installed the controller's metadata snapshot"
        );
        self.image_tx.send_replace(img);
        Ok(())
    }
}

/// Applies whole batches to `img`; returns the offset after them and the metadata bytes seen.
fn apply_batches(
    log: &MetadataLog,
    data: &[u8],
    img: &mut MetadataImage,
    membership: &mut StoredMembership<NodeId, VoterNode>,
) -> (i64, u64) {
    let mut pos = 0;
    let mut next = img.next_offset();
    let mut bytes = 0;
    while pos < data.len() {
        let Ok(h) = BatchHeader::parse(&data[pos..]) else {
            break;
        };
        let size = h.size();
        if pos + size > data.len() {
            break;
        }
        let b = &data[pos..pos + size];
        if h.base_offset >= img.next_offset() {
            let index = log
                .log_id_containing(h.base_offset)
                .map(|l| l.index)
                .unwrap_or_default();
            match decode_entry(b, index) {
                Ok(e) => {
                    if let openraft::EntryPayload::Membership(m) = &e.payload {
                        *membership = StoredMembership::new(Some(e.log_id), m.clone());
                    }
                    bytes += apply_entry(img, &e, h.base_offset);
                }
                Err(err) => {
                    tracing::error!(error = %err, "skipping a metadata batch that cannot be read");
                    img.last_offset = h.next_offset() - 1;
                }
            }
        }
        next = h.next_offset();
        pos += size;
    }
    (next, bytes)
}

/// How long the controllers must stay out of reach before it is logged as a warning.
const OUTAGE_WARNING: Duration = Duration::from_secs(5);

/// The observer's time without metadata: logged at WARN once it lasts `OUTAGE_WARNING` (a
/// refused TLS handshake or a certificate without the right does not mend itself), and its end.
#[derive(Default)]
struct Outage {
    since: Option<std::time::Instant>,
    warned: bool,
}

impl Outage {
    fn failed(&mut self, why: &str) {
        tracing::debug!(reason = why, "cannot follow the quorum");
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        if !self.warned && since.elapsed() >= OUTAGE_WARNING {
            self.warned = true;
            tracing::warn!(reason = why, "cannot connect to a controller");
        }
    }

    fn ended(&mut self) {
        if std::mem::take(&mut self.warned) {
            tracing::info!("following the quorum again");
        }
        self.since = None;
    }
}
