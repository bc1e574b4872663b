//! A single evenkeel node driven by librdkafka (the rdkafka crate), through the real binary.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use evenkeel::protocol::murmur2::partition_for_key;
use evenkeel::storage::batch::BatchHeader;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap()
}

use common::{create_topic, producer};

/// Everything in the given partitions from the beginning: (partition, offset, key, value).
type Row = (i32, i64, Option<Vec<u8>>, Vec<u8>);

fn consume_all(bootstrap: &str, topic: &str, partitions: i32, expect: usize) -> Vec<Row> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::with_capacity(expect);
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < expect && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.expect("consumer error");
            out.push((
                m.partition(),
                m.offset(),
                m.key().map(|k| k.to_vec()),
                m.payload().unwrap_or_default().to_vec(),
            ));
        }
    }
    // Nothing beyond what was expected arrives.
    let extra = c.poll(Duration::from_millis(300));
    assert!(extra.is_none(), "unexpected extra record");
    out
}

#[tokio::test]
async fn hundred_thousand_records_keyed_and_keyless_come_back_in_order() {
    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "load", 6, &[]).await;
    let keyed = producer(&b.bootstrap, &[("acks", "all")]);
    let keyless = producer(&b.bootstrap, &[("acks", "1")]);
    let n = 50_000;
    let mut deliveries = Vec::with_capacity(2 * n);
    for i in 0..n {
        let key = format!("key-{i}");
        let value = format!("keyed-{i}");
        deliveries.push(
            keyed
                .send_result(FutureRecord::to("load").key(&key).payload(&value))
                .unwrap(),
        );
        let value = format!("keyless-{i}");
        deliveries.push(
            keyless
                .send_result(FutureRecord::<(), _>::to("load").payload(&value))
                .unwrap(),
        );
    }
    for d in deliveries {
        d.await.unwrap().expect("delivery");
    }
    let rows = consume_all(&b.bootstrap, "load", 6, 2 * n);
    assert_eq!(rows.len(), 2 * n);
    let mut per_partition: HashMap<i32, Vec<&Row>> = HashMap::new();
    for r in &rows {
        per_partition.entry(r.0).or_default().push(r);
    }
    for (p, rs) in &per_partition {
        // Offsets are contiguous from 0 and each producer's records keep their order.
        for (i, r) in rs.iter().enumerate() {
            assert_eq!(r.1, i as i64, "partition {p}");
        }
        let seq = |prefix: &str| -> Vec<usize> {
            rs.iter()
                .filter_map(|r| {
                    std::str::from_utf8(&r.3)
                        .ok()?
                        .strip_prefix(prefix)?
                        .parse()
                        .ok()
                })
                .collect()
        };
        for prefix in ["keyed-", "keyless-"] {
            let s = seq(prefix);
            assert!(
                s.windows(2).all(|w| w[0] < w[1]),
                "{prefix} out of order in {p}"
            );
        }
    }
    // Keyed records sit where Java's murmur2 puts them.
    for r in &rows {
        if let Some(k) = &r.2 {
            assert_eq!(
                r.0,
                partition_for_key(k, 6),
                "key {}",
                String::from_utf8_lossy(k)
            );
        }
    }
    assert_eq!(
        per_partition.len(),
        6,
        "keyless records spread over every partition"
    );
}

#[tokio::test]
async fn restart_keeps_topics_configs_data_and_offsets() {
    let mut b = common::BrokerProcess::start(&[]);
    let dir = b.take_tempdir().unwrap();
    create_topic(&b.bootstrap, "kept", 2, &[("retention.ms", "123456789")]).await;
    let p = producer(&b.bootstrap, &[("acks", "all")]);
    for i in 0..1000 {
        let v = format!("v{i}");
        p.send(
            FutureRecord::to("kept").key(&v).payload(&v),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    }
    drop(p);
    assert!(b.stop(), "clean shutdown");
    assert!(dir.path().join("broker-1/.kafka_cleanshutdown").exists());
    let b = common::BrokerProcess::start_in(dir.path(), &[]);
    assert!(!dir.path().join("broker-1/.kafka_cleanshutdown").exists());
    let rows = consume_all(&b.bootstrap, "kept", 2, 1000);
    assert_eq!(rows.len(), 1000);
    let configs = admin(&b.bootstrap)
        .describe_configs(&[ResourceSpecifier::Topic("kept")], &AdminOptions::new())
        .await
        .unwrap();
    let cfg = configs[0].as_ref().unwrap();
    let retention = cfg.get("retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("123456789"));
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .create()
        .unwrap();
    let (lo0, hi0) = c
        .fetch_watermarks("kept", 0, Duration::from_secs(5))
        .unwrap();
    let (lo1, hi1) = c
        .fetch_watermarks("kept", 1, Duration::from_secs(5))
        .unwrap();
    assert_eq!((lo0, lo1), (0, 0));
    assert_eq!(hi0 + hi1, 1000);
}

fn topic_id_on_disk(data: &std::path::Path, dir: &str) -> String {
    std::fs::read_to_string(data.join("broker-1").join(dir).join("partition.metadata")).unwrap()
}

#[tokio::test]
async fn recreating_a_topic_gives_a_new_id_and_offsets_start_at_zero() {
    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "again", 1, &[]).await;
    let p = producer(&b.bootstrap, &[]);
    for _ in 0..10 {
        p.send(
            FutureRecord::<(), _>::to("again").payload("x"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    }
    let first = topic_id_on_disk(&b.data, "again-0");
    let r = admin(&b.bootstrap)
        .delete_topics(&["again"], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    create_topic(&b.bootstrap, "again", 1, &[]).await;
    let second = topic_id_on_disk(&b.data, "again-0");
    assert_ne!(first, second);
    assert!(second.starts_with("version: 0\ntopic_id: "));
    let p = producer(&b.bootstrap, &[]);
    let d = p
        .send(
            FutureRecord::<(), _>::to("again").payload("y"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!((d.partition, d.offset), (0, 0));
}

#[tokio::test]
async fn compressed_batches_are_stored_and_served_as_sent() {
    let b = common::BrokerProcess::start(&[]);
    for (codec, id) in [("gzip", 1u8), ("snappy", 2), ("lz4", 3), ("zstd", 4)] {
        let topic = format!("c-{codec}");
        create_topic(&b.bootstrap, &topic, 1, &[]).await;
        let p = producer(
            &b.bootstrap,
            &[("compression.codec", codec), ("linger.ms", "50")],
        );
        let mut ds = Vec::new();
        for i in 0..500 {
            let v = format!("{codec} record {i} {}", "z".repeat(100));
            ds.push(
                p.send_result(FutureRecord::<(), _>::to(&topic).payload(&v))
                    .unwrap(),
            );
        }
        for d in ds {
            d.await.unwrap().unwrap();
        }
        let rows = consume_all(&b.bootstrap, &topic, 1, 500);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                r.3,
                format!("{codec} record {i} {}", "z".repeat(100)).into_bytes()
            );
        }
        // On disk every batch still carries the producer's codec: nothing was re-encoded.
        let seg = b
            .data
            .join("broker-1")
            .join(format!("{topic}-0/00000000000000000000.log"));
        let data = std::fs::read(seg).unwrap();
        let mut pos = 0;
        let mut batches = 0;
        while pos < data.len() {
            let h = BatchHeader::parse(&data[pos..]).unwrap();
            assert_eq!(h.compression(), id, "{codec}");
            assert!(h.size() < 500 * 100, "{codec} batch is not compressed");
            pos += h.size();
            batches += 1;
        }
        assert!(batches >= 1);
    }
}

/// A second, independent encoder: kafka-protocol's lz4 batches over a raw Produce request are
/// stored byte for byte as sent (but for the broker-assigned offset and leader epoch).
#[tokio::test]
async fn lz4_batches_are_stored_and_served_as_sent() {
    use bytes::BytesMut;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "c-lz4", 1, &[]).await;
    let records: Vec<Record> = (0..500)
        .map(|i| {
            let value = format!("lz4 record {i} {}", "z".repeat(100));
            common::plain_record(i, 1_700_000_000_000 + i, value.into())
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Lz4,
        },
    )
    .unwrap();
    let sent = buf.freeze();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("c-lz4")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(sent.clone()))])]);
    let mut s = common::raw::connect(&b.bootstrap);
    let resp: ProduceResponse = common::raw::call(&mut s, ApiKey::Produce, 9, &req);
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    let rows = consume_all(&b.bootstrap, "c-lz4", 1, 500);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            r.3,
            format!("lz4 record {i} {}", "z".repeat(100)).into_bytes()
        );
    }
    // Byte for byte as sent, but for the offset and leader epoch the broker assigns.
    let seg = b.data.join("broker-1/c-lz4-0/00000000000000000000.log");
    let stored = std::fs::read(seg).unwrap();
    assert_eq!(stored.len(), sent.len());
    let mut pos = 0;
    while pos < stored.len() {
        let h = BatchHeader::parse(&stored[pos..]).unwrap();
        assert_eq!(h.compression(), 3);
        let end = pos + h.size();
        assert!(
            stored[pos + 16..end] == sent[pos + 16..end],
            "batch at {pos} differs"
        );
        pos = end;
    }
}
