//! How quorum entries are stored: each openraft entry is one Kafka record batch of
//! `__cluster_metadata-0`, so the metadata log reads as Kafka's. Metadata changes are data
//! batches of metadata records; a new leader's first entry is a LeaderChange control batch; the
//! voter set is a KRaftVersion + Voters control batch. The batch's leader epoch is the term.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};

use super::voters::VoterNode;
use super::{Entry, MetadataBatch, NodeId, TypeConfig};
use crate::metadata::records::{ControlRecord, VoterRecord, KRAFT_VOTERS};
use crate::storage::batch::{self, BatchHeader, KeyValue};

/// The listener name written into voter records when none is configured.
pub const DEFAULT_CONTROLLER_LISTENER: &str = "CONTROLLER";

/// A stored entry that cannot be read back.
#[derive(Debug, thiserror::Error)]
#[error("metadata log entry at offset {offset}: {reason}")]
pub struct EntryError {
    pub offset: i64,
    pub reason: String,
}

pub fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 0), index)
}

/// How many Kafka offsets an entry occupies.
pub fn record_count(payload: &EntryPayload<TypeConfig>) -> i64 {
    match payload {
        EntryPayload::Blank => 1,
        EntryPayload::Membership(_) => 2,
        EntryPayload::Normal(b) => b.records.len().max(1) as i64,
    }
}

/// The voters of a membership as Kafka's VotersRecord lists them.
pub fn voter_records(m: &Membership<NodeId, VoterNode>, listener: &str) -> Vec<VoterRecord> {
    m.nodes()
        .filter(|(id, _)| m.voter_ids().any(|v| v == **id))
        .map(|(id, node)| {
            let (host, port) = node.host_port();
            VoterRecord {
                voter_id: *id as i32,
                directory_id: node.directory_id,
                endpoints: vec![(listener.to_string(), host, port)],
                kraft_version_min: 0,
                kraft_version_max: 1,
            }
        })
        .collect()
}

/// A membership of the voters in a VotersRecord.
pub fn membership_of(voters: &[VoterRecord]) -> Membership<NodeId, VoterNode> {
    let ids: BTreeSet<NodeId> = voters.iter().map(|v| v.voter_id as NodeId).collect();
    let nodes: BTreeMap<NodeId, VoterNode> = voters
        .iter()
        .map(|v| {
            let addr = v
                .endpoints
                .first()
                .map(|(_, h, p)| format!("{h}:{p}"))
                .unwrap_or_default();
            (v.voter_id as NodeId, VoterNode::new(addr, v.directory_id))
        })
        .collect();
    Membership::new(vec![ids], nodes)
}

/// The header of a Voters record that keeps what Kafka's record cannot say: a joint membership's
/// voter sets and the learners being caught up (openraft's whole membership, as JSON). Written
/// only for such a membership, so a settled one reads as Kafka writes it.
pub const MEMBERSHIP_HEADER: &str = "evenkeel.raft.configs";

/// The header value for `m`, when its Voters record alone would lose something of it.
pub fn membership_header(m: &Membership<NodeId, VoterNode>) -> Option<Vec<u8>> {
    let plain = m.get_joint_config().len() == 1 && m.learner_ids().next().is_none();
    match plain {
        true => None,
        false => serde_json::to_vec(m).ok(),
    }
}

/// The membership a Voters record stores, with its header when it has one; an unreadable header
/// is an error (the record's one voter set would be a weaker quorum than a joint one).
pub fn membership_from(
    voters: &[VoterRecord],
    header: Option<&[u8]>,
) -> Result<Membership<NodeId, VoterNode>, String> {
    match header {
        None => Ok(membership_of(voters)),
        Some(h) => serde_json::from_slice(h)
            .map_err(|e| format!("the {MEMBERSHIP_HEADER} header cannot be read: {e}")),
    }
}

/// The value of `name` among a record's headers.
pub fn header_value<'a>(headers: &[(&'a [u8], Option<&'a [u8]>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(k, _)| *k == name.as_bytes())
        .and_then(|(_, v)| *v)
}

/// What a LeaderChange or Voters record needs to say beyond the entry itself.
#[derive(Debug, Clone)]
pub struct EntryContext {
    /// The leader of term `leader_term`, as far as this node knows (-1 if not).
    pub leader: i32,
    pub leader_term: u64,
    pub voters: Vec<i32>,
    pub listener: String,
}

/// The record batch that stores `entry`, with its base offset and leader epoch set.
pub fn encode_entry(entry: &Entry, base_offset: i64, ctx: &EntryContext, now_ms: i64) -> Vec<u8> {
    let mut b = match &entry.payload {
        EntryPayload::Normal(batch) => {
            let kvs: Vec<KeyValue<'_>> = batch
                .records
                .iter()
                .map(|v| (None, Some(v.as_slice())))
                .collect();
            batch::build_batch(&kvs, now_ms)
        }
        EntryPayload::Blank => {
            let rec = ControlRecord::LeaderChange {
                leader_id: ctx.leader,
                voters: ctx.voters.clone(),
                granting_voters: if ctx.leader >= 0 {
                    vec![ctx.leader]
                } else {
                    Vec::new()
                },
            };
            let (k, v) = (rec.key(), rec.value());
            batch::build_control_batch(&[(Some(&k[..]), Some(&v[..]))], now_ms)
        }
        EntryPayload::Membership(m) => {
            let version = ControlRecord::KRaftVersion { kraft_version: 1 };
            let voters = ControlRecord::Voters(voter_records(m, &ctx.listener));
            let (k1, v1) = (version.key(), version.value());
            let (k2, v2) = (voters.key(), voters.value());
            let header = membership_header(m);
            let headers: Vec<batch::Header<'_>> = header
                .iter()
                .map(|h| (MEMBERSHIP_HEADER.as_bytes(), &h[..]))
                .collect();
            batch::build_batch_with(
                &[
                    ((Some(&k1[..]), Some(&v1[..])), &[]),
                    ((Some(&k2[..]), Some(&v2[..])), &headers[..]),
                ],
                now_ms,
                true,
            )
        }
    };
    batch::set_base_offset(&mut b, base_offset);
    batch::set_partition_leader_epoch(&mut b, entry.log_id.leader_id.term as i32);
    b
}

/// Reads back the entry a batch stores, given its raft index.
pub fn decode_entry(batch_bytes: &[u8], index: u64) -> Result<Entry, EntryError> {
    let h = BatchHeader::parse(batch_bytes).map_err(|e| EntryError {
        offset: -1,
        reason: e.to_string(),
    })?;
    let err = |reason: String| EntryError {
        offset: h.base_offset,
        reason,
    };
    let id = log_id(h.partition_leader_epoch.max(0) as u64, index);
    if !h.is_control() {
        let records = batch::uncompressed_records(batch_bytes)
            .map(|r| r.value.unwrap_or_default().to_vec())
            .collect::<Vec<_>>();
        if records.len() != h.records_count.max(0) as usize {
            return Err(err("a record of the batch is malformed".into()));
        }
        return Ok(Entry {
            log_id: id,
            payload: EntryPayload::Normal(MetadataBatch { records }),
        });
    }
    let mut payload = EntryPayload::Blank;
    for r in batch::uncompressed_records(batch_bytes) {
        let (Some(k), Some(v)) = (r.key, r.value) else {
            return Err(err("a control record without key or value".into()));
        };
        if k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == KRAFT_VOTERS {
            match ControlRecord::decode(k, v) {
                Ok(Some(ControlRecord::Voters(voters))) => {
                    let header = header_value(&r.headers, MEMBERSHIP_HEADER);
                    payload =
                        EntryPayload::Membership(membership_from(&voters, header).map_err(err)?)
                }
                Ok(_) => {}
                Err(e) => return Err(err(e.to_string())),
            }
        }
    }
    Ok(Entry {
        log_id: id,
        payload,
    })
}

/// Where one entry sits in the metadata log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPos {
    pub term: u64,
    pub base_offset: i64,
    /// The offset after the batch.
    pub next_offset: i64,
}

/// Raft index → batch position for the entries in the log, contiguous from `first`.
#[derive(Debug, Default, Clone)]
pub struct BatchIndex {
    first: u64,
    batches: VecDeque<BatchPos>,
}

impl BatchIndex {
    /// An empty index whose next entry will have raft index `first`.
    pub fn starting_at(first: u64) -> BatchIndex {
        BatchIndex {
            first,
            batches: VecDeque::new(),
        }
    }
    pub fn first_index(&self) -> u64 {
        self.first
    }
    /// The index the next appended entry takes.
    pub fn next_index(&self) -> u64 {
        self.first + self.batches.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
    pub fn get(&self, index: u64) -> Option<BatchPos> {
        let i = index.checked_sub(self.first)?;
        self.batches.get(i as usize).copied()
    }
    pub fn last(&self) -> Option<(u64, BatchPos)> {
        self.batches
            .back()
            .map(|b| (self.first + self.batches.len() as u64 - 1, *b))
    }
    pub fn push(&mut self, pos: BatchPos) {
        self.batches.push_back(pos);
    }
    /// Forgets `index` and everything after it.
    pub fn truncate_from(&mut self, index: u64) {
        let keep = index.saturating_sub(self.first) as usize;
        self.batches.truncate(keep);
    }
    /// Forgets everything up to and including `index`.
    pub fn purge_through(&mut self, index: u64) {
        while self.first <= index && !self.batches.is_empty() {
            self.batches.pop_front();
            self.first += 1;
        }
        if self.first <= index {
            self.first = index + 1;
        }
    }
    /// The raft index of the entry whose batch starts at `offset`.
    pub fn index_of_offset(&self, offset: i64) -> Option<u64> {
        let i = self
            .batches
            .binary_search_by_key(&offset, |b| b.base_offset)
            .ok()?;
        Some(self.first + i as u64)
    }
    /// The raft index of the entry holding `offset`.
    pub fn index_containing(&self, offset: i64) -> Option<u64> {
        let i = self.batches.partition_point(|b| b.next_offset <= offset);
        let b = self.batches.get(i)?;
        (b.base_offset <= offset).then_some(self.first + i as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KafkaUuid;

    fn nodes() -> Membership<NodeId, VoterNode> {
        let mut m = BTreeMap::new();
        m.insert(1, VoterNode::new("127.0.0.1:9093", KafkaUuid::ZERO));
        m.insert(2, VoterNode::new("127.0.0.1:9095", KafkaUuid([7; 16])));
        Membership::from(m)
    }

    /// Mid-change: voters {1} and {1, 2} (joint), node 3 a learner catching up.
    fn joint() -> Membership<NodeId, VoterNode> {
        let mut m = BTreeMap::new();
        m.insert(1, VoterNode::new("127.0.0.1:9093", KafkaUuid([1; 16])));
        m.insert(2, VoterNode::new("127.0.0.1:9095", KafkaUuid([2; 16])));
        m.insert(3, VoterNode::new("127.0.0.1:9097", KafkaUuid([3; 16])));
        Membership::new(vec![[1].into(), [1, 2].into()], m)
    }

    #[test]
    fn every_kind_of_entry_survives_its_batch() {
        let entries = vec![
            Entry {
                log_id: log_id(0, 0),
                payload: EntryPayload::Membership(nodes()),
            },
            Entry {
                log_id: log_id(3, 1),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: log_id(3, 2),
                payload: EntryPayload::Membership(joint()),
            },
            Entry {
                log_id: log_id(3, 3),
                payload: EntryPayload::Normal(MetadataBatch {
                    records: vec![vec![1, 20, 0, 0], vec![1, 20, 0, 0]],
                }),
            },
        ];
        let mut offset = 0;
        let ctx = EntryContext {
            leader: 1,
            leader_term: 3,
            voters: vec![1, 2],
            listener: "CONTROLLER".into(),
        };
        for e in entries {
            let b = encode_entry(&e, offset, &ctx, 7);
            let h = BatchHeader::parse(&b).unwrap();
            assert_eq!(h.base_offset, offset);
            assert_eq!(h.records_count as i64, record_count(&e.payload));
            assert_eq!(h.partition_leader_epoch as u64, e.log_id.leader_id.term);
            batch::validate_batches(&b).unwrap();
            let back = decode_entry(&b, e.log_id.index).unwrap();
            assert_eq!(back.log_id, e.log_id);
            assert_eq!(format!("{:?}", back.payload), format!("{:?}", e.payload));
            offset = h.next_offset();
        }
    }

    #[test]
    fn an_unreadable_membership_header_is_an_error_not_one_voter_set() {
        let e = Entry {
            log_id: log_id(3, 2),
            payload: EntryPayload::Membership(joint()),
        };
        let ctx = EntryContext {
            leader: 1,
            leader_term: 3,
            voters: vec![1, 2],
            listener: "CONTROLLER".into(),
        };
        let mut b = encode_entry(&e, 0, &ctx, 7);
        let at = b
            .windows(9)
            .position(|w| w == b"\"configs\"")
            .expect("the joint sets in the header");
        b[at..at + 9].copy_from_slice(b"\"configz\"");
        let err = decode_entry(&b, 2).unwrap_err().to_string();
        assert!(err.contains("evenkeel.raft.configs"), "{err}");
    }

    #[test]
    fn the_index_maps_offsets_and_indexes_both_ways() {
        let mut ix = BatchIndex::starting_at(5);
        for (base, next) in [(10, 11), (11, 14), (14, 15)] {
            ix.push(BatchPos {
                term: 1,
                base_offset: base,
                next_offset: next,
            });
        }
        assert_eq!(ix.next_index(), 8);
        assert_eq!(ix.index_of_offset(11), Some(6));
        assert_eq!(ix.index_of_offset(12), None);
        assert_eq!(ix.index_containing(13), Some(6));
        assert_eq!(ix.index_containing(15), None);
        ix.truncate_from(7);
        assert_eq!(ix.last().unwrap().0, 6);
        ix.purge_through(5);
        assert_eq!(ix.first_index(), 6);
        ix.purge_through(20);
        assert!(ix.is_empty());
        assert_eq!(ix.next_index(), 21);
    }
}
