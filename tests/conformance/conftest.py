"""Conformance suite: drives a Kafka-compatible broker given by --bootstrap HOST:PORT.

Uses kafka-python and Apache Kafka's Java tools (bench/kafka/tool). See docs/conformance.md.
"""
import os
import subprocess
import uuid

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(REPO_ROOT, "bench", "kafka", "tool")


def pytest_addoption(parser):
    group = parser.getgroup("conformance")
    group.addoption("--bootstrap", action="store", required=True,
                    help="HOST:PORT of the broker under test")
    group.addoption("--data-dir", action="store", default=None,
                    help="the broker's log directory (enables the kafka-dump-log tests)")
    group.addoption("--target", action="store", default="kafka", choices=("kafka", "evenkeel"),
                    help="which broker runs (evenkeel enables the xfail marks of known evenkeel "
                         "failures)")


@pytest.fixture(scope="session")
def bootstrap(request):
    return request.config.getoption("--bootstrap")


@pytest.fixture(scope="session")
def data_dir(request):
    return request.config.getoption("--data-dir")


@pytest.fixture(scope="session")
def target(request):
    return request.config.getoption("--target")


def xfail_on_evenkeel(request, reason):
    """Mark the running test xfail (non-strict) when the target is evenkeel; never on Kafka."""
    if request.config.getoption("--target") == "evenkeel":
        request.node.add_marker(pytest.mark.xfail(reason="evenkeel: " + reason, strict=False))


@pytest.fixture
def topic_name(request):
    """A topic name unique to this test run and test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return "conf-%s-%s" % (base.strip("-"), uuid.uuid4().hex[:8])


@pytest.fixture
def group_name(request):
    return "conf-group-%s" % uuid.uuid4().hex[:8]


def run_tool(name, *args, timeout=120):
    """Run `bench/kafka/tool <name> args...`; returns (exit code, stdout, stderr).

    A timeout is reported as exit code -1 with a note on stderr (it does not raise)."""
    try:
        p = subprocess.run([TOOL, name, *[str(a) for a in args]], cwd=REPO_ROOT,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return -1, out, err + "\n[conformance] %s timed out after %ss" % (name, timeout)


@pytest.fixture(scope="session")
def tool():
    return run_tool


def create_topic(bootstrap, topic, partitions=1, configs=()):
    extra = []
    for c in configs:
        extra += ["--config", c]
    rc, out, err = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create",
                            "--topic", topic, "--partitions", partitions,
                            "--replication-factor", 1, *extra)
    assert rc == 0, "kafka-topics --create failed (rc=%s): %s %s" % (rc, out, err)
    return out


@pytest.fixture
def make_topic(bootstrap):
    def make(topic, partitions=1, configs=()):
        return create_topic(bootstrap, topic, partitions, configs)
    return make


def pytest_configure(config):
    # kafka-python 3.0 loads its protocol schemas with deprecated importlib.resources calls.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:kafka")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:importlib")
