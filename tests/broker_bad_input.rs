//! Bad input against the real binary: oversize and malformed frames, unknown APIs and versions,
//! invalid topic names, oversize and corrupt records, partition decreases. Each test checks what
//! Kafka does (close the connection, or answer with Kafka's error code) and that the broker keeps
//! serving other connections afterwards.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreatePartitionsRequest,
    CreatePartitionsResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};

use common::raw;

const UNSUPPORTED_VERSION: i16 = 35;
const CORRUPT_MESSAGE: i16 = 2;
const INVALID_PARTITIONS: i16 = 37;

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap()
}

async fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let r = admin(bootstrap)
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// Metadata v12 for every topic, on a raw socket.
fn all_topics(bootstrap: &str) -> MetadataResponse {
    let mut s = raw::connect(bootstrap);
    raw::call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Writes `frame` behind its 4-byte size prefix.
fn send_frame(s: &mut TcpStream, frame: &[u8]) {
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(frame);
    s.write_all(&out).unwrap();
}

/// A request header of `header_version` claiming `key` at `version`, then `body` as given.
fn frame(key: i16, version: i16, header_version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("bad-input-test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, header_version).unwrap();
    buf.put_slice(body);
    buf.to_vec()
}

fn encoded<R: Encodable>(body: &R, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

/// A fresh connection still gets answers: ApiVersions v3 and Metadata v12.
fn assert_still_serving(bootstrap: &str) {
    let mut s = raw::connect(bootstrap);
    let v: ApiVersionsResponse = raw::call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("bad-input-test"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    );
    assert_eq!(v.error_code, 0);
    assert!(v
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Metadata as i16));
    let m: MetadataResponse = raw::call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    assert_eq!(m.brokers.len(), 1, "{m:?}");
}

/// The connection is closed by the broker: a read sees EOF or a reset, not a response and not a
/// timeout (`raw::is_closed` would also count a timeout, which would hide a hung connection).
fn assert_closed(s: &mut TcpStream, what: &str) {
    use std::io::{ErrorKind, Read};
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: the broker answered {n} bytes instead of closing"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("{what}: the broker kept the connection open (no close within 10 s)")
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ),
            "{what}: unexpected read error {e}"
        ),
    }
}

#[test]
fn oversize_frame_closes_the_connection_and_the_broker_keeps_serving() {
    let b = common::BrokerProcess::start(&["socket.request.max.bytes=1024"]);
    let mut s = raw::connect(&b.bootstrap);
    s.write_all(&2000i32.to_be_bytes()).unwrap();
    // Some of the promised bytes; the broker must not wait for the rest.
    let _ = s.write_all(&[0u8; 100]);
    assert_closed(
        &mut s,
        "size prefix 2000 over socket.request.max.bytes=1024",
    );
    assert_still_serving(&b.bootstrap);
}

#[test]
fn negative_frame_size_closes_the_connection_and_the_broker_keeps_serving() {
    let b = common::BrokerProcess::start(&[]);
    let mut s = raw::connect(&b.bootstrap);
    s.write_all(&(-1i32).to_be_bytes()).unwrap();
    assert_closed(&mut s, "size prefix -1");
    assert_still_serving(&b.bootstrap);
}

#[test]
fn frame_too_short_for_a_header_closes_the_connection_and_the_broker_keeps_serving() {
    let b = common::BrokerProcess::start(&[]);
    let mut s = raw::connect(&b.bootstrap);
    send_frame(&mut s, &[0xde, 0xad, 0xbe]);
    assert_closed(&mut s, "3-byte frame");
    assert_still_serving(&b.bootstrap);
}

#[test]
fn known_api_with_a_truncated_or_garbage_body_closes_the_connection() {
    let b = common::BrokerProcess::start(&[]);
    let good = encoded(
        &MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name("some-topic")))
        ])),
        12,
    );
    // A valid Metadata v12 header (header v2) and the body cut in half.
    let mut s = raw::connect(&b.bootstrap);
    send_frame(
        &mut s,
        &frame(ApiKey::Metadata as i16, 12, 2, 1, &good[..good.len() / 2]),
    );
    assert_closed(&mut s, "truncated Metadata v12 body");
    // A valid Produce v9 header and a body of garbage (a huge compact array length).
    let mut s = raw::connect(&b.bootstrap);
    send_frame(&mut s, &frame(ApiKey::Produce as i16, 9, 2, 1, &[0xff; 11]));
    assert_closed(&mut s, "garbage Produce v9 body");
    // A header that itself is cut short (client id longer than the frame).
    let mut s = raw::connect(&b.bootstrap);
    let mut bad_header = frame(ApiKey::Metadata as i16, 4, 1, 1, &[]);
    bad_header[8..10].copy_from_slice(&500i16.to_be_bytes());
    send_frame(&mut s, &bad_header);
    assert_closed(&mut s, "client id length past the end of the frame");
    assert_still_serving(&b.bootstrap);
}

#[test]
fn unknown_api_key_closes_the_connection_and_the_broker_keeps_serving() {
    let b = common::BrokerProcess::start(&[]);
    let mut s = raw::connect(&b.bootstrap);
    send_frame(&mut s, &frame(999, 0, 1, 1, &[]));
    assert_closed(&mut s, "API key 999");
    // A key Kafka knows but a broker listener never serves (Vote, a KRaft controller API) is
    // closed the same way.
    assert!(!evenkeel::protocol::api_versions::is_served(
        ApiKey::Vote,
        0
    ));
    let mut s = raw::connect(&b.bootstrap);
    send_frame(&mut s, &frame(ApiKey::Vote as i16, 0, 1, 1, &[]));
    assert_closed(&mut s, "Vote v0");
    assert_still_serving(&b.bootstrap);
}

#[test]
fn too_new_metadata_version_closes_the_connection_and_the_broker_keeps_serving() {
    let b = common::BrokerProcess::start(&[]);
    let mut s = raw::connect(&b.bootstrap);
    let body = encoded(&MetadataRequest::default().with_topics(None), 12);
    send_frame(&mut s, &frame(ApiKey::Metadata as i16, 99, 2, 1, &body));
    assert_closed(&mut s, "Metadata v99");
    assert_still_serving(&b.bootstrap);
}

#[test]
fn too_new_api_versions_gets_a_v0_answer_with_unsupported_version_and_the_api_list() {
    let b = common::BrokerProcess::start(&[]);
    let mut s = raw::connect(&b.bootstrap);
    // What a newer client sends first: its own latest ApiVersions, header v2, flexible body.
    let body = encoded(
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("future-client"))
            .with_client_software_version(StrBytes::from_static_str("99.0")),
        3,
    );
    send_frame(
        &mut s,
        &frame(ApiKey::ApiVersions as i16, 99, 2, 4242, &body),
    );
    let mut resp = raw::read_frame(&mut s).expect("an ApiVersions answer, not a closed socket");
    let header = ResponseHeader::decode(&mut resp, 0).unwrap();
    assert_eq!(header.correlation_id, 4242);
    let v = ApiVersionsResponse::decode(&mut resp, 0).unwrap();
    assert!(resp.is_empty(), "{} bytes after the v0 body", resp.len());
    assert_eq!(v.error_code, UNSUPPORTED_VERSION);
    // KIP-511: the answer lists at least ApiVersions' own range, so the client can retry.
    // (Kafka lists only key 18 here; listing every served key as well is also fine for clients.)
    let keys: Vec<i16> = v.api_keys.iter().map(|k| k.api_key).collect();
    assert!(keys.contains(&(ApiKey::ApiVersions as i16)), "{keys:?}");
    let av = v
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
        .unwrap();
    assert_eq!(av.min_version, 0);
    assert!(av.max_version >= 3);
    // As in Kafka the connection stays open: the client retries with a version it now knows.
    let again: ApiVersionsResponse = raw::call(
        &mut s,
        ApiKey::ApiVersions,
        0,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(again.error_code, 0);
    assert_still_serving(&b.bootstrap);
}

#[tokio::test]
async fn invalid_topic_names_are_refused_with_invalid_topic_exception() {
    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "my.topic", 1).await;
    let long = "x".repeat(250);
    let a = admin(&b.bootstrap);
    for name in ["a b", "..", long.as_str(), "my_topic"] {
        let r = a
            .create_topics(
                &[NewTopic::new(name, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .unwrap();
        assert_eq!(
            r[0],
            Err((name.to_string(), RDKafkaErrorCode::InvalidTopic)),
            "topic name {name:?}"
        );
    }
    // A 249-character name is the longest Kafka allows.
    create_topic(&b.bootstrap, &"y".repeat(249), 1).await;
    // Nothing invalid was created.
    let m = all_topics(&b.bootstrap);
    let mut names: Vec<String> = m
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    names.sort();
    assert_eq!(names, vec!["my.topic".to_string(), "y".repeat(249)]);
    assert_still_serving(&b.bootstrap);
}

#[tokio::test]
async fn record_over_message_max_bytes_fails_with_message_size_too_large_then_small_ones_succeed() {
    let b = common::BrokerProcess::start(&["message.max.bytes=10000"]);
    create_topic(&b.bootstrap, "big", 1).await;
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("message.max.bytes", "1000000")
        .set("message.timeout.ms", "20000")
        .create()
        .unwrap();
    let value = vec![b'v'; 20 * 1024];
    let err = p
        .send(
            FutureRecord::<(), _>::to("big").payload(&value),
            Duration::from_secs(10),
        )
        .await
        .expect_err("a 20 KB record over message.max.bytes=10000");
    assert_eq!(
        err.0,
        KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
    );
    let d = p
        .send(
            FutureRecord::<(), _>::to("big").payload("small"),
            Duration::from_secs(10),
        )
        .await
        .expect("a small record after the refused one");
    assert_eq!(
        (d.partition, d.offset),
        (0, 0),
        "the big record took no offset"
    );
    assert_still_serving(&b.bootstrap);
}

fn list_latest_offset(s: &mut TcpStream, topic: &str, partition: i32) -> (i16, i64) {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let r: ListOffsetsResponse = raw::call(s, ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn produce_request(topic: &str, records: Vec<u8>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.into()))])])
}

#[tokio::test]
async fn batch_with_a_wrong_crc_is_refused_with_corrupt_message_and_nothing_is_written() {
    use evenkeel::storage::batch::build_batch;

    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "crc", 1).await;
    let mut batch = build_batch(
        &[
            (Some(b"k1".as_slice()), Some(b"first value".as_slice())),
            (None, Some(b"second value".as_slice())),
        ],
        1_700_000_000_000,
    );
    // Flip one byte of the last record's value: the header is intact, the CRC is not.
    let last = batch.len() - 2;
    batch[last] ^= 0x01;
    let mut s = raw::connect(&b.bootstrap);
    let resp: ProduceResponse =
        raw::call(&mut s, ApiKey::Produce, 9, &produce_request("crc", batch));
    let pr = &resp.responses[0].partition_responses[0];
    assert_eq!(pr.error_code, CORRUPT_MESSAGE, "{pr:?}");
    assert_eq!(pr.base_offset, -1);
    // Nothing was written: the log end offset is still 0 and the segment is empty.
    assert_eq!(list_latest_offset(&mut s, "crc", 0), (0, 0));
    let seg = b.data.join("broker-1/crc-0/00000000000000000000.log");
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        0,
        "{}",
        seg.display()
    );
    // The same connection still works, and an intact batch lands at offset 0.
    let good = build_batch(&[(None, Some(b"intact".as_slice()))], 1_700_000_000_000);
    let resp: ProduceResponse =
        raw::call(&mut s, ApiKey::Produce, 9, &produce_request("crc", good));
    let pr = &resp.responses[0].partition_responses[0];
    assert_eq!((pr.error_code, pr.base_offset), (0, 0), "{pr:?}");
    assert_eq!(list_latest_offset(&mut s, "crc", 0), (0, 1));
    assert_still_serving(&b.bootstrap);
}

#[tokio::test]
async fn partition_decrease_is_refused_with_invalid_partitions() {
    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "t", 3).await;
    let r = admin(&b.bootstrap)
        .create_partitions(&[NewPartitions::new("t", 2)], &AdminOptions::new())
        .await
        .unwrap();
    assert_eq!(
        r[0],
        Err(("t".to_string(), RDKafkaErrorCode::InvalidPartitions))
    );
    let mut s = raw::connect(&b.bootstrap);
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(topic_name("t"))
            .with_count(2)
            .with_assignments(None)]);
    for version in [0, 3] {
        let resp: CreatePartitionsResponse =
            raw::call(&mut s, ApiKey::CreatePartitions, version, &req);
        let t = &resp.results[0];
        assert_eq!(t.error_code, INVALID_PARTITIONS, "v{version}");
        assert_eq!(
            t.error_message.as_deref(),
            Some("The topic t currently has 3 partition(s); 2 would not be an increase."),
            "v{version}"
        );
    }
    // Still three partitions.
    let m: MetadataResponse = raw::call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name("t")))
        ])),
    );
    assert_eq!(m.topics[0].partitions.len(), 3);
    assert_still_serving(&b.bootstrap);
}

/// Fails with a clear message when the broker process no longer answers a fresh connection
/// (a bare connect is not enough: it can still land in the backlog of a dying process).
fn assert_broker_alive(bootstrap: &str, after: &str) {
    let mut s = match TcpStream::connect(bootstrap) {
        Ok(s) => s,
        Err(e) => {
            panic!("the broker is gone after {after}: connecting to {bootstrap} fails with {e}")
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw::send(
        &mut s,
        ApiKey::ApiVersions,
        0,
        1,
        &ApiVersionsRequest::default(),
    );
    assert!(
        raw::read_frame(&mut s).is_some(),
        "the broker is gone after {after}: a fresh connection gets no ApiVersions answer"
    );
}

/// Kafka checks an array length against the bytes left before allocating; a decoder that
/// reserves the claimed length first aborts the whole process on a 14-byte request.
#[test]
fn huge_array_length_in_a_tiny_request_closes_the_connection_and_the_broker_survives() {
    let b = common::BrokerProcess::start(&[]);
    // Metadata v4 (not flexible): topics is an INT32-length array. Claim i32::MAX topics in a
    // 4-byte body; Kafka refuses ("Tried to allocate a collection of size 2147483647, but there
    // are only 0 bytes remaining") and closes the connection.
    let mut s = raw::connect(&b.bootstrap);
    send_frame(
        &mut s,
        &frame(ApiKey::Metadata as i16, 4, 1, 1, &i32::MAX.to_be_bytes()),
    );
    assert_closed(&mut s, "Metadata v4 with 2147483647 topics in 4 bytes");
    assert_broker_alive(&b.bootstrap, "Metadata v4 claiming 2147483647 topics");
    // Metadata v12 (flexible): a COMPACT_ARRAY length as an unsigned varint, 0xffffffff.
    let mut s = raw::connect(&b.bootstrap);
    send_frame(
        &mut s,
        &frame(
            ApiKey::Metadata as i16,
            12,
            2,
            1,
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
    );
    assert_closed(&mut s, "Metadata v12 with 4294967294 topics in 5 bytes");
    assert_broker_alive(&b.bootstrap, "Metadata v12 claiming 4294967294 topics");
    assert_still_serving(&b.bootstrap);
}

#[tokio::test]
async fn one_bad_topic_in_a_create_topics_request_fails_alone() {
    let b = common::BrokerProcess::start(&[]);
    create_topic(&b.bootstrap, "taken", 1).await;
    let r = admin(&b.bootstrap)
        .create_topics(
            &[
                NewTopic::new("first", 2, TopicReplication::Fixed(1)),
                NewTopic::new("taken", 1, TopicReplication::Fixed(1)),
                NewTopic::new("too-wide", 1, TopicReplication::Fixed(3)),
                NewTopic::new("last", 3, TopicReplication::Fixed(1)),
            ],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        vec![
            Ok("first".to_string()),
            Err(("taken".to_string(), RDKafkaErrorCode::TopicAlreadyExists)),
            Err((
                "too-wide".to_string(),
                RDKafkaErrorCode::InvalidReplicationFactor
            )),
            Ok("last".to_string()),
        ]
    );
    let m = all_topics(&b.bootstrap);
    let mut got: Vec<(String, usize)> = m
        .topics
        .iter()
        .filter_map(|t| Some((t.name.as_ref()?.0.to_string(), t.partitions.len())))
        .collect();
    got.sort();
    let want = [("first", 2), ("last", 3), ("taken", 1)].map(|(n, p)| (n.to_string(), p));
    assert_eq!(
        got,
        want.to_vec(),
        "the good topics exist, the bad ones do not"
    );
}
