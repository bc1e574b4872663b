//! `/metrics`, `/healthz` and `/readyz` of a running broker, with Strimzi's metric names.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use rdkafka::producer::FutureRecord;

fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let status = body
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body)
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {series}"))
}

#[tokio::test]
async fn metrics_health_and_readiness_are_served() {
    let port = common::free_port();
    let addr = format!("evenkeel.metrics.address=127.0.0.1:{port}");
    let b = common::BrokerProcess::start(&[&addr]);
    assert_eq!(http_get(port, "/healthz").0, 200);
    assert_eq!(http_get(port, "/readyz").0, 200);
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
    let (status, text) = http_get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(
        value(
            &text,
            "kafka_network_requestmetrics_requests_total{request=\"Produce\""
        ) >= 1.0
    );
    assert!(
        value(
            &text,
            "kafka_server_brokertopicmetrics_bytesin_total{topic=\"m\"}"
        ) > 1000.0
    );
    assert_eq!(
        value(
            &text,
            "kafka_server_brokertopicmetrics_messagesin_total{topic=\"m\"}"
        ),
        100.0
    );
    assert_eq!(value(&text, "kafka_server_replicamanager_leadercount"), 3.0);
    assert_eq!(
        value(&text, "kafka_server_replicamanager_partitioncount"),
        3.0
    );
    assert!(
        value(
            &text,
            "kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"}"
        ) >= 1.0
    );
    assert!(
        value(
            &text,
            "kafka_network_requestmetrics_requestqueuetimems_count{request=\"Metadata\"}"
        ) >= 1.0
    );
    for idle in [
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
    ] {
        let v = value(&text, idle);
        assert!((0.0..=1.0).contains(&v), "{idle} = {v}");
    }
    assert!(text.contains(
        "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Fetch\"}"
    ));
    assert!(text.contains("kafka_network_requestchannel_requestqueuesize 0"));
    assert!(value(&text, "kafka_log_log_size{partition=\"0\",topic=\"m\"}") >= 0.0);
}
