//! Typed errors of the storage engine and the Kafka error code each one maps to on the wire.
//! Callers in the broker turn these into response codes; the CLI turns them into one line.

use std::path::PathBuf;

use crate::protocol::errors;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The bytes are damaged: wrong CRC, wrong length, torn batch (CORRUPT_MESSAGE).
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    /// The batch is well formed but breaks a rule: magic, count, offsets (INVALID_RECORD).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// A fetch, truncation or DeleteRecords offset outside the log (OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// Records a batch may not hold, each named by its index in the batch (INVALID_RECORD with
    /// Kafka's `record_errors`): e.g. a record without a key on a compacted topic.
    #[error("{}", record_errors_message(.0))]
    RecordErrors(Vec<RecordError>),
    /// A batch larger than `max.message.bytes` (MESSAGE_TOO_LARGE).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordTooLarge { size: usize, max: usize },
    /// A follower append whose offsets do not continue the log.
    #[error("unexpected append offset: {0}")]
    UnexpectedAppendOffset(String),
    /// An index file failed its sanity check; the segment will be rebuilt.
    #[error("corrupt index {path}: {reason}")]
    CorruptIndex { path: PathBuf, reason: String },
    /// A checkpoint or metadata file that cannot be parsed.
    #[error("malformed file {path}: {reason}")]
    MalformedFile { path: PathBuf, reason: String },
    /// The log directory is locked by another process.
    #[error("log directory {0} is in use by another process")]
    DirectoryLocked(PathBuf),
    /// A cleaning stopped before its end: the cleaner is shutting down or the log changed under
    /// it (Kafka's `LogCleaningAbortedException`). The log is left as it was.
    #[error("log cleaning was aborted")]
    CleaningAborted,
    /// A thread panicked while it held a log's lock.
    #[error("a thread panicked while holding the log's lock")]
    Poisoned,
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One refused record of a batch (Kafka's `RecordError`): its index in the batch and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Kafka's `LogValidator.processRecordErrors` message: the count and the first three errors.
fn record_errors_message(errors: &[RecordError]) -> String {
    let shown: Vec<String> = errors
        .iter()
        .take(3)
        .map(|e| {
            format!(
                "RecordError(batchIndex={}, message='{}')",
                e.batch_index, e.message
            )
        })
        .collect();
    format!(
        "One or more records have been rejected due to {} record errors in total, and only \
         showing the first three errors at most: [{}]",
        errors.len(),
        shown.join(", ")
    )
}

impl StorageError {
    /// Kafka's error code for this error (see `org.apache.kafka.common.protocol.Errors`).
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            StorageError::CorruptRecord(_) | StorageError::UnexpectedAppendOffset(_) => {
                errors::CORRUPT_MESSAGE
            }
            StorageError::InvalidRecord(_) | StorageError::RecordErrors(_) => {
                errors::INVALID_RECORD
            }
            StorageError::OffsetOutOfRange { .. } => errors::OFFSET_OUT_OF_RANGE,
            StorageError::RecordTooLarge { .. } => errors::MESSAGE_TOO_LARGE,
            StorageError::CorruptIndex { .. }
            | StorageError::MalformedFile { .. }
            | StorageError::DirectoryLocked(_)
            | StorageError::Poisoned
            | StorageError::CleaningAborted
            | StorageError::Io { .. } => errors::KAFKA_STORAGE_ERROR,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StorageError {
        let path = path.into();
        move |source| StorageError::Io { path, source }
    }
}

pub type Result<T> = std::result::Result<T, StorageError>;
