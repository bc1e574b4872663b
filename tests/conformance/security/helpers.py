"""kafka-python over SASL for the security tier: clients as a given user, ACLs as admin."""
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         KafkaAdminClient, NewTopic, ResourcePattern, ResourceType)

from conftest import sasl_config


def admin_client(cfg):
    return KafkaAdminClient(request_timeout_ms=15000, **cfg)


def create_topic(cfg, topic, partitions=1):
    adm = admin_client(cfg)
    try:
        adm.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        adm.close()


def allow(cfg, principal, operations, resource_type, name,
          pattern=ACLResourcePatternType.LITERAL):
    """Create ALLOW ACLs (host *) with kafka-python's CreateAcls as the given (admin) user."""
    acls = [ACL(principal, "*", op, ACLPermissionType.ALLOW,
                ResourcePattern(resource_type, name, pattern)) for op in operations]
    adm = admin_client(cfg)
    try:
        result = adm.create_acls(acls)
    finally:
        adm.close()
    assert not result.get("failed"), "CreateAcls failed: %r" % (result,)


def producer(cfg, **kw):
    return KafkaProducer(acks="all", linger_ms=0, request_timeout_ms=10000, max_block_ms=10000,
                         retries=0, **cfg, **kw)


def produce(cfg, topic, values):
    """Send each value and wait for its ack; returns the RecordMetadata list (raises the
    first send's error)."""
    p = producer(cfg)
    try:
        return [p.send(topic, v).get(timeout=15) for v in values]
    finally:
        p.close(timeout=2)


def read_all(cfg, topic, n, timeout=10.0):
    """Up to n records of partition 0 from the beginning (assign, no group)."""
    c = KafkaConsumer(enable_auto_commit=False, request_timeout_ms=15000, **cfg)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.time() + timeout
        while len(got) < n and time.time() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        return got
    finally:
        c.close()


def end_offset(cfg, topic):
    c = KafkaConsumer(enable_auto_commit=False, request_timeout_ms=15000, **cfg)
    try:
        tp = TopicPartition(topic, 0)
        return c.end_offsets([tp])[tp]
    finally:
        c.close()


__all__ = ["ACLOperation", "ACLResourcePatternType", "ResourceType", "sasl_config",
           "admin_client", "create_topic", "allow", "producer", "produce", "read_all",
           "end_offset"]
