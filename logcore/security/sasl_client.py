"""Sans-IO SASL for the client side of a connection, as a broker authenticates to another broker:
`first()` is the first token; `step(token)` answers each token from the server and returns None once
the server's last one is verified. PLAIN sends its one token; SCRAM (RFC 5802) proves the password
without sending it and checks the server's signature, so a broker never talks to a server that does
not hold the user's credential. `SaslLogin` wraps them in the requests that carry them
(SaslHandshake, then SaslAuthenticate), for any connection driver: a broker's peer connections and
the admin tools alike."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from ..protocol.codec import ApiKey, ErrorCode, build, request_class
from .sasl import SCRAM_HASHES, AuthenticationFailed, scram_fields


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password

    def first(self) -> bytes:
        return f"\0{self.username}\0{self.password}".encode()

    def step(self, token: bytes) -> bytes | None:
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.username, self.password = username, password
        self.nonce = secrets.token_urlsafe(24)
        self.bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self.server_signature: bytes | None = None

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def step(self, token: bytes) -> bytes | None:
        text = token.decode("utf-8", "replace")
        if self.server_signature is None:
            return self._client_final(text)
        fields = scram_fields(text)
        if "e" in fields or base64.b64decode(fields.get("v", "")) != self.server_signature:
            raise AuthenticationFailed(f"the server's SCRAM signature does not verify: {text[:80]}")
        return None

    def _client_final(self, server_first: str) -> bytes:
        fields = scram_fields(server_first)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not iterations.isdigit():
            raise AuthenticationFailed(f"not a SCRAM server-first message: {server_first[:80]}")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), base64.b64decode(salt), int(iterations))
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self.bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.new(self.hash, client_key).digest(), auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", self.hash), auth_message, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def client_for(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    return PlainClient(username, password) if mechanism == "PLAIN" else ScramClient(mechanism, username, password)


HANDSHAKE_VERSION = 1  # (v1: the tokens travel in SaslAuthenticate requests, KIP-152)
AUTHENTICATE_VERSION = 2


class SaslLogin:
    """Sans-IO: the requests that authenticate one new connection, in turn. `first()` is the
    handshake; `answer(response)` checks each response and returns the next request, or None once
    authenticated; AuthenticationFailed when the broker refuses."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism, self.username = mechanism, username
        self._client = client_for(mechanism, username, password)
        self._handshaken = False

    def first(self):
        return build(request_class(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION), {"mechanism": self.mechanism})

    def answer(self, response):
        if not self._handshaken:
            if response.error_code != ErrorCode.none:
                raise AuthenticationFailed(f"SaslHandshake for {self.mechanism} refused: {response.error_code.name}")
            self._handshaken = True
            token: bytes | None = self._client.first()
        else:
            if response.error_code != ErrorCode.none:
                raise AuthenticationFailed(f"authenticating as {self.username}: {response.error_message}")
            token = self._client.step(response.auth_bytes)
        if token is None:
            return None
        return build(request_class(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION), {"auth_bytes": token})
