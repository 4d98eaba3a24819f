"""A connection from this broker to another, for a follower's requests to its leader (Fetch,
OffsetForLeaderEpoch) and a transaction coordinator's markers (WriteTxnMarkers): kio request
entities out, kio response entities back, one at a time (concurrent callers take turns).
It connects on first use and again after any failure, which it raises as PeerUnavailable; over a
TLS or SASL inter-broker listener it starts TLS and authenticates first (logcore.security.inter_broker)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from ..protocol.codec import decode_response, encode_request
from ..security.inter_broker import PeerSecurity
from ..security.sasl import AuthenticationFailed
from ..security.sasl_client import client_for

CONNECT_TIMEOUT_S = 5.0


class PeerUnavailable(Exception):
    """The other broker could not be reached, or the connection broke."""


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, security: PeerSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.security = security
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
                    await self._connect()
            return await self._exchange(request, timeout_s)
        except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError, AuthenticationFailed) as exc:
            self.close()
            raise PeerUnavailable(f"broker at {self.host}:{self.port}: {exc or type(exc).__name__}") from exc

    async def _connect(self) -> None:
        security = self.security
        context = security.ssl_context if security else None
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if context else None)
        if security is None or security.mechanism is None:
            return
        handshake = await self._exchange(SaslHandshakeRequest(mechanism=security.mechanism), CONNECT_TIMEOUT_S)
        if handshake.error_code != 0:
            raise AuthenticationFailed(f"SaslHandshake for {security.mechanism} refused: {handshake.error_code.name}")
        client = client_for(security.mechanism, security.username, security.password)
        token: bytes | None = client.first()
        while token is not None:
            answer = await self._exchange(SaslAuthenticateRequest(auth_bytes=token), CONNECT_TIMEOUT_S)
            if answer.error_code != 0:
                raise AuthenticationFailed(f"authenticating as {security.username}: {answer.error_message}")
            token = client.step(answer.auth_bytes)

    async def _exchange(self, request: Any, timeout_s: float) -> Any:
        self._correlation_id += 1
        self._writer.write(encode_request(request, self._correlation_id, self.client_id))
        async with asyncio.timeout(timeout_s):
            frame = await self._read_frame()
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
