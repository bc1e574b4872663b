import json
import os

from conftest import run_tool
from kclient import read_all


def test_verifiable_producer_idempotent(bootstrap, topic_name, make_topic, tmp_path):
    make_topic(topic_name, 1)
    cfg = os.path.join(str(tmp_path), "producer.properties")
    with open(cfg, "w") as fh:
        # VerifiableProducer sets retries=0 unless the config file sets it, and the idempotent
        # producer refuses retries=0 ("Must set retries to non-zero ...").
        fh.write("enable.idempotence=true\nacks=all\nretries=2147483647\n")
    rc, out, err = run_tool("kafka-verifiable-producer", "--bootstrap-server", bootstrap,
                            "--topic", topic_name, "--max-messages", 200,
                            "--producer.config", cfg, timeout=120)
    assert rc == 0, "kafka-verifiable-producer failed (rc=%s): %s %s" % (rc, out[-2000:], err[-2000:])
    events = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    errors = [e for e in events if e.get("name") == "producer_send_error"]
    assert not errors, errors[:3]
    ok = [e for e in events if e.get("name") == "producer_send_success"]
    assert len(ok) == 200, "%d acked: %s" % (len(ok), out[-2000:])
    tool_data = [e for e in events if e.get("name") == "tool_data"]
    assert tool_data and tool_data[-1]["sent"] == 200 and tool_data[-1]["acked"] == 200, tool_data

    recs = read_all(bootstrap, topic_name, [0], 200, timeout=30)
    values = [r.value for r in recs]
    assert len(values) == 200
    assert len(set(values)) == 200, "duplicates in the log"
    assert sorted(int(v) for v in values) == list(range(200))
    assert [r.offset for r in recs] == list(range(200))
