"""Producer id allocation: ids are handed out from blocks whose end is made durable before the first
id of the block is used, so a restarted broker never hands out an id twice (Kafka keeps the same
block record in ZooKeeper's `/latest_producer_id_block`; a single broker keeps it in its data
directory as `producer-id-block`, JSON in that node's format).

Event loop only.
"""

from __future__ import annotations

import json
import os

from ..storage.files import write_atomically

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.broker_id = broker_id
        self._next = 0
        self._end = -1  # last id of the current block; -1: no block yet
        self._reserved_end = self._read()

    def _read(self) -> int:
        try:
            with open(self.path) as f:
                return int(json.load(f)["block_end"])
        except FileNotFoundError:
            return -1

    def _write(self, start: int, end: int) -> None:
        write_atomically(self.path, json.dumps(
            {"version": 1, "broker": self.broker_id, "block_start": str(start), "block_end": str(end)}))

    def seen(self, producer_id: int) -> None:
        """An id found in the transaction log: never hand it out again, even if the block file is lost."""
        self._reserved_end = max(self._reserved_end, producer_id)

    def next_id(self) -> int:
        if self._next > self._end:
            start = max(self._reserved_end + 1, self._end + 1)
            end = start + BLOCK_SIZE - 1
            self._write(start, end)
            self._next, self._end, self._reserved_end = start, end, end
        pid = self._next
        self._next += 1
        return pid
