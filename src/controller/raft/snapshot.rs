//! Metadata snapshots as Kafka writes them: `<20-digit end offset>-<10-digit epoch>.checkpoint`
//! in `__cluster_metadata-0/`, a control batch (SnapshotHeader, KRaftVersion, Voters), data
//! batches with every record of the image, and a SnapshotFooter batch. The raft position the
//! snapshot covers rides in the header record's headers, which Kafka's tools print and skip.

use std::path::{Path, PathBuf};

use openraft::{LogId, StoredMembership};

use super::entries::{
    header_value, log_id, membership_from, membership_header, voter_records,
    MEMBERSHIP_HEADER as CONFIGS_HEADER,
};
use super::voters::VoterNode;
use super::NodeId;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{ControlRecord, MetadataRecord};
use crate::storage::batch::{self, KeyValue};
use crate::storage::{checkpoint, StorageError};

pub const SUFFIX: &str = ".checkpoint";
const PART_SUFFIX: &str = ".checkpoint.part";
const LAST_HEADER: &str = "evenkeel.raft.last";
const MEMBERSHIP_HEADER: &str = "evenkeel.raft.membership";
/// Records per data batch (Kafka caps a batch at 8 MiB; metadata records are small).
const RECORDS_PER_BATCH: usize = 2000;

/// What a snapshot holds.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    /// The offset after the last record the snapshot covers.
    pub end_offset: i64,
    /// Leader epoch (term) of that record.
    pub epoch: i32,
    pub last_log_id: LogId<NodeId>,
    pub membership: StoredMembership<NodeId, VoterNode>,
    pub last_timestamp: i64,
    pub records: Vec<MetadataRecord>,
}

impl SnapshotFile {
    /// The image the snapshot rebuilds.
    pub fn image(&self) -> MetadataImage {
        MetadataImage::from_snapshot_records(
            &self.records,
            self.end_offset - 1,
            self.epoch,
            self.last_timestamp,
        )
    }
}

/// Kafka's snapshot file name.
pub fn file_name(end_offset: i64, epoch: i32) -> String {
    format!("{end_offset:020}-{epoch:010}{SUFFIX}")
}

/// `(end offset, epoch)` from a snapshot file name.
pub fn parse_name(name: &str) -> Option<(i64, i32)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (o, e) = stem.split_once('-')?;
    if o.len() != 20 || e.len() != 10 {
        return None;
    }
    Some((o.parse().ok()?, e.parse().ok()?))
}

fn malformed(reason: impl Into<String>) -> StorageError {
    StorageError::MalformedFile {
        path: PathBuf::from("<snapshot>"),
        reason: reason.into(),
    }
}

fn log_id_text(id: Option<&LogId<NodeId>>, end_offset: Option<i64>) -> String {
    match (id, end_offset) {
        (Some(id), Some(end)) => format!("{}:{}:{end}", id.leader_id.term, id.index),
        (Some(id), None) => format!("{}:{}", id.leader_id.term, id.index),
        (None, _) => String::new(),
    }
}

fn parse_log_id(text: &str) -> Option<(LogId<NodeId>, Option<i64>)> {
    let mut parts = text.split(':');
    let term = parts.next()?.parse().ok()?;
    let index = parts.next()?.parse().ok()?;
    let end = parts.next().and_then(|e| e.parse().ok());
    Some((log_id(term, index), end))
}

/// The snapshot's bytes.
pub fn encode(s: &SnapshotFile, listener: &str) -> Vec<u8> {
    let epoch = s.epoch;
    let mut out = Vec::new();
    let mut next_offset = 0i64;
    let mut push = |mut b: Vec<u8>, out: &mut Vec<u8>| {
        batch::set_base_offset(&mut b, next_offset);
        batch::set_partition_leader_epoch(&mut b, epoch);
        let h = batch::BatchHeader::parse(&b).expect("a batch just built");
        next_offset = h.next_offset();
        out.extend_from_slice(&b);
    };
    let header = ControlRecord::SnapshotHeader {
        last_contained_log_timestamp: s.last_timestamp,
    };
    let version = ControlRecord::KRaftVersion { kraft_version: 1 };
    let voters = ControlRecord::Voters(voter_records(s.membership.membership(), listener));
    let last = log_id_text(Some(&s.last_log_id), Some(s.end_offset));
    let member = log_id_text(s.membership.log_id().as_ref(), None);
    let headers: Vec<(&[u8], &[u8])> = vec![
        (LAST_HEADER.as_bytes(), last.as_bytes()),
        (MEMBERSHIP_HEADER.as_bytes(), member.as_bytes()),
    ];
    let configs = membership_header(s.membership.membership());
    let voter_headers: Vec<(&[u8], &[u8])> = configs
        .iter()
        .map(|c| (CONFIGS_HEADER.as_bytes(), &c[..]))
        .collect();
    let keys = [header.key(), version.key(), voters.key()];
    let values = [header.value(), version.value(), voters.value()];
    let control: Vec<(KeyValue<'_>, &[batch::Header<'_>])> = vec![
        ((Some(&keys[0][..]), Some(&values[0][..])), &headers[..]),
        ((Some(&keys[1][..]), Some(&values[1][..])), &[]),
        (
            (Some(&keys[2][..]), Some(&values[2][..])),
            &voter_headers[..],
        ),
    ];
    push(
        batch::build_batch_with(&control, s.last_timestamp, true),
        &mut out,
    );
    for chunk in s.records.chunks(RECORDS_PER_BATCH) {
        let values: Vec<Vec<u8>> = chunk.iter().map(MetadataRecord::encode).collect();
        let kvs: Vec<KeyValue<'_>> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
        push(batch::build_batch(&kvs, s.last_timestamp), &mut out);
    }
    let footer = ControlRecord::SnapshotFooter;
    let (k, v) = (footer.key(), footer.value());
    push(
        batch::build_control_batch(&[(Some(&k[..]), Some(&v[..]))], s.last_timestamp),
        &mut out,
    );
    out
}

/// Reads a snapshot's bytes back.
pub fn decode(bytes: &[u8]) -> Result<SnapshotFile, StorageError> {
    let infos = batch::validate_batches(bytes)?;
    let first = infos
        .first()
        .ok_or_else(|| malformed("an empty snapshot"))?;
    if !first.header.is_control() {
        return Err(malformed("the first batch is not a control batch"));
    }
    let epoch = first.header.partition_leader_epoch;
    let mut last: Option<(LogId<NodeId>, Option<i64>)> = None;
    let mut membership_id = None;
    let mut timestamp = 0;
    let mut voters = None;
    let mut configs: Option<Vec<u8>> = None;
    let mut records = Vec::new();
    let mut footer = false;
    for info in &infos {
        let b = &bytes[info.position..info.position + info.header.size()];
        for r in batch::uncompressed_records(b) {
            if info.header.is_control() {
                for (k, v) in &r.headers {
                    let v = std::str::from_utf8(v.unwrap_or_default()).unwrap_or("");
                    if *k == LAST_HEADER.as_bytes() {
                        last = parse_log_id(v);
                    } else if *k == MEMBERSHIP_HEADER.as_bytes() {
                        membership_id = parse_log_id(v).map(|(id, _)| id);
                    }
                }
                let (Some(k), Some(v)) = (r.key, r.value) else {
                    return Err(malformed("a control record without key or value"));
                };
                match ControlRecord::decode(k, v).map_err(|e| malformed(e.to_string()))? {
                    Some(ControlRecord::SnapshotHeader {
                        last_contained_log_timestamp,
                    }) => timestamp = last_contained_log_timestamp,
                    Some(ControlRecord::Voters(v)) => {
                        configs = header_value(&r.headers, CONFIGS_HEADER).map(<[u8]>::to_vec);
                        voters = Some(v)
                    }
                    Some(ControlRecord::SnapshotFooter) => footer = true,
                    _ => {}
                }
            } else {
                let value = r
                    .value
                    .ok_or_else(|| malformed("a record without a value"))?;
                match MetadataRecord::decode(value) {
                    Ok(Some(rec)) => records.push(rec),
                    Ok(None) => {}
                    Err(e) => return Err(malformed(e.to_string())),
                }
            }
        }
    }
    if !footer {
        return Err(malformed("no SnapshotFooter: the snapshot is incomplete"));
    }
    let (last_log_id, end_offset) = last.ok_or_else(|| malformed("no raft position header"))?;
    let end_offset = end_offset.ok_or_else(|| malformed("no end offset in the header"))?;
    let voters = voters.ok_or_else(|| malformed("no voters record"))?;
    Ok(SnapshotFile {
        end_offset,
        epoch,
        last_log_id,
        membership: StoredMembership::new(
            membership_id,
            membership_from(&voters, configs.as_deref()).map_err(malformed)?,
        ),
        last_timestamp: timestamp,
        records,
    })
}

/// Writes the snapshot as `<dir>/<name>.checkpoint` through a `.part` file, fsynced, and
/// returns its path.
pub fn write(
    dir: &Path,
    bytes: &[u8],
    end_offset: i64,
    epoch: i32,
) -> Result<PathBuf, StorageError> {
    use std::io::Write;
    let name = file_name(end_offset, epoch);
    let part = dir.join(format!("{end_offset:020}-{epoch:010}{PART_SUFFIX}"));
    let path = dir.join(&name);
    {
        let mut f = std::fs::File::create(&part).map_err(StorageError::io(&part))?;
        f.write_all(bytes).map_err(StorageError::io(&part))?;
        f.sync_all().map_err(StorageError::io(&part))?;
    }
    std::fs::rename(&part, &path).map_err(StorageError::io(&path))?;
    checkpoint::sync_dir(dir)?;
    Ok(path)
}

/// The snapshots in `dir`, oldest first, with their end offsets and epochs.
pub fn list(dir: &Path) -> Result<Vec<(PathBuf, i64, i32)>, StorageError> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StorageError::io(dir)(e)),
    };
    for e in entries {
        let e = e.map_err(StorageError::io(dir))?;
        let name = e.file_name().to_string_lossy().to_string();
        if let Some((o, ep)) = parse_name(&name) {
            out.push((e.path(), o, ep));
        } else if name.ends_with(PART_SUFFIX) {
            // An interrupted write: never complete, never read.
            let _ = std::fs::remove_file(e.path());
        }
    }
    out.sort_by_key(|(_, o, ep)| (*o, *ep));
    Ok(out)
}

/// The newest readable snapshot in `dir`. A damaged newest file is reported, not skipped: an
/// older snapshot may not cover what the log has already dropped.
pub fn latest(dir: &Path) -> Result<Option<(PathBuf, SnapshotFile)>, StorageError> {
    let Some((path, _, _)) = list(dir)?.pop() else {
        return Ok(None);
    };
    let bytes = std::fs::read(&path).map_err(StorageError::io(&path))?;
    let snap = decode(&bytes).map_err(|e| match e {
        StorageError::MalformedFile { reason, .. } => StorageError::MalformedFile {
            path: path.clone(),
            reason,
        },
        other => other,
    })?;
    Ok(Some((path, snap)))
}

/// Removes every snapshot older than the one ending at `keep_end_offset`.
pub fn remove_older(dir: &Path, keep_end_offset: i64) -> Result<(), StorageError> {
    for (path, o, _) in list(dir)? {
        if o < keep_end_offset {
            std::fs::remove_file(&path).map_err(StorageError::io(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KafkaUuid;
    use std::collections::BTreeMap;

    fn sample() -> SnapshotFile {
        let id = KafkaUuid::random();
        let mut nodes = BTreeMap::new();
        nodes.insert(
            1,
            VoterNode::new("127.0.0.1:9093", crate::storage::KafkaUuid::ZERO),
        );
        nodes.insert(
            2,
            VoterNode::new("127.0.0.1:9095", crate::storage::KafkaUuid([3; 16])),
        );
        SnapshotFile {
            end_offset: 89,
            epoch: 3,
            last_log_id: log_id(3, 40),
            membership: StoredMembership::new(
                Some(log_id(0, 0)),
                openraft::Membership::from(nodes),
            ),
            last_timestamp: 1_700_000_000_000,
            records: (0..4500)
                .map(|i| MetadataRecord::Partition {
                    partition_id: i,
                    topic_id: id,
                    replicas: vec![1, 2],
                    isr: vec![1, 2],
                    removing_replicas: vec![],
                    adding_replicas: vec![],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn names_follow_kafka() {
        assert_eq!(
            file_name(89, 1),
            "00000000000000000089-0000000001.checkpoint"
        );
        assert_eq!(
            parse_name("00000000000000000089-0000000001.checkpoint"),
            Some((89, 1))
        );
        assert_eq!(parse_name("3-1.checkpoint"), None);
    }

    #[test]
    fn a_snapshot_reads_back_whole() {
        let s = sample();
        let bytes = encode(&s, "CONTROLLER");
        let back = decode(&bytes).unwrap();
        assert_eq!(back.end_offset, 89);
        assert_eq!(back.epoch, 3);
        assert_eq!(back.last_log_id, s.last_log_id);
        assert_eq!(back.membership, s.membership);
        assert_eq!(back.records, s.records);
        assert_eq!(back.last_timestamp, s.last_timestamp);
        // Header batch, three data batches, footer; offsets contiguous from 0.
        let infos = batch::validate_batches(&bytes).unwrap();
        assert_eq!(infos.len(), 5);
        assert!(infos[0].header.is_control() && infos[4].header.is_control());
        assert_eq!(infos[0].header.base_offset, 0);
        for w in infos.windows(2) {
            assert_eq!(w[0].header.next_offset(), w[1].header.base_offset);
        }
        assert!(infos.iter().all(|i| i.header.partition_leader_epoch == 3));
    }

    #[test]
    fn a_torn_snapshot_is_refused() {
        let bytes = encode(&sample(), "CONTROLLER");
        for cut in [bytes.len() - 1, bytes.len() - 80, 100] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_newest_snapshot_wins_and_parts_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sample();
        write(dir.path(), &encode(&s, "CONTROLLER"), 89, 3).unwrap();
        s.end_offset = 120;
        s.last_log_id = log_id(3, 60);
        write(dir.path(), &encode(&s, "CONTROLLER"), 120, 3).unwrap();
        std::fs::write(
            dir.path()
                .join("00000000000000000200-0000000003-1.checkpoint.part"),
            b"x",
        )
        .unwrap();
        let (_, newest) = latest(dir.path()).unwrap().unwrap();
        assert_eq!(newest.end_offset, 120);
        remove_older(dir.path(), 120).unwrap();
        let names: Vec<_> = list(dir.path())
            .unwrap()
            .into_iter()
            .map(|(_, o, _)| o)
            .collect();
        assert_eq!(names, vec![120]);
    }
}
