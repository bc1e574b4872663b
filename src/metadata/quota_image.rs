//! The client quotas of the metadata image: for each entity (a user, a client id, an IP, a
//! user with a client id, or their defaults) the quota values set on it, as the metadata log's
//! ClientQuotaRecords build them. Shared between image copies like the security part.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::records::{ClientQuotaRecord, MetadataRecord};

/// Kafka's entity types.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// An entity: each entity type it names, with a name or `None` for that type's default.
pub type QuotaEntity = BTreeMap<String, Option<String>>;

/// One entity's quotas: key (`producer_byte_rate`, …) to value.
pub type QuotaValues = BTreeMap<String, f64>;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaImage {
    quotas: Arc<BTreeMap<QuotaEntity, QuotaValues>>,
}

impl QuotaImage {
    /// Applies a ClientQuotaRecord; whether it was one. An entity left without quotas is
    /// dropped, so an image rebuilt from a snapshot equals the one that replayed the log. A
    /// value that is not a finite number (Kafka's controller lets a NaN through; evenkeel's
    /// refuses it) is no quota at all.
    pub fn apply(&mut self, rec: &MetadataRecord) -> bool {
        let MetadataRecord::ClientQuota(q) = rec else {
            return false;
        };
        if !q.remove && !q.value.is_finite() {
            return true;
        }
        let entity: QuotaEntity = q.entity.iter().cloned().collect();
        let quotas = Arc::make_mut(&mut self.quotas);
        if q.remove {
            if let Some(values) = quotas.get_mut(&entity) {
                values.remove(&q.key);
                if values.is_empty() {
                    quotas.remove(&entity);
                }
            }
        } else {
            quotas
                .entry(entity)
                .or_default()
                .insert(q.key.clone(), q.value);
        }
        true
    }

    /// The quotas set on exactly this entity.
    pub fn get(&self, entity: &QuotaEntity) -> Option<&QuotaValues> {
        self.quotas.get(entity)
    }

    /// Every entity with quotas, with them.
    pub fn entities(&self) -> impl Iterator<Item = (&QuotaEntity, &QuotaValues)> {
        self.quotas.iter()
    }

    /// Whether any quota is set (most clusters have none, and pay nothing for the feature).
    pub fn is_empty(&self) -> bool {
        self.quotas.is_empty()
    }

    /// The records that rebuild this part of the image, for a snapshot.
    pub fn to_records(&self, out: &mut Vec<MetadataRecord>) {
        for (entity, values) in self.quotas.iter() {
            for (key, value) in values {
                out.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: entity.iter().map(|(t, n)| (t.clone(), n.clone())).collect(),
                    key: key.clone(),
                    value: *value,
                    remove: false,
                }));
            }
        }
    }
}

/// An entity from `(type, name)` pairs.
pub fn entity<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> QuotaEntity {
    parts
        .into_iter()
        .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(e: &[(&str, Option<&str>)], key: &str, value: f64, remove: bool) -> MetadataRecord {
        MetadataRecord::ClientQuota(ClientQuotaRecord {
            entity: e
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
            key: key.into(),
            value,
            remove,
        })
    }

    #[test]
    fn quotas_come_and_go_with_their_records_and_survive_a_snapshot() {
        let alice = [(USER, Some("alice")), (CLIENT_ID, None)];
        let mut img = QuotaImage::default();
        for rec in [
            set(&alice, "producer_byte_rate", 1024.0, false),
            set(&alice, "consumer_byte_rate", 2048.0, false),
            set(&alice, "producer_byte_rate", 4096.0, false),
            set(&[(CLIENT_ID, Some("c"))], "request_percentage", 50.0, false),
            set(&[(CLIENT_ID, Some("c"))], "request_percentage", 0.0, true),
            set(&[(USER, None)], "producer_byte_rate", 0.0, true),
            set(
                &[(USER, Some("bob"))],
                "producer_byte_rate",
                f64::NAN,
                false,
            ),
        ] {
            assert!(img.apply(&rec));
        }
        assert!(!img.apply(&MetadataRecord::NoOp));
        let values = img.get(&entity(alice)).expect("alice's quotas");
        assert_eq!(values.get("producer_byte_rate"), Some(&4096.0));
        assert_eq!(values.get("consumer_byte_rate"), Some(&2048.0));
        // The client's only quota was removed: the entity is gone, as after a snapshot.
        assert_eq!(img.entities().count(), 1);
        let mut records = Vec::new();
        img.to_records(&mut records);
        assert_eq!(records.len(), 2);
        let mut again = QuotaImage::default();
        for r in &records {
            again.apply(r);
        }
        assert_eq!(again, img);
    }
}
