//! Our own async producer (Java's KafkaProducer): the record accumulator with Java's built-in
//! partitioner (KIP-794), batches sized and encoded as the Java client does, and the sender that
//! drains them to the brokers with idempotence, retries and metadata refreshes.
//!
//! The proxy is its user. Nothing here reaches into the broker or storage: batches are encoded
//! with the kafka-protocol crate.

pub mod accumulator;
pub mod batch;
pub mod buffer_pool;
pub mod cluster;
pub mod idempotence;
pub mod in_flight;
mod kafka_producer;
pub mod metadata;
pub mod metrics;
pub mod partitioner;
mod sender;

pub use accumulator::{
    AccumulatorConfig, AppendError, ReadyCheckResult, RecordAccumulator, RecordAppendResult,
};
pub use batch::{ProducerBatch, ProducerRecord};
pub use cluster::{ClusterView, PartitionLeader};
pub use kafka_producer::{PartitionerMode, Producer, ProducerConfig, KIP480_PARTITIONER_CLASS};
pub use metrics::{MetricsSnapshot, PartitionSent};
pub use partitioner::{BuiltInPartitioner, RandomSource, SequentialRandom, ThreadRandom};

/// Where a record was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
}

/// Why a record was not written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProduceError {
    /// The partition leader answered with a Kafka error code.
    #[error("{name} ({code}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        code: i16,
        name: &'static str,
        message: Option<String>,
    },
    /// `delivery.timeout.ms` passed before the record was acknowledged.
    #[error("{0}")]
    Timeout(String),
    /// The accumulator refused it (memory, closed, unknown topic).
    #[error(transparent)]
    Append(#[from] AppendError),
    /// The cluster has no such topic.
    #[error("topic {0} not present in metadata")]
    UnknownTopic(String),
    /// The topic has no such partition.
    #[error("partition {partition} of topic {topic} with partition count {count} is not present in metadata")]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: usize,
    },
    /// Larger than `max.request.size` on its own.
    #[error("the message is {size} bytes when serialized which is larger than {max}, the value of the max.request.size configuration")]
    RecordTooLarge { size: usize, max: usize },
    /// No broker answered the metadata request.
    #[error("cannot fetch metadata: {0}")]
    Metadata(String),
}

/// The outcome of one record.
pub type RecordResult = Result<RecordMetadata, ProduceError>;

/// Who hears a record's outcome (none for fire-and-forget).
pub type Completion = Option<tokio::sync::oneshot::Sender<RecordResult>>;

/// The partition a record goes to before the accumulator sees it (Java's
/// `KafkaProducer.partition`): the one it names; for a key, murmur2 over all partitions unless
/// `partitioner.ignore.keys`; otherwise `None`, the built-in partitioner's choice at append time.
pub fn choose_partition(
    explicit: Option<i32>,
    key: Option<&[u8]>,
    ignore_keys: bool,
    num_partitions: usize,
) -> Option<i32> {
    if explicit.is_some() {
        return explicit;
    }
    match key {
        Some(k) if !ignore_keys && num_partitions > 0 => {
            Some(BuiltInPartitioner::partition_for_key(k, num_partitions))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_records_hash_unless_keys_are_ignored() {
        assert_eq!(choose_partition(Some(4), Some(b"k"), false, 6), Some(4));
        // Java: Utils.toPositive(Utils.murmur2("key".getBytes())) % 6.
        let expected = crate::protocol::murmur2::partition_for_key(b"key", 6);
        assert_eq!(
            choose_partition(None, Some(b"key"), false, 6),
            Some(expected)
        );
        assert_eq!(choose_partition(None, Some(b"key"), true, 6), None);
        assert_eq!(choose_partition(None, None, false, 6), None);
    }
}
