"""`binlake groups` against a real broker: list, describe, reset-offsets and delete, run as a command."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from confluent_kafka import Producer

from test_groups import FAST, committed, create_topic, parts, wait_for

BASE_TS = 1_700_000_000_000  # message i of each partition has timestamp BASE_TS + i seconds


def groups(broker, *args: str, ok: bool = True) -> str:
    result = subprocess.run([sys.executable, "-m", "binlake.cli", "groups", args[0], "--bootstrap-server",
                             broker.address, *args[1:]], capture_output=True, text=True, timeout=60)
    assert (result.returncode == 0) == ok, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.fixture
def loaded(broker_factory):
    """A broker with topic `cli` (2 partitions x 20 messages) and group `cli-group` committed at 12 and 15."""
    broker = broker_factory(config=FAST)

    async def setup():
        await create_topic(broker.address, "cli", 2)
        async with AIOKafkaProducer(bootstrap_servers=broker.address) as producer:
            for i in range(20):
                for p in range(2):
                    await producer.send_and_wait("cli", b"v", partition=p, timestamp_ms=BASE_TS + i * 1000)

    asyncio.run(setup())
    return broker


async def start_member(broker) -> AIOKafkaConsumer:
    c = AIOKafkaConsumer("cli", bootstrap_servers=broker.address, group_id="cli-group", client_id="cli-client",
                         enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300)
    await c.start()
    await wait_for(lambda: len(parts(c)) == 2, 15, "an assignment")
    await c.commit({TopicPartition("cli", 0): 12, TopicPartition("cli", 1): 15})
    return c


async def test_list_and_describe_an_active_group(loaded):
    c = await start_member(loaded)
    try:
        assert "cli-group" in (await asyncio.to_thread(groups, loaded, "list")).split()
        assert "cli-group  STABLE" in await asyncio.to_thread(groups, loaded, "list", "--state")
        out = await asyncio.to_thread(groups, loaded, "describe", "--group", "cli-group")
        assert "Group cli-group is STABLE with 1 member(s)" in out
        lines = [line.split() for line in out.splitlines()]
        rows = {(row[1], row[2]): row for row in lines if row[:2] == ["cli-group", "cli"]}
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        assert rows[("cli", "0")][3:6] == ["12", "20", "8"]
        assert rows[("cli", "1")][3:6] == ["15", "20", "5"]
        assert rows[("cli", "0")][8] == "cli-client"
        member = next(row for row in lines if row and row[0].startswith("cli-client-") and len(row) == 6)
        assert member[4:] == ["2", "cli-0,cli-1"]  # #PARTITIONS, ASSIGNMENT (no instance id is shown as -)

        refused = await asyncio.to_thread(groups, loaded, "reset-offsets", "--group", "cli-group", "--all-topics",
                                          "--to-earliest", "--execute", ok=False)
        assert "only be reset while it is inactive, but it is STABLE" in refused
        refused = await asyncio.to_thread(groups, loaded, "delete", "--group", "cli-group", ok=False)
        assert "NON_EMPTY_GROUP" in refused
    finally:
        await c.stop()


def test_reset_offsets_round_trip(loaded):
    asyncio.run(_stopped_member(loaded))

    def offsets():
        return asyncio.run(committed(loaded.address, "cli-group", "cli", 2))

    out = groups(loaded, "reset-offsets", "--group", "cli-group", "--all-topics", "--to-earliest", "--dry-run")
    assert "dry run" in out and offsets() == {0: 12, 1: 15}
    groups(loaded, "reset-offsets", "--group", "cli-group", "--all-topics", "--to-earliest", "--execute")
    assert offsets() == {0: 0, 1: 0}
    groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli:1", "--to-offset", "7", "--execute")
    assert offsets() == {0: 0, 1: 7}
    groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli", "--shift-by", "-3", "--execute")
    assert offsets() == {0: 0, 1: 4}  # clamped at the log start, like Kafka
    groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli", "--to-latest", "--execute")
    assert offsets() == {0: 20, 1: 20}
    moment = datetime.datetime.fromtimestamp((BASE_TS + 5500) / 1000, datetime.UTC).isoformat()
    groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli", "--to-datetime", moment, "--execute")
    assert offsets() == {0: 6, 1: 6}  # the first message at or after the time
    groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli:0", "--to-offset", "99", "--execute")
    assert offsets() == {0: 20, 1: 6}  # clamped at the log end

    first = asyncio.run(_first_offsets(loaded))
    assert first == {1: 6}, "a consumer resumes where the offsets were reset to"

    usage = groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli", "--to-earliest",
                   "--to-latest", ok=False)
    assert "exactly one of" in usage
    missing = groups(loaded, "reset-offsets", "--group", "cli-group", "--topic", "cli:5", "--to-earliest", ok=False)
    assert "no partition(s) [5]" in missing


async def _stopped_member(broker) -> None:
    c = await start_member(broker)
    await c.stop()


async def _first_offsets(broker) -> dict[int, int]:
    c = AIOKafkaConsumer("cli", bootstrap_servers=broker.address, group_id="cli-group", enable_auto_commit=False)
    await c.start()
    try:
        found: dict[int, int] = {}
        for _ in range(50):
            for tp, messages in (await c.getmany(timeout_ms=200)).items():
                found.setdefault(tp.partition, messages[0].offset)
            if found:
                await asyncio.sleep(0.5)  # partition 0 sits at its end: nothing should come from it
                for tp, messages in (await c.getmany(timeout_ms=200)).items():
                    found.setdefault(tp.partition, messages[0].offset)
                return found
        return found
    finally:
        await c.stop()


def test_delete_group(loaded):
    asyncio.run(_stopped_member(loaded))
    assert "Deleted group cli-group." in groups(loaded, "delete", "--group", "cli-group")
    assert "cli-group" not in groups(loaded, "list").split()
    assert asyncio.run(committed(loaded.address, "cli-group", "cli", 2)) == {}
    assert "GROUP_ID_NOT_FOUND" in groups(loaded, "delete", "--group", "cli-group", ok=False)


class EveryPartitionTwice(RoundRobinPartitionAssignor):
    """Lists each assigned partition twice, as faust's assignor does for a global table's changelog
    partition it hands out as active and standby."""

    name = "twice"

    @classmethod
    def assign(cls, cluster, members):
        return {member: ConsumerProtocolMemberAssignment(cls.version, [(topic, partitions + partitions)
                                                                       for topic, partitions in given.assignment], b"")
                for member, given in super().assign(cluster, members).items()}


def write_transactions(address: str, topic: str, transactions: int) -> None:
    """Transactions of two records each in `topic`-0 and -1, as the connector writes change topics:
    each ends in a commit marker, which takes an offset."""
    producer = Producer({"bootstrap.servers": address, "transactional.id": f"writer-{topic}"})
    producer.init_transactions()
    for _ in range(transactions):
        producer.begin_transaction()
        for partition in (0, 0, 1, 1):
            producer.produce(topic, b"v", partition=partition)
        producer.commit_transaction()


async def test_describe_counts_records_behind_not_transaction_markers_and_shows_each_partition_once(broker_factory):
    """An exactly-once processor commits one past the last record it processed: the commit marker
    after it. Kafka's tool shows LAG 1 there, on every caught-up partition; binlake counts what a
    read_committed consumer would still get."""
    broker = broker_factory(config=FAST)
    await create_topic(broker.address, "txn", 2)
    await asyncio.to_thread(write_transactions, broker.address, "txn", 3)  # offsets 0 1 M 3 4 M 6 7 M, per partition
    member = AIOKafkaConsumer("txn", bootstrap_servers=broker.address, group_id="eos", client_id="eos-client",
                              enable_auto_commit=False, isolation_level="read_committed",
                              partition_assignment_strategy=(EveryPartitionTwice,))
    await member.start()
    try:
        await wait_for(lambda: len(parts(member)) == 2, 15, "an assignment")
        await member.commit({TopicPartition("txn", 0): 8, TopicPartition("txn", 1): 5})  # partition 1: a transaction behind

        def described() -> tuple[dict, list]:
            lines = [line.split() for line in groups(broker, "describe", "--group", "eos").splitlines()]
            rows = {row[2]: row[3:6] for row in lines if row[:2] == ["eos", "txn"]}
            return rows, next(row for row in lines if row and row[0].startswith("eos-client-"))

        rows, listed = await asyncio.to_thread(described)
        # CURRENT-OFFSET LOG-END-OFFSET LAG: caught up at the marker; two records (three offsets) behind
        assert rows == {"0": ["8", "9", "0"], "1": ["5", "9", "2"]}
        assert listed[-2:] == ["2", "txn-0,txn-1"]  # #PARTITIONS, ASSIGNMENT: each once

        await asyncio.to_thread(write_transactions, broker.address, "txn", 1)
        rows, _ = await asyncio.to_thread(described)
        assert rows == {"0": ["8", "12", "2"], "1": ["5", "12", "4"]}
    finally:
        await member.stop()
