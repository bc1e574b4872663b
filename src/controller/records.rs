//! KRaft metadata records as Kafka encodes them in `__cluster_metadata`: a frame (version 1,
//! record type, record version) followed by the flexible-version message body.

use crate::storage::KafkaUuid;

/// Kafka's `MetadataRecordType` ids for the records evenkeel writes.
pub const TOPIC_RECORD: u32 = 2;
pub const PARTITION_RECORD: u32 = 3;
pub const CONFIG_RECORD: u32 = 4;
pub const REMOVE_TOPIC_RECORD: u32 = 9;
pub const PRODUCER_IDS_RECORD: u32 = 15;
/// `ConfigResource.Type` ids.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    Topic {
        name: String,
        topic_id: KafkaUuid,
    },
    Partition {
        partition_id: i32,
        topic_id: KafkaUuid,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
    },
    Config {
        resource_type: i8,
        resource_name: String,
        name: String,
        /// `None` deletes the override.
        value: Option<String>,
    },
    RemoveTopic {
        topic_id: KafkaUuid,
    },
    /// A block of producer ids was handed out; ids from `next_producer_id` on are free.
    ProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        next_producer_id: i64,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed metadata record: {0}")]
pub struct RecordDecodeError(pub String);

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_compact_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => put_uvarint(out, 0),
        Some(s) => {
            put_uvarint(out, s.len() as u64 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn put_compact_i32s(out: &mut Vec<u8>, v: &[i32]) {
    put_uvarint(out, v.len() as u64 + 1);
    for x in v {
        out.extend_from_slice(&x.to_be_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn err(what: &str) -> RecordDecodeError {
        RecordDecodeError(format!("truncated {what}"))
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], RecordDecodeError> {
        if self.0.len() < n {
            return Err(Self::err(what));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn uvarint(&mut self, what: &str) -> Result<u64, RecordDecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.take(1, what)?[0];
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RecordDecodeError(format!("varint too long in {what}")))
    }
    fn i8(&mut self, what: &str) -> Result<i8, RecordDecodeError> {
        Ok(self.take(1, what)?[0] as i8)
    }
    fn i64(&mut self, what: &str) -> Result<i64, RecordDecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }
    fn i32(&mut self, what: &str) -> Result<i32, RecordDecodeError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn uuid(&mut self, what: &str) -> Result<KafkaUuid, RecordDecodeError> {
        let mut u = [0u8; 16];
        u.copy_from_slice(self.take(16, what)?);
        Ok(KafkaUuid(u))
    }
    fn compact_str(&mut self, what: &str) -> Result<Option<String>, RecordDecodeError> {
        let n = self.uvarint(what)?;
        if n == 0 {
            return Ok(None);
        }
        let b = self.take((n - 1) as usize, what)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| RecordDecodeError(format!("{what} is not UTF-8")))
    }
    fn compact_i32s(&mut self, what: &str) -> Result<Vec<i32>, RecordDecodeError> {
        let n = self.uvarint(what)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        (0..n - 1).map(|_| self.i32(what)).collect()
    }
    /// Skips tagged fields (evenkeel writes none; newer writers may).
    fn tagged_fields(&mut self) -> Result<(), RecordDecodeError> {
        let n = self.uvarint("tagged fields")?;
        for _ in 0..n {
            self.uvarint("tag")?;
            let size = self.uvarint("tag size")?;
            self.take(size as usize, "tag value")?;
        }
        Ok(())
    }
}

impl MetadataRecord {
    /// The record value: frame version 1, type, version 0, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        put_uvarint(&mut out, 1);
        match self {
            MetadataRecord::Topic { name, topic_id } => {
                put_uvarint(&mut out, TOPIC_RECORD as u64);
                put_uvarint(&mut out, 0);
                put_compact_str(&mut out, Some(name));
                out.extend_from_slice(&topic_id.0);
            }
            MetadataRecord::Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
            } => {
                put_uvarint(&mut out, PARTITION_RECORD as u64);
                put_uvarint(&mut out, 0);
                out.extend_from_slice(&partition_id.to_be_bytes());
                out.extend_from_slice(&topic_id.0);
                put_compact_i32s(&mut out, replicas);
                put_compact_i32s(&mut out, isr);
                put_compact_i32s(&mut out, &[]); // removingReplicas
                put_compact_i32s(&mut out, &[]); // addingReplicas
                out.extend_from_slice(&leader.to_be_bytes());
                out.extend_from_slice(&leader_epoch.to_be_bytes());
                out.extend_from_slice(&partition_epoch.to_be_bytes());
            }
            MetadataRecord::Config {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                put_uvarint(&mut out, CONFIG_RECORD as u64);
                put_uvarint(&mut out, 0);
                out.push(*resource_type as u8);
                put_compact_str(&mut out, Some(resource_name));
                put_compact_str(&mut out, Some(name));
                put_compact_str(&mut out, value.as_deref());
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                put_uvarint(&mut out, REMOVE_TOPIC_RECORD as u64);
                put_uvarint(&mut out, 0);
                out.extend_from_slice(&topic_id.0);
            }
            MetadataRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id,
            } => {
                put_uvarint(&mut out, PRODUCER_IDS_RECORD as u64);
                put_uvarint(&mut out, 0);
                out.extend_from_slice(&broker_id.to_be_bytes());
                out.extend_from_slice(&broker_epoch.to_be_bytes());
                out.extend_from_slice(&next_producer_id.to_be_bytes());
            }
        }
        put_uvarint(&mut out, 0); // no tagged fields
        out
    }

    /// Decodes a record value; `Ok(None)` for record types evenkeel does not use.
    pub fn decode(value: &[u8]) -> Result<Option<MetadataRecord>, RecordDecodeError> {
        let mut r = Reader(value);
        let frame = r.uvarint("frame version")?;
        if frame != 1 {
            return Err(RecordDecodeError(format!("unknown frame version {frame}")));
        }
        let kind = r.uvarint("record type")? as u32;
        let _version = r.uvarint("record version")?;
        let rec = match kind {
            TOPIC_RECORD => MetadataRecord::Topic {
                name: r
                    .compact_str("topic name")?
                    .ok_or_else(|| RecordDecodeError("null topic name".into()))?,
                topic_id: r.uuid("topic id")?,
            },
            PARTITION_RECORD => {
                let partition_id = r.i32("partition id")?;
                let topic_id = r.uuid("topic id")?;
                let replicas = r.compact_i32s("replicas")?;
                let isr = r.compact_i32s("isr")?;
                r.compact_i32s("removing replicas")?;
                r.compact_i32s("adding replicas")?;
                MetadataRecord::Partition {
                    partition_id,
                    topic_id,
                    replicas,
                    isr,
                    leader: r.i32("leader")?,
                    leader_epoch: r.i32("leader epoch")?,
                    partition_epoch: r.i32("partition epoch")?,
                }
            }
            CONFIG_RECORD => MetadataRecord::Config {
                resource_type: r.i8("resource type")?,
                resource_name: r.compact_str("resource name")?.unwrap_or_default(),
                name: r
                    .compact_str("config name")?
                    .ok_or_else(|| RecordDecodeError("null config name".into()))?,
                value: r.compact_str("config value")?,
            },
            REMOVE_TOPIC_RECORD => MetadataRecord::RemoveTopic {
                topic_id: r.uuid("topic id")?,
            },
            PRODUCER_IDS_RECORD => MetadataRecord::ProducerIds {
                broker_id: r.i32("broker id")?,
                broker_epoch: r.i64("broker epoch")?,
                next_producer_id: r.i64("next producer id")?,
            },
            _ => return Ok(None),
        };
        r.tagged_fields()?;
        Ok(Some(rec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let id = KafkaUuid::random();
        let recs = vec![
            MetadataRecord::Topic {
                name: "orders".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                partition_id: 2,
                topic_id: id,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
            },
            MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: "orders".into(),
                name: "retention.ms".into(),
                value: Some("1000".into()),
            },
            MetadataRecord::Config {
                resource_type: RESOURCE_TOPIC,
                resource_name: "orders".into(),
                name: "retention.ms".into(),
                value: None,
            },
            MetadataRecord::RemoveTopic { topic_id: id },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                broker_epoch: 7,
                next_producer_id: 2000,
            },
        ];
        for r in recs {
            assert_eq!(MetadataRecord::decode(&r.encode()).unwrap(), Some(r));
        }
    }

    #[test]
    fn topic_record_bytes_follow_kafkas_layout() {
        let r = MetadataRecord::Topic {
            name: "ab".into(),
            topic_id: KafkaUuid([7; 16]),
        };
        let mut expect = vec![1, 2, 0, 3, b'a', b'b'];
        expect.extend([7; 16]);
        expect.push(0);
        assert_eq!(r.encode(), expect);
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let full = MetadataRecord::Topic {
            name: "orders".into(),
            topic_id: KafkaUuid([1; 16]),
        }
        .encode();
        for n in 0..full.len() {
            assert!(MetadataRecord::decode(&full[..n]).is_err());
        }
    }
}
