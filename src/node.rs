//! One evenkeel process: the roles `process.roles` names — the controller (a quorum voter
//! with the active-controller logic and its listener) and the broker — started in order, and
//! stopped in reverse with the broker's controlled shutdown first.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::broker::controller_channel::ControllerChannel;
use crate::broker::lifecycle::Lifecycle;
use crate::broker::server::Server;
use crate::broker::{open_log_dir, Broker, BrokerError, BrokerParts};
use crate::client::ClientSecurity;
use crate::config::broker::BrokerConfig;
use crate::config::cluster::Voter;
use crate::controller::apis::ControllerNode;
use crate::controller::listener::{ControllerListener, ControllerListenerSettings, ControllerSasl};
use crate::controller::quorum_controller::{ControllerSettings, QuorumController};
use crate::controller::raft::entries::DEFAULT_CONTROLLER_LISTENER;
use crate::controller::raft::observer::{Observer, ObserverConfig};
use crate::controller::raft::state_machine::SnapshotPolicy;
use crate::controller::raft::{Quorum, QuorumConfig};
use crate::controller::refusals::ListenerAuthorizer;
use crate::controller::replication::TopicDefaults;
use crate::metadata::image::MetadataImage;
use crate::storage::{KafkaUuid, LogManager};

/// Where this node's metadata comes from.
enum Metadata {
    Voter(Arc<Quorum>),
    Observer(Arc<Observer>),
}

impl Metadata {
    fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        match self {
            Metadata::Voter(q) => q.images(),
            Metadata::Observer(o) => o.images(),
        }
    }
    fn leader_changes(&self) -> watch::Receiver<Option<i32>> {
        match self {
            Metadata::Voter(q) => q.leader_changes(),
            Metadata::Observer(o) => o.leader_changes(),
        }
    }
    /// The voters' controller addresses as the metadata log names them.
    fn voter_lookup(&self) -> crate::broker::controller_channel::VoterLookup {
        match self {
            Metadata::Voter(q) => {
                let q = q.clone();
                Arc::new(move || q.voter_addresses())
            }
            Metadata::Observer(o) => {
                let o = o.clone();
                Arc::new(move || o.voter_addresses())
            }
        }
    }
    fn fatal(&self) -> Option<String> {
        match self {
            Metadata::Voter(q) => q.fatal(),
            Metadata::Observer(o) => o.cluster_mismatch(),
        }
    }
}

/// A running node.
pub struct Node {
    pub config: BrokerConfig,
    pub cluster_id: String,
    logs: Arc<LogManager>,
    metadata: Metadata,
    /// How this node connects to the controller listener (one TLS client for every use).
    controller_security: ClientSecurity,
    /// The controller and its listeners, the dialled one first.
    controller: Option<(Arc<ControllerNode>, Vec<ControllerListener>)>,
    broker: Option<(Arc<Broker>, Server)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn snapshot_policy(cfg: &BrokerConfig) -> SnapshotPolicy {
    SnapshotPolicy {
        max_bytes: cfg.cluster.snapshot_bytes,
        max_interval_ms: cfg.cluster.snapshot_interval_ms,
    }
}

fn controller_listener_name(cfg: &BrokerConfig) -> String {
    cfg.cluster
        .controller_listener_names
        .first()
        .cloned()
        .unwrap_or_else(|| DEFAULT_CONTROLLER_LISTENER.to_string())
}

/// How this node connects to the controller listener (as a voter to the other voters, as a
/// broker to the active controller): PLAINTEXT, or SSL with that listener's `ssl.*` settings
/// (its keystore presented as the client certificate; the files read now, so that a bad one
/// stops the start), with the node's SASL login (`sasl.mechanism.controller.protocol`) when the
/// listener is SASL.
fn controller_security(cfg: &BrokerConfig) -> Result<ClientSecurity, BrokerError> {
    let listener = controller_listener_name(cfg);
    let protocol = cfg.cluster.security_protocols.protocol(&listener);
    let login = cfg.auth.controller.as_ref();
    ClientSecurity::for_listener(protocol, cfg.ssl.get(&listener), login)
        .map_err(|source| BrokerError::ControllerListener { listener, source })
}

/// Whether callers on controller listener `name` are checked: with an authorizer configured
/// and the listener SSL or SASL, callers are known by their certificates or logins (Kafka's
/// ControllerApis). A PLAINTEXT controller listener knows no caller and is not checked: it must
/// stay private.
fn checks_callers(cfg: &BrokerConfig, name: &str) -> bool {
    let protocol = cfg.cluster.security_protocols.protocol(name);
    cfg.auth.authorizer.is_some() && (protocol.is_tls() || protocol.is_sasl())
}

/// The authorizer of the controller listeners that check their callers, if any does.
fn controller_authorizer(cfg: &BrokerConfig, quorum: &Quorum) -> Option<ListenerAuthorizer> {
    let settings = cfg.auth.authorizer.as_ref()?;
    let names = &cfg.cluster.controller_listener_names;
    names
        .iter()
        .any(|name| checks_callers(cfg, name))
        .then(|| ListenerAuthorizer::new(settings, quorum.images()))
}

/// The SASL side of controller listener `listener` when it is SASL_PLAINTEXT or SASL_SSL (an
/// error, not an open door, should its settings be missing).
fn controller_sasl(
    cfg: &BrokerConfig,
    listener: &str,
) -> Result<Option<ControllerSasl>, BrokerError> {
    if !cfg.cluster.security_protocols.protocol(listener).is_sasl() {
        return Ok(None);
    }
    let settings = cfg.auth.sasl.get(listener).ok_or_else(|| {
        BrokerError::Fatal(format!(
            "the controller listener {listener} uses SASL but has no SASL settings"
        ))
    })?;
    Ok(Some(ControllerSasl {
        settings: Arc::new(settings.clone()),
        reauth_ms: cfg.auth.connections_max_reauth_ms,
        max_receive_bytes: cfg.auth.sasl_server_max_receive_size,
        failed_delay: cfg.connections.failed_authentication_delay(),
    }))
}

/// The controller listeners to bind, the dialled one first: every listener named in
/// `controller.listener.names`, so that voters and brokers still dialling one (during a roll
/// that moves the controller listener) reach this node. A cluster of one may have none: its
/// broker reaches it on loopback.
fn controller_listener_settings(
    cfg: &BrokerConfig,
) -> Result<Vec<ControllerListenerSettings>, BrokerError> {
    let c = &cfg.cluster;
    let mut bound: Vec<(String, String, u16)> = c
        .controller_listeners
        .iter()
        .map(|l| (l.name.clone(), l.host.clone(), l.port))
        .collect();
    if bound.is_empty() {
        bound.push((controller_listener_name(cfg), "127.0.0.1".into(), 0));
    }
    bound
        .into_iter()
        .map(|(name, host, port)| {
            Ok(ControllerListenerSettings {
                tls: crate::broker::server::tls_server(cfg, &name)?,
                sasl: controller_sasl(cfg, &name)?,
                checks_callers: checks_callers(cfg, &name),
                max_request_bytes: cfg.socket_request_max_bytes,
                name,
                host,
                port,
            })
        })
        .collect()
}

/// The voters a new metadata log starts with, and their directory ids: a static quorum's from
/// `controller.quorum.voters`; a dynamic one's as `evenkeel format` was told (`--standalone`,
/// `--initial-controllers`, `--no-initial-controllers`: none, the node waits to be added), else
/// this node alone when its one bootstrap server is its own controller listener.
fn initial_quorum(
    config: &BrokerConfig,
    meta: &crate::storage::MetaProperties,
) -> Result<(Vec<Voter>, BTreeMap<i32, KafkaUuid>), BrokerError> {
    let c = &config.cluster;
    if !c.dynamic_quorum {
        return Ok((c.voters.clone(), BTreeMap::new()));
    }
    let formatted = crate::metadata::initial_voters::read(&config.log_dir)
        .map_err(|e| BrokerError::Fatal(e.to_string()))?;
    Ok(match formatted {
        Some(list) => (
            list.iter()
                .map(|v| Voter {
                    id: v.id,
                    host: v.host.clone(),
                    port: v.port,
                })
                .collect(),
            list.iter().map(|v| (v.id, v.directory_id)).collect(),
        ),
        None => (
            c.voters.clone(),
            c.voters
                .iter()
                .filter(|v| v.id == config.node_id)
                .map(|v| (v.id, meta.directory_id))
                .collect(),
        ),
    })
}

impl Node {
    /// Opens the log directory and starts every role; for a broker, returns once the
    /// controller has unfenced it. A node that cannot join (another cluster, a refused
    /// registration) stops with the reason.
    pub async fn start(config: BrokerConfig) -> Result<Node, BrokerError> {
        raise_open_files_limit();
        let (meta, logs) = open_log_dir(&config)?;
        let cluster_id = meta.cluster_id.clone();
        logs.start_background();
        let security = controller_security(&config)?;
        let mut node = Node {
            cluster_id: cluster_id.clone(),
            logs: logs.clone(),
            metadata: Self::open_metadata(&config, &meta, &logs, &security).await?,
            controller_security: security,
            config,
            controller: None,
            broker: None,
            tasks: Vec::new(),
        };
        if let Metadata::Voter(q) = &node.metadata {
            node.controller = Some(node.start_controller(q.clone()).await?);
        }
        if let Metadata::Observer(o) = &node.metadata {
            node.tasks.push(tokio::spawn(o.clone().run()));
        }
        if node.config.cluster.roles.broker {
            node.start_broker().await?;
        }
        Ok(node)
    }

    async fn open_metadata(
        config: &BrokerConfig,
        meta: &crate::storage::MetaProperties,
        logs: &LogManager,
        security: &ClientSecurity,
    ) -> Result<Metadata, BrokerError> {
        let c = &config.cluster;
        if c.roles.controller {
            let (voters, directories) = initial_quorum(config, meta)?;
            let q = Quorum::start(
                logs,
                QuorumConfig {
                    node_id: config.node_id,
                    cluster_id: meta.cluster_id.clone(),
                    voters,
                    listener: controller_listener_name(config),
                    security: security.clone(),
                    election_timeout_ms: c.election_timeout_ms,
                    snapshot: snapshot_policy(config),
                    segment_bytes: c.metadata_segment_bytes,
                    directories,
                    dynamic: c.dynamic_quorum,
                },
            )
            .await
            .map_err(|e| BrokerError::Quorum(e.to_string()))?;
            return Ok(Metadata::Voter(Arc::new(q)));
        }
        let controllers = c.quorum_contacts();
        let o = Observer::open(
            logs,
            ObserverConfig {
                node_id: config.node_id,
                cluster_id: meta.cluster_id.clone(),
                controllers,
                listener: controller_listener_name(config),
                security: security.clone(),
                segment_bytes: c.metadata_segment_bytes,
                snapshot: snapshot_policy(config),
                request_timeout: Duration::from_millis(c.request_timeout_ms.max(1000)),
            },
        )?;
        Ok(Metadata::Observer(o))
    }

    async fn start_controller(
        &self,
        quorum: Arc<Quorum>,
    ) -> Result<(Arc<ControllerNode>, Vec<ControllerListener>), BrokerError> {
        let cfg = &self.config;
        let settings = ControllerSettings {
            session_timeout: Duration::from_millis(cfg.cluster.broker_session_timeout_ms),
            auto_leader_rebalance: cfg.cluster.auto_leader_rebalance_enable,
            leader_imbalance_check_interval: Duration::from_secs(
                cfg.cluster.leader_imbalance_check_interval_seconds,
            ),
            topics: TopicDefaults {
                log: cfg.log.clone(),
                num_partitions: cfg.num_partitions,
                default_replication_factor: cfg.default_replication_factor,
            },
            bootstrap: crate::metadata::bootstrap::read(&cfg.log_dir)
                .map_err(|e| BrokerError::Fatal(e.to_string()))?,
        };
        let controller = QuorumController::start(quorum.clone(), settings);
        let authorizer = controller_authorizer(cfg, &quorum);
        let node = Arc::new(ControllerNode {
            quorum,
            controller,
            listener: controller_listener_name(cfg),
            // A dynamic quorum's voters are those of its membership.
            voters: match cfg.cluster.dynamic_quorum {
                true => Vec::new(),
                false => cfg.cluster.voters.clone(),
            },
            broker_props: cfg.raw.clone(),
            authorizer,
            bound: std::sync::OnceLock::new(),
        });
        let mut listeners = Vec::new();
        for s in controller_listener_settings(cfg)? {
            let addr = format!("{}:{}", s.host, s.port);
            let l = ControllerListener::start(node.clone(), s)
                .await
                .map_err(|source| BrokerError::Bind { addr, source })?;
            listeners.push(l);
        }
        if let Some(first) = listeners.first() {
            let _ = node.bound.set(first.addr);
        }
        Ok((node, listeners))
    }

    /// Where the broker finds the active controller: the voters' controller listeners (this
    /// node's own bound address for a cluster of one, unless that listener is SSL: then the
    /// voter's own address, whose host its certificate names).
    fn controller_addresses(&self) -> Vec<(i32, String)> {
        let c = &self.config.cluster;
        let tls = c
            .security_protocols
            .protocol(&controller_listener_name(&self.config))
            .is_tls();
        let named = c.voters.first().is_some_and(|v| !v.host.is_empty());
        if c.is_single_node() && !(tls && named) {
            if let Some(addr) = self.controller_addr() {
                return vec![(self.config.node_id, format!("127.0.0.1:{}", addr.port()))];
            }
        }
        c.quorum_contacts()
    }

    async fn start_broker(&mut self) -> Result<(), BrokerError> {
        let cfg = &self.config;
        let timeout = Duration::from_millis(cfg.cluster.request_timeout_ms.max(1000));
        let addrs = self.controller_addresses();
        let security = self.controller_security.clone();
        let forwarding = Arc::new(ControllerChannel::new(
            addrs.clone(),
            self.metadata.voter_lookup(),
            self.metadata.leader_changes(),
            timeout,
            security.clone(),
            4,
        ));
        let inter_broker = crate::broker::server::inter_broker_security(cfg)?;
        let bound = Server::bind(cfg).await?;
        let broker = Broker::start(BrokerParts {
            config: cfg.clone(),
            cluster_id: self.cluster_id.clone(),
            logs: self.logs.clone(),
            controller: forwarding,
            heartbeats: Arc::new(ControllerChannel::new(
                addrs,
                self.metadata.voter_lookup(),
                self.metadata.leader_changes(),
                timeout,
                security,
                1,
            )),
            controller_id: self.metadata.leader_changes(),
            images: self.metadata.images(),
            advertised: bound.advertised_listeners(),
            fetch_pool: bound.fetch_pool(),
            inter_broker,
        });
        let server = match bound.serve(broker.clone()).await {
            Ok(server) => server,
            Err(e) => {
                broker.shutdown();
                return Err(e);
            }
        };
        let lifecycle = broker.lifecycle().clone();
        let waited = self.wait_running(&lifecycle).await;
        // `/readyz` answers ready only now, as Kafka's broker state RUNNING: a pod whose
        // listener is up but that the controller has not yet registered and unfenced is not
        // ready (a Service must not send it clients, a roll must not move on from it).
        if waited.is_ok() {
            broker.set_ready();
        }
        self.broker = Some((broker, server));
        waited
    }

    /// Waits until the controller unfences the broker; a refusal or another cluster's
    /// quorum ends the wait with the reason.
    async fn wait_running(&self, lifecycle: &Lifecycle) -> Result<(), BrokerError> {
        let running = lifecycle.wait_running();
        tokio::pin!(running);
        loop {
            tokio::select! {
                r = &mut running => return r.map_err(BrokerError::Fatal),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if let Some(m) = self.metadata.fatal() {
                        return Err(BrokerError::Fatal(m));
                    }
                }
            }
        }
    }

    pub fn broker(&self) -> Option<&Arc<Broker>> {
        self.broker.as_ref().map(|(b, _)| b)
    }

    /// The client listeners' addresses, when the node is a broker.
    pub fn client_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.broker
            .as_ref()
            .map(|(_, s)| s.addrs.clone())
            .unwrap_or_default()
    }

    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.broker.as_ref().map(|(_, s)| s.metrics_addr)
    }

    pub fn controller_addr(&self) -> Option<std::net::SocketAddr> {
        self.controller.as_ref()?.1.first().map(|l| l.addr)
    }

    /// Why the node must stop, if something made it impossible to go on.
    pub fn fatal(&self) -> Option<String> {
        if let Some(m) = self.metadata.fatal() {
            return Some(m);
        }
        self.broker
            .as_ref()
            .and_then(|(b, _)| b.lifecycle().fatal().borrow().clone())
    }

    /// Stops the node: the broker moves its leaderships away (controlled shutdown), stops
    /// serving and flushes; then the controller and the quorum stop.
    pub async fn shutdown(self) -> Result<(), BrokerError> {
        if let Some((broker, server)) = self.broker {
            let wait = Duration::from_millis(self.config.cluster.broker_session_timeout_ms);
            broker.lifecycle().controlled_shutdown(wait).await;
            server.stop().await;
            broker.shutdown();
        }
        for t in &self.tasks {
            t.abort();
        }
        if let Some((_, listeners)) = self.controller {
            for listener in listeners {
                listener.stop().await;
            }
        }
        if let Metadata::Voter(q) = &self.metadata {
            q.shutdown().await;
        }
        self.logs.shutdown()?;
        Ok(())
    }
}

/// Raises the soft limit on open files to the hard limit, as the JVM does for Kafka at start
/// (`-XX:+MaxFDLimit`): every segment keeps its `.log` open, and a broker with many partitions
/// needs more than the usual soft limit of 1,024.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if !got || lim.rlim_cur >= lim.rlim_max {
        return;
    }
    let from = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        tracing::info!(from, to = lim.rlim_cur, "raised the open files limit");
    }
}
