"""Consumer groups against a real broker subprocess with real clients: aiokafka, confluent-kafka
(librdkafka), kcat, and raw protocol requests where a precise generation must be forced."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Consumer, Producer

from logcore.coordinator.offsets_codec import (GroupKey, GroupValue, MemberValue, OffsetKey, OffsetValue, decode,
                                               encode_key, encode_value, java_string_hash, partition_for)
from logcore.protocol.codec import ApiKey, ErrorCode, request_class
from wire import WireClient

# Small timeouts so rebalances take well under a second; the defaults are Kafka's.
FAST = {"group.initial.rebalance.delay.ms": "100", "group.min.session.timeout.ms": "500",
        "offsets.topic.num.partitions": "5"}
SESSION_MS = 3000


@pytest.fixture
def group_broker(broker_factory):
    return broker_factory(config=FAST)


async def create_topic(address: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def produce(address: str, topic: str, count: int, partitions: int) -> None:
    async with AIOKafkaProducer(bootstrap_servers=address, linger_ms=5) as producer:
        futures = [await producer.send(topic, b"m%d" % i, partition=i % partitions) for i in range(count)]
        await asyncio.gather(*futures)


def consumer(address: str, topic: str, group: str, **kwargs) -> AIOKafkaConsumer:
    options = dict(bootstrap_servers=address, group_id=group, auto_offset_reset="earliest",
                   session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, enable_auto_commit=False)
    options.update(kwargs)
    return AIOKafkaConsumer(topic, **options)


async def wait_for(predicate, timeout: float, what: str) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


def parts(c: AIOKafkaConsumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


# A group member in its own process, so the test can SIGKILL it. It prints its assignment whenever
# it changes; with an output file it also records every message it processes and commits afterwards
# (at-least-once: process, then commit).
MEMBER = r"""
import asyncio, os, sys
from aiokafka import AIOKafkaConsumer
address, topic, group, instance, out = sys.argv[1:6]
async def main():
    c = AIOKafkaConsumer(topic, bootstrap_servers=address, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300,
                         group_instance_id=instance or None, max_poll_records=2000)
    await c.start()
    seen = None
    sink = open(f"{out}.{os.getpid()}", "w") if out else None  # one file each: a killed member's torn last line stays its own
    while True:
        batches = await c.getmany(timeout_ms=100)
        now = sorted(tp.partition for tp in c.assignment())
        if now != seen:
            seen = now
            print("assigned", " ".join(map(str, now)), flush=True)
        if sink and batches:
            sink.write("".join(f"{m.partition} {m.offset}\n" for ms in batches.values() for m in ms))
            sink.flush()
            os.fsync(sink.fileno())
            await c.commit()
asyncio.run(main())
"""


class MemberProcess:
    def __init__(self, address: str, topic: str, group: str, instance: str = "", out: str = "") -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", MEMBER, address, topic, group, instance, out],
                                     stdout=subprocess.PIPE, text=True)
        self.assigned: set[int] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("assigned"):
                self.assigned = {int(p) for p in line.split()[1:]}

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


# -- membership ----------------------------------------------------------------------------------


async def test_two_consumers_split_then_survivor_takes_all_when_one_leaves(group_broker):
    await create_topic(group_broker.address, "six", 6)
    a, b = consumer(group_broker.address, "six", "split"), consumer(group_broker.address, "six", "split")
    await asyncio.gather(a.start(), b.start())
    try:
        await wait_for(lambda: len(parts(a)) == 3 and len(parts(b)) == 3, 15, "a 3/3 split")
        assert parts(a) | parts(b) == set(range(6))
        await b.stop()  # LeaveGroup: no need to wait for the session timeout
        elapsed = await wait_for(lambda: parts(a) == set(range(6)), 10, "the survivor to own all partitions")
        assert elapsed < SESSION_MS / 1000
    finally:
        await a.stop()


async def test_sigkilled_member_partitions_move_within_session_timeout(group_broker):
    await create_topic(group_broker.address, "six", 6)
    victim = MemberProcess(group_broker.address, "six", "crash")
    survivor = consumer(group_broker.address, "six", "crash")
    await survivor.start()
    try:
        await wait_for(lambda: victim.assigned and len(victim.assigned) == 3 and len(parts(survivor)) == 3, 30,
                       "a 3/3 split with the subprocess member")
        victim.kill()
        elapsed = await wait_for(lambda: parts(survivor) == set(range(6)), 15, "the survivor to take over")
        # Session timeout, then one heartbeat interval and a rejoin.
        assert elapsed < SESSION_MS / 1000 + 2
    finally:
        victim.proc.kill()
        await survivor.stop()


async def test_third_member_gets_a_share(group_broker):
    await create_topic(group_broker.address, "six", 6)
    members = [consumer(group_broker.address, "six", "grow") for _ in range(2)]
    await asyncio.gather(*(m.start() for m in members))
    try:
        await wait_for(lambda: all(len(parts(m)) == 3 for m in members), 15, "a 3/3 split")
        members.append(consumer(group_broker.address, "six", "grow"))
        await members[-1].start()
        await wait_for(lambda: all(len(parts(m)) == 2 for m in members), 15, "a 2/2/2 split")
        assert set().union(*(parts(m) for m in members)) == set(range(6))
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def test_static_member_restart_keeps_assignment_without_rebalance(group_broker):
    await create_topic(group_broker.address, "six", 6)
    rebalances = []

    class Count(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            rebalances.append("revoked")

        async def on_partitions_assigned(self, assigned):
            rebalances.append("assigned")

    a = consumer(group_broker.address, None, "static", group_instance_id="a")
    a.subscribe(["six"])
    b = consumer(group_broker.address, None, "static", group_instance_id="b")
    b.subscribe(["six"], listener=Count())
    await asyncio.gather(a.start(), b.start())
    try:
        await wait_for(lambda: len(parts(a)) == 3 and len(parts(b)) == 3, 15, "a 3/3 split")
        before_a, before_b, seen = parts(a), parts(b), len(rebalances)
        await a.stop()  # a static member does not send LeaveGroup
        a = consumer(group_broker.address, "six", "static", group_instance_id="a")
        await a.start()
        await wait_for(lambda: parts(a) == before_a, 10, "the restarted static member to get its partitions back")
        await asyncio.sleep(1.5)  # several heartbeats of b: a rebalance would have shown by now
        assert parts(b) == before_b
        assert len(rebalances) == seen, f"b saw a rebalance: {rebalances[seen:]}"
    finally:
        await asyncio.gather(a.stop(), b.stop())


def test_confluent_cooperative_sticky_rebalances_incrementally(group_broker):
    asyncio.run(create_topic(group_broker.address, "six", 6))
    config = {"bootstrap.servers": group_broker.address, "group.id": "coop", "auto.offset.reset": "earliest",
              "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": SESSION_MS,
              "heartbeat.interval.ms": 300}
    stop = threading.Event()
    revoked: dict[str, list[int]] = {"first": [], "second": []}
    owned: dict[str, set[int]] = {"first": set(), "second": set()}

    def run(name: str, leave: threading.Event) -> None:
        c = Consumer(config)

        def on_assign(_, tps):
            owned[name] |= {tp.partition for tp in tps}

        def on_revoke(_, tps):
            revoked[name] += [tp.partition for tp in tps]
            owned[name] -= {tp.partition for tp in tps}

        c.subscribe(["six"], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set() and not leave.is_set():
            c.poll(0.1)
        c.close()

    first_leaves, never = threading.Event(), threading.Event()
    first = threading.Thread(target=run, args=("first", first_leaves))
    first.start()
    try:
        deadline = time.monotonic() + 20
        while owned["first"] != set(range(6)):
            assert time.monotonic() < deadline, f"first member never got all partitions: {owned}"
            time.sleep(0.05)
        second = threading.Thread(target=run, args=("second", never))
        second.start()
        deadline = time.monotonic() + 20
        while not (len(owned["first"]) == 3 and len(owned["second"]) == 3):
            assert time.monotonic() < deadline, f"no 3/3 split: {owned}"
            time.sleep(0.05)
        # Incremental: the first member gave up exactly the three partitions it lost, nothing more.
        assert sorted(revoked["first"]) == sorted(set(range(6)) - owned["first"])
        first_leaves.set()
        first.join(15)
        deadline = time.monotonic() + 20
        while owned["second"] != set(range(6)):
            assert time.monotonic() < deadline, f"second member never took over: {owned}"
            time.sleep(0.05)
        assert revoked["second"] == []
    finally:
        stop.set()
        first.join(15)
        if "second" in locals():
            second.join(15)


def test_kcat_balanced_consumers_share_the_topic(broker_factory, kcat):
    # A longer initial delay, so both kcat processes join the first generation.
    broker = broker_factory(config={**FAST, "group.initial.rebalance.delay.ms": "2000"})
    asyncio.run(create_topic(broker.address, "six", 6))
    asyncio.run(produce(broker.address, "six", 300, 6))
    command = [kcat, "-b", broker.address, "-G", "kc", "-o", "beginning", "-e", "-f", "%p %o\\n",
               "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", "six"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    seen = [{tuple(map(int, line.split())) for line in out.splitlines()} for out in outputs]
    assert seen[0] and seen[1], "both members should have been assigned partitions"
    assert {p for p, _ in seen[0]}.isdisjoint({p for p, _ in seen[1]})
    assert seen[0] | seen[1] == {(i % 6, i // 6) for i in range(300)}
    offsets = asyncio.run(committed(broker.address, "kc", "six", 6))
    assert offsets == {p: 50 for p in range(6)}


async def committed(address: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in found.items() if tp.topic == topic}


# -- committed offsets ---------------------------------------------------------------------------


async def test_committed_offsets_survive_consumer_restart_and_broker_kill(group_broker):
    await create_topic(group_broker.address, "durable", 3)
    await produce(group_broker.address, "durable", 90, 3)
    c = consumer(group_broker.address, "durable", "keep")
    await c.start()
    await wait_for(lambda: len(parts(c)) == 3, 15, "an assignment")
    commits = {TopicPartition("durable", p): 10 + p for p in range(3)}
    await c.commit(commits)
    await c.stop()

    c = consumer(group_broker.address, "durable", "keep")
    await c.start()
    try:
        assert {tp: await c.committed(tp) for tp in commits} == commits
    finally:
        await c.stop()

    group_broker.kill()
    group_broker.start()
    c = consumer(group_broker.address, "durable", "keep")
    await c.start()
    try:
        assert {tp: await c.committed(tp) for tp in commits} == commits
        first = {}
        while len(first) < 3:
            for tp, messages in (await c.getmany(timeout_ms=1000)).items():
                first.setdefault(tp, messages[0].offset)
        assert first == commits, "consumption resumes at the committed offsets"
    finally:
        await c.stop()


def _request(api: ApiKey, version: int, **fields):
    return request_class(api, version)(**fields)


def _join(group: str, member_id: str = "", rebalance_ms: int = 5000, session_ms: int = SESSION_MS):
    cls = request_class(ApiKey.JOIN_GROUP, 9)
    protocol = sys.modules[cls.__module__].JoinGroupRequestProtocol(name="range", metadata=b"\0" * 10)
    return cls(group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
               rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms), member_id=member_id,
               group_instance_id=None, protocol_type="consumer", protocols=(protocol,), reason=None)


def _commit(client: WireClient, group: str, generation: int, member_id: str, offset: int) -> ErrorCode:
    cls = request_class(ApiKey.OFFSET_COMMIT, 8)
    module = sys.modules[cls.__module__]
    response = client.call(cls(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=(module.OffsetCommitRequestTopic(name="fence", partitions=(
            module.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                committed_metadata=""),)),)))
    return response.topics[0].partitions[0].error_code


def _sync(client: WireClient, group: str, generation: int, member_id: str):
    return client.call(_request(ApiKey.SYNC_GROUP, 5, group_id=group, generation_id=generation, member_id=member_id,
                                group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                assignments=()))


def test_generation_fencing(group_broker):
    """Raw requests, because fencing needs a member to act on a generation it knows is stale."""
    asyncio.run(create_topic(group_broker.address, "fence", 1))
    with WireClient(group_broker.address) as x, WireClient(group_broker.address) as y:
        first = x.call(_join("fenced"))
        assert first.error_code == ErrorCode.member_id_required  # v4+: the member id comes first
        xid = first.member_id
        joined = x.call(_join("fenced", xid))
        assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, xid)
        assert _commit(x, "fenced", 1, xid, 5) == ErrorCode.rebalance_in_progress  # not synced yet
        assert _sync(x, "fenced", 1, xid).error_code == ErrorCode.none
        assert _commit(x, "fenced", 1, xid, 5) == ErrorCode.none

        yid = y.call(_join("fenced")).member_id
        pending = y.send(_join("fenced", yid))  # parks until x rejoins
        time.sleep(0.3)
        beat = x.call(_request(ApiKey.HEARTBEAT, 4, group_id="fenced", generation_id=1, member_id=xid,
                               group_instance_id=None))
        assert beat.error_code == ErrorCode.rebalance_in_progress
        assert _commit(x, "fenced", 1, xid, 6) == ErrorCode.none  # the old generation may commit until it ends
        second = x.call(_join("fenced", xid))
        assert second.generation_id == 2
        assert {m.member_id for m in second.members} == {xid, yid}
        correlation, y_joined = y.receive(_join("fenced", yid))
        assert correlation == pending and y_joined.generation_id == 2
        assert _sync(x, "fenced", 2, xid).error_code == ErrorCode.none
        assert _sync(y, "fenced", 2, yid).error_code == ErrorCode.none

        assert _commit(x, "fenced", 1, xid, 7) == ErrorCode.illegal_generation
        assert _commit(x, "fenced", 2, "nobody", 7) == ErrorCode.unknown_member_id
        assert _commit(x, "fenced", -1, "", 7) == ErrorCode.unknown_member_id  # not while the group is active
        assert _commit(x, "fenced", 2, xid, 8) == ErrorCode.none
        beat = x.call(_request(ApiKey.HEARTBEAT, 4, group_id="fenced", generation_id=1, member_id=xid,
                               group_instance_id=None))
        assert beat.error_code == ErrorCode.illegal_generation
    assert asyncio.run(committed(group_broker.address, "fenced", "fence", 1)) == {0: 8}


# -- at-least-once under crashes -----------------------------------------------------------------


def _crash_and_resume(broker, total: int, partitions: int, kills: int, tmp_path) -> None:
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000})
    asyncio.run(create_topic(broker.address, "alo", partitions))
    for i in range(total):
        producer.produce("alo", value=b"x" * 20, partition=i % partitions)
        if i % 100_000 == 99_999:
            producer.flush()
    assert producer.flush(60) == 0
    out = str(tmp_path / "processed")
    members = [MemberProcess(broker.address, "alo", "alo-group", out=out) for _ in range(2)]

    def outputs() -> list[Path]:
        return list(tmp_path.glob("processed.*"))

    def processed() -> list[tuple[int, int]]:
        """What every member wrote, but the torn last line a SIGKILL can leave. (Members once shared
        one file: a killed member's torn line then joined the next member's first line and hid it.)"""
        lines = []
        for path in outputs():
            lines += [line for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
        return [tuple(map(int, line.split())) for line in lines]

    deadline = time.monotonic() + max(120, total / 5000)
    for kill in range(kills):
        target = total * (kill + 1) // (kills + 2)
        while sum(path.stat().st_size for path in outputs()) < target * 4:
            assert time.monotonic() < deadline, "consumers made no progress"
            time.sleep(0.05)
        members[kill % 2].kill()  # mid-stream: between processing and committing, with luck
        members[kill % 2] = MemberProcess(broker.address, "alo", "alo-group", out=out)
    want = {(i % partitions, i // partitions) for i in range(total)}
    while True:
        got = set(processed())
        if got >= want:
            break
        assert time.monotonic() < deadline, f"{len(want - got)} message(s) never processed"
        time.sleep(0.2)
    assert got == want  # nothing skipped, nothing invented; duplicates after a crash are allowed
    ends = {p: len(range(p, total, partitions)) for p in range(partitions)}
    # a member commits after it processes: wait for the commits before the members go
    while (final := asyncio.run(committed(broker.address, "alo-group", "alo", partitions))) != ends:
        assert time.monotonic() < deadline, f"committed offsets {final}, expected the ends {ends}"
        time.sleep(0.2)
    for m in members:
        m.kill()


def test_at_least_once_across_consumer_crashes(group_broker, tmp_path):
    _crash_and_resume(group_broker, 30_000, 4, kills=2, tmp_path=tmp_path)


@pytest.mark.slow
def test_million_messages_at_least_once_across_consumer_crashes(group_broker, tmp_path):
    _crash_and_resume(group_broker, 1_000_000, 6, kills=3, tmp_path=tmp_path)


# -- administration ------------------------------------------------------------------------------


async def test_list_describe_delete_groups_and_offsets(group_broker):
    await create_topic(group_broker.address, "adm", 2)
    c = consumer(group_broker.address, "adm", "admin-group", client_id="describer")
    await c.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=group_broker.address)
    await admin.start()
    try:
        await wait_for(lambda: len(parts(c)) == 2, 15, "an assignment")
        await c.commit({TopicPartition("adm", 0): 3, TopicPartition("adm", 1): 4})
        assert ("admin-group", "consumer") in await admin.list_consumer_groups()
        [response] = await admin.describe_consumer_groups(["admin-group"])
        error, group_id, state, protocol_type, protocol, members = response.groups[0][:6]
        assert (error, group_id, state, protocol_type, protocol) == (0, "admin-group", "Stable", "consumer", "roundrobin")
        assert [m[1] for m in members] == ["describer"]
        with WireClient(group_broker.address) as w:
            busy = w.call(_request(ApiKey.DELETE_GROUPS, 2, groups_names=("admin-group", "no-such-group")))
            assert [(r.group_id, r.error_code) for r in busy.results] == [
                ("admin-group", ErrorCode.non_empty_group), ("no-such-group", ErrorCode.group_id_not_found)]
            cls = request_class(ApiKey.OFFSET_DELETE, 0)
            module = sys.modules[cls.__module__]
            subscribed = w.call(cls(group_id="admin-group", topics=(module.OffsetDeleteRequestTopic(
                name="adm", partitions=(module.OffsetDeleteRequestPartition(partition_index=0),)),)))
            assert subscribed.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
            await c.stop()
            deleted = w.call(cls(group_id="admin-group", topics=(module.OffsetDeleteRequestTopic(
                name="adm", partitions=(module.OffsetDeleteRequestPartition(partition_index=0),)),)))
            assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
            assert await committed(group_broker.address, "admin-group", "adm", 2) == {1: 4}
            gone = w.call(_request(ApiKey.DELETE_GROUPS, 2, groups_names=("admin-group",)))
            assert gone.results[0].error_code == ErrorCode.none
        assert ("admin-group", "consumer") not in await admin.list_consumer_groups()
        group_broker.kill()
        group_broker.start()  # the deletion is in the log too
        assert await committed(group_broker.address, "admin-group", "adm", 2) == {}
    finally:
        await admin.close()
        await c.stop()


def test_find_coordinator_batched_keys(group_broker):
    with WireClient(group_broker.address) as w:
        found = w.call(_request(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=("a", "b")))
        assert [(c.key, c.node_id, c.port, c.error_code) for c in found.coordinators] == [
            ("a", 0, group_broker.port, ErrorCode.none), ("b", 0, group_broker.port, ErrorCode.none)]


# -- the __consumer_offsets record format --------------------------------------------------------


def test_group_partition_follows_java_string_hash():
    assert java_string_hash("test") == 3556498
    assert java_string_hash("Hello World") == -862545276
    assert partition_for("test", 50) == 3556498 % 50
    assert partition_for("Hello World", 50) == 862545276 % 50


def test_offsets_records_use_kafkas_layout():
    key = encode_key(OffsetKey("g", "t", 7))
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 7)
    value = encode_value(OffsetValue(42, 3, "meta", 1_700_000_000_000))
    assert value == struct.pack(">hqih4sq", 3, 42, 3, 4, b"meta", 1_700_000_000_000)
    assert encode_key(GroupKey("g")) == struct.pack(">hh1s", 2, 1, b"g")
    member = MemberValue("m-1", "inst", "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
    group = GroupValue("consumer", 5, "range", "m-1", 1_700_000_000_000, (member,))
    assert decode(encode_key(GroupKey("g")), encode_value(group)) == (GroupKey("g"), group)
    assert decode(key, None) == (OffsetKey("g", "t", 7), None)


# -- retention -----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def in_process_broker(data_dir, **config):
    """A broker in this process, for tests that reach into it (a clock, a constant)."""
    from logcore.broker import Broker
    from logcore.config import BrokerConfig

    broker = Broker(str(data_dir), port=0, config=BrokerConfig({**FAST, **config}))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def commit_outside_a_group(address: str, group: str, tp: TopicPartition, offset: int) -> None:
    """Commit as an assigned (not subscribed) client does: the group stays Empty."""
    client = AIOKafkaConsumer(bootstrap_servers=address, group_id=group, enable_auto_commit=False)
    await client.start()
    client.assign([tp])
    await client.commit({tp: offset})
    await client.stop()


async def test_offsets_of_empty_groups_expire_after_retention(tmp_path):
    """In-process broker, so the test can ask for the retention check at a moment a week ahead."""
    async with in_process_broker(tmp_path / "data", **{"offsets.retention.minutes": "60"}) as broker:
        await create_topic(broker.address, "ret", 1)
        tp = TopicPartition("ret", 0)
        await commit_outside_a_group(broker.address, "idle", tp, 3)
        active = consumer(broker.address, "ret", "active")
        await active.start()
        await wait_for(lambda: parts(active) == {0}, 15, "an assignment")
        await active.commit({tp: 4})

        now = int(time.time() * 1000)
        assert broker.groups.expire_offsets(now + 59 * 60_000) == 0
        assert broker.groups.expire_offsets(now + 61 * 60_000) == 1  # only the empty group's
        assert "idle" not in broker.groups.groups  # no offsets left: the group is gone too
        assert await active.committed(tp) == 4
        await active.stop()
    async with in_process_broker(tmp_path / "data", **{"offsets.retention.minutes": "60"}) as restarted:
        # the tombstones were logged
        assert await committed(restarted.address, "idle", "ret", 1) == {}
        assert await committed(restarted.address, "active", "ret", 1) == {0: 4}


async def test_the_group_sweep_runs_when_a_deadline_falls_due_not_on_a_tick(tmp_path):
    """In-process broker, to count the coordinator's sweeps. Idle, it sweeps about once a second
    (it used to every 100 ms: 2.5 ms of CPU a second for nothing); a session shorter than that is
    still expired at its end, because a heartbeat brings the sweep forward to the session's end."""
    async with in_process_broker(tmp_path / "data") as broker:
        groups = broker.groups
        sweeps = []
        sweep = groups.sweep
        groups.sweep = lambda now: (sweeps.append(now), sweep(now))
        await asyncio.sleep(1.5)
        assert len(sweeps) <= 3, f"an idle coordinator swept {len(sweeps)} times in 1.5 s"

        with WireClient(broker.address) as x:
            member_id = (await asyncio.to_thread(x.call, _join("short", session_ms=500))).member_id
            joined = await asyncio.to_thread(x.call, _join("short", member_id, session_ms=500))
            assert joined.error_code == ErrorCode.none  # completed by the sweep, at the initial delay's end
            assert (await asyncio.to_thread(_sync, x, "short", joined.generation_id, member_id)).error_code \
                == ErrorCode.none
            member = groups.groups["short"].members[member_id]
            assert groups.sweep_due <= member.deadline  # not up to a second after it
            await wait_for(lambda: not groups.groups["short"].members, 15, "the silent member's session to end")
            assert sweeps[-1] >= member.deadline


async def test_committed_offsets_load_back_across_many_read_chunks(tmp_path, monkeypatch):
    """A restarted broker loads its offsets topic through the partition in chunks; with chunks far
    smaller than the topic (batches cut at every chunk's end), every group's offsets come back."""
    from logcore.coordinator import state_topic

    async with in_process_broker(tmp_path / "data", **{"offsets.topic.num.partitions": "1"}) as broker:
        await create_topic(broker.address, "chunks", 1)
        for group in range(40):
            await commit_outside_a_group(broker.address, f"g{group}", TopicPartition("chunks", 0), group + 1)
    monkeypatch.setattr(state_topic, "READ_CHUNK_BYTES", 300)  # a few batches per chunk
    async with in_process_broker(tmp_path / "data", **{"offsets.topic.num.partitions": "1"}) as restarted:
        for group in range(40):
            assert await committed(restarted.address, f"g{group}", "chunks", 1) == {0: group + 1}


def test_kafka_python_group_consumes_and_commits(group_broker):
    from kafka import KafkaConsumer

    asyncio.run(create_topic(group_broker.address, "kp", 2))
    asyncio.run(produce(group_broker.address, "kp", 40, 2))
    c = KafkaConsumer("kp", bootstrap_servers=group_broker.address, group_id="kp-group",
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        got = [m for _, m in zip(range(40), c)]
        assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in range(2) for o in range(20)]
        c.commit()
    finally:
        c.close()
    assert asyncio.run(committed(group_broker.address, "kp-group", "kp", 2)) == {0: 20, 1: 20}
