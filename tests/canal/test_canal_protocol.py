"""Canal's client protocol without I/O (canal/protocol.py), its password scramble (canal/auth.py) and its
delivery semantics (canal/batches.py): framing fed a byte at a time, Canal's error codes and messages."""

from __future__ import annotations

import struct

import pytest

from canal import auth
from canal.batches import BatchError, LogEntry, Stream, table_filter
from cdc.formats.proto import CanalProtocol_pb2 as pb
from canal.protocol import NEED_DATA, Auth, ClientAck, Get, ProtocolError, Rollback, ServerConnection, Subscribe

SEEDS = bytes(range(1, 9))


def frame(packet_type: int, body) -> bytes:
    data = pb.Packet(type=packet_type, body=body.SerializeToString()).SerializeToString()
    return struct.pack(">I", len(data)) + data


def read(wire: bytes) -> pb.Packet:
    (size,) = struct.unpack_from(">I", wire)
    assert len(wire) == 4 + size
    return pb.Packet.FromString(wire[4:])


def authenticated() -> ServerConnection:
    conn = ServerConnection(SEEDS)
    conn.receive_data(frame(pb.CLIENTAUTHENTICATION, pb.ClientAuth(username="u")))
    assert isinstance(conn.next_event(), Auth)
    conn.accepted()
    return conn


def test_scramble_as_canals_java_client_computes_it():
    # the values a JVM gives for SecurityUtil's algorithm, password 123456, seeds 1..8
    assert auth.stored_password("123456") == "6bb4837eb74329105ee4568dda7dc67ed2ca2ad9"
    assert auth.scramble("123456", SEEDS) == "90e636eb4878fb59e80b3ee6412a784df5aae30d"
    stored = auth.stored_password("123456")
    assert auth.check("canal", stored, "canal", auth.scramble("123456", SEEDS), SEEDS)
    assert auth.check("canal", stored.upper(), "canal", auth.scramble("123456", SEEDS), SEEDS)
    assert not auth.check("canal", stored, "canal", auth.scramble("12345", SEEDS), SEEDS)
    assert not auth.check("canal", stored, "other", auth.scramble("123456", SEEDS), SEEDS)
    assert not auth.check("", stored, "u", "", SEEDS)
    assert auth.check("", "", "anyone", "anything", SEEDS)


def test_handshake_and_auth_split_at_every_byte():
    conn = ServerConnection(SEEDS)
    handshake = read(conn.handshake())
    assert (handshake.type, handshake.version) == (pb.HANDSHAKE, 1)
    assert pb.Handshake.FromString(handshake.body).seeds == SEEDS
    wire = frame(pb.CLIENTAUTHENTICATION, pb.ClientAuth(username="canal", password=b"ab12", destination="example",
                                                         client_id="1001", filter="shop\\..*"))
    for b in wire[:-1]:
        conn.receive_data(bytes([b]))
        assert conn.next_event() is NEED_DATA
    conn.receive_data(wire[-1:])
    assert conn.next_event() == Auth("canal", "ab12", "example", "1001", "shop\\..*")
    ack = read(conn.accepted())
    assert ack.type == pb.ACK and pb.Ack.FromString(ack.body).error_code == 0


def test_requests_after_auth():
    conn = authenticated()
    conn.receive_data(frame(pb.SUBSCRIPTION, pb.Sub(destination="example", client_id="1001", filter=".*\\..*"))
                      + frame(pb.GET, pb.Get(destination="example", client_id="1001", fetch_size=100, timeout=-1, unit=2))
                      + frame(pb.GET, pb.Get(destination="example", client_id="1001", fetch_size=5, timeout=3, unit=3))
                      + frame(pb.GET, pb.Get(destination="example", client_id="1001", fetch_size=5))
                      + frame(pb.CLIENTACK, pb.ClientAck(destination="example", client_id="1001", batch_id=7))
                      + frame(pb.CLIENTROLLBACK, pb.ClientRollback(destination="example", client_id="1001")))
    assert conn.next_event() == Subscribe("example", "1001", ".*\\..*")
    assert conn.next_event() == Get("example", "1001", 100, None)      # timeout -1: at once
    assert conn.next_event() == Get("example", "1001", 5, 3.0)          # 3 SECONDS
    assert conn.next_event() == Get("example", "1001", 5, 0.0)          # no timeout: wait for 5 (Canal's)
    assert conn.next_event() == ClientAck("example", "1001", 7)
    assert conn.next_event() == Rollback("example", "1001", 0)
    assert conn.next_event() is NEED_DATA


def test_protocol_errors_are_the_clients():
    conn = ServerConnection(SEEDS)
    conn.receive_data(frame(pb.GET, pb.Get(destination="example")))
    with pytest.raises(ProtocolError, match="expected CLIENTAUTHENTICATION first"):
        conn.next_event()
    conn = authenticated()
    conn.receive_data(frame(pb.DUMP, pb.Dump()))
    with pytest.raises(ProtocolError, match="packet type=DUMP is NOT supported!"):
        conn.next_event()
    conn = authenticated()
    conn.receive_data(struct.pack(">I", 1 << 30))
    with pytest.raises(ProtocolError, match="more than"):
        conn.next_event()
    error = read(ServerConnection.error(402, "batchId should assign value"))
    assert pb.Ack.FromString(error.body).error_code == 402


def test_messages_carry_entries_as_they_are():
    packet = read(ServerConnection.messages(42, [b"\x0a\x00", b"entry-2"]))
    assert packet.type == pb.MESSAGES and packet.version == 1
    messages = pb.Messages.FromString(packet.body)
    assert (messages.batch_id, list(messages.messages)) == (42, [b"\x0a\x00", b"entry-2"])


@pytest.mark.parametrize("batch_id", [-1, 1, 127, 128, 300, (1 << 62) + 5])
@pytest.mark.parametrize("sizes", [[], [0], [1, 127, 128, 16383, 16384, 3 << 20]])
def test_messages_are_the_bytes_protobuf_writes(batch_id, sizes):
    entries = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
    body = pb.Messages(batch_id=batch_id, messages=entries).SerializeToString()
    data = pb.Packet(type=pb.MESSAGES, version=1, body=body).SerializeToString()
    assert ServerConnection.messages(batch_id, entries) == struct.pack(">I", len(data)) + data


def entries(*keys: str | None, start: int = 10) -> list[LogEntry]:
    return [LogEntry(start + 2 * i, None if k is None else k.encode(), f"e{start + 2 * i}".encode())
            for i, k in enumerate(keys)]


def stream(acked: int = 10, capacity: int = 100) -> Stream:
    ids = iter(range(1, 1000))
    return Stream("1001", acked, capacity, lambda: next(ids))


def test_batches_ack_in_order_and_rollback_redelivers():
    s = stream()
    s.append(entries(None, "shop.a", "shop.a", None, None, "shop.b", None))     # offsets 10, 12, ... 22
    everything = table_filter("")
    first, values = s.take(3, everything)
    assert (first.id, first.start, first.end, values) == (1, 10, 15, [b"e10", b"e12", b"e14"])
    second, values = s.take(3, everything)
    assert (second.start, second.end, values) == (16, 21, [b"e16", b"e18", b"e20"])
    with pytest.raises(BatchError, match="batchId:2 is not the firstly:1"):
        s.ack(2)
    assert s.ack(1) == 15 and s.acked == 15
    with pytest.raises(BatchError, match=r"ack error , clientId:1001 batchId:1 is not exist , please check"):
        s.ack(1)
    s.rollback(0)                                    # batch 2 comes again, in order, under a new id
    again, values = s.take(10, everything)
    assert (again.id, again.start, values) == (3, 16, [b"e16", b"e18", b"e20", b"e22"])
    with pytest.raises(BatchError, match="rollback error, clientId:1001 batchId:2 is not exist"):
        s.rollback(2)
    assert s.take(10, everything) is None            # nothing more
    assert s.ack(3) == 23 and len(s.entries) == 0 and s.room == 100


def test_filter_and_memsize():
    s = stream()
    s.append(entries(None, "shop.a", "Other.T", None, "shop.b"))
    only_shop = table_filter("shop\\..*", transaction_entries=False)
    batch, values = s.take(10, only_shop)
    assert values == [b"e12", b"e18"] and (batch.start, batch.end) == (10, 19)   # covers what the filter dropped
    assert table_filter("other\\.t")(b"Other.T") and table_filter("a\\.b,c\\..*")(b"c.x")
    s = stream()
    s.append(entries(*["x.y"] * 5))
    batch, values = s.take(100, table_filter(""), max_bytes=6)       # 3 bytes each: taken while <= 6 bytes
    assert len(values) == 3


def test_ddl_isolation_puts_a_ddl_in_a_batch_of_its_own():
    s = stream()
    s.append([*entries(None, "shop.a", None), LogEntry(16, b"shop.a", b"ddl16", ddl=True),
              LogEntry(18, b"shop.a", b"ddl18", ddl=True), *entries(None, "shop.a", None, start=20)])
    everything = table_filter("")
    assert s.take(100, everything)[1] == [b"e10", b"e12", b"e14"]       # up to the DDL
    assert s.take(100, everything)[1] == [b"ddl16"]                     # the DDL alone
    assert s.take(100, everything)[1] == [b"ddl18"]
    batch, values = s.take(100, everything)
    assert values == [b"e20", b"e22", b"e24"] and (batch.start, batch.end) == (20, 25)
    s = stream()
    s.append([LogEntry(10, b"other.t", b"ddl10", ddl=True), *entries("shop.a", start=12)])
    assert s.take(100, table_filter("shop\\..*"))[1] == [b"e12"]      # a DDL the client's filter drops cuts nothing
