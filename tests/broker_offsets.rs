//! ListOffsets, DeleteRecords, OffsetForLeaderEpoch and topic configs over the wire.

mod common;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use std::time::Duration;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

async fn setup() -> common::BrokerProcess {
    let b = common::BrokerProcess::start(&[]);
    common::create_topic(&b.bootstrap, "o", 1, &[]).await;
    let p = common::producer(&b.bootstrap, &[("linger.ms", "0")]);
    // Ten single-record batches with timestamps 1000, 1010, ..., 1090.
    for i in 0..10i64 {
        p.send(
            FutureRecord::<(), _>::to("o")
                .payload("x")
                .timestamp(1000 + 10 * i),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    }
    b
}

fn list_offsets(b: &common::BrokerProcess, ts: i64) -> (i16, i64, i64) {
    list_offsets_at(b, ts, 7)
}

fn list_offsets_at(b: &common::BrokerProcess, ts: i64, version: i16) -> (i16, i64, i64) {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("o"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(ts)])]);
    let mut s = common::raw::connect(&b.bootstrap);
    let r: ListOffsetsResponse = common::raw::call(&mut s, ApiKey::ListOffsets, version, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

/// librdkafka 2.0 (kcat in Debian 12) asks with ListOffsets v1, which has no leader epoch field.
#[tokio::test]
async fn list_offsets_answers_every_advertised_version() {
    let b = setup().await;
    for v in 1..=7 {
        assert_eq!(list_offsets_at(&b, -2, v), (0, 0, -1), "earliest at v{v}");
        assert_eq!(list_offsets_at(&b, -1, v), (0, 10, -1), "latest at v{v}");
        assert_eq!(
            list_offsets_at(&b, 1035, v),
            (0, 4, 1040),
            "by time at v{v}"
        );
    }
}

#[tokio::test]
async fn list_offsets_answers_earliest_latest_max_and_by_timestamp() {
    let b = setup().await;
    assert_eq!(list_offsets(&b, -2), (0, 0, -1));
    assert_eq!(list_offsets(&b, -1), (0, 10, -1));
    assert_eq!(list_offsets(&b, -3), (0, 9, 1090));
    assert_eq!(list_offsets(&b, 1035), (0, 4, 1040));
    assert_eq!(list_offsets(&b, 1040), (0, 4, 1040));
    assert_eq!(list_offsets(&b, 5000), (0, -1, -1));
}

#[tokio::test]
async fn delete_records_moves_the_log_start_offset() {
    let b = setup().await;
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("o"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(6)])]);
    let mut s = common::raw::connect(&b.bootstrap);
    let r: DeleteRecordsResponse = common::raw::call(&mut s, ApiKey::DeleteRecords, 2, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 6));
    assert_eq!(list_offsets(&b, -2), (0, 6, -1));
    // Past the high watermark: OFFSET_OUT_OF_RANGE.
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("o"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(11)])]);
    let r: DeleteRecordsResponse = common::raw::call(&mut s, ApiKey::DeleteRecords, 2, &req);
    assert_eq!(r.topics[0].partitions[0].error_code, 1);
}

#[tokio::test]
async fn offset_for_leader_epoch_reports_the_end_of_the_epoch() {
    let b = setup().await;
    let ask = |current: i32, epoch: i32| {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(name("o"))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(current)
                    .with_leader_epoch(epoch)])])
    };
    let mut s = common::raw::connect(&b.bootstrap);
    let r: OffsetForLeaderEpochResponse =
        common::raw::call(&mut s, ApiKey::OffsetForLeaderEpoch, 4, &ask(0, 0));
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, 0, 10));
    let r: OffsetForLeaderEpochResponse =
        common::raw::call(&mut s, ApiKey::OffsetForLeaderEpoch, 4, &ask(3, 0));
    assert_eq!(
        r.topics[0].partitions[0].error_code, 75,
        "UNKNOWN_LEADER_EPOCH"
    );
}

#[tokio::test]
async fn topic_configs_are_described_and_altered_incrementally() {
    let b = setup().await;
    let mut s = common::raw::connect(&b.bootstrap);
    let alter = |op: i8, key: &str, value: Option<&str>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("o"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_string(key.to_string()))
                    .with_config_operation(op)
                    .with_value(value.map(|v| StrBytes::from_string(v.to_string())))]),
        ])
    };
    let r: IncrementalAlterConfigsResponse = common::raw::call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &alter(0, "retention.ms", Some("60000")),
    );
    assert_eq!(r.responses[0].error_code, 0);
    let r: IncrementalAlterConfigsResponse = common::raw::call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &alter(0, "retention.ms", Some("soon")),
    );
    assert_eq!(r.responses[0].error_code, 40, "INVALID_CONFIG");
    let r: IncrementalAlterConfigsResponse = common::raw::call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &alter(2, "cleanup.policy", Some("compact")),
    );
    assert_eq!(r.responses[0].error_code, 0);
    let describe =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("o"))
            .with_configuration_keys(None)]);
    let r: DescribeConfigsResponse =
        common::raw::call(&mut s, ApiKey::DescribeConfigs, 4, &describe);
    let get = |k: &str| {
        r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == k)
            .map(|c| (c.value.as_ref().map(|v| v.to_string()), c.config_source))
    };
    assert_eq!(get("retention.ms"), Some((Some("60000".into()), 1)));
    assert_eq!(
        get("cleanup.policy"),
        Some((Some("delete,compact".into()), 1))
    );
    assert_eq!(get("segment.bytes"), Some((Some("1073741824".into()), 5)));
    let r: IncrementalAlterConfigsResponse = common::raw::call(
        &mut s,
        ApiKey::IncrementalAlterConfigs,
        1,
        &alter(1, "retention.ms", None),
    );
    assert_eq!(r.responses[0].error_code, 0);
    let r: DescribeConfigsResponse =
        common::raw::call(&mut s, ApiKey::DescribeConfigs, 4, &describe);
    let retention = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "retention.ms")
        .unwrap();
    assert_eq!(retention.value.as_deref(), Some("604800000"));
    assert_eq!(retention.config_source, 5);
}
