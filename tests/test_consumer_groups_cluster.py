"""A KIP-848 group in a ZooKeeper cluster: its coordinator (the leader of its `__consumer_offsets`
partition) SIGKILLed, the next leader loads the group from the replicated records and the members
carry on at their epochs; group configs set on one broker rule on the coordinator."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from logcore.coordinator.offsets_codec import partition_for
from test_replication import cluster, create, partitions, produce  # noqa: F401  (the fixture too)
from waiting import wait_for
from wire import WireClient

pytestmark = pytest.mark.slow

CONFIG = {"offsets.topic.num.partitions": "3", "group.consumer.min.session.timeout.ms": "2000",
          "group.consumer.min.heartbeat.interval.ms": "100"}


def describe(address: str, group: str):
    with WireClient(address) as client:
        return client.call(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups[0]


def test_a_consumer_group_survives_its_coordinators_sigkill(cluster):
    nodes = cluster(3, CONFIG)
    admin = AdminClient({"bootstrap.servers": nodes.bootstrap})
    create(admin, "events", 4, 3)
    for p in range(4):
        produce(nodes.bootstrap, "events", p, [f"{p}-{n}".encode() for n in range(50)], acks="all")
    resource = ConfigResource(ConfigResource.Type.GROUP, "readers", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "20000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", "300", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)  # (kept in ZooKeeper, read by the coordinator)

    members = [Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "readers", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False}) for _ in range(2)]
    for m in members:
        m.subscribe(["events"])
    received: list[list] = [[], []]

    def poll() -> None:
        for m, got in zip(members, received):
            for message in m.consume(100, 0.05):
                if message.error() is None:
                    got.append(message.value())

    coordinator_of = lambda: partitions(admin, "__consumer_offsets").get(partition_for("readers", 3), (-1,))[0]  # noqa: E731
    wait_for(lambda: poll() or (sorted(p.partition for m in members for p in m.assignment()) == [0, 1, 2, 3]
                                and all(len(got) >= 50 for got in received)), "two members sharing the topic")
    for m in members:
        m.commit(asynchronous=False)
    coordinator = coordinator_of()
    before = describe(nodes.brokers[coordinator].address, "readers")
    assert before.group_state == "Stable" and len(before.members) == 2

    nodes.brokers[coordinator].kill()
    wait_for(lambda: coordinator_of() not in (coordinator, -1), "a new coordinator")
    successor = nodes.brokers[coordinator_of()]
    after = wait_for(lambda: (d := describe(successor.address, "readers")).error_code.name == "none" and d,
                     "the new coordinator to load the group")
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert {(m.member_id, m.member_epoch, m.assignment) for m in after.members} == \
           {(m.member_id, m.member_epoch, m.assignment) for m in before.members}
    wait_for(lambda: poll() or sum(map(len, received)) >= 200, "every record, the members carrying on")
    assert describe(successor.address, "readers").group_epoch == before.group_epoch  # nobody rejoined
    for m in members:
        try:
            m.commit(asynchronous=False)
        except KafkaException as exc:  # (nothing consumed since its last commit)
            assert exc.args[0].code() == KafkaError._NO_OFFSET
    reader = Consumer({"bootstrap.servers": nodes.bootstrap, "group.id": "readers"})
    assert [tp.offset for tp in reader.committed([TopicPartition("events", p) for p in range(4)], timeout=30)] == [50] * 4
    reader.close()
    for m in members:
        m.close()
