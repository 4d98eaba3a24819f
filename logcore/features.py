"""Finalized feature levels changed while brokers run: UpdateFeatures (`kafka-features upgrade` and
`downgrade`).

Only `transaction.version` changes this way: `group.version` and `share.version` follow
`group.coordinator.rebalance.protocols`. A level set here overrides the broker setting of the
feature's name on every broker. A broker alone keeps it in `features.json` in its data directory; a
cluster in ZooKeeper's /feature ({"version": 2, "status": 1, "features": {name: {"max_version_level":
level}}}, the shape Kafka's ZooKeeper mode wrote), which every broker watches. The epoch
(ApiVersions' finalized_features_epoch) goes up with each change, so clients see a newer answer.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from .storage.files import write_atomically

FEATURE = "/feature"
UPDATABLE = ("transaction.version",)
FIRST_EPOCH = 1  # (no update yet: the levels are the brokers' settings)


class FileFeatures:
    """A broker alone: name → level and the epoch, in one JSON file replaced atomically."""

    def __init__(self, data_dir: str) -> None:
        self.path = Path(data_dir) / "features.json"
        stored = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.levels: dict[str, int] = stored.get("features", {})
        self.epoch: int = stored.get("epoch", FIRST_EPOCH)

    def put(self, levels: dict[str, int]) -> None:
        self.levels, self.epoch = {**self.levels, **levels}, self.epoch + 1
        write_atomically(str(self.path), json.dumps({"epoch": self.epoch, "features": self.levels}))


class ZooKeeperFeatures:
    """A cluster: /feature, kept current by a watch (its znode version gives the epoch); `put` blocks
    (call it off the event loop)."""

    def __init__(self, zk) -> None:
        from kazoo.recipe.watchers import DataWatch  # (kazoo only in a cluster)
        self.zk = zk
        self._lock = threading.Lock()
        self._version = -1  # the znode version the levels come from
        self.levels: dict[str, int] = {}
        self.epoch = FIRST_EPOCH
        DataWatch(zk, FEATURE, self._changed)

    def _changed(self, data: bytes | None, stat, _event=None) -> None:
        levels = {name: body["max_version_level"] for name, body in json.loads(data)["features"].items()} \
            if data else {}
        with self._lock:  # (the watch's thread and `put`'s can deliver out of order: the newer version wins)
            if stat is not None and stat.version < self._version:
                return
            self._version = stat.version if stat is not None else -1
            self.levels, self.epoch = levels, FIRST_EPOCH + 1 + self._version if stat is not None else FIRST_EPOCH

    def put(self, levels: dict[str, int]) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
        while True:  # (compare-and-set: another broker may change /feature at the same moment)
            try:
                current, stat = self.zk.get(FEATURE)
            except NoNodeError:
                current, stat = None, None
            features = {**(json.loads(current)["features"] if current else {}),
                        **{name: {"max_version_level": level} for name, level in levels.items()}}
            data = json.dumps({"version": 2, "status": 1, "features": features}).encode()
            try:
                if stat is None:
                    _path, written = self.zk.create(FEATURE, data, include_data=True)
                else:
                    written = self.zk.set(FEATURE, data, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue
            self._changed(data, written)  # (this broker answers with it at once; the watch follows)
            return
