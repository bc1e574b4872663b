//! Crash safety of the partition log. A child process appends to one log and prints every offset
//! the log acknowledged; the parent kills it with SIGKILL at a random moment, sometimes adds
//! garbage or half a batch to the tail, reopens the log and checks that nothing acknowledged is
//! lost, the log ends on a batch boundary, offsets are contiguous, and the indexes agree with a scan.
//! The child is this same test binary, re-run with EVENKEEL_CRASH_CHILD set.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use evenkeel::config::LogConfig;
use evenkeel::storage::batch::{self, build_batch, BatchHeader, KeyValue};
use evenkeel::storage::{LogManager, LogManagerConfig, TopicPartition};
use rand::{Rng, SeedableRng};

const TEST_NAME: &str = "sigkill_at_random_moments_loses_no_acknowledged_batch";
const KILLS: usize = 60;

fn log_config() -> LogConfig {
    LogConfig {
        // Small segments and a dense index, so kills land in rolls and index appends too.
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 64 * 1024,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

fn manager_config(dir: &Path) -> LogManagerConfig {
    let mut c = LogManagerConfig::new(dir, log_config());
    c.recovery_checkpoint_interval_ms = 50;
    c.tick_ms = 20;
    c
}

fn tp() -> TopicPartition {
    TopicPartition::new("crash", 0)
}

/// The value stored at `offset`: it names its offset, with a length that varies by offset.
fn value_for(offset: i64) -> Vec<u8> {
    let mut v = format!("offset-{offset}:").into_bytes();
    let pad = (offset.wrapping_mul(2_654_435_761) as u64 % 700) as usize;
    v.resize(v.len() + pad, b'a' + (offset % 26) as u8);
    v
}

/// Child: append forever (bounded), printing `ACK <last offset>` after each append returns.
fn run_child(dir: &Path, seed: u64) {
    let mgr = LogManager::open(manager_config(dir)).expect("child opens the log dir");
    mgr.start_background();
    let log = mgr.get_or_create_log(&tp(), None, None).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let stdout = std::io::stdout();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let mut l = log.lock();
        let first = l.log_end_offset();
        let n = rng.gen_range(1..12);
        let values: Vec<Vec<u8>> = (0..n).map(|i| value_for(first + i)).collect();
        let recs: Vec<KeyValue<'_>> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
        let mut b = build_batch(&recs, 1_700_000_000_000 + first);
        let info = l.append_as_leader(&mut b, 1).unwrap();
        if rng.gen_bool(0.05) {
            l.flush().unwrap();
        }
        drop(l);
        let mut out = stdout.lock();
        writeln!(out, "ACK {}", info.last_offset).unwrap();
        out.flush().unwrap();
    }
}

fn active_segment_file(pdir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment file")
}

/// Opens the log after a crash and checks every promise; returns the log end offset.
fn verify(dir: &Path, acked: i64, clean_close: bool) -> i64 {
    let mgr = LogManager::open(manager_config(dir)).expect("reopen after the kill");
    let log = mgr.get_log(&tp()).expect("the log is still there");
    let l = log.lock();
    let leo = l.log_end_offset();
    assert!(
        leo > acked,
        "acknowledged offset {acked} lost: log end is {leo}"
    );
    let mut expected = 0i64;
    for seg in l.segments() {
        let data = std::fs::read(seg.log_path()).unwrap();
        assert_eq!(data.len() as u64, seg.size());
        if data.is_empty() {
            // A segment rolled just before the kill.
            assert_eq!(seg.base_offset(), expected);
            continue;
        }
        let infos = batch::validate_batches(&data)
            .unwrap_or_else(|e| panic!("segment {} holds a bad batch: {e}", seg.base_offset()));
        let mut positions = std::collections::HashMap::new();
        for info in &infos {
            let h = info.header;
            assert_eq!(h.base_offset, expected, "offsets are not contiguous");
            let b = &data[info.position..info.position + h.size()];
            for r in batch::uncompressed_records(b) {
                let o = h.base_offset + r.offset_delta as i64;
                assert_eq!(
                    r.value.unwrap(),
                    value_for(o).as_slice(),
                    "record {o} differs"
                );
            }
            positions.insert(info.position as u32, h);
            expected = h.next_offset();
        }
        // The offset index agrees with the scan: each entry points at a batch ending at its offset.
        let idx = seg.offset_index();
        for n in 0..idx.entries() {
            let e = idx.entry_at(n);
            let h: &BatchHeader = positions
                .get(&e.position)
                .unwrap_or_else(|| panic!("index entry {e:?} is not a batch start"));
            assert_eq!(h.last_offset(), e.offset);
        }
        let ti = seg.time_index();
        for n in 0..ti.entries() {
            let e = ti.entry_at(n);
            assert!(e.offset >= seg.base_offset() && e.offset < seg.next_offset());
            // Each entry names the last offset of a batch and that batch's timestamp.
            let h = positions
                .values()
                .find(|h| h.last_offset() == e.offset)
                .unwrap_or_else(|| panic!("time index entry {e:?} is not a batch end"));
            assert_eq!(e.timestamp, 1_700_000_000_000 + h.base_offset);
        }
        // Lookups through the index find every offset.
        for o in (seg.base_offset()..seg.next_offset()).step_by(7) {
            let (_, h) = seg.translate_offset(o).unwrap().unwrap();
            assert!(h.base_offset <= o && o <= h.last_offset());
        }
    }
    assert_eq!(
        expected, leo,
        "log end offset does not match the last batch"
    );
    drop(l);
    if clean_close {
        // The next child then loads through the clean-shutdown path (sanity checks only).
        mgr.shutdown().unwrap();
    }
    leo
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_batch() {
    if let Ok(dir) = std::env::var("EVENKEEL_CRASH_CHILD") {
        let seed = std::env::var("EVENKEEL_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        run_child(Path::new(&dir), seed);
        return;
    }
    let seed: u64 = std::env::var("EVENKEEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("crash test seed {seed} (set EVENKEEL_CRASH_SEED to repeat)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let mut acked = -1i64;
    let (mut garbage, mut half) = (0, 0);
    for round in 0..KILLS {
        let mut child = Command::new(&me)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env("EVENKEEL_CRASH_CHILD", dir.path())
            .env("EVENKEEL_CRASH_SEED", rng.gen::<u64>().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let wait_acks = rng.gen_range(1..400);
        let mut seen = 0;
        for line in lines.by_ref() {
            if let Some(o) = line.unwrap().strip_prefix("ACK ") {
                acked = acked.max(o.parse().unwrap());
                seen += 1;
                if seen >= wait_acks {
                    break;
                }
            }
        }
        if rng.gen_bool(0.5) {
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..3000)));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Acknowledgements already in the pipe count too.
        for line in lines {
            if let Some(o) = line.unwrap().strip_prefix("ACK ") {
                acked = acked.max(o.parse().unwrap());
            }
        }
        let pdir = dir.path().join("crash-0");
        match rng.gen_range(0..3) {
            0 => {
                // Garbage at the tail.
                let junk: Vec<u8> = (0..rng.gen_range(1..200)).map(|_| rng.gen()).collect();
                append_to(&active_segment_file(&pdir), &junk);
                garbage += 1;
            }
            1 => {
                // Half of a valid batch at the tail.
                let v = value_for(999_999);
                let b = build_batch(&[(None, Some(v.as_slice()))], 0);
                append_to(&active_segment_file(&pdir), &b[..rng.gen_range(1..b.len())]);
                half += 1;
            }
            _ => {}
        }
        let leo = verify(dir.path(), acked, rng.gen_bool(0.5));
        assert!(leo > acked, "round {round}");
    }
    eprintln!("{KILLS} kills: {garbage} with garbage and {half} with half a batch at the tail; {} offsets acknowledged", acked + 1);
    assert!(acked > 0);
}

fn append_to(p: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(bytes).unwrap();
}
