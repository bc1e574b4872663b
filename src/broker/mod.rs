//! The broker: listeners, request channel, handlers per API family, ReplicaManager and the
//! purgatory. It joins storage, protocol and controller; nothing else reaches into it.

pub mod admin;
pub mod fetch;
pub mod fetch_session;
pub mod group;
pub mod metadata;
pub mod produce;
pub mod producer_state;
pub mod purgatory;
pub mod replica_manager;
pub mod server;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

use crate::config::broker::BrokerConfig;
use crate::controller::Controller;
use crate::protocol::{self, api_versions, errors, DecodedRequest, FrameError};
use crate::storage::{LogManager, LogManagerConfig, MetaProperties, StorageError};
use replica_manager::ReplicaManager;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("metadata: {0}")]
    Controller(#[from] crate::controller::ControllerError),
    #[error("{0} is not formatted: run `evenkeel format` first (or use `evenkeel dev`)")]
    NotFormatted(String),
    #[error("{dir} belongs to node {found}, but node.id is {expected}")]
    NodeIdMismatch {
        dir: String,
        found: i32,
        expected: i32,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where clients are told to connect.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: i32,
}

/// One broker node: the shared state every request handler sees.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub logs: Arc<LogManager>,
    pub controller: Controller,
    pub replicas: ReplicaManager,
    /// Incremental fetch sessions (KIP-227).
    pub fetch_sessions: fetch_session::FetchSessionCache,
    /// Where consumer fetches are read and encoded, once the server has started its fetch pool.
    fetch_pool: std::sync::OnceLock<tokio::runtime::Handle>,
    endpoint: std::sync::RwLock<Endpoint>,
    pub metrics: Arc<crate::metrics::BrokerMetrics>,
    /// The classic group coordinator (this node coordinates every group).
    pub groups: group::coordinator::Coordinator,
    /// Producer ids this broker may hand out (a block reserved in the metadata log).
    producer_ids: std::sync::Mutex<std::ops::Range<i64>>,
}

/// Writes `meta.properties` into an empty log directory (Kafka's `kafka-storage format`).
pub fn format_log_dir(
    dir: &std::path::Path,
    cluster_id: &str,
    node_id: i32,
) -> Result<MetaProperties, BrokerError> {
    std::fs::create_dir_all(dir).map_err(|e| StorageError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    if let Some(existing) = MetaProperties::read(dir)? {
        return Ok(existing);
    }
    let meta = MetaProperties {
        cluster_id: cluster_id.to_string(),
        node_id,
        directory_id: crate::storage::KafkaUuid::random(),
    };
    meta.write(dir)?;
    Ok(meta)
}

/// A new random cluster id, as `kafka-storage random-uuid` prints one.
pub fn random_cluster_id() -> String {
    crate::storage::KafkaUuid::random().to_string()
}

impl Broker {
    /// Loads the log directory and the metadata log, and brings the partitions in line.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>, BrokerError> {
        let meta = MetaProperties::read(&config.log_dir)?
            .ok_or_else(|| BrokerError::NotFormatted(config.log_dir.display().to_string()))?;
        if meta.node_id != config.node_id {
            return Err(BrokerError::NodeIdMismatch {
                dir: config.log_dir.display().to_string(),
                found: meta.node_id,
                expected: config.node_id,
            });
        }
        let mut lmc = LogManagerConfig::new(&config.log_dir, config.log.clone());
        lmc.retention_check_interval_ms = config.log_retention_check_interval_ms;
        lmc.recovery_checkpoint_interval_ms = config.log_flush_offset_checkpoint_interval_ms;
        lmc.start_offset_checkpoint_interval_ms =
            config.log_flush_start_offset_checkpoint_interval_ms;
        let logs = LogManager::open(lmc)?;
        let controller = Controller::open(&logs, config.node_id)?;
        let replicas = ReplicaManager::new(config.node_id, logs.clone());
        replicas.apply_image(&controller.image(), &config.log)?;
        logs.start_background();
        let adv = &config.advertised_listeners[0];
        let endpoint = Endpoint {
            host: if adv.host.is_empty() {
                "localhost".into()
            } else {
                adv.host.clone()
            },
            port: adv.port as i32,
        };
        let groups = group::coordinator::Coordinator::new(group::coordinator::GroupConfig {
            initial_rebalance_delay: std::time::Duration::from_millis(
                config.group_initial_rebalance_delay_ms,
            ),
            min_session_timeout_ms: config.group_min_session_timeout_ms,
            max_session_timeout_ms: config.group_max_session_timeout_ms,
            max_size: config.group_max_size,
            offset_metadata_max_bytes: config.offset_metadata_max_bytes,
            offsets_retention: std::time::Duration::from_secs(
                config.offsets_retention_minutes.saturating_mul(60),
            ),
        });
        let metrics = Arc::new(crate::metrics::BrokerMetrics::new());
        let fetch_sessions = fetch_session::FetchSessionCache::new(
            config.max_incremental_fetch_session_cache_slots,
            metrics.fetch_session_evictions.clone(),
        );
        let broker = Arc::new(Broker {
            cluster_id: meta.cluster_id,
            fetch_sessions,
            fetch_pool: std::sync::OnceLock::new(),
            config,
            logs,
            controller,
            replicas,
            endpoint: std::sync::RwLock::new(endpoint),
            producer_ids: std::sync::Mutex::new(0..0),
            metrics,
            groups,
        });
        group::api::load(&broker);
        Ok(broker)
    }

    /// Hands consumer fetches to `pool` from now on (set once, by the server).
    pub fn set_fetch_pool(&self, pool: tokio::runtime::Handle) {
        let _ = self.fetch_pool.set(pool);
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
            .read()
            .map(|e| e.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Sets the advertised port once the listener is bound (for port 0).
    pub fn set_advertised_port(&self, port: u16) {
        if let Ok(mut e) = self.endpoint.write() {
            if e.port == 0 {
                e.port = port as i32;
            }
        }
    }

    /// The next producer id, reserving a new block of 1,000 in the metadata log when needed.
    pub fn next_producer_id(&self) -> Result<i64, crate::controller::ControllerError> {
        let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.is_empty() {
            *ids = self.controller.allocate_producer_ids(1000)?;
        }
        let id = ids.start;
        ids.start += 1;
        Ok(id)
    }

    /// Re-applies the metadata image to the hosted partitions after a change.
    pub fn refresh_partitions(&self) -> Result<(), StorageError> {
        self.replicas
            .apply_image(&self.controller.image(), &self.config.log)
    }

    /// Flushes everything and writes the clean-shutdown marker.
    pub fn shutdown(&self) -> Result<(), StorageError> {
        self.replicas.snapshot_producer_state();
        self.logs.shutdown()
    }

    /// Handles one request frame. `Reply::Now(None)` means no response (acks=0); `Reply::Later`
    /// is a request parked in the purgatory. An error closes the connection, as Kafka does for
    /// unknown APIs, unsupported versions and malformed requests.
    pub fn handle(self: &Arc<Self>, frame: Bytes, peer: Option<std::net::SocketAddr>) -> Handled {
        let mut label = "Unknown";
        let reply = self.dispatch(frame, peer, &mut label);
        Handled { label, reply }
    }

    fn dispatch(
        self: &Arc<Self>,
        frame: Bytes,
        peer: Option<std::net::SocketAddr>,
        label: &mut &'static str,
    ) -> Result<Reply, FrameError> {
        let raw = protocol::peek_header(&frame)?;
        if let Ok(key) = ApiKey::try_from(raw.api_key) {
            *label = request_name(key);
            if key == ApiKey::ApiVersions && !api_versions::is_served(key, raw.api_version) {
                // A too-new ApiVersions gets a v0 answer with UNSUPPORTED_VERSION and our ranges.
                let body = api_versions::response(errors::UNSUPPORTED_VERSION);
                return encode(protocol::encode_response_with_header_version(
                    0,
                    0,
                    raw.correlation_id,
                    &body,
                ));
            }
        }
        // The same checks and decoding the fuzz target exercises.
        let (header, request) = protocol::decode_request(frame)?;
        let v = header.request_api_version;
        let cid = header.correlation_id;
        match request {
            DecodedRequest::ApiVersions(_req) => {
                respond(v, cid, &api_versions::response(errors::NONE))
            }
            DecodedRequest::Metadata(req) => respond(v, cid, &metadata::metadata(self, v, req)),
            DecodedRequest::DescribeCluster(req) => {
                respond(v, cid, &metadata::describe_cluster(self, req))
            }
            DecodedRequest::Produce(req) => {
                // acks=0 answers nothing.
                reply(produce::produce(self, v, req), move |r| match r {
                    Some(r) => response_frame(v, cid, &r),
                    None => Ok(None),
                })
            }
            DecodedRequest::Fetch(req) => {
                let follower = fetch::is_follower(&req);
                if follower {
                    *label = "FetchFollower";
                }
                match self.fetch_pool.get() {
                    // Consumer fetches, wide ones included, are read and encoded on the fetch
                    // pool, so produce and follower fetches never queue behind them (seed 003).
                    Some(pool) if !follower => {
                        let broker = self.clone();
                        let task = pool.spawn(async move {
                            let r = match fetch::fetch(&broker, v, req) {
                                Outcome::Now(r) => r,
                                Outcome::Later(wait) => wait.await,
                            };
                            response_frame(v, cid, &r)
                        });
                        Ok(Reply::Later(Box::pin(async move {
                            task.await.unwrap_or_else(|e| {
                                Err(FrameError::Malformed(format!("fetch task failed: {e}")))
                            })
                        })))
                    }
                    _ => reply(fetch::fetch(self, v, req), move |r| {
                        response_frame(v, cid, &r)
                    }),
                }
            }
            DecodedRequest::ListOffsets(req) => respond(v, cid, &fetch::list_offsets(self, v, req)),
            DecodedRequest::CreateTopics(req) => {
                respond(v, cid, &admin::create_topics(self, v, req))
            }
            DecodedRequest::DeleteTopics(req) => respond(v, cid, &admin::delete_topics(self, req)),
            DecodedRequest::CreatePartitions(req) => {
                respond(v, cid, &admin::create_partitions(self, req))
            }
            DecodedRequest::OffsetForLeaderEpoch(req) => {
                respond(v, cid, &fetch::offset_for_leader_epoch(self, req))
            }
            DecodedRequest::InitProducerId(req) => {
                respond(v, cid, &produce::init_producer_id(self, req))
            }
            DecodedRequest::DeleteRecords(req) => {
                respond(v, cid, &admin::delete_records(self, req))
            }
            DecodedRequest::DescribeConfigs(req) => {
                respond(v, cid, &admin::describe_configs(self, v, req))
            }
            DecodedRequest::AlterConfigs(req) => respond(v, cid, &admin::alter_configs(self, req)),
            DecodedRequest::IncrementalAlterConfigs(req) => {
                respond(v, cid, &admin::incremental_alter_configs(self, req))
            }
            DecodedRequest::FindCoordinator(req) => {
                respond(v, cid, &group::api::find_coordinator(self, v, req))
            }
            DecodedRequest::JoinGroup(req) => {
                let host = peer.map(|p| format!("/{}", p.ip())).unwrap_or_default();
                let client = client_id(&header).to_string();
                reply(
                    group::api::join_group(self, v, &client, &host, req),
                    move |r| response_frame(v, cid, &r),
                )
            }
            DecodedRequest::SyncGroup(req) => reply(group::api::sync_group(self, req), move |r| {
                response_frame(v, cid, &r)
            }),
            DecodedRequest::Heartbeat(req) => respond(v, cid, &group::api::heartbeat(self, req)),
            DecodedRequest::LeaveGroup(req) => {
                respond(v, cid, &group::api::leave_group(self, v, req))
            }
            DecodedRequest::OffsetCommit(req) => {
                respond(v, cid, &group::api::offset_commit(self, req))
            }
            DecodedRequest::OffsetFetch(req) => {
                respond(v, cid, &group::api::offset_fetch(self, v, req))
            }
            DecodedRequest::ListGroups(req) => {
                respond(v, cid, &group::api::list_groups(self, v, req))
            }
            DecodedRequest::DescribeGroups(req) => {
                respond(v, cid, &group::api::describe_groups(self, v, req))
            }
            DecodedRequest::DeleteGroups(req) => {
                respond(v, cid, &group::api::delete_groups(self, req))
            }
            DecodedRequest::OffsetDelete(req) => {
                respond(v, cid, &group::api::offset_delete(self, req))
            }
        }
    }
}

/// A handled request: Kafka's request name for metrics, and the reply.
pub struct Handled {
    pub label: &'static str,
    pub reply: Result<Reply, FrameError>,
}

/// Kafka's name for a request type in request metrics (Fetch is split by the caller).
fn request_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "FetchConsumer",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        _ => "Other",
    }
}

/// An answer now, or a future that yields it once the purgatory or a rebalance completes.
pub enum Outcome<T> {
    Now(T),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>),
}

/// A future yielding a parked request's response frame (or nothing, for acks=0).
pub type ReplyFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<Bytes>, FrameError>> + Send>>;

/// What a request handler produced.
pub enum Reply {
    /// The response frame, or nothing (acks=0).
    Now(Option<Bytes>),
    /// The request waits in the purgatory; the future yields the response.
    Later(ReplyFuture),
}

fn encode(r: anyhow::Result<Bytes>) -> Result<Reply, FrameError> {
    encoded(r).map(Reply::Now)
}

fn encoded(r: anyhow::Result<Bytes>) -> Result<Option<Bytes>, FrameError> {
    r.map(Some)
        .map_err(|e| FrameError::Malformed(format!("cannot encode the response: {e:#}")))
}

/// A response body as its frame.
fn response_frame<R: Encodable + HeaderVersion>(
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<Option<Bytes>, FrameError> {
    encoded(protocol::encode_response(version, correlation_id, body))
}

fn respond<R: Encodable + HeaderVersion>(
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<Reply, FrameError> {
    response_frame(version, correlation_id, body).map(Reply::Now)
}

/// An outcome as a reply: framed now, or framed by the parked future when it completes.
fn reply<T: Send + 'static>(
    outcome: Outcome<T>,
    to_frame: impl FnOnce(T) -> Result<Option<Bytes>, FrameError> + Send + 'static,
) -> Result<Reply, FrameError> {
    match outcome {
        Outcome::Now(t) => to_frame(t).map(Reply::Now),
        Outcome::Later(fut) => Ok(Reply::Later(Box::pin(async move { to_frame(fut.await) }))),
    }
}

/// `Some(message)` as the wire's nullable string.
pub(crate) fn msg(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

/// The request header's client id, for logs.
pub fn client_id(h: &RequestHeader) -> &str {
    h.client_id.as_deref().unwrap_or("")
}
