//! The producer proxy (`evenkeel proxy`): HTTP produce in the shapes Kafka users already script
//! against (Confluent REST Proxy v2 and v3, Strimzi's bridge), written through our own producer
//! and its KIP-794 partitioner. A request is answered only once its records are acknowledged.
//!
//! `v2` and `v3` hold the handlers, `records` the body formats, `errors` the HTTP error shapes,
//! `metrics` the `/metrics` text, `linger` the reading-out of request bodies a handler drops early.

pub mod errors;
mod linger;
mod metrics;
pub mod records;
mod v2;
mod v3;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::oneshot;

use crate::client::producer::{ProduceError, Producer, ProducerConfig, RecordResult};
use crate::config::ConfigError;
use errors::ApiError;
use records::Incoming;

/// Producer settings the proxy chooses differently from Java's defaults, each on purpose: an
/// HTTP client would rather hear 429 after a second than wait a minute for memory, and 503 after
/// 30 s than two minutes.
pub const PROXY_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("max.block.ms", "1000"),
    ("delivery.timeout.ms", "30000"),
    ("request.timeout.ms", "15000"),
];

/// The proxy's settings.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    /// Its `buffer.memory` is also the largest request body taken (see `v2::read_body`).
    pub producer: ProducerConfig,
}

impl ProxyConfig {
    /// Java producer properties over the proxy's defaults (`bootstrap.servers` included).
    pub fn new(
        listen: SocketAddr,
        bootstrap: &str,
        producer_props: &[(String, String)],
    ) -> Result<ProxyConfig, ConfigError> {
        let mut props: BTreeMap<String, String> = PROXY_PRODUCER_DEFAULTS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        props.extend(producer_props.iter().cloned());
        props.insert("bootstrap.servers".into(), bootstrap.into());
        let producer = ProducerConfig::from_properties(&props)?;
        Ok(ProxyConfig { listen, producer })
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    producer: Producer,
    metrics: metrics::ProxyMetrics,
    cluster_id: String,
}

type Shared = Arc<AppState>;

/// A running proxy: its address, and the task that serves until the handle is dropped.
pub struct ProxyHandle {
    pub addr: SocketAddr,
    pub cluster_id: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyHandle {
    /// Serves until the task ends (an I/O error on the listener).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

/// Connects the producer and starts serving.
pub async fn start(config: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
    let producer = Producer::start(config.producer.clone())
        .await
        .map_err(|e| ProxyError::Cluster(e.to_string()))?;
    let cluster_id = producer
        .cluster_id()
        .await
        .map_err(|e| ProxyError::Cluster(e.to_string()))?;
    let state = Arc::new(AppState {
        producer,
        metrics: metrics::ProxyMetrics::new(),
        cluster_id: cluster_id.clone(),
    });
    let app = router(state);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ProxyError::Listen(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ProxyError::Listen(config.listen, e))?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the proxy stopped serving");
        }
    });
    Ok(ProxyHandle {
        addr,
        cluster_id,
        task,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot reach the Kafka cluster: {0}")]
    Cluster(String),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/topics", get(v2::list_topics))
        .route("/topics/{topic}", get(v2::get_topic).post(v2::produce))
        .route(
            "/topics/{topic}/partitions/{partition}",
            post(v2::produce_to_partition),
        )
        .route("/v3/clusters", get(v3::list_clusters))
        .route(
            "/v3/clusters/{cluster_id}/topics/{topic}/records",
            post(v3::produce),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::render))
        .layer(axum::middleware::from_fn(linger::lingering_bodies))
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Ready once the producer can see the cluster.
async fn readyz(State(s): State<Shared>) -> Response {
    match s.producer.cluster_id().await {
        Ok(_) => "ready\n".into_response(),
        Err(e) => ApiError::unavailable(e).into_response(),
    }
}

/// Times every request by route and status.
async fn observe(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    s.metrics
        .observe(&method, &route, resp.status().as_u16(), started.elapsed());
    resp
}

/// Checks the topic and every record's partition before anything is queued, so that a request
/// refused for them writes nothing.
async fn check_records(s: &AppState, topic: &str, records: &[Incoming]) -> Result<(), ApiError> {
    let count = s
        .producer
        .partition_count(topic)
        .await
        .map_err(ApiError::unavailable)?
        .ok_or_else(|| ApiError::topic_not_found(topic))?;
    for r in records {
        if let Some(p) = r.partition {
            if p < 0 || p as usize >= count {
                return Err(ApiError::from_send(&ProduceError::UnknownPartition {
                    topic: topic.to_string(),
                    partition: p,
                    count,
                }));
            }
        }
        let size = crate::client::producer::batch::batch_size_upper_bound(&r.record);
        let max = s.producer.config().max_request_size;
        if size > max {
            return Err(ApiError::from_send(&ProduceError::RecordTooLarge {
                size,
                max,
            }));
        }
    }
    Ok(())
}

/// A record handed to the producer: its outcome to come, or why it was refused.
enum Queued {
    Waiting(oneshot::Receiver<RecordResult>),
    Refused(ProduceError),
}

impl Queued {
    async fn outcome(self) -> RecordResult {
        match self {
            Queued::Waiting(rx) => rx.await.unwrap_or_else(|_| {
                Err(ProduceError::Timeout(
                    "the producer stopped before an answer".into(),
                ))
            }),
            Queued::Refused(e) => Err(e),
        }
    }
}

async fn queue(s: &AppState, topic: &str, r: Incoming) -> Queued {
    match s.producer.send(topic, r.partition, r.record).await {
        Ok(rx) => Queued::Waiting(rx),
        Err(e) => Queued::Refused(e),
    }
}

/// The longest a request waits for its records' outcomes: the producer settles each within
/// `delivery.timeout.ms`; this is only a backstop.
fn answer_deadline(s: &AppState) -> Duration {
    Duration::from_millis(s.producer.config().delivery_timeout_ms.max(0) as u64 + 5000)
}
