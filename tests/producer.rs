//! Our own producer (`evenkeel::client::producer::Producer`) against real brokers: everything it
//! reports acked is in the log, read back with librdkafka; keys land on Java's partitions in
//! order; bad records are refused before anything is written; an idempotent producer loses
//! and duplicates nothing while a leader is killed under it; batches refused as too large are
//! split; batches in flight to a broker that stopped answering expire; and a broker that stops
//! reading holds up only its own partitions.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{admin, create_assigned, Cluster};
use common::{create_topic, read_all, BrokerProcess};
use evenkeel::client::producer::{
    ProduceError, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
};

fn config(bootstrap: &str, extra: &[(&str, &str)]) -> ProducerConfig {
    let mut props: BTreeMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    props.insert("bootstrap.servers".into(), bootstrap.into());
    ProducerConfig::from_properties(&props).unwrap()
}

fn record(key: Option<String>, value: String) -> ProducerRecord {
    ProducerRecord {
        key: key.map(Bytes::from),
        value: Some(Bytes::from(value)),
        headers: Vec::new(),
        timestamp: 0,
    }
}

/// Sends every record (as fast as the accumulator takes them) and waits for every outcome.
async fn send_all(
    p: &Producer,
    topic: &str,
    records: Vec<ProducerRecord>,
) -> Vec<Result<RecordMetadata, ProduceError>> {
    let mut waiting = Vec::with_capacity(records.len());
    for r in records {
        waiting.push(p.send(topic, None, r).await.expect("queued"));
    }
    let mut out = Vec::with_capacity(waiting.len());
    for rx in waiting {
        out.push(rx.await.expect("every record hears its outcome"));
    }
    out
}

/// Every record of `topic` as (partition, offset, key, value) in text, until `expect` are in or
/// 30 s pass.
fn consume_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expect: usize,
) -> Vec<(i32, i64, Option<String>, String)> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    read_all(
        bootstrap,
        topic,
        partitions,
        expect,
        Duration::from_secs(30),
    )
    .into_iter()
    .map(|(p, o, k, v)| (p, o, k.as_deref().map(text), text(&v)))
    .collect()
}

#[tokio::test]
async fn every_acked_record_is_in_the_log_where_the_producer_said() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "spread", 6, &[]).await;
    let p = Producer::start(config(&b.bootstrap, &[("linger.ms", "2")]))
        .await
        .unwrap();
    let n = 20_000;
    // 100-byte values: about 2 MB, so well over a hundred batch.size switches; a partition
    // never chosen in those is a bug, not bad luck (odds under one in ten million).
    let value = |i: usize| format!("v{i:0>99}");
    let records = (0..n).map(|i| record(None, value(i))).collect();
    let results = send_all(&p, "spread", records).await;
    let acked: Vec<RecordMetadata> = results.into_iter().map(|r| r.expect("acked")).collect();
    let read = consume_all(&b.bootstrap, "spread", 6, n);
    assert_eq!(read.len(), n, "every acked record is read back");
    let at: HashMap<(i32, i64), String> =
        read.into_iter().map(|(p, o, _, v)| ((p, o), v)).collect();
    for (i, m) in acked.iter().enumerate() {
        assert_eq!(
            at.get(&(m.partition, m.offset)),
            Some(&value(i)),
            "record {i} is where its ack said: {m:?}"
        );
    }
    // Keyless records spread over every partition (the built-in partitioner switches after
    // batch.size bytes, over a hundred times here), not onto one.
    let used: HashSet<i32> = acked.iter().map(|m| m.partition).collect();
    assert_eq!(used.len(), 6, "partitions used: {used:?}");
    let metrics = p.metrics();
    assert_eq!(metrics.record_send_total, n as u64);
    assert_eq!(metrics.record_error_total, 0);
    p.close(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn every_codec_is_written_with_its_codec_and_read_back_by_librdkafka() {
    let b = BrokerProcess::start(&[]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("codec-{codec}");
        create_topic(&b.bootstrap, &topic, 1, &[]).await;
        let p = Producer::start(config(
            &b.bootstrap,
            &[("compression.type", codec), ("linger.ms", "20")],
        ))
        .await
        .unwrap();
        let value = |i: usize| format!("{codec}-{i:04}-{}", "abc".repeat(40));
        let records = (0..500).map(|i| record(None, value(i))).collect();
        let results = send_all(&p, &topic, records).await;
        assert!(results.iter().all(Result::is_ok), "{codec}: all acked");
        p.close(Duration::from_secs(10)).await;
        let read = consume_all(&b.bootstrap, &topic, 1, 500);
        let values: Vec<String> = read.into_iter().map(|(_, _, _, v)| v).collect();
        assert_eq!(values, (0..500).map(value).collect::<Vec<_>>(), "{codec}");
        // The broker stores batches as sent: the segment says which codec they carry.
        let segment = b.data.join("broker-1").join(format!("{topic}-0"));
        let dump = std::process::Command::new(env!("CARGO_BIN_EXE_evenkeel"))
            .args(["dump-log", "--files"])
            .arg(segment.join("00000000000000000000.log"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&dump.stdout);
        let batches = text.matches("compresscodec: ").count();
        assert!(batches > 0, "{codec}: no batch in {text}");
        assert_eq!(
            text.matches(&format!("compresscodec: {codec}")).count(),
            batches,
            "{codec}: {text:.400}"
        );
    }
}

#[tokio::test]
async fn keyed_records_go_to_javas_partition_in_order() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "keyed", 5, &[]).await;
    let p = Producer::start(config(&b.bootstrap, &[("compression.type", "lz4")]))
        .await
        .unwrap();
    let records = (0..3000)
        .map(|i| record(Some(format!("key{}", i % 50)), format!("{i}")))
        .collect();
    let results = send_all(&p, "keyed", records).await;
    assert!(results.iter().all(Result::is_ok), "all acked");
    let read = consume_all(&b.bootstrap, "keyed", 5, 3000);
    assert_eq!(read.len(), 3000);
    let mut last_per_key: HashMap<String, i64> = HashMap::new();
    let mut sorted = read;
    sorted.sort_by_key(|(p, o, _, _)| (*p, *o));
    for (partition, _, key, value) in sorted {
        let key = key.expect("keyed");
        let want = evenkeel::protocol::murmur2::partition_for_key(key.as_bytes(), 5);
        assert_eq!(partition, want, "{key} on Java's partition");
        let i: i64 = value.parse().unwrap();
        let last = last_per_key.insert(key.clone(), i);
        assert!(last.is_none_or(|l| l < i), "{key}: {i} after {last:?}");
    }
}

#[tokio::test]
async fn bad_records_are_refused_before_anything_is_written() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "small", 2, &[]).await;
    let p = Producer::start(config(&b.bootstrap, &[("max.request.size", "1000")]))
        .await
        .unwrap();
    let unknown = p
        .send("no-such-topic", None, record(None, "x".into()))
        .await;
    assert!(
        matches!(unknown, Err(ProduceError::UnknownTopic(ref t)) if t == "no-such-topic"),
        "{:?}",
        unknown.err()
    );
    let partition = p.send("small", Some(2), record(None, "x".into())).await;
    assert!(
        matches!(
            partition,
            Err(ProduceError::UnknownPartition {
                partition: 2,
                count: 2,
                ..
            })
        ),
        "{:?}",
        partition.err()
    );
    let big = p.send("small", None, record(None, "x".repeat(2000))).await;
    assert!(
        matches!(big, Err(ProduceError::RecordTooLarge { max: 1000, .. })),
        "{:?}",
        big.err()
    );
    let ok = p.send("small", Some(1), record(None, "fine".into())).await;
    let m = ok.unwrap().await.unwrap().unwrap();
    assert_eq!(
        (m.partition, m.offset),
        (1, 0),
        "the refused records took no offset"
    );
    assert!(consume_all(&b.bootstrap, "small", 2, 2).len() == 1);
}

#[tokio::test]
async fn an_idempotent_producer_loses_and_duplicates_nothing_when_a_leader_is_killed() {
    let mut c = Cluster::start(3, &[]);
    create_assigned(
        &c,
        "durable",
        vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]],
        &[("min.insync.replicas", "2")],
    )
    .await;
    let p = Producer::start(config(
        &c.bootstrap(),
        &[("linger.ms", "5"), ("request.timeout.ms", "5000")],
    ))
    .await
    .unwrap();
    assert!(p.config().enable_idempotence);
    let n = 30_000;
    let mut waiting = Vec::with_capacity(n);
    for i in 0..n {
        if i == n / 3 {
            // Kill the leader of partition 0 (broker 1) while records keep coming.
            c.kill(1);
        }
        let rx = p
            .send("durable", None, record(None, format!("v{i}")))
            .await
            .expect("queued");
        waiting.push(rx);
        if i % 1000 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut acked = 0;
    for rx in waiting {
        if rx.await.unwrap().is_ok() {
            acked += 1;
        }
    }
    assert_eq!(acked, n, "every record acked within delivery.timeout.ms");
    let _ = admin(&c.addr(2)).await;
    let read = consume_all(&c.live_bootstrap(), "durable", 3, n);
    let mut seen = HashSet::new();
    for (_, _, _, v) in &read {
        assert!(seen.insert(v.clone()), "{v} written twice");
    }
    assert_eq!(seen.len(), n, "every acked record is there once");
    let m = p.metrics();
    assert!(
        m.record_retry_total > 0,
        "the kill made the producer retry: {m:?}"
    );
}

#[tokio::test]
async fn a_batch_refused_as_too_large_is_split_and_every_record_written_once() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "split", 1, &[("max.message.bytes", "2000")]).await;
    // Batches of up to 64 KB for a topic that takes 2000 bytes: every full batch is refused
    // with MESSAGE_TOO_LARGE and must be split until its parts fit.
    let p = Producer::start(config(
        &b.bootstrap,
        &[("batch.size", "65536"), ("linger.ms", "20")],
    ))
    .await
    .unwrap();
    assert!(p.config().enable_idempotence);
    let n = 600;
    let value = |i: usize| format!("{i:05}-{}", "x".repeat(200));
    let records = (0..n).map(|i| record(None, value(i))).collect();
    let results = send_all(&p, "split", records).await;
    let offsets: Vec<i64> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("record {i}: {e}")).offset)
        .collect();
    assert_eq!(
        offsets,
        (0..n as i64).collect::<Vec<_>>(),
        "acked in order, once each"
    );
    let m = p.metrics();
    assert!(m.batch_split_total > 0, "batches were split: {m:?}");
    let read = consume_all(&b.bootstrap, "split", 1, n + 1);
    let values: Vec<String> = read.into_iter().map(|(_, _, _, v)| v).collect();
    assert_eq!(values.len(), n, "nothing written twice");
    assert!(
        values.iter().enumerate().all(|(i, v)| *v == value(i)),
        "every record written once, in order"
    );
    p.close(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn a_single_record_over_max_message_bytes_fails_as_message_too_large() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "one-big", 1, &[("max.message.bytes", "2000")]).await;
    let p = Producer::start(config(&b.bootstrap, &[("linger.ms", "0")]))
        .await
        .unwrap();
    let rx = p
        .send("one-big", None, record(None, "x".repeat(3000)))
        .await
        .expect("under max.request.size, so queued");
    match rx.await.unwrap() {
        Err(ProduceError::Kafka { code: 10, name, .. }) => assert_eq!(name, "MESSAGE_TOO_LARGE"),
        other => panic!("a one-record batch cannot be split: {other:?}"),
    }
    assert_eq!(p.metrics().batch_split_total, 0);
    // The producer goes on (its idempotent sequence is not left with a gap).
    let ok = p.send("one-big", None, record(None, "small".into())).await;
    assert_eq!(ok.unwrap().await.unwrap().unwrap().offset, 0);
}

#[tokio::test]
async fn batches_in_flight_to_a_frozen_broker_expire_after_the_delivery_timeout() {
    let b = BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "frozen", 1, &[]).await;
    // The answer is awaited for request.timeout.ms + 1 s: a batch sent 50 ms after its creation
    // reaches delivery.timeout.ms a second before its request would time out.
    let p = Producer::start(config(
        &b.bootstrap,
        &[
            ("linger.ms", "50"),
            ("request.timeout.ms", "3000"),
            ("delivery.timeout.ms", "3050"),
        ],
    ))
    .await
    .unwrap();
    let warm = p.send("frozen", None, record(None, "warm".into())).await;
    warm.unwrap()
        .await
        .unwrap()
        .expect("connected, producer id taken");
    b.freeze(true);
    let sent = Instant::now();
    let mut waiting = Vec::new();
    for i in 0..5 {
        let rx = p
            .send("frozen", None, record(None, format!("lost{i}")))
            .await;
        waiting.push(rx.expect("queued"));
    }
    for rx in waiting {
        match rx.await.unwrap() {
            Err(ProduceError::Timeout(m)) => assert!(
                m.starts_with("Expiring 5 record(s) for frozen-0:")
                    && m.ends_with("ms has passed since batch creation"),
                "{m}"
            ),
            other => panic!("the in-flight batch must expire, not {other:?}"),
        }
    }
    assert!(
        sent.elapsed() >= Duration::from_millis(3050),
        "expired after {:?}, before delivery.timeout.ms",
        sent.elapsed()
    );
    b.freeze(false);
    // The late answer changes nothing; the producer keeps working (under a new producer id).
    let n = 50;
    let records = (0..n).map(|i| record(None, format!("after{i}"))).collect();
    let results = send_all(&p, "frozen", records).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // The expired records may have been written after all (the broker had them): at most once.
    let read = consume_all(&b.bootstrap, "frozen", 1, 1 + 5 + n);
    let values: Vec<String> = read.into_iter().map(|(_, _, _, v)| v).collect();
    let after: Vec<&String> = values.iter().filter(|v| v.starts_with("after")).collect();
    let want: Vec<String> = (0..n).map(|i| format!("after{i}")).collect();
    assert_eq!(
        after,
        want.iter().collect::<Vec<_>>(),
        "each once, in order"
    );
    let unique: HashSet<&String> = values.iter().collect();
    assert_eq!(unique.len(), values.len(), "nothing twice: {values:?}");
    p.close(Duration::from_secs(10)).await;
}

/// Queues one keyless record for `partition` of topic "stuck"; its outcome to come.
async fn queue_to(
    p: &Producer,
    partition: i32,
    value: String,
) -> tokio::sync::oneshot::Receiver<Result<RecordMetadata, ProduceError>> {
    p.send("stuck", Some(partition), record(None, value))
        .await
        .expect("queued")
}

#[tokio::test]
async fn a_broker_that_stops_reading_holds_up_only_its_own_partitions() {
    let mut c = Cluster::start(3, &[]);
    // Partition 0 on broker 1, partition 1 on broker 2, one replica each.
    create_assigned(
        &c,
        "stuck",
        vec![vec![1], vec![2]],
        &[("max.message.bytes", "4194304")],
    )
    .await;
    let p = Producer::start(config(
        &c.bootstrap(),
        &[("linger.ms", "0"), ("max.request.size", "4194304")],
    ))
    .await
    .unwrap();
    // Both connections are up before broker 2 stops.
    for partition in [0, 1] {
        queue_to(&p, partition, "warm".into())
            .await
            .await
            .unwrap()
            .expect("acked");
    }
    c.sigstop(2);
    // Eight records of 3.5 MB, five requests of them in flight to the stopped broker: more than
    // the socket buffers on both sides hold, so writing them blocks until the broker reads.
    let big: Vec<_> = {
        let mut v = Vec::new();
        for i in 0..8 {
            v.push(queue_to(&p, 1, format!("{i}{}", "x".repeat(3_500_000))).await);
        }
        v
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    for i in 0..10 {
        let rx = queue_to(&p, 0, format!("meanwhile{i}")).await;
        let m = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .unwrap_or_else(|_| panic!("record {i} to broker 1 waited on the stopped broker 2"))
            .unwrap()
            .expect("acked");
        assert_eq!(m.partition, 0);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    c.sigcont(2);
    for rx in big {
        rx.await
            .unwrap()
            .expect("written once broker 2 reads again");
    }
    p.close(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn with_acks_0_a_record_counts_as_sent_only_once_written_and_a_stopped_broker_fills_the_buffer(
) {
    let b = BrokerProcess::start(&[]);
    create_topic(
        &b.bootstrap,
        "unacked",
        1,
        &[("max.message.bytes", "2097152")],
    )
    .await;
    let p = Producer::start(config(
        &b.bootstrap,
        &[
            ("acks", "0"),
            ("linger.ms", "0"),
            ("max.request.size", "2097152"),
            ("buffer.memory", "8388608"),
            ("max.block.ms", "200"),
        ],
    ))
    .await
    .unwrap();
    let warm = p.send("unacked", None, record(None, "warm".into())).await;
    warm.unwrap().await.unwrap().expect("sent");
    b.freeze(true);
    // 60 MB for a broker that reads nothing: the socket buffers take a few MB, five requests
    // wait to be written, the 8 MB buffer fills, and then sends are refused for memory.
    let mut queued = Vec::new();
    let mut refused = 0;
    for i in 0..60 {
        match p
            .send(
                "unacked",
                None,
                record(None, format!("{i:02}{}", "x".repeat(1 << 20))),
            )
            .await
        {
            Ok(rx) => queued.push(rx),
            Err(ProduceError::Append(_)) => refused += 1,
            Err(e) => panic!("record {i}: {e}"),
        }
    }
    assert!(
        refused > 0,
        "the buffer never filled: records counted as sent unwritten"
    );
    let mut sent_while_frozen = 0;
    for rx in &mut queued {
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_millis(10), rx).await {
            r.expect("sent");
            sent_while_frozen += 1;
        }
    }
    assert!(
        sent_while_frozen < queued.len(),
        "all {} queued records reported sent to a broker that reads nothing",
        queued.len()
    );
    b.freeze(false);
    p.close(Duration::from_secs(30)).await;
    drop(queued);
}
