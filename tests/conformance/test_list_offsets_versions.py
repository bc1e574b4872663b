"""ListOffsets at the old, non-flexible versions 1-5 on the wire (what older librdkafka, e.g.
kcat 1.7 with librdkafka 2.0, sends). Kafka 4.1 serves ListOffsets 1-10."""
import struct

import pytest

import kclient
from wire import Reader, call, leader_address, string

LIST_OFFSETS = 2
EARLIEST, LATEST = -2, -1


def encode_request(version, correlation_id, topic, partition, timestamp):
    """ListOffsets request v1-v5, request header v1."""
    body = struct.pack(">i", -1)                     # replica_id: a consumer
    if version >= 2:
        body += struct.pack(">b", 0)                 # isolation_level: read_uncommitted
    body += struct.pack(">i", 1) + string(topic)     # one topic
    body += struct.pack(">ii", 1, partition)         # one partition
    if version >= 4:
        body += struct.pack(">i", -1)                # current_leader_epoch: unknown
    body += struct.pack(">q", timestamp)
    header = struct.pack(">hhi", LIST_OFFSETS, version, correlation_id) + string("conformance")
    return struct.pack(">i", len(header) + len(body)) + header + body


def decode_response(version, data):
    """-> (correlation_id, topic, partition, error_code, timestamp, offset) of the one partition."""
    r = Reader(data)
    correlation_id = r.take(">i")
    if version >= 2:
        r.take(">i")                                 # throttle_time_ms
    assert r.take(">i") == 1
    name = r.string()
    assert r.take(">i") == 1
    partition, error_code, timestamp, offset = r.take(">ihqq")
    return correlation_id, name, partition, error_code, timestamp, offset


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_list_offsets_old_versions(request, bootstrap, topic_name, make_topic, version):
    make_topic(topic_name, 1)
    p = kclient.producer(bootstrap)
    try:
        for i in range(3):
            p.send(topic_name, value=b"v-%d" % i)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)
    leader = leader_address(bootstrap, topic_name, 0)
    for correlation_id, timestamp, want in ((11, EARLIEST, 0), (12, LATEST, 3)):
        data = call(leader, encode_request(version, correlation_id, topic_name, 0, timestamp))
        got = decode_response(version, data)
        assert got[:4] == (correlation_id, topic_name, 0, 0), got
        assert got[5] == want, got
