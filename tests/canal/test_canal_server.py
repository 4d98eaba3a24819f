"""Canal's TCP server (canal/server.py) over a real broker, driven by a raw protocol client: what a client blocked
in a `get` sees when the destination's entry log cannot be read."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition
from crc32c import crc32c
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from wire import WireClient

from canal.proto import CanalProtocol_pb2 as pb
from canal.server import CanalServer, DestinationLog, entries_topic
from logcore.storage.batch import CRC_START
from logcore.storage.records import encode_batch

GZIP = 1
ANSWER_S = 30           # a get's answer comes within this, or never


class RawClient:
    """Canal's client protocol, one packet at a time, as Canal's Java client speaks it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        client = cls(*await asyncio.open_connection("127.0.0.1", port))
        assert (await client.read()).type == pb.HANDSHAKE
        return client

    def send(self, packet_type: int, body) -> None:
        data = pb.Packet(type=packet_type, body=body.SerializeToString()).SerializeToString()
        self.writer.write(struct.pack(">I", len(data)) + data)

    async def read(self) -> pb.Packet:
        (size,) = struct.unpack(">I", await self.reader.readexactly(4))
        return pb.Packet.FromString(await self.reader.readexactly(size))

    async def call(self, packet_type: int, body) -> pb.Packet:
        self.send(packet_type, body)
        return await asyncio.wait_for(self.read(), ANSWER_S)

    async def get(self, fetch_size: int) -> pb.Packet:
        """A get without a timeout: Canal's blocking get, answered once `fetch_size` entries are there."""
        return await self.call(pb.GET, pb.Get(destination="example", client_id="1001", fetch_size=fetch_size))

    def close(self) -> None:
        self.writer.close()


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


async def test_a_failed_reader_answers_a_blocked_get_and_the_next_subscribe_reads_again(broker):
    topic = entries_topic("example")
    server = CanalServer("127.0.0.1", 0, {"example": DestinationLog("example", topic, broker.address)})
    await server.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker.address)
    await producer.start()
    client = None
    try:
        await producer.send_and_wait(topic, b"entry-a", key=b"db.t", partition=0)
        client = await RawClient.connect(server.port)
        assert ack_of(await client.call(pb.CLIENTAUTHENTICATION, pb.ClientAuth(
            username="canal", destination="example", client_id="1001"))).error_code == 0
        first = pb.Messages.FromString((await client.get(1)).body)
        assert list(first.messages) == [b"entry-a"]
        client.send(pb.CLIENTACK, pb.ClientAck(destination="example", client_id="1001", batch_id=first.batch_id))

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

        # The operator removes the corrupt batch (delete-records); the client subscribes again, as Canal's clients
        # do on an error, and reads on from its last ack: the reader starts again.
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(good)})
        finally:
            await admin.close()
        assert ack_of(await client.call(pb.SUBSCRIPTION, pb.Sub(destination="example", client_id="1001"))) \
            .error_code == 0
        again = await client.get(1)
        assert again.type == pb.MESSAGES, ack_of(again).error_message
        assert list(pb.Messages.FromString(again.body).messages) == [b"entry-b"]
    finally:
        if client is not None:
            client.close()
        await producer.stop()
        await server.stop()
