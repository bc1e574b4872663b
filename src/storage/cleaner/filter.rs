//! What survives cleaning, batch by batch (Kafka's `MemoryRecords.filterTo` with the cleaner's
//! `RecordFilter`): the latest record of each key, tombstones until their delete horizon.

use std::borrow::Cow;
use std::collections::HashMap;

use super::clean::CleanerStats;
use super::offset_map::SkimpyOffsetMap;
use crate::storage::batch::{self, BatchHeader, RawRecord, Rewrite};
use crate::storage::error::Result;
use crate::storage::log::LastBatch;

/// Everything a batch's fate depends on in one round.
pub struct FilterContext<'a> {
    pub map: &'a SkimpyOffsetMap,
    pub now: i64,
    pub delete_retention_ms: i64,
    pub producers: &'a HashMap<i64, LastBatch>,
    pub producer_expiration_ms: i64,
    /// The offset after the group's last batch: that batch is kept, empty if need be, so that
    /// the cleaned segment ends where the group ended (see `complete_interrupted_swaps`).
    pub group_upper: i64,
}

impl FilterContext<'_> {
    /// Kafka's `isBatchLastRecordOfProducer`, for producers that have not expired.
    fn is_last_of_producer(&self, h: &BatchHeader) -> bool {
        self.producers.get(&h.producer_id).is_some_and(|p| {
            p.last_offset == h.last_offset()
                && self.now.saturating_sub(p.timestamp) < self.producer_expiration_ms
        })
    }
}

/// The bytes `h`'s batch leaves in the cleaned segment: the batch as it was, a rewritten batch
/// with fewer records (and a delete horizon once it keeps tombstones), a header without records
/// (Kafka's RETAIN_EMPTY), or nothing.
pub fn filter_batch<'b>(
    h: &BatchHeader,
    bytes: &'b [u8],
    fc: &FilterContext<'_>,
    stats: &mut CleanerStats,
) -> Result<Option<Cow<'b, [u8]>>> {
    let retain_empty =
        (h.has_producer_id() && fc.is_last_of_producer(h)) || h.next_offset() == fc.group_upper;
    // No transactions in evenkeel: control batches are kept as they are.
    if h.is_control() || h.records_count == 0 {
        if h.is_control() || retain_empty {
            stats.messages_written += h.records_count.max(0) as u64;
            return Ok(Some(Cow::Borrowed(bytes)));
        }
        return Ok(None);
    }
    let section = batch::records_section(bytes)?;
    let mut kept: Vec<(RawRecord<'_>, i64)> = Vec::new();
    let mut tombstones = false;
    for r in batch::raw_records(&section, h.records_count) {
        let r = r?;
        stats.messages_read += 1;
        let offset = h.base_offset + r.offset_delta as i64;
        if should_retain_record(fc.map, h, &r, offset, fc.now, stats) {
            tombstones |= !r.has_value;
            kept.push((r, h.base_timestamp + r.timestamp_delta));
        }
    }
    stats.messages_written += kept.len() as u64;
    let need_horizon = tombstones && h.delete_horizon_ms().is_none();
    if kept.is_empty() {
        return Ok(retain_empty.then(|| Cow::Owned(batch::build_empty_batch(h))));
    }
    if kept.len() == h.records_count as usize && !need_horizon {
        return Ok(Some(Cow::Borrowed(bytes)));
    }
    let horizon = if need_horizon {
        Some(fc.now.saturating_add(fc.delete_retention_ms))
    } else {
        h.delete_horizon_ms()
    };
    rebuild(h, &kept, horizon).map(|b| Some(Cow::Owned(b)))
}

/// A batch like `h` with only `kept` (record, absolute timestamp), timestamps re-based on the
/// delete horizon when there is one (KIP-534), else on the first kept record.
fn rebuild(
    h: &BatchHeader,
    kept: &[(RawRecord<'_>, i64)],
    horizon: Option<i64>,
) -> Result<Vec<u8>> {
    let base_timestamp = horizon.unwrap_or(kept[0].1);
    let max_timestamp = if h.is_log_append_time() {
        h.max_timestamp
    } else {
        kept.iter().map(|(_, t)| *t).max().unwrap_or(base_timestamp)
    };
    let mut records = Vec::new();
    for (r, ts) in kept {
        r.encode_with_timestamp_delta(&mut records, ts - base_timestamp);
    }
    batch::build_rewritten_batch(
        h,
        &records,
        Rewrite {
            records_count: kept.len() as i32,
            base_timestamp,
            max_timestamp,
            delete_horizon: horizon.is_some(),
        },
    )
}

/// Kafka's `Cleaner.shouldRetainRecord`: past the map's range, keep; else keep the latest record
/// of its key, and a tombstone only until its batch's delete horizon. Keyless records go.
fn should_retain_record(
    map: &SkimpyOffsetMap,
    h: &BatchHeader,
    r: &RawRecord<'_>,
    offset: i64,
    now: i64,
    stats: &mut CleanerStats,
) -> bool {
    if offset > map.latest_offset() {
        return true;
    }
    let Some(key) = r.key else {
        stats.invalid_messages_read += 1;
        return false;
    };
    let latest_for_key = offset >= map.get(key);
    let retain_deletes = h.delete_horizon_ms().is_none_or(|d| now < d);
    latest_for_key && (r.has_value || retain_deletes)
}
