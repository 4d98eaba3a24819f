"""ACLs on a real broker with SASL users (alice, and admin the super user): managed with
confluent-kafka's admin API and `binlake acls`, kept across a restart, and enforced on what aiokafka
and confluent-kafka clients do: an unauthorised produce, fetch, group join or transaction gets the
API's authorization error and writes nothing, while what is allowed works."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import (GroupAuthorizationFailedError, TopicAuthorizationFailedError,
                             TransactionalIdAuthorizationFailed)
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from brokerproc import NO_REBALANCE_DELAY
from waiting import wait_for
from wire import WireClient

from testkit.brokerproc import ROOT

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}
ADMIN_PASSWORD = 'a"b'


def sasl(broker, user: str, password: str) -> dict:
    return {"bootstrap_servers": broker.address("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": user, "sasl_plain_password": password}


def admin_client(broker, user: str = "admin", password: str = ADMIN_PASSWORD) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})


def allow(resource_type, name, operation, principal="User:alice", pattern=ResourcePatternType.LITERAL):
    return AclBinding(resource_type, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def create(admin: AdminClient, bindings) -> None:
    for future in admin.create_acls(bindings).values():
        future.result(30)


def make_topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(30)


def acls_cli(broker, tmp_path, *args: str) -> subprocess.CompletedProcess:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="a\\"b";\n')
    return subprocess.run([sys.executable, "-m", "binlake", "acls", "--bootstrap-server", broker.address("SASL_PLAINTEXT"),
                           "--command-config", str(config), *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_acls_are_managed_by_the_admin_api_and_binlake_acls_and_survive_a_restart(secure_broker, tmp_path):
    broker = secure_broker(**AUTHORIZER)
    admin = admin_client(broker)
    create(admin, [allow(ResourceType.TOPIC, "orders", AclOperation.READ),
                   allow(ResourceType.TOPIC, "shop.", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)])
    added = acls_cli(broker, tmp_path, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders",
                     "--group", "billing")
    assert added.returncode == 0, added.stderr
    listed = acls_cli(broker, tmp_path, "--list", "--topic", "orders")
    assert listed.returncode == 0, listed.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in listed.stdout
    for line in ("(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
                 "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
                 "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)"):
        assert line in listed.stdout, listed.stdout
    # MATCH: the bindings that apply to a name, the prefixed one included
    matching = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, "shop.orders", ResourcePatternType.MATCH,
                                                    None, None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert [(b.name, b.resource_pattern_type, b.operation) for b in matching] == [
        ("shop.", ResourcePatternType.PREFIXED, AclOperation.WRITE)]
    removed = acls_cli(broker, tmp_path, "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Read",
                       "--topic", "orders")
    assert removed.returncode == 0 and "Removed 1 ACL(s)." in removed.stdout, removed.stdout + removed.stderr

    broker.process.kill()
    broker.process.start()
    admin = admin_client(broker)
    everything = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert sorted((b.principal, b.restype.name, b.name, b.operation.name) for b in everything) == [
        ("User:alice", "TOPIC", "orders", "READ"), ("User:alice", "TOPIC", "shop.", "WRITE"),
        ("User:bob", "GROUP", "billing", "READ"), ("User:bob", "TOPIC", "orders", "DESCRIBE")]
    # only a principal allowed ALTER on the cluster may change them
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        create(admin_client(broker, "alice", "alice-secret"), [allow(ResourceType.TOPIC, "x", AclOperation.ALL)])
    bad = acls_cli(broker, tmp_path, "--add", "--allow-principal", "alice", "--topic", "t")
    assert bad.returncode != 0 and "TYPE:NAME" in bad.stderr, bad.stderr


async def _produce(settings: dict, topic: str) -> None:
    producer = AIOKafkaProducer(request_timeout_ms=10000, **settings)
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"v")
    finally:
        await producer.stop()


async def _consume(settings: dict, topic: str, group: str | None) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", **settings)
    try:
        await consumer.start()
        batches = await consumer.getmany(timeout_ms=10000)
        return [m.value for messages in batches.values() for m in messages]
    finally:
        await consumer.stop()


async def _transaction(settings: dict, transactional_id: str, topic: str) -> None:
    producer = AIOKafkaProducer(transactional_id=transactional_id, **settings)
    try:
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"in a transaction")
    finally:
        await producer.stop()


async def _end_offset(settings: dict, topic: str) -> int:
    consumer = AIOKafkaConsumer(**settings)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        return (await consumer.end_offsets([partition]))[partition]
    finally:
        await consumer.stop()


def test_what_alice_may_not_do_is_refused_with_its_error_and_writes_nothing(secure_broker):
    broker = secure_broker(**AUTHORIZER, **NO_REBALANCE_DELAY)  # (alice's group: one member)
    admin = admin_client(broker)
    make_topics(admin, "allowed", "forbidden")
    create(admin, [allow(ResourceType.TOPIC, "allowed", AclOperation.WRITE),
                   allow(ResourceType.TOPIC, "allowed", AclOperation.READ),
                   allow(ResourceType.GROUP, "readers", AclOperation.READ),
                   allow(ResourceType.TRANSACTIONAL_ID, "tx-", AclOperation.WRITE,
                         pattern=ResourcePatternType.PREFIXED)])
    alice = sasl(broker, "alice", "alice-secret")
    superuser = sasl(broker, "admin", ADMIN_PASSWORD)

    asyncio.run(_produce(alice, "allowed"))
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(_produce(alice, "forbidden"))
    assert asyncio.run(_end_offset(superuser, "forbidden")) == 0
    assert asyncio.run(_consume(alice, "allowed", "readers")) == [b"v"]
    with pytest.raises(GroupAuthorizationFailedError):
        asyncio.run(_consume(alice, "allowed", "other-group"))
    asyncio.run(_produce(superuser, "forbidden"))
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(_consume(alice, "forbidden", None))
    asyncio.run(_transaction(alice, "tx-1", "allowed"))
    with pytest.raises(TransactionalIdAuthorizationFailed):
        asyncio.run(_transaction(alice, "other-tx", "allowed"))
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(_transaction(alice, "tx-2", "forbidden"))
    assert asyncio.run(_end_offset(superuser, "forbidden")) == 1  # the admin's record only
    # Metadata lists only the topics alice may describe; the admin sees both
    as_alice = admin_client(broker, "alice", "alice-secret")
    assert set(as_alice.list_topics(timeout=30).topics) == {"allowed"}
    group = as_alice.describe_consumer_groups(["readers"], include_authorized_operations=True)["readers"].result(30)
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}  # (no DELETE)
    assert {"allowed", "forbidden"} <= set(admin.list_topics(timeout=30).topics)
    # a DENY wins over an ALLOW
    create(admin, [AclBinding(ResourceType.TOPIC, "allowed", ResourcePatternType.LITERAL, "User:alice", "*",
                              AclOperation.WRITE, AclPermissionType.DENY)])
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(_produce(alice, "allowed"))
    assert broker.process.proc.poll() is None  # (refusals cost no connection, let alone the broker)


def test_a_kip848_member_gets_only_the_topics_it_may_describe(secure_broker):
    """As Kafka (KAFKA-18813): a regex resolves to the matching topics the member may DESCRIBE, a
    subscription naming a hidden topic is refused, and a group holding topics the asker may not
    DESCRIBE is not described to it."""
    broker = secure_broker(**AUTHORIZER)
    admin = admin_client(broker)
    make_topics(admin, "rx-eu", "rx-us")
    create(admin, [allow(ResourceType.GROUP, "rx", AclOperation.READ),
                   allow(ResourceType.TOPIC, "rx-eu", AclOperation.READ)])  # (READ implies DESCRIBE)
    member = Consumer({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                       "group.id": "rx", "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    member.subscribe(["^rx-.*"])

    def settled_on(topics: set[str]) -> bool:
        member.poll(0.05)
        group = admin.describe_consumer_groups(["rx"])["rx"].result(15)
        return group.state == ConsumerGroupState.STABLE and [
            {tp.topic for tp in m.target_assignment.topic_partitions} for m in group.members] == [topics] and {
            tp.topic for tp in member.assignment()} == topics

    wait_for(lambda: settled_on({"rx-eu"}), "the regex member to settle on rx-eu alone")
    create(admin, [allow(ResourceType.TOPIC, "rx-us", AclOperation.DESCRIBE)])
    wait_for(lambda: settled_on({"rx-eu", "rx-us"}), "rx-us to join once alice may describe it")

    create(admin, [allow(ResourceType.GROUP, "*", AclOperation.READ, principal="User:ANONYMOUS")])
    with WireClient(broker.address("PLAINTEXT")) as anonymous:
        joined = anonymous.call(ConsumerGroupHeartbeatRequest(
            group_id="named", member_id="", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=("rx-eu",), server_assignor=None, topic_partitions=()))
        assert joined.error_code.name == "topic_authorization_failed", joined
        described = anonymous.call(ConsumerGroupDescribeRequest(group_ids=("rx",), include_authorized_operations=False))
        assert described.groups[0].error_code.name == "topic_authorization_failed" and not described.groups[0].members
    member.close()


def test_without_an_authorizer_the_acl_apis_say_security_is_disabled(secure_broker):
    broker = secure_broker()
    with pytest.raises(KafkaException, match="SECURITY_DISABLED"):
        create(admin_client(broker), [allow(ResourceType.TOPIC, "t", AclOperation.READ)])
    # and every request is allowed
    asyncio.run(_produce(sasl(broker, "alice", "alice-secret"), "t"))


class ClusterBroker:
    """One of three_brokers: its process and client port, with the address() sasl() and
    admin_client() take."""

    def __init__(self, process, client_port: int) -> None:
        self.process, self.client_port = process, client_port

    def address(self, _protocol: str) -> str:
        return f"127.0.0.1:{self.client_port}"


@pytest.fixture
def three_brokers(tmp_path, zookeeper):
    """three_brokers(config(internal_port, client_port) -> dict, ready_port="internal") -> three
    started ClusterBrokers on the test's ZooKeeper, each with an internal and a client listener."""
    from testkit.brokerproc import BrokerProcess
    from sandbox.process import free_port
    started: list[ClusterBroker] = []

    def start(config, ready_port: str = "internal") -> list[ClusterBroker]:
        for broker_id in range(3):
            internal, client = free_port(), free_port()
            process = BrokerProcess(tmp_path / f"broker-{broker_id}", port=internal if ready_port == "internal" else client,
                                    broker_id=broker_id, config={"zookeeper.connect": zookeeper.connect_string,
                                                                 **config(internal, client)})
            started.append(ClusterBroker(process.start(), client))
        return started
    yield start
    for broker in started:
        broker.process.kill()


def test_in_a_cluster_acls_live_in_zookeeper_and_replication_and_coordinators_work_under_them(three_brokers):
    """Three brokers: clients on SASL_PLAINTEXT, brokers among themselves on PLAINTEXT as
    User:ANONYMOUS, a super user (the inter-broker listener is an internal one). An ACL made through
    one broker is enforced by every broker; alice's acks=all writes and transactions are replicated."""
    from secure_broker import PLAIN_USERS
    from waiting import wait_for

    brokers = three_brokers(lambda internal, client: {
        **AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS",
        "listeners": f"PLAINTEXT://127.0.0.1:{internal},SASL_PLAINTEXT://127.0.0.1:{client}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
        "default.replication.factor": "3", "min.insync.replicas": "2"})
    admin = admin_client(brokers[0])
    admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(30)
    create(admin, [allow(ResourceType.TOPIC, "orders", AclOperation.ALL),
                   allow(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE)])

    def visible_to_alice(broker) -> bool:
        client = admin_client(broker, "alice", "alice-secret")
        return "orders" in client.list_topics(timeout=10).topics

    for broker in brokers:  # (each broker reloads on ZooKeeper's change notification)
        wait_for(lambda: visible_to_alice(broker), "the ACL on every broker")
    alice = sasl(brokers[2], "alice", "alice-secret")
    asyncio.run(_produce({**alice, "acks": "all"}, "orders"))
    asyncio.run(_transaction(alice, "tx", "orders"))
    with pytest.raises(TransactionalIdAuthorizationFailed):
        asyncio.run(_transaction(alice, "not-tx", "orders"))

    for future in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                                                      None, None, AclOperation.ANY, AclPermissionType.ANY)]).values():
        assert len(future.result(30)) == 1
    for broker in brokers:
        wait_for(lambda: not visible_to_alice(broker), "the ACL gone from every broker")
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(_produce(alice, "orders"))


def test_brokers_replicate_over_sasl_ssl_as_a_super_user(three_brokers, zookeeper, certs):
    """Three brokers whose inter-broker listener is SASL_SSL with SCRAM-SHA-512 (the brokers' user made
    in ZooKeeper first, as `kafka-configs --zookeeper` does) and ACLs on: acks=all writes replicate to
    every broker, a transaction's markers reach partitions led elsewhere, and no broker listens on
    PLAINTEXT at all."""
    from kazoo.client import KazooClient

    from logcore.security.credentials import ZooKeeperCredentials
    from logcore.security.sasl import ScramCredential
    from secure_broker import PLAIN_USERS

    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start()
    ZooKeeperCredentials(zk).put("broker", "SCRAM-SHA-512", ScramCredential.from_password("SCRAM-SHA-512", "b-secret"))
    zk.stop()
    brokers = three_brokers(lambda internal, client: {
        **AUTHORIZER, "super.users": "User:admin;User:broker",
        "listeners": f"INTERNAL://127.0.0.1:{internal},SASL_PLAINTEXT://127.0.0.1:{client}",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";',
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": str(certs / "broker.pem"), "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
        "default.replication.factor": "3", "min.insync.replicas": "3", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}, ready_port="client")
    admin = admin_client(brokers[0])
    admin.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(30)
    superuser = sasl(brokers[2], "admin", ADMIN_PASSWORD)
    asyncio.run(_produce({**superuser, "acks": "all"}, "replicated"))  # (min.insync.replicas=3: all three)
    topic = admin.list_topics("replicated", timeout=30).topics["replicated"]
    assert {p.leader for p in topic.partitions.values()} == {0, 1, 2}  # (so markers cross brokers)
    assert all(sorted(p.isrs) == [0, 1, 2] for p in topic.partitions.values())
    asyncio.run(_transaction_to_every_partition(superuser, "tx-across", "replicated", 3))
    assert sorted(asyncio.run(_read_committed(superuser, "replicated", 4))) == [b"v", b"v0", b"v1", b"v2"]
    for broker in brokers:
        assert "cannot fetch from broker" not in broker.process.log()


async def _transaction_to_every_partition(settings: dict, transactional_id: str, topic: str, partitions: int) -> None:
    producer = AIOKafkaProducer(transactional_id=transactional_id, **settings)
    try:
        await producer.start()
        async with producer.transaction():
            for partition in range(partitions):
                await producer.send_and_wait(topic, b"v%d" % partition, partition=partition)
    finally:
        await producer.stop()


async def _read_committed(settings: dict, topic: str, count: int) -> list[bytes]:
    """The first `count` committed values (fewer if 30 s pass)."""
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", isolation_level="read_committed", **settings)
    try:
        await consumer.start()
        found: list[bytes] = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(found) < count and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            found += [m.value for messages in batches.values() for m in messages]
        return found
    finally:
        await consumer.stop()
