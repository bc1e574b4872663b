//! Kafka's `Cleaner`: one round of compaction of one log — the offset map of the dirty section,
//! then every segment below its end rewritten in groups, each group swapped in as one segment.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use super::filter::{self, FilterContext};
use super::offset_map::SkimpyOffsetMap;
use super::reader::{Flow, IoContext};
use crate::config::cleaner::CleanerConfig;
use crate::storage::batch::{self, BatchHeader, BATCH_HEADER_SIZE};
use crate::storage::error::{Result, StorageError};
use crate::storage::log::{CleaningView, LastBatch, SegmentView};
use crate::storage::segment::{
    file_name, BatchHeaders, LogSegment, SegmentConfig, CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
};
use crate::storage::LogRef;

/// What one round read, wrote and took (Kafka's `CleanerStats`).
#[derive(Debug, Clone)]
pub struct CleanerStats {
    pub start: Instant,
    /// When the offset map was built (Kafka's `indexDone`).
    pub index_done: Option<Instant>,
    pub end: Option<Instant>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub map_bytes_read: u64,
    pub map_messages_read: u64,
    pub messages_read: u64,
    pub invalid_messages_read: u64,
    pub messages_written: u64,
    /// Entries of the offset map over the slots `log.cleaner.dedupe.buffer.size` gives a thread.
    pub buffer_utilization: f64,
}

impl Default for CleanerStats {
    fn default() -> Self {
        CleanerStats {
            start: Instant::now(),
            index_done: None,
            end: None,
            bytes_read: 0,
            bytes_written: 0,
            map_bytes_read: 0,
            map_messages_read: 0,
            messages_read: 0,
            invalid_messages_read: 0,
            messages_written: 0,
            buffer_utilization: 0.0,
        }
    }
}

impl CleanerStats {
    pub fn elapsed_secs(&self) -> f64 {
        self.end
            .unwrap_or_else(Instant::now)
            .duration_since(self.start)
            .as_secs_f64()
    }

    /// Seconds spent building the offset map (Kafka's `elapsedIndexSecs`).
    pub fn elapsed_index_secs(&self) -> f64 {
        self.index_done
            .map(|t| t.duration_since(self.start).as_secs_f64())
            .unwrap_or(0.0)
    }

    /// The round's figures in the words of Kafka's `LogCleaner.recordStats` (MB of 2^20 bytes),
    /// on one line: what was processed and how fast, the offset map's share, the size before
    /// and after. `from` and `to` are the dirty section.
    pub fn report(&self, tp: &impl std::fmt::Display, from: i64, to: i64) -> String {
        fn mb(bytes: f64) -> f64 {
            bytes / (1024.0 * 1024.0)
        }
        /// `part / whole`, and 0 for an empty whole (a round that read nothing).
        fn ratio(part: f64, whole: f64) -> f64 {
            if whole > 0.0 {
                part / whole
            } else {
                0.0
            }
        }
        let secs = self.elapsed_secs();
        let index_secs = self.elapsed_index_secs();
        let clean_secs = (secs - index_secs).max(0.0);
        let (read_bytes, written_bytes) = (self.bytes_read as f64, self.bytes_written as f64);
        let read = mb(read_bytes);
        let map_read = mb(self.map_bytes_read as f64);
        format!(
            "cleaned log {tp} (dirty section = [{from}, {to}]): \
             {read:.1} MB of log processed in {secs:.3} seconds ({:.1} MB/sec); \
             indexed {map_read:.1} MB in {index_secs:.3} seconds ({:.1} MB/sec, {:.1}% of total time); \
             buffer utilization: {:.1}%; \
             cleaned {read:.1} MB in {clean_secs:.3} seconds ({:.1} MB/sec, {:.1}% of total time); \
             start size: {read:.1} MB ({} messages); end size: {:.1} MB ({} messages); \
             {:.1}% size reduction ({:.1}% fewer messages)",
            ratio(read, secs),
            ratio(map_read, index_secs),
            100.0 * ratio(index_secs, secs),
            100.0 * self.buffer_utilization,
            ratio(read, clean_secs),
            100.0 * ratio(clean_secs, secs),
            self.messages_read,
            mb(written_bytes),
            self.messages_written,
            100.0 * ratio(read_bytes - written_bytes, read_bytes),
            100.0 * ratio(
                self.messages_read as f64 - self.messages_written as f64,
                self.messages_read as f64
            ),
        )
    }
}

/// The part of a log one round cleans: dirty from `first_dirty_offset` to
/// `first_uncleanable_offset` (exclusive).
#[derive(Clone)]
pub struct CleanRange {
    pub view: CleaningView,
    pub first_dirty_offset: i64,
    pub first_uncleanable_offset: i64,
}

pub struct Cleaner {
    config: CleanerConfig,
    io: IoContext,
}

impl Cleaner {
    pub fn new(config: CleanerConfig, io: IoContext) -> Cleaner {
        Cleaner { config, io }
    }

    /// Kafka's `Cleaner.doClean`: cleans `log` from the view in `range` at time `now`, until
    /// `aborted` is set. Returns the first offset not cleaned (the next first dirty offset)
    /// and the stats.
    pub fn clean(
        &mut self,
        log: &LogRef,
        range: &CleanRange,
        now: i64,
        aborted: Arc<AtomicBool>,
    ) -> Result<(i64, CleanerStats)> {
        self.io.watch(aborted);
        let view = &range.view;
        let mut stats = CleanerStats::default();
        let mut map = SkimpyOffsetMap::new(self.map_slots(range));
        self.build_offset_map(
            view,
            range.first_dirty_offset,
            range.first_uncleanable_offset,
            &mut map,
            &mut stats,
        )?;
        stats.index_done = Some(Instant::now());
        let end_offset = map.latest_offset() + 1;
        let producers = self.last_batches_of_producers(view)?;
        let cleanable: Vec<&SegmentView> = view.segments[..view.segments.len().saturating_sub(1)]
            .iter()
            .filter(|s| s.base_offset < end_offset)
            .collect();
        let groups = group_segments_by_size(
            &cleanable,
            view.config.segment_bytes,
            view.config.segment_index_bytes,
            range.first_uncleanable_offset,
        );
        tracing::info!(partition = %view.tp, first_dirty = range.first_dirty_offset,
            end_offset, groups = groups.len(), "cleaning log");
        let mut generation = view.generation;
        for group in groups {
            let fc = FilterContext {
                map: &map,
                now,
                delete_retention_ms: view.config.delete_retention_ms,
                producers: &producers,
                producer_expiration_ms: self.config.producer_id_expiration_ms,
                group_upper: group.iter().map(|s| s.next_offset).max().unwrap_or(0),
            };
            generation = self.clean_segments(log, view, &group, &fc, generation, &mut stats)?;
        }
        stats.buffer_utilization = map.size() as f64 / self.config.slots_per_thread().max(1) as f64;
        stats.end = Some(Instant::now());
        Ok((end_offset, stats))
    }

    /// Slots for this round: the configured map, or fewer when the dirty section has fewer
    /// offsets than it could hold (the map is allocated per round; its limit is Kafka's).
    fn map_slots(&self, range: &CleanRange) -> usize {
        let load = self.config.dedupe_buffer_load_factor.max(f64::MIN_POSITIVE);
        let dirty = (range.first_uncleanable_offset - range.first_dirty_offset).max(1) as f64;
        let needed = (dirty / load).ceil() as usize + (2.0 / load).ceil() as usize;
        needed.min(self.config.slots_per_thread().max(1))
    }

    /// Kafka's `buildOffsetMap`: key → last offset over the dirty segments in [start, end), until
    /// the map reaches its load factor.
    fn build_offset_map(
        &mut self,
        view: &CleaningView,
        start: i64,
        end: i64,
        map: &mut SkimpyOffsetMap,
        stats: &mut CleanerStats,
    ) -> Result<()> {
        let dirty: Vec<&SegmentView> = view
            .segments
            .iter()
            .filter(|s| s.base_offset < end && s.next_offset > start)
            .collect();
        let max_desired = (map.slots() as f64 * self.config.dedupe_buffer_load_factor) as usize;
        for (i, seg) in dirty.iter().enumerate() {
            let next_start = dirty.get(i + 1).map(|s| s.base_offset).unwrap_or(end);
            if self.build_offset_map_for_segment(seg, map, start, next_start, max_desired, stats)? {
                tracing::debug!(partition = %view.tp, base_offset = seg.base_offset,
                    "offset map is full; this segment is partially mapped");
                break;
            }
        }
        Ok(())
    }

    /// Adds one segment's keys to the map; returns true when the map filled up on the way.
    fn build_offset_map_for_segment(
        &mut self,
        seg: &SegmentView,
        map: &mut SkimpyOffsetMap,
        start: i64,
        next_segment_start: i64,
        max_desired: usize,
        stats: &mut CleanerStats,
    ) -> Result<bool> {
        let mut full = false;
        self.io.for_each_batch(seg, 0, |h, bytes| {
            stats.map_bytes_read += bytes.len() as u64;
            if h.last_offset() < start {
                return Ok(Flow::Continue);
            }
            if h.is_control() {
                stats.map_messages_read += 1;
            } else if !map_batch(h, bytes, map, start, max_desired, stats)? {
                full = true;
                return Ok(Flow::Stop);
            }
            map.update_latest_offset(h.last_offset());
            Ok(Flow::Continue)
        })?;
        if !full {
            // In the case of offset gaps, fast forward to the last offset of this segment.
            map.update_latest_offset(next_segment_start - 1);
        }
        Ok(full)
    }

    /// The last batch of each producer in the log (Kafka keeps it through cleaning so that the
    /// producer's sequence and epoch survive), as Kafka asks its ProducerStateManager: from the
    /// log's producer state when it has one. Otherwise (a log no partition has opened yet) every
    /// batch header of the view is read, in large chunks, counted against the throttle.
    fn last_batches_of_producers(
        &mut self,
        view: &CleaningView,
    ) -> Result<HashMap<i64, LastBatch>> {
        if let Some(known) = view.producers.as_ref().and_then(|f| f()) {
            return Ok(known);
        }
        let mut out: HashMap<i64, LastBatch> = HashMap::new();
        for seg in &view.segments {
            self.io.check_done()?;
            let mut walk = BatchHeaders::new(&seg.file, &seg.path, 0, seg.size, BATCH_HEADER_SIZE);
            for found in walk.by_ref() {
                let (_, h) = found?;
                if h.has_producer_id() {
                    let last = LastBatch {
                        last_offset: h.last_offset(),
                        timestamp: h.max_timestamp,
                    };
                    out.insert(h.producer_id, last);
                }
            }
            self.io.throttle(walk.bytes_read())?;
        }
        Ok(out)
    }

    /// Kafka's `cleanSegments`: cleans a group into one `.cleaned` segment and swaps it in.
    /// Returns the log's generation after the swap; a log that changed meanwhile aborts the round.
    fn clean_segments(
        &mut self,
        log: &LogRef,
        view: &CleaningView,
        group: &[&SegmentView],
        fc: &FilterContext<'_>,
        generation: u64,
        stats: &mut CleanerStats,
    ) -> Result<u64> {
        let base = group[0].base_offset;
        let result = self.write_and_swap(log, view, group, fc, generation, stats);
        if !matches!(result, Ok(Some(_))) {
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let p = view.dir.join(file_name(base, suffix) + CLEANED_SUFFIX);
                if let Err(e) = std::fs::remove_file(&p) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(file = %p.display(), error = %e, "cannot remove a cleaned file");
                    }
                }
            }
        }
        match result? {
            Some(g) => Ok(g),
            None => Err(StorageError::CleaningAborted),
        }
    }

    /// Writes the group's cleaned segment and asks the log to swap it in: `Some(generation)`
    /// after the swap (or when nothing was left to swap), `None` when the log refused.
    fn write_and_swap(
        &mut self,
        log: &LogRef,
        view: &CleaningView,
        group: &[&SegmentView],
        fc: &FilterContext<'_>,
        generation: u64,
        stats: &mut CleanerStats,
    ) -> Result<Option<u64>> {
        let seg_cfg = SegmentConfig {
            index_interval_bytes: view.config.index_interval_bytes,
            max_index_size: view.config.segment_index_bytes,
            preallocate_bytes: None,
        };
        let base = group[0].base_offset;
        let mut cleaned = LogSegment::create_with_suffix(&view.dir, base, seg_cfg, CLEANED_SUFFIX)?;
        for seg in group {
            self.clean_into(seg, &mut cleaned, fc, stats)?;
        }
        if cleaned.size() == 0 {
            // Only empty segments: nothing to swap (a cleaned segment always keeps the group's
            // last batch otherwise).
            return Ok(Some(generation));
        }
        cleaned.on_become_inactive()?;
        cleaned.flush()?;
        if let Some(t) = group.last().and_then(|s| s.last_modified) {
            cleaned.set_last_modified(t)?;
        }
        let old: Vec<i64> = group.iter().map(|s| s.base_offset).collect();
        self.io.check_done()?;
        let mut l = log.lock();
        if l.replace_segments(cleaned, &old, generation)? {
            tracing::info!(partition = %view.tp, base_offset = base, replaced = old.len(),
                "swapped in a cleaned segment");
            Ok(Some(l.cleaning_generation()))
        } else {
            tracing::info!(partition = %view.tp, "the log changed while it was cleaned; cleaning again later");
            Ok(None)
        }
    }

    /// Kafka's `cleanInto`: copies what `fc` retains of `seg` into `dest`.
    fn clean_into(
        &mut self,
        seg: &SegmentView,
        dest: &mut LogSegment,
        fc: &FilterContext<'_>,
        stats: &mut CleanerStats,
    ) -> Result<()> {
        let mut out: Vec<u8> = Vec::new();
        let chunk = self.config.io_buffer_size.max(1);
        let mut pending_err = None;
        let io = &mut self.io;
        let mut written = 0u64;
        io.for_each_batch(seg, 0, |h, bytes| {
            stats.bytes_read += bytes.len() as u64;
            if let Some(kept) = filter::filter_batch(h, bytes, fc, stats)? {
                out.extend_from_slice(&kept);
            }
            if out.len() >= chunk {
                if let Err(e) = dest.append(&out) {
                    pending_err = Some(e);
                    return Ok(Flow::Stop);
                }
                written += out.len() as u64;
                out.clear();
            }
            Ok(Flow::Continue)
        })?;
        if let Some(e) = pending_err {
            return Err(e);
        }
        dest.append(&out)?;
        written += out.len() as u64;
        stats.bytes_written += written;
        self.io.throttle(written)
    }
}

/// Puts the keyed records of one batch at or after `start` into the map. False when full.
fn map_batch(
    h: &BatchHeader,
    bytes: &[u8],
    map: &mut SkimpyOffsetMap,
    start: i64,
    max_desired: usize,
    stats: &mut CleanerStats,
) -> Result<bool> {
    let section = batch::records_section(bytes)?;
    for r in batch::raw_records(&section, h.records_count) {
        let r = r?;
        let offset = h.base_offset + r.offset_delta as i64;
        if let (Some(key), true) = (r.key, offset >= start) {
            if map.size() >= max_desired {
                return Ok(false);
            }
            map.put(key, offset);
        }
        stats.map_messages_read += 1;
    }
    Ok(true)
}

/// Kafka's `groupSegmentsBySize`: consecutive segments whose total log size fits `max_size`,
/// whose index sizes each fit `max_index_size`, and whose offsets stay within an int32 of the
/// group's base offset, so that each group can become one segment.
pub fn group_segments_by_size<'a>(
    segments: &[&'a SegmentView],
    max_size: u64,
    max_index_size: u64,
    first_uncleanable_offset: i64,
) -> Vec<Vec<&'a SegmentView>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < segments.len() {
        let first = segments[i];
        let mut group = vec![first];
        let (mut log_size, mut index_size, mut time_size) =
            (first.size, first.offset_index_bytes, first.time_index_bytes);
        i += 1;
        while i < segments.len() {
            let s = segments[i];
            // The last offset the candidate may hold: the next segment's base, or the first
            // uncleanable offset for the last one (Kafka's `lastOffsetForFirstSegment`).
            let last_offset = segments
                .get(i + 1)
                .map(|n| n.base_offset - 1)
                .unwrap_or(first_uncleanable_offset - 1);
            let fits = log_size + s.size <= max_size
                && index_size + s.offset_index_bytes <= max_index_size
                && time_size + s.time_index_bytes <= max_index_size
                && (s.size == 0 || last_offset - first.base_offset <= i32::MAX as i64);
            if !fits {
                break;
            }
            group.push(s);
            log_size += s.size;
            index_size += s.offset_index_bytes;
            time_size += s.time_index_bytes;
            i += 1;
        }
        groups.push(group);
    }
    groups
}
