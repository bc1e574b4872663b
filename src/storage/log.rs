//! Log: one partition's segments (Kafka's UnifiedLog/LocalLog). Owns offset assignment, rolling,
//! reads, ListOffsets, loading and recovery, retention, DeleteRecords, truncation and flushing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::batch::{self, BatchHeader};
use super::checkpoint::{
    read_partition_metadata, write_partition_metadata, KafkaUuid, TopicPartition,
};
use super::epoch::LeaderEpochFileCache;
use super::error::{RecordError, Result, StorageError};
use super::segment::{
    file_name, FlushHandles, LogSegment, RollParams, SegmentConfig, TimestampAndOffset,
    DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::config::{LogConfig, TimestampType};

/// ListOffsets timestamps with a special meaning (Kafka's `ListOffsetsRequest` constants).
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// What was appended: the offsets assigned and the timestamps seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// The broker time written into LogAppendTime batches, or -1.
    pub log_append_time: i64,
    pub num_messages: i64,
    pub valid_bytes: usize,
    pub log_start_offset: i64,
}

/// State the LogManager restores from its checkpoints when it opens a log.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadParams {
    pub recovery_point: i64,
    pub log_start_offset: i64,
    pub high_watermark: Option<i64>,
    pub had_clean_shutdown: bool,
}

/// Files renamed to `.deleted`, to be removed once `file.delete.delay.ms` has passed.
struct PendingDelete {
    due_ms: i64,
    files: Vec<PathBuf>,
}

/// Why a segment was deleted, for the log line.
#[derive(Debug, Clone, Copy)]
enum DeleteReason {
    LogStartOffset,
    RetentionMs,
    RetentionBytes,
}

pub struct Log {
    dir: PathBuf,
    tp: TopicPartition,
    config: LogConfig,
    segments: BTreeMap<i64, LogSegment>,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    high_watermark: i64,
    epoch_cache: LeaderEpochFileCache,
    topic_id: Option<KafkaUuid>,
    unflushed_messages: i64,
    last_flush_ms: i64,
    pending_deletes: Vec<PendingDelete>,
    /// Set by a roll: segments below this offset are complete and should be fsynced.
    roll_flush_upto: Option<i64>,
    /// Bumped whenever a segment is removed or replaced, so that the cleaner never swaps in a
    /// segment prepared from segments that have changed since.
    generation: u64,
    /// The lowest offset truncated to since the cleaner last asked.
    cleaner_truncation: Option<i64>,
    /// Who can tell the cleaner each producer's last batch (see `set_producer_last_batches`).
    producer_last_batches: Option<ProducerLastBatches>,
    /// Set when the LogManager deletes the log (see `mark_deleted`).
    deleted: bool,
}

/// Wall-clock milliseconds since the epoch, as Kafka timestamps count them.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// With a flush policy (`flush.messages` or `flush.ms` set), the active segment's new pages are
/// handed to writeback every this many bytes, ahead of the policy's fsync.
const WRITE_BEHIND_BYTES: u64 = 256 << 10;

fn segment_config(c: &LogConfig) -> SegmentConfig {
    SegmentConfig {
        index_interval_bytes: c.index_interval_bytes,
        max_index_size: c.segment_index_bytes,
        preallocate_bytes: c.preallocate.then_some(c.segment_bytes),
    }
}

fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(p)(e)),
    }
}

/// Base offset from a `<20 digits>.<suffix>` file name.
fn parse_base_offset(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The base offsets of the segments in `dir`, in order. Leftovers of interrupted deletes,
/// cleanings and swaps are removed, and so are index files whose segment is gone (as Kafka does).
fn segment_bases(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    let mut index_files = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(StorageError::io(dir))?;
    for entry in entries {
        let entry = entry.map_err(StorageError::io(dir))?;
        let name = entry.file_name().to_string_lossy().to_string();
        let path = entry.path();
        if name.ends_with(DELETED_SUFFIX)
            || name.ends_with(".cleaned")
            || name.ends_with(".swap")
            || name.ends_with(".tmp")
        {
            tracing::info!(file = %path.display(), "removing a leftover file");
            remove_if_exists(&path)?;
        } else if let Some(base) = parse_base_offset(&name, LOG_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = parse_base_offset(&name, INDEX_SUFFIX)
            .or_else(|| parse_base_offset(&name, TIME_INDEX_SUFFIX))
        {
            index_files.push((base, path));
        }
    }
    bases.sort_unstable();
    for (base, path) in index_files {
        if bases.binary_search(&base).is_err() {
            remove_if_exists(&path)?;
        }
    }
    Ok(bases)
}

/// Opens the segments at `bases`, recovering each that may hold data not yet fsynced (after
/// an unclean shutdown) or whose indexes are missing or fail their check. A torn tail is cut,
/// and every segment after it is deleted: nothing after a hole is reachable.
fn load_segments(
    dir: &Path,
    tp: &TopicPartition,
    bases: &[i64],
    seg_cfg: SegmentConfig,
    params: &LoadParams,
) -> Result<BTreeMap<i64, LogSegment>> {
    let mut segments = BTreeMap::new();
    // The first segment that may hold data not yet fsynced: it contains the recovery point.
    let first_unflushed = bases
        .iter()
        .rev()
        .find(|b| **b <= params.recovery_point)
        .copied()
        .unwrap_or(i64::MIN);
    let mut truncated_at: Option<i64> = None;
    for &base in bases {
        if let Some(cut) = truncated_at {
            tracing::warn!(partition = %tp, base_offset = base, cut,
                "deleting a segment that follows a truncated one");
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                remove_if_exists(&dir.join(file_name(base, suffix)))?;
            }
            continue;
        }
        let indexes_missing = !dir.join(file_name(base, INDEX_SUFFIX)).exists()
            || !dir.join(file_name(base, TIME_INDEX_SUFFIX)).exists();
        let mut seg = LogSegment::open(dir, base, seg_cfg)?;
        let must_recover = (!params.had_clean_shutdown && base >= first_unflushed)
            || indexes_missing
            || match seg.sanity_check() {
                Ok(()) => false,
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "index failed its sanity check; rebuilding");
                    true
                }
            };
        if must_recover {
            let cut = seg.recover()?;
            if cut > 0 {
                tracing::warn!(partition = %tp, base_offset = base, bytes = cut,
                    "truncated an invalid or torn tail during recovery");
                truncated_at = Some(seg.next_offset());
            }
        }
        segments.insert(base, seg);
    }
    Ok(segments)
}

/// Every segment but the last keeps indexes trimmed to their entries; the active one's are
/// preallocated to `index_bytes`.
fn size_indexes(segments: &mut BTreeMap<i64, LogSegment>, index_bytes: u64) -> Result<()> {
    let last_base = segments.keys().next_back().copied();
    for (base, seg) in segments.iter_mut() {
        if Some(*base) == last_base {
            seg.resize_indexes(index_bytes)?;
        } else if seg.offset_index().file_len()
            != (seg.offset_index().entries() * super::index::OffsetIndex::ENTRY_SIZE) as u64
            || seg.time_index().file_len()
                != (seg.time_index().entries() * super::index::TimeIndex::ENTRY_SIZE) as u64
        {
            seg.on_become_inactive()?;
        }
    }
    Ok(())
}

impl Log {
    /// Opens (or creates) the log in `dir`, removing leftovers of interrupted operations and
    /// recovering what an unclean shutdown may have left torn.
    pub fn open(
        dir: &Path,
        tp: TopicPartition,
        config: LogConfig,
        params: LoadParams,
    ) -> Result<Log> {
        std::fs::create_dir_all(dir).map_err(StorageError::io(dir))?;
        cleaning::complete_interrupted_swaps(dir, &tp)?;
        let seg_cfg = segment_config(&config);
        let bases = segment_bases(dir)?;
        let mut segments = load_segments(dir, &tp, &bases, seg_cfg, &params)?;
        size_indexes(&mut segments, config.segment_index_bytes)?;
        if segments.is_empty() {
            let base = params.log_start_offset.max(0);
            segments.insert(base, LogSegment::create(dir, base, seg_cfg)?);
        }
        let first_base = *segments.keys().next().unwrap_or(&0);
        let log_end_offset = segments
            .values()
            .next_back()
            .map(|s| s.next_offset())
            .unwrap_or(first_base);
        let log_start_offset = params.log_start_offset.max(first_base).min(log_end_offset);
        let mut epoch_cache = LeaderEpochFileCache::load(dir)?;
        epoch_cache.truncate_from_end(log_end_offset)?;
        epoch_cache.truncate_from_start(log_start_offset)?;
        let topic_id = read_partition_metadata(dir)?;
        let recovery_point = params
            .recovery_point
            .clamp(log_start_offset, log_end_offset);
        let high_watermark = params
            .high_watermark
            .unwrap_or(log_start_offset)
            .clamp(log_start_offset, log_end_offset);
        Ok(Log {
            dir: dir.to_path_buf(),
            tp,
            config,
            segments,
            log_start_offset,
            log_end_offset,
            recovery_point,
            high_watermark,
            epoch_cache,
            topic_id,
            unflushed_messages: 0,
            last_flush_ms: now_ms(),
            pending_deletes: Vec::new(),
            roll_flush_upto: None,
            generation: 0,
            cleaner_truncation: None,
            producer_last_batches: None,
            deleted: false,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn topic_id(&self) -> Option<KafkaUuid> {
        self.topic_id
    }
    pub fn epoch_cache(&self) -> &LeaderEpochFileCache {
        &self.epoch_cache
    }
    pub fn epoch_cache_mut(&mut self) -> &mut LeaderEpochFileCache {
        &mut self.epoch_cache
    }
    pub fn segments(&self) -> impl Iterator<Item = &LogSegment> {
        self.segments.values()
    }
    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }
    /// Bytes in all segments (Kafka's `Size` metric).
    pub fn size(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }

    fn active(&self) -> &LogSegment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut LogSegment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Writes `partition.metadata` with the topic id (once, when the partition is created).
    pub fn set_topic_id(&mut self, id: KafkaUuid) -> Result<()> {
        if self.topic_id != Some(id) {
            write_partition_metadata(&self.dir, id)?;
            self.topic_id = Some(id);
        }
        Ok(())
    }

    /// Sets the high watermark, clamped to [log start, log end].
    pub fn update_high_watermark(&mut self, hw: i64) -> i64 {
        self.high_watermark = hw.clamp(self.log_start_offset, self.log_end_offset);
        self.high_watermark
    }

    pub fn update_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Appends client batches as the leader: validates them, assigns offsets from the log end,
    /// stamps the leader epoch and, with LogAppendTime, the broker time. Nothing is written on error.
    pub fn append_as_leader(
        &mut self,
        records: &mut [u8],
        leader_epoch: i32,
    ) -> Result<AppendInfo> {
        let infos = batch::validate_batches(records)?;
        for info in &infos {
            let size = info.header.size();
            if size as u64 > self.config.max_message_bytes {
                return Err(StorageError::RecordTooLarge {
                    size,
                    max: self.config.max_message_bytes as usize,
                });
            }
            if self.config.compact() {
                let b = &records[info.position..info.position + size];
                self.refuse_keyless_records(&info.header, b)?;
            }
        }
        let now = now_ms();
        let log_append = self.config.message_timestamp_type == TimestampType::LogAppendTime;
        let first_offset = self.log_end_offset;
        let mut next = first_offset;
        let mut max_timestamp = -1;
        for info in &infos {
            let b = &mut records[info.position..info.position + info.header.size()];
            batch::set_base_offset(b, next);
            batch::set_partition_leader_epoch(b, leader_epoch);
            if log_append {
                batch::set_log_append_time(b, now);
            }
            max_timestamp = max_timestamp.max(if log_append {
                now
            } else {
                info.header.max_timestamp
            });
            next += info.header.records_count as i64;
        }
        let info = AppendInfo {
            first_offset,
            last_offset: next - 1,
            max_timestamp,
            log_append_time: if log_append { now } else { -1 },
            num_messages: next - first_offset,
            valid_bytes: records.len(),
            log_start_offset: self.log_start_offset,
        };
        self.append_validated(records, &info, now)?;
        if leader_epoch >= 0 {
            self.epoch_cache.assign(leader_epoch, first_offset)?;
        }
        Ok(info)
    }

    /// Kafka's `LogValidator.validateKey`, on a compacted log: a batch holding a record without
    /// a key is refused whole, each such record named by its index in the batch. Followers
    /// append what the leader wrote; only leader appends are checked.
    fn refuse_keyless_records(&self, h: &BatchHeader, b: &[u8]) -> Result<()> {
        if h.is_control() {
            return Ok(());
        }
        let section = batch::records_section(b)?;
        let mut errors = Vec::new();
        for (index, r) in (0..).zip(batch::raw_records(&section, h.records_count)) {
            if r?.key.is_none() {
                errors.push(RecordError {
                    batch_index: index,
                    message: format!(
                        "Compacted topic cannot accept message without key in topic partition {}",
                        self.tp
                    ),
                });
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(StorageError::RecordErrors(errors))
        }
    }

    /// Appends batches fetched from a leader with their offsets as they are. The first batch
    /// must start at the log end or later.
    pub fn append_as_follower(&mut self, records: &[u8]) -> Result<AppendInfo> {
        let infos = batch::validate_stored_batches(records)?;
        let first: &BatchHeader = &infos[0].header;
        if first.base_offset < self.log_end_offset {
            return Err(StorageError::UnexpectedAppendOffset(format!(
                "first offset {} is below the log end offset {}",
                first.base_offset, self.log_end_offset
            )));
        }
        let mut expected = first.base_offset;
        for i in &infos {
            if i.header.base_offset < expected {
                return Err(StorageError::UnexpectedAppendOffset(format!(
                    "batch at offset {} goes backwards (expected at least {expected})",
                    i.header.base_offset
                )));
            }
            expected = i.header.next_offset();
        }
        let info = AppendInfo {
            first_offset: first.base_offset,
            last_offset: expected - 1,
            max_timestamp: infos
                .iter()
                .map(|i| i.header.max_timestamp)
                .max()
                .unwrap_or(-1),
            log_append_time: -1,
            num_messages: infos.iter().map(|i| i.header.records_count as i64).sum(),
            valid_bytes: records.len(),
            log_start_offset: self.log_start_offset,
        };
        self.append_validated(records, &info, now_ms())?;
        for i in &infos {
            if i.header.partition_leader_epoch >= 0 {
                self.epoch_cache
                    .assign(i.header.partition_leader_epoch, i.header.base_offset)?;
            }
        }
        Ok(info)
    }

    fn append_validated(&mut self, records: &[u8], info: &AppendInfo, now: i64) -> Result<()> {
        let params = RollParams {
            max_segment_ms: self.config.segment_ms,
            roll_jitter_ms: 0,
            max_segment_bytes: self.config.segment_bytes,
            max_timestamp_in_messages: info.max_timestamp,
            max_offset_in_messages: info.last_offset,
            messages_size: records.len() as u64,
            now_ms: now,
        };
        if self.active().should_roll(&params) {
            self.roll(info.first_offset)?;
        }
        self.active_mut().append(records)?;
        if self.config.has_flush_policy() {
            self.active_mut().write_behind(WRITE_BEHIND_BYTES);
        }
        self.log_end_offset = info.last_offset + 1;
        self.unflushed_messages += info.num_messages;
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end (or `expected_next`, if higher).
    pub fn roll(&mut self, expected_next: i64) -> Result<()> {
        let new_base = expected_next.max(self.log_end_offset);
        let seg_cfg = segment_config(&self.config);
        let active = self.active_mut();
        if active.base_offset() == new_base && active.size() == 0 {
            return Ok(());
        }
        active.on_become_inactive()?;
        // The closed segment's indexes were never fsynced while it was active (recovery rebuilds
        // the active segment). Until the roll flush syncs them, recovery must rebuild it again.
        let old_base = active.base_offset();
        self.recovery_point = self.recovery_point.min(old_base);
        let seg = LogSegment::create(&self.dir, new_base, seg_cfg)?;
        self.segments.insert(new_base, seg);
        tracing::debug!(partition = %self.tp, base_offset = new_base, "rolled a new segment");
        self.roll_flush_upto = Some(new_base);
        Ok(())
    }

    /// Whole batches from the one containing `start_offset`, at most `max_bytes` (but one whole
    /// batch if `min_one_batch` and it is larger), ending below `max_offset` (exclusive; e.g. the
    /// high watermark). OFFSET_OUT_OF_RANGE outside [log start, log end].
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: Option<i64>,
        min_one_batch: bool,
    ) -> Result<Vec<u8>> {
        if start_offset < self.log_start_offset || start_offset > self.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset: start_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let upper = max_offset.unwrap_or(self.log_end_offset);
        if start_offset >= upper {
            return Ok(Vec::new());
        }
        let mut from = start_offset;
        for (_, seg) in self
            .segments
            .range(..=start_offset)
            .next_back()
            .into_iter()
            .chain(self.segments.range(start_offset.saturating_add(1)..))
        {
            if let Some(bytes) = seg.read(from, max_bytes, upper, min_one_batch)? {
                return Ok(bytes);
            }
            from = from.max(seg.next_offset());
        }
        Ok(Vec::new())
    }

    /// Calls `f` with the header of every batch from the one holding `offset` to the log end,
    /// reading headers only (for rebuilding producer state).
    pub fn for_each_batch_header(
        &self,
        offset: i64,
        mut f: impl FnMut(&BatchHeader),
    ) -> Result<()> {
        let first = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        for (_, seg) in self.segments.range(first..) {
            seg.for_each_batch_header(offset.max(seg.base_offset()), &mut f)?;
        }
        Ok(())
    }

    /// ListOffsets for one timestamp, special values included. `None` when no record qualifies.
    pub fn fetch_offset_by_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        match timestamp {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok(Some(TimestampAndOffset {
                timestamp: -1,
                offset: self.log_start_offset,
                leader_epoch: self.epoch_cache.epoch_for_offset(self.log_start_offset),
            })),
            LATEST_TIMESTAMP => Ok(Some(TimestampAndOffset {
                timestamp: -1,
                offset: self.log_end_offset,
                leader_epoch: self.epoch_cache.latest_epoch(),
            })),
            MAX_TIMESTAMP => {
                let best = self
                    .segments
                    .values()
                    .filter(|s| s.max_timestamp_so_far() >= 0)
                    .max_by_key(|s| (s.max_timestamp_so_far(), -s.base_offset()));
                match best {
                    Some(seg) => seg.max_timestamp_record(),
                    None => Ok(None),
                }
            }
            t if t < 0 => Ok(None),
            t => {
                for seg in self.segments.values() {
                    if seg.max_timestamp_so_far() >= t {
                        if let Some(found) =
                            seg.find_offset_by_timestamp(t, self.log_start_offset)?
                        {
                            return Ok(Some(found));
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// DeleteRecords: moves the log start offset up to `offset` (at most the high watermark)
    /// and deletes the segments wholly below it. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        if offset > self.high_watermark || offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            self.epoch_cache.truncate_from_start(offset)?;
            self.recovery_point = self.recovery_point.max(offset);
            self.delete_segments_where(now_ms(), DeleteReason::LogStartOffset)?;
        }
        Ok(self.log_start_offset)
    }

    /// Retention: deletes closed segments past `retention.ms`, the oldest while the log exceeds
    /// `retention.bytes`, and those below the log start offset. Only segments wholly below the
    /// high watermark go. Time and size apply only with `cleanup.policy` `delete` (a `compact`
    /// log keeps its segments, as in Kafka's `deleteOldSegments`). Returns the segments deleted.
    pub fn delete_old_segments(&mut self, now: i64) -> Result<usize> {
        let mut n = self.delete_segments_where(now, DeleteReason::LogStartOffset)?;
        if !self.config.delete() {
            return Ok(n);
        }
        if self.config.retention_ms >= 0 {
            n += self.delete_segments_where(now, DeleteReason::RetentionMs)?;
        }
        if self.config.retention_bytes >= 0 {
            n += self.delete_segments_where(now, DeleteReason::RetentionBytes)?;
        }
        Ok(n)
    }

    fn delete_segments_where(&mut self, now: i64, reason: DeleteReason) -> Result<usize> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut size_excess = self.size() as i64 - self.config.retention_bytes;
        let mut doomed = Vec::new();
        // Closed segments only: each one's upper bound is the next segment's base offset.
        for w in bases.windows(2) {
            let (base, next_base) = (w[0], w[1]);
            let seg = &self.segments[&base];
            if next_base > self.high_watermark {
                break;
            }
            let delete = match reason {
                DeleteReason::LogStartOffset => next_base <= self.log_start_offset,
                DeleteReason::RetentionMs => {
                    now - seg.largest_timestamp() > self.config.retention_ms
                }
                DeleteReason::RetentionBytes => {
                    if size_excess - seg.size() as i64 >= 0 {
                        size_excess -= seg.size() as i64;
                        true
                    } else {
                        false
                    }
                }
            };
            if !delete {
                break;
            }
            doomed.push(base);
        }
        for base in &doomed {
            if let Some(seg) = self.segments.remove(base) {
                let files = seg.rename_to_deleted()?;
                tracing::info!(partition = %self.tp, base_offset = base, ?reason, "deleting segment");
                self.pending_deletes.push(PendingDelete {
                    due_ms: now + self.config.file_delete_delay_ms,
                    files,
                });
            }
        }
        if !doomed.is_empty() {
            self.generation += 1;
            let first = *self.segments.keys().next().unwrap_or(&self.log_end_offset);
            if first > self.log_start_offset {
                self.log_start_offset = first;
                self.epoch_cache.truncate_from_start(first)?;
            }
            self.recovery_point = self.recovery_point.max(self.log_start_offset);
            self.delete_due_files(now)?;
        }
        Ok(doomed.len())
    }

    /// Removes `.deleted` files whose delay has passed.
    pub fn delete_due_files(&mut self, now: i64) -> Result<()> {
        let mut keep = Vec::new();
        for p in std::mem::take(&mut self.pending_deletes) {
            if p.due_ms <= now {
                for f in &p.files {
                    remove_if_exists(f)?;
                }
            } else {
                keep.push(p);
            }
        }
        self.pending_deletes = keep;
        Ok(())
    }

    pub fn has_pending_deletes(&self) -> bool {
        !self.pending_deletes.is_empty()
    }

    /// Removes everything at or after `target`, for replication's divergence handling.
    /// Returns whether any record was removed. As Kafka's `UnifiedLog.truncateTo`, the leader
    /// epoch cache is truncated even when no record is: an epoch this replica assigned as
    /// leader without writing a batch starts at the log end, and a follower that kept it
    /// would name it in every fetch and be told of the same divergence forever.
    pub fn truncate_to(&mut self, target: i64) -> Result<bool> {
        if target < 0 {
            return Ok(false);
        }
        if target >= self.log_end_offset {
            self.epoch_cache.truncate_from_end(target)?;
            return Ok(false);
        }
        if target < self.first_segment_base() {
            self.truncate_fully_and_start_at(target)?;
            return Ok(true);
        }
        self.note_truncation(target);
        let later: Vec<i64> = self.segments.range(target + 1..).map(|(b, _)| *b).collect();
        let now = now_ms();
        for b in later {
            if let Some(seg) = self.segments.remove(&b) {
                let files = seg.rename_to_deleted()?;
                self.pending_deletes
                    .push(PendingDelete { due_ms: now, files });
            }
        }
        let index_size = self.config.segment_index_bytes;
        let active = self.active_mut();
        active.truncate_to(target)?;
        active.resize_indexes(index_size)?;
        self.log_end_offset = self.active().next_offset();
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.epoch_cache.truncate_from_end(self.log_end_offset)?;
        self.delete_due_files(now)?;
        Ok(true)
    }

    fn note_truncation(&mut self, offset: i64) {
        self.generation += 1;
        self.cleaner_truncation = Some(self.cleaner_truncation.map_or(offset, |t| t.min(offset)));
    }

    fn first_segment_base(&self) -> i64 {
        *self.segments.keys().next().unwrap_or(&0)
    }

    /// Deletes every segment and starts an empty log at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.note_truncation(offset);
        let now = now_ms();
        for (_, seg) in std::mem::take(&mut self.segments) {
            let files = seg.rename_to_deleted()?;
            self.pending_deletes
                .push(PendingDelete { due_ms: now, files });
        }
        self.delete_due_files(now)?;
        let seg = LogSegment::create(&self.dir, offset, segment_config(&self.config))?;
        self.segments.insert(offset, seg);
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.recovery_point = offset;
        self.high_watermark = offset;
        self.epoch_cache.truncate_from_end(offset)?;
        self.epoch_cache.truncate_from_start(offset)?;
        Ok(())
    }

    /// Handles to fsync every segment that may hold data above the recovery point, and the
    /// offset the recovery point may move to once they are synced.
    pub fn unflushed_handles(&self, upto: i64) -> (Vec<FlushHandles>, i64) {
        let upto = upto.min(self.log_end_offset);
        let first = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        let active_base = self.active().base_offset();
        let handles = self
            .segments
            .range(first..)
            .filter(|(b, _)| **b < upto || upto == self.log_end_offset)
            .map(|(b, s)| {
                if *b == active_base {
                    s.log_flush_handle()
                } else {
                    s.flush_handles()
                }
            })
            .collect();
        (handles, upto)
    }

    /// Records that everything below `offset` is on disk.
    pub fn mark_flushed(&mut self, offset: i64) {
        if offset > self.recovery_point {
            self.recovery_point = offset.min(self.log_end_offset);
        }
        if offset >= self.log_end_offset {
            self.unflushed_messages = 0;
        }
        self.last_flush_ms = now_ms();
    }

    /// fsyncs every unflushed segment and moves the recovery point to the log end.
    pub fn flush(&mut self) -> Result<()> {
        let (handles, upto) = self.unflushed_handles(self.log_end_offset);
        for h in &handles {
            h.sync()?;
        }
        self.mark_flushed(upto);
        Ok(())
    }

    /// The offset a roll asked to have flushed, taken once.
    pub fn take_roll_flush(&mut self) -> Option<i64> {
        self.roll_flush_upto.take()
    }

    /// Whether `flush.ms` has passed since the last flush with data waiting.
    pub fn flush_due(&self, now: i64) -> bool {
        self.log_end_offset > self.recovery_point
            && now.saturating_sub(self.last_flush_ms) >= self.config.flush_ms
    }

    /// Flushes and trims every segment's indexes, for a clean shutdown.
    pub fn close(&mut self) -> Result<()> {
        self.flush()?;
        for seg in self.segments.values_mut() {
            seg.close()?;
        }
        self.delete_due_files(i64::MAX)
    }
}

mod cleaning;
pub use cleaning::{CleaningView, LastBatch, ProducerLastBatches, SegmentView};

#[cfg(test)]
mod tests;
