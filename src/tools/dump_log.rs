//! `evenkeel dump-log`: prints segment, offset index and time index files the way Kafka's
//! `kafka-dump-log` does, so the two can be read side by side.

use std::io::Write;
use std::path::Path;

use crate::storage::batch::{self, BatchHeader, BATCH_HEADER_SIZE, LOG_OVERHEAD};
use crate::storage::index::{OffsetIndex, TimeIndex};

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: not a .log, .index or .timeindex file")]
    UnknownKind(String),
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
}

/// What to print about each file.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpOptions {
    /// Print keys and values (`--print-data-log`); implies record lines.
    pub print_data_log: bool,
    /// Print one line per record (`--deep-iteration`).
    pub deep_iteration: bool,
}

fn base_offset_of(path: &Path) -> i64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

pub fn dump_file(path: &Path, opts: DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let name = path.display().to_string();
    let io = |source| DumpError::Io {
        path: name.clone(),
        source,
    };
    writeln!(out, "Dumping {name}").map_err(io)?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("log") => dump_log(path, opts, out),
        Some("index") => dump_offset_index(path, out),
        Some("timeindex") => dump_time_index(path, out),
        _ => Err(DumpError::UnknownKind(name)),
    }
}

fn dump_log(path: &Path, opts: DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let name = path.display().to_string();
    let io = |source| DumpError::Io {
        path: name.clone(),
        source,
    };
    let data = std::fs::read(path).map_err(io)?;
    writeln!(out, "Log starting offset: {}", base_offset_of(path)).map_err(io)?;
    let mut pos = 0usize;
    while pos + BATCH_HEADER_SIZE <= data.len() {
        let h = BatchHeader::parse(&data[pos..]).map_err(|e| DumpError::Bad {
            path: name.clone(),
            reason: e.to_string(),
        })?;
        if h.batch_length < (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32 || pos + h.size() > data.len()
        {
            break;
        }
        let bytes = &data[pos..pos + h.size()];
        let valid = batch::compute_crc(bytes) == h.crc;
        print_batch(&h, pos, valid, out).map_err(io)?;
        if opts.deep_iteration || opts.print_data_log {
            print_records(&h, bytes, opts.print_data_log, out).map_err(io)?;
        }
        pos += h.size();
    }
    if pos < data.len() {
        writeln!(
            out,
            "Found {} invalid bytes at the end of {}",
            data.len() - pos,
            path.file_name().and_then(|n| n.to_str()).unwrap_or("")
        )
        .map_err(io)?;
    }
    Ok(())
}

/// Java's `OptionalLong.toString`, as Kafka prints a batch's delete horizon (KIP-534).
fn optional_long(v: Option<i64>) -> String {
    v.map_or_else(
        || "OptionalLong.empty".into(),
        |n| format!("OptionalLong[{n}]"),
    )
}

fn timestamp_label(h: &BatchHeader) -> &'static str {
    if h.is_log_append_time() {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

fn print_batch(
    h: &BatchHeader,
    pos: usize,
    valid: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let last_seq = if h.base_sequence < 0 {
        -1
    } else {
        h.base_sequence.wrapping_add(h.last_offset_delta)
    };
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         deleteHorizonMs: {} position: {} {}: {} size: {} magic: {} \
         compresscodec: {} crc: {} isvalid: {}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        last_seq,
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        optional_long(h.delete_horizon_ms()),
        pos,
        timestamp_label(h),
        h.max_timestamp,
        h.size(),
        h.magic,
        batch::compression_name(h.compression()),
        h.crc,
        valid
    )
}

fn lossy(b: Option<&[u8]>) -> String {
    match b {
        None => "null".into(),
        Some(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn print_records(
    h: &BatchHeader,
    bytes: &[u8],
    print_data: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let label = timestamp_label(h);
    let seq = |offset: i64| {
        if h.base_sequence < 0 {
            -1
        } else {
            h.base_sequence
                .wrapping_add((offset - h.base_offset) as i32)
        }
    };
    if h.compression() == 0 {
        for r in batch::uncompressed_records(bytes) {
            let offset = h.base_offset + r.offset_delta as i64;
            let ts = if h.is_log_append_time() {
                h.max_timestamp
            } else {
                h.base_timestamp + r.timestamp_delta
            };
            let keys: Vec<String> = r
                .headers
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();
            write!(
                out,
                "| offset: {offset} {label}: {ts} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                r.key.map_or(-1, |k| k.len() as i64),
                r.value.map_or(-1, |v| v.len() as i64),
                seq(offset),
                keys.join(",")
            )?;
            if print_data {
                write!(out, " key: {} payload: {}", lossy(r.key), lossy(r.value))?;
            }
            writeln!(out)?;
        }
        return Ok(());
    }
    let mut buf = bytes::Bytes::copy_from_slice(bytes);
    match kafka_protocol::records::RecordBatchDecoder::decode(&mut buf) {
        Ok(set) => {
            for r in set.records {
                let ts = if h.is_log_append_time() {
                    h.max_timestamp
                } else {
                    r.timestamp
                };
                let keys: Vec<String> = r.headers.keys().map(|k| k.to_string()).collect();
                write!(
                    out,
                    "| offset: {} {label}: {ts} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                    r.offset,
                    r.key.as_ref().map_or(-1, |k| k.len() as i64),
                    r.value.as_ref().map_or(-1, |v| v.len() as i64),
                    seq(r.offset),
                    keys.join(",")
                )?;
                if print_data {
                    write!(
                        out,
                        " key: {} payload: {}",
                        lossy(r.key.as_deref()),
                        lossy(r.value.as_deref())
                    )?;
                }
                writeln!(out)?;
            }
        }
        Err(e) => writeln!(out, "| cannot decompress the batch: {e}")?,
    }
    Ok(())
}

/// Prints each fixed-size entry of an index file with `line`, stopping at the zero entries a
/// preallocated active index ends in (Kafka's tool stops there too).
fn dump_entries(
    path: &Path,
    entry_size: usize,
    out: &mut dyn Write,
    line: impl Fn(i64, &[u8]) -> String,
) -> Result<(), DumpError> {
    let name = path.display().to_string();
    let io = |source| DumpError::Io {
        path: name.clone(),
        source,
    };
    let data = std::fs::read(path).map_err(io)?;
    let base = base_offset_of(path);
    for (n, e) in data.chunks_exact(entry_size).enumerate() {
        if n > 0 && e.iter().all(|b| *b == 0) {
            break;
        }
        writeln!(out, "{}", line(base, e)).map_err(io)?;
    }
    Ok(())
}

fn u32_at(e: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

fn dump_offset_index(path: &Path, out: &mut dyn Write) -> Result<(), DumpError> {
    dump_entries(path, OffsetIndex::ENTRY_SIZE, out, |base, e| {
        format!(
            "offset: {} position: {}",
            base + u32_at(e, 0) as i64,
            u32_at(e, 4)
        )
    })
}

fn dump_time_index(path: &Path, out: &mut dyn Write) -> Result<(), DumpError> {
    dump_entries(path, TimeIndex::ENTRY_SIZE, out, |base, e| {
        let ts = i64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
        format!("timestamp: {ts} offset: {}", base + u32_at(e, 8) as i64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogConfig;
    use crate::storage::{LoadParams, Log, TopicPartition};

    #[test]
    fn prints_batches_and_records_like_kafka_dump_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            TopicPartition::new("order-events", 0),
            LogConfig::default(),
            LoadParams::default(),
        )
        .unwrap();
        let mut b = batch::build_batch(
            &[
                (
                    Some(b"order-1001".as_slice()),
                    Some(br#"{"amount":1000}"#.as_slice()),
                ),
                (
                    Some(b"order-1002".as_slice()),
                    Some(br#"{"amount":2000}"#.as_slice()),
                ),
            ],
            1_787_577_612_677,
        );
        log.append_as_leader(&mut b, 0).unwrap();
        let seg = dir.path().join("00000000000000000000.log");
        let mut out = Vec::new();
        dump_file(
            &seg,
            DumpOptions {
                print_data_log: true,
                deep_iteration: false,
            },
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Log starting offset: 0"), "{text}");
        assert!(
            text.contains("baseOffset: 0 lastOffset: 1 count: 2"),
            "{text}"
        );
        assert!(text.contains("compresscodec: none"), "{text}");
        assert!(text.contains(&format!("size: {}", b.len())), "{text}");
        assert!(text.contains("isvalid: true"), "{text}");
        assert!(
            text.contains("| offset: 1 CreateTime: 1787577612677 keySize: 10"),
            "{text}"
        );
        assert!(
            text.contains(r#"key: order-1002 payload: {"amount":2000}"#),
            "{text}"
        );
        assert!(
            text.contains("deleteHorizonMs: OptionalLong.empty"),
            "{text}"
        );
    }

    #[test]
    fn a_cleaned_batch_with_a_delete_horizon_and_an_empty_batch_print_as_kafka_does() {
        let dir = tempfile::tempdir().unwrap();
        let b = batch::build_batch(&[(Some(b"k".as_slice()), None)], 1_000);
        let h = BatchHeader::parse(&b).unwrap();
        let section = batch::records_section(&b).unwrap().into_owned();
        let rewrite = batch::Rewrite {
            records_count: 1,
            base_timestamp: 90_000,
            max_timestamp: 1_000,
            delete_horizon: true,
        };
        let mut data = batch::build_rewritten_batch(&h, &section, rewrite).unwrap();
        data.extend(batch::build_empty_batch(&h));
        let seg = dir.path().join("00000000000000000000.log");
        std::fs::write(&seg, &data).unwrap();
        let mut out = Vec::new();
        let opts = DumpOptions {
            print_data_log: true,
            deep_iteration: false,
        };
        dump_file(&seg, opts, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("deleteHorizonMs: OptionalLong[90000]"),
            "{text}"
        );
        assert!(text.contains("count: 0"), "{text}");
        assert_eq!(text.matches("isvalid: true").count(), 2, "{text}");
        assert!(!text.contains("invalid bytes"), "{text}");
    }
}
