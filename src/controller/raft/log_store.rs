//! The quorum's log on disk: `__cluster_metadata-0`, a partition log of the storage engine in
//! which every raft entry is one record batch, plus `quorum-state` for the vote. Raft indexes
//! count batches; Kafka offsets count records, as in Kafka's own metadata log.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    LogId, OptionalSend, RaftLogReader, StorageError as RaftStorageError, StorageIOError, Vote,
};

use super::entries::{decode_entry, encode_entry, log_id, BatchIndex, BatchPos, EntryContext};
use super::{quorum_state, snapshot, Entry, NodeId, TypeConfig};
use crate::config::LogConfig;
pub use crate::metadata::METADATA_TOPIC;
use crate::storage::batch::{self, BatchHeader};
use crate::storage::{KafkaUuid, LogManager, LogRef, StorageError, TopicPartition};

/// Kafka's `Uuid.METADATA_TOPIC_ID`.
pub const METADATA_TOPIC_ID: KafkaUuid =
    KafkaUuid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
/// Bytes read from the log per step when serving entries.
const READ_CHUNK: usize = 4 << 20;

/// Where the log starts: after this snapshot's last entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub last_log_id: LogId<NodeId>,
    pub end_offset: i64,
}

/// The metadata log with its raft index, shared by the raft log store, the state machine
/// (snapshot anchors), the observers' fetch handler and DescribeQuorum.
pub struct MetadataLog {
    dir: PathBuf,
    log: LogRef,
    index: parking_lot::Mutex<BatchIndex>,
    ctx: parking_lot::Mutex<EntryContext>,
    anchor: parking_lot::Mutex<Option<Anchor>>,
}

fn io_err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Io {
        path: PathBuf::from(METADATA_TOPIC),
        source: std::io::Error::other(e.to_string()),
    }
}

impl MetadataLog {
    /// Opens `__cluster_metadata-0` in `logs`, drops what the newest snapshot (`anchor`) already
    /// covers, and numbers the remaining batches from the snapshot's last raft index.
    pub fn open(
        logs: &LogManager,
        segment_bytes: u64,
        anchor: Option<Anchor>,
        ctx: EntryContext,
    ) -> Result<MetadataLog, StorageError> {
        let cfg = LogConfig {
            retention_ms: -1,
            retention_bytes: -1,
            segment_bytes,
            ..LogConfig::default()
        };
        let tp = TopicPartition::new(METADATA_TOPIC, 0);
        let log = logs.get_or_create_log(&tp, Some(METADATA_TOPIC_ID), Some(cfg.clone()))?;
        let dir;
        let index;
        {
            let mut l = log.lock();
            l.update_config(cfg);
            dir = l.dir().to_path_buf();
            let end = l.log_end_offset();
            l.update_high_watermark(end);
            if let Some(a) = anchor {
                if end < a.end_offset {
                    // A snapshot newer than the whole log (installed from the leader).
                    l.truncate_fully_and_start_at(a.end_offset)?;
                } else if l.log_start_offset() < a.end_offset {
                    l.delete_records_before(a.end_offset)?;
                } else if l.log_start_offset() > a.end_offset {
                    return Err(StorageError::MalformedFile {
                        path: dir.clone(),
                        reason: format!(
                            "the metadata log starts at {} but the newest snapshot ends at {}",
                            l.log_start_offset(),
                            a.end_offset
                        ),
                    });
                }
            } else if l.log_start_offset() > 0 {
                return Err(StorageError::MalformedFile {
                    path: dir.clone(),
                    reason: format!(
                        "the metadata log starts at {} and no snapshot covers what came before",
                        l.log_start_offset()
                    ),
                });
            }
            let mut ix = BatchIndex::starting_at(anchor.map_or(0, |a| a.last_log_id.index + 1));
            let mut expected = l.log_start_offset();
            let mut gap = None;
            l.for_each_batch_header(expected, |h| {
                if gap.is_some() || h.base_offset < expected {
                    return;
                }
                if h.base_offset != expected {
                    gap = Some((expected, h.base_offset));
                    return;
                }
                ix.push(BatchPos {
                    term: h.partition_leader_epoch.max(0) as u64,
                    base_offset: h.base_offset,
                    next_offset: h.next_offset(),
                });
                expected = h.next_offset();
            })?;
            if let Some((want, got)) = gap {
                return Err(StorageError::MalformedFile {
                    path: dir.clone(),
                    reason: format!("a batch at offset {got} where {want} was expected"),
                });
            }
            index = ix;
        }
        Ok(MetadataLog {
            dir,
            log,
            index: parking_lot::Mutex::new(index),
            ctx: parking_lot::Mutex::new(ctx),
            anchor: parking_lot::Mutex::new(anchor),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.lock().log_start_offset()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log.lock().log_end_offset()
    }

    /// The offset after entry `index`, if the log (or its snapshot) knows it.
    pub fn end_offset_of(&self, index: u64) -> Option<i64> {
        if let Some(p) = self.index.lock().get(index) {
            return Some(p.next_offset);
        }
        let a = (*self.anchor.lock())?;
        (a.last_log_id.index == index).then_some(a.end_offset)
    }

    /// The raft log id of the entry holding Kafka offset `offset`.
    pub fn log_id_containing(&self, offset: i64) -> Option<LogId<NodeId>> {
        let ix = self.index.lock();
        let i = ix.index_containing(offset)?;
        ix.get(i).map(|p| log_id(p.term, i))
    }

    /// Whole batches from `offset`, ending at or before `upto` (exclusive), at most
    /// `max_bytes` (but one batch at least).
    pub fn read(&self, offset: i64, max_bytes: usize, upto: i64) -> Result<Vec<u8>, StorageError> {
        self.log.lock().read(offset, max_bytes, Some(upto), true)
    }

    /// The snapshot the log now starts after.
    pub fn anchor(&self) -> Option<Anchor> {
        *self.anchor.lock()
    }

    /// Records a new snapshot as the point the log may be purged to.
    pub fn set_anchor(&self, a: Anchor) {
        let mut cur = self.anchor.lock();
        if cur.is_none_or(|c| c.end_offset <= a.end_offset) {
            *cur = Some(a);
        }
    }

    /// Epoch of the last batch and the log end offset (what an observer reports).
    pub fn last_epoch_and_end(&self) -> (i32, i64) {
        let l = self.log.lock();
        let epoch = l.epoch_cache().latest_epoch().unwrap_or(-1);
        (epoch, l.log_end_offset())
    }

    /// An observer's append of batches fetched from the leader, offsets and epochs as they are.
    pub fn append_fetched(&self, bytes: &[u8]) -> Result<(), StorageError> {
        let mut l = self.log.lock();
        l.append_as_follower(bytes)?;
        let end = l.log_end_offset();
        l.update_high_watermark(end);
        drop(l);
        let mut ix = self.index.lock();
        for info in batch::validate_batches(bytes)? {
            ix.push(BatchPos {
                term: info.header.partition_leader_epoch.max(0) as u64,
                base_offset: info.header.base_offset,
                next_offset: info.header.next_offset(),
            });
        }
        Ok(())
    }

    /// A voter installed a snapshot from the leader: unless its log holds the snapshot's last
    /// entry, the log starts again at the snapshot's end offset.
    pub fn installed_snapshot(&self, a: Anchor) -> Result<(), StorageError> {
        self.set_anchor(a);
        let mut ix = self.index.lock();
        let last = a.last_log_id.index;
        if ix.get(last).is_none() && ix.next_index() <= last + 1 {
            self.log.lock().truncate_fully_and_start_at(a.end_offset)?;
            *ix = BatchIndex::starting_at(last + 1);
        }
        Ok(())
    }

    /// An observer that installed a snapshot ending at `end_offset` starts its log there.
    pub fn restart_at(&self, a: Anchor) -> Result<(), StorageError> {
        self.log.lock().truncate_fully_and_start_at(a.end_offset)?;
        *self.index.lock() = BatchIndex::starting_at(a.last_log_id.index + 1);
        self.set_anchor(a);
        Ok(())
    }

    /// An observer dropping what a snapshot of its own covers.
    pub fn purge_before(&self, offset: i64) -> Result<(), StorageError> {
        let mut l = self.log.lock();
        if offset > l.log_start_offset() && offset <= l.log_end_offset() {
            l.delete_records_before(offset)?;
        }
        drop(l);
        let mut ix = self.index.lock();
        while let Some(first) = ix.get(ix.first_index()) {
            if first.next_offset > offset {
                break;
            }
            let i = ix.first_index();
            ix.purge_through(i);
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.log.lock().flush()
    }

    fn append_entries(&self, entries: Vec<Entry>) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx.lock().clone();
        let now = crate::storage::log::now_ms();
        let mut l = self.log.lock();
        let mut ix = self.index.lock();
        for e in &entries {
            if e.log_id.index != ix.next_index() {
                return Err(io_err(format!(
                    "entry {} does not follow the log, which ends before {}",
                    e.log_id.index,
                    ix.next_index()
                )));
            }
            let base = l.log_end_offset();
            let mut this = ctx.clone();
            if e.log_id.leader_id.term != ctx.leader_term {
                this.leader = -1;
            }
            let bytes = encode_entry(e, base, &this, now);
            let info = l.append_as_follower(&bytes)?;
            ix.push(BatchPos {
                term: e.log_id.leader_id.term,
                base_offset: info.first_offset,
                next_offset: info.last_offset + 1,
            });
        }
        let end = l.log_end_offset();
        l.update_high_watermark(end);
        Ok(())
    }

    fn truncate_from(&self, index: u64) -> Result<(), StorageError> {
        let mut ix = self.index.lock();
        let Some(pos) = ix.get(index) else {
            return Ok(());
        };
        self.log.lock().truncate_to(pos.base_offset)?;
        ix.truncate_from(index);
        Ok(())
    }

    fn purge_through(&self, id: LogId<NodeId>) -> Result<(), StorageError> {
        let mut ix = self.index.lock();
        if id.index < ix.first_index() {
            return Ok(());
        }
        if let Some(pos) = ix.get(id.index) {
            let mut l = self.log.lock();
            if pos.next_offset > l.log_start_offset() {
                l.delete_records_before(pos.next_offset)?;
            }
            ix.purge_through(id.index);
            return Ok(());
        }
        // Beyond the end of the log: a snapshot from the leader replaces everything. openraft
        // may purge before its state machine has installed that snapshot; then the log moves
        // to the snapshot's end offset in `installed_snapshot`, before any later entry comes.
        let anchored = self.anchor().filter(|a| a.last_log_id.index == id.index);
        match anchored {
            Some(a) => {
                self.log.lock().truncate_fully_and_start_at(a.end_offset)?;
                *ix = BatchIndex::starting_at(id.index + 1);
            }
            None => *ix = BatchIndex::starting_at(id.index + 1),
        }
        Ok(())
    }

    /// The entries `start..end` the log still holds, consecutive from `start`. A replication
    /// stream can ask for entries that openraft purges meanwhile (after a snapshot, while the
    /// follower is down): then it gets those read before the purge, perhaps none, never an
    /// error (openraft would stop the quorum on it) nor entries after a hole; openraft sends
    /// that follower the snapshot instead.
    fn entries(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let positions: Vec<(u64, BatchPos)> = {
            let ix = self.index.lock();
            if start < ix.first_index() {
                return Ok(Vec::new());
            }
            (start..end.min(ix.next_index()))
                .filter_map(|i| ix.get(i).map(|p| (i, p)))
                .collect()
        };
        let (Some((_, first)), Some((_, last))) = (positions.first(), positions.last()) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(positions.len());
        let mut want = positions.iter().peekable();
        let mut at = first.base_offset;
        while at < last.next_offset {
            let data = match self.read(at, READ_CHUNK, last.next_offset) {
                Ok(data) => data,
                // Purged since the positions were taken: what is left starts after a hole.
                Err(StorageError::OffsetOutOfRange { .. }) if at < self.log_start_offset() => break,
                Err(e) => return Err(e),
            };
            if data.is_empty() {
                break;
            }
            let mut pos = 0;
            while pos < data.len() {
                let h = BatchHeader::parse(&data[pos..])?;
                let b = &data[pos..pos + h.size()];
                if let Some((i, p)) = want.peek() {
                    if p.base_offset == h.base_offset {
                        out.push(decode_entry(b, *i).map_err(io_err)?);
                        want.next();
                    }
                }
                at = h.next_offset();
                pos += h.size();
            }
        }
        Ok(out)
    }
}

/// openraft's view of the metadata log.
#[derive(Clone)]
pub struct LogStore {
    log: Arc<MetadataLog>,
    last_purged: Arc<parking_lot::Mutex<Option<LogId<NodeId>>>>,
}

impl LogStore {
    pub fn new(log: Arc<MetadataLog>) -> LogStore {
        let last_purged = log.anchor().map(|a| a.last_log_id);
        LogStore {
            log,
            last_purged: Arc::new(parking_lot::Mutex::new(last_purged)),
        }
    }
}

fn sto(e: StorageError) -> RaftStorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s + 1,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e + 1,
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, RaftStorageError<NodeId>> {
        let (start, end) = bounds(&range);
        self.log
            .entries(start, end)
            .map_err(|e| StorageIOError::read_logs(&e).into())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, RaftStorageError<NodeId>> {
        let last_purged = *self.last_purged.lock();
        let last = self
            .log
            .index
            .lock()
            .last()
            .map(|(i, p)| log_id(p.term, i))
            .or(last_purged);
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), RaftStorageError<NodeId>> {
        quorum_state::write(&self.log.dir, vote).map_err(|e| StorageIOError::write_vote(&e))?;
        let mut ctx = self.log.ctx.lock();
        if vote.committed {
            ctx.leader = vote.leader_id.voted_for.map_or(-1, |n| n as i32);
            ctx.leader_term = vote.leader_id.term;
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, RaftStorageError<NodeId>> {
        quorum_state::read(&self.log.dir).map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), RaftStorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.log.append_entries(entries).map_err(sto)?;
        let log = self.log.clone();
        let synced = tokio::task::spawn_blocking(move || log.sync())
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
        callback.log_io_completed(synced);
        Ok(())
    }

    async fn truncate(&mut self, id: LogId<NodeId>) -> Result<(), RaftStorageError<NodeId>> {
        self.log.truncate_from(id.index).map_err(sto)
    }

    async fn purge(&mut self, id: LogId<NodeId>) -> Result<(), RaftStorageError<NodeId>> {
        self.log.purge_through(id).map_err(sto)?;
        *self.last_purged.lock() = Some(id);
        Ok(())
    }
}

/// The newest snapshot's anchor in `dir`, to open the log with.
pub fn anchor_of(snapshot: &snapshot::SnapshotFile) -> Anchor {
    Anchor {
        last_log_id: snapshot.last_log_id,
        end_offset: snapshot.end_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::raft::MetadataBatch;
    use crate::storage::manager::LogManagerConfig;
    use openraft::EntryPayload;

    fn open(dir: &Path) -> (Arc<LogManager>, MetadataLog) {
        let logs = LogManager::open(LogManagerConfig::new(dir, LogConfig::default())).unwrap();
        let ctx = EntryContext {
            leader: 1,
            leader_term: 2,
            voters: vec![1, 2, 3],
            listener: "CONTROLLER".into(),
        };
        let log = MetadataLog::open(&logs, 1 << 20, None, ctx).unwrap();
        (logs, log)
    }

    fn entries(from: u64, to: u64) -> Vec<Entry> {
        (from..to)
            .map(|i| Entry {
                log_id: log_id(2, i),
                payload: EntryPayload::Normal(MetadataBatch {
                    records: vec![vec![1, 20, 0, 0]],
                }),
            })
            .collect()
    }

    /// The leader's snapshot covers entries 0..=41 and ends at Kafka offset 500; this voter's
    /// log stopped at entry 15.
    fn snap() -> Anchor {
        Anchor {
            last_log_id: log_id(2, 41),
            end_offset: 500,
        }
    }

    fn assert_restarted_at_the_snapshot(log: &MetadataLog) {
        assert_eq!(log.log_start_offset(), 500);
        assert_eq!(log.log_end_offset(), 500);
        // The next entry from the leader follows the snapshot, at its end offset.
        log.append_entries(entries(42, 43)).unwrap();
        assert_eq!(log.end_offset_of(42), Some(501));
        assert_eq!(log.end_offset_of(41), Some(500));
    }

    #[test]
    fn a_purge_before_the_snapshot_is_installed_waits_for_its_end_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (_logs, log) = open(dir.path());
        log.append_entries(entries(0, 16)).unwrap();
        // openraft purges through the snapshot's last entry before its state machine
        // has installed the snapshot.
        log.purge_through(snap().last_log_id).unwrap();
        log.installed_snapshot(snap()).unwrap();
        assert_restarted_at_the_snapshot(&log);
    }

    #[test]
    fn a_snapshot_installed_before_the_purge_moves_the_log_once() {
        let dir = tempfile::tempdir().unwrap();
        let (_logs, log) = open(dir.path());
        log.append_entries(entries(0, 16)).unwrap();
        log.installed_snapshot(snap()).unwrap();
        log.purge_through(snap().last_log_id).unwrap();
        assert_restarted_at_the_snapshot(&log);
    }

    #[test]
    fn a_read_of_purged_entries_returns_none_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let (_logs, log) = open(dir.path());
        log.append_entries(entries(0, 50)).unwrap();
        log.purge_through(log_id(2, 19)).unwrap();
        // Not entries 20..30, which would follow a hole where 10..20 were.
        assert!(log.entries(10, 30).unwrap().is_empty());
        let rest = log.entries(20, 30).unwrap();
        assert_eq!(rest.first().map(|e| e.log_id.index), Some(20));
        assert_eq!(rest.len(), 10);
    }

    #[test]
    fn a_read_racing_a_purge_gets_no_error_and_nothing_after_the_hole() {
        let dir = tempfile::tempdir().unwrap();
        let (_logs, log) = open(dir.path());
        log.append_entries(entries(0, 50)).unwrap();
        // The moment inside a purge a racing read sees: the log has dropped entries 0..20, the
        // index taken for the read still lists them.
        log.log.lock().delete_records_before(20).unwrap();
        // Neither an error (openraft would stop the quorum) nor entries 20..30.
        assert!(log.entries(0, 30).unwrap().is_empty());
        assert_eq!(log.entries(20, 30).unwrap().len(), 10);
    }

    #[test]
    fn a_snapshot_inside_the_log_keeps_the_entries_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (_logs, log) = open(dir.path());
        log.append_entries(entries(0, 50)).unwrap();
        let inside = Anchor {
            last_log_id: log_id(2, 41),
            end_offset: 42,
        };
        log.installed_snapshot(inside).unwrap();
        log.purge_through(inside.last_log_id).unwrap();
        assert_eq!(log.log_start_offset(), 42);
        assert_eq!(log.log_end_offset(), 50);
        assert_eq!(log.end_offset_of(49), Some(50));
    }
}
