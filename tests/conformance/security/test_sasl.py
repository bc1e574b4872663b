"""PLAIN users from the listener's JAAS config; mechanisms the listener does not enable; what a
connection may send before it has authenticated."""
import pytest

import sasl_wire as wire
from conftest import ADMIN, BOB, eventually, sasl_config
from helpers import ACLOperation, ResourceType, admin_client, allow, create_topic

ENABLED = {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"}


def test_plain_user_from_jaas(admin, sasl_bootstrap, topic_name):
    bob = sasl_config(sasl_bootstrap, *BOB, mechanism="PLAIN")
    create_topic(admin, topic_name)
    allow(admin, "User:bob", [ACLOperation.DESCRIBE], ResourceType.TOPIC, topic_name)

    # bob logs in with PLAIN and is User:bob: he sees the topic he was granted
    def sees():
        adm = admin_client(bob)
        try:
            topics = adm.list_topics()
        finally:
            adm.close()
        assert topic_name in topics, topics
    eventually(sees, timeout=15)
    assert wire.plain_login(sasl_bootstrap, *BOB) == (wire.NONE, wire.NONE, "")
    # admin logs in with PLAIN too (its JAAS user) and is a super user
    adm = admin_client(sasl_config(sasl_bootstrap, *ADMIN, mechanism="PLAIN"))
    try:
        assert topic_name in adm.list_topics()
    finally:
        adm.close()


def test_plain_wrong_password(sasl_bootstrap):
    herr, err, msg = wire.plain_login(sasl_bootstrap, "bob", "not-bob-secret")
    assert (herr, err) == (wire.NONE, wire.SASL_AUTHENTICATION_FAILED), (herr, err, msg)
    herr, err, msg2 = wire.plain_login(sasl_bootstrap, "nobody", "x")
    assert (herr, err) == (wire.NONE, wire.SASL_AUTHENTICATION_FAILED), (herr, err, msg2)
    assert wire.plain_login(sasl_bootstrap, *BOB) == (wire.NONE, wire.NONE, "")
    assert msg == msg2 == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "GSSAPI", "OAUTHBEARER"])
def test_unknown_mechanism_refused(sasl_bootstrap, mechanism):
    with wire.Conn(sasl_bootstrap) as c:
        err, mechanisms = c.handshake(mechanism)
    assert err == wire.UNSUPPORTED_SASL_MECHANISM
    assert set(mechanisms) == ENABLED and len(mechanisms) == len(ENABLED), mechanisms
    # the broker goes on serving
    assert wire.scram_login(sasl_bootstrap, *ADMIN) == (wire.NONE, wire.NONE, "")


def test_request_before_authentication_closes_connection(sasl_bootstrap):
    with wire.Conn(sasl_bootstrap) as c:
        with pytest.raises(wire.Closed):
            c.metadata_v1_all()


def test_handshake_on_plaintext_listener(plain_bootstrap):
    with wire.Conn(plain_bootstrap) as c:
        err, mechanisms = c.handshake("PLAIN")
    assert (err, mechanisms) == (wire.ILLEGAL_SASL_STATE, [])
