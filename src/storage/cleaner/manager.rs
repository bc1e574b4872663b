//! Kafka's `LogCleanerManager`: which compacted log to clean next (the dirtiest), where each
//! log's dirty section starts (`cleaner-offset-checkpoint`), and which logs are uncleanable.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clean::CleanRange;
use crate::storage::checkpoint::{OffsetCheckpointFile, TopicPartition, CLEANER_OFFSET_CHECKPOINT};
use crate::storage::error::Result;
use crate::storage::log::CleaningView;
use crate::storage::LogRef;

/// KRaft's metadata log is never cleaned by the log cleaner (Kafka keeps it out of the
/// LogManager; its snapshots compact it).
const METADATA_TOPIC: &str = "__cluster_metadata";

/// How long `forget` waits for a cleaning of the partition to stop.
const ABORT_WAIT: Duration = Duration::from_secs(60);

/// A log chosen for cleaning (Kafka's `LogToClean`).
pub struct LogToClean {
    pub tp: TopicPartition,
    pub log: LogRef,
    pub range: CleanRange,
    pub cleanable_bytes: u64,
    pub total_bytes: u64,
    pub cleanable_ratio: f64,
    /// Set when the partition is deleted meanwhile: the cleaning stops at its next check.
    pub aborted: Arc<AtomicBool>,
}

/// The state behind the manager's lock.
#[derive(Default)]
struct State {
    checkpoints: BTreeMap<TopicPartition, i64>,
    /// The partitions being cleaned, each with its abort flag (Kafka's `LogCleaningAborted`).
    in_progress: BTreeMap<TopicPartition, Arc<AtomicBool>>,
    /// Bumped by every `forget`: a grab that began before one takes nothing (its logs may
    /// include the one deleted).
    forgets: u64,
    /// Partitions whose cleaning failed, with the cleanable bytes they had (Kafka's
    /// `uncleanablePartitions`); they are skipped until the broker restarts or they are deleted.
    uncleanable: BTreeMap<TopicPartition, u64>,
    dirtiest_ratio: f64,
    time_of_last_run: i64,
    max_compaction_delay_ms: i64,
}

pub struct LogCleanerManager {
    checkpoint: OffsetCheckpointFile,
    state: parking_lot::Mutex<State>,
    /// Signalled whenever a cleaning ends, for `forget`.
    cleaning_ended: parking_lot::Condvar,
}

impl LogCleanerManager {
    /// Reads `cleaner-offset-checkpoint` from the root of `log_dir`.
    pub fn open(log_dir: &Path) -> Result<LogCleanerManager> {
        let checkpoint = OffsetCheckpointFile::new(log_dir.join(CLEANER_OFFSET_CHECKPOINT));
        let checkpoints = checkpoint.read()?;
        Ok(LogCleanerManager {
            checkpoint,
            state: parking_lot::Mutex::new(State {
                checkpoints,
                time_of_last_run: crate::storage::log::now_ms(),
                ..State::default()
            }),
            cleaning_ended: parking_lot::Condvar::new(),
        })
    }

    /// Kafka's `grabFilthiestCompactedLog`: the compacted log with the highest cleanable ratio
    /// above its `min.cleanable.dirty.ratio` (or past `max.compaction.lag.ms`), marked in progress.
    pub fn grab_filthiest_compacted_log(
        &self,
        logs: &[(TopicPartition, LogRef)],
        now: i64,
    ) -> Result<Option<LogToClean>> {
        let forgets = self.state.lock().forgets;
        // Views first, without the manager's lock: a log's lock is never taken under it.
        let mut views = Vec::new();
        for (tp, log) in logs {
            if tp.topic == METADATA_TOPIC {
                continue;
            }
            let mut l = log.lock();
            let truncated = l.take_cleaner_truncation();
            if l.config().compact() && !l.is_deleted() {
                views.push((tp.clone(), log.clone(), l.cleaning_view(), truncated));
            }
        }
        let mut st = self.state.lock();
        st.time_of_last_run = now;
        let (mut candidates, mut update, mut max_delay) = (Vec::new(), false, 0i64);
        for (tp, log, view, truncated) in views {
            if let Some(t) = truncated {
                if st.checkpoints.get(&tp).is_some_and(|c| *c > t) {
                    st.checkpoints.insert(tp.clone(), t);
                    update = true;
                }
            }
            if st.in_progress.contains_key(&tp) || st.uncleanable.contains_key(&tp) {
                continue;
            }
            let (first_dirty, uncleanable, force) =
                cleanable_offsets(&view, st.checkpoints.get(&tp).copied(), now);
            if force {
                st.checkpoints.insert(tp.clone(), first_dirty);
                update = true;
            }
            let delay = max_compaction_delay(&view, first_dirty, now);
            max_delay = max_delay.max(delay);
            let ltc = log_to_clean(tp, log, view, first_dirty, uncleanable);
            if ltc.total_bytes > 0 {
                candidates.push((ltc, delay > 0));
            }
        }
        st.max_compaction_delay_ms = max_delay;
        st.dirtiest_ratio = candidates
            .iter()
            .map(|(c, _)| c.cleanable_ratio)
            .fold(0.0, f64::max);
        if update {
            self.write_checkpoint(&st)?;
        }
        if st.forgets != forgets {
            // A partition was deleted since the views were taken; look again next round.
            return Ok(None);
        }
        let filthiest = candidates
            .into_iter()
            .filter(|(c, now_needed)| {
                (*now_needed && c.cleanable_bytes > 0)
                    || c.cleanable_ratio > c.range.view.config.min_cleanable_dirty_ratio.0
            })
            .map(|(c, _)| c)
            .max_by(|a, b| a.cleanable_ratio.total_cmp(&b.cleanable_ratio));
        if let Some(c) = &filthiest {
            st.in_progress.insert(c.tp.clone(), c.aborted.clone());
        }
        Ok(filthiest)
    }

    /// Ends the cleaning of `tp`; true when it was aborted (the partition is gone meanwhile).
    fn end_cleaning(&self, st: &mut State, tp: &TopicPartition) -> bool {
        let aborted = st
            .in_progress
            .remove(tp)
            .is_some_and(|a| a.load(Ordering::SeqCst));
        self.cleaning_ended.notify_all();
        aborted
    }

    /// Kafka's `doneCleaning`: the dirty section now starts at `end_offset`.
    pub fn done_cleaning(&self, tp: &TopicPartition, end_offset: i64) -> Result<()> {
        let mut st = self.state.lock();
        if self.end_cleaning(&mut st, tp) {
            return Ok(());
        }
        st.checkpoints.insert(tp.clone(), end_offset);
        self.write_checkpoint(&st)
    }

    /// A cleaning that stopped early: the log is cleaned again later from its old checkpoint.
    pub fn aborted(&self, tp: &TopicPartition) {
        let mut st = self.state.lock();
        self.end_cleaning(&mut st, tp);
    }

    /// A cleaning that failed: the log is left as it was and skipped from now on (unless the
    /// failure came of the partition's deletion).
    pub fn mark_uncleanable(&self, tp: &TopicPartition, cleanable_bytes: u64) {
        let mut st = self.state.lock();
        if !self.end_cleaning(&mut st, tp) {
            st.uncleanable.insert(tp.clone(), cleanable_bytes);
        }
    }

    /// A deleted partition (Kafka's `abortCleaning` and checkpoint update): a cleaning of it in
    /// progress is aborted and waited for, then its checkpoint entry and uncleanable mark go,
    /// so that a partition created again under its name starts afresh.
    pub fn forget(&self, tp: &TopicPartition) -> Result<()> {
        let mut st = self.state.lock();
        st.forgets += 1;
        if let Some(flag) = st.in_progress.get(tp) {
            flag.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + ABORT_WAIT;
        while st.in_progress.contains_key(tp) {
            if self
                .cleaning_ended
                .wait_until(&mut st, deadline)
                .timed_out()
            {
                tracing::warn!(partition = %tp, "a cleaning of a deleted partition did not stop in time");
                break;
            }
        }
        st.uncleanable.remove(tp);
        if st.checkpoints.remove(tp).is_some() {
            self.write_checkpoint(&st)?;
        }
        Ok(())
    }

    /// Whether `tp` is being cleaned now.
    #[cfg(test)]
    pub fn is_cleaning(&self, tp: &TopicPartition) -> bool {
        self.state.lock().in_progress.contains_key(tp)
    }

    /// The first dirty offset recorded for `tp`, if any.
    pub fn checkpointed(&self, tp: &TopicPartition) -> Option<i64> {
        self.state.lock().checkpoints.get(tp).copied()
    }

    fn write_checkpoint(&self, st: &State) -> Result<()> {
        self.checkpoint.write(&st.checkpoints)
    }

    /// (max-dirty-percent, time-since-last-run-ms, uncleanable count and bytes, max delay ms).
    pub fn gauges(&self, now: i64) -> (f64, i64, usize, u64, i64) {
        let st = self.state.lock();
        (
            100.0 * st.dirtiest_ratio,
            now - st.time_of_last_run,
            st.uncleanable.len(),
            st.uncleanable.values().sum(),
            st.max_compaction_delay_ms,
        )
    }
}

fn log_to_clean(
    tp: TopicPartition,
    log: LogRef,
    view: CleaningView,
    first_dirty: i64,
    uncleanable: i64,
) -> LogToClean {
    let clean_bytes: u64 = view
        .segments
        .iter()
        .filter(|s| s.base_offset < first_dirty)
        .map(|s| s.size)
        .sum();
    let (first_uncleanable, cleanable_bytes) =
        calculate_cleanable_bytes(&view, first_dirty, uncleanable);
    let total_bytes = clean_bytes + cleanable_bytes;
    LogToClean {
        tp,
        log,
        aborted: Arc::new(AtomicBool::new(false)),
        range: CleanRange {
            view,
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
        },
        cleanable_bytes,
        total_bytes,
        cleanable_ratio: if total_bytes == 0 {
            0.0
        } else {
            cleanable_bytes as f64 / total_bytes as f64
        },
    }
}

/// Kafka's `logSegments(from, to)`: from the segment holding `from` to those based below `to`.
fn overlapping(
    view: &CleaningView,
    from: i64,
    to: i64,
) -> impl Iterator<Item = &crate::storage::log::SegmentView> {
    let floor = view
        .segments
        .iter()
        .rev()
        .find(|s| s.base_offset <= from)
        .map_or(from, |s| s.base_offset);
    view.segments
        .iter()
        .filter(move |s| s.base_offset >= floor && s.base_offset < to)
}

/// Kafka's `cleanableOffsets`: (first dirty offset, first uncleanable dirty offset, whether the
/// checkpoint was invalid and must be rewritten). Nothing past the last stable offset, the
/// active segment, or a segment younger than `min.compaction.lag.ms` is cleaned.
pub fn cleanable_offsets(
    view: &CleaningView,
    checkpoint: Option<i64>,
    now: i64,
) -> (i64, i64, bool) {
    let start = view.log_start_offset;
    let dirty = checkpoint.unwrap_or(start);
    let (first_dirty, force) = if dirty < start || dirty > view.log_end_offset {
        if dirty > view.log_end_offset || !view.config.delete() {
            tracing::warn!(partition = %view.tp, checkpoint = dirty, log_start = start,
                "resetting the first dirty offset to the log start offset: the checkpoint is invalid");
        }
        (start, true)
    } else {
        (dirty, false)
    };
    let lag = view.config.min_compaction_lag_ms.max(0);
    let mut uncleanable = view.last_stable_offset.min(view.active_base());
    if lag > 0 {
        let active = view.active_base();
        let young = overlapping(view, first_dirty, active)
            .find(|s| s.largest_timestamp > now - lag)
            .map(|s| s.base_offset);
        if let Some(b) = young {
            uncleanable = uncleanable.min(b);
        }
    }
    (first_dirty, first_dirty.max(uncleanable), force)
}

/// Kafka's `calculateCleanableBytes`: the base of the first uncleanable segment (the one holding
/// `uncleanable`, or the active one) and the bytes of the segments from the dirty one up to it.
pub fn calculate_cleanable_bytes(
    view: &CleaningView,
    first_dirty: i64,
    uncleanable: i64,
) -> (i64, u64) {
    let active = view.active_base();
    let first_uncleanable = if uncleanable >= active {
        active
    } else {
        overlapping(view, uncleanable, active)
            .next()
            .map_or(active, |s| s.base_offset)
    };
    let bytes = overlapping(view, first_dirty.min(first_uncleanable), first_uncleanable)
        .map(|s| s.size)
        .sum();
    (first_uncleanable, bytes)
}

/// Kafka's `maxCompactionDelay`: how far past `max.compaction.lag.ms` the oldest dirty closed
/// segment's first batch is (0 when none is).
fn max_compaction_delay(view: &CleaningView, first_dirty: i64, now: i64) -> i64 {
    let active = view.active_base();
    let earliest = overlapping(view, first_dirty, active)
        .filter_map(|s| s.first_batch_timestamp)
        .filter(|t| *t > 0)
        .min()
        .unwrap_or(i64::MAX);
    let clean_until = now.saturating_sub(view.config.max_compaction_lag_ms.max(0));
    if earliest < clean_until {
        clean_until - earliest
    } else {
        0
    }
}
