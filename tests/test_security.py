"""Listeners with Kafka's security protocols on a real broker: TLS (the standard library's ssl, PEM
files made here with openssl), SASL PLAIN with users from Kafka's JAAS line, SASL SCRAM-SHA-256/512
with users managed through AlterUserScramCredentials; each mechanism with aiokafka, confluent-kafka
and kcat, right and wrong credentials, a client that skips authentication, client certificates."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from testkit.brokerproc import ROOT
from sandbox.process import free_port
from secure_broker import PLAIN_USERS, SecureBroker



def aiokafka_settings(broker: SecureBroker, protocol: str, certs, mechanism: str | None = None, user: str = "",
                      password: str = "") -> dict:
    settings = {"bootstrap_servers": broker.address(protocol), "security_protocol": protocol}
    if "SSL" in protocol:
        settings["ssl_context"] = create_ssl_context(cafile=str(certs / "ca.pem"))
    if mechanism:
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    return settings


async def produce_and_read_back(settings: dict, topic: str, value: bytes) -> list[bytes]:
    producer = AIOKafkaProducer(**settings)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=5000)
        return [m.value for messages in batches.values() for m in messages]
    finally:
        await consumer.stop()


async def refused(settings: dict) -> bool:
    producer = AIOKafkaProducer(request_timeout_ms=5000, **settings)
    try:
        await producer.start()
    except KafkaConnectionError:
        return True
    finally:
        await producer.stop()
    return False


def confluent(broker: SecureBroker, protocol: str, certs, mechanism: str | None = None, user: str = "",
              password: str = "", **extra) -> dict:
    settings = {"bootstrap.servers": broker.address(protocol), "security.protocol": protocol, **extra}
    if "SSL" in protocol:
        settings["ssl.ca.location"] = str(certs / "ca.pem")
    if mechanism:
        settings.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return settings


def confluent_produces(settings: dict, topic: str) -> tuple[bool, list[str]]:
    """Whether one message is acknowledged within 10 s (a refused authentication or handshake ends the wait:
    a TLS handshake refused for want of a client certificate reaches error_cb only as every broker down), and
    the client's errors."""
    errors: list[str] = []
    delivered: list[bool] = []
    producer = Producer({**settings, "error_cb": lambda e: errors.append(str(e)), "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: delivered.append(err is None))
    deadline = time.monotonic() + 12
    while not delivered and time.monotonic() < deadline and not any(
            "_AUTHENTICATION" in e or "SSL handshake failed" in e or "_ALL_BROKERS_DOWN" in e for e in errors):
        producer.poll(0.1)
    return delivered == [True], errors


def test_each_protocol_with_right_credentials_works_and_wrong_ones_are_refused(secure_broker, certs):
    broker = secure_broker()
    for protocol, mechanism in (("PLAINTEXT", None), ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "PLAIN")):
        settings = aiokafka_settings(broker, protocol, certs, mechanism, "admin", 'a"b')  # (a quote in the JAAS value)
        value = protocol.encode() * 20_000  # (a fetch response large enough for the broker's sendfile path)
        assert asyncio.run(produce_and_read_back(settings, f"t-{protocol}", value)) == [value]
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        assert asyncio.run(refused(aiokafka_settings(broker, protocol, certs, "PLAIN", "alice", "wrong")))
        assert asyncio.run(refused(aiokafka_settings(broker, protocol, certs, "PLAIN", "mallory", "alice-secret")))
    # a client that skips authentication is disconnected unanswered; others carry on
    assert asyncio.run(refused({"bootstrap_servers": broker.address("SASL_PLAINTEXT"), "security_protocol": "PLAINTEXT"}))
    ok, errors = confluent_produces(confluent(broker, "SASL_PLAINTEXT", certs, "PLAIN", "alice", "alice-secret"), "t")
    assert ok, errors
    ok, errors = confluent_produces(confluent(broker, "SASL_PLAINTEXT", certs, "PLAIN", "alice", "nope"), "t")
    assert not ok and any("Authentication failed: Invalid username or password" in e for e in errors), errors
    assert "before authentication ended: Authentication failed: Invalid username or password" in broker.process.log()


def test_scram_users_are_managed_by_the_admin_api_and_authenticate(secure_broker, certs):
    broker = secure_broker()
    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    upserts = [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret"),
               UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        assert future.result(30) is None
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(30)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            ok, errors = confluent_produces(confluent(broker, protocol, certs, mechanism, "bob", "bob-secret"), "s")
            assert ok, (protocol, mechanism, errors)
            ok, errors = confluent_produces(confluent(broker, protocol, certs, mechanism, "bob", "wrong"), "s")
            assert not ok and any("Authentication failed" in e for e in errors), errors
        settings = aiokafka_settings(broker, protocol, certs, "SCRAM-SHA-512", "bob", "bob-secret")
        assert asyncio.run(produce_and_read_back(settings, f"scram-{protocol}", b"v")) == [b"v"]
    # kcat (librdkafka) with SCRAM over TLS reads back what was written
    read = subprocess.run(["kcat", "-b", broker.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
                           "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=bob", "-X", "sasl.password=bob-secret",
                           "-X", f"ssl.ca.location={certs / 'ca.pem'}", "-C", "-t", "scram-SASL_SSL", "-o", "beginning",
                           "-e", "-q"], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0 and read.stdout.split() == ["v"], read.stderr
    # a deleted credential no longer authenticates; describing it says so
    deletion = admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)])
    assert deletion["bob"].result(30) is None
    ok, errors = confluent_produces(confluent(broker, "SASL_PLAINTEXT", certs, "SCRAM-SHA-256", "bob", "bob-secret"), "s")
    assert not ok, errors
    missing = admin.describe_user_scram_credentials(["nobody"])["nobody"]
    with pytest.raises(Exception, match="does not exist"):
        missing.result(30)


def test_client_certificates_are_required_when_the_listener_asks(secure_broker, certs):
    broker = secure_broker(**{"ssl.client.auth": "required", "ssl.truststore.location": str(certs / "ca.pem")})
    ok, errors = confluent_produces(confluent(broker, "SSL", certs), "c")
    assert not ok and errors, "a client without a certificate got through"
    ok, errors = confluent_produces(confluent(broker, "SSL", certs, **{
        "ssl.certificate.location": str(certs / "client.crt"), "ssl.key.location": str(certs / "client.key")}), "c")
    assert ok, errors


@pytest.mark.parametrize("config, message", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "binlake offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; GSSAPI cannot be used"),
    ({"ssl.keystore.type": "JKS"}, "binlake reads PEM files only"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule required user_a=\"b\""},
     "the JAAS line must end with ';'"),
    ({"listeners": "SECRET://127.0.0.1:0"}, "listener SECRET has no security protocol"),
    ({"authorizer.class.name": "com.example.OurAuthorizer"},
     "must be one of kafka.security.authorizer.AclAuthorizer, org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
    ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms"),
    ({"inter.broker.listener.name": "SASL_PLAINTEXT"}, "sasl.mechanism.inter.broker.protocol=GSSAPI: brokers "
                                                       "authenticate to each other over SASL_PLAINTEXT"),
])
def test_a_wrong_security_setting_stops_the_broker_saying_what_to_fix(tmp_path, certs, config, message):
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SASL_PLAINTEXT://127.0.0.1:{free_port()}",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
                "ssl.keystore.location": str(certs / "broker.pem"), **config}
    if "ssl.keystore.type" in config:
        settings["listeners"] += f",SSL://127.0.0.1:{free_port()}"
    args = [arg for key, value in settings.items() for arg in ("--override", f"{key}={value}")]
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "broker", "--data-dir", str(tmp_path / "d"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_binlake_configs_manages_scram_users_as_kafka_configs_does(secure_broker, certs):
    from click.testing import CliRunner

    from binlake.cli import main
    broker = secure_broker()
    base = ["configs", "--bootstrap-server", broker.address("PLAINTEXT"), "--entity-type", "users"]
    done = CliRunner().invoke(main, [*base, "--alter", "--entity-name", "carol", "--add-config",
                                     "SCRAM-SHA-256=[iterations=8192,password=carol-secret],SCRAM-SHA-512=[password=carol-secret]"])
    assert done.exit_code == 0 and "Completed updating config for user carol." in done.output, done.output
    done = CliRunner().invoke(main, [*base, "--describe", "--entity-name", "carol"])
    assert ("SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192, "
            "SCRAM-SHA-512=iterations=4096") in done.output, done.output
    ok, errors = confluent_produces(confluent(broker, "SASL_SSL", certs, "SCRAM-SHA-512", "carol", "carol-secret"), "u")
    assert ok, errors
    done = CliRunner().invoke(main, [*base, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-512"])
    assert done.exit_code == 0, done.output
    ok, errors = confluent_produces(confluent(broker, "SASL_SSL", certs, "SCRAM-SHA-512", "carol", "carol-secret"), "u")
    assert not ok, errors
    done = CliRunner().invoke(main, [*base, "--alter", "--entity-name", "carol", "--add-config", "SCRAM-SHA-1=[password=x]"])
    assert done.exit_code != 0 and "users take SCRAM-SHA-256 or SCRAM-SHA-512 configs, not SCRAM-SHA-1" in done.output


def test_on_the_wire_a_bad_sasl_exchange_gets_its_error_and_closes_only_its_connection(secure_broker):
    """Raw frames, as no well-behaved client sends them: a malformed PLAIN token, an unknown mechanism,
    a SaslAuthenticate before any handshake, and a request before authentication."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from wire import WireClient
    broker = secure_broker()
    address = broker.address("SASL_PLAINTEXT")
    with WireClient(address) as bystander:   # authenticated, and left alone by the others' failures
        assert bystander.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        assert bystander.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")).error_code == 0
        with WireClient(address) as client:
            answer = client.call(SaslHandshakeRequest(mechanism="PLAIN"))
            assert answer.error_code == 0 and set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
            answer = client.call(SaslAuthenticateRequest(auth_bytes=b"no separators at all"))
            assert answer.error_code == 58 and "expected 3 tokens" in answer.error_message   # SASL_AUTHENTICATION_FAILED
            assert client.read_frame() is None                                                  # then closed
        with WireClient(address) as client:
            assert client.call(SaslHandshakeRequest(mechanism="GSSAPI")).error_code == 33     # UNSUPPORTED_SASL_MECHANISM
            assert client.read_frame() is None
        with WireClient(address) as client:
            assert client.call(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")).error_code == 34  # ILLEGAL_SASL_STATE
            assert client.read_frame() is None
        with WireClient(address) as client:
            client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
            assert client.read_frame() is None                                                  # closed unanswered
        metadata = bystander.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False))
        assert [b.port for b in metadata.brokers] == [broker.ports["SASL_PLAINTEXT"]]       # its listener's address


def test_sessions_expire_unless_the_client_re_authenticates_as_the_same_principal(secure_broker):
    """connections.max.reauth.ms (KIP-368) on the wire: the lifetime is announced; re-authenticating
    in time renews it; a different principal is refused; a request after expiry closes the
    connection unanswered."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from wire import WireClient
    lifetime_s = 3
    broker = secure_broker(**{"connections.max.reauth.ms": str(lifetime_s * 1000)})
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    def authenticate(client, user: str, password: str):
        assert client.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        return client.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))

    with WireClient(broker.address("SASL_PLAINTEXT")) as client:
        answer = authenticate(client, "alice", "alice-secret")
        assert answer.error_code == 0 and answer.session_lifetime.total_seconds() == lifetime_s
        for _ in range(3):  # 3.6 s in all, past one lifetime: each re-authentication renews it
            time.sleep(lifetime_s * 0.4)
            assert client.call(metadata).brokers
            assert authenticate(client, "alice", "alice-secret").error_code == 0
        assert client.call(metadata).brokers
        answer = authenticate(client, "admin", 'a"b')
        assert answer.error_code == 58 and "cannot change principals" in answer.error_message
        assert client.read_frame() is None
    with WireClient(broker.address("SASL_PLAINTEXT")) as client:
        assert authenticate(client, "alice", "alice-secret").error_code == 0
        time.sleep(lifetime_s + 0.2)  # (the session's own clock: nothing to wait on but time)
        client.send(metadata)
        assert client.read_frame() is None
    assert "after its SASL session of 3000 ms expired" in broker.process.log()


def test_librdkafka_re_authenticates_and_keeps_producing(secure_broker, certs):
    broker = secure_broker(**{"connections.max.reauth.ms": "2000"})
    errors: list[str] = []
    delivered: list[bool] = []
    producer = Producer({**confluent(broker, "SASL_SSL", certs, "PLAIN", "alice", "alice-secret"),
                         "error_cb": lambda e: errors.append(str(e)), "linger.ms": 0})
    deadline = time.monotonic() + 7  # three and a half session lifetimes
    while time.monotonic() < deadline:
        producer.produce("reauth", b"x", on_delivery=lambda err, _msg: delivered.append(err is None))
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered and all(delivered) and not errors, errors
    assert "expired" not in broker.process.log()  # it re-authenticated every time, never cut off


def test_the_wire_admin_commands_reach_sasl_and_tls_listeners_with_a_command_config(secure_broker, certs, tmp_path):
    """`binlake broker-api-versions`, `get-offsets` and `transactions` speak the protocol with binlake's
    own client (tools/wire_admin.py): it starts TLS and authenticates as `--command-config` says."""
    broker = secure_broker()
    Producer({"bootstrap.servers": broker.address("PLAINTEXT")}).list_topics("w", timeout=30)  # (auto-created)
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{}";'
    configs = {"SSL": f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.pem'}\n",
               "SASL_PLAINTEXT": f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                 f"sasl.jaas.config={jaas.format('alice-secret')}\n"}
    configs["SASL_SSL"] = configs["SSL"].replace("=SSL", "=SASL_SSL") + configs["SASL_PLAINTEXT"].split("\n", 1)[1]

    def binlake(protocol: str, *args: str, config: str | None = None) -> subprocess.CompletedProcess:
        path = tmp_path / f"{protocol}.properties"
        path.write_text(config or configs[protocol])
        return subprocess.run([sys.executable, "-m", "binlake.cli", *args, "--bootstrap-server", broker.address(protocol),
                               "--command-config", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)

    for protocol in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        done = binlake(protocol, "broker-api-versions")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{broker.address(protocol)} (id: 0 rack: null") and "\tProduce(0): " in done.stdout
        done = binlake(protocol, "get-offsets", "--topic", "w")
        assert (done.returncode, done.stdout) == (0, "w:0:0\n"), done.stderr
        done = binlake(protocol, "transactions", "list")
        assert done.returncode == 0 and "TransactionalId" in done.stdout, done.stderr
    wrong = binlake("SASL_PLAINTEXT", "get-offsets", config=configs["SASL_PLAINTEXT"].replace("alice-secret", "nope"))
    assert wrong.returncode == 1 and "cannot authenticate to" in wrong.stderr and "Invalid username or password" in wrong.stderr
    untrusted = binlake("SSL", "get-offsets", config="security.protocol=SSL\n")  # (the system's CAs: not the test CA)
    assert untrusted.returncode == 1 and "cannot connect to" in untrusted.stderr and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    plain = binlake("SASL_PLAINTEXT", "get-offsets", config="security.protocol=SSL\nsasl.mechanism=PLAIN\n")
    assert plain.returncode == 2 and "--command-config" in plain.stderr
