"""A locked-down 3-node cluster as its users meet it: Kafka's tools with a client.properties,
librdkafka and kafka-python, over SASL_SSL with SCRAM and over SSL with client certificates;
what each may do is what kafka-acls gave it, and every refusal is Kafka's."""
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from conftest import add_scram, allow, create_topic, end_offsets, eventually, logs_in, ok

N = 30


def produce_and_consume_rights(admin, who, topic, group):
    """What kafka-acls --producer --consumer gives (WRITE, DESCRIBE, CREATE and READ on the topic,
    READ on the group, in one CreateAcls), then until every broker has them."""
    allow(admin, who.principal, ["WRITE", "DESCRIBE", "CREATE", "READ"], topic, group)
    visible_everywhere(who, topic)


def visible_everywhere(who, topic):
    """Until each broker's Metadata names `topic` to `who`: the ACLs that let `who` describe it
    have reached every broker. A new librdkafka client knows only its bootstrap broker, so its
    first Metadata request goes there."""
    for broker in who.bootstrap.split(","):
        def named():
            md = AdminClient(who.librdkafka(**{"bootstrap.servers": broker}))
            t = md.list_topics(topic, timeout=10).topics[topic]
            assert t.error is None, "%s: %s" % (broker, t.error)
        eventually(named)


# --- Kafka's tools ----------------------------------------------------------------------------

def test_kafka_configs_adds_describes_and_deletes_scram_credentials(cluster, admin):
    user = "dave-" + uuid.uuid4().hex[:6]
    # Two mechanisms in one request alter one user twice: refused whole (DUPLICATE_RESOURCE)
    rc, out, err = admin.tool("kafka-configs", "--alter", "--entity-type", "users",
                              "--entity-name", user, "--add-config",
                              "SCRAM-SHA-512=[iterations=8192,password=d1],"
                              "SCRAM-SHA-256=[iterations=4096,password=d2]")
    assert rc != 0 and "cannot be altered twice in the same request" in out + err, (out, err)
    described = ok(admin.tool("kafka-configs", "--describe", "--entity-type", "users",
                              "--entity-name", user), "kafka-configs --describe")
    assert "SCRAM" not in described, described
    add_scram(admin, user, "SCRAM-SHA-512=[iterations=8192,password=d1]")
    add_scram(admin, user, "SCRAM-SHA-256=[iterations=4096,password=d2]")
    described = ok(admin.tool("kafka-configs", "--describe", "--entity-type", "users",
                              "--entity-name", user), "kafka-configs --describe")
    assert "SCRAM-SHA-512=iterations=8192" in described, described
    assert "SCRAM-SHA-256=iterations=4096" in described, described
    sha256 = cluster.scram(user, "d2", mechanism="SCRAM-SHA-256")
    eventually(lambda: logs_in(sha256))

    ok(admin.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", user,
                  "--delete-config", "SCRAM-SHA-256"), "kafka-configs --delete-config")
    described = ok(admin.tool("kafka-configs", "--describe", "--entity-type", "users",
                              "--entity-name", user), "kafka-configs --describe")
    assert "SCRAM-SHA-512=iterations=8192" in described and "SCRAM-SHA-256" not in described

    def refused():
        rc, out, err = sha256.tool("kafka-topics", "--list", timeout=60)
        assert rc != 0 and "Authentication failed" in out + err, (rc, out, err)
    eventually(refused)
    sha512 = cluster.scram(user, "d1")
    logs_in(sha512)


def test_kafka_acls_add_list_and_remove(admin, topic_name, group_name):
    ok(admin.tool("kafka-topics", "--create", "--topic", topic_name, "--partitions", 1,
                  "--replication-factor", 3), "kafka-topics --create")
    ok(admin.tool("kafka-acls", "--add", "--allow-principal", "User:alice", "--producer",
                  "--consumer", "--topic", topic_name, "--group", group_name), "kafka-acls --add")
    listed = ok(admin.tool("kafka-acls", "--list", "--topic", topic_name), "kafka-acls --list")
    for op in ("WRITE", "CREATE", "DESCRIBE", "READ"):
        assert "principal=User:alice, host=*, operation=%s, permissionType=ALLOW" % op in listed, \
            listed
    listed = ok(admin.tool("kafka-acls", "--list", "--group", group_name), "--list --group")
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in listed, listed

    ok(admin.tool("kafka-acls", "--remove", "--force", "--allow-principal", "User:alice",
                  "--operation", "Write", "--topic", topic_name), "kafka-acls --remove")
    listed = ok(admin.tool("kafka-acls", "--list", "--topic", topic_name), "kafka-acls --list")
    assert "operation=WRITE" not in listed and "operation=READ" in listed, listed


def test_kafka_tools_produce_and_consume_in_a_group_as_a_scram_user(admin, alice, topic_name,
                                                                    group_name):
    ok(admin.tool("kafka-topics", "--create", "--topic", topic_name, "--partitions", 3,
                  "--replication-factor", 3), "kafka-topics --create")
    ok(admin.tool("kafka-acls", "--add", "--allow-principal", alice.principal, "--producer",
                  "--consumer", "--topic", topic_name, "--group", group_name), "kafka-acls --add")
    visible_everywhere(alice, topic_name)
    lines = ["k%d:v%d" % (i, i) for i in range(N)]
    ok(alice.tool("kafka-console-producer", "--topic", topic_name,
                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
                  input="\n".join(lines) + "\n"),
       "kafka-console-producer as alice")
    assert sum(end_offsets(admin, topic_name).values()) == N
    out = ok(alice.tool("kafka-console-consumer", "--topic", topic_name, "--group", group_name,
                        "--from-beginning", "--max-messages", N, "--timeout-ms", 60000,
                        "--formatter-property", "print.key=true",
                        "--formatter-property", "key.separator=:"),
             "kafka-console-consumer --group as alice")
    assert sorted(out.split()) == sorted(lines)
    described = ok(admin.tool("kafka-consumer-groups", "--describe", "--group", group_name),
                   "kafka-consumer-groups --describe")
    rows = [line.split() for line in described.splitlines() if topic_name in line]
    assert len(rows) == 3 and sum(int(r[3]) for r in rows) == N, described  # CURRENT-OFFSET


def test_kafka_tools_produce_and_consume_with_a_client_certificate(admin, carol, topic_name,
                                                                   group_name):
    create_topic(admin, topic_name)
    produce_and_consume_rights(admin, carol, topic_name, group_name)
    lines = ["line-%d" % i for i in range(N)]
    ok(carol.tool("kafka-console-producer", "--topic", topic_name, input="\n".join(lines) + "\n"),
       "kafka-console-producer as CN=carol")
    assert sum(end_offsets(admin, topic_name).values()) == N
    out = ok(carol.tool("kafka-console-consumer", "--topic", topic_name, "--group", group_name,
                        "--from-beginning", "--max-messages", N, "--timeout-ms", 60000),
             "kafka-console-consumer as CN=carol")
    assert sorted(out.split()) == sorted(lines)


# --- librdkafka and kafka-python --------------------------------------------------------------

def rdkafka_round_trip(who, topic, group):
    """Produce N records with acks=all, then read them all back in a consumer group."""
    p = Producer(who.librdkafka(acks="all"))
    errors = []
    for i in range(N):
        p.produce(topic, key=b"%d" % i, value=b"value-%d" % i,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer(who.librdkafka(**{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([topic])
        got, deadline = [], time.time() + 60
        while len(got) < N and time.time() < deadline:
            msg = c.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(msg.error())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted(got) == sorted(b"value-%d" % i for i in range(N))


def kafka_python_round_trip(who, topic, group):
    p = KafkaProducer(acks="all", **who.kafka_python())
    try:
        for i in range(N):
            p.send(topic, b"value-%d" % i).get(timeout=30)
    finally:
        p.close(timeout=5)
    c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                      consumer_timeout_ms=20000, **who.kafka_python())
    try:
        got = []
        for msg in c:
            got.append(msg.value)
            if len(got) == N:
                break
        c.commit()
    finally:
        c.close()
    assert sorted(got) == sorted(b"value-%d" % i for i in range(N))


@pytest.mark.parametrize("client", [rdkafka_round_trip, kafka_python_round_trip],
                         ids=["librdkafka", "kafka-python"])
@pytest.mark.parametrize("identity", ["alice", "carol"])
def test_clients_produce_and_consume_in_a_group(request, admin, identity, client, topic_name,
                                                group_name):
    who = request.getfixturevalue(identity)
    create_topic(admin, topic_name)
    produce_and_consume_rights(admin, who, topic_name, group_name)
    client(who, topic_name, group_name)


# --- refusals ---------------------------------------------------------------------------------

def test_a_wrong_password_is_refused_and_the_cluster_keeps_serving(cluster, admin, alice):
    wrong = cluster.scram("alice", "not-her-password")
    rc, out, err = wrong.tool("kafka-topics", "--list", timeout=60)
    assert rc != 0 and "Authentication failed" in out + err, (rc, out, err)
    # librdkafka reports the refused login through its error callback (the Metadata call
    # itself only finds no broker to ask)
    errors = []
    a = AdminClient(wrong.librdkafka(log_level=0, error_cb=errors.append))
    with pytest.raises(KafkaException):
        a.list_topics(timeout=4)
    a.poll(1)
    del a  # librdkafka would go on retrying the login
    refusals = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert refusals and "Authentication failed" in refusals[0].str(), errors
    logs_in(alice)


@pytest.mark.parametrize("cert", ["", "mallory"], ids=["no-certificate", "untrusted-ca"])
def test_the_ssl_listener_refuses_a_client_it_cannot_verify(cluster, admin, carol, cert):
    stranger = cluster.certificate(cert)
    rc, out, err = stranger.tool("kafka-topics", "--list", timeout=60)
    # The server's alert ends the handshake (Java reports it at the first read after it)
    assert rc not in (0, -1) and "post-handshake" in out + err, (rc, out, err)
    c = Consumer(stranger.librdkafka(**{"group.id": "stranger", "log_level": 0}))
    try:
        with pytest.raises(KafkaException):
            c.list_topics(timeout=3)
    finally:
        c.close()
    logs_in(carol)


def test_a_produce_without_write_is_refused_and_writes_nothing(admin, alice, topic_name):
    create_topic(admin, topic_name, partitions=1)
    allow(admin, alice.principal, ["DESCRIBE", "READ"], topic_name)
    err = rdkafka_produce_one(alice, topic_name)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    kp = KafkaProducer(acks="all", max_block_ms=10000, retries=0, **alice.kafka_python())
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(topic_name, b"forbidden").get(timeout=20)
    finally:
        kp.close(timeout=2)
    assert end_offsets(admin, topic_name) == {0: 0}


def test_metadata_names_only_the_topics_a_principal_may_describe(admin, alice, topic_name):
    secret, shown = topic_name + "-secret", topic_name + "-shown"
    create_topic(admin, secret, partitions=1)
    create_topic(admin, shown, partitions=1)
    allow(admin, alice.principal, ["DESCRIBE"], shown)
    visible_everywhere(alice, shown)
    topics = ok(alice.tool("kafka-topics", "--list"), "kafka-topics --list as alice").split()
    assert shown in topics and secret not in topics, topics
    md = AdminClient(alice.librdkafka()).list_topics(timeout=10)
    assert shown in md.topics and secret not in md.topics
    rc, out, err = alice.tool("kafka-topics", "--describe", "--topic", secret)
    assert rc != 0 and "does not exist" in out + err and "Partition:" not in out, (out, err)


def test_a_removed_acl_takes_the_right_away(admin, alice, topic_name, group_name):
    create_topic(admin, topic_name, partitions=1)
    produce_and_consume_rights(admin, alice, topic_name, group_name)
    assert rdkafka_produce_one(alice, topic_name) is None
    written = 1
    ok(admin.tool("kafka-acls", "--remove", "--force", "--allow-principal", alice.principal,
                  "--producer", "--topic", topic_name), "kafka-acls --remove --producer")

    def refused():
        nonlocal written
        err = rdkafka_produce_one(alice, topic_name)
        written += err is None  # the removal had not reached the leader yet
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    eventually(refused)
    assert end_offsets(admin, topic_name) == {0: written}


def rdkafka_produce_one(who, topic):
    """One record with a new librdkafka producer: None once acked, else the KafkaError (from
    the delivery report, or from produce() itself when the Metadata already refused the topic)."""
    p = Producer(who.librdkafka(acks="all", **{"message.timeout.ms": 10000}))
    errors = []
    try:
        p.produce(topic, b"one", on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        return e.args[0]
    p.flush(20)
    assert len(errors) == 1, "no delivery report in 20 s"
    return errors[0]


# --- the controller listener ------------------------------------------------------------------

def test_kafka_metadata_quorum_reads_the_sasl_controller_listener_only_with_the_right(cluster,
                                                                                        admin):
    quorum = cluster.controller_login("quorum", "quorum-secret")
    out = ok(quorum.tool("kafka-metadata-quorum", "describe", "--status"),
             "kafka-metadata-quorum --bootstrap-controller as quorum")
    voters = [line for line in out.splitlines() if line.startswith("CurrentVoters:")]
    assert voters and all('"id": %d' % i in voters[0] for i in (1, 2, 3)), out
    # A login that is no super user: DescribeQuorum needs DESCRIBE on the cluster
    rc, out, err = cluster.controller_login("intruder", "intruder-secret").tool(
        "kafka-metadata-quorum", "describe", "--status", timeout=60)
    assert rc != 0 and "ClusterAuthorizationException" in out + err, (out, err)
    rc, out, err = cluster.controller_login("quorum", "not-the-secret").tool(
        "kafka-metadata-quorum", "describe", "--status", timeout=60)
    assert rc != 0 and "Authentication failed" in out + err, (out, err)
