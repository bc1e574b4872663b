//! The broker: listeners, request channel, handlers per API family, ReplicaManager and the
//! purgatory; the lifecycle with the controller and the metadata publisher. It joins storage,
//! protocol and controller; nothing else reaches into it.

mod acls;
pub mod admin;
pub mod alter_partition;
mod apis;
pub mod auth;
mod client_quotas;
pub mod controller_channel;
pub mod features;
pub mod fetch;
pub mod fetch_session;
pub mod group;
pub mod lifecycle;
mod log_dirs;
pub mod metadata;
mod partition;
pub mod produce;
mod producer_state;
mod purgatory;
mod quotas;
mod refusals;
pub mod replica_manager;
pub mod replication;
mod scram_credentials;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

use crate::config::broker::BrokerConfig;
use crate::metadata::image::MetadataImage;
use crate::protocol::errors;
use crate::storage::{LogManager, LogManagerConfig, MetaProperties, StorageError};
use controller_channel::ControllerChannel;
use replica_manager::ReplicaManager;

pub use apis::{Handled, Reply, ReplyFuture};

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
    #[error("the metadata quorum: {0}")]
    Quorum(String),
    #[error(transparent)]
    UnknownHost(#[from] crate::protocol::listener::UnknownHost),
    /// The broker cannot connect to other brokers' inter-broker listener as configured.
    #[error("inter-broker listener {listener}: {source}")]
    InterBroker {
        listener: String,
        #[source]
        source: crate::client::SecurityError,
    },
    /// The node cannot connect to the controller listener as configured.
    #[error("controller listener {listener}: {source}")]
    ControllerListener {
        listener: String,
        #[source]
        source: crate::client::SecurityError,
    },
    /// A TLS listener's key, certificates or truststore cannot be used.
    #[error("listener {listener}: {source}")]
    Tls {
        listener: String,
        #[source]
        source: crate::security::tls::TlsError,
    },
    /// The node cannot go on (another cluster, a refused registration): the reason.
    #[error("{0}")]
    Fatal(String),
}

/// Where clients are told to connect.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: i32,
}

/// One broker node: the shared state every request handler sees.
pub struct Broker {
    config: BrokerConfig,
    cluster_id: String,
    logs: Arc<LogManager>,
    replicas: Arc<ReplicaManager>,
    /// Incremental fetch sessions (KIP-227).
    fetch_sessions: fetch_session::FetchSessionCache,
    /// Where consumer fetches are read and encoded (the server's fetch runtime).
    fetch_pool: tokio::runtime::Handle,
    /// Advertised listeners, with the ports the server bound.
    listeners: Vec<crate::config::broker::Listener>,
    metrics: Arc<crate::metrics::BrokerMetrics>,
    /// The classic group coordinator, for the groups whose `__consumer_offsets` partition
    /// this broker leads.
    groups: group::coordinator::Coordinator,
    /// Producer ids this broker may hand out (a block from the controller).
    producer_ids: tokio::sync::Mutex<std::ops::Range<i64>>,
    /// The image the partitions and coordinators were last brought in line with.
    published: watch::Sender<Arc<MetadataImage>>,
    /// The active controller, as the quorum names it.
    controller_id: watch::Receiver<Option<i32>>,
    /// Admin requests and producer-id blocks go to the active controller through this.
    controller: Arc<ControllerChannel>,
    /// Registration and heartbeats.
    lifecycle: Arc<lifecycle::Lifecycle>,
    /// `__consumer_offsets` partitions whose groups are loaded here.
    coordinated: parking_lot::Mutex<std::collections::HashSet<i32>>,
    strays_deleted: std::sync::atomic::AtomicBool,
    /// `authorizer.class.name`: `None` allows every request.
    authorizer: Option<auth::Authorizer>,
    /// `producer_byte_rate`, `consumer_byte_rate` and `request_percentage`, enforced.
    produce_quotas: quotas::ClientQuotaManager,
    fetch_quotas: quotas::ClientQuotaManager,
    request_quotas: quotas::ClientQuotaManager,
    /// `controller_mutation_rate`, enforced on the topic mutations this broker forwards.
    mutation_quotas: quotas::MutationQuotaManager,
    /// The broker's background tasks (see `start_background`), stopped by `shutdown`.
    tasks: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What a broker is started from: its config and logs, the channels to the controller, the
/// metadata it follows, and what the server bound for it.
pub struct BrokerParts {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub logs: Arc<LogManager>,
    /// Admin requests and producer-id blocks go to the active controller through this.
    pub controller: Arc<ControllerChannel>,
    /// Registration and heartbeats go through this one, so that a busy admin path never
    /// delays a heartbeat.
    pub heartbeats: Arc<ControllerChannel>,
    /// The active controller, as the quorum names it.
    pub controller_id: watch::Receiver<Option<i32>>,
    /// The committed metadata images, as the quorum or the observer replays them.
    pub images: watch::Receiver<Arc<MetadataImage>>,
    /// The advertised listeners, with the ports the server bound.
    pub advertised: Vec<crate::config::broker::Listener>,
    /// Where consumer fetches are read and encoded (the server's fetch runtime).
    pub fetch_pool: tokio::runtime::Handle,
    /// How this broker connects to other brokers' inter-broker listener (its fetchers).
    pub inter_broker: crate::client::ClientSecurity,
}

/// Writes `meta.properties` into an empty log directory (Kafka's `kafka-storage format`).
pub fn format_log_dir(
    dir: &std::path::Path,
    cluster_id: &str,
    node_id: i32,
) -> Result<MetaProperties, BrokerError> {
    format_log_dir_as(
        dir,
        cluster_id,
        node_id,
        crate::storage::KafkaUuid::random(),
    )
}

/// As `format_log_dir`, with the directory id given (a voter named at format time).
pub fn format_log_dir_as(
    dir: &std::path::Path,
    cluster_id: &str,
    node_id: i32,
    directory_id: crate::storage::KafkaUuid,
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
        directory_id,
    };
    meta.write(dir)?;
    Ok(meta)
}

/// A new random cluster id, as `kafka-storage random-uuid` prints one.
pub fn random_cluster_id() -> String {
    crate::storage::KafkaUuid::random().to_string()
}

/// Opens the log directory of a formatted node: `meta.properties` must name this node.
pub fn open_log_dir(
    config: &BrokerConfig,
) -> Result<(MetaProperties, Arc<LogManager>), BrokerError> {
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
    lmc.high_watermark_checkpoint_interval_ms =
        config.replication.high_watermark_checkpoint_interval_ms;
    lmc.start_offset_checkpoint_interval_ms = config.log_flush_start_offset_checkpoint_interval_ms;
    lmc.cleaner = config.cleaner.clone();
    lmc.lock_wait = std::time::Duration::from_millis(config.log_dir_lock_wait_ms);
    let logs = LogManager::open(lmc)?;
    Ok((meta, logs))
}

/// The longest a handler waits for this broker to see a change it asked the controller for.
const SEE_OWN_CHANGE: Duration = Duration::from_secs(5);

impl Broker {
    /// Builds the broker whole and starts its background work (see `start_background`).
    pub fn start(parts: BrokerParts) -> Arc<Broker> {
        let BrokerParts {
            config,
            cluster_id,
            logs,
            controller,
            heartbeats,
            controller_id,
            images,
            advertised,
            fetch_pool,
            inter_broker,
        } = parts;
        let metrics = Arc::new(crate::metrics::BrokerMetrics::new());
        let (published, _) = watch::channel(Arc::new(MetadataImage::empty()));
        let lifecycle = lifecycle::Lifecycle::new(
            registration(&config, &cluster_id, &advertised),
            heartbeats,
            published.subscribe(),
        );
        let epoch_source = lifecycle.clone();
        let (isr_changes, isr_change_requests) = tokio::sync::mpsc::unbounded_channel();
        let replicas = ReplicaManager::new(replica_manager::ReplicaManagerParts {
            node_id: config.node_id,
            logs: logs.clone(),
            config: config.replication.clone(),
            inter_broker_listener: config.cluster.inter_broker_listener_name.clone(),
            inter_broker_security: inter_broker,
            metrics: metrics.clone(),
            broker_epoch: Arc::new(move || epoch_source.epoch()),
            isr_changes,
        });
        let fetch_sessions = fetch_session::FetchSessionCache::new(
            config.max_incremental_fetch_session_cache_slots,
            metrics.fetch_session_evictions.clone(),
        );
        let authorizer = config.auth.authorizer.as_ref().map(auth::Authorizer::new);
        let quota_manager =
            |kind, rate: &prometheus::GaugeVec, throttle_time: &prometheus::GaugeVec| {
                quotas::ClientQuotaManager::new(
                    kind,
                    config.quota_window_size,
                    config.quota_window_num,
                    quotas::QuotaMetrics {
                        rate: rate.clone(),
                        throttle_time: throttle_time.clone(),
                    },
                )
            };
        let produce_quotas = quota_manager(
            quotas::QuotaType::Produce,
            &metrics.produce_byte_rate,
            &metrics.produce_throttle_time,
        );
        let fetch_quotas = quota_manager(
            quotas::QuotaType::Fetch,
            &metrics.fetch_byte_rate,
            &metrics.fetch_throttle_time,
        );
        let request_quotas = quota_manager(
            quotas::QuotaType::Request,
            &metrics.request_time,
            &metrics.request_throttle_time,
        );
        let mutation_quotas = quotas::MutationQuotaManager::new(
            config.quota_window_size,
            config.quota_window_num,
            metrics.mutation_throttle_time.clone(),
        );
        let broker = Arc::new(Broker {
            cluster_id,
            fetch_sessions,
            fetch_pool,
            listeners: advertised,
            groups: group::coordinator::Coordinator::new(group_config(&config)),
            config,
            logs,
            replicas,
            metrics,
            producer_ids: tokio::sync::Mutex::new(0..0),
            published,
            controller_id,
            controller,
            lifecycle,
            coordinated: parking_lot::Mutex::new(Default::default()),
            strays_deleted: std::sync::atomic::AtomicBool::new(false),
            authorizer,
            produce_quotas,
            fetch_quotas,
            request_quotas,
            mutation_quotas,
            tasks: parking_lot::Mutex::new(Vec::new()),
        });
        broker.start_background(images, isr_change_requests);
        broker
    }

    /// The broker's background work, each task from the module it serves: the metadata
    /// publisher, registration and heartbeats, the AlterPartition sender, ReplicaManager's
    /// ISR expiry and purgatory purge, and the group coordinator's clock.
    fn start_background(
        self: &Arc<Self>,
        images: watch::Receiver<Arc<MetadataImage>>,
        isr_change_requests: tokio::sync::mpsc::UnboundedReceiver<
            replica_manager::IsrChangeRequest,
        >,
    ) {
        let mut tasks = vec![
            tokio::spawn(publisher(self.clone(), images)),
            tokio::spawn(self.lifecycle.clone().run()),
            tokio::spawn(alter_partition::run(self.clone(), isr_change_requests)),
            tokio::spawn(group::metadata_manager::run_clock(self.clone())),
        ];
        tasks.extend(
            self.replicas
                .start_background(self.config.replication.lag_time_max_ms),
        );
        *self.tasks.lock() = tasks;
    }

    /// Marks the broker ready to serve (`/readyz`), as Kafka's broker state RUNNING.
    pub fn set_ready(&self) {
        self.metrics.set_ready(true);
    }

    /// Registration and heartbeats.
    pub fn lifecycle(&self) -> &Arc<lifecycle::Lifecycle> {
        &self.lifecycle
    }

    /// The epoch the controller gave this broker's registration; -1 before it registered.
    pub fn broker_epoch(&self) -> i64 {
        self.lifecycle.epoch()
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The metadata image this broker's partitions and coordinators follow.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    /// Changes of the published image.
    pub fn image_changes(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    /// The offset of the last metadata record this broker has applied.
    pub fn applied_offset(&self) -> i64 {
        self.published.borrow().last_offset
    }

    /// The active controller's id, if known.
    pub fn active_controller(&self) -> Option<i32> {
        *self.controller_id.borrow()
    }

    /// The advertised endpoint of the first client listener.
    pub fn endpoint(&self) -> Endpoint {
        let first = &self.listeners[0];
        Endpoint {
            host: if first.host.is_empty() {
                "localhost".into()
            } else {
                first.host.clone()
            },
            port: first.port as i32,
        }
    }

    /// The advertised listeners, ports filled in.
    pub fn advertised_listeners(&self) -> Vec<crate::config::broker::Listener> {
        self.listeners.clone()
    }

    /// The next producer id, asking the controller for a new block of 1,000 when needed.
    pub async fn next_producer_id(&self) -> Result<i64, i16> {
        let mut ids = self.producer_ids.lock().await;
        if ids.is_empty() {
            let epoch = self.broker_epoch();
            let req = kafka_protocol::messages::AllocateProducerIdsRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(self.node_id()))
                .with_broker_epoch(epoch);
            let resp = self
                .controller
                .call(&req, 0, controller_channel::DEFAULT_RETRY_TIMEOUT, |r| {
                    controller_channel::is_not_controller(r.error_code)
                })
                .await
                .map_err(|_| errors::REQUEST_TIMED_OUT)?;
            if resp.error_code != errors::NONE {
                return Err(resp.error_code);
            }
            let start = resp.producer_id_start.0;
            *ids = start..start + resp.producer_id_len as i64;
        }
        let id = ids.start;
        ids.start += 1;
        Ok(id)
    }

    /// Applies a new image: partitions first (logs, leaders, followers), then the group
    /// coordinators of `__consumer_offsets` partitions gained or lost, then publishes it.
    pub fn publish(&self, image: Arc<MetadataImage>) -> Result<(), StorageError> {
        // ACLs first: they do not wait on the logs, and a failed log change must not hold
        // back a revoked permission.
        self.publish_acls(&image);
        if self.registered_in(&image) {
            self.apply_roles(&image)?;
        }
        self.metrics
            .metadata_last_applied_offset
            .set(image.last_offset);
        self.metrics
            .metadata_last_applied_timestamp
            .set(image.last_timestamp);
        self.published.send_replace(image);
        Ok(())
    }

    /// Whether `image` holds this broker's current registration. Until it does, the image may
    /// still name the previous incarnation of this node (killed, restarted within the session
    /// timeout) as a leader; the controller revokes those roles when the new one registers, so
    /// partitions follow the image only from then on, as Kafka's brokers start publishing only
    /// once registered and caught up.
    fn registered_in(&self, image: &MetadataImage) -> bool {
        let epoch = self.lifecycle.epoch();
        epoch >= 0
            && image
                .broker(self.node_id())
                .is_some_and(|b| b.epoch == epoch)
    }

    /// Partitions, group coordinators and fetchers follow `image`.
    fn apply_roles(&self, image: &Arc<MetadataImage>) -> Result<(), StorageError> {
        let changes = match self.replicas.apply_image(image, &self.config.log) {
            Ok(changes) => changes,
            Err(e) => {
                self.metrics.metadata_apply_errors.inc();
                // The partitions applied before the error changed roles all the same: the
                // coordinators follow them.
                group::metadata_manager::on_partition_changes(self, &Default::default());
                return Err(e);
            }
        };
        group::metadata_manager::on_partition_changes(self, &changes);
        let caught_up = self.lifecycle.is_caught_up();
        if caught_up
            && !self
                .strays_deleted
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            self.replicas.delete_strays(image)?;
        }
        self.replicas.follow_leaders(image);
        Ok(())
    }

    /// Waits (bounded) until the published image satisfies `ready`.
    pub async fn wait_for_image(&self, ready: impl Fn(&MetadataImage) -> bool) -> bool {
        let mut rx = self.image_changes();
        let wait = async {
            loop {
                if ready(&rx.borrow_and_update()) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(SEE_OWN_CHANGE, wait)
            .await
            .unwrap_or(false)
    }

    /// `__consumer_offsets` partitions whose groups are loaded here.
    pub fn coordinated_partitions(&self) -> std::collections::HashSet<i32> {
        self.coordinated.lock().clone()
    }

    pub(crate) fn set_coordinated(&self, p: i32, loaded: bool) {
        let mut c = self.coordinated.lock();
        if loaded {
            c.insert(p);
        } else {
            c.remove(&p);
        }
    }

    /// Stops the broker's own background work once its server has stopped: the fetchers end
    /// and every partition's producer state is written at its log end (so a restart need not
    /// rebuild it). The logs stay open: the node closes them last, after the metadata quorum,
    /// which writes to the same LogManager.
    pub fn shutdown(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        self.replicas.shutdown();
    }
}

/// What the broker registers with: its advertised listeners (an empty host as `localhost`),
/// rack and timings.
fn registration(
    config: &BrokerConfig,
    cluster_id: &str,
    advertised: &[crate::config::broker::Listener],
) -> lifecycle::Registration {
    let c = &config.cluster;
    lifecycle::Registration {
        node_id: config.node_id,
        cluster_id: cluster_id.to_string(),
        listeners: advertised
            .iter()
            .map(|l| {
                let host = if l.host.is_empty() {
                    "localhost".to_string()
                } else {
                    l.host.clone()
                };
                let protocol = c.security_protocols.protocol(&l.name).id();
                (l.name.clone(), host, l.port, protocol)
            })
            .collect(),
        rack: c.rack.clone(),
        heartbeat_interval: Duration::from_millis(c.broker_heartbeat_interval_ms),
        registration_timeout: Duration::from_millis(c.registration_timeout_ms),
    }
}

/// The classic group coordinator's settings (`group.*`, `offsets.*`).
fn group_config(config: &BrokerConfig) -> group::coordinator::GroupConfig {
    group::coordinator::GroupConfig {
        initial_rebalance_delay: Duration::from_millis(config.group_initial_rebalance_delay_ms),
        min_session_timeout_ms: config.group_min_session_timeout_ms,
        max_session_timeout_ms: config.group_max_session_timeout_ms,
        max_size: config.group_max_size,
        offset_metadata_max_bytes: config.offset_metadata_max_bytes,
        offsets_retention: Duration::from_secs(config.offsets_retention_minutes.saturating_mul(60)),
        consumer: config.consumer_groups.clone(),
    }
}

/// The metadata publisher: applies each new image to the broker, one at a time, off the
/// runtime's worker threads (creating logs fsyncs).
async fn publisher(broker: Arc<Broker>, mut images: watch::Receiver<Arc<MetadataImage>>) {
    loop {
        let img = images.borrow_and_update().clone();
        let b = broker.clone();
        match tokio::task::spawn_blocking(move || b.publish(img)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot apply a metadata change to the local logs")
            }
            Err(e) => tracing::error!(error = %e, "the metadata publisher failed"),
        }
        if images.changed().await.is_err() {
            return;
        }
    }
}

/// An answer now, or a future that yields it once the purgatory or a rebalance completes.
pub enum Outcome<T> {
    Now(T),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>),
}

impl<T: Send + 'static> Outcome<T> {
    /// What `f` makes of the answer, now or once it arrives.
    pub fn map<U>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Outcome<U> {
        match self {
            Outcome::Now(t) => Outcome::Now(f(t)),
            Outcome::Later(wait) => Outcome::Later(Box::pin(async move { f(wait.await) })),
        }
    }

    /// The answer, waiting for it if it is not there yet.
    pub async fn resolve(self) -> T {
        match self {
            Outcome::Now(t) => t,
            Outcome::Later(wait) => wait.await,
        }
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
