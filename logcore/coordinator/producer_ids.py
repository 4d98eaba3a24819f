"""Producer id allocation: ids are handed out from blocks whose end is made durable before the first
id of the block is used, so a restarted broker never hands out an id twice. Kafka keeps the latest
block in ZooKeeper's `/latest_producer_id_block`, so that no two brokers of a cluster share one
(`ZooKeeperBlocks`); a single broker keeps it in its data directory as `producer-id-block`, JSON in
that node's format (`FileBlocks`).

Event loop only.
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..storage.files import write_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"
ZNODE = "/latest_producer_id_block"


class BlockSource(Protocol):
    def reserve(self, after: int) -> tuple[int, int]:
        """Durably claim the next block of ids, all above `after`: (first id, last id)."""


def _encode(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(end)}).encode()


class FileBlocks:
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.broker_id = broker_id

    def reserve(self, after: int) -> tuple[int, int]:
        try:
            with open(self.path) as f:
                after = max(after, int(json.load(f)["block_end"]))
        except FileNotFoundError:
            pass
        start, end = after + 1, after + BLOCK_SIZE
        write_atomically(self.path, _encode(self.broker_id, start, end).decode())
        return start, end


class ZooKeeperBlocks:
    def __init__(self, zk: KazooClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id

    def reserve(self, after: int) -> tuple[int, int]:
        """The block after the latest one any broker claimed, by a write conditional on its version."""
        while True:
            try:
                data, stat = self.zk.get(ZNODE)
            except NoNodeError:
                start, end = after + 1, after + BLOCK_SIZE
                try:
                    self.zk.create(ZNODE, _encode(self.broker_id, start, end), makepath=True)
                    return start, end
                except NodeExistsError:
                    continue
            start = max(after, int(json.loads(data)["block_end"])) + 1
            end = start + BLOCK_SIZE - 1
            try:
                self.zk.set(ZNODE, _encode(self.broker_id, start, end), version=stat.version)
                return start, end
            except BadVersionError:
                continue  # another broker claimed a block in between: read again


class ProducerIdManager:
    def __init__(self, blocks: BlockSource) -> None:
        self.blocks = blocks
        self._next = 0
        self._end = -1  # last id of the current block; -1: no block yet
        self._seen = -1  # highest id found in the transaction log

    def seen(self, producer_id: int) -> None:
        """An id found in the transaction log: never hand it out again, even if the block record is lost."""
        self._seen = max(self._seen, producer_id)

    def next_id(self) -> int:
        if self._next > self._end:
            self._next, self._end = self.blocks.reserve(max(self._seen, self._end))
        pid = self._next
        self._next += 1
        return pid
