"""Record real clients' request frames through a proxy, for the fuzzer's corpus.

A broker advertises the proxy's address, so every connection the clients open (bootstrap, the
partition leader, the group and transaction coordinators) passes through it; the proxy keeps each
request frame the clients send. The sessions cover what clients do most: admin operations,
idempotent produce in every compression, group consumption with commits, and transactions that
commit (with offsets) and abort, from confluent-kafka (librdkafka) and aiokafka.

    python -m testkit.fuzz.record [--out testkit/fuzz/corpus.bin]
"""

from __future__ import annotations

import asyncio
import collections
import struct
import tempfile
import threading
import time
from pathlib import Path

import click

from ..brokerproc import BrokerProcess, free_port

CORPUS = Path(__file__).with_name("corpus.bin")
PER_API_KEY = 40  # distinct frames kept per api key: enough variety without thousands of fetches


def load(path: Path = CORPUS) -> list[bytes]:
    """Each frame of a corpus file, size prefix included."""
    data, frames, position = path.read_bytes(), [], 0
    while position < len(data):
        (size,) = struct.unpack_from(">i", data, position)
        frames.append(data[position:position + 4 + size])
        position += 4 + size
    return frames


def save(frames: list[bytes], path: Path = CORPUS) -> None:
    path.write_bytes(b"".join(frames))


def distinct(frames: list[bytes]) -> list[bytes]:
    """Frames that differ in more than their correlation id, at most PER_API_KEY per api key."""
    kept: dict[int, list[bytes]] = collections.defaultdict(list)
    seen: set[bytes] = set()
    for frame in frames:
        key = frame[4:8] + frame[12:]  # api key, version, and what follows the correlation id
        api_key = struct.unpack_from(">h", frame, 4)[0]
        if key not in seen and len(kept[api_key]) < PER_API_KEY:
            seen.add(key)
            kept[api_key].append(frame)
    return [frame for api_key in sorted(kept) for frame in kept[api_key]]


class RecordingProxy:
    """Forwards loopback connections to `upstream`, keeping every whole request frame clients send."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port, self.upstream_port = port, upstream_port
        self.frames: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RecordingProxy":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _close(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.call_soon(self._loop.stop)

    async def _serve(self, client_reader, client_writer) -> None:
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            await asyncio.gather(self._requests(client_reader, broker_writer),
                                 self._pipe(broker_reader, client_writer), return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the proxy is closing

    async def _requests(self, reader, writer) -> None:
        try:
            while head := await reader.readexactly(4):
                (size,) = struct.unpack(">i", head)
                frame = head + await reader.readexactly(size)
                self.frames.append(frame)
                writer.write(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _pipe(reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


def confluent_session(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("fz-orders", 3, 1, config={"cleanup.policy": "compact"}),
                                       NewTopic("fz-events", 1, 1)]).values():
        future.result(30)
    admin.list_topics(timeout=10)
    resource = ConfigResource("topic", "fz-events",
                              incremental_configs=[ConfigEntry("retention.ms", "3600000",
                                                               incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    for future in admin.describe_configs([ConfigResource("topic", "fz-events")]).values():
        future.result(30)
    for future in admin.create_partitions([NewPartitions("fz-events", 2)]).values():
        future.result(30)

    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": codec,
                             "linger.ms": 5})
        for i in range(50):
            producer.produce("fz-orders", key=f"k{i % 7}".encode(), value=f"{codec}-{i}".encode() * 3,
                             headers={"h": b"v"})
        producer.flush(30)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fz-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["fz-orders"])
    got, deadline = 0, time.monotonic() + 30
    while got < 250 and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(100, 0.5) if not m.error())
    consumer.commit(asynchronous=False)

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fz-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("fz-events", b"in a committed transaction")
    txn.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata())
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce("fz-events", b"in an aborted transaction")
    txn.abort_transaction(30)
    consumer.close()

    admin.list_consumer_groups().result(30)
    for future in admin.describe_consumer_groups(["fz-group"]).values():
        future.result(30)
    for future in admin.delete_records([TopicPartition("fz-events", 0, 1)]).values():
        future.result(30)
    for future in admin.delete_consumer_groups(["fz-group"]).values():
        future.result(30)
    for future in admin.delete_topics(["fz-events"]).values():
        future.result(30)


async def aiokafka_session(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("fz-aio", 2, 1)])
    await admin.describe_topics(["fz-aio"])
    await admin.describe_cluster()
    async with AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                compression_type="gzip") as producer:
        for i in range(40):
            await producer.send_and_wait("fz-aio", f"aio-{i}".encode(), key=f"k{i % 3}".encode())
    consumer = AIOKafkaConsumer("fz-aio", bootstrap_servers=bootstrap, group_id="fz-aio-group",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    got, deadline = 0, time.monotonic() + 30
    while got < 40 and time.monotonic() < deadline:
        got += sum(len(batch) for batch in (await consumer.getmany(timeout_ms=500)).values())
    await consumer.commit()
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="fz-aio-txn")
    await txn.start()
    async with txn.transaction():
        await txn.send("fz-aio", b"aio transactional")
        await txn.send_offsets_to_transaction({TopicPartition("fz-aio", 0): 1}, "fz-aio-group")
    await txn.stop()
    await consumer.stop()
    await admin.list_consumer_groups()
    await admin.describe_consumer_groups(["fz-aio-group"])
    await admin.delete_topics(["fz-aio"])
    await admin.close()


def record() -> list[bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        proxy_port = free_port()
        broker = BrokerProcess(Path(tmp) / "broker", config={
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}", "group.initial.rebalance.delay.ms": "0"})
        broker.start()
        try:
            with RecordingProxy(proxy_port, broker.port) as proxy:
                bootstrap = f"127.0.0.1:{proxy_port}"
                confluent_session(bootstrap)
                asyncio.run(aiokafka_session(bootstrap))
                return distinct(proxy.frames)
        finally:
            broker.stop()


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=CORPUS, show_default=True)
def main(out: Path) -> None:
    """Record real clients' requests into the fuzzer's corpus."""
    frames = record()
    save(frames, out)
    keys = collections.Counter(struct.unpack_from(">h", f, 4)[0] for f in frames)
    click.echo(f"{len(frames)} frames, {sum(map(len, frames)):,} bytes, api keys {dict(sorted(keys.items()))} → {out}")


if __name__ == "__main__":
    main()
