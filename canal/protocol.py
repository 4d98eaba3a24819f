"""Canal's client protocol, server side, without I/O: bytes in (`receive_data`), events out (`next_event`),
bytes out (`handshake`, `ack`, `error`, `messages`).

Framing: every packet is a 4-byte big-endian length and a serialized `Packet` (cdc/formats/proto/CanalProtocol.proto)
whose `body` is the request. The server speaks first (HANDSHAKE with 8 random seeds); the first packet the
client sends must be CLIENTAUTHENTICATION, answered by an ACK (error code 0) or an error ACK, after which the
session takes SUBSCRIPTION, UNSUBSCRIPTION, GET, CLIENTACK, CLIENTROLLBACK and HEARTBEAT. Requests are
answered in order; CLIENTACK, CLIENTROLLBACK and HEARTBEAT are not answered (a failed ack's error ACK is the
next packet the client reads, as Canal's server does).

Errors: `ProtocolError` is the client's fault (a frame too large, a packet that does not parse, a request before
authentication): the connection is closed after the error ACK `error_packet` returns.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from cdc.formats.canal_entry import messages_packet
from cdc.formats.proto import CanalProtocol_pb2 as pb

HEADER = struct.Struct(">I")
MAX_PACKET = 16 << 20          # requests are small; a larger frame is garbage, not a request
VERSION = 1
NEED_DATA = object()
# Get.unit: java.util.concurrent.TimeUnit's ordinal -> seconds
_UNITS = {0: 1e-9, 1: 1e-6, 2: 1e-3, 3: 1.0, 4: 60.0, 5: 3600.0, 6: 86400.0}


class ProtocolError(Exception):
    """The client broke the protocol; `code` is Canal's error code for it."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Auth:
    username: str
    password: str            # hex of the scramble (Canal's Java client), or what the client sent
    destination: str
    client_id: str
    filter: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    destination: str
    client_id: str
    filter: str


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    destination: str
    client_id: str


@dataclass(frozen=True, slots=True)
class Get:
    destination: str
    client_id: str
    fetch_size: int
    timeout_s: float | None
    """None: answer at once with what is there (Canal's timeout -1); 0: wait until fetch_size entries are there;
    otherwise wait at most this long for them."""


@dataclass(frozen=True, slots=True)
class ClientAck:
    destination: str
    client_id: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class Rollback:
    destination: str
    client_id: str
    batch_id: int            # 0: every un-acked batch


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


def _packet(packet_type: int, body: bytes) -> bytes:
    data = pb.Packet(type=packet_type, version=VERSION, body=body).SerializeToString()
    return HEADER.pack(len(data)) + data


def error_packet(code: int, message: str) -> bytes:
    return _packet(pb.ACK, pb.Ack(error_code=code, error_message=message).SerializeToString())


def _get(body: pb.Get) -> Get:
    timeout = body.timeout          # (absent: proto3's 0, a blocking get, as Canal's server reads it)
    if timeout == -1:
        seconds = None
    elif timeout <= 0:
        seconds = 0.0
    else:
        unit = _UNITS.get(body.unit)
        if unit is None:
            raise ProtocolError(f"Get.unit {body.unit} is not a TimeUnit (0 ns ... 6 days)")
        seconds = timeout * unit
    return Get(body.destination, body.client_id, body.fetch_size, seconds)


_REQUESTS = {
    pb.SUBSCRIPTION: (pb.Sub, lambda b: Subscribe(b.destination, b.client_id, b.filter)),
    pb.UNSUBSCRIPTION: (pb.Unsub, lambda b: Unsubscribe(b.destination, b.client_id)),
    pb.GET: (pb.Get, _get),
    pb.CLIENTACK: (pb.ClientAck, lambda b: ClientAck(b.destination, b.client_id, b.batch_id)),
    pb.CLIENTROLLBACK: (pb.ClientRollback, lambda b: Rollback(b.destination, b.client_id, b.batch_id)),
    pb.HEARTBEAT: (pb.HeartBeat, lambda b: Heartbeat()),
}


class ServerConnection:
    """One client connection's protocol state. Not thread-safe; one owner."""

    def __init__(self, seeds: bytes) -> None:
        self.seeds = seeds
        self.authenticated = False
        self._buffer = bytearray()

    def handshake(self) -> bytes:
        """The server's first packet."""
        return _packet(pb.HANDSHAKE, pb.Handshake(seeds=self.seeds, supported_compressions=pb.NONE)
                       .SerializeToString())

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_event(self):
        """The next request, or NEED_DATA; raises ProtocolError."""
        buffer = self._buffer
        if len(buffer) < HEADER.size:
            return NEED_DATA
        (size,) = HEADER.unpack_from(buffer)
        if size > MAX_PACKET:
            raise ProtocolError(f"a packet of {size} bytes: more than {MAX_PACKET}, not a Canal request")
        if len(buffer) < HEADER.size + size:
            return NEED_DATA
        frame = bytes(buffer[HEADER.size:HEADER.size + size])
        del buffer[:HEADER.size + size]
        try:
            packet = pb.Packet.FromString(frame)
            if not self.authenticated:
                if packet.type != pb.CLIENTAUTHENTICATION:
                    raise ProtocolError(f"expected CLIENTAUTHENTICATION first, got packet type {packet.type}")
                body = pb.ClientAuth.FromString(packet.body)
                return Auth(body.username, body.password.decode("utf-8", "replace"), body.destination,
                            body.client_id, body.filter)
            request = _REQUESTS.get(packet.type)
            if request is None:
                name = pb.PacketType.Name(packet.type) if packet.type in pb.PacketType.values() else packet.type
                raise ProtocolError(f"packet type={name} is NOT supported!")
            message, event = request
            return event(message.FromString(packet.body))
        except DecodeError as exc:
            raise ProtocolError(f"a packet that is not Canal's protobuf: {exc}") from None

    def accepted(self) -> bytes:
        """The ACK to a good ClientAuth; the session takes requests from now on."""
        self.authenticated = True
        return self.ack()

    @staticmethod
    def ack() -> bytes:
        return _packet(pb.ACK, pb.Ack().SerializeToString())

    @staticmethod
    def error(code: int, message: str) -> bytes:
        return error_packet(code, message)

    @staticmethod
    def messages(batch_id: int, entries: list[bytes]) -> bytes:
        """A MESSAGES packet: the batch id and each entry's bytes as they are in the log."""
        data = messages_packet(batch_id, entries)
        return HEADER.pack(len(data)) + data
