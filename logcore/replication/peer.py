"""A connection from this broker to another, for a follower's requests to its leader (Fetch,
OffsetForLeaderEpoch) and a transaction coordinator's markers (WriteTxnMarkers): kio request
entities out, kio response entities back, one at a time (concurrent callers take turns).
It connects on first use and again after any failure, which it raises as PeerUnavailable."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from ..protocol.codec import decode_response, encode_request

CONNECT_TIMEOUT_S = 5.0


class PeerUnavailable(Exception):
    """The other broker could not be reached, or the connection broke."""


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._turn = asyncio.Lock()

    async def call(self, request: Any, timeout_s: float) -> Any:
        """Send `request`, return the broker's response entity; PeerUnavailable if that fails."""
        async with self._turn:
            return await self._call(request, timeout_s)

    async def _call(self, request: Any, timeout_s: float) -> Any:
        try:
            if self._writer is None:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            self._correlation_id += 1
            self._writer.write(encode_request(request, self._correlation_id, self.client_id))
            async with asyncio.timeout(timeout_s):
                frame = await self._read_frame()
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise PeerUnavailable(f"broker at {self.host}:{self.port}: {exc or type(exc).__name__}") from exc
        correlation_id, response = decode_response(frame, request.__api_key__, request.__version__)
        if correlation_id != self._correlation_id:
            self.close()
            raise PeerUnavailable(f"broker at {self.host}:{self.port} answered request {correlation_id} "
                                  f"instead of {self._correlation_id}")
        return response

    async def _read_frame(self) -> bytes:
        assert self._reader is not None and self._writer is not None
        await self._writer.drain()
        (size,) = struct.unpack(">i", await self._reader.readexactly(4))
        return await self._reader.readexactly(size)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
