//! LogManager: every partition log under one `log.dirs` directory. Owns the directory lock,
//! the root checkpoints, the clean-shutdown marker, and the background flush/retention/delete work.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::checkpoint::{
    sync_dir, write_atomic, KafkaUuid, OffsetCheckpointFile, TopicPartition, CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
};
use super::cleaner::{CleanerMetrics, LogCleaner};
use super::error::{Result, StorageError};
use super::log::{now_ms, LoadParams, Log};
use crate::config::cleaner::CleanerConfig;
use crate::config::LogConfig;

/// Shared handle to one partition's log. parking_lot's mutex, not std's: std's never hands the
/// lock to a waiter, so a stream of appends to a hot partition could starve a flush or a read for
/// as long as it lasts; parking_lot hands it over once a waiter has waited half a millisecond.
pub type LogRef = Arc<parking_lot::Mutex<Log>>;

/// Broker-level storage settings (Kafka names in the comments).
#[derive(Debug, Clone)]
pub struct LogManagerConfig {
    /// `log.dirs` (one directory for now).
    pub log_dir: PathBuf,
    /// Topic defaults from the broker's `log.*` keys.
    pub default_config: LogConfig,
    /// Per-topic overrides known at start (from the metadata log).
    pub topic_configs: BTreeMap<String, LogConfig>,
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: i64,
    /// `log.flush.offset.checkpoint.interval.ms`
    pub recovery_checkpoint_interval_ms: i64,
    /// `log.flush.start.offset.checkpoint.interval.ms`
    pub start_offset_checkpoint_interval_ms: i64,
    /// How often `replication-offset-checkpoint` (the high watermarks) is written
    /// (`replica.high.watermark.checkpoint.interval.ms`).
    pub high_watermark_checkpoint_interval_ms: i64,
    /// How often the background thread looks for due work.
    pub tick_ms: u64,
    /// The log cleaner (`log.cleaner.*`).
    pub cleaner: CleanerConfig,
    /// How long `open` waits for another process to release the directory's lock (none by
    /// default: the broker sets `evenkeel.log.dir.lock.wait.ms`).
    pub lock_wait: std::time::Duration,
}

impl LogManagerConfig {
    pub fn new(log_dir: impl Into<PathBuf>, default_config: LogConfig) -> Self {
        LogManagerConfig {
            log_dir: log_dir.into(),
            default_config,
            topic_configs: BTreeMap::new(),
            retention_check_interval_ms: 300_000,
            recovery_checkpoint_interval_ms: 60_000,
            start_offset_checkpoint_interval_ms: 60_000,
            high_watermark_checkpoint_interval_ms: 5000,
            tick_ms: 200,
            cleaner: CleanerConfig::default(),
            lock_wait: std::time::Duration::ZERO,
        }
    }
}

pub struct LogManager {
    config: LogManagerConfig,
    logs: RwLock<BTreeMap<TopicPartition, LogRef>>,
    had_clean_shutdown: bool,
    /// Partition directories renamed `-delete`, removed once due.
    doomed_dirs: Mutex<Vec<(i64, PathBuf)>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    background: Mutex<Option<JoinHandle<()>>>,
    /// Compacts `cleanup.policy=compact` logs (none with `log.cleaner.enable=false`).
    cleaner: Option<Arc<LogCleaner>>,
    closed: AtomicBool,
    _lock: File,
}

fn is_partition_dir_name(name: &str) -> bool {
    !(name.ends_with("-delete") || name.ends_with("-future") || name.ends_with("-stray"))
}

/// Takes the directory's `.lock`, waiting up to `wait` for another process to let it go: on
/// Kubernetes a force-deleted pod's replacement can start while the old container still runs.
fn lock_dir(dir: &Path, wait: std::time::Duration) -> Result<File> {
    let lock_path = dir.join(".lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(StorageError::io(&lock_path))?;
    let deadline = std::time::Instant::now() + wait;
    let mut said = false;
    while lock.try_lock().is_err() {
        if std::time::Instant::now() >= deadline {
            return Err(StorageError::DirectoryLocked(dir.to_path_buf()));
        }
        if !std::mem::replace(&mut said, true) {
            tracing::warn!(dir = %dir.display(), wait_ms = wait.as_millis() as u64,
                "another process holds the log directory's lock; waiting for it");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(lock)
}

impl LogManager {
    /// Locks the directory, loads every partition log (recovering after an unclean shutdown)
    /// and removes the clean-shutdown marker so that a crash from now on is detected.
    pub fn open(config: LogManagerConfig) -> Result<Arc<LogManager>> {
        let dir = config.log_dir.clone();
        std::fs::create_dir_all(&dir).map_err(StorageError::io(&dir))?;
        let lock = lock_dir(&dir, config.lock_wait)?;
        let marker = dir.join(CLEAN_SHUTDOWN_MARKER);
        let had_clean_shutdown = marker.exists();
        let recovery = OffsetCheckpointFile::new(dir.join(RECOVERY_POINT_CHECKPOINT)).read()?;
        let starts = OffsetCheckpointFile::new(dir.join(LOG_START_OFFSET_CHECKPOINT)).read()?;
        let hws = OffsetCheckpointFile::new(dir.join(REPLICATION_OFFSET_CHECKPOINT)).read()?;

        let mut logs = BTreeMap::new();
        let mut doomed = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(StorageError::io(&dir))?;
        for entry in entries {
            let entry = entry.map_err(StorageError::io(&dir))?;
            if !entry.path().is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with("-delete") {
                doomed.push((0, entry.path()));
                continue;
            }
            if !is_partition_dir_name(&name) {
                continue;
            }
            let Some(tp) = TopicPartition::from_dir_name(&name) else {
                tracing::warn!(dir = %entry.path().display(), "skipping a directory that is not a partition");
                continue;
            };
            let params = LoadParams {
                recovery_point: recovery.get(&tp).copied().unwrap_or(0),
                log_start_offset: starts.get(&tp).copied().unwrap_or(0),
                high_watermark: hws.get(&tp).copied(),
                had_clean_shutdown,
            };
            let cfg = config
                .topic_configs
                .get(&tp.topic)
                .cloned()
                .unwrap_or_else(|| config.default_config.clone());
            let log = Log::open(&entry.path(), tp.clone(), cfg, params)?;
            logs.insert(tp, Arc::new(parking_lot::Mutex::new(log)));
        }
        if had_clean_shutdown {
            std::fs::remove_file(&marker).map_err(StorageError::io(&marker))?;
            sync_dir(&dir)?;
        }
        tracing::info!(dir = %dir.display(), logs = logs.len(), clean = had_clean_shutdown, "loaded logs");
        let cleaner = if config.cleaner.enable && config.cleaner.num_threads > 0 {
            Some(LogCleaner::new(config.cleaner.clone(), &dir)?)
        } else {
            None
        };
        let mgr = Arc::new(LogManager {
            config,
            logs: RwLock::new(logs),
            had_clean_shutdown,
            doomed_dirs: Mutex::new(doomed),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            background: Mutex::new(None),
            cleaner,
            closed: AtomicBool::new(false),
            _lock: lock,
        });
        // Write the checkpoints at once so that they describe the logs as loaded.
        mgr.checkpoint_all()?;
        Ok(mgr)
    }

    pub fn log_dir(&self) -> &Path {
        &self.config.log_dir
    }
    pub fn had_clean_shutdown(&self) -> bool {
        self.had_clean_shutdown
    }
    pub fn default_config(&self) -> &LogConfig {
        &self.config.default_config
    }

    /// The log cleaner, when `log.cleaner.enable` is on.
    pub fn cleaner(&self) -> Option<&Arc<LogCleaner>> {
        self.cleaner.as_ref()
    }

    /// Kafka's LogCleaner gauges (zeros without a cleaner).
    pub fn cleaner_metrics(&self) -> CleanerMetrics {
        self.cleaner
            .as_ref()
            .map(|c| c.metrics())
            .unwrap_or_default()
    }

    pub fn get_log(&self, tp: &TopicPartition) -> Option<LogRef> {
        self.logs.read().ok()?.get(tp).cloned()
    }

    pub fn all_logs(&self) -> Vec<(TopicPartition, LogRef)> {
        self.logs
            .read()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// The log for `tp`, created empty (with `partition.metadata`) when it does not exist yet.
    pub fn get_or_create_log(
        &self,
        tp: &TopicPartition,
        topic_id: Option<KafkaUuid>,
        config: Option<LogConfig>,
    ) -> Result<LogRef> {
        if let Some(l) = self.get_log(tp) {
            return Ok(l);
        }
        let mut logs = self
            .logs
            .write()
            .map_err(|_| poisoned(&self.config.log_dir))?;
        if let Some(l) = logs.get(tp) {
            return Ok(l.clone());
        }
        let dir = self.config.log_dir.join(tp.dir_name());
        let cfg = config.unwrap_or_else(|| self.config.default_config.clone());
        let mut log = Log::open(&dir, tp.clone(), cfg, LoadParams::default())?;
        if let Some(id) = topic_id {
            log.set_topic_id(id)?;
        }
        sync_dir(&self.config.log_dir)?;
        let log = Arc::new(parking_lot::Mutex::new(log));
        logs.insert(tp.clone(), log.clone());
        Ok(log)
    }

    /// Removes a partition: a cleaning of it is aborted and waited for, then its directory is
    /// renamed `<topic>-<partition>.<id>-delete` and removed after `file.delete.delay.ms`
    /// (Kafka's `asyncDelete`: `abortCleaning` before `renameDir`, so that no cleaning works
    /// in a directory that has moved).
    pub fn delete_log(&self, tp: &TopicPartition) -> Result<bool> {
        let removed = self
            .logs
            .write()
            .map_err(|_| poisoned(&self.config.log_dir))?
            .remove(tp);
        let Some(log) = removed else {
            return Ok(false);
        };
        log.lock().mark_deleted();
        if let Some(c) = &self.cleaner {
            // With no lock of the log held: the cleaning may be waiting for it to swap.
            c.forget(tp);
        }
        let mut log = log.lock();
        let from = log.dir().to_path_buf();
        let delay = log.config().file_delete_delay_ms;
        log.delete_due_files(i64::MAX)?;
        let to = self.config.log_dir.join(format!(
            "{}.{}-delete",
            tp.dir_name(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::rename(&from, &to).map_err(StorageError::io(&from))?;
        sync_dir(&self.config.log_dir)?;
        if let Ok(mut d) = self.doomed_dirs.lock() {
            d.push((now_ms() + delay, to));
        }
        drop(log);
        self.delete_due_dirs(now_ms());
        Ok(true)
    }

    fn delete_due_dirs(&self, now: i64) {
        let Ok(mut d) = self.doomed_dirs.lock() else {
            return;
        };
        d.retain(|(due, path)| {
            if *due > now {
                return true;
            }
            if let Err(e) = std::fs::remove_dir_all(path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot remove a deleted partition directory");
                    return true;
                }
            }
            false
        });
    }

    fn collect(
        &self,
        f: impl Fn(&Log) -> i64,
        filter: impl Fn(&Log) -> bool,
    ) -> BTreeMap<TopicPartition, i64> {
        let mut out = BTreeMap::new();
        for (tp, log) in self.all_logs() {
            let l = log.lock();
            if filter(&l) {
                out.insert(tp, f(&l));
            }
        }
        out
    }

    /// Writes `recovery-point-offset-checkpoint`.
    pub fn checkpoint_recovery_points(&self) -> Result<()> {
        let m = self.collect(Log::recovery_point, |_| true);
        OffsetCheckpointFile::new(self.config.log_dir.join(RECOVERY_POINT_CHECKPOINT)).write(&m)
    }

    /// Writes `log-start-offset-checkpoint` for logs whose start moved past their first segment.
    pub fn checkpoint_log_start_offsets(&self) -> Result<()> {
        let m = self.collect(Log::log_start_offset, |l| {
            l.segments()
                .next()
                .is_some_and(|s| l.log_start_offset() > s.base_offset())
        });
        OffsetCheckpointFile::new(self.config.log_dir.join(LOG_START_OFFSET_CHECKPOINT)).write(&m)
    }

    /// Writes `replication-offset-checkpoint` (high watermarks).
    pub fn checkpoint_high_watermarks(&self) -> Result<()> {
        let m = self.collect(Log::high_watermark, |_| true);
        OffsetCheckpointFile::new(self.config.log_dir.join(REPLICATION_OFFSET_CHECKPOINT)).write(&m)
    }

    pub fn checkpoint_all(&self) -> Result<()> {
        self.checkpoint_recovery_points()?;
        self.checkpoint_log_start_offsets()?;
        self.checkpoint_high_watermarks()
    }

    /// fsyncs logs whose `flush.ms` is due or that rolled, without holding a log's lock while
    /// the disk works, then advances their recovery points.
    pub fn flush_dirty_logs(&self, now: i64) -> Result<()> {
        for (_, log) in self.all_logs() {
            let work = {
                let mut l = log.lock();
                let roll = l.take_roll_flush();
                if l.flush_due(now) {
                    Some(l.unflushed_handles(l.log_end_offset()))
                } else {
                    roll.map(|upto| l.unflushed_handles(upto))
                }
            };
            if let Some((handles, upto)) = work {
                for h in &handles {
                    h.sync()?;
                }
                log.lock().mark_flushed(upto);
            }
        }
        Ok(())
    }

    /// Applies retention to every log and removes files whose deletion delay has passed.
    pub fn cleanup_logs(&self, now: i64) -> Result<usize> {
        let mut deleted = 0;
        for (_, log) in self.all_logs() {
            let mut l = log.lock();
            deleted += l.delete_old_segments(now)?;
            l.delete_due_files(now)?;
        }
        self.delete_due_dirs(now);
        if deleted > 0 {
            self.checkpoint_log_start_offsets()?;
        }
        Ok(deleted)
    }

    /// Starts the background thread (flushes, retention, checkpoints and delayed deletes) and
    /// the log cleaner's threads.
    pub fn start_background(self: &Arc<Self>) {
        if let Some(c) = &self.cleaner {
            let me = Arc::downgrade(self);
            c.start(Arc::new(move || me.upgrade().map(|m| m.all_logs())));
        }
        let me = Arc::downgrade(self);
        let stop = self.stop.clone();
        let tick = Duration::from_millis(self.config.tick_ms.max(1));
        let handle = std::thread::Builder::new()
            .name("log-manager".into())
            .spawn(move || {
                let (mut last_retention, mut last_recovery, mut last_start, mut last_hw) =
                    (now_ms(), now_ms(), now_ms(), now_ms());
                loop {
                    {
                        let (m, cv) = &*stop;
                        let Ok(guard) = m.lock() else { return };
                        let Ok((guard, _)) = cv.wait_timeout(guard, tick) else {
                            return;
                        };
                        if *guard {
                            return;
                        }
                    }
                    let Some(mgr) = me.upgrade() else { return };
                    let now = now_ms();
                    if let Err(e) = mgr.flush_dirty_logs(now) {
                        tracing::error!(error = %e, "log flush failed");
                    }
                    let c = &mgr.config;
                    if now - last_retention >= c.retention_check_interval_ms {
                        last_retention = now;
                        if let Err(e) = mgr.cleanup_logs(now) {
                            tracing::error!(error = %e, "retention failed");
                        }
                    } else {
                        mgr.delete_pending_files(now);
                    }
                    if now - last_recovery >= c.recovery_checkpoint_interval_ms {
                        last_recovery = now;
                        if let Err(e) = mgr.checkpoint_recovery_points() {
                            tracing::error!(error = %e, "recovery point checkpoint failed");
                        }
                    }
                    if now - last_hw >= c.high_watermark_checkpoint_interval_ms {
                        last_hw = now;
                        if let Err(e) = mgr.checkpoint_high_watermarks() {
                            tracing::error!(error = %e, "high watermark checkpoint failed");
                        }
                    }
                    if now - last_start >= c.start_offset_checkpoint_interval_ms {
                        last_start = now;
                        if let Err(e) = mgr.checkpoint_log_start_offsets() {
                            tracing::error!(error = %e, "log start offset checkpoint failed");
                        }
                    }
                }
            });
        match handle {
            Ok(h) => {
                if let Ok(mut b) = self.background.lock() {
                    *b = Some(h);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot start the log manager thread"),
        }
    }

    fn delete_pending_files(&self, now: i64) {
        for (_, log) in self.all_logs() {
            let mut l = log.lock();
            if l.has_pending_deletes() {
                if let Err(e) = l.delete_due_files(now) {
                    tracing::warn!(error = %e, "cannot remove a deleted segment");
                }
            }
        }
        self.delete_due_dirs(now);
    }

    /// Clean shutdown: stops background work, flushes and closes every log, writes the
    /// checkpoints and then the clean-shutdown marker. Safe to call twice.
    pub fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        {
            let (m, cv) = &*self.stop;
            if let Ok(mut g) = m.lock() {
                *g = true;
            }
            cv.notify_all();
        }
        if let Some(h) = self.background.lock().ok().and_then(|mut b| b.take()) {
            let _ = h.join();
        }
        if let Some(c) = &self.cleaner {
            c.shutdown();
        }
        for (tp, log) in self.all_logs() {
            let mut l = log.lock();
            l.close().inspect_err(|e| {
                tracing::error!(partition = %tp, error = %e, "closing a log failed");
            })?;
        }
        self.delete_due_dirs(i64::MAX);
        self.checkpoint_all()?;
        write_atomic(
            &self.config.log_dir.join(CLEAN_SHUTDOWN_MARKER),
            br#"{"version":0,"broker_epoch":-1}"#,
        )?;
        tracing::info!(dir = %self.config.log_dir.display(), "log manager shut down cleanly");
        Ok(())
    }
}

impl Drop for LogManager {
    fn drop(&mut self) {
        if let Some(c) = &self.cleaner {
            // No join: the last reference may go on a cleaner thread itself.
            c.stop();
        }
        let (m, cv) = &*self.stop;
        if let Ok(mut g) = m.lock() {
            *g = true;
        }
        cv.notify_all();
    }
}

fn poisoned(dir: &Path) -> StorageError {
    StorageError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other("a log lock was poisoned by a panic"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::batch::build_batch;

    fn config(dir: &Path) -> LogManagerConfig {
        LogManagerConfig::new(
            dir,
            LogConfig {
                segment_bytes: 4096,
                file_delete_delay_ms: 0,
                ..LogConfig::default()
            },
        )
    }

    fn append(log: &LogRef, n: usize) {
        let v = vec![b'x'; 900];
        for _ in 0..n {
            let mut b = build_batch(&[(None, Some(v.as_slice()))], 1);
            log.lock().append_as_leader(&mut b, 0).unwrap();
        }
    }

    #[test]
    fn checkpoints_survive_a_clean_restart() {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("orders", 2);
        let id = KafkaUuid::random();
        {
            let mgr = LogManager::open(config(dir.path())).unwrap();
            assert!(!mgr.had_clean_shutdown());
            let log = mgr.get_or_create_log(&tp, Some(id), None).unwrap();
            append(&log, 20);
            {
                let mut l = log.lock();
                l.update_high_watermark(20);
                l.delete_records_before(9).unwrap();
            }
            mgr.shutdown().unwrap();
        }
        let root = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(root(RECOVERY_POINT_CHECKPOINT), "0\n1\norders 2 20\n");
        assert_eq!(root(LOG_START_OFFSET_CHECKPOINT), "0\n1\norders 2 9\n");
        assert_eq!(root(REPLICATION_OFFSET_CHECKPOINT), "0\n1\norders 2 20\n");
        assert!(dir.path().join(CLEAN_SHUTDOWN_MARKER).exists());

        let mgr = LogManager::open(config(dir.path())).unwrap();
        assert!(mgr.had_clean_shutdown());
        assert!(!dir.path().join(CLEAN_SHUTDOWN_MARKER).exists());
        let log = mgr.get_log(&tp).unwrap();
        let l = log.lock();
        assert_eq!(l.log_end_offset(), 20);
        assert_eq!(l.log_start_offset(), 9);
        assert_eq!(l.high_watermark(), 20);
        assert_eq!(l.recovery_point(), 20);
        assert_eq!(l.topic_id(), Some(id));
    }

    #[test]
    fn a_second_manager_on_the_same_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _a = LogManager::open(config(dir.path())).unwrap();
        let e = LogManager::open(config(dir.path())).err().unwrap();
        assert!(matches!(e, StorageError::DirectoryLocked(_)), "{e}");
        let mut waiting = config(dir.path());
        waiting.lock_wait = std::time::Duration::from_millis(300);
        let e = LogManager::open(waiting).err().unwrap();
        assert!(matches!(e, StorageError::DirectoryLocked(_)), "{e}");
    }

    #[test]
    fn a_manager_waits_for_the_lock_another_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogManager::open(config(dir.path())).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = first.shutdown();
            drop(first);
        });
        let mut waiting = config(dir.path());
        waiting.lock_wait = std::time::Duration::from_secs(20);
        let started = std::time::Instant::now();
        let second = LogManager::open(waiting);
        release.join().unwrap();
        assert!(second.is_ok(), "the lock was released: {:?}", second.err());
        assert!(started.elapsed() >= std::time::Duration::from_millis(250));
    }

    #[test]
    fn leftover_files_of_interrupted_operations_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        {
            let mgr = LogManager::open(config(dir.path())).unwrap();
            append(&mgr.get_or_create_log(&tp, None, None).unwrap(), 3);
            mgr.shutdown().unwrap();
        }
        let pdir = dir.path().join("t-0");
        for f in [
            "00000000000000000000.log.deleted",
            "00000000000000000000.index.swap",
            "00000000000000000000.log.cleaned",
            "00000000000000000099.index",
        ] {
            std::fs::write(pdir.join(f), b"junk").unwrap();
        }
        std::fs::create_dir(
            dir.path()
                .join("t-1.0123456789abcdef0123456789abcdef-delete"),
        )
        .unwrap();
        let mgr = LogManager::open(config(dir.path())).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&pdir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                "00000000000000000000.index",
                "00000000000000000000.log",
                "00000000000000000000.timeindex",
                "leader-epoch-checkpoint",
            ]
        );
        assert_eq!(mgr.get_log(&tp).unwrap().lock().log_end_offset(), 3);
        mgr.cleanup_logs(now_ms()).unwrap();
        assert!(!dir
            .path()
            .join("t-1.0123456789abcdef0123456789abcdef-delete")
            .exists());
    }

    #[test]
    fn deleting_a_log_renames_then_removes_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mgr = LogManager::open(config(dir.path())).unwrap();
        let tp = TopicPartition::new("gone", 0);
        append(
            &mgr.get_or_create_log(&tp, Some(KafkaUuid::random()), None)
                .unwrap(),
            2,
        );
        assert!(mgr.delete_log(&tp).unwrap());
        assert!(!dir.path().join("gone-0").exists());
        assert!(mgr.get_log(&tp).is_none());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // Re-creating starts again at offset 0 with a new topic id.
        let id = KafkaUuid::random();
        let log = mgr.get_or_create_log(&tp, Some(id), None).unwrap();
        assert_eq!(log.lock().log_end_offset(), 0);
        assert_eq!(log.lock().topic_id(), Some(id));
    }

    #[test]
    fn background_thread_applies_flush_ms_and_roll_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.default_config.flush_ms = 0;
        c.tick_ms = 10;
        let mgr = LogManager::open(c).unwrap();
        mgr.start_background();
        let log = mgr
            .get_or_create_log(&TopicPartition::new("f", 0), None, None)
            .unwrap();
        append(&log, 10);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while log.lock().recovery_point() < 10 {
            assert!(
                std::time::Instant::now() < deadline,
                "recovery point did not advance"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        mgr.shutdown().unwrap();
    }

    #[test]
    fn flush_messages_flushes_on_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.default_config.flush_messages = 3;
        let mgr = LogManager::open(c).unwrap();
        let log = mgr
            .get_or_create_log(&TopicPartition::new("f", 0), None, None)
            .unwrap();
        append(&log, 2);
        assert_eq!(log.lock().recovery_point(), 0);
        append(&log, 1);
        assert_eq!(log.lock().recovery_point(), 3);
    }
}
