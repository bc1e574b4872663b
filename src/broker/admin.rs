//! Admin APIs. The ones that change metadata (CreateTopics, DeleteTopics, CreatePartitions,
//! AlterConfigs, IncrementalAlterConfigs, ElectLeaders, partition reassignments, DescribeQuorum,
//! UnregisterBroker, AddRaftVoter, RemoveRaftVoter) are forwarded to the active controller, as a KRaft broker does; DeleteRecords
//! and DescribeConfigs are answered here.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};

use super::auth::{Action, Session};
use super::client_quotas::{take_partition_additions, take_topic_creations, take_topic_deletions};
use super::controller_channel::{is_not_controller, DEFAULT_RETRY_TIMEOUT};
use super::quotas::ClientIdentity;
use super::{msg, Broker, Outcome};
use crate::config::{topic_config_entries, SOURCE_STATIC_BROKER};
use crate::metadata::image::MetadataImage;
use crate::metadata::is_internal_topic;
use crate::metadata::records::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::protocol::errors;
use crate::security::acl::AclOperation;
use crate::storage::TopicPartition;

use crate::protocol::str_bytes as s;

/// Sends `req` to the active controller and answers with its response; `failed` builds the
/// answer when no controller could be reached in time; `then` may wait for this broker to see
/// the change before answering.
pub(super) fn forward<R, G, T, F>(
    broker: &Arc<Broker>,
    version: i16,
    req: R,
    not_controller: fn(&R::Response) -> bool,
    failed: G,
    then: T,
) -> Outcome<R::Response>
where
    R: Request + Send + Sync + 'static,
    R::Response: Send + 'static,
    G: FnOnce(i16) -> R::Response + Send + 'static,
    T: FnOnce(Arc<Broker>, R::Response) -> F + Send + 'static,
    F: Future<Output = R::Response> + Send,
{
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        match broker
            .controller
            .call(&req, version, DEFAULT_RETRY_TIMEOUT, not_controller)
            .await
        {
            Ok(resp) => then(broker, resp).await,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the active controller");
                failed(errors::REQUEST_TIMED_OUT)
            }
        }
    }))
}

async fn as_is<T>(_: Arc<Broker>, r: T) -> T {
    r
}

pub fn create_topics(
    broker: &Arc<Broker>,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    mut req: CreateTopicsRequest,
) -> Outcome<CreateTopicsResponse> {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    // Clients may not create internal topics; the broker creates `__consumer_offsets` itself.
    let mut refused = Vec::new();
    req.topics.retain(|t| {
        if !super::metadata::may_create(broker, session, &t.name) {
            refused.push(
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED),
            );
            false
        } else if is_internal_topic(&t.name) {
            refused.push(
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_error_code(errors::INVALID_TOPIC_EXCEPTION)
                    .with_error_message(msg(format!(
                        "Creation of internal topic {} is prohibited.",
                        t.name.0
                    ))),
            );
            false
        } else {
            true
        }
    });
    let throttle_ms = take_topic_creations(broker, session, who, version, &mut req, &mut refused);
    if req.topics.is_empty() {
        return Outcome::Now(
            CreateTopicsResponse::default()
                .with_topics(refused)
                .with_throttle_time_ms(throttle_ms),
        );
    }
    let validate_only = req.validate_only;
    let names: Vec<TopicName> = req.topics.iter().map(|t| t.name.clone()).collect();
    let failed = move |code| {
        CreateTopicsResponse::default().with_topics(
            names
                .into_iter()
                .map(|n| {
                    CreatableTopicResult::default()
                        .with_name(n)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_error_code(code)
                })
                .collect(),
        )
    };
    forward(
        broker,
        version,
        req,
        |r| r.topics.iter().any(|t| is_not_controller(t.error_code)),
        failed,
        move |broker, mut resp| async move {
            if !validate_only {
                let created: Vec<String> = resp
                    .topics
                    .iter()
                    .filter(|t| t.error_code == errors::NONE)
                    .map(|t| t.name.0.to_string())
                    .collect();
                broker
                    .wait_for_image(|img| created.iter().all(|n| img.topic(n).is_some()))
                    .await;
            }
            resp.topics.extend(refused);
            resp.with_throttle_time_ms(throttle_ms)
        },
    )
}

pub fn delete_topics(
    broker: &Arc<Broker>,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    mut req: DeleteTopicsRequest,
) -> Outcome<DeleteTopicsResponse> {
    let mut refused = refuse_undeletable(broker, session, &mut req);
    let throttle_ms = take_topic_deletions(broker, session, who, version, &mut req, &mut refused);
    if req.topic_names.is_empty() && req.topics.is_empty() {
        return Outcome::Now(
            DeleteTopicsResponse::default()
                .with_responses(refused)
                .with_throttle_time_ms(throttle_ms),
        );
    }
    forward(
        broker,
        version,
        req,
        |r| r.responses.iter().any(|t| is_not_controller(t.error_code)),
        |_| DeleteTopicsResponse::default(),
        move |broker, mut resp| async move {
            resp.responses.extend(refused);
            let gone: Vec<uuid::Uuid> = resp
                .responses
                .iter()
                .filter(|t| t.error_code == errors::NONE)
                .map(|t| t.topic_id)
                .collect();
            broker
                .wait_for_image(|img| {
                    gone.iter()
                        .all(|id| img.topic_by_id(&(*id).into()).is_none())
                })
                .await;
            resp.with_throttle_time_ms(throttle_ms)
        },
    )
}

/// Takes out of a DeleteTopics request the topics `session` may not DELETE (by name, or by id
/// as the image names it), answered TOPIC_AUTHORIZATION_FAILED.
fn refuse_undeletable(
    broker: &Broker,
    session: &Session,
    req: &mut DeleteTopicsRequest,
) -> Vec<delete_topics_response::DeletableTopicResult> {
    use delete_topics_response::DeletableTopicResult;
    let img = broker.image();
    let may = |name: &str| broker.authorize(session, Action::topic(AclOperation::Delete, name));
    let denied = |name: &str, id: uuid::Uuid| {
        DeletableTopicResult::default()
            .with_name(Some(TopicName(s(name.to_string()))))
            .with_topic_id(id)
            .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
    };
    let mut refused = Vec::new();
    req.topic_names.retain(|n| {
        let ok = may(n);
        if !ok {
            refused.push(denied(n, uuid::Uuid::nil()));
        }
        ok
    });
    req.topics.retain(|t| {
        let name = match &t.name {
            Some(n) => n.0.to_string(),
            None => img
                .topic_by_id(&t.topic_id.into())
                .map(|t| t.name.clone())
                .unwrap_or_default(),
        };
        let ok = may(&name);
        if !ok {
            refused.push(denied(&name, t.topic_id));
        }
        ok
    });
    refused
}

pub fn create_partitions(
    broker: &Arc<Broker>,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    mut req: CreatePartitionsRequest,
) -> Outcome<CreatePartitionsResponse> {
    use create_partitions_response::CreatePartitionsTopicResult;
    let mut refused = Vec::new();
    req.topics.retain(|t| {
        let ok = broker.authorize(session, Action::topic(AclOperation::Alter, &t.name));
        if !ok {
            refused.push(
                CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(None),
            );
        }
        ok
    });
    let throttle_ms =
        take_partition_additions(broker, session, who, version, &mut req, &mut refused);
    if req.topics.is_empty() {
        return Outcome::Now(
            CreatePartitionsResponse::default()
                .with_results(refused)
                .with_throttle_time_ms(throttle_ms),
        );
    }
    let wanted: Vec<(String, i32)> = if req.validate_only {
        Vec::new()
    } else {
        req.topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.count))
            .collect()
    };
    forward(
        broker,
        version,
        req,
        |r| r.results.iter().any(|t| is_not_controller(t.error_code)),
        |_| CreatePartitionsResponse::default(),
        move |broker, mut resp| async move {
            let ok: Vec<(String, i32)> = wanted
                .into_iter()
                .filter(|(n, _)| {
                    resp.results
                        .iter()
                        .any(|r| r.name.0.as_str() == n && r.error_code == errors::NONE)
                })
                .collect();
            broker
                .wait_for_image(|img| {
                    ok.iter().all(|(n, c)| {
                        img.topic(n)
                            .is_some_and(|t| t.partitions.len() as i32 >= *c)
                    })
                })
                .await;
            resp.results.extend(refused);
            resp.with_throttle_time_ms(throttle_ms)
        },
    )
}

/// AlterConfigs and IncrementalAlterConfigs alike: the resources `session` may not alter are
/// answered here, the rest forwarded to the active controller; the answer waits until this
/// broker's image shows what `$expected` says the alteration leaves, so a DescribeConfigs that
/// follows reads the client's own write.
macro_rules! forward_alteration {
    ($broker:expr, $session:expr, $version:expr, $req:expr, $resp:ty, $refused:ty, $shape:expr, $expected:expr) => {{
        let mut req = $req;
        let malformed: Vec<Option<String>> = $shape(&req.resources);
        let refused = take_unalterable(
            $broker,
            $session,
            &mut req.resources,
            malformed,
            |r| (r.resource_type, &r.resource_name),
            |r, code, message| {
                <$refused>::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone())
                    .with_error_code(code)
                    .with_error_message(message.map(s))
            },
        );
        if req.resources.is_empty() {
            return Outcome::Now(<$resp>::default().with_responses(refused));
        }
        let expected: Vec<ExpectedConfigs> = match req.validate_only {
            true => Vec::new(),
            false => req.resources.iter().map($expected).collect(),
        };
        forward(
            $broker,
            $version,
            req,
            |r| r.responses.iter().any(|t| is_not_controller(t.error_code)),
            |_| <$resp>::default(),
            move |broker, mut resp| async move {
                let applied: Vec<ExpectedConfigs> = expected
                    .into_iter()
                    .filter(|e| {
                        resp.responses.iter().any(|r| {
                            r.error_code == errors::NONE
                                && r.resource_type == e.resource_type
                                && r.resource_name.as_str() == e.name
                        })
                    })
                    .collect();
                broker
                    .wait_for_image(|img| applied.iter().all(|e| e.shown_by(img)))
                    .await;
                resp.responses.extend(refused);
                resp
            },
        )
    }};
}

pub fn alter_configs(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: AlterConfigsRequest,
) -> Outcome<AlterConfigsResponse> {
    forward_alteration!(
        broker,
        session,
        version,
        req,
        AlterConfigsResponse,
        alter_configs_response::AlterConfigsResourceResponse,
        |rs: &[alter_configs_request::AlterConfigsResource]| {
            repeated_resources(
                rs.iter()
                    .map(|r| (r.resource_type, r.resource_name.as_str())),
            )
        },
        |r| ExpectedConfigs {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            keys: r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
            exact: true,
        }
    )
}

pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: IncrementalAlterConfigsRequest,
) -> Outcome<IncrementalAlterConfigsResponse> {
    forward_alteration!(
        broker,
        session,
        version,
        req,
        IncrementalAlterConfigsResponse,
        incremental_alter_configs_response::AlterConfigsResourceResponse,
        |rs: &[incremental_alter_configs_request::AlterConfigsResource]| {
            let repeated = repeated_resources(
                rs.iter()
                    .map(|r| (r.resource_type, r.resource_name.as_str())),
            );
            repeated
                .into_iter()
                .zip(rs)
                .map(|(repeated, r)| repeated.or_else(|| malformed_configs(&r.configs)))
                .collect::<Vec<_>>()
        },
        |r| ExpectedConfigs {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            keys: incremental_keys(&r.configs),
            exact: false,
        }
    )
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// The values IncrementalAlterConfigs leaves: SET and DELETE leave one this broker can foresee;
/// APPEND and SUBTRACT a list it cannot. (A key named twice or a SET without a value was refused
/// before forwarding, `malformed_configs`.)
fn incremental_keys(
    configs: &[incremental_alter_configs_request::AlterableConfig],
) -> BTreeMap<String, Option<String>> {
    configs
        .iter()
        .filter_map(|c| match c.config_operation {
            OP_SET | OP_DELETE => {
                Some((c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
            }
            _ => None,
        })
        .collect()
}

/// What an alteration leaves in one resource's dynamic configs: each key's value, or `None`
/// where it is removed; `exact` when no
/// other key remains (AlterConfigs replaces the whole set). Another writer's change at the same
/// moment, or the topic's deletion, can keep the image from showing it: the wait is bounded.
struct ExpectedConfigs {
    resource_type: i8,
    name: String,
    keys: BTreeMap<String, Option<String>>,
    exact: bool,
}

impl ExpectedConfigs {
    fn shown_by(&self, img: &MetadataImage) -> bool {
        let current = match self.resource_type {
            RESOURCE_TOPIC => img.topic_configs(&self.name),
            RESOURCE_BROKER => img.broker_configs(&self.name).cloned().unwrap_or_default(),
            _ => return true,
        };
        let keys_match = self.keys.iter().all(|(k, v)| current.get(k) == v.as_ref());
        let set = self.keys.iter().filter(|(_, v)| v.is_some()).count();
        keys_match && (!self.exact || current.len() == set)
    }
}

/// Takes out of `resources` the malformed ones (INVALID_REQUEST with the message at their index
/// in `malformed`, as Kafka's broker checks before it forwards) and the ones `session` may not
/// alter, answered by `refused`.
fn take_unalterable<R, T>(
    broker: &Broker,
    session: &Session,
    resources: &mut Vec<R>,
    malformed: Vec<Option<String>>,
    key: impl Fn(&R) -> (i8, &StrBytes),
    refused: impl Fn(&R, i16, Option<String>) -> T,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut malformed = malformed.into_iter();
    resources.retain(|r| {
        if let Some(message) = malformed.next().flatten() {
            out.push(refused(r, errors::INVALID_REQUEST, Some(message)));
            return false;
        }
        let (resource_type, name) = key(r);
        match config_denied(broker, session, resource_type, name, true) {
            Some(code) => {
                out.push(refused(r, code, None));
                false
            }
            None => true,
        }
    });
    out
}

/// Kafka's refusal of a resource a request names more than once (all its occurrences).
fn repeated_resources<'a>(keys: impl Iterator<Item = (i8, &'a str)>) -> Vec<Option<String>> {
    let keys: Vec<(i8, &str)> = keys.collect();
    keys.iter()
        .map(|k| {
            (keys.iter().filter(|o| *o == k).count() > 1)
                .then(|| "Each resource must appear at most once.".to_string())
        })
        .collect()
}

/// Kafka's refusal of an IncrementalAlterConfigs resource that names a key twice, or gives no
/// value to an operation other than DELETE.
fn malformed_configs(
    configs: &[incremental_alter_configs_request::AlterableConfig],
) -> Option<String> {
    let mut seen = std::collections::BTreeSet::new();
    if !configs.iter().all(|c| seen.insert(c.name.as_str())) {
        return Some("Error due to duplicate config keys".into());
    }
    let nulls: Vec<&str> = configs
        .iter()
        .filter(|c| c.config_operation != OP_DELETE && c.value.is_none())
        .map(|c| c.name.as_str())
        .collect();
    (!nulls.is_empty()).then(|| format!("Null value not supported for : {}", nulls.join(", ")))
}

/// Why `session` may not describe (`alter`: alter) the configs of a resource: a topic's need
/// DESCRIBE_CONFIGS (ALTER_CONFIGS) on the topic, a broker's on the cluster.
fn config_denied(
    broker: &Broker,
    session: &Session,
    resource_type: i8,
    name: &str,
    alter: bool,
) -> Option<i16> {
    let op = match alter {
        true => AclOperation::AlterConfigs,
        false => AclOperation::DescribeConfigs,
    };
    match resource_type {
        RESOURCE_TOPIC => (!broker.authorize(session, Action::topic(op, name)))
            .then_some(errors::TOPIC_AUTHORIZATION_FAILED),
        RESOURCE_BROKER => (!broker.authorize(session, Action::cluster(op)))
            .then_some(errors::CLUSTER_AUTHORIZATION_FAILED),
        _ => None,
    }
}

pub fn elect_leaders(
    broker: &Arc<Broker>,
    version: i16,
    req: ElectLeadersRequest,
) -> Outcome<ElectLeadersResponse> {
    forward(
        broker,
        version,
        req,
        |r| is_not_controller(r.error_code),
        |code| ElectLeadersResponse::default().with_error_code(code),
        as_is,
    )
}

pub fn alter_partition_reassignments(
    broker: &Arc<Broker>,
    version: i16,
    req: AlterPartitionReassignmentsRequest,
) -> Outcome<AlterPartitionReassignmentsResponse> {
    forward(
        broker,
        version,
        req,
        |r| is_not_controller(r.error_code),
        |code| AlterPartitionReassignmentsResponse::default().with_error_code(code),
        as_is,
    )
}

pub fn list_partition_reassignments(
    broker: &Arc<Broker>,
    version: i16,
    req: ListPartitionReassignmentsRequest,
) -> Outcome<ListPartitionReassignmentsResponse> {
    forward(
        broker,
        version,
        req,
        |r| is_not_controller(r.error_code),
        |code| ListPartitionReassignmentsResponse::default().with_error_code(code),
        as_is,
    )
}

pub fn describe_quorum(
    broker: &Arc<Broker>,
    version: i16,
    req: DescribeQuorumRequest,
) -> Outcome<DescribeQuorumResponse> {
    forward(
        broker,
        version,
        req,
        |r| {
            r.topics.iter().any(|t| {
                t.partitions
                    .iter()
                    .any(|p| p.error_code == errors::NOT_LEADER_OR_FOLLOWER)
            })
        },
        |code| DescribeQuorumResponse::default().with_error_code(code),
        as_is,
    )
}

/// How long a forwarded voter change may take on the controller: up to 30 s for the new voter
/// to catch up, and the waits for the previous change and for this one to commit.
const VOTER_CHANGE_WAIT: Duration = Duration::from_secs(65);

/// AddRaftVoter, forwarded once (see `forward_voter_change`).
pub fn add_raft_voter(
    broker: &Arc<Broker>,
    version: i16,
    req: AddRaftVoterRequest,
) -> Outcome<AddRaftVoterResponse> {
    forward_voter_change(
        broker,
        version,
        req,
        |r| r.error_code,
        |code, why| {
            AddRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(msg(why))
        },
    )
}

/// RemoveRaftVoter, forwarded once (see `forward_voter_change`).
pub fn remove_raft_voter(
    broker: &Arc<Broker>,
    version: i16,
    req: RemoveRaftVoterRequest,
) -> Outcome<RemoveRaftVoterResponse> {
    forward_voter_change(
        broker,
        version,
        req,
        |r| r.error_code,
        |code, why| {
            RemoveRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(msg(why))
        },
    )
}

/// Sends a voter change to the active controller once: one that was sent and got no answer
/// (the catch-up may take long) is not repeated, since the controller may have made it.
fn forward_voter_change<R>(
    broker: &Arc<Broker>,
    version: i16,
    req: R,
    code_of: fn(&R::Response) -> i16,
    failed: fn(i16, String) -> R::Response,
) -> Outcome<R::Response>
where
    R: Request + Send + Sync + 'static,
    R::Response: Send + 'static,
{
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        let not_leader = |r: &R::Response| code_of(r) == errors::NOT_LEADER_OR_FOLLOWER;
        let sent = broker
            .controller
            .call_slow(&req, version, VOTER_CHANGE_WAIT, not_leader);
        sent.await.unwrap_or_else(|e| {
            let why = format!("the active controller did not answer: {e}");
            failed(errors::REQUEST_TIMED_OUT, why)
        })
    }))
}

pub fn unregister_broker(
    broker: &Arc<Broker>,
    version: i16,
    req: UnregisterBrokerRequest,
) -> Outcome<UnregisterBrokerResponse> {
    forward(
        broker,
        version,
        req,
        |r| is_not_controller(r.error_code),
        |code| UnregisterBrokerResponse::default().with_error_code(code),
        as_is,
    )
}

pub fn delete_records(
    broker: &Arc<Broker>,
    session: &Session,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let may = broker.authorize(session, Action::topic(AclOperation::Delete, &name));
        let mut parts = Vec::new();
        for p in t.partitions {
            let base = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            let deleted = match may {
                true => broker.replicas.delete_records(&tp, p.offset),
                false => Err(errors::TOPIC_AUTHORIZATION_FAILED),
            };
            parts.push(match deleted {
                Ok(low) => base.with_low_watermark(low),
                Err(code) => base.with_error_code(code),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

fn describe_topic(
    broker: &Broker,
    img: &MetadataImage,
    version: i16,
    name: &str,
    wanted: &dyn Fn(&str) -> bool,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, (i16, String)> {
    if img.topic(name).is_none() {
        return Err((
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Topic {name} does not exist."),
        ));
    }
    let overrides = img.topic_configs(name);
    let mut configs = Vec::new();
    for e in topic_config_entries(&broker.config.log, &overrides, &broker.config.raw) {
        if !wanted(e.name) {
            continue;
        }
        let mut r = DescribeConfigsResourceResult::default()
            .with_name(s(e.name))
            .with_value(Some(s(e.value.clone())))
            .with_config_source(e.source)
            .with_read_only(false);
        if version >= 3 {
            r = r.with_config_type(e.config_type);
        }
        if include_synonyms {
            r = r.with_synonyms(vec![DescribeConfigsSynonym::default()
                .with_name(s(e.name))
                .with_value(Some(s(e.value)))
                .with_source(e.source)]);
        }
        configs.push(r);
    }
    Ok(configs)
}

pub fn describe_configs(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::new();
    let img = broker.image();
    for r in req.resources {
        let name = r.resource_name.to_string();
        if let Some(code) = config_denied(broker, session, r.resource_type, &name, false) {
            results.push(
                DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone())
                    .with_error_code(code)
                    .with_error_message(None),
            );
            continue;
        }
        let keys = r.configuration_keys.clone();
        let wanted = move |k: &str| {
            keys.as_ref()
                .is_none_or(|keys| keys.iter().any(|w| w.as_str() == k))
        };
        let base = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match r.resource_type {
            RESOURCE_TOPIC => {
                match describe_topic(broker, &img, version, &name, &wanted, req.include_synonyms) {
                    Ok(configs) => results.push(base.with_configs(configs)),
                    Err((code, m)) => {
                        results.push(base.with_error_code(code).with_error_message(msg(m)))
                    }
                }
            }
            RESOURCE_BROKER => {
                if !name.is_empty() && name != broker.node_id().to_string() {
                    results.push(
                        base.with_error_code(errors::INVALID_REQUEST)
                            .with_error_message(msg(format!("Unexpected broker id {name}"))),
                    );
                    continue;
                }
                let configs = describe_broker(broker, &img, &name, &wanted, req.include_synonyms);
                results.push(base.with_configs(configs));
            }
            other => results.push(
                base.with_error_code(errors::INVALID_REQUEST)
                    .with_error_message(msg(format!("Unsupported resource type {other}"))),
            ),
        }
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// A broker resource's configs: the dynamic ones from the metadata image (the broker's own,
/// then the cluster default), then server.properties for the rest, read-only. Synonyms list
/// every layer that sets a key, strongest first, as Kafka does.
fn describe_broker(
    broker: &Broker,
    img: &MetadataImage,
    name: &str,
    wanted: &dyn Fn(&str) -> bool,
    include_synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    use crate::config::{SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER};
    let empty = BTreeMap::new();
    let own = if name.is_empty() {
        &empty
    } else {
        img.broker_configs(name).unwrap_or(&empty)
    };
    let layers = [
        (own, SOURCE_DYNAMIC_BROKER),
        (
            img.broker_configs("").unwrap_or(&empty),
            SOURCE_DYNAMIC_DEFAULT_BROKER,
        ),
        (&broker.config.raw, SOURCE_STATIC_BROKER),
    ];
    let mut keys = std::collections::BTreeSet::new();
    for (m, _) in &layers {
        keys.extend(m.keys().filter(|k| wanted(k)).cloned());
    }
    let mut out = Vec::new();
    for k in keys {
        let set: Vec<(&String, i8)> = layers
            .iter()
            .filter_map(|(m, source)| m.get(&k).map(|v| (v, *source)))
            .collect();
        let Some((value, source)) = set.first().copied() else {
            continue;
        };
        let mut r = DescribeConfigsResourceResult::default()
            .with_name(s(k.clone()))
            .with_value(Some(s(value.clone())))
            .with_config_source(source)
            .with_read_only(source == SOURCE_STATIC_BROKER);
        if include_synonyms {
            r = r.with_synonyms(
                set.iter()
                    .map(|(v, source)| {
                        DescribeConfigsSynonym::default()
                            .with_name(s(k.clone()))
                            .with_value(Some(s((*v).clone())))
                            .with_source(*source)
                    })
                    .collect(),
            );
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use incremental_alter_configs_request::AlterableConfig;

    fn op(name: &str, op: i8, value: Option<&str>) -> AlterableConfig {
        AlterableConfig::default()
            .with_name(s(name))
            .with_config_operation(op)
            .with_value(value.map(s))
    }

    #[test]
    fn set_and_delete_are_foreseen_and_append_is_not() {
        let keys = incremental_keys(&[
            op("a", OP_SET, Some("2")),
            op("b", 2, Some("y")), // APPEND: b's list is not foreseen
            op("c", OP_DELETE, None),
        ]);
        let want: BTreeMap<String, Option<String>> = [
            ("a".to_string(), Some("2".to_string())),
            ("c".to_string(), None),
        ]
        .into();
        assert_eq!(keys, want);
    }

    #[test]
    fn repeated_resources_and_keys_and_missing_values_are_refused_as_kafka_does() {
        let repeated = repeated_resources(
            [
                (RESOURCE_TOPIC, "t"),
                (RESOURCE_BROKER, "t"),
                (RESOURCE_TOPIC, "t"),
            ]
            .into_iter(),
        );
        let once = "Each resource must appear at most once.".to_string();
        assert_eq!(repeated, [Some(once.clone()), None, Some(once)]);
        assert_eq!(
            malformed_configs(&[op("a", OP_SET, Some("1")), op("a", OP_DELETE, None)]).as_deref(),
            Some("Error due to duplicate config keys")
        );
        assert_eq!(
            malformed_configs(&[
                op("a", OP_SET, None),
                op("b", OP_DELETE, None),
                op("c", 2, None)
            ])
            .as_deref(),
            Some("Null value not supported for : a, c")
        );
        assert_eq!(
            malformed_configs(&[op("a", OP_SET, Some("1")), op("b", OP_DELETE, None)]),
            None
        );
    }
}
