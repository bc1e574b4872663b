//! The quorum's state machine: committed entries applied to the MetadataImage, which is
//! published to every watcher on this node; snapshots written and installed as Kafka's.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError as RaftStorageError, StorageIOError, StoredMembership,
};
use tokio::sync::{watch, Notify};

use super::entries::record_count;
use super::log_store::{Anchor, MetadataLog};
use super::snapshot::{self, SnapshotFile};
use super::voters::VoterNode;
use super::{Applied, Entry, NodeId, TypeConfig};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataRecord;

/// When to take a snapshot (Kafka's `metadata.log.max.record.bytes.between.snapshots` and
/// `metadata.log.max.snapshot.interval.ms`).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotPolicy {
    pub max_bytes: u64,
    /// 0: never by time.
    pub max_interval_ms: u64,
}

struct SmState {
    image: Arc<MetadataImage>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, VoterNode>,
    /// The Kafka offset the next entry starts at.
    next_offset: i64,
    bytes_since_snapshot: u64,
    last_snapshot: Instant,
}

struct Shared {
    log: Arc<MetadataLog>,
    listener: String,
    policy: SnapshotPolicy,
    state: parking_lot::Mutex<SmState>,
    image_tx: watch::Sender<Arc<MetadataImage>>,
    /// Woken when the policy asks for a snapshot; the quorum's task triggers it.
    snapshot_due: Arc<Notify>,
}

/// The state machine handle openraft drives (cheap to clone).
#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
}

fn sm_err(e: impl std::error::Error + 'static) -> RaftStorageError<NodeId> {
    StorageIOError::write_state_machine(&e).into()
}

impl StateMachine {
    /// Starts from the newest snapshot, if any; entries after it are applied as they commit.
    pub fn new(
        log: Arc<MetadataLog>,
        snapshot: Option<&SnapshotFile>,
        listener: String,
        policy: SnapshotPolicy,
    ) -> (
        StateMachine,
        watch::Receiver<Arc<MetadataImage>>,
        Arc<Notify>,
    ) {
        let (image, last_applied, membership, next_offset) = match snapshot {
            Some(s) => (
                s.image(),
                Some(s.last_log_id),
                s.membership.clone(),
                s.end_offset,
            ),
            None => (
                MetadataImage::empty(),
                None,
                StoredMembership::default(),
                log.log_start_offset(),
            ),
        };
        let image = Arc::new(image);
        let (image_tx, image_rx) = watch::channel(image.clone());
        let snapshot_due = Arc::new(Notify::new());
        let sm = StateMachine {
            shared: Arc::new(Shared {
                log,
                listener,
                policy,
                state: parking_lot::Mutex::new(SmState {
                    image,
                    last_applied,
                    membership,
                    next_offset,
                    bytes_since_snapshot: 0,
                    last_snapshot: Instant::now(),
                }),
                image_tx,
                snapshot_due: snapshot_due.clone(),
            }),
        };
        (sm, image_rx, snapshot_due)
    }

    /// A new receiver of published images.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.shared.image_tx.subscribe()
    }
}

/// The applied state as a snapshot would describe it (records left out).
fn snapshot_view(st: &SmState) -> SnapshotFile {
    let last = st.last_applied.unwrap_or_default();
    SnapshotFile {
        end_offset: st.next_offset,
        epoch: last.leader_id.term as i32,
        last_log_id: last,
        membership: st.membership.clone(),
        last_timestamp: st.image.last_timestamp,
        records: Vec::new(),
    }
}

/// Applies one entry to `img`, returning the bytes of metadata it carried.
pub(crate) fn apply_entry(img: &mut MetadataImage, e: &Entry, base: i64) -> u64 {
    let mut bytes = 0;
    match &e.payload {
        EntryPayload::Normal(batch) => {
            for (i, v) in batch.records.iter().enumerate() {
                bytes += v.len() as u64;
                let offset = base + i as i64;
                match MetadataRecord::decode(v) {
                    Ok(Some(rec)) => img.apply(&rec, offset),
                    Ok(None) => img.last_offset = offset,
                    Err(err) => {
                        // Every replica skips the same bytes, so images stay identical.
                        tracing::error!(offset, error = %err, "skipping a metadata record that cannot be decoded");
                        img.last_offset = offset;
                    }
                }
            }
        }
        EntryPayload::Blank | EntryPayload::Membership(_) => {}
    }
    img.last_offset = base + record_count(&e.payload) - 1;
    img.last_epoch = e.log_id.leader_id.term as i32;
    img.last_timestamp = crate::storage::log::now_ms();
    bytes
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (Option<LogId<NodeId>>, StoredMembership<NodeId, VoterNode>),
        RaftStorageError<NodeId>,
    > {
        let st = self.shared.state.lock();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, RaftStorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut st = self.shared.state.lock();
        let mut img = (*st.image).clone();
        let mut out = Vec::new();
        for e in entries {
            let base = st.next_offset;
            st.bytes_since_snapshot += apply_entry(&mut img, &e, base);
            if let EntryPayload::Membership(m) = &e.payload {
                st.membership = StoredMembership::new(Some(e.log_id), m.clone());
            }
            st.next_offset = base + record_count(&e.payload);
            st.last_applied = Some(e.log_id);
            out.push(Applied {
                base_offset: base,
                last_offset: st.next_offset - 1,
            });
        }
        let img = Arc::new(img);
        st.image = img.clone();
        let p = self.shared.policy;
        let due = (p.max_bytes > 0 && st.bytes_since_snapshot >= p.max_bytes)
            || (p.max_interval_ms > 0
                && st.bytes_since_snapshot > 0
                && st.last_snapshot.elapsed().as_millis() as u64 >= p.max_interval_ms);
        drop(st);
        self.shared.image_tx.send_replace(img);
        if due {
            self.shared.snapshot_due.notify_one();
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let st = self.shared.state.lock();
        SnapshotBuilder {
            sm: self.clone(),
            image: st.image.clone(),
            view: snapshot_view(&st),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, RaftStorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, VoterNode>,
        data: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), RaftStorageError<NodeId>> {
        let bytes = data.into_inner();
        let snap = snapshot::decode(&bytes).map_err(sm_err)?;
        if Some(snap.last_log_id) != meta.last_log_id {
            return Err(StorageIOError::read_snapshot(
                Some(meta.signature()),
                &std::io::Error::other("the snapshot's header names another raft position"),
            )
            .into());
        }
        let dir = self.shared.log.dir().to_path_buf();
        snapshot::write(&dir, &bytes, snap.end_offset, snap.epoch).map_err(sm_err)?;
        snapshot::remove_older(&dir, snap.end_offset).map_err(sm_err)?;
        self.shared
            .log
            .installed_snapshot(Anchor {
                last_log_id: snap.last_log_id,
                end_offset: snap.end_offset,
            })
            .map_err(sm_err)?;
        let img = Arc::new(snap.image());
        {
            let mut st = self.shared.state.lock();
            st.image = img.clone();
            st.last_applied = Some(snap.last_log_id);
            st.membership = snap.membership.clone();
            st.next_offset = snap.end_offset;
            st.bytes_since_snapshot = 0;
            st.last_snapshot = Instant::now();
        }
        tracing::info!(
            end_offset = snap.end_offset,
            "installed a metadata snapshot from the leader"
        );
        self.shared.image_tx.send_replace(img);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, RaftStorageError<NodeId>> {
        let dir = self.shared.log.dir().to_path_buf();
        let Some((path, snap)) = snapshot::latest(&dir).map_err(sm_err)? else {
            return Ok(None);
        };
        let bytes = std::fs::read(&path).map_err(sm_err)?;
        Ok(Some(Snapshot {
            meta: SnapshotMeta {
                last_log_id: Some(snap.last_log_id),
                last_membership: snap.membership,
                snapshot_id: snapshot::file_name(snap.end_offset, snap.epoch),
            },
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

/// Writes a snapshot of the image as it was when openraft asked for the builder.
pub struct SnapshotBuilder {
    sm: StateMachine,
    image: Arc<MetadataImage>,
    view: SnapshotFile,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, RaftStorageError<NodeId>> {
        let mut view = self.view.clone();
        view.records = self.image.to_records();
        let shared = &self.sm.shared;
        let bytes = snapshot::encode(&view, &shared.listener);
        let dir = shared.log.dir().to_path_buf();
        snapshot::write(&dir, &bytes, view.end_offset, view.epoch).map_err(sm_err)?;
        snapshot::remove_older(&dir, view.end_offset).map_err(sm_err)?;
        shared.log.set_anchor(Anchor {
            last_log_id: view.last_log_id,
            end_offset: view.end_offset,
        });
        {
            let mut st = shared.state.lock();
            st.bytes_since_snapshot = 0;
            st.last_snapshot = Instant::now();
        }
        tracing::info!(
            end_offset = view.end_offset,
            epoch = view.epoch,
            records = view.records.len(),
            "wrote a metadata snapshot"
        );
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: Some(view.last_log_id),
                last_membership: view.membership.clone(),
                snapshot_id: snapshot::file_name(view.end_offset, view.epoch),
            },
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}
