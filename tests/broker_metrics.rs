//! `/metrics`, `/healthz` and `/readyz` of a running broker, with Strimzi's metric names.

mod common;

use std::time::Duration;

use rdkafka::producer::FutureRecord;

#[tokio::test]
async fn metrics_health_and_readiness_are_served() {
    let port = common::free_port();
    let addr = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&addr]);
    assert_eq!(common::http_get(port, "/healthz").0, 200);
    assert_eq!(common::http_get(port, "/readyz").0, 200);
    common::create_topic(&b.bootstrap, "m", 3, &[]).await;
    let p = common::producer(&b.bootstrap, &[]);
    for i in 0..100 {
        let v = format!("value-{i}");
        p.send(
            FutureRecord::<(), _>::to("m").payload(&v),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    }
    let (status, text) = common::http_get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(
        common::metric_value(
            &text,
            "kafka_network_requestmetrics_requests_total{request=\"Produce\""
        ) >= 1.0
    );
    assert!(
        common::metric_value(
            &text,
            "kafka_server_brokertopicmetrics_bytesin_total{topic=\"m\"}"
        ) > 1000.0
    );
    assert_eq!(
        common::metric_value(
            &text,
            "kafka_server_brokertopicmetrics_messagesin_total{topic=\"m\"}"
        ),
        100.0
    );
    assert_eq!(
        common::metric_value(&text, "kafka_server_replicamanager_leadercount"),
        3.0
    );
    assert_eq!(
        common::metric_value(&text, "kafka_server_replicamanager_partitioncount"),
        3.0
    );
    // The image's counts: one topic of three partitions, each led.
    for (metric, want) in [
        ("kafka_controller_kafkacontroller_globaltopiccount", 1.0),
        ("kafka_controller_kafkacontroller_globalpartitioncount", 3.0),
        (
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            0.0,
        ),
    ] {
        assert_eq!(common::metric_value(&text, metric), want, "{metric}");
    }
    assert!(
        common::metric_value(
            &text,
            "kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"}"
        ) >= 1.0
    );
    assert!(
        common::metric_value(
            &text,
            "kafka_network_requestmetrics_requestqueuetimems_count{request=\"Metadata\"}"
        ) >= 1.0
    );
    for idle in [
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
    ] {
        let v = common::metric_value(&text, idle);
        assert!((0.0..=1.0).contains(&v), "{idle} = {v}");
    }
    assert!(text.contains(
        "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Fetch\"}"
    ));
    assert!(text.contains("kafka_network_requestchannel_requestqueuesize 0"));
    assert!(common::metric_value(&text, "kafka_log_log_size{partition=\"0\",topic=\"m\"}") >= 0.0);
}

/// Fetches that time out on a partition nobody writes to leave the purgatory within seconds:
/// nothing else would ever visit their watch entries, and PurgatorySize (which the rebalancer
/// reads as load) would keep counting them.
#[tokio::test]
async fn timed_out_fetches_leave_the_purgatory_of_a_quiet_partition() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    const FETCH_PURGATORY: &str =
        "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Fetch\"}";
    let port = common::free_port();
    let addr = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&addr]);
    common::create_topic(&b.bootstrap, "quiet", 1, &[]).await;
    let fetch = common::raw::waiting_fetch("quiet", 20);
    let mut s = common::raw::connect(&b.bootstrap);
    let started = std::time::Instant::now();
    for _ in 0..50 {
        let r: FetchResponse = common::raw::call(&mut s, ApiKey::Fetch, 12, &fetch);
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));
    }
    // Each fetch waited its 20 ms in the purgatory (so left a watch entry), none answered at once.
    assert!(started.elapsed() >= Duration::from_millis(50 * 20));
    let size = || common::metric_value(&common::http_get(port, "/metrics").1, FETCH_PURGATORY);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = size();
    while last > 0.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        last = size();
    }
    assert_eq!(last, 0.0, "timed-out fetches still watched after 10 s");
}
