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

use super::App;
use crate::client::producer::MetricsSnapshot;

pub(crate) struct ProxyMetrics {
    registry: Registry,
    requests: HistogramVec,
    records: IntCounterVec,
    /// With basic auth: requests refused for their credentials, by reason.
    authentication_failures: IntCounterVec,
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
        let authentication_failures = IntCounterVec::new(
            Opts::new(
                "evenkeel_proxy_authentication_failures_total",
                "Requests refused 401: without basic credentials (missing) or whose login the \
                 cluster refused (refused)",
            ),
            &["reason"],
        )
        .unwrap_or_else(|e| unreachable!("static metric definition: {e}"));
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(records.clone()),
            Box::new(authentication_failures.clone()),
        ] {
            if let Err(e) = registry.register(c) {
                unreachable!("metric registered twice: {e}");
            }
        }
        ProxyMetrics {
            registry,
            requests,
            records,
            authentication_failures,
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

    /// Counts one request refused 401.
    pub fn authentication_failed(&self, reason: &str) {
        self.authentication_failures
            .with_label_values(&[reason])
            .inc();
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

/// The producers' figures as one: counts, rates and per-partition figures summed, maxima the
/// largest, averages the mean of the producers that have one.
fn merged(all: &[MetricsSnapshot]) -> MetricsSnapshot {
    let mut m = MetricsSnapshot::default();
    let mean = |pick: fn(&MetricsSnapshot) -> f64| {
        let known: Vec<f64> = all.iter().map(pick).filter(|v| !v.is_nan()).collect();
        if known.is_empty() {
            f64::NAN
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        }
    };
    let max = |pick: fn(&MetricsSnapshot) -> f64| {
        all.iter()
            .map(pick)
            .filter(|v| !v.is_nan())
            .fold(f64::NAN, f64::max)
    };
    m.batch_size_avg = mean(|s| s.batch_size_avg);
    m.record_queue_time_avg = mean(|s| s.record_queue_time_avg);
    m.request_latency_avg = mean(|s| s.request_latency_avg);
    m.batch_size_max = max(|s| s.batch_size_max);
    m.record_queue_time_max = max(|s| s.record_queue_time_max);
    m.request_latency_max = max(|s| s.request_latency_max);
    for s in all {
        m.record_send_total += s.record_send_total;
        m.record_error_total += s.record_error_total;
        m.record_retry_total += s.record_retry_total;
        m.batch_split_total += s.batch_split_total;
        m.record_send_rate += s.record_send_rate;
        m.record_error_rate += s.record_error_rate;
        m.record_retry_rate += s.record_retry_rate;
        for (tp, p) in &s.per_partition {
            let sum = m.per_partition.entry(tp.clone()).or_default();
            sum.records += p.records;
            sum.bytes += p.bytes;
            sum.batches += p.batches;
        }
    }
    m
}

/// The queue lengths of every producer, summed per partition.
fn merged_queues(all: Vec<Vec<(String, i32, usize)>>) -> Vec<(String, i32, usize)> {
    let mut sum: std::collections::BTreeMap<(String, i32), usize> = Default::default();
    for (topic, partition, n) in all.into_iter().flatten() {
        *sum.entry((topic, partition)).or_default() += n;
    }
    sum.into_iter().map(|((t, p), n)| (t, p, n)).collect()
}

/// The registry, then the producers' figures: the proxy's own producer and, with basic auth,
/// every user's held now, as one.
pub(super) async fn render(State(s): State<App>) -> impl IntoResponse {
    let mut text = s.metrics.render_registry();
    let mut producers = vec![s.own.clone()];
    if let Some(users) = &s.users {
        let held = users.all();
        let u = "evenkeel_proxy_users";
        let _ = writeln!(
            text,
            "# HELP {u} Users whose producers the proxy holds (basic auth)\n# TYPE {u} gauge\n{u} {}",
            held.len()
        );
        let a = "evenkeel_proxy_login_attempts_total";
        let _ = writeln!(
            text,
            "# HELP {a} Basic-auth logins tried against the cluster (a held producer or a \
             remembered refusal answers the rest)\n# TYPE {a} counter\n{a} {}",
            users.login_attempts()
        );
        producers.extend(held.into_iter().map(|(_, p)| p));
    }
    let snapshots: Vec<MetricsSnapshot> = producers.iter().map(|p| p.metrics()).collect();
    let queues = merged_queues(producers.iter().map(|p| p.queue_lengths()).collect());
    text.push_str(&render_producer(&merged(&snapshots), &queues));
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
    fn producers_figures_merge_into_one() {
        let mut a = MetricsSnapshot {
            record_send_total: 2,
            record_send_rate: 1.0,
            batch_size_avg: 100.0,
            batch_size_max: 100.0,
            request_latency_avg: f64::NAN,
            ..Default::default()
        };
        a.per_partition.insert(
            ("t".into(), 0),
            PartitionSent {
                records: 2,
                bytes: 20,
                batches: 1,
            },
        );
        let mut b = MetricsSnapshot {
            record_send_total: 3,
            record_send_rate: 0.5,
            batch_size_avg: 300.0,
            batch_size_max: 400.0,
            request_latency_avg: 7.0,
            ..Default::default()
        };
        b.per_partition.insert(
            ("t".into(), 0),
            PartitionSent {
                records: 3,
                bytes: 30,
                batches: 2,
            },
        );
        let m = merged(&[a, b]);
        assert_eq!(m.record_send_total, 5);
        assert_eq!(m.record_send_rate, 1.5);
        assert_eq!((m.batch_size_avg, m.batch_size_max), (200.0, 400.0));
        assert_eq!(
            m.request_latency_avg, 7.0,
            "a producer without one is left out"
        );
        assert_eq!(m.per_partition[&("t".to_string(), 0)].bytes, 50);
        assert!(merged(&[]).batch_size_avg.is_nan());
        let q = merged_queues(vec![
            vec![("t".into(), 0, 1)],
            vec![("t".into(), 0, 2), ("u".into(), 1, 1)],
        ]);
        assert_eq!(q, vec![("t".to_string(), 0, 3), ("u".to_string(), 1, 1)]);
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
