"""Kafka's Java client and tools against a logcore broker's SASL_SSL listener with ACLs: SCRAM with
the right password works and the wrong one is refused, kafka-acls manages the ACLs binlake enforces,
and a topic the user is not allowed is refused with the Java client's authorization error."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from brokerproc import NO_REBALANCE_DELAY
from testkit.reference import run_tool

pytestmark = pytest.mark.java


def properties(path, certs, user: str, password: str):
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password}";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.pem'}\n")
    return str(path)


def test_the_java_client_authenticates_and_is_held_to_the_acls(reference_jars, secure_broker, certs, tmp_path):
    broker = secure_broker(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                              "super.users": "User:admin;User:ANONYMOUS", **NO_REBALANCE_DELAY})
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    for user in ("bob", "admin"):  # (SCRAM users; Java's JAAS parser reads no \" in the PLAIN admin's password)
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              f"{user}-secret".encode())
        admin.alter_user_scram_credentials([upsert])[user].result(30)
    address = broker.address("SASL_SSL")
    as_admin = properties(tmp_path / "admin.properties", certs, "admin", "admin-secret")
    as_bob = properties(tmp_path / "bob.properties", certs, "bob", "bob-secret")
    wrong = properties(tmp_path / "wrong.properties", certs, "bob", "not-it")

    def tool(name: str, *args: str, config: str, input: str | None = None):
        flag = {"kafka-console-producer": "--producer.config", "kafka-console-consumer": "--consumer.config"}.get(
            name, "--command-config")
        return run_tool(name, "--bootstrap-server", address, flag, config, *args, input=input)

    made = tool("kafka-topics", "--create", "--topic", "orders", "--partitions", "1", config=as_admin)
    assert made.returncode == 0, made.stderr[-2000:]
    made = tool("kafka-topics", "--create", "--topic", "secret", "--partitions", "1", config=as_admin)
    assert made.returncode == 0, made.stderr[-2000:]
    added = tool("kafka-acls", "--add", "--allow-principal", "User:bob", "--producer", "--consumer", "--topic",
                 "orders", "--group", "java", config=as_admin)
    assert added.returncode == 0, added.stderr[-2000:]
    listed = tool("kafka-acls", "--list", "--topic", "orders", config=as_admin)
    assert "principal=User:bob" in listed.stdout and "operation=WRITE" in listed.stdout, listed.stdout

    sent = tool("kafka-console-producer", "--topic", "orders", config=as_bob, input="one\ntwo\n")
    assert sent.returncode == 0, sent.stderr[-2000:]
    read = tool("kafka-console-consumer", "--topic", "orders", "--group", "java", "--from-beginning",
                "--max-messages", "2", "--timeout-ms", "30000", config=as_bob)
    assert read.stdout.split() == ["one", "two"], read.stderr[-2000:]

    refused = tool("kafka-topics", "--list", config=wrong)
    assert refused.returncode != 0 and "Authentication failed" in refused.stdout + refused.stderr
    denied = tool("kafka-console-consumer", "--topic", "secret", "--from-beginning", "--max-messages", "1",
                  "--timeout-ms", "20000", config=as_bob)
    assert "TopicAuthorizationException" in denied.stdout + denied.stderr, denied.stderr[-2000:]
