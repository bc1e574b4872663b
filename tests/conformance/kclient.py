"""kafka-python helpers shared by the conformance tests."""
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def producer(bootstrap, **kw):
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0,
                         request_timeout_ms=15000, max_block_ms=20000, **kw)


def consumer(bootstrap, **kw):
    kw.setdefault("enable_auto_commit", False)
    return KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000,
                         **kw)


def poll_n(cons, n, timeout=20.0):
    """Poll until n records arrived or the timeout passed; returns the records in order
    of arrival (per partition in offset order)."""
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        batch = cons.poll(timeout_ms=500)
        for _tp, recs in sorted(batch.items(), key=lambda kv: kv[0].partition):
            got.extend(recs)
    return got


def read_all(bootstrap, topic, partitions, n, timeout=20.0):
    """Read n records from the beginning of the given partitions (no group)."""
    c = consumer(bootstrap, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return poll_n(c, n, timeout)
    finally:
        c.close()
