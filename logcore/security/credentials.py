"""SCRAM credentials, kept as Kafka keeps them: per user and mechanism the salt, stored key, server
key and iterations, never the password (`SCRAM-SHA-256` → `salt=...,stored_key=...,server_key=...,
iterations=4096`). A cluster keeps them in ZooKeeper under /config/users/<user>, as Kafka's ZooKeeper
mode does; a broker alone in `scram-credentials.json` in its data directory. AlterUserScramCredentials
and DescribeUserScramCredentials (KIP-554) manage them; SCRAM authentication reads them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from ..storage.files import write_atomically
from .sasl import ScramCredential

USERS = "/config/users"


def encode(credential: ScramCredential) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return (f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
            f"server_key={b64(credential.server_key)},iterations={credential.iterations}")


def decode(text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(","))
    return ScramCredential(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                           base64.b64decode(fields["server_key"]), int(fields["iterations"]))


class FileCredentials:
    """A broker alone: user → mechanism → encoded credential, in one JSON file replaced atomically."""

    def __init__(self, data_dir: str) -> None:
        self.path = Path(data_dir) / "scram-credentials.json"
        self.users: dict[str, dict[str, str]] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        encoded = self.users.get(user, {}).get(mechanism)
        return decode(encoded) if encoded else None

    def all(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: {m: decode(e) for m, e in mechanisms.items()} for user, mechanisms in self.users.items()}

    def put(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        """Set (or with None, remove) one credential."""
        mechanisms = self.users.setdefault(user, {})
        if credential is None:
            mechanisms.pop(mechanism, None)
        else:
            mechanisms[mechanism] = encode(credential)
        if not mechanisms:
            del self.users[user]
        write_atomically(str(self.path), json.dumps(self.users))


class ZooKeeperCredentials:
    """A cluster: /config/users/<user> holds {"version": 1, "config": {mechanism: encoded}}, which
    every broker reads when a user authenticates."""

    def __init__(self, zk) -> None:
        self.zk = zk

    def _read(self, user: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError
        try:
            data, _ = self.zk.get(f"{USERS}/{user}")
        except NoNodeError:
            return {}
        return json.loads(data).get("config", {})

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        encoded = self._read(user).get(mechanism)
        return decode(encoded) if encoded else None

    def all(self) -> dict[str, dict[str, ScramCredential]]:
        users = self.zk.get_children(USERS) if self.zk.exists(USERS) else []
        found = {user: {m: decode(e) for m, e in self._read(user).items() if m.startswith("SCRAM-")} for user in users}
        return {user: mechanisms for user, mechanisms in found.items() if mechanisms}

    def put(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        config = self._read(user)
        if credential is None:
            config.pop(mechanism, None)
        else:
            config[mechanism] = encode(credential)
        path = f"{USERS}/{user}"
        data = json.dumps({"version": 1, "config": config}).encode()
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)
