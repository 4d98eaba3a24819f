"""Sans-IO SASL for one connection: SaslHandshake picks a mechanism, SaslAuthenticate requests carry
its tokens, and the session ends authenticated (with a principal) or failed (the connection closes
after the answer). An authenticated session may authenticate again on the same connection, as the
same principal with the same mechanism (re-authentication, KIP-368); with a lifetime
(`connections.max.reauth.ms`) it expires unless it does. PLAIN (RFC 4616) checks a password against the listener's users; SCRAM-SHA-256
and SCRAM-SHA-512 (RFC 5802/7677, no channel binding, as Kafka) check a proof against stored
credentials, so the broker never holds the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..protocol.codec import ErrorCode

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_HASHES)
MIN_ITERATIONS = 4096  # Kafka's floor for SCRAM credentials
FAILED = "Authentication failed: Invalid username or password"


class AuthenticationFailed(Exception):
    """Wrong credentials or a malformed token: SASL_AUTHENTICATION_FAILED, then the connection closes."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes,
                             iterations: int) -> "ScramCredential":
        """What the broker keeps of a password (KIP-554: the admin client sends salt and salted password)."""
        name = SCRAM_HASHES[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", name)
        return cls(salt, hashlib.new(name, client_key).digest(), hmac.digest(salted_password, b"Server Key", name),
                   iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        salt = salt or os.urandom(32)
        salted = hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)


class Plain:
    """One token: [authzid] NUL authcid NUL password."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN request: expected 3 tokens separated by NUL")
        authzid, username, password = (p.decode("utf-8", "replace") for p in parts)
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        expected = self.users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(FAILED)
        return b"", username


class Scram:
    """Two rounds: client-first → server-first (nonce, salt, iterations); client-final (proof) →
    server-final (the server's signature)."""

    def __init__(self, mechanism: str, credentials: Callable[[str, str], ScramCredential | None]) -> None:
        self.mechanism, self.hash = mechanism, SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.first: tuple | None = None  # after client-first: (gs2 header, bare, server-first, nonce, credential, user)

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        return self._client_first(text) if self.first is None else self._client_final(text)

    def _client_first(self, text: str) -> tuple[bytes, str | None]:
        gs2, _, bare = _split_gs2(text)
        fields = scram_fields(bare)
        username, client_nonce = _unescape(fields.get("n", "")), fields.get("r", "")
        if not username or not client_nonce:
            raise AuthenticationFailed("Invalid SCRAM client-first message: it needs n= and r=")
        credential = self.credentials(username, self.mechanism)
        if credential is None:
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")
        nonce = client_nonce + secrets.token_hex(16)  # (32 letters and digits, as Kafka's are plain)
        server_first = f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self.first = (gs2, bare, server_first, nonce, credential, username)
        return server_first.encode(), None

    def _client_final(self, text: str) -> tuple[bytes, str | None]:
        gs2, bare, server_first, nonce, credential, username = self.first
        without_proof, _, proof_field = text.rpartition(",p=")
        fields = scram_fields(without_proof)
        # The nonce is the server's, echoed; librdkafka before 2.1 (Debian's kcat) puts its own nonce
        # in front once more, which Kafka's brokers accepted while they only checked the ending.
        client_nonce = nonce[:len(nonce) - 32]
        if not without_proof or fields.get("r") not in (nonce, client_nonce + nonce):
            raise AuthenticationFailed("Invalid SCRAM client-final message: wrong nonce")
        if fields.get("c") != base64.b64encode(gs2.encode()).decode():
            raise AuthenticationFailed("Invalid SCRAM client-final message: channel binding does not match")
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client-final message: the proof is not base64") from None
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self.hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(FAILED)
        verifier = hmac.digest(credential.server_key, auth_message, self.hash)
        return f"v={base64.b64encode(verifier).decode()}".encode(), username


def _split_gs2(text: str) -> tuple[str, str, str]:
    """client-first = gs2-header client-first-bare; the header is `n,,` or `n,a=authzid,` (no binding)."""
    flag, _, rest = text.partition(",")
    authzid, _, bare = rest.partition(",")
    if flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
        raise AuthenticationFailed("Invalid SCRAM client-first message: bad GS2 header (channel binding is not supported)")
    return f"{flag},{authzid},", authzid, bare


def scram_fields(text: str) -> dict[str, str]:
    return {part[0]: part[2:] for part in text.split(",") if len(part) >= 2 and part[1] == "="}


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class SaslSession:
    """One connection's authentication, driven by its SaslHandshake and SaslAuthenticate requests."""

    def __init__(self, mechanisms: Mapping[str, Callable[[], Plain | Scram]], lifetime_ms: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mechanisms = mechanisms  # name → a new mechanism instance for this connection
        self.lifetime_ms, self.clock = lifetime_ms, clock
        self.mechanism: Plain | Scram | None = None  # the exchange in progress
        self.mechanism_name: str | None = None
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.expires_at: float | None = None  # (clock) when a lifetime is set
        self.failed = False  # the answer to the last request ends the connection

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def in_progress(self) -> bool:
        """A handshake was answered and its exchange has not ended: only SASL requests may come."""
        return self.mechanism is not None

    def expired(self) -> bool:
        return self.expires_at is not None and self.clock() >= self.expires_at

    def handshake(self, mechanism: str) -> dict:
        enabled = list(self.mechanisms)
        if self.mechanism is not None:
            self.failed = True
            return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled}
        if mechanism not in self.mechanisms or (self.authenticated and mechanism != self.mechanism_name):
            self.failed = True  # (re-authentication keeps the mechanism, as in Kafka)
            return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
        self.mechanism, self.mechanism_name = self.mechanisms[mechanism](), mechanism
        return {"error_code": ErrorCode.none, "mechanisms": enabled}

    def authenticate(self, token: bytes) -> dict:
        answer = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}
        if self.mechanism is None:
            self.failed = True
            return {**answer, "error_code": ErrorCode.illegal_sasl_state,
                    "error_message": "SaslAuthenticate without a SaslHandshake before it"}
        try:
            reply, user = self.mechanism.step(bytes(token))
        except AuthenticationFailed as exc:
            self.failed = True
            return {**answer, "error_code": ErrorCode.sasl_authentication_failed, "error_message": str(exc)}
        if user is None:
            return {**answer, "auth_bytes": reply}
        if self.authenticated and self.principal != f"User:{user}":
            self.failed = True
            return {**answer, "error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": f"cannot change principals during re-authentication: {self.principal} "
                                     f"authenticated as User:{user}"}
        self.principal, self.mechanism = f"User:{user}", None
        if self.lifetime_ms:
            self.expires_at = self.clock() + self.lifetime_ms / 1000
        return {**answer, "auth_bytes": reply, "session_lifetime": self.lifetime_ms}
