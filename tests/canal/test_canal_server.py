"""Canal's TCP server (canal/server.py) over a real broker, driven by a raw protocol client: what a client blocked
in a `get` sees when the destination's entry log cannot be read, and when the reply after an ack comes."""

from __future__ import annotations

import asyncio
import datetime
import select
import socket
import struct
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition
from crc32c import crc32c
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from wire import WireClient

from canal.server import CanalServer, DestinationLog, entries_topic
from cdc.formats.proto import CanalProtocol_pb2 as pb
from logcore.storage.batch import CRC_START
from logcore.storage.records import encode_batch

GZIP = 1
ANSWER_S = 30           # a get's answer comes within this, or never


class RawClient:
    """Canal's client protocol on a plain socket, one packet at a time, as Canal's Java client speaks it. Its reads
    block: the tests run them in a thread, the server runs in the test's event loop."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S)
        assert self.read_packet().type == pb.HANDSHAKE

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        return await asyncio.to_thread(cls, port)

    def send(self, *packets: tuple[int, object]) -> None:
        """Packets in one write, as a client that acks and gets back to back."""
        wire = b""
        for packet_type, body in packets:
            data = pb.Packet(type=packet_type, body=body.SerializeToString()).SerializeToString()
            wire += struct.pack(">I", len(data)) + data
        self.sock.sendall(wire)

    def read_packet(self) -> pb.Packet:
        """The next packet; TimeoutError when none comes within ANSWER_S."""
        (size,) = struct.unpack(">I", self._read_exactly(4))
        return pb.Packet.FromString(self._read_exactly(size))

    def _read_exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data

    def answered(self) -> bool:
        """Whether a reply waits to be read."""
        return bool(select.select([self.sock], [], [], 0)[0])

    async def read(self) -> pb.Packet:
        return await asyncio.to_thread(self.read_packet)

    async def call(self, packet_type: int, body) -> pb.Packet:
        self.send((packet_type, body))
        return await self.read()

    async def get(self, fetch_size: int) -> pb.Packet:
        """A get without a timeout: Canal's blocking get, answered once `fetch_size` entries are there."""
        return await self.call(pb.GET, get(fetch_size))

    def close(self) -> None:
        self.sock.close()


def get(fetch_size: int) -> pb.Get:
    return pb.Get(destination="example", client_id="1001", fetch_size=fetch_size)


def ack(batch_id: int) -> pb.ClientAck:
    return pb.ClientAck(destination="example", client_id="1001", batch_id=batch_id)


def ack_of(packet: pb.Packet) -> pb.Ack:
    assert packet.type == pb.ACK, pb.PacketType.Name(packet.type)
    return pb.Ack.FromString(packet.body)


def corrupt_batch() -> bytes:
    """A record batch whose own CRC is right but whose gzip payload fails gzip's check: a log a disk or a buggy
    producer corrupted. A consumer's decompression raises OSError (not a Kafka error) on it."""
    batch = bytearray(encode_batch([(b"db.t", b"entry-x")], int(time.time() * 1000), attributes=GZIP))
    batch[-5] ^= 0xFF                                            # in the gzip trailer's CRC32 of the records
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def produce_raw(address: str, topic: str, records: bytes) -> int:
    with WireClient(address) as client:
        response = client.call(ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),)))
    result = response.responses[0].partition_responses[0]
    assert result.error_code == 0, result
    return result.base_offset


@pytest.fixture
async def served(broker):
    """A Canal server for destination `example` over its entry log, and a producer that writes entries there."""
    topic = entries_topic("example")
    server = CanalServer("127.0.0.1", 0, {"example": DestinationLog("example", topic, broker.address)})
    await server.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker.address)
    await producer.start()
    try:
        yield server, producer, topic
    finally:
        await producer.stop()
        await server.stop()


@pytest.fixture
async def client(served):
    """A client authenticated and subscribed as client 1001 of `example`."""
    server, _, _ = served
    client = await RawClient.connect(server.port)
    try:
        assert ack_of(await client.call(pb.CLIENTAUTHENTICATION, pb.ClientAuth(
            username="canal", destination="example", client_id="1001"))).error_code == 0
        yield client
    finally:
        client.close()


async def test_a_failed_reader_answers_a_blocked_get_and_the_next_subscribe_reads_again(broker, served, client):
    _, producer, topic = served
    await producer.send_and_wait(topic, b"entry-a", key=b"db.t", partition=0)
    first = pb.Messages.FromString((await client.get(1)).body)
    assert list(first.messages) == [b"entry-a"]
    client.send((pb.CLIENTACK, ack(first.batch_id)))

    blocked = asyncio.ensure_future(client.get(5))            # waits for 5 entries; the log has no more yet
    corrupt = await asyncio.to_thread(produce_raw, broker.address, topic, corrupt_batch())
    good = (await producer.send_and_wait(topic, b"entry-b", key=b"db.t", partition=0)).offset
    try:
        answer = await blocked
    except TimeoutError:
        raise AssertionError(f"the get was never answered after the entry log's reader failed at offset "
                             f"{corrupt}") from None
    error = ack_of(answer)
    assert error.error_code == 400
    message = error.error_message
    assert f"reading {topic} from offset {corrupt} failed" in message, message
    assert "CRC check failed" in message and "subscribe again" in message, message

    # The operator removes the corrupt batch (delete-records); the client subscribes again, as Canal's clients do on
    # an error, and reads on from its last ack: the reader starts again.
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(good)})
    finally:
        await admin.close()
    assert ack_of(await client.call(pb.SUBSCRIPTION, pb.Sub(destination="example", client_id="1001"))).error_code == 0
    again = await client.get(1)
    assert again.type == pb.MESSAGES, ack_of(again).error_message
    assert list(pb.Messages.FromString(again.body).messages) == [b"entry-b"]


async def test_the_reply_after_an_ack_waits_until_the_ack_is_stored(broker, served, client):
    """Canal's client sends an ack (never answered) and its next get back to back. The server stores the ack while
    it takes the next batch, and answers only once the ack is stored: a server killed after the client saw that
    answer never gives the acked batch again. The commit is held back here (an injected wait: the one way to see
    the order), so a reply that did not wait would be there to read before it is released."""
    server, producer, topic = served
    for value in (b"entry-1", b"entry-2", b"entry-3"):
        await producer.send_and_wait(topic, value, key=b"db.t", partition=0)
    first, second = [pb.Messages.FromString((await client.get(1)).body) for _ in range(2)]
    reader = server._readers["example", "1001"]
    release, commits = asyncio.Event(), []
    commit = reader.consumer.commit

    async def held_commit(offsets):
        commits.append(offsets)
        await release.wait()
        await commit(offsets)
    reader.consumer.commit = held_commit

    client.send((pb.CLIENTACK, ack(first.batch_id)), (pb.CLIENTACK, ack(second.batch_id)), (pb.GET, get(1)))
    batches = reader.stream.batches
    await wait_until(lambda: commits and batches and batches[0].id not in (first.batch_id, second.batch_id),
                     "the acks' commit begun and the get's batch taken")
    assert not client.answered(), "the get was answered before the acks were stored"
    release.set()
    third = pb.Messages.FromString((await client.read()).body)
    assert list(third.messages) == [b"entry-3"]
    assert len(commits) <= 2 and reader.stream.acked == 2
    check = AIOKafkaConsumer(bootstrap_servers=broker.address, group_id="binlake-canal-example-1001",
                             enable_auto_commit=False)
    await check.start()
    try:
        assert await check.committed(TopicPartition(topic, 0)) == 2
    finally:
        await check.stop()


async def wait_until(condition, what: str, timeout: float = ANSWER_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
