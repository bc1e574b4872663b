"""Conformance suite: drives a Kafka-compatible broker given by --bootstrap HOST:PORT.

Uses kafka-python and Apache Kafka's Java tools (bench/kafka/tool). See docs/conformance.md.
"""
import pytest

from common import ignore_kafka_python_warnings, name_fixtures, run_tool

# The security tiers (SASL listeners, TLS, the authorizer) need nodes set up for them:
# tests/conformance/security/run and tests/conformance/secure-cluster/run start them and run
# them on their own.
collect_ignore = ["security", "secure-cluster"]

def pytest_addoption(parser):
    group = parser.getgroup("conformance")
    group.addoption("--bootstrap", action="store", required=True,
                    help="HOST:PORT[,HOST:PORT...] of the broker(s) under test")
    group.addoption("--data-dir", action="store", default=None,
                    help="the broker's log directory, or several joined by ':' for a cluster "
                         "(enables the kafka-dump-log tests)")
    group.addoption("--target", action="store", default="kafka", choices=("kafka", "evenkeel"),
                    help="which broker runs (evenkeel enables the xfail marks of known evenkeel "
                         "failures)")
    group.addoption("--brokers", action="store", type=int, default=None,
                    help="number of brokers of the target (default: asked with DescribeCluster "
                         "when a scenario marked needs_brokers(n) runs)")


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


topic_name, group_name = name_fixtures("conf")


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
    ignore_kafka_python_warnings(config)
    config.addinivalue_line("markers", "needs_brokers(n): the scenario needs a cluster of at "
                            "least n brokers; on a smaller target it is reported as NOT YET")


# --- "not yet": scenarios that need what the target does not have (several brokers) ---------

NOT_YET = "not yet"


def target_broker_count(config):
    """The number of brokers of the target: --brokers, else DescribeCluster (asked once)."""
    if getattr(config, "_conformance_brokers", None) is None:
        count = config.getoption("--brokers")
        if count is None:
            from kafka.admin import KafkaAdminClient
            adm = KafkaAdminClient(bootstrap_servers=config.getoption("--bootstrap"),
                                   request_timeout_ms=15000)
            try:
                count = len(adm.describe_cluster()["brokers"])
            finally:
                adm.close()
        config._conformance_brokers = count
    return config._conformance_brokers


def not_yet_reason(needed, have):
    return "%s: needs %d brokers, target has %d" % (NOT_YET, needed, have)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    mark = item.get_closest_marker("needs_brokers")
    if mark is None:
        return
    needed = mark.args[0] if mark.args else mark.kwargs["n"]
    have = target_broker_count(item.config)
    if have < needed:
        pytest.skip(not_yet_reason(needed, have))


# --- per-scenario report: PASS / FAIL / ERROR / XFAIL / XPASS / NOT YET / SKIP --------------

OUTCOMES = {}  # nodeid -> (outcome, detail), in run order

def skip_reason(report):
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        reason = report.longrepr[2]
    else:
        reason = str(report.longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def classify(report):
    """The outcome one phase report gives the scenario, or None if it says nothing new."""
    if report.failed:
        return ("FAIL", "") if report.when == "call" else ("ERROR", "in " + report.when)
    if report.skipped:
        if hasattr(report, "wasxfail"):
            return "XFAIL", report.wasxfail
        reason = skip_reason(report)
        return ("NOT YET" if reason.startswith(NOT_YET) else "SKIP"), reason
    if report.when == "call":
        return ("XPASS", report.wasxfail) if hasattr(report, "wasxfail") else ("PASS", "")
    return None


def pytest_runtest_logreport(report):
    outcomes = OUTCOMES
    got = classify(report)
    if got is None:
        return
    prev = outcomes.get(report.nodeid)
    # a failure in teardown does not hide a failed call; any failure beats a pass
    if prev is None or prev[0] not in ("FAIL", "ERROR"):
        outcomes[report.nodeid] = got


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    outcomes = OUTCOMES
    if not outcomes:
        return
    tr = terminalreporter
    target = config.getoption("--target")
    tr.write_sep("=", "conformance report (%s at %s)" % (target, config.getoption("--bootstrap")))
    width = max(len(o) for o, _ in outcomes.values())
    for nodeid, (outcome, detail) in outcomes.items():
        line = "%-*s  %s" % (width, outcome, nodeid)
        tr.write_line(line + ("  (%s)" % detail if detail and outcome != "PASS" else ""))
    counts = {}
    for outcome, _ in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    order = ["PASS", "FAIL", "ERROR", "XFAIL", "XPASS", "NOT YET", "SKIP"]
    tr.write_line(", ".join("%d %s" % (counts[o], o) for o in order if o in counts))

    not_yet = [(n, d) for n, (o, d) in outcomes.items() if o == "NOT YET"]
    if not_yet:
        tr.write_sep("=", "NOT YET: %d scenario(s) need what %s does not have"
                     % (len(not_yet), target))
        for nodeid, detail in not_yet:
            why = detail[len(NOT_YET):].lstrip(": ")
            tr.write_line("NOT YET  %s  -- not yet (%s)" % (nodeid, why))
