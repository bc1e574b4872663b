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
