//! The cleaner against a model: random keyed appends and tombstones over many small segments,
//! cleaned at chosen times, then read back and compared with the table the model keeps.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::config::cleaner::CleanerConfig;
use crate::config::{LogConfig, Ratio};
use crate::storage::batch::{self, BatchHeader, Record, Rewrite};
use crate::storage::log::{LoadParams, Log};

const RETENTION_MS: i64 = 10_000;
/// Two idempotent producers: (producer id, epoch).
const PRODUCERS: [(i64, i16); 2] = [(7, 3), (8, 0)];
const PRODUCER: i64 = PRODUCERS[0].0;

/// A producer's fields of a batch: id, epoch, base sequence.
type ProducerFields = (i64, i16, i32);

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1500,
        index_interval_bytes: 200,
        segment_index_bytes: 64 * 1024,
        cleanup_policy: "compact".into(),
        min_cleanable_dirty_ratio: Ratio(0.0),
        delete_retention_ms: RETENTION_MS,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new("compacted", 0)
}

/// One record to append: key index and value (None: a tombstone).
type Rec = (u8, Option<Vec<u8>>);

/// A batch of `recs` at `ts`, with codec `codec` and, when `producer`, producer fields.
fn make_batch(recs: &[Rec], ts: i64, codec: u8, producer: Option<ProducerFields>) -> Vec<u8> {
    let keys: Vec<Vec<u8>> = recs
        .iter()
        .map(|(k, _)| format!("key-{k}").into_bytes())
        .collect();
    let kvs: Vec<batch::KeyValue<'_>> = recs
        .iter()
        .zip(&keys)
        .map(|((_, v), k)| (Some(k.as_slice()), v.as_deref()))
        .collect();
    let plain = batch::build_batch(&kvs, ts);
    if codec == 0 && producer.is_none() {
        return plain;
    }
    let mut h = BatchHeader::parse(&plain).unwrap();
    h.attributes |= codec as i16;
    if let Some(fields) = producer {
        (h.producer_id, h.producer_epoch, h.base_sequence) = fields;
    }
    let rw = Rewrite {
        records_count: h.records_count,
        base_timestamp: ts,
        max_timestamp: ts,
        delete_horizon: false,
    };
    batch::build_rewritten_batch(&h, &plain[batch::BATCH_HEADER_SIZE..], rw).unwrap()
}

/// A record read back: offset, key, value.
type ReadRecord = (i64, Vec<u8>, Option<Vec<u8>>);

/// What a reader from the start sees: every record and every batch header.
fn read_back(log: &Log) -> (Vec<ReadRecord>, Vec<BatchHeader>) {
    let (mut recs, mut headers) = (Vec::new(), Vec::new());
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let data = log.read(at, 1 << 20, None, true).unwrap();
        assert!(!data.is_empty(), "no progress at {at}");
        for info in batch::validate_stored_batches(&data).unwrap() {
            let b = &data[info.position..info.position + info.header.size()];
            let section = batch::records_section(b).unwrap();
            let mut rest: &[u8] = &section;
            while !rest.is_empty() {
                let r = Record::parse(&mut rest).unwrap();
                recs.push((
                    info.header.base_offset + r.offset_delta as i64,
                    r.key.unwrap().to_vec(),
                    r.value.map(<[u8]>::to_vec),
                ));
            }
            headers.push(info.header);
            at = info.header.next_offset();
        }
    }
    (recs, headers)
}

/// What a batch was appended as: codec, producer fields, last offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AppendedBatch {
    codec: u8,
    producer: (i64, i16, i32),
    last_offset: i64,
}

/// The model: every appended record by offset, every batch by base offset, and when each
/// tombstone was first cleaned.
#[derive(Default)]
struct Model {
    records: BTreeMap<i64, (Vec<u8>, Option<Vec<u8>>)>,
    batches: BTreeMap<i64, AppendedBatch>,
    horizon_from: BTreeMap<i64, i64>,
    /// Producer id → (base offset, last offset) of its last batch.
    producer_last_batch: BTreeMap<i64, (i64, i64)>,
}

impl Model {
    /// key → offset of its latest record below `end` (the cleaner sees only up to there).
    fn latest_below(&self, end: i64) -> BTreeMap<Vec<u8>, i64> {
        let mut out = BTreeMap::new();
        for (o, (k, _)) in self.records.range(..end) {
            out.insert(k.clone(), *o);
        }
        out
    }

    /// Whether a reader should find the record at `o` after a cleaning at `now` that cleaned
    /// everything below `active_base`.
    fn expect_present(
        &self,
        o: i64,
        now: i64,
        active_base: i64,
        latest: &BTreeMap<Vec<u8>, i64>,
    ) -> bool {
        let (k, v) = &self.records[&o];
        if o >= active_base {
            return true;
        }
        if latest[k] != o {
            return false;
        }
        match (v, self.horizon_from.get(&o)) {
            (None, Some(first)) => now == *first || now < first + RETENTION_MS,
            _ => true,
        }
    }
}

fn append(
    log: &LogRef,
    model: &mut Model,
    recs: &[Rec],
    ts: i64,
    codec: u8,
    producer: Option<ProducerFields>,
) {
    let mut b = make_batch(recs, ts, codec, producer);
    let mut l = log.lock();
    let info = l.append_as_leader(&mut b, 0).unwrap();
    let leo = l.log_end_offset();
    l.update_high_watermark(leo);
    for (i, (k, v)) in recs.iter().enumerate() {
        let key = format!("key-{k}").into_bytes();
        model
            .records
            .insert(info.first_offset + i as i64, (key, v.clone()));
    }
    let fields = producer.unwrap_or((-1, -1, -1));
    let appended = AppendedBatch {
        codec,
        producer: fields,
        last_offset: info.last_offset,
    };
    model.batches.insert(info.first_offset, appended);
    if producer.is_some() {
        let last = (info.first_offset, info.last_offset);
        model.producer_last_batch.insert(fields.0, last);
    }
}

/// One compacted log in a temporary directory of its own (where its cleaners keep their
/// checkpoint too), the model of what was appended to it, and `t0`, when its records are written.
struct Fixture {
    dir: tempfile::TempDir,
    tp: TopicPartition,
    log: LogRef,
    model: Model,
    t0: i64,
}

impl Fixture {
    /// The log of `tp()` with `log_config()`.
    fn new() -> Fixture {
        Fixture::with(log_config())
    }

    fn with(config: LogConfig) -> Fixture {
        Fixture::of(tp(), config)
    }

    fn of(tp: TopicPartition, config: LogConfig) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), tp.clone(), config, LoadParams::default()).unwrap();
        Fixture {
            dir,
            tp,
            log: Arc::new(parking_lot::Mutex::new(log)),
            model: Model::default(),
            t0: now_ms(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The log as a cleaner is handed it.
    fn entry(&self) -> (TopicPartition, LogRef) {
        (self.tp.clone(), self.log.clone())
    }

    fn append(&mut self, recs: &[Rec], ts: i64, codec: u8, producer: Option<ProducerFields>) {
        append(&self.log, &mut self.model, recs, ts, codec, producer);
    }

    fn roll(&self) {
        self.log.lock().roll(0).unwrap();
    }

    /// `fill` at `t0`.
    fn fill(&mut self, keys: &[u8], per_segment: usize) {
        self.fill_at(keys, self.t0, per_segment);
    }

    fn fill_at(&mut self, keys: &[u8], ts: i64, per_segment: usize) {
        fill(&self.log, &mut self.model, keys, ts, per_segment);
    }

    /// The bytes of the closed segments.
    fn closed_bytes(&self) -> u64 {
        closed_segment_bytes(&self.log.lock(), 0)
            .iter()
            .map(|(_, b)| b.len() as u64)
            .sum()
    }

    /// A cleaner with `config` that keeps its checkpoint in this log's directory.
    fn cleaner(&self, config: CleanerConfig) -> Arc<LogCleaner> {
        LogCleaner::new(config, self.path()).unwrap()
    }

    /// A cleaner with Kafka's defaults.
    fn default_cleaner(&self) -> Arc<LogCleaner> {
        self.cleaner(CleanerConfig::default())
    }

    /// A cleaner held to the rate at which one read of the closed segments takes `secs`.
    fn throttled_cleaner(&self, secs: f64) -> Arc<LogCleaner> {
        self.cleaner(CleanerConfig {
            max_io_bytes_per_second: self.closed_bytes() as f64 / secs,
            ..CleanerConfig::default()
        })
    }

    /// One round of `cleaner` over this log at `now`; whether it cleaned.
    fn clean_once(&self, cleaner: &LogCleaner, now: i64) -> bool {
        cleaner.clean_once(&[self.entry()], now)
    }

    /// Runs one cleaning at `now` and checks the log against the model.
    fn clean_and_check(&mut self, now: i64) {
        let active_base = self.log.lock().cleaning_view().active_base();
        let active = |l: &Log| std::fs::read(l.segments().last().unwrap().log_path()).unwrap();
        let active_before = active(&self.log.lock());
        let cleaner = self.default_cleaner();
        let cleaned = self.clean_once(&cleaner, now);
        assert_eq!(cleaner.metrics().uncleanable_partitions_count, 0);
        assert!(cleaned, "a log with dirty closed segments is cleaned");
        let model = &mut self.model;
        let latest = model.latest_below(active_base);
        for (o, (k, v)) in &model.records {
            if *o < active_base && v.is_none() && latest[k] == *o {
                model.horizon_from.entry(*o).or_insert(now);
            }
        }
        let l = self.log.lock();
        assert_eq!(active_before, active(&l), "the active segment was touched");
        check_against_model(&l, model, now, active_base);
        check_indexes(&l);
    }
}

fn check_against_model(l: &Log, model: &Model, now: i64, active_base: i64) {
    let (recs, headers) = read_back(l);
    let latest = model.latest_below(active_base);
    assert!(
        recs.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets must only increase"
    );
    let got: BTreeMap<i64, (Vec<u8>, Option<Vec<u8>>)> = recs
        .iter()
        .map(|(o, k, v)| (*o, (k.clone(), v.clone())))
        .collect();
    for (o, rec) in &got {
        assert_eq!(
            model.records.get(o),
            Some(rec),
            "record {o} is not what was appended there"
        );
    }
    for o in model.records.keys() {
        let want = model.expect_present(*o, now, active_base, &latest);
        assert_eq!(
            got.contains_key(o),
            want,
            "record {o} ({:?}), active segment at {active_base}, now {now}",
            model.records[o]
        );
    }
    check_batches(model, &headers);
}

/// Each batch read back is one that was appended, or its rewrite: the same base and last
/// offsets, producer id, epoch and base sequence, and, holding records, the same codec. Each
/// producer's last batch is there.
fn check_batches(model: &Model, headers: &[BatchHeader]) {
    for h in headers {
        let orig = model
            .batches
            .get(&h.base_offset)
            .unwrap_or_else(|| panic!("no batch was appended at {}", h.base_offset));
        assert_eq!(h.last_offset(), orig.last_offset, "{h:?}");
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            orig.producer,
            "{h:?}"
        );
        if h.records_count > 0 {
            assert_eq!(h.compression(), orig.codec, "{h:?}");
        }
    }
    for (pid, (base, last)) in &model.producer_last_batch {
        let h = headers
            .iter()
            .find(|h| h.base_offset == *base)
            .unwrap_or_else(|| panic!("producer {pid}'s last batch at {base}"));
        assert_eq!((h.last_offset(), h.producer_id), (*last, *pid));
    }
}

/// Both indexes of every segment agree with a scan of its batches.
fn check_indexes(l: &Log) {
    for seg in l.segments() {
        let bad = seg.index_mismatches().unwrap();
        assert!(bad.is_empty(), "{}: {bad:?}", seg.log_path().display());
    }
}

/// Records, codec, and which producer writes the batch (0: none, 1 and 2: `PRODUCERS`).
fn arb_batch() -> impl Strategy<Value = (Vec<Rec>, u8, usize)> {
    let rec = (
        0u8..12,
        prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..40)),
    );
    let producer = prop_oneof![6 => Just(0usize), 2 => Just(1usize), 2 => Just(2usize)];
    (prop::collection::vec(rec, 1..5), 0u8..5, producer)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_each_keys_latest_record_at_its_offset_and_drops_tombstones_after_retention(
        batches in prop::collection::vec(arb_batch(), 20..90),
    ) {
        let mut f = Fixture::new();
        let t0 = f.t0;
        let mut seqs = [0i32; 2];
        for (recs, codec, producer) in &batches {
            let fields = producer.checked_sub(1).map(|p| {
                let (id, epoch) = PRODUCERS[p];
                let seq = seqs[p];
                seqs[p] += recs.len() as i32;
                (id, epoch, seq)
            });
            f.append(recs, t0, *codec, fields);
        }
        f.clean_and_check(t0);
        // Later rounds need a dirty segment: a record of a key of its own, then a roll.
        for (i, now) in [t0 + RETENTION_MS - 1, t0 + RETENTION_MS].into_iter().enumerate() {
            f.roll();
            f.append(&[(100 + i as u8, Some(b"filler".to_vec()))], now, 0, None);
            f.roll();
            f.clean_and_check(now);
        }
        // A reopen with full recovery (no clean shutdown) reads the same table.
        let before = read_back(&f.log.lock()).0;
        let Fixture { dir, log, .. } = f;
        drop(log);
        let l = Log::open(dir.path(), tp(), log_config(), LoadParams::default()).unwrap();
        prop_assert_eq!(read_back(&l).0, before);
    }
}

#[test]
fn a_key_updated_many_times_keeps_only_its_latest_value_at_its_original_offset() {
    let mut f = Fixture::new();
    for i in 0..300u32 {
        f.append(
            &[(1, Some(i.to_be_bytes().to_vec()))],
            f.t0,
            (i % 5) as u8,
            None,
        );
    }
    f.clean_and_check(f.t0);
    // Groups are made by the segments' sizes before cleaning (Kafka's groupSegmentsBySize): the
    // next round finds small cleaned segments and merges them.
    let segments_before = f.log.lock().num_segments();
    f.roll();
    f.append(&[(2, Some(b"other".to_vec()))], f.t0, 0, None);
    f.roll();
    f.clean_and_check(f.t0);
    let l = f.log.lock();
    assert!(
        l.num_segments() < segments_before,
        "small cleaned segments are grouped: {} then {}",
        segments_before,
        l.num_segments()
    );
    let (recs, _) = read_back(&l);
    let active_base = l.cleaning_view().active_base();
    let key1: Vec<_> = recs
        .iter()
        .filter(|r| r.0 < active_base && r.1 == b"key-1")
        .collect();
    assert_eq!(key1.len(), 1, "{key1:?}");
    assert_eq!(key1[0].0, 299, "the latest update keeps its offset");
    assert_eq!(key1[0].2, Some(299u32.to_be_bytes().to_vec()));
}

/// Builds a log of small segments (rolled every 3 appends, so that the first cleaning groups
/// several into one), copies its directory, cleans the original, and returns (the copy before
/// cleaning, the cleaned directory).
fn cleaned_and_uncleaned() -> (tempfile::TempDir, tempfile::TempDir) {
    let mut f = Fixture::new();
    for i in 0..200u32 {
        if i > 0 && i % 3 == 0 {
            f.roll();
        }
        f.append(&[((i % 3) as u8, Some(vec![b'v'; 50]))], f.t0, 0, None);
    }
    f.log.lock().close().unwrap();
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(f.path()).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
    }
    assert!(f.clean_once(&f.default_cleaner(), f.t0));
    f.log.lock().close().unwrap();
    (copy, f.dir)
}

/// What a broker restarting on `dir` serves: every record from the log start, the log start
/// offset and the segments' base offsets.
fn loaded(dir: &Path) -> (Vec<ReadRecord>, i64, Vec<i64>) {
    let l = Log::open(dir, tp(), log_config(), LoadParams::default()).unwrap();
    let bases = l.segments().map(|s| s.base_offset()).collect();
    (read_back(&l).0, l.log_start_offset(), bases)
}

fn segment_files(dir: &Path, base: i64, suffix: &str) -> Vec<std::path::PathBuf> {
    [".log", ".index", ".timeindex"]
        .iter()
        .map(|s| dir.join(format!("{base:020}{s}{suffix}")))
        .collect()
}

fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect()
}

#[test]
fn a_swap_cut_short_after_the_swap_files_are_complete_is_finished_at_load() {
    let (old, new) = cleaned_and_uncleaned();
    let (new_records, _, new_bases) = loaded(new.path());
    let (old_records, _, old_bases) = loaded(old.path());
    // The first cleaned segment replaced every old segment below the next cleaned one.
    let end = new_bases[1];
    let replaced: Vec<i64> = old_bases.iter().copied().filter(|b| *b < end).collect();
    assert!(
        replaced.len() >= 3,
        "the first group is several segments: {replaced:?}"
    );
    // The state between Kafka's two renames: the cleaned segment as `.swap`, the first old
    // segment already `.deleted`, the other old segments of its range still there.
    for (from, to) in
        segment_files(new.path(), 0, "")
            .iter()
            .zip(segment_files(old.path(), 0, ".swap"))
    {
        std::fs::copy(from, to).unwrap();
    }
    for f in segment_files(old.path(), 0, "") {
        std::fs::rename(&f, format!("{}.deleted", f.display())).unwrap();
    }
    let (records, log_start, bases) = loaded(old.path());
    // Finished: the cleaned segment's records below `end`, the old ones from `end` on.
    let expected: Vec<ReadRecord> = new_records
        .iter()
        .filter(|r| r.0 < end)
        .chain(old_records.iter().filter(|r| r.0 >= end))
        .cloned()
        .collect();
    assert!(
        expected.len() < old_records.len(),
        "the cleaned segment holds fewer records than the ones it replaced"
    );
    assert_eq!(
        records, expected,
        "the swap's segment is served in place of the old ones"
    );
    assert_eq!(log_start, 0, "no gap at the start of the log");
    let expected_bases: Vec<i64> = std::iter::once(0)
        .chain(old_bases.iter().copied().filter(|b| *b >= end))
        .collect();
    assert_eq!(bases, expected_bases, "one segment where the group was");
    let names = file_names(old.path());
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".swap") || n.ends_with(".deleted")),
        "{names:?}"
    );
}

#[test]
fn a_swap_whose_renames_were_cut_short_is_discarded_and_the_old_segments_stay() {
    let (old, new) = cleaned_and_uncleaned();
    let before = loaded(old.path());
    // `.log` renamed to `.swap`, its indexes still `.cleaned`: the swap never completed.
    let targets = [
        old.path().join(format!("{:020}.log.swap", 0)),
        old.path().join(format!("{:020}.index.cleaned", 0)),
        old.path().join(format!("{:020}.timeindex.cleaned", 0)),
    ];
    for (from, to) in segment_files(new.path(), 0, "").iter().zip(targets) {
        std::fs::copy(from, to).unwrap();
    }
    let cleaned = loaded(new.path());
    assert_ne!(cleaned.0, before.0, "cleaning changed the records");
    let after = loaded(old.path());
    assert_eq!(
        after, before,
        "the old, uncleaned segments are served as they were"
    );
    let names = file_names(old.path());
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".swap") || n.ends_with(".cleaned")),
        "{names:?}"
    );
}

#[test]
fn a_round_is_reported_with_kafkas_figures() {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    let stats = clean::CleanerStats {
        start,
        index_done: Some(start + Duration::from_millis(500)),
        end: Some(start + Duration::from_secs(2)),
        bytes_read: 100 * 1024 * 1024,
        bytes_written: 25 * 1024 * 1024,
        map_bytes_read: 50 * 1024 * 1024,
        map_messages_read: 1000,
        messages_read: 4000,
        invalid_messages_read: 0,
        messages_written: 1000,
        buffer_utilization: 0.125,
    };
    assert!((stats.elapsed_index_secs() - 0.5).abs() < 1e-9);
    let r = stats.report(&tp(), 7, 4007);
    assert!(
        r.starts_with("cleaned log compacted-0 (dirty section = [7, 4007]): "),
        "{r}"
    );
    for part in [
        "100.0 MB of log processed in 2.000 seconds (50.0 MB/sec)",
        "indexed 50.0 MB in 0.500 seconds (100.0 MB/sec, 25.0% of total time)",
        "buffer utilization: 12.5%",
        "cleaned 100.0 MB in 1.500 seconds (66.7 MB/sec, 75.0% of total time)",
        "start size: 100.0 MB (4000 messages); end size: 25.0 MB (1000 messages)",
        "75.0% size reduction (75.0% fewer messages)",
    ] {
        assert!(r.contains(part), "{part:?} not in {r}");
    }
    // A round that read nothing reports zeros, not NaN.
    let empty = clean::CleanerStats {
        end: Some(start),
        ..clean::CleanerStats::default()
    };
    let r = empty.report(&tp(), 0, 0);
    assert!(
        !r.contains("NaN") && r.contains("0.0% size reduction"),
        "{r}"
    );
}

/// Appends one single-record batch of key `k` at `ts` for each of `keys`, rolling every
/// `per_segment` batches, then rolls (so that all of it is in closed segments).
fn fill(log: &LogRef, model: &mut Model, keys: &[u8], ts: i64, per_segment: usize) {
    for (i, k) in keys.iter().enumerate() {
        if i > 0 && i % per_segment == 0 {
            log.lock().roll(0).unwrap();
        }
        let value = format!("{k}@{}", model.records.len()).into_bytes();
        append(log, model, &[(*k, Some(value))], ts, 0, None);
    }
    log.lock().roll(0).unwrap();
}

/// key → (offset, value) of a reader from the start: the last record of each key.
fn consumer_table(l: &Log) -> BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
    let mut t = BTreeMap::new();
    for (o, k, v) in read_back(l).0 {
        t.insert(k, (o, v));
    }
    t
}

impl Model {
    /// The table a reader from the start should build: each key's latest record.
    fn table(&self) -> BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
        let mut t = BTreeMap::new();
        for (o, (k, v)) in &self.records {
            t.insert(k.clone(), (*o, v.clone()));
        }
        t
    }
}

/// The `.log` bytes of each closed segment based at or above `from`.
fn closed_segment_bytes(l: &Log, from: i64) -> Vec<(i64, Vec<u8>)> {
    let active = l.cleaning_view().active_base();
    l.segments()
        .filter(|s| s.base_offset() >= from && s.base_offset() < active)
        .map(|s| (s.base_offset(), std::fs::read(s.log_path()).unwrap()))
        .collect()
}

/// Keys of the records below `end`, in offset order.
fn keys_below(l: &Log, end: i64) -> Vec<Vec<u8>> {
    read_back(l)
        .0
        .into_iter()
        .filter(|r| r.0 < end)
        .map(|r| r.1)
        .collect()
}

fn assert_each_key_once(keys: &[Vec<u8>]) {
    let distinct: std::collections::BTreeSet<&Vec<u8>> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "a key twice in {keys:?}");
}

#[test]
fn a_segment_younger_than_min_compaction_lag_is_not_cleaned() {
    let mut f = Fixture::with(LogConfig {
        min_compaction_lag_ms: 60_000,
        ..log_config()
    });
    let keys: Vec<u8> = (0..60).map(|i| i % 3).collect();
    f.fill_at(&keys, f.t0 - 120_000, 5);
    let young_base = f.log.lock().log_end_offset();
    f.fill(&keys[..30], 5);
    let young_before = closed_segment_bytes(&f.log.lock(), young_base);
    assert_eq!(young_before.len(), 6);
    let cleaner = f.default_cleaner();
    assert!(f.clean_once(&cleaner, f.t0));
    let l = f.log.lock();
    assert_eq!(
        closed_segment_bytes(&l, young_base),
        young_before,
        "segments younger than the lag are left as they were"
    );
    assert_each_key_once(&keys_below(&l, young_base));
    assert_eq!(keys_below(&l, young_base).len(), 3);
    assert_eq!(cleaner.checkpointed(&tp()), Some(young_base));
    assert_eq!(consumer_table(&l), f.model.table());
}

#[test]
fn a_log_below_its_dirty_ratio_is_cleaned_once_its_oldest_dirty_record_passes_max_compaction_lag() {
    let mut f = Fixture::with(LogConfig {
        // A ratio no log exceeds: only the lag can get this log cleaned.
        min_cleanable_dirty_ratio: Ratio(1.0),
        max_compaction_lag_ms: 60_000,
        ..log_config()
    });
    let keys: Vec<u8> = (0..40).map(|i| i % 4).collect();
    f.fill(&keys, 5);
    let end = f.log.lock().log_end_offset();
    let cleaner = f.default_cleaner();
    assert!(!f.clean_once(&cleaner, f.t0 + 30_000));
    assert_eq!(
        keys_below(&f.log.lock(), end).len(),
        40,
        "not cleaned before the lag"
    );
    assert_eq!(cleaner.metrics().max_compaction_delay_secs, 0);
    assert!(f.clean_once(&cleaner, f.t0 + 61_000));
    assert_eq!(
        cleaner.metrics().max_compaction_delay_secs,
        1,
        "the oldest dirty batch was 1 s past the lag when the log was chosen"
    );
    let l = f.log.lock();
    assert_eq!(keys_below(&l, end).len(), 4);
    assert_eq!(consumer_table(&l), f.model.table());
}

#[test]
fn a_round_is_held_to_log_cleaner_io_max_bytes_per_second() {
    let mut f = Fixture::new();
    let keys: Vec<u8> = (0..150).map(|i| i % 5).collect();
    f.fill(&keys, 10);
    // A round reads the closed segments at least twice (the offset map, then the copy): at
    // one read a second that is 2 s at the least.
    let cleaner = f.throttled_cleaner(1.0);
    let start = std::time::Instant::now();
    assert!(f.clean_once(&cleaner, f.t0));
    let took = start.elapsed();
    let closed = f.closed_bytes();
    assert!(
        took >= std::time::Duration::from_millis(1500),
        "{closed} bytes read twice at {closed} bytes/s took {took:?}"
    );
    assert_eq!(consumer_table(&f.log.lock()), f.model.table());
}

/// Two logs, partitions 0 and 1 of the compacted topic, written at the same time.
fn two_logs() -> (Fixture, Fixture) {
    let a = Fixture::new();
    let mut b = Fixture::of(TopicPartition::new("compacted", 1), log_config());
    b.t0 = a.t0;
    (a, b)
}

#[test]
fn two_cleaner_threads_clean_two_logs_and_never_take_the_same_one() {
    let (mut a, mut b) = two_logs();
    let t0 = a.t0;
    let keys: Vec<u8> = (0..60).map(|i| i % 6).collect();
    a.fill(&keys, 10);
    b.fill(&keys, 10);
    let logs = vec![a.entry(), b.entry()];
    let cleaner = a.cleaner(CleanerConfig {
        num_threads: 2,
        backoff_ms: 10,
        ..CleanerConfig::default()
    });
    // A log being cleaned is not handed to another thread.
    let m = &cleaner.manager;
    let first = m.grab_filthiest_compacted_log(&logs, t0).unwrap().unwrap();
    let second = m.grab_filthiest_compacted_log(&logs, t0).unwrap().unwrap();
    assert_ne!(first.tp, second.tp);
    assert!(m.grab_filthiest_compacted_log(&logs, t0).unwrap().is_none());
    m.aborted(&first.tp);
    m.aborted(&second.tp);
    // Two threads over both logs clean both.
    let source = logs.clone();
    cleaner.start(Arc::new(move || Some(source.clone())));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while logs
        .iter()
        .any(|(tp, _)| cleaner.checkpointed(tp).is_none())
    {
        assert!(std::time::Instant::now() < deadline, "not both cleaned");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(cleaner.threads.lock().unwrap().len(), 2);
    cleaner.shutdown();
    for f in [&a, &b] {
        let l = f.log.lock();
        let active = l.cleaning_view().active_base();
        assert_each_key_once(&keys_below(&l, active));
        assert_eq!(keys_below(&l, active).len(), 6, "{}", f.tp);
        assert_eq!(consumer_table(&l), f.model.table());
    }
}

#[test]
fn the_dirtiest_log_is_cleaned_first() {
    let (mut a, mut b) = two_logs();
    let t0 = a.t0;
    let keys: Vec<u8> = (0..60).map(|i| i % 6).collect();
    let cleaner = a.default_cleaner();
    a.fill(&keys, 10);
    // `b`: a log as large, cleaned once, then a little more written: its dirty share is smaller.
    b.fill(&keys, 10);
    assert!(b.clean_once(&cleaner, t0));
    b.fill(&keys[..10], 10);
    let m = &cleaner.manager;
    for order in [[a.entry(), b.entry()], [b.entry(), a.entry()]] {
        let got = m.grab_filthiest_compacted_log(&order, t0).unwrap().unwrap();
        assert_eq!(got.tp, a.tp, "ratio {}", got.cleanable_ratio);
        assert_eq!(cleaner.metrics().max_dirty_percent, 100, "`a` is all dirty");
        // With `a` in hand, the next thread gets `b`, the less dirty.
        let next = m.grab_filthiest_compacted_log(&order, t0).unwrap().unwrap();
        assert_eq!(next.tp, b.tp);
        assert!(next.cleanable_ratio < got.cleanable_ratio);
        m.aborted(&a.tp);
        m.aborted(&b.tp);
    }
}

#[test]
fn compact_delete_logs_lose_old_segments_to_retention_and_duplicates_to_cleaning() {
    let mut f = Fixture::with(LogConfig {
        cleanup_policy: "compact,delete".into(),
        retention_ms: 60_000,
        ..log_config()
    });
    // Old: keys 0..3 and 9, past retention. New: keys 0..3, each several times.
    let old: Vec<u8> = (0..20).map(|i| if i == 19 { 9 } else { i % 3 }).collect();
    f.fill_at(&old, f.t0 - 120_000, 5);
    let new_base = f.log.lock().log_end_offset();
    let keys: Vec<u8> = (0..30).map(|i| i % 3).collect();
    f.fill(&keys, 5);
    let deleted = f.log.lock().delete_old_segments(f.t0).unwrap();
    assert_eq!(deleted, 4, "the old segments went by retention");
    assert_eq!(f.log.lock().log_start_offset(), new_base);
    assert!(f.clean_once(&f.default_cleaner(), f.t0));
    let l = f.log.lock();
    let active = l.cleaning_view().active_base();
    let left = keys_below(&l, active);
    assert_each_key_once(&left);
    assert_eq!(
        left.len(),
        3,
        "key 9 went with its segment, the others keep one record"
    );
    let expected: BTreeMap<_, _> = f
        .model
        .table()
        .into_iter()
        .filter(|(_, (o, _))| *o >= new_base)
        .collect();
    assert_eq!(consumer_table(&l), expected);
}

#[test]
fn a_full_offset_map_cleans_part_of_the_dirty_section_and_the_next_round_the_rest() {
    let mut f = Fixture::new();
    // Keys 0..9 ten times (offsets 0..99), keys 10..29 once (100..119), keys 0..9 again.
    let mut keys: Vec<u8> = (0..100).map(|i| i % 10).collect();
    keys.extend(10..30);
    keys.extend(0..10);
    f.fill(&keys, 10);
    let active = f.log.lock().cleaning_view().active_base();
    // 30 slots at a load factor of 0.9: the map holds 27 keys, 0..26, up to offset 116.
    let cleaner = f.cleaner(CleanerConfig {
        dedupe_buffer_size: 30 * 24,
        ..CleanerConfig::default()
    });
    assert!(f.clean_once(&cleaner, f.t0));
    assert_eq!(cleaner.checkpointed(&tp()), Some(117), "the map's end");
    {
        let l = f.log.lock();
        let below = keys_below(&l, 117);
        assert_each_key_once(&below);
        assert_eq!(below.len(), 27);
        assert_eq!(
            keys_below(&l, active).len(),
            27 + 13,
            "from 117 on: as written"
        );
        assert_eq!(consumer_table(&l), f.model.table());
    }
    assert!(f.clean_once(&cleaner, f.t0));
    assert_eq!(cleaner.checkpointed(&tp()), Some(active));
    let l = f.log.lock();
    assert_each_key_once(&keys_below(&l, active));
    assert_eq!(keys_below(&l, active).len(), 30);
    check_against_model(&l, &f.model, f.t0, active);
    check_indexes(&l);
}

#[test]
fn time_since_last_run_grows_until_the_cleaner_looks_again() {
    let mut f = Fixture::new();
    f.fill(&[1, 1, 2, 2], 2);
    let cleaner = f.default_cleaner();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = cleaner.metrics().time_since_last_run_ms;
    assert!(before >= 300, "{before}");
    let run_started = std::time::Instant::now();
    assert!(f.clean_once(&cleaner, now_ms()));
    let after = cleaner.metrics().time_since_last_run_ms;
    // Without a reset the gauge would read at least `before` plus the time since the run began;
    // with one it is at most the time since the run began (a loaded CI machine stretches both).
    let since_run = run_started.elapsed().as_millis() as i64 + 1;
    assert!(
        (0..=since_run).contains(&after),
        "{after} ms after a run that began {since_run} ms ago"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let later = cleaner.metrics().time_since_last_run_ms;
    assert!(later >= after + 300, "{after} then {later}");
    let recopy = cleaner.metrics().cleaner_recopy_percent;
    assert!((1..100).contains(&recopy), "{recopy}");
}

#[test]
fn a_swap_that_fails_midway_leaves_the_log_whole_in_memory_and_is_finished_at_load() {
    let mut f = Fixture::new();
    let keys: Vec<u8> = (0..60).map(|i| i % 3).collect();
    f.fill(&keys, 3);
    let bases: Vec<i64> = f.log.lock().segments().map(|s| s.base_offset()).collect();
    // The rename of the second segment to `.deleted` fails (a directory holds its name).
    let blocker = f.path().join(format!("{:020}.log.deleted", bases[1]));
    std::fs::create_dir(&blocker).unwrap();
    std::fs::write(blocker.join("x"), b"x").unwrap();
    let cleaner = f.default_cleaner();
    assert!(!f.clean_once(&cleaner, f.t0));
    assert_eq!(cleaner.metrics().uncleanable_partitions_count, 1);
    {
        let l = f.log.lock();
        let now: Vec<i64> = l.segments().map(|s| s.base_offset()).collect();
        assert!(
            now.len() < bases.len(),
            "the cleaned segment replaced its group: {now:?}"
        );
        assert!(
            !now.contains(&bases[2]),
            "no old segment of the group is left beside the new one: {now:?}"
        );
        let recs = read_back(&l).0;
        assert!(recs.windows(2).all(|w| w[0].0 < w[1].0), "offsets go back");
        assert_eq!(consumer_table(&l), f.model.table());
        check_indexes(&l);
    }
    let served = read_back(&f.log.lock()).0;
    let Fixture { dir, log, .. } = f;
    drop(log);
    std::fs::remove_dir_all(&blocker).unwrap();
    let (records, start, _) = loaded(dir.path());
    assert_eq!(
        records, served,
        "the load finishes the swap: the same records"
    );
    assert_eq!(start, 0);
}

#[test]
fn the_producers_last_batches_come_from_the_producer_state_when_the_log_has_one() {
    let mut f = Fixture::new();
    let t0 = f.t0;
    // Two batches of the producer, both overwritten later by keyless-producer batches.
    let (id, epoch) = PRODUCERS[0];
    f.append(&[(1, Some(b"a".to_vec()))], t0, 0, Some((id, epoch, 0)));
    f.append(&[(2, Some(b"b".to_vec()))], t0, 0, Some((id, epoch, 1)));
    let keys: Vec<u8> = (0..20).map(|i| 1 + i % 2).collect();
    f.fill(&keys, 5);
    // The producer state says the first batch is the producer's last (a scan would say the
    // second): the cleaner believes it.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    f.log
        .lock()
        .set_producer_last_batches(Some(Arc::new(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let last = crate::storage::log::LastBatch {
                last_offset: 0,
                timestamp: t0,
            };
            Some(std::collections::HashMap::from([(PRODUCER, last)]))
        })));
    assert!(f.clean_once(&f.default_cleaner(), t0));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (_, headers) = read_back(&f.log.lock());
    let kept: Vec<i64> = headers
        .iter()
        .filter(|h| h.producer_id == PRODUCER)
        .map(|h| h.base_offset)
        .collect();
    assert_eq!(
        kept,
        [0],
        "the batch the producer state names is kept, empty"
    );
}

/// A LogManager on a temporary directory whose cleaner is held to `rate` bytes a second,
/// holding the compacted partition `tp()` filled with `keys` (ten batches a segment), and the
/// cleaner handed out by the manager.
struct Managed {
    root: tempfile::TempDir,
    mgr: Arc<crate::storage::LogManager>,
    cleaner: Arc<LogCleaner>,
    config: LogConfig,
    t0: i64,
}

impl Managed {
    /// The partition's producer state says it has no producers, as a partition's would, so
    /// that a round reads each segment twice: for the offset map, then to clean it.
    fn new(rate: f64, config: LogConfig, keys: &[u8]) -> Managed {
        let root = tempfile::tempdir().unwrap();
        let mut mc = crate::storage::LogManagerConfig::new(root.path(), config.clone());
        mc.cleaner = CleanerConfig {
            max_io_bytes_per_second: rate,
            ..CleanerConfig::default()
        };
        let mgr = crate::storage::LogManager::open(mc).unwrap();
        let log = mgr
            .get_or_create_log(&tp(), None, Some(config.clone()))
            .unwrap();
        log.lock()
            .set_producer_last_batches(Some(Arc::new(|| Some(Default::default()))));
        let t0 = now_ms();
        fill(&log, &mut Model::default(), keys, t0, 10);
        let cleaner = mgr.cleaner().unwrap().clone();
        Managed {
            root,
            mgr,
            cleaner,
            config,
            t0,
        }
    }

    /// The cleaner cleaning the manager's logs once on another thread, returned once the
    /// cleaning began.
    fn clean_in_background(&self) -> std::thread::JoinHandle<bool> {
        let worker = {
            let (c, logs, t0) = (self.cleaner.clone(), self.mgr.all_logs(), self.t0);
            std::thread::spawn(move || c.clean_once(&logs, t0))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.cleaner.manager.is_cleaning(&tp()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the cleaning did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        worker
    }

    /// `LogManager::delete_log` of the partition, and how long it took.
    fn delete(&self) -> std::time::Duration {
        let start = std::time::Instant::now();
        assert!(self.mgr.delete_log(&tp()).unwrap());
        start.elapsed()
    }

    /// The cleaning `worker` was aborted and the cleaner forgot the partition.
    fn assert_forgotten(&self, worker: std::thread::JoinHandle<bool>) {
        assert!(
            !self.cleaner.manager.is_cleaning(&tp()),
            "delete_log waits for the cleaning to stop"
        );
        assert!(!worker.join().unwrap());
        assert_eq!(self.cleaner.metrics().uncleanable_partitions_count, 0);
        assert_eq!(self.cleaner.checkpointed(&tp()), None);
    }
}

/// The bytes `fill` writes into closed segments for `keys`, ten batches a segment.
fn bytes_filled(keys: &[u8]) -> u64 {
    let mut probe = Fixture::new();
    probe.fill(keys, 10);
    probe.closed_bytes()
}

fn names_ending(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names = file_names(dir);
    names.retain(|n| n.ends_with(suffix));
    names
}

#[test]
fn a_partition_deleted_while_it_is_cleaned_has_its_cleaning_aborted_before_its_directory_moves() {
    use crate::storage::segment::CLEANED_SUFFIX;
    let keys: Vec<u8> = (0..200).map(|i| i % 4).collect();
    // About 1.5 s for the offset map, as long again to write the cleaned segment; one group
    // (segments of 64 KiB), and the deleted directory kept for a look.
    let m = Managed::new(
        bytes_filled(&keys) as f64 / 1.5,
        LogConfig {
            segment_bytes: 64 * 1024,
            file_delete_delay_ms: 60_000,
            ..log_config()
        },
        &keys,
    );
    let worker = m.clean_in_background();
    // Delete while the cleaned segment is being written into the partition's directory.
    let pdir = m.root.path().join(tp().dir_name());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while names_ending(&pdir, CLEANED_SUFFIX).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no cleaned segment was begun"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let took = m.delete();
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    let moved: Vec<String> = names_ending(m.root.path(), "-delete");
    assert_eq!(moved.len(), 1, "{moved:?}");
    let left = names_ending(&m.root.path().join(&moved[0]), CLEANED_SUFFIX);
    assert!(
        left.is_empty(),
        "the aborted cleaning removed its files before the directory moved: {left:?}"
    );
    m.assert_forgotten(worker);
    // A partition of the same name, created again, is cleaned like any other.
    let again = m
        .mgr
        .get_or_create_log(&tp(), None, Some(m.config.clone()))
        .unwrap();
    fill(&again, &mut Model::default(), &[1, 1, 2, 2], m.t0, 2);
    assert!(m.cleaner.clean_once(&[(tp(), again.clone())], m.t0));
    assert!(m.cleaner.checkpointed(&tp()).is_some());
}

#[test]
fn a_partition_deleted_while_its_cleaning_sleeps_in_the_throttle_is_deleted_at_once() {
    let keys: Vec<u8> = (0..200).map(|i| i % 4).collect();
    // 100 bytes a second: the first segment's read alone asks for seconds of sleep.
    let rate = 100.0;
    let round_secs = 2.0 * bytes_filled(&keys) as f64 / rate;
    assert!(round_secs > 20.0, "a round would take {round_secs} s");
    let m = Managed::new(rate, log_config(), &keys);
    let worker = m.clean_in_background();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let took = m.delete();
    assert!(
        took < std::time::Duration::from_secs(2),
        "delete_log waited {took:?} for the throttled cleaning"
    );
    m.assert_forgotten(worker);
}
