//! ReplicaManager's reads, as Kafka's `fetchMessages`: one pass over the partitions a fetch
//! names, then a DelayedFetch when it found fewer than `fetch.min.bytes`; and the offset
//! lookups (ListOffsets, OffsetForLeaderEpoch) and DeleteRecords on partitions it leads.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::ReplicaManager;
use crate::broker::partition::{Divergence, FetchIsolation, Partition, PartitionError};
use crate::broker::Outcome;
use crate::protocol::errors;
use crate::storage::log::{EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::storage::TimestampAndOffset;
use crate::storage::TopicPartition;

/// What a fetch asks of one partition (Kafka's FetchRequest.PartitionData).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchInfo {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    /// The fetcher's own log start offset (followers); -1 for consumers.
    pub log_start_offset: i64,
}

/// Who is fetching: a consumer (which may read from a follower, KIP-392, and may say its
/// rack), or a follower replica with its broker epoch.
#[derive(Debug, Clone)]
pub enum Fetcher {
    Consumer {
        from_followers: bool,
        rack: Option<String>,
    },
    Replica {
        id: i32,
        broker_epoch: i64,
    },
}

/// A fetch request's own terms (Kafka's FetchParams).
#[derive(Debug, Clone)]
pub struct FetchParams {
    pub fetcher: Fetcher,
    /// How long the fetch may wait for `min_bytes` (`fetch.max.wait.ms`).
    pub max_wait: Duration,
    pub min_bytes: i64,
    /// For the whole response.
    pub max_bytes: i64,
}

impl FetchParams {
    fn is_follower(&self) -> bool {
        matches!(self.fetcher, Fetcher::Replica { .. })
    }
}

/// What a fetch read of one partition (Kafka's FetchPartitionData).
#[derive(Debug, Clone)]
pub struct FetchPartitionData {
    pub error: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
    /// The follower's log diverges from the leader's: where to truncate to (KIP-320).
    pub diverging_epoch: Option<Divergence>,
    /// The replica a consumer should read from instead (KIP-392).
    pub preferred_read_replica: Option<i32>,
    /// The leader and its epoch, with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (KIP-951).
    pub current_leader: Option<(i32, i32)>,
}

impl Default for FetchPartitionData {
    fn default() -> Self {
        FetchPartitionData {
            error: errors::NONE,
            high_watermark: -1,
            log_start_offset: -1,
            records: Bytes::new(),
            diverging_epoch: None,
            preferred_read_replica: None,
            current_leader: None,
        }
    }
}

/// What one read pass found.
struct Pass {
    /// One entry per partition, in request order.
    parts: Vec<FetchPartitionData>,
    bytes: i64,
    /// An error, a divergence or a preferred replica: the fetch is answered at once.
    answer_now: bool,
    /// The offset each read stopped at (high watermark, or log end for followers), to detect
    /// data that arrives before the DelayedFetch watches.
    seen: Vec<(Arc<Partition>, i64)>,
}

impl ReplicaManager {
    /// Reads every partition once; when that is fewer than `min_bytes` and the fetch may wait,
    /// parks a DelayedFetch on the partitions read and reads again once it completes or times
    /// out. The second read runs on the task that awaits the answer, not on the appender's.
    pub fn fetch_messages(
        self: &Arc<Self>,
        params: FetchParams,
        infos: Vec<(TopicPartition, FetchInfo)>,
    ) -> Outcome<Vec<FetchPartitionData>> {
        let first = self.read_pass(&params, &infos);
        if !params.is_follower() {
            for (p, _) in &first.seen {
                p.note_consumer_fetch();
            }
        }
        if first.bytes >= params.min_bytes
            || first.answer_now
            || params.max_wait.is_zero()
            || infos.is_empty()
        {
            return Outcome::Now(first.parts);
        }
        let op = self.delay_fetch(
            params.is_follower(),
            params.min_bytes,
            first.bytes,
            &first.seen,
        );
        let rm = self.clone();
        Outcome::Later(Box::pin(async move {
            op.wait(params.max_wait).await;
            rm.read_pass(&params, &infos).parts
        }))
    }

    /// Reads every partition once, within `max_bytes` for the whole response.
    fn read_pass(&self, params: &FetchParams, infos: &[(TopicPartition, FetchInfo)]) -> Pass {
        let mut pass = Pass {
            parts: Vec::with_capacity(infos.len()),
            bytes: 0,
            answer_now: false,
            seen: Vec::new(),
        };
        for (tp, info) in infos {
            let epoch = info.current_leader_epoch;
            let found = match params.fetcher {
                Fetcher::Consumer {
                    from_followers: true,
                    ..
                } => self.readable_partition(tp, epoch),
                _ => self.leader_partition(tp, epoch),
            };
            let data = match found {
                Ok(p) => self.read_partition(&mut pass, &p, info, params),
                Err(e) => not_served(e),
            };
            pass.answer_now |= data.error != errors::NONE
                || data.diverging_epoch.is_some()
                || data.preferred_read_replica.is_some();
            pass.parts.push(data);
        }
        pass
    }

    /// Reads one served partition: its records, a preferred read replica (KIP-392), a
    /// diverging epoch for a follower, or the read's error.
    fn read_partition(
        &self,
        pass: &mut Pass,
        p: &Arc<Partition>,
        info: &FetchInfo,
        params: &FetchParams,
    ) -> FetchPartitionData {
        if let Some(other) = self.preferred_replica_for(p, info, &params.fetcher) {
            // Answered at once, without records: the consumer reads from `other`.
            return FetchPartitionData {
                preferred_read_replica: Some(other),
                ..offsets_only(p)
            };
        }
        let budget = (params.max_bytes - pass.bytes).max(0);
        let limit = (info.max_bytes.max(0) as i64).min(budget) as usize;
        // Like Kafka, the first partition with data may exceed the limits by one batch.
        let min_one = pass.bytes == 0;
        match self.read_records(p, info, limit, min_one, &params.fetcher) {
            Ok((read, divergence)) => {
                pass.bytes += read.records.len() as i64;
                let upto = match params.fetcher {
                    Fetcher::Consumer { .. } => read.high_watermark,
                    Fetcher::Replica { .. } => p.fetch_position().0,
                };
                pass.seen.push((p.clone(), upto));
                FetchPartitionData {
                    high_watermark: read.high_watermark,
                    log_start_offset: read.log_start_offset,
                    records: Bytes::from(read.records),
                    diverging_epoch: divergence,
                    ..FetchPartitionData::default()
                }
            }
            Err(e) => FetchPartitionData {
                error: e.code,
                ..offsets_only(p)
            },
        }
    }

    /// KIP-392: the replica a consumer that named its rack should read from instead, if any.
    fn preferred_replica_for(&self, p: &Partition, info: &FetchInfo, who: &Fetcher) -> Option<i32> {
        let Fetcher::Consumer {
            rack: Some(rack), ..
        } = who
        else {
            return None;
        };
        self.preferred_read_replica(p, rack, info.fetch_offset)
    }

    /// A consumer reads up to the high watermark; a follower reads for replication, and may
    /// learn that its log diverges from the leader's.
    fn read_records(
        &self,
        p: &Partition,
        info: &FetchInfo,
        limit: usize,
        min_one: bool,
        who: &Fetcher,
    ) -> Result<(crate::broker::partition::ReadResult, Option<Divergence>), PartitionError> {
        match who {
            Fetcher::Consumer { .. } => Ok((
                p.read(
                    info.fetch_offset,
                    limit,
                    min_one,
                    FetchIsolation::HighWatermark,
                )?,
                None,
            )),
            Fetcher::Replica { id, broker_epoch } => self
                .read_for_follower(
                    p,
                    *id,
                    *broker_epoch,
                    info.fetch_offset,
                    info.last_fetched_epoch,
                    limit,
                    min_one,
                )
                .map(|f| (f.read, f.divergence)),
        }
    }

    /// ListOffsets on a partition this broker leads at `current_leader_epoch` (Kafka's
    /// fetchOffsetForTimestamp): the offset for `timestamp` or a special value (latest,
    /// earliest, earliest local, max timestamp). Only committed records, below the high
    /// watermark, are answered; without transactions the last stable offset is the high
    /// watermark, so either isolation level reads up to it.
    pub fn fetch_offset_for_timestamp(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        timestamp: i64,
    ) -> Result<Option<TimestampAndOffset>, i16> {
        let p = self
            .leader_partition(tp, current_leader_epoch)
            .map_err(|e| e.code)?;
        let special = matches!(
            timestamp,
            LATEST_TIMESTAMP | EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP
        );
        if timestamp < 0 && !special && timestamp != crate::storage::log::MAX_TIMESTAMP {
            // Tiered storage (-5) and unknown special values: nothing to report.
            return Ok(None);
        }
        let (hw, found) = p
            .offset_for_timestamp(timestamp)
            .map_err(|e| e.kafka_error_code())?;
        Ok(found.filter(|f| special || f.offset < hw))
    }

    /// OffsetForLeaderEpoch on a partition this broker leads at `current_leader_epoch`:
    /// `(epoch, end offset)` for where `leader_epoch` ended (Kafka's lastOffsetForLeaderEpoch).
    pub fn last_offset_for_leader_epoch(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64), i16> {
        let p = self
            .leader_partition(tp, current_leader_epoch)
            .map_err(|e| e.code)?;
        Ok(p.end_offset_for_epoch(leader_epoch))
    }

    /// DeleteRecords on a partition this broker leads: moves its log start to `offset` (-1:
    /// the high watermark) and returns the new low watermark.
    pub fn delete_records(&self, tp: &TopicPartition, offset: i64) -> Result<i64, i16> {
        let p = self.leader_partition(tp, -1).map_err(|e| e.code)?;
        p.delete_records_before(offset)
            .map_err(|e| e.kafka_error_code())
    }
}

/// A partition this broker does not serve to this fetcher: its error, with the leader when
/// known and the error names one (KIP-951).
fn not_served(e: PartitionError) -> FetchPartitionData {
    let names_leader = matches!(
        e.code,
        errors::NOT_LEADER_OR_FOLLOWER | errors::FENCED_LEADER_EPOCH
    );
    FetchPartitionData {
        error: e.code,
        current_leader: e.current_leader.filter(|_| names_leader),
        ..FetchPartitionData::default()
    }
}

/// A partition's high watermark and log start, without records.
fn offsets_only(p: &Partition) -> FetchPartitionData {
    let (hw, start) = p.offsets();
    FetchPartitionData {
        high_watermark: hw,
        log_start_offset: start,
        ..FetchPartitionData::default()
    }
}
