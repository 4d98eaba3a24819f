"""acks=all on one partition's leader, without a cluster: when a write is acknowledged, it is in the
maximal ISR (committed + proposed) and that ISR has at least min.insync.replicas members (issue 34).

A leader cut off from its followers shrinks its ISR to itself; the high watermark then jumps to
the log end, and a write only the leader holds must be answered NOT_ENOUGH_REPLICAS_AFTER_APPEND,
not acknowledged (Kafka's `checkEnoughReplicasReachOffset`), whether the shrink comes from the
leader's own ISR keeper (`set_isr`) or from ZooKeeper's state first (`become_leader`). A follower
being added to the ISR counts for the high watermark from the moment its addition is sent to the
store, where the controller could already elect it."""

from __future__ import annotations

import asyncio

import pytest

from logcore.config import BrokerConfig, TopicConfig
from logcore.protocol.codec import ErrorCode
from logcore.protocol.errors import NotEnoughReplicasAfterAppend, NotLeaderOrFollower
from logcore.replication.isr import IsrKeeper
from logcore.replication.manager import ReplicaManager
from logcore.replication.partition import Partition
from logcore.storage.records import encode_batch

REPLICAS = [0, 1, 2]
EPOCH = 3


def record(i: int) -> bytes:
    return encode_batch([(None, f"v{i}".encode())], 1_700_000_000_000 + i)


async def leader(tmp_path, min_isr: int = 2, isr=(0, 1, 2)) -> tuple[ReplicaManager, Partition]:
    broker = BrokerConfig({"min.insync.replicas": str(min_isr)})
    replicas = ReplicaManager(str(tmp_path), 0, broker)
    await replicas.open_existing([("t", 0, TopicConfig(broker, {}))], alone=False)
    partition = replicas.get("t", 0)
    partition.become_leader(EPOCH, REPLICAS, list(isr))
    return replicas, partition


def fetch(replicas: ReplicaManager, follower: int, offset: int) -> None:
    """A follower's fetch from `offset`: everything before it is in its log."""
    replicas.read("t", 0, offset, 1 << 20, True, replica_id=follower)


async def acks_all(partition: Partition) -> asyncio.Task:
    """Append one record with acks=-1 and wait for it as the produce handler does."""
    appended = partition.append_as_leader(record(partition.log.log_end_offset), required_acks=-1)
    task = asyncio.create_task(partition.wait_until_replicated(appended.next_offset, 10))
    await asyncio.sleep(0.01)
    assert not task.done(), "acknowledged before any follower had it"
    return task


async def test_a_write_held_by_the_leader_alone_is_not_acknowledged_when_its_isr_shrinks(tmp_path):
    replicas, partition = await leader(tmp_path)
    task = await acks_all(partition)
    partition.set_isr([0])  # the followers fell behind (cut off): the ISR keeper persisted [0]
    assert partition.high_watermark == partition.log.log_end_offset
    with pytest.raises(NotEnoughReplicasAfterAppend) as raised:
        await task
    assert raised.value.code == ErrorCode.not_enough_replicas_after_append


async def test_the_same_when_zookeepers_state_brings_the_shrunk_isr_first(tmp_path):
    replicas, partition = await leader(tmp_path)
    task = await acks_all(partition)
    partition.become_leader(EPOCH, REPLICAS, [0])
    with pytest.raises(NotEnoughReplicasAfterAppend):
        await task


async def test_a_write_is_acknowledged_once_enough_of_the_isr_has_it(tmp_path):
    replicas, partition = await leader(tmp_path)
    task = await acks_all(partition)
    end = partition.log.log_end_offset
    fetch(replicas, 1, end)
    await asyncio.sleep(0.01)
    assert not task.done()  # broker 2 is in the ISR: acks=all waits for it
    partition.set_isr([0, 1])  # ...until it leaves it; [0, 1] meets min.insync.replicas=2
    await asyncio.wait_for(task, 1)


async def test_a_write_waiting_when_leadership_moves_and_comes_back_is_not_acknowledged(tmp_path):
    """The offset may hold another leader's record by then."""
    replicas, partition = await leader(tmp_path)
    task = await acks_all(partition)
    end = partition.log.log_end_offset
    partition.become_follower(1, EPOCH + 1, REPLICAS, [1, 2])
    partition.become_leader(EPOCH + 2, REPLICAS, [0])  # a new epoch, same end offset, ISR of one
    partition.become_leader(EPOCH + 2, REPLICAS, [0, 1, 2])
    fetch(replicas, 1, end)
    fetch(replicas, 2, end)
    with pytest.raises(NotLeaderOrFollower):
        await task


class HeldStore:
    """An IsrStore whose writes reach ZooKeeper at once but are confirmed only when the test says."""

    def __init__(self) -> None:
        self.written: list[list[int]] = []
        self.confirm = asyncio.Event()
        self.fail_with: Exception | None = None

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        self.written.append(list(isr))  # from here the controller may elect any broker in `isr`
        await self.confirm.wait()
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            raise error
        return True


async def test_a_follower_being_added_to_the_isr_counts_for_acks_all_from_the_moment_it_is_proposed(tmp_path):
    replicas, partition = await leader(tmp_path, isr=(0, 1))
    store = HeldStore()
    keeper = IsrKeeper(replicas, store, max_lag_ms=60_000)
    try:
        fetch(replicas, 2, partition.high_watermark)  # broker 2 caught up: the keeper writes [0, 1, 2]
        await asyncio.sleep(0.01)
        assert store.written == [[0, 1, 2]] and partition.isr == [0, 1]
        task = await acks_all(partition)
        end = partition.log.log_end_offset
        fetch(replicas, 1, end)
        await asyncio.sleep(0.01)
        assert not task.done(), "acknowledged a write that broker 2, named in sync in ZooKeeper, lacks"
        assert partition.high_watermark < end
        fetch(replicas, 2, end)
        await asyncio.wait_for(task, 1)
        store.confirm.set()
        await asyncio.sleep(0.01)
        assert partition.isr == [0, 1, 2] and partition.proposed_isr is None
    finally:
        await keeper.stop()


async def test_an_isr_write_of_unknown_outcome_is_tried_again_and_counts_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr("logcore.replication.isr.RETRY_S", 0.01)
    replicas, partition = await leader(tmp_path, isr=(0, 1))
    store = HeldStore()
    store.fail_with = ConnectionError("connection to ZooKeeper lost")
    keeper = IsrKeeper(replicas, store, max_lag_ms=60_000)
    try:
        fetch(replicas, 2, partition.high_watermark)
        store.confirm.set()
        await asyncio.sleep(0.1)
        assert store.written == [[0, 1, 2], [0, 1, 2]]
        assert partition.isr == [0, 1, 2]
    finally:
        await keeper.stop()


async def test_a_refused_isr_write_stops_counting_the_follower(tmp_path):
    replicas, partition = await leader(tmp_path, isr=(0, 1))

    class Refusing:
        async def alter_isr(self, *_args) -> bool:
            return False  # the controller changed the state meanwhile

    keeper = IsrKeeper(replicas, Refusing(), max_lag_ms=60_000)
    try:
        fetch(replicas, 2, partition.high_watermark)
        await asyncio.sleep(0.01)
        assert partition.isr == [0, 1] and partition.proposed_isr is None
        task = await acks_all(partition)
        fetch(replicas, 1, partition.log.log_end_offset)
        await asyncio.wait_for(task, 1)
    finally:
        await keeper.stop()
