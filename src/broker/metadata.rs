//! Metadata (with `auto.create.topics.enable`), DescribeCluster and DescribeTopicPartitions,
//! answered from the image this broker has applied: live brokers, leaders, replicas, ISRs and
//! offline replicas as the controller last decided them.

use std::sync::Arc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DescribeClusterRequest, DescribeClusterResponse,
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};

use super::auth::{Action, Session};
use super::controller_channel::{is_not_controller, DEFAULT_RETRY_TIMEOUT};
use super::{Broker, Outcome};
use crate::controller::validate_topic_name;
use crate::metadata::image::{BrokerImage, MetadataImage, PartitionImage, TopicImage};
use crate::metadata::{is_hidden_topic, is_internal_topic};
use crate::protocol::errors;
use crate::security::acl::AclOperation;

use crate::protocol::str_bytes as s;

/// The listener a client of this broker reaches other brokers on: the one its connection came
/// in on (as Kafka answers), or this broker's first client listener for a request from no
/// listener.
pub(crate) fn client_listener(broker: &Broker, session: &Session) -> String {
    if !session.listener.is_empty() {
        return session.listener.clone();
    }
    broker
        .config
        .advertised_listeners
        .first()
        .map(|l| l.name.clone())
        .unwrap_or_else(|| "PLAINTEXT".into())
}

/// `(host, port)` of a live broker on `listener`.
pub(crate) fn broker_endpoint(
    img: &MetadataImage,
    id: i32,
    listener: &str,
) -> Option<(String, i32)> {
    let b = img.broker(id).filter(|b| !b.fenced)?;
    let e = b.endpoint(listener)?;
    Some((e.host.clone(), e.port as i32))
}

/// Live brokers that have `listener`, in id order.
fn live_brokers<'a>(
    img: &'a MetadataImage,
    listener: &'a str,
) -> impl Iterator<Item = &'a BrokerImage> {
    img.live_brokers()
        .filter(move |b| b.endpoint(listener).is_some())
}

/// The controller id Metadata gives: this broker when it is live, else a live broker. Clients
/// send admin requests there and the broker forwards them, as Kafka's brokers do (Kafka names a
/// random live broker); naming the active controller would leave clients waiting on it when it
/// dies (librdkafka keeps asking a dead controller until its next metadata refresh).
fn controller_id_in_metadata(broker: &Broker, img: &MetadataImage, listener: &str) -> i32 {
    let me = broker.node_id();
    if broker_endpoint(img, me, listener).is_some() {
        return me;
    }
    let first = live_brokers(img, listener).next().map_or(-1, |b| b.id);
    first
}

/// The controller id DescribeCluster gives: the active controller when it is a live broker (so
/// `DescribeCluster` shows who leads the quorum), else as Metadata.
pub(crate) fn controller_id_for_clients(
    broker: &Broker,
    img: &MetadataImage,
    listener: &str,
) -> i32 {
    if let Some(c) = broker.active_controller() {
        if broker_endpoint(img, c, listener).is_some() {
            return c;
        }
    }
    controller_id_in_metadata(broker, img, listener)
}

fn partition_entry(
    img: &MetadataImage,
    id: i32,
    p: &PartitionImage,
    listener: &str,
) -> MetadataResponsePartition {
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let leader_registered = img.broker(p.leader).is_some();
    let (leader, code) = match (
        leader_registered,
        img.broker(p.leader).and_then(|b| b.endpoint(listener)),
    ) {
        (true, Some(_)) => (p.leader, errors::NONE),
        (true, None) => (-1, errors::LISTENER_NOT_FOUND),
        (false, _) => (-1, errors::LEADER_NOT_AVAILABLE),
    };
    MetadataResponsePartition::default()
        .with_error_code(code)
        .with_partition_index(id)
        .with_leader_id(BrokerId(leader))
        .with_leader_epoch(p.leader_epoch)
        .with_replica_nodes(ids(&p.replicas))
        .with_isr_nodes(ids(&p.isr))
        .with_offline_replicas(ids(&img.offline_replicas(p)))
}

fn topic_entry(img: &MetadataImage, t: &TopicImage, listener: &str) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(s(t.name.clone()))))
        .with_topic_id(t.id.into())
        .with_is_internal(is_internal_topic(&t.name))
        .with_partitions(
            t.partitions
                .iter()
                .map(|(id, p)| partition_entry(img, *id, p, listener))
                .collect(),
        )
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(|n| TopicName(s(n.to_string()))))
        .with_topic_id(id)
        .with_error_code(code)
}

/// A Metadata answer from one image; `missing` are names to auto-create.
fn answer(
    broker: &Broker,
    session: &Session,
    img: &MetadataImage,
    version: i16,
    req: &MetadataRequest,
    allow_create: bool,
) -> (MetadataResponse, Vec<String>) {
    let listener = client_listener(broker, session);
    // v0 has no null: an empty list means every topic.
    let all = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let mut topics = Vec::new();
    let mut missing = Vec::new();
    if all {
        for t in img.topics().filter(|t| !is_hidden_topic(&t.name)) {
            topics.push(topic_entry(img, t, &listener));
        }
    } else {
        for rt in req.topics.iter().flatten() {
            let by_name = rt.name.as_ref().map(|n| n.0.to_string());
            let found = match &by_name {
                Some(n) => img.topic(n),
                None => img.topic_by_id(&rt.topic_id.into()),
            };
            match (found, by_name) {
                (Some(t), _) if !is_hidden_topic(&t.name) => {
                    topics.push(topic_entry(img, t, &listener))
                }
                (_, None) => topics.push(error_entry(None, rt.topic_id, errors::UNKNOWN_TOPIC_ID)),
                (_, Some(name)) => {
                    let code = match validate_topic_name(&name) {
                        Err(e) => e.code,
                        Ok(()) if allow_create && !is_internal_topic(&name) => {
                            missing.push(name.clone());
                            errors::UNKNOWN_TOPIC_OR_PARTITION
                        }
                        Ok(()) => errors::UNKNOWN_TOPIC_OR_PARTITION,
                    };
                    topics.push(error_entry(Some(&name), rt.topic_id, code));
                }
            }
        }
    }
    let brokers = live_brokers(img, &listener)
        .map(|b| {
            let e = b.endpoint(&listener).expect("filtered on the listener");
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(s(e.host.clone()))
                .with_port(e.port as i32)
                .with_rack(b.rack.clone().map(s))
        })
        .collect();
    let resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(s(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(controller_id_in_metadata(broker, img, &listener)))
        .with_topics(topics);
    (resp, missing)
}

/// Asks the controller to create `names` with the broker defaults (Kafka's
/// AutoTopicCreationManager); returns the names that exist now (created or already there).
/// Errors are only logged.
pub(crate) async fn create_missing(
    broker: &Broker,
    names: &[String],
    partitions: i32,
    rf: i16,
    configs: &[(&str, &str)],
) -> Vec<String> {
    use kafka_protocol::messages::create_topics_request::CreatableTopicConfig;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(s(n.clone())))
                        .with_num_partitions(partitions)
                        .with_replication_factor(rf)
                        .with_configs(
                            configs
                                .iter()
                                .map(|(k, v)| {
                                    CreatableTopicConfig::default()
                                        .with_name(s(*k))
                                        .with_value(Some(s(*v)))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    match broker
        .controller
        .call(&req, 7, DEFAULT_RETRY_TIMEOUT, |r| {
            r.topics.iter().any(|t| is_not_controller(t.error_code))
        })
        .await
    {
        Ok(r) => r
            .topics
            .into_iter()
            .filter_map(|t| {
                if t.error_code == errors::NONE {
                    tracing::info!(topic = %t.name.0, "auto-created topic");
                } else if t.error_code != errors::TOPIC_ALREADY_EXISTS {
                    tracing::warn!(topic = %t.name.0, error = errors::error_name(t.error_code), message = ?t.error_message, "cannot create topic");
                    return None;
                }
                Some(t.name.0.to_string())
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach the controller to create topics");
            Vec::new()
        }
    }
}

pub fn metadata(
    broker: &Arc<Broker>,
    session: Arc<Session>,
    version: i16,
    req: MetadataRequest,
) -> Outcome<MetadataResponse> {
    // Versions before 4 always auto-create.
    let allow_create =
        (version < 4 || req.allow_auto_topic_creation) && broker.config.auto_create_topics_enable;
    let img = broker.image();
    let (resp, mut missing) = answer(broker, &session, &img, version, &req, allow_create);
    let named = req.topics.is_some();
    // As Kafka: a topic the session may not DESCRIBE is not auto-created for it either.
    missing.retain(|t| {
        broker.authorize(&session, Action::topic(AclOperation::Describe, t))
            && may_create(broker, &session, t)
    });
    if missing.is_empty() {
        return Outcome::Now(hide_undescribable(broker, &session, named, resp));
    }
    // Create, wait to see the topics, and answer with them (clients need not retry).
    tracing::debug!(topics = ?missing, "Metadata names unknown topics: creating them");
    let broker = broker.clone();
    Outcome::Later(Box::pin(async move {
        let created = create_missing(
            &broker,
            &missing,
            broker.config.num_partitions,
            broker.config.default_replication_factor,
            &[],
        )
        .await;
        if !created.is_empty() {
            let seen = broker
                .wait_for_image(|img| created.iter().all(|n| img.topic(n).is_some()))
                .await;
            tracing::debug!(topics = ?created, seen, "created topics for Metadata");
        }
        let resp = answer(&broker, &session, &broker.image(), version, &req, false).0;
        hide_undescribable(&broker, &session, named, resp)
    }))
}

/// Whether `session` may create topic `name`: CREATE on the cluster or on the topic.
pub(crate) fn may_create(broker: &Broker, session: &Session, name: &str) -> bool {
    broker.authorize(session, Action::cluster(AclOperation::Create))
        || broker.authorize(session, Action::topic(AclOperation::Create, name))
}

/// Metadata never names a topic the session may not DESCRIBE: such a topic asked for by name
/// is answered TOPIC_AUTHORIZATION_FAILED (whether it exists or not), and left out of an
/// all-topics answer.
fn hide_undescribable(
    broker: &Broker,
    session: &Session,
    named: bool,
    mut resp: MetadataResponse,
) -> MetadataResponse {
    if broker.authorizer.is_none() {
        return resp;
    }
    resp.topics.retain_mut(|t| {
        let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        if broker.authorize(session, Action::topic(AclOperation::Describe, &name)) {
            return true;
        }
        if !named {
            return false;
        }
        *t = MetadataResponseTopic::default()
            .with_name(t.name.clone())
            .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
            .with_is_internal(false);
        true
    });
    resp
}

pub fn describe_cluster(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    const BROKER_ENDPOINTS: i8 = 1;
    let base = DescribeClusterResponse::default()
        .with_cluster_id(s(broker.cluster_id.clone()))
        .with_endpoint_type(BROKER_ENDPOINTS);
    if version >= 1 && req.endpoint_type != BROKER_ENDPOINTS {
        return base
            .with_error_code(errors::MISMATCHED_ENDPOINT_TYPE)
            .with_error_message(Some(s(
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
            )))
            .with_controller_id(BrokerId(-1));
    }
    let img = broker.image();
    let listener = client_listener(broker, session);
    let brokers = img
        .brokers()
        .filter(|b| !b.fenced || (version >= 2 && req.include_fenced_brokers))
        .filter_map(|b| {
            let e = b.endpoint(&listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(s(e.host.clone()))
                    .with_port(e.port as i32)
                    .with_rack(b.rack.clone().map(s))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    base.with_controller_id(BrokerId(controller_id_for_clients(broker, &img, &listener)))
        .with_brokers(brokers)
}

pub fn describe_topic_partitions(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    use kafka_protocol::messages::describe_topic_partitions_response::{
        Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
    };
    let img = broker.image();
    let listener = client_listener(broker, session);
    let limit = req.response_partition_limit.max(1) as usize;
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    if cursor.as_ref().is_some_and(|(_, p)| *p < 0) {
        return DescribeTopicPartitionsResponse::default();
    }
    let may_describe =
        |n: &str| broker.authorize(session, Action::topic(AclOperation::Describe, n));
    let mut names: Vec<String> = if req.topics.is_empty() {
        img.topics()
            .filter(|t| !is_hidden_topic(&t.name) && may_describe(&t.name))
            .map(|t| t.name.clone())
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.to_string()).collect()
    };
    names.sort();
    if let Some((c, _)) = &cursor {
        names.retain(|n| n >= c);
    }
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let mut topics = Vec::new();
    let mut left = limit;
    let mut next_cursor = None;
    for name in names {
        if left == 0 {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(TopicName(s(name)))
                    .with_partition_index(0),
            );
            break;
        }
        let found = match may_describe(&name) {
            true => img.topic(&name).ok_or(errors::UNKNOWN_TOPIC_OR_PARTITION),
            false => Err(errors::TOPIC_AUTHORIZATION_FAILED),
        };
        let t = match found {
            Ok(t) => t,
            Err(code) => {
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(TopicName(s(name))))
                        .with_error_code(code),
                );
                continue;
            }
        };
        let start = match &cursor {
            Some((c, p)) if *c == name => *p,
            _ => 0,
        };
        let mut parts = Vec::new();
        for (id, p) in t.partitions.range(start..) {
            if left == 0 {
                next_cursor = Some(
                    Cursor::default()
                        .with_topic_name(TopicName(s(name.clone())))
                        .with_partition_index(*id),
                );
                break;
            }
            left -= 1;
            let leader = if img
                .broker(p.leader)
                .and_then(|b| b.endpoint(&listener))
                .is_some()
            {
                p.leader
            } else {
                -1
            };
            parts.push(
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(*id)
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(ids(&p.replicas))
                    .with_isr_nodes(ids(&p.isr))
                    // No ELR (KIP-966): empty lists, as Kafka sends with ELR off; Kafka's
                    // admin client cannot take null here.
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(ids(&img.offline_replicas(p))),
            );
        }
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(s(name))))
                .with_topic_id(t.id.into())
                .with_is_internal(is_internal_topic(&t.name))
                .with_partitions(parts),
        );
        if next_cursor.is_some() {
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}
