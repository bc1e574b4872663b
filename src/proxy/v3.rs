//! REST Proxy v3 endpoints: the cluster list (the id a v3 client puts in its paths) and produce,
//! where the body is one record object or a stream of them (chunked), and the answer is one
//! delivery report per record, in order, each sent as soon as that record is settled. A body of
//! one record with a length (not chunked) is answered with its record's status: 200 with the
//! report, or the error's own status and body.

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::errors::{self, ApiError};
use super::records::{format_rfc3339_ms, parse_v3, IncomingV3};
use super::{answer_deadline, check_records, queue, read_body, Queued, Shared};

/// `GET /v3/clusters`.
pub(super) async fn list_clusters(s: Shared) -> Response {
    let id = match s.cluster_id().await {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    Json(json!({
        "kind": "KafkaClusterList",
        "metadata": {"self": "/v3/clusters", "next": null},
        "data": [{
            "kind": "KafkaCluster",
            "metadata": {"self": format!("/v3/clusters/{id}"), "resource_name": format!("crn:///kafka={id}")},
            "cluster_id": id,
        }],
    }))
    .into_response()
}

/// One record's report, waiting for its outcome.
enum Report {
    Pending {
        queued: Queued,
        key: Option<(&'static str, usize)>,
        value: Option<(&'static str, usize)>,
    },
    /// The record was refused before it was queued (or the stream could not be read on).
    Error(ApiError),
}

/// `POST /v3/clusters/{cluster_id}/topics/{topic}/records`.
pub(super) async fn produce(
    s: Shared,
    Path((cluster_id, topic)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let known = match s.cluster_id().await {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    if cluster_id != known {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            errors::CLUSTER_NOT_FOUND,
            format!("Cluster {cluster_id} cannot be found."),
        )
        .into_response();
    }
    if let Err(e) = check_records(&s, &topic, &[]).await {
        return e.into_response();
    }
    // A body with a length that one record could fill is read whole: if it holds one record,
    // the answer carries that record's status. Anything longer is read as a stream.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let body = if announced.is_some_and(|n| n <= max_object(&s)) {
        let bytes = match read_body(&s, &headers, body).await {
            Ok(b) => b,
            Err(e) => return e.into_response(),
        };
        match only_object(&bytes) {
            Only::One(record) => return produce_one(&s, &topic, record).await,
            Only::None => {
                return ApiError::invalid(errors::INVALID_ENTITY, "the body holds no record")
                    .into_response()
            }
            Only::Several => Body::from(bytes),
        }
    } else {
        body
    };
    // Reports go out in record order; the channel's bound keeps a fast client from queueing
    // without limit ahead of its answers.
    let (tx, rx) = mpsc::channel::<Report>(1024);
    tokio::spawn(read_records(s.clone(), topic.clone(), body, tx));
    let reports = futures::stream::unfold((rx, s, topic), |(mut rx, s, topic)| async move {
        let report = rx.recv().await?;
        let line = report_line(settle(&s, &topic, report).await);
        Some((Ok::<_, std::convert::Infallible>(line), (rx, s, topic)))
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(reports),
    )
        .into_response()
}

/// What a complete (not chunked) body holds.
enum Only {
    None,
    One(Result<IncomingV3, ApiError>),
    Several,
}

fn only_object(bytes: &[u8]) -> Only {
    match next_object(bytes, true) {
        (Next::Done, _) => Only::None,
        (Next::Bad(e), _) => Only::One(Err(e)),
        (Next::Object(record), used) => match next_object(&bytes[used..], true).0 {
            Next::Done => Only::One(record),
            _ => Only::Several,
        },
        (Next::NeedMore, _) => Only::Several,
    }
}

/// The largest record object a stream may carry: a record of `max.request.size` with its key
/// and value in base64 fits in twice that.
fn max_object(s: &Shared) -> usize {
    s.producer
        .config()
        .max_request_size
        .saturating_mul(2)
        .max(1 << 20)
}

/// One record, answered with its own status: 200 and its report once written, or its error's
/// status and body.
async fn produce_one(s: &Shared, topic: &str, record: Result<IncomingV3, ApiError>) -> Response {
    let report = queue_one(s, topic, record).await;
    match settle(s, topic, report).await {
        Ok(line) => (
            [(header::CONTENT_TYPE, "application/json")],
            bytes::Bytes::from(line),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Reads record objects off the body as they arrive and queues each; stops at the end of the
/// body, at JSON it cannot parse (reporting it), when the client has gone, or when the proxy
/// shuts down (the records taken so far still get their reports).
async fn read_records(s: Shared, topic: String, body: Body, tx: mpsc::Sender<Report>) {
    let max = max_object(&s);
    let mut stream = body.into_data_stream();
    let mut shutdown = s.shutdown.clone();
    // `buf[pos..]` is what is left to parse; the parsed front is dropped only when more is
    // read, so a long body costs one pass, not one move of its rest per record.
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = 0;
    let mut ended = false;
    loop {
        let (next, used) = next_object(&buf[pos..], ended);
        pos += used;
        match next {
            Next::Object(record) => {
                let report = queue_one(&s, &topic, record).await;
                if tx.send(report).await.is_err() {
                    return; // the client is gone: nothing more is read or written
                }
                continue;
            }
            Next::Bad(e) => {
                let _ = tx.send(Report::Error(e)).await;
                return;
            }
            Next::Done => return,
            Next::NeedMore if buf.len() - pos > max => {
                let e = ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    errors::TOO_LARGE,
                    format!("a record object over {max} bytes"),
                );
                let _ = tx.send(Report::Error(e)).await;
                return;
            }
            Next::NeedMore => {}
        }
        buf.drain(..pos);
        pos = 0;
        let chunk = tokio::select! {
            chunk = stream.next() => chunk,
            _ = shutdown.wait_for(|stopping| *stopping) => {
                tracing::debug!("shutting down: a v3 stream takes no more records");
                return;
            }
        };
        match chunk {
            Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "a v3 produce stream broke off");
                return;
            }
            None => ended = true,
        }
    }
}

enum Next {
    Object(Result<IncomingV3, ApiError>),
    NeedMore,
    Bad(ApiError),
    Done,
}

/// The next complete JSON value at the front of `buf`, as a record, and how many bytes it and
/// the whitespace before it took.
fn next_object(buf: &[u8], ended: bool) -> (Next, usize) {
    let Some(start) = buf.iter().position(|b| !b.is_ascii_whitespace()) else {
        let next = if ended { Next::Done } else { Next::NeedMore };
        return (next, buf.len());
    };
    let mut it = serde_json::Deserializer::from_slice(&buf[start..]).into_iter::<&RawValue>();
    match it.next() {
        Some(Ok(v)) => (Next::Object(parse_v3(v)), start + it.byte_offset()),
        Some(Err(e)) if e.is_eof() && !ended => (Next::NeedMore, start),
        Some(Err(e)) => {
            let e = ApiError::invalid(errors::INVALID_ENTITY, format!("malformed JSON: {e}"));
            (Next::Bad(e), start)
        }
        None if ended => (Next::Done, start),
        None => (Next::NeedMore, start),
    }
}

async fn queue_one(s: &Shared, topic: &str, record: Result<IncomingV3, ApiError>) -> Report {
    let IncomingV3 {
        incoming,
        key_type,
        value_type,
    } = match record {
        Ok(r) => r,
        Err(e) => return Report::Error(e),
    };
    if let Err(e) = check_records(s, topic, std::slice::from_ref(&incoming)).await {
        return Report::Error(e);
    }
    let key = key_type.zip(incoming.record.key.as_ref().map(|k| k.len()));
    let value = value_type.zip(incoming.record.value.as_ref().map(|v| v.len()));
    Report::Pending {
        queued: queue(s, topic, incoming).await,
        key,
        value,
    }
}

/// A written record's delivery report.
#[derive(Serialize)]
struct Delivered<'a> {
    error_code: u32,
    cluster_id: &'a str,
    topic_name: &'a str,
    partition_id: i32,
    offset: i64,
    timestamp: String,
    key: Option<Sized<'a>>,
    value: Option<Sized<'a>>,
}

/// The type and size of a written key or value.
#[derive(Serialize)]
struct Sized<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    size: usize,
}

fn sized(f: Option<(&str, usize)>) -> Option<Sized<'_>> {
    f.map(|(kind, size)| Sized { kind, size })
}

/// Waits for a record's outcome: its delivery report as JSON, or its error. An error the
/// producer reports for a queued record gets the status its REST Proxy code names (500 for
/// 50002 and 50003).
async fn settle(s: &Shared, topic: &str, report: Report) -> Result<Vec<u8>, ApiError> {
    let (queued, key, value) = match report {
        Report::Error(e) => {
            s.metrics.record_answered(false);
            return Err(e);
        }
        Report::Pending { queued, key, value } => (queued, key, value),
    };
    let rx = match queued {
        Queued::Waiting(rx) => rx,
        Queued::Refused(e) => {
            s.metrics.record_answered(false);
            return Err(e);
        }
    };
    let outcome = tokio::time::timeout(answer_deadline(s), Queued::outcome(rx)).await;
    s.metrics.record_answered(matches!(outcome, Ok(Ok(_))));
    match outcome {
        Ok(Ok(m)) => Ok(serde_json::to_vec(&Delivered {
            error_code: 200,
            cluster_id: s.cluster_id.get().map_or("", String::as_str),
            topic_name: topic,
            partition_id: m.partition,
            offset: m.offset,
            timestamp: format_rfc3339_ms(m.timestamp),
            key: sized(key),
            value: sized(value),
        })
        .unwrap_or_default()),
        Ok(Err(e)) => Err(ApiError::for_record(&e)),
        Err(_) => Err(ApiError::unavailable(
            "no answer within delivery.timeout.ms",
        )),
    }
}

/// A streamed report: one line of JSON, the delivery report or the error body.
fn report_line(settled: Result<Vec<u8>, ApiError>) -> bytes::Bytes {
    let mut line = settled.unwrap_or_else(|e| serde_json::to_vec(&e.body()).unwrap_or_default());
    line.push(b'\n');
    bytes::Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the next record, as text, taken off the front of `buf`.
    fn take(buf: &mut Vec<u8>, ended: bool) -> Option<String> {
        let (next, used) = next_object(buf, ended);
        buf.drain(..used);
        match next {
            Next::Object(Ok(r)) => r
                .incoming
                .record
                .value
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            _ => None,
        }
    }

    fn next_of(buf: &[u8], ended: bool) -> Next {
        next_object(buf, ended).0
    }

    #[test]
    fn objects_are_cut_off_a_stream_as_they_complete() {
        let mut buf = br#" {"value":{"data":1}}{"value":{"data":"#.to_vec();
        assert_eq!(take(&mut buf, false).as_deref(), Some("1"));
        assert!(matches!(next_of(&buf, false), Next::NeedMore));
        buf.extend_from_slice(b"2}}\n");
        assert_eq!(take(&mut buf, false).as_deref(), Some("2"));
        assert!(matches!(next_of(&buf, false), Next::NeedMore));
        assert!(matches!(next_of(&buf, true), Next::Done));
    }

    #[test]
    fn a_broken_or_truncated_stream_is_reported() {
        assert!(matches!(next_of(b"{\"a\":}", false), Next::Bad(_)));
        assert!(matches!(next_of(b"{\"a\":", true), Next::Bad(_)));
    }

    #[test]
    fn a_complete_body_holds_none_one_or_several_records() {
        assert!(matches!(only_object(b"  \n"), Only::None));
        assert!(matches!(
            only_object(br#" {"value":{"data":1}} "#),
            Only::One(Ok(_))
        ));
        assert!(matches!(only_object(br#"{"value":"#), Only::One(Err(_))));
        let two = br#"{"value":{"data":1}} {"value":{"data":2}}"#;
        assert!(matches!(only_object(two), Only::Several));
    }
}
