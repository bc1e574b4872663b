//! The storage engine: Kafka-identical partition logs on disk — segments, indexes, checkpoints,
//! recovery and retention. It knows record batches as bytes and their 61-byte header, nothing of sockets.

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod epoch;
pub mod error;
pub mod index;
pub mod log;
pub mod manager;
pub mod segment;

pub use checkpoint::{KafkaUuid, MetaProperties, TopicPartition};
pub use error::StorageError;
pub use log::{AppendInfo, LoadParams, Log};
pub use manager::{LogManager, LogManagerConfig, LogRef};
pub use segment::{LogSegment, TimestampAndOffset};
