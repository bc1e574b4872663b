import re

from conftest import run_tool


def describe_partitions(bootstrap, topic):
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--describe",
                            "--topic", topic)
    assert rc == 0, "describe failed (rc=%s): %s %s" % (rc, out, err)
    m = re.search(r"PartitionCount:\s*(\d+)", out)
    assert m, "no PartitionCount in describe output: %r" % out
    lines = [l for l in out.splitlines() if re.search(r"\bPartition:\s*\d+", l)]
    return int(m.group(1)), lines, out


def test_create_describe_alter_partitions(bootstrap, topic_name, make_topic):
    out = make_topic(topic_name, 3)
    assert "Created topic %s." % topic_name in out

    count, lines, out = describe_partitions(bootstrap, topic_name)
    assert count == 3, out
    assert len(lines) == 3, out

    # A decrease is refused.
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--alter",
                            "--topic", topic_name, "--partitions", 2)
    expected = ("The topic %s currently has 3 partition(s); 2 would not be an increase."
                % topic_name)
    assert rc != 0, "decrease to 2 partitions succeeded: %s %s" % (out, err)
    assert expected in out + err, "expected %r in output, got stdout=%r stderr=%r" % (
        expected, out, err)
    # Kafka's TopicCommand prints the broker's error message verbatim on this line.
    assert "Error while executing topic command : " + expected in (out + err).splitlines(), (
        out, err)
    assert "InvalidPartitionsException: " + expected in out + err, (out, err)
    count, _, out2 = describe_partitions(bootstrap, topic_name)
    assert count == 3, out2

    # An increase works.
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--alter",
                            "--topic", topic_name, "--partitions", 4)
    assert rc == 0, "increase to 4 failed (rc=%s): %s %s" % (rc, out, err)
    count, lines, out = describe_partitions(bootstrap, topic_name)
    assert count == 4, out
    assert len(lines) == 4, out


def test_list_shows_topic(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1)
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--list")
    assert rc == 0, err
    assert topic_name in out.split(), out
