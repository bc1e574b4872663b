//! The proxy's `/metrics`: HTTP request timings by route and status, records answered, and the
//! producer's own figures under the names Strimzi's JMX exporter gives the Java producer's
//! (`kafka_producer_producer_metrics_*`), with the per-partition queue lengths and bytes that
//! show the partitioner at work.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use super::Shared;
use crate::client::producer::MetricsSnapshot;

pub(crate) struct ProxyMetrics {
    registry: Registry,
    requests: HistogramVec,
    records: IntCounterVec,
}

impl ProxyMetrics {
    pub fn new() -> ProxyMetrics {
        let registry = Registry::new();
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "evenkeel_proxy_http_request_duration_seconds",
                "HTTP requests by method, route and status",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ]),
            &["method", "route", "status"],
        )
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
        let records = IntCounterVec::new(
            Opts::new(
                "evenkeel_proxy_records_answered_total",
                "Records answered, written or failed",
            ),
            &["result"],
        )
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(records.clone()),
        ] {
            if let Err(e) = registry.register(c) {
                unreachable!("metric registered twice: {e}");
            }
        }
        ProxyMetrics {
            registry,
            requests,
            records,
        }
    }

    pub fn observe(&self, method: &str, route: &str, status: u16, took: Duration) {
        self.requests
            .with_label_values(&[method, route, &status.to_string()])
            .observe(took.as_secs_f64());
    }

    /// Counts one record's report: written, or failed with an error in its place.
    pub fn record_answered(&self, written: bool) {
        let result = if written { "written" } else { "failed" };
        self.records.with_label_values(&[result]).inc();
    }

    fn render_registry(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!(error = %e, "cannot encode the proxy metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The producer's figures in the exposition format.
fn render_producer(m: &MetricsSnapshot, queues: &[(String, i32, usize)]) -> String {
    let mut out = String::new();
    let p = "kafka_producer_producer_metrics";
    for (name, help, v) in [
        (
            "record_send_total",
            "Records acknowledged",
            m.record_send_total,
        ),
        (
            "record_error_total",
            "Records that failed",
            m.record_error_total,
        ),
        (
            "record_retry_total",
            "Record sends retried",
            m.record_retry_total,
        ),
        (
            "batch_split_total",
            "Batches split after MESSAGE_TOO_LARGE",
            m.batch_split_total,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {p}_{name} {help}\n# TYPE {p}_{name} counter\n{p}_{name} {v}"
        );
    }
    for (name, help, v) in [
        (
            "record_send_rate",
            "Records acknowledged per second",
            m.record_send_rate,
        ),
        (
            "record_error_rate",
            "Records failed per second",
            m.record_error_rate,
        ),
        (
            "record_retry_rate",
            "Record sends retried per second",
            m.record_retry_rate,
        ),
        (
            "batch_size_avg",
            "Average encoded batch size (bytes)",
            m.batch_size_avg,
        ),
        (
            "batch_size_max",
            "Largest encoded batch (bytes)",
            m.batch_size_max,
        ),
        (
            "record_queue_time_avg",
            "Average time a batch waited in the accumulator (ms)",
            m.record_queue_time_avg,
        ),
        (
            "record_queue_time_max",
            "Longest time a batch waited in the accumulator (ms)",
            m.record_queue_time_max,
        ),
        (
            "request_latency_avg",
            "Average produce request latency (ms)",
            m.request_latency_avg,
        ),
        (
            "request_latency_max",
            "Longest produce request latency (ms)",
            m.request_latency_max,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {p}_{name} {help} over the last two 30 s windows\n# TYPE {p}_{name} gauge\n{p}_{name} {v}"
        );
    }
    let q = "evenkeel_proxy_partition_queue_batches";
    let _ = writeln!(out, "# HELP {q} Batches queued per partition (the built-in partitioner's input)\n# TYPE {q} gauge");
    for (topic, partition, n) in queues {
        let _ = writeln!(
            out,
            "{q}{{topic=\"{topic}\",partition=\"{partition}\"}} {n}"
        );
    }
    for (name, help, pick) in [
        (
            "bytes_sent_total",
            "Bytes of batches acknowledged per partition",
            0,
        ),
        (
            "records_sent_total",
            "Records acknowledged per partition",
            1,
        ),
        (
            "batches_sent_total",
            "Batches acknowledged per partition",
            2,
        ),
    ] {
        let n = format!("evenkeel_proxy_partition_{name}");
        let _ = writeln!(out, "# HELP {n} {help}\n# TYPE {n} counter");
        for ((topic, partition), s) in &m.per_partition {
            let v = [s.bytes, s.records, s.batches][pick];
            let _ = writeln!(
                out,
                "{n}{{topic=\"{topic}\",partition=\"{partition}\"}} {v}"
            );
        }
    }
    out
}

pub(super) async fn render(State(s): State<Shared>) -> impl IntoResponse {
    let mut text = s.metrics.render_registry();
    text.push_str(&render_producer(
        &s.producer.metrics(),
        &s.producer.queue_lengths(),
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::producer::PartitionSent;

    #[test]
    fn per_partition_figures_are_labelled_by_topic_and_partition() {
        let mut m = MetricsSnapshot {
            record_send_total: 7,
            record_send_rate: 0.25,
            batch_size_avg: f64::NAN,
            ..Default::default()
        };
        m.per_partition.insert(
            ("t".into(), 2),
            PartitionSent {
                records: 7,
                bytes: 700,
                batches: 1,
            },
        );
        let text = render_producer(&m, &[("t".into(), 2, 3)]);
        assert!(
            text.contains("# TYPE kafka_producer_producer_metrics_record_send_total counter\nkafka_producer_producer_metrics_record_send_total 7\n"),
            "{text}"
        );
        assert!(text.contains("kafka_producer_producer_metrics_record_send_rate 0.25\n"));
        assert!(text.contains("kafka_producer_producer_metrics_batch_size_avg NaN\n"));
        assert!(text
            .contains("evenkeel_proxy_partition_queue_batches{topic=\"t\",partition=\"2\"} 3\n"));
        assert!(text.contains(
            "evenkeel_proxy_partition_bytes_sent_total{topic=\"t\",partition=\"2\"} 700\n"
        ));
        assert!(text.contains(
            "evenkeel_proxy_partition_batches_sent_total{topic=\"t\",partition=\"2\"} 1\n"
        ));
    }

    #[test]
    fn records_are_counted_written_or_failed_apart() {
        let m = ProxyMetrics::new();
        for written in [true, false, true] {
            m.record_answered(written);
        }
        let text = m.render_registry();
        assert!(
            text.contains("evenkeel_proxy_records_answered_total{result=\"written\"} 2"),
            "{text}"
        );
        assert!(text.contains("evenkeel_proxy_records_answered_total{result=\"failed\"} 1"));
    }
}
