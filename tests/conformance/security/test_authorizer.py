"""What alice (SCRAM, no super user) may do under the StandardAuthorizer with
allow.everyone.if.no.acl.found=false: produce, consume, metadata, create topics and ACLs."""
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import (GroupAuthorizationFailedError, TopicAuthorizationFailedError)

from conftest import eventually, ok, run_tool
from helpers import (ACLOperation, ResourceType, admin_client, allow, create_topic, end_offset,
                     produce, read_all)

TOPIC_AUTHORIZATION_FAILED = 29


def assert_describes(cfg, topic):
    """The user of `cfg` may DESCRIBE `topic`: the DESCRIBE ACL has reached the broker (through
    the metadata log), so a refusal after this is the authorizer's, not a late ACL."""
    adm = admin_client(cfg)
    try:
        [described] = adm.describe_topics([topic])
    finally:
        adm.close()
    assert described["error_code"] == 0, described


def test_produce_needs_write(admin_tool, admin, alice, topic_name):
    create_topic(admin, topic_name)
    # no ACL: alice may not even see the topic
    with pytest.raises(TopicAuthorizationFailedError):
        produce(alice, topic_name, [b"denied-1"])
    # DESCRIBE only: alice sees the topic, the Produce request itself is refused
    allow(admin, "User:alice", [ACLOperation.DESCRIBE], ResourceType.TOPIC, topic_name)
    eventually(lambda: assert_describes(alice, topic_name))
    with pytest.raises(TopicAuthorizationFailedError):
        produce(alice, topic_name, [b"denied-2"])
    # nothing was written
    assert end_offset(admin, topic_name) == 0
    assert read_all(admin, topic_name, 1, timeout=2) == []

    ok(admin_tool.run("kafka-acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
                       "--topic", topic_name), "kafka-acls --add Write")
    metas = eventually(lambda: produce(alice, topic_name, [b"allowed"]), timeout=15)
    assert metas[0].offset == 0
    got = read_all(admin, topic_name, 1)
    assert [r.value for r in got] == [b"allowed"]


def consume_group(cfg, topic, group, n, timeout=10.0):
    c = KafkaConsumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                      request_timeout_ms=15000, **cfg)
    try:
        c.subscribe([topic])
        got = []
        deadline = time.time() + timeout
        while len(got) < n and time.time() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        if got:
            c.commit()
        return got
    finally:
        c.close()


def fetch_assigned(cfg, topic, timeout=5.0):
    c = KafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest",
                      request_timeout_ms=15000, **cfg)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.time() + timeout
        while time.time() < deadline and not got:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        return got
    finally:
        c.close()


def test_consume_needs_read_on_topic_and_group(admin_tool, admin, alice, topic_name, group_name):
    create_topic(admin, topic_name)
    produce(admin, topic_name, [b"a", b"b", b"c"])
    # no ACL at all: the group is refused first
    with pytest.raises(GroupAuthorizationFailedError):
        consume_group(alice, topic_name, group_name, 3)
    # DESCRIBE on the topic (offsets) but no READ: the Fetch is refused
    allow(admin, "User:alice", [ACLOperation.DESCRIBE], ResourceType.TOPIC, topic_name)
    eventually(lambda: assert_describes(alice, topic_name))
    with pytest.raises(TopicAuthorizationFailedError):
        fetch_assigned(alice, topic_name)

    out = ok(admin_tool.run("kafka-acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                             "--topic", topic_name, "--group", group_name),
             "kafka-acls --add Read --topic --group")
    assert "name=%s, patternType=LITERAL" % group_name in out, out

    def consumed():
        got = consume_group(alice, topic_name, group_name, 3)
        assert [r.value for r in got] == [b"a", b"b", b"c"]
    eventually(consumed, timeout=20)
    # the group's committed offset, read back as admin
    c = KafkaConsumer(group_id=group_name, enable_auto_commit=False, request_timeout_ms=15000,
                      **admin)
    try:
        assert c.committed(TopicPartition(topic_name, 0)) == 3
    finally:
        c.close()


def test_metadata_hides_topics_alice_may_not_describe(admin, alice, topic_name):
    visible, hidden = topic_name + "-v", topic_name + "-h"
    create_topic(admin, visible)
    create_topic(admin, hidden)
    allow(admin, "User:alice", [ACLOperation.DESCRIBE], ResourceType.TOPIC, visible)

    def listed():
        c = KafkaConsumer(request_timeout_ms=15000, **alice)
        try:
            topics = c.topics()
        finally:
            c.close()
        assert visible in topics, topics
        return topics
    topics = eventually(listed, timeout=15)
    assert hidden not in topics, topics
    assert "__consumer_offsets" not in topics, topics

    adm = admin_client(alice)
    try:
        described = {t["name"]: t for t in adm.describe_topics([visible, hidden,
                                                                topic_name + "-absent"])}
    finally:
        adm.close()
    assert described[visible]["error_code"] == 0 and len(described[visible]["partitions"]) == 1
    # a topic alice may not describe answers TOPIC_AUTHORIZATION_FAILED, with no partitions,
    # whether it exists or not
    for name in (hidden, topic_name + "-absent"):
        assert described[name]["error_code"] == TOPIC_AUTHORIZATION_FAILED, described[name]
        assert described[name]["partitions"] == [], described[name]


def test_alice_cannot_create_acls_or_topics(admin, alice, alice_props, sasl_bootstrap,
                                            topic_name):
    rc, out, err = run_tool("kafka-acls", "--bootstrap-server", sasl_bootstrap,
                            "--command-config", alice_props, "--add", "--allow-principal",
                            "User:alice", "--operation", "All", "--topic", topic_name)
    text = out + err
    assert "ClusterAuthorizationException" in text, text

    from kafka.admin import NewTopic
    adm = admin_client(alice)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            adm.create_topics([NewTopic(topic_name, 1, 1)])
    finally:
        adm.close()
    # neither the topic nor the ACL came to be
    adm = admin_client(admin)
    try:
        assert topic_name not in adm.list_topics()
        from kafka.admin import ACLFilter, ACLPermissionType, ResourcePatternFilter
        from kafka.admin import ACLResourcePatternType
        acls, _ = adm.describe_acls(ACLFilter(
            principal=None, host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, topic_name,
                                                   ACLResourcePatternType.LITERAL)))
        assert acls == []
    finally:
        adm.close()
