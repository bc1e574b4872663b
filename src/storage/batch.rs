//! The v2 record batch as bytes: its 61-byte header, validation of client batches, and the
//! in-place edits the broker makes (base offset, leader epoch, LogAppendTime with a new CRC).

use super::error::StorageError;

/// Size of the v2 batch header (`RECORD_BATCH_OVERHEAD` in Kafka).
pub const BATCH_HEADER_SIZE: usize = 61;
/// Bytes before the batch length field ends: base offset (8) + batch length (4).
pub const LOG_OVERHEAD: usize = 12;

const BASE_OFFSET: usize = 0;
const LENGTH: usize = 8;
const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORDS_COUNT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;
/// KIP-534: the base timestamp holds the delete horizon of the batch's tombstones.
const DELETE_HORIZON_MASK: i16 = 0x40;

/// Compression codec named as `kafka-dump-log` prints it.
pub fn compression_name(codec: u8) -> &'static str {
    match codec {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "unknown",
    }
}

/// The decoded fixed header of one v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Length of the batch after the length field.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Decodes the header from the first 61 bytes of `b`. Checks nothing but the size.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, StorageError> {
        if b.len() < BATCH_HEADER_SIZE {
            return Err(StorageError::CorruptRecord(format!(
                "record batch header needs {BATCH_HEADER_SIZE} bytes, {} available",
                b.len()
            )));
        }
        Ok(BatchHeader {
            base_offset: i64_at(b, BASE_OFFSET),
            batch_length: i32_at(b, LENGTH),
            partition_leader_epoch: i32_at(b, PARTITION_LEADER_EPOCH),
            magic: b[MAGIC] as i8,
            crc: i32_at(b, CRC) as u32,
            attributes: i16_at(b, ATTRIBUTES),
            last_offset_delta: i32_at(b, LAST_OFFSET_DELTA),
            base_timestamp: i64_at(b, BASE_TIMESTAMP),
            max_timestamp: i64_at(b, MAX_TIMESTAMP),
            producer_id: i64_at(b, PRODUCER_ID),
            producer_epoch: i16_at(b, PRODUCER_EPOCH),
            base_sequence: i32_at(b, BASE_SEQUENCE),
            records_count: i32_at(b, RECORDS_COUNT),
        })
    }

    /// Whole size of the batch on disk, header included.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_MASK != 0
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// KIP-534's delete horizon: set by the cleaner on a batch whose tombstones it kept, in the
    /// base timestamp. A tombstone may go once the cleaner runs at or after it.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_MASK != 0).then_some(self.base_timestamp)
    }
}

/// CRC32C over attributes to the end of the batch, as the v2 format defines it.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES..])
}

/// Reads only the offset and length prefix of the batch at the start of `b` (12 bytes), returning
/// `(base_offset, whole size)`, or `None` when fewer than 12 bytes remain.
pub fn peek_offset_and_size(b: &[u8]) -> Option<(i64, i32)> {
    if b.len() < LOG_OVERHEAD {
        return None;
    }
    Some((i64_at(b, BASE_OFFSET), i32_at(b, LENGTH)))
}

/// What the bytes at `position` of a file (or buffer) of `len` bytes start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchAt {
    /// Fewer than the 12 bytes of offset and length.
    Unknown,
    /// A length too short for a batch header: a torn tail or a corrupt batch.
    TooShort(i32),
    /// A batch of this whole size that runs past `len`.
    PastEnd(usize),
    /// A batch that ends within `len`, and its header.
    Whole(BatchHeader),
}

/// Classifies the batch starting at `position` of a file (or buffer) of `len` bytes from the
/// bytes `b` read there, by its length field. Of a batch that ends within `len`, `b` must hold
/// the 61-byte header (an error otherwise).
pub fn batch_at(b: &[u8], position: u64, len: u64) -> Result<BatchAt, StorageError> {
    let Some((_, length)) = peek_offset_and_size(b) else {
        return Ok(BatchAt::Unknown);
    };
    if length < (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32 {
        return Ok(BatchAt::TooShort(length));
    }
    let size = LOG_OVERHEAD + length as usize;
    if position + size as u64 > len {
        return Ok(BatchAt::PastEnd(size));
    }
    BatchHeader::parse(b).map(BatchAt::Whole)
}

/// Facts about one validated batch, in the order the batches appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Byte position of the batch inside the validated buffer.
    pub position: usize,
    pub header: BatchHeader,
}

/// Checks one complete batch occupying exactly `b`: length, magic, CRC, count and offset deltas.
/// Corruption (length, CRC) maps to CORRUPT_MESSAGE; a well-formed batch that breaks the
/// rules (magic, count, deltas) maps to INVALID_RECORD, as in Kafka's LogValidator.
pub fn validate_batch(b: &[u8]) -> Result<BatchHeader, StorageError> {
    validate_batch_with(b, false)
}

/// Checks a batch as it may lie in a log: like `validate_batch`, but a cleaned batch may hold
/// fewer records than its offset range (gaps where the cleaner removed records), or none at all
/// (a header the cleaner kept for its producer's sequence), as Kafka's logs do after compaction.
pub fn validate_stored_batch(b: &[u8]) -> Result<BatchHeader, StorageError> {
    validate_batch_with(b, true)
}

fn validate_batch_with(b: &[u8], stored: bool) -> Result<BatchHeader, StorageError> {
    let h = BatchHeader::parse(b)?;
    if h.magic != 2 {
        return Err(StorageError::InvalidRecord(format!(
            "record batch magic {} is not supported; only magic 2 is",
            h.magic
        )));
    }
    if (h.batch_length as i64) < (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i64 || h.size() != b.len() {
        return Err(StorageError::CorruptRecord(format!(
            "record batch length {} does not match its {} bytes",
            h.batch_length,
            b.len()
        )));
    }
    let crc = compute_crc(b);
    if crc != h.crc {
        return Err(StorageError::CorruptRecord(format!(
            "record batch is corrupt (stored crc = {}, computed crc = {crc})",
            h.crc
        )));
    }
    let min_count = if stored { 0 } else { 1 };
    if h.records_count < min_count {
        return Err(StorageError::InvalidRecord(format!(
            "invalid reported count {} for record batch",
            h.records_count
        )));
    }
    let range = h.last_offset_delta as i64 + 1;
    let count_ok = if stored {
        h.records_count as i64 <= range
    } else {
        h.records_count as i64 == range
    };
    if h.last_offset_delta < 0 || !count_ok {
        return Err(StorageError::InvalidRecord(format!(
            "inconsistent batch offset range: last offset delta {} for {} records",
            h.last_offset_delta, h.records_count
        )));
    }
    if h.compression() > 4 {
        return Err(StorageError::InvalidRecord(format!(
            "unknown compression codec {}",
            h.compression()
        )));
    }
    if h.compression() == 0 {
        validate_uncompressed_records(&b[BATCH_HEADER_SIZE..], &h, stored)?;
    }
    Ok(h)
}

/// Splits a buffer of one or more batches and validates each; the batches must fill it exactly.
pub fn validate_batches(b: &[u8]) -> Result<Vec<BatchInfo>, StorageError> {
    validate_batches_with(b, false)
}

/// `validate_batches` for batches copied from a log (a follower's fetch): cleaned batches pass.
pub fn validate_stored_batches(b: &[u8]) -> Result<Vec<BatchInfo>, StorageError> {
    validate_batches_with(b, true)
}

fn validate_batches_with(b: &[u8], stored: bool) -> Result<Vec<BatchInfo>, StorageError> {
    let mut out = Vec::with_capacity(1);
    let mut pos = 0;
    while pos < b.len() {
        let rest = &b[pos..];
        let Some((_, len)) = peek_offset_and_size(rest) else {
            return Err(StorageError::CorruptRecord(format!(
                "{} trailing bytes are too few for a record batch",
                rest.len()
            )));
        };
        let size = LOG_OVERHEAD as i64 + len as i64;
        if len < (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32 || size > rest.len() as i64 {
            return Err(StorageError::CorruptRecord(format!(
                "record batch size {size} at position {pos} does not fit the {} remaining bytes",
                rest.len()
            )));
        }
        let size = size as usize;
        let header = validate_batch_with(&rest[..size], stored)?;
        out.push(BatchInfo {
            position: pos,
            header,
        });
        pos += size;
    }
    if out.is_empty() {
        return Err(StorageError::InvalidRecord("no record batches".into()));
    }
    Ok(out)
}

/// Walks the records of an uncompressed batch and checks each record's offset delta is its
/// index (Kafka: "Invalid offset ... expected ...") and that the records fill the batch. A stored
/// (cleaned) batch only needs deltas that grow and stay within the batch's offset range.
fn validate_uncompressed_records(
    mut b: &[u8],
    h: &BatchHeader,
    stored: bool,
) -> Result<(), StorageError> {
    let mut previous = -1i64;
    for n in 0..h.records_count {
        let rec = Record::parse(&mut b).ok_or_else(|| {
            StorageError::CorruptRecord(format!("record {n} of the batch is malformed"))
        })?;
        let delta = rec.offset_delta as i64;
        let ok = if stored {
            delta > previous && delta <= h.last_offset_delta as i64
        } else {
            delta == n as i64
        };
        if !ok {
            return Err(StorageError::InvalidRecord(format!(
                "record has offset delta {} where {} was expected",
                rec.offset_delta,
                if stored { previous + 1 } else { n as i64 }
            )));
        }
        previous = delta;
    }
    if !b.is_empty() {
        return Err(StorageError::CorruptRecord(format!(
            "{} bytes follow the last record of the batch",
            b.len()
        )));
    }
    Ok(())
}

/// One record of an uncompressed batch, borrowed from the batch bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

fn read_varlong(b: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        raw |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

fn read_varint(b: &mut &[u8]) -> Option<i32> {
    let v = read_varlong(b)?;
    i32::try_from(v).ok()
}

fn read_bytes<'a>(b: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = read_varint(b)?;
    if len < 0 {
        return Some(None);
    }
    let len = len as usize;
    if b.len() < len {
        return None;
    }
    let (v, rest) = b.split_at(len);
    *b = rest;
    Some(Some(v))
}

/// The fixed front of one length-prefixed record (attributes, timestamp delta, offset delta) and
/// the bytes after it (key, value, headers); advances `b` past the record.
fn record_front<'a>(b: &mut &'a [u8]) -> Option<(i8, i64, i32, &'a [u8])> {
    let len = read_varint(b)?;
    if len < 0 || b.len() < len as usize {
        return None;
    }
    let (body, rest) = b.split_at(len as usize);
    *b = rest;
    let (&attributes, mut body) = body.split_first()?;
    let timestamp_delta = read_varlong(&mut body)?;
    let offset_delta = read_varint(&mut body)?;
    Some((attributes as i8, timestamp_delta, offset_delta, body))
}

impl<'a> Record<'a> {
    /// Parses one length-prefixed record and advances `b` past it; `None` when malformed.
    pub fn parse(b: &mut &'a [u8]) -> Option<Record<'a>> {
        let (attributes, timestamp_delta, offset_delta, mut body) = record_front(b)?;
        let key = read_bytes(&mut body)?;
        let value = read_bytes(&mut body)?;
        let n_headers = read_varint(&mut body)?;
        if n_headers < 0 {
            return None;
        }
        let mut headers = Vec::new();
        for _ in 0..n_headers {
            let k = read_bytes(&mut body)??;
            let v = read_bytes(&mut body)?;
            headers.push((k, v));
        }
        if !body.is_empty() {
            return None;
        }
        Some(Record {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        })
    }
}

/// Iterates the records of an uncompressed batch (the whole batch, header included).
pub fn uncompressed_records(batch: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut rest = batch.get(BATCH_HEADER_SIZE..).unwrap_or(&[]);
    std::iter::from_fn(move || {
        if rest.is_empty() {
            None
        } else {
            Record::parse(&mut rest)
        }
    })
}

/// `(offset, timestamp)` of every record in a whole batch, decompressing when needed. Records of
/// a LogAppendTime batch all carry the batch's max timestamp, as Kafka reports them.
pub fn record_offsets_and_timestamps(batch: &[u8]) -> Result<Vec<(i64, i64)>, StorageError> {
    let h = BatchHeader::parse(batch)?;
    let mut out = Vec::with_capacity(h.records_count.max(0) as usize);
    if h.compression() == 0 {
        for r in uncompressed_records(batch) {
            out.push((
                h.base_offset + r.offset_delta as i64,
                h.base_timestamp + r.timestamp_delta,
            ));
        }
    } else {
        let mut bytes = bytes::Bytes::copy_from_slice(batch);
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes)
            .map_err(|e| StorageError::CorruptRecord(format!("cannot decode batch: {e}")))?;
        for r in set.records {
            out.push((r.offset, r.timestamp));
        }
    }
    if h.is_log_append_time() {
        for r in out.iter_mut() {
            r.1 = h.max_timestamp;
        }
    }
    Ok(out)
}

/// Writes the broker-assigned base offset into a batch (not covered by the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Writes the partition leader epoch into a batch (not covered by the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4].copy_from_slice(&epoch.to_be_bytes());
}

/// Marks a batch LogAppendTime with `now_ms` as its max timestamp and recomputes the CRC,
/// as Kafka's `DefaultRecordBatch.setMaxTimestamp` does.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = i16_at(batch, ATTRIBUTES) | TIMESTAMP_TYPE_MASK;
    batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// One record of a decompressed records section, as the cleaner sees it: its deltas, whether it
/// has a key and value, and the bytes from the key on (key, value, headers), to copy as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub has_value: bool,
    /// Key, value and headers, encoded.
    pub tail: &'a [u8],
}

impl<'a> RawRecord<'a> {
    /// Parses one length-prefixed record and advances `b` past it; `None` when malformed.
    pub fn parse(b: &mut &'a [u8]) -> Option<RawRecord<'a>> {
        let (attributes, timestamp_delta, offset_delta, mut body) = record_front(b)?;
        let tail = body;
        let key = read_bytes(&mut body)?;
        let value = read_bytes(&mut body)?;
        let n_headers = read_varint(&mut body)?;
        for _ in 0..n_headers.max(0) {
            read_bytes(&mut body)??;
            read_bytes(&mut body)?;
        }
        if n_headers < 0 || !body.is_empty() {
            return None;
        }
        Some(RawRecord {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            has_value: value.is_some(),
            tail,
        })
    }

    /// Appends the record to `out` with a new timestamp delta (offset delta and the rest as they were).
    pub fn encode_with_timestamp_delta(&self, out: &mut Vec<u8>, timestamp_delta: i64) {
        let mut head = Vec::with_capacity(16);
        head.push(self.attributes as u8);
        put_varlong(&mut head, timestamp_delta);
        put_varlong(&mut head, self.offset_delta as i64);
        put_varlong(out, (head.len() + self.tail.len()) as i64);
        out.extend_from_slice(&head);
        out.extend_from_slice(self.tail);
    }
}

/// The first `count` records of a decompressed records section, as the cleaner and the
/// compacted-topic key check read them. A malformed record is an error, and the last item.
pub fn raw_records(
    section: &[u8],
    count: i32,
) -> impl Iterator<Item = Result<RawRecord<'_>, StorageError>> {
    let mut rest = section;
    let mut failed = false;
    (0..count.max(0)).map_while(move |_| {
        if failed {
            return None;
        }
        let r = RawRecord::parse(&mut rest)
            .ok_or_else(|| StorageError::CorruptRecord("a record of a batch is malformed".into()));
        failed = r.is_err();
        Some(r)
    })
}

/// The records section of a whole batch, decompressed when its codec says so.
pub fn records_section(batch: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, StorageError> {
    use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
    let h = BatchHeader::parse(batch)?;
    let mut body = batch.get(BATCH_HEADER_SIZE..h.size()).unwrap_or(&[]);
    let take = |b: &mut bytes::Bytes| -> anyhow::Result<Vec<u8>> { Ok(b.to_vec()) };
    let out = match h.compression() {
        0 => return Ok(std::borrow::Cow::Borrowed(body)),
        1 => Gzip::decompress(&mut body, take),
        2 => Snappy::decompress(&mut body, take),
        3 => Lz4::decompress(&mut body, take),
        4 => Zstd::decompress(&mut body, take),
        c => {
            return Err(StorageError::CorruptRecord(format!(
                "unknown compression codec {c}"
            )))
        }
    };
    out.map(std::borrow::Cow::Owned)
        .map_err(|e| StorageError::CorruptRecord(format!("cannot decompress a record batch: {e}")))
}

/// `records` compressed with `codec` (Kafka's ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub fn compress_records(codec: u8, records: &[u8]) -> Result<Vec<u8>, StorageError> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let mut out: Vec<u8> = Vec::with_capacity(records.len() / 2 + 64);
    let fill = |b: &mut bytes::BytesMut| -> anyhow::Result<()> {
        b.extend_from_slice(records);
        Ok(())
    };
    let done = match codec {
        0 => {
            out.extend_from_slice(records);
            Ok(())
        }
        1 => Gzip::compress(&mut out, fill),
        2 => Snappy::compress(&mut out, fill),
        3 => Lz4::compress(&mut out, fill),
        4 => Zstd::compress(&mut out, fill),
        c => {
            return Err(StorageError::InvalidRecord(format!(
                "unknown compression codec {c}"
            )))
        }
    };
    done.map_err(|e| StorageError::InvalidRecord(format!("cannot compress a record batch: {e}")))?;
    Ok(out)
}

/// What a rewritten batch keeps of its original and what changes (Kafka's
/// `MemoryRecords.buildRetainedRecordsInto`): same base offset, last offset delta, leader epoch,
/// producer id, epoch, base sequence, codec and flags; new count, timestamps and delete horizon.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite {
    pub records_count: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub delete_horizon: bool,
}

/// A batch like `orig` holding `records` (an encoded, uncompressed records section).
pub fn build_rewritten_batch(
    orig: &BatchHeader,
    records: &[u8],
    rw: Rewrite,
) -> Result<Vec<u8>, StorageError> {
    let body = compress_records(orig.compression(), records)?;
    let mut attributes = orig.attributes & !DELETE_HORIZON_MASK;
    if rw.delete_horizon {
        attributes |= DELETE_HORIZON_MASK;
    }
    let h = BatchHeader {
        attributes,
        base_timestamp: rw.base_timestamp,
        max_timestamp: rw.max_timestamp,
        records_count: rw.records_count,
        ..*orig
    };
    Ok(assemble_batch(&h, &body))
}

/// A header-only batch in place of `orig` whose records all went (Kafka's
/// `DefaultRecordBatch.writeEmptyHeader`): it keeps the offset range and producer fields, so the
/// producer's last sequence survives cleaning.
pub fn build_empty_batch(orig: &BatchHeader) -> Vec<u8> {
    let keep = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK;
    let h = BatchHeader {
        attributes: orig.attributes & keep,
        base_timestamp: orig.max_timestamp,
        records_count: 0,
        ..*orig
    };
    assemble_batch(&h, &[])
}

/// Writes `h` (its length and CRC recomputed) followed by `body`.
fn assemble_batch(h: &BatchHeader, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; BATCH_HEADER_SIZE];
    out.extend_from_slice(body);
    let len = (out.len() - LOG_OVERHEAD) as i32;
    out[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&h.base_offset.to_be_bytes());
    out[LENGTH..LENGTH + 4].copy_from_slice(&len.to_be_bytes());
    out[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&h.partition_leader_epoch.to_be_bytes());
    out[MAGIC] = 2;
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&h.attributes.to_be_bytes());
    out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&h.last_offset_delta.to_be_bytes());
    out[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&h.base_timestamp.to_be_bytes());
    out[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&h.max_timestamp.to_be_bytes());
    out[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&h.producer_id.to_be_bytes());
    out[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&h.producer_epoch.to_be_bytes());
    out[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&h.base_sequence.to_be_bytes());
    out[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&h.records_count.to_be_bytes());
    let crc = compute_crc(&out);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A record to build: optional key and optional value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A record header to build: key and value.
pub type Header<'a> = (&'a [u8], &'a [u8]);

/// Builds an uncompressed v2 batch of `(key, value)` records with base offset 0 and every
/// record at `timestamp_ms`. Used by tests, `evenkeel perf storage` and internal writers.
pub fn build_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Vec<u8> {
    let with_headers: Vec<(KeyValue<'_>, &[Header<'_>])> =
        records.iter().map(|kv| (*kv, &[][..])).collect();
    build_batch_with(&with_headers, timestamp_ms, false)
}

/// A control batch (attributes bit 5), as KRaft writes its leader-change, voter and snapshot
/// header records: the keys are control keys.
pub fn build_control_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Vec<u8> {
    let with_headers: Vec<(KeyValue<'_>, &[Header<'_>])> =
        records.iter().map(|kv| (*kv, &[][..])).collect();
    build_batch_with(&with_headers, timestamp_ms, true)
}

/// Builds an uncompressed v2 batch of records with headers; `control` marks a control batch.
pub fn build_batch_with(
    records: &[(KeyValue<'_>, &[Header<'_>])],
    timestamp_ms: i64,
    control: bool,
) -> Vec<u8> {
    fn put_bytes(out: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            None => put_varlong(out, -1),
            Some(v) => {
                put_varlong(out, v.len() as i64);
                out.extend_from_slice(v);
            }
        }
    }
    let mut out = vec![0u8; BATCH_HEADER_SIZE];
    let mut body = Vec::new();
    for (i, ((k, v), headers)) in records.iter().enumerate() {
        body.clear();
        body.push(0); // attributes
        put_varlong(&mut body, 0); // timestamp delta
        put_varlong(&mut body, i as i64); // offset delta
        put_bytes(&mut body, *k);
        put_bytes(&mut body, *v);
        put_varlong(&mut body, headers.len() as i64);
        for (hk, hv) in headers.iter() {
            put_bytes(&mut body, Some(hk));
            put_bytes(&mut body, Some(hv));
        }
        put_varlong(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
    }
    let len = (out.len() - LOG_OVERHEAD) as i32;
    out[LENGTH..LENGTH + 4].copy_from_slice(&len.to_be_bytes());
    out[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4].copy_from_slice(&(-1i32).to_be_bytes());
    out[MAGIC] = 2;
    let attributes: i16 = if control { CONTROL_MASK } else { 0 };
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let last_delta = records.len() as i32 - 1;
    out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&last_delta.to_be_bytes());
    out[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&timestamp_ms.to_be_bytes());
    out[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&timestamp_ms.to_be_bytes());
    out[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&(-1i64).to_be_bytes());
    out[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&(-1i16).to_be_bytes());
    out[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(-1i32).to_be_bytes());
    out[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&(records.len() as i32).to_be_bytes());
    let crc = compute_crc(&out);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        build_batch(
            &[
                (Some(b"k1".as_slice()), Some(b"v1".as_slice())),
                (None, Some(b"v2".as_slice())),
            ],
            1_700_000_000_000,
        )
    }

    #[test]
    fn built_batch_validates_and_parses() {
        let b = sample();
        let h = validate_batch(&b).unwrap();
        assert_eq!(h.records_count, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.size(), b.len());
        let recs: Vec<_> = uncompressed_records(&b).collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].key, Some(b"k1".as_slice()));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[1].value, Some(b"v2".as_slice()));
    }

    #[test]
    fn raw_records_reads_count_records_and_ends_at_a_malformed_one() {
        let b = sample();
        let section = records_section(&b).unwrap();
        let keys: Vec<Option<&[u8]>> = raw_records(&section, 2).map(|r| r.unwrap().key).collect();
        assert_eq!(keys, [Some(b"k1".as_slice()), None]);
        assert_eq!(raw_records(&section, 1).count(), 1, "only `count` records");
        assert_eq!(raw_records(&section, -1).count(), 0);
        // A count past the records: the third is malformed, and nothing follows it.
        let got: Vec<_> = raw_records(&section, 5).collect();
        assert_eq!(got.len(), 3);
        assert!(matches!(got[2], Err(StorageError::CorruptRecord(_))));
        let cut = &section[..section.len() - 1];
        let got: Vec<_> = raw_records(cut, 2).collect();
        assert!(got[0].is_ok() && got[1].is_err(), "{got:?}");
    }

    #[test]
    fn kafka_protocol_decodes_our_batches() {
        let b = sample();
        let mut bytes = bytes::Bytes::from(b);
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert_eq!(set.records.len(), 2);
        assert_eq!(set.records[1].offset, 1);
    }

    #[test]
    fn wrong_crc_is_corrupt_message() {
        let mut b = sample();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        let e = validate_batches(&b).unwrap_err();
        assert!(matches!(e, StorageError::CorruptRecord(_)), "{e:?}");
        assert_eq!(e.kafka_error_code(), 2);
    }

    #[test]
    fn wrong_length_is_corrupt_message() {
        let mut b = sample();
        b[LENGTH + 3] = b[LENGTH + 3].wrapping_add(5);
        assert_eq!(validate_batches(&b).unwrap_err().kafka_error_code(), 2);
        let short = &sample()[..40];
        assert_eq!(validate_batches(short).unwrap_err().kafka_error_code(), 2);
    }

    #[test]
    fn magic_other_than_two_is_invalid_record() {
        let mut b = sample();
        b[MAGIC] = 1;
        assert_eq!(validate_batches(&b).unwrap_err().kafka_error_code(), 87);
    }

    #[test]
    fn empty_batch_is_invalid_record() {
        let b = build_batch(&[], 0);
        assert_eq!(validate_batches(&b).unwrap_err().kafka_error_code(), 87);
    }

    #[test]
    fn wrong_offset_delta_is_invalid_record() {
        // Re-encode with the second record claiming delta 5 and a fresh CRC.
        let mut b = sample();
        let recs: Vec<_> = uncompressed_records(&b).collect();
        assert_eq!(recs[1].offset_delta, 1);
        // Position of the second record's offset-delta byte: header + first record + len + attr + ts.
        let first_len = {
            let mut s = &b[BATCH_HEADER_SIZE..];
            let before = s.len();
            Record::parse(&mut s).unwrap();
            before - s.len()
        };
        let at = BATCH_HEADER_SIZE + first_len + 1 + 1 + 1;
        assert_eq!(b[at], 2); // zigzag(1)
        b[at] = 10; // zigzag(5)
        let crc = compute_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(validate_batches(&b).unwrap_err().kafka_error_code(), 87);
    }

    #[test]
    fn log_append_time_rewrites_crc() {
        let mut b = sample();
        set_log_append_time(&mut b, 42);
        let h = validate_batch(&b).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 42);
    }

    #[test]
    fn two_batches_in_one_buffer() {
        let mut b = sample();
        b.extend(sample());
        let infos = validate_batches(&b).unwrap();
        assert_eq!(infos.len(), 2);
        assert_eq!(infos[1].position, b.len() / 2);
    }
}
