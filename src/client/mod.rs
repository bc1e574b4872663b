//! Our async Kafka client over the kafka-protocol crate: connections with version negotiation,
//! the admin operations the operator needs, and the producer's accumulator and partitioner.
//! Depends on `protocol`, `config` and `security` (TLS, SASL), never on the broker.

pub mod admin;
pub mod connection;
pub mod pipeline;
pub mod producer;
pub mod security;

pub use admin::{
    AdminClient, AlterConfigOp, AlterOpType, BrokerInfo, ClusterDescription, ConfigEntry,
    ConfigSource, OngoingReassignment, PartitionInfo, QuorumInfo, QuorumReplica, Reassignment,
    TopicDescription,
};
pub use connection::Connection;
pub use security::{ClientSecurity, SaslLogin, SecurityError};

use crate::protocol::errors::error_name;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed: connect refused, reset, closed mid-frame.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// No answer in time; names the API (or "connect").
    #[error("{0} timed out")]
    Timeout(String),
    /// A frame that could not be encoded, decoded or matched to its request.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker answered with a Kafka error code.
    #[error("{api} failed with {name} ({code}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        api: &'static str,
        code: i16,
        name: &'static str,
        message: Option<String>,
    },
    /// The connection could not be secured: its TLS handshake or SASL login failed.
    #[error("cannot secure the connection to {addr}: {source}")]
    Security {
        addr: String,
        #[source]
        source: SecurityError,
    },
    /// None of the bootstrap (or known) brokers could be reached.
    #[error("no broker reachable: {0}")]
    NoBroker(String),
}

impl ClientError {
    /// The Kafka error code, for `Kafka` errors.
    pub fn code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the broker refused the SASL login (wrong credentials, unknown user): trying
    /// again with the same login cannot help.
    pub fn is_login_refused(&self) -> bool {
        matches!(
            self,
            ClientError::Security {
                source: SecurityError::AuthenticationFailed { .. },
                ..
            }
        )
    }

    /// A `Kafka` error from a response's code and message.
    pub(crate) fn kafka(api: &'static str, code: i16, message: Option<String>) -> ClientError {
        ClientError::Kafka {
            api,
            code,
            name: error_name(code),
            message: message.filter(|m| !m.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_error_names_its_code_and_keeps_the_message() {
        let e = ClientError::kafka("CreateTopics", 36, Some("Topic 'x' already exists.".into()));
        assert_eq!(e.code(), Some(36));
        assert!(matches!(
            e,
            ClientError::Kafka {
                name: "TOPIC_ALREADY_EXISTS",
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            "CreateTopics failed with TOPIC_ALREADY_EXISTS (36): Topic 'x' already exists."
        );
        let bare = ClientError::kafka("DeleteTopics", 3, Some(String::new()));
        assert_eq!(
            bare.to_string(),
            "DeleteTopics failed with UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
        assert_eq!(ClientError::Timeout("Metadata".into()).code(), None);
    }
}
