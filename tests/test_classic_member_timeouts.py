"""A classic member inside a KIP-848 consumer group is held to its rebalance timeout as Kafka's
ConsumerGroup holds it: once joined it must send SyncGroup, once told to rejoin (Heartbeat's
REBALANCE_IN_PROGRESS) it must send JoinGroup, each within the rebalance timeout its JoinGroup gave;
past it the member is fenced and the KIP-848 members (confluent-kafka, `group.protocol=consumer`)
take its partitions. The stuck member is a raw client: no real client joins and then never syncs."""

from __future__ import annotations

import datetime
import struct
import sys

import pytest
from confluent_kafka import Producer

from logcore.protocol.codec import ApiKey, ErrorCode, request_class
from test_consumer_groups import CONFIG, Members, consumer, create_topic, exact
from waiting import wait_for
from wire import WireClient

PARTITIONS, REBALANCE_MS, SESSION_MS = 4, 3000, 30000  # (a session far longer than the rebalance timeout)


@pytest.fixture
def broker(broker_factory):
    return broker_factory(CONFIG)


class RawClassicMember:
    """A classic consumer speaking JoinGroup/SyncGroup/Heartbeat by hand, subscribed to one topic."""

    def __init__(self, address: str, group: str, topic: str) -> None:
        self.client, self.group, self.topic = WireClient(address), group, topic
        self.member_id, self.generation = "", -1

    def join(self) -> None:
        cls = request_class(ApiKey.JOIN_GROUP, 9)
        name = self.topic.encode()
        subscription = struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)  # v0, no user data
        protocol = sys.modules[cls.__module__].JoinGroupRequestProtocol(name="range", metadata=subscription)
        for _ in range(2):  # (the first answer of JoinGroup v4+ is MEMBER_ID_REQUIRED with the member id)
            response = self.client.call(cls(
                group_id=self.group, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
                rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS), member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer", protocols=(protocol,), reason=None))
            self.member_id = response.member_id
            if response.error_code != ErrorCode.member_id_required:
                break
        assert response.error_code == ErrorCode.none, response
        self.generation = response.generation_id

    def sync(self) -> ErrorCode:
        return self.client.call(request_class(ApiKey.SYNC_GROUP, 5)(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range", assignments=())).error_code

    def heartbeat(self) -> ErrorCode:
        return self.client.call(request_class(ApiKey.HEARTBEAT, 4)(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None)).error_code


def produce(address: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": address})
    for i in range(count):
        p.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(15) == 0


def test_a_classic_member_that_joins_and_never_syncs_is_fenced_at_its_rebalance_timeout(broker):
    create_topic(broker.address, "nosync", PARTITIONS)
    members = Members([consumer(broker.address, "g", ["nosync"])])
    members.poll_until(lambda: exact(members.shares(), PARTITIONS, [PARTITIONS]), "the KIP-848 member to own all")
    stuck = RawClassicMember(broker.address, "g", "nosync")
    stuck.join()  # ... and heartbeats from then on, but never syncs
    beats: list[ErrorCode] = []

    def fenced() -> bool:
        beats.append(stuck.heartbeat())
        return beats[-1] == ErrorCode.unknown_member_id
    members.poll_until(lambda: len(members.shares()[0]) == 2, "the member to give up half for the newcomer")
    members.poll_until(fenced, "the member that never synced to be fenced", timeout=REBALANCE_MS / 1000 + 30)
    assert "did not sync within its rebalance timeout" in broker.log()
    produce(broker.address, "nosync", 400)
    members.poll_until(lambda: exact(members.shares(), PARTITIONS, [PARTITIONS]) and len(members.received[0]) == 400,
                       "the KIP-848 member to own and read every partition again")
    members.consumers[0].close()


def test_a_classic_member_told_to_rejoin_that_never_does_is_fenced_at_its_rebalance_timeout(broker):
    create_topic(broker.address, "norejoin", PARTITIONS)
    members = Members([consumer(broker.address, "g", ["norejoin"])])
    members.poll_until(lambda: exact(members.shares(), PARTITIONS, [PARTITIONS]), "the KIP-848 member to own all")
    classic = RawClassicMember(broker.address, "g", "norejoin")
    classic.join()
    assert classic.sync() == ErrorCode.none

    def settled() -> bool:  # a well-behaved classic member: it rejoins and syncs when told to
        if classic.heartbeat() == ErrorCode.rebalance_in_progress:
            classic.join()
            assert classic.sync() == ErrorCode.none
            return False
        return len(members.shares()[0]) == 2
    members.poll_until(settled, "the classic member to take half the partitions")
    members.add(consumer(broker.address, "g", ["norejoin"]))  # a new epoch: the classic member must rejoin ...
    members.poll_until(lambda: classic.heartbeat() == ErrorCode.rebalance_in_progress, "the classic member told to rejoin")
    # ... and does not, but heartbeats on: fenced at its rebalance timeout, the KIP-848 members share it all
    members.poll_until(lambda: classic.heartbeat() == ErrorCode.unknown_member_id,
                       "the member that never rejoined to be fenced", timeout=REBALANCE_MS / 1000 + 30)
    assert "did not within its rebalance timeout" in broker.log()
    members.poll_until(lambda: exact(members.shares(), PARTITIONS, [2, 2]), "the two KIP-848 members to share it all")
    produce(broker.address, "norejoin", 400)
    members.poll_until(lambda: sum(map(len, members.received)) == 400, "every record read by the KIP-848 members")
    for c in members.consumers:
        c.close()
