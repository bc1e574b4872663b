from conftest import run_tool


def test_alter_and_describe_retention_ms(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1)
    rc, out, err = run_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter",
                            "--entity-type", "topics", "--entity-name", topic_name,
                            "--add-config", "retention.ms=12345")
    assert rc == 0, "alter failed (rc=%s): %s %s" % (rc, out, err)
    assert "Completed updating config for topic %s." % topic_name in out, out

    rc, out, err = run_tool("kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                            "--entity-type", "topics", "--entity-name", topic_name)
    assert rc == 0, "describe failed (rc=%s): %s %s" % (rc, out, err)
    assert "Dynamic configs for topic %s are:" % topic_name in out, out
    lines = [l.strip() for l in out.splitlines()]
    assert any(l.startswith("retention.ms=12345 ") or l == "retention.ms=12345"
               for l in lines), out
