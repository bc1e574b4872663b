//! LogSegment: one `.log` file of record batches with its `.index` and `.timeindex`, named by
//! its base offset. Owns appends, reads by offset or timestamp, recovery, truncation and rolling tests.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{self, BatchAt, BatchHeader, BATCH_HEADER_SIZE};
use super::error::{Result, StorageError};
use super::index::{OffsetIndex, TimeIndex};
use super::log::now_ms;

pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
pub const DELETED_SUFFIX: &str = ".deleted";
/// A segment the cleaner is writing (Kafka's `CleanedFileSuffix`).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// A cleaned segment about to replace the segments it was cleaned from (`SwapFileSuffix`).
pub const SWAP_SUFFIX: &str = ".swap";

/// What a read takes in one go past its index entry to find the wanted batch: the default
/// `index.interval.bytes` of 4096 plus a batch header fits, and the stack buffer stays small
/// (it is zeroed on every read).
const HEAD_BYTES: usize = 8 << 10;

/// `<20-digit base offset><suffix>`, Kafka's file naming.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Per-segment settings taken from the topic's LogConfig.
#[derive(Debug, Clone, Copy)]
pub struct SegmentConfig {
    pub index_interval_bytes: u64,
    pub max_index_size: u64,
    /// Reserve this many bytes of disk for a new segment's `.log` up front (Kafka's
    /// `preallocate`); released past the data when the segment stops being active.
    pub preallocate_bytes: Option<u64>,
}

/// What `should_roll` needs to know about the pending append.
#[derive(Debug, Clone, Copy)]
pub struct RollParams {
    pub max_segment_ms: i64,
    pub roll_jitter_ms: i64,
    pub max_segment_bytes: u64,
    pub max_timestamp_in_messages: i64,
    pub max_offset_in_messages: i64,
    pub messages_size: u64,
    pub now_ms: i64,
}

/// A record found by timestamp: its timestamp, offset and the batch's leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: Option<i32>,
}

pub struct LogSegment {
    base_offset: i64,
    log_path: PathBuf,
    log: Arc<File>,
    size: u64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    config: SegmentConfig,
    bytes_since_last_index_entry: u64,
    max_timestamp_so_far: i64,
    offset_of_max_timestamp_so_far: i64,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    next_offset: i64,
    /// `.log` bytes below this were handed to the disk's writeback by `write_behind`.
    written_behind: u64,
}

/// Write-behind hands whole pages to writeback, so that a partial last page is not written twice.
const PAGE_BYTES: u64 = 4096;

/// `n` rounded down to whole pages.
fn whole_pages(n: u64) -> u64 {
    n - n % PAGE_BYTES
}

impl LogSegment {
    /// Creates a fresh segment, replacing stale files of the same name (Kafka does the same on roll).
    pub fn create(dir: &Path, base_offset: i64, config: SegmentConfig) -> Result<LogSegment> {
        Self::create_with_suffix(dir, base_offset, config, "")
    }

    /// `create` with `suffix` after each file's name (`.cleaned` for the cleaner's output).
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        config: SegmentConfig,
        suffix: &str,
    ) -> Result<LogSegment> {
        for kind in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let p = dir.join(file_name(base_offset, kind) + suffix);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io(&p)(e)),
            }
        }
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX) + suffix);
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(StorageError::io(&log_path))?;
        if let Some(bytes) = config.preallocate_bytes {
            // KEEP_SIZE: the blocks are reserved but the file's length stays the data's, so
            // readers, recovery and Kafka's tools see exactly what was appended.
            if let Err(e) = fallocate(&log, libc::FALLOC_FL_KEEP_SIZE, 0, bytes) {
                tracing::debug!(path = %log_path.display(), error = %e, "preallocation not done");
            }
        }
        Self::assemble(dir, base_offset, config, log_path, log, suffix)
    }

    /// Opens an existing segment. Indexes are taken as they are; call `sanity_check` or `recover`.
    pub fn open(dir: &Path, base_offset: i64, config: SegmentConfig) -> Result<LogSegment> {
        let log_path = dir.join(file_name(base_offset, LOG_SUFFIX));
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(StorageError::io(&log_path))?;
        let mut seg = Self::assemble(dir, base_offset, config, log_path, log, "")?;
        seg.load_tail_state()?;
        Ok(seg)
    }

    fn assemble(
        dir: &Path,
        base_offset: i64,
        config: SegmentConfig,
        log_path: PathBuf,
        log: File,
        suffix: &str,
    ) -> Result<LogSegment> {
        let size = log.metadata().map_err(StorageError::io(&log_path))?.len();
        let offset_index = OffsetIndex::open(
            &dir.join(file_name(base_offset, INDEX_SUFFIX) + suffix),
            base_offset,
            config.max_index_size,
        )?;
        let time_index = TimeIndex::open(
            &dir.join(file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
            base_offset,
            config.max_index_size,
        )?;
        Ok(LogSegment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size,
            offset_index,
            time_index,
            config,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: -1,
            offset_of_max_timestamp_so_far: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms(),
            next_offset: base_offset,
            written_behind: whole_pages(size),
        })
    }

    /// The batch headers of this segment from byte `pos`, the first `pread` `first_read` bytes.
    fn headers_from(&self, pos: u64, first_read: usize) -> BatchHeaders<'_> {
        BatchHeaders::new(&self.log, &self.log_path, pos, self.size, first_read)
    }

    /// The first `pread` of a walk from an index entry: the index interval and a header, where
    /// the batch it looks for starts.
    fn interval_read(&self) -> usize {
        (self.config.index_interval_bytes as usize).saturating_add(BATCH_HEADER_SIZE)
    }

    /// Restores next offset and max timestamp from the index tails and the batches after them
    /// (Kafka's `readNextOffset` and `loadLargestTimestamp`).
    fn load_tail_state(&mut self) -> Result<()> {
        let last = self.offset_index.last_entry();
        let mut next = self.base_offset;
        let last_time = self.time_index.last_entry();
        let (mut max_ts, mut max_ts_offset) = (last_time.timestamp, last_time.offset);
        for found in self.headers_from(last.position as u64, self.interval_read()) {
            let (_, h) = found?;
            next = h.next_offset();
            if h.max_timestamp > max_ts {
                (max_ts, max_ts_offset) = (h.max_timestamp, h.last_offset());
            }
        }
        self.max_timestamp_so_far = max_ts;
        self.offset_of_max_timestamp_so_far = max_ts_offset;
        self.next_offset = next;
        if let Some((_, h)) = self.headers_from(0, BATCH_HEADER_SIZE).next().transpose()? {
            self.rolling_based_timestamp = Some(h.max_timestamp);
        }
        Ok(())
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Offset after the last batch, or the base offset when the segment is empty.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn max_timestamp_so_far(&self) -> i64 {
        self.max_timestamp_so_far
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    /// The max timestamp of the first batch (Kafka's `getFirstBatchTimestamp`), if any.
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.rolling_based_timestamp
    }
    /// The open `.log` file, for a reader that works outside the log's lock (the cleaner).
    pub fn log_file(&self) -> Arc<File> {
        self.log.clone()
    }

    /// Renames the three files from `old` to `new` suffix, `.log` first (Kafka's
    /// `changeFileSuffixes`), and keeps working on them under their new names.
    pub fn change_file_suffixes(&mut self, old: &str, new: &str) -> Result<()> {
        let to = renamed(&self.log_path, old, new)?;
        std::fs::rename(&self.log_path, &to).map_err(StorageError::io(&self.log_path))?;
        self.log_path = to;
        let to = renamed(self.offset_index.path(), old, new)?;
        self.offset_index.rename_to(to)?;
        let to = renamed(self.time_index.path(), old, new)?;
        self.time_index.rename_to(to)
    }

    /// Sets the `.log` file's modification time (the cleaner keeps the original segments').
    pub fn set_last_modified(&self, t: std::time::SystemTime) -> Result<()> {
        self.log
            .set_modified(t)
            .map_err(StorageError::io(&self.log_path))
    }

    /// Largest timestamp for retention: the max record timestamp, else the file's mtime.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp_so_far >= 0 {
            return self.max_timestamp_so_far;
        }
        std::fs::metadata(&self.log_path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn can_convert_to_relative_offset(&self, offset: i64) -> bool {
        let rel = offset - self.base_offset;
        (0..=i32::MAX as i64).contains(&rel)
    }

    /// Kafka's `LogSegment.shouldRoll`: full by size, old by time, a full index, or an offset
    /// that no longer fits a relative u32.
    pub fn should_roll(&self, p: &RollParams) -> bool {
        let waited = match self.rolling_based_timestamp {
            Some(t) if t >= 0 => p.max_timestamp_in_messages - t,
            _ => p.now_ms - self.created_ms,
        };
        let reached_roll_ms = waited > p.max_segment_ms - p.roll_jitter_ms;
        (self.size > 0
            && (self.size > p.max_segment_bytes.saturating_sub(p.messages_size) || reached_roll_ms))
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || !self.can_convert_to_relative_offset(p.max_offset_in_messages)
    }

    fn index_batch(&mut self, h: &BatchHeader, position: u64) -> Result<()> {
        if h.max_timestamp > self.max_timestamp_so_far {
            self.max_timestamp_so_far = h.max_timestamp;
            self.offset_of_max_timestamp_so_far = h.last_offset();
        }
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes {
            self.offset_index.append(h.last_offset(), position as u32)?;
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                false,
            )?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += h.size() as u64;
        self.next_offset = h.next_offset();
        Ok(())
    }

    /// Appends batches whose offsets are already assigned. They are written as given.
    pub fn append(&mut self, batches: &[u8]) -> Result<()> {
        if batches.is_empty() {
            return Ok(());
        }
        let start = self.size;
        self.log
            .write_all_at(batches, start)
            .map_err(StorageError::io(&self.log_path))?;
        self.size += batches.len() as u64;
        let mut pos = 0usize;
        while pos < batches.len() {
            let h = BatchHeader::parse(&batches[pos..])?;
            if self.rolling_based_timestamp.is_none() {
                self.rolling_based_timestamp = Some(h.max_timestamp);
            }
            self.index_batch(&h, start + pos as u64)?;
            pos += h.size();
        }
        Ok(())
    }

    /// Starts writeback of the appended whole pages not yet started, once at least `step` bytes
    /// of them wait (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`: it neither waits nor makes
    /// anything durable). A log with a flush policy calls it after each append, so that the disk
    /// works while appends go on and the policy's fsync finds most of the pages already written.
    pub fn write_behind(&mut self, step: u64) {
        let upto = whole_pages(self.size);
        if upto < self.written_behind.saturating_add(step) {
            return;
        }
        if let Err(e) = start_writeback(&self.log, self.written_behind, upto - self.written_behind)
        {
            // Only a hint: the fsync that follows writes these pages and reports any I/O error.
            tracing::debug!(path = %self.log_path.display(), error = %e, "write-behind not started");
        }
        self.written_behind = upto;
    }

    /// Where write-behind has got to in the `.log`.
    pub fn written_behind(&self) -> u64 {
        self.written_behind
    }

    /// Calls `f` with the header of every batch from the one holding `offset` (headers only).
    pub fn for_each_batch_header(
        &self,
        offset: i64,
        mut f: impl FnMut(&BatchHeader),
    ) -> Result<()> {
        let from = self.offset_index.lookup(offset).position as u64;
        let mut started = false;
        for found in self.headers_from(from, self.interval_read()) {
            let (_, h) = found?;
            started |= h.last_offset() >= offset;
            if started {
                f(&h);
            }
        }
        Ok(())
    }

    /// Where the indexes disagree with a scan of the segment's batches, one line each: an
    /// offset-index entry not at a batch start or naming another offset, a time-index entry
    /// naming no batch's last offset, a batch that a lookup of its base offset does not find.
    /// Empty when they agree (what `kafka-dump-log --verify-index-only` checks, and more).
    pub fn index_mismatches(&self) -> Result<Vec<String>> {
        let data = std::fs::read(&self.log_path).map_err(StorageError::io(&self.log_path))?;
        let mut out = Vec::new();
        let scanned = if data.is_empty() {
            Ok(Vec::new())
        } else {
            batch::validate_stored_batches(&data)
        };
        let infos = match scanned {
            Ok(infos) => infos,
            Err(e) => {
                out.push(format!("the segment does not hold whole batches: {e}"));
                Vec::new()
            }
        };
        let starts: std::collections::BTreeMap<u64, BatchHeader> = infos
            .iter()
            .map(|i| (i.position as u64, i.header))
            .collect();
        for n in 0..self.offset_index().entries() {
            let e = self.offset_index().entry_at(n);
            match starts.get(&(e.position as u64)) {
                Some(h) if h.last_offset() == e.offset => {}
                Some(h) => out.push(format!("{e:?} names a batch ending at {}", h.last_offset())),
                None => out.push(format!("{e:?} is not at a batch start")),
            }
        }
        for n in 0..self.time_index().entries() {
            let e = self.time_index().entry_at(n);
            if !infos.iter().any(|i| i.header.last_offset() == e.offset) {
                out.push(format!("{e:?} names no batch's last offset"));
            }
        }
        for i in &infos {
            let found = self.translate_offset(i.header.base_offset)?;
            if found.map(|(pos, h)| (pos, h.base_offset))
                != Some((i.position as u64, i.header.base_offset))
            {
                out.push(format!(
                    "batch at {} is not found by its base offset",
                    i.position
                ));
            }
        }
        Ok(out)
    }

    /// Position and header of the first batch whose last offset is ≥ `offset`.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let from = self.offset_index.lookup(offset).position as u64;
        self.headers_from(from, self.interval_read())
            .find_last_offset(offset)
    }

    /// Whole batches from the one containing `start_offset`: at most `max_bytes` unless the first
    /// batch alone is larger and `min_one_batch` is set, and only batches ending below `max_offset`.
    ///
    /// The wanted batch starts within the sparse index interval after the index entry: one small
    /// `pread` of that interval finds it with the headers walked in memory (instead of one read
    /// per header), and often holds the whole answer; otherwise a second `pread` reads exactly
    /// the answer into a buffer of its size.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<Option<Vec<u8>>> {
        let from = self.offset_index.lookup(start_offset).position as u64;
        if from >= self.size {
            return Ok(None);
        }
        // On the stack, not the heap: a small heap buffer per read, freed between the large
        // fetch buffers, made glibc trim and re-fault those on every fetch (a third of consume
        // throughput). Past HEAD_BYTES (a larger `index.interval.bytes`) the header walk goes on.
        let mut head_buf = [0u8; HEAD_BYTES];
        let lookahead =
            (self.config.index_interval_bytes as usize + BATCH_HEADER_SIZE).min(HEAD_BYTES);
        let head = &mut head_buf[..((self.size - from) as usize).min(lookahead)];
        self.log
            .read_exact_at(head, from)
            .map_err(StorageError::io(&self.log_path))?;
        let head = &head[..];
        // The first batch whose last offset is ≥ start_offset, among the headers read.
        let mut at = 0usize;
        let (start, first) = loop {
            if at + BATCH_HEADER_SIZE > head.len() {
                // Past what was read (a walk over large batches): go on with header reads,
                // one header first.
                let walk = self.headers_from(from + at as u64, BATCH_HEADER_SIZE);
                match walk.find_last_offset(start_offset)? {
                    Some((pos, h)) => break (pos, h),
                    None => return Ok(None),
                }
            }
            let Some(h) = whole_batch_header(&head[at..], from + at as u64, self.size)? else {
                // A torn tail (only possible before recovery truncates it): nothing to serve.
                return Ok(None);
            };
            if h.last_offset() >= start_offset {
                break (from + at as u64, h);
            }
            at += h.size();
        };
        if first.last_offset() >= max_offset {
            return Ok(Some(Vec::new()));
        }
        let available = (self.size - start) as usize;
        let want = if first.size() > max_bytes {
            if !min_one_batch {
                return Ok(Some(Vec::new()));
            }
            first.size()
        } else {
            max_bytes.min(available)
        };
        let offset_in_head = (start - from) as usize;
        let mut buf = if offset_in_head + want <= head.len() {
            head[offset_in_head..offset_in_head + want].to_vec()
        } else {
            // Fetches read up to a MiB per partition: no zero-fill of a buffer the read overwrites.
            let mut buf = Vec::new();
            read_exact_at_uninit(&self.log, &mut buf, want, start)
                .map_err(StorageError::io(&self.log_path))?;
            buf
        };
        let mut end = 0usize;
        while let BatchAt::Whole(h) = batch::batch_at(&buf[end..], end as u64, buf.len() as u64)? {
            if h.last_offset() >= max_offset || h.base_offset < first.base_offset {
                break;
            }
            end += h.size();
        }
        buf.truncate(end);
        Ok(Some(buf))
    }

    /// First record with timestamp ≥ `target` and offset ≥ `starting_offset` in this segment.
    pub fn find_offset_by_timestamp(
        &self,
        target: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let from = self.time_index.lookup(target).offset.max(starting_offset);
        let pos = self.offset_index.lookup(from).position as u64;
        let mut walk = self.headers_from(pos, self.interval_read());
        while let Some((pos, h)) = walk.next().transpose()? {
            if h.max_timestamp >= target && h.last_offset() >= starting_offset {
                let bytes = walk.batch(pos, &h)?;
                for (offset, ts) in batch::record_offsets_and_timestamps(bytes)? {
                    if ts >= target && offset >= starting_offset {
                        return Ok(Some(TimestampAndOffset {
                            timestamp: ts,
                            offset,
                            leader_epoch: (h.partition_leader_epoch >= 0)
                                .then_some(h.partition_leader_epoch),
                        }));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The record holding this segment's max timestamp (KIP-734's MAX_TIMESTAMP answer).
    pub fn max_timestamp_record(&self) -> Result<Option<TimestampAndOffset>> {
        if self.max_timestamp_so_far < 0 {
            return Ok(None);
        }
        let Some((pos, h)) = self.translate_offset(self.offset_of_max_timestamp_so_far)? else {
            return Ok(None);
        };
        let bytes = self.read_batch(pos, &h)?;
        let found = batch::record_offsets_and_timestamps(&bytes)?
            .into_iter()
            .find(|(_, ts)| *ts == h.max_timestamp)
            .map(|(offset, ts)| TimestampAndOffset {
                timestamp: ts,
                offset,
                leader_epoch: (h.partition_leader_epoch >= 0).then_some(h.partition_leader_epoch),
            });
        Ok(found)
    }

    fn read_batch(&self, pos: u64, h: &BatchHeader) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; h.size()];
        self.log
            .read_exact_at(&mut buf, pos)
            .map_err(StorageError::io(&self.log_path))?;
        Ok(buf)
    }

    /// Re-reads every batch, validating it whole, and rebuilds both indexes. Truncates the file
    /// at the first invalid or torn batch and returns the number of bytes cut.
    pub fn recover(&mut self) -> Result<u64> {
        self.offset_index.reset();
        self.time_index.reset();
        self.offset_index.resize(self.config.max_index_size)?;
        self.time_index.resize(self.config.max_index_size)?;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp_so_far = -1;
        self.offset_of_max_timestamp_so_far = self.base_offset;
        self.rolling_based_timestamp = None;
        self.next_offset = self.base_offset;
        let mut pos = 0u64;
        let mut expected_min = self.base_offset;
        // The walk borrows its own handles, so that the loop can index into `self`.
        let (file, path) = (self.log.clone(), self.log_path.clone());
        let mut walk = BatchHeaders::new(&file, &path, 0, self.size, BATCH_HEADER_SIZE);
        while let Some((at, h)) = walk.next().transpose()? {
            pos = at;
            if let Err(e) = batch::validate_stored_batch(walk.batch(at, &h)?) {
                tracing::warn!(segment = %self.log_path.display(), position = pos, error = %e,
                    "found an invalid batch during recovery; truncating here");
                break;
            }
            if h.base_offset < expected_min || !self.can_convert_to_relative_offset(h.last_offset())
            {
                tracing::warn!(segment = %self.log_path.display(), position = pos,
                    base_offset = h.base_offset, "batch offset out of order; truncating here");
                break;
            }
            if self.offset_index.is_full() || self.time_index.is_full() {
                break;
            }
            if self.rolling_based_timestamp.is_none() {
                self.rolling_based_timestamp = Some(h.max_timestamp);
            }
            self.index_batch(&h, pos)?;
            expected_min = h.next_offset();
            pos += h.size() as u64;
        }
        let truncated = self.size - pos;
        if truncated > 0 {
            self.cut_log_at(pos)?;
        }
        Ok(truncated)
    }

    /// Cuts the `.log` file at `pos`, and write-behind back to it.
    fn cut_log_at(&mut self, pos: u64) -> Result<()> {
        self.log
            .set_len(pos)
            .map_err(StorageError::io(&self.log_path))?;
        self.size = pos;
        self.written_behind = self.written_behind.min(whole_pages(pos));
        Ok(())
    }

    /// Cuts the segment at the batch containing `offset` and drops index entries from it on.
    /// Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        let Some((pos, _)) = self.translate_offset(offset)? else {
            return Ok(0);
        };
        self.offset_index.truncate_to(offset);
        self.time_index.truncate_to(offset);
        let removed = self.size - pos;
        self.cut_log_at(pos)?;
        // Recompute the tail state from what is left; the data after the last index entry is small.
        self.bytes_since_last_index_entry = 0;
        self.next_offset = self.base_offset;
        self.rolling_based_timestamp = None;
        self.load_tail_state()?;
        if self.size == 0 {
            self.created_ms = now_ms();
        }
        Ok(removed)
    }

    /// Kafka's checks before trusting indexes after a clean shutdown.
    pub fn sanity_check(&self) -> Result<()> {
        self.offset_index.sanity_check(self.size)?;
        self.time_index.sanity_check(self.next_offset)
    }

    /// Grows both indexes back to the preallocated size (for the active segment after a load).
    pub fn resize_indexes(&mut self, size: u64) -> Result<()> {
        self.offset_index.resize(size)?;
        self.time_index.resize(size)
    }

    /// Called when a newer segment takes over: records the final time entry and trims indexes.
    pub fn on_become_inactive(&mut self) -> Result<()> {
        if self.max_timestamp_so_far >= 0 {
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                true,
            )?;
        }
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        self.release_preallocation()
    }

    /// Gives back the disk reserved past the data by `preallocate`.
    fn release_preallocation(&self) -> Result<()> {
        if let Some(bytes) = self.config.preallocate_bytes {
            if bytes > self.size {
                // Truncating to the current length frees the blocks reserved past it.
                self.log
                    .set_len(self.size)
                    .map_err(StorageError::io(&self.log_path))?;
            }
        }
        Ok(())
    }

    /// Handles to fsync, so that a flush can run without holding the log's lock.
    pub fn flush_handles(&self) -> FlushHandles {
        FlushHandles {
            files: vec![
                (self.log_path.clone(), Some(self.log.clone())),
                (self.offset_index.path().to_path_buf(), None),
                (self.time_index.path().to_path_buf(), None),
            ],
        }
    }

    /// Only the `.log` file: the active segment's indexes need no fsync, because recovery
    /// always rebuilds the segment that holds the recovery point.
    pub fn log_flush_handle(&self) -> FlushHandles {
        FlushHandles {
            files: vec![(self.log_path.clone(), Some(self.log.clone()))],
        }
    }

    pub fn flush(&self) -> Result<()> {
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.flush_handles().sync()
    }

    /// Trims the indexes to their entries, as Kafka does on close, so a reopen sees exact sizes.
    pub fn close(&mut self) -> Result<()> {
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        self.release_preallocation()?;
        self.flush()
    }

    /// Renames the segment's files with a `.deleted` suffix and returns the new paths.
    pub fn rename_to_deleted(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for p in [
            self.log_path.clone(),
            self.offset_index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
        ] {
            let mut name = p.clone().into_os_string();
            name.push(DELETED_SUFFIX);
            let to = PathBuf::from(name);
            match std::fs::rename(&p, &to) {
                Ok(()) => out.push(to),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io(&p)(e)),
            }
        }
        Ok(out)
    }
}

/// The header at the start of `buf`, read at `position` of a file of `len` bytes, if it starts a
/// whole batch: `None` for a length too short to be a batch or a batch running past `len`.
fn whole_batch_header(buf: &[u8], position: u64, len: u64) -> Result<Option<BatchHeader>> {
    match batch::batch_at(buf, position, len)? {
        BatchAt::Whole(h) => Ok(Some(h)),
        BatchAt::Unknown | BatchAt::TooShort(_) | BatchAt::PastEnd(_) => Ok(None),
    }
}

/// The most a header walk reads in one `pread`.
const HEADER_WALK_CHUNK: usize = 64 << 10;

/// The one walk over the batch headers of a `.log` file (`len` bytes of `file`, from byte
/// `from`): each whole batch's position and header, until a length too short to be a batch or
/// a batch running past `len` (a torn tail). The first `pread` is `first_read` bytes (at least
/// a header), each next one twice the last up to 64 KiB: a walk that stops at its first batch
/// reads little, a long one many headers a `pread`. After a batch of 32 KiB or more, the next
/// `pread` is one header.
pub struct BatchHeaders<'a> {
    file: &'a File,
    path: &'a Path,
    len: u64,
    /// Where the next batch starts.
    pos: u64,
    buf: Vec<u8>,
    /// The file position of `buf[0]`.
    buf_pos: u64,
    next_read: usize,
    last_size: usize,
    read: u64,
    done: bool,
}

impl<'a> BatchHeaders<'a> {
    pub fn new(
        file: &'a File,
        path: &'a Path,
        from: u64,
        len: u64,
        first_read: usize,
    ) -> BatchHeaders<'a> {
        BatchHeaders {
            file,
            path,
            len,
            pos: from,
            buf: Vec::new(),
            buf_pos: from,
            next_read: first_read.clamp(BATCH_HEADER_SIZE, HEADER_WALK_CHUNK),
            last_size: 0,
            read: 0,
            done: false,
        }
    }

    /// Position and header of the first batch whose last offset is ≥ `offset`.
    pub fn find_last_offset(mut self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.find(|found| !matches!(found, Ok((_, h)) if h.last_offset() < offset))
            .transpose()
    }

    /// The bytes read so far (for a caller that throttles its reads).
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// Where `n` bytes from file position `at` lie in `buf`, when it holds them.
    fn buffered(&self, at: u64, n: usize) -> Option<usize> {
        let start = at.checked_sub(self.buf_pos)? as usize;
        (start + n <= self.buf.len()).then_some(start)
    }

    /// Reads `n` bytes from `at` into `buf`.
    fn read_at(&mut self, at: u64, n: usize) -> Result<()> {
        self.buf.resize(n, 0);
        self.file
            .read_exact_at(&mut self.buf, at)
            .map_err(StorageError::io(self.path))?;
        self.buf_pos = at;
        self.read += n as u64;
        Ok(())
    }

    /// The next header: from `buf`, or from a new `pread` at `pos` (`pos + 61 <= len`).
    fn next_header(&mut self) -> Result<Option<BatchHeader>> {
        let at = match self.buffered(self.pos, BATCH_HEADER_SIZE) {
            Some(at) => at,
            None => {
                let want = if self.last_size >= HEADER_WALK_CHUNK / 2 {
                    BATCH_HEADER_SIZE
                } else {
                    self.next_read
                };
                self.next_read = (want * 2).min(HEADER_WALK_CHUNK);
                self.read_at(self.pos, (want as u64).min(self.len - self.pos) as usize)?;
                0
            }
        };
        whole_batch_header(&self.buf[at..], self.pos, self.len)
    }

    /// The whole batch `h` this walk found at `at`: from the walk's buffer when it holds all of
    /// it, else read (the walk goes on after it).
    pub fn batch(&mut self, at: u64, h: &BatchHeader) -> Result<&[u8]> {
        let start = match self.buffered(at, h.size()) {
            Some(start) => start,
            None => {
                self.read_at(at, h.size())?;
                0
            }
        };
        Ok(&self.buf[start..start + h.size()])
    }
}

impl Iterator for BatchHeaders<'_> {
    type Item = Result<(u64, BatchHeader)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos + BATCH_HEADER_SIZE as u64 > self.len {
            return None;
        }
        match self.next_header() {
            Ok(Some(h)) => {
                let at = self.pos;
                self.last_size = h.size();
                self.pos += h.size() as u64;
                Some(Ok((at, h)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// `path` with its suffix `old` replaced by `new`.
fn renamed(path: &Path, old: &str, new: &str) -> Result<PathBuf> {
    let s = path.to_string_lossy();
    match s.strip_suffix(old) {
        Some(stem) => Ok(PathBuf::from(format!("{stem}{new}"))),
        None => Err(StorageError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("file name does not end in {old:?}")),
        }),
    }
}

/// The files of one segment to fsync outside the log lock: the open `.log`, and the indexes by
/// path (they keep no descriptor; one is opened for the fsync, and an index deleted meanwhile
/// needs none).
pub struct FlushHandles {
    files: Vec<(PathBuf, Option<Arc<File>>)>,
}

impl FlushHandles {
    pub fn sync(&self) -> Result<()> {
        for (path, f) in &self.files {
            match f {
                Some(f) => f.sync_data().map_err(StorageError::io(path))?,
                None => match File::open(path) {
                    Ok(f) => f.sync_data().map_err(StorageError::io(path))?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::io(path)(e)),
                },
            }
        }
        Ok(())
    }
}

/// `fallocate(2)` on `file`.
fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`; no memory is passed.
    os_result(unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) })
}

/// A syscall's 0-or-errno return as an `io::Result`.
fn os_result(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE` on `len` bytes of `file` from `offset`.
fn start_writeback(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (offset.try_into(), len.try_into()) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    // SAFETY: plain syscall on an open descriptor owned by `file`; no memory is passed.
    os_result(unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    })
}

/// Appends exactly `len` bytes read from `file` at `offset` to `buf`, reading into its spare
/// capacity so the bytes are written once (no zero-fill first, as `read_exact_at` would need).
fn read_exact_at_uninit(
    file: &File,
    buf: &mut Vec<u8>,
    len: usize,
    offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    buf.reserve(len);
    let mut done = 0usize;
    while done < len {
        let spare = buf.spare_capacity_mut();
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `spare` is at least `len - done` bytes of writable capacity owned by `buf`;
        // pread writes at most that many bytes there, and only the `n` it reports are exposed
        // by `set_len` below.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                (len - done).min(spare.len()),
                at,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // SAFETY: pread initialised the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uninit_read_returns_exactly_the_file_bytes_or_eof() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        let mut buf = vec![7u8, 7];
        read_exact_at_uninit(&f, &mut buf, 65_536, 1000).unwrap();
        assert_eq!(&buf[..2], &[7, 7], "appends after what the buffer held");
        assert_eq!(&buf[2..], &data[1000..1000 + 65_536]);
        let mut past = Vec::new();
        let err = read_exact_at_uninit(&f, &mut past, 10, 99_995).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    /// A `.log` file of one-record batches at offsets 0, 1, … with values of `value_sizes`
    /// bytes, then the first half of one more batch (a torn tail). Returns the file and the
    /// length of its whole batches.
    fn log_file(dir: &Path, value_sizes: &[usize]) -> (PathBuf, usize) {
        let mut data = Vec::new();
        for (i, n) in value_sizes.iter().chain([&100]).enumerate() {
            let v = vec![b'v'; *n];
            let mut b = batch::build_batch(&[(Some(b"k".as_slice()), Some(v.as_slice()))], 1);
            batch::set_base_offset(&mut b, i as i64);
            data.extend_from_slice(&b);
        }
        let path = dir.join(file_name(0, LOG_SUFFIX));
        let last = batch::validate_stored_batches(&data)
            .unwrap()
            .last()
            .unwrap()
            .position;
        std::fs::write(&path, &data[..last + (data.len() - last) / 2]).unwrap();
        (path, last)
    }

    #[test]
    fn a_header_walk_finds_every_whole_batch_and_its_bytes_and_stops_at_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let sizes: Vec<usize> = (0..300)
            .map(|i| if i % 100 == 50 { 40 << 10 } else { i % 37 })
            .collect();
        let (path, whole) = log_file(dir.path(), &sizes);
        let data = std::fs::read(&path).unwrap();
        let expected: Vec<(u64, BatchHeader)> = batch::validate_stored_batches(&data[..whole])
            .unwrap()
            .iter()
            .map(|i| (i.position as u64, i.header))
            .collect();
        assert_eq!(expected.len(), sizes.len());
        let f = File::open(&path).unwrap();
        let len = data.len() as u64;
        let headers: Vec<(u64, BatchHeader)> = BatchHeaders::new(&f, &path, 0, len, 1)
            .map(Result::unwrap)
            .collect();
        assert_eq!(headers, expected, "headers only");
        let mut walk = BatchHeaders::new(&f, &path, 0, len, BATCH_HEADER_SIZE);
        let mut seen = 0;
        while let Some((at, h)) = walk.next().transpose().unwrap() {
            let bytes = walk.batch(at, &h).unwrap();
            assert_eq!(
                bytes,
                &data[at as usize..at as usize + h.size()],
                "batch at {at}"
            );
            assert_eq!((at, h), expected[seen]);
            seen += 1;
        }
        assert_eq!(seen, expected.len(), "with the batches read too");
    }

    #[test]
    fn a_header_walk_reads_one_header_when_it_stops_at_the_first_batch_then_doubles_its_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = log_file(dir.path(), &[20; 2000]);
        let f = File::open(&path).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let mut walk = BatchHeaders::new(&f, &path, 0, len, BATCH_HEADER_SIZE);
        let (at, h) = walk.next().unwrap().unwrap();
        assert_eq!((at, h.base_offset), (0, 0));
        assert_eq!(walk.bytes_read(), BATCH_HEADER_SIZE as u64);
        let mut reads = vec![walk.bytes_read()];
        let mut total = walk.bytes_read();
        while let Some(found) = walk.next() {
            found.unwrap();
            let now = walk.bytes_read();
            if now > total {
                reads.push(now - total);
                total = now;
            }
        }
        let doubling: Vec<u64> = (0..11).map(|i| (BATCH_HEADER_SIZE as u64) << i).collect();
        assert_eq!(reads[..11], doubling[..], "{reads:?}");
        assert!(
            reads.iter().all(|r| *r <= HEADER_WALK_CHUNK as u64),
            "{reads:?}"
        );
        // From an index entry, the first read is the index interval and a header.
        let mut walk = BatchHeaders::new(&f, &path, 0, len, 4096 + BATCH_HEADER_SIZE);
        walk.next().unwrap().unwrap();
        assert_eq!(walk.bytes_read(), 4096 + BATCH_HEADER_SIZE as u64);
    }
}

#[cfg(test)]
mod preallocate_tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn index_mismatches_are_none_for_a_written_segment_and_name_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SegmentConfig {
            index_interval_bytes: 1,
            max_index_size: 1024 * 1024,
            preallocate_bytes: None,
        };
        let mut seg = LogSegment::create(dir.path(), 0, cfg).unwrap();
        let v: &[u8] = b"v";
        seg.append(&batch::build_batch(&[(Some(b"k".as_slice()), Some(v))], 1))
            .unwrap();
        assert_eq!(seg.index_mismatches().unwrap(), Vec::<String>::new());
        let path = dir.path().join(file_name(0, LOG_SUFFIX));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &[0, 0, 0, 0, 0, 0, 0, 9, 0]).unwrap();
        let bad = seg.index_mismatches().unwrap();
        assert!(bad[0].contains("whole batches"), "{bad:?}");
    }

    #[test]
    fn preallocated_segment_reserves_disk_and_gives_it_back_on_roll() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SegmentConfig {
            index_interval_bytes: 4096,
            max_index_size: 1024 * 1024,
            preallocate_bytes: Some(8 * 1024 * 1024),
        };
        let mut seg = LogSegment::create(dir.path(), 0, cfg).unwrap();
        let path = dir.path().join(file_name(0, LOG_SUFFIX));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "the length stays the data's"
        );
        assert!(
            allocated(&path) >= 8 * 1024 * 1024,
            "blocks reserved: {}",
            allocated(&path)
        );
        seg.on_become_inactive().unwrap();
        assert!(
            allocated(&path) < 64 * 1024,
            "released: {}",
            allocated(&path)
        );
    }
}
