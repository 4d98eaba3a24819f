"""Sans-IO client side of one Kafka connection, the mirror of connection.py: kio request entities
in, request frames out (each with the connection's next correlation id); response bytes in,
response events out, each read as the API and version of the request it answers. It never touches
a socket: the broker's peer connections (replication/peer.py) drive it from asyncio, the admin
tools (tools/wire_admin.py) from a blocking socket.

Kafka answers a connection's requests in the order they came, so responses must come back in the
order requests went out. Errors say whose fault they are: a response out of order, to no request,
or that does not read as its request's response is a `RemoteProtocolError` (close the connection).
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass
from typing import Any

from . import codec
from .codec import ApiKey
from .framing import NEED_DATA, Frames, RemoteProtocolError, _NeedData

__all__ = ["NEED_DATA", "ClientConnection", "RemoteProtocolError", "Response", "newest_known_version"]

NO_LIMIT = 2**31 - 1  # Kafka's clients take a response of any size


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: int
    api_key: int
    api_version: int
    body: Any  # the kio response entity


class ClientConnection:
    """One per connection, used from one event loop or thread."""

    def __init__(self, client_id: str | None, max_frame_size: int = NO_LIMIT) -> None:
        self.client_id = client_id
        self._frames = Frames(max_frame_size, 4, "the client's largest response")  # 4: the correlation id
        self._in_flight: collections.deque[tuple[int, int, int]] = collections.deque()
        self._correlation_id = 0

    def send(self, request: Any) -> bytes:
        """The frame of kio request entity `request`, to be written as it is."""
        self._correlation_id = self._correlation_id % NO_LIMIT + 1
        self._in_flight.append((self._correlation_id, request.__api_key__, request.__version__))
        return codec.encode_request(request, self._correlation_id, self.client_id)

    def send_data(self, api_key: int, version: int, data: dict) -> bytes:
        """The frame of a request given as neutral data (codec.build's rules)."""
        return self.send(codec.build(codec.request_class(api_key, version), data))

    def receive_data(self, data: bytes) -> None:
        """Bytes as they arrive; b"" once the peer closed."""
        self._frames.receive_data(data)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def next_event(self) -> Response | _NeedData | None:
        """The next whole response, NEED_DATA, or None once the peer closed and nothing is left."""
        frame = self._frames.next_frame()
        if frame is NEED_DATA or frame is None:
            return frame
        (correlation_id,) = struct.unpack_from(">i", frame)
        if not self._in_flight:
            raise RemoteProtocolError(f"a response (correlation id {correlation_id}) to no request")
        expected, api_key, version = self._in_flight.popleft()
        if correlation_id != expected:
            raise RemoteProtocolError(f"answered request {correlation_id} instead of {expected}")
        fix = _READ_FIXES.get(api_key)
        try:
            _, body = codec.decode_response(fix(frame) if fix else frame, api_key, version)
        except Exception as exc:  # kio raises assorted errors on bytes that do not read as the schema says
            raise RemoteProtocolError(f"unreadable {ApiKey(api_key).name} v{version} response: {exc!r}") from exc
        return Response(correlation_id, api_key, version, body)


def newest_known_version(api_key: int, highest: int) -> int:
    """The newest version up to `highest` that kio has schemas for (-1: none), so a request to a
    broker that supports up to `highest` can be written and its response read."""
    for version in range(highest, -1, -1):
        try:
            codec.request_class(api_key, version)
            return version
        except Exception:  # kio's UnknownEntity, or a ValueError for an api key it does not know
            continue
    return -1


def _unset_start_time_as_zero(frame: bytes | memoryview) -> bytes | memoryview:
    """Kafka answers DescribeTransactions with start time -1 until a transaction starts; kio
    refuses negative timestamps, so the first state's -1 is read as 0. The response is flexible:
    compact strings and arrays carry their length + 1 as an unsigned varint."""
    def uvarint(pos: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            b = frame[pos]
            value, pos, shift = value | (b & 0x7F) << shift, pos + 1, shift + 7
            if not b & 0x80:
                return value, pos

    pos = 4 + 1 + 4  # correlation id, header tagged fields, throttle time
    count, pos = uvarint(pos)
    if count < 2:
        return frame
    pos += 2  # error code
    for _ in range(2):  # transactional id, state
        length, pos = uvarint(pos)
        pos += max(length - 1, 0)
    pos += 4  # transaction timeout
    if struct.unpack_from(">q", frame, pos)[0] < 0:
        frame = bytes(frame[:pos]) + bytes(8) + bytes(frame[pos + 8:])
    return frame


_READ_FIXES = {ApiKey.DESCRIBE_TRANSACTIONS: _unset_start_time_as_zero}  # what kio cannot read as it comes
