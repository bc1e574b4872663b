//! The cluster's control plane: the quorum that replicates the metadata records (openraft), and
//! the active controller's decisions about brokers, topics, partitions, leaders and ISRs, served
//! to brokers on the controller listener. The records and their image live in `metadata`.

mod acls;
pub mod apis;
mod client_quotas;
pub mod cluster;
pub mod listener;
pub mod partition_change;
pub mod placement;
mod quorum_apis;
pub mod quorum_controller;
pub mod raft;
pub mod refusals;
pub mod replication;
pub mod scram;
mod security_apis;

use std::collections::BTreeMap;

use crate::config::LogConfig;
use crate::protocol::errors;
use crate::storage::StorageError;

pub use crate::metadata::{is_internal_topic, METADATA_TOPIC};
/// Kafka's limit on topic name length.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// A refused change, with Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ControllerError {
    pub code: i16,
    pub message: String,
}

impl ControllerError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        ControllerError {
            code,
            message: message.into(),
        }
    }
}

impl From<StorageError> for ControllerError {
    fn from(e: StorageError) -> Self {
        ControllerError::new(errors::KAFKA_STORAGE_ERROR, e.to_string())
    }
}

/// Kafka's `Topic.validate`: legal characters, length, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ControllerError> {
    let bad = |m: String| Err(ControllerError::new(errors::INVALID_TOPIC_EXCEPTION, m));
    if name.is_empty() {
        return bad("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return bad("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > MAX_TOPIC_NAME_LENGTH {
        return bad(format!(
            "Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

pub(crate) fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

/// Topic config overrides must be known keys with valid values.
pub fn validate_topic_configs(
    configs: &BTreeMap<String, String>,
    defaults: &LogConfig,
) -> Result<LogConfig, ControllerError> {
    let (cfg, unknown) = defaults
        .with_overrides(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| ControllerError::new(errors::INVALID_CONFIG, e.to_string()))?;
    if let Some(k) = unknown.first() {
        return Err(ControllerError::new(
            errors::INVALID_CONFIG,
            format!("Unknown topic config name: {k}"),
        ));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert!(validate_topic_name("orders.eu-1_a").is_ok());
        for bad in ["", ".", "..", "a b", "ä", &"x".repeat(250)] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().code,
                errors::INVALID_TOPIC_EXCEPTION,
                "{bad}"
            );
        }
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
    }

    #[test]
    fn unknown_or_bad_topic_configs_are_refused() {
        let d = LogConfig::default();
        let mut c = BTreeMap::new();
        c.insert("retention.ms".to_string(), "soon".to_string());
        assert_eq!(
            validate_topic_configs(&c, &d).unwrap_err().code,
            errors::INVALID_CONFIG
        );
        let mut c = BTreeMap::new();
        c.insert("no.such.key".to_string(), "1".to_string());
        assert_eq!(
            validate_topic_configs(&c, &d).unwrap_err().code,
            errors::INVALID_CONFIG
        );
    }
}
