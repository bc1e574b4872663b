import time

from conftest import run_tool
from kclient import producer


def _get_offset(bootstrap, topic, t):
    rc, out, err = run_tool("kafka-get-offsets", "--bootstrap-server", bootstrap,
                            "--topic", topic, "--time", t)
    assert rc == 0, "kafka-get-offsets --time %s failed (rc=%s): %s %s" % (t, rc, out, err)
    lines = [l.strip() for l in out.splitlines() if l.strip().startswith(topic + ":")]
    assert len(lines) == 1, out
    tp, part, off = lines[0].rsplit(":", 2)
    assert (tp, part) == (topic, "0"), out
    return int(off)


def test_get_offsets_by_timestamp(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1)
    base = int(time.time() * 1000) - 60000  # a minute ago, 1 s apart
    p = producer(bootstrap)
    try:
        for i in range(6):
            md = p.send(topic_name, value=b"ts-%d" % i, partition=0,
                        timestamp_ms=base + 1000 * i).get(timeout=20)
            assert md.offset == i
    finally:
        p.close()
    # first offset whose timestamp is >= the given time
    assert _get_offset(bootstrap, topic_name, base) == 0
    assert _get_offset(bootstrap, topic_name, base + 2000) == 2
    assert _get_offset(bootstrap, topic_name, base + 2500) == 3
    assert _get_offset(bootstrap, topic_name, base + 5000) == 5
    assert _get_offset(bootstrap, topic_name, -1) == 6   # latest (log end offset)
    assert _get_offset(bootstrap, topic_name, -2) == 0   # earliest
