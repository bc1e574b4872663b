//! The consumer group records of `__consumer_offsets` (KIP-848), byte for byte as Kafka's
//! group coordinator writes them: the group epoch, each member's subscription, the target
//! assignment and each member's current assignment, so a new coordinator takes the group over.

// Source: apache/kafka group-coordinator/src/main/resources/common/message/ConsumerGroup*.json
// (4.1): keys non-flexible (the int16 record type, then the fields), values version 0,
// flexible, each struct ending in a tagged-field section.

use std::collections::BTreeSet;

use super::assignor::Assignment;
use super::records::{GroupRecordError, Reader, Writer};
use crate::storage::checkpoint::KafkaUuid;

type Result<T> = std::result::Result<T, GroupRecordError>;

/// The record types (key versions) of a consumer group.
const METADATA: i16 = 3;
const MEMBER_METADATA: i16 = 5;
const TARGET_ASSIGNMENT_METADATA: i16 = 6;
const TARGET_ASSIGNMENT_MEMBER: i16 = 7;
const CURRENT_MEMBER_ASSIGNMENT: i16 = 8;

/// The key of a consumer group record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsumerRecordKey {
    /// `ConsumerGroupMetadataKey`: the group epoch.
    Metadata { group: String },
    /// `ConsumerGroupMemberMetadataKey`: a member's subscription.
    MemberMetadata { group: String, member: String },
    /// `ConsumerGroupTargetAssignmentMetadataKey`: the assignment epoch.
    TargetAssignmentMetadata { group: String },
    /// `ConsumerGroupTargetAssignmentMemberKey`: a member's target.
    TargetAssignmentMember { group: String, member: String },
    /// `ConsumerGroupCurrentMemberAssignmentKey`: a member's epoch, state and partitions.
    CurrentMemberAssignment { group: String, member: String },
}

impl ConsumerRecordKey {
    fn parts(&self) -> (i16, &str, Option<&str>) {
        match self {
            ConsumerRecordKey::Metadata { group } => (METADATA, group, None),
            ConsumerRecordKey::MemberMetadata { group, member } => {
                (MEMBER_METADATA, group, Some(member))
            }
            ConsumerRecordKey::TargetAssignmentMetadata { group } => {
                (TARGET_ASSIGNMENT_METADATA, group, None)
            }
            ConsumerRecordKey::TargetAssignmentMember { group, member } => {
                (TARGET_ASSIGNMENT_MEMBER, group, Some(member))
            }
            ConsumerRecordKey::CurrentMemberAssignment { group, member } => {
                (CURRENT_MEMBER_ASSIGNMENT, group, Some(member))
            }
        }
    }

    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        self.parts().1
    }

    pub fn try_encode(&self) -> Result<Vec<u8>> {
        let (kind, group, member) = self.parts();
        let mut w = Writer::new(false);
        w.i16(kind);
        w.string("group", group)?;
        if let Some(m) = member {
            w.string("member", m)?;
        }
        Ok(w.buf)
    }

    /// Reads a key of types 3 and 5–8; other types are `UnknownRecordType`.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "key", false);
        let kind = r.i16("record type")?;
        let group = r.string("group")?;
        let mut member = || r.string("member");
        Ok(match kind {
            METADATA => ConsumerRecordKey::Metadata { group },
            MEMBER_METADATA => ConsumerRecordKey::MemberMetadata {
                group,
                member: member()?,
            },
            TARGET_ASSIGNMENT_METADATA => ConsumerRecordKey::TargetAssignmentMetadata { group },
            TARGET_ASSIGNMENT_MEMBER => ConsumerRecordKey::TargetAssignmentMember {
                group,
                member: member()?,
            },
            CURRENT_MEMBER_ASSIGNMENT => ConsumerRecordKey::CurrentMemberAssignment {
                group,
                member: member()?,
            },
            other => return Err(GroupRecordError::UnknownRecordType(other)),
        })
    }
}

/// `ConsumerGroupMemberMetadataValue` (the classic-member tagged field is not written).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadataValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub topic_names: Vec<String>,
    pub topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// `ConsumerGroupCurrentMemberAssignmentValue`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// The value of a consumer group record, by its key's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerRecordValue {
    Metadata { epoch: i32 },
    MemberMetadata(MemberMetadataValue),
    TargetAssignmentMetadata { assignment_epoch: i32 },
    TargetAssignmentMember(Assignment),
    CurrentMemberAssignment(CurrentAssignmentValue),
}

impl ConsumerRecordValue {
    /// The value as Kafka writes it: version 0, flexible.
    pub fn try_encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::new(true);
        w.i16(0);
        match self {
            ConsumerRecordValue::Metadata { epoch } => w.i32(*epoch),
            ConsumerRecordValue::MemberMetadata(m) => write_member(&mut w, m)?,
            ConsumerRecordValue::TargetAssignmentMetadata { assignment_epoch } => {
                w.i32(*assignment_epoch)
            }
            ConsumerRecordValue::TargetAssignmentMember(a) => write_assignment(&mut w, a)?,
            ConsumerRecordValue::CurrentMemberAssignment(c) => {
                w.i32(c.member_epoch);
                w.i32(c.previous_member_epoch);
                w.buf.push(c.state as u8);
                write_assignment(&mut w, &c.assigned)?;
                write_assignment(&mut w, &c.pending_revocation)?;
            }
        }
        w.tagged_fields();
        Ok(w.buf)
    }

    /// Reads the value of a record of `key`'s type; unknown tagged fields are skipped.
    pub fn decode(key: &ConsumerRecordKey, bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "value", true);
        let version = r.i16("version")?;
        if version != 0 {
            return Err(GroupRecordError::UnsupportedVersion {
                what: "consumer group value",
                version,
            });
        }
        let v = match key {
            ConsumerRecordKey::Metadata { .. } => ConsumerRecordValue::Metadata {
                epoch: r.i32("epoch")?,
            },
            ConsumerRecordKey::MemberMetadata { .. } => {
                ConsumerRecordValue::MemberMetadata(read_member(&mut r)?)
            }
            ConsumerRecordKey::TargetAssignmentMetadata { .. } => {
                ConsumerRecordValue::TargetAssignmentMetadata {
                    assignment_epoch: r.i32("assignment epoch")?,
                }
            }
            ConsumerRecordKey::TargetAssignmentMember { .. } => {
                ConsumerRecordValue::TargetAssignmentMember(read_assignment(&mut r)?)
            }
            ConsumerRecordKey::CurrentMemberAssignment { .. } => {
                ConsumerRecordValue::CurrentMemberAssignment(CurrentAssignmentValue {
                    member_epoch: r.i32("member epoch")?,
                    previous_member_epoch: r.i32("previous member epoch")?,
                    state: r.array::<1>("state")?[0] as i8,
                    assigned: read_assignment(&mut r)?,
                    pending_revocation: read_assignment(&mut r)?,
                })
            }
        };
        r.tagged_fields("value")?;
        Ok(v)
    }
}

fn write_member(w: &mut Writer, m: &MemberMetadataValue) -> Result<()> {
    w.nullable_string("instance id", m.instance_id.as_deref())?;
    w.nullable_string("rack id", m.rack_id.as_deref())?;
    w.string("client id", &m.client_id)?;
    w.string("client host", &m.client_host)?;
    w.array_len("topic names", m.topic_names.len())?;
    for t in &m.topic_names {
        w.string("topic name", t)?;
    }
    w.nullable_string("topic regex", m.topic_regex.as_deref())?;
    w.i32(m.rebalance_timeout_ms);
    w.nullable_string("server assignor", m.server_assignor.as_deref())
}

fn read_member(r: &mut Reader) -> Result<MemberMetadataValue> {
    let instance_id = r.nullable_string("instance id")?;
    let rack_id = r.nullable_string("rack id")?;
    let client_id = r.string("client id")?;
    let client_host = r.string("client host")?;
    let n = r.array_len("topic names")?;
    let mut topic_names = Vec::with_capacity(n);
    for _ in 0..n {
        topic_names.push(r.string("topic name")?);
    }
    Ok(MemberMetadataValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        topic_names,
        topic_regex: r.nullable_string("topic regex")?,
        rebalance_timeout_ms: r.i32("rebalance timeout")?,
        server_assignor: r.nullable_string("server assignor")?,
    })
}

/// `[]TopicPartitions`: topic id, partitions, and each entry's tagged fields.
fn write_assignment(w: &mut Writer, a: &Assignment) -> Result<()> {
    w.array_len("topic partitions", a.len())?;
    for (topic, ps) in a {
        w.buf.extend_from_slice(&topic.0);
        w.array_len("partitions", ps.len())?;
        for p in ps {
            w.i32(*p);
        }
        w.tagged_fields();
    }
    Ok(())
}

fn read_assignment(r: &mut Reader) -> Result<Assignment> {
    let n = r.array_len("topic partitions")?;
    let mut a = Assignment::new();
    for _ in 0..n {
        let topic = KafkaUuid(r.array::<16>("topic id")?);
        let count = r.array_len("partitions")?;
        let mut ps = BTreeSet::new();
        for _ in 0..count {
            ps.insert(r.i32("partition")?);
        }
        r.tagged_fields("topic partitions")?;
        a.entry(topic).or_default().extend(ps);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn assignment() -> Assignment {
        BTreeMap::from([
            (KafkaUuid([7; 16]), BTreeSet::from([0, 2])),
            (KafkaUuid([9; 16]), BTreeSet::from([1])),
        ])
    }

    #[test]
    fn keys_are_kafkas_bytes() {
        let k = ConsumerRecordKey::CurrentMemberAssignment {
            group: "g".into(),
            member: "m".into(),
        };
        assert_eq!(k.try_encode().unwrap(), [0, 8, 0, 1, b'g', 0, 1, b'm']);
        let k = ConsumerRecordKey::Metadata { group: "g".into() };
        assert_eq!(k.try_encode().unwrap(), [0, 3, 0, 1, b'g']);
    }

    #[test]
    fn a_group_epoch_is_kafkas_bytes() {
        let v = ConsumerRecordValue::Metadata { epoch: 5 };
        // version 0, epoch, no tagged fields.
        assert_eq!(v.try_encode().unwrap(), [0, 0, 0, 0, 0, 5, 0]);
        // Kafka 4.1 writes the metadata hash as tag 0: it is skipped.
        let key = ConsumerRecordKey::Metadata { group: "g".into() };
        let with_hash = [0, 0, 0, 0, 0, 5, 1, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(ConsumerRecordValue::decode(&key, &with_hash).unwrap(), v);
    }

    #[test]
    fn every_value_round_trips_and_no_prefix_decodes() {
        let cases = [
            (
                ConsumerRecordKey::MemberMetadata {
                    group: "g".into(),
                    member: "m".into(),
                },
                ConsumerRecordValue::MemberMetadata(MemberMetadataValue {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    topic_names: vec!["a".into(), "b".into()],
                    topic_regex: Some("x.*".into()),
                    rebalance_timeout_ms: 30_000,
                    server_assignor: Some("range".into()),
                }),
            ),
            (
                ConsumerRecordKey::TargetAssignmentMember {
                    group: "g".into(),
                    member: "m".into(),
                },
                ConsumerRecordValue::TargetAssignmentMember(assignment()),
            ),
            (
                ConsumerRecordKey::CurrentMemberAssignment {
                    group: "g".into(),
                    member: "m".into(),
                },
                ConsumerRecordValue::CurrentMemberAssignment(CurrentAssignmentValue {
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    state: 1,
                    assigned: assignment(),
                    pending_revocation: BTreeMap::from([(KafkaUuid([1; 16]), BTreeSet::from([5]))]),
                }),
            ),
            (
                ConsumerRecordKey::TargetAssignmentMetadata { group: "g".into() },
                ConsumerRecordValue::TargetAssignmentMetadata {
                    assignment_epoch: 4,
                },
            ),
        ];
        for (key, value) in cases {
            let kb = key.try_encode().unwrap();
            assert_eq!(ConsumerRecordKey::decode(&kb).unwrap(), key);
            let vb = value.try_encode().unwrap();
            assert_eq!(ConsumerRecordValue::decode(&key, &vb).unwrap(), value);
            for cut in 0..vb.len() {
                assert!(
                    ConsumerRecordValue::decode(&key, &vb[..cut]).is_err(),
                    "{key:?} {cut}"
                );
            }
        }
        assert!(matches!(
            ConsumerRecordKey::decode(&[0, 4, 0, 1, b'g']),
            Err(GroupRecordError::UnknownRecordType(4))
        ));
    }
}
