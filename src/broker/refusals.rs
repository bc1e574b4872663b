//! Requests refused whole before their handler runs, as Kafka's KafkaApis refuses them: a group
//! request for a group the session may not READ, a cluster operation it may not do.

use kafka_protocol::messages::*;

use super::auth::{Action, Session};
use super::Broker;
use crate::protocol::{errors, DecodedRequest};
use crate::security::acl::AclOperation;

/// A request refused whole before its handler runs: GROUP_AUTHORIZATION_FAILED for a group the
/// session may not READ (join, sync, heartbeat, leave, commit, and the consumer protocol's
/// heartbeat), CLUSTER_AUTHORIZATION_FAILED for
/// a cluster operation it may not do.
pub enum Refusal {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    ConsumerHeartbeat(ConsumerGroupHeartbeatResponse),
    Leave(LeaveGroupResponse),
    Commit(OffsetCommitResponse),
    Elect(ElectLeadersResponse),
    Reassign(AlterPartitionReassignmentsResponse),
    ListReassignments(ListPartitionReassignmentsResponse),
    Quorum(DescribeQuorumResponse),
    Unregister(UnregisterBrokerResponse),
    AddVoter(AddRaftVoterResponse),
    RemoveVoter(RemoveRaftVoterResponse),
}

/// The cluster operations Kafka authorizes on the cluster resource: ALTER to elect leaders,
/// reassign partitions, unregister a broker or add or remove a voter; DESCRIBE to list
/// reassignments or describe the quorum.
pub fn refuse_cluster_request(
    broker: &Broker,
    session: &Session,
    request: &DecodedRequest,
) -> Option<Refusal> {
    let op = match request {
        DecodedRequest::ElectLeaders(_)
        | DecodedRequest::AlterPartitionReassignments(_)
        | DecodedRequest::UnregisterBroker(_)
        | DecodedRequest::AddRaftVoter(_)
        | DecodedRequest::RemoveRaftVoter(_) => AclOperation::Alter,
        DecodedRequest::ListPartitionReassignments(_) | DecodedRequest::DescribeQuorum(_) => {
            AclOperation::Describe
        }
        _ => return None,
    };
    if broker.authorize(session, Action::cluster(op)) {
        return None;
    }
    let code = errors::CLUSTER_AUTHORIZATION_FAILED;
    Some(match request {
        DecodedRequest::ElectLeaders(_) => {
            Refusal::Elect(ElectLeadersResponse::default().with_error_code(code))
        }
        DecodedRequest::AlterPartitionReassignments(_) => Refusal::Reassign(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(None),
        ),
        DecodedRequest::ListPartitionReassignments(_) => Refusal::ListReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(None),
        ),
        DecodedRequest::DescribeQuorum(_) => {
            Refusal::Quorum(DescribeQuorumResponse::default().with_error_code(code))
        }
        DecodedRequest::AddRaftVoter(_) => {
            Refusal::AddVoter(AddRaftVoterResponse::default().with_error_code(code))
        }
        DecodedRequest::RemoveRaftVoter(_) => {
            Refusal::RemoveVoter(RemoveRaftVoterResponse::default().with_error_code(code))
        }
        _ => Refusal::Unregister(UnregisterBrokerResponse::default().with_error_code(code)),
    })
}

pub fn refuse_group_request(
    broker: &Broker,
    session: &Session,
    request: &DecodedRequest,
) -> Option<Refusal> {
    let group = match request {
        DecodedRequest::JoinGroup(r) => &r.group_id,
        DecodedRequest::SyncGroup(r) => &r.group_id,
        DecodedRequest::Heartbeat(r) => &r.group_id,
        DecodedRequest::LeaveGroup(r) => &r.group_id,
        DecodedRequest::OffsetCommit(r) => &r.group_id,
        DecodedRequest::ConsumerGroupHeartbeat(r) => &r.group_id,
        _ => return None,
    };
    if broker.authorize(session, Action::group(AclOperation::Read, group.as_str())) {
        return None;
    }
    let code = errors::GROUP_AUTHORIZATION_FAILED;
    Some(match request {
        DecodedRequest::JoinGroup(_) => Refusal::Join(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        DecodedRequest::SyncGroup(_) => {
            Refusal::Sync(SyncGroupResponse::default().with_error_code(code))
        }
        DecodedRequest::Heartbeat(_) => {
            Refusal::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        DecodedRequest::LeaveGroup(_) => {
            Refusal::Leave(LeaveGroupResponse::default().with_error_code(code))
        }
        DecodedRequest::OffsetCommit(r) => Refusal::Commit(commit_refused(r, code)),
        DecodedRequest::ConsumerGroupHeartbeat(_) => Refusal::ConsumerHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        _ => return None,
    })
}

/// Every partition of an OffsetCommit answered with `code`.
fn commit_refused(r: &OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    let topics = r
        .topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}
