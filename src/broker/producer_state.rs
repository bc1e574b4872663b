//! ProducerStateManager: idempotent-producer state of one partition — the last five batches per
//! producer for deduplication, sequence and epoch checks — persisted in Kafka's `.snapshot` files.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use crate::protocol::errors;
use crate::storage::batch::BatchHeader;
use crate::storage::checkpoint::write_atomic;
use crate::storage::log::LastBatch;
use crate::storage::{Log, StorageError};

/// Kafka keeps this many batches per producer for duplicate detection.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
const SNAPSHOT_SUFFIX: &str = ".snapshot";
const SNAPSHOT_VERSION: i16 = 1;
/// Bytes per producer entry in a version-1 snapshot.
const ENTRY_SIZE: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// One appended batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
}

impl ProducerEntry {
    fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }
}

/// What a check found for an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// Already in the log: answer with the original batch's offsets, write nothing.
    Duplicate(BatchMetadata),
}

/// A refused batch: Kafka error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceError {
    pub code: i16,
    pub message: String,
}

fn in_sequence(last: i32, next: i32) -> bool {
    next == last.wrapping_add(1) || (last == i32::MAX && next == 0)
}

fn last_seq_of(h: &BatchHeader) -> i32 {
    let s = h.base_sequence as i64 + h.last_offset_delta as i64;
    if s > i32::MAX as i64 {
        (s - i32::MAX as i64 - 1) as i32
    } else {
        s as i32
    }
}

pub struct ProducerStateManager {
    dir: PathBuf,
    producers: HashMap<i64, ProducerEntry>,
}

fn snapshot_name(offset: i64) -> String {
    format!("{offset:020}{SNAPSHOT_SUFFIX}")
}

fn snapshot_files(dir: &Path) -> Result<BTreeMap<i64, PathBuf>, StorageError> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(SNAPSHOT_SUFFIX) {
            if stem.len() == 20 {
                if let Ok(o) = stem.parse::<i64>() {
                    out.insert(o, e.path());
                }
            }
        }
    }
    Ok(out)
}

impl ProducerStateManager {
    /// Loads the newest snapshot at or below the log end, then replays the batches after it.
    /// Snapshots past the log end (from before a truncation) are removed.
    pub fn load(log: &Log) -> Result<ProducerStateManager, StorageError> {
        let dir = log.dir().to_path_buf();
        let mut psm = ProducerStateManager {
            dir: dir.clone(),
            producers: HashMap::new(),
        };
        let leo = log.log_end_offset();
        let mut from = log.log_start_offset();
        for (offset, path) in snapshot_files(&dir)?.into_iter().rev() {
            if offset > leo {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match read_snapshot(&path) {
                Ok(p) => {
                    psm.producers = p;
                    from = offset.max(log.log_start_offset());
                    break;
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "ignoring a bad producer snapshot");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        if from < leo {
            log.for_each_batch_header(from, |h| {
                if h.next_offset() > from && h.has_producer_id() && !h.is_control() {
                    psm.record(h);
                }
            })?;
        }
        Ok(psm)
    }

    /// Each producer's last batch, for the log cleaner (Kafka's `lastEntry(pid).lastDataOffset`).
    pub fn last_batches(&self) -> HashMap<i64, LastBatch> {
        self.producers
            .iter()
            .filter_map(|(id, e)| {
                let b = e.batches.back()?;
                let last = LastBatch {
                    last_offset: b.last_offset,
                    timestamp: b.timestamp,
                };
                Some((*id, last))
            })
            .collect()
    }

    #[cfg(test)]
    pub fn producer(&self, id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&id)
    }

    /// Kafka's duplicate, epoch and sequence checks for a batch about to be appended.
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        if !h.has_producer_id() {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state was removed): any sequence is accepted.
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(SequenceError {
                code: errors::INVALID_PRODUCER_EPOCH,
                message: format!(
                    "Epoch of producer {} is {}, which is smaller than the last seen epoch {}",
                    h.producer_id, h.producer_epoch, entry.epoch
                ),
            });
        }
        if h.producer_epoch > entry.epoch {
            if h.base_sequence != 0 {
                return Err(SequenceError {
                    code: errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message: format!(
                        "Invalid sequence number for new epoch of producer {}: {} (request epoch), {} (seq. number), {} (current producer epoch)",
                        h.producer_id, h.producer_epoch, h.base_sequence, entry.epoch
                    ),
                });
            }
            return Ok(SequenceCheck::Append);
        }
        let last = last_seq_of(h);
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last)
        {
            return Ok(SequenceCheck::Duplicate(*dup));
        }
        match entry.last_seq() {
            Some(prev) if !in_sequence(prev, h.base_sequence) => Err(SequenceError {
                code: errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
                message: format!(
                    "Out of order sequence number for producer {} at offset {}: {} (incoming seq. number), {} (current end sequence number)",
                    h.producer_id, h.base_offset, h.base_sequence, prev
                ),
            }),
            _ => Ok(SequenceCheck::Append),
        }
    }

    /// Records an appended batch (its header carries the assigned base offset).
    pub fn record(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch > entry.epoch {
            entry.batches.clear();
        }
        entry.epoch = entry.epoch.max(h.producer_epoch);
        entry.batches.push_back(BatchMetadata {
            first_seq: h.base_sequence,
            last_seq: last_seq_of(h),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            timestamp: h.max_timestamp,
        });
        while entry.batches.len() > NUM_BATCHES_TO_RETAIN {
            entry.batches.pop_front();
        }
    }

    /// Writes `<offset>.snapshot` in Kafka's version-1 layout: version, CRC32C, then one entry
    /// (id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch,
    /// current transaction's first offset) per producer.
    pub fn take_snapshot(&self, offset: i64) -> Result<PathBuf, StorageError> {
        let mut body = Vec::with_capacity(4 + self.producers.len() * ENTRY_SIZE);
        body.extend_from_slice(&(self.producers.len() as i32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort();
        for id in ids {
            let e = &self.producers[id];
            let Some(last) = e.batches.back() else {
                continue;
            };
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&e.epoch.to_be_bytes());
            body.extend_from_slice(&last.last_seq.to_be_bytes());
            body.extend_from_slice(&last.last_offset.to_be_bytes());
            body.extend_from_slice(&((last.last_offset - last.first_offset) as i32).to_be_bytes());
            body.extend_from_slice(&last.timestamp.to_be_bytes());
            body.extend_from_slice(&(-1i32).to_be_bytes());
            body.extend_from_slice(&(-1i64).to_be_bytes());
        }
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        let path = self.dir.join(snapshot_name(offset));
        write_atomic(&path, &out)?;
        Ok(path)
    }

    /// Removes snapshots below `offset` except the newest of them (after retention moved on).
    pub fn delete_snapshots_before(&self, offset: i64) -> Result<(), StorageError> {
        let files = snapshot_files(&self.dir)?;
        let keep = files.range(..=offset).next_back().map(|(o, _)| *o);
        for (o, p) in files {
            if o < offset && Some(o) != keep {
                let _ = std::fs::remove_file(p);
            }
        }
        Ok(())
    }
}

fn read_snapshot(path: &Path) -> Result<HashMap<i64, ProducerEntry>, String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    if data.len() < 10 {
        return Err("too short".into());
    }
    let version = i16::from_be_bytes([data[0], data[1]]);
    if version != SNAPSHOT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let crc = u32::from_be_bytes([data[2], data[3], data[4], data[5]]);
    let body = &data[6..];
    if crc32c::crc32c(body) != crc {
        return Err("CRC mismatch".into());
    }
    let n = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    if n < 0 || body.len() != 4 + n as usize * ENTRY_SIZE {
        return Err(format!("{n} entries do not match {} bytes", body.len()));
    }
    let mut out = HashMap::new();
    for e in body[4..].chunks_exact(ENTRY_SIZE) {
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&e[at..at + 8]);
            i64::from_be_bytes(a)
        };
        let i32_at = |at: usize| i32::from_be_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
        let id = i64_at(0);
        let epoch = i16::from_be_bytes([e[8], e[9]]);
        let last_seq = i32_at(10);
        let last_offset = i64_at(14);
        let delta = i32_at(22);
        let timestamp = i64_at(26);
        let mut batches = VecDeque::new();
        batches.push_back(BatchMetadata {
            first_seq: {
                let f = last_seq as i64 - delta as i64;
                if f < 0 {
                    (f + i32::MAX as i64 + 1) as i32
                } else {
                    f as i32
                }
            },
            last_seq,
            first_offset: last_offset - delta as i64,
            last_offset,
            timestamp,
        });
        out.insert(id, ProducerEntry { epoch, batches });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogConfig;
    use crate::storage::batch::{build_batch, BatchHeader};
    use crate::storage::{LoadParams, TopicPartition};

    /// A batch of `n` records from producer 42 with the given epoch and first sequence.
    fn idempotent_batch(n: usize, epoch: i16, seq: i32) -> Vec<u8> {
        let v = b"v".to_vec();
        let recs: Vec<crate::storage::batch::KeyValue<'_>> =
            (0..n).map(|_| (None, Some(v.as_slice()))).collect();
        let mut b = build_batch(&recs, 1000);
        b[43..51].copy_from_slice(&42i64.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&seq.to_be_bytes());
        let crc = crate::storage::batch::compute_crc(&b);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn append(
        log: &mut Log,
        psm: &mut ProducerStateManager,
        mut b: Vec<u8>,
    ) -> Result<SequenceCheck, SequenceError> {
        let h = BatchHeader::parse(&b).unwrap();
        let c = psm.check(&h)?;
        if c == SequenceCheck::Append {
            log.append_as_leader(&mut b, 0).unwrap();
            psm.record(&BatchHeader::parse(&b).unwrap());
        }
        Ok(c)
    }

    fn open(dir: &Path) -> Log {
        Log::open(
            dir,
            TopicPartition::new("p", 0),
            LogConfig::default(),
            LoadParams::default(),
        )
        .unwrap()
    }

    #[test]
    fn duplicates_are_found_and_gaps_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let mut psm = ProducerStateManager::load(&log).unwrap();
        assert_eq!(
            append(&mut log, &mut psm, idempotent_batch(3, 0, 0)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            append(&mut log, &mut psm, idempotent_batch(2, 0, 3)),
            Ok(SequenceCheck::Append)
        );
        // A retry of the first batch is answered with its original offsets.
        match append(&mut log, &mut psm, idempotent_batch(3, 0, 0)).unwrap() {
            SequenceCheck::Duplicate(m) => assert_eq!((m.first_offset, m.last_offset), (0, 2)),
            other => panic!("{other:?}"),
        }
        assert_eq!(log.log_end_offset(), 5);
        let e = append(&mut log, &mut psm, idempotent_batch(1, 0, 9)).unwrap_err();
        assert_eq!(e.code, errors::OUT_OF_ORDER_SEQUENCE_NUMBER);
        let e = append(&mut log, &mut psm, idempotent_batch(1, 1, 4)).unwrap_err();
        assert_eq!(
            e.code,
            errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
            "a new epoch starts at 0"
        );
        assert_eq!(
            append(&mut log, &mut psm, idempotent_batch(1, 1, 0)),
            Ok(SequenceCheck::Append)
        );
        let e = append(&mut log, &mut psm, idempotent_batch(1, 0, 5)).unwrap_err();
        assert_eq!(e.code, errors::INVALID_PRODUCER_EPOCH);
    }

    #[test]
    fn only_the_last_five_batches_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let mut psm = ProducerStateManager::load(&log).unwrap();
        for i in 0..7 {
            append(&mut log, &mut psm, idempotent_batch(1, 0, i)).unwrap();
        }
        assert_eq!(psm.producer(42).unwrap().batches.len(), 5);
        assert_eq!(psm.producer(42).unwrap().batches[0].first_seq, 2);
    }

    #[test]
    fn state_survives_a_restart_from_snapshot_and_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut log = open(dir.path());
            let mut psm = ProducerStateManager::load(&log).unwrap();
            append(&mut log, &mut psm, idempotent_batch(2, 0, 0)).unwrap();
            let snap = psm.take_snapshot(log.log_end_offset()).unwrap();
            assert!(snap.ends_with("00000000000000000002.snapshot"));
            // One more batch after the snapshot: rebuilt from the log on load.
            append(&mut log, &mut psm, idempotent_batch(2, 0, 2)).unwrap();
            log.close().unwrap();
        }
        let mut log = open(dir.path());
        let mut psm = ProducerStateManager::load(&log).unwrap();
        assert_eq!(
            psm.producer(42).unwrap().batches.back().unwrap().last_seq,
            3
        );
        match append(&mut log, &mut psm, idempotent_batch(2, 0, 2)).unwrap() {
            SequenceCheck::Duplicate(m) => assert_eq!(m.first_offset, 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            append(&mut log, &mut psm, idempotent_batch(1, 0, 4)),
            Ok(SequenceCheck::Append)
        );
        // Without any snapshot the whole log is replayed.
        for (_, p) in snapshot_files(dir.path()).unwrap() {
            std::fs::remove_file(p).unwrap();
        }
        let psm = ProducerStateManager::load(&log).unwrap();
        assert_eq!(
            psm.producer(42).unwrap().batches.back().unwrap().last_seq,
            4
        );
    }
}
