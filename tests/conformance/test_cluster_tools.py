"""Kafka's own cluster tools against a cluster of three brokers: partition reassignment of a
reordered replica list, the metadata quorum's status and replication, and kafka-dump-log's
cluster-metadata decoder on the metadata log and on a metadata snapshot.

The assertions hold for any KRaft cluster layout: Kafka's reference cluster has one voter
and two broker-only observers, evenkeel's `dev --brokers 3` three combined voters."""
import glob
import json
import os
import re
import time

import pytest

from conftest import run_tool
from test_multi_broker import broker_ids, create_with_assignment, describe_partitions

METADATA = "__cluster_metadata-0"


def metadata_dirs(data_dir):
    if not data_dir:
        pytest.skip("kafka-dump-log needs the brokers' log directories: pass --data-dir")
    dirs = [os.path.join(d, METADATA) for d in data_dir.split(os.pathsep) if d]
    found = [d for d in dirs if os.path.isdir(d)]
    assert found, "no %s under %s" % (METADATA, data_dir)
    return found


def quorum(bootstrap, *args):
    rc, out, err = run_tool("kafka-metadata-quorum", "--bootstrap-server", bootstrap,
                            "describe", *args)
    assert rc == 0, "kafka-metadata-quorum describe %s failed (rc=%s): %s %s" % (
        " ".join(args), rc, out, err)
    return out


def status_fields(out):
    """`describe --status`: {"LeaderId": "1", ...}, labels as Kafka prints them."""
    fields = {}
    for line in out.splitlines():
        m = re.match(r"^(\w+):\s+(.*)$", line)
        if m:
            fields[m.group(1)] = m.group(2).strip()
    return fields


@pytest.mark.needs_brokers(3)
def test_reassign_reorder_completes_at_once(bootstrap, topic_name, tmp_path):
    ids = broker_ids(bootstrap)[:3]
    create_with_assignment(bootstrap, topic_name, [ids])
    reordered = ids[1:] + ids[:1]
    plan = tmp_path / "reorder.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": reordered}]}))
    rc, out, err = run_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                            "--reassignment-json-file", plan, "--execute")
    assert rc == 0, "reassign --execute failed (rc=%s): %s %s" % (rc, out, err)
    assert "Successfully started partition reassignment for %s-0" % topic_name in out, out
    # The same replica set in another order needs no data: it is complete straight away.
    completed = "Reassignment of partition %s-0 is completed." % topic_name
    deadline = time.time() + 15
    while True:
        rc, out, err = run_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                "--reassignment-json-file", plan, "--verify")
        assert rc == 0, "reassign --verify failed (rc=%s): %s %s" % (rc, out, err)
        if completed in out or time.time() > deadline:
            break
        time.sleep(1)
    assert completed in out, out
    parts = describe_partitions(bootstrap, topic_name)
    assert parts[0]["replicas"] == reordered, parts
    assert sorted(parts[0]["isr"]) == sorted(ids), parts
    # The leader stays until a preferred election moves it to the new first replica.
    rc, out, err = run_tool("kafka-leader-election", "--bootstrap-server", bootstrap,
                            "--election-type", "PREFERRED", "--topic", topic_name,
                            "--partition", 0)
    assert rc == 0, "kafka-leader-election failed (rc=%s): %s %s" % (rc, out, err)
    assert describe_partitions(bootstrap, topic_name)[0]["leader"] == reordered[0]


@pytest.mark.needs_brokers(3)
def test_metadata_quorum_describe_status(bootstrap):
    out = quorum(bootstrap, "--status")
    f = status_fields(out)
    for label in ("ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                  "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"):
        assert label in f, "no %s in:\n%s" % (label, out)
    from kafka.admin import KafkaAdminClient
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        cluster_id = adm.describe_cluster()["cluster_id"]
    finally:
        adm.close()
    assert f["ClusterId"] == cluster_id, (f, cluster_id)
    voters = json.loads(f["CurrentVoters"])
    observers = json.loads(f["CurrentObservers"])
    voter_ids = [v["id"] for v in voters]
    assert int(f["LeaderId"]) in voter_ids, f
    assert int(f["LeaderEpoch"]) >= 1, f
    assert int(f["HighWatermark"]) > 0, f
    assert int(f["MaxFollowerLag"]) >= 0, f
    for v in voters:
        assert any(e.startswith("CONTROLLER://") for e in v.get("endpoints", [])), v
    # Every broker is a voter or an observer, once.
    members = voter_ids + [o["id"] for o in observers]
    assert sorted(members) == sorted(set(members)), members
    assert set(broker_ids(bootstrap)) <= set(members), (members, broker_ids(bootstrap))


@pytest.mark.needs_brokers(3)
def test_metadata_quorum_describe_replication(bootstrap):
    out = quorum(bootstrap, "--replication")
    lines = [l for l in out.splitlines() if l.strip()]
    header = lines[0].split()
    assert header == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                      "LastCaughtUpTimestamp", "Status"], out
    rows = [dict(zip(header, l.split())) for l in lines[1:]]
    statuses = [r["Status"] for r in rows]
    assert statuses.count("Leader") == 1, out
    assert set(statuses) <= {"Leader", "Follower", "Observer"}, out
    leader = next(r for r in rows if r["Status"] == "Leader")
    leader_id = int(status_fields(quorum(bootstrap, "--status"))["LeaderId"])
    assert int(leader["NodeId"]) == leader_id, (out, leader_id)
    assert int(leader["Lag"]) == 0, out
    for r in rows:
        assert int(r["LogEndOffset"]) >= 0 and int(r["Lag"]) >= 0, r
        assert int(r["LogEndOffset"]) + int(r["Lag"]) == int(leader["LogEndOffset"]), r
    assert set(broker_ids(bootstrap)) <= {int(r["NodeId"]) for r in rows}, out


def make_and_drop(bootstrap, topic):
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create",
                            "--topic", topic, "--partitions", 3, "--replication-factor", 2)
    assert rc == 0, "create failed (rc=%s): %s %s" % (rc, out, err)
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--delete",
                            "--topic", topic)
    assert rc == 0, "delete failed (rc=%s): %s %s" % (rc, out, err)


def dump(path):
    rc, out, err = run_tool("kafka-dump-log", "--cluster-metadata-decoder", "--files", path)
    assert rc == 0, "kafka-dump-log failed on %s (rc=%s): %s %s" % (path, rc, out, err)
    assert "Error at" not in out, out
    return out


def payloads(out):
    """The JSON payloads of the dump: [{"type": "TOPIC_RECORD", "data": {...}}, ...]."""
    found = []
    for m in re.finditer(r"payload: (\{.*\})\s*$", out, re.M):
        try:
            found.append(json.loads(m.group(1)))
        except ValueError:
            pass
    return found


@pytest.mark.needs_brokers(3)
def test_dump_log_decodes_the_cluster_metadata_log(bootstrap, data_dir, topic_name):
    make_and_drop(bootstrap, topic_name)
    for d in metadata_dirs(data_dir):
        deadline = time.time() + 20
        while True:
            segments = sorted(glob.glob(os.path.join(d, "*.log")))
            assert segments, "no segment in %s" % d
            out = "".join(dump(s) for s in segments)
            recs = payloads(out)
            types = {r["type"] for r in recs}
            topic = [r for r in recs if r["type"] == "TOPIC_RECORD"
                     and r["data"].get("name") == topic_name]
            removed = topic and any(r["type"] == "REMOVE_TOPIC_RECORD"
                                    and r["data"]["topicId"] == topic[0]["data"]["topicId"]
                                    for r in recs)
            if removed or time.time() > deadline:
                break
            time.sleep(0.5)
        assert topic, "no TOPIC_RECORD for %s in %s:\n%s" % (topic_name, d, out[-3000:])
        assert removed, "no REMOVE_TOPIC_RECORD for %s in %s" % (topic_name, d)
        topic_id = topic[0]["data"]["topicId"]
        parts = [r for r in recs if r["type"] == "PARTITION_RECORD"
                 and r["data"]["topicId"] == topic_id]
        assert sorted(p["data"]["partitionId"] for p in parts) == [0, 1, 2], parts
        for p in parts:
            assert len(p["data"]["replicas"]) == 2, p
            assert p["data"]["leader"] == p["data"]["replicas"][0], p
        assert "REGISTER_BROKER_RECORD" in types, types
        assert "FEATURE_LEVEL_RECORD" in types, types
        # Control records of the quorum are decoded too.
        assert "LeaderChange" in out, out[:3000]


def snapshots(d):
    """The snapshots of a metadata directory, oldest first (the bootstrap snapshot 0-0 left out)."""
    return [s for s in sorted(glob.glob(os.path.join(d, "*.checkpoint")))
            if not os.path.basename(s).startswith("0" * 20)]


@pytest.mark.needs_brokers(3)
def test_dump_log_decodes_a_metadata_snapshot(bootstrap, data_dir, topic_name):
    """Both targets run with metadata.log.max.record.bytes.between.snapshots=4096, so a few
    topics are enough for every node to write a snapshot that holds them."""
    dirs = metadata_dirs(data_dir)
    first = "%s-0" % topic_name
    holding = {}  # metadata dir -> (snapshot path, its dump)
    created = 0
    deadline = time.time() + 90
    while len(holding) < len(dirs) and time.time() < deadline:
        rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create",
                                "--topic", "%s-%d" % (topic_name, created), "--partitions", 8,
                                "--replication-factor", 1)
        assert rc == 0, "create failed (rc=%s): %s %s" % (rc, out, err)
        created += 1
        time.sleep(1)
        for d in dirs:
            snaps = snapshots(d)
            if d in holding or not snaps:
                continue
            out = dump(snaps[-1])
            names = {r["data"].get("name") for r in payloads(out) if r["type"] == "TOPIC_RECORD"}
            if first in names:
                holding[d] = (snaps[-1], out)
    assert len(holding) == len(dirs), "no snapshot holding %s in %s after %d topics" % (
        first, sorted(set(dirs) - set(holding)), created)
    for d, (path, out) in holding.items():
        m = re.match(r"^(\d{20})-(\d{10})\.checkpoint$", os.path.basename(path))
        assert m, path
        assert "Snapshot end offset: %d, epoch: %d" % (int(m.group(1)), int(m.group(2))) in out, \
            out[:2000]
        assert "SnapshotHeader" in out and "SnapshotFooter" in out, out[:2000]
        types = {r["type"] for r in payloads(out)}
        assert {"FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "TOPIC_RECORD",
                "PARTITION_RECORD"} <= types, types
