"""Log compaction against the reference: 100,000 keyed updates over 1,000 keys on a compacted
topic with small segments; once the cleaner has run, a consumer from the beginning gets each
key's latest value and nothing older, the partition holds a few segments, and Kafka's own
kafka-dump-log decodes the cleaned segments.

Kafka 4.1 refuses segment.bytes below 1 MiB, so the segments are 1 MiB and the values ~200 bytes
(about 22 segments of updates). The cleaner runs every log.cleaner.backoff.ms when it has nothing
to do; tests/conformance/run gives both targets 1 s instead of Kafka's 15 s, and the deadlines
here leave room for the default too.
"""
import os
import re
import time

import pytest
from kafka import KafkaProducer, TopicPartition

import kclient
from conftest import run_tool

KEYS = 1000
ROUNDS = 100
SEGMENT_BYTES = 1 << 20
# One key in a hundred ends with a tombstone: kept by both (delete.retention.ms is a day).
TOMBSTONE_EVERY = 100
FILLER_KEY = b"~filler"
FILLER_VALUE_BYTES = 10_000
CLEAN_DEADLINE_S = 90
MAX_SEGMENTS = 8


def key(k):
    return b"key-%04d" % k


def value(k, r):
    head = b"key-%04d-round-%03d-" % (k, r)
    return head + b"x" * (200 - len(head))


def latest_table():
    """key -> latest value (None for a tombstone) after all rounds."""
    last = ROUNDS - 1
    return {key(k): (None if k % TOMBSTONE_EVERY == 7 else value(k, last)) for k in range(KEYS)}


def produce(bootstrap, topic, records):
    """Sends (key, value) pairs in order; returns the offsets the broker assigned."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                      batch_size=64 * 1024, request_timeout_ms=30000, max_block_ms=30000)
    try:
        futures = [p.send(topic, key=k, value=v, partition=0) for k, v in records]
        p.flush(timeout=120)
        return [f.get(timeout=30).offset for f in futures]
    finally:
        p.close(timeout=10)


def filler(count):
    return [(FILLER_KEY, b"%08d" % i + b"f" * (FILLER_VALUE_BYTES - 8)) for i in range(count)]


def partition_dir(data_dir, topic):
    """(the log directory holding partition 0 of topic, the partition's directory)."""
    dirs = [d for d in data_dir.split(os.pathsep) if d]
    deadline = time.time() + 10
    while time.time() < deadline:
        for d in dirs:
            p = os.path.join(d, "%s-0" % topic)
            if os.path.isdir(p):
                return d, p
        time.sleep(0.2)
    pytest.fail("no directory %s-0 in %s" % (topic, dirs))


def cleaner_checkpoint(log_dir, topic):
    """The first dirty offset of partition 0 in the log dir's cleaner-offset-checkpoint."""
    try:
        with open(os.path.join(log_dir, "cleaner-offset-checkpoint")) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return None
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return None


def wait_cleaned_past(log_dir, topic, offset, what):
    """Waits until the cleaner's checkpoint says the log was cleaned beyond `offset`."""
    deadline = time.time() + CLEAN_DEADLINE_S
    got = None
    while time.time() < deadline:
        got = cleaner_checkpoint(log_dir, topic)
        if got is not None and got > offset:
            return got
        time.sleep(0.25)
    pytest.fail("%s: the cleaner-offset-checkpoint of %s-0 is %s after %d s, not past %d"
                % (what, topic, got, CLEAN_DEADLINE_S, offset))


def segments(part_dir):
    return sorted(f for f in os.listdir(part_dir) if f.endswith(".log"))


def read_from_start(bootstrap, topic, end_offset, timeout=60.0):
    """Every record of partition 0 below end_offset, read from the beginning."""
    c = kclient.consumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=1 << 20)
    tp = TopicPartition(topic, 0)
    got = []
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.time() + timeout
        while time.time() < deadline and c.position(tp) < end_offset:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(r for r in recs if r.offset < end_offset)
    finally:
        c.close()
    return got


RECORD_LINE = re.compile(r"^\| offset: (\d+) .*? key: (\S+)(?: payload: (.*))?$")


def test_compacted_topic_keeps_latest_value_per_key_in_few_segments(bootstrap, data_dir,
                                                                     topic_name, make_topic):
    if not data_dir:
        pytest.skip("the compaction scenario reads the log directory: pass --data-dir DIR")
    make_topic(topic_name, 1, configs=("cleanup.policy=compact",
                                       "segment.bytes=%d" % SEGMENT_BYTES,
                                       "min.cleanable.dirty.ratio=0.01"))
    table = latest_table()
    updates = [(key(k), value(k, r) if r < ROUNDS - 1 else table[key(k)])
               for r in range(ROUNDS) for k in range(KEYS)]
    # The updates, then more than a segment of one filler key, so that the last update is in a
    # closed segment (the active one is never cleaned).
    filler_records = filler(SEGMENT_BYTES // FILLER_VALUE_BYTES + 10)
    offsets = produce(bootstrap, topic_name, updates + filler_records)
    last_update = offsets[len(updates) - 1]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    log_dir, part_dir = partition_dir(data_dir, topic_name)
    # About 22 MiB of updates in 1 MiB segments (fewer if a clean already merged some).
    before = len(segments(part_dir))

    # First clean: every update is below the cleaner's checkpoint.
    wait_cleaned_past(log_dir, topic_name, last_update, "first clean")
    # A cleaning groups segments by their sizes before it (Kafka's groupSegmentsBySize), so the
    # first one leaves as many segments as it found; the next one, after more dirty data,
    # merges the small cleaned ones.
    second = produce(bootstrap, topic_name, filler(SEGMENT_BYTES // FILLER_VALUE_BYTES + 10))
    checkpoint = wait_cleaned_past(log_dir, topic_name, second[0], "second clean")

    # A consumer from the beginning: each key once, with its latest value, at the offset it
    # was written at; nothing older.
    records = read_from_start(bootstrap, topic_name, checkpoint)
    got_offsets = [r.offset for r in records]
    assert got_offsets == sorted(got_offsets) and len(set(got_offsets)) == len(got_offsets)
    keyed = [r for r in records if r.key != FILLER_KEY]
    seen = {}
    for r in keyed:
        assert r.key not in seen, "key %r read twice: offsets %d and %d" % (
            r.key, seen[r.key][0], r.offset)
        seen[r.key] = (r.offset, r.value)
    assert {k: v for k, (_o, v) in seen.items()} == table
    final_offset = {k: offsets[(ROUNDS - 1) * KEYS + i] for i, k in enumerate(sorted(table))}
    assert {k: o for k, (o, _v) in seen.items()} == final_offset, "latest records keep their offsets"
    fillers = [r for r in records if r.key == FILLER_KEY]
    assert len(fillers) == 1 and fillers[0].offset == max(f for f in second if f < checkpoint), \
        "the filler key below the checkpoint is its latest record there: %s" % (
            [r.offset for r in fillers],)

    after = segments(part_dir)
    assert len(after) <= MAX_SEGMENTS, "%d segments before cleaning, %d after: %s" % (
        before, len(after), after)

    # Kafka's own kafka-dump-log reads the cleaned segments (every closed one: all of them are
    # below the checkpoint), every batch valid, and they hold exactly the table above.
    closed = [os.path.join(part_dir, f) for f in after[:-1]]
    assert closed
    rc, out, err = run_tool("kafka-dump-log", "--files", ",".join(closed), "--print-data-log")
    assert rc == 0, "kafka-dump-log failed (rc=%s): %s %s" % (rc, out[-2000:], err[-2000:])
    for path in closed:
        assert "Dumping %s" % path in out, out[-2000:]
    assert "isvalid: false" not in out
    assert out.count("isvalid: true") > 0, out[-2000:]
    dumped = {}
    for line in out.splitlines():
        m = RECORD_LINE.match(line)
        if not m or m.group(2).encode() == FILLER_KEY:
            continue
        k = m.group(2).encode()
        assert k not in dumped, "key %r twice in the cleaned segments" % k
        v = m.group(3)
        dumped[k] = (int(m.group(1)), None if v is None else v.encode())
    assert dumped == seen
