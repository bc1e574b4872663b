"""The single brokers the side-by-side benchmarks run (bench/compare, bench/compaction): Apache
Kafka through bench/kafka/broker and `evenkeel dev --brokers 1`, each on a free port in its own
directory, with the same controls (start, stop, pids, the log directory), and Kafka's tools."""
import os
import re
import signal
import socket
import subprocess
import time

from clusters import BenchError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "bench", "kafka", "tool")
KAFKA_BROKER = os.path.join(ROOT, "bench", "kafka", "broker")
TOOL_TIMEOUT = 1800  # seconds for one tool run
# kafka-producer-perf-test's summary line, which `evenkeel perf produce|proxy` print too.
PERF_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def perf_summary(out):
    """The last summary line of a perf tool's output, as numbers."""
    found = PERF_LINE.findall(out)
    if not found:
        raise BenchError("no summary line in: %r" % out[-400:])
    sent, rps, mbps, avg, mx, p50, p95, p99, p999 = found[-1]
    return {"sent": int(sent), "rps": float(rps), "mbps": float(mbps), "avg_ms": float(avg),
            "max_ms": float(mx), "p50_ms": float(p50), "p95_ms": float(p95),
            "p99_ms": float(p99), "p999_ms": float(p999)}


def run(cmd, timeout=TOOL_TIMEOUT, stderr_to=None):
    """Runs a command from the repository root; its stdout, or BenchError with the last line
    it printed on a non-zero exit or a timeout. With `stderr_to` (a list), appends stderr to
    it."""
    try:
        p = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError("%s timed out after %d s" % (os.path.basename(cmd[0]), timeout))
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or [""])[-1]
        raise BenchError("%s exited %d: %s" % (cmd[0], p.returncode, tail[:300]))
    if stderr_to is not None:
        stderr_to.append(p.stderr)
    return p.stdout


def run_tool(*args, timeout=TOOL_TIMEOUT, stderr_to=None):
    """bench/kafka/tool args...; returns stdout, raises BenchError on a non-zero exit. With
    `stderr_to` (a list), appends stderr to it."""
    return run([TOOL, *[str(a) for a in args]], timeout=timeout, stderr_to=stderr_to)


class KafkaBroker:
    """Kafka ($EVENKEEL_KAFKA_VERSION, default 4.4.0) in KRaft combined mode; `overrides` are server.properties lines (k=v)."""
    name = "Kafka"

    def __init__(self, workdir, overrides=()):
        self.dir = os.path.join(workdir, "kafka")
        self.port = free_port()
        self.bootstrap = "127.0.0.1:%d" % self.port
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "server.log")
        self.overrides = list(overrides)
        self.pid = None

    def start(self):
        p = subprocess.run([KAFKA_BROKER, "start", self.dir, str(self.port), *self.overrides],
                           cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            raise BenchError("Kafka did not start: %s" % p.stderr.strip())
        # bench/kafka/broker writes the pid of the java process (nohup execs java)
        with open(os.path.join(self.dir, "pid")) as f:
            self.pid = int(f.read().strip())

    def pids(self):
        return [self.pid]

    def stop(self):
        subprocess.run([KAFKA_BROKER, "stop", self.dir], cwd=ROOT, capture_output=True)


class EvenkeelBroker:
    """`evenkeel dev --brokers 1`; `overrides` go to --override, `args` to dev itself, `env`
    replaces the environment. Its stderr (the log) is at `log_path`."""
    name = "evenkeel"

    def __init__(self, workdir, binary, overrides=(), args=(), env=None, timeout=30):
        self.binary = binary
        self.dir = os.path.join(workdir, "evenkeel")
        self.port = free_port()
        self.bootstrap = "127.0.0.1:%d" % self.port
        self.data = None
        self.out_path = os.path.join(self.dir, "evenkeel.out")
        self.log_path = os.path.join(self.dir, "evenkeel.err")
        self.overrides, self.args, self.env, self.timeout = list(overrides), list(args), env, timeout
        self.proc = None
        self.pid = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        cmd = [self.binary, "dev", "--brokers", "1", "--port", str(self.port), *self.args,
               "--data", os.path.join(self.dir, "data"),
               "--override", "evenkeel.metrics.address=127.0.0.1:%d" % free_port()]
        for kv in self.overrides:
            cmd += ["--override", kv]
        with open(self.out_path, "w") as out, open(self.log_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         env=self.env)
        self.pid = self.proc.pid
        ready = "ready on 127.0.0.1:%d" % self.port
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            with open(self.out_path) as f:
                text = f.read()
            # The banner names the broker's log directory on a `data:` line.
            m = re.search(r"^ *data: *(\S+)", text, re.M)
            if ready in text and m:
                self.data = m.group(1)
                return
            if self.proc.poll() is not None:
                with open(self.log_path) as f:
                    tail = f.read().strip().splitlines()[-3:]
                raise BenchError("evenkeel exited during start: %s" % " | ".join(tail))
            time.sleep(0.1)
        self.stop()
        raise BenchError("evenkeel not ready after %d s (no %r and data: line in its stdout)"
                         % (self.timeout, ready))

    def pids(self):
        return [self.pid]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
