"""A CreateTopics of thousands of partitions must not hold the broker: while its logs are made, other
connections are answered (Metadata, ApiVersions, Produce to an existing topic), and what it
acknowledges is whole and survives a SIGKILL. Real broker, real clients; every bound is measured
against the create's own duration on this machine, never a figure sized for one machine."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
import uuid
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from logcore.cluster.topics import TopicInfo
from logcore.coordinator.state_topic import StateTopic
from logcore.protocol.codec import ErrorCode
from logcore.protocol.errors import CoordinatorNotAvailable
from logcore.storage.checkpoint import read_entries
from waiting import wait_for
from wire import WireClient

WIDE = 2_000  # partitions: tens of seconds of file work on a loaded machine before the fix
CREATE_TIMEOUT_S = 600.0  # the socket's and the request's: long enough for the slowest machine
PING_EVERY_S = 0.02  # a client's pace, not a wait: back-to-back pings would take the broker's CPU from the create


def create_request(name: str, partitions: int) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName(name), num_partitions=i32(partitions), replication_factor=i16(1), assignments=(),
        configs=()),), timeout=datetime.timedelta(seconds=CREATE_TIMEOUT_S), validate_only=False)


def metadata_request(name: str) -> MetadataRequest:
    return MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName(name)),),
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def describe(address: str, name: str):
    with WireClient(address) as client:
        return client.call(metadata_request(name)).topics[0]


def delete(address: str, name: str):
    """DeleteTopics of `name` by name; the topic's result."""
    with WireClient(address, timeout=CREATE_TIMEOUT_S) as client:
        topic = DeleteTopicState(name=TopicName(name), topic_id=uuid.UUID(int=0))
        return client.call(DeleteTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=60))).responses[0]


class Create(threading.Thread):
    """One CreateTopics on its own connection; `error_code` and `seconds` once it is answered."""

    def __init__(self, address: str, name: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.client = WireClient(address, timeout=CREATE_TIMEOUT_S)
        self.request = create_request(name, partitions)
        self.error_code: int | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        with self.client:
            self.error_code = self.client.call(self.request).topics[0].error_code
        self.seconds = time.monotonic() - started


def test_other_connections_are_answered_while_a_large_create_topics_runs(broker):
    address = broker.address
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0, "acks": 1, "log_level": 0})
    producer.produce("busy", b"first")          # (auto-creates the existing topic the pings write to)
    assert producer.flush(60) == 0
    latencies: list[tuple[str, float]] = []
    create = Create(address, "wide", WIDE)
    create.start()
    wait_for(lambda: (broker.data_dir / "wide-0").is_dir(), "the create to start making its logs")
    with WireClient(address, timeout=CREATE_TIMEOUT_S) as pings:
        while create.is_alive():
            for what, call in (("ApiVersions", lambda: pings.call(ApiVersionsRequest(
                                    client_software_name="pings", client_software_version="1"))),
                               ("Metadata", lambda: pings.call(metadata_request("busy"))),
                               ("Produce", lambda: (producer.produce("busy", b"ping"), producer.flush(60)))):
                started = time.monotonic()
                call()
                latencies.append((what, time.monotonic() - started))
                time.sleep(PING_EVERY_S)
    create.join()
    assert create.error_code == ErrorCode.none
    worst = max(latencies, key=lambda item: item[1])
    assert worst[1] < create.seconds / 2, (
        f"a {worst[0]} request waited {worst[1]:.2f} s while the CreateTopics of {WIDE:,} partitions took "
        f"{create.seconds:.2f} s: the create held the event loop")
    found = describe(address, "wide")
    assert len(found.partitions) == WIDE and all(p.error_code == 0 and p.leader_id >= 0 for p in found.partitions)


def test_two_concurrent_creates_of_one_name_give_one_whole_topic_that_survives_a_sigkill(broker):
    """One create wins, the other hears TOPIC_ALREADY_EXISTS; the winner's answer means every
    partition is there, with its leader epoch, even if the broker is killed right after it."""
    partitions = WIDE // 2
    first, second = Create(broker.address, "twin", partitions), Create(broker.address, "twin", partitions)
    first.start()
    second.start()
    first.join()
    second.join()
    broker.kill()                                # right after the answers: no flush, no checkpoint
    assert sorted([first.error_code, second.error_code]) == [ErrorCode.none, ErrorCode.topic_already_exists]
    for index in range(partitions):
        directory = broker.data_dir / f"twin-{index}"
        assert read_entries(str(directory / "leader-epoch-checkpoint"), 2) == [["0", "0"]], directory
    assert not (broker.data_dir / f"twin-{partitions}").exists()

    broker.start()
    found = describe(broker.address, "twin")
    assert found.error_code == 0 and len(found.partitions) == partitions
    assert all(p.error_code == 0 and p.leader_id >= 0 and p.leader_epoch == 0 for p in found.partitions)
    after = Producer({"bootstrap.servers": broker.address, "linger.ms": 0, "log_level": 0})
    for index in (0, partitions // 2, partitions - 1):
        after.produce("twin", b"after a SIGKILL", partition=index)
    assert after.flush(60) == 0


def test_a_delete_during_a_create_finds_no_topic_yet_and_the_create_ends_whole(broker):
    """A DeleteTopics that meets the name while its logs are being made finds no topic yet, and
    the create answers success after with every partition: never half a topic."""
    create = Create(broker.address, "brief", WIDE // 2)
    create.start()
    wait_for(lambda: (broker.data_dir / "brief-0").is_dir(), "the create to start making its logs")
    deleted = delete(broker.address, "brief")
    create.join()
    assert deleted.error_code == ErrorCode.unknown_topic_or_partition, "the delete came while the logs were made"
    assert create.error_code == ErrorCode.none
    found = describe(broker.address, "brief")
    assert found.error_code == 0 and len(found.partitions) == WIDE // 2
    assert len(list(broker.data_dir.glob("brief-*"))) == WIDE // 2


def test_an_internal_topic_is_created_once_for_every_caller_meanwhile_and_an_append_before_it_retries():
    """A coordinator's topic (50 partitions) is made off the loop too: FindCoordinators that come
    while it is made wait for that one creation; a write that comes before it exists (a client that
    skipped FindCoordinator) starts it and hears the retriable COORDINATOR_NOT_AVAILABLE."""
    metadata = SimpleNamespace(topics={}, brokers=[0])
    created, release = [], None

    async def create_topic(name, partitions, **_settings):
        created.append(name)
        await release.wait()                     # the logs being made
        metadata.topics[name] = TopicInfo(name, uuid.uuid4(), partitions, 1, {})

    async def scenario():
        nonlocal release
        release = asyncio.Event()
        topic = StateTopic("__consumer_offsets", 50, 1 << 20, replicas=None, metadata=metadata,
                           create_topic=create_topic)
        with pytest.raises(CoordinatorNotAvailable):
            topic.append(0, [(b"key", b"value")])
        waiting = [asyncio.create_task(topic.ensure()) for _ in range(3)]
        await asyncio.sleep(0)                   # (every caller reaches the creation)
        assert not any(task.done() for task in waiting)
        release.set()
        await asyncio.gather(*waiting)
        assert created == ["__consumer_offsets"] and topic.exists
    asyncio.run(scenario())


def test_partitions_added_to_a_topic_deleted_meanwhile_are_deleted_too(broker):
    """A DeleteTopics while a CreatePartitions makes its logs deletes the topic; the new logs are then
    deleted again (the CreatePartitions hears UNKNOWN_TOPIC_OR_PARTITION), never left behind."""
    with WireClient(broker.address, timeout=CREATE_TIMEOUT_S) as client:
        assert client.call(create_request("grows", 1)).topics[0].error_code == ErrorCode.none
    grown: list[int] = []

    def grow() -> None:
        with WireClient(broker.address, timeout=CREATE_TIMEOUT_S) as client:
            grown.append(client.call(CreatePartitionsRequest(
                topics=(CreatePartitionsTopic(name=TopicName("grows"), count=i32(1 + WIDE // 2), assignments=None),),
                timeout=datetime.timedelta(seconds=CREATE_TIMEOUT_S), validate_only=False)).results[0].error_code)
    growing = threading.Thread(target=grow, daemon=True)
    growing.start()
    wait_for(lambda: (broker.data_dir / "grows-1").is_dir(), "the new partitions' logs to be made")
    deleted = delete(broker.address, "grows")
    growing.join()
    assert deleted.error_code == ErrorCode.none
    assert grown == [ErrorCode.unknown_topic_or_partition], "the delete came while the logs were made"
    assert describe(broker.address, "grows").error_code == ErrorCode.unknown_topic_or_partition
    wait_for(lambda: not any(broker.data_dir.glob("grows-*")), "every log of the deleted topic to go")
