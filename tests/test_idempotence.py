"""Idempotent producers against a real broker: retried batches are written once, sequence gaps and
stale epochs are refused, producer state survives restarts (snapshot + log tail) and is forgotten
when retention removes a producer's data.

Real clients (confluent-kafka, aiokafka) show the end-to-end guarantee; raw requests (tests/wire.py)
pin down the exact error codes, which no well-behaved client provokes on purpose.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from brokerproc import TO_THE_END, free_port, read_to_end
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from wire import WireClient

from logcore.protocol.codec import ApiKey, ErrorCode, request_class
from logcore.storage.records import encode_batch

TIMEOUT = 20


# -- helpers -----------------------------------------------------------------------------------


def create_topic(address: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(TIMEOUT)


def init_producer_id(client: WireClient, version: int = 4, transactional_id: str | None = None):
    cls = request_class(ApiKey.INIT_PRODUCER_ID, version)
    fields = {"transactional_id": transactional_id, "transaction_timeout": datetime.timedelta(seconds=60)}
    if version >= 3:
        fields.update(producer_id=-1, producer_epoch=-1)
    return client.call(cls(**fields))


def batch(pid: int, epoch: int, seq: int, values: list[bytes], timestamp_ms: int | None = None) -> bytes:
    return encode_batch([(None, v) for v in values], timestamp_ms or int(time.time() * 1000),
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def produce(client: WireClient, topic: str, records: bytes, partition: int = 0):
    """(error code, base offset) of one partition's produce."""
    response = client.call(ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                          topic_data=(TopicProduceData(name=topic, partition_data=(
                                              PartitionProduceData(index=partition, records=records),)),)))
    result = response.responses[0].partition_responses[0]
    return result.error_code, result.base_offset



class CuttingProxy:
    """A loopback TCP proxy in front of the broker. It forwards everything, but for the first `cuts`
    produce requests it forwards the request, waits for the broker's answer, and then closes both
    connections instead of relaying it: the broker has written the batch, the client never hears so
    and must retry. (A fault no real network gives on demand; the broker and client are real.)"""

    def __init__(self, port: int, target_port: int, cuts: int) -> None:
        self.port = port
        self.target_port = target_port
        self.cuts_left = cuts
        self.cuts = 0
        self.produce_requests = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            doomed: set[int] = set()  # correlation ids whose answers are never relayed
            threading.Thread(target=self._requests, args=(client, upstream, doomed), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, doomed), daemon=True).start()

    @staticmethod
    def _frames(sock: socket.socket):
        buf = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                size = struct.unpack_from(">i", buf)[0]
                yield buf[: 4 + size]
                buf = buf[4 + size :]

    def _requests(self, client, upstream, doomed: set[int]) -> None:
        for frame in self._frames(client):
            api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == ApiKey.PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                    if self.cuts_left > 0:
                        self.cuts_left -= 1
                        doomed.add(correlation_id)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close(client, upstream)

    def _responses(self, upstream, client, doomed: set[int]) -> None:
        for frame in self._frames(upstream):
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id in doomed:
                with self._lock:
                    self.cuts += 1
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, upstream)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker that advertises a cutting proxy, so every client connection goes through it."""
    port = free_port()
    broker = broker_factory(config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    proxies = []

    def start_proxy(cuts: int) -> CuttingProxy:
        proxies.append(CuttingProxy(port, broker.port, cuts))
        return proxies[-1]

    yield broker, start_proxy
    for proxy in proxies:
        proxy.close()


# -- real clients ------------------------------------------------------------------------------


def test_confluent_retries_after_lost_responses_are_not_duplicated(proxied_broker):
    broker, start_proxy = proxied_broker
    proxy = start_proxy(cuts=3)
    create_topic(broker.address, "retried")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
                         "linger.ms": 20, "retry.backoff.ms": 50})
    failures = []
    for i in range(300):
        producer.produce("retried", value=b"%d" % i, partition=0,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
        if i % 50 == 49:
            producer.flush(TIMEOUT)
    assert producer.flush(TIMEOUT) == 0
    assert failures == []
    assert proxy.cuts == 3  # three produce responses really were lost after the broker wrote them
    assert read_to_end(broker.address, {"retried": 1}) == [b"%d" % i for i in range(300)]


async def test_aiokafka_retries_after_lost_responses_are_not_duplicated(proxied_broker):
    broker, start_proxy = proxied_broker
    proxy = start_proxy(cuts=2)
    create_topic(broker.address, "retried-aio")
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{proxy.port}", enable_idempotence=True,
                                retry_backoff_ms=50, request_timeout_ms=5000)
    await producer.start()
    try:
        for chunk in range(4):
            futures = [await producer.send("retried-aio", b"%d" % (chunk * 25 + i), partition=0) for i in range(25)]
            await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
    finally:
        await producer.stop()
    assert proxy.cuts == 2
    consumer = AIOKafkaConsumer("retried-aio", bootstrap_servers=broker.address, auto_offset_reset="earliest")
    await consumer.start()
    try:
        got = [(await asyncio.wait_for(consumer.getone(), TIMEOUT)).value for _ in range(100)]
        extra = await consumer.getmany(timeout_ms=500)
    finally:
        await consumer.stop()
    assert got == [b"%d" % i for i in range(100)]
    assert not any(extra.values())


# -- exact broker answers ----------------------------------------------------------------------


def test_init_producer_id_without_transactional_id_every_version(broker):
    seen = []
    with WireClient(broker.address) as client:
        for version in range(7):
            response = init_producer_id(client, version)
            assert response.error_code == ErrorCode.none, version
            assert response.producer_epoch == 0
            seen.append(response.producer_id)
    assert seen == sorted(set(seen)) and seen[0] >= 0  # a fresh id every time


def test_duplicate_is_acknowledged_with_its_original_offset(broker):
    create_topic(broker.address, "dups")
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        first = batch(pid, 0, 0, [b"a", b"b", b"c"])
        assert produce(client, "dups", first) == (ErrorCode.none, 0)
        assert produce(client, "dups", batch(pid, 0, 3, [b"d"])) == (ErrorCode.none, 3)
        assert produce(client, "dups", first) == (ErrorCode.none, 0)  # the retry of the first batch
        assert produce(client, "dups", batch(pid, 0, 4, [b"e"])) == (ErrorCode.none, 4)
    assert read_to_end(broker.address, {"dups": 1}) == [b"a", b"b", b"c", b"d", b"e"]


def test_sequence_gap_is_out_of_order(broker):
    create_topic(broker.address, "gaps")
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        assert produce(client, "gaps", batch(pid, 0, 0, [b"a"]))[0] == ErrorCode.none
        assert produce(client, "gaps", batch(pid, 0, 2, [b"lost-one-before"]))[0] == \
            ErrorCode.out_of_order_sequence_number
        assert produce(client, "gaps", batch(pid, 1, 5, [b"new-epoch-not-at-0"]))[0] == \
            ErrorCode.out_of_order_sequence_number
        assert produce(client, "gaps", batch(pid, 0, 1, [b"b"]))[0] == ErrorCode.none
    assert read_to_end(broker.address, {"gaps": 1}) == [b"a", b"b"]


def test_older_epoch_is_refused(broker):
    create_topic(broker.address, "epochs")
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        assert produce(client, "epochs", batch(pid, 0, 0, [b"old"]))[0] == ErrorCode.none
        assert produce(client, "epochs", batch(pid, 1, 0, [b"new"]))[0] == ErrorCode.none
        assert produce(client, "epochs", batch(pid, 0, 1, [b"zombie"]))[0] == ErrorCode.invalid_producer_epoch
    assert read_to_end(broker.address, {"epochs": 1}) == [b"old", b"new"]


def test_unknown_producer_after_its_data_was_deleted(broker):
    create_topic(broker.address, "forgotten")
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        assert produce(client, "forgotten", batch(pid, 0, 0, [b"a", b"b"]))[0] == ErrorCode.none
        deleted = client.call(DeleteRecordsRequest(topics=(DeleteRecordsTopic(name="forgotten", partitions=(
            DeleteRecordsPartition(partition_index=0, offset=-1),)),), timeout=datetime.timedelta(seconds=5)))
        assert deleted.topics[0].partitions[0].low_watermark == 2
        assert produce(client, "forgotten", batch(pid, 0, 2, [b"c"]))[0] == ErrorCode.unknown_producer_id
        assert produce(client, "forgotten", batch(pid, 0, 0, [b"again"])) == (ErrorCode.none, 2)


def test_confluent_carries_on_after_deleted_records_made_it_unknown(broker):
    """librdkafka answers UNKNOWN_PRODUCER_ID (its producer's data deleted) by resetting its
    sequence numbers: every later message arrives, once, and none is reported lost."""
    create_topic(broker.address, "reset")
    failures: list = []
    producer = Producer({"bootstrap.servers": broker.address, "enable.idempotence": True, "linger.ms": 5,
                         "error_cb": failures.append})

    def send(prefix: bytes) -> None:
        for i in range(10):
            producer.produce("reset", prefix + b"%d" % i, partition=0,
                             on_delivery=lambda err, _msg: failures.append(err) if err else None)
        assert producer.flush(TIMEOUT) == 0

    send(b"before-")
    tp, admin = TopicPartition("reset", 0, -1), AdminClient({"bootstrap.servers": broker.address})
    assert admin.delete_records([tp])[tp].result(TIMEOUT).low_watermark == 10
    send(b"after-")
    assert failures == []
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "check", **TO_THE_END})
    consumer.assign([TopicPartition("reset", 0, -2)])  # from the log start offset
    values = []
    while (msg := consumer.poll(TIMEOUT)) is not None and msg.error() is None:
        values.append(msg.value())
    consumer.close()
    assert values == [b"after-%d" % i for i in range(10)]


def test_unknown_producer_after_retention(broker_factory):
    broker = broker_factory(config={"log.retention.check.interval.ms": "200"})
    create_topic(broker.address, "expiring", **{"segment.bytes": "200", "retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000  # an hour old: past retention.ms as soon as its segment rolls
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        assert produce(client, "expiring", batch(pid, 0, 0, [b"x" * 150], old))[0] == ErrorCode.none
        other = init_producer_id(client).producer_id
        assert produce(client, "expiring", batch(other, 0, 0, [b"y" * 150]))[0] == ErrorCode.none  # rolls
        deadline = time.monotonic() + TIMEOUT
        while list(Path(broker.data_dir, "expiring-0").glob("00000000000000000000.log")):
            assert time.monotonic() < deadline, "retention never deleted the old segment"
            time.sleep(0.1)
        assert produce(client, "expiring", batch(pid, 0, 1, [b"z"]))[0] == ErrorCode.unknown_producer_id
        assert produce(client, "expiring", batch(other, 0, 1, [b"w"]))[0] == ErrorCode.none  # still known


# -- producer state across restarts ------------------------------------------------------------


@pytest.mark.parametrize("stop", ["kill", "clean"])
def test_dedupe_survives_a_restart(broker, stop):
    """After a crash the state comes from the newest snapshot (written at each segment roll) plus the
    log after it; after a clean shutdown from the snapshot written at the log end."""
    create_topic(broker.address, "durable", **{"segment.bytes": "400"})
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        batches = [batch(pid, 0, i * 2, [b"%d-a" % i * 10, b"%d-b" % i * 10]) for i in range(12)]
        for i, b in enumerate(batches):
            assert produce(client, "durable", b) == (ErrorCode.none, i * 2)
    partition_dir = Path(broker.data_dir, "durable-0")
    assert len(list(partition_dir.glob("*.snapshot"))) >= 2  # one per roll
    if stop == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
        snapshot = (partition_dir / "00000000000000000024.snapshot").read_bytes()  # at the log end
        version, crc, count = struct.unpack_from(">hIi", snapshot)  # Kafka's producer snapshot, version 1
        assert (version, count, crc) == (1, 1, crc32c(snapshot[6:]))
        assert struct.unpack_from(">qhiqiqiq", snapshot, 10)[:5] == (pid, 0, 23, 23, 1)  # last batch: seq 22-23
    with WireClient(broker.address) as client:
        assert produce(client, "durable", batches[-1]) == (ErrorCode.none, 22)  # known duplicate
        assert produce(client, "durable", batch(pid, 0, 30, [b"gap"]))[0] == ErrorCode.out_of_order_sequence_number
        assert produce(client, "durable", batch(pid, 0, 24, [b"next"])) == (ErrorCode.none, 24)
    assert len(read_to_end(broker.address, {"durable": 1})) == 25


def test_lost_snapshots_are_rebuilt_from_the_log(broker):
    create_topic(broker.address, "nosnap", **{"segment.bytes": "400"})
    with WireClient(broker.address) as client:
        pid = init_producer_id(client).producer_id
        for i in range(6):
            assert produce(client, "nosnap", batch(pid, 0, i, [b"v" * 100])) == (ErrorCode.none, i)
    broker.kill()
    for snapshot in Path(broker.data_dir, "nosnap-0").glob("*.snapshot"):
        snapshot.write_bytes(b"\x00\x01garbage")  # corrupt: CRC and length fail
    broker.start()
    with WireClient(broker.address) as client:
        assert produce(client, "nosnap", batch(pid, 0, 5, [b"v" * 100])) == (ErrorCode.none, 5)
        assert produce(client, "nosnap", batch(pid, 0, 6, [b"w"])) == (ErrorCode.none, 6)
