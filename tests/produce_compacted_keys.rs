//! Produce to a compacted topic, black-box: a record without a key is refused with
//! INVALID_RECORD (Kafka's LogValidator) and nothing of its batch is written, keyed records go
//! in, the check follows a `cleanup.policy` altered later, and group commits to the compacted
//! `__consumer_offsets` still work.

mod common;

use std::time::{Duration, Instant};

use evenkeel::protocol::errors::INVALID_RECORD;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

fn keyless_message(topic: &str) -> String {
    format!("Compacted topic cannot accept message without key in topic partition {topic}-0")
}

/// Sends one record and waits for its answer: the offset, or the error code.
async fn send(
    p: &FutureProducer,
    topic: &str,
    key: Option<&str>,
    value: &str,
) -> Result<i64, RDKafkaErrorCode> {
    let mut rec = FutureRecord::<str, str>::to(topic)
        .payload(value)
        .partition(0);
    if let Some(k) = key {
        rec = rec.key(k);
    }
    match p.send(rec, Duration::from_secs(10)).await {
        Ok(d) => Ok(d.offset),
        Err((KafkaError::MessageProduction(code), _)) => Err(code),
        Err((e, _)) => panic!("unexpected produce error {e:?}"),
    }
}

/// Every (offset, key, value) of partition 0 of `topic`, read from the start.
fn records(bootstrap: &str, topic: &str, expect: usize) -> Vec<(i64, Option<String>, String)> {
    common::read_all(bootstrap, topic, 1, expect, Duration::from_secs(10))
        .into_iter()
        .map(|(_, o, k, v)| {
            let k = k.map(|k| String::from_utf8(k).unwrap());
            (o, k, String::from_utf8(v).unwrap())
        })
        .collect()
}

fn produce_request(topic: &str, records: Vec<u8>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.into()))])])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_record_to_a_compacted_topic_is_refused_with_invalid_record_and_nothing_is_written(
) {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "kv", 1, &[("cleanup.policy", "compact")]).await;
    let p = common::producer(&b.bootstrap, &[("acks", "all"), ("linger.ms", "0")]);
    assert_eq!(send(&p, "kv", Some("a"), "1").await, Ok(0));
    assert_eq!(
        send(&p, "kv", None, "no key").await,
        Err(RDKafkaErrorCode::InvalidRecord)
    );
    // One batch of keyed records and a keyless one between them is refused whole.
    let lingering = common::producer(&b.bootstrap, &[("acks", "all"), ("linger.ms", "200")]);
    let (x, y, z) = tokio::join!(
        send(&lingering, "kv", Some("b"), "2"),
        send(&lingering, "kv", None, "no key either"),
        send(&lingering, "kv", Some("c"), "3"),
    );
    assert_eq!(
        [x, y, z],
        [Err(RDKafkaErrorCode::InvalidRecord); 3],
        "the batch holding a keyless record is refused as a whole"
    );
    assert_eq!(
        send(&p, "kv", Some("d"), "4").await,
        Ok(1),
        "nothing was written before it"
    );
    assert_eq!(
        records(&b.bootstrap, "kv", 2),
        vec![
            (0, Some("a".to_string()), "1".to_string()),
            (1, Some("d".to_string()), "4".to_string())
        ]
    );
    // On the wire: Kafka's code, its message and the index of each keyless record.
    use evenkeel::storage::batch::build_batch;
    let batch = build_batch(
        &[
            (Some(b"k".as_slice()), Some(b"v".as_slice())),
            (None, Some(b"v".as_slice())),
            (None, Some(b"v".as_slice())),
        ],
        1_700_000_000_000,
    );
    let mut s = common::raw::connect(&b.bootstrap);
    let resp: ProduceResponse =
        common::raw::call(&mut s, ApiKey::Produce, 9, &produce_request("kv", batch));
    let pr = &resp.responses[0].partition_responses[0];
    assert_eq!(
        (pr.error_code, pr.base_offset),
        (INVALID_RECORD, -1),
        "{pr:?}"
    );
    let indexes: Vec<i32> = pr.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, [1, 2], "{pr:?}");
    for e in &pr.record_errors {
        assert_eq!(
            e.batch_index_error_message.as_deref(),
            Some(keyless_message("kv").as_str())
        );
    }
    let message = pr.error_message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("One or more records have been rejected due to 2 record errors")
            && message.contains(&keyless_message("kv")),
        "{message}"
    );
    assert_eq!(send(&p, "kv", Some("e"), "5").await, Ok(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_altered_to_compact_refuses_keyless_records_from_then_on() {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "events", 1, &[]).await;
    let p = common::producer(&b.bootstrap, &[("acks", "all"), ("linger.ms", "0")]);
    assert_eq!(send(&p, "events", None, "before").await, Ok(0));
    common::alter_topic_configs(&b.bootstrap, "events", &[("cleanup.policy", "compact")]).await;
    // The new policy reaches the partition through the metadata log; until then a keyless
    // record may still go in. Once refused, it stays refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut accepted = 1;
    loop {
        match send(&p, "events", None, "after").await {
            Err(code) => {
                assert_eq!(code, RDKafkaErrorCode::InvalidRecord);
                break;
            }
            Ok(o) => {
                assert_eq!(o, accepted);
                accepted += 1;
                assert!(Instant::now() < deadline, "keyless records still accepted");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(
        send(&p, "events", None, "again").await,
        Err(RDKafkaErrorCode::InvalidRecord)
    );
    assert_eq!(send(&p, "events", Some("k"), "keyed").await, Ok(accepted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offset_commits_to_the_compacted_offsets_topic_are_still_written() {
    let b = common::BrokerProcess::start(&[
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=1",
    ]);
    common::create_topic(&b.bootstrap, "in", 1, &[]).await;
    let bootstrap = b.bootstrap.clone();
    let committed = tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "committer")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        for i in 1..=5 {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset("in", 0, Offset::Offset(i))
                .unwrap();
            c.commit(&tpl, CommitMode::Sync).unwrap();
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("in", 0);
        c.committed_offsets(tpl, Duration::from_secs(10)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        committed.find_partition("in", 0).unwrap().offset(),
        Offset::Offset(5)
    );
    // The commits are records of the compacted `__consumer_offsets`, each with its key.
    let written = common::read_all(
        &b.bootstrap,
        "__consumer_offsets",
        1,
        5,
        Duration::from_secs(10),
    );
    assert!(written.len() >= 5, "{} offset records", written.len());
    assert!(written.iter().all(|r| r.2.is_some()));
}
