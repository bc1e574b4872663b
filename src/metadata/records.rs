//! KRaft metadata records as Kafka encodes them in `__cluster_metadata`: a frame (version 1,
//! record type, record version) followed by the flexible-version message body; and the control
//! records of the quorum (leader change, voters, snapshot header and footer).

use crate::security::acl::{
    AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern, ResourceType,
};
use crate::security::sasl::{ScramCredential, ScramMechanism};
use crate::storage::KafkaUuid;

/// Kafka's `MetadataRecordType` ids for the records evenkeel writes.
pub const REGISTER_BROKER_RECORD: u32 = 0;
pub const UNREGISTER_BROKER_RECORD: u32 = 1;
pub const TOPIC_RECORD: u32 = 2;
pub const PARTITION_RECORD: u32 = 3;
pub const CONFIG_RECORD: u32 = 4;
pub const PARTITION_CHANGE_RECORD: u32 = 5;
pub const FENCE_BROKER_RECORD: u32 = 7;
pub const UNFENCE_BROKER_RECORD: u32 = 8;
pub const REMOVE_TOPIC_RECORD: u32 = 9;
pub const FEATURE_LEVEL_RECORD: u32 = 12;
pub const CLIENT_QUOTA_RECORD: u32 = 14;
pub const PRODUCER_IDS_RECORD: u32 = 15;
pub const BROKER_REGISTRATION_CHANGE_RECORD: u32 = 17;
pub const NO_OP_RECORD: u32 = 20;
pub const USER_SCRAM_CREDENTIAL_RECORD: u32 = 11;
pub const ACCESS_CONTROL_ENTRY_RECORD: u32 = 18;
pub const REMOVE_ACCESS_CONTROL_ENTRY_RECORD: u32 = 19;
pub const REMOVE_USER_SCRAM_CREDENTIAL_RECORD: u32 = 22;
/// `ConfigResource.Type` ids.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// `SecurityProtocol.PLAINTEXT.id`.
pub const PLAINTEXT: i16 = 0;
/// PartitionChangeRecord's "leader unchanged" (Kafka's `NO_LEADER_CHANGE`).
pub const NO_LEADER_CHANGE: i32 = -2;
/// No leader (Kafka's `NO_LEADER`).
pub const NO_LEADER: i32 = -1;

/// One listener of a registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: i16,
}

/// A feature range a broker supports (`metadata.version` and friends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerFeature {
    pub name: String,
    pub min_supported: i16,
    pub max_supported: i16,
}

/// RegisterBrokerRecord's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    pub incarnation_id: KafkaUuid,
    pub broker_epoch: i64,
    pub endpoints: Vec<BrokerEndpoint>,
    pub features: Vec<BrokerFeature>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

/// PartitionChangeRecord's fields: `None` (or `NO_LEADER_CHANGE`) leaves a field as it was.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionChange {
    pub partition_id: i32,
    pub topic_id: KafkaUuid,
    pub isr: Option<Vec<i32>>,
    pub leader: i32,
    pub replicas: Option<Vec<i32>>,
    pub removing_replicas: Option<Vec<i32>>,
    pub adding_replicas: Option<Vec<i32>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    RegisterBroker(BrokerRegistration),
    UnregisterBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    Topic {
        name: String,
        topic_id: KafkaUuid,
    },
    Partition {
        partition_id: i32,
        topic_id: KafkaUuid,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        removing_replicas: Vec<i32>,
        adding_replicas: Vec<i32>,
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
    PartitionChange(PartitionChange),
    FenceBroker {
        id: i32,
        epoch: i64,
    },
    UnfenceBroker {
        id: i32,
        epoch: i64,
    },
    RemoveTopic {
        topic_id: KafkaUuid,
    },
    FeatureLevel {
        name: String,
        level: i16,
    },
    /// A block of producer ids was handed out; ids from `next_producer_id` on are free.
    ProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        next_producer_id: i64,
    },
    /// Fencing (1 fence, -1 unfence, 0 unchanged) and controlled shutdown (1 entered, 0
    /// unchanged) of a registered broker, as Kafka 4.x writes them.
    BrokerRegistrationChange {
        broker_id: i32,
        broker_epoch: i64,
        fenced: i8,
        in_controlled_shutdown: i8,
    },
    NoOp,
    /// One ACL, under the id DeleteAcls removes it by.
    AccessControlEntry {
        id: KafkaUuid,
        acl: AclBinding,
    },
    RemoveAccessControlEntry {
        id: KafkaUuid,
    },
    UserScramCredential(ScramCredentialRecord),
    /// `mechanism` is Kafka's ScramMechanism type (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    RemoveUserScramCredential {
        name: String,
        mechanism: i8,
    },
    ClientQuota(ClientQuotaRecord),
}

/// One client quota of one entity set or removed (Kafka's ClientQuotaRecord): the entity is
/// its `(entity type, name)` pairs, a `None` name standing for the type's default.
#[derive(Debug, Clone)]
pub struct ClientQuotaRecord {
    pub entity: Vec<(String, Option<String>)>,
    pub key: String,
    pub value: f64,
    pub remove: bool,
}

/// Values compare by their bits, so equality is an equivalence even for a NaN (which Kafka's
/// controller lets into a log, and evenkeel's image ignores).
impl PartialEq for ClientQuotaRecord {
    fn eq(&self, other: &Self) -> bool {
        self.entity == other.entity
            && self.key == other.key
            && self.value.to_bits() == other.value.to_bits()
            && self.remove == other.remove
    }
}

impl Eq for ClientQuotaRecord {}

/// A user's SCRAM credential for one mechanism, as the metadata log holds it (never the
/// password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredentialRecord {
    pub name: String,
    /// Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl ScramCredentialRecord {
    pub fn new(name: &str, mechanism: ScramMechanism, c: ScramCredential) -> Self {
        ScramCredentialRecord {
            name: name.to_string(),
            mechanism: mechanism.type_code(),
            salt: c.salt,
            stored_key: c.stored_key,
            server_key: c.server_key,
            iterations: c.iterations,
        }
    }

    /// The credential a SCRAM exchange checks a client against.
    pub fn credential(&self) -> ScramCredential {
        ScramCredential {
            salt: self.salt.clone(),
            stored_key: self.stored_key.clone(),
            server_key: self.server_key.clone(),
            iterations: self.iterations,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed metadata record: {0}")]
pub struct RecordDecodeError(pub String);

/// The flexible-version writer: compact strings and arrays, tagged-field sections.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn uvarint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }
    fn i8(&mut self, v: i8) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn uuid(&mut self, v: &KafkaUuid) -> &mut Self {
        self.0.extend_from_slice(&v.0);
        self
    }
    fn str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            None => self.uvarint(0),
            Some(s) => {
                self.uvarint(s.len() as u64 + 1);
                self.0.extend_from_slice(s.as_bytes());
                self
            }
        }
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.uvarint(b.len() as u64 + 1);
        self.0.extend_from_slice(b);
        self
    }
    fn i32s(&mut self, v: Option<&[i32]>) -> &mut Self {
        match v {
            None => self.uvarint(0),
            Some(v) => {
                self.uvarint(v.len() as u64 + 1);
                for x in v {
                    self.i32(*x);
                }
                self
            }
        }
    }
    /// The array length prefix of a compact array of structs.
    fn len(&mut self, n: usize) -> &mut Self {
        self.uvarint(n as u64 + 1)
    }
    /// An empty tagged-field section.
    fn no_tags(&mut self) -> &mut Self {
        self.uvarint(0)
    }
    /// A tagged-field section of `(tag, bytes)` in ascending tag order.
    fn tags(&mut self, tags: &[(u64, Vec<u8>)]) -> &mut Self {
        self.uvarint(tags.len() as u64);
        for (tag, bytes) in tags {
            self.uvarint(*tag).uvarint(bytes.len() as u64);
            self.0.extend_from_slice(bytes);
        }
        self
    }
}

/// The bytes of one tagged i32 array (null when `None`).
fn tagged_i32s(v: Option<&[i32]>) -> Vec<u8> {
    let mut w = Writer::default();
    w.i32s(v);
    w.0
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
    fn bool(&mut self, what: &str) -> Result<bool, RecordDecodeError> {
        Ok(self.take(1, what)?[0] != 0)
    }
    fn i16(&mut self, what: &str) -> Result<i16, RecordDecodeError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn u16(&mut self, what: &str) -> Result<u16, RecordDecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
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
    fn str(&mut self, what: &str) -> Result<Option<String>, RecordDecodeError> {
        let n = self.uvarint(what)?;
        if n == 0 {
            return Ok(None);
        }
        let b = self.take((n - 1) as usize, what)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| RecordDecodeError(format!("{what} is not UTF-8")))
    }
    fn bytes(&mut self, what: &str) -> Result<Vec<u8>, RecordDecodeError> {
        let n = self.uvarint(what)?;
        if n == 0 {
            return Err(RecordDecodeError(format!("null {what}")));
        }
        Ok(self.take((n - 1) as usize, what)?.to_vec())
    }
    fn string(&mut self, what: &str) -> Result<String, RecordDecodeError> {
        self.str(what)?
            .ok_or_else(|| RecordDecodeError(format!("null {what}")))
    }
    fn i32s(&mut self, what: &str) -> Result<Option<Vec<i32>>, RecordDecodeError> {
        let n = self.uvarint(what)?;
        if n == 0 {
            return Ok(None);
        }
        let n = (n - 1) as usize;
        if n > self.0.len() / 4 {
            return Err(Self::err(what));
        }
        (0..n)
            .map(|_| self.i32(what))
            .collect::<Result<_, _>>()
            .map(Some)
    }
    /// The element count of a compact array of structs (0 for null).
    fn len(&mut self, what: &str) -> Result<usize, RecordDecodeError> {
        let n = self.uvarint(what)?;
        let n = n.saturating_sub(1) as usize;
        if n > self.0.len() {
            return Err(Self::err(what));
        }
        Ok(n)
    }
    /// Reads a tagged-field section, handing each known tag's bytes to `f`.
    fn tags(
        &mut self,
        mut f: impl FnMut(u64, &'a [u8]) -> Result<(), RecordDecodeError>,
    ) -> Result<(), RecordDecodeError> {
        let n = self.uvarint("tagged fields")?;
        for _ in 0..n {
            let tag = self.uvarint("tag")?;
            let size = self.uvarint("tag size")?;
            let bytes = self.take(size as usize, "tag value")?;
            f(tag, bytes)?;
        }
        Ok(())
    }
    fn skip_tags(&mut self) -> Result<(), RecordDecodeError> {
        self.tags(|_, _| Ok(()))
    }
}

fn tagged_array(bytes: &[u8], what: &str) -> Result<Option<Vec<i32>>, RecordDecodeError> {
    Reader(bytes).i32s(what)
}

impl MetadataRecord {
    /// Kafka's record type id.
    pub fn type_id(&self) -> u32 {
        match self {
            MetadataRecord::RegisterBroker(_) => REGISTER_BROKER_RECORD,
            MetadataRecord::UnregisterBroker { .. } => UNREGISTER_BROKER_RECORD,
            MetadataRecord::Topic { .. } => TOPIC_RECORD,
            MetadataRecord::Partition { .. } => PARTITION_RECORD,
            MetadataRecord::Config { .. } => CONFIG_RECORD,
            MetadataRecord::PartitionChange(_) => PARTITION_CHANGE_RECORD,
            MetadataRecord::FenceBroker { .. } => FENCE_BROKER_RECORD,
            MetadataRecord::UnfenceBroker { .. } => UNFENCE_BROKER_RECORD,
            MetadataRecord::RemoveTopic { .. } => REMOVE_TOPIC_RECORD,
            MetadataRecord::FeatureLevel { .. } => FEATURE_LEVEL_RECORD,
            MetadataRecord::ProducerIds { .. } => PRODUCER_IDS_RECORD,
            MetadataRecord::BrokerRegistrationChange { .. } => BROKER_REGISTRATION_CHANGE_RECORD,
            MetadataRecord::NoOp => NO_OP_RECORD,
            MetadataRecord::AccessControlEntry { .. } => ACCESS_CONTROL_ENTRY_RECORD,
            MetadataRecord::RemoveAccessControlEntry { .. } => REMOVE_ACCESS_CONTROL_ENTRY_RECORD,
            MetadataRecord::UserScramCredential(_) => USER_SCRAM_CREDENTIAL_RECORD,
            MetadataRecord::RemoveUserScramCredential { .. } => REMOVE_USER_SCRAM_CREDENTIAL_RECORD,
            MetadataRecord::ClientQuota(_) => CLIENT_QUOTA_RECORD,
        }
    }

    /// The schema version written: the newest whose fields evenkeel sets.
    fn version(&self) -> u64 {
        match self {
            MetadataRecord::RegisterBroker(_) => 3,
            MetadataRecord::BrokerRegistrationChange {
                in_controlled_shutdown,
                ..
            } if *in_controlled_shutdown != 0 => 1,
            _ => 0,
        }
    }

    /// The record value: frame version 1, type, version, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.uvarint(1)
            .uvarint(self.type_id() as u64)
            .uvarint(self.version());
        match self {
            MetadataRecord::RegisterBroker(b) => {
                w.i32(b.broker_id)
                    .bool(false) // IsMigratingZkBroker (v2+)
                    .uuid(&b.incarnation_id)
                    .i64(b.broker_epoch)
                    .len(b.endpoints.len());
                for e in &b.endpoints {
                    w.str(Some(&e.name))
                        .str(Some(&e.host))
                        .u16(e.port)
                        .i16(e.security_protocol)
                        .no_tags();
                }
                w.len(b.features.len());
                for f in &b.features {
                    w.str(Some(&f.name))
                        .i16(f.min_supported)
                        .i16(f.max_supported)
                        .no_tags();
                }
                w.str(b.rack.as_deref())
                    .bool(b.fenced)
                    .bool(b.in_controlled_shutdown)
                    .no_tags();
            }
            MetadataRecord::UnregisterBroker {
                broker_id,
                broker_epoch,
            } => {
                w.i32(*broker_id).i64(*broker_epoch).no_tags();
            }
            MetadataRecord::Topic { name, topic_id } => {
                w.str(Some(name)).uuid(topic_id).no_tags();
            }
            MetadataRecord::Partition {
                partition_id,
                topic_id,
                replicas,
                isr,
                removing_replicas,
                adding_replicas,
                leader,
                leader_epoch,
                partition_epoch,
            } => {
                w.i32(*partition_id)
                    .uuid(topic_id)
                    .i32s(Some(replicas))
                    .i32s(Some(isr))
                    .i32s(Some(removing_replicas))
                    .i32s(Some(adding_replicas))
                    .i32(*leader)
                    .i32(*leader_epoch)
                    .i32(*partition_epoch)
                    .no_tags();
            }
            MetadataRecord::Config {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                w.i8(*resource_type)
                    .str(Some(resource_name))
                    .str(Some(name))
                    .str(value.as_deref())
                    .no_tags();
            }
            MetadataRecord::PartitionChange(c) => {
                let mut tags = Vec::new();
                if let Some(isr) = &c.isr {
                    tags.push((0, tagged_i32s(Some(isr))));
                }
                if c.leader != NO_LEADER_CHANGE {
                    tags.push((1, c.leader.to_be_bytes().to_vec()));
                }
                for (tag, v) in [
                    (2, &c.replicas),
                    (3, &c.removing_replicas),
                    (4, &c.adding_replicas),
                ] {
                    if let Some(v) = v {
                        tags.push((tag, tagged_i32s(Some(v))));
                    }
                }
                w.i32(c.partition_id).uuid(&c.topic_id).tags(&tags);
            }
            MetadataRecord::FenceBroker { id, epoch }
            | MetadataRecord::UnfenceBroker { id, epoch } => {
                w.i32(*id).i64(*epoch).no_tags();
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                w.uuid(topic_id).no_tags();
            }
            MetadataRecord::FeatureLevel { name, level } => {
                w.str(Some(name)).i16(*level).no_tags();
            }
            MetadataRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id,
            } => {
                w.i32(*broker_id)
                    .i64(*broker_epoch)
                    .i64(*next_producer_id)
                    .no_tags();
            }
            MetadataRecord::BrokerRegistrationChange {
                broker_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => {
                let mut tags = Vec::new();
                if *fenced != 0 {
                    tags.push((0, vec![*fenced as u8]));
                }
                if *in_controlled_shutdown != 0 {
                    tags.push((1, vec![*in_controlled_shutdown as u8]));
                }
                w.i32(*broker_id).i64(*broker_epoch).tags(&tags);
            }
            MetadataRecord::NoOp => {
                w.no_tags();
            }
            MetadataRecord::AccessControlEntry { id, acl } => {
                w.uuid(id)
                    .i8(acl.pattern.resource_type.code())
                    .str(Some(&acl.pattern.name))
                    .i8(acl.pattern.pattern_type.code())
                    .str(Some(&acl.principal))
                    .str(Some(&acl.host))
                    .i8(acl.operation.code())
                    .i8(acl.permission.code())
                    .no_tags();
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                w.uuid(id).no_tags();
            }
            MetadataRecord::UserScramCredential(c) => {
                w.str(Some(&c.name))
                    .i8(c.mechanism)
                    .bytes(&c.salt)
                    .bytes(&c.stored_key)
                    .bytes(&c.server_key)
                    .i32(c.iterations)
                    .no_tags();
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                w.str(Some(name)).i8(*mechanism).no_tags();
            }
            MetadataRecord::ClientQuota(q) => {
                w.len(q.entity.len());
                for (entity_type, name) in &q.entity {
                    w.str(Some(entity_type)).str(name.as_deref()).no_tags();
                }
                w.str(Some(&q.key))
                    .i64(q.value.to_bits() as i64)
                    .bool(q.remove)
                    .no_tags();
            }
        }
        w.0
    }

    /// Decodes a record value; `Ok(None)` for record types evenkeel does not use.
    pub fn decode(value: &[u8]) -> Result<Option<MetadataRecord>, RecordDecodeError> {
        let mut r = Reader(value);
        let frame = r.uvarint("frame version")?;
        if frame != 1 {
            return Err(RecordDecodeError(format!("unknown frame version {frame}")));
        }
        let kind = r.uvarint("record type")? as u32;
        let version = r.uvarint("record version")?;
        let rec = match kind {
            REGISTER_BROKER_RECORD => decode_register_broker(&mut r, version)?,
            UNREGISTER_BROKER_RECORD => {
                let rec = MetadataRecord::UnregisterBroker {
                    broker_id: r.i32("broker id")?,
                    broker_epoch: r.i64("broker epoch")?,
                };
                r.skip_tags()?;
                rec
            }
            TOPIC_RECORD => {
                let rec = MetadataRecord::Topic {
                    name: r.string("topic name")?,
                    topic_id: r.uuid("topic id")?,
                };
                r.skip_tags()?;
                rec
            }
            PARTITION_RECORD => decode_partition(&mut r, version)?,
            CONFIG_RECORD => {
                let rec = MetadataRecord::Config {
                    resource_type: r.i8("resource type")?,
                    resource_name: r.str("resource name")?.unwrap_or_default(),
                    name: r.string("config name")?,
                    value: r.str("config value")?,
                };
                r.skip_tags()?;
                rec
            }
            PARTITION_CHANGE_RECORD => decode_partition_change(&mut r)?,
            FENCE_BROKER_RECORD | UNFENCE_BROKER_RECORD => {
                let (id, epoch) = (r.i32("broker id")?, r.i64("broker epoch")?);
                r.skip_tags()?;
                if kind == FENCE_BROKER_RECORD {
                    MetadataRecord::FenceBroker { id, epoch }
                } else {
                    MetadataRecord::UnfenceBroker { id, epoch }
                }
            }
            REMOVE_TOPIC_RECORD => {
                let rec = MetadataRecord::RemoveTopic {
                    topic_id: r.uuid("topic id")?,
                };
                r.skip_tags()?;
                rec
            }
            FEATURE_LEVEL_RECORD => {
                let rec = MetadataRecord::FeatureLevel {
                    name: r.string("feature name")?,
                    level: r.i16("feature level")?,
                };
                r.skip_tags()?;
                rec
            }
            PRODUCER_IDS_RECORD => {
                let rec = MetadataRecord::ProducerIds {
                    broker_id: r.i32("broker id")?,
                    broker_epoch: r.i64("broker epoch")?,
                    next_producer_id: r.i64("next producer id")?,
                };
                r.skip_tags()?;
                rec
            }
            BROKER_REGISTRATION_CHANGE_RECORD => {
                let broker_id = r.i32("broker id")?;
                let broker_epoch = r.i64("broker epoch")?;
                let (mut fenced, mut ics) = (0i8, 0i8);
                r.tags(|tag, b| {
                    match tag {
                        0 => fenced = Reader(b).i8("fenced")?,
                        1 => ics = Reader(b).i8("in controlled shutdown")?,
                        _ => {}
                    }
                    Ok(())
                })?;
                MetadataRecord::BrokerRegistrationChange {
                    broker_id,
                    broker_epoch,
                    fenced,
                    in_controlled_shutdown: ics,
                }
            }
            NO_OP_RECORD => {
                r.skip_tags()?;
                MetadataRecord::NoOp
            }
            ACCESS_CONTROL_ENTRY_RECORD
            | REMOVE_ACCESS_CONTROL_ENTRY_RECORD
            | USER_SCRAM_CREDENTIAL_RECORD
            | REMOVE_USER_SCRAM_CREDENTIAL_RECORD => {
                let rec = decode_security(&mut r, kind)?;
                r.skip_tags()?;
                rec
            }
            CLIENT_QUOTA_RECORD => {
                let rec = decode_client_quota(&mut r)?;
                r.skip_tags()?;
                rec
            }
            _ => return Ok(None),
        };
        if !r.0.is_empty() {
            return Err(RecordDecodeError(format!(
                "{} byte(s) of garbage after record type {kind}",
                r.0.len()
            )));
        }
        Ok(Some(rec))
    }
}

/// The ACL and SCRAM records (their tagged fields left to the caller).
fn decode_security(r: &mut Reader<'_>, kind: u32) -> Result<MetadataRecord, RecordDecodeError> {
    Ok(match kind {
        ACCESS_CONTROL_ENTRY_RECORD => {
            let id = r.uuid("acl id")?;
            let resource_type = ResourceType::from_code(r.i8("resource type")?);
            let name = r.string("resource name")?;
            let pattern_type = PatternType::from_code(r.i8("pattern type")?);
            MetadataRecord::AccessControlEntry {
                id,
                acl: AclBinding {
                    pattern: ResourcePattern {
                        resource_type,
                        name,
                        pattern_type,
                    },
                    principal: r.string("principal")?,
                    host: r.string("host")?,
                    operation: AclOperation::from_code(r.i8("operation")?),
                    permission: PermissionType::from_code(r.i8("permission type")?),
                },
            }
        }
        REMOVE_ACCESS_CONTROL_ENTRY_RECORD => MetadataRecord::RemoveAccessControlEntry {
            id: r.uuid("acl id")?,
        },
        USER_SCRAM_CREDENTIAL_RECORD => {
            MetadataRecord::UserScramCredential(ScramCredentialRecord {
                name: r.string("user name")?,
                mechanism: r.i8("mechanism")?,
                salt: r.bytes("salt")?,
                stored_key: r.bytes("stored key")?,
                server_key: r.bytes("server key")?,
                iterations: r.i32("iterations")?,
            })
        }
        _ => MetadataRecord::RemoveUserScramCredential {
            name: r.string("user name")?,
            mechanism: r.i8("mechanism")?,
        },
    })
}

/// ClientQuotaRecord's body (its tagged fields left to the caller).
fn decode_client_quota(r: &mut Reader<'_>) -> Result<MetadataRecord, RecordDecodeError> {
    let mut entity = Vec::new();
    for _ in 0..r.len("quota entity")? {
        entity.push((r.string("entity type")?, r.str("entity name")?));
        r.skip_tags()?;
    }
    let key = r.string("quota key")?;
    let value = f64::from_bits(r.i64("quota value")? as u64);
    if !value.is_finite() {
        return Err(RecordDecodeError(format!(
            "quota {key} is not a finite number"
        )));
    }
    Ok(MetadataRecord::ClientQuota(ClientQuotaRecord {
        entity,
        key,
        value,
        remove: r.bool("quota remove")?,
    }))
}

fn decode_register_broker(
    r: &mut Reader<'_>,
    version: u64,
) -> Result<MetadataRecord, RecordDecodeError> {
    let broker_id = r.i32("broker id")?;
    if version >= 2 {
        r.bool("is migrating zk broker")?;
    }
    let incarnation_id = r.uuid("incarnation id")?;
    let broker_epoch = r.i64("broker epoch")?;
    let mut endpoints = Vec::new();
    for _ in 0..r.len("endpoints")? {
        endpoints.push(BrokerEndpoint {
            name: r.string("endpoint name")?,
            host: r.string("endpoint host")?,
            port: r.u16("endpoint port")?,
            security_protocol: r.i16("security protocol")?,
        });
        r.skip_tags()?;
    }
    let mut features = Vec::new();
    for _ in 0..r.len("features")? {
        features.push(BrokerFeature {
            name: r.string("feature name")?,
            min_supported: r.i16("feature min")?,
            max_supported: r.i16("feature max")?,
        });
        r.skip_tags()?;
    }
    let rack = r.str("rack")?;
    let fenced = r.bool("fenced")?;
    let in_controlled_shutdown = if version >= 1 {
        r.bool("in controlled shutdown")?
    } else {
        false
    };
    r.skip_tags()?;
    Ok(MetadataRecord::RegisterBroker(BrokerRegistration {
        broker_id,
        incarnation_id,
        broker_epoch,
        endpoints,
        features,
        rack,
        fenced,
        in_controlled_shutdown,
    }))
}

fn decode_partition(r: &mut Reader<'_>, version: u64) -> Result<MetadataRecord, RecordDecodeError> {
    let partition_id = r.i32("partition id")?;
    let topic_id = r.uuid("topic id")?;
    let replicas = r.i32s("replicas")?.unwrap_or_default();
    let isr = r.i32s("isr")?.unwrap_or_default();
    let removing_replicas = r.i32s("removing replicas")?.unwrap_or_default();
    let adding_replicas = r.i32s("adding replicas")?.unwrap_or_default();
    let leader = r.i32("leader")?;
    let leader_epoch = r.i32("leader epoch")?;
    let partition_epoch = r.i32("partition epoch")?;
    if version >= 1 {
        // Directories: one uuid per replica.
        for _ in 0..r.len("directories")? {
            r.uuid("directory")?;
        }
    }
    r.skip_tags()?;
    Ok(MetadataRecord::Partition {
        partition_id,
        topic_id,
        replicas,
        isr,
        removing_replicas,
        adding_replicas,
        leader,
        leader_epoch,
        partition_epoch,
    })
}

fn decode_partition_change(r: &mut Reader<'_>) -> Result<MetadataRecord, RecordDecodeError> {
    let mut c = PartitionChange {
        partition_id: r.i32("partition id")?,
        topic_id: r.uuid("topic id")?,
        leader: NO_LEADER_CHANGE,
        ..Default::default()
    };
    r.tags(|tag, b| {
        match tag {
            0 => c.isr = tagged_array(b, "isr")?,
            1 => c.leader = Reader(b).i32("leader")?,
            2 => c.replicas = tagged_array(b, "replicas")?,
            3 => c.removing_replicas = tagged_array(b, "removing replicas")?,
            4 => c.adding_replicas = tagged_array(b, "adding replicas")?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(MetadataRecord::PartitionChange(c))
}

/// Control record types of the quorum (Kafka's `ControlRecordType`).
pub const LEADER_CHANGE: i16 = 2;
pub const SNAPSHOT_HEADER: i16 = 3;
pub const SNAPSHOT_FOOTER: i16 = 4;
pub const KRAFT_VERSION: i16 = 5;
pub const KRAFT_VOTERS: i16 = 6;

/// One voter of a VotersRecord.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterRecord {
    pub voter_id: i32,
    pub directory_id: KafkaUuid,
    /// `(listener name, host, port)`.
    pub endpoints: Vec<(String, String, u16)>,
    pub kraft_version_min: i16,
    pub kraft_version_max: i16,
}

/// A control record of the metadata log or a snapshot, written at version 0 as Kafka reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord {
    LeaderChange {
        leader_id: i32,
        voters: Vec<i32>,
        granting_voters: Vec<i32>,
    },
    SnapshotHeader {
        last_contained_log_timestamp: i64,
    },
    SnapshotFooter,
    KRaftVersion {
        kraft_version: i16,
    },
    Voters(Vec<VoterRecord>),
}

impl ControlRecord {
    fn type_id(&self) -> i16 {
        match self {
            ControlRecord::LeaderChange { .. } => LEADER_CHANGE,
            ControlRecord::SnapshotHeader { .. } => SNAPSHOT_HEADER,
            ControlRecord::SnapshotFooter => SNAPSHOT_FOOTER,
            ControlRecord::KRaftVersion { .. } => KRAFT_VERSION,
            ControlRecord::Voters(_) => KRAFT_VOTERS,
        }
    }

    /// The 4-byte control key: version 0, type.
    pub fn key(&self) -> [u8; 4] {
        let t = self.type_id().to_be_bytes();
        [0, 0, t[0], t[1]]
    }

    /// The value: `Version` (0) first, then the fields, flexible encoding.
    pub fn value(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.i16(0);
        match self {
            ControlRecord::LeaderChange {
                leader_id,
                voters,
                granting_voters,
            } => {
                w.i32(*leader_id);
                for list in [voters, granting_voters] {
                    w.len(list.len());
                    for v in list {
                        w.i32(*v).no_tags();
                    }
                }
            }
            ControlRecord::SnapshotHeader {
                last_contained_log_timestamp,
            } => {
                w.i64(*last_contained_log_timestamp);
            }
            ControlRecord::SnapshotFooter => {}
            ControlRecord::KRaftVersion { kraft_version } => {
                w.i16(*kraft_version);
            }
            ControlRecord::Voters(voters) => {
                w.len(voters.len());
                for v in voters {
                    w.i32(v.voter_id)
                        .uuid(&v.directory_id)
                        .len(v.endpoints.len());
                    for (name, host, port) in &v.endpoints {
                        w.str(Some(name)).str(Some(host)).u16(*port).no_tags();
                    }
                    w.i16(v.kraft_version_min)
                        .i16(v.kraft_version_max)
                        .no_tags()
                        .no_tags();
                }
            }
        }
        w.no_tags();
        w.0
    }

    /// Decodes a control record from its key and value; `Ok(None)` for types not used here.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Option<ControlRecord>, RecordDecodeError> {
        let mut k = Reader(key);
        let _version = k.i16("control key version")?;
        let kind = k.i16("control type")?;
        let mut r = Reader(value);
        r.i16("control record version")?;
        let rec = match kind {
            LEADER_CHANGE => {
                let leader_id = r.i32("leader id")?;
                let mut lists = [Vec::new(), Vec::new()];
                for list in lists.iter_mut() {
                    for _ in 0..r.len("voters")? {
                        list.push(r.i32("voter id")?);
                        r.skip_tags()?;
                    }
                }
                let [voters, granting_voters] = lists;
                ControlRecord::LeaderChange {
                    leader_id,
                    voters,
                    granting_voters,
                }
            }
            SNAPSHOT_HEADER => ControlRecord::SnapshotHeader {
                last_contained_log_timestamp: r.i64("last contained log timestamp")?,
            },
            SNAPSHOT_FOOTER => ControlRecord::SnapshotFooter,
            KRAFT_VERSION => ControlRecord::KRaftVersion {
                kraft_version: r.i16("kraft version")?,
            },
            KRAFT_VOTERS => {
                let mut voters = Vec::new();
                for _ in 0..r.len("voters")? {
                    let voter_id = r.i32("voter id")?;
                    let directory_id = r.uuid("voter directory id")?;
                    let mut endpoints = Vec::new();
                    for _ in 0..r.len("endpoints")? {
                        endpoints.push((
                            r.string("endpoint name")?,
                            r.string("endpoint host")?,
                            r.u16("endpoint port")?,
                        ));
                        r.skip_tags()?;
                    }
                    let kraft_version_min = r.i16("kraft version min")?;
                    let kraft_version_max = r.i16("kraft version max")?;
                    r.skip_tags()?;
                    r.skip_tags()?;
                    voters.push(VoterRecord {
                        voter_id,
                        directory_id,
                        endpoints,
                        kraft_version_min,
                        kraft_version_max,
                    });
                }
                ControlRecord::Voters(voters)
            }
            _ => return Ok(None),
        };
        r.skip_tags()?;
        Ok(Some(rec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn samples() -> Vec<MetadataRecord> {
        let id = KafkaUuid::random();
        vec![
            MetadataRecord::RegisterBroker(BrokerRegistration {
                broker_id: 2,
                incarnation_id: KafkaUuid::random(),
                broker_epoch: 41,
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9094,
                    security_protocol: PLAINTEXT,
                }],
                features: vec![BrokerFeature {
                    name: "metadata.version".into(),
                    min_supported: 7,
                    max_supported: 27,
                }],
                rack: Some("eu-1a".into()),
                fenced: true,
                in_controlled_shutdown: false,
            }),
            MetadataRecord::UnregisterBroker {
                broker_id: 2,
                broker_epoch: 41,
            },
            MetadataRecord::Topic {
                name: "orders".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                partition_id: 2,
                topic_id: id,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2],
                removing_replicas: vec![],
                adding_replicas: vec![3],
                leader: 1,
                leader_epoch: 4,
                partition_epoch: 9,
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
            MetadataRecord::PartitionChange(PartitionChange {
                partition_id: 1,
                topic_id: id,
                isr: Some(vec![2, 3]),
                leader: 2,
                replicas: None,
                removing_replicas: Some(vec![]),
                adding_replicas: None,
            }),
            MetadataRecord::PartitionChange(PartitionChange {
                partition_id: 1,
                topic_id: id,
                leader: NO_LEADER_CHANGE,
                ..Default::default()
            }),
            MetadataRecord::FenceBroker { id: 3, epoch: 7 },
            MetadataRecord::UnfenceBroker { id: 3, epoch: 7 },
            MetadataRecord::RemoveTopic { topic_id: id },
            MetadataRecord::FeatureLevel {
                name: "metadata.version".into(),
                level: 27,
            },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                broker_epoch: 7,
                next_producer_id: 2000,
            },
            MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                broker_epoch: 7,
                fenced: -1,
                in_controlled_shutdown: 0,
            },
            MetadataRecord::BrokerRegistrationChange {
                broker_id: 1,
                broker_epoch: 7,
                fenced: 0,
                in_controlled_shutdown: 1,
            },
            MetadataRecord::NoOp,
            MetadataRecord::AccessControlEntry {
                id,
                acl: sample_acl(),
            },
            MetadataRecord::RemoveAccessControlEntry { id },
            MetadataRecord::UserScramCredential(ScramCredentialRecord {
                name: "alice".into(),
                mechanism: 2,
                salt: vec![1, 2, 3],
                stored_key: vec![4; 64],
                server_key: vec![5; 64],
                iterations: 8192,
            }),
            MetadataRecord::RemoveUserScramCredential {
                name: "alice".into(),
                mechanism: 2,
            },
            MetadataRecord::ClientQuota(sample_quota()),
            MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: vec![("client-id".into(), Some("c".into()))],
                key: "request_percentage".into(),
                value: 0.0,
                remove: true,
            }),
        ]
    }

    /// A user's quota with the default client.
    fn sample_quota() -> ClientQuotaRecord {
        ClientQuotaRecord {
            entity: vec![
                ("user".into(), Some("alice".into())),
                ("client-id".into(), None),
            ],
            key: "producer_byte_rate".into(),
            value: 1048576.0,
            remove: false,
        }
    }

    fn sample_acl() -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: "t".into(),
                pattern_type: PatternType::Literal,
            },
            principal: "User:a".into(),
            host: "*".into(),
            operation: AclOperation::Write,
            permission: PermissionType::Allow,
        }
    }

    #[test]
    fn an_acl_record_is_encoded_as_kafka_writes_it() {
        let id = KafkaUuid([0xab; 16]);
        let bytes = MetadataRecord::AccessControlEntry {
            id,
            acl: sample_acl(),
        }
        .encode();
        // frame 1, type 18, version 0, id, Topic, "t", LITERAL, "User:a", "*", WRITE, ALLOW, no tags
        let want = hex(&format!(
            "01 12 00 {} 02 0274 03 07557365723a61 022a 04 03 00",
            "ab".repeat(16)
        ));
        assert_eq!(bytes, want);
    }

    #[test]
    fn a_client_quota_record_is_encoded_as_kafka_writes_it() {
        let bytes = MetadataRecord::ClientQuota(sample_quota()).encode();
        // frame 1, type 14, version 0; two entity entries (a null name for the default), the
        // key, the value as an IEEE 754 double, remove, no tags.
        let want = hex(&format!(
            "01 0e 00 03 05{} 06{} 00 0a{} 00 00 13{} 4130000000000000 00 00",
            plain_hex("user"),
            plain_hex("alice"),
            plain_hex("client-id"),
            plain_hex("producer_byte_rate")
        ));
        assert_eq!(bytes, want);
    }

    fn plain_hex(s: &str) -> String {
        crate::security::hex(s.as_bytes())
    }

    #[test]
    fn records_round_trip() {
        for r in samples() {
            assert_eq!(MetadataRecord::decode(&r.encode()).unwrap(), Some(r));
        }
    }

    #[test]
    fn record_bytes_follow_kafkas_layout() {
        let r = MetadataRecord::Topic {
            name: "ab".into(),
            topic_id: KafkaUuid([7; 16]),
        };
        let mut expect = vec![1, 2, 0, 3, b'a', b'b'];
        expect.extend([7; 16]);
        expect.push(0);
        assert_eq!(r.encode(), expect);
        // A NoOpRecord as Kafka 4.1 writes it.
        assert_eq!(MetadataRecord::NoOp.encode(), hex("01 14 00 00"));
        // The fenced change: tag 0, one byte, -1.
        let unfence = MetadataRecord::BrokerRegistrationChange {
            broker_id: 1,
            broker_epoch: 2,
            fenced: -1,
            in_controlled_shutdown: 0,
        };
        assert_eq!(
            unfence.encode(),
            hex("01 11 00 00000001 0000000000000002 01 00 01 ff")
        );
    }

    #[test]
    fn control_records_match_kafkas_bytes() {
        let lc = ControlRecord::LeaderChange {
            leader_id: 1,
            voters: vec![1],
            granting_voters: vec![1],
        };
        assert_eq!(
            lc.value(),
            hex("0000 00000001 02 00000001 00 02 00000001 00 00")
        );
        assert_eq!(lc.key(), [0, 0, 0, 2]);
        assert_eq!(
            ControlRecord::SnapshotHeader {
                last_contained_log_timestamp: 0
            }
            .value(),
            hex("0000 0000000000000000 00")
        );
        assert_eq!(ControlRecord::SnapshotFooter.value(), hex("0000 00"));
        assert_eq!(
            ControlRecord::KRaftVersion { kraft_version: 1 }.value(),
            hex("0000 0001 00")
        );
        let dir = KafkaUuid([9; 16]);
        let voters = ControlRecord::Voters(vec![VoterRecord {
            voter_id: 1,
            directory_id: dir,
            endpoints: vec![("CONTROLLER".into(), "127.0.0.1".into(), 19093)],
            kraft_version_min: 0,
            kraft_version_max: 1,
        }]);
        let mut expect = hex("0000 02 00000001");
        expect.extend([9; 16]);
        expect.extend(hex("02 0b"));
        expect.extend(b"CONTROLLER");
        expect.extend(hex("0a"));
        expect.extend(b"127.0.0.1");
        expect.extend(hex("4a95 00 0000 0001 00 00 00"));
        assert_eq!(voters.value(), expect);
        for c in [
            lc,
            voters,
            ControlRecord::SnapshotFooter,
            ControlRecord::KRaftVersion { kraft_version: 1 },
        ] {
            assert_eq!(
                ControlRecord::decode(&c.key(), &c.value()).unwrap(),
                Some(c)
            );
        }
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        for rec in samples() {
            let full = rec.encode();
            for n in 0..full.len() {
                assert!(
                    MetadataRecord::decode(&full[..n]).is_err(),
                    "{rec:?} at {n}"
                );
            }
        }
    }
}
