"""kafka-acls --add / --list / --remove as admin over SASL/SCRAM, literal and prefixed."""
import uuid

import pytest
from kafka.errors import TopicAuthorizationFailedError

from conftest import eventually, ok
from helpers import create_topic, produce


def acl_line(principal, operation):
    return "(principal=%s, host=*, operation=%s, permissionType=ALLOW)" % (principal, operation)


def resource_line(name, pattern="LITERAL"):
    return "ResourcePattern(resourceType=TOPIC, name=%s, patternType=%s)" % (name, pattern)


def acl_lines(out):
    return sorted(line.strip() for line in out.splitlines() if line.strip().startswith("(principal="))


def test_add_list_remove(admin_tool, topic_name):
    out = ok(admin_tool.run("kafka-acls", "--add", "--allow-principal", "User:alice",
                            "--operation", "Write", "--operation", "Describe",
                            "--topic", topic_name),
             "kafka-acls --add")
    assert "Adding ACLs for resource `%s`:" % resource_line(topic_name) in out, out
    assert acl_lines(out) == sorted([acl_line("User:alice", "WRITE"),
                                     acl_line("User:alice", "DESCRIBE")]), out

    def listed():
        out = ok(admin_tool.run("kafka-acls", "--list", "--topic", topic_name), "kafka-acls --list")
        assert "Current ACLs for resource `%s`:" % resource_line(topic_name) in out, out
        assert acl_lines(out) == sorted([acl_line("User:alice", "WRITE"),
                                         acl_line("User:alice", "DESCRIBE")]), out
    eventually(listed, timeout=10, interval=0)

    ok(admin_tool.run("kafka-acls", "--remove", "--force", "--allow-principal", "User:alice",
                      "--operation", "Write", "--operation", "Describe", "--topic", topic_name),
       "kafka-acls --remove --force")

    def gone():
        out = ok(admin_tool.run("kafka-acls", "--list", "--topic", topic_name), "kafka-acls --list")
        assert acl_lines(out) == [], out
    eventually(gone, timeout=10, interval=0)


def test_prefixed_acl(admin_tool, admin, alice):
    prefix = "sec-pfx-%s-" % uuid.uuid4().hex[:8]
    inside, outside = prefix + "orders", "sec-nopfx-%s" % uuid.uuid4().hex[:8]
    create_topic(admin, inside)
    create_topic(admin, outside)
    out = ok(admin_tool.run("kafka-acls", "--add", "--allow-principal", "User:alice",
                            "--operation", "Write", "--topic", prefix,
                            "--resource-pattern-type", "prefixed"),
             "kafka-acls --add --resource-pattern-type prefixed")
    assert "Adding ACLs for resource `%s`:" % resource_line(prefix, "PREFIXED") in out, out

    # the prefix grants WRITE (and so DESCRIBE) on every topic whose name starts with it
    eventually(lambda: produce(alice, inside, [b"in"]), timeout=15)
    with pytest.raises(TopicAuthorizationFailedError):
        produce(alice, outside, [b"out"])

    # --list with pattern type `match` on the topic's own name finds the prefixed ACL
    out = ok(admin_tool.run("kafka-acls", "--list", "--topic", inside,
                            "--resource-pattern-type", "match"),
             "kafka-acls --list --resource-pattern-type match")
    assert "Current ACLs for resource `%s`:" % resource_line(prefix, "PREFIXED") in out, out
    assert acl_lines(out) == [acl_line("User:alice", "WRITE")], out
