//! LeaderEpochFileCache: which leader epoch began at which offset, kept in `leader-epoch-checkpoint`.
//! Replication uses it to answer OffsetForLeaderEpoch and to truncate divergent logs.

use std::path::{Path, PathBuf};

use super::checkpoint::{read_epoch_checkpoint, write_epoch_checkpoint};
use super::error::Result;

pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// `(epoch, start offset)` pairs, both strictly increasing.
pub struct LeaderEpochFileCache {
    path: PathBuf,
    epochs: Vec<(i32, i64)>,
}

impl LeaderEpochFileCache {
    /// Loads `leader-epoch-checkpoint` from a partition directory (empty when missing).
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT);
        let mut epochs = read_epoch_checkpoint(&path)?;
        epochs.sort();
        epochs.dedup_by_key(|e| e.0);
        Ok(LeaderEpochFileCache { path, epochs })
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.epochs
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().map(|e| e.0)
    }

    fn flush(&self) -> Result<()> {
        write_epoch_checkpoint(&self.path, &self.epochs)
    }

    /// Records that `epoch` starts at `start_offset`. Entries that conflict (an epoch not older,
    /// or an offset not smaller) are removed first, as in Kafka.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<()> {
        if epoch < 0 {
            return Ok(());
        }
        if let Some(&(e, o)) = self.epochs.last() {
            if e == epoch && o <= start_offset {
                return Ok(());
            }
            if e > epoch && o <= start_offset {
                // A stale epoch arriving late; Kafka ignores it with a warning.
                tracing::warn!(
                    epoch,
                    start_offset,
                    latest = e,
                    "ignoring an older leader epoch"
                );
                return Ok(());
            }
        }
        self.epochs.retain(|&(e, o)| e < epoch && o < start_offset);
        self.epochs.push((epoch, start_offset));
        self.flush()
    }

    /// Kafka's `endOffsetFor`: the epoch at or below `requested` and the offset where it ended.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some(higher) = self.epochs.iter().find(|(e, _)| *e > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match self.epochs.iter().rev().find(|(e, _)| *e <= requested) {
            None => (requested, higher.1),
            Some(floor) => (floor.0, higher.1),
        }
    }

    /// The epoch of the batch at `offset`, if known.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.epochs
            .iter()
            .rev()
            .find(|(_, o)| *o <= offset)
            .map(|e| e.0)
    }

    /// Drops entries that start at or after `end_offset` (log truncation).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let before = self.epochs.len();
        self.epochs.retain(|&(_, o)| o < end_offset);
        if self.epochs.len() != before {
            self.flush()?;
        }
        Ok(())
    }

    /// Drops entries before `start_offset`, moving the last of them up to it (log start moved).
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<()> {
        let below: Vec<_> = self
            .epochs
            .iter()
            .copied()
            .filter(|&(_, o)| o <= start_offset)
            .collect();
        let Some(&(last_epoch, last_offset)) = below.last() else {
            return Ok(());
        };
        if below.len() == 1 && last_offset == start_offset {
            return Ok(());
        }
        self.epochs.retain(|&(_, o)| o > start_offset);
        self.epochs.insert(0, (last_epoch, start_offset));
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> (tempfile::TempDir, LeaderEpochFileCache) {
        let dir = tempfile::tempdir().unwrap();
        let c = LeaderEpochFileCache::load(dir.path()).unwrap();
        (dir, c)
    }

    #[test]
    fn assign_persists_and_reloads() {
        let (dir, mut c) = cache();
        c.assign(0, 0).unwrap();
        c.assign(0, 5).unwrap();
        c.assign(2, 10).unwrap();
        assert_eq!(c.entries(), &[(0, 0), (2, 10)]);
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n2\n0 0\n2 10\n");
        let again = LeaderEpochFileCache::load(dir.path()).unwrap();
        assert_eq!(again.entries(), c.entries());
    }

    #[test]
    fn end_offset_for_follows_kafka() {
        let (_d, mut c) = cache();
        c.assign(1, 0).unwrap();
        c.assign(3, 10).unwrap();
        c.assign(5, 20).unwrap();
        assert_eq!(c.end_offset_for(5, 30), (5, 30));
        assert_eq!(c.end_offset_for(3, 30), (3, 20));
        assert_eq!(c.end_offset_for(4, 30), (3, 20));
        assert_eq!(c.end_offset_for(0, 30), (0, 0));
        assert_eq!(c.end_offset_for(6, 30), (-1, -1));
        assert_eq!(c.end_offset_for(-1, 30), (-1, -1));
    }

    #[test]
    fn truncation_from_both_ends() {
        let (_d, mut c) = cache();
        c.assign(1, 0).unwrap();
        c.assign(3, 10).unwrap();
        c.assign(5, 20).unwrap();
        c.truncate_from_end(15).unwrap();
        assert_eq!(c.entries(), &[(1, 0), (3, 10)]);
        c.truncate_from_start(12).unwrap();
        assert_eq!(c.entries(), &[(3, 12)]);
        assert_eq!(c.epoch_for_offset(13), Some(3));
    }

    #[test]
    fn a_new_epoch_at_a_lower_offset_replaces_conflicting_entries() {
        let (_d, mut c) = cache();
        c.assign(1, 0).unwrap();
        c.assign(2, 10).unwrap();
        c.assign(3, 5).unwrap();
        assert_eq!(c.entries(), &[(1, 0), (3, 5)]);
    }
}
