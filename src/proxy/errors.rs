//! The proxy's HTTP errors in Confluent REST Proxy's convention: a status and a JSON body
//! `{"error_code": <status><nn>, "message": "..."}`, with the codes its clients check for.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::client::producer::ProduceError;
use crate::client::ClientError;
use crate::protocol::errors as kafka;

/// Basic auth is on and the request has no credentials, or the cluster refused their login.
pub const UNAUTHORIZED: u32 = 401;
/// The cluster's ACLs refuse the user the topic (TOPIC_AUTHORIZATION_FAILED), or an
/// idempotent producer (CLUSTER_AUTHORIZATION_FAILED on InitProducerId).
pub const KAFKA_AUTHORIZATION_ERROR: u32 = 40301;
/// The body could not be used: malformed JSON, the wrong shape, an empty body.
pub const INVALID_ENTITY: u32 = 42201;
/// A `binary` key or value that is not base64.
pub const INVALID_BASE64: u32 = 42202;
/// A record without a value.
pub const MISSING_VALUE: u32 = 42203;
pub const TOPIC_NOT_FOUND: u32 = 40401;
pub const PARTITION_NOT_FOUND: u32 = 40402;
pub const CLUSTER_NOT_FOUND: u32 = 40403;
pub const UNSUPPORTED_MEDIA_TYPE: u32 = 41501;
/// A record over `max.request.size`, or a body over the proxy's limit.
pub const TOO_LARGE: u32 = 41301;
/// `buffer.memory` stayed full for `max.block.ms`.
pub const BUFFER_FULL: u32 = 42901;
/// Per record: a Kafka error the producer does not retry, or gave up retrying.
pub const KAFKA_ERROR: u32 = 50002;
pub const KAFKA_RETRIABLE_ERROR: u32 = 50003;
/// No broker answered.
pub const BROKER_NOT_AVAILABLE: u32 = 50302;
/// The proxy is shutting down (`/readyz` only).
pub const SHUTTING_DOWN: u32 = 50303;

/// One HTTP error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub error_code: u32,
    pub message: String,
    /// Seconds, for 429.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, error_code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            error_code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn invalid(code: u32, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn topic_not_found(topic: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            TOPIC_NOT_FOUND,
            format!("Topic {topic} not found."),
        )
    }

    pub fn unavailable(why: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            BROKER_NOT_AVAILABLE,
            format!("No broker answered: {why}"),
        )
    }

    /// The error for a client call (metadata): 401 for a refused login, 403 for a topic the
    /// cluster's ACLs refuse, else 503.
    pub fn from_client(e: &ClientError) -> ApiError {
        if e.is_login_refused() {
            return ApiError::new(StatusCode::UNAUTHORIZED, UNAUTHORIZED, e.to_string());
        }
        match e.code() {
            Some(kafka::TOPIC_AUTHORIZATION_FAILED) => ApiError::forbidden(e),
            _ => ApiError::unavailable(e),
        }
    }

    pub fn forbidden(why: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            KAFKA_AUTHORIZATION_ERROR,
            format!("Not authorized: {why}"),
        )
    }

    /// The error for a record the producer refused before queueing it.
    pub fn from_send(e: &ProduceError) -> ApiError {
        use crate::client::producer::buffer_pool::AllocateError;
        use crate::client::producer::AppendError;
        match e {
            ProduceError::UnknownTopic(t) => ApiError::topic_not_found(t),
            ProduceError::UnknownPartition { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, PARTITION_NOT_FOUND, e.to_string())
            }
            ProduceError::RecordTooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE, e.to_string())
            }
            ProduceError::Append(AppendError::Memory(AllocateError::Exhausted { .. })) => {
                ApiError {
                    retry_after: Some(1),
                    ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, BUFFER_FULL, e.to_string())
                }
            }
            ProduceError::Metadata(_) => ApiError::unavailable(e),
            _ => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, KAFKA_ERROR, e.to_string()),
        }
    }

    /// The error for a record the producer queued and could not write: REST Proxy's 50003 for
    /// a retriable Kafka error or a timeout, 50002 for the rest, both with status 500.
    pub fn for_record(e: &ProduceError) -> ApiError {
        let code = record_error_code(e);
        let status =
            StatusCode::from_u16((code / 100) as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, code, e.to_string())
    }

    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error_code": self.error_code, "message": self.message})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// The per-record code for a record the producer queued but could not write: retriable Kafka
/// errors (and timeouts) get 50003, the rest 50002.
pub fn record_error_code(e: &ProduceError) -> u32 {
    match e {
        ProduceError::Kafka {
            code: kafka::TOPIC_AUTHORIZATION_FAILED | kafka::CLUSTER_AUTHORIZATION_FAILED,
            ..
        } => KAFKA_AUTHORIZATION_ERROR,
        ProduceError::Kafka { code, .. } if kafka::is_retriable(*code) => KAFKA_RETRIABLE_ERROR,
        ProduceError::Timeout(_) => KAFKA_RETRIABLE_ERROR,
        _ => KAFKA_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::producer::buffer_pool::AllocateError;
    use crate::client::producer::AppendError;

    #[test]
    fn refusals_map_to_rest_proxy_statuses_and_codes() {
        let cases = [
            (ProduceError::UnknownTopic("t".into()), 404, TOPIC_NOT_FOUND),
            (
                ProduceError::UnknownPartition {
                    topic: "t".into(),
                    partition: 9,
                    count: 3,
                },
                404,
                PARTITION_NOT_FOUND,
            ),
            (
                ProduceError::RecordTooLarge { size: 9, max: 1 },
                413,
                TOO_LARGE,
            ),
            (
                ProduceError::Metadata("down".into()),
                503,
                BROKER_NOT_AVAILABLE,
            ),
        ];
        for (e, status, code) in cases {
            let a = ApiError::from_send(&e);
            assert_eq!((a.status.as_u16(), a.error_code), (status, code), "{e}");
        }
        let full = ProduceError::Append(AppendError::Memory(AllocateError::Exhausted {
            size: 1,
            waited_ms: 5,
        }));
        let a = ApiError::from_send(&full);
        assert_eq!((a.status.as_u16(), a.retry_after), (429, Some(1)));
        let r = a.into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn record_errors_say_whether_a_retry_may_help() {
        let retriable = ProduceError::Kafka {
            code: kafka::NOT_ENOUGH_REPLICAS,
            name: "NOT_ENOUGH_REPLICAS",
            message: None,
        };
        let fatal = ProduceError::Kafka {
            code: kafka::MESSAGE_TOO_LARGE,
            name: "MESSAGE_TOO_LARGE",
            message: None,
        };
        assert_eq!(record_error_code(&retriable), KAFKA_RETRIABLE_ERROR);
        assert_eq!(record_error_code(&fatal), KAFKA_ERROR);
        let refused = ProduceError::Kafka {
            code: kafka::TOPIC_AUTHORIZATION_FAILED,
            name: "TOPIC_AUTHORIZATION_FAILED",
            message: None,
        };
        let a = ApiError::for_record(&refused);
        assert_eq!(
            (a.status.as_u16(), a.error_code),
            (403, KAFKA_AUTHORIZATION_ERROR)
        );
        let metadata = ClientError::kafka("Metadata", kafka::TOPIC_AUTHORIZATION_FAILED, None);
        assert_eq!(ApiError::from_client(&metadata).status.as_u16(), 403);
        let down = ClientError::NoBroker("none".into());
        assert_eq!(ApiError::from_client(&down).status.as_u16(), 503);
        assert_eq!(
            record_error_code(&ProduceError::Timeout("x".into())),
            KAFKA_RETRIABLE_ERROR
        );
    }
}
