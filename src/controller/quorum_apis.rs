//! The controller listener's requests about the metadata quorum itself: DescribeQuorum and the
//! controller endpoints of DescribeCluster, and the dynamic voter changes of KIP-853
//! (AddRaftVoter, RemoveRaftVoter), checked and answered as Kafka's leader does.

use std::time::Duration;

use kafka_protocol::messages::*;

use super::apis::{msg, ControllerNode};
use super::raft::voters::{AddVoter, VoterChangeError};
use super::METADATA_TOPIC;
use crate::protocol::{errors, str_bytes as s};

/// The longest a new voter may take to catch up as a learner before AddRaftVoter gives up.
const MAX_CATCH_UP: Duration = Duration::from_secs(30);
/// The least: Kafka's `controller.quorum.request.timeout.ms` default.
const MIN_CATCH_UP: Duration = Duration::from_secs(2);

/// A voter as clients reach it: id, controller host and port.
struct VoterEndpoint {
    id: i32,
    host: String,
    port: u16,
}

impl ControllerNode {
    /// The voters with their controller listener: a static quorum's from its configuration
    /// (this node's bound address for an entry without a port), a dynamic quorum's from the
    /// membership in the metadata log.
    fn voter_endpoints(&self) -> Vec<VoterEndpoint> {
        let members = self.quorum.voters();
        if members.is_empty() {
            return self
                .voters
                .iter()
                .map(|v| {
                    let (host, port) = self.configured_address(v);
                    VoterEndpoint {
                        id: v.id,
                        host,
                        port,
                    }
                })
                .collect();
        }
        members
            .into_iter()
            .map(|m| {
                let (host, port) = match self.voters.iter().find(|v| v.id == m.id) {
                    Some(v) => self.configured_address(v),
                    None => m.node.host_port(),
                };
                VoterEndpoint {
                    id: m.id,
                    host,
                    port,
                }
            })
            .collect()
    }

    /// Where clients reach configured voter `v`: its address, or this node's bound one when its
    /// entry has no port (a cluster of one on an ephemeral port).
    fn configured_address(&self, v: &crate::config::cluster::Voter) -> (String, u16) {
        match self.bound.get() {
            Some(addr) if v.id == self.quorum.node_id() && v.port == 0 => {
                (addr.ip().to_string(), addr.port())
            }
            _ => (v.host.clone(), v.port),
        }
    }

    /// The quorum as the leader sees it, with what version `v` carries: the replicas' fetch
    /// times from v1, their directory ids and the voters' endpoints from v2.
    pub(super) fn describe_quorum(&self, v: i16) -> DescribeQuorumResponse {
        use describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
        let topic = TopicName(s(METADATA_TOPIC));
        let status = match self.controller.describe_quorum() {
            Ok(st) => st,
            Err(_) => {
                let leader = self.quorum.leader().unwrap_or(-1);
                return DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
                    .with_topic_name(topic)
                    .with_partitions(vec![PartitionData::default()
                        .with_error_code(errors::NOT_LEADER_OR_FOLLOWER)
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(self.quorum.epoch())
                        .with_high_watermark(-1)])]);
            }
        };
        let state = |r: &super::raft::ReplicaProgress| {
            let state = ReplicaState::default()
                .with_replica_id(BrokerId(r.id))
                .with_log_end_offset(r.log_end_offset);
            match v {
                0 => state,
                1 => state
                    .with_last_fetch_timestamp(r.last_fetch_ms)
                    .with_last_caught_up_timestamp(r.last_caught_up_ms),
                _ => state
                    .with_replica_directory_id(r.directory_id.into())
                    .with_last_fetch_timestamp(r.last_fetch_ms)
                    .with_last_caught_up_timestamp(r.last_caught_up_ms),
            }
        };
        let nodes = self
            .voter_endpoints()
            .into_iter()
            .filter(|_| v >= 2)
            .map(|e| {
                Node::default()
                    .with_node_id(BrokerId(e.id))
                    .with_listeners(vec![Listener::default()
                        .with_name(s(self.listener.clone()))
                        .with_host(s(e.host))
                        .with_port(e.port)])
            })
            .collect();
        DescribeQuorumResponse::default()
            .with_topics(vec![TopicData::default()
                .with_topic_name(topic)
                .with_partitions(vec![PartitionData::default()
                    .with_leader_id(BrokerId(status.leader_id))
                    .with_leader_epoch(status.leader_epoch)
                    .with_high_watermark(status.high_watermark)
                    .with_current_voters(status.voters.iter().map(state).collect())
                    .with_observers(status.observers.iter().map(state).collect())])])
            .with_nodes(nodes)
    }

    pub(super) fn describe_cluster(
        &self,
        v: i16,
        r: DescribeClusterRequest,
    ) -> DescribeClusterResponse {
        use describe_cluster_response::DescribeClusterBroker;
        const CONTROLLER_ENDPOINTS: i8 = 2;
        let base = DescribeClusterResponse::default()
            .with_cluster_id(s(self.quorum.cluster_id()))
            .with_endpoint_type(CONTROLLER_ENDPOINTS);
        if v >= 1 && r.endpoint_type != CONTROLLER_ENDPOINTS {
            return base
                .with_error_code(errors::MISMATCHED_ENDPOINT_TYPE)
                .with_error_message(msg(
                    "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER",
                ))
                .with_controller_id(BrokerId(-1));
        }
        let brokers = self
            .voter_endpoints()
            .into_iter()
            .map(|e| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(e.id))
                    .with_host(s(e.host))
                    .with_port(e.port as i32)
            })
            .collect();
        base.with_controller_id(BrokerId(self.quorum.leader().unwrap_or(-1)))
            .with_brokers(brokers)
    }

    /// Whether a voter change names another cluster (Kafka's first check).
    fn other_cluster(&self, cluster_id: Option<&str>) -> Option<VoterChangeError> {
        cluster_id
            .filter(|c| *c != self.quorum.cluster_id())
            .map(|c| {
                VoterChangeError::new(
                    errors::INCONSISTENT_CLUSTER_ID,
                    format!(
                        "The request is for cluster {c}, this controller is of cluster {}",
                        self.quorum.cluster_id()
                    ),
                )
            })
    }

    /// AddRaftVoter (`kafka-metadata-quorum add-controller`, directly or forwarded by a broker).
    #[tracing::instrument(skip_all, fields(voter = r.voter_id))]
    pub(super) async fn add_raft_voter(&self, r: AddRaftVoterRequest) -> AddRaftVoterResponse {
        let outcome = match self.other_cluster(r.cluster_id.as_deref()) {
            Some(e) => Err(e),
            None => {
                let req = AddVoter {
                    id: r.voter_id,
                    directory_id: r.voter_directory_id.into(),
                    listeners: r
                        .listeners
                        .iter()
                        .map(|l| (l.name.to_string(), l.host.to_string(), l.port))
                        .collect(),
                };
                let timeout = Duration::from_millis(r.timeout_ms.max(0) as u64)
                    .clamp(MIN_CATCH_UP, MAX_CATCH_UP);
                self.quorum.add_voter(req, timeout).await
            }
        };
        let (code, message) = answer(outcome);
        AddRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    }

    /// RemoveRaftVoter (`kafka-metadata-quorum remove-controller`).
    #[tracing::instrument(skip_all, fields(voter = r.voter_id))]
    pub(super) async fn remove_raft_voter(
        &self,
        r: RemoveRaftVoterRequest,
    ) -> RemoveRaftVoterResponse {
        let outcome = match self.other_cluster(r.cluster_id.as_deref()) {
            Some(e) => Err(e),
            None => {
                self.quorum
                    .remove_voter(r.voter_id, r.voter_directory_id.into())
                    .await
            }
        };
        let (code, message) = answer(outcome);
        RemoveRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    }
}

fn answer(outcome: Result<(), VoterChangeError>) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (errors::NONE, None),
        Err(e) => {
            tracing::info!(code = e.code, reason = %e.message, "voter change refused");
            (e.code, Some(e.message))
        }
    }
}
