"""A blocking raw Kafka-protocol client for tests that need requests no real client sends."""

from __future__ import annotations

import socket
import struct
from typing import Any

from logcore.protocol.codec import decode_response, encode_request


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with a legacy (v1, null client id) header and any body, for requests kio would not encode."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(payload)) + payload


class WireClient:
    def __init__(self, address: str, timeout: float = 10) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._next_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, entity: Any, correlation_id: int | None = None) -> int:
        if correlation_id is None:
            correlation_id, self._next_id = self._next_id, self._next_id + 1
        self.sock.sendall(encode_request(entity, correlation_id))
        return correlation_id

    def read_frame(self) -> bytes | None:
        """One response frame without its size prefix; None once the broker closed the connection."""
        head = self._read_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read_exactly(size)

    def receive(self, request: Any) -> tuple[int, Any]:
        """(correlation id, response entity) of the next frame, read as the answer to `request`'s api/version."""
        frame = self.read_frame()
        assert frame is not None, "broker closed the connection"
        return decode_response(frame, request.__api_key__, request.__version__)

    def call(self, request: Any) -> Any:
        sent = self.send(request)
        correlation_id, response = self.receive(request)
        assert correlation_id == sent
        return response

    def _read_exactly(self, n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)
