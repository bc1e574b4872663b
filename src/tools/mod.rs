//! Operator tools that read evenkeel's files directly, the way Kafka's command-line tools do.

pub mod dump_log;
