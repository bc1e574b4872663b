//! Client quotas on a running broker: set with AlterClientQuotas, described with
//! DescribeClientQuotas, enforced on produce and fetch with Kafka's throttle time in the
//! response and the connection muted for it.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One AlterClientQuotas entry: a client id (`None`: the default client) and its changes.
fn client_entry(client: Option<&str>, ops: &[(&str, Option<f64>)]) -> EntryData {
    EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(client.map(s))])
        .with_ops(
            ops.iter()
                .map(|(k, v)| {
                    OpData::default()
                        .with_key(s(k))
                        .with_value(v.unwrap_or(0.0))
                        .with_remove(v.is_none())
                })
                .collect(),
        )
}

fn alter(bootstrap: &str, entries: Vec<EntryData>) -> AlterClientQuotasResponse {
    let mut c = common::raw::connect(bootstrap);
    let req = AlterClientQuotasRequest::default().with_entries(entries);
    common::raw::call(&mut c, ApiKey::AlterClientQuotas, 1, &req)
}

/// A client id (`None`: the default client) and its quotas.
type ClientQuotas = (Option<String>, Vec<(String, f64)>);

/// Each client id's quotas, as DescribeClientQuotas lists every entity with a client id.
fn describe_clients(bootstrap: &str) -> Vec<ClientQuotas> {
    let mut c = common::raw::connect(bootstrap);
    let req =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(s("client-id"))
            .with_match_type(2)
            .with_match(None)]);
    let resp: DescribeClientQuotasResponse =
        common::raw::call(&mut c, ApiKey::DescribeClientQuotas, 1, &req);
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let mut out: Vec<_> = resp
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let name = e.entity[0].entity_name.as_ref().map(|n| n.to_string());
            let values = e
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            (name, values)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn quotas_are_set_described_and_removed_and_bad_values_are_refused_alone() {
    let b = common::BrokerProcess::start(&[]);
    let resp = alter(
        &b.bootstrap,
        vec![
            client_entry(Some("app"), &[("producer_byte_rate", Some(1048576.0))]),
            client_entry(None, &[("consumer_byte_rate", Some(2048.0))]),
            client_entry(Some("bad"), &[("producer_byte_rate", Some(-5.0))]),
            client_entry(Some("odd"), &[("no_such_rate", Some(5.0))]),
        ],
    );
    let codes: Vec<(i16, Option<String>)> = resp
        .entries
        .iter()
        .map(|e| {
            (
                e.error_code,
                e.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [
            (0, None),
            (0, None),
            (
                42,
                Some("Quota producer_byte_rate must be greater than 0".into())
            ),
            (42, Some("Invalid configuration key no_such_rate".into())),
        ]
    );
    // The accepted two are in the image this broker answers from; nothing of the refused ones.
    assert_eq!(
        describe_clients(&b.bootstrap),
        [
            (None, vec![("consumer_byte_rate".into(), 2048.0)]),
            (
                Some("app".into()),
                vec![("producer_byte_rate".into(), 1048576.0)]
            ),
        ]
    );
    alter(
        &b.bootstrap,
        vec![client_entry(Some("app"), &[("producer_byte_rate", None)])],
    );
    assert_eq!(
        describe_clients(&b.bootstrap),
        [(None, vec![("consumer_byte_rate".into(), 2048.0)])]
    );
}

/// `n` records of `size` bytes; kafka-protocol's encoder writes a batch for each record (they
/// carry no producer sequence), some 60 bytes apiece on top of the value.
fn batch(n: i64, size: usize) -> bytes::Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| common::plain_record(i, 1_700_000_000_000 + i, vec![b'q'; size].into()))
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// Sends ApiVersions on `c` and waits for its answer: how long that took.
fn round_trip(c: &mut std::net::TcpStream) -> Duration {
    let t = Instant::now();
    let _: ApiVersionsResponse = common::raw::call(
        c,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(s("t"))
            .with_client_software_version(s("1")),
    );
    t.elapsed()
}

/// The raw connection's client id is `raw-test`. 10,000 bytes/s measured over 11 windows of
/// 1 s: a young client may send 100,000 bytes at once; a request some 17 % over carries a
/// throttle of that share of the 10 s window, and the connection answers nothing else until it
/// is over.
#[tokio::test]
async fn a_request_over_the_quota_carries_its_throttle_time_and_mutes_the_connection() {
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&metrics]);
    common::create_topic(&b.bootstrap, "quota-raw", 1, &[]).await;
    let quotas = [
        ("producer_byte_rate", Some(10_000.0)),
        ("consumer_byte_rate", Some(10_000.0)),
    ];
    alter(&b.bootstrap, vec![client_entry(Some("raw-test"), &quotas)]);

    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s("quota-raw")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(110, 1000)))])]);
    // The quota counts the whole request: this body and a header of some 20 bytes. Over the
    // 100,000 bytes the young window allows, each 10 bytes are a millisecond of throttle.
    let size = {
        use kafka_protocol::protocol::Encodable;
        produce.compute_size(9).unwrap() as i32
    };
    let expected = (size + 20 - 100_000) / 10;
    assert!(expected > 1000, "{size} bytes");
    let mut c = common::raw::connect(&b.bootstrap);
    let resp: ProduceResponse = common::raw::call(&mut c, ApiKey::Produce, 9, &produce);
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    let throttle = resp.throttle_time_ms;
    assert!(
        (throttle - expected).abs() <= 5,
        "throttle {throttle} ms, {expected} ms expected"
    );
    let waited = round_trip(&mut c);
    assert!(
        waited >= Duration::from_millis(throttle as u64 - 50),
        "the next answer came {waited:?} after a {throttle} ms throttle"
    );
    // Past the throttle the connection answers again without one.
    assert!(round_trip(&mut c) < Duration::from_secs(3));

    // The same bytes fetched back. A fetch returns at most a quota window's bytes (100,000):
    // the first stays within the quota, the second, for the rest, goes over it.
    let fetch = |offset: i64| {
        FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(s("quota-raw")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let first: FetchResponse = common::raw::call(&mut c, ApiKey::Fetch, 12, &fetch(0));
    let mut records = first.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    let bytes = records.len();
    assert!((90_000..=100_000).contains(&bytes), "fetched {bytes} bytes");
    assert_eq!(first.throttle_time_ms, 0);
    let next = kafka_protocol::records::RecordBatchDecoder::decode(&mut records)
        .unwrap()
        .records
        .len() as i64;
    assert!(next < 110, "{next} records");
    let second: FetchResponse = common::raw::call(&mut c, ApiKey::Fetch, 12, &fetch(next));
    let rest = second.responses[0].partitions[0]
        .records
        .as_ref()
        .map_or(0, |r| r.len());
    assert!(rest > 10_000, "fetched {rest} more bytes");
    assert!(
        second.throttle_time_ms >= 1000,
        "{}",
        second.throttle_time_ms
    );

    let (_, text) = common::http_get(port, "/metrics");
    let series = |name: &str| format!("{name}{{client_id=\"raw-test\",user=\"\"}}");
    for name in ["kafka_server_produce", "kafka_server_fetch"] {
        let rate = common::metric_value(&text, &series(&format!("{name}_byte_rate")));
        assert!(rate > 10_000.0, "{name} byte rate {rate}");
        let t = common::metric_value(&text, &series(&format!("{name}_throttle_time")));
        assert!(t >= 1000.0, "{name} throttle time {t}");
    }
}

/// Counts the payload bytes librdkafka had acknowledged.
struct Acked(Arc<AtomicU64>);

impl ClientContext for Acked {}

impl ProducerContext for Acked {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if let Ok(m) = r {
            use rdkafka::Message;
            let n = m.payload().map_or(0, |p| p.len()) as u64;
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Produces 1 KiB records as fast as librdkafka takes them until `stop`; the acked bytes.
fn flood(bootstrap: &str, client_id: &str, stop: Instant) -> Arc<AtomicU64> {
    let acked = Arc::new(AtomicU64::new(0));
    let producer: ThreadedProducer<Acked> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("linger.ms", "5")
        .set("batch.size", "65536")
        .create_with_context(Acked(acked.clone()))
        .unwrap();
    let payload = vec![b'f'; 1024];
    std::thread::spawn(move || {
        while Instant::now() < stop {
            let rec = BaseRecord::<(), [u8], ()>::to("quota-flood").payload(&payload);
            if producer.send(rec).is_err() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    acked
}

/// Two producers side by side for 24 s, one under a 1 MiB/s quota: from its fourth second to
/// its last the limited one gets no more than 10 % over its quota (two samples of 1 s, so a
/// burst the window allows is at most a second's worth, 5 % of the 20 s measured), and no
/// less than 25 % under it (a loaded CI machine only slows a client down; this machine
/// measured it within 10 %); the other is not throttled at all.
#[tokio::test]
async fn a_producer_is_held_to_its_quota_and_one_beside_it_is_not() {
    let port = common::free_port();
    let metrics = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&metrics, "quota.window.num=2"]);
    common::create_topic(&b.bootstrap, "quota-flood", 1, &[]).await;
    let quota = 1_048_576.0;
    alter(
        &b.bootstrap,
        vec![client_entry(
            Some("limited"),
            &[("producer_byte_rate", Some(quota))],
        )],
    );
    let start = Instant::now();
    let stop = start + Duration::from_secs(24);
    let limited = flood(&b.bootstrap, "limited", stop);
    let free = flood(&b.bootstrap, "free", stop);
    let at = |t: Duration, what: &Arc<AtomicU64>| {
        std::thread::sleep((start + t).saturating_duration_since(Instant::now()));
        what.load(Ordering::Relaxed)
    };
    let (from, to) = (Duration::from_secs(4), Duration::from_secs(24));
    let (limited_from, free_from) = (at(from, &limited), free.load(Ordering::Relaxed));
    let (limited_to, free_to) = (at(to, &limited), free.load(Ordering::Relaxed));
    let seconds = (to - from).as_secs_f64();
    let limited_rate = (limited_to - limited_from) as f64 / seconds;
    let free_rate = (free_to - free_from) as f64 / seconds;
    println!("limited {limited_rate:.0} B/s (quota {quota}), free {free_rate:.0} B/s");
    let share = limited_rate / quota;
    assert!(
        (0.75..=1.10).contains(&share),
        "the limited producer got {limited_rate:.0} B/s of a {quota} B/s quota"
    );
    let (_, text) = common::http_get(port, "/metrics");
    let throttle = common::metric_value(
        &text,
        "kafka_server_produce_throttle_time{client_id=\"limited\",user=\"\"}",
    );
    assert!(throttle > 0.0, "limited throttle time {throttle}");
    assert!(
        !text.contains("client_id=\"free\""),
        "a client without a quota has quota metrics"
    );
    assert!(
        free_rate > 1.5 * limited_rate,
        "the unlimited producer got only {free_rate:.0} B/s"
    );
}

/// `controller_mutation_rate` of 0.1 partition a second: a bucket of 1.1 to start with. A topic
/// of 20 partitions is let through and leaves the client 18.9 in debt (189 s); while in debt,
/// CreateTopics v6+ (KIP-599's strict versions) refuses a topic with THROTTLING_QUOTA_EXCEEDED
/// and creates nothing, v5 creates it and throttles.
#[test]
fn topic_mutations_over_the_quota_are_refused_on_strict_versions_and_throttled_on_old_ones() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    let b = common::BrokerProcess::start(&[]);
    alter(
        &b.bootstrap,
        vec![client_entry(
            Some("raw-test"),
            &[("controller_mutation_rate", Some(0.1))],
        )],
    );
    let create = |name: &str, partitions: i32| {
        CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(partitions)
                .with_replication_factor(1)])
    };
    // Each request on a connection of its own: a throttled connection answers nothing more
    // until its throttle is over.
    let call = |version: i16, req: &CreateTopicsRequest| -> CreateTopicsResponse {
        let mut c = common::raw::connect(&b.bootstrap);
        common::raw::call(&mut c, ApiKey::CreateTopics, version, req)
    };
    let r = call(7, &create("mutated-1", 20));
    assert_eq!(r.topics[0].error_code, 0);
    assert!(
        (188_000..=189_000).contains(&r.throttle_time_ms),
        "{}",
        r.throttle_time_ms
    );
    let r = call(7, &create("mutated-2", 1));
    assert_eq!(r.topics[0].error_code, 89, "THROTTLING_QUOTA_EXCEEDED");
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);
    let r = call(5, &create("mutated-3", 1));
    assert_eq!(r.topics[0].error_code, 0);
    assert!(r.throttle_time_ms > 100_000, "{}", r.throttle_time_ms);

    let mut c = common::raw::connect(&b.bootstrap);
    let meta: MetadataResponse = common::raw::call(
        &mut c,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let mut names: Vec<String> = meta
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .filter(|n| n.starts_with("mutated-"))
        .collect();
    names.sort();
    assert_eq!(names, ["mutated-1", "mutated-3"]);
}

/// Opens a connection and asks ApiVersions: whether it was answered (a throttled connection
/// is closed unanswered), and how long the broker kept it until then.
fn ask(bootstrap: &str) -> (bool, Duration) {
    let mut c = common::raw::connect(bootstrap);
    let start = std::time::Instant::now();
    let req = ApiVersionsRequest::default();
    common::raw::send(&mut c, ApiKey::ApiVersions, 3, 1, &req);
    let answered = common::raw::read_frame(&mut c).is_some();
    (answered, start.elapsed())
}

#[test]
fn an_address_over_its_connection_creation_rate_is_held_then_closed() {
    let b = common::BrokerProcess::start(&[]);
    let entry = EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("ip"))
            .with_entity_name(Some(s("127.0.0.1")))])
        .with_ops(vec![OpData::default()
            .with_key(s("connection_creation_rate"))
            .with_value(2.0)]);
    let resp = alter(&b.bootstrap, vec![entry]);
    assert_eq!(
        resp.entries[0].error_code, 0,
        "{:?}",
        resp.entries[0].error_message
    );
    // A burst of 8: the bucket holds two connections' worth, the rest are closed unanswered,
    // each held until the address would have had room (half a second at 2 a second).
    let burst: Vec<(bool, Duration)> = (0..8).map(|_| ask(&b.bootstrap)).collect();
    let served = burst.iter().filter(|(ok, _)| *ok).count();
    assert!(
        (2..=4).contains(&served),
        "{served} of 8 connections served"
    );
    let held = burst.iter().filter(|(ok, _)| !*ok).map(|(_, d)| *d).min();
    assert!(
        held.is_some_and(|d| d >= Duration::from_millis(300)),
        "a refused connection was closed after {held:?}, not held"
    );
    // Below the rate, the address is served again.
    let again = (0..10).any(|_| {
        std::thread::sleep(Duration::from_millis(700));
        ask(&b.bootstrap).0
    });
    assert!(again, "no connection served after the burst");
}
