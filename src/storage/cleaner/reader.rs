//! How a cleaner thread reads a segment outside the log's lock: whole batches in chunks of
//! `log.cleaner.io.buffer.size`, throttled to `log.cleaner.io.max.bytes.per.second`.

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::storage::batch::{self, BatchAt, BatchHeader, BATCH_HEADER_SIZE};
use crate::storage::error::{Result, StorageError};
use crate::storage::log::SegmentView;

/// Kafka's `Throttler`: keeps a rate of bytes per second by sleeping whenever the bytes of the
/// current period are ahead of it, with a new period every 300 ms (so time spent idle gives no
/// credit for a burst). Kafka compares only once a period has passed, which lets a round
/// shorter than 300 ms through unthrottled; this compares on every call. The sleep ends early
/// when `done` says so (the cleaner shuts down or the cleaning is aborted).
struct Throttler {
    rate: f64,
    period_start: Instant,
    bytes: f64,
}

const THROTTLE_PERIOD: Duration = Duration::from_millis(300);
/// The longest single sleep before `done` is asked again.
const SLEEP_STEP: Duration = Duration::from_millis(100);

impl Throttler {
    fn new(rate: f64) -> Throttler {
        Throttler {
            rate,
            period_start: Instant::now(),
            bytes: 0.0,
        }
    }

    fn maybe_throttle(&mut self, bytes: u64, done: impl Fn() -> bool) {
        if !self.rate.is_finite() || self.rate >= f64::MAX || self.rate <= 0.0 {
            return;
        }
        self.bytes += bytes as f64;
        let wanted = Duration::try_from_secs_f64(self.bytes / self.rate).unwrap_or(Duration::MAX);
        while !done() {
            let elapsed = self.period_start.elapsed();
            if elapsed >= wanted {
                break;
            }
            std::thread::sleep((wanted - elapsed).min(SLEEP_STEP));
        }
        if self.period_start.elapsed() >= THROTTLE_PERIOD {
            self.period_start = Instant::now();
            self.bytes = 0.0;
        }
    }
}

/// What a batch visitor asks next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Stop,
}

/// A cleaner thread's read buffer, throttle, stop flag and the abort flag of its cleaning.
pub(super) struct IoContext {
    buf: Vec<u8>,
    chunk: usize,
    throttler: Throttler,
    running: Arc<AtomicBool>,
    aborted: Arc<AtomicBool>,
}

impl IoContext {
    pub(super) fn new(chunk: usize, rate: f64, running: Arc<AtomicBool>) -> IoContext {
        IoContext {
            buf: Vec::new(),
            chunk: chunk.max(BATCH_HEADER_SIZE),
            throttler: Throttler::new(rate),
            running,
            aborted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The cleaning from now on stops when `aborted` is set (its partition is deleted).
    pub(super) fn watch(&mut self, aborted: Arc<AtomicBool>) {
        self.aborted = aborted;
    }

    /// Kafka's `checkDone`: a cleaning in progress stops when the cleaner shuts down or the
    /// cleaning is aborted.
    pub(super) fn check_done(&self) -> Result<()> {
        if done(&self.running, &self.aborted) {
            Err(StorageError::CleaningAborted)
        } else {
            Ok(())
        }
    }

    /// Counts `bytes` read or written against `log.cleaner.io.max.bytes.per.second`, sleeping
    /// as long as the rate asks, then `check_done`: the sleep ends as soon as the cleaner shuts
    /// down or the cleaning is aborted, so that a deleted partition's cleaning stops at once.
    pub(super) fn throttle(&mut self, bytes: u64) -> Result<()> {
        let (running, aborted) = (&self.running, &self.aborted);
        self.throttler
            .maybe_throttle(bytes, || done(running, aborted));
        self.check_done()
    }

    /// Calls `f` with every whole batch of `seg` from byte `from` until it says stop.
    pub(super) fn for_each_batch(
        &mut self,
        seg: &SegmentView,
        from: u64,
        mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<Flow>,
    ) -> Result<()> {
        let mut pos = from;
        let mut want = self.chunk;
        while pos < seg.size {
            self.check_done()?;
            let len = ((seg.size - pos) as usize).min(want);
            self.buf.resize(len, 0);
            seg.file
                .read_exact_at(&mut self.buf, pos)
                .map_err(StorageError::io(&seg.path))?;
            self.throttle(len as u64)?;
            let (used, next_size) = walk(&self.buf, &mut f)?;
            if used.is_none() {
                return Ok(());
            }
            let used = used.unwrap_or(0);
            if used == 0 {
                // One batch larger than the buffer: read it whole (Kafka grows its buffers).
                let size = next_size.ok_or_else(|| torn(seg, pos))?;
                if pos + size as u64 > seg.size || size <= want {
                    return Err(torn(seg, pos));
                }
                want = size;
                continue;
            }
            pos += used as u64;
            want = self.chunk;
        }
        Ok(())
    }
}

/// Whether a cleaning must stop: the cleaner shuts down, or the cleaning is aborted.
fn done(running: &AtomicBool, aborted: &AtomicBool) -> bool {
    !running.load(Ordering::SeqCst) || aborted.load(Ordering::SeqCst)
}

fn torn(seg: &SegmentView, pos: u64) -> StorageError {
    StorageError::CorruptRecord(format!(
        "segment {} has no whole batch at position {pos}",
        seg.path.display()
    ))
}

/// Visits the whole batches at the start of `buf`. Returns the bytes they fill (`None` when the
/// visitor stopped) and the size of the first batch that does not fit.
fn walk(
    buf: &[u8],
    f: &mut impl FnMut(&BatchHeader, &[u8]) -> Result<Flow>,
) -> Result<(Option<usize>, Option<usize>)> {
    let mut at = 0usize;
    loop {
        let h = match batch::batch_at(&buf[at..], at as u64, buf.len() as u64)? {
            BatchAt::Whole(h) => h,
            BatchAt::Unknown => return Ok((Some(at), None)),
            BatchAt::PastEnd(size) => return Ok((Some(at), Some(size))),
            BatchAt::TooShort(len) => {
                return Err(StorageError::CorruptRecord(format!(
                    "record batch length {len} is too small"
                )))
            }
        };
        if f(&h, &buf[at..at + h.size()])? == Flow::Stop {
            return Ok((None, None));
        }
        at += h.size();
    }
}
