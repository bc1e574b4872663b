//! The classic-group records of `__consumer_offsets` (offset commits and group metadata), byte for
//! byte as Kafka's GroupCoordinator writes and reads them; tombstones are null values.

// Source: apache/kafka group-coordinator/src/main/resources/common/message/{OffsetCommitKey,
// OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json, framed by
// coordinator-common/.../runtime/CoordinatorRecordSerde.java (an int16 version in front of key
// and value; the key's version is the record type), versions as GroupCoordinatorRecordHelpers.java
// and (3.x) server-common/.../MetadataVersion.java choose them.

/// Record type (key version) Kafka writes for an offset commit; 0 is the legacy type, read alike.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// Record type (key version) of a classic group's metadata.
pub const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// The `OffsetCommitValue` version Kafka 3.x/4.x writes for a commit without an expire timestamp.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// The `OffsetCommitValue` version Kafka writes when the commit carries an expire timestamp
/// (a retention time in the OffsetCommit request): the only version with that field.
pub const OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE: i16 = 1;
/// The `GroupMetadataValue` version Kafka 3.x/4.x writes (the highest non-flexible one).
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// Kafka's generated code refuses to serialize, or to read, a string longer than this.
const MAX_STRING_LEN: usize = 0x7fff;
/// The first flexible (compact strings, tagged fields) version of both values.
const FIRST_FLEXIBLE_VERSION: i16 = 4;

/// Why bytes are not a record this module knows, or why a record cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupRecordError {
    #[error("the {what} ends inside {field}")]
    Truncated {
        what: &'static str,
        field: &'static str,
    },
    /// A key of another record type (3 and up are consumer, share and streams group records).
    #[error("record type {0} is not an offset commit or classic group metadata record")]
    UnknownRecordType(i16),
    #[error("{what} version {version} is not supported")]
    UnsupportedVersion { what: &'static str, version: i16 },
    #[error("{field} is null, but the field is not nullable")]
    UnexpectedNull { field: &'static str },
    #[error("{field} has an invalid length {len}")]
    InvalidLength { field: &'static str, len: i64 },
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("a varint in {field} is longer than 5 bytes")]
    VarintTooLong { field: &'static str },
    #[error("{field} is {len} bytes, more than Kafka can serialize ({max})")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
}

pub(super) type Result<T> = std::result::Result<T, GroupRecordError>;

/// The key of a `__consumer_offsets` record this module owns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupRecordKey {
    /// `OffsetCommitKey`: the committed offset of one partition for one group.
    OffsetCommit {
        group: String,
        topic: String,
        partition: i32,
    },
    /// `GroupMetadataKey`: a classic group's generation and members.
    GroupMetadata { group: String },
}

impl GroupRecordKey {
    /// The key as Kafka writes it (record type 1 or 2).
    ///
    /// # Panics
    /// If a string is longer than 32,767 bytes, which Kafka cannot write either; use
    /// [`GroupRecordKey::try_encode`] for strings that were not checked.
    pub fn encode(&self) -> Vec<u8> {
        self.try_encode()
            .unwrap_or_else(|e| panic!("cannot encode {self:?}: {e}"))
    }

    /// The key as Kafka writes it, or why it cannot be written.
    pub fn try_encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::new(false);
        match self {
            GroupRecordKey::OffsetCommit {
                group,
                topic,
                partition,
            } => {
                w.i16(OFFSET_COMMIT_KEY_VERSION);
                w.string("group", group)?;
                w.string("topic", topic)?;
                w.i32(*partition);
            }
            GroupRecordKey::GroupMetadata { group } => {
                w.i16(GROUP_METADATA_KEY_VERSION);
                w.string("group", group)?;
            }
        }
        Ok(w.buf)
    }

    /// Reads a key of record type 0 or 1 (offset commit) or 2 (group metadata). Other types
    /// give [`GroupRecordError::UnknownRecordType`]. Bytes after the key are ignored, as Kafka does.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "key", false);
        match r.i16("record type")? {
            0 | 1 => Ok(GroupRecordKey::OffsetCommit {
                group: r.string("group")?,
                topic: r.string("topic")?,
                partition: r.i32("partition")?,
            }),
            2 => Ok(GroupRecordKey::GroupMetadata {
                group: r.string("group")?,
            }),
            other => Err(GroupRecordError::UnknownRecordType(other)),
        }
    }

    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            GroupRecordKey::OffsetCommit { group, .. }
            | GroupRecordKey::GroupMetadata { group } => group,
        }
    }
}

/// `OffsetCommitValue`: a committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub offset: i64,
    /// -1 when the commit carried none (and in versions 0-2).
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// -1 when the commit carried none; only version 1 stores it.
    pub expire_timestamp: i64,
}

impl OffsetCommitValue {
    /// The version Kafka writes for this value: 1 when it carries an expire timestamp (the only
    /// version that has one; the leader epoch is then dropped, as Kafka does), else 3.
    pub fn kafka_version(&self) -> i16 {
        if self.expire_timestamp != -1 {
            OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE
        } else {
            OFFSET_COMMIT_VALUE_VERSION
        }
    }

    /// The value as Kafka writes it (version [`OffsetCommitValue::kafka_version`]).
    ///
    /// # Panics
    /// If `metadata` is longer than 32,767 bytes, which Kafka cannot write either; use
    /// [`OffsetCommitValue::try_encode`] for metadata that was not checked.
    pub fn encode(&self) -> Vec<u8> {
        self.try_encode()
            .unwrap_or_else(|e| panic!("cannot encode an offset commit value: {e}"))
    }

    /// The value as Kafka writes it, or why it cannot be written.
    pub fn try_encode(&self) -> Result<Vec<u8>> {
        self.encode_version(self.kafka_version())
    }

    /// The value at `version` (0-4). Fields the version lacks are left out, as Kafka's generated
    /// code does for these "ignorable" fields.
    pub fn encode_version(&self, version: i16) -> Result<Vec<u8>> {
        if !(0..=4).contains(&version) {
            return Err(GroupRecordError::UnsupportedVersion {
                what: "offset commit value",
                version,
            });
        }
        let mut w = Writer::new(version >= FIRST_FLEXIBLE_VERSION);
        w.i16(version);
        w.i64(self.offset);
        if version >= 3 {
            w.i32(self.leader_epoch);
        }
        w.string("metadata", &self.metadata)?;
        w.i64(self.commit_timestamp);
        if version == 1 {
            w.i64(self.expire_timestamp);
        }
        w.tagged_fields();
        Ok(w.buf)
    }

    /// Reads any version. Versions above 4 are read as 4, as Kafka's generated code does
    /// (KIP-915: later versions only add tagged fields); negative versions are refused.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "offset commit value", false);
        let version = r.i16("version")?;
        if version < 0 {
            return Err(GroupRecordError::UnsupportedVersion {
                what: "offset commit value",
                version,
            });
        }
        r.flexible = version >= FIRST_FLEXIBLE_VERSION;
        let offset = r.i64("offset")?;
        let leader_epoch = if version >= 3 {
            r.i32("leaderEpoch")?
        } else {
            -1
        };
        let metadata = r.string("metadata")?;
        let commit_timestamp = r.i64("commitTimestamp")?;
        let expire_timestamp = if version == 1 {
            r.i64("expireTimestamp")?
        } else {
            -1
        };
        r.tagged_fields("tagged fields")?;
        Ok(OffsetCommitValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp,
            expire_timestamp,
        })
    }
}

/// `GroupMetadataValue.MemberMetadata`: one member of a classic group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    /// Static membership; stored from version 3.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Stored from version 1; -1 (the schema's default) when read from version 0.
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's chosen protocol.
    pub subscription: Vec<u8>,
    pub assignment: Vec<u8>,
}

/// `GroupMetadataValue`: a classic group's state as of its last rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// "" for a group without one (Kafka writes `protocolType.orElse("")`).
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// Stored from version 2; -1 when absent.
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

impl GroupMetadataValue {
    /// The value as Kafka writes it (version 3).
    ///
    /// # Panics
    /// If a string is longer than 32,767 bytes, which Kafka cannot write either; use
    /// [`GroupMetadataValue::try_encode`] for strings that were not checked.
    pub fn encode(&self) -> Vec<u8> {
        self.try_encode()
            .unwrap_or_else(|e| panic!("cannot encode a group metadata value: {e}"))
    }

    /// The value as Kafka writes it, or why it cannot be written.
    pub fn try_encode(&self) -> Result<Vec<u8>> {
        self.encode_version(GROUP_METADATA_VALUE_VERSION)
    }

    /// The value at `version` (0-4). Fields the version lacks are left out, as Kafka's generated
    /// code does for these "ignorable" fields.
    pub fn encode_version(&self, version: i16) -> Result<Vec<u8>> {
        if !(0..=4).contains(&version) {
            return Err(GroupRecordError::UnsupportedVersion {
                what: "group metadata value",
                version,
            });
        }
        let mut w = Writer::new(version >= FIRST_FLEXIBLE_VERSION);
        w.i16(version);
        w.string("protocolType", &self.protocol_type)?;
        w.i32(self.generation);
        w.nullable_string("protocol", self.protocol.as_deref())?;
        w.nullable_string("leader", self.leader.as_deref())?;
        if version >= 2 {
            w.i64(self.current_state_timestamp);
        }
        w.array_len("members", self.members.len())?;
        for m in &self.members {
            w.string("memberId", &m.member_id)?;
            if version >= 3 {
                w.nullable_string("groupInstanceId", m.group_instance_id.as_deref())?;
            }
            w.string("clientId", &m.client_id)?;
            w.string("clientHost", &m.client_host)?;
            if version >= 1 {
                w.i32(m.rebalance_timeout_ms);
            }
            w.i32(m.session_timeout_ms);
            w.bytes("subscription", &m.subscription)?;
            w.bytes("assignment", &m.assignment)?;
            w.tagged_fields();
        }
        w.tagged_fields();
        Ok(w.buf)
    }

    /// Reads any version. Versions above 4 are read as 4, as Kafka's generated code does
    /// (KIP-915: later versions only add tagged fields); negative versions are refused.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "group metadata value", false);
        let version = r.i16("version")?;
        if version < 0 {
            return Err(GroupRecordError::UnsupportedVersion {
                what: "group metadata value",
                version,
            });
        }
        r.flexible = version >= FIRST_FLEXIBLE_VERSION;
        let protocol_type = r.string("protocolType")?;
        let generation = r.i32("generation")?;
        let protocol = r.nullable_string("protocol")?;
        let leader = r.nullable_string("leader")?;
        let current_state_timestamp = if version >= 2 {
            r.i64("currentStateTimestamp")?
        } else {
            -1
        };
        let count = r.array_len("members")?;
        // A member takes at least 10 bytes in any version: reserve no more than the input can hold.
        let mut members = Vec::with_capacity(count.min(r.remaining() / 10));
        for _ in 0..count {
            let member_id = r.string("memberId")?;
            let group_instance_id = if version >= 3 {
                r.nullable_string("groupInstanceId")?
            } else {
                None
            };
            let client_id = r.string("clientId")?;
            let client_host = r.string("clientHost")?;
            let rebalance_timeout_ms = if version >= 1 {
                r.i32("rebalanceTimeout")?
            } else {
                -1
            };
            let session_timeout_ms = r.i32("sessionTimeout")?;
            let subscription = r.bytes("subscription")?;
            let assignment = r.bytes("assignment")?;
            r.tagged_fields("member tagged fields")?;
            members.push(MemberMetadata {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        r.tagged_fields("tagged fields")?;
        Ok(GroupMetadataValue {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp,
            members,
        })
    }
}

/// Kafka's message writer: big-endian integers; int16-length strings, int32-length bytes and
/// arrays, or (flexible) unsigned-varint length + 1 and a tagged-field section per struct.
pub(super) struct Writer {
    pub(super) buf: Vec<u8>,
    flexible: bool,
}

impl Writer {
    pub(super) fn new(flexible: bool) -> Self {
        Writer {
            buf: Vec::new(),
            flexible,
        }
    }

    pub(super) fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(super) fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(super) fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(super) fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// A length prefix: int16 (strings) or int32, or compact (length + 1) when flexible.
    pub(super) fn len_prefix(&mut self, len: usize, int16: bool) {
        if self.flexible {
            // Callers keep `len` within i32::MAX, so `len + 1` fits a u32.
            self.uvarint(len as u32 + 1);
        } else if int16 {
            self.i16(len as i16);
        } else {
            self.i32(len as i32);
        }
    }

    pub(super) fn string(&mut self, field: &'static str, s: &str) -> Result<()> {
        if s.len() > MAX_STRING_LEN {
            return Err(GroupRecordError::TooLong {
                field,
                len: s.len(),
                max: MAX_STRING_LEN,
            });
        }
        self.len_prefix(s.len(), true);
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }

    pub(super) fn nullable_string(&mut self, field: &'static str, s: Option<&str>) -> Result<()> {
        match s {
            Some(s) => self.string(field, s),
            None => {
                if self.flexible {
                    self.uvarint(0);
                } else {
                    self.i16(-1);
                }
                Ok(())
            }
        }
    }

    pub(super) fn check_i32_len(field: &'static str, len: usize) -> Result<()> {
        if len > i32::MAX as usize - 1 {
            return Err(GroupRecordError::TooLong {
                field,
                len,
                max: i32::MAX as usize - 1,
            });
        }
        Ok(())
    }

    pub(super) fn bytes(&mut self, field: &'static str, b: &[u8]) -> Result<()> {
        Self::check_i32_len(field, b.len())?;
        self.len_prefix(b.len(), false);
        self.buf.extend_from_slice(b);
        Ok(())
    }

    pub(super) fn array_len(&mut self, field: &'static str, len: usize) -> Result<()> {
        Self::check_i32_len(field, len)?;
        self.len_prefix(len, false);
        Ok(())
    }

    /// An empty tagged-field section, in flexible versions only.
    pub(super) fn tagged_fields(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
}

/// The reader matching [`Writer`], checking every length against what is left.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
    flexible: bool,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], what: &'static str, flexible: bool) -> Self {
        Reader {
            buf,
            pos: 0,
            what,
            flexible,
        }
    }

    pub(super) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(super) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        let truncated = GroupRecordError::Truncated {
            what: self.what,
            field,
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let s = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub(super) fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    pub(super) fn i16(&mut self, field: &'static str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    pub(super) fn i32(&mut self, field: &'static str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub(super) fn i64(&mut self, field: &'static str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Kafka's unsigned varint: at most 5 bytes; bits past 32 are dropped, as in Java.
    pub(super) fn uvarint(&mut self, field: &'static str) -> Result<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let [b] = self.array::<1>(field)?;
            value |= u32::from(b & 0x7f).wrapping_shl(7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GroupRecordError::VarintTooLong { field })
    }

    /// A length prefix as `Some(len)`, or `None` for null; int16 for strings, else int32, or
    /// compact (length + 1) when flexible.
    pub(super) fn len_prefix(&mut self, field: &'static str, int16: bool) -> Result<Option<usize>> {
        let len: i64 = if self.flexible {
            i64::from(self.uvarint(field)?) - 1
        } else if int16 {
            i64::from(self.i16(field)?)
        } else {
            i64::from(self.i32(field)?)
        };
        if len == -1 {
            return Ok(None);
        }
        if len < 0 || (int16 && len > MAX_STRING_LEN as i64) {
            return Err(GroupRecordError::InvalidLength { field, len });
        }
        if len > self.remaining() as i64 {
            // Like Kafka, a length beyond the bytes left fails before anything is allocated.
            return Err(GroupRecordError::Truncated {
                what: self.what,
                field,
            });
        }
        Ok(Some(len as usize))
    }

    pub(super) fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>> {
        let Some(len) = self.len_prefix(field, true)? else {
            return Ok(None);
        };
        let raw = self.take(len, field)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| GroupRecordError::InvalidUtf8 { field })
    }

    pub(super) fn string(&mut self, field: &'static str) -> Result<String> {
        self.nullable_string(field)?
            .ok_or(GroupRecordError::UnexpectedNull { field })
    }

    pub(super) fn bytes(&mut self, field: &'static str) -> Result<Vec<u8>> {
        let len = self
            .len_prefix(field, false)?
            .ok_or(GroupRecordError::UnexpectedNull { field })?;
        Ok(self.take(len, field)?.to_vec())
    }

    /// An array's element count; like Kafka, more elements than bytes left is an error, which
    /// also bounds the caller's allocation.
    pub(super) fn array_len(&mut self, field: &'static str) -> Result<usize> {
        self.len_prefix(field, false)?
            .ok_or(GroupRecordError::UnexpectedNull { field })
    }

    /// Skips a tagged-field section (flexible versions only); no tags are known here.
    pub(super) fn tagged_fields(&mut self, field: &'static str) -> Result<()> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint(field)?;
        for _ in 0..count {
            let _tag = self.uvarint(field)?;
            let size = self.uvarint(field)?;
            self.take(size as usize, field)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offset_value() -> OffsetCommitValue {
        OffsetCommitValue {
            offset: 42,
            leader_epoch: 7,
            metadata: "meta".into(),
            commit_timestamp: 1_700_000_000_000,
            expire_timestamp: -1,
        }
    }

    fn member(id: &str, instance: Option<&str>) -> MemberMetadata {
        MemberMetadata {
            member_id: id.into(),
            group_instance_id: instance.map(Into::into),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 300_000,
            session_timeout_ms: 45_000,
            subscription: vec![0, 3, 0, 0, 0, 1, 0, 1, b't'],
            assignment: vec![],
        }
    }

    fn group_value() -> GroupMetadataValue {
        GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp: 1_700_000_000_123,
            members: vec![member("m1", Some("static-1")), member("m2", None)],
        }
    }

    /// What `v` reads back as after being written at `version`: the fields the version lacks
    /// take the schema defaults.
    fn offset_at(v: &OffsetCommitValue, version: i16) -> OffsetCommitValue {
        OffsetCommitValue {
            leader_epoch: if version >= 3 { v.leader_epoch } else { -1 },
            expire_timestamp: if version == 1 { v.expire_timestamp } else { -1 },
            ..v.clone()
        }
    }

    fn group_at(v: &GroupMetadataValue, version: i16) -> GroupMetadataValue {
        GroupMetadataValue {
            current_state_timestamp: if version >= 2 {
                v.current_state_timestamp
            } else {
                -1
            },
            members: v
                .members
                .iter()
                .map(|m| MemberMetadata {
                    group_instance_id: if version >= 3 {
                        m.group_instance_id.clone()
                    } else {
                        None
                    },
                    rebalance_timeout_ms: if version >= 1 {
                        m.rebalance_timeout_ms
                    } else {
                        -1
                    },
                    ..m.clone()
                })
                .collect(),
            ..v.clone()
        }
    }

    fn assert_every_prefix_fails<T: std::fmt::Debug>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Result<T>,
    ) {
        for n in 0..bytes.len() {
            assert!(
                decode(&bytes[..n]).is_err(),
                "prefix of {n} of {} bytes decoded",
                bytes.len()
            );
        }
    }

    // Byte-exact vectors, built by hand from apache/kafka
    // group-coordinator/src/main/resources/common/message/OffsetCommitKey.json (group string,
    // topic string, partition int32; non-flexible, so strings are int16 length + UTF-8) and
    // GroupMetadataKey.json (group string), behind the int16 record type that
    // coordinator-common/.../runtime/CoordinatorRecordSerde.java writes first; the types 1 and 2
    // are those GroupCoordinatorRecordHelpers.java uses.
    #[test]
    fn key_vectors() {
        let key = GroupRecordKey::OffsetCommit {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
        };
        let bytes = [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 0];
        assert_eq!(key.encode(), bytes);
        assert_eq!(GroupRecordKey::decode(&bytes).unwrap(), key);
        // Record type 0 (the legacy offset commit key) has the same layout.
        let legacy = [0, 0, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 0];
        assert_eq!(GroupRecordKey::decode(&legacy).unwrap(), key);

        let key = GroupRecordKey::GroupMetadata { group: "g".into() };
        assert_eq!(key.encode(), [0, 2, 0, 1, b'g']);
        assert_eq!(GroupRecordKey::decode(&[0, 2, 0, 1, b'g']).unwrap(), key);
        assert_eq!(key.group(), "g");
    }

    // OffsetCommitValue.json: offset int64 (0+), leaderEpoch int32 (3+), metadata string (0+),
    // commitTimestamp int64 (0+), expireTimestamp int64 (1 only); flexible from 4 (compact
    // string = varint length + 1, then an empty tagged-field section, one 0 byte).
    #[test]
    fn offset_commit_value_vectors() {
        let v = OffsetCommitValue {
            offset: 5,
            leader_epoch: 2,
            metadata: "m".into(),
            commit_timestamp: 7,
            expire_timestamp: -1,
        };
        let v3 = [
            0, 3, // version
            0, 0, 0, 0, 0, 0, 0, 5, // offset
            0, 0, 0, 2, // leaderEpoch
            0, 1, b'm', // metadata
            0, 0, 0, 0, 0, 0, 0, 7, // commitTimestamp
        ];
        assert_eq!(v.encode(), v3);
        assert_eq!(OffsetCommitValue::decode(&v3).unwrap(), v);

        let v4 = [
            0, 4, // version
            0, 0, 0, 0, 0, 0, 0, 5, // offset
            0, 0, 0, 2, // leaderEpoch
            2, b'm', // metadata, compact
            0, 0, 0, 0, 0, 0, 0, 7, // commitTimestamp
            0, // no tagged fields
        ];
        assert_eq!(v.encode_version(4).unwrap(), v4);
        assert_eq!(OffsetCommitValue::decode(&v4).unwrap(), v);

        // With an expire timestamp Kafka writes version 1, which has no leader epoch.
        let with_expire = OffsetCommitValue {
            expire_timestamp: 9,
            ..v.clone()
        };
        let v1 = [
            0, 1, // version
            0, 0, 0, 0, 0, 0, 0, 5, // offset
            0, 1, b'm', // metadata
            0, 0, 0, 0, 0, 0, 0, 7, // commitTimestamp
            0, 0, 0, 0, 0, 0, 0, 9, // expireTimestamp
        ];
        assert_eq!(with_expire.kafka_version(), 1);
        assert_eq!(with_expire.encode(), v1);
        assert_eq!(
            OffsetCommitValue::decode(&v1).unwrap(),
            OffsetCommitValue {
                leader_epoch: -1,
                ..with_expire
            }
        );
    }

    // GroupMetadataValue.json: protocolType string, generation int32, protocol and leader
    // nullable strings, currentStateTimestamp int64 (2+), members []MemberMetadata (int32 count)
    // of memberId string, groupInstanceId nullable string (3+), clientId, clientHost,
    // rebalanceTimeout int32 (1+), sessionTimeout int32, subscription and assignment bytes
    // (int32 length); flexible from 4.
    #[test]
    fn group_metadata_value_vectors() {
        let v = GroupMetadataValue {
            protocol_type: "c".into(),
            generation: 1,
            protocol: Some("r".into()),
            leader: None,
            current_state_timestamp: 2,
            members: vec![MemberMetadata {
                member_id: "m".into(),
                group_instance_id: None,
                client_id: "i".into(),
                client_host: "h".into(),
                rebalance_timeout_ms: 3,
                session_timeout_ms: 4,
                subscription: vec![0xAA],
                assignment: vec![],
            }],
        };
        let v3: Vec<u8> = [
            &[0, 3][..],               // version
            &[0, 1, b'c'],             // protocolType
            &[0, 0, 0, 1],             // generation
            &[0, 1, b'r'],             // protocol
            &[0xff, 0xff],             // leader: null
            &[0, 0, 0, 0, 0, 0, 0, 2], // currentStateTimestamp
            &[0, 0, 0, 1],             // one member
            &[0, 1, b'm'],             // memberId
            &[0xff, 0xff],             // groupInstanceId: null
            &[0, 1, b'i', 0, 1, b'h'], // clientId, clientHost
            &[0, 0, 0, 3, 0, 0, 0, 4], // rebalanceTimeout, sessionTimeout
            &[0, 0, 0, 1, 0xAA],       // subscription
            &[0, 0, 0, 0],             // assignment: empty
        ]
        .concat();
        assert_eq!(v.encode(), v3);
        assert_eq!(GroupMetadataValue::decode(&v3).unwrap(), v);

        let v4: Vec<u8> = [
            &[0, 4][..],               // version
            &[2, b'c'],                // protocolType, compact
            &[0, 0, 0, 1],             // generation
            &[2, b'r'],                // protocol
            &[0],                      // leader: null
            &[0, 0, 0, 0, 0, 0, 0, 2], // currentStateTimestamp
            &[2],                      // one member, compact
            &[2, b'm'],                // memberId
            &[0],                      // groupInstanceId: null
            &[2, b'i', 2, b'h'],       // clientId, clientHost
            &[0, 0, 0, 3, 0, 0, 0, 4], // rebalanceTimeout, sessionTimeout
            &[2, 0xAA],                // subscription
            &[1],                      // assignment: empty
            &[0],                      // member's tagged fields
            &[0],                      // value's tagged fields
        ]
        .concat();
        assert_eq!(v.encode_version(4).unwrap(), v4);
        assert_eq!(GroupMetadataValue::decode(&v4).unwrap(), v);

        let v0: Vec<u8> = [
            &[0, 0][..],
            &[0, 1, b'c'],
            &[0, 0, 0, 1],
            &[0, 1, b'r'],
            &[0xff, 0xff],
            &[0, 0, 0, 1],
            &[0, 1, b'm'],
            &[0, 1, b'i', 0, 1, b'h'],
            &[0, 0, 0, 4],
            &[0, 0, 0, 1, 0xAA],
            &[0, 0, 0, 0],
        ]
        .concat();
        assert_eq!(v.encode_version(0).unwrap(), v0);
        assert_eq!(GroupMetadataValue::decode(&v0).unwrap(), group_at(&v, 0));
    }

    #[test]
    fn kafka_versions() {
        assert_eq!(offset_value().kafka_version(), 3);
        assert_eq!(offset_value().encode()[..2], [0, 3]);
        assert_eq!(group_value().encode()[..2], [0, 3]);
    }

    #[test]
    fn round_trips_every_version() {
        let with_expire = OffsetCommitValue {
            expire_timestamp: 1_700_000_100_000,
            ..offset_value()
        };
        for v in [offset_value(), with_expire] {
            for version in 0..=4 {
                let bytes = v.encode_version(version).unwrap();
                assert_eq!(bytes[..2], version.to_be_bytes());
                let back = OffsetCommitValue::decode(&bytes).unwrap();
                assert_eq!(back, offset_at(&v, version), "version {version}");
                assert_every_prefix_fails(&bytes, OffsetCommitValue::decode);
            }
        }
        let empty = GroupMetadataValue {
            protocol_type: String::new(),
            generation: 0,
            protocol: None,
            leader: None,
            current_state_timestamp: -1,
            members: vec![],
        };
        for v in [group_value(), empty] {
            for version in 0..=4 {
                let bytes = v.encode_version(version).unwrap();
                let back = GroupMetadataValue::decode(&bytes).unwrap();
                assert_eq!(back, group_at(&v, version), "version {version}");
                assert_every_prefix_fails(&bytes, GroupMetadataValue::decode);
            }
        }
        for key in [
            GroupRecordKey::OffsetCommit {
                group: "group-ü".into(),
                topic: "orders".into(),
                partition: 17,
            },
            GroupRecordKey::GroupMetadata {
                group: String::new(),
            },
        ] {
            let bytes = key.encode();
            assert_eq!(GroupRecordKey::decode(&bytes).unwrap(), key);
            assert_every_prefix_fails(&bytes, GroupRecordKey::decode);
        }
    }

    #[test]
    fn versions_outside_the_schema() {
        // Record types 3 and up belong to other group kinds.
        assert_eq!(
            GroupRecordKey::decode(&[0, 3, 0, 1, b'g']),
            Err(GroupRecordError::UnknownRecordType(3))
        );
        assert!(GroupRecordKey::decode(&[0xff, 0xff]).is_err());
        // A later value version is read as version 4 (KIP-915); a negative one is refused.
        let mut v5 = offset_value().encode_version(4).unwrap();
        v5[1] = 5;
        assert_eq!(OffsetCommitValue::decode(&v5).unwrap(), offset_value());
        let mut g5 = group_value().encode_version(4).unwrap();
        g5[1] = 5;
        assert_eq!(GroupMetadataValue::decode(&g5).unwrap(), group_value());
        assert!(OffsetCommitValue::decode(&[0xff, 0xff, 0, 0]).is_err());
        assert!(GroupMetadataValue::decode(&[0x80, 0, 0, 0]).is_err());
        assert!(offset_value().encode_version(5).is_err());
        assert!(group_value().encode_version(-1).is_err());
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        let v = offset_value();
        let mut bytes = v.encode_version(4).unwrap();
        bytes.pop(); // the empty tagged-field section
        bytes.extend_from_slice(&[2, 0, 1, 0xEE, 9, 2, 0xAB, 0xCD]);
        assert_eq!(OffsetCommitValue::decode(&bytes).unwrap(), v);
        // A tagged field longer than what is left is an error.
        bytes.truncate(bytes.len() - 1);
        assert!(OffsetCommitValue::decode(&bytes).is_err());
    }

    #[test]
    fn malformed_lengths_are_errors() {
        // Null in a non-nullable string.
        assert_eq!(
            GroupRecordKey::decode(&[0, 2, 0xff, 0xff]),
            Err(GroupRecordError::UnexpectedNull { field: "group" })
        );
        // A negative length other than -1.
        assert!(matches!(
            GroupRecordKey::decode(&[0, 2, 0xff, 0xfe]),
            Err(GroupRecordError::InvalidLength { .. })
        ));
        // Invalid UTF-8.
        assert_eq!(
            GroupRecordKey::decode(&[0, 2, 0, 1, 0xff]),
            Err(GroupRecordError::InvalidUtf8 { field: "group" })
        );
        // A member count far beyond the input must not allocate or loop.
        let mut bytes = GroupMetadataValue {
            members: vec![],
            ..group_value()
        }
        .encode();
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(GroupMetadataValue::decode(&bytes).is_err());
        // Null members array and null subscription.
        bytes[n - 4..].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            GroupMetadataValue::decode(&bytes),
            Err(GroupRecordError::UnexpectedNull { field: "members" })
        );
        // A varint longer than 5 bytes.
        assert_eq!(
            OffsetCommitValue::decode(&[
                0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0
            ]),
            Err(GroupRecordError::VarintTooLong { field: "metadata" })
        );
        // Trailing bytes are ignored, as in Kafka's deserializer.
        let mut bytes = offset_value().encode();
        bytes.push(0);
        assert_eq!(OffsetCommitValue::decode(&bytes).unwrap(), offset_value());
    }

    #[test]
    fn strings_over_kafkas_limit_are_refused() {
        let key = GroupRecordKey::GroupMetadata {
            group: "x".repeat(MAX_STRING_LEN + 1),
        };
        assert!(matches!(
            key.try_encode(),
            Err(GroupRecordError::TooLong { field: "group", .. })
        ));
        let ok = GroupRecordKey::GroupMetadata {
            group: "x".repeat(MAX_STRING_LEN),
        };
        assert_eq!(GroupRecordKey::decode(&ok.encode()).unwrap(), ok);
        // Compact strings over the limit are refused on read too, as Kafka does.
        let mut bytes = vec![0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&[0x81, 0x80, 0x02]); // 0x8001 = length 0x8000 + 1
        bytes.extend(std::iter::repeat_n(b'x', 0x8000 + 9));
        assert!(matches!(
            OffsetCommitValue::decode(&bytes),
            Err(GroupRecordError::InvalidLength { .. })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = GroupRecordKey::decode(&bytes);
            let _ = OffsetCommitValue::decode(&bytes);
            let _ = GroupMetadataValue::decode(&bytes);
            for version in [0u8, 1, 2, 3, 4] {
                let mut b = vec![0, version];
                b.extend_from_slice(&bytes);
                let _ = OffsetCommitValue::decode(&b);
                let _ = GroupMetadataValue::decode(&b);
            }
        }

        #[test]
        fn arbitrary_values_round_trip(
            offset in any::<i64>(),
            epoch in any::<i32>(),
            metadata in ".{0,40}",
            ts in any::<i64>(),
            members in proptest::collection::vec(
                (".{0,12}", proptest::option::of(".{0,12}"), any::<i32>(),
                 proptest::collection::vec(any::<u8>(), 0..20)),
                0..4,
            ),
            version in 0i16..=4,
        ) {
            let v = OffsetCommitValue {
                offset,
                leader_epoch: epoch,
                metadata,
                commit_timestamp: ts,
                expire_timestamp: -1,
            };
            let bytes = v.encode_version(version).unwrap();
            prop_assert_eq!(OffsetCommitValue::decode(&bytes).unwrap(), offset_at(&v, version));
            let g = GroupMetadataValue {
                protocol_type: "consumer".into(),
                generation: epoch,
                protocol: None,
                leader: Some("l".into()),
                current_state_timestamp: ts,
                members: members
                    .into_iter()
                    .map(|(id, instance, timeout, data)| MemberMetadata {
                        member_id: id,
                        group_instance_id: instance,
                        client_id: String::new(),
                        client_host: "h".into(),
                        rebalance_timeout_ms: timeout,
                        session_timeout_ms: timeout,
                        subscription: data.clone(),
                        assignment: data,
                    })
                    .collect(),
            };
            let bytes = g.encode_version(version).unwrap();
            prop_assert_eq!(GroupMetadataValue::decode(&bytes).unwrap(), group_at(&g, version));
        }
    }
}
