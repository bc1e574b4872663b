//! `quorum-state`: the term this node is in and whom it voted for or follows, in Kafka's JSON
//! (`data_version` 1), written atomically and fsynced before a vote is acted on.

use std::path::{Path, PathBuf};

use openraft::Vote;
use serde::{Deserialize, Serialize};

use super::NodeId;
use crate::storage::{checkpoint, StorageError};

pub const FILE_NAME: &str = "quorum-state";
/// Kafka's ZERO_UUID in its base64 form.
const ZERO_UUID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

#[derive(Debug, Serialize, Deserialize)]
struct QuorumStateData {
    #[serde(rename = "leaderId")]
    leader_id: i32,
    #[serde(rename = "leaderEpoch")]
    leader_epoch: i32,
    #[serde(rename = "votedId")]
    voted_id: i32,
    #[serde(rename = "votedDirectoryId", default)]
    voted_directory_id: Option<String>,
    data_version: i32,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// The vote as Kafka stores it: a committed vote names the leader, an uncommitted one whom
/// this node voted for.
pub fn write(dir: &Path, vote: &Vote<NodeId>) -> Result<(), StorageError> {
    let voted = vote.leader_id.voted_for.map_or(-1, |n| n as i32);
    let data = QuorumStateData {
        leader_id: if vote.committed { voted } else { -1 },
        leader_epoch: vote.leader_id.term as i32,
        voted_id: voted,
        voted_directory_id: Some(ZERO_UUID.into()),
        data_version: 1,
    };
    let json = serde_json::to_vec(&data).map_err(|e| StorageError::MalformedFile {
        path: path(dir),
        reason: e.to_string(),
    })?;
    checkpoint::write_atomic(&path(dir), &json)
}

/// The stored vote, or `None` when there is no file yet.
pub fn read(dir: &Path) -> Result<Option<Vote<NodeId>>, StorageError> {
    let p = path(dir);
    let text = match std::fs::read(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(&p)(e)),
    };
    let data: QuorumStateData =
        serde_json::from_slice(&text).map_err(|e| StorageError::MalformedFile {
            path: p.clone(),
            reason: e.to_string(),
        })?;
    if !(0..=1).contains(&data.data_version) {
        return Err(StorageError::MalformedFile {
            path: p,
            reason: format!("unknown data_version {}", data.data_version),
        });
    }
    let term = data.leader_epoch.max(0) as u64;
    let vote = if data.leader_id >= 0 {
        Vote::new_committed(term, data.leader_id as NodeId)
    } else if data.voted_id >= 0 {
        Vote::new(term, data.voted_id as NodeId)
    } else {
        let mut v = Vote::default();
        v.leader_id.term = term;
        v
    };
    Ok(Some(vote))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_round_trip_in_kafkas_json() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let v = Vote::new_committed(4, 2);
        write(dir.path(), &v).unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert_eq!(
            text,
            r#"{"leaderId":2,"leaderEpoch":4,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}"#
        );
        assert_eq!(read(dir.path()).unwrap(), Some(v));
        let v = Vote::new(5, 3);
        write(dir.path(), &v).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(v));
        // Kafka's own file: no vote, a known leader.
        std::fs::write(
            path(dir.path()),
            r#"{"leaderId":1,"leaderEpoch":1,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}"#,
        )
        .unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(Vote::new_committed(1, 1)));
    }
}
