//! Kafka's LogCleaner: compaction of `cleanup.policy=compact` logs by background threads that
//! keep each key's latest record. Owns the cleaner threads, their stats and the door to them.

mod clean;
mod filter;
mod manager;
mod offset_map;
mod reader;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::cleaner::CleanerConfig;
use crate::storage::checkpoint::TopicPartition;
use crate::storage::error::{Result, StorageError};
use crate::storage::log::now_ms;
use crate::storage::LogRef;

use clean::{Cleaner, CleanerStats};
use manager::LogCleanerManager;
use reader::IoContext;

/// The logs of the directory, when the LogManager is still there.
pub type LogSource = Arc<dyn Fn() -> Option<Vec<(TopicPartition, LogRef)>> + Send + Sync>;

/// Kafka's LogCleaner and LogCleanerManager gauges (`kafka.log:type=LogCleaner,…`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerMetrics {
    /// LogCleanerManager `max-dirty-percent`: the highest cleanable ratio at the last look.
    pub max_dirty_percent: i64,
    /// LogCleanerManager `time-since-last-run-ms`.
    pub time_since_last_run_ms: i64,
    /// LogCleanerManager `uncleanable-partitions-count` and `uncleanable-bytes`.
    pub uncleanable_partitions_count: usize,
    pub uncleanable_bytes: u64,
    /// LogCleaner `max-buffer-utilization-percent`, over the threads' last rounds.
    pub max_buffer_utilization_percent: i64,
    /// LogCleaner `cleaner-recopy-percent`: bytes written over bytes read, mean of the threads.
    pub cleaner_recopy_percent: i64,
    /// LogCleaner `max-clean-time-secs`.
    pub max_clean_time_secs: i64,
    /// LogCleaner `max-compaction-delay-secs`.
    pub max_compaction_delay_secs: i64,
    /// LogCleaner `DeadThreadCount`.
    pub dead_thread_count: usize,
}

pub struct LogCleaner {
    config: CleanerConfig,
    manager: LogCleanerManager,
    running: Arc<AtomicBool>,
    /// Wakes threads out of their backoff at shutdown.
    wake: (Mutex<()>, Condvar),
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The last round's stats of each thread.
    last_stats: Mutex<Vec<Option<CleanerStats>>>,
}

impl LogCleaner {
    /// A cleaner for the logs under `log_dir`, with its `cleaner-offset-checkpoint` read.
    pub fn new(config: CleanerConfig, log_dir: &Path) -> Result<Arc<LogCleaner>> {
        let threads = config.num_threads;
        Ok(Arc::new(LogCleaner {
            manager: LogCleanerManager::open(log_dir)?,
            config,
            running: Arc::new(AtomicBool::new(true)),
            wake: (Mutex::new(()), Condvar::new()),
            threads: Mutex::new(Vec::new()),
            last_stats: Mutex::new(vec![None; threads]),
        }))
    }

    /// Starts `log.cleaner.threads` threads over the logs `logs` returns.
    pub fn start(self: &Arc<Self>, logs: LogSource) {
        for id in 0..self.config.num_threads {
            let me = self.clone();
            let logs = logs.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("kafka-log-cleaner-thread-{id}"))
                .spawn(move || me.run(id, logs));
            match spawned {
                Ok(h) => {
                    if let Ok(mut t) = self.threads.lock() {
                        t.push(h);
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot start a log cleaner thread"),
            }
        }
    }

    fn new_cleaner(&self) -> Cleaner {
        let io = IoContext::new(
            self.config.io_buffer_size,
            self.config.max_io_bytes_per_second,
            self.running.clone(),
        );
        Cleaner::new(self.config.clone(), io)
    }

    /// Kafka's `CleanerThread.doWork`: clean the filthiest log, or back off.
    fn run(&self, id: usize, logs: LogSource) {
        let mut cleaner = self.new_cleaner();
        while self.running.load(Ordering::SeqCst) {
            let Some(all) = logs() else { return };
            let cleaned = self.clean_filthiest_log(&mut cleaner, id, &all, now_ms());
            drop(all);
            if !cleaned {
                self.backoff();
            }
        }
    }

    fn backoff(&self) {
        let (m, cv) = &self.wake;
        let Ok(g) = m.lock() else { return };
        if self.running.load(Ordering::SeqCst) {
            let _ = cv.wait_timeout(g, Duration::from_millis(self.config.backoff_ms));
        }
    }

    /// One round: grabs the filthiest compacted log and cleans it. Returns whether it cleaned.
    fn clean_filthiest_log(
        &self,
        cleaner: &mut Cleaner,
        id: usize,
        logs: &[(TopicPartition, LogRef)],
        now: i64,
    ) -> bool {
        let grabbed = match self.manager.grab_filthiest_compacted_log(logs, now) {
            Ok(Some(l)) => l,
            Ok(None) => return false,
            Err(e) => {
                tracing::error!(error = %e, "cannot choose a log to clean");
                return false;
            }
        };
        let tp = grabbed.tp.clone();
        match cleaner.clean(&grabbed.log, &grabbed.range, now, grabbed.aborted.clone()) {
            Ok((end_offset, stats)) => {
                self.log_stats(
                    id,
                    &tp,
                    grabbed.range.first_dirty_offset,
                    end_offset,
                    &stats,
                );
                if let Err(e) = self.manager.done_cleaning(&tp, end_offset) {
                    tracing::error!(partition = %tp, error = %e, "cannot write the cleaner checkpoint");
                }
                if let Ok(mut s) = self.last_stats.lock() {
                    if let Some(slot) = s.get_mut(id) {
                        *slot = Some(stats);
                    }
                }
                true
            }
            Err(StorageError::CleaningAborted) => {
                self.manager.aborted(&tp);
                false
            }
            Err(e) => {
                tracing::error!(partition = %tp, error = %e,
                    "unexpected error while cleaning; the partition is marked uncleanable and left as it was");
                self.manager.mark_uncleanable(&tp, grabbed.cleanable_bytes);
                false
            }
        }
    }

    /// Kafka's `recordStats`: one info line per round with the figures of its report, and
    /// the raw counts as fields.
    fn log_stats(&self, id: usize, tp: &TopicPartition, from: i64, to: i64, s: &CleanerStats) {
        tracing::info!(thread = id, partition = %tp,
            bytes_read = s.bytes_read, bytes_written = s.bytes_written,
            map_bytes_read = s.map_bytes_read,
            messages_read = s.messages_read, messages_written = s.messages_written,
            map_messages = s.map_messages_read, secs = s.elapsed_secs(),
            index_secs = s.elapsed_index_secs(),
            "log cleaner round done: {}", s.report(tp, from, to));
    }

    /// Cleans the filthiest compacted log of `logs` once, in this thread (tests, tools).
    pub fn clean_once(&self, logs: &[(TopicPartition, LogRef)], now: i64) -> bool {
        let mut cleaner = self.new_cleaner();
        self.clean_filthiest_log(&mut cleaner, 0, logs, now)
    }

    /// A partition was deleted: a cleaning of it is aborted and waited for, then the cleaner
    /// forgets it. Call with no lock of the log held.
    pub fn forget(&self, tp: &TopicPartition) {
        if let Err(e) = self.manager.forget(tp) {
            tracing::warn!(partition = %tp, error = %e, "cannot update the cleaner checkpoint");
        }
    }

    /// The first dirty offset checkpointed for `tp`.
    pub fn checkpointed(&self, tp: &TopicPartition) -> Option<i64> {
        self.manager.checkpointed(tp)
    }

    /// Asks the threads to stop, without waiting for them.
    pub fn stop(&self) {
        self.running.store(false, Ordering::SeqCst);
        let _g = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    /// Stops the threads and waits for them; a cleaning in progress is abandoned, its
    /// `.cleaned` files removed.
    pub fn shutdown(&self) {
        self.stop();
        let handles = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for h in handles {
            let _ = h.join();
        }
    }

    /// Kafka's cleaner gauges, now.
    pub fn metrics(&self) -> CleanerMetrics {
        let (dirty, since, uncleanable, unclean_bytes, delay_ms) = self.manager.gauges(now_ms());
        let stats: Vec<CleanerStats> = self
            .last_stats
            .lock()
            .map(|s| s.iter().flatten().cloned().collect())
            .unwrap_or_default();
        let threads = self.config.num_threads.max(1) as f64;
        let recopy: f64 = stats
            .iter()
            .map(|s| s.bytes_written as f64 / s.bytes_read.max(1) as f64)
            .sum::<f64>()
            / threads;
        let dead = self
            .threads
            .lock()
            .map(|t| t.iter().filter(|h| h.is_finished()).count())
            .unwrap_or(0);
        CleanerMetrics {
            max_dirty_percent: dirty as i64,
            time_since_last_run_ms: since,
            uncleanable_partitions_count: uncleanable,
            uncleanable_bytes: unclean_bytes,
            max_buffer_utilization_percent: (stats
                .iter()
                .map(|s| s.buffer_utilization)
                .fold(0.0, f64::max)
                * 100.0) as i64,
            cleaner_recopy_percent: (100.0 * recopy) as i64,
            max_clean_time_secs: stats.iter().map(|s| s.elapsed_secs()).fold(0.0, f64::max) as i64,
            max_compaction_delay_secs: delay_ms / 1000,
            dead_thread_count: if self.running.load(Ordering::SeqCst) {
                dead
            } else {
                0
            },
        }
    }
}
