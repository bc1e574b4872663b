//! Broker configuration (`server.properties` + `--override k=v`) with Kafka's names and defaults.
//! Unknown keys are reported for a warning; a bad value is an error naming its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::cluster::{self, ClusterConfig};
use super::{invalid as bad, prop as parse};
use super::{ConfigError, LogConfig};

/// One `NAME://host:port` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    pub log_dir: PathBuf,
    pub num_io_threads: usize,
    pub num_network_threads: usize,
    pub queued_max_requests: usize,
    /// `max.incremental.fetch.session.cache.slots`: fetch sessions (KIP-227) kept at once.
    pub max_incremental_fetch_session_cache_slots: usize,
    pub socket_request_max_bytes: usize,
    /// `quota.window.num` (11) samples of `quota.window.size.seconds` (1) over which client
    /// quotas measure rates.
    pub quota_window_num: usize,
    pub quota_window_size: std::time::Duration,
    pub auto_create_topics_enable: bool,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub log_retention_check_interval_ms: i64,
    pub log_flush_offset_checkpoint_interval_ms: i64,
    pub log_flush_start_offset_checkpoint_interval_ms: i64,
    /// Where `/metrics`, `/healthz` and `/readyz` listen (`evenkeel.metrics.address`).
    pub metrics_address: SocketAddr,
    /// Whether `evenkeel.metrics.address` was set; the default port falls back to a free one
    /// when it is taken (several nodes on one machine from Kafka's own server.properties).
    pub metrics_address_set: bool,
    /// `evenkeel.log.dir.lock.wait.ms` (30000): how long a starting broker waits for another
    /// process to release `log.dirs` (a force-deleted pod's container still stopping) before
    /// it gives up.
    pub log_dir_lock_wait_ms: u64,
    /// `group.initial.rebalance.delay.ms` (3000; `evenkeel dev` uses 0).
    pub group_initial_rebalance_delay_ms: u64,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    pub group_max_size: usize,
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.segment.bytes` (104857600): `segment.bytes` of `__consumer_offsets`.
    pub offsets_topic_segment_bytes: u64,
    pub offsets_retention_minutes: u64,
    pub offset_metadata_max_bytes: usize,
    pub log: LogConfig,
    /// Roles, the metadata quorum, racks and the controller's settings.
    pub cluster: ClusterConfig,
    /// Followers, ISR and replica selection.
    pub replication: super::replication::ReplicationConfig,
    /// The log cleaner (`log.cleaner.*`).
    pub cleaner: super::cleaner::CleanerConfig,
    /// The limits on client connections (`max.connections`, `max.connections.per.ip`,
    /// `connections.max.idle.ms`).
    pub connections: super::connections::ConnectionConfig,
    /// The consumer group protocol's keys (`group.consumer.*`, KIP-848).
    pub consumer_groups: super::consumer_groups::ConsumerGroupConfig,
    /// SASL mechanisms by listener, re-authentication and the authorizer.
    pub auth: super::auth::AuthConfig,
    /// The `ssl.*` settings of every TLS listener (SSL, SASL_SSL), by listener name.
    pub ssl: BTreeMap<String, super::ssl::SslConfig>,
    /// The properties as given, for DescribeConfigs.
    pub raw: BTreeMap<String, String>,
}

/// Keys this broker reads, plus Kafka keys that are accepted without effect on a single node.
const KNOWN: &[&str] = &[
    "node.id",
    "broker.id",
    "listeners",
    "advertised.listeners",
    "log.dirs",
    "log.dir",
    "num.io.threads",
    "num.network.threads",
    "queued.max.requests",
    "max.incremental.fetch.session.cache.slots",
    "socket.request.max.bytes",
    "quota.window.num",
    "quota.window.size.seconds",
    "auto.create.topics.enable",
    "num.partitions",
    "default.replication.factor",
    "log.retention.check.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms",
    "evenkeel.metrics.address",
    "evenkeel.log.dir.lock.wait.ms",
    "log.roll.hours",
    "log.retention.hours",
    "log.retention.minutes",
    "log.roll.jitter.hours",
    // Accepted for compatibility with Kafka's sample server.properties.
    "num.recovery.threads.per.data.dir",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes",
    "offsets.retention.minutes",
    "offset.metadata.max.bytes",
];

/// Parses `PLAINTEXT://host:port,NAME://:port`.
pub fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, rest) = item
            .split_once("://")
            .ok_or_else(|| bad(key, value, "expected NAME://host:port"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad(key, value, "expected NAME://host:port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad(key, value, "port is not a number from 0 to 65535"))?;
        out.push(Listener {
            name: name.to_string(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        });
    }
    if out.is_empty() {
        return Err(bad(key, value, "no listener given"));
    }
    Ok(out)
}

/// Where /metrics listens unless `evenkeel.metrics.address` says otherwise.
pub const DEFAULT_METRICS_ADDRESS: &str = "0.0.0.0:9404";

impl BrokerConfig {
    /// Builds the config; returns it with the keys that are not known, for a warning.
    pub fn from_props(
        props: &BTreeMap<String, String>,
    ) -> Result<(BrokerConfig, Vec<String>), ConfigError> {
        let log = LogConfig::from_broker_props(props)?;
        let node_id = node_id(props)?;
        // Listeners named in controller.listener.names belong to the quorum, not to clients.
        let all_listeners = cluster::all_listeners(props)?;
        let cluster = ClusterConfig::from_props(props, node_id, &all_listeners)?;
        let ssl = tls_listeners(props, &cluster, &all_listeners)?;
        let (listeners, advertised_listeners) = client_listeners(props, &cluster, all_listeners)?;
        let log_dir = log_dir(props)?;
        let (metrics_address, metrics_address_set) = metrics_address(props)?;
        let requests = RequestPath::from_props(props)?;
        let topics = TopicDefaults::from_props(props)?;
        let log_manager = LogManagerSettings::from_props(props)?;
        let groups = GroupSettings::from_props(props)?;
        let names: Vec<String> = listeners.iter().map(|l| l.name.clone()).collect();
        let inter_broker = cluster
            .roles
            .broker
            .then_some(cluster.inter_broker_listener_name.as_str());
        let protocols = &cluster.security_protocols;
        let mut auth = super::auth::AuthConfig::from_props(props, &names, protocols, inter_broker)?;
        if let Some(c) = cluster.controller_listener_names.first() {
            if protocols.protocol(c).is_sasl() {
                auth = auth.with_controller(props, c, cluster.roles.controller)?;
            }
        }
        if let Some(ssl) = inter_broker.and_then(|l| ssl.get(l)) {
            peer_truststore(
                ssl,
                "the inter-broker listener",
                "brokers check each other's",
            )?;
        }
        controller_client_auth(&cluster, &ssl, &auth)?;
        let c = BrokerConfig {
            node_id,
            listeners,
            advertised_listeners,
            log_dir,
            num_io_threads: requests.num_io_threads,
            num_network_threads: requests.num_network_threads,
            queued_max_requests: requests.queued_max_requests,
            max_incremental_fetch_session_cache_slots: requests.fetch_session_cache_slots,
            socket_request_max_bytes: requests.socket_request_max_bytes,
            quota_window_num: requests.quota_window_num,
            quota_window_size: requests.quota_window_size,
            auto_create_topics_enable: topics.auto_create_topics_enable,
            num_partitions: topics.num_partitions,
            default_replication_factor: topics.default_replication_factor,
            log_retention_check_interval_ms: log_manager.retention_check_interval_ms,
            log_flush_offset_checkpoint_interval_ms: log_manager.offset_checkpoint_interval_ms,
            log_flush_start_offset_checkpoint_interval_ms: log_manager
                .start_offset_checkpoint_interval_ms,
            metrics_address,
            metrics_address_set,
            log_dir_lock_wait_ms: log_manager.lock_wait_ms,
            group_initial_rebalance_delay_ms: groups.initial_rebalance_delay_ms,
            group_min_session_timeout_ms: groups.min_session_timeout_ms,
            group_max_session_timeout_ms: groups.max_session_timeout_ms,
            group_max_size: groups.max_size,
            offsets_topic_num_partitions: groups.offsets_topic_num_partitions,
            offsets_topic_segment_bytes: groups.offsets_topic_segment_bytes,
            offsets_retention_minutes: groups.offsets_retention_minutes,
            offset_metadata_max_bytes: groups.offset_metadata_max_bytes,
            log,
            cluster,
            replication: super::replication::ReplicationConfig::from_props(props)?,
            cleaner: super::cleaner::CleanerConfig::from_props(props)?,
            connections: super::connections::ConnectionConfig::from_props(props)?,
            consumer_groups: super::consumer_groups::ConsumerGroupConfig::from_props(props)?,
            auth,
            ssl,
            raw: props.clone(),
        };
        Ok((c, unknown_keys(props)))
    }
}

/// The `ssl.*` settings of each listener that `listener.security.protocol.map` makes TLS, and
/// of the controller listener this node connects to when that one is SSL (a broker-only node
/// has none of its own, but presents its keystore to the controllers and checks theirs).
fn tls_listeners(
    props: &BTreeMap<String, String>,
    cluster: &ClusterConfig,
    listeners: &[Listener],
) -> Result<BTreeMap<String, super::ssl::SslConfig>, ConfigError> {
    let protocols = &cluster.security_protocols;
    let mut names: Vec<&str> = listeners
        .iter()
        .map(|l| l.name.as_str())
        .filter(|n| protocols.protocol(n).is_tls())
        .collect();
    let controller = cluster.controller_listener_names.first();
    if let Some(c) = controller.filter(|c| protocols.protocol(c).is_tls()) {
        if !names.contains(&c.as_str()) {
            names.push(c);
        }
    }
    let ssl = names
        .into_iter()
        .map(|n| Ok((n.to_string(), super::ssl::SslConfig::from_props(props, n)?)))
        .collect::<Result<BTreeMap<_, _>, ConfigError>>()?;
    if let Some(c) = controller.and_then(|c| ssl.get(c)) {
        peer_truststore(
            c,
            "the controller listener",
            "voters and brokers check the controllers'",
        )?;
    }
    Ok(ssl)
}

/// Under an authorizer, an SSL controller listener must ask for client certificates: without
/// one every voter and broker is `User:ANONYMOUS`, refused unless that is a super user, and the
/// quorum could never form.
fn controller_client_auth(
    cluster: &ClusterConfig,
    ssl: &BTreeMap<String, super::ssl::SslConfig>,
    auth: &super::auth::AuthConfig,
) -> Result<(), ConfigError> {
    let Some(authorizer) = &auth.authorizer else {
        return Ok(());
    };
    let anonymous = authorizer.super_users.iter().any(|u| u == "User:ANONYMOUS");
    // Every controller listener a node serves, not only the dialled one: no TLS, or SASL_SSL
    // (the callers are known by their logins), needs nothing.
    let unknown_callers = cluster
        .controller_listener_names
        .iter()
        .filter(|c| !cluster.security_protocols.protocol(c).is_sasl())
        .filter_map(|c| ssl.get(c))
        .find(|c| c.client_auth != super::ssl::ClientAuth::Required && !anonymous);
    let Some(c) = unknown_callers else {
        return Ok(());
    };
    let key = format!(
        "listener.name.{}.ssl.client.auth",
        c.listener.to_lowercase()
    );
    let reason = format!(
        "the controller listener {} is SSL under authorizer.class.name: its callers (the voters \
         and brokers) must show certificates (required), or each is User:ANONYMOUS and refused",
        c.listener
    );
    Err(bad(&key, "", reason))
}

/// A TLS listener this node connects to as well as serves (the inter-broker or the controller
/// listener) needs a truststore: the CAs it checks the other side's certificate against
/// (evenkeel reads no system trust store).
fn peer_truststore(ssl: &super::ssl::SslConfig, role: &str, who: &str) -> Result<(), ConfigError> {
    if ssl.truststore.is_some() {
        return Ok(());
    }
    let key = format!(
        "listener.name.{}.ssl.truststore.location",
        ssl.listener.to_lowercase()
    );
    let reason = format!(
        "{role} {} uses TLS: {who} certificates against its truststore \
         (ssl.truststore.location or ssl.truststore.certificates)",
        ssl.listener
    );
    Err(bad(&key, "", reason))
}

/// The keys no part of the config reads, for a warning.
fn unknown_keys(props: &BTreeMap<String, String>) -> Vec<String> {
    let topic_synonyms: Vec<&str> = super::TOPIC_CONFIG_SYNONYMS
        .iter()
        .map(|(_, b)| *b)
        .collect();
    props
        .keys()
        .filter(|k| {
            let k = k.as_str();
            !KNOWN.contains(&k)
                && !cluster::KEYS.contains(&k)
                && !super::replication::KEYS.contains(&k)
                && !super::cleaner::KEYS.contains(&k)
                && !super::connections::KEYS.contains(&k)
                && !super::consumer_groups::KEYS.contains(&k)
                && !super::connections::is_listener_key(k)
                && !super::auth::is_auth_key(k)
                && !super::ssl::is_known(k)
                && !topic_synonyms.contains(&k)
        })
        .cloned()
        .collect()
}

/// `node.id` (or the older `broker.id`): required, at least 0.
fn node_id(props: &BTreeMap<String, String>) -> Result<i32, ConfigError> {
    match props.get("node.id").or_else(|| props.get("broker.id")) {
        Some(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("node.id", v, "must be a non-negative integer")),
        None => Err(ConfigError::InvalidValue {
            key: "node.id".into(),
            value: String::new(),
            reason: "is required".into(),
        }),
    }
}

/// `listeners` and `advertised.listeners` without the controller's listeners; a broker needs
/// one left, and one named `inter.broker.listener.name`.
fn client_listeners(
    props: &BTreeMap<String, String>,
    cluster: &ClusterConfig,
    all_listeners: Vec<Listener>,
) -> Result<(Vec<Listener>, Vec<Listener>), ConfigError> {
    let for_clients = |ls: Vec<Listener>| -> Vec<Listener> {
        ls.into_iter()
            .filter(|l| !cluster.controller_listener_names.contains(&l.name))
            .collect()
    };
    let listeners = for_clients(all_listeners);
    if listeners.is_empty() && cluster.roles.broker {
        return Err(bad(
            "listeners",
            props.get("listeners").map(String::as_str).unwrap_or(""),
            "no listener is left for clients after controller.listener.names",
        ));
    }
    let advertised = match props.get("advertised.listeners") {
        Some(v) => for_clients(parse_listeners("advertised.listeners", v)?),
        None => listeners.clone(),
    };
    if cluster.roles.broker
        && !listeners
            .iter()
            .any(|l| l.name == cluster.inter_broker_listener_name)
    {
        return Err(bad(
            "inter.broker.listener.name",
            &cluster.inter_broker_listener_name,
            "names no listener in listeners",
        ));
    }
    Ok((listeners, advertised))
}

/// The first of `log.dirs` (or `log.dir`), `/tmp/kraft-combined-logs` when neither is set.
fn log_dir(props: &BTreeMap<String, String>) -> Result<PathBuf, ConfigError> {
    let log_dir = props
        .get("log.dirs")
        .or_else(|| props.get("log.dir"))
        .map(|v| v.split(',').next().unwrap_or("").trim().to_string())
        .unwrap_or_else(|| "/tmp/kraft-combined-logs".into());
    if log_dir.is_empty() {
        return Err(bad("log.dirs", "", "must name a directory"));
    }
    Ok(PathBuf::from(log_dir))
}

/// `evenkeel.metrics.address`, and whether it was set.
fn metrics_address(props: &BTreeMap<String, String>) -> Result<(SocketAddr, bool), ConfigError> {
    let set = props.contains_key("evenkeel.metrics.address");
    let metrics = props
        .get("evenkeel.metrics.address")
        .map(String::as_str)
        .unwrap_or(DEFAULT_METRICS_ADDRESS);
    let address = metrics
        .parse()
        .map_err(|_| bad("evenkeel.metrics.address", metrics, "expected host:port"))?;
    Ok((address, set))
}

/// The request path's keys: threads, the request queue, fetch sessions, the frame limit, the
/// client quotas' windows.
struct RequestPath {
    num_io_threads: usize,
    num_network_threads: usize,
    queued_max_requests: usize,
    fetch_session_cache_slots: usize,
    socket_request_max_bytes: usize,
    quota_window_num: usize,
    quota_window_size: std::time::Duration,
}

impl RequestPath {
    fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Ok(RequestPath {
            num_io_threads: parse(props, "num.io.threads", 8usize)?.max(1),
            num_network_threads: parse(props, "num.network.threads", 3usize)?.max(1),
            queued_max_requests: parse(props, "queued.max.requests", 500usize)?.max(1),
            fetch_session_cache_slots: parse(
                props,
                "max.incremental.fetch.session.cache.slots",
                1000usize,
            )?,
            socket_request_max_bytes: parse(props, "socket.request.max.bytes", 104_857_600usize)?,
            quota_window_num: at_least_one(props, "quota.window.num", 11)?,
            quota_window_size: std::time::Duration::from_secs(at_least_one(
                props,
                "quota.window.size.seconds",
                1,
            )? as u64),
        })
    }
}

/// A count that Kafka's ConfigDef bounds with `atLeast(1)`.
fn at_least_one(
    props: &BTreeMap<String, String>,
    key: &str,
    default: usize,
) -> Result<usize, ConfigError> {
    let v = parse(props, key, default)?;
    if v == 0 {
        return Err(bad(key, "0", "must be at least 1"));
    }
    Ok(v)
}

/// What a topic created without them gets: auto-creation, partitions, replication factor.
struct TopicDefaults {
    auto_create_topics_enable: bool,
    num_partitions: i32,
    default_replication_factor: i16,
}

impl TopicDefaults {
    fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let auto_create_topics_enable = parse(props, "auto.create.topics.enable", true)?;
        let num_partitions = parse(props, "num.partitions", 1i32)?;
        if num_partitions < 1 {
            return Err(bad(
                "num.partitions",
                &num_partitions.to_string(),
                "must be at least 1",
            ));
        }
        Ok(TopicDefaults {
            auto_create_topics_enable,
            num_partitions,
            default_replication_factor: parse(props, "default.replication.factor", 1i16)?,
        })
    }
}

/// The log directory's lock wait and its background tasks' intervals.
struct LogManagerSettings {
    lock_wait_ms: u64,
    retention_check_interval_ms: i64,
    offset_checkpoint_interval_ms: i64,
    start_offset_checkpoint_interval_ms: i64,
}

impl LogManagerSettings {
    fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Ok(LogManagerSettings {
            lock_wait_ms: parse(props, "evenkeel.log.dir.lock.wait.ms", 30_000u64)?,
            retention_check_interval_ms: parse(
                props,
                "log.retention.check.interval.ms",
                300_000i64,
            )?,
            offset_checkpoint_interval_ms: parse(
                props,
                "log.flush.offset.checkpoint.interval.ms",
                60_000i64,
            )?,
            start_offset_checkpoint_interval_ms: parse(
                props,
                "log.flush.start.offset.checkpoint.interval.ms",
                60_000i64,
            )?,
        })
    }
}

/// The group coordinator's keys and `__consumer_offsets`'.
struct GroupSettings {
    initial_rebalance_delay_ms: u64,
    min_session_timeout_ms: i32,
    max_session_timeout_ms: i32,
    max_size: usize,
    offsets_topic_num_partitions: i32,
    offsets_topic_segment_bytes: u64,
    offsets_retention_minutes: u64,
    offset_metadata_max_bytes: usize,
}

impl GroupSettings {
    fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Ok(GroupSettings {
            initial_rebalance_delay_ms: parse(props, "group.initial.rebalance.delay.ms", 3000u64)?,
            min_session_timeout_ms: parse(props, "group.min.session.timeout.ms", 6000i32)?,
            max_session_timeout_ms: parse(props, "group.max.session.timeout.ms", 1_800_000i32)?,
            max_size: parse(props, "group.max.size", i32::MAX as usize)?,
            offsets_topic_num_partitions: parse(props, "offsets.topic.num.partitions", 50i32)?
                .max(1),
            offsets_topic_segment_bytes: parse(
                props,
                "offsets.topic.segment.bytes",
                104_857_600u64,
            )?
            .max(1),
            offsets_retention_minutes: parse(props, "offsets.retention.minutes", 10_080u64)?,
            offset_metadata_max_bytes: parse(props, "offset.metadata.max.bytes", 4096usize)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_properties;

    #[test]
    fn a_kafka_sample_server_properties_parses() {
        let p = parse_properties(
            "process.roles=broker,controller\nnode.id=1\nlisteners=PLAINTEXT://:9092,CONTROLLER://:9093\n\
             controller.listener.names=CONTROLLER\n\
             advertised.listeners=PLAINTEXT://localhost:9092\nlog.dirs=/tmp/kraft-combined-logs\n\
             num.partitions=3\nlog.segment.bytes=1073741824\nsomething.else=1\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert_eq!(c.node_id, 1);
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.cluster.controller_listeners[0].port, 9093);
        assert_eq!(c.advertised_listeners[0].host, "localhost");
        assert_eq!(c.num_partitions, 3);
        assert_eq!(c.queued_max_requests, 500);
        assert_eq!(c.max_incremental_fetch_session_cache_slots, 1000);
        assert_eq!(c.socket_request_max_bytes, 104_857_600);
        assert_eq!(c.num_io_threads, 8);
        assert_eq!(c.group_max_size, i32::MAX as usize);
        assert_eq!(c.offsets_topic_num_partitions, 50);
        assert_eq!(c.log_flush_start_offset_checkpoint_interval_ms, 60_000);
        assert_eq!(c.connections.connections_max_idle_ms, 600_000);
        assert_eq!(unknown, vec!["something.else".to_string()]);
    }

    /// config/server.properties as the Kafka 4.1 distribution ships it (comments left out),
    /// started after `kafka-storage format --standalone`.
    const KAFKA_QUICKSTART: &str = "process.roles=broker,controller\nnode.id=1\n\
        controller.quorum.bootstrap.servers=localhost:9093\n\
        listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ninter.broker.listener.name=PLAINTEXT\n\
        advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n\
        controller.listener.names=CONTROLLER\n\
        listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
        SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n\
        num.network.threads=3\nnum.io.threads=8\nsocket.send.buffer.bytes=102400\n\
        socket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\n\
        log.dirs=/tmp/kraft-combined-logs\nnum.partitions=1\nnum.recovery.threads.per.data.dir=1\n\
        offsets.topic.replication.factor=1\nshare.coordinator.state.topic.replication.factor=1\n\
        share.coordinator.state.topic.min.isr=1\ntransaction.state.log.replication.factor=1\n\
        transaction.state.log.min.isr=1\nlog.retention.hours=168\nlog.segment.bytes=1073741824\n\
        log.retention.check.interval.ms=300000\n";

    #[test]
    fn kafkas_quickstart_server_properties_start_a_standalone_controller() {
        let (c, _) = BrokerConfig::from_props(&parse_properties(KAFKA_QUICKSTART)).unwrap();
        // The one bootstrap server is this node's own controller listener: it is the only
        // voter, at that address.
        assert_eq!(c.cluster.voters.len(), 1);
        assert_eq!(c.cluster.voters[0].id, 1);
        assert_eq!(c.cluster.voters[0].address(), "localhost:9093");
        assert!(
            c.cluster.dynamic_quorum,
            "kraft.version 1: its voters can change"
        );
        assert_eq!(
            c.advertised_listeners.len(),
            1,
            "the controller is not for clients"
        );
        assert_eq!(c.cluster.offsets_topic_replication_factor, 1);
    }

    #[test]
    fn a_controller_bootstrapping_from_another_controller_waits_to_be_added() {
        let text = KAFKA_QUICKSTART.replace(
            "controller.quorum.bootstrap.servers=localhost:9093",
            "controller.quorum.bootstrap.servers=other:9093",
        );
        let text = text.replace("CONTROLLER://:9093", "CONTROLLER://:9193");
        let (c, _) = BrokerConfig::from_props(&parse_properties(&text)).unwrap();
        assert!(c.cluster.roles.controller);
        assert!(c.cluster.dynamic_quorum);
        assert!(c.cluster.voters.is_empty(), "not a voter until added");
        // A static quorum still names every controller.
        let text = KAFKA_QUICKSTART.replace(
            "controller.quorum.bootstrap.servers=localhost:9093",
            "controller.quorum.voters=2@other:9093",
        );
        let err = BrokerConfig::from_props(&parse_properties(&text))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not one of the voters"), "{err}");
    }

    #[test]
    fn controller_listeners_are_not_served_to_clients() {
        let p = parse_properties(
            "node.id=1\nlisteners=PLAINTEXT://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n",
        );
        let (c, _) = BrokerConfig::from_props(&p).unwrap();
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.listeners[0].name, "PLAINTEXT");
    }

    #[test]
    fn ssl_listeners_get_their_ssl_settings_and_ssl_keys_are_known() {
        let p = parse_properties(
            "node.id=1\nlisteners=PLAINTEXT://:9092,SSL://:9093\n\
             inter.broker.listener.name=PLAINTEXT\n\
             ssl.keystore.type=PEM\nssl.keystore.location=/tls/server.pem\n\
             listener.name.ssl.ssl.client.auth=requested\n\
             ssl.truststore.type=PEM\nssl.truststore.location=/tls/ca.pem\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.ssl.keys().collect::<Vec<_>>(), vec!["SSL"]);
        assert_eq!(
            c.ssl["SSL"].client_auth,
            crate::config::ssl::ClientAuth::Requested
        );
        let mut bad = p.clone();
        bad.insert("ssl.keystore.type".into(), "JKS".into());
        let e = BrokerConfig::from_props(&bad).unwrap_err().to_string();
        assert!(e.contains("configuration ssl.keystore.type"), "{e}");
    }

    #[test]
    fn a_sasl_ssl_inter_broker_listener_reads_the_brokers_login_and_needs_a_truststore() {
        let p = parse_properties(
            "node.id=1\nlisteners=INTERNAL://:9092,EXTERNAL://:9093\n\
             listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:PLAINTEXT\n\
             inter.broker.listener.name=INTERNAL\n\
             ssl.keystore.type=PEM\nssl.keystore.location=/tls/server.pem\n\
             ssl.truststore.type=PEM\nssl.truststore.location=/tls/ca.pem\n\
             listener.name.internal.ssl.endpoint.identification.algorithm=\n\
             sasl.enabled.mechanisms=SCRAM-SHA-512\n\
             sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512\n\
             listener.name.internal.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"admin-secret\";\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.auth.inter_broker.unwrap().username, "admin");
        assert!(!c.ssl["INTERNAL"].endpoint_identification);
        let mut bad = p.clone();
        bad.remove("ssl.truststore.location");
        let e = BrokerConfig::from_props(&bad).unwrap_err().to_string();
        assert!(
            e.contains("configuration listener.name.internal.ssl.truststore.location:"),
            "{e}"
        );
        let mut bad = p.clone();
        bad.remove("sasl.mechanism.inter.broker.protocol");
        let e = BrokerConfig::from_props(&bad).unwrap_err().to_string();
        assert!(
            e.contains("configuration sasl.mechanism.inter.broker.protocol:"),
            "{e}"
        );
    }

    #[test]
    fn a_sasl_ssl_controller_listener_needs_the_nodes_login_and_no_client_certificates() {
        let p = parse_properties(
            "node.id=1\nprocess.roles=broker,controller\ncontroller.quorum.voters=1@c1:9093\n\
             listeners=INTERNAL://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=INTERNAL:PLAINTEXT,CONTROLLER:SASL_SSL\n\
             inter.broker.listener.name=INTERNAL\n\
             ssl.keystore.type=PEM\nssl.keystore.location=/tls/server.pem\n\
             ssl.truststore.type=PEM\nssl.truststore.location=/tls/ca.pem\n\
             authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             listener.name.controller.sasl.enabled.mechanisms=PLAIN\n\
             sasl.mechanism.controller.protocol=PLAIN\n\
             listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"quorum\" password=\"q\" user_quorum=\"q\";\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.auth.controller.unwrap().username, "quorum");
        assert_eq!(c.auth.sasl["CONTROLLER"].mechanisms, ["PLAIN"]);
        assert!(c.ssl.contains_key("CONTROLLER"));
        let mut bad = p.clone();
        bad.remove("sasl.mechanism.controller.protocol");
        let e = BrokerConfig::from_props(&bad).unwrap_err().to_string();
        assert!(
            e.contains("configuration sasl.mechanism.controller.protocol:")
                && e.contains("the controller listener CONTROLLER uses SASL"),
            "{e}"
        );
    }

    #[test]
    fn a_broker_only_node_reads_the_ssl_controller_listeners_settings_and_needs_a_truststore() {
        let p = parse_properties(
            "node.id=4\nprocess.roles=broker\nlisteners=INTERNAL://:9092\n\
             controller.quorum.voters=1@c1:9093\ncontroller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=INTERNAL:PLAINTEXT,CONTROLLER:SSL\n\
             listener.name.controller.ssl.keystore.type=PEM\n\
             listener.name.controller.ssl.keystore.location=/tls/node.pem\n\
             listener.name.controller.ssl.truststore.type=PEM\n\
             listener.name.controller.ssl.truststore.location=/tls/ca.pem\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.ssl.keys().collect::<Vec<_>>(), vec!["CONTROLLER"]);
        let mut bad = p.clone();
        bad.remove("listener.name.controller.ssl.truststore.location");
        let e = BrokerConfig::from_props(&bad).unwrap_err().to_string();
        assert!(
            e.contains("configuration listener.name.controller.ssl.truststore.location:")
                && e.contains("the controller listener CONTROLLER uses TLS"),
            "{e}"
        );
        let mut plain = p.clone();
        plain.insert(
            "listener.security.protocol.map".into(),
            "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
        );
        let (c, _) = BrokerConfig::from_props(&plain).unwrap();
        assert!(c.ssl.is_empty());
        // Under an authorizer, the callers must show certificates.
        let mut authorized = p.clone();
        authorized.insert(
            "authorizer.class.name".into(),
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        );
        let e = BrokerConfig::from_props(&authorized)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("configuration listener.name.controller.ssl.client.auth:"),
            "{e}"
        );
        authorized.insert(
            "listener.name.controller.ssl.client.auth".into(),
            "required".into(),
        );
        BrokerConfig::from_props(&authorized).unwrap();
        // So must a second controller listener's, on a controller (it serves every one named).
        let mut spare = authorized.clone();
        spare.insert("node.id".into(), "1".into());
        spare.insert("process.roles".into(), "controller".into());
        spare.insert(
            "listeners".into(),
            "CONTROLLER://:9093,SPARE://:9094".into(),
        );
        spare.insert(
            "controller.listener.names".into(),
            "CONTROLLER,SPARE".into(),
        );
        spare.insert(
            "listener.security.protocol.map".into(),
            "INTERNAL:PLAINTEXT,CONTROLLER:SSL,SPARE:SSL".into(),
        );
        for (k, v) in &authorized {
            if let Some(key) = k.strip_prefix("listener.name.controller.ssl.") {
                if key != "client.auth" {
                    spare.insert(format!("listener.name.spare.ssl.{key}"), v.clone());
                }
            }
        }
        let e = BrokerConfig::from_props(&spare).unwrap_err().to_string();
        assert!(
            e.contains("configuration listener.name.spare.ssl.client.auth:"),
            "{e}"
        );
    }

    #[test]
    fn the_connection_limits_are_known_keys() {
        let p = parse_properties(
            "node.id=1\nmax.connections=100\nmax.connections.per.ip=10\n\
             max.connections.per.ip.overrides=127.0.0.1:20\nconnections.max.idle.ms=60000\n",
        );
        let (c, unknown) = BrokerConfig::from_props(&p).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(c.connections.max_connections, 100);
        assert_eq!(c.connections.max_connections_per_ip, 10);
        assert_eq!(
            c.connections.max_connections_per_ip_overrides,
            vec![("127.0.0.1".to_string(), 20)]
        );
        assert_eq!(c.connections.connections_max_idle_ms, 60_000);
    }

    #[test]
    fn bad_values_name_their_key() {
        let p = parse_properties("node.id=1\nnum.io.threads=many\n");
        let e = BrokerConfig::from_props(&p).unwrap_err().to_string();
        assert!(e.contains("num.io.threads"), "{e}");
        let p = parse_properties("listeners=PLAINTEXT://:99999\nnode.id=1\n");
        assert!(BrokerConfig::from_props(&p)
            .unwrap_err()
            .to_string()
            .contains("listeners"));
        let p = parse_properties("listeners=PLAINTEXT://:9092\n");
        assert!(BrokerConfig::from_props(&p)
            .unwrap_err()
            .to_string()
            .contains("node.id"));
        let p = parse_properties("node.id=1\nnum.partitions=0\n");
        let e = BrokerConfig::from_props(&p).unwrap_err().to_string();
        assert!(
            e.contains("num.partitions") && e.contains("at least 1"),
            "{e}"
        );
        let p = parse_properties("node.id=1\nmax.connections.per.ip=-1\n");
        let e = BrokerConfig::from_props(&p).unwrap_err().to_string();
        assert!(e.contains("max.connections.per.ip"), "{e}");
    }
}
