"""`binlake schema-registry` with TLS and HTTP Basic authentication on its listener, and on a broker's
SASL_SSL listener, driven by confluent-kafka's SchemaRegistryClient as a secured client configures it."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from brokerproc import NO_REBALANCE_DELAY
from testkit.registryproc import RegistryProcess

USERS = "# name: password[,role...]\nalice: alice-secret,admin\nbob: bob-secret\n"
V1 = json.dumps({"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]})
V2 = json.dumps({"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"},
                                                          {"name": "b", "type": "int", "default": 0}]})


@pytest.fixture
def secured(certs, tmp_path):
    """The listener options for TLS (client certificates requested) and Basic authentication."""
    (tmp_path / "users").write_text(USERS)
    return ["--tls-cert", str(certs / "broker.crt"), "--tls-key", str(certs / "broker.key"),
            "--tls-ca", str(certs / "ca.pem"), "--tls-client-auth", "requested",
            "--basic-auth-users", str(tmp_path / "users")]


def client(registry, certs, user_info: str | None = "alice:alice-secret") -> SchemaRegistryClient:
    conf = {"url": registry.url, "ssl.ca.location": str(certs / "ca.pem")}
    if user_info:
        conf["basic.auth.user.info"] = user_info
    return SchemaRegistryClient(conf)


def test_tls_and_basic_auth_on_the_listener_and_forwarding_between_instances(registry_factory, certs, secured):
    leader = registry_factory("leader", *secured)
    assert leader.url.startswith("https://")
    sr = client(leader, certs)
    first = sr.register_schema("sec-value", Schema(V1, "AVRO"))
    for user_info in (None, "alice:wrong", "mallory:alice-secret"):
        with pytest.raises(SchemaRegistryError) as refused:
            client(leader, certs, user_info).get_subjects()
        assert refused.value.http_status_code == 401
    follower = registry_factory("follower", *secured, "--no-leader-eligibility")
    # a write sent to the follower is forwarded to the leader over TLS, with the user's credentials
    second = client(follower, certs, "bob:bob-secret").register_schema("sec-value", Schema(V2, "AVRO"))
    assert second > first
    assert client(leader, certs).get_versions("sec-value") == [1, 2]


def test_a_users_file_with_hashed_passwords_is_refused_naming_the_line(sr_broker, tmp_path):
    (tmp_path / "users").write_text("alice: MD5:164c88b302622e17050af52c89945d44,admin\n")
    registry = RegistryProcess(sr_broker.address, tmp_path / "r.log", None, "--basic-auth-users",
                               str(tmp_path / "users"))
    with pytest.raises(Exception):
        registry.start(timeout_s=30)
    registry.kill()
    assert f"{tmp_path / 'users'}:1: MD5: passwords are not supported" in registry.log()


def test_on_a_sasl_ssl_listener(secure_broker, certs, tmp_path):
    broker = secure_broker(**NO_REBALANCE_DELAY)
    (tmp_path / "kafka.yaml").write_text(
        "security:\n  protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n  username: alice\n"
        f"  password: alice-secret\n  ca_file: {certs / 'ca.pem'}\n")
    registry = RegistryProcess(broker.address("SASL_SSL"), tmp_path / "registry.log", None,
                               "--kafka-security", str(tmp_path / "kafka.yaml")).start()
    try:
        sr = SchemaRegistryClient({"url": registry.url})
        schema_id = sr.register_schema("sasl-value", Schema(V1, "AVRO"))
        assert sr.get_latest_version("sasl-value").schema_id == schema_id
    finally:
        registry.kill()
