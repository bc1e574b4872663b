"""The consumer group protocol (KIP-848) with Kafka's own Java consumer and tools: two
kafka-console-consumer members with group.protocol=consumer share a topic's partitions,
kafka-consumer-groups describes the group, its state and its members, and kafka-dump-log reads
the group's records in __consumer_offsets with Kafka's own decoder."""
import os
import re
import subprocess

import pytest

import kclient
from common import TOOL, REPO_ROOT, eventually, ok, run_tool

RECORD = re.compile(r"^Partition:(\d+)\s+Offset:(\d+)\s+(\S+)$")


def produce(bootstrap, topic, start, n):
    p = kclient.producer(bootstrap)
    try:
        for i in range(start, start + n):
            p.send(topic, value=b"r-%d" % i, partition=i % 4)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)


def console_member(bootstrap, topic, group):
    return subprocess.Popen(
        [TOOL, "kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
         "--group", group, "--from-beginning", "--timeout-ms", "20000",
         "--consumer-property", "group.protocol=consumer",
         "--property", "print.partition=true", "--property", "print.offset=true"],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def table(out, first_column):
    """The rows of a kafka-consumer-groups table whose header starts with `first_column`."""
    header, rows = None, []
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == first_column:
            header = cols
        elif header and len(cols) >= len(header):
            rows.append(dict(zip(header, cols)))
    return rows


def describe(bootstrap, group, *flags):
    return ok(run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                       "--group", group, *flags), "describe " + " ".join(flags))


def test_two_java_members_share_the_partitions(bootstrap, topic_name, group_name, make_topic):
    make_topic(topic_name, 4)
    produce(bootstrap, topic_name, 0, 20)
    members = [console_member(bootstrap, topic_name, group_name) for _ in range(2)]
    try:
        def both_hold_two():
            rows = table(describe(bootstrap, group_name, "--members"), "GROUP")
            assert len(rows) == 2, rows
            assert sorted(r["#PARTITIONS"] for r in rows) == ["2", "2"], rows
            state = table(describe(bootstrap, group_name, "--state"), "GROUP")
            assert state[0]["STATE"] == "Stable", state
            assert state[0]["#MEMBERS"] == "2", state
            return state[0]
        state = eventually(both_hold_two, timeout=60, interval=1.0)
        assert state["ASSIGNMENT-STRATEGY"] == "uniform", state
        produce(bootstrap, topic_name, 20, 20)
        outputs = []
        for m in members:
            out, err = m.communicate(timeout=120)
            outputs.append(out)
    finally:
        for m in members:
            if m.poll() is None:
                m.kill()
    seen = [set(), set()]
    for i, out in enumerate(outputs):
        for line in out.splitlines():
            found = RECORD.match(line.strip())
            if found:
                seen[i].add((int(found.group(1)), int(found.group(2)), found.group(3)))
    values = {v for s in seen for (_, _, v) in s}
    assert values == {"r-%d" % i for i in range(40)}, sorted(values)
    late = [{v for (_, _, v) in s if int(v[2:]) >= 20} for s in seen]
    assert late[0] and late[1], "both members read records produced while both were in: %r" % late


def test_the_group_lists_as_a_consumer_group(bootstrap, topic_name, group_name, make_topic):
    make_topic(topic_name, 4)
    produce(bootstrap, topic_name, 0, 4)
    member = console_member(bootstrap, topic_name, group_name)
    try:
        def listed():
            out = ok(run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                              "--list", "--type", "consumer"), "list --type consumer")
            rows = [r for r in table(out, "GROUP") if r["GROUP"] == group_name]
            assert rows and rows[0]["TYPE"] == "Consumer", out
        eventually(listed, timeout=60, interval=1.0)
        offsets = table(describe(bootstrap, group_name), "GROUP")
        assert sorted(int(r["PARTITION"]) for r in offsets) == [0, 1, 2, 3], offsets
    finally:
        member.kill()
        member.wait(timeout=30)
    classic = ok(run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                          "--list", "--type", "classic"), "list --type classic")
    assert group_name not in classic.split(), classic


def java_hash(s):
    """Java's String.hashCode, as Kafka picks a group's __consumer_offsets partition."""
    h = 0
    for c in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_the_groups_records_decode_with_kafkas_offsets_decoder(bootstrap, data_dir, topic_name,
                                                                group_name, make_topic):
    if not data_dir:
        pytest.skip("kafka-dump-log needs the broker's log directory: pass --data-dir DIR")
    make_topic(topic_name, 1)
    produce_one_partition(bootstrap, topic_name, 3)
    rc, out, err = run_tool("kafka-console-consumer", "--bootstrap-server", bootstrap,
                            "--topic", topic_name, "--group", group_name, "--from-beginning",
                            "--max-messages", "3", "--timeout-ms", "30000",
                            "--consumer-property", "group.protocol=consumer", timeout=120)
    assert rc == 0, "console consumer failed (rc=%s): %s %s" % (rc, out, err)
    partition = abs(java_hash(group_name)) % 50
    paths = [os.path.join(d, "__consumer_offsets-%d" % partition, "00000000000000000000.log")
             for d in data_dir.split(os.pathsep) if d]
    # One log per replica (a cluster replicates __consumer_offsets); the leader's has them all.
    found = [p for p in paths if os.path.exists(p)]
    assert found, "the group's partition: none of %s" % paths

    def decoded():
        text = ""
        for path in found:
            out = ok(run_tool("kafka-dump-log", "--files", path, "--offsets-decoder"),
                     "kafka-dump-log --offsets-decoder")
            mine = "\n".join(l for l in out.splitlines() if group_name in l)
            assert "Unknown" not in mine and "Error" not in mine, mine
            if "memberEpoch" in mine:
                text = mine
        # The group's epoch, a member's subscription, target and current assignment, and
        # its offset commit, each decoded by Kafka's own serde.
        for field in ("memberEpoch", "subscribedTopicNames", "assignmentEpoch", "offset"):
            assert field in text, "%s not in:\n%s" % (field, text)
        assert "Unknown" not in text and "Error" not in text, text
        return text
    eventually(decoded, timeout=60, interval=1.0)


def produce_one_partition(bootstrap, topic, n):
    p = kclient.producer(bootstrap)
    try:
        for i in range(n):
            p.send(topic, value=b"d-%d" % i, partition=0)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)
