"""KIP-848's online upgrade with confluent-kafka: a live classic group whose members restart one by
one with `group.protocol=consumer` becomes a consumer group, its classic members served by it until
they restart, every partition owned exactly once at each stage, no record or committed offset lost;
and the downgrade, when the last KIP-848 member leaves classic members behind."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from test_consumer_groups import CONFIG, POLLED, Members, Traffic, create_topic, describe, exact
from waiting import wait_for

PARTITIONS = 6


@pytest.fixture
def broker(broker_factory):
    return broker_factory({**CONFIG, "group.initial.rebalance.delay.ms": "0"})


def member(address: str, protocol: str) -> Consumer:
    c = Consumer({"bootstrap.servers": address, "group.id": "up", "group.protocol": protocol,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  **({"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"} if protocol == "classic" else {})})
    c.subscribe(["up"])
    return c


class Committing(Members):
    """Members that commit what they consumed after every message (at least once)."""

    def poll_until(self, condition, what: str, timeout: float = 90) -> None:
        def step():
            for i, c in enumerate(self.consumers):
                if c is None:
                    continue
                for message in c.consume(POLLED, 0.02):
                    if not message.error():
                        self.received[i].append((message.partition(), message.offset()))
                        c.commit(message=message, asynchronous=True)
            return condition()
        wait_for(step, what, timeout)

    def shares(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers if c is not None]

    def replace(self, i: int, c: Consumer) -> None:
        self.consumers[i].close()  # (commits are synchronous at close: nothing consumed goes uncommitted)
        self.consumers[i] = c


def classic_group_of_three(broker):
    """(traffic, members, group_type()): three classic members sharing `up` while a producer writes."""
    create_topic(broker.address, "up", PARTITIONS)
    traffic = Traffic(broker.address, "up", PARTITIONS)
    members = Committing([member(broker.address, "classic") for _ in range(3)])
    admin = AdminClient({"bootstrap.servers": broker.address})
    try:
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2, 2]), "a classic group of three")
    except AssertionError:
        traffic.stop()
        raise
    return traffic, members, lambda: admin.describe_consumer_groups(["up"])["up"].result(15).type


def assert_nothing_lost(broker, members: Committing) -> None:
    """Once the traffic stopped: every record consumed (at least once), and, the members closed, the
    group's committed offsets at the log ends."""
    reader = Consumer({"bootstrap.servers": broker.address, "group.id": "reader"})
    ends = {p: reader.get_watermark_offsets(TopicPartition("up", p), timeout=15)[1] for p in range(PARTITIONS)}
    reader.close()
    consumed = lambda: {(p, o) for r in members.received for p, o in r}  # noqa: E731
    members.poll_until(lambda: all((p, ends[p] - 1) in consumed() for p in range(PARTITIONS)), "the end of every partition")
    assert {(p, o) for p in range(PARTITIONS) for o in range(ends[p])} <= consumed()  # nothing skipped
    for c in members.consumers:
        if c is not None:
            c.close()
    check = Consumer({"bootstrap.servers": broker.address, "group.id": "up"})
    committed = check.committed([TopicPartition("up", p) for p in range(PARTITIONS)], timeout=15)
    check.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_a_classic_group_upgrades_member_by_member_and_keeps_its_offsets(broker):
    traffic, members, group_type = classic_group_of_three(broker)
    try:
        assert group_type() == ConsumerGroupType.CLASSIC
        for i in range(3):
            members.replace(i, member(broker.address, "consumer"))
            members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2, 2]) and all(
                r for r in members.received), f"the group to settle with member {i} on the consumer protocol")
            assert group_type() == ConsumerGroupType.CONSUMER
            described = describe(broker.address, "up")
            assert len(described.members) == 3 and described.group_state == "Stable"
    finally:
        traffic.stop()
    assert_nothing_lost(broker, members)


@pytest.mark.slow
def test_the_group_goes_back_to_classic_when_its_last_consumer_member_leaves(broker):
    traffic, members, group_type = classic_group_of_three(broker)
    try:
        members.replace(0, member(broker.address, "consumer"))
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2, 2]), "the upgraded group to settle")
        assert group_type() == ConsumerGroupType.CONSUMER
        members.consumers[0].close()  # the only KIP-848 member leaves: the classic members take the group back
        members.consumers[0] = None
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [3, 3]), "the two classic members to share it")
        assert group_type() == ConsumerGroupType.CLASSIC
    finally:
        traffic.stop()
    assert_nothing_lost(broker, members)


def test_a_policy_without_upgrades_keeps_a_consumer_member_out_of_a_classic_group(broker_factory):
    """group.consumer.migration.policy=downgrade: a consumer-protocol member is refused by a live classic
    group (GROUP_ID_NOT_FOUND, as Kafka), which goes on classic with its three members' shares."""
    broker = broker_factory({**CONFIG, "group.initial.rebalance.delay.ms": "0",
                             "group.consumer.migration.policy": "downgrade"}, name="no-upgrades")
    traffic, members, group_type = classic_group_of_three(broker)
    newcomer = member(broker.address, "consumer")
    try:
        errors = []

        def refused() -> bool:   # (librdkafka takes ConsumerGroupHeartbeat's GROUP_ID_NOT_FOUND as fatal)
            message = newcomer.poll(0.1)
            if message is not None and message.error():
                errors.append(message.error())
            return any(e.code() == KafkaError._FATAL for e in errors)
        wait_for(refused, "the consumer-protocol member's refusal")
        assert any("group id does not exist" in str(e) for e in errors), errors
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2, 2]), "the classic group to go on")
        assert not newcomer.assignment() and group_type() == ConsumerGroupType.CLASSIC
    finally:
        newcomer.close()
        traffic.stop()
    assert_nothing_lost(broker, members)


@pytest.mark.slow
def test_a_policy_without_downgrades_keeps_the_classic_members_in_the_consumer_group(broker_factory):
    """group.consumer.migration.policy=upgrade: the last consumer-protocol member leaves and the group stays a
    consumer group, its two classic members sharing the partitions through it."""
    broker = broker_factory({**CONFIG, "group.initial.rebalance.delay.ms": "0",
                             "group.consumer.migration.policy": "upgrade"}, name="no-downgrades")
    traffic, members, group_type = classic_group_of_three(broker)
    try:
        members.replace(0, member(broker.address, "consumer"))
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2, 2]), "the upgraded group to settle")
        members.consumers[0].close()
        members.consumers[0] = None
        members.poll_until(lambda: exact(members.shares(), PARTITIONS, [3, 3]), "the two classic members to share it")
        assert group_type() == ConsumerGroupType.CONSUMER
        assert "back to a classic group" not in broker.log()
    finally:
        traffic.stop()
    assert_nothing_lost(broker, members)
