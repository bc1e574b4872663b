"""The locked-down 3-node cluster tier: Kafka's tools, librdkafka and kafka-python on SASL_SSL
(SCRAM) and SSL (client certificates) listeners, the StandardAuthorizer with no open door.

tests/conformance/secure-cluster/run starts the cluster (Apache Kafka or evenkeel, the same
server.properties) and passes its SASL_SSL and SSL bootstrap lists and the directory of its
certificates: ca.crt (the cluster CA), carol.{pem,crt,key} (CN=carol, signed by it) and
mallory.{pem,crt,key} (signed by a CA the cluster does not trust), and its controller listeners
(SASL_SSL with PLAIN users quorum/quorum-secret, the nodes' own login and a super user, and
intruder/intruder-secret). User admin (admin-secret, SCRAM-SHA-512, from format --add-scram) is
a super user.
"""
import os
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

# The main suite's shared helpers (tests/conformance/common.py), outside --confcutdir.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import eventually as common_eventually  # noqa: E402
from common import ignore_kafka_python_warnings, name_fixtures, ok, run_tool  # noqa: E402,F401

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def pytest_addoption(parser):
    group = parser.getgroup("secure cluster")
    group.addoption("--sasl-bootstrap", action="store", required=True,
                    help="the SASL_SSL listeners, HOST:PORT,...")
    group.addoption("--ssl-bootstrap", action="store", required=True,
                    help="the SSL listeners (client certificates required), HOST:PORT,...")
    group.addoption("--controller-bootstrap", action="store", required=True,
                    help="the controller listeners (SASL_SSL, PLAIN), HOST:PORT,...")
    group.addoption("--pki", action="store", required=True,
                    help="the directory of ca.crt and the clients' certificates")


def pytest_configure(config):
    ignore_kafka_python_warnings(config)


topic_name, group_name = name_fixtures("secure")


class Identity:
    """How one client proves who it is: a SCRAM login on the SASL_SSL listeners, or a client
    certificate (or none) on the SSL listeners. Gives the same identity to each client: a
    client.properties for Kafka's tools, a librdkafka config and a kafka-python config."""

    def __init__(self, cluster, name, password=None, mechanism="SCRAM-SHA-512", cert=None,
                 controller=False):
        self.cluster, self.name, self.password, self.mechanism = cluster, name, password, mechanism
        self.cert = cert  # a file stem in the pki directory, for SSL; None on SASL_SSL
        self.sasl = password is not None
        self.controller = controller  # on the controller listeners (--bootstrap-controller)
        self.bootstrap = (cluster.controller_bootstrap if controller else
                          cluster.sasl_bootstrap if self.sasl else cluster.ssl_bootstrap)
        self.principal = "User:%s" % (name if self.sasl else "CN=" + name)
        self.properties = self._write_properties()

    def _pki(self, name):
        return os.path.join(self.cluster.pki, name)

    def _write_properties(self):
        """client.properties as Kafka documents it for SASL_SSL with SCRAM, or SSL with a PEM
        keystore (KIP-651)."""
        lines = ["ssl.truststore.type=PEM", "ssl.truststore.location=%s" % self._pki("ca.crt")]
        if self.sasl:
            module = PLAIN_MODULE if self.mechanism == "PLAIN" else SCRAM_MODULE
            lines += ["security.protocol=SASL_SSL", "sasl.mechanism=%s" % self.mechanism,
                      'sasl.jaas.config=%s required username="%s" password="%s";'
                      % (module, self.name, self.password)]
        else:
            lines.append("security.protocol=SSL")
            if self.cert:
                lines += ["ssl.keystore.type=PEM",
                          "ssl.keystore.location=%s" % self._pki(self.cert + ".pem")]
        path = os.path.join(self.cluster.props_dir, "%s-%s.properties"
                            % (self.name, uuid.uuid4().hex[:8]))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def tool(self, name, *args, input=None, timeout=120):
        """Kafka's tool `name` on this identity's listeners with its client.properties."""
        flag = "--bootstrap-controller" if self.controller else "--bootstrap-server"
        return run_tool(name, flag, self.bootstrap, "--command-config", self.properties, *args,
                        input=input, timeout=timeout)

    def librdkafka(self, **extra):
        cfg = {"bootstrap.servers": self.bootstrap, "ssl.ca.location": self._pki("ca.crt")}
        if self.sasl:
            cfg.update({"security.protocol": "SASL_SSL", "sasl.mechanism": self.mechanism,
                        "sasl.username": self.name, "sasl.password": self.password})
        else:
            cfg["security.protocol"] = "SSL"
            if self.cert:
                cfg.update({"ssl.certificate.location": self._pki(self.cert + ".crt"),
                            "ssl.key.location": self._pki(self.cert + ".key")})
        cfg.update(extra)
        return cfg

    def kafka_python(self):
        cfg = dict(bootstrap_servers=self.bootstrap.split(","), ssl_cafile=self._pki("ca.crt"))
        if self.sasl:
            cfg.update(security_protocol="SASL_SSL", sasl_mechanism=self.mechanism,
                       sasl_plain_username=self.name, sasl_plain_password=self.password)
        else:
            cfg["security_protocol"] = "SSL"
            if self.cert:
                cfg.update(ssl_certfile=self._pki(self.cert + ".crt"),
                           ssl_keyfile=self._pki(self.cert + ".key"))
        return cfg


class Cluster:
    def __init__(self, config, props_dir):
        self.sasl_bootstrap = config.getoption("--sasl-bootstrap")
        self.ssl_bootstrap = config.getoption("--ssl-bootstrap")
        self.controller_bootstrap = config.getoption("--controller-bootstrap")
        self.pki = config.getoption("--pki")
        self.props_dir = str(props_dir)

    def scram(self, name, password, mechanism="SCRAM-SHA-512"):
        return Identity(self, name, password=password, mechanism=mechanism)

    def controller_login(self, name, password):
        """A PLAIN login on the controller listeners."""
        return Identity(self, name, password=password, mechanism="PLAIN", controller=True)

    def certificate(self, name):
        """CN=<name>, key and certificate in the pki directory; "" for no certificate."""
        return Identity(self, name or "anonymous", cert=name or None)


def eventually(check, timeout=30.0, interval=0.5):
    """common.eventually with this tier's patience: three brokers must all have applied a
    change made through the metadata log."""
    return common_eventually(check, timeout=timeout, interval=interval)


def logs_in(who):
    """kafka-broker-api-versions as `who` reaches all three brokers (it prints an ERROR line for
    each broker it cannot log in to, and exits 0 unless the first one refuses)."""
    out = ok(who.tool("kafka-broker-api-versions"), "kafka-broker-api-versions as %s" % who.name)
    brokers = [line for line in out.splitlines() if " (id: " in line and " rack: " in line]
    assert len(brokers) == 3 and "ERROR" not in out, out
    return out


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory):
    return Cluster(request.config, tmp_path_factory.mktemp("props"))


@pytest.fixture(scope="session")
def admin(cluster):
    """The super user from format --add-scram, once all three brokers are registered."""
    who = cluster.scram("admin", "admin-secret")
    eventually(lambda: logs_in(who), timeout=120, interval=1)
    return who


@pytest.fixture(scope="session")
def alice(cluster, admin):
    """User alice with SCRAM-SHA-512 and SCRAM-SHA-256 credentials made with kafka-configs,
    once she can log in; no ACLs."""
    add_scram(admin, "alice", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]")
    add_scram(admin, "alice", "SCRAM-SHA-256=[password=alice-secret]")
    who = cluster.scram("alice", "alice-secret")
    eventually(lambda: logs_in(who))
    return who


@pytest.fixture(scope="session")
def carol(cluster, admin):
    """The client certificate CN=carol (signed by the cluster CA); no ACLs."""
    return cluster.certificate("carol")


def add_scram(admin, user, credential):
    """kafka-configs --alter --add-config <credential> --entity-type users as admin."""
    ok(admin.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", user,
                  "--add-config", credential), "kafka-configs --add-config %s" % credential)


def create_topic(admin, topic, partitions=3):
    """A topic with replication factor 3 made with librdkafka's CreateTopics as admin, once
    every partition has an ISR of 3 (a produce with acks=all then waits for no follower).
    Kafka's tools are the subject of the tests that use them; the others set up with this."""
    a = AdminClient(admin.librdkafka())
    a.create_topics([NewTopic(topic, partitions, 3)])[topic].result(timeout=30)

    def in_sync():
        md = a.list_topics(topic, timeout=10).topics[topic]
        assert md.error is None and len(md.partitions) == partitions, md.error
        assert all(len(p.isrs) == 3 for p in md.partitions.values()), md.partitions
    eventually(in_sync)


def allow(admin, principal, operations, topic, group=None):
    """ALLOW ACLs (host *) for principal: each operation on the literal topic, and READ on the
    group when one is given, made with librdkafka's CreateAcls as admin."""
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                       getattr(AclOperation, op), AclPermissionType.ALLOW) for op in operations]
    if group:
        acls.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, principal,
                               "*", AclOperation.READ, AclPermissionType.ALLOW))
    client = AdminClient(admin.librdkafka())  # held until the futures resolve
    for future in client.create_acls(acls).values():
        future.result(timeout=30)


def end_offsets(admin, topic):
    """{partition: end offset}, read as admin."""
    c = Consumer(admin.librdkafka(**{"group.id": "end-offsets"}))
    try:
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        c.close()
