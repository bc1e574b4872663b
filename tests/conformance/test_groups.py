import re

import kclient
from conftest import run_tool


def describe_group(bootstrap, group):
    rc, out, err = run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                            "--describe", "--group", group)
    assert rc == 0, "describe group failed (rc=%s): %s %s" % (rc, out, err)
    return out


def rows_for(out, topic):
    """Parse the describe table: returns a list of dicts keyed by the header columns."""
    lines = [l for l in out.splitlines() if l.strip()]
    header = None
    rows = []
    for l in lines:
        cols = l.split()
        if "GROUP" in cols and "TOPIC" in cols and "PARTITION" in cols:
            header = cols
            continue
        if header and len(cols) >= len(header) and topic in cols:
            rows.append(dict(zip(header, cols)))
    return rows


def test_commit_lag_and_reset(bootstrap, topic_name, group_name, make_topic):
    make_topic(topic_name, 1)
    n = 10
    p = kclient.producer(bootstrap)
    try:
        for i in range(n):
            p.send(topic_name, value=b"g-%d" % i)
        p.flush(timeout=30)
    finally:
        p.close(timeout=10)

    c = kclient.consumer(bootstrap, group_id=group_name, auto_offset_reset="earliest",
                         enable_auto_commit=False)
    try:
        c.subscribe([topic_name])
        recs = kclient.poll_n(c, n, timeout=30)
        assert len(recs) == n, "consumed %d of %d" % (len(recs), n)
        c.commit()
    finally:
        c.close()

    out = describe_group(bootstrap, group_name)
    rows = rows_for(out, topic_name)
    assert rows, "topic %s not in describe output: %r" % (topic_name, out)
    assert rows[0]["CURRENT-OFFSET"] == str(n), out
    assert rows[0]["LOG-END-OFFSET"] == str(n), out
    assert rows[0]["LAG"] == "0", out

    rc, out, err = run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap,
                            "--reset-offsets", "--to-earliest", "--execute",
                            "--group", group_name, "--topic", topic_name)
    assert rc == 0, "reset-offsets failed (rc=%s): %s %s" % (rc, out, err)
    assert re.search(r"%s\s+%s\s+0\s+0" % (re.escape(group_name), re.escape(topic_name)),
                     out), out

    out = describe_group(bootstrap, group_name)
    rows = rows_for(out, topic_name)
    assert rows, "topic %s not in describe output after reset: %r" % (topic_name, out)
    assert rows[0]["CURRENT-OFFSET"] == "0", out
    assert rows[0]["LAG"] == str(n), out
