//! One batch of records for one partition while it fills (Java's ProducerBatch and the size
//! accounting of MemoryRecordsBuilder), and its encoding as a v2 record batch when it is sent.
//!
//! Sizes are counted exactly as Java counts them, because the partitioner switches on them:
//! a record's v2 size, the 61-byte batch header, and for compressed batches the uncompressed
//! size times the topic's estimated compression ratio.
//!
//! The batch is laid out here, as Java's MemoryRecordsBuilder does (a header name may repeat,
//! which the kafka-protocol crate's record type cannot hold), and compressed by the crate's
//! codecs.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codec, Compressor};
use kafka_protocol::records::Compression;

use super::{Completion, ProduceError, RecordMetadata};

/// The v2 batch header (Java's `DefaultRecordBatch.RECORD_BATCH_OVERHEAD`).
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// The most a v2 record adds around its key, value and headers (`DefaultRecord.MAX_RECORD_OVERHEAD`).
const MAX_RECORD_OVERHEAD: usize = 21;
/// Java's `COMPRESSION_RATE_ESTIMATION_FACTOR`: a margin on the estimated compressed size.
const COMPRESSION_RATE_ESTIMATION_FACTOR: f32 = 1.05;

/// A record as the application handed it over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub timestamp: i64,
}

fn varint_size(v: i32) -> usize {
    varlong_size(v as i64)
}

fn varlong_size(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn field_size(len: Option<usize>) -> usize {
    match len {
        None => 1,
        Some(l) => varint_size(l as i32) + l,
    }
}

/// Key, value and headers of a record as the v2 format lays them out (Java's `DefaultRecord.sizeOf`).
fn payload_size(r: &ProducerRecord) -> usize {
    let mut size = field_size(r.key.as_ref().map(Bytes::len));
    size += field_size(r.value.as_ref().map(Bytes::len));
    size += varint_size(r.headers.len() as i32);
    for (k, v) in &r.headers {
        size += field_size(Some(k.len()));
        size += field_size(v.as_ref().map(Bytes::len));
    }
    size
}

/// A record's size inside a v2 batch (Java's `DefaultRecord.sizeInBytes`).
pub fn record_size(offset_delta: i32, timestamp_delta: i64, r: &ProducerRecord) -> usize {
    let body = record_body_size(offset_delta, timestamp_delta, r);
    body + varint_size(body as i32)
}

/// A record's size after its length prefix.
fn record_body_size(offset_delta: i32, timestamp_delta: i64, r: &ProducerRecord) -> usize {
    1 + varlong_size(timestamp_delta) + varint_size(offset_delta) + payload_size(r)
}

/// The most a batch holding only `r` can take (Java's `estimateSizeInBytesUpperBound`): the size a
/// new batch is given when `r` is bigger than `batch.size`.
pub fn batch_size_upper_bound(r: &ProducerRecord) -> usize {
    RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + payload_size(r)
}

/// A batch while it fills, and until its produce request is answered.
#[derive(Debug)]
pub struct ProducerBatch {
    pub topic: String,
    pub partition: i32,
    records: Vec<ProducerRecord>,
    done: Vec<Completion>,
    first_timestamp: Option<i64>,
    uncompressed_size: usize,
    write_limit: usize,
    compression: Compression,
    estimated_ratio: f32,
    closed: bool,
    pub created_ms: i64,
    last_attempt_ms: i64,
    pub attempts: u32,
    pub drained_ms: Option<i64>,
    /// The newest leader epoch seen for the partition, and the attempt it was seen at: a retry
    /// skips its backoff once the leader has moved on (KIP-951).
    leader_epoch: Option<i32>,
    attempts_when_leader_last_changed: u32,
    /// The producer id, epoch and base sequence the batch was first sent with (idempotence); a
    /// retry goes out with the same ones.
    pub sequence: Option<BatchSequence>,
    /// Made by splitting a batch the leader refused as too large: its memory is not the buffer
    /// pool's (Java's `isSplitBatch`).
    is_split_batch: bool,
    /// What the last encoding compressed to, over the uncompressed size (1.0 before).
    compression_ratio: f32,
}

/// What an idempotent batch carries so that the leader can drop a retried duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSequence {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerBatch {
    /// An empty batch that may grow to `write_limit` bytes; `ratio` is the topic's current
    /// compression estimate (1.0 for none).
    pub fn new(
        topic: &str,
        partition: i32,
        write_limit: usize,
        compression: Compression,
        ratio: f32,
        now_ms: i64,
    ) -> ProducerBatch {
        ProducerBatch {
            topic: topic.to_string(),
            partition,
            records: Vec::new(),
            done: Vec::new(),
            first_timestamp: None,
            uncompressed_size: 0,
            write_limit,
            compression,
            estimated_ratio: ratio,
            closed: false,
            created_ms: now_ms,
            last_attempt_ms: now_ms,
            attempts: 0,
            drained_ms: None,
            leader_epoch: None,
            attempts_when_leader_last_changed: 0,
            sequence: None,
            is_split_batch: false,
            compression_ratio: 1.0,
        }
    }

    /// The largest batch any one of its records needs alone (Java's `maxRecordSize`).
    pub fn max_record_size(&self) -> usize {
        self.records
            .iter()
            .map(batch_size_upper_bound)
            .max()
            .unwrap_or(0)
    }

    /// Whether the batch came out of `split` (its memory is not from the buffer pool).
    pub fn is_split_batch(&self) -> bool {
        self.is_split_batch
    }

    /// The ratio the last `encode` achieved (Java's `compressionRatio`).
    pub fn compression_ratio(&self) -> f32 {
        self.compression_ratio
    }

    /// Notes the ratio `encode` returned.
    pub fn set_compression_ratio(&mut self, ratio: f32) {
        self.compression_ratio = ratio;
    }

    /// Java's `ProducerBatch.split`: moves the records, with their waiters, into new batches of at
    /// most `split_batch_size` bytes each (a record bigger than that alone), in order, estimated at
    /// `ratio` and as old as this one. A sequenced batch hands its sequences on: the new batches
    /// carry its producer id and epoch and count on from its base sequence. This batch is left
    /// empty; the new ones are closed for appends and held outside the buffer pool.
    pub fn split(&mut self, split_batch_size: usize, ratio: f32) -> Vec<ProducerBatch> {
        let records = std::mem::take(&mut self.records);
        let done = std::mem::take(&mut self.done);
        self.uncompressed_size = 0;
        let mut out: Vec<ProducerBatch> = Vec::new();
        for (r, d) in records.into_iter().zip(done) {
            let (r, d) = match out.last_mut() {
                Some(last) => match last.try_append(r, d) {
                    Ok(_) => continue,
                    Err(back) => back,
                },
                None => (r, d),
            };
            let limit = split_batch_size.max(batch_size_upper_bound(&r));
            let mut b = ProducerBatch::new(
                &self.topic,
                self.partition,
                limit,
                self.compression,
                ratio,
                self.created_ms,
            );
            b.is_split_batch = true;
            if b.try_append(r, d).is_err() {
                unreachable!("the first record always fits an empty batch");
            }
            out.push(b);
        }
        let mut next = self.sequence;
        for b in &mut out {
            b.close_for_record_appends();
            b.sequence = next;
            next = next.map(|q| BatchSequence {
                base_sequence: q.base_sequence.wrapping_add(b.record_count() as i32),
                ..q
            });
        }
        out
    }

    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    pub fn records(&self) -> &[ProducerRecord] {
        &self.records
    }

    /// Bytes the batch would take if closed now (Java's `estimatedBytesWritten`).
    pub fn estimated_size_in_bytes(&self) -> usize {
        if self.compression == Compression::None {
            RECORD_BATCH_OVERHEAD + self.uncompressed_size
        } else {
            let est = self.uncompressed_size as f32
                * self.estimated_ratio
                * COMPRESSION_RATE_ESTIMATION_FACTOR;
            RECORD_BATCH_OVERHEAD + est as usize
        }
    }

    /// Closed for appends, or at its write limit.
    pub fn is_full(&self) -> bool {
        self.closed
            || (!self.records.is_empty() && self.write_limit <= self.estimated_size_in_bytes())
    }

    fn next_record_size(&self, r: &ProducerRecord) -> usize {
        let offset_delta = self.records.len() as i32;
        let ts_delta = self.first_timestamp.map_or(0, |f| r.timestamp - f);
        record_size(offset_delta, ts_delta, r)
    }

    /// Whether `r` fits: always for the first record, otherwise within the write limit, not
    /// counting what compression might save on it.
    pub fn has_room_for(&self, r: &ProducerRecord) -> bool {
        if self.is_full() {
            return false;
        }
        if self.records.is_empty() {
            return true;
        }
        self.write_limit >= self.estimated_size_in_bytes() + self.next_record_size(r)
    }

    /// Appends `r` if it fits; returns the bytes the batch grew by. `done` hears the record's
    /// fate once the batch is answered.
    pub fn try_append(
        &mut self,
        r: ProducerRecord,
        done: Completion,
    ) -> Result<usize, (ProducerRecord, Completion)> {
        if !self.has_room_for(&r) {
            return Err((r, done));
        }
        let before = self.estimated_size_in_bytes();
        self.uncompressed_size += self.next_record_size(&r);
        self.first_timestamp.get_or_insert(r.timestamp);
        self.records.push(r);
        self.done.push(done);
        Ok(self.estimated_size_in_bytes() - before)
    }

    /// The memory the batch holds in the buffer pool.
    pub fn buffer_size(&self) -> usize {
        self.write_limit
    }

    /// Tells every record's waiter the outcome: its offset (`base_offset` + its index) and
    /// timestamp (the log append time when the topic uses it), or the error.
    pub fn complete(&mut self, outcome: Result<(i64, Option<i64>), ProduceError>) {
        for (i, done) in self.done.iter_mut().enumerate() {
            let Some(tx) = done.take() else { continue };
            let r = match &outcome {
                Ok((base, log_append_time)) => Ok(RecordMetadata {
                    topic: self.topic.clone(),
                    partition: self.partition,
                    // -1: not known (acks=0).
                    offset: if *base < 0 { -1 } else { base + i as i64 },
                    timestamp: log_append_time.unwrap_or(self.records[i].timestamp),
                }),
                Err(e) => Err(e.clone()),
            };
            let _ = tx.send(r);
        }
    }

    /// No more appends (a record did not fit, or the batch is being sent).
    pub fn close_for_record_appends(&mut self) {
        self.closed = true;
    }

    /// Milliseconds since the batch was created or last retried.
    pub fn waited_time_ms(&self, now_ms: i64) -> i64 {
        (now_ms - self.last_attempt_ms).max(0)
    }

    /// Notes the partition's leader epoch when it is the first seen or newer than the last (an
    /// older one is stale metadata); returns whether it moved.
    pub fn maybe_update_leader_epoch(&mut self, epoch: Option<i32>) -> bool {
        match (epoch, self.leader_epoch) {
            (Some(new), None) => self.take_epoch(new),
            (Some(new), Some(old)) if new > old => self.take_epoch(new),
            _ => false,
        }
    }

    fn take_epoch(&mut self, epoch: i32) -> bool {
        self.leader_epoch = Some(epoch);
        self.attempts_when_leader_last_changed = self.attempts;
        true
    }

    /// A retry whose partition got a new leader since the attempt failed: no backoff.
    pub fn has_leader_changed_for_the_ongoing_retry(&self) -> bool {
        self.attempts >= 1 && self.attempts == self.attempts_when_leader_last_changed
    }

    /// Marks a new attempt (a retry after an error).
    pub fn reenqueued(&mut self, now_ms: i64) {
        self.attempts += 1;
        self.last_attempt_ms = now_ms;
        self.drained_ms = None;
    }

    pub fn drained(&mut self, now_ms: i64) {
        self.drained_ms = Some(now_ms);
    }

    /// The v2 record batch for a produce request, and the compression ratio it achieved for the
    /// topic's estimate (Java's `MemoryRecordsBuilder.close`: records only, header left out).
    /// Offsets count from 0 (the leader assigns them); timestamps are deltas from the first
    /// record's, as Java writes them; only the base sequence goes on the wire (-1 without
    /// idempotence).
    pub fn encode(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> Result<(Bytes, f32), String> {
        let base_timestamp = self.first_timestamp.unwrap_or_default();
        let max_timestamp = self
            .records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(base_timestamp);
        let count = i32::try_from(self.records.len())
            .map_err(|_| format!("too many records for one batch of {}", self.topic))?;
        let mut raw = BytesMut::with_capacity(self.uncompressed_size);
        for (i, r) in self.records.iter().enumerate() {
            put_record(&mut raw, i as i32, r.timestamp - base_timestamp, r);
        }
        let mut buf = BytesMut::with_capacity(RECORD_BATCH_OVERHEAD + raw.len());
        buf.put_i64(0); // base offset
        buf.put_i32(0); // batch length, below
        buf.put_i32(-1); // partition leader epoch
        buf.put_i8(2); // magic
        buf.put_u32(0); // CRC, below
        buf.put_i16(self.compression as i16); // codec; create time; not transactional
        buf.put_i32(count - 1); // last offset delta
        buf.put_i64(base_timestamp);
        buf.put_i64(max_timestamp);
        buf.put_i64(producer_id);
        buf.put_i16(producer_epoch);
        buf.put_i32(base_sequence);
        buf.put_i32(count);
        compress(self.compression, &mut buf, &raw).map_err(|e| {
            format!(
                "encoding a batch for {}-{}: {e:#}",
                self.topic, self.partition
            )
        })?;
        let length = i32::try_from(buf.len() - 12)
            .map_err(|_| format!("a batch for {} over 2 GiB", self.topic))?;
        buf[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&buf[21..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
        let compressed = buf.len().saturating_sub(RECORD_BATCH_OVERHEAD);
        let ratio = compressed as f32 / self.uncompressed_size.max(1) as f32;
        Ok((buf.freeze(), ratio))
    }
}

/// Appends the records section, compressed with `compression`, to `out`.
fn compress(compression: Compression, out: &mut BytesMut, raw: &[u8]) -> anyhow::Result<()> {
    let put = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.put_slice(raw);
        Ok(())
    };
    match compression {
        Compression::None => put(out),
        Compression::Gzip => codec::Gzip::compress(out, put),
        Compression::Snappy => codec::Snappy::compress(out, put),
        Compression::Lz4 => codec::Lz4::compress(out, put),
        Compression::Zstd => codec::Zstd::compress(out, put),
    }
}

/// Zigzag varint, as the v2 record format writes its lengths and deltas.
fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// A length-prefixed field, -1 for null.
fn put_field(out: &mut BytesMut, data: Option<&[u8]>) {
    match data {
        Some(d) => {
            put_varlong(out, d.len() as i64);
            out.put_slice(d);
        }
        None => put_varlong(out, -1),
    }
}

/// One record in the v2 layout (Java's `DefaultRecord.writeTo`), every header kept.
fn put_record(out: &mut BytesMut, offset_delta: i32, timestamp_delta: i64, r: &ProducerRecord) {
    put_varlong(
        out,
        record_body_size(offset_delta, timestamp_delta, r) as i64,
    );
    out.put_i8(0); // attributes
    put_varlong(out, timestamp_delta);
    put_varlong(out, offset_delta as i64);
    put_field(out, r.key.as_deref());
    put_field(out, r.value.as_deref());
    put_varlong(out, r.headers.len() as i64);
    for (k, v) in &r.headers {
        put_field(out, Some(k.as_bytes()));
        put_field(out, v.as_deref());
    }
}

/// Java's CompressionRatioEstimator for one topic and codec: moves up fast when batches compress
/// worse than estimated, down slowly when better.
pub fn update_compression_ratio(estimate: f32, observed: f32) -> f32 {
    const DETERIORATE_STEP: f32 = 0.05;
    const IMPROVING_STEP: f32 = 0.005;
    if observed > estimate {
        (estimate + DETERIORATE_STEP).max(observed)
    } else if observed < estimate {
        (estimate - IMPROVING_STEP).max(observed)
    } else {
        estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_CODEC: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn rec(key: Option<&[u8]>, value: &[u8]) -> ProducerRecord {
        ProducerRecord {
            key: key.map(Bytes::copy_from_slice),
            value: Some(Bytes::copy_from_slice(value)),
            headers: Vec::new(),
            timestamp: 0,
        }
    }

    #[test]
    fn record_sizes_are_javas() {
        // DefaultRecord.sizeInBytes(0, 0, "key", "value", no headers) = 15 (body 14 + 1).
        assert_eq!(record_size(0, 0, &rec(Some(b"key"), b"value")), 15);
        // Offset deltas from 64 take two bytes.
        assert_eq!(record_size(64, 0, &rec(Some(b"key"), b"value")), 16);
        // A 1024-byte value without key: body 1+1+1+1+(2+1024)+1 = 1031, plus a 2-byte length.
        assert_eq!(record_size(0, 0, &rec(None, &[0; 1024])), 1033);
        assert_eq!(
            batch_size_upper_bound(&rec(None, &[0; 1024])),
            61 + 21 + 1 + 1026 + 1
        );
        let mut h = rec(None, b"v");
        h.headers.push(("h".into(), None));
        assert_eq!(record_size(1, 300, &h), 1 + 2 + 1 + 1 + 2 + 1 + 2 + 1 + 1);
    }

    #[test]
    fn the_first_record_always_fits_and_the_next_only_within_the_limit() {
        let mut b = ProducerBatch::new("t", 0, 100, Compression::None, 1.0, 0);
        // Body 1+1+1+1+(2+200)+1 = 207, plus its 2-byte length.
        assert_eq!(
            b.try_append(rec(None, &[0; 200]), None).map_err(|_| ()),
            Ok(209)
        );
        assert_eq!(b.estimated_size_in_bytes(), 61 + 209);
        assert!(b.is_full());
        assert!(b.try_append(rec(None, b"x"), None).is_err());
        let mut b = ProducerBatch::new("t", 0, 100, Compression::None, 1.0, 0);
        b.try_append(rec(None, b"abc"), None).unwrap();
        assert!(!b.is_full());
        b.close_for_record_appends();
        assert!(b.is_full());
    }

    #[test]
    fn an_encoded_batch_decodes_to_the_same_records_with_every_codec() {
        for codec in EVERY_CODEC {
            let mut b = ProducerBatch::new("t", 0, 16384, codec, 1.0, 0);
            let mut plain = ProducerBatch::new("t", 0, 16384, codec, 1.0, 0);
            plain.try_append(rec(None, &[0; 32]), None).unwrap();
            plain.try_append(rec(None, &[0; 32]), None).unwrap();
            let one = plain.encode(-1, -1, -1).unwrap().0;
            // The v2 header's record count (bytes 57..61): both records in one batch.
            assert_eq!(
                &one[57..61],
                &2i32.to_be_bytes(),
                "{codec:?}: one batch of two"
            );
            for i in 0..50 {
                let mut r = rec(Some(format!("k{i}").as_bytes()), &[b'a'; 100]);
                r.timestamp = 1_000 + i;
                b.try_append(r, None).unwrap();
            }
            let (bytes, ratio) = b.encode(7, 1, 10).unwrap();
            let mut buf = bytes.clone();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            assert_eq!(set.records.len(), 50, "{codec:?}");
            assert_eq!(set.records[3].key.as_deref(), Some(&b"k3"[..]));
            assert_eq!(set.records[3].sequence, 13);
            assert_eq!(set.records[3].timestamp, 1_003);
            assert_eq!(set.records[0].producer_id, 7);
            if codec == Compression::None {
                assert_eq!(
                    bytes.len(),
                    b.estimated_size_in_bytes(),
                    "uncompressed size is exact"
                );
            } else {
                assert!(ratio < 0.5, "{codec:?} ratio {ratio}");
            }
        }
    }

    #[test]
    fn the_layout_is_the_crate_encoders_byte_for_byte_and_keeps_a_repeated_header() {
        use kafka_protocol::indexmap::IndexMap;
        use kafka_protocol::protocol::StrBytes;
        use kafka_protocol::records::{
            Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
        };
        for codec in EVERY_CODEC {
            let mut b = ProducerBatch::new("t", 0, 16384, codec, 1.0, 0);
            let mut theirs = Vec::new();
            for i in 0..20i64 {
                let mut r = rec(Some(format!("k{i}").as_bytes()), &[b'v'; 40]);
                r.timestamp = 5_000 + i * 3;
                r.headers = vec![
                    ("h".into(), Some(Bytes::from(format!("{i}")))),
                    ("n".into(), None),
                ];
                theirs.push(Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: 9,
                    producer_epoch: 2,
                    timestamp_type: TimestampType::Creation,
                    offset: i,
                    sequence: 100 + i as i32,
                    timestamp: r.timestamp,
                    key: r.key.clone(),
                    value: r.value.clone(),
                    headers: r
                        .headers
                        .iter()
                        .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone()))
                        .collect::<IndexMap<_, _>>(),
                });
                b.try_append(r, None).unwrap();
            }
            let mut want = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression: codec,
            };
            RecordBatchEncoder::encode(&mut want, &theirs, &options).unwrap();
            assert_eq!(b.encode(9, 2, 100).unwrap().0, want.freeze(), "{codec:?}");
        }
        // Kafka lets a header name repeat: both values are written.
        let mut b = ProducerBatch::new("t", 0, 16384, Compression::None, 1.0, 0);
        let mut r = rec(None, b"v");
        r.headers = vec![
            ("trace".into(), Some(Bytes::from_static(b"first"))),
            ("trace".into(), Some(Bytes::from_static(b"second"))),
        ];
        b.try_append(r, None).unwrap();
        let bytes = b.encode(-1, -1, -1).unwrap().0;
        assert_eq!(bytes.len(), b.estimated_size_in_bytes(), "sizes count both");
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(text.matches("trace").count(), 2);
        assert!(text.contains("first") && text.contains("second"));
    }

    #[test]
    fn the_ratio_estimate_rises_fast_and_falls_slowly() {
        assert_eq!(update_compression_ratio(0.5, 0.8), 0.8);
        assert!((update_compression_ratio(0.5, 0.52) - 0.55).abs() < 1e-6);
        assert!((update_compression_ratio(0.5, 0.2) - 0.495).abs() < 1e-6);
        assert_eq!(update_compression_ratio(0.5, 0.5), 0.5);
    }

    #[tokio::test]
    async fn a_split_keeps_record_order_and_waiters_in_parts_of_the_split_size() {
        // ProducerBatch.split: each part is at most the split size, a bigger record alone.
        let mut big = ProducerBatch::new("t", 3, 1 << 20, Compression::None, 1.0, 42);
        let mut waiting = Vec::new();
        for (i, len) in [100usize, 100, 100, 500, 100].into_iter().enumerate() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let mut r = rec(None, &vec![i as u8; len]);
            r.timestamp = 1_000 + i as i64;
            big.try_append(r, Some(tx)).unwrap();
            waiting.push(rx);
        }
        let mut parts = big.split(300, 1.0);
        assert_eq!(big.record_count(), 0, "the refused batch is left empty");
        let counts: Vec<usize> = parts.iter().map(ProducerBatch::record_count).collect();
        assert_eq!(
            counts,
            vec![2, 1, 1, 1],
            "61 + 2 × 109 fits 300, a third does not"
        );
        for p in &parts {
            assert!(p.is_split_batch() && p.is_full());
            assert_eq!((p.topic.as_str(), p.partition, p.created_ms), ("t", 3, 42));
            assert!(p.sequence.is_none(), "no sequence to hand on");
            assert!(p.estimated_size_in_bytes() <= 300 || p.record_count() == 1);
        }
        assert_eq!(
            parts[2].records()[0].value.as_ref().map(Bytes::len),
            Some(500)
        );
        assert_eq!(parts[3].records()[0].timestamp, 1_004);
        for (base, p) in [10i64, 20, 30, 40].into_iter().zip(&mut parts) {
            p.complete(Ok((base, None)));
        }
        let mut offsets = Vec::new();
        for rx in waiting {
            offsets.push(rx.await.unwrap().unwrap().offset);
        }
        assert_eq!(
            offsets,
            vec![10, 11, 20, 30, 40],
            "each waiter hears its new batch"
        );
    }
}
