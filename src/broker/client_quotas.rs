//! The client quota APIs: DescribeClientQuotas answered from the published image with Kafka's
//! filter semantics, AlterClientQuotas forwarded to the active controller and answered once
//! this broker's image shows the change (so the quota is enforced here when the tool returns);
//! and the controller mutation quota taken over the topics of the admin requests that change
//! partitions, before they are forwarded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::*;

use super::auth::{Action, Session};
use super::controller_channel::is_not_controller;
use super::quotas::{ClientIdentity, Mutation};
use super::{msg, Broker, Outcome};
use crate::metadata::image::MetadataImage;
use crate::metadata::quota_image::{QuotaEntity, CLIENT_ID, IP, USER};
use crate::protocol::client_quotas as wire;
use crate::protocol::errors;
use crate::protocol::str_bytes as s;
use crate::security::acl::AclOperation;

/// DescribeClientQuotas' match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// A parsed filter: types whose name must equal (`None`: the default), types that must appear.
#[derive(Debug, Default, PartialEq)]
struct Filter {
    exact: BTreeMap<String, Option<String>>,
    any: BTreeSet<String>,
    strict: bool,
}

/// DescribeClientQuotas: every entity with quotas that the filter matches, after the cluster's
/// DESCRIBE_CONFIGS and the filter's checks.
pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let refused = |code, text: Option<String>| {
        DescribeClientQuotasResponse::default()
            .with_error_code(code)
            .with_error_message(text.and_then(msg))
            .with_entries(None)
    };
    if !broker.authorize(session, Action::cluster(AclOperation::DescribeConfigs)) {
        return refused(errors::CLUSTER_AUTHORIZATION_FAILED, None);
    }
    let filter = match parse_filter(&req) {
        Ok(f) => f,
        Err((code, text)) => return refused(code, Some(text)),
    };
    let img = broker.image();
    DescribeClientQuotasResponse::default()
        .with_error_message(None)
        .with_entries(Some(matching_entries(&img, &filter)))
}

/// The filter of a request, or the error and message Kafka answers it with.
fn parse_filter(req: &DescribeClientQuotasRequest) -> Result<Filter, (i16, String)> {
    let invalid = |m: String| Err((errors::INVALID_REQUEST, m));
    let mut f = Filter {
        strict: req.strict,
        ..Filter::default()
    };
    for c in &req.components {
        let t = c.entity_type.to_string();
        let name = c._match.as_ref().map(|m| m.to_string());
        if t.is_empty() {
            return invalid("Invalid empty entity type.".into());
        }
        if f.exact.contains_key(&t) || f.any.contains(&t) {
            return invalid(format!(
                "Entity type {t} cannot appear more than once in the filter."
            ));
        }
        if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
            return Err((
                errors::UNSUPPORTED_VERSION,
                format!("Unsupported entity type {t}"),
            ));
        }
        match (c.match_type, name) {
            (MATCH_EXACT, None) => {
                return invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                )
            }
            (MATCH_EXACT, Some(n)) => {
                f.exact.insert(t, Some(n));
            }
            (MATCH_DEFAULT, None) => {
                f.exact.insert(t, None);
            }
            (MATCH_DEFAULT, Some(_)) => {
                return invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                )
            }
            (MATCH_SPECIFIED, None) => {
                f.any.insert(t);
            }
            (MATCH_SPECIFIED, Some(_)) => {
                return invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                )
            }
            (other, _) => return invalid(format!("Unknown match type {other}")),
        }
    }
    let has = |t: &str| f.exact.contains_key(t) || f.any.contains(t);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        );
    }
    Ok(f)
}

/// Whether `entity` passes the filter (Kafka's ClientQuotasImage.matches).
fn matches(entity: &QuotaEntity, f: &Filter) -> bool {
    if f.strict && entity.len() != f.exact.len() + f.any.len() {
        return false;
    }
    f.exact.iter().all(|(t, n)| entity.get(t) == Some(n))
        && f.any.iter().all(|t| entity.contains_key(t))
}

fn matching_entries(img: &MetadataImage, f: &Filter) -> Vec<EntryData> {
    img.quotas()
        .entities()
        .filter(|(entity, _)| matches(entity, f))
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(s(t.clone()))
                                .with_entity_name(n.clone().map(s))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(k, v)| ValueData::default().with_key(s(k.clone())).with_value(*v))
                        .collect(),
                )
        })
        .collect()
}

/// One accepted entity's changes, to wait for: the entity and each key's new value (`None`:
/// removed).
type Expected = Vec<(QuotaEntity, Vec<(String, Option<f64>)>)>;

/// AlterClientQuotas, forwarded after the cluster's ALTER_CONFIGS; answered once this broker's
/// image holds every accepted change.
pub fn alter(
    broker: &Arc<Broker>,
    session: &Session,
    version: i16,
    req: AlterClientQuotasRequest,
) -> Outcome<AlterClientQuotasResponse> {
    let asked = req.clone();
    let all = move |code: i16| wire::refuse_all(&asked, code, None);
    if !broker.authorize(session, Action::cluster(AclOperation::AlterConfigs)) {
        return Outcome::Now(all(errors::CLUSTER_AUTHORIZATION_FAILED));
    }
    let wanted = expected(&req);
    let validate_only = req.validate_only;
    super::admin::forward(
        broker,
        version,
        req,
        |r| r.entries.iter().any(|e| is_not_controller(e.error_code)),
        all,
        move |broker, resp| async move {
            if validate_only {
                return resp;
            }
            let done: Expected = wanted
                .into_iter()
                .zip(&resp.entries)
                .filter(|(_, e)| e.error_code == errors::NONE)
                .map(|(w, _)| w)
                .collect();
            broker.wait_for_image(|img| shows(img, &done)).await;
            resp
        },
    )
}

/// Each entry's entity and changes as the image will hold them.
fn expected(req: &AlterClientQuotasRequest) -> Expected {
    req.entries
        .iter()
        .map(|e| {
            let (entity, changes) = wire::alteration(e);
            (entity.into_iter().collect(), changes)
        })
        .collect()
}

/// Whether the image holds every change.
fn shows(img: &MetadataImage, done: &Expected) -> bool {
    done.iter().all(|(entity, ops)| {
        let values = img.quotas().get(entity);
        ops.iter()
            .all(|(k, v)| values.and_then(|vals| vals.get(k)).copied() == *v)
    })
}

/// The controller mutation quota over the topics a request changes, each topic's partitions
/// (`permits`) taken in request order: the topics that found the client's bucket in debt on a
/// strict version are taken out of `topics` and handed to `refuse`. The session is muted for
/// the throttle, which is returned in ms for the response.
fn take_mutations<T>(
    broker: &Broker,
    session: &Session,
    who: ClientIdentity<'_>,
    strict: bool,
    topics: &mut Vec<T>,
    permits: impl Fn(&T) -> f64,
    mut refuse: impl FnMut(&T),
) -> i32 {
    let img = broker.image();
    if img.quotas().is_empty() {
        return 0;
    }
    let mut throttle = std::time::Duration::ZERO;
    topics.retain(|t| {
        match broker
            .mutation_quotas
            .take(img.quotas(), who, permits(t), strict)
        {
            Mutation::Allowed(d) => {
                throttle = throttle.max(d);
                true
            }
            Mutation::Refused(d) => {
                throttle = throttle.max(d);
                refuse(t);
                false
            }
        }
    });
    session.mute_after_response(throttle);
    super::quotas::as_throttle_ms(throttle)
}

/// The controller mutation quota over a CreateTopics request (strict from v6; nothing for a
/// validate-only one): each topic's partitions, the brokers' `num.partitions` where it names
/// none; refused topics join `refused`.
pub(super) fn take_topic_creations(
    broker: &Broker,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    req: &mut CreateTopicsRequest,
    refused: &mut Vec<create_topics_response::CreatableTopicResult>,
) -> i32 {
    if req.validate_only {
        return 0;
    }
    let default_partitions = broker.config.num_partitions;
    take_mutations(
        broker,
        session,
        who,
        version >= 6,
        &mut req.topics,
        |t| {
            f64::from(match (t.num_partitions, t.assignments.len()) {
                (n, _) if n > 0 => n,
                (_, 0) => default_partitions,
                (_, assigned) => assigned as i32,
            })
        },
        |t| {
            refused.push(
                create_topics_response::CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_error_code(errors::THROTTLING_QUOTA_EXCEEDED),
            )
        },
    )
}

/// The controller mutation quota over a CreatePartitions request (strict from v3; nothing for
/// a validate-only one): the partitions each topic gains; refused topics join `refused`.
pub(super) fn take_partition_additions(
    broker: &Broker,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    req: &mut CreatePartitionsRequest,
    refused: &mut Vec<create_partitions_response::CreatePartitionsTopicResult>,
) -> i32 {
    if req.validate_only {
        return 0;
    }
    let img = broker.image();
    let added = |t: &create_partitions_request::CreatePartitionsTopic| {
        let now = img
            .topic(&t.name.0)
            .map_or(0, |t| t.partitions.len() as i32);
        f64::from((t.count - now).max(0))
    };
    take_mutations(
        broker,
        session,
        who,
        version >= 3,
        &mut req.topics,
        added,
        |t| {
            refused.push(
                create_partitions_response::CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(errors::THROTTLING_QUOTA_EXCEEDED)
                    .with_error_message(None),
            )
        },
    )
}

/// The controller mutation quota over a DeleteTopics request (strict from v5): each topic's
/// partitions, as the image counts them; refused topics join `refused`.
pub(super) fn take_topic_deletions(
    broker: &Broker,
    session: &Session,
    who: ClientIdentity<'_>,
    version: i16,
    req: &mut DeleteTopicsRequest,
    refused: &mut Vec<delete_topics_response::DeletableTopicResult>,
) -> i32 {
    use delete_topics_response::DeletableTopicResult;
    let img = broker.image();
    let partitions = |name: &str| img.topic(name).map_or(0.0, |t| t.partitions.len() as f64);
    let over = |name: Option<TopicName>, id: uuid::Uuid| {
        DeletableTopicResult::default()
            .with_name(name)
            .with_topic_id(id)
            .with_error_code(errors::THROTTLING_QUOTA_EXCEEDED)
    };
    let strict = version >= 5;
    let by_name = take_mutations(
        broker,
        session,
        who,
        strict,
        &mut req.topic_names,
        |n| partitions(&n.0),
        |n| refused.push(over(Some(n.clone()), uuid::Uuid::nil())),
    );
    let by_id = take_mutations(
        broker,
        session,
        who,
        strict,
        &mut req.topics,
        |t| match &t.name {
            Some(n) => partitions(&n.0),
            None => img
                .topic_by_id(&t.topic_id.into())
                .map_or(0.0, |t| t.partitions.len() as f64),
        },
        |t| refused.push(over(t.name.clone(), t.topic_id)),
    );
    by_name.max(by_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    fn component(t: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(s(t))
            .with_match_type(match_type)
            .with_match(name.map(s))
    }

    fn filter(components: Vec<ComponentData>, strict: bool) -> Result<Filter, (i16, String)> {
        parse_filter(
            &DescribeClientQuotasRequest::default()
                .with_components(components)
                .with_strict(strict),
        )
    }

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        crate::metadata::quota_image::entity(parts.iter().copied())
    }

    #[test]
    fn filters_match_as_kafkas_client_quotas_image() {
        let alice = entity(&[(USER, Some("alice"))]);
        let alice_c = entity(&[(USER, Some("alice")), (CLIENT_ID, Some("c"))]);
        let default_user = entity(&[(USER, None)]);
        let all = [&alice, &alice_c, &default_user];
        let picked =
            |f: &Filter| -> Vec<usize> { (0..all.len()).filter(|i| matches(all[*i], f)).collect() };
        let exact = filter(vec![component(USER, MATCH_EXACT, Some("alice"))], false).unwrap();
        assert_eq!(picked(&exact), [0, 1]);
        let strict = filter(vec![component(USER, MATCH_EXACT, Some("alice"))], true).unwrap();
        assert_eq!(picked(&strict), [0]);
        let default = filter(vec![component(USER, MATCH_DEFAULT, None)], false).unwrap();
        assert_eq!(picked(&default), [2]);
        let any_client = filter(vec![component(CLIENT_ID, MATCH_SPECIFIED, None)], false).unwrap();
        assert_eq!(picked(&any_client), [1]);
        assert_eq!(picked(&filter(vec![], false).unwrap()), [0, 1, 2]);
    }

    #[test]
    fn malformed_filters_are_refused_with_kafkas_messages() {
        let refused = |c: Vec<ComponentData>| filter(c, false).expect_err("refused");
        assert_eq!(
            refused(vec![component(USER, MATCH_EXACT, None)]).1,
            "Request specified MATCH_TYPE_EXACT, but set match string to null."
        );
        assert_eq!(
            refused(vec![
                component(USER, MATCH_DEFAULT, None),
                component(USER, MATCH_SPECIFIED, None)
            ])
            .1,
            "Entity type user cannot appear more than once in the filter."
        );
        assert_eq!(
            refused(vec![component("group", MATCH_SPECIFIED, None)]),
            (
                errors::UNSUPPORTED_VERSION,
                "Unsupported entity type group".into()
            )
        );
        assert_eq!(
            refused(vec![component(USER, 7, None)]),
            (errors::INVALID_REQUEST, "Unknown match type 7".into())
        );
        assert_eq!(
            refused(vec![
                component(IP, MATCH_SPECIFIED, None),
                component(CLIENT_ID, MATCH_DEFAULT, None)
            ])
            .0,
            errors::INVALID_REQUEST
        );
    }
}
