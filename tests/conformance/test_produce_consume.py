import time

from kafka import TopicPartition

import kclient
from partitioner import java_partition, murmur2


def test_murmur2_java_vectors():
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482


def test_keyed_produce_lands_on_murmur2_partition(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 3)
    keys = [("key-%d" % i).encode() for i in range(30)]
    p = kclient.producer(bootstrap)
    try:
        futures = [(k, p.send(topic_name, key=k, value=b"value-" + k)) for k in keys]
        p.flush(timeout=30)
        metas = [(k, f.get(timeout=30)) for k, f in futures]
    finally:
        p.close(timeout=10)
    for k, md in metas:
        assert md.partition == java_partition(k, 3), (k, md)
    assert {md.partition for _, md in metas} == {0, 1, 2}

    recs = kclient.read_all(bootstrap, topic_name, [0, 1, 2], len(keys))
    assert len(recs) == len(keys), "read %d of %d records" % (len(recs), len(keys))
    for r in recs:
        assert r.partition == java_partition(r.key, 3), r
        assert r.value == b"value-" + r.key
    # per partition the offsets are 0..n-1 in send order
    for part in range(3):
        sent = [k for k, md in metas if md.partition == part]
        got = [r for r in recs if r.partition == part]
        assert [r.key for r in got] == sent
        assert [r.offset for r in got] == list(range(len(sent)))


def test_keyless_produce_consume(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1)
    values = [b"keyless-%d" % i for i in range(20)]
    p = kclient.producer(bootstrap)
    try:
        fs = [p.send(topic_name, value=v) for v in values]
        p.flush(timeout=30)
        metas = [f.get(timeout=30) for f in fs]
    finally:
        p.close(timeout=10)
    assert [m.offset for m in metas] == list(range(len(values)))
    recs = kclient.read_all(bootstrap, topic_name, [0], len(values))
    assert [r.value for r in recs] == values
    assert all(r.key is None for r in recs)


def test_consumer_at_end_sees_only_new_records(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1)
    p = kclient.producer(bootstrap)
    try:
        for i in range(5):
            p.send(topic_name, value=b"old-%d" % i)
        p.flush(timeout=30)

        c = kclient.consumer(bootstrap, auto_offset_reset="latest")
        try:
            tp = TopicPartition(topic_name, 0)
            c.assign([tp])
            c.seek_to_end(tp)
            assert c.position(tp) == 5
            assert kclient.poll_n(c, 1, timeout=2.0) == []
            for i in range(3):
                p.send(topic_name, value=b"new-%d" % i)
            p.flush(timeout=30)
            recs = kclient.poll_n(c, 3)
            assert [r.value for r in recs] == [b"new-0", b"new-1", b"new-2"]
            assert [r.offset for r in recs] == [5, 6, 7]
        finally:
            c.close()
    finally:
        p.close(timeout=10)
