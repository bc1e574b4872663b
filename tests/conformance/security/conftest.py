"""Security conformance tier: SASL (PLAIN, SCRAM-SHA-256/512) and the StandardAuthorizer.

Drives a node that tests/conformance/security/run starts (Apache Kafka or evenkeel) with the
same settings: a PLAINTEXT listener (User:ANONYMOUS, a super user) given by
--plaintext-bootstrap and a SASL_PLAINTEXT listener given by --sasl-bootstrap, super users
User:admin and User:ANONYMOUS, allow.everyone.if.no.acl.found=false, SCRAM-SHA-512 user admin
(admin-secret) from format --add-scram, PLAIN users admin (admin-secret) and bob (bob-secret).
See docs/conformance.md, "Security tier".
"""
import os
import subprocess
import time
import uuid

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TOOL = os.path.join(REPO_ROOT, "bench", "kafka", "tool")

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")


def pytest_addoption(parser):
    group = parser.getgroup("security conformance")
    group.addoption("--plaintext-bootstrap", action="store", required=True,
                    help="HOST:PORT of the PLAINTEXT listener (principal User:ANONYMOUS)")
    group.addoption("--sasl-bootstrap", action="store", required=True,
                    help="HOST:PORT of the SASL_PLAINTEXT listener")
    group.addoption("--target", action="store", default="kafka", choices=("kafka", "evenkeel"),
                    help="which broker runs (evenkeel enables the xfail marks of known evenkeel "
                         "differences)")


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:kafka")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:importlib")


@pytest.fixture(scope="session")
def plain_bootstrap(request):
    return request.config.getoption("--plaintext-bootstrap")


@pytest.fixture(scope="session")
def sasl_bootstrap(request):
    return request.config.getoption("--sasl-bootstrap")


@pytest.fixture(scope="session")
def target(request):
    return request.config.getoption("--target")


@pytest.fixture
def topic_name(request):
    """A topic name unique to this run and test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:32]
    return "sec-%s-%s" % (base.strip("-"), uuid.uuid4().hex[:8])


@pytest.fixture
def group_name():
    return "sec-group-%s" % uuid.uuid4().hex[:8]


# --- Kafka's Java tools with a client.properties file --------------------------------------

def run_tool(name, *args, timeout=120):
    """Run `bench/kafka/tool <name> args...`; returns (exit code, stdout, stderr)."""
    try:
        p = subprocess.run([TOOL, name, *[str(a) for a in args]], cwd=REPO_ROOT,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return -1, out, err + "\n[conformance] %s timed out after %ss" % (name, timeout)


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
def admin_props(tmp_path_factory):
    return write_client_properties(tmp_path_factory.mktemp("props") / "admin.properties", *ADMIN)


@pytest.fixture(scope="session")
def alice_props(tmp_path_factory):
    return write_client_properties(tmp_path_factory.mktemp("props") / "alice.properties", *ALICE)


class AdminTool:
    """Kafka's tools on the SASL listener as admin (SCRAM-SHA-512, client.properties)."""

    def __init__(self, bootstrap, props):
        self.bootstrap, self.props = bootstrap, props

    def acls(self, *args, props=None):
        return run_tool("kafka-acls", "--bootstrap-server", self.bootstrap,
                        "--command-config", props or self.props, *args)

    def configs(self, *args, props=None):
        return run_tool("kafka-configs", "--bootstrap-server", self.bootstrap,
                        "--command-config", props or self.props, *args)

    def topics(self, *args, props=None):
        return run_tool("kafka-topics", "--bootstrap-server", self.bootstrap,
                        "--command-config", props or self.props, *args)


@pytest.fixture(scope="session")
def admin_tool(sasl_bootstrap, admin_props):
    return AdminTool(sasl_bootstrap, admin_props)


def ok(result, what):
    rc, out, err = result
    assert rc == 0, "%s failed (rc=%s):\n%s\n%s" % (what, rc, out, err)
    return out


# --- kafka-python over SASL -----------------------------------------------------------------

def sasl_config(bootstrap, user, password, mechanism="SCRAM-SHA-512"):
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username=user,
                sasl_plain_password=password)


def eventually(check, timeout=15.0, interval=0.3):
    """Call check() until it returns without an AssertionError or exception, or the timeout
    passes (then the last error is raised). ACLs and SCRAM credentials reach a broker through
    the metadata log, a moment after the request that made them returned."""
    deadline = time.time() + timeout
    while True:
        try:
            return check()
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(interval)


@pytest.fixture(scope="session")
def alice_created(admin_tool):
    """User alice with a SCRAM-SHA-512 credential, made with kafka-configs as admin; returns the
    tool's (rc, stdout, stderr)."""
    return admin_tool.configs("--alter", "--add-config", "SCRAM-SHA-512=[password=alice-secret]",
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
