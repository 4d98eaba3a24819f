"""Canal's client authentication (SecurityUtil): MySQL 4.1's scramble over the handshake's seeds.

The server stores `canal.passwd` as the hex of SHA1(SHA1(password)) (MySQL's PASSWORD() without its `*`); a
client sends the hex of scramble411(password, seeds) = SHA1(password) XOR SHA1(seeds + SHA1(SHA1(password))).
"""

from __future__ import annotations

import hashlib
import hmac


def _sha1(*parts: bytes) -> bytes:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    return digest.digest()


def stored_password(password: str) -> str:
    """What canal.passwd holds for `password`: hex SHA1(SHA1(password))."""
    return _sha1(_sha1(password.encode())).hex()


def scramble(password: str, seeds: bytes) -> str:
    """The client's side: hex of scramble411(password, seeds)."""
    stage1 = _sha1(password.encode())
    mask = _sha1(seeds, _sha1(stage1))
    return bytes(a ^ b for a, b in zip(stage1, mask)).hex()


def check(user: str, passwd: str, client_user: str, client_password: str, seeds: bytes) -> bool:
    """Canal's CanalServerWithEmbedded.auth: any client when no canal.user (or the same user) and no canal.passwd;
    otherwise the client's scrambled password must match the stored hash."""
    if user and user != client_user:
        return False
    if not passwd:
        return True
    if not client_password:
        return False
    try:
        token, stored = bytes.fromhex(client_password), bytes.fromhex(passwd)
    except ValueError:
        return False
    if len(token) != 20 or len(stored) != 20:
        return False
    stage1 = bytes(a ^ b for a, b in zip(token, _sha1(seeds, stored)))
    return hmac.compare_digest(_sha1(stage1), stored)
