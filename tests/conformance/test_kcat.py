"""Scenarios driven by kcat (Debian's kcat, librdkafka): metadata listing, produce with keys,
consume from the beginning."""
import json
import re
import subprocess

from partitioner import java_partition


def kcat(*args, stdin=None, timeout=30):
    """Run kcat; returns (exit code, stdout, stderr). A timeout gives exit code -1."""
    try:
        p = subprocess.run(["kcat", *[str(a) for a in args]], input=stdin,
                           capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return -1, out, err + "\n[conformance] kcat timed out after %ss" % timeout


def test_kcat_metadata_lists_topic_and_partitions(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 3)
    rc, out, err = kcat("-b", bootstrap, "-L", "-t", topic_name)
    assert rc == 0, "kcat -L failed (rc=%s): %s %s" % (rc, out, err)
    assert ' topic "%s" with 3 partitions:' % topic_name in out, out
    parts = re.findall(r"^\s+partition (\d+), leader (\d+), replicas: (\S+), isrs: (\S+)$",
                       out, re.M)
    assert sorted(int(p[0]) for p in parts) == [0, 1, 2], out
    brokers = {int(b) for b in re.findall(r"^\s+broker (\d+) at \S+", out, re.M)}
    assert brokers, out
    for _, leader, replicas, isrs in parts:
        assert int(leader) in brokers and replicas == leader and isrs == leader, out

    # The same metadata as JSON (-J).
    rc, out, err = kcat("-b", bootstrap, "-L", "-J", "-t", topic_name)
    assert rc == 0, "kcat -L -J failed (rc=%s): %s %s" % (rc, out, err)
    md = json.loads(out)
    assert {b["id"] for b in md["brokers"]} == brokers, md
    topics = [t for t in md["topics"] if t["topic"] == topic_name]
    assert len(topics) == 1 and "error" not in topics[0], md
    assert sorted(p["partition"] for p in topics[0]["partitions"]) == [0, 1, 2], md


def test_kcat_produce_keys_then_consume_from_beginning(request, bootstrap, topic_name,
                                                       make_topic):
    partitions = 3
    make_topic(topic_name, partitions)
    records = [("kk-%d" % i, "kv-%d" % i) for i in range(30)]
    lines = "".join("%s:%s\n" % kv for kv in records)
    # librdkafka's default partitioner hashes keys with CRC32; murmur2_random is Java's.
    rc, out, err = kcat("-P", "-b", bootstrap, "-t", topic_name, "-K:",
                        "-X", "partitioner=murmur2_random", stdin=lines)
    assert rc == 0, "kcat -P failed (rc=%s): %s %s" % (rc, out, err)

    rc, out, err = kcat("-C", "-b", bootstrap, "-t", topic_name, "-e", "-o", "beginning",
                        "-f", "%p %o %k %s\\n")
    assert rc == 0, "kcat -C failed (rc=%s): %s %s" % (rc, out, err)
    got = [line.split(" ") for line in out.splitlines() if line]
    assert all(len(g) == 4 for g in got), out
    assert sorted((k, v) for _, _, k, v in got) == sorted(records), out
    by_partition = {}
    for part, offset, key, value in got:
        assert int(part) == java_partition(key.encode(), partitions), (part, key)
        by_partition.setdefault(int(part), []).append((int(offset), key))
    assert set(by_partition) == set(range(partitions)), by_partition
    sent_order = [k for k, _ in records]
    for part, recs in by_partition.items():
        # offsets contiguous from 0, in the order kcat sent the keys
        assert [o for o, _ in recs] == list(range(len(recs))), (part, recs)
        keys = [k for _, k in recs]
        assert keys == sorted(keys, key=sent_order.index), (part, keys)

    # A read relative to the end (-o -1 on partition 0: ListOffsets latest, then fetch) gives
    # the last record of that partition.
    last_offset, last_key = by_partition[0][-1]
    rc, out, err = kcat("-C", "-b", bootstrap, "-t", topic_name, "-p", 0, "-e", "-o", -1,
                        "-f", "%o %k\\n")
    assert rc == 0, "kcat -C -o -1 failed (rc=%s): %s %s" % (rc, out, err)
    assert out.split() == [str(last_offset), last_key], out
