//! Crash safety of log compaction, black-box: a real broker with small segments and a cleaner
//! that runs every few milliseconds takes keyed updates from a producer and is killed with
//! SIGKILL at random moments, over and over, on the same data directory. After each kill the
//! partition is loaded from disk and must read back a table in which every acknowledged update
//! (or a later one of its key) is present, offsets only increase, and both indexes agree with a
//! scan; then the broker restarts on it. `EVENKEEL_CRASH_SEED` repeats a run.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::BrokerProcess;
use evenkeel::client::AdminClient;
use evenkeel::config::{LogConfig, Ratio};
use evenkeel::storage::batch::{self, Record};
use evenkeel::storage::{LoadParams, Log, TopicPartition};
use rand::{Rng, SeedableRng};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

const TOPIC: &str = "compacted-crash";
/// Kills in a run; `EVENKEEL_CRASH_KILLS` may ask for more (or fewer, to try a change quickly).
const KILLS: usize = 50;
const KEYS: u32 = 40;

/// The broker: a cleaner that backs off 10 ms, `.deleted` files that go after 100 ms, and a
/// short broker session, so a restarted broker need not wait long for its killed self's to end.
const BROKER_OVERRIDES: &[&str] = &[
    "broker.session.timeout.ms=2000",
    "broker.heartbeat.interval.ms=200",
    "log.cleaner.backoff.ms=10",
    "log.cleaner.dedupe.buffer.size=4194304",
    "log.segment.delete.delay.ms=100",
    "group.initial.rebalance.delay.ms=0",
];

fn topic_configs() -> BTreeMap<String, String> {
    [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "6000"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("index.interval.bytes", "500"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The latest acknowledged update of each key: (sequence, offset).
type Acked = Arc<Mutex<BTreeMap<u32, (u64, i64)>>>;

fn value(key: u32, seq: u64) -> String {
    format!("{key}:{seq}:{}", "u".repeat((seq % 90) as usize))
}

/// Produces updates of random keys until `stop`, recording each acknowledged one.
fn produce(
    bootstrap: String,
    acked: Acked,
    stop: Arc<AtomicBool>,
    seed: u64,
    first_seq: u64,
) -> u64 {
    let p: FutureProducer = common::producer(
        &bootstrap,
        &[
            ("acks", "all"),
            ("linger.ms", "2"),
            ("message.timeout.ms", "1000"),
        ],
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seq = first_seq;
    while !stop.load(Ordering::SeqCst) {
        let mut pending = Vec::new();
        for _ in 0..rng.gen_range(1..40) {
            let key = rng.gen_range(0..KEYS);
            let k = key.to_string();
            let v = value(key, seq);
            let rec = FutureRecord::to(TOPIC).key(&k).payload(&v).partition(0);
            match p.send_result(rec) {
                Ok(f) => pending.push((key, seq, f)),
                Err(_) => break,
            }
            seq += 1;
        }
        for (key, s, f) in pending {
            if let Ok(Ok(d)) = futures::executor::block_on(f) {
                let mut a = acked.lock().unwrap();
                let e = a.entry(key).or_insert((s, d.offset));
                if s >= e.0 {
                    *e = (s, d.offset);
                }
            }
        }
    }
    p.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    seq
}

fn partition_dir(data: &Path) -> PathBuf {
    data.join("broker-1").join(format!("{TOPIC}-0"))
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 6000,
        index_interval_bytes: 500,
        cleanup_policy: "compact".into(),
        min_cleanable_dirty_ratio: Ratio(0.01),
        ..LogConfig::default()
    }
}

/// Loads the partition as a restarting broker would and checks it; returns its table
/// (key → (sequence, offset)) and whether the kill left cleaning files behind.
fn verify_on_disk(
    pdir: &Path,
    acked: &BTreeMap<u32, (u64, i64)>,
) -> (BTreeMap<u32, (u64, i64)>, bool) {
    let leftovers = std::fs::read_dir(pdir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.ends_with(".cleaned") || n.ends_with(".swap")
        });
    let tp = TopicPartition::new(TOPIC, 0);
    let log = Log::open(pdir, tp, log_config(), LoadParams::default()).expect("the log loads");
    let after: Vec<String> = std::fs::read_dir(pdir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect();
    assert!(after.is_empty(), "loading left {after:?}");
    let table = table_of(&log);
    for (key, (seq, offset)) in acked {
        let (got_seq, got_offset) = table
            .get(key)
            .unwrap_or_else(|| panic!("key {key}: acknowledged update {seq} at {offset} is lost"));
        assert!(
            *got_seq >= *seq && *got_offset >= *offset,
            "key {key}: acknowledged update {seq} at {offset}, the log has {got_seq} at {got_offset}"
        );
    }
    check_indexes(&log);
    (table, leftovers)
}

/// Reads every batch from the log start: offsets grow, each value belongs to its key.
fn table_of(log: &Log) -> BTreeMap<u32, (u64, i64)> {
    let mut table = BTreeMap::new();
    let (mut at, mut last) = (log.log_start_offset(), -1i64);
    while at < log.log_end_offset() {
        let data = log.read(at, 1 << 20, None, true).unwrap();
        assert!(!data.is_empty(), "no progress at {at}");
        for info in batch::validate_stored_batches(&data).expect("whole valid batches") {
            let b = &data[info.position..info.position + info.header.size()];
            let section = batch::records_section(b).unwrap();
            let mut rest: &[u8] = &section;
            while !rest.is_empty() {
                let r = Record::parse(&mut rest).expect("a well-formed record");
                let offset = info.header.base_offset + r.offset_delta as i64;
                assert!(offset > last, "offset {offset} after {last}");
                last = offset;
                let key: u32 = std::str::from_utf8(r.key.unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                let v = std::str::from_utf8(r.value.unwrap()).unwrap();
                let mut parts = v.split(':');
                assert_eq!(
                    parts.next(),
                    Some(key.to_string().as_str()),
                    "value {v} under key {key}"
                );
                let seq: u64 = parts.next().unwrap().parse().unwrap();
                assert_eq!(v, value(key, seq));
                table.insert(key, (seq, offset));
            }
            at = info.header.next_offset();
        }
    }
    table
}

/// Each offset index entry points at a batch start ending at its offset; each time index entry
/// names a batch's last offset; lookups find every batch.
fn check_indexes(log: &Log) {
    for seg in log.segments() {
        let bad = seg.index_mismatches().expect("a readable segment");
        assert!(bad.is_empty(), "{}: {bad:?}", seg.log_path().display());
    }
}

fn create_topic(bootstrap: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let a = AdminClient::connect(bootstrap, Duration::from_secs(20))
            .await
            .unwrap();
        a.create_topic(TOPIC, 1, 1, &topic_configs()).await.unwrap();
    });
}

#[test]
fn sigkill_while_the_cleaner_works_leaves_the_old_or_the_new_segments_and_loses_no_update() {
    let seed: u64 = std::env::var("EVENKEEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("compaction crash test seed {seed} (set EVENKEEL_CRASH_SEED to repeat)");
    let kills: usize = std::env::var("EVENKEEL_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(KILLS);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = tempfile::tempdir().unwrap();
    let acked: Acked = Arc::default();
    let (mut seq, mut mid_clean, mut segments_seen) = (0u64, 0, 0usize);
    for round in 0..kills {
        let t = Instant::now();
        let mut broker = BrokerProcess::start_in(data.path(), BROKER_OVERRIDES);
        eprintln!("round {round}: broker up in {:?}", t.elapsed());
        if round == 0 {
            create_topic(&broker.bootstrap);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (b, a, s, sd) = (
                broker.bootstrap.clone(),
                acked.clone(),
                stop.clone(),
                rng.gen(),
            );
            std::thread::spawn(move || produce(b, a, s, sd, seq))
        };
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..1500)));
        broker.kill();
        stop.store(true, Ordering::SeqCst);
        seq = producer.join().unwrap();
        eprintln!(
            "round {round}: producer done at {:?}, seq {seq}",
            t.elapsed()
        );
        let pdir = partition_dir(data.path());
        let snapshot = acked.lock().unwrap().clone();
        let (table, leftovers) = verify_on_disk(&pdir, &snapshot);
        mid_clean += leftovers as usize;
        segments_seen = segments_seen.max(std::fs::read_dir(&pdir).unwrap().count());
        assert!(table.len() as u32 <= KEYS);
    }
    eprintln!("{kills} kills, {mid_clean} left cleaning files behind; up to {segments_seen} files in the partition");
    assert!(seq > 0, "the producer wrote nothing");
    // The broker itself serves the table after a last restart.
    let expected = acked.lock().unwrap().clone();
    check_served_table(data.path(), &expected, seq);
}

/// Restarts the broker on `data` and reads the partition from the start with librdkafka: every
/// acknowledged update (or a later one) is there, and far fewer records than `seq` updates.
fn check_served_table(data: &Path, expected: &BTreeMap<u32, (u64, i64)>, seq: u64) {
    let broker = BrokerProcess::start_in(data, BROKER_OVERRIDES);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (got, read) = loop {
        let recs = common::read_all(
            &broker.bootstrap,
            TOPIC,
            1,
            usize::MAX,
            Duration::from_secs(3),
        );
        let (mut t, read) = (BTreeMap::new(), recs.len());
        for (_, offset, key, v) in recs {
            let key: u32 = String::from_utf8(key.unwrap()).unwrap().parse().unwrap();
            let seq: u64 = String::from_utf8(v)
                .unwrap()
                .split(':')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            t.insert(key, (seq, offset));
        }
        if expected
            .iter()
            .all(|(k, (s, _))| t.get(k).is_some_and(|(g, _)| g >= s))
            || Instant::now() > deadline
        {
            break (t, read);
        }
    };
    assert!(
        (read as u64) * 2 < seq,
        "{read} records left of {seq} updates: the cleaner did not clean"
    );
    for (k, (s, o)) in expected {
        let (g, go) = got
            .get(k)
            .unwrap_or_else(|| panic!("key {k} missing from the consumer's table"));
        assert!(
            g >= s && go >= o,
            "key {k}: acked {s} at {o}, consumer read {g} at {go}"
        );
    }
}
