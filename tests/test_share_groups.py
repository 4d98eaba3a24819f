"""KIP-932 share groups with confluent-kafka's ShareConsumer: members sharing one partition with no
record handed to two of them while locked, RELEASE and lock timeouts redelivering with a higher
delivery count, REJECT and the delivery count limit archiving, the acknowledged state and the group
surviving the broker's SIGKILL, read_committed, the group's lock duration, and ShareGroupDescribe
(raw requests where the client hides what is checked)."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic, ShareFetchRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from logcore.protocol.codec import ApiKey, build, request_class
from waiting import wait_for
from wire import WireClient

LOCK_MS = 2000
CONFIG = {"group.share.min.session.timeout.ms": "2000", "group.share.session.timeout.ms": "6000",
          "group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "500",
          "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": str(LOCK_MS)}


@pytest.fixture
def broker(broker_factory):
    return broker_factory(CONFIG)


def setup_topic(address: str, topic: str, group: str, batches: int, per_batch: int, partitions: int = 1) -> None:
    """The topic with `batches` batches of `per_batch` records, and the group reading it from the start."""
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    earliest = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([earliest]).values():
        future.result(15)
    produce(address, topic, batches, per_batch)


def produce(address: str, topic: str, batches: int, per_batch: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for b in range(batches):
        for i in range(per_batch):
            producer.produce(topic, value=b"%d" % (start + b * per_batch + i), partition=0)
        producer.flush(15)  # (one batch each)


def share_consumer(address: str, group: str, topic: str, **config) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": address, "group.id": group, "share.acknowledgement.mode": "explicit",
                       **config})
    c.subscribe([topic])
    return c


def poll_some(c: ShareConsumer, timeout: float = 30) -> list:
    """The messages of the first poll that returns any."""
    return wait_for(lambda: [m for m in c.poll(0.5) if m.error() is None], "records from a share consumer", timeout)


def acknowledge(c: ShareConsumer, messages: list, kind=AcknowledgeType.ACCEPT) -> None:
    for m in messages:
        c.acknowledge(m, kind)
    results = c.commit_sync(15)
    assert all(error is None for error in results.values()), results


def test_members_share_a_partition_and_never_hold_the_same_record(broker):
    setup_topic(broker.address, "queue", "workers", batches=10, per_batch=10)
    a = share_consumer(broker.address, "workers", "queue", **{"max.poll.records": 10})
    b = share_consumer(broker.address, "workers", "queue", **{"max.poll.records": 10})
    try:
        held = poll_some(a)  # a holds these, unacknowledged: locked to it
        held_offsets = {m.offset() for m in held}
        seen_by_b: list[int] = []
        while len(seen_by_b) + len(held_offsets) < 100:
            got = poll_some(b)
            seen_by_b += [m.offset() for m in got]
            acknowledge(b, got)
        assert not held_offsets & set(seen_by_b), "a record went to two members while locked"
        assert sorted(seen_by_b + list(held_offsets)) == list(range(100))
        assert all(m.delivery_count() == 1 for m in held)
        with WireClient(broker.address) as wire:
            group = wire.call(ShareGroupDescribeRequest(group_ids=("workers",),
                                                           include_authorized_operations=False)).groups[0]
        assert group.group_state == "Stable" and group.assignor_name == "simple"
        assert len(group.members) == 2
        assert all([tp.partitions for tp in m.assignment.topic_partitions] == [(0,)] for m in group.members)
        acknowledge(a, held)
    finally:
        a.close()
        b.close()


def test_released_records_come_again_with_a_higher_delivery_count(broker):
    setup_topic(broker.address, "queue", "g", batches=1, per_batch=5)
    a = share_consumer(broker.address, "g", "queue")
    try:
        first = poll_some(a)
        assert [(m.offset(), m.delivery_count()) for m in first] == [(o, 1) for o in range(5)]
        acknowledge(a, first, AcknowledgeType.RELEASE)
        again = poll_some(a)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(o, 2) for o in range(5)]
        acknowledge(a, again)
    finally:
        a.close()


def test_a_lock_that_ends_hands_the_records_to_another_member(broker):
    setup_topic(broker.address, "queue", "g", batches=1, per_batch=5)
    a = share_consumer(broker.address, "g", "queue")
    b = share_consumer(broker.address, "g", "queue")
    try:
        stuck = poll_some(a)  # and never acknowledged
        assert len(stuck) == 5
        redelivered = poll_some(b, timeout=LOCK_MS / 1000 + 30)
        assert [(m.offset(), m.delivery_count()) for m in redelivered] == [(o, 2) for o in range(5)]
        acknowledge(b, redelivered)
    finally:
        a.close()
        b.close()


def test_rejected_records_and_records_past_the_delivery_limit_are_archived(broker_factory):
    broker = broker_factory({**CONFIG, "group.share.delivery.count.limit": "2"})
    setup_topic(broker.address, "queue", "g", batches=1, per_batch=4)
    a = share_consumer(broker.address, "g", "queue")
    try:
        first = poll_some(a)
        a.acknowledge(first[0], AcknowledgeType.REJECT)       # offset 0: archived at once
        a.acknowledge(first[1], AcknowledgeType.ACCEPT)       # offset 1: done
        for m in first[2:]:
            a.acknowledge(m, AcknowledgeType.RELEASE)         # offsets 2, 3: again
        assert all(e is None for e in a.commit_sync(15).values())
        second = poll_some(a)
        assert [(m.offset(), m.delivery_count()) for m in second] == [(2, 2), (3, 2)]
        acknowledge(a, second, AcknowledgeType.RELEASE)       # the second delivery was the last: archived
        produce(broker.address, "queue", 1, 1, start=4)
        third = poll_some(a)
        assert [(m.offset(), m.delivery_count(), m.value()) for m in third] == [(4, 1, b"4")]
        acknowledge(a, third)
    finally:
        a.close()


def test_the_acknowledged_state_survives_a_broker_sigkill(broker):
    setup_topic(broker.address, "queue", "g", batches=10, per_batch=10)
    a = share_consumer(broker.address, "g", "queue", **{"max.poll.records": 10})
    accepted: list[int] = []
    try:
        while len(accepted) < 50:
            got = poll_some(a)
            acknowledge(a, got)
            accepted += [m.offset() for m in got]
    finally:
        a.close()
    broker.kill()
    broker.start()
    b = share_consumer(broker.address, "g", "queue", **{"max.poll.records": 10})
    rest: list[int] = []
    try:
        while len(accepted) + len(rest) < 100:
            got = poll_some(b)
            acknowledge(b, got)
            rest += [m.offset() for m in got]
    finally:
        b.close()
    assert not set(accepted) & set(rest), "an acknowledged record came again after the restart"
    assert sorted(accepted + rest) == list(range(100))


def test_api_versions_lists_the_share_apis_and_share_version_only_while_share_groups_are_on(broker, broker_factory):
    def versions(address: str):
        with WireClient(address) as client:
            return client.call(ApiVersionsRequest(client_software_name="test", client_software_version="1.0"))

    on = versions(broker.address)
    listed = {k.api_key: (k.min_version, k.max_version) for k in on.api_keys}
    assert all(listed[key] == (1, 1) for key in (76, 77, 78, 79))  # ShareGroupHeartbeat ... ShareAcknowledge
    assert all(listed[key] == (0, 0) for key in range(83, 88))  # Kafka 4.1's share coordinator APIs
    assert ("share.version", 1) in [(f.name, f.max_version_level) for f in on.finalized_features]

    off_broker = broker_factory({"group.coordinator.rebalance.protocols": "classic,consumer"}, name="no-share")
    off = versions(off_broker.address)
    assert not {76, 77, 78, 79, *range(83, 88)} & {k.api_key for k in off.api_keys}
    assert "share.version" not in {f.name for f in off.finalized_features}
    with WireClient(off_broker.address) as client:  # (a client that sends it anyway)
        answer = client.call(ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0,
                                                        subscribed_topic_names=("t",)))
    assert answer.error_code == 35  # UNSUPPORTED_VERSION


def test_initialize_share_group_state_never_undoes_a_start_and_is_fenced_by_the_state_epoch(broker):
    """InitializeShareGroupState (83) and ReadShareGroupStateSummary (87), as a group coordinator sends them."""
    topic_id = uuid.uuid4()

    def call(api: ApiKey, partition: dict):
        with WireClient(broker.address) as client:
            return client.call(build(request_class(api, 0), {"group_id": "g", "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": 0, **partition}]}]})).results[0].partitions[0]

    def initialize(state_epoch: int, start_offset: int) -> str:
        return call(ApiKey.INITIALIZE_SHARE_GROUP_STATE, {"state_epoch": state_epoch,
                                                          "start_offset": start_offset}).error_code.name

    def summary() -> tuple[int, int]:
        got = call(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {"leader_epoch": -1})
        assert got.error_code.name == "none", got
        return got.state_epoch, got.start_offset

    assert summary() == (0, -1)  # (no state)
    assert initialize(-1, -1) == "none" and summary() == (0, -1)  # exists, its start for the leader to pick
    assert initialize(-1, 7) == "none" and summary() == (0, 7)
    assert initialize(-1, -1) == "none" and summary() == (0, 7)  # (a start is never undone)
    assert initialize(3, 9) == "none" and summary() == (3, 9)
    assert initialize(2, 1) == "fenced_state_epoch" and summary() == (3, 9)


def test_a_share_group_id_is_not_a_consumer_groups(broker):
    setup_topic(broker.address, "queue", "g", batches=1, per_batch=1)
    a = share_consumer(broker.address, "g", "queue")
    try:
        acknowledge(a, poll_some(a))
        classic = Consumer({"bootstrap.servers": broker.address, "group.id": "g", "session.timeout.ms": 6000})
        classic.subscribe(["queue"])
        message = wait_for(lambda: next((m for m in [classic.poll(0.5)] if m is not None and m.error()), None),
                           "the classic consumer's refusal")
        assert message.error().code() == 23  # INCONSISTENT_GROUP_PROTOCOL
        classic.close()
        # nor do its offsets (as Kafka: "not a consumer group"): a manual commit and a fetch are refused
        with pytest.raises(KafkaException) as refused:
            Consumer({"bootstrap.servers": broker.address, "group.id": "g"}).commit(
                offsets=[TopicPartition("queue", 0, 1)], asynchronous=False)
        assert refused.value.args[0].code() == 69  # GROUP_ID_NOT_FOUND
        with pytest.raises(KafkaException) as refused:
            Consumer({"bootstrap.servers": broker.address, "group.id": "g"}).committed(
                [TopicPartition("queue", 0)], timeout=15)
        assert refused.value.args[0].code() == 69
    finally:
        a.close()


def describe(address: str, group: str):
    with WireClient(address) as wire:
        return wire.call(ShareGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)).groups[0]


def test_a_member_carries_on_through_a_broker_sigkill(broker):
    """The group and its member come back from `__consumer_offsets` (the epoch goes on from where it
    was, not from 1 as for a new group); the member reopens its share session
    (SHARE_SESSION_NOT_FOUND) and gets the records not yet accepted, none twice."""
    setup_topic(broker.address, "queue", "g", batches=10, per_batch=10)
    a = share_consumer(broker.address, "g", "queue", **{"max.poll.records": 10})
    accepted: list[int] = []
    try:
        while len(accepted) < 30:
            got = poll_some(a)
            acknowledge(a, got)
            accepted += [m.offset() for m in got]
        before = describe(broker.address, "g")
        broker.kill()
        broker.start()
        while len(accepted) < 100:
            got = poll_some(a)
            acknowledge(a, got)
            accepted += [m.offset() for m in got]
        after = describe(broker.address, "g")
    finally:
        a.close()
    assert sorted(accepted) == list(range(100))
    assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
    assert after.group_epoch > before.group_epoch  # (a group lost with the broker would start again at 1)


def test_read_committed_share_groups_skip_aborted_records_and_wait_for_open_transactions(broker):
    setup_topic(broker.address, "queue", "rc", batches=0, per_batch=0)
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.GROUP, "rc", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "share-rc"})
    producer.init_transactions(15)
    for values, commit in (([b"a1", b"a2"], False), ([b"c1", b"c2"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce("queue", value=v, partition=0)
        producer.flush(15)
        (producer.commit_transaction if commit else producer.abort_transaction)(15)
    producer.begin_transaction()
    producer.produce("queue", value=b"open", partition=0)  # (left open: beyond the last stable offset)
    producer.flush(15)
    a = share_consumer(broker.address, "rc", "queue")
    try:
        got = poll_some(a)
        assert [m.value() for m in got] == [b"c1", b"c2"]
        acknowledge(a, got)
        producer.commit_transaction(15)
        got = poll_some(a)
        assert [m.value() for m in got] == [b"open"]
        acknowledge(a, got)
    finally:
        a.close()


def test_the_group_config_overrides_the_brokers_lock_duration(broker_factory):
    """share.record.lock.duration.ms of the group, over group.share.record.lock.duration.ms: what ShareFetch
    tells the member (acquisition_lock_timeout), and how long the records stay locked."""
    broker = broker_factory({**CONFIG, "group.share.record.lock.duration.ms": "10000"})
    setup_topic(broker.address, "queue", "short", batches=1, per_batch=3)
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.GROUP, "short", incremental_configs=[
            ConfigEntry("share.record.lock.duration.ms", "1200", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(15)

    def fetch(wire, member: str, epoch: int):
        return wire.call(ShareFetchRequest(
            group_id="short", member_id=member, share_session_epoch=epoch, max_wait=datetime.timedelta(seconds=5),
            min_bytes=1, max_records=100, batch_size=100,
            topics=(FetchTopic(topic_id=topic_id, partitions=(FetchPartition(partition_index=0, acknowledgement_batches=()),)),),
            forgotten_topics_data=()))

    with WireClient(broker.address) as wire:
        for member in ("m1", "m2"):
            joined = wire.call(ShareGroupHeartbeatRequest(group_id="short", member_id=member, member_epoch=0,
                                                          subscribed_topic_names=("queue",)))
            assert joined.error_code == 0
        topic_id = joined.assignment.topic_partitions[0].topic_id  # (both members have partition 0)
        first = fetch(wire, "m1", 0)
        assert first.acquisition_lock_timeout == datetime.timedelta(milliseconds=1200)
        acquired = first.responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(0, 2, 1)]
        locked_at = time.monotonic()
        again = fetch(wire, "m2", 0)  # (waits for the lock to end: nothing else is available)
        waited = time.monotonic() - locked_at
        got = again.responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(0, 2, 2)]
        # the group's 1.2 s, not the broker's 10 s (counted from the acquisition, which is written
        # before the answer: the member hears of it a little later)
        assert 0.6 <= waited < 5


def test_by_duration_starts_at_the_first_record_that_young(broker):
    setup_topic(broker.address, "queue", "recent", batches=0, per_batch=0)
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.GROUP, "recent", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "by_duration:PT1H", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": broker.address})
    now_ms = int(time.time() * 1000)
    for i, age_ms in enumerate([3 * 3600_000, 2 * 3600_000, 600_000, 0]):
        producer.produce("queue", value=b"%d" % i, partition=0, timestamp=now_ms - age_ms)
        producer.flush(15)
    a = share_consumer(broker.address, "recent", "queue")
    try:
        got = poll_some(a)
        assert [m.value() for m in got] == [b"2", b"3"]  # (the two older than an hour are skipped)
        acknowledge(a, got)
    finally:
        a.close()
