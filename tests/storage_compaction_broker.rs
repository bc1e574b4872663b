//! Log compaction in a running broker, black-box: a compacted topic and `__consumer_offsets` are
//! cleaned by the broker's own LogCleaner, and its gauges are served under Kafka's names.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_broker_cleans_a_compacted_topic_and_serves_the_cleaner_gauges() {
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let mut overrides = CLEANER.to_vec();
    overrides.push(&metrics);
    let b = common::BrokerProcess::start(&overrides);
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "4096"),
        ("index.interval.bytes", "256"),
    ];
    common::create_topic(&b.bootstrap, "kv", 1, &configs).await;
    let p = common::producer(&b.bootstrap, &[("acks", "all")]);
    let mut model = BTreeMap::new();
    const UPDATES: usize = 2000;
    for i in 0..UPDATES {
        let (k, v) = (format!("key-{}", i % 20), format!("value-{i}"));
        let delivered = p
            .send(
                FutureRecord::to("kv").key(&k).payload(&v).partition(0),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        model.insert(k.into_bytes(), (delivered.offset, v.into_bytes()));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let recs = loop {
        let recs = common::read_all(&b.bootstrap, "kv", 1, UPDATES, Duration::from_secs(3));
        if recs.len() < UPDATES / 4 || Instant::now() > deadline {
            break recs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        recs.len() < UPDATES / 4,
        "{} records: not cleaned",
        recs.len()
    );
    assert_eq!(
        table(&recs),
        model,
        "a consumer from the start sees the latest of each key"
    );
    let (_, text) = common::http_get(port, "/metrics");
    let recopy = common::metric_value(&text, "kafka_log_logcleaner_cleaner_recopy_percent");
    assert!((0.0..=100.0).contains(&recopy), "recopy {recopy}");
    let since = common::metric_value(&text, "kafka_log_logcleanermanager_time_since_last_run_ms");
    assert!(
        (0.0..30_000.0).contains(&since),
        "time since last run {since}"
    );
    for name in [
        "kafka_log_logcleanermanager_max_dirty_percent",
        "kafka_log_logcleaner_max_clean_time_secs",
        "kafka_log_logcleaner_max_buffer_utilization_percent",
    ] {
        assert!(common::metric_value(&text, name) >= 0.0, "{name}");
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
    let deadline = Instant::now() + Duration::from_secs(60);
    let n = loop {
        let n = common::read_all(
            &b.bootstrap,
            "__consumer_offsets",
            1,
            COMMITS as usize,
            Duration::from_secs(3),
        )
        .len();
        if n < COMMITS as usize / 4 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(n < COMMITS as usize / 4, "{n} offset records: not cleaned");
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
