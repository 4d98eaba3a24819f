"""Partition: a hosted replica's role (leader or follower), leader epoch, ISR, high watermark and
waiters, over its PartitionLog.

Event loop only. A leader tracks each follower's log end offset, learnt from its fetches; the high
watermark is the smallest log end offset in the ISR, so with one replica it follows every append.
A follower copies the leader's log and takes the high watermark the leader reports (capped at its
own log end). Who leads, at which epoch and with which ISR is decided elsewhere (a single broker
leads everything; in a cluster the controller decides, docs/cluster.md), and told to the partition.
Waiters are told when the high watermark, the ISR or the role changes: long-poll fetches and
acks=all produces wait on them.

An ISR change is proposed before it is persisted (`propose_isr`) and applied once it is
(`set_isr`). Until then the high watermark counts the *maximal* ISR, the committed ISR and the
proposed one together (Kafka's `maximalIsr`): a follower being added counts from the moment the
store may name it in sync (it could be elected from then on, so nothing may be acknowledged that it
lacks), and one being removed counts until its removal is persisted. An acks=all write is
acknowledged only if, when the high watermark passes it, this broker still leads in the epoch it
was written in and the maximal ISR has at least `min.insync.replicas` members (Kafka's
`checkEnoughReplicasReachOffset`): an ISR shrunk to the leader alone moves the high watermark to
the log end, and a write held by that leader alone is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ..protocol.errors import (NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeaderOrFollower, OffsetOutOfRange,
                               RequestTimedOut, StorageError)
from ..storage.batch import HEADER_SIZE, read_header
from ..storage.log import AppendResult, PartitionLog

NO_LEADER = -1
UNKNOWN_OFFSET = -1


@dataclass
class FollowerProgress:
    """What a leader knows of one follower: its log end offset, and when it last had all the leader
    had. Under steady writes a fetch rarely finds the follower level with the leader, so a fetch that
    reaches where the leader's log ended at the previous fetch counts as caught up as of that
    previous fetch (Kafka's rule)."""

    log_end_offset: int = UNKNOWN_OFFSET
    caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET

    def fetched(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        self.log_end_offset = fetch_offset
        if fetch_offset >= leader_end:
            self.caught_up_ms = now_ms
        elif fetch_offset >= self.leader_end_at_last_fetch >= 0:
            self.caught_up_ms = max(self.caught_up_ms, self.last_fetch_ms)
        self.last_fetch_ms, self.leader_end_at_last_fetch = now_ms, leader_end


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, broker_id: int) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.broker_id = broker_id
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.replicas = [broker_id]
        self.isr = [broker_id]
        self.proposed_isr: list[int] | None = None  # an ISR change being persisted (leader only)
        self.followers: dict[int, FollowerProgress] = {}  # while leading
        self.high_watermark = 0  # set by the replica manager once the log is open
        self.offline_reason: str | None = None
        self._waiters: set[asyncio.Future] = set()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    # -- roles ---------------------------------------------------------------------------------

    def become_leader(self, epoch: int, replicas: list[int], isr: list[int]) -> None:
        """Lead from `epoch` on. Followers' positions are unknown until they fetch, so the high
        watermark stays where it is until every ISR member has fetched."""
        now_ms = _now_ms()
        if not self.is_leader or epoch != self.leader_epoch:
            self.followers = {b: FollowerProgress(caught_up_ms=now_ms) for b in replicas if b != self.broker_id}
            self.proposed_isr = None  # (a change proposed in an earlier epoch cannot be persisted now)
        self.log.assign_leader_epoch(epoch)
        self.leader_id, self.leader_epoch = self.broker_id, epoch
        self.replicas, self.isr = list(replicas), list(isr)
        self._advance_high_watermark()
        self.wake_waiters()

    def become_follower(self, leader: int, epoch: int, replicas: list[int], isr: list[int]) -> None:
        self.leader_id, self.leader_epoch = leader, epoch
        self.replicas, self.isr = list(replicas), list(isr)
        self.followers, self.proposed_isr = {}, None
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self.wake_waiters()

    def check_leader(self) -> None:
        self.check_online()
        if not self.is_leader:
            where = "it has no leader now" if self.leader_id == NO_LEADER else f"broker {self.leader_id} leads it"
            raise NotLeaderOrFollower(f"this broker does not lead {self.topic}-{self.index} ({where}); "
                                      f"refresh metadata")

    def check_online(self) -> None:
        if self.offline_reason:
            raise StorageError(self.offline_reason)

    # -- the leader's side -----------------------------------------------------------------------

    def append_as_leader(self, records: bytes, from_client: bool = True, required_acks: int = 1,
                         transaction_version: int = 0) -> AppendResult:
        """Validate, then write, then advance the high watermark: no await in between. An acks=all
        write needs min.insync.replicas in the ISR, checked before anything is written (as Kafka).
        `transaction_version`: of the transaction a marker ends (2: its epoch must be newer)."""
        self.check_leader()
        if required_acks == -1 and len(self.isr) < (needed := self.log.config["min.insync.replicas"]):
            raise NotEnoughReplicas(
                f"{self.topic}-{self.index} has {len(self.isr)} in-sync replica(s) and min.insync.replicas is "
                f"{needed}: acks=all writes are refused until enough replicas are in sync (lower the topic's "
                f"min.insync.replicas, or write with acks=1)")
        headers = self.log.validate(records)
        result = self.log.append(records, headers, from_client, transaction_version)
        if not self._advance_high_watermark():
            self.wake_waiters()  # followers' long polls wait for new records, not a new high watermark
        return result

    async def wait_until_replicated(self, end_offset: int, timeout_s: float) -> None:
        """acks=all, called right after the append (no await in between): return once the high
        watermark reaches `end_offset` with at least min.insync.replicas in the maximal ISR, this
        broker leading all along in the epoch of the append."""
        epoch = self.leader_epoch
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.is_leader or self.leader_epoch != epoch:
                raise NotLeaderOrFollower(f"this broker stopped leading {self.topic}-{self.index} (epoch {epoch}) "
                                          f"before the write was replicated; it may or may not be kept: retry")
            if len(isr := self.maximal_isr) < (needed := self.log.config["min.insync.replicas"]):
                raise NotEnoughReplicasAfterAppend(
                    f"{self.topic}-{self.index}: the ISR shrank to {isr} (min.insync.replicas={needed}) after the "
                    f"write; it is in the leader's log but not acknowledged by enough replicas: retry")
            if self.high_watermark >= end_offset:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOut(f"{self.topic}-{self.index}: the ISR did not replicate the write within "
                                      f"the request timeout of {timeout_s * 1000:.0f} ms")
            await wait_for_news([self], remaining)

    def follower_fetched(self, replica: int, fetch_offset: int) -> int | None:
        """A follower asked for records from `fetch_offset`: everything before it is in its log.
        Returns the follower's id if it is out of the ISR and has caught up (the ISR may take it back)."""
        progress = self.followers.get(replica)
        if progress is None:
            raise NotLeaderOrFollower(f"broker {replica} is not a follower of {self.topic}-{self.index} "
                                      f"(its replicas: {self.replicas})")
        progress.fetched(fetch_offset, self.log.log_end_offset, _now_ms())
        self._advance_high_watermark()
        if replica not in self.maximal_isr and fetch_offset >= self.high_watermark:
            return replica
        return None

    def lagging_followers(self, max_lag_ms: int) -> list[int]:
        """ISR followers that have not caught up with this leader for `max_lag_ms`."""
        now_ms = _now_ms()
        return [b for b in self.isr if b in self.followers and now_ms - self.followers[b].caught_up_ms > max_lag_ms]

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR and any change in flight together: what the high watermark and acks=all count."""
        if self.proposed_isr is None:
            return self.isr
        return [b for b in self.replicas if b in self.isr or b in self.proposed_isr] + \
            [b for b in self.isr if b not in self.replicas]

    def propose_isr(self, isr: list[int]) -> None:
        """An ISR change about to be persisted: a follower being added counts for the high watermark
        from now on (it cannot move the high watermark back: it reached it to be proposed)."""
        self.proposed_isr = list(isr)

    def abandon_isr(self, isr: list[int]) -> None:
        """The proposed change `isr` was not persisted."""
        if self.proposed_isr == isr:
            self.proposed_isr = None
            self._advance_high_watermark()
            self.wake_waiters()

    def set_isr(self, isr: list[int]) -> None:
        """An ISR change, once it is persisted."""
        self.isr, self.proposed_isr = list(isr), None
        self._advance_high_watermark()
        self.wake_waiters()

    def _advance_high_watermark(self) -> bool:
        """High watermark = the smallest log end offset in the maximal ISR; True if it moved."""
        offset = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.broker_id:
                progress = self.followers.get(replica)
                offset = min(offset, progress.log_end_offset if progress else UNKNOWN_OFFSET)
        if offset > self.high_watermark:
            self.high_watermark = offset
            self.wake_waiters()
            return True
        return False

    # -- the follower's side ---------------------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> int:
        """Records fetched from the leader (possibly none), then the leader's high watermark."""
        start = self.log.log_start_offset
        first = read_header(records) if len(records) >= HEADER_SIZE else None
        # An empty replica started at a leader's log start inside a batch (DeleteRecords) keeps the whole
        # batch, and its own log start, as Kafka's followers do.
        inside = first is not None and first.base_offset < self.log.log_end_offset == start <= first.last_offset
        if inside:
            self.log.restart_at(first.base_offset)
        appended = self.log.append_replicated(records) if records else 0
        if inside:
            self.log.delete_records_before(start)
        high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark
        return appended

    def restart_at(self, offset: int) -> None:
        """Empty this follower's log and continue it at `offset`, the leader's log start."""
        self.log.restart_at(offset)
        self.high_watermark = offset

    def truncate_to(self, offset: int) -> None:
        """Drop what this follower has past `offset` (it diverged from the leader)."""
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

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


async def wait_for_news(partitions: list[Partition], timeout_s: float) -> None:
    """Sleep until any of `partitions` wakes its waiters (new records, high watermark, ISR or role),
    or the timeout."""
    future = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.add_waiter(future)
    try:
        async with asyncio.timeout(timeout_s):  # (not wait_for: in 3.11 it can swallow a cancellation)
            await future
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            partition.remove_waiter(future)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)

