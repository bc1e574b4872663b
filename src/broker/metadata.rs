//! Metadata (with `auto.create.topics.enable`) and DescribeCluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::Broker;
use crate::controller::image::TopicImage;
use crate::controller::{is_hidden_topic, is_internal_topic, validate_topic_name, NewTopic};
use crate::protocol::errors;
use crate::storage::KafkaUuid;

fn to_uuid(id: KafkaUuid) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id.0)
}

pub(crate) fn from_uuid(id: &uuid::Uuid) -> KafkaUuid {
    KafkaUuid(*id.as_bytes())
}

fn topic_entry(t: &TopicImage) -> MetadataResponseTopic {
    let partitions = t
        .partitions
        .iter()
        .map(|(p, img)| {
            MetadataResponsePartition::default()
                .with_partition_index(*p)
                .with_leader_id(BrokerId(img.leader))
                .with_leader_epoch(img.leader_epoch)
                .with_replica_nodes(img.replicas.iter().map(|b| BrokerId(*b)).collect())
                .with_isr_nodes(img.isr.iter().map(|b| BrokerId(*b)).collect())
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(t.name.clone()))))
        .with_topic_id(to_uuid(t.id))
        .with_is_internal(is_internal_topic(&t.name))
        .with_partitions(partitions)
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_string()))))
        .with_topic_id(id)
        .with_error_code(code)
}

pub fn metadata(broker: &Arc<Broker>, version: i16, req: MetadataRequest) -> MetadataResponse {
    // v0 has no null: an empty list means every topic. Versions before 4 always auto-create.
    let all = match &req.topics {
        None => true,
        Some(t) => version == 0 && t.is_empty(),
    };
    let allow_create =
        (version < 4 || req.allow_auto_topic_creation) && broker.config.auto_create_topics_enable;
    let mut topics = Vec::new();
    if all {
        for t in broker.controller.image().topics() {
            if !is_hidden_topic(&t.name) {
                topics.push(topic_entry(t));
            }
        }
    } else {
        let mut created = false;
        for rt in req.topics.unwrap_or_default() {
            let img = broker.controller.image();
            let by_name = rt.name.as_ref().map(|n| n.0.to_string());
            let found = match &by_name {
                Some(n) => img.topic(n).cloned(),
                None => img.topic_by_id(&from_uuid(&rt.topic_id)).cloned(),
            };
            match (found, by_name) {
                (Some(t), _) if !is_hidden_topic(&t.name) => topics.push(topic_entry(&t)),
                (_, None) => topics.push(error_entry(None, rt.topic_id, errors::UNKNOWN_TOPIC_ID)),
                (_, Some(name)) => {
                    if let Err(e) = validate_topic_name(&name) {
                        topics.push(error_entry(Some(&name), rt.topic_id, e.code));
                        continue;
                    }
                    if !allow_create || is_internal_topic(&name) {
                        topics.push(error_entry(
                            Some(&name),
                            rt.topic_id,
                            errors::UNKNOWN_TOPIC_OR_PARTITION,
                        ));
                        continue;
                    }
                    let new = NewTopic {
                        name: name.clone(),
                        partitions: broker.config.num_partitions,
                        replication_factor: broker.config.default_replication_factor,
                        configs: BTreeMap::new(),
                    };
                    match broker.controller.create_topic(&new, &broker.config.log) {
                        Ok(t) => {
                            tracing::info!(topic = %name, "auto-created topic");
                            created = true;
                            topics.push(topic_entry(&t));
                        }
                        // Another request created it first: answer with it.
                        Err(e) if e.code == errors::TOPIC_ALREADY_EXISTS => {
                            match broker.controller.image().topic(&name) {
                                Some(t) => topics.push(topic_entry(t)),
                                None => topics.push(error_entry(
                                    Some(&name),
                                    rt.topic_id,
                                    errors::LEADER_NOT_AVAILABLE,
                                )),
                            }
                        }
                        Err(e) => topics.push(error_entry(Some(&name), rt.topic_id, e.code)),
                    }
                }
            }
        }
        if created {
            if let Err(e) = broker.refresh_partitions() {
                tracing::error!(error = %e, "cannot create the logs of auto-created topics");
            }
        }
    }
    let ep = broker.endpoint();
    MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(broker.node_id()))
            .with_host(StrBytes::from_string(ep.host))
            .with_port(ep.port)])
        .with_cluster_id(Some(StrBytes::from_string(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(broker.node_id()))
        .with_topics(topics)
}

pub fn describe_cluster(
    broker: &Arc<Broker>,
    _req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let ep = broker.endpoint();
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.cluster_id.clone()))
        .with_controller_id(BrokerId(broker.node_id()))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(broker.node_id()))
            .with_host(StrBytes::from_string(ep.host))
            .with_port(ep.port)])
}
