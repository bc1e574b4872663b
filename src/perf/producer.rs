//! `evenkeel perf produce --client evenkeel`: the produce workload of kafka-producer-perf-test
//! through our own producer (the proxy's, without HTTP), so that its figures stand beside the
//! Java producer's and librdkafka's from the same tool shape: latency from each `send()` call
//! to its outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use super::kafka::{PerfError, ProduceOptions, ProduceReport};
use crate::client::producer::{Producer, ProducerConfig, ProducerRecord};

/// Creates the topic unless it exists, through our admin client logged in as the producer's
/// properties say (`security.protocol`, `ssl.*`, `sasl.*`), so a secured listener works as for
/// the workload; -1 replicas is the brokers' default.
pub async fn ensure_topic(
    o: &ProduceOptions,
    partitions: i32,
    replication_factor: i32,
) -> Result<(), PerfError> {
    use crate::client::{AdminClient, ClientError, ClientSecurity};
    let setup = |what: &str, e: String| PerfError::Setup(format!("{what}: {e}"));
    let props: BTreeMap<String, String> = o.props.iter().cloned().collect();
    let security = ClientSecurity::from_properties(&props)
        .map_err(|e| setup("client security", e.to_string()))?;
    let rf = i16::try_from(replication_factor)
        .map_err(|_| setup("replication factor", replication_factor.to_string()))?;
    let timeout = Duration::from_secs(30);
    let admin = AdminClient::connect_with(&o.bootstrap, timeout, security)
        .await
        .map_err(|e| setup("connecting", e.to_string()))?;
    match admin
        .create_topic(&o.topic, partitions, rf, &BTreeMap::new())
        .await
    {
        Ok(_) => Ok(()),
        Err(ClientError::Kafka { code, .. })
            if code == crate::protocol::errors::TOPIC_ALREADY_EXISTS =>
        {
            Ok(())
        }
        Err(e) => Err(setup(
            &format!("cannot create topic {}", o.topic),
            e.to_string(),
        )),
    }
}

/// Runs the workload; `progress` receives a line every five seconds.
pub async fn produce(
    o: &ProduceOptions,
    progress: &mut dyn FnMut(String),
) -> Result<ProduceReport, PerfError> {
    let mut props: BTreeMap<String, String> = o.props.iter().cloned().collect();
    props.insert("bootstrap.servers".into(), o.bootstrap.clone());
    let config = ProducerConfig::from_properties(&props)
        .map_err(|e| PerfError::Setup(format!("producer properties: {e}")))?;
    let producer = Producer::start(config)
        .await
        .map_err(|e| PerfError::Setup(format!("starting the producer: {e}")))?;
    let payload = Bytes::from(
        (0..o.record_size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect::<Vec<_>>(),
    );
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(o.num_records as usize)));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let mut waiting = Vec::with_capacity(o.num_records as usize);
    let start = Instant::now();
    let mut last_report = start;
    for sent in 0..o.num_records {
        if o.stopped() {
            break;
        }
        if o.throughput > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / o.throughput);
            tokio::time::sleep_until(due.into()).await;
        }
        let record = ProducerRecord {
            key: None,
            value: Some(payload.clone()),
            headers: Vec::new(),
            timestamp: 0,
        };
        let called = Instant::now();
        let partition = o.round_robin.map(|n| (sent % n.max(1) as u64) as i32);
        let rx = producer
            .send(&o.topic, partition, record)
            .await
            .map_err(|e| PerfError::Setup(format!("record {sent}: {e}")))?;
        let (done, failures, why) = (latencies.clone(), failed.clone(), first_error.clone());
        waiting.push(tokio::spawn(async move {
            let error = match rx.await {
                Ok(Ok(_)) => {
                    let us = called.elapsed().as_micros().min(u32::MAX as u128) as u32;
                    done.lock().push(us);
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the producer dropped the record".to_string(),
            };
            failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            why.lock().get_or_insert(error);
        }));
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let done = latencies.lock().len();
            let secs = start.elapsed().as_secs_f64();
            progress(format!(
                "{done} records sent, {:.1} records/sec ({:.2} MB/sec).",
                done as f64 / secs,
                done as f64 * o.record_size as f64 / 1048576.0 / secs
            ));
        }
    }
    for w in waiting {
        let _ = w.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    producer.close(Duration::from_secs(30)).await;
    let lat = std::mem::take(&mut *latencies.lock());
    let mut report = ProduceReport::from_latencies(
        lat,
        failed.load(std::sync::atomic::Ordering::Relaxed),
        seconds,
        o.record_size,
    );
    report.first_error = first_error.lock().take();
    Ok(report)
}
