"""Partition: a hosted replica's leader epoch, high watermark and waiters, over its PartitionLog.

Event loop only. With one replica the ISR is the leader alone, so the high watermark follows the
log end offset on every append; replication (a later layer) moves it on follower acknowledgements.
Listeners are told when the high watermark moves, which is what wakes long-poll fetches.
"""

from __future__ import annotations

import asyncio

from ..protocol.errors import NotEnoughReplicas, OffsetOutOfRange, StorageError
from ..storage.log import AppendResult, PartitionLog


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, leader_id: int) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_id = leader_id
        self.replicas = [leader_id]
        self.isr = [leader_id]
        self.high_watermark = 0  # set by the replica manager once the log is open
        self.offline_reason: str | None = None
        self._waiters: set[asyncio.Future] = set()

    @property
    def leader_epoch(self) -> int:
        return self.log.leader_epoch

    def become_leader(self, epoch: int) -> None:
        self.log.assign_leader_epoch(epoch)

    def check_online(self) -> None:
        if self.offline_reason:
            raise StorageError(self.offline_reason)

    def append_as_leader(self, records: bytes, from_client: bool = True, required_acks: int = 1) -> AppendResult:
        """Validate, then write, then advance the high watermark: no await in between. An acks=all
        write needs min.insync.replicas in the ISR, checked before anything is written (as Kafka)."""
        self.check_online()
        if required_acks == -1 and len(self.isr) < (needed := self.log.config["min.insync.replicas"]):
            raise NotEnoughReplicas(
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replica(s) and min.insync.replicas is "
                f"{needed}: acks=all writes are refused until enough replicas are in sync (lower the topic's "
                f"min.insync.replicas, or write with acks=1)")
        headers = self.log.validate(records)
        result = self.log.append(records, headers, from_client)
        self._advance_high_watermark(self.log.log_end_offset)
        return result

    def _advance_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = offset
            self.wake_waiters()

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def add_waiter(self, future: asyncio.Future) -> None:
        self._waiters.add(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        self._waiters.discard(future)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: where read_committed readers stop."""
        unstable = self.log.producers.first_unstable_offset()
        return self.high_watermark if unstable is None else min(unstable, self.high_watermark)

    def read(self, offset: int, max_bytes: int, min_one_batch: bool, read_committed: bool = False):
        self.check_online()
        upper = self.last_stable_offset if read_committed else self.high_watermark
        return self.log.read(offset, max_bytes, upper, min_one_batch)

    def delete_records_before(self, offset: int) -> int:
        self.check_online()
        if offset == -1:  # Kafka: -1 means "up to the high watermark"
            offset = self.high_watermark
        if offset > self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} is beyond the high watermark {self.high_watermark}")
        return self.log.delete_records_before(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, its end offset), as OffsetForLeaderEpoch answers."""
        return self.log.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def mark_offline(self, reason: str) -> None:
        self.offline_reason = reason

