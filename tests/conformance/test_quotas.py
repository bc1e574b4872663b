"""Client quotas with kafka-configs (AlterClientQuotas, DescribeClientQuotas): set, described,
removed, for a client id, the default client and a user; a negative rate refused with Kafka's
message and nothing set. On a cluster the describe may reach another broker than the change
did, which learns it from the metadata log a moment later: the reads wait for it."""
import uuid

from common import eventually, ok
from conftest import run_tool


def configs(bootstrap, *args):
    return run_tool("kafka-configs", "--bootstrap-server", bootstrap, *args)


def shows(bootstrap, entity, present=(), absent=()):
    """Waits until kafka-configs --describe of `entity` prints every `present` text and none of
    the `absent` ones; returns what it printed."""
    def check():
        out = ok(configs(bootstrap, "--describe", *entity), "kafka-configs --describe")
        for text in present:
            assert text in out, out
        for text in absent:
            assert text not in out, out
        return out
    return eventually(check)


def test_client_quotas_are_set_described_and_removed(bootstrap):
    client = "quota-client-%s" % uuid.uuid4().hex[:8]
    entity = ("--entity-type", "clients", "--entity-name", client)
    out = ok(configs(bootstrap, "--alter", *entity, "--add-config",
                     "producer_byte_rate=1048576,consumer_byte_rate=2097152"), "alter")
    assert "Completed updating config for client %s." % client in out, out
    shows(bootstrap, entity, present=("Quota configs for client-id '%s' are" % client,
                                      "producer_byte_rate=1048576.0",
                                      "consumer_byte_rate=2097152.0"))
    ok(configs(bootstrap, "--alter", *entity, "--delete-config", "producer_byte_rate"), "delete")
    shows(bootstrap, entity, present=("consumer_byte_rate=2097152.0",),
          absent=("producer_byte_rate",))
    ok(configs(bootstrap, "--alter", *entity, "--delete-config", "consumer_byte_rate"), "delete")
    shows(bootstrap, ("--entity-type", "clients"), absent=(client,))


def test_default_client_and_user_quotas(bootstrap):
    """A default every client falls under: a request share no test comes near, removed after."""
    user = "quota-user-%s" % uuid.uuid4().hex[:8]
    default = ("--entity-type", "clients", "--entity-default")
    ok(configs(bootstrap, "--alter", *default, "--add-config", "request_percentage=1000"),
       "alter")
    try:
        shows(bootstrap, default,
              present=("Quota configs for the default client-id are request_percentage=1000.0",))
    finally:
        ok(configs(bootstrap, "--alter", *default, "--delete-config", "request_percentage"),
           "delete")
    users = ("--entity-type", "users", "--entity-name", user)
    ok(configs(bootstrap, "--alter", *users, "--add-config", "request_percentage=25.5"), "alter")
    shows(bootstrap, users, present=("request_percentage=25.5",))
    ok(configs(bootstrap, "--alter", *users, "--delete-config", "request_percentage"), "delete")
    shows(bootstrap, users, absent=("request_percentage",))


def test_a_negative_rate_is_refused_and_nothing_is_set(bootstrap):
    client = "quota-bad-%s" % uuid.uuid4().hex[:8]
    entity = ("--entity-type", "clients", "--entity-name", client)
    rc, out, err = configs(bootstrap, "--alter", *entity, "--add-config",
                           "producer_byte_rate=-1")
    assert rc != 0, out
    assert "Quota producer_byte_rate must be greater than 0" in out + err, out + err
    assert "producer_byte_rate" not in ok(configs(bootstrap, "--describe", *entity), "describe")
