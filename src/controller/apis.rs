//! The controller listener's requests (Kafka's ControllerApis): quorum traffic, broker
//! registration and heartbeats, producer-id blocks, ISR changes, the admin requests brokers
//! forward, DescribeQuorum and DescribeCluster, and the observers' fetches of the metadata log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::cluster::{Heartbeat, RegistrationRequest};
use super::partition_change::Election;
use super::quorum_controller::{ConfigOp, QuorumController};
use super::raft::log_store::METADATA_TOPIC_ID;
use super::raft::network::{response_body, RAFT_API_KEY};
use super::raft::{snapshot, Quorum};
use super::refusals::{self, Caller, ListenerAuthorizer};
use super::replication::{IsrChange, ReassignmentSpec, TopicSpec};
use super::{ControllerError, METADATA_TOPIC};
use crate::config::cluster::Voter;
use crate::metadata::features;
use crate::metadata::records::{BrokerEndpoint, BrokerFeature, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::protocol::{self, api_versions, errors, sasl, DecodedRequest, FrameError};
use crate::security::acl::AclOperation;
use crate::storage::KafkaUuid;

/// The longest an observer's fetch waits for new metadata.
const MAX_FETCH_WAIT: Duration = Duration::from_millis(500);

/// A controller: the quorum member, the active-controller logic, and how it is reached.
pub struct ControllerNode {
    pub quorum: Arc<Quorum>,
    pub controller: Arc<QuorumController>,
    /// The controller listener's name (e.g. CONTROLLER).
    pub listener: String,
    pub voters: Vec<Voter>,
    /// `server.properties` as given, to tell where topic config values come from.
    pub broker_props: BTreeMap<String, String>,
    /// Who may call: set when a controller listener is SSL or SASL and an authorizer is
    /// configured; asked for callers on such a listener (a PLAINTEXT controller listener knows
    /// no caller: it must stay private).
    pub authorizer: Option<ListenerAuthorizer>,
    /// Where the controller listener is bound, once it is: what DescribeCluster names for this
    /// node when its voter entry has no port (a cluster of one on an ephemeral port).
    pub bound: std::sync::OnceLock<std::net::SocketAddr>,
}

use crate::protocol::str_bytes as s;

pub(super) fn msg(m: impl Into<String>) -> Option<StrBytes> {
    Some(s(m))
}

fn frame<R: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion>(
    v: i16,
    cid: i32,
    body: &R,
) -> Result<Option<Bytes>, FrameError> {
    protocol::frame_response(v, cid, body).map(Some)
}

impl ControllerNode {
    /// Whether `caller` may do `op` on the cluster (always, without an authorizer or on a
    /// listener that does not check its callers).
    fn allows(&self, caller: &Caller, op: AclOperation) -> bool {
        !caller.checked
            || self
                .authorizer
                .as_ref()
                .is_none_or(|a| a.allows(caller, op))
    }

    /// The answer to a request `caller` may not make: CLUSTER_AUTHORIZATION_FAILED, or the
    /// connection closed for one without a refusal (it fails closed); `None` when allowed.
    fn refuse(
        &self,
        request: &DecodedRequest,
        v: i16,
        cid: i32,
        caller: &Caller,
    ) -> Option<Result<Bytes, FrameError>> {
        let op = refusals::required_operation(request)?;
        if self.allows(caller, op) {
            return None;
        }
        let code = errors::CLUSTER_AUTHORIZATION_FAILED;
        Some(refusals::refusal(request, v, cid, code).unwrap_or_else(|| {
            Err(FrameError::Malformed(format!(
                "{} may not make this request on the controller listener",
                caller.principal
            )))
        }))
    }

    /// Answers one request frame (without its size prefix) from `caller`. An error closes the
    /// connection.
    pub async fn handle(
        &self,
        frame_bytes: Bytes,
        caller: &Caller,
    ) -> Result<Option<Bytes>, FrameError> {
        let raw = protocol::peek_header(&frame_bytes)?;
        if raw.api_key == RAFT_API_KEY {
            if !self.allows(caller, AclOperation::ClusterAction) {
                let body = response_body(errors::CLUSTER_AUTHORIZATION_FAILED, &[]);
                return Ok(Some(raw_response(raw.correlation_id, &body)));
            }
            let body = self
                .quorum
                .serve(&frame_bytes)
                .await
                .map_err(|e| FrameError::Malformed(e.to_string()))?;
            return Ok(Some(raw_response(raw.correlation_id, &body)));
        }
        if let Ok(ApiKey::ApiVersions) = ApiKey::try_from(raw.api_key) {
            if !api_versions::CONTROLLER.is_served(ApiKey::ApiVersions, raw.api_version) {
                let body = api_versions::CONTROLLER.response(errors::UNSUPPORTED_VERSION);
                return protocol::encode_response_with_header_version(
                    0,
                    0,
                    raw.correlation_id,
                    &body,
                )
                .map(Some)
                .map_err(|e| FrameError::Malformed(e.to_string()));
            }
        }
        let (header, request) =
            protocol::decode_request_for(frame_bytes, api_versions::CONTROLLER)?;
        let v = header.request_api_version;
        let cid = header.correlation_id;
        if let Some(refused) = self.refuse(&request, v, cid, caller) {
            return refused.map(Some);
        }
        match request {
            DecodedRequest::ApiVersions(_) => {
                let resp = api_versions::CONTROLLER.response(errors::NONE);
                let img = self.controller.image();
                frame(v, cid, &features::advertise(resp, v, &img))
            }
            DecodedRequest::UpdateFeatures(r) => frame(v, cid, &self.update_features(v, r).await),
            DecodedRequest::BrokerRegistration(r) => frame(v, cid, &self.register(r).await),
            DecodedRequest::BrokerHeartbeat(r) => frame(v, cid, &self.heartbeat(r).await),
            DecodedRequest::UnregisterBroker(r) => frame(v, cid, &self.unregister(r).await),
            DecodedRequest::AllocateProducerIds(r) => {
                frame(v, cid, &self.allocate_producer_ids(r).await)
            }
            DecodedRequest::AlterPartition(r) => frame(v, cid, &self.alter_partition(v, r).await),
            DecodedRequest::CreateTopics(r) => frame(v, cid, &self.create_topics(r).await),
            DecodedRequest::DeleteTopics(r) => frame(v, cid, &self.delete_topics(r).await),
            DecodedRequest::CreatePartitions(r) => frame(v, cid, &self.create_partitions(r).await),
            DecodedRequest::AlterConfigs(r) => frame(v, cid, &self.alter_configs(r).await),
            DecodedRequest::IncrementalAlterConfigs(r) => {
                frame(v, cid, &self.incremental_alter_configs(r).await)
            }
            DecodedRequest::ElectLeaders(r) => frame(v, cid, &self.elect_leaders(r).await),
            DecodedRequest::AlterPartitionReassignments(r) => {
                frame(v, cid, &self.alter_reassignments(r).await)
            }
            DecodedRequest::ListPartitionReassignments(r) => {
                frame(v, cid, &self.list_reassignments(r).await)
            }
            DecodedRequest::DescribeQuorum(_) => frame(v, cid, &self.describe_quorum(v)),
            DecodedRequest::DescribeCluster(r) => frame(v, cid, &self.describe_cluster(v, r)),
            DecodedRequest::AddRaftVoter(r) => frame(v, cid, &self.add_raft_voter(r).await),
            DecodedRequest::RemoveRaftVoter(r) => frame(v, cid, &self.remove_raft_voter(r).await),
            DecodedRequest::Fetch(r) => frame(v, cid, &self.fetch_metadata(r).await),
            DecodedRequest::FetchSnapshot(r) => frame(v, cid, &self.fetch_snapshot(r)),
            DecodedRequest::CreateAcls(r) => frame(v, cid, &self.create_acls(r).await),
            DecodedRequest::DeleteAcls(r) => frame(v, cid, &self.delete_acls(r).await),
            DecodedRequest::AlterUserScramCredentials(r) => {
                frame(v, cid, &self.alter_scram_credentials(r).await)
            }
            DecodedRequest::AlterClientQuotas(r) => {
                frame(v, cid, &self.alter_client_quotas(r).await)
            }
            // On a listener without SASL no exchange is expected (on a SASL one the
            // authenticator answers these, a re-login included, before they get here).
            DecodedRequest::SaslHandshake(r) => {
                frame(v, cid, &sasl::handshake_after_authentication(r))
            }
            DecodedRequest::SaslAuthenticate(_) => {
                frame(v, cid, &sasl::authenticate_after_authentication())
            }
            other => Err(FrameError::Malformed(format!(
                "{:?} is not served on the controller listener",
                std::mem::discriminant(&other)
            ))),
        }
    }

    async fn register(&self, r: BrokerRegistrationRequest) -> BrokerRegistrationResponse {
        let req = RegistrationRequest {
            broker_id: r.broker_id.0,
            cluster_id: r.cluster_id.to_string(),
            incarnation_id: KafkaUuid::from(r.incarnation_id),
            endpoints: r
                .listeners
                .iter()
                .map(|l| BrokerEndpoint {
                    name: l.name.to_string(),
                    host: l.host.to_string(),
                    port: l.port,
                    security_protocol: l.security_protocol,
                })
                .collect(),
            features: r
                .features
                .iter()
                .map(|f| BrokerFeature {
                    name: f.name.to_string(),
                    min_supported: f.min_supported_version,
                    max_supported: f.max_supported_version,
                })
                .collect(),
            rack: r.rack.as_ref().map(|r| r.to_string()),
        };
        match self.controller.register_broker(req).await {
            Ok(epoch) => BrokerRegistrationResponse::default().with_broker_epoch(epoch),
            Err(e) => {
                tracing::info!(broker = r.broker_id.0, error = %e, "refused a broker registration");
                BrokerRegistrationResponse::default()
                    .with_error_code(e.code)
                    .with_broker_epoch(-1)
            }
        }
    }

    async fn heartbeat(&self, r: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse {
        let hb = Heartbeat {
            broker_id: r.broker_id.0,
            broker_epoch: r.broker_epoch,
            current_metadata_offset: r.current_metadata_offset,
            want_fence: r.want_fence,
            want_shut_down: r.want_shut_down,
        };
        match self.controller.heartbeat(hb).await {
            Ok(reply) => BrokerHeartbeatResponse::default()
                .with_is_caught_up(reply.is_caught_up)
                .with_is_fenced(reply.is_fenced)
                .with_should_shut_down(reply.should_shut_down),
            Err(e) => BrokerHeartbeatResponse::default()
                .with_error_code(e.code)
                .with_is_fenced(true),
        }
    }

    async fn unregister(&self, r: UnregisterBrokerRequest) -> UnregisterBrokerResponse {
        match self.controller.unregister_broker(r.broker_id.0).await {
            Ok(()) => UnregisterBrokerResponse::default(),
            Err(e) => UnregisterBrokerResponse::default()
                .with_error_code(e.code)
                .with_error_message(msg(e.message)),
        }
    }

    async fn allocate_producer_ids(
        &self,
        r: AllocateProducerIdsRequest,
    ) -> AllocateProducerIdsResponse {
        match self
            .controller
            .allocate_producer_ids(r.broker_id.0, r.broker_epoch)
            .await
        {
            Ok(start) => AllocateProducerIdsResponse::default()
                .with_producer_id_start(ProducerId(start))
                .with_producer_id_len(super::quorum_controller::PRODUCER_ID_BLOCK as i32),
            Err(e) => AllocateProducerIdsResponse::default()
                .with_error_code(e.code)
                .with_producer_id_start(ProducerId(-1)),
        }
    }

    async fn alter_partition(&self, v: i16, r: AlterPartitionRequest) -> AlterPartitionResponse {
        use kafka_protocol::messages::alter_partition_response::{PartitionData, TopicData};
        let mut changes = Vec::new();
        for t in &r.topics {
            for p in &t.partitions {
                let (new_isr, new_isr_epochs) = if v >= 3 {
                    p.new_isr_with_epochs
                        .iter()
                        .map(|b| (b.broker_id.0, b.broker_epoch))
                        .unzip()
                } else {
                    let ids: Vec<i32> = p.new_isr.iter().map(|b| b.0).collect();
                    let epochs = vec![-1; ids.len()];
                    (ids, epochs)
                };
                changes.push(IsrChange {
                    topic_id: KafkaUuid::from(t.topic_id),
                    partition: p.partition_index,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr,
                    new_isr_epochs,
                });
            }
        }
        let results = match self
            .controller
            .alter_partition(r.broker_id.0, r.broker_epoch, changes.clone())
            .await
        {
            Ok(results) => results,
            Err(e) => return AlterPartitionResponse::default().with_error_code(e.code),
        };
        let mut topics: Vec<TopicData> = Vec::new();
        for (c, (code, after)) in changes.iter().zip(results) {
            let mut pd = PartitionData::default()
                .with_partition_index(c.partition)
                .with_error_code(code)
                .with_leader_id(BrokerId(-1))
                .with_leader_epoch(-1)
                .with_partition_epoch(-1);
            if let Some(p) = after {
                pd = pd
                    .with_leader_id(BrokerId(p.leader))
                    .with_leader_epoch(p.leader_epoch)
                    .with_isr(p.isr.iter().map(|b| BrokerId(*b)).collect())
                    .with_partition_epoch(p.partition_epoch);
            }
            match topics.last_mut() {
                Some(t) if t.topic_id == uuid::Uuid::from(c.topic_id) => t.partitions.push(pd),
                _ => topics.push(
                    TopicData::default()
                        .with_topic_id(uuid::Uuid::from(c.topic_id))
                        .with_partitions(vec![pd]),
                ),
            }
        }
        AlterPartitionResponse::default().with_topics(topics)
    }

    async fn create_topics(&self, r: CreateTopicsRequest) -> CreateTopicsResponse {
        use kafka_protocol::messages::create_topics_response::{
            CreatableTopicConfigs, CreatableTopicResult,
        };
        let specs: Vec<TopicSpec> = r
            .topics
            .iter()
            .map(|t| TopicSpec {
                name: t.name.0.to_string(),
                num_partitions: t.num_partitions,
                replication_factor: t.replication_factor,
                assignments: t
                    .assignments
                    .iter()
                    .map(|a| {
                        (
                            a.partition_index,
                            a.broker_ids.iter().map(|b| b.0).collect(),
                        )
                    })
                    .collect(),
                configs: t
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect(),
            })
            .collect();
        let names: Vec<TopicName> = r.topics.iter().map(|t| t.name.clone()).collect();
        let internal_ok = specs
            .iter()
            .all(|t| t.name == crate::metadata::OFFSETS_TOPIC);
        let results = self
            .controller
            .create_topics(specs, r.validate_only, internal_ok)
            .await;
        let defaults = &self.controller.settings().topics.log;
        let topics = names
            .into_iter()
            .zip(results)
            .map(|(name, res)| {
                let base = CreatableTopicResult::default()
                    .with_name(name)
                    .with_num_partitions(-1)
                    .with_replication_factor(-1);
                match res {
                    Ok(t) => {
                        let configs = crate::config::topic_config_entries(
                            defaults,
                            &t.configs,
                            &self.broker_props,
                        )
                        .into_iter()
                        .map(|e| {
                            CreatableTopicConfigs::default()
                                .with_name(s(e.name))
                                .with_value(Some(s(e.value)))
                                .with_config_source(e.source)
                        })
                        .collect();
                        base.with_topic_id(uuid::Uuid::from(t.id))
                            .with_num_partitions(t.num_partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(Some(configs))
                    }
                    Err(e) => base
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message)),
                }
            })
            .collect();
        CreateTopicsResponse::default().with_topics(topics)
    }

    async fn delete_topics(&self, r: DeleteTopicsRequest) -> DeleteTopicsResponse {
        use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
        // v0–5 name topics in `topic_names`; v6 uses `topics` by name or id.
        let mut wanted: Vec<(Option<String>, uuid::Uuid)> = r
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect();
        wanted.extend(
            r.topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
        );
        let mut out = Vec::new();
        for (name, id) in wanted {
            let resolved = name.clone().or_else(|| {
                self.controller
                    .image()
                    .topic_by_id(&KafkaUuid::from(id))
                    .map(|t| t.name.clone())
            });
            let base = DeletableTopicResult::default()
                .with_name(name.clone().map(|n| TopicName(s(n))))
                .with_topic_id(id);
            let Some(n) = resolved else {
                out.push(
                    base.with_error_code(errors::UNKNOWN_TOPIC_ID)
                        .with_error_message(msg("This server does not host this topic ID.")),
                );
                continue;
            };
            out.push(match self.controller.delete_topic(&n).await {
                Ok(deleted) => base
                    .with_name(Some(TopicName(s(n))))
                    .with_topic_id(uuid::Uuid::from(deleted)),
                Err(e) => base
                    .with_error_code(e.code)
                    .with_error_message(msg(e.message)),
            });
        }
        DeleteTopicsResponse::default().with_responses(out)
    }

    async fn create_partitions(&self, r: CreatePartitionsRequest) -> CreatePartitionsResponse {
        use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
        let mut out = Vec::new();
        for t in r.topics {
            let base = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let assignments = t.assignments.map(|a| {
                a.iter()
                    .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            });
            out.push(
                match self
                    .controller
                    .create_partitions(&t.name.0, t.count, assignments, r.validate_only)
                    .await
                {
                    Ok(()) => base,
                    Err(e) => base
                        .with_error_code(e.code)
                        .with_error_message(msg(e.message)),
                },
            );
        }
        CreatePartitionsResponse::default().with_results(out)
    }

    async fn alter_one(
        &self,
        resource_type: i8,
        name: &str,
        ops: Vec<(String, ConfigOp)>,
        incremental: bool,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        match resource_type {
            RESOURCE_TOPIC => {
                self.controller
                    .alter_topic_configs(name, ops, incremental, validate_only)
                    .await
            }
            RESOURCE_BROKER => {
                self.controller
                    .alter_broker_configs(name, ops, incremental, validate_only)
                    .await
            }
            other => Err(ControllerError::new(
                errors::INVALID_REQUEST,
                format!("Unsupported resource type {other}"),
            )),
        }
    }

    async fn alter_configs(&self, r: AlterConfigsRequest) -> AlterConfigsResponse {
        use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
        let mut out = Vec::new();
        for res in r.resources {
            let ops = res
                .configs
                .iter()
                .map(|c| {
                    let op = match &c.value {
                        Some(v) => ConfigOp::Set(v.to_string()),
                        None => ConfigOp::Delete,
                    };
                    (c.name.to_string(), op)
                })
                .collect();
            let result = self
                .alter_one(
                    res.resource_type,
                    &res.resource_name,
                    ops,
                    false,
                    r.validate_only,
                )
                .await;
            let mut resp = AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            if let Err(e) = result {
                resp = resp
                    .with_error_code(e.code)
                    .with_error_message(msg(e.message));
            }
            out.push(resp);
        }
        AlterConfigsResponse::default().with_responses(out)
    }

    async fn incremental_alter_configs(
        &self,
        r: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
        let mut out = Vec::new();
        for res in r.resources {
            let mut ops = Vec::new();
            let mut bad = None;
            for c in &res.configs {
                let v = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                let op = match c.config_operation {
                    0 => ConfigOp::Set(v),
                    1 => ConfigOp::Delete,
                    2 => ConfigOp::Append(v),
                    3 => ConfigOp::Subtract(v),
                    op => {
                        bad = Some(ControllerError::new(
                            errors::INVALID_REQUEST,
                            format!("Unknown config operation {op}"),
                        ));
                        continue;
                    }
                };
                ops.push((c.name.to_string(), op));
            }
            let result = match bad {
                Some(e) => Err(e),
                None => {
                    self.alter_one(
                        res.resource_type,
                        &res.resource_name,
                        ops,
                        true,
                        r.validate_only,
                    )
                    .await
                }
            };
            let mut resp = AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            if let Err(e) = result {
                resp = resp
                    .with_error_code(e.code)
                    .with_error_message(msg(e.message));
            }
            out.push(resp);
        }
        IncrementalAlterConfigsResponse::default().with_responses(out)
    }

    async fn elect_leaders(&self, r: ElectLeadersRequest) -> ElectLeadersResponse {
        use kafka_protocol::messages::elect_leaders_response::{
            PartitionResult, ReplicaElectionResult,
        };
        let election = match r.election_type {
            0 => Election::Preferred,
            1 => Election::Unclean,
            other => {
                tracing::debug!(election_type = other, "unknown election type");
                return ElectLeadersResponse::default().with_error_code(errors::INVALID_REQUEST);
            }
        };
        let wanted: Option<Vec<(String, i32)>> = r.topic_partitions.as_ref().map(|tps| {
            tps.iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| (t.topic.0.to_string(), *p))
                })
                .collect()
        });
        if wanted.as_ref().is_some_and(|w| w.is_empty()) {
            return ElectLeadersResponse::default();
        }
        let all = wanted.is_none();
        let outcomes = match self.controller.elect_leaders(election, wanted).await {
            Ok(o) => o,
            Err(e) => return ElectLeadersResponse::default().with_error_code(e.code),
        };
        let mut by_topic: Vec<ReplicaElectionResult> = Vec::new();
        if all {
            for t in self.controller.image().topics() {
                by_topic.push(
                    ReplicaElectionResult::default().with_topic(TopicName(s(t.name.clone()))),
                );
            }
        }
        for o in outcomes {
            let pr = PartitionResult::default()
                .with_partition_id(o.partition)
                .with_error_code(o.code)
                .with_error_message(o.message.map(s));
            match by_topic.iter_mut().find(|t| t.topic.0.as_str() == o.topic) {
                Some(t) => t.partition_result.push(pr),
                None => by_topic.push(
                    ReplicaElectionResult::default()
                        .with_topic(TopicName(s(o.topic)))
                        .with_partition_result(vec![pr]),
                ),
            }
        }
        ElectLeadersResponse::default().with_replica_election_results(by_topic)
    }

    async fn alter_reassignments(
        &self,
        r: AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
        use kafka_protocol::messages::alter_partition_reassignments_response::{
            ReassignablePartitionResponse, ReassignableTopicResponse,
        };
        let specs: Vec<ReassignmentSpec> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| ReassignmentSpec {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
                })
            })
            .collect();
        let outcomes = match self.controller.alter_reassignments(specs).await {
            Ok(o) => o,
            Err(e) => {
                return AlterPartitionReassignmentsResponse::default()
                    .with_error_code(e.code)
                    .with_error_message(msg(e.message))
            }
        };
        let mut out: Vec<ReassignableTopicResponse> = Vec::new();
        for o in outcomes {
            let pr = ReassignablePartitionResponse::default()
                .with_partition_index(o.partition)
                .with_error_code(o.code)
                .with_error_message(o.message.map(s));
            match out.last_mut() {
                Some(t) if t.name.0.as_str() == o.topic => t.partitions.push(pr),
                _ => out.push(
                    ReassignableTopicResponse::default()
                        .with_name(TopicName(s(o.topic)))
                        .with_partitions(vec![pr]),
                ),
            }
        }
        AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(r.allow_replication_factor_change)
            .with_responses(out)
    }

    async fn list_reassignments(
        &self,
        r: ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
        use kafka_protocol::messages::list_partition_reassignments_response::{
            OngoingPartitionReassignment, OngoingTopicReassignment,
        };
        let topics = r.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                .collect()
        });
        match self.controller.list_reassignments(topics).await {
            Ok(list) => ListPartitionReassignmentsResponse::default().with_topics(
                list.into_iter()
                    .map(|(name, parts)| {
                        OngoingTopicReassignment::default()
                            .with_name(TopicName(s(name)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(i, p)| {
                                        let ids =
                                            |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect();
                                        OngoingPartitionReassignment::default()
                                            .with_partition_index(i)
                                            .with_replicas(ids(&p.replicas))
                                            .with_adding_replicas(ids(&p.adding_replicas))
                                            .with_removing_replicas(ids(&p.removing_replicas))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
            Err(e) => ListPartitionReassignmentsResponse::default()
                .with_error_code(e.code)
                .with_error_message(msg(e.message)),
        }
    }

    /// UpdateFeatures (forwarded by a broker, or from `kafka-features --bootstrap-controller`).
    async fn update_features(&self, v: i16, r: UpdateFeaturesRequest) -> UpdateFeaturesResponse {
        let outcome = match features::updates_of(&r, v) {
            Ok(updates) => self
                .controller
                .update_features(updates, r.validate_only)
                .await
                .map_err(|e| (e.code, e.message)),
            Err(why) => Err((errors::INVALID_REQUEST, why)),
        };
        features::update_features_response(&r, v, outcome.err())
    }

    /// An observer's fetch of committed metadata (Kafka's raft Fetch on `__cluster_metadata`).
    async fn fetch_metadata(&self, r: FetchRequest) -> FetchResponse {
        use kafka_protocol::messages::fetch_response::{
            FetchableTopicResponse, LeaderIdAndEpoch, PartitionData, SnapshotId,
        };
        if r.cluster_id
            .as_deref()
            .is_some_and(|c| c != self.quorum.cluster_id())
        {
            return FetchResponse::default().with_error_code(errors::INCONSISTENT_CLUSTER_ID);
        }
        let Some(t) = r.topics.first() else {
            return FetchResponse::default().with_error_code(errors::INVALID_REQUEST);
        };
        let topic_ok = t.topic.0.as_str() == METADATA_TOPIC
            || KafkaUuid::from(t.topic_id) == METADATA_TOPIC_ID;
        let Some(p) = t
            .partitions
            .first()
            .filter(|p| topic_ok && p.partition == 0)
        else {
            return FetchResponse::default().with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION);
        };
        let leader = LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(self.quorum.leader().unwrap_or(-1)))
            .with_leader_epoch(self.quorum.epoch());
        let respond = |data: PartitionData| {
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(vec![data.with_current_leader(leader.clone())])])
        };
        let base = PartitionData::default()
            .with_partition_index(0)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1);
        if !self.controller.is_active() {
            return respond(base.with_error_code(errors::NOT_LEADER_OR_FOLLOWER));
        }
        let log = self.quorum.metadata_log();
        if p.fetch_offset < log.log_start_offset() {
            let snap = log.anchor().map(|a| {
                SnapshotId::default()
                    .with_end_offset(a.end_offset)
                    .with_epoch(a.last_log_id.leader_id.term as i32)
            });
            return respond(
                base.with_snapshot_id(snap.unwrap_or_default())
                    .with_log_start_offset(log.log_start_offset()),
            );
        }
        let mut images = self.quorum.images();
        let wait = Duration::from_millis(r.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
        let _ = tokio::time::timeout(wait, async {
            loop {
                if images.borrow_and_update().next_offset() > p.fetch_offset {
                    return;
                }
                if images.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let hw = self.quorum.applied_end_offset();
        let records = if p.fetch_offset < hw {
            log.read(p.fetch_offset, (r.max_bytes.max(1 << 16)) as usize, hw)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let replica = if r.replica_state.replica_id.0 >= 0 {
            r.replica_state.replica_id.0
        } else {
            r.replica_id.0
        };
        if replica >= 0 {
            self.quorum
                .observer_fetched(replica, p.fetch_offset, p.fetch_offset >= hw);
        }
        respond(
            base.with_high_watermark(hw)
                .with_last_stable_offset(hw)
                .with_log_start_offset(log.log_start_offset())
                .with_records(Some(Bytes::from(records))),
        )
    }

    /// A chunk of a snapshot, for an observer whose position the log no longer holds.
    fn fetch_snapshot(&self, r: FetchSnapshotRequest) -> FetchSnapshotResponse {
        use kafka_protocol::messages::fetch_snapshot_response::{
            PartitionSnapshot, SnapshotId, TopicSnapshot,
        };
        if r.cluster_id
            .as_deref()
            .is_some_and(|c| c != self.quorum.cluster_id())
        {
            return FetchSnapshotResponse::default()
                .with_error_code(errors::INCONSISTENT_CLUSTER_ID);
        }
        let Some(want) = r.topics.first().and_then(|t| t.partitions.first()) else {
            return FetchSnapshotResponse::default().with_error_code(errors::INVALID_REQUEST);
        };
        let id = &want.snapshot_id;
        let path = self
            .quorum
            .metadata_log()
            .dir()
            .join(snapshot::file_name(id.end_offset, id.epoch));
        let part = PartitionSnapshot::default().with_index(0).with_snapshot_id(
            SnapshotId::default()
                .with_end_offset(id.end_offset)
                .with_epoch(id.epoch),
        );
        let result = match std::fs::read(&path) {
            Ok(bytes) => {
                let start = (want.position.max(0) as usize).min(bytes.len());
                let end = start
                    .saturating_add(r.max_bytes.max(1 << 16) as usize)
                    .min(bytes.len());
                part.with_size(bytes.len() as i64)
                    .with_position(start as i64)
                    .with_unaligned_records(Bytes::copy_from_slice(&bytes[start..end]))
            }
            Err(_) => part.with_error_code(errors::SNAPSHOT_NOT_FOUND),
        };
        FetchSnapshotResponse::default().with_topics(vec![TopicSnapshot::default()
            .with_name(TopicName(s(METADATA_TOPIC)))
            .with_partitions(vec![result])])
    }
}

/// A response frame around an already encoded body (v0 response header).
fn raw_response(correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(body);
    Bytes::from(out)
}
