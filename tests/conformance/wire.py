"""Raw Kafka protocol over a socket, for requests no client library sends as a test needs."""
import socket
import struct
import time

import cclient


def string(s):
    """A non-null STRING: int16 length, then UTF-8 bytes."""
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class Reader:
    """Reads big-endian fields from a response body in order."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def skip(self, n):
        self.pos += max(n, 0)

    def string(self):
        n = self.take(">h")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def topic_metadata(bootstrap, topic, ready, timeout=20):
    """Metadata (confluent-kafka's ClusterMetadata) once `ready(topic metadata)` holds, or the
    last answer after `timeout` s: a broker may learn of a new topic a moment after the one that
    created it."""
    adm = cclient.admin(bootstrap)
    deadline = time.time() + timeout
    while True:
        md = adm.list_topics(topic=topic, timeout=15)
        tmd = md.topics.get(topic)
        if (tmd is not None and ready(tmd)) or time.time() > deadline:
            return md
        time.sleep(0.2)


def address(md, node_id):
    broker = md.brokers[node_id]
    return "%s:%d" % (broker.host, broker.port)


def leader_address(bootstrap, topic, partition):
    """HOST:PORT of the partition's leader (Metadata); on a cluster only the leader answers
    ListOffsets without NOT_LEADER_OR_FOLLOWER."""
    md = topic_metadata(bootstrap, topic, lambda t: partition in t.partitions, timeout=15)
    return address(md, md.topics[topic].partitions[partition].leader)


def call(address, request_bytes, timeout=10.0):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request_bytes)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            assert chunk, "the broker closed the connection without a response"
            head += chunk
        size = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            assert chunk, "the broker closed the connection in the middle of a response"
            data += chunk
        return data
