"""The SASL_SSL setup bench/compare --security sasl_ssl gives both brokers: a CA and a broker
certificate for 127.0.0.1 made with openssl, the same listener keys (Kafka's names), a SCRAM-SHA-512
user with ACLs on the benchmark's topics and groups, and Kafka's client.properties for it.

Each broker keeps a PLAINTEXT listener (User:ANONYMOUS, a super user) for creating topics, the
user and its ACLs; the workloads run on the SASL_SSL listener with the StandardAuthorizer on."""
import os
import subprocess
import time

from brokers import run_tool
from clusters import BenchError

USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-512"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def openssl(workdir, *args):
    p = subprocess.run(["openssl", *args], cwd=workdir, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError("openssl %s failed: %s" % (args[0], p.stderr.strip()[-300:]))


class Secured:
    """The files in `workdir/tls`: ca.pem, broker.pem (PKCS#8 key, then the certificate),
    client.properties."""

    def __init__(self, workdir, binary):
        self.binary = binary  # evenkeel, for `evenkeel perf auth`
        self.dir = os.path.join(workdir, "tls")
        os.makedirs(self.dir, exist_ok=True)
        self.ca = os.path.join(self.dir, "ca.pem")
        self.keystore = os.path.join(self.dir, "broker.pem")
        self.client_properties = os.path.join(self.dir, "client.properties")
        self._certificates()
        with open(self.client_properties, "w") as f:
            f.write("security.protocol=SASL_SSL\n")
            f.write("ssl.truststore.type=PEM\n")
            f.write("ssl.truststore.location=%s\n" % self.ca)
            f.write("sasl.mechanism=%s\n" % MECHANISM)
            f.write('sasl.jaas.config=%s required username="%s" password="%s";\n'
                    % (SCRAM_MODULE, USER, PASSWORD))

    def _certificates(self):
        """RSA 2048 (what most deployments use), valid for two days."""
        openssl(self.dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
                "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench-ca")
        openssl(self.dir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key",
                "-out", "broker.csr", "-subj", "/CN=localhost")
        with open(os.path.join(self.dir, "san.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        openssl(self.dir, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey",
                "ca.key", "-CAcreateserial", "-out", "broker.crt", "-days", "2", "-extfile",
                "san.ext")
        with open(self.keystore, "w") as out:
            for part in ("broker.key", "broker.crt"):
                with open(os.path.join(self.dir, part)) as f:
                    out.write(f.read())

    def overrides(self, plain_port, secure_port, controller_port):
        """server.properties lines for a node whose PLAINTEXT listener is `plain_port`."""
        return [
            "listeners=PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d"
            % (plain_port, secure_port, controller_port),
            "advertised.listeners=PLAINTEXT://127.0.0.1:%d,SASL_SSL://127.0.0.1:%d"
            % (plain_port, secure_port),
            "listener.security.protocol.map="
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=%s" % MECHANISM,
            "listener.name.sasl_ssl.%s.sasl.jaas.config=%s required;"
            % (MECHANISM.lower(), SCRAM_MODULE),
            "listener.name.sasl_ssl.ssl.keystore.type=PEM",
            "listener.name.sasl_ssl.ssl.keystore.location=%s" % self.keystore,
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=false",
        ]

    def add_user(self, plain_bootstrap, topic_prefix, group_prefix):
        """The SCRAM user (kafka-configs, 4096 iterations as Kafka's default) and its ACLs:
        everything on the topics and groups whose names start with the prefixes."""
        run_tool("kafka-configs", "--bootstrap-server", plain_bootstrap, "--alter",
                 "--add-config", "%s=[password=%s]" % (MECHANISM, PASSWORD),
                 "--entity-type", "users", "--entity-name", USER, timeout=120)
        run_tool("kafka-acls", "--bootstrap-server", plain_bootstrap, "--add",
                 "--allow-principal", "User:" + USER, "--operation", "All",
                 "--resource-pattern-type", "prefixed", "--topic", topic_prefix,
                 "--group", group_prefix, timeout=120)

    def wait_for_login(self, secure_bootstrap, timeout=60):
        """Until the user can log in on the SASL_SSL listener (the credential has reached the
        broker's metadata)."""
        deadline = time.time() + timeout
        while True:
            try:
                return self.logins_per_second(secure_bootstrap, seconds=0, concurrency=1)
            except BenchError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)

    def logins_per_second(self, secure_bootstrap, seconds=10, concurrency=8):
        """`evenkeel perf auth`: TCP + TLS + ApiVersions + SCRAM logins per second."""
        p = subprocess.run(
            [self.binary, "perf", "auth", "--bootstrap", secure_bootstrap,
             "--command-config", self.client_properties,
             "--seconds", str(seconds), "--concurrency", str(concurrency)],
            capture_output=True, text=True, timeout=seconds + 120)
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or [""])[-1]
            raise BenchError("evenkeel perf auth exited %d: %s" % (p.returncode, tail[:300]))
        # "N logins in S s: X logins/sec (...), F failed"
        line = p.stdout.strip().splitlines()[-1]
        rate = float(line.split(": ", 1)[1].split(" ", 1)[0])
        failed = int(line.rsplit(", ", 1)[1].split(" ")[0])
        if failed:
            raise BenchError("evenkeel perf auth: %s" % line)
        return rate
