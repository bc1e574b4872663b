//! Kafka's ClientQuotaControlManager: which ClientQuotaRecords AlterClientQuotas writes. Each
//! entity is judged alone: an unknown entity type or combination, an unknown or repeated key,
//! or a value a quota cannot take refuses that entity's changes and no other's. Deliberately
//! unlike Kafka, a value that is not a finite number is refused (Kafka lets NaN through).

use crate::metadata::image::MetadataImage;
use crate::metadata::quota_image::{QuotaEntity, CLIENT_ID, IP, USER};
use crate::metadata::records::{ClientQuotaRecord, MetadataRecord};
use crate::protocol::errors;

use super::ControllerError;

/// The quotas a user, a client id or both can have, with whether the value must be whole.
const USER_CLIENT_KEYS: &[(&str, Integral)] = &[
    ("producer_byte_rate", Integral::Long),
    ("consumer_byte_rate", Integral::Long),
    ("request_percentage", Integral::No),
    ("controller_mutation_rate", Integral::No),
];
/// The quota an IP can have.
const IP_KEYS: &[(&str, Integral)] = &[("connection_creation_rate", Integral::Int)];

/// The type Kafka's ConfigDef gives a quota key.
#[derive(Clone, Copy)]
enum Integral {
    No,
    Int,
    Long,
}

/// One entity's changes in a request: each key with a new value, or `None` to remove it.
pub struct QuotaAlteration {
    /// The entity as the request names it, `(type, name)` in request order.
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

/// The records of a request, and each entity's result in request order.
pub fn alter_client_quotas(
    img: &MetadataImage,
    alterations: &[QuotaAlteration],
) -> (Vec<MetadataRecord>, Vec<Result<(), ControllerError>>) {
    let mut records = Vec::new();
    let mut seen: Vec<QuotaEntity> = Vec::new();
    let results = alterations
        .iter()
        .map(|a| {
            let entity: QuotaEntity = a.entity.iter().cloned().collect();
            if seen.contains(&entity) {
                return Err(invalid(format!(
                    "Ignoring duplicate entity {}",
                    describe_entity(&entity)
                )));
            }
            seen.push(entity);
            let mut written = alter_entity(img, a)?;
            records.append(&mut written);
            Ok(())
        })
        .collect();
    (records, results)
}

fn invalid(message: impl Into<String>) -> ControllerError {
    ControllerError::new(errors::INVALID_REQUEST, message)
}

/// The records of one entity's changes: only the keys whose value changes.
fn alter_entity(
    img: &MetadataImage,
    a: &QuotaAlteration,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    let entity = validate_entity(&a.entity)?;
    let keys = keys_for(&entity)?;
    let current = img.quotas().get(&entity);
    let mut seen: Vec<&str> = Vec::new();
    let mut records = Vec::new();
    for (key, value) in &a.ops {
        if seen.contains(&key.as_str()) {
            return Err(invalid(format!(
                "Duplicate quota key {key} not updating quota for this entity {}",
                describe_entity(&entity)
            )));
        }
        seen.push(key);
        let now = current.and_then(|c| c.get(key)).copied();
        let record = |value: f64, remove: bool| {
            MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: entity.iter().map(|(t, n)| (t.clone(), n.clone())).collect(),
                key: key.clone(),
                value,
                remove,
            })
        };
        match value {
            None if now.is_some() => records.push(record(0.0, true)),
            None => {}
            Some(v) => {
                validate_value(keys, key, *v)?;
                if now != Some(*v) {
                    records.push(record(*v, false));
                }
            }
        }
    }
    Ok(records)
}

/// The entity as a map (a type named twice keeps its last name, as Kafka's request parsing
/// does), refused when a type is unknown or a name is blank.
fn validate_entity(parts: &[(String, Option<String>)]) -> Result<QuotaEntity, ControllerError> {
    let entity: QuotaEntity = parts.iter().cloned().collect();
    if entity.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    for (entity_type, name) in &entity {
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Err(invalid(format!(
                "Unhandled client quota entity type: {entity_type}"
            )));
        }
        if name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(invalid(format!("Empty {entity_type} not supported")));
        }
    }
    Ok(entity)
}

/// The keys an entity of this combination of types can have.
fn keys_for(entity: &QuotaEntity) -> Result<&'static [(&'static str, Integral)], ControllerError> {
    let Some(ip) = entity.get(IP) else {
        return Ok(USER_CLIENT_KEYS);
    };
    if entity.len() > 1 {
        return Err(invalid(
            // Kafka's words, its missing space included.
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ));
    }
    match ip {
        Some(ip) if ip.parse::<std::net::IpAddr>().is_err() => Err(invalid(format!(
            "{ip} is not a valid IP or resolvable host."
        ))),
        _ => Ok(IP_KEYS),
    }
}

/// A value for `key`: a known key, above zero, whole where the key's type is.
fn validate_value(keys: &[(&str, Integral)], key: &str, value: f64) -> Result<(), ControllerError> {
    let Some((_, integral)) = keys.iter().find(|(k, _)| *k == key) else {
        return Err(invalid(format!("Invalid configuration key {key}")));
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(invalid(format!("Quota {key} must be greater than 0")));
    }
    let max = match integral {
        Integral::No => return Ok(()),
        Integral::Int => i32::MAX as f64,
        Integral::Long => i64::MAX as f64,
    };
    if value > max {
        let kind = if matches!(integral, Integral::Int) {
            "INT"
        } else {
            "LONG"
        };
        return Err(invalid(format!(
            "Proposed value for {key} is too large for a {kind}."
        )));
    }
    if (value % 1.0).abs() > 1e-6 {
        return Err(invalid(format!("{key} cannot be a fractional value.")));
    }
    Ok(())
}

/// An entity as Kafka prints one: `ClientQuotaEntity(entries={user=alice})`.
fn describe_entity(entity: &QuotaEntity) -> String {
    let entries: Vec<String> = entity
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("null")))
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", entries.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alteration(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> QuotaAlteration {
        QuotaAlteration {
            entity: entity
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
            ops: ops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn message(r: &Result<(), ControllerError>) -> &str {
        r.as_ref().err().map_or("", |e| e.message.as_str())
    }

    #[test]
    fn each_entity_is_judged_alone_with_kafkas_messages() {
        let img = MetadataImage::empty();
        let user = |name: &'static str| [(USER, Some(name))];
        let (records, results) = alter_client_quotas(
            &img,
            &[
                alteration(&user("a"), &[("producer_byte_rate", Some(1048576.0))]),
                alteration(&user("b"), &[("producer_byte_rate", Some(-1.0))]),
                alteration(&user("c"), &[("producer_byte_rate", Some(1.5))]),
                alteration(&user("d"), &[("request_percentage", Some(12.5))]),
                alteration(&user("e"), &[("connection_creation_rate", Some(5.0))]),
                alteration(
                    &[(IP, Some("10.0.0.1"))],
                    &[("connection_creation_rate", Some(5.0))],
                ),
                alteration(
                    &[(IP, Some("not an ip"))],
                    &[("connection_creation_rate", Some(5.0))],
                ),
                alteration(&[(USER, Some("f")), (IP, None)], &[]),
                alteration(&[("group", Some("g"))], &[]),
                alteration(&[], &[]),
                alteration(&user(" "), &[]),
                alteration(
                    &[(CLIENT_ID, None)],
                    &[
                        ("consumer_byte_rate", Some(1.0)),
                        ("consumer_byte_rate", None),
                    ],
                ),
                // A type named twice keeps its last name: this is user a again.
                alteration(&[(USER, Some("x")), (USER, Some("a"))], &[]),
                alteration(&user("g"), &[("producer_byte_rate", Some(f64::NAN))]),
            ],
        );
        let messages: Vec<&str> = results.iter().map(message).collect();
        assert_eq!(
            messages,
            [
                "",
                "Quota producer_byte_rate must be greater than 0",
                "producer_byte_rate cannot be a fractional value.",
                "",
                "Invalid configuration key connection_creation_rate",
                "",
                "not an ip is not a valid IP or resolvable host.",
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
                "Unhandled client quota entity type: group",
                "Invalid empty client quota entity",
                "Empty user not supported",
                "Duplicate quota key consumer_byte_rate not updating quota for this entity ClientQuotaEntity(entries={client-id=null})",
                "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})",
                "Quota producer_byte_rate must be greater than 0",
            ]
        );
        assert!(results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| e.code == errors::INVALID_REQUEST));
        // The accepted entities' records, nothing of a refused one.
        assert_eq!(records.len(), 3);
    }

    #[test]
    fn an_unchanged_value_writes_nothing_and_removing_an_absent_key_is_a_no_op() {
        let mut img = MetadataImage::empty();
        let user = [(USER, Some("alice"))];
        let (records, _) = alter_client_quotas(
            &img,
            &[alteration(&user, &[("producer_byte_rate", Some(1024.0))])],
        );
        for r in &records {
            img.apply(r, 1);
        }
        let (again, results) = alter_client_quotas(
            &img,
            &[alteration(
                &user,
                &[
                    ("producer_byte_rate", Some(1024.0)),
                    ("consumer_byte_rate", None),
                ],
            )],
        );
        assert!(results[0].is_ok());
        assert!(again.is_empty());
        let (removed, _) =
            alter_client_quotas(&img, &[alteration(&user, &[("producer_byte_rate", None)])]);
        assert!(matches!(&removed[..], [MetadataRecord::ClientQuota(q)] if q.remove));
    }
}
