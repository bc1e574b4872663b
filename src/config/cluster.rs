//! The KRaft keys of `server.properties`: which roles a node plays, who votes in the metadata
//! quorum and where, the controller listener, racks, and the controller's timers and policies.

use std::collections::BTreeMap;

use super::broker::{parse_listeners, Listener};
use super::security::SecurityProtocolMap;
use super::{invalid as bad, prop as number};
use super::{parse_bool, ConfigError};

/// `process.roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub broker: bool,
    pub controller: bool,
}

impl Roles {
    pub fn combined() -> Roles {
        Roles {
            broker: true,
            controller: true,
        }
    }
}

impl std::fmt::Display for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.broker, self.controller) {
            (true, true) => f.write_str("broker,controller"),
            (true, false) => f.write_str("broker"),
            (false, true) => f.write_str("controller"),
            (false, false) => f.write_str(""),
        }
    }
}

/// One entry of `controller.quorum.voters`: `id@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

impl Voter {
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Everything a node needs to take part in a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub roles: Roles,
    /// The metadata quorum's voters. A node without `controller.quorum.voters` and without
    /// `process.roles` is a cluster of one: it alone votes, and needs no controller listener.
    pub voters: Vec<Voter>,
    /// `controller.quorum.bootstrap.servers`: where a broker-only node may find the quorum when
    /// the voters are not listed.
    pub bootstrap_servers: Vec<String>,
    /// A dynamic quorum (KIP-853, `kraft.version` 1): no `controller.quorum.voters`, the voters
    /// found through the bootstrap servers and changed with AddRaftVoter/RemoveRaftVoter. A
    /// controller of a dynamic quorum that is not the standalone first voter joins as a
    /// non-voter and waits to be added.
    pub dynamic_quorum: bool,
    /// The listeners named in `controller.listener.names` that this node binds (controllers),
    /// in that key's order: voters and brokers dial the first, every one is served (so the
    /// controller listener can be moved, as in Kafka, by listing a second one).
    pub controller_listeners: Vec<Listener>,
    pub controller_listener_names: Vec<String>,
    /// `inter.broker.listener.name`: the listener other brokers reach this one on.
    pub inter_broker_listener_name: String,
    /// `listener.security.protocol.map`.
    pub security_protocols: SecurityProtocolMap,
    /// `broker.rack`.
    pub rack: Option<String>,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    pub election_timeout_ms: u64,
    pub fetch_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    pub leader_imbalance_per_broker_percentage: u64,
    pub offsets_topic_replication_factor: i16,
    /// `metadata.log.max.record.bytes.between.snapshots` (20 MiB).
    pub snapshot_bytes: u64,
    /// `metadata.log.max.snapshot.interval.ms` (1 hour; 0 disables the time trigger).
    pub snapshot_interval_ms: u64,
    /// `metadata.log.segment.bytes` (1 GiB).
    pub metadata_segment_bytes: u64,
    /// `initial.broker.registration.timeout.ms` (60 s): how long a broker tries to register.
    pub registration_timeout_ms: u64,
}

/// The keys read here, for the broker's list of known keys.
pub const KEYS: &[&str] = &[
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "broker.rack",
    "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.retry.backoff.ms",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "offsets.topic.replication.factor",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms",
    "metadata.log.segment.bytes",
    "metadata.log.segment.min.bytes",
    "metadata.log.dir",
    "metadata.max.idle.interval.ms",
    "metadata.log.max.retention.bytes",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
    "initial.broker.registration.timeout.ms",
];

fn flag(props: &BTreeMap<String, String>, key: &str, default: bool) -> Result<bool, ConfigError> {
    props.get(key).map_or(Ok(default), |v| parse_bool(key, v))
}

fn list(props: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    props
        .get(key)
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Parses `1@host:port,2@host:port`.
pub fn parse_voters(value: &str) -> Result<Vec<Voter>, ConfigError> {
    let key = "controller.quorum.voters";
    let mut out: Vec<Voter> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| bad(key, value, format!("{item:?} is not id@host:port")))?;
        let id: i32 = id
            .trim()
            .parse()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad(key, value, format!("{id:?} is not a node id")))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| bad(key, value, format!("{item:?} is not id@host:port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad(key, value, format!("{port:?} is not a port")))?;
        if out.iter().any(|v| v.id == id) {
            return Err(bad(key, value, format!("node {id} is listed twice")));
        }
        out.push(Voter {
            id,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        });
    }
    Ok(out)
}

fn parse_roles(value: &str) -> Result<Roles, ConfigError> {
    let mut roles = Roles {
        broker: false,
        controller: false,
    };
    for r in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match r {
            "broker" => roles.broker = true,
            "controller" => roles.controller = true,
            _ => {
                return Err(bad(
                    "process.roles",
                    value,
                    format!("unknown role {r:?}; the roles are broker and controller"),
                ))
            }
        }
    }
    if !roles.broker && !roles.controller {
        return Err(bad(
            "process.roles",
            value,
            "must name broker, controller or both",
        ));
    }
    Ok(roles)
}

/// Who this node is in the metadata quorum, from the KRaft keys.
struct Quorum {
    roles: Roles,
    voters: Vec<Voter>,
    bootstrap_servers: Vec<String>,
    dynamic: bool,
    controller_listeners: Vec<Listener>,
    controller_listener_names: Vec<String>,
}

impl Quorum {
    fn from_props(
        props: &BTreeMap<String, String>,
        node_id: i32,
        all_listeners: &[Listener],
    ) -> Result<Quorum, ConfigError> {
        let mut voters = match props.get("controller.quorum.voters") {
            Some(v) => parse_voters(v)?,
            None => Vec::new(),
        };
        let bootstrap_servers = list(props, "controller.quorum.bootstrap.servers");
        let controller_listener_names = list(props, "controller.listener.names");
        let roles = match props.get("process.roles") {
            Some(v) => parse_roles(v)?,
            // Without process.roles: a listed voter runs both roles, anyone else is a broker;
            // with no quorum configured at all, the node is a cluster of one.
            None if voters.is_empty() && bootstrap_servers.is_empty() => Roles::combined(),
            None if voters.iter().any(|v| v.id == node_id) => Roles::combined(),
            None => Roles {
                broker: true,
                controller: false,
            },
        };
        // In the order of `controller.listener.names`: the first is the one dialled.
        let controller_listeners: Vec<Listener> = controller_listener_names
            .iter()
            .filter_map(|name| all_listeners.iter().find(|l| &l.name == name))
            .cloned()
            .collect();
        if roles.controller && voters.is_empty() {
            voters =
                standalone_bootstrap_voter(node_id, &bootstrap_servers, &controller_listeners)?;
        }
        let standalone = voters.is_empty() && bootstrap_servers.is_empty();
        let dynamic =
            !props.contains_key("controller.quorum.voters") && !bootstrap_servers.is_empty();
        check_membership(props, node_id, &roles, &voters, standalone, dynamic)?;
        if roles.controller && !standalone && controller_listeners.is_empty() {
            return Err(bad(
                "controller.listener.names",
                props
                    .get("controller.listener.names")
                    .map(String::as_str)
                    .unwrap_or(""),
                "a controller needs one of listeners named here (e.g. CONTROLLER://:9093)",
            ));
        }
        if standalone {
            // A cluster of one votes for itself; its address is never dialled.
            voters.push(Voter {
                id: node_id,
                host: "localhost".into(),
                port: controller_listeners.first().map_or(0, |l| l.port),
            });
        }
        Ok(Quorum {
            roles,
            voters,
            bootstrap_servers,
            dynamic,
            controller_listeners,
            controller_listener_names,
        })
    }
}

/// Kafka's quickstart: one controller that finds itself through the bootstrap servers
/// (formatted with `--standalone`) is the only voter of a dynamic quorum. Empty otherwise.
fn standalone_bootstrap_voter(
    node_id: i32,
    bootstrap_servers: &[String],
    controller_listeners: &[Listener],
) -> Result<Vec<Voter>, ConfigError> {
    if bootstrap_servers.len() != 1 {
        return Ok(Vec::new());
    }
    let item = format!("{node_id}@{}", bootstrap_servers[0]);
    let me = parse_voters(&item).map_err(|_| {
        bad(
            "controller.quorum.bootstrap.servers",
            &bootstrap_servers[0],
            "is not host:port",
        )
    })?;
    let own_port = |port: u16| controller_listeners.iter().any(|l| l.port == port);
    Ok(if me.iter().all(|v| own_port(v.port)) {
        me
    } else {
        Vec::new()
    })
}

/// A broker-only node needs a quorum to join; a controller must be one of the voters.
fn check_membership(
    props: &BTreeMap<String, String>,
    node_id: i32,
    roles: &Roles,
    voters: &[Voter],
    standalone: bool,
    dynamic: bool,
) -> Result<(), ConfigError> {
    if standalone && !roles.controller {
        return Err(bad(
            "controller.quorum.voters",
            "",
            "a broker-only node needs controller.quorum.voters or controller.quorum.bootstrap.servers",
        ));
    }
    // A controller of a dynamic quorum need not be a voter yet: it waits to be added.
    if roles.controller && !standalone && !dynamic && !voters.iter().any(|v| v.id == node_id) {
        return Err(bad(
            "controller.quorum.voters",
            props
                .get("controller.quorum.voters")
                .map(String::as_str)
                .unwrap_or(""),
            format!(
                "node {node_id} has the controller role but is not one of the voters \
                 (list it, or leave controller.quorum.voters out for a dynamic quorum: \
                 controller.quorum.bootstrap.servers, then kafka-metadata-quorum add-controller)"
            ),
        ));
    }
    Ok(())
}

/// `(broker.session.timeout.ms, broker.heartbeat.interval.ms,
/// controller.quorum.election.timeout.ms)`, checked against each other.
fn liveness_timeouts(props: &BTreeMap<String, String>) -> Result<(u64, u64, u64), ConfigError> {
    let session = number(props, "broker.session.timeout.ms", 9000u64)?;
    let heartbeat = number(props, "broker.heartbeat.interval.ms", 2000u64)?;
    if heartbeat == 0 || heartbeat >= session {
        return Err(bad(
            "broker.heartbeat.interval.ms",
            &heartbeat.to_string(),
            "must be above 0 and below broker.session.timeout.ms",
        ));
    }
    let election = number(props, "controller.quorum.election.timeout.ms", 1000u64)?;
    if election < 10 {
        return Err(bad(
            "controller.quorum.election.timeout.ms",
            &election.to_string(),
            "must be at least 10",
        ));
    }
    Ok((session, heartbeat, election))
}

impl ClusterConfig {
    /// Reads the cluster keys. `all_listeners` is the whole `listeners` value (controller
    /// listeners included); `node_id` is this node's id.
    pub fn from_props(
        props: &BTreeMap<String, String>,
        node_id: i32,
        all_listeners: &[Listener],
    ) -> Result<ClusterConfig, ConfigError> {
        let Quorum {
            roles,
            voters,
            bootstrap_servers,
            dynamic,
            controller_listeners,
            controller_listener_names,
        } = Quorum::from_props(props, node_id, all_listeners)?;
        let security_protocols =
            SecurityProtocolMap::from_props(props, all_listeners, &controller_listener_names)?;
        let inter_broker_listener_name = props
            .get("inter.broker.listener.name")
            .cloned()
            .or_else(|| {
                all_listeners
                    .iter()
                    .find(|l| !controller_listener_names.contains(&l.name))
                    .map(|l| l.name.clone())
            })
            .unwrap_or_else(|| "PLAINTEXT".into());
        let (session, heartbeat, election) = liveness_timeouts(props)?;
        Ok(ClusterConfig {
            roles,
            voters,
            bootstrap_servers,
            dynamic_quorum: dynamic,
            controller_listeners,
            controller_listener_names,
            inter_broker_listener_name,
            security_protocols,
            rack: props
                .get("broker.rack")
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty()),
            broker_session_timeout_ms: session,
            broker_heartbeat_interval_ms: heartbeat,
            election_timeout_ms: election,
            fetch_timeout_ms: number(props, "controller.quorum.fetch.timeout.ms", 2000u64)?,
            request_timeout_ms: number(props, "controller.quorum.request.timeout.ms", 2000u64)?,
            auto_leader_rebalance_enable: flag(props, "auto.leader.rebalance.enable", true)?,
            leader_imbalance_check_interval_seconds: number(
                props,
                "leader.imbalance.check.interval.seconds",
                300u64,
            )?
            .max(1),
            leader_imbalance_per_broker_percentage: number(
                props,
                "leader.imbalance.per.broker.percentage",
                10u64,
            )?,
            offsets_topic_replication_factor: number(
                props,
                "offsets.topic.replication.factor",
                3i16,
            )?,
            snapshot_bytes: number(
                props,
                "metadata.log.max.record.bytes.between.snapshots",
                20 * 1024 * 1024u64,
            )?,
            snapshot_interval_ms: number(
                props,
                "metadata.log.max.snapshot.interval.ms",
                3_600_000,
            )?,
            metadata_segment_bytes: number(
                props,
                "metadata.log.segment.bytes",
                1024 * 1024 * 1024u64,
            )?
            // Kafka's internal floor, lowered only by tests.
            .max(number(
                props,
                "metadata.log.segment.min.bytes",
                8 * 1024 * 1024u64,
            )?),
            registration_timeout_ms: number(
                props,
                "initial.broker.registration.timeout.ms",
                60_000u64,
            )?,
        })
    }

    /// True when this node is the only voter and nothing else is configured: `evenkeel dev
    /// --brokers 1` and a `server.properties` without KRaft keys.
    /// Where to find the quorum: `(voter id, host:port)` of each voter, or the bootstrap
    /// servers with id -1 when no voters are configured.
    pub fn quorum_contacts(&self) -> Vec<(i32, String)> {
        if self.voters.is_empty() {
            self.bootstrap_servers
                .iter()
                .map(|a| (-1, a.clone()))
                .collect()
        } else {
            self.voters.iter().map(|v| (v.id, v.address())).collect()
        }
    }

    pub fn is_single_node(&self) -> bool {
        self.voters.len() == 1 && self.bootstrap_servers.is_empty()
    }

    /// The voter with `id`.
    pub fn voter(&self, id: i32) -> Option<&Voter> {
        self.voters.iter().find(|v| v.id == id)
    }

    /// Where to look for the active controller: the voters, else the bootstrap servers.
    pub fn controller_addresses(&self) -> Vec<String> {
        if self.voters.is_empty() {
            self.bootstrap_servers.clone()
        } else {
            self.voters.iter().map(Voter::address).collect()
        }
    }
}

/// `listeners` parsed whole, controller listeners included.
pub fn all_listeners(props: &BTreeMap<String, String>) -> Result<Vec<Listener>, ConfigError> {
    parse_listeners(
        "listeners",
        props
            .get("listeners")
            .map(String::as_str)
            .unwrap_or("PLAINTEXT://:9092"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_properties;

    fn cluster(text: &str) -> Result<ClusterConfig, ConfigError> {
        let p = parse_properties(text);
        let id = p["node.id"].parse().unwrap();
        ClusterConfig::from_props(&p, id, &all_listeners(&p).unwrap())
    }

    /// The server.properties Kafka 4.x ships for a combined node, with a three-voter quorum.
    const KAFKA_COMBINED: &str = "process.roles=broker,controller\nnode.id=2\n\
        controller.quorum.voters=1@localhost:9093,2@localhost:9095,3@localhost:9097\n\
        listeners=PLAINTEXT://:9094,CONTROLLER://:9095\ninter.broker.listener.name=PLAINTEXT\n\
        advertised.listeners=PLAINTEXT://localhost:9094\ncontroller.listener.names=CONTROLLER\n\
        listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n\
        broker.rack=eu-1a\n";

    #[test]
    fn kafkas_combined_mode_properties_parse() {
        let c = cluster(KAFKA_COMBINED).unwrap();
        assert_eq!(c.roles, Roles::combined());
        assert_eq!(c.voters.len(), 3);
        assert_eq!(c.voter(3).unwrap().address(), "localhost:9097");
        assert_eq!(c.controller_listeners[0].port, 9095);
        assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
        assert_eq!(c.rack.as_deref(), Some("eu-1a"));
        assert_eq!(
            (c.broker_session_timeout_ms, c.broker_heartbeat_interval_ms),
            (9000, 2000)
        );
        assert_eq!(c.offsets_topic_replication_factor, 3);
        assert!(!c.is_single_node());
    }

    #[test]
    fn controller_listeners_follow_the_order_of_controller_listener_names() {
        let text = KAFKA_COMBINED
            .replace(
                "CONTROLLER://:9095",
                "CONTROLLER://:9095,CONTROLLER_SSL://:9096",
            )
            .replace(
                "controller.listener.names=CONTROLLER",
                "controller.listener.names=CONTROLLER_SSL,CONTROLLER",
            );
        let c = cluster(&text).unwrap();
        let bound: Vec<(&str, u16)> = c
            .controller_listeners
            .iter()
            .map(|l| (l.name.as_str(), l.port))
            .collect();
        assert_eq!(bound, [("CONTROLLER_SSL", 9096), ("CONTROLLER", 9095)]);
    }

    #[test]
    fn no_quorum_keys_make_a_cluster_of_one() {
        let c = cluster("node.id=4\nlisteners=PLAINTEXT://:9092\n").unwrap();
        assert_eq!(c.roles, Roles::combined());
        assert!(c.is_single_node());
        assert_eq!(c.voters[0].id, 4);
    }

    #[test]
    fn roles_follow_the_voter_list_when_process_roles_is_absent() {
        let c = cluster(
            "node.id=5\ncontroller.quorum.voters=1@a:9093,2@b:9093,3@c:9093\n\
             listeners=PLAINTEXT://:9092\n",
        )
        .unwrap();
        assert_eq!(
            c.roles,
            Roles {
                broker: true,
                controller: false
            }
        );
    }

    #[test]
    fn bad_cluster_keys_are_refused_by_name() {
        for (text, key) in [
            (
                "node.id=1\nprocess.roles=broker,zookeeper\n",
                "process.roles",
            ),
            (
                "node.id=1\ncontroller.quorum.voters=1@a\n",
                "controller.quorum.voters",
            ),
            (
                "node.id=1\ncontroller.quorum.voters=1@a:1,1@b:2\n",
                "controller.quorum.voters",
            ),
            (
                "node.id=1\nprocess.roles=broker\n",
                "controller.quorum.voters",
            ),
            (
                "node.id=9\nprocess.roles=controller\ncontroller.quorum.voters=1@a:1\n\
                 listeners=CONTROLLER://:1\ncontroller.listener.names=CONTROLLER\n",
                "controller.quorum.voters",
            ),
            (
                "node.id=1\nprocess.roles=broker,controller\ncontroller.quorum.voters=1@a:1\n\
                 listeners=PLAINTEXT://:9092\n",
                "controller.listener.names",
            ),
            (
                "node.id=1\nlisteners=INTERNAL://:9093\n",
                "listener.security.protocol.map",
            ),
            (
                "node.id=1\nbroker.heartbeat.interval.ms=9000\n",
                "broker.heartbeat.interval.ms",
            ),
        ] {
            let e = cluster(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
