//! Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
//! AlterConfigs and IncrementalAlterConfigs (topics; broker configs are read-only for now).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::metadata::from_uuid;
use super::{msg, Broker};
use crate::config::LogConfig;
use crate::controller::records::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::controller::{validate_topic_configs, ControllerError, NewTopic};
use crate::protocol::errors;
use crate::storage::TopicPartition;

/// DescribeConfigs `ConfigSource` ids.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn refresh(broker: &Broker) {
    if let Err(e) = broker.refresh_partitions() {
        tracing::error!(error = %e, "cannot apply a metadata change to the local logs");
    }
}

pub fn create_topics(
    broker: &Arc<Broker>,
    _version: i16,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut results = Vec::new();
    let mut changed = false;
    for t in req.topics {
        let name = t.name.0.to_string();
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let new = NewTopic {
            name: name.clone(),
            partitions: if t.num_partitions == -1 {
                broker.config.num_partitions
            } else {
                t.num_partitions
            },
            replication_factor: if t.replication_factor == -1 {
                broker.config.default_replication_factor
            } else {
                t.replication_factor
            },
            configs,
        };
        let base = CreatableTopicResult::default()
            .with_name(t.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        if !t.assignments.is_empty() {
            results.push(
                base.with_error_code(errors::INVALID_REQUEST)
                    .with_error_message(msg(
                    "Manual replica assignments are not supported on a single-node cluster yet.",
                )),
            );
            continue;
        }
        let outcome = if req.validate_only {
            broker
                .controller
                .validate_new_topic(&new, &broker.config.log)
                .map(|_| None)
        } else {
            broker
                .controller
                .create_topic(&new, &broker.config.log)
                .map(Some)
        };
        match outcome {
            Ok(created) => {
                changed |= created.is_some();
                let cfg = validate_topic_configs(&new.configs, &broker.config.log)
                    .unwrap_or_else(|_| broker.config.log.clone());
                let configs = LogConfig::topic_keys()
                    .into_iter()
                    .filter_map(|k| {
                        let (v, _) = cfg.value_of(k)?;
                        Some(
                            CreatableTopicConfigs::default()
                                .with_name(s(k))
                                .with_value(Some(s(v)))
                                .with_config_source(source_of(broker, &new.configs, k)),
                        )
                    })
                    .collect();
                let mut r = base
                    .with_num_partitions(new.partitions)
                    .with_replication_factor(new.replication_factor)
                    .with_configs(Some(configs));
                if let Some(t) = created {
                    r = r.with_topic_id(uuid::Uuid::from_bytes(t.id.0));
                }
                results.push(r);
            }
            Err(e) => results.push(
                base.with_error_code(e.code)
                    .with_error_message(msg(e.message)),
            ),
        }
    }
    if changed {
        refresh(broker);
    }
    CreateTopicsResponse::default().with_topics(results)
}

pub fn delete_topics(broker: &Arc<Broker>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    // v0–5 name topics in `topic_names`; v6 uses `topics` by name or id.
    let mut wanted: Vec<(Option<String>, uuid::Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
        .collect();
    wanted.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let mut results = Vec::new();
    let mut changed = false;
    for (name, id) in wanted {
        let img = broker.controller.image();
        let resolved = match &name {
            Some(n) => Some(n.clone()),
            None => img.topic_by_id(&from_uuid(&id)).map(|t| t.name.clone()),
        };
        let base = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(s(n))))
            .with_topic_id(id);
        let Some(n) = resolved else {
            results.push(
                base.with_error_code(errors::UNKNOWN_TOPIC_ID)
                    .with_error_message(msg("This server does not host this topic ID.")),
            );
            continue;
        };
        match broker.controller.delete_topic(&n) {
            Ok(deleted_id) => {
                changed = true;
                results.push(
                    base.with_name(Some(TopicName(s(n))))
                        .with_topic_id(uuid::Uuid::from_bytes(deleted_id.0)),
                );
            }
            Err(e) => results.push(
                base.with_error_code(e.code)
                    .with_error_message(msg(e.message)),
            ),
        }
    }
    if changed {
        refresh(broker);
    }
    DeleteTopicsResponse::default().with_responses(results)
}

pub fn create_partitions(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::new();
    let mut changed = false;
    for t in req.topics {
        let name = t.name.0.to_string();
        let r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        if t.assignments.is_some() {
            results.push(
                r.with_error_code(errors::INVALID_REQUEST)
                    .with_error_message(msg(
                    "Manual replica assignments are not supported on a single-node cluster yet.",
                )),
            );
            continue;
        }
        match broker
            .controller
            .create_partitions(&name, t.count, req.validate_only)
        {
            Ok(()) => {
                changed |= !req.validate_only;
                results.push(r);
            }
            Err(e) => results.push(r.with_error_code(e.code).with_error_message(msg(e.message))),
        }
    }
    if changed {
        refresh(broker);
    }
    CreatePartitionsResponse::default().with_results(results)
}

pub fn delete_records(broker: &Arc<Broker>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut parts = Vec::new();
        for p in t.partitions {
            let base = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            let Some(part) = broker.replicas.get(&tp) else {
                parts.push(base.with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION));
                continue;
            };
            let result = {
                let mut l = part.log.lock();
                // -1 means "up to the high watermark", as in Kafka.
                let target = if p.offset == -1 {
                    l.high_watermark()
                } else {
                    p.offset
                };
                l.delete_records_before(target)
                    .map_err(|e| e.kafka_error_code())
            };
            parts.push(match result {
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

fn source_of(broker: &Broker, overrides: &BTreeMap<String, String>, key: &str) -> i8 {
    if overrides.contains_key(key) {
        return SOURCE_DYNAMIC_TOPIC;
    }
    let broker_key = crate::config::TOPIC_CONFIG_SYNONYMS
        .iter()
        .find(|(t, _)| *t == key)
        .map(|(_, b)| *b);
    if broker_key.is_some_and(|b| broker.config.raw.contains_key(b)) {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

pub fn describe_configs(
    broker: &Arc<Broker>,
    version: i16,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let wanted = |k: &str| {
            r.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|w| w.as_str() == k))
        };
        let base = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match r.resource_type {
            RESOURCE_TOPIC => {
                let img = broker.controller.image();
                if img.topic(&name).is_none() {
                    results.push(
                        base.with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                            .with_error_message(msg(format!("Topic {name} does not exist."))),
                    );
                    continue;
                }
                let overrides = img.topic_configs(&name);
                let cfg = validate_topic_configs(&overrides, &broker.config.log)
                    .unwrap_or_else(|_| broker.config.log.clone());
                let mut configs = Vec::new();
                for k in LogConfig::topic_keys() {
                    if !wanted(k) {
                        continue;
                    }
                    let Some((v, ty)) = cfg.value_of(k) else {
                        continue;
                    };
                    let source = source_of(broker, &overrides, k);
                    let mut e = DescribeConfigsResourceResult::default()
                        .with_name(s(k))
                        .with_value(Some(s(v.clone())))
                        .with_config_source(source)
                        .with_read_only(false);
                    if version >= 3 {
                        e = e.with_config_type(ty);
                    }
                    if req.include_synonyms {
                        e = e.with_synonyms(vec![DescribeConfigsSynonym::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                            .with_source(source)]);
                    }
                    configs.push(e);
                }
                results.push(base.with_configs(configs));
            }
            RESOURCE_BROKER => {
                if !name.is_empty() && name != broker.node_id().to_string() {
                    results.push(
                        base.with_error_code(errors::INVALID_REQUEST)
                            .with_error_message(msg(format!("Unexpected broker id {name}"))),
                    );
                    continue;
                }
                let configs = broker
                    .config
                    .raw
                    .iter()
                    .filter(|(k, _)| wanted(k))
                    .map(|(k, v)| {
                        DescribeConfigsResourceResult::default()
                            .with_name(s(k.clone()))
                            .with_value(Some(s(v.clone())))
                            .with_config_source(SOURCE_STATIC_BROKER)
                            .with_read_only(true)
                    })
                    .collect();
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

/// Applies topic config changes; `None` removes an override.
fn alter_topic(
    broker: &Arc<Broker>,
    name: &str,
    changes: Vec<(String, Option<String>)>,
    validate_only: bool,
) -> Result<(), ControllerError> {
    broker
        .controller
        .alter_topic_configs(name, &changes, &broker.config.log, validate_only)?;
    if !validate_only {
        refresh(broker);
    }
    Ok(())
}

/// Runs `topic` for a topic resource; broker resources are read-only, others unsupported.
fn alter_resource(
    resource_type: i8,
    topic: impl FnOnce() -> Result<(), ControllerError>,
) -> Result<(), ControllerError> {
    match resource_type {
        RESOURCE_TOPIC => topic(),
        RESOURCE_BROKER => Err(broker_read_only()),
        other => Err(ControllerError {
            code: errors::INVALID_REQUEST,
            message: format!("Unsupported resource type {other}"),
        }),
    }
}

fn broker_read_only() -> ControllerError {
    ControllerError {
        code: errors::INVALID_REQUEST,
        message: "Broker configs are read-only in evenkeel for now; set them in server.properties."
            .into(),
    }
}

pub fn alter_configs(broker: &Arc<Broker>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut out = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let result = alter_resource(r.resource_type, || {
            // AlterConfigs replaces the whole set: overrides not named are removed.
            let existing = broker.controller.image().topic_configs(&name);
            let mut changes: Vec<(String, Option<String>)> = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            for k in existing.keys() {
                if !changes.iter().any(|(n, _)| n == k) {
                    changes.push((k.clone(), None));
                }
            }
            alter_topic(broker, &name, changes, req.validate_only)
        });
        let mut resp = AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err(e) = result {
            resp = resp
                .with_error_code(e.code)
                .with_error_message(msg(e.message));
        }
        out.push(resp);
    }
    AlterConfigsResponse::default().with_responses(out)
}

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut out = Vec::new();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let result = alter_resource(r.resource_type, || {
            let img = broker.controller.image();
            let overrides = img.topic_configs(&name);
            let effective = validate_topic_configs(&overrides, &broker.config.log)
                .unwrap_or_else(|_| broker.config.log.clone());
            let mut changes = Vec::new();
            let mut bad = None;
            for c in &r.configs {
                let key = c.name.to_string();
                let value = c.value.as_ref().map(|v| v.to_string());
                let current: Vec<String> = effective
                    .value_of(&key)
                    .map(|(v, _)| {
                        v.split(',')
                            .map(|x| x.trim().to_string())
                            .filter(|x| !x.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                match c.config_operation {
                    OP_SET => changes.push((key, value)),
                    OP_DELETE => changes.push((key, None)),
                    OP_APPEND | OP_SUBTRACT => {
                        let items: Vec<String> = value
                            .unwrap_or_default()
                            .split(',')
                            .map(|x| x.trim().to_string())
                            .filter(|x| !x.is_empty())
                            .collect();
                        let mut list = current;
                        if c.config_operation == OP_APPEND {
                            for i in items {
                                if !list.contains(&i) {
                                    list.push(i);
                                }
                            }
                        } else {
                            list.retain(|x| !items.contains(x));
                        }
                        changes.push((key, Some(list.join(","))));
                    }
                    op => {
                        bad = Some(ControllerError {
                            code: errors::INVALID_REQUEST,
                            message: format!("Unknown config operation {op}"),
                        })
                    }
                }
            }
            match bad {
                Some(e) => Err(e),
                None => alter_topic(broker, &name, changes, req.validate_only),
            }
        });
        let mut resp = AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err(e) = result {
            resp = resp
                .with_error_code(e.code)
                .with_error_message(msg(e.message));
        }
        out.push(resp);
    }
    IncrementalAlterConfigsResponse::default().with_responses(out)
}
