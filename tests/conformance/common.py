"""What the conformance suite's conftest.py and the security tier's share: a plain module, not a
conftest (the security tier runs pytest with --confcutdir on its own directory, so it imports
this through sys.path, as sasl_wire.py imports wire)."""
import os
import subprocess
import time
import uuid

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(REPO_ROOT, "bench", "kafka", "tool")


def run_tool(name, *args, timeout=120, input=None):
    """Run `bench/kafka/tool <name> args...` (with `input` on its stdin, else none); returns
    (exit code, stdout, stderr).

    A timeout is reported as exit code -1 with a note on stderr (it does not raise)."""
    try:
        stdin = subprocess.DEVNULL if input is None else None
        p = subprocess.run([TOOL, name, *[str(a) for a in args]], cwd=REPO_ROOT, stdin=stdin,
                           input=input, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return -1, out, err + "\n[conformance] %s timed out after %ss" % (name, timeout)


def ok(result, what):
    """The stdout of a `run_tool` result that must have succeeded."""
    rc, out, err = result
    assert rc == 0, "%s failed (rc=%s):\n%s\n%s" % (what, rc, out, err)
    return out


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


def ignore_kafka_python_warnings(config):
    """kafka-python 3.0 loads its protocol schemas with deprecated importlib.resources calls."""
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:kafka")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:importlib")


def name_fixtures(prefix):
    """The `topic_name` and `group_name` fixtures, names unique to the run (and the test), each
    starting with `prefix`; a conftest binds them to those names."""
    @pytest.fixture
    def topic_name(request):
        """A topic name unique to this run and test."""
        base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
        return "%s-%s-%s" % (prefix, base.strip("-"), uuid.uuid4().hex[:8])

    @pytest.fixture
    def group_name():
        """A group name unique to this run."""
        return "%s-group-%s" % (prefix, uuid.uuid4().hex[:8])

    return topic_name, group_name
