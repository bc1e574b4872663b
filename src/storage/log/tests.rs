use super::*;
use crate::storage::batch::build_batch;
use proptest::prelude::*;

fn cfg(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, c: LogConfig) -> Log {
    Log::open(dir, TopicPartition::new("t", 0), c, LoadParams::default()).unwrap()
}

fn batch_of(n: usize, value_len: usize, ts: i64) -> Vec<u8> {
    let v = vec![b'v'; value_len];
    let recs: Vec<batch::KeyValue<'_>> = (0..n).map(|_| (None, Some(v.as_slice()))).collect();
    build_batch(&recs, ts)
}

/// Every (offset, timestamp) of the log, read back through `read` in small fetches.
fn read_all(log: &Log, max_bytes: usize) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let data = log.read(at, max_bytes, None, true).unwrap();
        assert!(!data.is_empty(), "no progress at {at}");
        let infos = batch::validate_batches(&data).unwrap();
        for i in infos {
            let b = &data[i.position..i.position + i.header.size()];
            for (o, t) in batch::record_offsets_and_timestamps(b).unwrap() {
                if o >= at {
                    out.push((o, t));
                }
            }
            at = i.header.next_offset();
        }
    }
    out
}

#[test]
fn offsets_are_assigned_from_the_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(1 << 20));
    let mut b = batch_of(3, 10, 1000);
    let a = log.append_as_leader(&mut b, 5).unwrap();
    assert_eq!((a.first_offset, a.last_offset, a.num_messages), (0, 2, 3));
    let mut b = batch_of(2, 10, 1001);
    let a = log.append_as_leader(&mut b, 5).unwrap();
    assert_eq!((a.first_offset, a.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);
    let h = BatchHeader::parse(&b).unwrap();
    assert_eq!(h.base_offset, 3);
    assert_eq!(h.partition_leader_epoch, 5);
    assert_eq!(log.epoch_cache().entries(), &[(5, 0)]);
}

#[test]
fn bad_batches_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(1 << 20));
    let mut good = batch_of(2, 10, 1);
    log.append_as_leader(&mut good, 0).unwrap();
    let size_before = log.size();
    let mut bad_crc = batch_of(2, 10, 1);
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 1;
    let e = log.append_as_leader(&mut bad_crc, 0).unwrap_err();
    assert_eq!(e.kafka_error_code(), 2);
    let mut bad_magic = batch_of(2, 10, 1);
    bad_magic[16] = 0;
    assert_eq!(
        log.append_as_leader(&mut bad_magic, 0)
            .unwrap_err()
            .kafka_error_code(),
        87
    );
    let mut empty = build_batch(&[], 1);
    assert_eq!(
        log.append_as_leader(&mut empty, 0)
            .unwrap_err()
            .kafka_error_code(),
        87
    );
    let mut truncated = batch_of(2, 10, 1);
    truncated.truncate(50);
    assert_eq!(
        log.append_as_leader(&mut truncated, 0)
            .unwrap_err()
            .kafka_error_code(),
        2
    );
    assert_eq!(log.size(), size_before);
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn batch_over_max_message_bytes_is_message_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            max_message_bytes: 500,
            ..cfg(1 << 20)
        },
    );
    let mut b = batch_of(1, 600, 1);
    assert_eq!(
        log.append_as_leader(&mut b, 0)
            .unwrap_err()
            .kafka_error_code(),
        10
    );
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn log_append_time_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..cfg(1 << 20)
        },
    );
    let mut b = batch_of(2, 10, 5);
    let info = log.append_as_leader(&mut b, 0).unwrap();
    assert!(info.log_append_time >= 1_600_000_000_000);
    let data = log.read(0, 1 << 20, None, true).unwrap();
    let h = batch::validate_batch(&data).unwrap();
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, info.log_append_time);
}

#[test]
fn read_starts_with_the_batch_containing_the_offset_and_returns_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(1 << 20));
    let mut sizes = Vec::new();
    for i in 0..10 {
        let mut b = batch_of(5, 100, i);
        sizes.push(b.len());
        log.append_as_leader(&mut b, 0).unwrap();
    }
    // Offset 12 lives in the third batch (10..=14).
    let data = log.read(12, sizes[2] + sizes[3] + 10, None, true).unwrap();
    let infos = batch::validate_batches(&data).unwrap();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].header.base_offset, 10);
    // max_bytes smaller than one batch: still one whole batch, or nothing without min_one.
    let one = log.read(12, 10, None, true).unwrap();
    assert_eq!(batch::validate_batches(&one).unwrap().len(), 1);
    assert!(log.read(12, 10, None, false).unwrap().is_empty());
    // Upper bound: only batches ending below offset 20.
    let bounded = log.read(0, 1 << 20, Some(20), true).unwrap();
    let infos = batch::validate_batches(&bounded).unwrap();
    assert_eq!(infos.last().unwrap().header.last_offset(), 19);
    assert!(log.read(20, 1 << 20, Some(20), true).unwrap().is_empty());
    // Out of range.
    assert_eq!(
        log.read(51, 100, None, true)
            .unwrap_err()
            .kafka_error_code(),
        1
    );
    assert!(log.read(50, 100, None, true).unwrap().is_empty());
}

#[test]
fn list_offsets_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(4096));
    for i in 0..50i64 {
        let mut b = batch_of(2, 200, 1000 + i * 10);
        log.append_as_leader(&mut b, 3).unwrap();
    }
    assert!(log.num_segments() > 3);
    let earliest = log
        .fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
        .unwrap()
        .unwrap();
    assert_eq!(earliest.offset, 0);
    let latest = log
        .fetch_offset_by_timestamp(LATEST_TIMESTAMP)
        .unwrap()
        .unwrap();
    assert_eq!((latest.offset, latest.leader_epoch), (100, Some(3)));
    // Batch i holds offsets 2i, 2i+1 with timestamp 1000 + 10 i.
    let t = log.fetch_offset_by_timestamp(1205).unwrap().unwrap();
    assert_eq!((t.offset, t.timestamp), (42, 1210));
    let exact = log.fetch_offset_by_timestamp(1200).unwrap().unwrap();
    assert_eq!(exact.offset, 40);
    assert_eq!(log.fetch_offset_by_timestamp(0).unwrap().unwrap().offset, 0);
    assert!(log.fetch_offset_by_timestamp(99_999).unwrap().is_none());
    let max = log
        .fetch_offset_by_timestamp(MAX_TIMESTAMP)
        .unwrap()
        .unwrap();
    assert_eq!((max.offset, max.timestamp), (98, 1490));
}

#[test]
fn retention_by_bytes_deletes_the_oldest_closed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            retention_bytes: 10_000,
            ..cfg(4096)
        },
    );
    for i in 0..40 {
        let mut b = batch_of(1, 900, i);
        log.append_as_leader(&mut b, 0).unwrap();
    }
    log.update_high_watermark(log.log_end_offset());
    let before = log.num_segments();
    let size_before = log.size();
    let n = log.delete_old_segments(now_ms()).unwrap();
    assert!(n > 0);
    assert_eq!(log.num_segments(), before - n);
    assert!(log.size() <= size_before);
    // What is left exceeds the limit by less than one segment.
    let first = log.segments().next().unwrap();
    assert!(log.size() as i64 - (first.size() as i64) < 10_000);
    assert_eq!(log.log_start_offset(), first.base_offset());
    // The deleted files are gone (delay 0) and reads below the start are out of range.
    let logs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count();
    assert_eq!(logs, log.num_segments());
    assert_eq!(
        log.read(0, 100, None, true).unwrap_err().kafka_error_code(),
        1
    );
}

#[test]
fn retention_by_time_uses_the_largest_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let now = now_ms();
    let mut log = open(
        dir.path(),
        LogConfig {
            retention_ms: 60_000,
            ..cfg(4096)
        },
    );
    for i in 0..20 {
        // The first 10 records are two hours old, the rest fresh.
        let ts = if i < 10 { now - 7_200_000 } else { now };
        let mut b = batch_of(1, 900, ts);
        log.append_as_leader(&mut b, 0).unwrap();
    }
    log.update_high_watermark(log.log_end_offset());
    log.delete_old_segments(now).unwrap();
    // Every segment whose newest record is old is gone; the first fresh record survives.
    let start = log.log_start_offset();
    assert!(start > 0 && start <= 10, "start {start}");
    let first = log.segments().next().unwrap();
    assert!(first.max_timestamp_so_far() >= now - 60_000);
    // Deletion waits for the high watermark.
    let dir2 = tempfile::tempdir().unwrap();
    let mut log2 = open(
        dir2.path(),
        LogConfig {
            retention_ms: 60_000,
            ..cfg(4096)
        },
    );
    for _ in 0..10 {
        let mut b = batch_of(1, 900, now - 7_200_000);
        log2.append_as_leader(&mut b, 0).unwrap();
    }
    assert_eq!(log2.delete_old_segments(now).unwrap(), 0);
}

#[test]
fn delete_records_advances_the_log_start_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(4096));
    for i in 0..20 {
        let mut b = batch_of(1, 900, i);
        log.append_as_leader(&mut b, 0).unwrap();
    }
    log.update_high_watermark(15);
    assert_eq!(
        log.delete_records_before(16)
            .unwrap_err()
            .kafka_error_code(),
        1
    );
    assert_eq!(log.delete_records_before(11).unwrap(), 11);
    assert_eq!(log.log_start_offset(), 11);
    assert!(log.segments().next().unwrap().base_offset() <= 11);
    assert_eq!(
        log.read(10, 100, None, true)
            .unwrap_err()
            .kafka_error_code(),
        1
    );
    assert_eq!(
        log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
            .unwrap()
            .unwrap()
            .offset,
        11
    );
}

#[test]
fn truncate_to_the_log_end_drops_epochs_that_start_there_and_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(1 << 20));
    let mut b = batch_of(3, 10, 1000);
    log.append_as_leader(&mut b, 1).unwrap();
    // An epoch this replica led without writing a batch starts at the log end.
    log.epoch_cache_mut().assign(2, 3).unwrap();
    assert!(!log.truncate_to(3).unwrap(), "no record is removed");
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.epoch_cache().entries(), &[(1, 0)]);
    let again = LeaderEpochFileCache::load(dir.path()).unwrap();
    assert_eq!(
        again.entries(),
        &[(1, 0)],
        "the checkpoint is rewritten too"
    );
    assert_eq!(read_all(&log, 1 << 20).len(), 3);
}

#[test]
fn truncate_to_removes_the_tail_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(4096));
    for i in 0..30 {
        let mut b = batch_of(1, 900, i);
        log.append_as_leader(&mut b, i as i32 / 10).unwrap();
    }
    log.update_high_watermark(30);
    assert!(log.truncate_to(7).unwrap());
    assert_eq!(log.log_end_offset(), 7);
    assert_eq!(log.high_watermark(), 7);
    assert_eq!(log.epoch_cache().entries(), &[(0, 0)]);
    let mut b = batch_of(1, 900, 99);
    assert_eq!(log.append_as_leader(&mut b, 4).unwrap().first_offset, 7);
    assert_eq!(read_all(&log, 1 << 20).len(), 8);
    // The active segment is preallocated again.
    assert_eq!(
        log.segments().last().unwrap().offset_index().file_len(),
        10 * 1024 * 1024
    );
}

#[test]
fn follower_append_keeps_offsets_and_refuses_going_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = open(&dir.path().join("l"), cfg(1 << 20));
    let mut follower = open(&dir.path().join("f"), cfg(1 << 20));
    for i in 0..5 {
        let mut b = batch_of(2, 10, i);
        leader.append_as_leader(&mut b, 7).unwrap();
    }
    let data = leader.read(0, 1 << 20, None, true).unwrap();
    let info = follower.append_as_follower(&data).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 9));
    assert_eq!(follower.epoch_cache().entries(), &[(7, 0)]);
    assert!(follower.append_as_follower(&data).is_err());
}

#[test]
fn reopen_after_clean_close_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), cfg(4096));
    for i in 0..30 {
        let mut b = batch_of(2, 500, 100 + i);
        log.append_as_leader(&mut b, 1).unwrap();
    }
    let before = read_all(&log, 3000);
    let segs = log.num_segments();
    log.close().unwrap();
    drop(log);
    let params = LoadParams {
        recovery_point: 60,
        had_clean_shutdown: true,
        ..Default::default()
    };
    let log = Log::open(dir.path(), TopicPartition::new("t", 0), cfg(4096), params).unwrap();
    assert_eq!(log.num_segments(), segs);
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(read_all(&log, 3000), before);
    assert_eq!(
        log.segments().last().unwrap().offset_index().file_len(),
        10 * 1024 * 1024
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn round_trip_across_rolls(
        batches in proptest::collection::vec((1usize..8, 1usize..700), 1..60),
        segment_bytes in 1024u64..16_384,
        fetch in 100usize..20_000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig { index_interval_bytes: 512, ..cfg(segment_bytes) });
        let mut expect = Vec::new();
        for (i, (n, len)) in batches.iter().enumerate() {
            let mut b = batch_of(*n, *len, 10_000 + i as i64);
            let info = log.append_as_leader(&mut b, 0).unwrap();
            for o in info.first_offset..=info.last_offset {
                expect.push((o, 10_000 + i as i64));
            }
        }
        prop_assert_eq!(read_all(&log, fetch), expect.clone());
        // Each segment's index lookups agree with a linear scan of its batches.
        for seg in log.segments() {
            seg.sanity_check().unwrap();
            for o in seg.base_offset()..seg.next_offset() {
                let (pos, h) = seg.translate_offset(o).unwrap().unwrap();
                prop_assert!(h.base_offset <= o && o <= h.last_offset());
                prop_assert!(pos < seg.size());
            }
        }
        // Reopen without a clean shutdown: recovery rebuilds the same log.
        let names: Vec<_> = log.segments().map(|s| s.base_offset()).collect();
        drop(log);
        let log = Log::open(dir.path(), TopicPartition::new("t", 0), cfg(segment_bytes), LoadParams::default()).unwrap();
        prop_assert_eq!(log.segments().map(|s| s.base_offset()).collect::<Vec<_>>(), names);
        prop_assert_eq!(read_all(&log, fetch), expect);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// A read from any offset, mid-batch included, returns the batch holding it and the whole
    /// batches after it that fit, as a linear scan of the segment finds them: with a sparse
    /// index and small fetches the wanted batch lies past what one read covers.
    #[test]
    fn reads_from_any_offset_match_a_linear_scan(
        batches in proptest::collection::vec((1usize..8, 1usize..3000), 1..40),
        index_interval in prop_oneof![Just(0u64), Just(4096u64), Just(1u64 << 20)],
        fetch in 1usize..12_000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig { index_interval_bytes: index_interval, ..cfg(1 << 30) });
        // (base offset, last offset, size) of every batch, in log order.
        let mut scan = Vec::new();
        for (i, (n, len)) in batches.iter().enumerate() {
            let mut b = batch_of(*n, *len, 10_000 + i as i64);
            let info = log.append_as_leader(&mut b, 0).unwrap();
            scan.push((info.first_offset, info.last_offset, b.len()));
        }
        for o in 0..log.log_end_offset() {
            let data = log.read(o, fetch, None, true).unwrap();
            let first = scan.iter().position(|b| b.0 <= o && o <= b.1).unwrap();
            let mut want = 0;
            let mut expect = Vec::new();
            for (k, b) in scan[first..].iter().enumerate() {
                if k > 0 && want + b.2 > fetch {
                    break;
                }
                want += b.2;
                expect.push(b.0);
            }
            let got: Vec<i64> = batch::validate_batches(&data)
                .unwrap()
                .iter()
                .map(|i| i.header.base_offset)
                .collect();
            prop_assert_eq!(got, expect, "read at offset {}", o);
        }
    }
}

#[test]
fn a_read_finds_a_batch_beyond_its_first_read() {
    // No index entries (interval larger than the log): every read walks from position 0, and
    // the last batches lie past the first read's max_bytes + lookahead.
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            index_interval_bytes: 1 << 30,
            ..cfg(1 << 30)
        },
    );
    for i in 0..250 {
        let mut b = batch_of(1, 10_000, i);
        log.append_as_leader(&mut b, 0).unwrap();
    }
    assert!(log.size() > (1 << 21));
    for o in [0, 150, 249] {
        let data = log.read(o, 100, None, true).unwrap();
        let infos = batch::validate_batches(&data).unwrap();
        assert_eq!(infos.len(), 1, "one whole batch, over max_bytes");
        assert_eq!(infos[0].header.base_offset, o);
    }
    assert!(log.read(249, 100, None, false).unwrap().is_empty());
}

#[test]
fn segment_ms_rolls_by_record_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        LogConfig {
            segment_ms: 1000,
            ..cfg(1 << 30)
        },
    );
    let mut b = batch_of(1, 10, 10_000);
    log.append_as_leader(&mut b, 0).unwrap();
    let mut b = batch_of(1, 10, 10_900);
    log.append_as_leader(&mut b, 0).unwrap();
    assert_eq!(
        log.num_segments(),
        1,
        "within segment.ms of the first batch"
    );
    let mut b = batch_of(1, 10, 11_500);
    log.append_as_leader(&mut b, 0).unwrap();
    assert_eq!(log.num_segments(), 2, "past segment.ms: a new segment");
    assert_eq!(log.segments().last().unwrap().base_offset(), 2);
}

#[test]
fn a_full_offset_index_rolls_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    // Room for two index entries; an entry per batch after the first.
    let mut log = open(
        dir.path(),
        LogConfig {
            segment_index_bytes: 16,
            index_interval_bytes: 0,
            ..cfg(1 << 30)
        },
    );
    for i in 0..4 {
        let mut b = batch_of(1, 10, i);
        log.append_as_leader(&mut b, 0).unwrap();
    }
    assert!(log.num_segments() >= 2, "{} segments", log.num_segments());
}

#[test]
fn write_behind_advances_only_with_a_flush_policy() {
    // 40 batches of ~16 KiB: about 650 KiB, past two write-behind steps.
    let append_650_kib = |log: &mut Log| {
        for _ in 0..40 {
            log.append_as_leader(&mut batch_of(16, 1000, 1000), 0)
                .unwrap();
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let mut os_flushed = open(&dir.path().join("a"), cfg(1 << 30));
    append_650_kib(&mut os_flushed);
    assert_eq!(os_flushed.active().written_behind(), 0, "the OS decides");

    let with_policy = LogConfig {
        flush_ms: 60_000,
        ..cfg(1 << 30)
    };
    let mut log = open(&dir.path().join("b"), with_policy);
    append_650_kib(&mut log);
    let size = log.active().size();
    let behind = log.active().written_behind();
    assert_eq!(behind % 4096, 0, "whole pages only");
    assert!(
        behind >= 2 * WRITE_BEHIND_BYTES && behind <= size,
        "written behind {behind} of {size}"
    );
    assert!(
        size - behind < WRITE_BEHIND_BYTES + 4096,
        "at most a step left"
    );

    // A truncation below it pulls it back; appends then go on from there.
    log.truncate_to(3 * 16).unwrap();
    assert!(log.active().written_behind() <= log.active().size());
    append_650_kib(&mut log);
    assert_eq!(log.log_end_offset(), 43 * 16);
    let offsets: Vec<i64> = read_all(&log, 1 << 20).iter().map(|r| r.0).collect();
    assert_eq!(offsets, (0..43 * 16).collect::<Vec<i64>>());
}

#[test]
fn a_leader_refuses_a_keyless_record_on_a_compacted_log_and_a_follower_takes_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let compact = LogConfig {
        cleanup_policy: "compact".into(),
        ..cfg(1 << 20)
    };
    let mut log = open(&dir.path().join("l"), compact.clone());
    let mut keyed = build_batch(&[(Some(b"k".as_slice()), Some(b"v".as_slice()))], 1000);
    log.append_as_leader(&mut keyed, 0).unwrap();
    let mut mixed = build_batch(
        &[
            (Some(b"k".as_slice()), Some(b"v".as_slice())),
            (None, Some(b"v".as_slice())),
        ],
        1000,
    );
    match log.append_as_leader(&mut mixed, 0) {
        Err(StorageError::RecordErrors(e)) => {
            assert_eq!(e.len(), 1);
            assert_eq!(e[0].batch_index, 1);
            assert_eq!(
                e[0].message,
                "Compacted topic cannot accept message without key in topic partition t-0"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((log.log_end_offset(), log.size()), (1, keyed.len() as u64));
    // A log that was `delete` when the leader wrote the batch: its follower copies it as is.
    let mut leader = open(&dir.path().join("old"), cfg(1 << 20));
    leader.append_as_leader(&mut mixed, 0).unwrap();
    let data = leader.read(0, 1 << 20, None, true).unwrap();
    let mut follower = open(&dir.path().join("f"), compact);
    assert_eq!(follower.append_as_follower(&data).unwrap().last_offset, 1);
}
