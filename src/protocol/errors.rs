//! Kafka error codes (`org.apache.kafka.common.protocol.Errors`): the one table every part of
//! evenkeel answers and reads with, and their Kafka names for messages and typed client errors.

/// Declares each code as a constant and the name lookup from one list, so the two cannot drift.
macro_rules! kafka_errors {
    ($($name:ident = $code:expr,)*) => {
        $(pub const $name: i16 = $code;)*

        /// Kafka's name of an error code (`UNKNOWN` for codes it does not define).
        pub fn error_name(code: i16) -> &'static str {
            match code {
                $($code => stringify!($name),)*
                _ => "UNKNOWN",
            }
        }
    };
}

kafka_errors! {
    UNKNOWN_SERVER_ERROR = -1,
    NONE = 0,
    OFFSET_OUT_OF_RANGE = 1,
    CORRUPT_MESSAGE = 2,
    UNKNOWN_TOPIC_OR_PARTITION = 3,
    INVALID_FETCH_SIZE = 4,
    LEADER_NOT_AVAILABLE = 5,
    NOT_LEADER_OR_FOLLOWER = 6,
    REQUEST_TIMED_OUT = 7,
    BROKER_NOT_AVAILABLE = 8,
    REPLICA_NOT_AVAILABLE = 9,
    MESSAGE_TOO_LARGE = 10,
    STALE_CONTROLLER_EPOCH = 11,
    OFFSET_METADATA_TOO_LARGE = 12,
    NETWORK_EXCEPTION = 13,
    COORDINATOR_LOAD_IN_PROGRESS = 14,
    COORDINATOR_NOT_AVAILABLE = 15,
    NOT_COORDINATOR = 16,
    INVALID_TOPIC_EXCEPTION = 17,
    RECORD_LIST_TOO_LARGE = 18,
    NOT_ENOUGH_REPLICAS = 19,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20,
    INVALID_REQUIRED_ACKS = 21,
    ILLEGAL_GENERATION = 22,
    INCONSISTENT_GROUP_PROTOCOL = 23,
    INVALID_GROUP_ID = 24,
    UNKNOWN_MEMBER_ID = 25,
    INVALID_SESSION_TIMEOUT = 26,
    REBALANCE_IN_PROGRESS = 27,
    INVALID_COMMIT_OFFSET_SIZE = 28,
    TOPIC_AUTHORIZATION_FAILED = 29,
    GROUP_AUTHORIZATION_FAILED = 30,
    CLUSTER_AUTHORIZATION_FAILED = 31,
    INVALID_TIMESTAMP = 32,
    UNSUPPORTED_SASL_MECHANISM = 33,
    ILLEGAL_SASL_STATE = 34,
    UNSUPPORTED_VERSION = 35,
    TOPIC_ALREADY_EXISTS = 36,
    INVALID_PARTITIONS = 37,
    INVALID_REPLICATION_FACTOR = 38,
    INVALID_REPLICA_ASSIGNMENT = 39,
    INVALID_CONFIG = 40,
    NOT_CONTROLLER = 41,
    INVALID_REQUEST = 42,
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43,
    POLICY_VIOLATION = 44,
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    DUPLICATE_SEQUENCE_NUMBER = 46,
    INVALID_PRODUCER_EPOCH = 47,
    INVALID_TXN_STATE = 48,
    INVALID_PRODUCER_ID_MAPPING = 49,
    INVALID_TRANSACTION_TIMEOUT = 50,
    CONCURRENT_TRANSACTIONS = 51,
    TRANSACTION_COORDINATOR_FENCED = 52,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    SECURITY_DISABLED = 54,
    OPERATION_NOT_ATTEMPTED = 55,
    KAFKA_STORAGE_ERROR = 56,
    LOG_DIR_NOT_FOUND = 57,
    SASL_AUTHENTICATION_FAILED = 58,
    UNKNOWN_PRODUCER_ID = 59,
    REASSIGNMENT_IN_PROGRESS = 60,
    DELEGATION_TOKEN_AUTH_DISABLED = 61,
    DELEGATION_TOKEN_NOT_FOUND = 62,
    DELEGATION_TOKEN_OWNER_MISMATCH = 63,
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64,
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65,
    DELEGATION_TOKEN_EXPIRED = 66,
    INVALID_PRINCIPAL_TYPE = 67,
    NON_EMPTY_GROUP = 68,
    GROUP_ID_NOT_FOUND = 69,
    FETCH_SESSION_ID_NOT_FOUND = 70,
    INVALID_FETCH_SESSION_EPOCH = 71,
    LISTENER_NOT_FOUND = 72,
    TOPIC_DELETION_DISABLED = 73,
    FENCED_LEADER_EPOCH = 74,
    UNKNOWN_LEADER_EPOCH = 75,
    UNSUPPORTED_COMPRESSION_TYPE = 76,
    STALE_BROKER_EPOCH = 77,
    OFFSET_NOT_AVAILABLE = 78,
    MEMBER_ID_REQUIRED = 79,
    PREFERRED_LEADER_NOT_AVAILABLE = 80,
    GROUP_MAX_SIZE_REACHED = 81,
    FENCED_INSTANCE_ID = 82,
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83,
    ELECTION_NOT_NEEDED = 84,
    NO_REASSIGNMENT_IN_PROGRESS = 85,
    GROUP_SUBSCRIBED_TO_TOPIC = 86,
    INVALID_RECORD = 87,
    UNSTABLE_OFFSET_COMMIT = 88,
    THROTTLING_QUOTA_EXCEEDED = 89,
    PRODUCER_FENCED = 90,
    RESOURCE_NOT_FOUND = 91,
    DUPLICATE_RESOURCE = 92,
    UNACCEPTABLE_CREDENTIAL = 93,
    INCONSISTENT_VOTER_SET = 94,
    INVALID_UPDATE_VERSION = 95,
    FEATURE_UPDATE_FAILED = 96,
    PRINCIPAL_DESERIALIZATION_FAILURE = 97,
    SNAPSHOT_NOT_FOUND = 98,
    POSITION_OUT_OF_RANGE = 99,
    UNKNOWN_TOPIC_ID = 100,
    DUPLICATE_BROKER_REGISTRATION = 101,
    BROKER_ID_NOT_REGISTERED = 102,
    INCONSISTENT_TOPIC_ID = 103,
    INCONSISTENT_CLUSTER_ID = 104,
    TRANSACTIONAL_ID_NOT_FOUND = 105,
    FETCH_SESSION_TOPIC_ID_ERROR = 106,
    INELIGIBLE_REPLICA = 107,
    NEW_LEADER_ELECTED = 108,
    OFFSET_MOVED_TO_TIERED_STORAGE = 109,
    FENCED_MEMBER_EPOCH = 110,
    UNRELEASED_INSTANCE_ID = 111,
    UNSUPPORTED_ASSIGNOR = 112,
    STALE_MEMBER_EPOCH = 113,
    MISMATCHED_ENDPOINT_TYPE = 114,
    UNSUPPORTED_ENDPOINT_TYPE = 115,
    UNKNOWN_CONTROLLER_ID = 116,
    UNKNOWN_SUBSCRIPTION_ID = 117,
    TELEMETRY_TOO_LARGE = 118,
    INVALID_REGISTRATION = 119,
    TRANSACTION_ABORTABLE = 120,
    INVALID_RECORD_STATE = 121,
    SHARE_SESSION_NOT_FOUND = 122,
    INVALID_SHARE_SESSION_EPOCH = 123,
    FENCED_STATE_EPOCH = 124,
    INVALID_VOTER_KEY = 125,
    DUPLICATE_VOTER = 126,
    VOTER_NOT_FOUND = 127,
    INVALID_REGULAR_EXPRESSION = 128,
}

/// Whether Kafka's client retries an operation that failed with `code` (the errors whose
/// exception is a `RetriableException`).
pub fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        CORRUPT_MESSAGE
            | UNKNOWN_TOPIC_OR_PARTITION
            | LEADER_NOT_AVAILABLE
            | NOT_LEADER_OR_FOLLOWER
            | REQUEST_TIMED_OUT
            | NETWORK_EXCEPTION
            | COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
            | NOT_ENOUGH_REPLICAS
            | NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | CONCURRENT_TRANSACTIONS
            | KAFKA_STORAGE_ERROR
            | FETCH_SESSION_ID_NOT_FOUND
            | INVALID_FETCH_SESSION_EPOCH
            | LISTENER_NOT_FOUND
            | FENCED_LEADER_EPOCH
            | UNKNOWN_LEADER_EPOCH
            | OFFSET_NOT_AVAILABLE
            | PREFERRED_LEADER_NOT_AVAILABLE
            | ELIGIBLE_LEADERS_NOT_AVAILABLE
            | UNSTABLE_OFFSET_COMMIT
            | THROTTLING_QUOTA_EXCEEDED
            | UNKNOWN_TOPIC_ID
            | INCONSISTENT_TOPIC_ID
    )
}

/// Whether `code` says the client's metadata is stale (Kafka's `InvalidMetadataException`s):
/// the client refreshes it before retrying.
pub fn is_invalid_metadata(code: i16) -> bool {
    matches!(
        code,
        UNKNOWN_TOPIC_OR_PARTITION
            | LEADER_NOT_AVAILABLE
            | NOT_LEADER_OR_FOLLOWER
            | KAFKA_STORAGE_ERROR
            | FENCED_LEADER_EPOCH
            | UNKNOWN_LEADER_EPOCH
            | LISTENER_NOT_FOUND
            | UNKNOWN_TOPIC_ID
            | INCONSISTENT_TOPIC_ID
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_carry_kafkas_names_and_codes() {
        for (code, name) in [
            (NONE, "NONE"),
            (UNKNOWN_SERVER_ERROR, "UNKNOWN_SERVER_ERROR"),
            (NOT_LEADER_OR_FOLLOWER, "NOT_LEADER_OR_FOLLOWER"),
            (NOT_CONTROLLER, "NOT_CONTROLLER"),
            (
                DUPLICATE_BROKER_REGISTRATION,
                "DUPLICATE_BROKER_REGISTRATION",
            ),
            (INCONSISTENT_CLUSTER_ID, "INCONSISTENT_CLUSTER_ID"),
        ] {
            assert_eq!(error_name(code), name, "code {code}");
        }
        assert_eq!(NOT_LEADER_OR_FOLLOWER, 6);
        assert!(is_retriable(NOT_ENOUGH_REPLICAS) && is_retriable(NOT_LEADER_OR_FOLLOWER));
        assert!(!is_retriable(MESSAGE_TOO_LARGE) && !is_retriable(OUT_OF_ORDER_SEQUENCE_NUMBER));
        assert!(
            is_invalid_metadata(NOT_LEADER_OR_FOLLOWER)
                && !is_invalid_metadata(NOT_ENOUGH_REPLICAS)
        );
        assert_eq!(PREFERRED_LEADER_NOT_AVAILABLE, 80);
        assert_eq!(ELECTION_NOT_NEEDED, 84);
        assert_eq!(DUPLICATE_BROKER_REGISTRATION, 101);
        assert_eq!(INCONSISTENT_CLUSTER_ID, 104);
        assert_eq!(COORDINATOR_NOT_AVAILABLE, 15);
        assert_eq!(FETCH_SESSION_TOPIC_ID_ERROR, 106);
    }

    #[test]
    fn unmapped_codes_are_unknown() {
        assert_eq!(error_name(-2), "UNKNOWN");
        assert_eq!(error_name(999), "UNKNOWN");
        assert_eq!(error_name(i16::MIN), "UNKNOWN");
    }
}
