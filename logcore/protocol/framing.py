"""Kafka's framing, sans-IO, for both ends of a connection: each frame is a 4-byte big-endian size
and that many bytes. Bytes go in as they arrive (`receive_data`, b"" once the peer closed); whole
frames come out (`next_frame`) without their size prefix, or NEED_DATA, or None once the peer
closed between frames. A size outside the limits or a close inside a frame is the peer's fault:
RemoteProtocolError, and the connection must close.
"""

from __future__ import annotations

import struct

DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


class RemoteProtocolError(Exception):
    """The peer sent bytes that cannot be framed or read; close the connection."""


class Frames:
    """Event-loop only (or one thread); one per connection. `min_size` is the smallest frame that
    holds its header; `limit_name` names the setting behind `max_size` in the error it raises."""

    def __init__(self, max_size: int, min_size: int, limit_name: str) -> None:
        self._max = max_size
        self._min = min_size
        self._limit_name = limit_name
        self._buffer = bytearray()
        self._start = 0  # where the next frame begins: handed-out frames are dropped once per read
        self._closed = False

    def receive_data(self, data: bytes) -> None:
        if not data:
            self._closed = True
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data

    def next_frame(self) -> bytes | memoryview | _NeedData | None:
        """The next whole frame (read-only), NEED_DATA, or None."""
        start, buffered = self._start, len(self._buffer)
        if buffered - start < 4:
            return None if self._closed else NEED_DATA
        (size,) = struct.unpack_from(">i", self._buffer, start)
        if size < self._min or size > self._max:
            raise RemoteProtocolError(f"frame size {size} outside {self._min}..{self._max} bytes ({self._limit_name})")
        end = start + 4 + size
        if buffered < end:
            if self._closed:
                raise RemoteProtocolError(f"connection closed inside a {size}-byte frame")
            return NEED_DATA
        if start == 0 and end == buffered:  # the buffer holds just this frame (the usual case): no copy
            frame = memoryview(self._buffer)[4:].toreadonly()
        else:
            frame = bytes(memoryview(self._buffer)[start + 4 : end])
        if end == buffered:
            self._buffer, self._start = bytearray(), 0
        else:
            self._start = end
        return frame
