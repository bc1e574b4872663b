//! The producer's handle (Java's KafkaProducer): `send` picks the partition and appends to the
//! accumulator, the sender drains it to the brokers on a network thread of its own, `flush` and
//! `close` wait for what is queued. Settings are Java's producer config keys with Java's defaults.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use tokio::sync::{oneshot, Notify};

use super::accumulator::{AccumulatorConfig, RecordAccumulator};
use super::idempotence::IdempotenceState;
use super::in_flight::InFlightBatches;
use super::metadata::ProducerMetadata;
use super::metrics::{MetricsSnapshot, ProducerMetrics};
use super::partitioner::{StickyPartitionCache, ThreadRandom};
use super::{choose_partition, sender, ProduceError, ProducerRecord, RecordResult};
use crate::client::{ClientError, ClientSecurity};
use crate::config::{invalid, prop, ConfigError};

/// How keyless records are spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionerMode {
    /// KIP-794's built-in partitioner (Java 3.3+).
    BuiltIn,
    /// KIP-480's sticky partitioner (Java 2.4–3.2's DefaultPartitioner), for the benchmark that
    /// shows what KIP-794 fixed.
    Kip480,
}

/// The Java class name that selects `PartitionerMode::Kip480` in `partitioner.class`.
pub const KIP480_PARTITIONER_CLASS: &str =
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner";

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    pub bootstrap: String,
    /// `acks`: -1 (all), 0 or 1.
    pub acks: i16,
    pub accumulator: AccumulatorConfig,
    pub max_in_flight: usize,
    pub enable_idempotence: bool,
    pub retries: u32,
    pub delivery_timeout_ms: i64,
    pub request_timeout_ms: i64,
    pub max_request_size: usize,
    pub max_block_ms: i64,
    pub metadata_max_age_ms: i64,
    pub reconnect_backoff_ms: i64,
    /// `reconnect.backoff.max.ms`: the wait after a refused login or an authorization error
    /// (Kafka's ceiling of the reconnect backoff), so that a refused client does not storm.
    pub reconnect_backoff_max_ms: i64,
    pub ignore_keys: bool,
    pub partitioner: PartitionerMode,
    /// `security.protocol` with its `ssl.*` and `sasl.*` keys: how every connection is made.
    pub security: ClientSecurity,
}

impl ProducerConfig {
    /// Java's defaults for a producer of `bootstrap`.
    pub fn new(bootstrap: &str) -> ProducerConfig {
        ProducerConfig {
            bootstrap: bootstrap.to_string(),
            acks: -1,
            accumulator: AccumulatorConfig::default(),
            max_in_flight: 5,
            enable_idempotence: true,
            retries: i32::MAX as u32,
            delivery_timeout_ms: 120_000,
            request_timeout_ms: 30_000,
            max_request_size: 1024 * 1024,
            max_block_ms: 60_000,
            metadata_max_age_ms: 300_000,
            reconnect_backoff_ms: 50,
            reconnect_backoff_max_ms: 1000,
            ignore_keys: false,
            partitioner: PartitionerMode::BuiltIn,
            security: ClientSecurity::plaintext(),
        }
    }

    /// Reads Java's producer keys from `props` (`bootstrap.servers` included). As in Java,
    /// idempotence is on unless it conflicts with a setting the user chose (acks other than all,
    /// more than 5 requests in flight, no retries); set explicitly, the conflict is an error.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let bootstrap = props.get("bootstrap.servers").cloned().unwrap_or_default();
        let d = ProducerConfig::new(&bootstrap);
        let acks = match props.get("acks").map(|s| s.trim()) {
            None | Some("all") | Some("-1") => -1,
            Some("0") => 0,
            Some("1") => 1,
            Some(v) => return Err(invalid("acks", v, "must be all, -1, 0 or 1")),
        };
        let a = AccumulatorConfig {
            batch_size: prop(props, "batch.size", d.accumulator.batch_size)?,
            compression: compression(props)?,
            linger_ms: prop(props, "linger.ms", d.accumulator.linger_ms)?,
            retry_backoff_ms: prop(props, "retry.backoff.ms", d.accumulator.retry_backoff_ms)?,
            retry_backoff_max_ms: prop(
                props,
                "retry.backoff.max.ms",
                d.accumulator.retry_backoff_max_ms,
            )?,
            buffer_memory: prop(props, "buffer.memory", d.accumulator.buffer_memory)?,
            adaptive_partitioning: prop(
                props,
                "partitioner.adaptive.partitioning.enable",
                d.accumulator.adaptive_partitioning,
            )?,
            availability_timeout_ms: prop(
                props,
                "partitioner.availability.timeout.ms",
                d.accumulator.availability_timeout_ms,
            )?,
        };
        let mut c = ProducerConfig {
            bootstrap,
            acks,
            accumulator: a,
            max_in_flight: prop(
                props,
                "max.in.flight.requests.per.connection",
                d.max_in_flight,
            )?,
            enable_idempotence: prop(props, "enable.idempotence", true)?,
            retries: prop(props, "retries", d.retries)?,
            delivery_timeout_ms: prop(props, "delivery.timeout.ms", d.delivery_timeout_ms)?,
            request_timeout_ms: prop(props, "request.timeout.ms", d.request_timeout_ms)?,
            max_request_size: prop(props, "max.request.size", d.max_request_size)?,
            max_block_ms: prop(props, "max.block.ms", d.max_block_ms)?,
            metadata_max_age_ms: prop(props, "metadata.max.age.ms", d.metadata_max_age_ms)?,
            reconnect_backoff_ms: prop(props, "reconnect.backoff.ms", d.reconnect_backoff_ms)?,
            reconnect_backoff_max_ms: prop(
                props,
                "reconnect.backoff.max.ms",
                d.reconnect_backoff_max_ms,
            )?,
            security: ClientSecurity::from_properties(props)?,
            ignore_keys: prop(props, "partitioner.ignore.keys", false)?,
            partitioner: partitioner(props)?,
        };
        c.check(props.contains_key("enable.idempotence"))?;
        Ok(c)
    }

    fn check(&mut self, idempotence_explicit: bool) -> Result<(), ConfigError> {
        if self.accumulator.batch_size == 0 || self.max_in_flight == 0 {
            return Err(invalid(
                "batch.size",
                &self.accumulator.batch_size.to_string(),
                "batch.size and max.in.flight.requests.per.connection must be at least 1",
            ));
        }
        let conflict = if self.acks != -1 {
            Some(("acks", self.acks.to_string(), "idempotence needs acks=all"))
        } else if self.max_in_flight > 5 {
            let v = self.max_in_flight.to_string();
            Some((
                "max.in.flight.requests.per.connection",
                v,
                "idempotence needs at most 5",
            ))
        } else if self.retries == 0 {
            Some(("retries", "0".into(), "idempotence needs retries"))
        } else {
            None
        };
        if let (true, Some((key, value, why))) = (self.enable_idempotence, conflict) {
            if idempotence_explicit {
                return Err(invalid(key, &value, why));
            }
            self.enable_idempotence = false;
        }
        let floor = self.accumulator.linger_ms + self.request_timeout_ms;
        if self.delivery_timeout_ms < floor {
            return Err(invalid(
                "delivery.timeout.ms",
                &self.delivery_timeout_ms.to_string(),
                format!("must be at least linger.ms + request.timeout.ms ({floor})"),
            ));
        }
        Ok(())
    }
}

fn compression(props: &BTreeMap<String, String>) -> Result<Compression, ConfigError> {
    Ok(match props.get("compression.type").map(|s| s.trim()) {
        None | Some("none") => Compression::None,
        Some("gzip") => Compression::Gzip,
        Some("snappy") => Compression::Snappy,
        Some("lz4") => Compression::Lz4,
        Some("zstd") => Compression::Zstd,
        Some(v) => {
            return Err(invalid(
                "compression.type",
                v,
                "must be none, gzip, snappy, lz4 or zstd",
            ))
        }
    })
}

fn partitioner(props: &BTreeMap<String, String>) -> Result<PartitionerMode, ConfigError> {
    match props.get("partitioner.class").map(|s| s.trim()) {
        None | Some("") => Ok(PartitionerMode::BuiltIn),
        Some(KIP480_PARTITIONER_CLASS) => Ok(PartitionerMode::Kip480),
        Some(v) => Err(invalid(
            "partitioner.class",
            v,
            format!("only the built-in partitioner (unset) or {KIP480_PARTITIONER_CLASS}"),
        )),
    }
}

/// What the handle, the sender and the response tasks share.
pub(super) struct Shared {
    pub config: ProducerConfig,
    pub accumulator: RecordAccumulator,
    pub metadata: ProducerMetadata,
    pub idempotence: IdempotenceState,
    /// Batches sent and not yet answered, for expiry.
    pub in_flight: InFlightBatches,
    pub metrics: ProducerMetrics,
    /// Wakes the sender: a batch filled or opened, a response came, a connection opened.
    pub wake: Notify,
    /// `close` was called: the sender sends what is queued and stops.
    pub closing: AtomicBool,
    /// Notified when the sender has stopped.
    pub stopped: Notify,
    pub sticky: StickyPartitionCache,
}

/// Stops the sender when the last handle goes.
struct SenderGuard {
    task: tokio::task::JoinHandle<()>,
}

/// The producer's network thread, as Java's `kafka-producer-network-thread`: the sender, its
/// connections and the answers run on a runtime of their own, so that a busy application (the
/// proxy with thousands of HTTP connections) cannot hold up a drain or the queue sizes the
/// partitioner reads.
struct NetworkThread {
    handle: tokio::runtime::Handle,
    /// Dropped with the producer: the thread's runtime then ends, on its own thread.
    _stop: oneshot::Sender<()>,
}

impl NetworkThread {
    fn start() -> std::io::Result<NetworkThread> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("evenkeel-producer-network".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                })
            })?;
        Ok(NetworkThread {
            handle,
            _stop: stop,
        })
    }
}

impl Drop for SenderGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A producer. Cheap to share behind an `Arc`; `send` may be called from many tasks at once.
pub struct Producer {
    shared: Arc<Shared>,
    sender: SenderGuard,
    /// After `sender`: the task is aborted before its runtime ends.
    _network: NetworkThread,
}

impl Producer {
    /// Connects to the cluster and starts the sender on its network thread.
    pub async fn start(config: ProducerConfig) -> Result<Producer, ClientError> {
        let timeout = Duration::from_millis(config.request_timeout_ms.max(1) as u64);
        let metadata = ProducerMetadata::new(&config.bootstrap, timeout, config.security.clone())?;
        let random = Arc::new(ThreadRandom);
        let shared = Arc::new(Shared {
            accumulator: RecordAccumulator::new(config.accumulator.clone(), random.clone()),
            sticky: StickyPartitionCache::new(random),
            config,
            metadata,
            idempotence: IdempotenceState::default(),
            in_flight: InFlightBatches::default(),
            metrics: ProducerMetrics::default(),
            wake: Notify::new(),
            closing: AtomicBool::new(false),
            stopped: Notify::new(),
        });
        let network = NetworkThread::start()?;
        let task = network.handle.spawn(sender::run(shared.clone()));
        Ok(Producer {
            shared,
            sender: SenderGuard { task },
            _network: network,
        })
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.shared.config
    }

    /// The number of partitions of `topic` (`None`: the cluster has no such topic).
    pub async fn partition_count(&self, topic: &str) -> Result<Option<usize>, ClientError> {
        self.shared.metadata.partition_count(topic).await
    }

    /// The cluster id.
    pub async fn cluster_id(&self) -> Result<String, ClientError> {
        self.shared.metadata.cluster_id().await
    }

    /// Topics with their partitions, leaders and ISRs (`None`: all).
    pub async fn describe_topics(
        &self,
        names: Option<&[String]>,
    ) -> Result<Vec<crate::client::TopicDescription>, ClientError> {
        self.shared.metadata.describe(names).await
    }

    /// Queues a record; the receiver gets its outcome once its batch is answered. A record for
    /// a topic the cluster does not have, or a partition it does not have, is refused at once;
    /// a full buffer waits up to `max.block.ms`. A negative timestamp means "now", as a Java
    /// record without one.
    pub async fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        mut record: ProducerRecord,
    ) -> Result<oneshot::Receiver<RecordResult>, ProduceError> {
        let s = &self.shared;
        if record.timestamp < 0 {
            record.timestamp = sender::now_ms();
        }
        if s.closing.load(Ordering::SeqCst) {
            return Err(ProduceError::Append(super::AppendError::Closed));
        }
        let count = s
            .metadata
            .partition_count(topic)
            .await
            .map_err(|e| ProduceError::Metadata(e.to_string()))?
            .ok_or_else(|| ProduceError::UnknownTopic(topic.to_string()))?;
        if let Some(p) = partition {
            if p < 0 || p as usize >= count {
                return Err(ProduceError::UnknownPartition {
                    topic: topic.to_string(),
                    partition: p,
                    count,
                });
            }
        }
        let size = super::batch::batch_size_upper_bound(&record);
        if size > s.config.max_request_size {
            return Err(ProduceError::RecordTooLarge {
                size,
                max: s.config.max_request_size,
            });
        }
        let (tx, rx) = oneshot::channel();
        let view = s.metadata.view();
        let chosen = choose_partition(
            partition,
            record.key.as_deref(),
            s.config.ignore_keys,
            count,
        );
        let block = Duration::from_millis(s.config.max_block_ms.max(0) as u64);
        let now = sender::now_ms();
        let result = match (chosen, s.config.partitioner) {
            (None, PartitionerMode::Kip480) => {
                let p = s.sticky.partition(topic, &view);
                match s.accumulator.append_if_room(topic, p, record, Some(tx)) {
                    Ok(r) => r,
                    Err((record, done)) => {
                        let next = s.sticky.next_partition(topic, &view, p);
                        s.accumulator
                            .append(topic, Some(next), record, done, block, now, &view)
                            .await?
                    }
                }
            }
            (chosen, _) => {
                s.accumulator
                    .append(topic, chosen, record, Some(tx), block, now, &view)
                    .await?
            }
        };
        if result.batch_is_full || result.new_batch_created {
            s.wake.notify_one();
        }
        Ok(rx)
    }

    /// Makes everything queued sendable now and waits until it is answered.
    pub async fn flush(&self) {
        let s = &self.shared;
        s.accumulator.begin_flush();
        s.wake.notify_one();
        while s.accumulator.incomplete_batches() > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s.accumulator.end_flush();
    }

    /// Sends what is queued (up to `timeout`), then stops the sender; later sends are refused.
    pub async fn close(&self, timeout: Duration) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.accumulator.close();
        self.shared.wake.notify_one();
        let stopped = self.shared.stopped.notified();
        tokio::pin!(stopped);
        // Registered before the check, so that a sender stopping in between is not missed.
        stopped.as_mut().enable();
        if !self.sender.task.is_finished() {
            let _ = tokio::time::timeout(timeout, stopped).await;
        }
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
    }

    /// Batches queued per partition (the partitioner's input), for metrics.
    pub fn queue_lengths(&self) -> Vec<(String, i32, usize)> {
        self.shared.accumulator.queue_lengths()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::props;

    #[test]
    fn defaults_are_javas() {
        let c =
            ProducerConfig::from_properties(&props(&[("bootstrap.servers", "b:9092")])).unwrap();
        assert_eq!(c.acks, -1);
        assert!(c.enable_idempotence);
        assert_eq!(c.accumulator.batch_size, 16384);
        assert_eq!(c.accumulator.linger_ms, 5);
        assert_eq!(c.max_in_flight, 5);
        assert_eq!(c.delivery_timeout_ms, 120_000);
        assert_eq!(c.partitioner, PartitionerMode::BuiltIn);
    }

    #[test]
    fn idempotence_gives_way_to_acks_1_unless_asked_for() {
        let c = ProducerConfig::from_properties(&props(&[("acks", "1")])).unwrap();
        assert!(!c.enable_idempotence);
        let e = ProducerConfig::from_properties(&props(&[
            ("acks", "1"),
            ("enable.idempotence", "true"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("acks"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (k, v) in [
            ("acks", "2"),
            ("compression.type", "brotli"),
            ("linger.ms", "soon"),
            ("partitioner.class", "com.example.Mine"),
            ("delivery.timeout.ms", "1000"),
        ] {
            let e = ProducerConfig::from_properties(&props(&[(k, v)])).unwrap_err();
            assert!(e.to_string().contains(k), "{k}={v}: {e}");
        }
        let kip480 = ProducerConfig::from_properties(&props(&[(
            "partitioner.class",
            KIP480_PARTITIONER_CLASS,
        )]))
        .unwrap();
        assert_eq!(kip480.partitioner, PartitionerMode::Kip480);
    }

    #[test]
    fn security_comes_from_kafkas_client_keys() {
        let plain = ProducerConfig::from_properties(&props(&[])).unwrap();
        assert_eq!(plain.security.username(), None);
        let ca = crate::security::tls::test_pki::Pki::new("ca").ca_pem();
        let jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                    username=\"alice\" password=\"alice-secret\";";
        let c = ProducerConfig::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.certificates", &ca),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", jaas),
        ]))
        .unwrap();
        assert_eq!(c.security.username(), Some("alice"));
        let shown = format!("{c:?}");
        assert!(!shown.contains("alice-secret"), "{shown}");
        let bob = c.security.with_credentials("bob", "bob-secret").unwrap();
        assert_eq!(bob.username(), Some("bob"));
        assert!(plain.security.with_credentials("bob", "x").is_none());
    }

    #[test]
    fn bad_or_incomplete_security_names_its_key() {
        let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    username=\"a\" password=\"hunter2\";";
        for (kv, key) in [
            (vec![("security.protocol", "TLS")], "security.protocol"),
            (
                vec![("security.protocol", "SSL")],
                "ssl.truststore.location",
            ),
            (
                vec![
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.type", "PEM"),
                    ("ssl.truststore.location", "/no/such/ca.pem"),
                ],
                "ssl.truststore.location",
            ),
            (
                vec![
                    ("security.protocol", "SSL"),
                    ("ssl.truststore.location", "/ca.jks"),
                ],
                "ssl.truststore.type",
            ),
            (
                vec![("security.protocol", "SASL_PLAINTEXT")],
                "sasl.jaas.config",
            ),
            (
                vec![
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "GSSAPI"),
                    ("sasl.jaas.config", jaas),
                ],
                "sasl.mechanism",
            ),
        ] {
            let e = ProducerConfig::from_properties(&props(&kv))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("configuration {key}:")), "{kv:?}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
