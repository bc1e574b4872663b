//! The producer proxy (`evenkeel proxy`): HTTP produce in the shapes Kafka users already script
//! against (Confluent REST Proxy v2 and v3, Strimzi's bridge), written through our own producer
//! and its KIP-794 partitioner. A request is answered only once its records are acknowledged.
//!
//! It serves HTTP, or HTTPS with a PEM keystore (`tls`); with basic auth on, each HTTP user's
//! requests go through a producer logged in to the cluster as that user (`users`).
//!
//! `v2` and `v3` hold the handlers, `records` the body formats, `errors` the HTTP error shapes,
//! `metrics` the `/metrics` text, `linger` the reading-out of request bodies a handler drops early,
//! `timed` the answer bodies that report when they are done.

pub mod errors;
mod linger;
mod metrics;
pub mod records;
mod timed;
mod tls;
pub mod users;
mod v2;
mod v3;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{oneshot, watch};

use crate::client::producer::{ProduceError, Producer, ProducerConfig, RecordResult};
use crate::config::ssl::SslConfig;
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
    /// Its `buffer.memory` is also the largest request body taken (see `read_body`).
    pub producer: ProducerConfig,
    /// At shutdown, how long the proxy goes on serving, unready, before it stops taking
    /// connections: the time a load balancer (a Kubernetes Service) takes to stop sending it
    /// new ones.
    pub shutdown_delay: Duration,
    /// HTTPS with this keystore (`None`: plain HTTP).
    pub tls: Option<SslConfig>,
    /// Basic auth mapped to SASL logins (`None`: no authentication).
    pub basic_auth: Option<users::BasicAuth>,
}

impl ProxyConfig {
    /// Java producer properties over the proxy's defaults (`bootstrap.servers` included).
    /// Variables of Kafka's config providers (`config.providers`, e.g. a `sasl.jaas.config`
    /// read from a mounted Secret with `DirectoryConfigProvider`) are resolved first.
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
        let props = crate::config::providers::resolve(&props)?;
        let producer = ProducerConfig::from_properties(&props)?;
        Ok(ProxyConfig {
            listen,
            producer,
            shutdown_delay: Duration::ZERO,
            tls: None,
            basic_auth: None,
        })
    }

    /// Serves HTTPS with the PEM file at `keystore`: the private key and its certificate chain
    /// (a Kafka PEM keystore, as a broker's `ssl.keystore.location`).
    pub fn with_https(mut self, keystore: &std::path::Path) -> Result<ProxyConfig, ConfigError> {
        let props: BTreeMap<String, String> = [
            ("ssl.keystore.type", "PEM".to_string()),
            ("ssl.keystore.location", keystore.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let ssl = SslConfig::from_props(&props, "proxy")?;
        // Read now, so that a bad file is refused at start.
        crate::security::tls::TlsServer::new(ssl.clone()).map_err(|e| e.into_config_error())?;
        self.tls = Some(ssl);
        Ok(self)
    }

    /// Turns basic auth on (REST Proxy's `authentication.method=BASIC`): each user's name and
    /// password become the SASL login of a producer of theirs, so the producer must use SASL.
    pub fn with_basic_auth(mut self, auth: users::BasicAuth) -> Result<ProxyConfig, ConfigError> {
        if self.producer.security.username().is_none() {
            return Err(crate::config::invalid(
                "security.protocol",
                "",
                "authentication.method=BASIC passes each HTTP user on to the cluster as its SASL \
                 login: the producer must use SASL_PLAINTEXT or SASL_SSL (with the proxy's own \
                 login in sasl.jaas.config, for /readyz and the cluster id)",
            ));
        }
        self.basic_auth = Some(auth);
        Ok(self)
    }

    /// The longest a shutdown takes: the delay, then as long as any request in progress may
    /// wait for its records.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_delay + answer_deadline_of(&self.producer)
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    /// The proxy's own producer: every request's without basic auth; with it, the one that
    /// answers `/readyz` and learns the cluster id.
    own: Arc<Producer>,
    /// With basic auth, the users' producers.
    users: Option<users::UserProducers>,
    metrics: metrics::ProxyMetrics,
    /// Learned from the cluster when first needed: the proxy serves before a broker answers.
    cluster_id: tokio::sync::OnceCell<String>,
    /// Set when a shutdown begins: `/readyz` answers 503 from then on.
    unready: AtomicBool,
    /// Turns true when the proxy stops taking records: v3 streams end after the records
    /// taken so far.
    shutdown: watch::Receiver<bool>,
}

impl AppState {
    /// The cluster's id (REST Proxy v3 names it in its paths); 503 while no broker answers.
    async fn cluster_id(&self) -> Result<&str, ApiError> {
        self.cluster_id
            .get_or_try_init(|| self.own.cluster_id())
            .await
            .map(String::as_str)
            .map_err(ApiError::unavailable)
    }
}

type App = Arc<AppState>;

/// What a request's handler works with: the shared state and the producer the request goes
/// through (its user's with basic auth, else the proxy's own).
#[derive(Clone)]
pub(crate) struct Shared {
    app: App,
    producer: Arc<Producer>,
}

impl std::ops::Deref for Shared {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.app
    }
}

impl axum::extract::FromRequestParts<App> for Shared {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        app: &App,
    ) -> Result<Shared, Self::Rejection> {
        let producer = parts
            .extensions
            .get::<Arc<Producer>>()
            .cloned()
            .unwrap_or_else(|| app.own.clone());
        Ok(Shared {
            app: app.clone(),
            producer,
        })
    }
}

/// How long `start` waits for the cluster's id before it serves without it.
const FIRST_CONTACT: Duration = Duration::from_secs(5);

/// A running proxy: its address, and the task that serves until the handle is dropped or shut
/// down.
pub struct ProxyHandle {
    pub addr: SocketAddr,
    /// `None` when no broker answered within the first seconds; `/readyz` says when one does.
    pub cluster_id: Option<String>,
    state: App,
    shutdown_delay: Duration,
    stopping: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyHandle {
    /// Serves until the task ends (an I/O error on the listener).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }

    /// Shuts down within `grace`: unready at once, still serving for the shutdown delay; then
    /// no new connection and no new record on a v3 stream; the requests in progress answered
    /// once their records are settled; what the producer still holds flushed; then done.
    pub async fn shutdown(mut self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.state.unready.store(true, Ordering::SeqCst);
        tokio::time::sleep(self.shutdown_delay.min(grace)).await;
        let _ = self.stopping.send(true);
        if tokio::time::timeout_at(deadline, &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!(?grace, "requests still open at shutdown: closing them");
            self.task.abort();
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let users = self.state.users.iter().flat_map(|u| u.all());
        let closing = users
            .map(|(_, p)| p)
            .chain([self.state.own.clone()])
            .map(|p| async move { p.close(left).await });
        futures::future::join_all(closing).await;
    }
}

/// Starts the producer and serves. No broker has to answer yet: until one does, `/readyz`
/// answers 503 and so does every produce.
pub async fn start(config: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
    let producer = Producer::start(config.producer.clone())
        .await
        .map_err(|e| ProxyError::Cluster(e.to_string()))?;
    let (stopping, shutdown) = watch::channel(false);
    let users = config
        .basic_auth
        .as_ref()
        .map(|auth| users::UserProducers::new(config.producer.clone(), auth));
    let state = Arc::new(AppState {
        own: Arc::new(producer),
        users,
        metrics: metrics::ProxyMetrics::new(),
        cluster_id: tokio::sync::OnceCell::new(),
        unready: AtomicBool::new(false),
        shutdown,
    });
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ProxyError::Listen(config.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ProxyError::Listen(config.listen, e))?;
    let app = router(state.clone());
    let mut stop = stopping.subscribe();
    let stopped = async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    };
    let task = match &config.tls {
        Some(ssl) => {
            let server = crate::security::tls::TlsServer::new(ssl.clone())
                .map_err(|e| ProxyError::Tls(e.to_string()))?;
            tokio::spawn(serve(tls::TlsListener::new(listener, server), app, stopped))
        }
        None => {
            // Nagle's algorithm would hold a v3 stream's next report until the client
            // acknowledged the last one, which a client delays by up to 40 ms: every answer
            // goes out as it is written.
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
                }
            });
            tokio::spawn(serve(listener, app, stopped))
        }
    };
    // Serving already; the first contact only tells the caller the cluster's id.
    let cluster_id = match tokio::time::timeout(FIRST_CONTACT, state.own.cluster_id()).await {
        Ok(Ok(id)) => {
            let _ = state.cluster_id.set(id.clone());
            Some(id)
        }
        // Waiting would not help: the login is wrong, not early.
        Ok(Err(e)) if e.is_login_refused() => {
            task.abort();
            return Err(ProxyError::LoginRefused(e.to_string()));
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "no broker answers yet; serving, not ready");
            None
        }
        Err(_) => {
            tracing::warn!("no broker answered within {FIRST_CONTACT:?}; serving, not ready");
            None
        }
    };
    Ok(ProxyHandle {
        addr,
        cluster_id,
        state,
        shutdown_delay: config.shutdown_delay,
        stopping,
        task,
    })
}

/// Serves `app` on `listener` until `stopped`, then until the requests in progress are answered.
async fn serve<L>(
    listener: L,
    app: Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let serve = axum::serve(listener, app).with_graceful_shutdown(stopped);
    if let Err(e) = serve.await {
        tracing::error!(error = %e, "the proxy stopped serving");
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot use the Kafka cluster: {0}")]
    Cluster(String),
    #[error("cannot serve HTTPS: {0}")]
    Tls(String),
    #[error("the Kafka cluster refused the proxy's own login: {0}")]
    LoginRefused(String),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

fn router(state: App) -> Router {
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
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Ready while a broker answers, until a shutdown begins.
async fn readyz(State(s): State<App>) -> Response {
    if s.unready.load(Ordering::SeqCst) {
        return ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            errors::SHUTTING_DOWN,
            "shutting down",
        )
        .into_response();
    }
    match s.own.cluster_id().await {
        Ok(id) => {
            let _ = s.cluster_id.set(id);
            "ready\n".into_response()
        }
        Err(e) => ApiError::unavailable(e).into_response(),
    }
}

/// Times every request by route and status, until the last byte of its answer is sent (a v3
/// stream's reports come in the body, long after the status line).
async fn observe(State(s): State<App>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    resp.map(|body| {
        timed::Timed::body(body, move || {
            s.metrics
                .observe(&method, &route, status, started.elapsed())
        })
    })
}

/// Paths open without credentials: probes and metrics, which touch no topic.
const OPEN_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// With basic auth on, a request other than `OPEN_PATHS` goes through its user's producer
/// (401 without credentials or when the cluster refuses their login); without, through the
/// proxy's own.
async fn authenticate(State(s): State<App>, mut req: Request, next: Next) -> Response {
    let Some(users) = &s.users else {
        return next.run(req).await;
    };
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let Some(credentials) = users::credentials(req.headers()) else {
        s.metrics.authentication_failed("missing");
        return users::unauthorized("this proxy needs HTTP basic credentials");
    };
    match users.producer_for(&credentials).await {
        Ok(producer) => {
            req.extensions_mut().insert(producer);
            next.run(req).await
        }
        Err(refused) => {
            if refused.status() == axum::http::StatusCode::UNAUTHORIZED {
                s.metrics.authentication_failed("refused");
            }
            refused
        }
    }
}

/// Checks the topic and every record's partition before anything is queued, so that a request
/// refused for them writes nothing.
async fn check_records(s: &Shared, topic: &str, records: &[Incoming]) -> Result<(), ApiError> {
    let count = s
        .producer
        .partition_count(topic)
        .await
        .map_err(|e| ApiError::from_client(&e))?
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

/// A record handed to the producer: its outcome to come, or why it was refused before it was
/// queued (in REST Proxy's terms: a full buffer is 429, an unknown partition 404, ...).
enum Queued {
    Waiting(oneshot::Receiver<RecordResult>),
    Refused(ApiError),
}

impl Queued {
    /// The record's outcome once settled: its metadata, or the producer's error for it.
    async fn outcome(rx: oneshot::Receiver<RecordResult>) -> RecordResult {
        rx.await.unwrap_or_else(|_| {
            Err(ProduceError::Timeout(
                "the producer stopped before an answer".into(),
            ))
        })
    }

    /// Refused for a full buffer: the records after it in the same request are refused at
    /// once, rather than each waiting `max.block.ms` again.
    fn refused_for_memory(&self) -> Option<&ApiError> {
        match self {
            Queued::Refused(e) if e.error_code == errors::BUFFER_FULL => Some(e),
            _ => None,
        }
    }
}

async fn queue(s: &Shared, topic: &str, r: Incoming) -> Queued {
    match s.producer.send(topic, r.partition, r.record).await {
        Ok(rx) => Queued::Waiting(rx),
        Err(e) => Queued::Refused(ApiError::from_send(&e)),
    }
}

/// Reads the whole body, up to the proxy's limit: `buffer.memory`, which no request could
/// exceed and still be held. A body announced larger is refused before it is read (413).
async fn read_body(s: &Shared, headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, ApiError> {
    let limit = s.producer.config().accumulator.buffer_memory as usize;
    let too_large = || {
        ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            errors::TOO_LARGE,
            format!("the request body is over {limit} bytes (buffer.memory)"),
        )
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())
}

/// The longest a request waits for its records' outcomes: the producer settles each within
/// `delivery.timeout.ms`; this is only a backstop.
fn answer_deadline(s: &Shared) -> Duration {
    answer_deadline_of(s.producer.config())
}

fn answer_deadline_of(c: &ProducerConfig) -> Duration {
    Duration::from_millis(c.delivery_timeout_ms.max(0) as u64 + 5000)
}
