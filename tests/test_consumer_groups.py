"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka's consumer and admin
client: partitions shared exactly, incremental moves while the others keep fetching, sessions,
static members, regex subscriptions, the group surviving its coordinator's SIGKILL."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.offset_commit.v9.request import OffsetCommitRequest, OffsetCommitRequestPartition, \
    OffsetCommitRequestTopic
from brokerproc import NO_REBALANCE_DELAY
from waiting import wait_for
from wire import WireClient

# Short sessions so a killed member goes within seconds (Kafka's floor is 45 s).
# (the classic groups some tests form beside them have one member: no initial rebalance delay)
CONFIG = {"group.consumer.min.session.timeout.ms": "2000", "group.consumer.session.timeout.ms": "6000",
          "group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "500",
          **NO_REBALANCE_DELAY}
SESSION_S = 6
POLLED = 500  # messages a member takes in one poll at the most


@pytest.fixture
def broker(broker_factory):
    return broker_factory(CONFIG)


def create_topic(address: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": address})  # (kept alive until the result is in)
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def consumer(address: str, group: str, topics: list[str], **config) -> Consumer:
    c = Consumer({"bootstrap.servers": address, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    c.subscribe(topics)
    return c


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


class Traffic:
    """A producer writing to every partition of a topic until stopped."""

    def __init__(self, address: str, topic: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
        self.topic, self.partitions = topic, partitions
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            self.producer.produce(self.topic, str(n).encode(), partition=n % self.partitions)
            self.producer.poll(0)
            n += 1
            time.sleep(0.002)
        self.producer.flush(10)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


class Members:
    """Consumers polled in turn; who received what, and when."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers
        self.received: list[list[tuple[float, int]]] = [[] for _ in consumers]  # (time, partition)
        self.history: list[list[set[int]]] = [[] for _ in consumers]  # assignment after each poll

    def add(self, c: Consumer) -> None:
        self.consumers.append(c)
        self.received.append([])
        self.history.append([])

    def poll_until(self, condition, what: str, timeout: float = 60) -> None:
        def step():  # (what each member has, not one message a step: wait_for pauses between steps)
            for i, c in enumerate(self.consumers):
                for message in c.consume(POLLED, 0.02):
                    if not message.error():
                        self.received[i].append((time.monotonic(), message.partition()))
                self.history[i].append(owned(c))
            return condition()
        wait_for(step, what, timeout)

    def shares(self) -> list[set[int]]:
        return [owned(c) for c in self.consumers]


def exact(shares: list[set[int]], partitions: int, sizes: list[int]) -> bool:
    return sorted(p for s in shares for p in s) == list(range(partitions)) and sorted(map(len, shares)) == sizes


def test_three_members_share_partitions_exactly_and_a_join_moves_only_what_it_must(broker):
    create_topic(broker.address, "shared", 6)
    traffic = Traffic(broker.address, "shared", 6)
    members = Members([consumer(broker.address, "g", ["shared"]) for _ in range(2)])
    try:
        members.poll_until(lambda: exact(members.shares(), 6, [3, 3]), "two members with three partitions each")
        before = members.shares()
        joined_at = time.monotonic()
        members.add(consumer(broker.address, "g", ["shared"]))
        members.poll_until(lambda: exact(members.shares(), 6, [2, 2, 2]), "three members with two partitions each")
        settled_at = time.monotonic()
        members.poll_until(lambda: all(r and r[-1][0] > settled_at + 1 for r in members.received),
                           "every member to fetch after the move")
    finally:
        traffic.stop()
    for i in (0, 1):
        kept = before[i] & members.shares()[i]
        assert len(kept) == 2
        # never a moment without the partitions it keeps: KIP-848 revokes only what moves
        assert all(kept <= snapshot for snapshot in members.history[i][-len(members.history[2]):])
        # and records from them while the group moved (how long the gaps are is bench/rebalance.py's to
        # measure: on two loaded cores one slow poll loop exceeds any bound a quiet machine suggests)
        assert [t for t, p in members.received[i] if p in kept and joined_at <= t <= settled_at + 1], \
            f"member {i} fetched nothing from the partitions it kept while the group moved"
    for c in members.consumers:
        c.close()


def test_a_killed_member_is_removed_after_its_session_and_its_partitions_move(broker, tmp_path):
    create_topic(broker.address, "sessions", 4)
    script = ("import sys, time\nfrom confluent_kafka import Consumer\n"
              "c = Consumer({'bootstrap.servers': sys.argv[1], 'group.id': 'g', 'group.protocol': 'consumer'})\n"
              "c.subscribe(['sessions'])\nwhile True:\n    c.poll(0.1)\n")
    victim = subprocess.Popen([sys.executable, "-c", script, broker.address], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        survivor = Members([consumer(broker.address, "g", ["sessions"])])
        survivor.poll_until(lambda: len(survivor.shares()[0]) == 2, "the two members to split four partitions")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        survivor.poll_until(lambda: survivor.shares()[0] == {0, 1, 2, 3}, "the survivor to take every partition",
                            timeout=SESSION_S + 30)
        assert time.monotonic() - killed_at >= SESSION_S - 1.5  # its session ended: nobody told the group
        survivor.consumers[0].close()
    finally:
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)


def describe(address: str, group: str):
    with WireClient(address) as client:
        return client.call(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups[0]


def test_the_group_and_its_offsets_survive_a_coordinator_sigkill(broker):
    create_topic(broker.address, "durable", 4)
    producer = Producer({"bootstrap.servers": broker.address})
    for n in range(400):
        producer.produce("durable", str(n).encode(), partition=n % 4)
    producer.flush(15)
    members = Members([consumer(broker.address, "g", ["durable"]) for _ in range(2)])
    members.poll_until(lambda: exact(members.shares(), 4, [2, 2]) and sum(map(len, members.received)) >= 200
                       and {p for r in members.received for _, p in r} == {0, 1, 2, 3},
                       "two members sharing the topic and consuming from each partition")
    for c in members.consumers:
        c.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for c in members.consumers
                 for tp in c.committed([TopicPartition("durable", p) for p in owned(c)], timeout=15)}
    assert sum(committed.values()) >= 200
    before = describe(broker.address, "g")
    assert before.group_state == "Stable" and len(before.members) == 2

    broker.kill()
    broker.start()
    after = describe(broker.address, "g")  # (what the restarted coordinator loaded from __consumer_offsets)
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert {(m.member_id, m.member_epoch, m.assignment) for m in after.members} == \
           {(m.member_id, m.member_epoch, m.assignment) for m in before.members}
    # the members carry on at their epochs: no rejoin, the group epoch does not move
    members.poll_until(lambda: sum(map(len, members.received)) >= 400, "the rest of the records after the restart")
    assert describe(broker.address, "g").group_epoch == before.group_epoch
    fresh = Consumer({"bootstrap.servers": broker.address, "group.id": "g"})
    assert {tp.partition: tp.offset for tp in fresh.committed([TopicPartition("durable", p) for p in range(4)],
                                                              timeout=15)} == committed
    fresh.close()
    for c in members.consumers:
        c.close()


def test_static_member_comes_back_to_its_partitions_without_a_new_group_epoch(broker):
    create_topic(broker.address, "static", 4)
    members = Members([consumer(broker.address, "g", ["static"], **{"group.instance.id": f"i{n}"}) for n in range(2)])
    members.poll_until(lambda: exact(members.shares(), 4, [2, 2]), "two static members sharing the topic")
    share, epoch = owned(members.consumers[0]), describe(broker.address, "g").group_epoch
    members.consumers[0].close()  # (a static member leaves with epoch -2: it keeps its partitions a session long)
    back = Members([consumer(broker.address, "g", ["static"], **{"group.instance.id": "i0"})])
    back.poll_until(lambda: owned(back.consumers[0]) == share, "the static member back with its partitions")
    assert describe(broker.address, "g").group_epoch == epoch
    back.consumers[0].close()
    members.consumers[1].close()


def test_a_regex_subscription_takes_topics_created_later(broker):
    create_topic(broker.address, "rx-one", 2)
    members = Members([consumer(broker.address, "g", ["^rx-.*"])])
    members.poll_until(lambda: owned(members.consumers[0]) == {0, 1}, "the member to get rx-one")
    create_topic(broker.address, "rx-two", 3)
    create_topic(broker.address, "other", 1)
    c = members.consumers[0]
    members.poll_until(lambda: {(tp.topic, tp.partition) for tp in c.assignment()} ==
                       {("rx-one", 0), ("rx-one", 1), ("rx-two", 0), ("rx-two", 1), ("rx-two", 2)},
                       "the member to get rx-two too, and not `other`")
    c.close()


def test_admin_lists_and_describes_both_kinds_of_group(broker):
    create_topic(broker.address, "kinds", 2)
    modern = Members([consumer(broker.address, "modern", ["kinds"])])
    modern.poll_until(lambda: owned(modern.consumers[0]) == {0, 1}, "the consumer group to form")
    classic = Consumer({"bootstrap.servers": broker.address, "group.id": "classic", "group.protocol": "classic"})
    classic.subscribe(["kinds"])
    wait_for(lambda: classic.poll(0.05) is None and classic.assignment(), "the classic group to form")
    admin = AdminClient({"bootstrap.servers": broker.address})
    listed = {g.group_id: g.type for g in admin.list_consumer_groups().result(15).valid}
    assert listed == {"modern": ConsumerGroupType.CONSUMER, "classic": ConsumerGroupType.CLASSIC}
    described = admin.describe_consumer_groups(["modern", "classic"])
    modern_described, classic_described = described["modern"].result(15), described["classic"].result(15)
    assert modern_described.type == ConsumerGroupType.CONSUMER and classic_described.type == ConsumerGroupType.CLASSIC
    assert {tp.partition for tp in modern_described.members[0].assignment.topic_partitions} == {0, 1}
    assert {tp.partition for tp in classic_described.members[0].assignment.topic_partitions} == {0, 1}
    # a classic member joining the consumer group is served by it (JoinGroup/SyncGroup), its partitions
    # assigned by the coordinator
    modern.add(Consumer({"bootstrap.servers": broker.address, "group.id": "modern", "group.protocol": "classic"}))
    modern.consumers[1].subscribe(["kinds"])
    modern.poll_until(lambda: exact(modern.shares(), 2, [1, 1]), "the classic member to get a share")
    assert sorted(m.member_type for m in describe(broker.address, "modern").members) == [0, 1]  # classic, consumer
    classic.close()
    for c in modern.consumers:
        c.close()


def test_offset_commits_carry_the_member_epoch(broker):
    create_topic(broker.address, "epochs", 1)
    members = Members([consumer(broker.address, "g", ["epochs"])])
    members.poll_until(lambda: owned(members.consumers[0]) == {0}, "the member to own the partition")
    member = describe(broker.address, "g").members[0]

    def commit(epoch: int):
        request = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=epoch, member_id=member.member_id,
                                      group_instance_id=None, topics=(OffsetCommitRequestTopic(
                                          name="epochs", partitions=(OffsetCommitRequestPartition(
                                              partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                              committed_metadata=None),)),))
        with WireClient(broker.address) as client:
            return client.call(request).topics[0].partitions[0].error_code.name

    assert commit(member.member_epoch - 1) == "stale_member_epoch"
    assert commit(member.member_epoch + 1) == "fenced_member_epoch"
    assert commit(member.member_epoch) == "none"
    with pytest.raises(KafkaException):  # (nor can an outsider commit while the group has members)
        outsider = Consumer({"bootstrap.servers": broker.address, "group.id": "g"})
        outsider.commit(offsets=[TopicPartition("epochs", 0, 7)], asynchronous=False)
    members.consumers[0].close()


def test_a_member_commits_its_offsets_in_a_transaction(broker):
    create_topic(broker.address, "eos-in", 1)
    create_topic(broker.address, "eos-out", 1)
    source = Producer({"bootstrap.servers": broker.address})
    for n in range(10):
        source.produce("eos-in", str(n).encode(), partition=0)
    source.flush(15)
    members = Members([consumer(broker.address, "g", ["eos-in"], **{"isolation.level": "read_committed"})])
    members.poll_until(lambda: len(members.received[0]) == 10, "the member to read the input")
    c = members.consumers[0]
    c.commit(offsets=[TopicPartition("eos-in", 0, 5)], asynchronous=False)  # (the group has offsets already)
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "copier"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("eos-out", b"copied", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("eos-in", 0, 10)], c.consumer_group_metadata(), 15)
    producer.commit_transaction(15)
    assert c.committed([TopicPartition("eos-in", 0)], timeout=15)[0].offset == 10
    c.close()


def api_versions(address: str):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    with WireClient(address) as client:
        return client.call(ApiVersionsRequest(client_software_name="test", client_software_version="1.0"))


def test_api_versions_lists_the_consumer_protocol_and_group_version_only_while_it_is_on(broker, broker_factory):
    on = api_versions(broker.address)
    listed = {k.api_key: (k.min_version, k.max_version) for k in on.api_keys}
    assert listed[68] == (0, 1) and listed[69] == (0, 1)  # ConsumerGroupHeartbeat, ConsumerGroupDescribe
    assert ("group.version", 0, 1) in [(f.name, f.min_version, f.max_version) for f in on.supported_features]
    assert ("group.version", 1) in [(f.name, f.max_version_level) for f in on.finalized_features]

    classic_only = broker_factory({"group.coordinator.rebalance.protocols": "classic"}, name="classic-only")
    off = api_versions(classic_only.address)
    assert not {68, 69} & {k.api_key for k in off.api_keys}
    assert "group.version" not in {f.name for f in off.finalized_features}  # (transaction.version stays)
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
    with WireClient(classic_only.address) as client:  # (a client that sends it anyway)
        answer = client.call(ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0, rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_names=("t",), topic_partitions=()))
    assert answer.error_code.name == "unsupported_version" and "rebalance.protocols" in answer.error_message
