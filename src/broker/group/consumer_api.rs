//! The consumer group protocol's APIs on the wire (KIP-848): ConsumerGroupHeartbeat, with
//! Kafka's request checks and topic authorization, and ConsumerGroupDescribe.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response as beat;
use kafka_protocol::messages::*;

use super::assignor::Assignment;
use super::consumer_group::{Cluster, ConsumerGroup, Heartbeat, Refused, STATIC_LEAVE_EPOCH};
use super::metadata_manager::{
    after_offsets_topic, coordinator_partition, write_replicated, RecordKv,
};
use crate::broker::auth::{Action, Session};
use crate::broker::{Broker, Outcome};
use crate::metadata::image::MetadataImage;
use crate::metadata::is_internal_topic;
use crate::protocol::errors;
use crate::protocol::str_bytes as s;
use crate::security::acl::AclOperation;

/// A write of group records, answered once replicated.
type Written = Outcome<Result<(), i16>>;

/// Whether this broker serves the consumer protocol: `group.coordinator.rebalance.protocols`
/// names it and the cluster finalized `group.version` 1 or more.
pub fn enabled(broker: &Broker, img: &MetadataImage) -> bool {
    broker.config.consumer_groups.enabled && img.feature("group.version").unwrap_or(0) >= 1
}

fn refusal(r: Refused) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(r.code)
        .with_error_message(r.message.map(s))
}

/// ConsumerGroupHeartbeat: judged as Kafka's KafkaApis and group coordinator judge it, then
/// handed to the group.
pub fn heartbeat(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    client_id: &str,
    req: ConsumerGroupHeartbeatRequest,
) -> Outcome<ConsumerGroupHeartbeatResponse> {
    let (session, client_id) = (session.clone(), client_id.to_string());
    let unavailable = || refusal(Refused::bare(errors::COORDINATOR_NOT_AVAILABLE));
    after_offsets_topic(broker, unavailable, move |broker| {
        match heartbeat_now(broker, &session, version, &client_id, req) {
            Ok((answer, written)) => written.map(move |written| match written {
                Ok(()) => answer,
                Err(code) => refusal(Refused::bare(code)),
            }),
            Err(refused) => Outcome::Now(refusal(refused)),
        }
    })
}

/// The heartbeat judged and applied: its answer, given once the group's changed records
/// are replicated (as Kafka answers once its records are committed).
fn heartbeat_now(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    client_id: &str,
    req: ConsumerGroupHeartbeatRequest,
) -> Result<(ConsumerGroupHeartbeatResponse, Written), Refused> {
    let img = broker.image();
    if !enabled(broker, &img) {
        return Err(Refused::bare(errors::UNSUPPORTED_VERSION));
    }
    // READ on the group was checked with the other group requests (`refusals`).
    let group = req.group_id.0.to_string();
    let names = req.subscribed_topic_names.iter().flatten();
    let denied = names
        .map(|t| t.0.as_str())
        .any(|t| !broker.authorize(session, Action::topic(AclOperation::Describe, t)));
    if denied {
        return Err(Refused::bare(errors::TOPIC_AUTHORIZATION_FAILED));
    }
    validate(&req, version).map_err(|m| Refused::new(errors::INVALID_REQUEST, m))?;
    check_assignor(broker, req.server_assignor.as_deref())?;
    coordinator_partition(broker, &group).map_err(Refused::bare)?;
    if let Some(regex) = req.subscribed_topic_regex.as_deref() {
        compile(regex)?;
    }
    let hb = heartbeat_of(session, client_id, req);
    // Only the subscribed topics are looked up: a heartbeat copies nothing of the image.
    let topic = |name: &str| img.topic(name).map(|t| (t.id, t.partitions.len() as i32));
    let matching = |regex: &str| matching(broker, session, &img, regex);
    let cluster = Cluster {
        topic: &topic,
        matching: &matching,
    };
    let write = |records: &[RecordKv]| match write_replicated(broker, &group, records) {
        // Nothing reached the log: the coordinator writes these records again.
        Outcome::Now(Err(code)) => Err(Outcome::Now(Err(code))),
        written => Ok(written),
    };
    let (a, written) =
        broker
            .groups
            .consumer_heartbeat(&group, &hb, &cluster, Instant::now(), write)?;
    let answer = ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(s(a.member_id)))
        .with_member_epoch(a.member_epoch)
        .with_heartbeat_interval_ms(a.heartbeat_interval_ms)
        .with_assignment(
            a.assignment
                .map(|a| beat::Assignment::default().with_topic_partitions(wire_assignment(&a))),
        );
    Ok((answer, written))
}

/// Kafka's checks of the request itself (`throwIfConsumerGroupHeartbeatRequestIsInvalid`),
/// each answered INVALID_REQUEST with Kafka's message.
fn validate(req: &ConsumerGroupHeartbeatRequest, version: i16) -> Result<(), String> {
    let blank = |v: &str| v.trim().is_empty();
    let epoch = req.member_epoch;
    if (version >= 1 || epoch > 0 || epoch == -1) && blank(&req.member_id) {
        return Err("MemberId can't be empty.".into());
    }
    if blank(&req.group_id.0) {
        return Err("GroupId can't be empty.".into());
    }
    if req.instance_id.as_deref().is_some_and(blank) {
        return Err("InstanceId can't be empty.".into());
    }
    if req.rack_id.as_deref().is_some_and(blank) {
        return Err("RackId can't be empty.".into());
    }
    if epoch == 0 {
        if req.rebalance_timeout_ms == -1 {
            return Err("RebalanceTimeoutMs must be provided in first request.".into());
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return Err("TopicPartitions must be empty when (re-)joining.".into());
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return Err(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null \
                        when (re-)joining."
                    .into(),
            );
        }
    } else if epoch == STATIC_LEAVE_EPOCH && req.instance_id.is_none() {
        return Err("InstanceId can't be null.".into());
    } else if epoch < STATIC_LEAVE_EPOCH {
        return Err("MemberEpoch is invalid.".into());
    }
    Ok(())
}

/// UNSUPPORTED_ASSIGNOR for an assignor `group.consumer.assignors` does not name.
fn check_assignor(broker: &Broker, name: Option<&str>) -> Result<(), Refused> {
    let offered = &broker.groups.consumer_settings().assignors;
    match name {
        Some(a) if !offered.iter().any(|o| o == a) => Err(Refused::new(
            errors::UNSUPPORTED_ASSIGNOR,
            format!(
                "ServerAssignor {a} is not supported. Supported assignors: {}.",
                offered.join(", ")
            ),
        )),
        _ => Ok(()),
    }
}

/// The request as the group reads it.
fn heartbeat_of(
    session: &Session,
    client_id: &str,
    req: ConsumerGroupHeartbeatRequest,
) -> Heartbeat {
    let member_id = match req.member_id.as_str() {
        // v0 lets the coordinator name a joining member.
        "" => uuid::Uuid::new_v4().to_string(),
        id => id.to_string(),
    };
    let owned = req.topic_partitions.map(|tps| {
        let mut a = Assignment::new();
        for tp in tps {
            let set: &mut BTreeSet<i32> = a.entry(tp.topic_id.into()).or_default();
            set.extend(tp.partitions);
        }
        a
    });
    Heartbeat {
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|i| i.to_string()),
        rack_id: req.rack_id.map(|r| r.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        topic_names: req
            .subscribed_topic_names
            .map(|ns| ns.into_iter().map(|n| n.0.to_string()).collect()),
        topic_regex: req.subscribed_topic_regex.map(|r| r.to_string()),
        server_assignor: req.server_assignor.map(|a| a.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: session
            .peer
            .map(|p| format!("/{}", p.ip()))
            .unwrap_or_default(),
    }
}

/// A subscription regex (RE2 syntax, as Kafka's RE2J) matching whole topic names, or
/// INVALID_REGULAR_EXPRESSION with Kafka's message.
fn compile(regex: &str) -> Result<regex::Regex, Refused> {
    regex::Regex::new(&format!("^(?:{regex})$")).map_err(|e| {
        Refused::new(
            errors::INVALID_REGULAR_EXPRESSION,
            format!(
                "SubscribedTopicRegex `{regex}` is not a valid regular expression: {}.",
                last_line(&e.to_string())
            ),
        )
    })
}

/// The topics `regex` matches, internal topics and those the session may not DESCRIBE left
/// out (nothing for a regex that does not compile).
fn matching(
    broker: &Broker,
    session: &Session,
    img: &MetadataImage,
    regex: &str,
) -> BTreeSet<String> {
    let Ok(re) = compile(regex) else {
        return BTreeSet::new();
    };
    img.topics()
        .map(|t| t.name.as_str())
        .filter(|t| !is_internal_topic(t) && re.is_match(t))
        .filter(|t| broker.authorize(session, Action::topic(AclOperation::Describe, t)))
        .map(String::from)
        .collect()
}

/// The regex crate's message ends with the line that says what is wrong.
fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or(s).trim_start_matches("error: ")
}

fn wire_assignment(a: &Assignment) -> Vec<beat::TopicPartitions> {
    a.iter()
        .map(|(t, ps)| {
            beat::TopicPartitions::default()
                .with_topic_id((*t).into())
                .with_partitions(ps.iter().copied().collect())
        })
        .collect()
}

/// ConsumerGroupDescribe: each group the session may DESCRIBE, as its coordinator holds it.
pub fn describe(
    broker: &Broker,
    session: &Session,
    version: i16,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let img = broker.image();
    if !enabled(broker, &img) {
        let groups = req
            .group_ids
            .into_iter()
            .map(|g| failed(g, errors::UNSUPPORTED_VERSION, None))
            .collect();
        return ConsumerGroupDescribeResponse::default().with_groups(groups);
    }
    let groups = req
        .group_ids
        .into_iter()
        .map(|g| describe_one(broker, session, &img, version, g))
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

fn failed(group: GroupId, code: i16, message: Option<String>) -> describe::DescribedGroup {
    describe::DescribedGroup::default()
        .with_group_id(group)
        .with_error_code(code)
        .with_error_message(message.map(s))
        .with_authorized_operations(i32::MIN)
}

fn describe_one(
    broker: &Broker,
    session: &Session,
    img: &MetadataImage,
    version: i16,
    gid: GroupId,
) -> describe::DescribedGroup {
    let id = gid.0.to_string();
    if id.is_empty() {
        return failed(gid, errors::INVALID_GROUP_ID, None);
    }
    if !broker.authorize(session, Action::group(AclOperation::Describe, &id)) {
        return failed(gid, errors::GROUP_AUTHORIZATION_FAILED, None);
    }
    if let Err(code) = coordinator_partition(broker, &id) {
        return failed(gid, code, None);
    }
    let settings = broker.groups.consumer_settings();
    let default = settings.assignors.first().map_or("uniform", |a| a.as_str());
    let described = broker.groups.with_group(&id, |g| match &g.consumer {
        Some(c) => Ok(described(c, img, version, gid.clone(), default)),
        None => Err(format!("Group {id} is not a consumer group.")),
    });
    let group = match described {
        Some(Ok(group)) => group,
        Some(Err(message)) => return failed(gid, errors::GROUP_ID_NOT_FOUND, Some(message)),
        None => {
            let message = format!("Group {id} not found.");
            return failed(gid, errors::GROUP_ID_NOT_FOUND, Some(message));
        }
    };
    let hidden = group.members.iter().any(|m| {
        let topics = m.assignment.topic_partitions.iter();
        let targets = m.target_assignment.topic_partitions.iter();
        topics.chain(targets).any(|tp| {
            !broker.authorize(
                session,
                Action::topic(AclOperation::Describe, tp.topic_name.0.as_str()),
            )
        })
    });
    if hidden {
        return failed(
            gid,
            errors::TOPIC_AUTHORIZATION_FAILED,
            Some(
                "The group has described topic(s) that the client is not authorized to describe."
                    .into(),
            ),
        );
    }
    group
}

/// The group as ConsumerGroupDescribe shows it; `default` names the assignor before the
/// first target is computed.
fn described(
    c: &ConsumerGroup,
    img: &MetadataImage,
    version: i16,
    gid: GroupId,
    default: &str,
) -> describe::DescribedGroup {
    let empty = Assignment::new();
    let members = c
        .members
        .values()
        .map(|m| {
            let target = c.target.get(&m.member_id).unwrap_or(&empty);
            let mut d = describe::Member::default()
                .with_member_id(s(m.member_id.clone()))
                .with_instance_id(m.instance_id.clone().map(s))
                .with_rack_id(m.rack_id.clone().map(s))
                .with_member_epoch(m.member_epoch)
                .with_client_id(s(m.client_id.clone()))
                .with_client_host(s(m.client_host.clone()))
                .with_subscribed_topic_names(
                    m.topic_names
                        .iter()
                        .map(|t| TopicName(s(t.clone())))
                        .collect(),
                )
                .with_subscribed_topic_regex(Some(s(m.topic_regex.clone().unwrap_or_default())))
                .with_assignment(described_assignment(&m.assigned, img))
                .with_target_assignment(described_assignment(target, img));
            if version >= 1 {
                d = d.with_member_type(1);
            }
            d
        })
        .collect();
    describe::DescribedGroup::default()
        .with_group_id(gid)
        .with_group_state(s(c.state_name()))
        .with_group_epoch(c.group_epoch)
        .with_assignment_epoch(c.assignment_epoch)
        .with_assignor_name(s(c.assignor.clone().unwrap_or_else(|| default.to_string())))
        .with_members(members)
        .with_authorized_operations(i32::MIN)
}

/// An assignment with its topics' names; topics no longer in the image are left out.
fn described_assignment(a: &Assignment, img: &MetadataImage) -> describe::Assignment {
    let tps = a
        .iter()
        .filter_map(|(id, ps)| {
            let t = img.topic_by_id(id)?;
            Some(
                describe::TopicPartitions::default()
                    .with_topic_id((*id).into())
                    .with_topic_name(TopicName(s(t.name.clone())))
                    .with_partitions(ps.iter().copied().collect()),
            )
        })
        .collect();
    describe::Assignment::default().with_topic_partitions(tps)
}
