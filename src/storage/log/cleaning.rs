//! What the log cleaner needs from a Log: a view of its segments to read outside the lock, and
//! Kafka's `replaceSegments` swap; plus, at load, Kafka's completion of an interrupted swap.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{now_ms, remove_if_exists, Log, PendingDelete};
use crate::config::LogConfig;
use crate::storage::batch::BATCH_HEADER_SIZE;
use crate::storage::checkpoint::{sync_dir, TopicPartition};
use crate::storage::error::{Result, StorageError};
use crate::storage::index::{OffsetIndex, TimeIndex};
use crate::storage::segment::{
    file_name, BatchHeaders, LogSegment, CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
};

/// One segment as the cleaner reads it: the open `.log` (it stays readable if the segment is
/// deleted meanwhile) and the sizes taken under the log's lock.
#[derive(Clone)]
pub struct SegmentView {
    pub base_offset: i64,
    pub size: u64,
    pub next_offset: i64,
    pub file: Arc<File>,
    pub path: PathBuf,
    pub offset_index_bytes: u64,
    pub time_index_bytes: u64,
    pub largest_timestamp: i64,
    pub first_batch_timestamp: Option<i64>,
    pub last_modified: Option<std::time::SystemTime>,
}

/// A producer's last batch in the log: its last offset and max timestamp (Kafka's
/// `ProducerStateEntry` last data offset and timestamp, what the cleaner keeps for idempotence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastBatch {
    pub last_offset: i64,
    pub timestamp: i64,
}

/// The last batch of each producer of a log, from whoever keeps the producers' state (the
/// broker's ProducerStateManager), without reading the log; `None` when it cannot say.
pub type ProducerLastBatches = Arc<dyn Fn() -> Option<HashMap<i64, LastBatch>> + Send + Sync>;

/// A log as the cleaner sees it at one moment. The last segment is the active one.
#[derive(Clone)]
pub struct CleaningView {
    pub dir: PathBuf,
    pub tp: TopicPartition,
    pub config: LogConfig,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The last stable offset: the high watermark (evenkeel has no transactions).
    pub last_stable_offset: i64,
    pub segments: Vec<SegmentView>,
    /// Changes whenever a segment is removed or replaced; a swap prepared on an older view is refused.
    pub generation: u64,
    /// Where the producers' last batches can be had without a read of the log, if anywhere.
    pub producers: Option<ProducerLastBatches>,
}

impl CleaningView {
    pub fn active_base(&self) -> i64 {
        self.segments.last().map(|s| s.base_offset).unwrap_or(0)
    }
}

fn view_of(seg: &LogSegment) -> SegmentView {
    SegmentView {
        base_offset: seg.base_offset(),
        size: seg.size(),
        next_offset: seg.next_offset(),
        file: seg.log_file(),
        path: seg.log_path().to_path_buf(),
        offset_index_bytes: (seg.offset_index().entries() * OffsetIndex::ENTRY_SIZE) as u64,
        time_index_bytes: (seg.time_index().entries() * TimeIndex::ENTRY_SIZE) as u64,
        largest_timestamp: seg.largest_timestamp(),
        first_batch_timestamp: seg.first_batch_timestamp(),
        last_modified: std::fs::metadata(seg.log_path())
            .and_then(|m| m.modified())
            .ok(),
    }
}

impl Log {
    /// The segments and offsets the cleaner works from, taken under the log's lock.
    pub fn cleaning_view(&self) -> CleaningView {
        CleaningView {
            dir: self.dir.clone(),
            tp: self.tp.clone(),
            config: self.config.clone(),
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            last_stable_offset: self.high_watermark,
            segments: self.segments.values().map(view_of).collect(),
            generation: self.generation,
            producers: self.producer_last_batches.clone(),
        }
    }

    /// Lets the cleaner ask `source` for the producers' last batches instead of reading every
    /// batch header of the log each round (`None`: it reads them).
    pub fn set_producer_last_batches(&mut self, source: Option<ProducerLastBatches>) {
        self.producer_last_batches = source;
    }

    /// The lowest offset the log was truncated to since the last call (the cleaner's checkpoint
    /// must not stay above it: Kafka's `maybeTruncateCheckpoint`).
    pub fn take_cleaner_truncation(&mut self) -> Option<i64> {
        self.cleaner_truncation.take()
    }

    /// The generation a swap must be prepared at (see `CleaningView::generation`).
    pub fn cleaning_generation(&self) -> u64 {
        self.generation
    }

    /// The log is being deleted: the cleaner takes it no more, and a swap prepared before now
    /// is refused.
    pub fn mark_deleted(&mut self) {
        self.deleted = true;
        self.generation += 1;
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted
    }

    /// Kafka's `replaceSegments`: puts `cleaned` (written as `.cleaned` files and fsynced) in
    /// place of the segments based at `old`. The cleaned files become `.swap` (the `.log`
    /// first); then, in memory, the old segments leave the log and the cleaned one takes their
    /// place in one step; on disk the old segments are renamed `.deleted`, and the `.swap`
    /// suffix goes only once all of them are. A kill at any point leaves a state that loading
    /// turns into the old segments or the new one (see `complete_interrupted_swaps`); an I/O
    /// error does too, and the log in memory serves the new segment from then on.
    /// Returns false, touching nothing, when the log changed since `generation`.
    pub fn replace_segments(
        &mut self,
        mut cleaned: LogSegment,
        old: &[i64],
        generation: u64,
    ) -> Result<bool> {
        let active = self.active().base_offset();
        let base = cleaned.base_offset();
        let unchanged = generation == self.generation
            && old.first() == Some(&base)
            && old
                .iter()
                .all(|b| self.segments.contains_key(b) && *b != active);
        if !unchanged {
            return Ok(false);
        }
        let swapped = cleaned
            .change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            .and_then(|()| sync_dir(&self.dir));
        if let Err(e) = swapped {
            // Not swapped: no `.swap` file may outlive this, or a later load would finish it.
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                remove_if_exists(&self.dir.join(file_name(base, suffix) + SWAP_SUFFIX))?;
            }
            return Err(e);
        }
        let retired: Vec<LogSegment> = old.iter().filter_map(|b| self.segments.remove(b)).collect();
        self.segments.insert(base, cleaned);
        self.generation += 1;
        self.retire_files(&retired)?;
        if let Some(seg) = self.segments.get_mut(&base) {
            seg.change_file_suffixes(SWAP_SUFFIX, "")?;
        }
        sync_dir(&self.dir)?;
        Ok(true)
    }

    /// Renames the files of segments taken out of the log `.deleted`, to be removed after
    /// `file.delete.delay.ms`. Stops at the first error (the caller leaves its `.swap` for the
    /// next load to finish).
    fn retire_files(&mut self, retired: &[LogSegment]) -> Result<()> {
        let due_ms = now_ms() + self.config.file_delete_delay_ms;
        for seg in retired {
            let files = seg.rename_to_deleted()?;
            self.pending_deletes.push(PendingDelete { due_ms, files });
        }
        Ok(())
    }
}

/// The offset a segment file's name starts with (Kafka's `offsetFromFile`).
fn offset_from_name(name: &str) -> Option<i64> {
    let stem = name.split('.').next()?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The offset after the last whole batch of a `.log` file (a header walk; stops at a torn tail).
fn next_offset_of_log_file(path: &Path, base: i64) -> Result<i64> {
    let f = File::open(path).map_err(StorageError::io(path))?;
    let len = f.metadata().map_err(StorageError::io(path))?.len();
    let mut next = base;
    for found in BatchHeaders::new(&f, path, 0, len, BATCH_HEADER_SIZE) {
        next = found?.1.next_offset();
    }
    Ok(next)
}

fn file_names(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(StorageError::io(dir))? {
        let entry = entry.map_err(StorageError::io(dir))?;
        if entry.path().is_file() {
            out.push(entry.file_name().to_string_lossy().to_string());
        }
    }
    Ok(out)
}

/// Kafka's `LogLoader.removeTempFilesAndCollectSwapFiles` and the swap passes of `load`:
/// `.cleaned` files are unfinished cleanings and go; a `.swap` at or above the lowest `.cleaned`
/// offset was not wholly renamed and goes too (its old segments are all still there). A valid
/// `.swap` set is a finished cleaning: the old segments it covers go and it takes their place.
pub(super) fn complete_interrupted_swaps(dir: &Path, tp: &TopicPartition) -> Result<()> {
    let names = file_names(dir)?;
    let min_cleaned = names
        .iter()
        .filter(|n| n.ends_with(CLEANED_SUFFIX))
        .filter_map(|n| offset_from_name(n))
        .min()
        .unwrap_or(i64::MAX);
    let mut swaps = Vec::new();
    for name in &names {
        let swap_offset = name
            .ends_with(SWAP_SUFFIX)
            .then(|| offset_from_name(name))
            .flatten();
        if name.ends_with(CLEANED_SUFFIX) || swap_offset.is_some_and(|o| o >= min_cleaned) {
            tracing::info!(partition = %tp, file = %name, "removing a file of an unfinished cleaning");
            remove_if_exists(&dir.join(name))?;
        } else if name.ends_with(SWAP_SUFFIX) {
            swaps.push(name.clone());
        }
    }
    if swaps.is_empty() {
        return Ok(());
    }
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for name in swaps.iter().filter(|n| n.ends_with(".log.swap")) {
        let Some(base) = offset_from_name(name) else {
            continue;
        };
        lo = lo.min(base);
        hi = hi.max(next_offset_of_log_file(&dir.join(name), base)?);
    }
    for name in &names {
        let in_range = offset_from_name(name).is_some_and(|o| o >= lo && o < hi);
        if in_range && !name.ends_with(SWAP_SUFFIX) && !name.ends_with(CLEANED_SUFFIX) {
            tracing::info!(partition = %tp, file = %name, "deleting a segment file a finished cleaning replaced");
            remove_if_exists(&dir.join(name))?;
        }
    }
    for name in &swaps {
        let from = dir.join(name);
        let to = dir.join(name.trim_end_matches(SWAP_SUFFIX));
        tracing::info!(partition = %tp, file = %name, "completing an interrupted swap");
        std::fs::rename(&from, &to).map_err(StorageError::io(&from))?;
    }
    sync_dir(dir)
}
