"""Crash recovery through a real broker process and real clients: SIGKILL mid-stream, torn tails,
lost or damaged indexes, damage in the middle of a segment, leader epochs over restarts."""

import os
import random
import re
import subprocess
import time
from datetime import timedelta

import pytest

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.offset_for_leader_epoch.v4.request import (OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
                                                           OffsetForLeaderTopic)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from logcore.protocol.codec import ErrorCode
from logcore.storage.batch import HEADER_SIZE, read_header
from logcore.storage.records import encode_batch
from brokerproc import TO_THE_END, read_to_end
from wire import WireClient

FLUSH_EVERY_MESSAGE = {"log.flush.interval.messages": "1"}


def create_topic(address: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    future = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name]
    future.result(30)


def produce_one_by_one(address: str, topic: str, values: list[bytes], partition: int = 0, **extra) -> list[int]:
    """Each value in its own batch (flushed before the next); returns the acknowledged offsets."""
    producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 0, **extra})
    offsets = []
    for value in values:
        producer.produce(topic, value=value, partition=partition,
                         on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else err))
        assert producer.flush(30) == 0
    assert all(isinstance(o, int) for o in offsets), offsets
    return offsets


def consume_all(address: str, topic: str, partition: int = 0, start: int = 0) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": address, "group.id": "recovery-check", "enable.auto.commit": False,
                         **TO_THE_END})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
        consumer.assign([TopicPartition(topic, partition, start)])
        got = []
        while not got or got[-1][0] < high - 1:
            msg = consumer.poll(20)
            assert msg is not None, f"stalled after {len(got)} records (high watermark {high})"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if high == start:
                    break
                continue
            got.append((msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def segment_files(broker, topic: str, suffix: str = ".log", partition: int = 0) -> list[str]:
    d = broker.data_dir / f"{topic}-{partition}"
    return sorted(str(d / n) for n in os.listdir(d) if n.endswith(suffix))


def raw_produce(address: str, topic: str, partition: int = 0):
    """One ProduceRequest, answered without client-side retries: the partition's error as sent."""
    request = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=5), topic_data=(
        TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=encode_batch([(None, b"x")], int(time.time() * 1000))),
        )),
    ))
    with WireClient(address) as client:
        return client.call(request).responses[0].partition_responses[0]


# -- SIGKILL ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kills,flushing", [(2, FLUSH_EVERY_MESSAGE), (2, {}),
                                            pytest.param(10, FLUSH_EVERY_MESSAGE, marks=pytest.mark.slow)],
                         ids=["flush.messages=1", "page-cache", "flush.messages=1-10-kills"])
def test_sigkill_during_produce_loses_nothing_acknowledged(broker_factory, kills, flushing):
    """With flush.messages=1 an acknowledged record was fsynced before its ack, so it survives any
    crash. A killed process loses nothing the OS already holds either, so with page-cache flushing
    too nothing acknowledged is lost to SIGKILL (only a power loss can take unflushed data)."""
    broker = broker_factory(config={**flushing, "log.segment.bytes": "16384",
                                    "log.flush.offset.checkpoint.interval.ms": "300"})
    create_topic(broker.address, "crash")
    acked: dict[int, bytes] = {}
    failed = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": broker.address, "acks": "all", "linger.ms": 1,
                         "message.timeout.ms": 120000, "retry.backoff.ms": 50, "reconnect.backoff.ms": 50,
                         "reconnect.backoff.max.ms": 200})
    rng = random.Random(7)
    sent = 0
    acked_at_kill = []
    for _ in range(kills):
        deadline = time.monotonic() + rng.uniform(0.5, 1.2)
        while time.monotonic() < deadline:
            if sent - len(acked) - len(failed) > 500:  # keep a bounded stream in flight
                producer.poll(0.01)
                continue
            producer.produce("crash", value=f"m{sent}".encode().ljust(rng.randint(10, 300), b"."), partition=0,
                             on_delivery=report)
            sent += 1
            producer.poll(0)
        acked_at_kill.append(len(acked))
        broker.kill()
        broker.start()
    assert producer.flush(120) == 0 and not failed, failed
    assert len(set(acked.values())) == sent, "every record is acknowledged once the broker is back"

    log = consume_all(broker.address, "crash")
    assert [o for o, _ in log] == list(range(len(log))), "offsets stay dense across recoveries"
    stored = dict(log)
    lost = {o: v for o, v in acked.items() if stored.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records missing or changed after SIGKILL, e.g. {list(lost.items())[:3]}"
    assert acked_at_kill[0] > 50 and len(segment_files(broker, "crash")) > 2
    assert len(re.findall(r"crash-0: recovered \d+ segment", broker.log())) == kills


# -- torn tails ------------------------------------------------------------------------------------

def test_half_written_last_batch_after_sigkill_is_truncated(broker):
    create_topic(broker.address, "torn")
    values = [f"v{i}".encode() * 20 for i in range(30)]
    assert produce_one_by_one(broker.address, "torn", values) == list(range(30))
    broker.kill()
    (path,) = segment_files(broker, "torn")
    size = os.path.getsize(path)
    # The next batch as the producer would have had it written, cut in half by the crash.
    half = bytearray(encode_batch([(None, b"never acknowledged" * 10)], int(time.time() * 1000)))
    half[0:8] = (30).to_bytes(8, "big")
    with open(path, "ab") as f:
        f.write(half[: len(half) // 2])
    broker.start()
    assert f"truncating {len(half) // 2} bytes of torn tail at byte {size} (next offset 30)" in broker.log()
    assert produce_one_by_one(broker.address, "torn", [b"after"]) == [30]
    assert consume_all(broker.address, "torn") == list(enumerate(values)) + [(30, b"after")]


def test_garbage_after_the_last_batch_is_cut_even_after_a_clean_stop(broker):
    create_topic(broker.address, "garbage")
    produce_one_by_one(broker.address, "garbage", [b"a", b"b", b"c"])
    broker.stop()
    (path,) = segment_files(broker, "garbage")
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(os.urandom(333))
    broker.start()
    assert f"truncating 333 bytes of torn tail at byte {size}" in broker.log()
    produce_one_by_one(broker.address, "garbage", [b"d"])
    assert consume_all(broker.address, "garbage") == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


# -- indexes ---------------------------------------------------------------------------------------

def test_deleted_and_corrupted_indexes_are_rebuilt_identically(broker):
    create_topic(broker.address, "idx", **{"segment.bytes": "4096", "index.interval.bytes": "300"})
    base_ts = int(time.time() * 1000) - 100_000
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 0})
    for i in range(300):
        producer.produce("idx", value=f"r{i}".encode() * 10, partition=0, timestamp=base_ts + i * 10)
        if i % 3 == 2:
            producer.flush(30)
    assert producer.flush(30) == 0
    broker.stop()
    indexes = segment_files(broker, "idx", ".index") + segment_files(broker, "idx", ".timeindex")
    assert len(indexes) >= 8
    original = {p: open(p, "rb").read() for p in indexes}
    assert any(len(v) >= 24 for v in original.values()), "sparse indexes do hold entries"
    for i, path in enumerate(sorted(indexes)):
        if i % 2:
            os.unlink(path)
        else:
            with open(path, "wb") as f:
                f.write(os.urandom(len(original[path]) + 5))

    broker.start()
    assert "index files missing or inconsistent with the log; rebuilding them" in broker.log()
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "idx"})
    try:
        wanted = [base_ts + 10 * i for i in (0, 1, 150, 299)] + [base_ts + 5 + 10 * 77]
        found = [consumer.offsets_for_times([TopicPartition("idx", 0, t)], timeout=20)[0].offset for t in wanted]
        assert found == [0, 1, 150, 299, 78]
    finally:
        consumer.close()
    assert consume_all(broker.address, "idx", start=123)[:2] == [(123, b"r123" * 10), (124, b"r124" * 10)]
    broker.stop()
    assert {p: open(p, "rb").read() for p in indexes} == original


# -- damage in the middle --------------------------------------------------------------------------

def test_corrupt_batch_mid_segment_takes_the_partition_offline_with_file_and_offset(broker):
    create_topic(broker.address, "bad")
    create_topic(broker.address, "good")
    values = [f"v{i}".encode() * 10 for i in range(20)]
    produce_one_by_one(broker.address, "bad", values)
    produce_one_by_one(broker.address, "good", [b"fine"])
    broker.kill()
    (path,) = segment_files(broker, "bad")
    with open(path, "r+b") as f:
        data = f.read()
        position = 0
        for _ in range(10):
            position += read_header(data, position).size
        f.seek(position + HEADER_SIZE + 3)
        f.write(bytes(b ^ 0xFF for b in data[position + HEADER_SIZE + 3 : position + HEADER_SIZE + 9]))
    broker.start()

    log = broker.log()
    assert f"partition bad-0 is offline: {path}: corrupt record batch at byte {position} " \
           f"(where offset 10 should start): CRC32C mismatch" in log
    assert f"truncate -s {position} {path}" in log and f"binlake dump-log {path}" in log
    answer = raw_produce(broker.address, "bad")
    assert answer.error_code == ErrorCode.kafka_storage_error
    assert f"corrupt record batch at byte {position}" in answer.error_message
    topics = AdminClient({"bootstrap.servers": broker.address}).list_topics(timeout=20).topics
    assert topics["bad"].partitions[0].error.code() == KafkaError.KAFKA_STORAGE_ERROR
    assert produce_one_by_one(broker.address, "good", [b"still fine"]) == [1], "other partitions keep serving"

    broker.stop()
    assert not (broker.data_dir / ".kafka_cleanshutdown").exists(), "the next start must look again"
    subprocess.run(["truncate", "-s", str(position), path], check=True)  # what the log line says to do
    broker.start()
    assert consume_all(broker.address, "bad") == list(enumerate(values[:10]))
    assert produce_one_by_one(broker.address, "bad", [b"again"]) == [10]


# -- checkpoints and epochs ------------------------------------------------------------------------

def test_recovery_starts_at_the_checkpointed_recovery_point(broker_factory):
    broker = broker_factory(config={**FLUSH_EVERY_MESSAGE, "log.segment.bytes": "2048",
                                    "log.flush.offset.checkpoint.interval.ms": "200"})
    create_topic(broker.address, "rp")
    produce_one_by_one(broker.address, "rp", [b"x" * 100] * 60)
    time.sleep(0.6)  # a checkpoint after the last flush
    checkpoint = (broker.data_dir / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert checkpoint[:2] == ["0", "1"] and checkpoint[2] == "rp 0 60"
    broker.kill()
    broker.start()
    segments = segment_files(broker, "rp")
    assert len(segments) > 3
    assert re.search(r"rp-0: recovered 1 segment\(s\) from offset \d+ \(recovery point 60\)", broker.log())
    broker.stop()
    assert (broker.data_dir / "recovery-point-offset-checkpoint").read_text() == "0\n1\nrp 0 60\n"
    assert (broker.data_dir / "log-start-offset-checkpoint").read_text() == "0\n1\nrp 0 0\n"


def test_leader_epoch_checkpoint_survives_kills(broker):
    create_topic(broker.address, "epochs")
    produce_one_by_one(broker.address, "epochs", [b"a", b"b"])
    epoch_file = broker.data_dir / "epochs-0" / "leader-epoch-checkpoint"
    assert epoch_file.read_text() == "0\n1\n0 0\n"
    broker.kill()
    broker.start()
    assert epoch_file.read_text() == "0\n1\n0 0\n"
    request = OffsetForLeaderEpochRequest(topics=(OffsetForLeaderTopic(topic="epochs", partitions=(
        OffsetForLeaderPartition(partition=i32(0), current_leader_epoch=i32(0), leader_epoch=i32(0)),)),))
    with WireClient(broker.address) as client:
        answer = client.call(request).topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 2)


# -- random damage to the files beside the segments ---------------------------------------------

def damaged_copies(path: str, seed: int, copies: int) -> list[bytes]:
    """`copies` versions of the file, each with a run of random bytes at a random offset."""
    data = open(path, "rb").read()
    rng = random.Random(seed)
    versions = []
    for _ in range(copies):
        damaged = bytearray(data or b"\0")
        at = rng.randrange(len(damaged))
        run = rng.randbytes(rng.randint(1, 16))
        damaged[at:at + len(run)] = run
        versions.append(bytes(damaged))
    return versions


@pytest.mark.parametrize("copies", [1, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["snapshot", "txnindex", "recovery-point-offset-checkpoint",
                                  "log-start-offset-checkpoint", "leader-epoch-checkpoint", "index", "timeindex"])
def test_damaged_side_files_are_named_and_everything_is_served(broker, kind, copies):
    """The files beside the segments are caches or checkpoints that the segments can rebuild. With
    a random run of bytes in any of them, the broker starts, serves every committed record (and
    hides the aborted ones from read_committed) and keeps idempotent producers exact; damage it
    notices is logged with the file (always for the producer snapshot, which has a CRC). Two files
    of each kind, `copies` random damages each."""
    create_topic(broker.address, "side", **{"segment.bytes": "2048"})
    committed = produce_one_by_one(broker.address, "side", [f"c{i}".encode() * 20 for i in range(30)],
                                   **{"enable.idempotence": True})
    txn = Producer({"bootstrap.servers": broker.address, "transactional.id": "side-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("side", b"aborted", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce("side", b"committed in a transaction", partition=0)
    txn.commit_transaction(30)
    assert committed == list(range(30))
    expected = read_to_end(broker.address, {"side": 1}, "read_committed")
    assert b"aborted" not in expected and len(expected) == 31
    broker.stop()  # a clean stop writes the producer snapshot and the checkpoints
    for round_ in range(2):
        files = side_files(broker, kind)  # again each round: restarts write new snapshots
        assert files, f"no {kind} file to damage"
        path = files[-1 - round_ % len(files)]  # the newest first: the ones a restart reads
        original = path.read_bytes()
        for version in damaged_copies(str(path), seed=round_, copies=copies):
            path.write_bytes(version)
            broker.start()
            got = read_to_end(broker.address, {"side": 1}, "read_committed")
            assert got == expected, f"{path} damaged: read {len(got)} records, expected {len(expected)}"
            if kind == "snapshot" and path == files[-1]:  # the one read, and it has a checksum: always noticed
                assert f"{path}: ignoring corrupt producer snapshot" in broker.log()
            produce_one_by_one(broker.address, "side", [b"after the damage"], **{"enable.idempotence": True})
            expected.append(b"after the damage")
            broker.stop()
            if path.exists():
                path.write_bytes(original)  # the next damage starts from the intact file


def side_files(broker, kind: str) -> list:
    return sorted(p for p in (broker.data_dir / "side-0").iterdir() if p.name == kind or p.name.endswith("." + kind)) \
        or sorted(p for p in broker.data_dir.iterdir() if p.name == kind)
