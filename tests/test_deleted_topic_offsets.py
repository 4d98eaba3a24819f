"""A deleted topic takes its committed offsets with it, from every group (Kafka's group coordinator
handles deleted partitions): a topic created again under the same name starts with none. The
offsets go as tombstones in __consumer_offsets, so neither a restarted coordinator nor the next one
in a cluster brings them back. Real brokers and real clients (aiokafka, confluent-kafka)."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic

from testkit.clusterproc import LocalCluster
from logcore.coordinator.offsets_codec import partition_for
from test_groups import FAST, commit_outside_a_group, committed, consumer, create_topic, in_process_broker, produce
from test_groups import wait_for as wait_async
from waiting import wait_for

OFFSETS_PARTITIONS = 3


async def delete_topic(address: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def groups(address: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        return {group for group, _ in await admin.list_consumer_groups()}
    finally:
        await admin.close()


async def read(address: str, group: str, topic: str, count: int) -> list[int]:
    """The offsets a member of `group` reads first from `topic`-0, `count` of them."""
    c = consumer(address, topic, group)
    await c.start()
    offsets: list[int] = []
    try:
        while len(offsets) < count:
            for messages in (await c.getmany(timeout_ms=1000)).values():
                offsets.extend(m.offset for m in messages)
    finally:
        await c.stop()
    return offsets[:count]


async def test_a_topic_created_again_starts_with_no_committed_offsets_in_any_group(broker_factory):
    broker = broker_factory(config=FAST)
    address = broker.address
    await create_topic(address, "T", 1)
    await create_topic(address, "U", 1)
    await produce(address, "T", 10, 1)
    member = consumer(address, "T", "readers")  # a member of a real group, which then leaves it
    await member.start()
    await wait_async(lambda: member.assignment(), 15, "an assignment")
    await member.commit({TopicPartition("T", 0): 7})
    await member.stop()
    await commit_outside_a_group(address, "mixed", TopicPartition("T", 0), 5)
    await commit_outside_a_group(address, "mixed", TopicPartition("U", 0), 3)
    assert await committed(address, "readers", "T", 1) == {0: 7}

    await delete_topic(address, "T")
    await create_topic(address, "T", 1)
    await produce(address, "T", 10, 1)

    async def check() -> None:
        assert await committed(address, "readers", "T", 1) == {}
        assert await committed(address, "mixed", "T", 1) == {}
        assert await committed(address, "mixed", "U", 1) == {0: 3}  # another topic's offsets stay
        assert "readers" not in await groups(address)  # empty, with no offsets left: gone, as in Kafka
        assert "mixed" in await groups(address)

    await check()
    broker.kill()  # the tombstones are in the log: the coordinator loads without the offsets
    broker.start()
    await check()
    assert await read(address, "readers", "T", 10) == list(range(10)), "the new topic is read from its start"


async def test_offsets_whose_tombstones_were_never_written_go_when_the_coordinator_loads(tmp_path, monkeypatch):
    """A broker that dies after deleting the topic and before writing the tombstones: on start the
    coordinator finds offsets of a topic that no longer exists, and removes them then."""
    from logcore.coordinator.group_coordinator import GroupCoordinator

    async with in_process_broker(tmp_path / "data") as broker:
        await create_topic(broker.address, "T", 1)
        await commit_outside_a_group(broker.address, "g", TopicPartition("T", 0), 7)
        with monkeypatch.context() as patched:
            patched.setattr(GroupCoordinator, "topics_deleted", lambda self, topics: 0)  # (the "crash")
            await delete_topic(broker.address, "T")
        assert broker.groups.groups["g"].offsets  # still there, as after such a crash
    async with in_process_broker(tmp_path / "data") as restarted:
        assert await committed(restarted.address, "g", "T", 1) == {}
        await create_topic(restarted.address, "T", 1)
        assert await committed(restarted.address, "g", "T", 1) == {}
    async with in_process_broker(tmp_path / "data") as again:  # and the removal itself was logged
        assert "g" not in again.groups.groups


# -- in a ZooKeeper cluster ------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path):
    started: list[LocalCluster] = []

    def make(**config: str) -> LocalCluster:
        started.append(LocalCluster(tmp_path / "cluster", 3, {
            "zookeeper.session.timeout.ms": "6000", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "100", **config}).start())
        return started[-1]

    yield make
    for nodes in started:
        nodes.stop()


def leader_of(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's leader as Metadata says (-1 while it has none or the topic is unknown)."""
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None or partition not in found.partitions:
        return -1
    return found.partitions[partition].leader


def committed_on(nodes: LocalCluster, group: str, topic: str) -> int:
    """What OffsetFetch answers for `topic`-0 in `group` (negative: nothing committed), once the
    group's coordinator answers (a new one first loads the group)."""
    client = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": group, "enable.auto.commit": False})

    def fetched() -> list | None:
        try:
            return client.committed([ConfluentPartition(topic, 0)], timeout=10)
        except KafkaException as exc:
            if exc.args[0].retriable() or exc.args[0].code() == KafkaError.NOT_COORDINATOR:
                return None
            raise
    try:
        return wait_for(fetched, f"{group}'s coordinator to answer")[0].offset
    finally:
        client.close()


def commit_on(nodes: LocalCluster, group: str, topic: str, offset: int) -> None:
    client = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        client.commit(offsets=[ConfluentPartition(topic, 0, offset)], asynchronous=False)
    finally:
        client.close()


def coordinated_elsewhere(admin: AdminClient, controller: int) -> str:
    """A group whose coordinator is not the controller (the broker that carries out deletions)."""
    wait_for(lambda: all(leader_of(admin, "__consumer_offsets", p) >= 0 for p in range(OFFSETS_PARTITIONS)),
             "__consumer_offsets to have leaders")
    return next(g for g in (f"g{n}" for n in range(100))
                if leader_of(admin, "__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS)) != controller)


def delete_everywhere(nodes: LocalCluster, admin: AdminClient, topic: str) -> None:
    """Delete `topic`, and wait until no live broker knows it any more."""
    admin.delete_topics([topic])[topic].result(30)
    for broker in nodes.brokers:
        if broker.proc.poll() is None:
            asked = AdminClient({"bootstrap.servers": broker.address})
            wait_for(lambda: topic not in asked.list_topics(timeout=10).topics, f"broker {broker.broker_id} to drop {topic}")


def create_led(admin: AdminClient, topic: str, replication_factor: int) -> None:
    admin.create_topics([NewTopic(topic, 1, replication_factor)])[topic].result(30)
    wait_for(lambda: leader_of(admin, topic, 0) >= 0, f"{topic} to have a leader")


def test_in_a_cluster_the_groups_coordinator_removes_the_offsets_and_its_successor_does_not_bring_them_back(cluster):
    nodes = cluster()
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    controller = admin.describe_cluster().result(30).controller.id
    create_led(admin, "T", 3)
    commit_on(nodes, "first", "T", 3)  # (creates __consumer_offsets)
    group = coordinated_elsewhere(admin, controller)
    coordinator = leader_of(admin, "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    commit_on(nodes, group, "T", 7)
    assert committed_on(nodes, group, "T") == 7

    delete_everywhere(nodes, admin, "T")
    create_led(admin, "T", 3)
    assert committed_on(nodes, group, "T") < 0
    assert committed_on(nodes, "first", "T") < 0  # every group's offsets, wherever it is coordinated

    nodes.brokers[coordinator].stop()  # the next coordinator loads the group from the replicated log (a controlled
    # shutdown moves it at once; a coordinator's death: test_replication)
    wait_for(lambda: leader_of(admin, "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
             not in (coordinator, -1), "a new coordinator")
    assert committed_on(nodes, group, "T") < 0


def test_in_a_cluster_a_coordinator_down_during_the_deletion_removes_the_offsets_when_it_loads(cluster):
    """With __consumer_offsets on one replica, nobody coordinates the group while its broker is down:
    the topic is deleted meanwhile, and the broker finds the offsets of a topic gone when it loads."""
    nodes = cluster(**{"offsets.topic.replication.factor": "1"})
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    controller = admin.describe_cluster().result(30).controller.id
    create_led(admin, "T", 2)
    commit_on(nodes, "first", "T", 3)  # (creates __consumer_offsets)
    group = coordinated_elsewhere(admin, controller)
    coordinator = leader_of(admin, "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    commit_on(nodes, group, "T", 7)
    assert committed_on(nodes, group, "T") == 7

    nodes.brokers[coordinator].kill()
    delete_everywhere(nodes, admin, "T")
    nodes.brokers[coordinator].start()
    wait_for(lambda: leader_of(admin, "__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
             == coordinator, "the coordinator to lead its partition again")
    assert committed_on(nodes, group, "T") < 0
    create_led(admin, "T", 2)
    assert committed_on(nodes, group, "T") < 0
