"""Followers copying their leaders' logs, as Kafka's replica fetchers do (docs/cluster.md,
"Replication"): one task per leader broker sends Fetch requests with this broker's id as replica id,
for every partition it follows there, and appends what comes back.

Before a partition's first fetch under a leader epoch, its log is made a prefix of the leader's
(KIP-101/279): OffsetForLeaderEpoch asks where the leader's log ends for this replica's latest
epoch, and the replica drops what it has past that point. A high watermark alone could cut
acknowledged records, or keep records the new leader never had.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..config import BrokerConfig
from ..protocol.codec import ApiKey, ErrorCode, build, request_class
from ..protocol.errors import BrokerError
from ..storage.epochs import UNDEFINED
from .partition import Partition
from ..security.inter_broker import PeerSecurity
from .peer import PeerConnection, PeerUnavailable

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # the last with the replica id in the request body and topics by name
EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 4
EARLIEST = -2  # ListOffsets' timestamp for the log start offset
AddressOf = Callable[[int], "tuple[str, int] | None"]


@dataclass(eq=False)  # (compared by identity: a newer one replaces it on a leadership change)
class Followed:
    partition: Partition
    leader_epoch: int
    truncated: bool = False  # its log is a prefix of the leader's: fetch from its end
    retry_at: float = 0.0  # after an error, the monotonic time to try it again


class LeaderFetcher:
    """Copies the partitions this broker follows from one leader."""

    def __init__(self, leader_id: int, broker_id: int, address_of: AddressOf, config: BrokerConfig,
                 security: PeerSecurity | None = None) -> None:
        self.leader_id = leader_id
        self.broker_id = broker_id
        self.address_of = address_of
        self.config = config
        self.security = security
        self.followed: dict[tuple[str, int], Followed] = {}
        self._changed = asyncio.Event()
        self._connection: PeerConnection | None = None
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def follow(self, partition: Partition, leader_epoch: int) -> None:
        self.followed[partition.topic, partition.index] = Followed(partition, leader_epoch)
        self._changed.set()

    def unfollow(self, tp: tuple[str, int]) -> None:
        self.followed.pop(tp, None)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._connection is not None:
            self._connection.close()

    async def _run(self) -> None:
        backoff_s = self.config.get("replica.fetch.backoff.ms") / 1000
        while True:
            now = time.monotonic()
            ready = [f for f in self.followed.values() if f.retry_at <= now]
            if not ready:
                self._changed.clear()
                wake = min((f.retry_at for f in self.followed.values()), default=None)
                try:
                    async with asyncio.timeout(None if wake is None else max(wake - now, 0.001)):
                        await self._changed.wait()
                except TimeoutError:
                    pass
                continue
            try:
                connection = self._connect()
                pending = [f for f in ready if not f.truncated]
                if pending:
                    await self._truncate(connection, pending)
                fetchable = [f for f in ready if f.truncated and self.followed.get(_tp(f)) is f]
                if fetchable:
                    await self._fetch(connection, fetchable)
            except PeerUnavailable as exc:
                log.warning("cannot fetch from broker %d: %s; retrying in %.1f s", self.leader_id, exc, backoff_s)
                await asyncio.sleep(backoff_s)

    def _connect(self) -> PeerConnection:
        address = self.address_of(self.leader_id)
        if address is None:
            raise PeerUnavailable(f"broker {self.leader_id} is not registered")
        if self._connection is None or (self._connection.host, self._connection.port) != address:
            if self._connection is not None:
                self._connection.close()
            self._connection = PeerConnection(*address, client_id=f"broker-{self.broker_id}-fetcher",
                                              security=self.security)
        return self._connection

    async def _truncate(self, connection: PeerConnection, pending: list[Followed]) -> None:
        """Ask the leader where each replica's latest epoch ends there; cut each log at that point."""
        topics: dict[str, list[dict]] = {}
        for f in pending:
            topics.setdefault(f.partition.topic, []).append(
                {"partition": f.partition.index, "current_leader_epoch": f.leader_epoch,
                 "leader_epoch": f.partition.log.epochs.latest_epoch})
        request = build(request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION),
                        {"replica_id": self.broker_id,
                         "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]})
        response = await connection.call(request, self._request_timeout_s)
        for topic in response.topics:
            for answer in topic.partitions:
                f = self.followed.get((topic.topic, answer.partition))
                if f is None or f not in pending:
                    continue  # (its leadership changed meanwhile)
                if answer.error_code != ErrorCode.none:
                    self._retry_later(f, answer.error_code, "find where its log diverges")
                    continue
                self._cut(f, answer.leader_epoch, answer.end_offset)

    @staticmethod
    def _cut(f: Followed, leader_epoch: int, leader_end: int) -> None:
        partition = f.partition
        log_end = partition.log.log_end_offset
        if leader_epoch == UNDEFINED:
            # The leader has nothing of this replica's epochs: keep only what is known to be committed.
            point = min(partition.high_watermark, log_end)
        else:
            _, own_end = partition.log.epochs.end_offset_for(leader_epoch, log_end)
            point = min(leader_end, own_end if own_end != UNDEFINED else log_end, log_end)
        if point < log_end:
            log.info("%s-%d: truncating from %d to %d to match the leader (its epoch %d ends at %d)",
                     partition.topic, partition.index, log_end, point, leader_epoch, leader_end)
            partition.truncate_to(point)
        f.truncated = True

    async def _fetch(self, connection: PeerConnection, fetchable: list[Followed]) -> None:
        max_bytes = self.config.get("replica.fetch.max.bytes")
        topics: dict[str, list[dict]] = {}
        for f in fetchable:
            topics.setdefault(f.partition.topic, []).append(
                {"partition": f.partition.index, "current_leader_epoch": f.leader_epoch,
                 "fetch_offset": f.partition.log.log_end_offset, "last_fetched_epoch": -1,
                 "log_start_offset": f.partition.log.log_start_offset, "partition_max_bytes": max_bytes})
        wait_ms = self.config.get("replica.fetch.wait.max.ms")
        request = build(request_class(ApiKey.FETCH, FETCH_VERSION), {
            "replica_id": self.broker_id, "max_wait": wait_ms, "min_bytes": self.config.get("replica.fetch.min.bytes"),
            "max_bytes": self.config.get("replica.fetch.response.max.bytes"), "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]})
        response = await connection.call(request, self._request_timeout_s + wait_ms / 1000)
        out_of_range = []
        for topic in response.responses:
            for answer in topic.partitions:
                f = self.followed.get((topic.topic, answer.partition_index))
                if f is None or f not in fetchable:
                    continue
                if answer.error_code == ErrorCode.none:
                    self._append(f, answer.records or b"", answer.high_watermark)
                elif answer.error_code == ErrorCode.offset_out_of_range:
                    out_of_range.append(f)
                else:
                    self._retry_later(f, answer.error_code, "fetch")
        if out_of_range:
            await self._out_of_range(connection, out_of_range)

    async def _out_of_range(self, connection: PeerConnection, followed: list[Followed]) -> None:
        """The leader has no records at this replica's log end. Behind the leader's log start (retention
        or DeleteRecords removed them: a new replica of an old partition), the replica starts over
        there, as Kafka's followers do; otherwise its log went past the leader's, and it finds where
        they diverge again."""
        topics: dict[str, list[dict]] = {}
        for f in followed:
            topics.setdefault(f.partition.topic, []).append(
                {"partition_index": f.partition.index, "current_leader_epoch": f.leader_epoch, "timestamp": EARLIEST})
        request = build(request_class(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION), {
            "replica_id": self.broker_id, "isolation_level": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
        response = await connection.call(request, self._request_timeout_s)
        for topic in response.topics:
            for answer in topic.partitions:
                f = self.followed.get((topic.name, answer.partition_index))
                if f is None or f not in followed:
                    continue
                if answer.error_code != ErrorCode.none:
                    self._retry_later(f, answer.error_code, "find the leader's log start")
                elif f.partition.log.log_end_offset < answer.offset:
                    log.info("%s-%d: the leader's log starts at %d, past this replica's end %d: starting over there",
                             f.partition.topic, f.partition.index, answer.offset, f.partition.log.log_end_offset)
                    f.partition.restart_at(answer.offset)
                else:
                    f.truncated = False  # find the divergence again (the leader's log moved under it)
                    self._retry_later(f, ErrorCode.offset_out_of_range, "fetch")

    def _append(self, f: Followed, records: bytes, high_watermark: int) -> None:
        try:
            f.partition.append_as_follower(records, high_watermark)
        except BrokerError as exc:
            log.error("%s-%d: cannot append what the leader sent: %s", f.partition.topic, f.partition.index, exc)
            f.truncated = False
            f.retry_at = time.monotonic() + self.config.get("replica.fetch.backoff.ms") / 1000

    def _retry_later(self, f: Followed, code: ErrorCode, doing: str) -> None:
        log.info("%s-%d: the leader (broker %d) answered %s to %s; retrying", f.partition.topic, f.partition.index,
                 self.leader_id, code.name, doing)
        f.retry_at = time.monotonic() + self.config.get("replica.fetch.backoff.ms") / 1000

    @property
    def _request_timeout_s(self) -> float:
        return self.config.get("replica.socket.timeout.ms") / 1000


def _tp(f: Followed) -> tuple[str, int]:
    return f.partition.topic, f.partition.index


class ReplicaFetchers:
    """The fetchers of one broker, one per leader it follows partitions of."""

    def __init__(self, broker_id: int, address_of: AddressOf, config: BrokerConfig,
                 security: PeerSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.address_of = address_of
        self.config = config
        self.security = security
        self._fetchers: dict[int, LeaderFetcher] = {}

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        """Copy `partition` from `leader_id` from now on (and from no other leader)."""
        tp = (partition.topic, partition.index)
        for fetcher in self._fetchers.values():
            if fetcher.leader_id != leader_id:
                fetcher.unfollow(tp)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = LeaderFetcher(leader_id, self.broker_id, self.address_of,
                                                                self.config, self.security)
        current = fetcher.followed.get(tp)
        if current is None or current.partition is not partition or current.leader_epoch != leader_epoch:
            fetcher.follow(partition, leader_epoch)

    def unfollow(self, tp: tuple[str, int]) -> None:
        for fetcher in self._fetchers.values():
            fetcher.unfollow(tp)

    async def stop(self) -> None:
        await asyncio.gather(*(fetcher.stop() for fetcher in self._fetchers.values()))
        self._fetchers.clear()
