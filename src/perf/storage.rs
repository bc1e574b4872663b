//! `evenkeel perf storage`: append and read throughput of the partition log on this machine's
//! disk, printed beside `dd`'s sequential write figures from the same directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::LogConfig;
use crate::storage::batch::build_batch;
use crate::storage::{LoadParams, Log, LogRef, StorageError, TopicPartition};

#[derive(Debug, Clone)]
pub struct StoragePerfOptions {
    /// Directory for the test logs (removed afterwards).
    pub dir: PathBuf,
    /// Bytes to append per run.
    pub total_bytes: u64,
    pub record_size: usize,
    pub batch_bytes: usize,
    /// fsync after this many appended bytes in the durable run.
    pub fsync_every_bytes: u64,
}

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    pub name: String,
    pub bytes: u64,
    pub seconds: f64,
}

impl Figure {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

fn fresh_log_with(dir: &Path, name: &str, config: LogConfig) -> Result<Log, StorageError> {
    let d = dir.join(format!("{name}-0"));
    let _ = std::fs::remove_dir_all(&d);
    Log::open(
        &d,
        TopicPartition::new(name, 0),
        config,
        LoadParams::default(),
    )
}

/// One v2 batch of `batch_bytes / record_size` records of `record_size` bytes, appended again
/// and again (the log assigns new offsets in place each time).
fn batch_template(opts: &StoragePerfOptions) -> Vec<u8> {
    let value = vec![b'x'; opts.record_size];
    let per_batch = (opts.batch_bytes / opts.record_size).max(1);
    let records: Vec<crate::storage::batch::KeyValue<'_>> = (0..per_batch)
        .map(|_| (None, Some(value.as_slice())))
        .collect();
    build_batch(&records, 1_700_000_000_000)
}

/// Appends `total_bytes`. With `fsync_every`, the log runs Kafka's `flush.messages` policy set
/// to that many bytes' worth of records, so it fsyncs inline from the append as a broker would.
fn append_run(
    opts: &StoragePerfOptions,
    name: &str,
    fsync_every: Option<u64>,
) -> Result<(Figure, Log), StorageError> {
    let mut template = batch_template(opts);
    let config = match fsync_every {
        Some(every) => LogConfig {
            flush_messages: flush_messages_for(opts, every),
            ..LogConfig::default()
        },
        None => LogConfig::default(),
    };
    let mut log = fresh_log_with(&opts.dir, name, config)?;
    let start = Instant::now();
    let mut written = 0u64;
    while written < opts.total_bytes {
        log.append_as_leader(&mut template, 0)?;
        written += template.len() as u64;
    }
    if fsync_every.is_some() {
        log.flush()?;
    }
    let fig = Figure {
        name: name.into(),
        bytes: written,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok((fig, log))
}

/// `flush.messages` for an fsync every `bytes` of `record_size` records.
fn flush_messages_for(opts: &StoragePerfOptions, bytes: u64) -> i64 {
    (bytes / opts.record_size.max(1) as u64).max(1) as i64
}

/// Appends while a flusher thread fsyncs every `every` bytes, as the broker's flush path does:
/// the flusher takes the file handles under the log's lock and syncs outside it, so appends go on
/// while the disk works. The appender never runs more than two intervals ahead of the last
/// completed fsync, so at most `2 * every` bytes are ever unsynced.
fn pipelined_run(
    opts: &StoragePerfOptions,
    name: &str,
    every: u64,
    preallocate: bool,
) -> Result<Figure, StorageError> {
    let mut template = batch_template(opts);
    // A log flushed in the background has a `flush.ms`; the run's flusher keeps to `every`
    // bytes instead, so the value only marks the policy (it turns on write-behind).
    let config = LogConfig {
        preallocate,
        flush_ms: 1000,
        ..LogConfig::default()
    };
    let log: LogRef = Arc::new(parking_lot::Mutex::new(fresh_log_with(
        &opts.dir, name, config,
    )?));
    let appended = Arc::new(AtomicU64::new(0));
    let synced = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (log, appended, synced, done) =
            (log.clone(), appended.clone(), synced.clone(), done.clone());
        std::thread::spawn(move || -> Result<(), StorageError> {
            loop {
                let finished = done.load(Ordering::Acquire);
                let upto_bytes = appended.load(Ordering::Acquire);
                let behind = upto_bytes - synced.load(Ordering::Acquire);
                if behind >= every || (finished && behind > 0) {
                    let (handles, upto) = {
                        let l = log.lock();
                        l.unflushed_handles(l.log_end_offset())
                    };
                    for h in &handles {
                        h.sync()?;
                    }
                    log.lock().mark_flushed(upto);
                    synced.store(upto_bytes, Ordering::Release);
                } else if finished {
                    return Ok(());
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        })
    };
    let start = Instant::now();
    let mut written = 0u64;
    let appended_all = (|| -> Result<(), StorageError> {
        while written < opts.total_bytes {
            log.lock().append_as_leader(&mut template, 0)?;
            written += template.len() as u64;
            appended.store(written, Ordering::Release);
            while written - synced.load(Ordering::Acquire) > 2 * every {
                if flusher.is_finished() {
                    // The flusher stopped early: its error is reported by the join below.
                    return Ok(());
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    })();
    // Stop the flusher on every path, then report the first error.
    done.store(true, Ordering::Release);
    let flushed = flusher.join().map_err(|_| StorageError::Poisoned)?;
    appended_all?;
    flushed?;
    Ok(Figure {
        name: name.into(),
        bytes: written,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn read_run(log: &Log) -> Result<Figure, StorageError> {
    let start = Instant::now();
    let mut offset = log.log_start_offset();
    let mut bytes = 0u64;
    while offset < log.log_end_offset() {
        let data = log.read(offset, 1024 * 1024, None, true)?;
        if data.is_empty() {
            break;
        }
        let mut pos = 0;
        while let Some((base, len)) = crate::storage::batch::peek_offset_and_size(&data[pos..]) {
            let h = crate::storage::batch::BatchHeader::parse(&data[pos..])?;
            offset = h.next_offset();
            let _ = base;
            pos += 12 + len as usize;
        }
        bytes += data.len() as u64;
    }
    Ok(Figure {
        name: "read (1 MiB fetches, page cache)".into(),
        bytes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Runs `dd` writing `bytes` to `dir` with the given extra flag; `None` when dd is missing.
fn dd(dir: &Path, bytes: u64, flag: &str, name: &str) -> Option<Figure> {
    let target = dir.join("dd.bench");
    let count = (bytes / (1024 * 1024)).max(1);
    let start = Instant::now();
    let status = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", target.display()))
        .arg("bs=1M")
        .arg(format!("count={count}"))
        .arg(flag)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .ok()?;
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&target);
    status.success().then(|| Figure {
        name: name.into(),
        bytes: count * 1024 * 1024,
        seconds,
    })
}

/// Writes dirty pages back so that each run starts from the same page-cache state.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// One printed row: the median figure and the range over the runs.
pub struct Row {
    pub name: String,
    pub median_mb_s: f64,
    pub min_mb_s: f64,
    pub max_mb_s: f64,
}

fn row(name: String, figs: &[Figure]) -> Option<Row> {
    let mut v: Vec<f64> = figs.iter().map(Figure::mb_per_s).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(Row {
        name,
        median_mb_s: v[v.len() / 2],
        min_mb_s: v[0],
        max_mb_s: v[v.len() - 1],
    })
}

/// What `run` measured: rows in print order, and the medians over rounds of
/// (our append with fsync every 1 MiB) / (dd conv=fdatasync) from the same round, for the
/// inline fsync and for the background flusher on preallocated segments.
pub struct Report {
    pub rows: Vec<Row>,
    pub fsync_vs_dd_ratio: Option<f64>,
    pub pipelined_vs_dd_ratio: Option<f64>,
}

/// Runs `runs` rounds. Each round measures everything once, back to back, so that the shared
/// disk's drift affects our figures and dd's alike; ratios are taken within a round.
pub fn run(opts: &StoragePerfOptions, runs: usize) -> Result<Report, StorageError> {
    std::fs::create_dir_all(&opts.dir).map_err(StorageError::io(&opts.dir))?;
    let (mut plain, mut reads, mut synced, mut dd_end, mut dd_each) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut piped, mut prealloc, mut ratios, mut piped_ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        settle();
        let (fig, log) = append_run(opts, "perf-nofsync", None)?;
        plain.push(fig);
        reads.push(read_run(&log)?);
        drop(log);
        let _ = std::fs::remove_dir_all(opts.dir.join("perf-nofsync-0"));
        settle();
        let (fig, log) = append_run(opts, "perf-fsync", Some(opts.fsync_every_bytes))?;
        drop(log);
        let _ = std::fs::remove_dir_all(opts.dir.join("perf-fsync-0"));
        let ours = fig.mb_per_s();
        synced.push(fig);
        settle();
        let fig = pipelined_run(opts, "perf-flusher", opts.fsync_every_bytes, false)?;
        let _ = std::fs::remove_dir_all(opts.dir.join("perf-flusher-0"));
        piped.push(fig);
        settle();
        let fig = pipelined_run(opts, "perf-prealloc", opts.fsync_every_bytes, true)?;
        let _ = std::fs::remove_dir_all(opts.dir.join("perf-prealloc-0"));
        let ours_piped = fig.mb_per_s();
        prealloc.push(fig);
        settle();
        if let Some(f) = dd(&opts.dir, opts.total_bytes, "conv=fdatasync", "") {
            ratios.push(ours / f.mb_per_s());
            piped_ratios.push(ours_piped / f.mb_per_s());
            dd_end.push(f);
        }
        settle();
        if let Some(f) = dd(&opts.dir, opts.total_bytes, "oflag=dsync", "") {
            dd_each.push(f);
        }
    }
    let rows = [
        row(
            format!(
                "append {} B records in {} B batches, no fsync",
                opts.record_size, opts.batch_bytes
            ),
            &plain,
        ),
        row("read (1 MiB fetches, from the page cache)".into(), &reads),
        row(
            format!(
                "append, fsync every {} B inline (flush.messages={})",
                opts.fsync_every_bytes,
                flush_messages_for(opts, opts.fsync_every_bytes)
            ),
            &synced,
        ),
        row(
            format!(
                "append, fsync every {} B by a flusher thread",
                opts.fsync_every_bytes
            ),
            &piped,
        ),
        row(
            format!(
                "append, fsync every {} B by a flusher, preallocate=true",
                opts.fsync_every_bytes
            ),
            &prealloc,
        ),
        row("dd bs=1M conv=fdatasync".into(), &dd_end),
        row(
            "dd bs=1M oflag=dsync (a sync per 1 MiB write)".into(),
            &dd_each,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    ratios.sort_by(f64::total_cmp);
    piped_ratios.sort_by(f64::total_cmp);
    Ok(Report {
        rows,
        fsync_vs_dd_ratio: ratios.get(ratios.len() / 2).copied(),
        pipelined_vs_dd_ratio: piped_ratios.get(piped_ratios.len() / 2).copied(),
    })
}
