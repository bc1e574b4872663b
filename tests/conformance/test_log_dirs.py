"""kafka-log-dirs --describe (DescribeLogDirs): each broker's log directory, the partitions whose
logs it holds with their sizes, and nothing of the metadata log."""
import json
import os

from conftest import run_tool
from kclient import producer


def log_dirs(bootstrap, *args):
    rc, out, err = run_tool("kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe",
                            *args)
    assert rc == 0, "kafka-log-dirs failed (rc=%s): %s %s" % (rc, out, err)
    # The tool prints two progress lines, then the JSON.
    return json.loads(out.strip().splitlines()[-1])


def replicas(report):
    """{partition name: [(size, offsetLag, isFuture), ...] one per broker that holds it}."""
    out = {}
    for broker in report["brokers"]:
        for d in broker["logDirs"]:
            assert d["error"] is None, d
            assert os.path.isabs(d["logDir"]), d
            for p in d["partitions"]:
                out.setdefault(p["partition"], []).append(
                    (p["size"], p["offsetLag"], p["isFuture"]))
    return out


def test_log_dirs_report_each_partition_with_its_size(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 2)
    p = producer(bootstrap)
    try:
        for i in range(20):
            p.send(topic_name, value=b"x" * 100, partition=0).get(timeout=20)
    finally:
        p.close()
    report = log_dirs(bootstrap, "--topic-list", topic_name)
    assert report["version"] == 1, report
    found = replicas(report)
    assert sorted(found) == ["%s-0" % topic_name, "%s-1" % topic_name], found
    # 20 records of 100 bytes are on disk (with their batch headers) in partition 0 only.
    for size, lag, future in found["%s-0" % topic_name]:
        assert size >= 2000 and lag == 0 and future is False, found
    for size, lag, future in found["%s-1" % topic_name]:
        assert size == 0 and lag == 0 and future is False, found
    # Every broker answers, each with one directory.
    assert all(len(b["logDirs"]) == 1 for b in report["brokers"]), report


def test_log_dirs_without_a_topic_list_leave_out_the_metadata_log(bootstrap, topic_name,
                                                                  make_topic):
    make_topic(topic_name, 1)
    found = replicas(log_dirs(bootstrap))
    assert "%s-0" % topic_name in found, found
    assert not any(name.startswith("__cluster_metadata") for name in found), found
    assert replicas(log_dirs(bootstrap, "--topic-list", "no-such-topic")) == {}
