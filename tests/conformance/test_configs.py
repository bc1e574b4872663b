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


def broker_id(bootstrap):
    from kafka.admin import KafkaAdminClient
    adm = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        return min(b["broker_id"] for b in adm.describe_cluster()["brokers"])
    finally:
        adm.close()


def test_replication_throttle_is_a_dynamic_broker_config(bootstrap):
    """kafka-reassign-partitions sets and clears these throttles on every broker it touches."""
    broker = str(broker_id(bootstrap))
    configs = lambda *a: run_tool("kafka-configs", "--bootstrap-server", bootstrap,  # noqa: E731
                                  "--entity-type", "brokers", "--entity-name", broker, *a)
    rc, out, err = configs("--alter", "--add-config", "leader.replication.throttled.rate=1048576")
    assert rc == 0, "alter failed (rc=%s): %s %s" % (rc, out, err)
    assert "Completed updating config for broker %s." % broker in out, out
    rc, out, err = configs("--describe")
    assert rc == 0, "describe failed (rc=%s): %s %s" % (rc, out, err)
    assert "Dynamic configs for broker %s are:" % broker in out, out
    assert "leader.replication.throttled.rate=1048576 sensitive=false " \
           "synonyms={DYNAMIC_BROKER_CONFIG:leader.replication.throttled.rate=1048576}" in out, out
    rc, out, err = configs("--alter", "--delete-config", "leader.replication.throttled.rate")
    assert rc == 0, "delete failed (rc=%s): %s %s" % (rc, out, err)
    rc, out, err = configs("--describe")
    assert rc == 0 and "leader.replication.throttled.rate" not in out, out
    # A config a broker reads only at start is refused, and nothing changes.
    rc, out, err = configs("--alter", "--add-config", "log.dirs=/elsewhere")
    assert rc != 0, out
    # Kafka up to 4.1 prints the keys as a Scala set, 4.4 as a Java one (as evenkeel does).
    assert ("Cannot update these configs dynamically: [log.dirs]" in out + err
            or "Cannot update these configs dynamically: Set(log.dirs)" in out + err), out + err
