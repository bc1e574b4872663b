import json
import os

from conftest import run_tool
from kclient import producer, read_all


def test_delete_records_moves_low_watermark(bootstrap, topic_name, make_topic, tmp_path):
    make_topic(topic_name, 1)
    p = producer(bootstrap)
    try:
        for i in range(8):
            assert p.send(topic_name, value=b"dr-%d" % i, partition=0).get(timeout=20).offset == i
    finally:
        p.close()
    f = os.path.join(str(tmp_path), "delete.json")
    with open(f, "w") as fh:
        json.dump({"partitions": [{"topic": topic_name, "partition": 0, "offset": 3}],
                   "version": 1}, fh)
    rc, out, err = run_tool("kafka-delete-records", "--bootstrap-server", bootstrap,
                            "--offset-json-file", f)
    assert rc == 0, "kafka-delete-records failed (rc=%s): %s %s" % (rc, out, err)
    assert "Records delete operation completed:" in out, out
    assert "partition: %s-0\tlow_watermark: 3" % topic_name in out, out

    recs = read_all(bootstrap, topic_name, [0], 5)
    assert [r.offset for r in recs] == [3, 4, 5, 6, 7]
    assert [r.value for r in recs] == [b"dr-%d" % i for i in range(3, 8)]

    rc, out, err = run_tool("kafka-get-offsets", "--bootstrap-server", bootstrap,
                            "--topic", topic_name, "--time", -2)
    assert rc == 0, out + err
    assert "%s:0:3" % topic_name in out.split(), out
