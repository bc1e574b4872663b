import pytest

from conftest import run_tool
from kclient import read_all


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_perf_test_compressed_then_consume(bootstrap, topic_name, make_topic, codec):
    make_topic(topic_name, 1)
    rc, out, err = run_tool("kafka-producer-perf-test", "--topic", topic_name,
                            "--num-records", 500, "--record-size", 200, "--throughput", -1,
                            "--producer-props", "bootstrap.servers=" + bootstrap,
                            "compression.type=" + codec, "acks=all")
    assert rc == 0, "perf-test (%s) failed (rc=%s): %s %s" % (codec, rc, out[-2000:], err[-2000:])
    assert "500 records sent" in out, out
    recs = read_all(bootstrap, topic_name, [0], 500, timeout=30)
    assert len(recs) == 500
    assert [r.offset for r in recs] == list(range(500))
    assert all(len(r.value) == 200 for r in recs)
