"""Incremental fetch sessions (KIP-227) on the wire, Fetch v7: a full fetch at epoch 0 opens a
session; incremental fetches answer only partitions that changed; a repeated epoch, an unknown
session and a closed session are refused; forgotten partitions leave the session."""
import struct
import time

import kclient
from wire import Reader, address, call, string, topic_metadata

FETCH = 1
VERSION = 7
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


def encode_fetch(correlation_id, session_id, epoch, topic, parts, forget=(), max_wait_ms=0):
    """Fetch v7 (request header v1): `parts` are (partition, fetch offset)."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, 50 << 20, 0)  # consumer, read_uncommitted
    body += struct.pack(">ii", session_id, epoch)
    if parts:
        body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(parts))
        for partition, offset in parts:
            body += struct.pack(">iqqi", partition, offset, -1, 1 << 20)
    else:
        body += struct.pack(">i", 0)
    if forget:
        body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(forget))
        body += b"".join(struct.pack(">i", p) for p in forget)
    else:
        body += struct.pack(">i", 0)
    header = struct.pack(">hhi", FETCH, VERSION, correlation_id) + string("conformance")
    return struct.pack(">i", len(header) + len(body)) + header + body


def decode_fetch(data):
    """-> (correlation_id, error_code, session_id, [(partition, error, high watermark, bytes)])"""
    r = Reader(data)
    correlation_id, _throttle, error, session_id = r.take(">iihi")
    parts = []
    for _ in range(r.take(">i")):
        r.string()                                              # topic name
        for _ in range(r.take(">i")):
            partition, perr, hw, _lso, _start = r.take(">ihqqq")
            r.skip(16 * r.take(">i"))                           # aborted transactions
            size = r.take(">i")
            r.skip(size)
            parts.append((partition, perr, hw, max(size, 0)))
    return correlation_id, error, session_id, parts


class Session:
    """Fetches against one broker with increasing correlation ids."""

    def __init__(self, address, topic):
        self.address, self.topic, self.cid = address, topic, 100

    def fetch(self, session_id, epoch, parts=(), forget=(), max_wait_ms=0):
        self.cid += 1
        got = decode_fetch(call(self.address, encode_fetch(
            self.cid, session_id, epoch, self.topic, parts, forget, max_wait_ms)))
        assert got[0] == self.cid, got
        return got[1:]


def leader_and_partitions(bootstrap, topic, n):
    """The leader of partition 0 and the first `n` partitions it leads (one broker: all)."""
    md = topic_metadata(bootstrap, topic, lambda t: t.partitions and all(
        p.leader >= 0 for p in t.partitions.values()))
    tmd = md.topics[topic]
    leader = tmd.partitions[0].leader
    mine = sorted(p for p, pm in tmd.partitions.items() if pm.leader == leader)[:n]
    return address(md, leader), mine


def produce(bootstrap, topic, partitions):
    p = kclient.producer(bootstrap)
    try:
        for partition in partitions:
            p.send(topic, value=b"v", partition=partition)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)


def test_incremental_fetch_session(bootstrap, topic_name, make_topic):
    # 9 partitions, so that on 3 brokers one still leads three of them.
    make_topic(topic_name, 9)
    address, (a, b, c) = leader_and_partitions(bootstrap, topic_name, 3)
    s = Session(address, topic_name)
    everything = [(a, 0), (b, 0), (c, 0)]

    # Full fetch at epoch 0: a new session id and every partition (a new leader may need a moment).
    deadline = time.time() + 20
    while True:
        error, sid, parts = s.fetch(0, 0, everything)
        if all(p[1] == 0 for p in parts) or time.time() > deadline:
            break
        time.sleep(0.3)
    assert error == 0
    assert sid != 0
    assert [(p[0], p[1], p[2]) for p in parts] == [(a, 0, 0), (b, 0, 0), (c, 0, 0)]

    # A record on b: the incremental fetch answers b alone, with the record.
    produce(bootstrap, topic_name, [b])
    error, got_sid, parts = s.fetch(sid, 1, max_wait_ms=5000)
    assert (error, got_sid) == (0, sid)
    assert [(p[0], p[2]) for p in parts] == [(b, 1)]
    assert parts[0][3] > 0

    # b moves on to offset 1: nothing is new, so no partition is answered.
    error, _, parts = s.fetch(sid, 2, [(b, 1)], max_wait_ms=200)
    assert (error, parts) == (0, [])

    # The same epoch again (a duplicate or stale request) is refused.
    error, got_sid, parts = s.fetch(sid, 2)
    assert (error, got_sid, parts) == (INVALID_FETCH_SESSION_EPOCH, 0, [])

    # Forget a; then records on a and c show only on c.
    error, _, _ = s.fetch(sid, 3, forget=[a])
    assert error == 0
    produce(bootstrap, topic_name, [a, c])
    error, _, parts = s.fetch(sid, 4, max_wait_ms=5000)
    assert error == 0
    assert [p[0] for p in parts] == [c]

    # Epoch -1 closes the session: a sessionless answer, and the session is gone.
    error, got_sid, parts = s.fetch(sid, -1, everything)
    assert (error, got_sid) == (0, 0)
    assert [p[0] for p in parts] == [a, b, c]
    error, got_sid, _ = s.fetch(sid, 5)
    assert (error, got_sid) == (FETCH_SESSION_ID_NOT_FOUND, 0)
