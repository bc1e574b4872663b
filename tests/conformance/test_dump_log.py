import os
import time

import pytest

import kclient
from conftest import run_tool


def test_dump_log_decodes_records(bootstrap, data_dir, topic_name, make_topic):
    if not data_dir:
        pytest.skip("kafka-dump-log needs the broker's log directory: pass --data-dir DIR")
    make_topic(topic_name, 1)
    values = [b"dump-value-%d" % i for i in range(5)]
    p = kclient.producer(bootstrap)
    try:
        for i, v in enumerate(values):
            p.send(topic_name, key=b"dump-key-%d" % i, value=v)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)

    # --data-dir may list several log directories separated by os.pathsep (a cluster: one per
    # broker); with replication factor 1 the partition lives in exactly one of them.
    paths = [os.path.join(d, "%s-0" % topic_name, "00000000000000000000.log")
             for d in data_dir.split(os.pathsep) if d]
    deadline = time.time() + 10
    while not any(os.path.exists(p) for p in paths) and time.time() < deadline:
        time.sleep(0.2)
    found = [p for p in paths if os.path.exists(p)]
    assert len(found) == 1, "segment file of partition 0: found %s among %s" % (found, paths)
    path = found[0]

    rc, out, err = run_tool("kafka-dump-log", "--files", path, "--print-data-log")
    assert rc == 0, "kafka-dump-log failed (rc=%s): %s %s" % (rc, out, err)
    assert "Dumping %s" % path in out, out
    for i, v in enumerate(values):
        assert "offset: %d " % i in out, out
        assert "key: dump-key-%d payload: %s" % (i, v.decode()) in out, out
