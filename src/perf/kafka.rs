//! `evenkeel perf produce | consume | wide-fetch`: librdkafka load generators against any Kafka
//! bootstrap address, printing lines the way Kafka's perf-test tools do. They measure; they
//! never assert.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("kafka client: {0}")]
    Kafka(#[from] KafkaError),
    #[error("{0}")]
    Setup(String),
}

/// Latency of every delivered record, in microseconds, and the failures.
#[derive(Default)]
struct Deliveries {
    latencies_us: Mutex<Vec<u32>>,
    failed: AtomicU64,
    /// Why the first record that failed did (the broker's error, as librdkafka names it).
    first_error: Mutex<Option<String>>,
    bytes: AtomicU64,
    /// librdkafka's per-window p99s (µs) of request round trips to the broker and of the time
    /// records wait in its queues, when `statistics.interval.ms` is set.
    rtt_p99_us: Mutex<Vec<i64>>,
    queue_p99_us: Mutex<Vec<i64>>,
}

struct TimingContext {
    d: Arc<Deliveries>,
}

impl ClientContext for TimingContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        for b in statistics.brokers.values().filter(|b| b.nodeid >= 0) {
            let windows = [
                (&b.rtt, &self.d.rtt_p99_us),
                (&b.int_latency, &self.d.queue_p99_us),
            ];
            for (window, into) in windows {
                if let (Some(w), Ok(mut v)) = (window, into.lock()) {
                    if w.cnt > 0 {
                        v.push(w.p99);
                    }
                }
            }
        }
    }
}

impl ProducerContext for TimingContext {
    type DeliveryOpaque = Box<Instant>;
    fn delivery(&self, r: &DeliveryResult<'_>, sent: Box<Instant>) {
        match r {
            Ok(_) => {
                let us = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
                if let Ok(mut v) = self.d.latencies_us.lock() {
                    v.push(us);
                }
            }
            Err((e, _)) => {
                if self.d.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    if let Ok(mut first) = self.d.first_error.lock() {
                        *first = Some(e.to_string());
                    }
                }
            }
        }
    }
}

/// Produce workload settings (kafka-producer-perf-test's, plus the client properties used).
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    pub bootstrap: String,
    pub topic: String,
    pub num_records: u64,
    pub record_size: usize,
    /// Records per second; negative for unlimited.
    pub throughput: f64,
    pub props: Vec<(String, String)>,
    /// Send record i to partition i % n instead of letting the partitioner choose.
    pub round_robin: Option<i32>,
    /// Set to stop sending early: what was sent is still waited for and reported.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl ProduceOptions {
    /// Whether the run was asked to stop before its last record.
    pub fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// What a produce run measured.
#[derive(Debug, Clone)]
pub struct ProduceReport {
    pub records: u64,
    pub failed: u64,
    /// Why the first failed record failed.
    pub first_error: Option<String>,
    pub seconds: f64,
    pub records_per_sec: f64,
    pub mb_per_sec: f64,
    pub avg_ms: f64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Medians over librdkafka's statistics windows of the request round-trip p99 and the
    /// internal queue p99, in ms (only with `statistics.interval.ms` among the properties).
    pub rtt_p99_ms: Option<f64>,
    pub queue_p99_ms: Option<f64>,
}

impl std::fmt::Display for ProduceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, {:.0} ms 50th, {:.0} ms 95th, {:.0} ms 99th, {:.0} ms 99.9th.",
            self.records, self.records_per_sec, self.mb_per_sec, self.avg_ms, self.max_ms,
            self.p50_ms, self.p95_ms, self.p99_ms, self.p999_ms
        )
    }
}

impl ProduceReport {
    /// The figures of a run from each delivered record's latency (µs, any order).
    pub fn from_latencies(
        mut lat: Vec<u32>,
        failed: u64,
        seconds: f64,
        record_size: usize,
    ) -> ProduceReport {
        lat.sort_unstable();
        let records = lat.len() as u64;
        let avg = if lat.is_empty() {
            0.0
        } else {
            lat.iter().map(|v| *v as f64).sum::<f64>() / lat.len() as f64 / 1000.0
        };
        ProduceReport {
            records,
            failed,
            first_error: None,
            seconds,
            records_per_sec: records as f64 / seconds,
            mb_per_sec: records as f64 * record_size as f64 / 1048576.0 / seconds,
            avg_ms: avg,
            max_ms: lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            p50_ms: percentile(&lat, 0.50),
            p95_ms: percentile(&lat, 0.95),
            p99_ms: percentile(&lat, 0.99),
            p999_ms: percentile(&lat, 0.999),
            rtt_p99_ms: None,
            queue_p99_ms: None,
        }
    }
}

/// Creates the topic when it does not exist yet (an existing topic is fine); a replication
/// factor of -1 is the brokers' `default.replication.factor` (KIP-464).
pub async fn ensure_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
) -> Result<(), PerfError> {
    match create_topic(bootstrap, topic, partitions, replication).await {
        Err(TopicError::Exists) => Ok(()),
        Err(TopicError::Other(e)) => Err(e),
        Ok(()) => Ok(()),
    }
}

/// Why [`create_topic`] did not create the topic.
pub enum TopicError {
    Exists,
    Other(PerfError),
}

/// Creates a new topic of `partitions` × `replication`.
pub async fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
) -> Result<(), TopicError> {
    let other = |e: KafkaError| TopicError::Other(e.into());
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(other)?;
    let r = admin
        .create_topics(
            &[NewTopic::new(
                topic,
                partitions,
                TopicReplication::Fixed(replication),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(other)?;
    match &r[0] {
        Ok(_) => Ok(()),
        Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => Err(TopicError::Exists),
        Err((t, e)) => Err(TopicError::Other(PerfError::Setup(format!(
            "cannot create topic {t}: {e}"
        )))),
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Runs a produce workload; `progress` receives a line every five seconds.
pub fn produce(
    o: &ProduceOptions,
    progress: &mut dyn FnMut(String),
) -> Result<ProduceReport, PerfError> {
    let d = Arc::new(Deliveries::default());
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &o.bootstrap)
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576");
    for (k, v) in &o.props {
        cfg.set(k, v);
    }
    let producer: ThreadedProducer<TimingContext> =
        cfg.create_with_context(TimingContext { d: d.clone() })?;
    let payload: Vec<u8> = (0..o.record_size).map(|i| b'a' + (i % 26) as u8).collect();
    let start = Instant::now();
    let mut last_report = start;
    let mut sent = 0u64;
    while sent < o.num_records && !o.stopped() {
        if o.throughput > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / o.throughput);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let mut rec = BaseRecord::<(), [u8], Box<Instant>>::with_opaque_to(
            &o.topic,
            Box::new(Instant::now()),
        )
        .payload(&payload);
        if let Some(n) = o.round_robin {
            rec = rec.partition((sent % n.max(1) as u64) as i32);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((
                    KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    r,
                )) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(PerfError::Kafka(e)),
            }
        }
        sent += 1;
        d.bytes.fetch_add(o.record_size as u64, Ordering::Relaxed);
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let done = d.latencies_us.lock().map(|v| v.len()).unwrap_or(0);
            let secs = start.elapsed().as_secs_f64();
            progress(format!(
                "{done} records sent, {:.1} records/sec ({:.2} MB/sec).",
                done as f64 / secs,
                done as f64 * o.record_size as f64 / 1048576.0 / secs
            ));
        }
    }
    producer.flush(Duration::from_secs(300))?;
    let seconds = start.elapsed().as_secs_f64();
    let lat = d.latencies_us.lock().map(|v| v.clone()).unwrap_or_default();
    let mut report = ProduceReport::from_latencies(
        lat,
        d.failed.load(Ordering::Relaxed),
        seconds,
        o.record_size,
    );
    report.first_error = d.first_error.lock().ok().and_then(|e| e.clone());
    report.rtt_p99_ms = median_ms(&d.rtt_p99_us);
    report.queue_p99_ms = median_ms(&d.queue_p99_us);
    Ok(report)
}

fn median_ms(windows: &Mutex<Vec<i64>>) -> Option<f64> {
    let mut v = windows.lock().ok()?.clone();
    v.sort_unstable();
    v.get(v.len() / 2).map(|us| *us as f64 / 1000.0)
}

/// Consume workload settings.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    pub bootstrap: String,
    pub topic: String,
    pub messages: u64,
    pub timeout: Duration,
    pub props: Vec<(String, String)>,
}

/// Reads `messages` records from the beginning of every partition; returns (records, bytes, seconds).
pub fn consume(o: &ConsumeOptions) -> Result<(u64, u64, f64), PerfError> {
    let mut bytes = 0u64;
    let (n, secs) = consume_each(o, &mut |r| {
        bytes += r.value.len() as u64 + r.key.map_or(0, |k| k.len()) as u64;
    })?;
    Ok((n, bytes, secs))
}

/// One record read back by [`consume_each`].
pub struct ReadBack<'a> {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
}

/// Reads up to `messages` records from the beginning of every partition, in each partition's
/// order, handing each to `on_record`; stops early when nothing arrives for `timeout`.
/// Returns (records, seconds).
pub fn consume_each(
    o: &ConsumeOptions,
    on_record: &mut dyn FnMut(ReadBack<'_>),
) -> Result<(u64, f64), PerfError> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &o.bootstrap)
        .set("group.id", "evenkeel-perf")
        .set("enable.auto.commit", "false");
    for (k, v) in &o.props {
        cfg.set(k, v);
    }
    let c: BaseConsumer = cfg.create()?;
    let parts = partitions_of(&c, &o.topic)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..parts {
        tpl.add_partition_offset(&o.topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let start = Instant::now();
    let mut n = 0u64;
    let mut last_data = Instant::now();
    while n < o.messages && last_data.elapsed() < o.timeout {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m?;
            use rdkafka::Message;
            on_record(ReadBack {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key(),
                value: m.payload().unwrap_or_default(),
            });
            n += 1;
            last_data = Instant::now();
        }
    }
    Ok((n, start.elapsed().as_secs_f64()))
}

/// How many partitions `topic` has (an error when it has none or does not exist).
pub fn partition_count(bootstrap: &str, topic: &str) -> Result<i32, PerfError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    partitions_of(&c, topic)
}

fn partitions_of(c: &BaseConsumer, topic: &str) -> Result<i32, PerfError> {
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let parts = md
        .topics()
        .first()
        .map(|t| t.partitions().len())
        .unwrap_or(0);
    if parts == 0 {
        return Err(PerfError::Setup(format!("topic {topic} has no partitions")));
    }
    Ok(parts as i32)
}

/// Wide fetchers: `fetchers` consumers each fetching every partition of a `partitions`-wide
/// topic in one request (`fetch.min.bytes` 1 MiB, max wait 500 ms).
#[derive(Debug, Clone)]
pub struct WideFetchOptions {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub fetchers: usize,
}

/// Starts the wide fetchers; they run until `stop` is set and count what they read.
pub fn start_wide_fetchers(
    o: &WideFetchOptions,
    stop: Arc<std::sync::atomic::AtomicBool>,
    fetched: Arc<AtomicU64>,
) -> Result<Vec<std::thread::JoinHandle<()>>, PerfError> {
    let mut handles = Vec::new();
    for i in 0..o.fetchers {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &o.bootstrap)
            .set("group.id", format!("evenkeel-wide-{i}"))
            .set("enable.auto.commit", "false")
            .set("fetch.min.bytes", "1048576")
            .set("fetch.wait.max.ms", "500")
            .set("fetch.max.bytes", "52428800")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..o.partitions {
            tpl.add_partition_offset(&o.topic, p, Offset::End)?;
        }
        c.assign(&tpl)?;
        let (stop, fetched) = (stop.clone(), fetched.clone());
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(Ok(_)) = c.poll(Duration::from_millis(100)) {
                    fetched.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    Ok(handles)
}

fn scrape(url_host_port: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(url_host_port).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The value of one metric line from a Prometheus text page.
pub fn scrape_metric(url_host_port: &str, name: &str) -> Option<f64> {
    scrape(url_host_port)?
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Cumulative buckets `(le, count)` of a histogram series, e.g.
/// `kafka_network_requestmetrics_totaltimems_bucket{request="Produce"`.
pub fn scrape_buckets(url_host_port: &str, series: &str) -> Vec<(f64, f64)> {
    let Some(body) = scrape(url_host_port) else {
        return Vec::new();
    };
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The bucket bound under which `q` of the observations between two scrapes fall.
pub fn bucket_quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = after.last()?.1 - before.last().map_or(0.0, |b| b.1);
    if total <= 0.0 {
        return None;
    }
    for (i, (le, count)) in after.iter().enumerate() {
        let prev = before.get(i).map_or(0.0, |b| b.1);
        if count - prev >= q * total {
            return Some(*le);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_rank() {
        let v: Vec<u32> = (1..=1000).map(|i| i * 1000).collect();
        assert_eq!(percentile(&v, 0.5), 500.0);
        assert_eq!(percentile(&v, 0.99), 990.0);
        assert_eq!(percentile(&v, 0.999), 999.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
