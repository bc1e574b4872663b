//! Log compaction in a running broker, black-box: a compacted topic and `__consumer_offsets` are
//! cleaned by the broker's own LogCleaner, and its gauges are served under Kafka's names with
//! the values of what it did.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

/// A cleaner that looks every 50 ms and takes any log with a dirty byte.
const CLEANER: &[&str] = &[
    "log.cleaner.backoff.ms=50",
    "log.cleaner.min.cleanable.ratio=0.01",
    "log.cleaner.dedupe.buffer.size=4194304",
    "group.initial.rebalance.delay.ms=0",
];

/// The last record of each key in `recs`: key → (offset, value); panics if offsets go back.
fn table(recs: &[common::ReadRecord]) -> BTreeMap<Vec<u8>, (i64, Vec<u8>)> {
    let mut t = BTreeMap::new();
    let mut last = -1;
    for (_, offset, key, value) in recs {
        assert!(*offset > last, "offset {offset} after {last}");
        last = *offset;
        t.insert(key.clone().unwrap_or_default(), (*offset, value.clone()));
    }
    t
}

/// The cleaner's gauges now: every `kafka_log_logcleaner*` series by name.
fn cleaner_gauges(port: u16) -> BTreeMap<String, f64> {
    let (_, text) = common::http_get(port, "/metrics");
    [
        "kafka_log_logcleanermanager_max_dirty_percent",
        "kafka_log_logcleanermanager_time_since_last_run_ms",
        "kafka_log_logcleanermanager_uncleanable_partitions_count",
        "kafka_log_logcleaner_cleaner_recopy_percent",
        "kafka_log_logcleaner_max_buffer_utilization_percent",
        "kafka_log_logcleaner_max_compaction_delay_secs",
    ]
    .iter()
    .map(|n| (n.to_string(), common::metric_value(&text, n)))
    .collect()
}

/// Polls the gauge `name` until `ok` holds of it (or 15 s pass); returns its last value.
async fn gauge_until(port: u16, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let v = cleaner_gauges(port)[name];
        if ok(v) || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_broker_cleans_a_compacted_topic_and_serves_the_cleaner_gauges() {
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    // An offset map of 400 slots (24 bytes each), so that 200 keys fill half of it.
    let b = common::BrokerProcess::start(&[
        "log.cleaner.backoff.ms=50",
        "log.cleaner.min.cleanable.ratio=0.01",
        "log.cleaner.dedupe.buffer.size=9600",
        &metrics,
    ]);
    // A dirty ratio of 1: the cleaner looks at the topic but leaves it until it is lowered.
    let mut configs = vec![
        ("cleanup.policy", "compact"),
        ("segment.bytes", "4096"),
        ("index.interval.bytes", "256"),
        ("min.cleanable.dirty.ratio", "1"),
    ];
    common::create_topic(&b.bootstrap, "kv", 1, &configs).await;
    const UPDATES: usize = 2000;
    const KEYS: usize = 200;
    let model = produce_updates(&b.bootstrap, "kv", UPDATES, KEYS).await;
    let dirty = gauge_until(port, "kafka_log_logcleanermanager_max_dirty_percent", |v| {
        v == 100.0
    })
    .await;
    assert_eq!(
        dirty, 100.0,
        "never cleaned, the closed segments are all dirty"
    );
    configs.pop();
    configs.push(("min.cleanable.dirty.ratio", "0.01"));
    common::alter_topic_configs(&b.bootstrap, "kv", &configs).await;
    let recs = read_until_fewer_than(&b.bootstrap, "kv", UPDATES, UPDATES / 4).await;
    assert_eq!(
        table(&recs),
        model,
        "a consumer from the start sees the latest of each key"
    );
    let dirty = gauge_until(port, "kafka_log_logcleanermanager_max_dirty_percent", |v| {
        v == 0.0
    })
    .await;
    assert_eq!(
        dirty, 0.0,
        "cleaned, nothing dirty is left below the active segment"
    );
    let g = cleaner_gauges(port);
    eprintln!("cleaner gauges after the cleaning: {g:?}");
    // The one round read ~2,000 records and wrote back ~200 (and the groups' last batches).
    let recopy = g["kafka_log_logcleaner_cleaner_recopy_percent"];
    assert!((2.0..=50.0).contains(&recopy), "recopy {recopy}");
    let utilization = g["kafka_log_logcleaner_max_buffer_utilization_percent"];
    assert_eq!(utilization, 50.0, "{KEYS} keys in 400 slots");
    let since = g["kafka_log_logcleanermanager_time_since_last_run_ms"];
    assert!(
        (0.0..2_000.0).contains(&since),
        "a look every 50 ms, last {since} ms ago"
    );
    assert_eq!(
        g["kafka_log_logcleanermanager_uncleanable_partitions_count"],
        0.0
    );
    assert_eq!(g["kafka_log_logcleaner_max_compaction_delay_secs"], 0.0);
}

/// Produces `updates` single-record updates over `keys` keys to partition 0 of `topic`; returns
/// each key's latest (offset, value).
async fn produce_updates(
    bootstrap: &str,
    topic: &str,
    updates: usize,
    keys: usize,
) -> BTreeMap<Vec<u8>, (i64, Vec<u8>)> {
    let p = common::producer(bootstrap, &[("acks", "all")]);
    let mut model = BTreeMap::new();
    for i in 0..updates {
        let (k, v) = (format!("key-{}", i % keys), format!("value-{i}"));
        let delivered = p
            .send(
                FutureRecord::to(topic).key(&k).payload(&v).partition(0),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        model.insert(k.into_bytes(), (delivered.offset, v.into_bytes()));
    }
    model
}

/// Reads partition 0 of `topic` (`total` records written) from the start until fewer than
/// `most` are left, for up to 60 s; fails if they never are.
async fn read_until_fewer_than(
    bootstrap: &str,
    topic: &str,
    total: usize,
    most: usize,
) -> Vec<common::ReadRecord> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let recs = common::read_all(bootstrap, topic, 1, total, Duration::from_secs(3));
        if recs.len() < most {
            return recs;
        }
        assert!(
            Instant::now() < deadline,
            "{} records of {total}: not cleaned",
            recs.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn group_consumer(bootstrap: &str) -> BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "committer")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_offsets_is_cleaned_and_keeps_each_groups_latest_commit() {
    let mut overrides = CLEANER.to_vec();
    overrides.extend([
        "offsets.topic.num.partitions=1",
        "offsets.topic.segment.bytes=2048",
    ]);
    let b = common::BrokerProcess::start(&overrides);
    common::create_topic(&b.bootstrap, "in", 1, &[]).await;
    const COMMITS: i64 = 400;
    let bootstrap = b.bootstrap.clone();
    tokio::task::spawn_blocking(move || {
        let c = group_consumer(&bootstrap);
        for i in 1..=COMMITS {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset("in", 0, Offset::Offset(i))
                .unwrap();
            c.commit(&tpl, CommitMode::Sync).unwrap();
        }
    })
    .await
    .unwrap();
    let total = COMMITS as usize;
    read_until_fewer_than(&b.bootstrap, "__consumer_offsets", total, total / 4).await;
    let bootstrap = b.bootstrap.clone();
    let committed = tokio::task::spawn_blocking(move || {
        let c = group_consumer(&bootstrap);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("in", 0);
        c.committed_offsets(tpl, Duration::from_secs(10)).unwrap()
    })
    .await
    .unwrap();
    let got = committed.find_partition("in", 0).unwrap().offset();
    assert_eq!(got, Offset::Offset(COMMITS));
}
