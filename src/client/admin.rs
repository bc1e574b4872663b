//! `AdminClient`: topics, partitions, topic configs, cluster description, SCRAM users and ACLs
//! over the admin APIs, with bootstrap fallback, reconnects and a NOT_CONTROLLER retry.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, ApiKey, BrokerId, CreatePartitionsRequest,
    CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeQuorumRequest, ElectLeadersRequest, IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::sync::Mutex;
use uuid::Uuid;

mod users;

use super::{ClientError, ClientSecurity, Connection};
use crate::protocol::errors;

/// Kafka's ConfigResource type for topics.
const RESOURCE_TOPIC: i8 = 2;

/// A partition's new replica list (`None` cancels an ongoing reassignment), as
/// `kafka-reassign-partitions` sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

/// A reassignment the controller is still carrying out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// The cluster as a Metadata response shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: Vec<BrokerInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub topic_id: Uuid,
    pub internal: bool,
    /// Sorted by partition index.
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// -1 when the partition has no leader.
    pub leader: i32,
    /// The partition's leader epoch (-1 when the broker does not report one).
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// One replica of the metadata quorum as DescribeQuorum reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumReplica {
    pub id: i32,
    pub log_end_offset: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

/// The metadata quorum (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumInfo {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
}

/// Where a config value comes from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    Other(i8),
}

impl ConfigSource {
    pub fn from_code(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            other => ConfigSource::Other(other),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for sensitive or unset values.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOpType {
    Set,
    Delete,
}

impl AlterOpType {
    /// IncrementalAlterConfigs `config_operation`.
    fn code(self) -> i8 {
        match self {
            AlterOpType::Set => 0,
            AlterOpType::Delete => 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigOp {
    pub name: String,
    pub op: AlterOpType,
    pub value: Option<String>,
}

/// An admin client over one connection to any broker, plus connections to the controller
/// when a broker answers NOT_CONTROLLER. Broken connections are replaced on the next call.
pub struct AdminClient {
    bootstrap: Vec<String>,
    timeout: Duration,
    /// How each connection is secured (PLAINTEXT unless `with_security` says otherwise).
    security: ClientSecurity,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    any: Option<Arc<Connection>>,
    /// Broker id → "host:port", from the last Metadata response.
    brokers: HashMap<i32, String>,
    controller_id: Option<i32>,
    controller: Option<Arc<Connection>>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("bootstrap", &self.bootstrap)
            .finish()
    }
}

use crate::protocol::str_bytes;

fn opt_string(s: Option<StrBytes>) -> Option<String> {
    s.map(|s| s.to_string())
}

/// A broker-side timeout a little under the call timeout, so the broker can answer in time.
fn broker_timeout_ms(timeout: Duration) -> i32 {
    let ms = timeout.as_millis().saturating_mul(4) / 5;
    i32::try_from(ms).unwrap_or(i32::MAX)
}

impl AdminClient {
    /// Connects to the first reachable broker of `bootstrap` ("host:port[,host:port…]").
    /// `timeout` bounds each connect and each call.
    pub async fn connect(bootstrap: &str, timeout: Duration) -> Result<AdminClient, ClientError> {
        AdminClient::connect_with(bootstrap, timeout, ClientSecurity::plaintext()).await
    }

    /// `connect`, its connections secured as `security` says (TLS, SASL login).
    pub async fn connect_with(
        bootstrap: &str,
        timeout: Duration,
        security: ClientSecurity,
    ) -> Result<AdminClient, ClientError> {
        let client = AdminClient::new(bootstrap, timeout)?.with_security(security);
        client.any_connection().await?;
        Ok(client)
    }

    /// A client that connects on its first call (as Java's clients do), so it can be made
    /// before any broker answers. Only an empty bootstrap list is refused.
    pub fn new(bootstrap: &str, timeout: Duration) -> Result<AdminClient, ClientError> {
        let list: Vec<String> = bootstrap
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if list.is_empty() {
            return Err(ClientError::NoBroker(format!(
                "empty bootstrap list {bootstrap:?}"
            )));
        }
        Ok(AdminClient {
            bootstrap: list,
            timeout,
            security: ClientSecurity::plaintext(),
            state: Mutex::new(State::default()),
        })
    }

    /// The same client, its connections secured as `security` says (TLS, SASL login).
    pub fn with_security(mut self, security: ClientSecurity) -> AdminClient {
        self.security = security;
        self
    }

    /// The cluster id, controller and brokers: DescribeCluster where the broker has it (its
    /// controller id is the active controller on evenkeel), else Metadata.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        let conn = self.any_connection().await?;
        if conn.version(ApiKey::DescribeCluster).is_none() {
            return self.describe_cluster_by_metadata().await;
        }
        let resp = self
            .any_call_with(|version| {
                let req = DescribeClusterRequest::default();
                if version >= 1 {
                    req.with_endpoint_type(1)
                } else {
                    req
                }
            })
            .await?;
        check("DescribeCluster", resp.error_code, resp.error_message)?;
        let mut brokers: Vec<BrokerInfo> = resp
            .brokers
            .into_iter()
            .map(|b| BrokerInfo {
                id: b.broker_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: opt_string(b.rack),
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok(ClusterDescription {
            cluster_id: resp.cluster_id.to_string(),
            controller_id: resp.controller_id.0,
            brokers,
        })
    }

    async fn describe_cluster_by_metadata(&self) -> Result<ClusterDescription, ClientError> {
        let resp = self.metadata(Some(&[])).await?;
        let mut brokers: Vec<BrokerInfo> = resp
            .brokers
            .into_iter()
            .map(|b| BrokerInfo {
                id: b.node_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: opt_string(b.rack),
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok(ClusterDescription {
            cluster_id: opt_string(resp.cluster_id).unwrap_or_default(),
            controller_id: resp.controller_id.0,
            brokers,
        })
    }

    /// The named topics (`None`: all). A named topic that does not exist is left out.
    pub async fn describe_topics(
        &self,
        names: Option<&[String]>,
    ) -> Result<Vec<TopicDescription>, ClientError> {
        if names.is_some_and(|n| n.is_empty()) {
            return Ok(Vec::new());
        }
        let resp = self.metadata(names).await?;
        let mut out = Vec::with_capacity(resp.topics.len());
        for t in resp.topics {
            let name = opt_string(t.name.map(|n| n.0)).unwrap_or_default();
            match t.error_code {
                errors::NONE | errors::LEADER_NOT_AVAILABLE => {}
                errors::UNKNOWN_TOPIC_OR_PARTITION | errors::UNKNOWN_TOPIC_ID => continue,
                code => {
                    return Err(ClientError::kafka(
                        "Metadata",
                        code,
                        Some(format!("topic {name}")),
                    ))
                }
            }
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .into_iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.into_iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.into_iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            out.push(TopicDescription {
                name,
                topic_id: t.topic_id,
                internal: t.is_internal,
                partitions,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Creates a topic and returns its id.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<Uuid, ClientError> {
        let topic = CreatableTopic::default()
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor);
        self.create(name, topic, configs).await
    }

    /// Creates a topic whose partition `i` has the replicas `assignment[i]` (the first leads),
    /// as `kafka-topics --replica-assignment` does.
    pub async fn create_topic_with_assignment(
        &self,
        name: &str,
        assignment: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<Uuid, ClientError> {
        use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
        let topic = CreatableTopic::default()
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(
                assignment
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(i as i32)
                            .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
                    })
                    .collect(),
            );
        self.create(name, topic, configs).await
    }

    async fn create(
        &self,
        name: &str,
        topic: CreatableTopic,
        configs: &BTreeMap<String, String>,
    ) -> Result<Uuid, ClientError> {
        let timeout_ms = broker_timeout_ms(self.timeout);
        let topic = topic.with_name(TopicName(str_bytes(name))).with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(k))
                        .with_value(Some(str_bytes(v)))
                })
                .collect(),
        );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(timeout_ms);
        let resp = self.controller_call(&req).await?;
        let result = resp
            .topics
            .into_iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| missing("CreateTopics", name))?;
        check("CreateTopics", result.error_code, result.error_message)?;
        if !result.topic_id.is_nil() {
            return Ok(result.topic_id);
        }
        // Before CreateTopics v7 the id is only in Metadata; a follower broker may lag a little.
        for _ in 0..20 {
            let found = self.describe_topics(Some(&[name.to_string()])).await?;
            if let Some(t) = found.into_iter().find(|t| t.name == name) {
                return Ok(t.topic_id);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Uuid::nil())
    }

    /// Deletes a topic.
    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let timeout_ms = broker_timeout_ms(self.timeout);
        let resp = self
            .controller_call_with(|version| {
                let req = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
                if version >= 6 {
                    req.with_topics(vec![
                        DeleteTopicState::default().with_name(Some(TopicName(str_bytes(name))))
                    ])
                } else {
                    req.with_topic_names(vec![TopicName(str_bytes(name))])
                }
            })
            .await?;
        let result = resp
            .responses
            .into_iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
            .ok_or_else(|| missing("DeleteTopics", name))?;
        check("DeleteTopics", result.error_code, result.error_message)
    }

    /// Grows a topic to `total_count` partitions.
    pub async fn create_partitions(&self, name: &str, total_count: i32) -> Result<(), ClientError> {
        let req = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(TopicName(str_bytes(name)))
                .with_count(total_count)
                // The codec's default is an empty list, which asks for zero manual assignments.
                .with_assignments(None)])
            .with_timeout_ms(broker_timeout_ms(self.timeout));
        let resp = self.controller_call(&req).await?;
        let result = resp
            .results
            .into_iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| missing("CreatePartitions", name))?;
        check("CreatePartitions", result.error_code, result.error_message)
    }

    /// Starts moving partitions to new replica lists (AlterPartitionReassignments). The first
    /// partition the controller refuses is the error, with its message.
    pub async fn alter_partition_reassignments(
        &self,
        moves: &[Reassignment],
    ) -> Result<(), ClientError> {
        let mut topics: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
        for m in moves {
            topics.entry(&m.topic).or_default().push(
                ReassignablePartition::default()
                    .with_partition_index(m.partition)
                    .with_replicas(
                        m.replicas
                            .as_ref()
                            .map(|r| r.iter().map(|b| BrokerId(*b)).collect()),
                    ),
            );
        }
        let req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(broker_timeout_ms(self.timeout))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        ReassignableTopic::default()
                            .with_name(TopicName(str_bytes(name)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let resp = self.controller_call(&req).await?;
        check(
            "AlterPartitionReassignments",
            resp.error_code,
            resp.error_message,
        )?;
        for t in resp.responses {
            for p in t.partitions {
                check("AlterPartitionReassignments", p.error_code, p.error_message)?;
            }
        }
        Ok(())
    }

    /// The reassignments in progress (ListPartitionReassignments over every topic).
    pub async fn list_partition_reassignments(
        &self,
    ) -> Result<Vec<OngoingReassignment>, ClientError> {
        let req = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(broker_timeout_ms(self.timeout))
            .with_topics(None);
        let resp = self.controller_call(&req).await?;
        check(
            "ListPartitionReassignments",
            resp.error_code,
            resp.error_message,
        )?;
        let ids = |v: Vec<BrokerId>| v.into_iter().map(|b| b.0).collect::<Vec<i32>>();
        let mut out = Vec::new();
        for t in resp.topics {
            for p in t.partitions {
                out.push(OngoingReassignment {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    replicas: ids(p.replicas),
                    adding: ids(p.adding_replicas),
                    removing: ids(p.removing_replicas),
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// ElectLeaders: PREFERRED (`preferred`) or UNCLEAN elections for `partitions` (`None`:
    /// every partition). Returns each partition's Kafka error code (0: elected;
    /// ELECTION_NOT_NEEDED and PREFERRED_LEADER_NOT_AVAILABLE are answers, not failures).
    pub async fn elect_leaders(
        &self,
        preferred: bool,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<(String, i32, i16)>, ClientError> {
        use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions.unwrap_or_default() {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let req = ElectLeadersRequest::default()
            .with_election_type(if preferred { 0 } else { 1 })
            .with_timeout_ms(broker_timeout_ms(self.timeout))
            .with_topic_partitions(partitions.map(|_| {
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic(TopicName(str_bytes(t)))
                            .with_partitions(ps)
                    })
                    .collect()
            }));
        let resp = self.controller_call(&req).await?;
        check("ElectLeaders", resp.error_code, None)?;
        let mut out = Vec::new();
        for t in resp.replica_election_results {
            for p in t.partition_result {
                out.push((t.topic.0.to_string(), p.partition_id, p.error_code));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The metadata quorum: its leader (the active controller), epoch and replicas.
    pub async fn describe_quorum(&self) -> Result<QuorumInfo, ClientError> {
        use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
        let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(str_bytes("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let conn = self.any_connection().await?;
        let resp = conn.call(&req).await?;
        check("DescribeQuorum", resp.error_code, resp.error_message)?;
        let p = resp
            .topics
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
            .ok_or_else(|| missing("DescribeQuorum", "__cluster_metadata"))?;
        check("DescribeQuorum", p.error_code, p.error_message)?;
        let replicas =
            |v: Vec<kafka_protocol::messages::describe_quorum_response::ReplicaState>| {
                v.into_iter()
                    .map(|r| QuorumReplica {
                        id: r.replica_id.0,
                        log_end_offset: r.log_end_offset,
                        last_fetch_ms: r.last_fetch_timestamp,
                        last_caught_up_ms: r.last_caught_up_timestamp,
                    })
                    .collect()
            };
        Ok(QuorumInfo {
            leader_id: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            high_watermark: p.high_watermark,
            voters: replicas(p.current_voters),
            observers: replicas(p.observers),
        })
    }

    /// Every config of a topic with its value and source.
    pub async fn describe_topic_configs(
        &self,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(str_bytes(name))
                .with_configuration_keys(None),
        ]);
        let resp = self.any_call(&req).await?;
        let result = resp
            .results
            .into_iter()
            .find(|r| r.resource_type == RESOURCE_TOPIC && r.resource_name.as_str() == name)
            .ok_or_else(|| missing("DescribeConfigs", name))?;
        check("DescribeConfigs", result.error_code, result.error_message)?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: opt_string(c.value),
                source: ConfigSource::from_code(c.config_source),
                read_only: c.read_only,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Sets and deletes topic configs with IncrementalAlterConfigs.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        ops: &[AlterConfigOp],
    ) -> Result<(), ClientError> {
        let configs = ops
            .iter()
            .map(|o| {
                AlterableConfig::default()
                    .with_name(str_bytes(&o.name))
                    .with_config_operation(o.op.code())
                    .with_value(o.value.as_deref().map(str_bytes))
            })
            .collect();
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(str_bytes(name))
                .with_configs(configs),
        ]);
        let resp = self.controller_call(&req).await?;
        let result = resp
            .responses
            .into_iter()
            .find(|r| r.resource_type == RESOURCE_TOPIC && r.resource_name.as_str() == name)
            .ok_or_else(|| missing("IncrementalAlterConfigs", name))?;
        check(
            "IncrementalAlterConfigs",
            result.error_code,
            result.error_message,
        )
    }

    /// The brokers' addresses (`host:port` by id) from the last Metadata response.
    pub async fn known_brokers(&self) -> HashMap<i32, String> {
        self.state.lock().await.brokers.clone()
    }

    /// A Metadata request for `topics` (`None`: all; empty: none); remembers the brokers.
    async fn metadata(&self, topics: Option<&[String]>) -> Result<MetadataResponse, ClientError> {
        let resp = self
            .any_call_with(|version| {
                let req = MetadataRequest::default().with_topics(topics.map(|names| {
                    names
                        .iter()
                        .map(|n| {
                            MetadataRequestTopic::default().with_name(Some(TopicName(str_bytes(n))))
                        })
                        .collect()
                }));
                if version >= 4 {
                    req.with_allow_auto_topic_creation(false)
                } else {
                    req
                }
            })
            .await?;
        // Metadata v13 carries a top-level error (e.g. REBOOTSTRAP_REQUIRED).
        check("Metadata", resp.error_code, None)?;
        let mut state = self.state.lock().await;
        state.brokers = resp
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        state.controller_id = Some(resp.controller_id.0).filter(|id| *id >= 0);
        Ok(resp)
    }

    /// The connection to any broker, reconnecting through the bootstrap list when needed.
    async fn any_connection(&self) -> Result<Arc<Connection>, ClientError> {
        let mut state = self.state.lock().await;
        if let Some(c) = state.any.as_ref().filter(|c| !c.is_broken()) {
            return Ok(c.clone());
        }
        state.any = None;
        let known: Vec<String> = state.brokers.values().cloned().collect();
        let mut failures = Vec::new();
        for addr in self.bootstrap.iter().chain(known.iter()) {
            match Connection::connect_with(addr, self.timeout, &self.security).await {
                Ok(c) => {
                    let c = Arc::new(c);
                    state.any = Some(c.clone());
                    return Ok(c);
                }
                // The cluster refused the login: another broker would refuse it too.
                Err(e) if e.is_login_refused() => return Err(e),
                Err(e) => failures.push(format!("{addr}: {e}")),
            }
        }
        Err(ClientError::NoBroker(failures.join("; ")))
    }

    /// The connection to the broker Metadata names as controller, if it can be reached.
    async fn controller_connection(&self) -> Option<Arc<Connection>> {
        let mut state = self.state.lock().await;
        if let Some(c) = state.controller.as_ref().filter(|c| !c.is_broken()) {
            return Some(c.clone());
        }
        state.controller = None;
        let addr = state.brokers.get(&state.controller_id?)?.clone();
        let c = Connection::connect_with(&addr, self.timeout, &self.security).await;
        let c = Arc::new(c.ok()?);
        state.controller = Some(c.clone());
        Some(c)
    }

    /// Sends a version-independent request to any broker.
    async fn any_call<R: Request + Clone>(&self, req: &R) -> Result<R::Response, ClientError> {
        self.any_call_with(|_| req.clone()).await
    }

    /// Sends the request built for the negotiated version to any broker. A read-only call
    /// that fails on a stale connection is tried once more on a fresh one.
    async fn any_call_with<R: Request>(
        &self,
        build: impl Fn(i16) -> R,
    ) -> Result<R::Response, ClientError> {
        let conn = self.any_connection().await?;
        match call_built(&conn, &build).await {
            Err(ClientError::Io(_)) if conn.is_broken() => {
                let conn = self.any_connection().await?;
                call_built(&conn, &build).await
            }
            other => other,
        }
    }

    /// Sends a controller request to any broker (a KRaft broker forwards it); on NOT_CONTROLLER,
    /// refreshes metadata and tries once more at the controller it names. Its per-resource
    /// errors, NOT_CONTROLLER included, are left for the caller to check.
    async fn controller_call<R>(&self, req: &R) -> Result<R::Response, ClientError>
    where
        R: Request + Clone,
        R::Response: PerResourceErrors,
    {
        self.controller_call_with(|_| req.clone()).await
    }

    async fn controller_call_with<R>(
        &self,
        build: impl Fn(i16) -> R,
    ) -> Result<R::Response, ClientError>
    where
        R: Request,
        R::Response: PerResourceErrors,
    {
        let resp = self.controller_attempt(&build).await?;
        if !resp.error_codes().any(|c| c == errors::NOT_CONTROLLER) {
            return Ok(resp);
        }
        self.state.lock().await.controller = None;
        self.metadata(Some(&[])).await?;
        self.controller_attempt(&build).await
    }

    /// One send to the controller (or any broker). Like the Java admin client, a request whose
    /// connection broke is sent once more on a fresh one, so a create that did happen may
    /// answer TOPIC_ALREADY_EXISTS the second time.
    async fn controller_attempt<R: Request>(
        &self,
        build: &impl Fn(i16) -> R,
    ) -> Result<R::Response, ClientError> {
        let conn = match self.controller_connection().await {
            Some(c) => c,
            None => self.any_connection().await?,
        };
        match call_built(&conn, build).await {
            Err(ClientError::Io(_)) if conn.is_broken() => {
                let conn = match self.controller_connection().await {
                    Some(c) => c,
                    None => self.any_connection().await?,
                };
                call_built(&conn, build).await
            }
            other => other,
        }
    }
}

async fn call_built<R: Request>(
    conn: &Connection,
    build: &impl Fn(i16) -> R,
) -> Result<R::Response, ClientError> {
    let key = ApiKey::try_from(R::KEY)
        .map_err(|_| ClientError::Protocol(format!("unknown API key {}", R::KEY)))?;
    let version = conn.version(key).ok_or_else(|| {
        ClientError::Protocol(format!(
            "{key:?}: no version in common with the broker at {}",
            conn.addr()
        ))
    })?;
    conn.call_at(&build(version), version).await
}

/// `Ok` for NONE, else the Kafka error with the broker's message.
fn check(api: &'static str, code: i16, message: Option<StrBytes>) -> Result<(), ClientError> {
    if code == errors::NONE {
        Ok(())
    } else {
        Err(ClientError::kafka(api, code, opt_string(message)))
    }
}

fn missing(api: &str, name: &str) -> ClientError {
    ClientError::Protocol(format!("{api} response has no result for {name:?}"))
}

/// The per-resource error codes of a controller API response, to spot NOT_CONTROLLER.
trait PerResourceErrors {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_;
}

impl PerResourceErrors for kafka_protocol::messages::CreateTopicsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.topics.iter().map(|t| t.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::ElectLeadersResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        std::iter::once(self.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::DeleteTopicsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.responses.iter().map(|t| t.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::CreatePartitionsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.results.iter().map(|t| t.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::IncrementalAlterConfigsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        self.responses.iter().map(|t| t.error_code)
    }
}

impl PerResourceErrors for kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        std::iter::once(self.error_code).chain(
            self.responses
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        )
    }
}

impl PerResourceErrors for kafka_protocol::messages::ListPartitionReassignmentsResponse {
    fn error_codes(&self) -> impl Iterator<Item = i16> + '_ {
        std::iter::once(self.error_code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_sources_follow_kafkas_codes() {
        assert_eq!(ConfigSource::from_code(1), ConfigSource::DynamicTopic);
        assert_eq!(ConfigSource::from_code(2), ConfigSource::DynamicBroker);
        assert_eq!(
            ConfigSource::from_code(3),
            ConfigSource::DynamicDefaultBroker
        );
        assert_eq!(ConfigSource::from_code(4), ConfigSource::StaticBroker);
        assert_eq!(ConfigSource::from_code(5), ConfigSource::Default);
        assert_eq!(ConfigSource::from_code(0), ConfigSource::Other(0));
        assert_eq!(ConfigSource::from_code(8), ConfigSource::Other(8));
    }

    #[test]
    fn alter_ops_use_incremental_alter_configs_codes() {
        assert_eq!(AlterOpType::Set.code(), 0);
        assert_eq!(AlterOpType::Delete.code(), 1);
    }

    #[test]
    fn broker_side_timeout_is_under_the_call_timeout() {
        assert_eq!(broker_timeout_ms(Duration::from_secs(10)), 8000);
        assert_eq!(
            broker_timeout_ms(Duration::from_secs(u64::MAX / 1000)),
            i32::MAX
        );
    }

    #[tokio::test]
    async fn connect_to_an_empty_bootstrap_is_no_broker() {
        let e = AdminClient::connect(" , ", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::NoBroker(_)), "{e}");
    }
}
