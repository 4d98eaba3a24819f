"""A connection from this broker to another, for a follower's requests to its leader (Fetch,
OffsetForLeaderEpoch) and a transaction coordinator's markers (WriteTxnMarkers): kio request
entities out, kio response entities back, one at a time (concurrent callers take turns), through
the sans-IO `ClientConnection` (protocol/client.py); this file only moves its bytes.
It connects on first use and again after any failure, which it raises as PeerUnavailable; over a
TLS or SASL inter-broker listener it starts TLS and authenticates first (logcore.security.inter_broker)."""

from __future__ import annotations

import asyncio
from typing import Any

from ..protocol.client import NEED_DATA, ClientConnection, RemoteProtocolError
from ..security.inter_broker import PeerSecurity
from ..security.sasl import AuthenticationFailed
from ..security.sasl_client import SaslLogin

CONNECT_TIMEOUT_S = 5.0
READ_SIZE = 1 << 20  # bytes asked of the socket at a time: a fetch response arrives in few reads


class PeerUnavailable(Exception):
    """The other broker could not be reached, or the connection broke."""


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, security: PeerSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn: ClientConnection | None = None
        self._turn = asyncio.Lock()

    async def call(self, request: Any, timeout_s: float) -> Any:
        """Send `request`, return the broker's response entity; PeerUnavailable if that fails."""
        async with self._turn:
            return await self._call(request, timeout_s)

    async def _call(self, request: Any, timeout_s: float) -> Any:
        try:
            if self._writer is None:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await self._connect()
            return await self._exchange(request, timeout_s)
        except (OSError, EOFError, TimeoutError, AuthenticationFailed, RemoteProtocolError) as exc:
            self.close()
            raise PeerUnavailable(f"broker at {self.host}:{self.port}: {exc or type(exc).__name__}") from exc

    async def _connect(self) -> None:
        security = self.security
        context = security.ssl_context if security else None
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if context else None)
        self._conn = ClientConnection(self.client_id)
        if security is None or security.mechanism is None:
            return
        login = SaslLogin(security.mechanism, security.username, security.password)
        request = login.first()
        while request is not None:
            request = login.answer(await self._exchange(request, CONNECT_TIMEOUT_S))

    async def _exchange(self, request: Any, timeout_s: float) -> Any:
        assert self._reader is not None and self._writer is not None and self._conn is not None
        self._writer.write(self._conn.send(request))
        async with asyncio.timeout(timeout_s):
            await self._writer.drain()
            while (event := self._conn.next_event()) is NEED_DATA:
                self._conn.receive_data(await self._reader.read(READ_SIZE))
        if event is None:
            raise EOFError("the broker closed the connection")
        return event.body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = self._conn = None
