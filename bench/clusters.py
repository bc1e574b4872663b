"""The clusters bench/cluster and bench/compare --brokers 3 run: a 3-node Apache Kafka in KRaft
combined mode (bench/kafka/cluster, EVENKEEL_KAFKA_VOTERS=3) and a 3-node evenkeel (each node its
own `evenkeel broker` process, on the files `evenkeel dev --brokers 3` writes), with the same
controls: addresses, pids, kill with a signal, start a node again."""
import os
import re
import signal
import subprocess
import time

from confluent_kafka.admin import AdminClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA_CLUSTER = os.path.join(ROOT, "bench", "kafka", "cluster")
KAFKA_LIB = os.path.join(ROOT, "bench", "kafka", "lib.sh")


class BenchError(Exception):
    pass


def admin(bootstrap, socket_timeout_ms=5000):
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": socket_timeout_ms,
                        "log_level": 0})


def metadata(addr, topic=None, timeout=2.0):
    """Metadata from one broker, or None if it does not answer."""
    try:
        return admin(addr).list_topics(topic=topic, timeout=timeout)
    except Exception:  # noqa: BLE001 - a broker that is down or busy
        return None


def wait_until(what, timeout, check, every=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = check()
        if v:
            return v
        time.sleep(every)
    raise BenchError("timed out after %d s waiting for %s" % (timeout, what))


# --- the clusters ---------------------------------------------------------------------------

class KafkaCluster:
    name = "Kafka %s" % os.environ.get("EVENKEEL_KAFKA_VERSION", "4.4.0")

    @property
    def bootstrap(self):
        return ",".join(self.addrs)

    def pids(self):
        return [self.pid(n) for n in (1, 2, 3)]

    def __init__(self, workdir, overrides=()):
        self.dir = os.path.join(workdir, "kafka")
        # Extra broker properties for every node ("{node}" stands for its id).
        self.overrides = list(overrides)

    def start(self):
        env = dict(os.environ, EVENKEEL_KAFKA_VOTERS="3")
        p = subprocess.run([KAFKA_CLUSTER, "start", self.dir, "3"] + self.overrides, cwd=ROOT,
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise BenchError("Kafka did not start: %s" % p.stderr.strip()[-500:])
        self.addrs = p.stdout.strip().splitlines()[-1].split(",")

    def pid(self, node):
        with open(os.path.join(self.dir, "node-%d" % node, "pid")) as f:
            return int(f.read().strip())

    def kill(self, node, sig=signal.SIGKILL):
        pid = self.pid(node)
        os.kill(pid, sig)
        return pid

    def relaunch(self, node, wait=False):
        """Starts node `node` again on its server.properties, as bench/kafka/cluster does
        (`wait` is for the interface: readiness is measured by the caller)."""
        d = os.path.join(self.dir, "node-%d" % node)
        script = ('fail() { echo "$*" >&2; exit 1; }; . "%s"; kafka_setup; '
                  'kafka_launch "%s" "${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m}"') % (KAFKA_LIB, d)
        p = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            raise BenchError("Kafka node %d did not start: %s" % (node, p.stderr.strip()))

    def stop(self):
        subprocess.run([KAFKA_CLUSTER, "stop", self.dir], cwd=ROOT, capture_output=True)


class EvenkeelCluster:
    name = "evenkeel"

    @property
    def bootstrap(self):
        return ",".join(self.addrs)

    def pids(self):
        return [self.procs[n].pid for n in (1, 2, 3)]

    def __init__(self, workdir, binary, advertised=None, overrides=()):
        self.binary = binary
        self.dir = os.path.join(workdir, "evenkeel")
        self.procs = {}
        # node -> "host:port" clients are told to use instead of its listener (a relay in
        # front of it), and extra broker properties for every node ("{node}" stands for its id).
        self.advertised = advertised or {}
        self.overrides = list(overrides)

    def start(self):
        # `dev` writes the properties and formats; then each node runs as its own process
        # here, so that one can be killed and started again like a Kafka node.
        data = os.path.join(self.dir, "data")
        out = os.path.join(self.dir, "dev.out")
        os.makedirs(self.dir, exist_ok=True)
        with open(out, "w") as f:
            dev = subprocess.Popen([self.binary, "dev", "--brokers", "3", "--port", "0",
                                    "--no-proxy", "--no-rebalancer", "--data", data],
                                   stdout=f, stderr=subprocess.STDOUT)
        try:
            wait_until("evenkeel dev", 120, lambda: "brokers ready on" in open(out).read())
        finally:
            dev.send_signal(signal.SIGTERM)
            dev.wait(timeout=120)
        self.props = {i: os.path.join(data, "broker-%d.properties" % i) for i in (1, 2, 3)}
        self.addrs = []
        for i in (1, 2, 3):
            text = open(self.props[i]).read()
            port = re.search(r"^advertised.listeners=PLAINTEXT://[^:]+:(\d+)", text, re.M)
            self.addrs.append("127.0.0.1:%s" % port.group(1))
            extra = [o.replace("{node}", str(i)) for o in self.overrides]
            if i in self.advertised:
                extra.append("advertised.listeners=PLAINTEXT://%s" % self.advertised[i])
            if extra:
                text = re.sub(r"^advertised.listeners=.*\n", "", text, flags=re.M) \
                    if i in self.advertised else text
                with open(self.props[i], "w") as f:
                    f.write(text.rstrip("\n") + "\n" + "\n".join(extra) + "\n")
        for i in (1, 2, 3):
            self.relaunch(i, wait=False)
        for i in (1, 2, 3):
            self.wait_ready(i)

    def relaunch(self, node, wait=True):
        outp = os.path.join(self.dir, "node-%d.out" % node)
        self.outs = getattr(self, "outs", {})
        self.outs[node] = outp
        with open(outp, "w") as f:
            self.procs[node] = subprocess.Popen(
                [self.binary, "broker", "--config", self.props[node]],
                stdout=f, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready(node)

    def wait_ready(self, node):
        wait_until("evenkeel node %d" % node, 120,
                   lambda: " ready on " in open(self.outs[node]).read())

    def pid(self, node):
        return self.procs[node].pid

    def kill(self, node, sig=signal.SIGKILL):
        self.procs[node].send_signal(sig)
        return self.procs[node].pid

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def wait_exit(pid, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.02)
    raise BenchError("pid %d did not exit in %d s" % (pid, timeout))


