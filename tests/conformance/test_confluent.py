"""Scenarios driven by confluent-kafka (librdkafka): AdminClient, Producer, Consumer."""
import time

from confluent_kafka import (ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             TopicPartition)
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

import cclient
from partitioner import java_partition


def create(adm, topic, partitions, config=None):
    """CreateTopics through the AdminClient; returns the exception of the topic's future or None."""
    futures = adm.create_topics([NewTopic(topic, num_partitions=partitions,
                                          replication_factor=1, config=config or {})],
                                operation_timeout=15, request_timeout=20)
    try:
        futures[topic].result(timeout=30)
        return None
    except KafkaException as e:
        return e


def test_admin_create_describe_topic_and_configs(bootstrap, topic_name):
    adm = cclient.admin(bootstrap)
    err = create(adm, topic_name, 3, {"retention.ms": "54321"})
    assert err is None, "create_topics failed: %s" % err

    # Metadata: three partitions, each with one replica, led by a broker of the cluster. On
    # several brokers a broker that did not take the create learns of the topic a moment later
    # (UNKNOWN_TOPIC_OR_PART until then), so ask until it is known, as clients do.
    deadline = time.time() + 15
    while True:
        md = adm.list_topics(topic=topic_name, timeout=15)
        tmd = md.topics.get(topic_name)
        if (tmd is not None and tmd.error is None) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert topic_name in md.topics, sorted(md.topics)
    assert tmd.error is None, tmd.error
    assert sorted(tmd.partitions) == [0, 1, 2]
    for p in tmd.partitions.values():
        assert p.error is None, p.error
        assert p.leader in md.brokers, (p.leader, md.brokers)
        assert p.replicas == [p.leader] and p.isrs == [p.leader], p

    # A second create of the same name fails with TOPIC_ALREADY_EXISTS (error 36).
    err = create(adm, topic_name, 3)
    assert err is not None, "creating an existing topic succeeded"
    assert err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, err

    # DescribeConfigs: the config given at create time is a dynamic topic config; an untouched
    # one reports its default.
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = adm.describe_configs([res], request_timeout=20)[res].result(timeout=30)
    retention = configs["retention.ms"]
    assert retention.value == "54321", retention
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, retention
    assert not retention.is_default, retention
    policy = configs["cleanup.policy"]
    assert policy.value == "delete", policy
    assert policy.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, policy


def test_producer_murmur2_random_keys_land_on_java_partition(bootstrap, topic_name, make_topic):
    partitions = 4
    make_topic(topic_name, partitions)
    records = [(("ck-%d" % i).encode(), ("cv-%d" % i).encode()) for i in range(40)]
    prod = cclient.producer(bootstrap)
    delivered = cclient.produce_all(prod, topic_name, records)

    for (key, _), msg in zip(records, delivered):
        assert msg.partition() == java_partition(key, partitions), (key, msg.partition())
    assert {m.partition() for m in delivered} == set(range(partitions))
    # Per partition, the produce responses give offsets 0..n-1 in send order.
    for part in range(partitions):
        offsets = [m.offset() for m in delivered if m.partition() == part]
        assert offsets == list(range(len(offsets))), (part, offsets)

    got = cclient.read_all(bootstrap, topic_name, range(partitions), len(records))
    assert len(got) == len(records), "read %d of %d" % (len(got), len(records))
    sent = {(m.partition(), m.offset()): kv for kv, m in zip(records, delivered)}
    for m in got:
        assert (m.key(), m.value()) == sent[(m.partition(), m.offset())], m


def test_consumer_group_commit_and_committed(bootstrap, topic_name, group_name, make_topic):
    make_topic(topic_name, 2)
    records = [(b"gk-%d" % i, b"gv-%d" % i) for i in range(12)]
    prod = cclient.producer(bootstrap)
    delivered = cclient.produce_all(prod, topic_name, records)
    ends = {p: sum(1 for m in delivered if m.partition() == p) for p in (0, 1)}
    assert all(ends.values()), ends  # both partitions hold records

    cons = cclient.consumer(bootstrap, **{"group.id": group_name})
    try:
        cons.subscribe([topic_name])
        got = cclient.poll_n(cons, len(records), timeout=30)
        assert len(got) == len(records), "consumed %d of %d" % (len(got), len(records))
        committed = cons.commit(asynchronous=False)
        assert {(tp.partition, tp.offset) for tp in committed} == set(ends.items()), committed
        back = cons.committed([TopicPartition(topic_name, p) for p in (0, 1)], timeout=15)
        assert {(tp.partition, tp.offset) for tp in back} == set(ends.items()), back
    finally:
        cons.close()

    # The committed offsets as the AdminClient sees them (OffsetFetch without membership).
    adm = cclient.admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group_name, [TopicPartition(topic_name, p) for p in (0, 1)])
    res = adm.list_consumer_group_offsets([req], request_timeout=20)[group_name].result(timeout=30)
    assert {(tp.partition, tp.offset) for tp in res.topic_partitions} == set(ends.items()), res

    # A new member of the group resumes from the committed offsets: it sees only new records.
    more = [(b"gk-new-%d" % i, b"gv-new-%d" % i) for i in range(4)]
    new_delivered = cclient.produce_all(prod, topic_name, more)
    cons = cclient.consumer(bootstrap, **{"group.id": group_name})
    try:
        cons.subscribe([topic_name])
        got = cclient.poll_n(cons, len(more), timeout=30)
        assert sorted((m.partition(), m.offset(), m.value()) for m in got) == \
            sorted((m.partition(), m.offset(), m.value()) for m in new_delivered)
        for m in got:
            assert m.offset() >= ends[m.partition()], m
    finally:
        cons.close()
