//! Broker metrics under Strimzi's JMX-exporter names, and the `/metrics`, `/healthz` and
//! `/readyz` endpoints (axum). Gauges that describe state are refreshed at scrape time.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Millisecond buckets for request timings, from sub-millisecond to minutes (the 30–240 s
/// stalls a convoyed purgatory causes in Kafka must land in a bucket of their own).
const TIME_BUCKETS_MS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0, 60000.0, 120000.0, 240000.0,
];

/// Where one request's time went, in Kafka's terms.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestTimes {
    /// From the first bytes arriving to a handler taking the request (includes time the
    /// connection waited for room in a full queue).
    pub queue: Duration,
    /// Handler work.
    pub local: Duration,
    /// Waiting in the purgatory.
    pub remote: Duration,
    /// Writing the response.
    pub send: Duration,
}

/// Busy time of a pool of workers, turned into an idle fraction over each scrape interval.
pub struct IdleMeter {
    busy_ns: AtomicU64,
    last: Mutex<(Instant, u64)>,
}

impl Default for IdleMeter {
    fn default() -> Self {
        IdleMeter {
            busy_ns: AtomicU64::new(0),
            last: Mutex::new((Instant::now(), 0)),
        }
    }
}

impl IdleMeter {
    pub fn add_busy(&self, d: Duration) {
        self.busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Idle fraction of `workers` since the previous call, given their total busy time
    /// (`None` uses the time recorded with `add_busy`).
    pub fn idle_fraction(&self, workers: usize, total_busy_ns: Option<u64>) -> f64 {
        self.idle_fraction_at(Instant::now(), workers, total_busy_ns)
    }

    /// `idle_fraction` as seen at `now`.
    fn idle_fraction_at(&self, now: Instant, workers: usize, total_busy_ns: Option<u64>) -> f64 {
        let busy_now = total_busy_ns.unwrap_or_else(|| self.busy_ns.load(Ordering::Relaxed));
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(last.0).as_nanos() as f64;
        let elapsed = elapsed * workers.max(1) as f64;
        let busy = busy_now.saturating_sub(last.1) as f64;
        *last = (now, busy_now);
        if elapsed <= 0.0 {
            return 1.0;
        }
        (1.0 - busy / elapsed).clamp(0.0, 1.0)
    }
}

/// Declares the broker's metrics once, as a table: each field with its type and how it is
/// registered in the registry named by the first token (the struct and `new` follow from it).
macro_rules! broker_metrics {
    ($registry:ident; $( $(#[doc = $doc:literal])* $field:ident: $ty:ty = $init:expr ),* $(,)?) => {
        pub struct BrokerMetrics {
            pub registry: Registry,
            $( $(#[doc = $doc])* pub $field: $ty, )*
            ready: AtomicBool,
        }

        impl BrokerMetrics {
            pub fn new() -> BrokerMetrics {
                let $registry = Registry::new();
                BrokerMetrics {
                    $( $field: $init, )*
                    registry: $registry,
                    ready: AtomicBool::new(false),
                }
            }
        }
    };
}

broker_metrics! {
    r;
    requests: IntCounterVec = counter(
        &r,
        "kafka_network_requestmetrics_requests_total",
        "Requests received, by API and version",
        &["request", "version"],
    ),
    total_time: HistogramVec = histogram(
        &r,
        "kafka_network_requestmetrics_totaltimems",
        "Time from a request's first bytes to its response written, ms",
    ),
    queue_time: HistogramVec = histogram(
        &r,
        "kafka_network_requestmetrics_requestqueuetimems",
        "Time from a request's first bytes to a handler taking it, ms",
    ),
    local_time: HistogramVec = histogram(
        &r,
        "kafka_network_requestmetrics_localtimems",
        "Time a handler worked on the request, ms",
    ),
    remote_time: HistogramVec = histogram(
        &r,
        "kafka_network_requestmetrics_remotetimems",
        "Time the request waited in the purgatory, ms",
    ),
    send_time: HistogramVec = histogram(
        &r,
        "kafka_network_requestmetrics_responsesendtimems",
        "Time to write the response, ms",
    ),
    bytes_in: IntCounterVec = counter(
        &r,
        "kafka_server_brokertopicmetrics_bytesin_total",
        "Bytes appended, by topic",
        &["topic"],
    ),
    bytes_out: IntCounterVec = counter(
        &r,
        "kafka_server_brokertopicmetrics_bytesout_total",
        "Bytes fetched, by topic",
        &["topic"],
    ),
    messages_in: IntCounterVec = counter(
        &r,
        "kafka_server_brokertopicmetrics_messagesin_total",
        "Records appended, by topic",
        &["topic"],
    ),
    network_idle: Gauge = gauge(
        &r,
        "kafka_network_socketserver_networkprocessoravgidle_percent",
        "Fraction of time the network threads were idle since the last scrape (0..1)",
    ),
    handler_idle: Gauge = gauge(
        &r,
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
        "Fraction of time the request handlers were idle since the last scrape (0..1)",
    ),
    request_queue_size: IntGauge = int_gauge(
        &r,
        "kafka_network_requestchannel_requestqueuesize",
        "Requests waiting for a handler",
    ),
    purgatory_size: GaugeVec = gauge_vec(
        &r,
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "Watch entries in the purgatory",
        &["delayedOperation"],
    ),
    leader_count: IntGauge = int_gauge(
        &r,
        "kafka_server_replicamanager_leadercount",
        "Partitions this broker leads",
    ),
    partition_count: IntGauge = int_gauge(
        &r,
        "kafka_server_replicamanager_partitioncount",
        "Partitions on this broker",
    ),
    /// The cluster's topics, partitions and leaderless partitions in the metadata image this
    /// broker published (Kafka reports them on its controllers, under these names).
    global_topic_count: IntGauge = int_gauge(
        &r,
        "kafka_controller_kafkacontroller_globaltopiccount",
        "Topics in the cluster, by this broker's metadata image",
    ),
    global_partition_count: IntGauge = int_gauge(
        &r,
        "kafka_controller_kafkacontroller_globalpartitioncount",
        "Partitions in the cluster, by this broker's metadata image",
    ),
    offline_partitions: IntGauge = int_gauge(
        &r,
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions with no leader, by this broker's metadata image",
    ),
    under_replicated: IntGauge = int_gauge(
        &r,
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Led partitions whose ISR is smaller than their replica set",
    ),
    under_min_isr: IntGauge = int_gauge(
        &r,
        "kafka_server_replicamanager_underminisrpartitioncount",
        "Led partitions whose ISR is below min.insync.replicas",
    ),
    at_min_isr: IntGauge = int_gauge(
        &r,
        "kafka_server_replicamanager_atminisrpartitioncount",
        "Led partitions whose ISR is exactly min.insync.replicas",
    ),
    authorization_allowed: IntCounter = int_counter(
        &r,
        "kafka_server_authorizer_metrics_authorization_allowed_total",
        "Authorization decisions that allowed the operation",
    ),
    authorization_denied: IntCounter = int_counter(
        &r,
        "kafka_server_authorizer_metrics_authorization_denied_total",
        "Authorization decisions that denied the operation",
    ),
    acls_total: IntGauge = int_gauge(
        &r,
        "kafka_server_authorizer_metrics_acls_total_count",
        "ACLs in the metadata image this broker published",
    ),
    sasl_authentications: IntCounterVec = counter(
        &r,
        "kafka_server_socket_server_metrics_successful_authentication_total",
        "Successful SASL authentications, by listener",
        &["listener"],
    ),
    sasl_authentication_failures: IntCounterVec = counter(
        &r,
        "kafka_server_socket_server_metrics_failed_authentication_total",
        "Failed SASL authentications, by listener",
        &["listener"],
    ),
    isr_shrinks: IntCounter = int_counter(
        &r,
        "kafka_server_replicamanager_isrshrinks_total",
        "ISR shrinks this broker proposed as a leader",
    ),
    isr_expands: IntCounter = int_counter(
        &r,
        "kafka_server_replicamanager_isrexpands_total",
        "ISR expansions this broker proposed as a leader",
    ),
    /// The largest lag of a partition this broker follows, in records.
    replica_fetcher_max_lag: IntGauge = int_gauge(
        &r,
        "kafka_server_replicafetchermanager_maxlag",
        "The largest lag in records of a partition this broker follows",
    ),
    /// Fetch requests each replica fetcher sent (Kafka's FetcherStats RequestsPerSec).
    fetcher_requests: IntCounterVec = counter(
        &r,
        "kafka_server_fetcherstats_requests_total",
        "Fetch requests sent by each replica fetcher, by fetcher and source broker",
        &["clientId", "brokerId"],
    ),
    /// Answers for a followed partition that moved nothing and would be asked again.
    replica_fetch_no_progress: IntCounterVec = counter(
        &r,
        "evenkeel_replica_fetch_no_progress_total",
        "Fetch answers for a followed partition that changed nothing here and would be \
         asked again (each backs off replica.fetch.backoff.ms)",
        &["topic", "partition"],
    ),
    /// 1 while a followed partition is out of the ISR and its fetches have made no progress
    /// for `replica.lag.time.max.ms` (the series goes once it moves again).
    replica_fetch_stalled: IntGaugeVec = int_gauge_vec(
        &r,
        "evenkeel_replica_fetch_stalled",
        "1 while a followed partition is out of the ISR and its fetches have made no progress \
         for replica.lag.time.max.ms",
        &["topic", "partition"],
    ),
    /// Kafka's broker-metadata-metrics: the last metadata record this broker applied, and
    /// failed applies.
    metadata_last_applied_offset: IntGauge = int_gauge(
        &r,
        "kafka_server_broker_metadata_metrics_last_applied_record_offset",
        "Offset of the last metadata record applied to this broker's image",
    ),
    metadata_last_applied_timestamp: IntGauge = int_gauge(
        &r,
        "kafka_server_broker_metadata_metrics_last_applied_record_timestamp",
        "Append time of the last metadata record applied (ms)",
    ),
    metadata_apply_errors: IntCounter = int_counter(
        &r,
        "kafka_server_broker_metadata_metrics_metadata_apply_error_count",
        "Metadata changes this broker failed to apply to its logs",
    ),
    /// Kafka's client quota metrics (`kafka.server:type=Produce|Fetch,user=…,client-id=…`), for
    /// the clients a quota applies to; a tag the quota does not tell apart is empty.
    produce_byte_rate: GaugeVec = gauge_vec(
        &r,
        "kafka_server_produce_byte_rate",
        "Bytes per second a quota-bound user or client id produces, over the quota window",
        &["user", "client_id"],
    ),
    produce_throttle_time: GaugeVec = gauge_vec(
        &r,
        "kafka_server_produce_throttle_time",
        "Average produce throttle time (ms) handed out over the quota window",
        &["user", "client_id"],
    ),
    fetch_byte_rate: GaugeVec = gauge_vec(
        &r,
        "kafka_server_fetch_byte_rate",
        "Bytes per second a quota-bound user or client id fetches, over the quota window",
        &["user", "client_id"],
    ),
    fetch_throttle_time: GaugeVec = gauge_vec(
        &r,
        "kafka_server_fetch_throttle_time",
        "Average fetch throttle time (ms) handed out over the quota window",
        &["user", "client_id"],
    ),
    request_time: GaugeVec = gauge_vec(
        &r,
        "kafka_server_request_request_time",
        "Percent of one request handler's time a quota-bound user or client id takes, over \
         the quota window",
        &["user", "client_id"],
    ),
    mutation_throttle_time: GaugeVec = gauge_vec(
        &r,
        "kafka_server_controllermutation_throttle_time",
        "The throttle time (ms) the last topic mutation of a quota-bound user or client id \
         earned (how long its partition bucket stays in debt)",
        &["user", "client_id"],
    ),
    request_throttle_time: GaugeVec = gauge_vec(
        &r,
        "kafka_server_request_throttle_time",
        "Average request-quota throttle time (ms) handed out over the quota window",
        &["user", "client_id"],
    ),
    log_size: GaugeVec = gauge_vec(
        &r,
        "kafka_log_log_size",
        "Bytes in a partition's log",
        &["topic", "partition"],
    ),
    partition_consumer_fetches: IntCounterVec = counter(
        &r,
        "evenkeel_partition_consumer_fetches_total",
        "Consumer fetch requests that read a partition this broker leads (the fetch \
         work its leadership brings; the rebalancer weighs leaders by it)",
        &["topic", "partition"],
    ),
    /// Kafka's FetchSessionCache metrics (KIP-227 sessions).
    fetch_sessions: IntGauge = int_gauge(
        &r,
        "kafka_server_fetchsessioncache_numincrementalfetchsessions",
        "Incremental fetch sessions in the cache",
    ),
    fetch_session_partitions: IntGauge = int_gauge(
        &r,
        "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
        "Partitions held by all incremental fetch sessions",
    ),
    fetch_session_evictions: IntCounter = int_counter(
        &r,
        "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total",
        "Incremental fetch sessions evicted to make room for new ones",
    ),
    handler_meter: IdleMeter = IdleMeter::default(),
    network_meter: IdleMeter = IdleMeter::default(),
    /// Kafka's `kafka.log:type=LogCleaner` and `type=LogCleanerManager` gauges.
    log_cleaner: LogCleanerGauges = LogCleanerGauges::new(&r),
}

/// The log cleaner's gauges under the JMX exporter's names for `kafka.log:type=LogCleaner,…`
/// and `kafka.log:type=LogCleanerManager,…` (hyphens become underscores).
pub struct LogCleanerGauges {
    pub max_dirty_percent: IntGauge,
    pub time_since_last_run_ms: IntGauge,
    pub uncleanable_partitions_count: IntGaugeVec,
    pub uncleanable_bytes: IntGaugeVec,
    pub max_buffer_utilization_percent: IntGauge,
    pub cleaner_recopy_percent: IntGauge,
    pub max_clean_time_secs: IntGauge,
    pub max_compaction_delay_secs: IntGauge,
    pub dead_thread_count: IntGauge,
}

impl LogCleanerGauges {
    fn new(r: &Registry) -> LogCleanerGauges {
        let vec = |name: &str, help: &str| int_gauge_vec(r, name, help, &["logDirectory"]);
        LogCleanerGauges {
            max_dirty_percent: int_gauge(
                r,
                "kafka_log_logcleanermanager_max_dirty_percent",
                "Cleanable share of the dirtiest compacted log at the cleaner's last look (%)",
            ),
            time_since_last_run_ms: int_gauge(
                r,
                "kafka_log_logcleanermanager_time_since_last_run_ms",
                "Milliseconds since the cleaner last looked for a log to clean",
            ),
            uncleanable_partitions_count: vec(
                "kafka_log_logcleanermanager_uncleanable_partitions_count",
                "Partitions whose cleaning failed; they are left as they were",
            ),
            uncleanable_bytes: vec(
                "kafka_log_logcleanermanager_uncleanable_bytes",
                "Cleanable bytes of the uncleanable partitions",
            ),
            max_buffer_utilization_percent: int_gauge(
                r,
                "kafka_log_logcleaner_max_buffer_utilization_percent",
                "Fill of the offset map in the last cleaning of a thread, the most of all (%)",
            ),
            cleaner_recopy_percent: int_gauge(
                r,
                "kafka_log_logcleaner_cleaner_recopy_percent",
                "Bytes written over bytes read by the last cleaning, mean of the threads (%)",
            ),
            max_clean_time_secs: int_gauge(
                r,
                "kafka_log_logcleaner_max_clean_time_secs",
                "Seconds the longest last cleaning of a thread took",
            ),
            max_compaction_delay_secs: int_gauge(
                r,
                "kafka_log_logcleaner_max_compaction_delay_secs",
                "How far past max.compaction.lag.ms the most overdue log is (s)",
            ),
            dead_thread_count: int_gauge(
                r,
                "kafka_log_logcleaner_deadthreadcount",
                "Cleaner threads that died",
            ),
        }
    }

    /// Copies the cleaner's gauges of the log directory `log_dir`.
    pub fn set(&self, m: &crate::storage::cleaner::CleanerMetrics, log_dir: &str) {
        self.max_dirty_percent.set(m.max_dirty_percent);
        self.time_since_last_run_ms.set(m.time_since_last_run_ms);
        self.uncleanable_partitions_count
            .with_label_values(&[log_dir])
            .set(m.uncleanable_partitions_count as i64);
        self.uncleanable_bytes
            .with_label_values(&[log_dir])
            .set(m.uncleanable_bytes as i64);
        self.max_buffer_utilization_percent
            .set(m.max_buffer_utilization_percent);
        self.cleaner_recopy_percent.set(m.cleaner_recopy_percent);
        self.max_clean_time_secs.set(m.max_clean_time_secs);
        self.max_compaction_delay_secs
            .set(m.max_compaction_delay_secs);
        self.dead_thread_count.set(m.dead_thread_count as i64);
    }
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn histogram(registry: &Registry, name: &str, help: &str) -> HistogramVec {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(TIME_BUCKETS_MS.to_vec()),
        &["request"],
    )
    .expect("valid histogram");
    registry
        .register(Box::new(h.clone()))
        .expect("unique metric");
    h
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn int_counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid counter");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn gauge(registry: &Registry, name: &str, help: &str) -> Gauge {
    let g = Gauge::new(name, help).expect("valid gauge");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid gauge");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

/// Creates and registers one metric (names are fixed, so registering cannot fail).
pub fn int_gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

pub fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BrokerMetrics {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Records one finished request.
    pub fn observe(&self, request: &str, version: i16, t: RequestTimes) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        self.requests
            .with_label_values(&[request, &version.to_string()])
            .inc();
        self.queue_time
            .with_label_values(&[request])
            .observe(ms(t.queue));
        self.local_time
            .with_label_values(&[request])
            .observe(ms(t.local));
        self.remote_time
            .with_label_values(&[request])
            .observe(ms(t.remote));
        self.send_time
            .with_label_values(&[request])
            .observe(ms(t.send));
        self.total_time
            .with_label_values(&[request])
            .observe(ms(t.queue + t.local + t.remote + t.send));
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        render_registry(&self.registry)
    }
}

/// The text exposition of every metric in a registry.
pub fn render_registry(registry: &Registry) -> String {
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(&registry.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Serves a registry on `/metrics`, plus `/healthz` and `/readyz` that answer "ok" while the
/// process runs (the operator's and the rebalancer's port, 8081), until the task is aborted.
pub async fn serve_registry(
    addr: &str,
    registry: Registry,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let r = registry.clone();
                async move {
                    (
                        [("content-type", "text/plain; version=0.0.4")],
                        render_registry(&r),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok((local, task))
}

/// Serves `/metrics` (after calling `refresh`), `/healthz` and `/readyz` until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<BrokerMetrics>,
    refresh: Arc<dyn Fn() + Send + Sync>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let m1 = metrics.clone();
    let m2 = metrics.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m1.clone();
                let refresh = refresh.clone();
                async move {
                    refresh();
                    ([("content-type", "text/plain; version=0.0.4")], m.render())
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let m = m2.clone();
                async move {
                    if m.is_ready() {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_strimzi() {
        let m = BrokerMetrics::new();
        m.observe("Produce", 9, RequestTimes::default());
        m.bytes_in.with_label_values(&["t"]).inc_by(10);
        m.purgatory_size.with_label_values(&["Fetch"]).set(3.0);
        let text = m.render();
        for name in [
            "kafka_network_requestmetrics_requests_total{request=\"Produce\",version=\"9\"} 1",
            "kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\"",
            "kafka_network_requestmetrics_localtimems_count{request=\"Produce\"} 1",
            "kafka_server_brokertopicmetrics_bytesin_total{topic=\"t\"} 10",
            "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Fetch\"} 3",
            "kafka_network_socketserver_networkprocessoravgidle_percent",
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
            "kafka_network_requestchannel_requestqueuesize",
        ] {
            assert!(text.contains(name), "missing {name}");
        }
    }

    #[test]
    fn idle_fraction_follows_busy_time() {
        let meter = IdleMeter::default();
        let start = meter.last.lock().unwrap().0;
        let ms = Duration::from_millis;
        meter.add_busy(ms(30));
        let idle = meter.idle_fraction_at(start + ms(40), 1, None);
        assert!((idle - 0.25).abs() < 1e-9, "{idle}");
        // Two workers over the next 20 ms, busy 10 ms in all: three quarters idle.
        meter.add_busy(ms(10));
        let idle = meter.idle_fraction_at(start + ms(60), 2, None);
        assert!((idle - 0.75).abs() < 1e-9, "{idle}");
        // A total given by the caller, and nothing busy since.
        let busy_so_far = 40_000_000;
        let idle = meter.idle_fraction_at(start + ms(80), 1, Some(busy_so_far));
        assert!((idle - 1.0).abs() < 1e-9, "{idle}");
    }
}
