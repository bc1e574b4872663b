"""Security conformance tier: SASL (PLAIN, SCRAM-SHA-256/512) and the StandardAuthorizer.

Drives a node that tests/conformance/security/run starts (Apache Kafka or evenkeel) with the
same settings: a PLAINTEXT listener (User:ANONYMOUS, a super user) given by
--plaintext-bootstrap and a SASL_PLAINTEXT listener given by --sasl-bootstrap, super users
User:admin and User:ANONYMOUS, allow.everyone.if.no.acl.found=false, SCRAM-SHA-512 user admin
(admin-secret) from format --add-scram, PLAIN users admin (admin-secret) and bob (bob-secret).
See docs/conformance.md, "Security tier".
"""
import os
import sys

import pytest

# The main suite's shared helpers (tests/conformance/common.py), outside --confcutdir.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import (eventually, ignore_kafka_python_warnings, name_fixtures, ok,  # noqa: E402,F401
                    run_tool)

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")


def pytest_addoption(parser):
    group = parser.getgroup("security conformance")
    group.addoption("--plaintext-bootstrap", action="store", required=True,
                    help="HOST:PORT of the PLAINTEXT listener (principal User:ANONYMOUS)")
    group.addoption("--sasl-bootstrap", action="store", required=True,
                    help="HOST:PORT of the SASL_PLAINTEXT listener")


def pytest_configure(config):
    ignore_kafka_python_warnings(config)


@pytest.fixture(scope="session")
def plain_bootstrap(request):
    return request.config.getoption("--plaintext-bootstrap")


@pytest.fixture(scope="session")
def sasl_bootstrap(request):
    return request.config.getoption("--sasl-bootstrap")


topic_name, group_name = name_fixtures("sec")


# --- Kafka's Java tools with a client.properties file --------------------------------------

def write_client_properties(path, user, password, mechanism="SCRAM-SHA-512"):
    """A client.properties as Kafka documents it for SASL/SCRAM (or PLAIN)."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    with open(path, "w") as f:
        f.write("security.protocol=SASL_PLAINTEXT\n")
        f.write("sasl.mechanism=%s\n" % mechanism)
        f.write('sasl.jaas.config=%s required username="%s" password="%s";\n'
                % (module, user, password))
    return str(path)


@pytest.fixture(scope="session")
def admin(sasl_bootstrap):
    """kafka-python config for admin (SCRAM-SHA-512 from format --add-scram, a super user)."""
    return sasl_config(sasl_bootstrap, *ADMIN)


@pytest.fixture(scope="session")
def admin_props(tmp_path_factory):
    return write_client_properties(tmp_path_factory.mktemp("props") / "admin.properties", *ADMIN)


@pytest.fixture(scope="session")
def alice_props(tmp_path_factory):
    return write_client_properties(tmp_path_factory.mktemp("props") / "alice.properties", *ALICE)


class AdminTool:
    """Kafka's tools on the SASL listener as admin (SCRAM-SHA-512, client.properties)."""

    def __init__(self, bootstrap, props):
        self.bootstrap, self.props = bootstrap, props

    def run(self, tool, *args, props=None):
        """`tool --bootstrap-server <sasl> --command-config <props or admin's> args...`."""
        return run_tool(tool, "--bootstrap-server", self.bootstrap,
                        "--command-config", props or self.props, *args)


@pytest.fixture(scope="session")
def admin_tool(sasl_bootstrap, admin_props):
    return AdminTool(sasl_bootstrap, admin_props)


# --- kafka-python over SASL -----------------------------------------------------------------

def sasl_config(bootstrap, user, password, mechanism="SCRAM-SHA-512"):
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username=user,
                sasl_plain_password=password)


@pytest.fixture(scope="session")
def alice_created(admin_tool):
    """User alice with a SCRAM-SHA-512 credential, made with kafka-configs as admin; returns the
    tool's (rc, stdout, stderr)."""
    return admin_tool.run("kafka-configs", "--alter", "--add-config",
                          "SCRAM-SHA-512=[password=alice-secret]",
                          "--entity-type", "users", "--entity-name", "alice")


@pytest.fixture(scope="session")
def alice(alice_created, sasl_bootstrap):
    """kafka-python config for alice (SCRAM-SHA-512), once she can authenticate."""
    ok(alice_created, "kafka-configs --alter --add-config SCRAM-SHA-512=[...] (alice)")
    from kafka.admin import KafkaAdminClient
    cfg = sasl_config(sasl_bootstrap, *ALICE)

    def connect():
        KafkaAdminClient(request_timeout_ms=5000, **cfg).close()
    eventually(connect, timeout=20)
    return cfg
