//! Who may use an SSL or SASL controller listener: each request's principal (its client
//! certificate's or its login's) asked of the StandardAuthorizer over the quorum's ACLs, and the
//! answer a refused one gets.
//!
//! As in Kafka's ControllerApis, the quorum's own traffic, brokers' registrations, heartbeats
//! and metadata fetches need CLUSTER_ACTION on the cluster, DescribeQuorum and DescribeCluster
//! DESCRIBE. The admin requests brokers forward need CLUSTER_ACTION too (Kafka wraps them in an
//! Envelope, which needs it): an admin tool pointed at the controllers (`--bootstrap-controller`)
//! needs CLUSTER_ACTION for them, where Kafka would check the operation on its resource.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::auth::AuthorizerSettings;
use crate::metadata::authorizer::Authorizer;
use crate::metadata::image::MetadataImage;
use crate::protocol::{self, frame_response as frame, DecodedRequest, FrameError};
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::security::authorizer::Decision;

/// Who sent a request on the controller listener.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `User:CN=main-kafka,O=evenkeel.dev`, or `User:ANONYMOUS` without a certificate.
    pub principal: String,
    /// The caller's address, as ACL hosts name it.
    pub host: String,
    /// Whether the listener it came on checks its callers (SSL or SASL, with an authorizer); a
    /// PLAINTEXT controller listener knows no caller to check.
    pub checked: bool,
}

/// How often a refused principal is logged at INFO (a refused voter or broker retries at
/// every heartbeat); in between, at DEBUG.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The most principals whose last INFO line is remembered.
const MAX_LOGGED: usize = 1024;

/// The authorizer of an SSL or SASL controller listener, following the quorum's published
/// images.
pub struct ListenerAuthorizer {
    authorizer: Authorizer,
    images: watch::Receiver<Arc<MetadataImage>>,
    /// When each refused principal was last logged at INFO.
    logged: Mutex<HashMap<String, Instant>>,
}

impl ListenerAuthorizer {
    pub fn new(
        settings: &AuthorizerSettings,
        images: watch::Receiver<Arc<MetadataImage>>,
    ) -> ListenerAuthorizer {
        ListenerAuthorizer {
            authorizer: Authorizer::new(settings),
            images,
            logged: Mutex::default(),
        }
    }

    /// Whether `caller` may do `op` on the cluster, over the ACLs of the latest image; a
    /// refusal is logged.
    pub fn allows(&self, caller: &Caller, op: AclOperation) -> bool {
        let image = self.images.borrow().clone();
        self.authorizer.publish(&image);
        let decision = self.authorizer.current().authorize(
            &caller.principal,
            &caller.host,
            op,
            ResourceType::Cluster,
            CLUSTER_NAME,
        );
        let allowed = decision == Decision::Allowed;
        if !allowed {
            self.log_refusal(caller, op);
        }
        allowed
    }

    /// At INFO once per `REFUSAL_LOG_INTERVAL` and principal, else at DEBUG.
    fn log_refusal(&self, caller: &Caller, op: AclOperation) {
        let now = Instant::now();
        let due = {
            let mut logged = self.logged.lock();
            let last = logged.get(&caller.principal).copied();
            let due = last.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_INTERVAL);
            if due {
                if logged.len() >= MAX_LOGGED {
                    logged.clear();
                }
                logged.insert(caller.principal.clone(), now);
            }
            due
        };
        let (principal, host) = (&caller.principal, &caller.host);
        if due {
            tracing::info!(%principal, %host, operation = %op, "refused a request on the controller listener");
        } else {
            tracing::debug!(%principal, %host, operation = %op, "refused a request on the controller listener");
        }
    }
}

/// The operation on the cluster a request needs; `None` for ApiVersions and the SASL login's
/// requests, which anyone may send.
pub fn required_operation(request: &DecodedRequest) -> Option<AclOperation> {
    match request {
        DecodedRequest::ApiVersions(_)
        | DecodedRequest::SaslHandshake(_)
        | DecodedRequest::SaslAuthenticate(_) => None,
        DecodedRequest::DescribeQuorum(_) | DecodedRequest::DescribeCluster(_) => {
            Some(AclOperation::Describe)
        }
        _ => Some(AclOperation::ClusterAction),
    }
}

/// What a refusal says: which right on the cluster the principal lacks.
fn message() -> Option<StrBytes> {
    Some(protocol::str_bytes(
        "this principal may not call the controller listener: it needs CLUSTER_ACTION on the \
         cluster (DESCRIBE to describe the quorum or the cluster)",
    ))
}

/// The response frame refusing `request` (version `v`, correlation id `cid`) with `code`
/// (CLUSTER_AUTHORIZATION_FAILED), on every item the response carries and with a message where
/// the version has one; `None` for a request the controller listener does not serve.
pub fn refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    use DecodedRequest as D;
    let message_from = |first: i16| if v >= first { message() } else { None };
    let r = match request {
        D::BrokerRegistration(_) => frame(
            v,
            cid,
            &BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        D::BrokerHeartbeat(_) => frame(
            v,
            cid,
            &BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        D::UnregisterBroker(_) => frame(
            v,
            cid,
            &UnregisterBrokerResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        D::AllocateProducerIds(_) => frame(
            v,
            cid,
            &AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        D::UpdateFeatures(r) => frame(
            v,
            cid,
            &crate::metadata::features::update_features_response(
                r,
                v,
                Some((code, message().map(|m| m.to_string()).unwrap_or_default())),
            ),
        ),
        D::AlterPartition(_) => frame(
            v,
            cid,
            &AlterPartitionResponse::default().with_error_code(code),
        ),
        D::ElectLeaders(r) => frame(v, cid, &elect_refusal(r, v, code)),
        D::AlterPartitionReassignments(_) => frame(
            v,
            cid,
            &AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        D::ListPartitionReassignments(_) => frame(
            v,
            cid,
            &ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        D::DescribeQuorum(_) => frame(
            v,
            cid,
            &DescribeQuorumResponse::default()
                .with_error_code(code)
                .with_error_message(message_from(2)),
        ),
        D::DescribeCluster(_) => frame(
            v,
            cid,
            &DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        D::Fetch(_) => frame(v, cid, &FetchResponse::default().with_error_code(code)),
        D::FetchSnapshot(_) => frame(
            v,
            cid,
            &FetchSnapshotResponse::default().with_error_code(code),
        ),
        other => return item_refusal(other, v, cid, code),
    };
    Some(r)
}

/// ElectLeaders refused: the error on every partition asked for, and on the whole from v1.
fn elect_refusal(r: &ElectLeadersRequest, v: i16, code: i16) -> ElectLeadersResponse {
    let results = r.topic_partitions.iter().flatten().map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            elect_leaders_response::PartitionResult::default()
                .with_partition_id(*p)
                .with_error_code(code)
        });
        elect_leaders_response::ReplicaElectionResult::default()
            .with_topic(t.topic.clone())
            .with_partition_result(partitions.collect())
    });
    ElectLeadersResponse::default()
        .with_error_code(if v >= 1 { code } else { 0 })
        .with_replica_election_results(results.collect())
}

/// The admin requests, whose responses carry an error per item.
fn item_refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    topic_refusal(request, v, cid, code)
        .or_else(|| config_refusal(request, v, cid, code))
        .or_else(|| security_refusal(request, v, cid, code))
        .or_else(|| voter_refusal(request, v, cid, code))
}

/// AddRaftVoter and RemoveRaftVoter refused.
fn voter_refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    use DecodedRequest as D;
    let r = match request {
        D::AddRaftVoter(_) => frame(
            v,
            cid,
            &AddRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        D::RemoveRaftVoter(_) => frame(
            v,
            cid,
            &RemoveRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        _ => return None,
    };
    Some(r)
}

/// CreateTopics, DeleteTopics and CreatePartitions refused on every topic.
fn topic_refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    use DecodedRequest as D;
    let message_from = |first: i16| if v >= first { message() } else { None };
    let r = match request {
        D::CreateTopics(r) => frame(
            v,
            cid,
            &CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        create_topics_response::CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        D::DeleteTopics(r) => {
            let by_state = r.topics.iter().map(|t| (t.name.clone(), t.topic_id));
            let by_name = r
                .topic_names
                .iter()
                .map(|n| (Some(n.clone()), Default::default()));
            frame(
                v,
                cid,
                &DeleteTopicsResponse::default().with_responses(
                    by_state
                        .chain(by_name)
                        .map(|(name, id)| {
                            delete_topics_response::DeletableTopicResult::default()
                                .with_name(name)
                                .with_topic_id(id)
                                .with_error_code(code)
                                .with_error_message(message_from(5))
                        })
                        .collect(),
                ),
            )
        }
        D::CreatePartitions(r) => frame(
            v,
            cid,
            &CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        create_partitions_response::CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        _ => return None,
    };
    Some(r)
}

/// AlterConfigs and IncrementalAlterConfigs refused on every resource.
fn config_refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    use DecodedRequest as D;
    let r = match request {
        D::AlterConfigs(r) => frame(
            v,
            cid,
            &AlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|c| {
                        alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        D::IncrementalAlterConfigs(r) => frame(
            v,
            cid,
            &IncrementalAlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|c| {
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(c.resource_type)
                            .with_resource_name(c.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        _ => return None,
    };
    Some(r)
}

/// CreateAcls, DeleteAcls, AlterUserScramCredentials and AlterClientQuotas refused on every
/// item.
fn security_refusal(
    request: &DecodedRequest,
    v: i16,
    cid: i32,
    code: i16,
) -> Option<Result<Bytes, FrameError>> {
    use DecodedRequest as D;
    let r = match request {
        D::CreateAcls(r) => frame(
            v,
            cid,
            &CreateAclsResponse::default().with_results(
                r.creations
                    .iter()
                    .map(|_| {
                        create_acls_response::AclCreationResult::default()
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        D::DeleteAcls(r) => frame(
            v,
            cid,
            &DeleteAclsResponse::default().with_filter_results(
                r.filters
                    .iter()
                    .map(|_| {
                        delete_acls_response::DeleteAclsFilterResult::default()
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        D::AlterUserScramCredentials(r) => {
            let users = r.deletions.iter().map(|d| d.name.clone());
            let users = users.chain(r.upsertions.iter().map(|u| u.name.clone()));
            let mut users: Vec<StrBytes> = users.collect();
            users.sort();
            users.dedup();
            frame(v, cid, &
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|user| {
                            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                                .with_user(user)
                                .with_error_code(code)
                                .with_error_message(message())
                        })
                        .collect(),
                ),
            )
        }
        D::AlterClientQuotas(r) => frame(
            v,
            cid,
            &protocol::client_quotas::refuse_all(r, code, message()),
        ),
        _ => return None,
    };
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::errors;
    use bytes::Buf;
    use kafka_protocol::protocol::{Decodable, HeaderVersion};

    #[test]
    fn describe_needs_describe_and_everything_else_cluster_action() {
        let quorum = DecodedRequest::DescribeQuorum(Default::default());
        assert_eq!(required_operation(&quorum), Some(AclOperation::Describe));
        let versions = DecodedRequest::ApiVersions(Default::default());
        assert_eq!(required_operation(&versions), None);
        let login = DecodedRequest::SaslAuthenticate(Default::default());
        assert_eq!(required_operation(&login), None);
        let heartbeat = DecodedRequest::BrokerHeartbeat(Default::default());
        assert_eq!(
            required_operation(&heartbeat),
            Some(AclOperation::ClusterAction)
        );
    }

    #[test]
    fn a_refused_admin_request_names_every_item() {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(protocol::str_bytes("a"))),
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(protocol::str_bytes("b"))),
        ]);
        let code = errors::CLUSTER_AUTHORIZATION_FAILED;
        let refused = refusal(&DecodedRequest::CreateTopics(req), 7, 1, code);
        let mut frame = refused.expect("a CreateTopics refusal").unwrap();
        frame.advance(4); // the size
        let header_version = CreateTopicsResponse::header_version(7);
        ResponseHeader::decode(&mut frame, header_version).unwrap();
        let r = CreateTopicsResponse::decode(&mut frame, 7).unwrap();
        let names: Vec<&str> = r.topics.iter().map(|t| t.name.0.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(r.topics.iter().all(|t| t.error_code == code));
    }

    /// A default request of each API the controller listener serves (those anyone may send
    /// aside: ApiVersions and the SASL login).
    fn served() -> Vec<(ApiKey, DecodedRequest)> {
        use DecodedRequest as D;
        vec![
            (ApiKey::Fetch, D::Fetch(Default::default())),
            (ApiKey::CreateTopics, D::CreateTopics(Default::default())),
            (ApiKey::DeleteTopics, D::DeleteTopics(Default::default())),
            (ApiKey::AlterConfigs, D::AlterConfigs(Default::default())),
            (
                ApiKey::CreatePartitions,
                D::CreatePartitions(Default::default()),
            ),
            (
                ApiKey::IncrementalAlterConfigs,
                D::IncrementalAlterConfigs(Default::default()),
            ),
            (
                ApiKey::DescribeCluster,
                D::DescribeCluster(Default::default()),
            ),
            (ApiKey::ElectLeaders, D::ElectLeaders(Default::default())),
            (
                ApiKey::AlterPartitionReassignments,
                D::AlterPartitionReassignments(Default::default()),
            ),
            (
                ApiKey::ListPartitionReassignments,
                D::ListPartitionReassignments(Default::default()),
            ),
            (
                ApiKey::DescribeQuorum,
                D::DescribeQuorum(Default::default()),
            ),
            (
                ApiKey::AlterPartition,
                D::AlterPartition(Default::default()),
            ),
            (ApiKey::FetchSnapshot, D::FetchSnapshot(Default::default())),
            (
                ApiKey::BrokerRegistration,
                D::BrokerRegistration(Default::default()),
            ),
            (
                ApiKey::BrokerHeartbeat,
                D::BrokerHeartbeat(Default::default()),
            ),
            (
                ApiKey::UnregisterBroker,
                D::UnregisterBroker(Default::default()),
            ),
            (
                ApiKey::AllocateProducerIds,
                D::AllocateProducerIds(Default::default()),
            ),
            (ApiKey::CreateAcls, D::CreateAcls(Default::default())),
            (ApiKey::DeleteAcls, D::DeleteAcls(Default::default())),
            (
                ApiKey::UpdateFeatures,
                D::UpdateFeatures(Default::default()),
            ),
            (
                ApiKey::AlterUserScramCredentials,
                D::AlterUserScramCredentials(Default::default()),
            ),
            (
                ApiKey::AlterClientQuotas,
                D::AlterClientQuotas(Default::default()),
            ),
            (ApiKey::AddRaftVoter, D::AddRaftVoter(Default::default())),
            (
                ApiKey::RemoveRaftVoter,
                D::RemoveRaftVoter(Default::default()),
            ),
        ]
    }

    #[test]
    fn every_served_request_has_a_refusal_that_encodes_at_every_version() {
        let table = crate::protocol::api_versions::CONTROLLER;
        let requests = served();
        let code = errors::CLUSTER_AUTHORIZATION_FAILED;
        let open = [
            ApiKey::ApiVersions,
            ApiKey::SaslHandshake,
            ApiKey::SaslAuthenticate,
        ];
        for (key, _, _) in table.0.iter().filter(|(k, _, _)| !open.contains(k)) {
            let (_, request) = requests
                .iter()
                .find(|(k, _)| k == key)
                .unwrap_or_else(|| panic!("{key:?} is served but has no refusal here"));
            let (low, high) = table.range(*key).unwrap();
            for v in low..=high {
                let refused = refusal(request, v, 1, code)
                    .unwrap_or_else(|| panic!("{key:?} v{v}: no refusal"));
                if let Err(e) = refused {
                    panic!("{key:?} v{v}: {e}");
                }
            }
        }
    }
}
