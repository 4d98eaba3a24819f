"""Transactions against a real broker with real clients: commits and aborts over several topics and
partitions, read_committed vs read_uncommitted readers (confluent-kafka, aiokafka, kcat), zombie
fencing, timeouts, crashes of the broker and of a consume-process-produce processor.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from brokerproc import read_to_end
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.list_offsets.v5.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from wire import WireClient

from logcore.coordinator.transaction_log import (
    TRANSACTION_TOPIC,
    TxnLogValue,
    TxnState,
    encode_key,
    encode_value,
    partition_for,
)
from logcore.protocol.codec import ApiKey, ErrorCode, build, encode_request, request_class
from logcore.storage.batch import HEADER_SIZE, TRANSACTIONAL, assign_offsets, read_header
from logcore.storage.records import encode_batch

TIMEOUT = 30
TXN_PARTITIONS = 5
CONFIG = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}


@pytest.fixture
def broker(broker_factory):
    return broker_factory(config=CONFIG)


def create_topics(address: str, **partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()]).values():
        future.result(TIMEOUT)


def txn_producer(address: str, txn_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": address, "transactional.id": txn_id, "linger.ms": 5, **extra})
    producer.init_transactions(TIMEOUT)
    return producer



def kcat_read(kcat: str, address: str, topic: str, isolation: str) -> list[bytes]:
    out = subprocess.run([kcat, "-b", address, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", f"isolation.level={isolation}", "-f", "%s\n"],
                         capture_output=True, check=True, timeout=TIMEOUT).stdout
    return sorted(out.split())


def list_offset_latest(address: str, topic: str, isolation: int) -> int:
    with WireClient(address) as client:
        response = client.call(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(
            ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),)))
    return response.topics[0].partitions[0].offset


def describe_txn(address: str, txn_id: str):
    cls = request_class(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    with WireClient(address) as client:
        return client.call(cls(transactional_ids=(txn_id,))).transaction_states[0]


# -- commit, abort, isolation ------------------------------------------------------------------


def test_confluent_commit_and_abort_over_topics_and_partitions(broker, kcat):
    create_topics(broker.address, orders=3, audit=2)
    producer = txn_producer(broker.address, "shop")
    committed, aborted = [], []
    for n, outcome in enumerate(["commit", "abort", "commit", "abort", "commit"]):
        producer.begin_transaction()
        for i in range(12):
            value = b"%s-%d-%d" % (outcome.encode(), n, i)
            producer.produce("orders", value=value, partition=i % 3)
            producer.produce("audit", value=value, partition=i % 2)
            (committed if outcome == "commit" else aborted).extend([value, value])
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT)
        else:
            producer.flush(TIMEOUT)  # the doomed records really reach the log before the abort
            producer.abort_transaction(TIMEOUT)
    topics = {"orders": 3, "audit": 2}
    assert sorted(read_to_end(broker.address, topics, "read_committed")) == sorted(committed)
    assert sorted(read_to_end(broker.address, topics, "read_uncommitted")) == sorted(committed + aborted)
    assert kcat_read(kcat, broker.address, "audit", "read_committed") == sorted(committed[1::2])
    assert len(kcat_read(kcat, broker.address, "audit", "read_uncommitted")) == len(committed + aborted) // 2

    # Each partition indexed both aborts in Kafka's .txnindex format; they still count after a crash.
    index = Path(broker.data_dir, "orders-0", "00000000000000000000.txnindex").read_bytes()
    entries = [struct.unpack_from(">hqqqq", index, at) for at in range(0, len(index), 34)]
    assert len(index) == 2 * 34 and all(version == 0 and first < last < lso for version, _, first, last, lso in entries)
    broker.kill()
    broker.start()
    assert sorted(read_to_end(broker.address, topics, "read_committed")) == sorted(committed)


async def test_aiokafka_commit_and_abort(broker):
    create_topics(broker.address, events=2, log=1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.address, transactional_id="aio-shop")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(10):
                await producer.send("events", b"ok-%d" % i, partition=i % 2)
                await producer.send("log", b"ok-%d" % i, partition=0)
        await producer.begin_transaction()
        sent = [await producer.send("events", b"bad-%d" % i, partition=i % 2) for i in range(10)]
        await asyncio.gather(*sent)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait("events", b"ok-last", partition=0)
    finally:
        await producer.stop()

    async def read(isolation: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.address, isolation_level=isolation,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [AioTP("events", 0), AioTP("events", 1), AioTP("log", 0)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
            values = []
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value for r in records]
            return sorted(values)
        finally:
            await consumer.stop()

    committed = [b"ok-%d" % i for i in range(10)] * 2 + [b"ok-last"]
    assert await read("read_committed") == sorted(committed)
    assert await read("read_uncommitted") == sorted(committed + [b"bad-%d" % i for i in range(10)])


def test_read_committed_stops_at_the_last_stable_offset(broker):
    create_topics(broker.address, pending=1)
    plain = Producer({"bootstrap.servers": broker.address})
    plain.produce("pending", b"before", partition=0)
    plain.flush(TIMEOUT)
    producer = txn_producer(broker.address, "slow")
    producer.begin_transaction()
    producer.produce("pending", b"undecided", partition=0)
    producer.flush(TIMEOUT)
    plain.produce("pending", b"after", partition=0)  # non-transactional, but behind the open transaction
    plain.flush(TIMEOUT)

    assert list_offset_latest(broker.address, "pending", isolation=0) == 3
    assert list_offset_latest(broker.address, "pending", isolation=1) == 1  # the open transaction starts at 1
    assert read_to_end(broker.address, {"pending": 1}, "read_committed") == [b"before"]
    assert read_to_end(broker.address, {"pending": 1}, "read_uncommitted") == [b"before", b"undecided", b"after"]

    producer.commit_transaction(TIMEOUT)
    assert list_offset_latest(broker.address, "pending", isolation=1) == 4  # past the commit marker
    assert read_to_end(broker.address, {"pending": 1}, "read_committed") == [b"before", b"undecided", b"after"]


def test_init_producer_id_with_transactional_id_every_version(broker):
    epochs = []
    with WireClient(broker.address) as client:
        for version in range(7):
            cls = request_class(ApiKey.INIT_PRODUCER_ID, version)
            fields = {"transactional_id": "versions", "transaction_timeout": datetime.timedelta(seconds=30)}
            if version >= 3:
                fields.update(producer_id=-1, producer_epoch=-1)
            response = client.call(cls(**fields))
            assert response.error_code == ErrorCode.none, version
            epochs.append((response.producer_id, response.producer_epoch))
        too_long = client.call(request_class(ApiKey.INIT_PRODUCER_ID, 4)(
            transactional_id="versions", transaction_timeout=datetime.timedelta(hours=1)))
        two_phase = client.call(request_class(ApiKey.INIT_PRODUCER_ID, 6)(
            transactional_id="versions", transaction_timeout=datetime.timedelta(seconds=30), enable2_pc=True))
    assert len({pid for pid, _ in epochs}) == 1  # one producer id per transactional id
    assert [e for _, e in epochs] == list(range(7))  # each start fences the previous one
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    assert two_phase.error_code == ErrorCode.invalid_request


# -- fencing and timeouts ----------------------------------------------------------------------


def test_zombie_producer_is_fenced(broker):
    create_topics(broker.address, fenced=2)
    zombie = txn_producer(broker.address, "worker-1")
    zombie.begin_transaction()
    zombie.produce("fenced", b"zombie-1", partition=0)
    zombie.produce("fenced", b"zombie-2", partition=1)
    zombie.flush(TIMEOUT)

    successor = txn_producer(broker.address, "worker-1")  # same id: aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("fenced", b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)

    zombie.produce("fenced", b"zombie-3", partition=0)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT)
    assert raised.value.args[0].fatal(), raised.value.args[0]  # fenced: the zombie can never write again
    assert read_to_end(broker.address, {"fenced": 2}, "read_committed") == [b"successor"]
    state = describe_txn(broker.address, "worker-1")
    assert state.transaction_state == "CompleteCommit" and state.producer_epoch >= 2


def test_transaction_past_its_timeout_is_aborted_and_fenced(broker):
    create_topics(broker.address, sleepy=1)
    producer = txn_producer(broker.address, "sleepy", **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce("sleepy", b"too-late", partition=0)
    producer.flush(TIMEOUT)
    assert describe_txn(broker.address, "sleepy").transaction_state == "Ongoing"
    deadline = time.monotonic() + TIMEOUT
    while describe_txn(broker.address, "sleepy").transaction_state != "CompleteAbort":
        assert time.monotonic() < deadline, "the coordinator never aborted the timed-out transaction"
        time.sleep(0.2)
    assert list_offset_latest(broker.address, "sleepy", isolation=1) == 2  # past the abort marker
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)
    assert read_to_end(broker.address, {"sleepy": 1}, "read_committed") == []
    assert read_to_end(broker.address, {"sleepy": 1}, "read_uncommitted") == [b"too-late"]


# -- broker crashes ----------------------------------------------------------------------------


def test_broker_killed_mid_transaction_then_the_producer_commits(broker):
    create_topics(broker.address, survive=2)
    producer = txn_producer(broker.address, "survivor")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("survive", b"%d" % i, partition=i % 2)
    producer.flush(TIMEOUT)
    broker.kill()
    broker.start()
    for i in range(10, 20):
        producer.produce("survive", b"%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)
    assert sorted(read_to_end(broker.address, {"survive": 2}, "read_committed")) == sorted(b"%d" % i for i in range(20))


def test_broker_killed_mid_transaction_then_a_new_instance_aborts_it(broker):
    create_topics(broker.address, orphan=2)
    producer = txn_producer(broker.address, "orphaned")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("orphan", b"lost-%d" % i, partition=i % 2)
    producer.flush(TIMEOUT)
    broker.kill()
    broker.start()
    assert read_to_end(broker.address, {"orphan": 2}, "read_committed") == []  # still undecided: nothing shows
    successor = txn_producer(broker.address, "orphaned")
    successor.begin_transaction()
    successor.produce("orphan", b"fresh", partition=1)
    successor.commit_transaction(TIMEOUT)
    assert read_to_end(broker.address, {"orphan": 2}, "read_committed") == [b"fresh"]
    assert len(read_to_end(broker.address, {"orphan": 2}, "read_uncommitted")) == 11


def append_while_down(data_dir: Path, topic: str, partition: int, batch: bytes) -> None:
    """Append `batch` to a stopped broker's partition after its last batch, offsets and leader epoch
    assigned as the broker would have."""
    segment = max((data_dir / f"{topic}-{partition}").glob("*.log"))
    data = segment.read_bytes()
    position, last = 0, None
    while position + HEADER_SIZE <= len(data):
        last = read_header(data, position)
        position += last.size
    assert last is not None and position == len(data), f"{segment} does not end on a batch boundary"
    buf = bytearray(batch)
    assign_offsets(buf, [read_header(buf)], last.next_offset, last.leader_epoch, None)
    with open(segment, "ab") as f:
        f.write(buf)


@pytest.mark.parametrize("decision", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT], ids=["commit", "abort"])
def test_decision_logged_before_a_crash_is_completed_on_restart(broker, decision):
    """The state a crash between logging PrepareCommit/PrepareAbort and writing the markers leaves:
    the broker is SIGKILLed with the transaction open, and the decision is appended to its
    `__transaction_state` partition while it is down."""
    create_topics(broker.address, decided=2)
    producer = txn_producer(broker.address, "decider")
    producer.begin_transaction()
    for i in range(6):
        producer.produce("decided", b"%d" % i, partition=i % 2)
    producer.flush(TIMEOUT)
    state = describe_txn(broker.address, "decider")
    assert state.transaction_state == "Ongoing"
    broker.kill()
    now = int(time.time() * 1000)
    value = TxnLogValue(state.producer_id, state.producer_epoch, 60000, decision,
                        frozenset({("decided", 0), ("decided", 1)}), now, now)
    append_while_down(broker.data_dir, TRANSACTION_TOPIC, partition_for("decider", TXN_PARTITIONS),
                      encode_batch([(encode_key("decider"), encode_value(value))], now))
    broker.start()
    expected = sorted(b"%d" % i for i in range(6)) if decision == TxnState.PREPARE_COMMIT else []
    assert sorted(read_to_end(broker.address, {"decided": 2}, "read_committed")) == expected
    done = "CompleteCommit" if decision == TxnState.PREPARE_COMMIT else "CompleteAbort"
    assert describe_txn(broker.address, "decider").transaction_state == done


@pytest.mark.parametrize("topic", ["__consumer_offsets", TRANSACTION_TOPIC])
def test_internal_topics_take_their_coordinators_settings_and_refuse_client_writes(broker, topic):
    """Metadata asking for an internal topic before its coordinator made it creates it with the
    coordinator's settings, not a client topic's defaults; a client's produce to it is refused
    with INVALID_TOPIC_EXCEPTION, as Kafka answers."""
    admin = AdminClient({"bootstrap.servers": broker.address})
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    producer = Producer({"bootstrap.servers": broker.address})  # no group, no transactional id: no coordinator
    created = producer.list_topics(topic, timeout=TIMEOUT).topics[topic]  # Metadata allowing auto-creation
    assert len(created.partitions) == 5 and created.error is None
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    described = next(iter(configs.values())).result(TIMEOUT)
    assert described["cleanup.policy"].value == "compact"
    with WireClient(broker.address) as client:
        response = client.call(ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=0, records=encode_batch([(b"k", b"v")], int(time.time() * 1000))),)),)))
    refused = response.responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.invalid_topic_exception
    assert "internal topic" in refused.error_message


# -- consume-process-produce across a processor crash ------------------------------------------

CONFLUENT_PROCESSOR = r"""
import sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
address, pause = sys.argv[1], float(sys.argv[2])
consumer = Consumer({"bootstrap.servers": address, "group.id": "eos", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                     "session.timeout.ms": 6000})
producer = Producer({"bootstrap.servers": address, "transactional.id": "eos-processor", "linger.ms": 5})
producer.init_transactions(30)
consumer.subscribe(["eos-in"])
while True:
    msgs = [m for m in consumer.consume(20, 0.5) if m.error() is None]
    if not msgs:
        continue
    producer.begin_transaction()
    offsets = {}
    for m in msgs:
        producer.produce("eos-out", value=m.value().upper(), partition=m.partition())
        offsets[(m.topic(), m.partition())] = m.offset() + 1
    producer.flush(30)
    print("in-transaction", flush=True)
    time.sleep(pause)
    producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    print("committed", flush=True)
"""

AIOKAFKA_PROCESSOR = r"""
import asyncio, sys
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata
address, pause = sys.argv[1], float(sys.argv[2])

async def main():
    consumer = AIOKafkaConsumer("eos-in", bootstrap_servers=address, group_id="eos", enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed",
                                session_timeout_ms=6000, heartbeat_interval_ms=1000)
    producer = AIOKafkaProducer(bootstrap_servers=address, transactional_id="eos-processor")
    await producer.start()
    await consumer.start()
    while True:
        batches = await consumer.getmany(timeout_ms=500, max_records=20)
        if not any(batches.values()):
            continue
        async with producer.transaction():
            offsets = {}
            for tp, records in batches.items():
                for r in records:
                    await producer.send("eos-out", r.value.upper(), partition=tp.partition)
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
            await producer.flush()
            print("in-transaction", flush=True)
            await asyncio.sleep(pause)
            await producer.send_offsets_to_transaction(offsets, "eos")
        print("committed", flush=True)

asyncio.run(main())
"""


def _start_processor(tmp_path, source: str, address: str, pause: float) -> subprocess.Popen:
    script = tmp_path / "processor.py"
    script.write_text(source)
    return subprocess.Popen([sys.executable, str(script), address, str(pause)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


@pytest.mark.parametrize("client", ["confluent", "aiokafka"])
def test_consume_process_produce_is_exactly_once_across_a_processor_kill(broker, tmp_path, client):
    source = CONFLUENT_PROCESSOR if client == "confluent" else AIOKAFKA_PROCESSOR
    create_topics(broker.address, **{"eos-in": 2, "eos-out": 2})
    inputs = [b"v%03d" % i for i in range(300)]
    feeder = Producer({"bootstrap.servers": broker.address})
    for i, value in enumerate(inputs):
        feeder.produce("eos-in", value, partition=i % 2)
    feeder.flush(TIMEOUT)

    first = _start_processor(tmp_path, source, broker.address, pause=0.3)
    lines = []
    try:
        while lines.count("committed") < 2 or lines[-1] != "in-transaction":
            line = first.stdout.readline().strip()
            assert line, "the processor stopped before it was killed"
            lines.append(line)
    finally:
        first.send_signal(signal.SIGKILL)  # mid-transaction: its output is in the log, not committed
        first.wait()
    topics = {"eos-out": 2}
    assert len(read_to_end(broker.address, topics, "read_uncommitted")) > \
        len(read_to_end(broker.address, topics, "read_committed"))

    second = _start_processor(tmp_path, source, broker.address, pause=0)
    try:
        deadline = time.monotonic() + 90
        while len(read_to_end(broker.address, topics, "read_committed")) < len(inputs):
            assert time.monotonic() < deadline, "the restarted processor did not finish"
            assert second.poll() is None, "the restarted processor died"
            time.sleep(1)
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()
    assert sorted(read_to_end(broker.address, topics, "read_committed")) == sorted(v.upper() for v in inputs)


# -- operators ---------------------------------------------------------------------------------


def binlake(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "transactions", *args], capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_lists_describes_and_aborts_a_hanging_transaction(broker):
    create_topics(broker.address, hang=1)
    finished = txn_producer(broker.address, "cli-done")
    finished.begin_transaction()
    finished.produce("hang", b"done", partition=0)
    finished.commit_transaction(TIMEOUT)
    stuck = txn_producer(broker.address, "cli-stuck", **{"transaction.timeout.ms": 900000})
    stuck.begin_transaction()
    stuck.produce("hang", b"stuck", partition=0)
    stuck.flush(TIMEOUT)
    bootstrap = ["--bootstrap-server", broker.address]

    listed = [line.split() for line in binlake("list", *bootstrap).splitlines()]
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert {(row[0], row[3]) for row in listed[1:]} == {("cli-done", "CompleteCommit"), ("cli-stuck", "Ongoing")}
    assert [row[0] for row in (line.split() for line in binlake("list", *bootstrap, "--state", "Ongoing")
                                                                .splitlines()[1:])] == ["cli-stuck"]
    described = binlake("describe", *bootstrap, "--transactional-id", "cli-stuck").splitlines()[1].split()
    assert described[4:6] == ["Ongoing", "900000"] and described[-1] == "hang-0"

    producers = [line.split() for line in binlake("describe-producers", *bootstrap, "--topic", "hang",
                                                  "--partition", "0").splitlines()[1:]]
    assert sorted(row[-1] for row in producers) == ["-", "2"]  # the stuck transaction starts at offset 2
    assert list_offset_latest(broker.address, "hang", isolation=1) == 2  # read_committed readers are held back

    out = binlake("abort", *bootstrap, "--topic", "hang", "--partition", "0", "--start-offset", "2")
    assert "aborted the transaction" in out
    assert list_offset_latest(broker.address, "hang", isolation=1) == 4  # past the abort marker
    assert read_to_end(broker.address, {"hang": 1}, "read_committed") == [b"done"]
    assert read_to_end(broker.address, {"hang": 1}, "read_uncommitted") == [b"done", b"stuck"]

    refused = subprocess.run([sys.executable, "-m", "binlake.cli", "transactions", "describe", *bootstrap,
                              "--transactional-id", "nobody"], capture_output=True, text=True, timeout=TIMEOUT)
    assert refused.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in refused.stderr


# -- exact answers: KIP-360 epoch bumps, KIP-447 generation fencing, unstable offsets -----------


def call(client: WireClient, api_key: ApiKey, version: int, data: dict):
    return client.call(build(request_class(api_key, version), data))


def test_init_producer_id_bumps_retries_and_fences_by_expected_epoch(broker):
    with WireClient(broker.address) as client:
        def init(pid: int = -1, epoch: int = -1):
            return call(client, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "kip360",
                                                             "transaction_timeout": 30000,
                                                             "producer_id": pid, "producer_epoch": epoch})
        first = init()
        bumped = init(first.producer_id, first.producer_epoch)  # KIP-360: the producer asks for a new epoch
        retried = init(first.producer_id, first.producer_epoch)  # the same request again: its answer was lost
        stale = init(first.producer_id, first.producer_epoch - 1 if first.producer_epoch else 7)
        other = init(first.producer_id + 1000, 0)
    assert first.error_code == ErrorCode.none and first.producer_epoch == 0
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 1)
    assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, 1)
    assert stale.error_code == ErrorCode.producer_fenced
    assert other.error_code == ErrorCode.producer_fenced


def test_txn_offset_commit_is_fenced_by_generation_and_pending_until_the_marker(broker):
    create_topics(broker.address, source=1)
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "g447", "session.timeout.ms": 6000})
    consumer.subscribe(["source"])
    deadline = time.monotonic() + TIMEOUT
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer never joined its group"
        consumer.poll(0.2)
    with WireClient(broker.address) as client:
        init = call(client, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "t447", "transaction_timeout": 30000})
        txn = {"transactional_id": "t447", "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
        assert call(client, ApiKey.ADD_OFFSETS_TO_TXN, 3, {**txn, "group_id": "g447"}).error_code == ErrorCode.none

        def commit(**member):
            response = call(client, ApiKey.TXN_OFFSET_COMMIT, 3, {**txn, "group_id": "g447", **member, "topics": [
                {"name": "source", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                   "committed_metadata": ""}]}]})
            return response.topics[0].partitions[0].error_code

        def fetch(require_stable: bool):
            response = call(client, ApiKey.OFFSET_FETCH, 7, {"group_id": "g447", "require_stable": require_stable,
                                                            "topics": [{"name": "source", "partition_indexes": [0]}]})
            result = response.topics[0].partitions[0]
            return result.error_code, result.committed_offset

        assert commit(generation_id=1000, member_id="") == ErrorCode.illegal_generation
        assert commit(generation_id=-1, member_id="not-a-member") == ErrorCode.unknown_member_id
        assert commit(generation_id=-1, member_id="") == ErrorCode.none
        assert fetch(require_stable=True) == (ErrorCode.unstable_offset_commit, -1)
        assert fetch(require_stable=False) == (ErrorCode.none, -1)  # not visible before the commit marker
        assert call(client, ApiKey.END_TXN, 3, {**txn, "committed": True}).error_code == ErrorCode.none
        assert fetch(require_stable=True) == (ErrorCode.none, 42)
    consumer.close()


def test_transactional_produce_outside_its_transaction_is_refused(broker):
    """KIP-890's check: a write that arrives before AddPartitionsToTxn, or after the transaction ended
    (a delayed request, a zombie), would open a transaction nothing ever closes."""
    create_topics(broker.address, guarded=1)
    with WireClient(broker.address) as client:
        init = call(client, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "guard", "transaction_timeout": 30000})
        pid, epoch = init.producer_id, init.producer_epoch
        txn = {"transactional_id": "guard", "producer_id": pid, "producer_epoch": epoch}
        sequence = [0]

        def produce(value: bytes, producer_epoch: int = epoch) -> ErrorCode:
            records = encode_batch([(None, value)], int(time.time() * 1000), producer_id=pid,
                                   producer_epoch=producer_epoch, base_sequence=sequence[0], attributes=TRANSACTIONAL)
            response = call(client, ApiKey.PRODUCE, 9, {"transactional_id": "guard", "acks": -1, "timeout": 5000,
                                                       "topic_data": [{"name": "guarded", "partition_data": [
                                                           {"index": 0, "records": records}]}]})
            code = response.responses[0].partition_responses[0].error_code
            sequence[0] += code == ErrorCode.none
            return code

        assert produce(b"not-added-yet") == ErrorCode.invalid_txn_state
        added = call(client, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "guard", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "guarded", "partitions": [0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
        assert produce(b"in-transaction") == ErrorCode.none
        assert produce(b"stale-epoch", producer_epoch=epoch - 1) == ErrorCode.invalid_producer_epoch
        assert call(client, ApiKey.END_TXN, 3, {**txn, "committed": True}).error_code == ErrorCode.none
        assert produce(b"after-the-commit") == ErrorCode.invalid_txn_state
    assert list_offset_latest(broker.address, "guarded", isolation=1) == 2  # nothing left open
    assert read_to_end(broker.address, {"guarded": 1}, "read_committed") == [b"in-transaction"]


def test_next_transaction_right_behind_end_txn_finds_the_markers_written(broker):
    """EndTxn is answered once the decision is logged and the markers follow (as in Kafka); an
    AddPartitionsToTxn for the next transaction pipelined behind it, in the same write, finishes them
    first instead of answering CONCURRENT_TRANSACTIONS."""
    create_topics(broker.address, pipelined=1)
    with WireClient(broker.address) as client:
        init = call(client, ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "pipe", "transaction_timeout": 30000})
        pid, epoch = init.producer_id, init.producer_epoch
        add = build(request_class(ApiKey.ADD_PARTITIONS_TO_TXN, 3), {
            "v3_and_below_transactional_id": "pipe", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "pipelined", "partitions": [0]}]})
        end = build(request_class(ApiKey.END_TXN, 3),
                    {"transactional_id": "pipe", "producer_id": pid, "producer_epoch": epoch, "committed": True})

        def produce(value: bytes, sequence: int) -> ErrorCode:
            records = encode_batch([(None, value)], int(time.time() * 1000), producer_id=pid, producer_epoch=epoch,
                                   base_sequence=sequence, attributes=TRANSACTIONAL)
            response = call(client, ApiKey.PRODUCE, 9, {"transactional_id": "pipe", "acks": -1, "timeout": 5000,
                                                       "topic_data": [{"name": "pipelined", "partition_data": [
                                                           {"index": 0, "records": records}]}]})
            return response.responses[0].partition_responses[0].error_code

        def added(response) -> ErrorCode:
            return response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

        assert added(client.call(add)) == ErrorCode.none
        assert produce(b"first", 0) == ErrorCode.none
        client.sock.sendall(encode_request(end, 101) + encode_request(add, 102))
        assert client.receive(end)[1].error_code == ErrorCode.none
        assert added(client.receive(add)[1]) == ErrorCode.none
        assert produce(b"second", 1) == ErrorCode.none
        assert read_to_end(broker.address, {"pipelined": 1}, "read_committed") == [b"first"]
        assert client.call(end).error_code == ErrorCode.none
    assert read_to_end(broker.address, {"pipelined": 1}, "read_committed") == [b"first", b"second"]


def test_idle_transactional_id_expires(broker_factory):
    broker = broker_factory(config={**CONFIG, "transactional.id.expiration.ms": "1000"}, name="expiring")
    create_topics(broker.address, brief=1)
    producer = txn_producer(broker.address, "short-lived")
    producer.begin_transaction()
    producer.produce("brief", b"x", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert describe_txn(broker.address, "short-lived").error_code == ErrorCode.none
    deadline = time.monotonic() + TIMEOUT
    while describe_txn(broker.address, "short-lived").error_code != ErrorCode.transactional_id_not_found:
        assert time.monotonic() < deadline, "the idle transactional id was never expired"
        time.sleep(0.2)
    broker.kill()  # the tombstone is in __transaction_state: a restarted coordinator forgets it too
    broker.start()
    assert describe_txn(broker.address, "short-lived").error_code == ErrorCode.transactional_id_not_found
