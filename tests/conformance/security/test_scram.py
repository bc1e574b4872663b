"""SCRAM users made with kafka-configs, then logins with them (kafka-python and raw SASL)."""
import pytest

import sasl_wire as wire
from conftest import ALICE, eventually, ok, sasl_config
from helpers import admin_client


SCRAM_FAILED = ("Authentication failed during authentication due to invalid credentials with "
                "SASL mechanism %s")


def test_add_scram_user_and_authenticate(alice_created, admin, alice):
    out = ok(alice_created, "kafka-configs --alter (alice)")
    assert out.strip() == "Completed updating config for user alice.", out
    # kafka-python authenticates as alice (the `alice` fixture waited for it) and asks again
    adm = admin_client(alice)
    try:
        adm.list_topics()
    finally:
        adm.close()
    # DescribeUserScramCredentials (kafka-python) as admin: alice's and the formatted admin's
    adm = admin_client(admin)
    try:
        described = adm.describe_user_scram_credentials(["alice", "admin"])
    finally:
        adm.close()
    for user in ("alice", "admin"):
        assert described[user]["error"] is None, described
        infos = [(i["mechanism"].name, i["iterations"]) for i in described[user]["credential_infos"]]
        assert infos == [("SCRAM_SHA_512", 4096)], described


def test_describe_users_with_kafka_configs(alice, admin_tool):
    out = ok(admin_tool.run("kafka-configs", "--describe", "--entity-type", "users"),
             "kafka-configs --describe --entity-type users")
    lines = out.splitlines()
    assert ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=4096"
            in lines), out
    # the credential given to format --add-scram
    assert ("SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096"
            in lines), out


def test_wrong_password_refused_then_next_client_served(alice, sasl_bootstrap):
    herr, err, msg = wire.scram_login(sasl_bootstrap, "alice", "not-alice-secret")
    assert (herr, err) == (wire.NONE, wire.SASL_AUTHENTICATION_FAILED), (herr, err, msg)
    # an unknown user fails the same way (no hint that the name does not exist)
    herr, err, msg2 = wire.scram_login(sasl_bootstrap, "nobody", "whatever")
    assert (herr, err) == (wire.NONE, wire.SASL_AUTHENTICATION_FAILED), (herr, err, msg2)
    # the broker goes on serving: a good login on a raw socket, then kafka-python
    assert wire.scram_login(sasl_bootstrap, *ALICE) == (wire.NONE, wire.NONE, ""), \
        "alice's good SCRAM login after the failed ones"
    adm = admin_client(alice)
    try:
        adm.list_topics()
    finally:
        adm.close()
    assert msg == SCRAM_FAILED % "SCRAM-SHA-512"
    assert msg2 == SCRAM_FAILED % "SCRAM-SHA-512"


def test_scram_sha_256_user(admin_tool, sasl_bootstrap):
    ok(admin_tool.run("kafka-configs", "--alter", "--add-config",
                      "SCRAM-SHA-256=[iterations=8192,password=carol-secret]",
                      "--entity-type", "users", "--entity-name", "carol"),
       "kafka-configs --alter SCRAM-SHA-256 (carol)")
    cfg = sasl_config(sasl_bootstrap, "carol", "carol-secret", "SCRAM-SHA-256")

    def connect():
        admin_client(cfg).close()
    eventually(connect, timeout=20)
    assert wire.scram_login(sasl_bootstrap, "carol", "carol-secret", "SCRAM-SHA-256") == \
        (wire.NONE, wire.NONE, "")
    # carol has no SCRAM-SHA-512 credential
    herr, err, msg = wire.scram_login(sasl_bootstrap, "carol", "carol-secret", "SCRAM-SHA-512")
    assert (herr, err, msg) == (wire.NONE, wire.SASL_AUTHENTICATION_FAILED,
                                SCRAM_FAILED % "SCRAM-SHA-512")
