"""confluent-kafka (librdkafka) helpers shared by the conformance tests."""
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def producer(bootstrap, **conf):
    """An acks=all producer; with Java's partitioner (librdkafka's default, consistent_random,
    hashes keys with CRC32 instead)."""
    c = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
         "partitioner": "murmur2_random", "message.timeout.ms": 20000}
    c.update(conf)
    return Producer(c)


def consumer(bootstrap, **conf):
    c = {"bootstrap.servers": bootstrap, "enable.auto.commit": False,
         "auto.offset.reset": "earliest", "session.timeout.ms": 10000}
    c.setdefault("group.id", "conf-unused-group")
    c.update(conf)
    return Consumer(c)


def produce_all(prod, topic, records, timeout=30.0):
    """Produce (key, value) pairs; returns the delivered messages in send order.
    A delivery error fails with the librdkafka error."""
    delivered = [None] * len(records)
    errors = []

    def on_delivery(index):
        def cb(err, msg):
            if err is not None:
                errors.append((index, err))
            delivered[index] = msg
        return cb

    for i, (key, value) in enumerate(records):
        prod.produce(topic, key=key, value=value, on_delivery=on_delivery(i))
        prod.poll(0)
    left = prod.flush(timeout)
    assert left == 0, "%d records still undelivered after %ss" % (left, timeout)
    assert not errors, "delivery failed: %s" % errors[:3]
    return delivered


def poll_n(cons, n, timeout=20.0):
    """Poll until n records arrived or the timeout passed; a record carrying an error fails."""
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        msg = cons.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, "consumer error: %s" % msg.error()
        got.append(msg)
    return got


def read_all(bootstrap, topic, partitions, n, timeout=20.0):
    """Read n records from the beginning of the given partitions (assign, no group use)."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        return poll_n(c, n, timeout)
    finally:
        c.close()
