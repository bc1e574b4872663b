//! REST Proxy v2 endpoints, which Strimzi's bridge shares: produce to a topic or to one of its
//! partitions (answered with each record's partition and offset, or its error, in order), list
//! the topics, describe one.

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

use super::errors::{self, ApiError};
use super::records::{parse_v2, EmbeddedFormat};
use super::{answer_deadline, check_records, queue, read_body, Queued, Shared};

const V2_CONTENT_TYPE: &str = "application/vnd.kafka.v2+json";

pub(super) async fn produce(
    s: Shared,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    produce_v2(s, topic, None, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(super) async fn produce_to_partition(
    s: Shared,
    Path((topic, partition)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(p) = partition.parse::<i32>() else {
        return ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            errors::PARTITION_NOT_FOUND,
            format!("Partition {partition:?} not found."),
        )
        .into_response();
    };
    produce_v2(s, topic, Some(p), headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn produce_v2(
    s: Shared,
    topic: String,
    partition: Option<i32>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let format = EmbeddedFormat::from_content_type(ct).ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            errors::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "content type {ct:?}: use application/vnd.kafka.json.v2+json or application/vnd.kafka.binary.v2+json"
            ),
        )
    })?;
    let body = read_body(&s, &headers, body).await?;
    let mut records = parse_v2(&body, format)?;
    if partition.is_some() {
        for r in &mut records {
            r.partition = partition;
        }
    }
    check_records(&s, &topic, &records).await?;
    let mut queued: Vec<Queued> = Vec::with_capacity(records.len());
    for r in records {
        let q = match queued.last().and_then(Queued::refused_for_memory) {
            Some(full) => Queued::Refused(full.clone()),
            None => queue(&s, &topic, r).await,
        };
        match q {
            // The first refusal with nothing queued yet refuses the request (429 for a full
            // buffer); later ones are that record's error.
            Queued::Refused(e) if queued.is_empty() => return Err(e),
            q => queued.push(q),
        }
    }
    let offsets = tokio::time::timeout(answer_deadline(&s), outcomes(queued))
        .await
        .map_err(|_| ApiError::unavailable("no answer within delivery.timeout.ms"))?;
    for o in &offsets {
        s.metrics.record_answered(o.offset.is_some());
    }
    if offsets
        .iter()
        .all(|o| o.error_code == Some(errors::KAFKA_RETRIABLE_ERROR))
    {
        // Nothing was written and only waiting might help: the cluster is not answering.
        let why = offsets.first().and_then(|o| o.error.clone());
        return Err(ApiError::unavailable(why.unwrap_or_default()));
    }
    if offsets
        .iter()
        .all(|o| o.error_code == Some(errors::KAFKA_AUTHORIZATION_ERROR))
    {
        // Nothing was written: the cluster refuses this user (REST Proxy's 403).
        let why = offsets.first().and_then(|o| o.error.clone());
        return Err(ApiError::forbidden(why.unwrap_or_default()));
    }
    let answer = Answer {
        key_schema_id: None,
        value_schema_id: None,
        offsets,
    };
    Ok(([(header::CONTENT_TYPE, V2_CONTENT_TYPE)], Json(answer)).into_response())
}

/// The answer to a v2 produce.
#[derive(Serialize)]
struct Answer {
    key_schema_id: Option<i32>,
    value_schema_id: Option<i32>,
    offsets: Vec<Offset>,
}

/// One record's `{"partition", "offset"}`, or `{"error_code", "error"}` in its place.
#[derive(Serialize)]
struct Offset {
    partition: Option<i32>,
    offset: Option<i64>,
    error_code: Option<u32>,
    error: Option<String>,
}

/// Each record's outcome, in order.
async fn outcomes(queued: Vec<Queued>) -> Vec<Offset> {
    let mut out = Vec::with_capacity(queued.len());
    for q in queued {
        let result = match q {
            Queued::Waiting(rx) => Queued::outcome(rx)
                .await
                .map_err(|e| ApiError::for_record(&e)),
            Queued::Refused(e) => Err(e),
        };
        out.push(match result {
            Ok(m) => Offset {
                partition: Some(m.partition),
                offset: Some(m.offset),
                error_code: None,
                error: None,
            },
            Err(e) => Offset {
                partition: None,
                offset: None,
                error_code: Some(e.error_code),
                error: Some(e.message),
            },
        });
    }
    out
}

/// `GET /topics`: the names of the topics, internal ones left out.
pub(super) async fn list_topics(s: Shared) -> Response {
    match s.producer.describe_topics(None).await {
        Ok(ts) => {
            let names: Vec<String> = ts
                .into_iter()
                .filter(|t| !t.internal)
                .map(|t| t.name)
                .collect();
            ([(header::CONTENT_TYPE, V2_CONTENT_TYPE)], Json(names)).into_response()
        }
        Err(e) => ApiError::unavailable(e).into_response(),
    }
}

/// `GET /topics/{topic}`: its partitions with leader and replicas.
pub(super) async fn get_topic(s: Shared, Path(topic): Path<String>) -> Response {
    let found = match s
        .producer
        .describe_topics(Some(std::slice::from_ref(&topic)))
        .await
    {
        Ok(ts) => ts.into_iter().find(|t| t.name == topic),
        Err(e) => return ApiError::unavailable(e).into_response(),
    };
    let Some(t) = found else {
        return ApiError::topic_not_found(&topic).into_response();
    };
    let partitions: Vec<Value> = t
        .partitions
        .iter()
        .map(|p| {
            let replicas: Vec<Value> = p
                .replicas
                .iter()
                .map(|b| json!({"broker": b, "leader": *b == p.leader, "in_sync": p.isr.contains(b)}))
                .collect();
            json!({"partition": p.partition, "leader": p.leader, "replicas": replicas})
        })
        .collect();
    let answer = json!({"name": t.name, "configs": {}, "partitions": partitions});
    ([(header::CONTENT_TYPE, V2_CONTENT_TYPE)], Json(answer)).into_response()
}
