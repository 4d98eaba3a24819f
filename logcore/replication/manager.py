"""ReplicaManager: which partitions this broker hosts, and the produce / fetch / offsets entry points
that request handlers call. Below it: Partition → PartitionLog → Segment → indexes.

Event loop only. Per-partition failures come back as that partition's error; one bad partition
never fails a whole request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..config import BrokerConfig, TopicConfig
from ..protocol.codec import FileRegion
from ..protocol.errors import BrokerError, UnknownTopicOrPartition
from ..storage.checkpoint import CheckpointError, CheckpointFile, read_checkpoint
from ..storage.log import PartitionLog
from ..storage.log_cleaner import CHECKPOINT as CLEANER_CHECKPOINT
from ..storage.log_cleaner import LogCleaner
from ..storage.segment import CorruptSegment
from .partition import Partition, wait_for_news

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"

TopicPartition = tuple[str, int]
CONSUMER = -1  # a Fetch's replica_id when a client, not a follower, sends it
MAKE_BATCH = 100  # new partitions' logs made per worker-thread call (make_logs)
OPEN_BATCH = 50  # existing logs opened per worker-thread call at a start (open_existing)
PROGRESS_EVERY_S = 5.0  # how often a long start logs how many logs it has opened
DEBUGGING_CONSUMER = -2  # Kafka's replica_id for a tool reading any replica, follower or leader, up to its HW


@dataclass
class FetchSlice:
    records: FileRegion | None
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    aborted: list | None = None  # read_committed: aborted transactions within the slice

    @property
    def size(self) -> int:
        return self.records.length if self.records else 0


@dataclass(frozen=True)
class ReplicaSize:
    topic: str
    index: int
    size_bytes: int
    offset_lag: int


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    replicas: list[ReplicaSize]
    total_bytes: int
    usable_bytes: int


class ReplicaManager:
    def __init__(self, data_dir: str, broker_id: int, config: BrokerConfig) -> None:
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.config = config
        self.partitions: dict[TopicPartition, Partition] = {}
        # Called with (partition, follower) when a follower outside the ISR has caught up (a cluster's
        # ISR keeper decides); a single broker has no followers.
        self.on_caught_up: Callable[[Partition, int], None] | None = None
        self._clean = os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN))  # else: recover on open
        self._all_open = False  # until `started`: a stop before then leaves the checkpoints and marker alone
        # Checkpointed positions of the partitions hosted at startup; consumed by `_checkpointed`.
        self._log_starts = self._read_checkpoint(LOG_START_CHECKPOINT)
        self._recovery_points = self._read_checkpoint(RECOVERY_CHECKPOINT)
        self._first_dirty = self._read_checkpoint(CLEANER_CHECKPOINT)
        self.cleaner = LogCleaner(data_dir, config, self._online_logs)
        self._recovery_file = CheckpointFile(os.path.join(data_dir, RECOVERY_CHECKPOINT))
        self._log_start_file = CheckpointFile(os.path.join(data_dir, LOG_START_CHECKPOINT))
        self._snapshots = itertools.count()  # the order offsets were read in, for CheckpointFile
        # One thread makes new logs, a batch at a time, whichever creates asked: each batch holds the
        # GIL between its system calls, and several at once would leave the event loop a fraction of it.
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="make-logs")

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(os.path.join(self.data_dir, name))
        except CheckpointError as exc:
            log.warning("%s; ignoring it (every log is recovered in full, log starts come from segments)", exc)
            self._clean = False
            return {}

    # -- hosting -------------------------------------------------------------------------------

    def partition_dir(self, topic: str, index: int) -> str:
        return os.path.join(self.data_dir, f"{topic}-{index}")

    async def open_existing(self, wanted: Sequence[tuple[str, int, TopicConfig]], alone: bool = True) -> None:
        """At a start, before serving: open the logs this broker already holds (`wanted`: topic, index,
        config), in `num.recovery.threads.per.data.dir` worker threads, OPEN_BATCH logs per call, and
        host each batch once it is open, in one loop step (Kafka's LogManager.loadLogs). The event
        loop runs meanwhile: a restart with thousands of partitions, or one recovering after a crash,
        no longer holds it for the whole load. `alone` as for `make_logs`. A log that cannot be opened
        leaves its partition offline (KAFKA_STORAGE_ERROR), the rest of the broker serving."""
        loop = asyncio.get_running_loop()
        threads = self.config.get("num.recovery.threads.per.data.dir")
        began = last_report = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="open-logs")
        try:
            jobs = [loop.run_in_executor(pool, self._open_all, [
                (topic, index, config, alone, self._checkpointed((topic, index)))
                for topic, index, config in wanted[start:start + OPEN_BATCH]])
                for start in range(0, len(wanted), OPEN_BATCH)]
            for job in jobs:  # (in order: partitions are hosted in the order they are named)
                self.add(await job)
                if time.monotonic() - last_report >= PROGRESS_EVERY_S:
                    last_report = time.monotonic()
                    log.info("opened %d of %d logs in %s", len(self.partitions), len(wanted), self.data_dir)
        finally:  # (cancelled: the logs still opening are never hosted; `shutdown` leaves the directory unmarked)
            pool.shutdown(wait=False, cancel_futures=True)
        if wanted:
            log.info("opened %d logs in %s in %.2f s (%s shutdown, %d thread(s))", len(wanted), self.data_dir,
                     time.monotonic() - began, "after a clean" if self._clean else "recovering after an unclean",
                     threads)

    def _open_all(self, batch: list[tuple]) -> list[Partition]:
        """In a worker thread (`_open`'s arguments, a tuple a partition): the partitions are nobody
        else's until they are added."""
        return [self._open(*spec) for spec in batch]

    async def make_logs(self, topic: str, indexes: Sequence[int], topic_config: TopicConfig, alone: bool = True,
                        leader_epochs: Mapping[int, int] | None = None) -> list[Partition]:
        """Make the logs of new partitions of `topic` in the worker thread, MAKE_BATCH at a time, so the
        event loop serves everything else meanwhile (each new log is a directory, three files and its
        leader-epoch checkpoint: milliseconds apiece on a busy disk, seconds for a wide topic).
        Returns the partitions, not hosted: the caller `add`s them in one loop step, with the
        metadata that names them, or `discard`s them. `alone`: as its only replica, leading it (a
        cluster tells the partition its role instead); in a cluster
        `leader_epochs` gives the epoch a partition is led in from its start, written into its
        checkpoint off the loop too. A log that cannot be made leaves its partition offline."""
        epochs = leader_epochs or {}
        made: list[Partition] = []
        try:
            for start in range(0, len(indexes), MAKE_BATCH):
                batch = [(topic, index, topic_config, alone, self._checkpointed((topic, index)), epochs.get(index))
                         for index in indexes[start:start + MAKE_BATCH]]
                made += await asyncio.get_running_loop().run_in_executor(self._maker, self._open_all, batch)
        except BaseException:  # (cancelled, or a bug: the logs made so far go, nothing names them)
            await self.discard(made)
            raise
        return made

    def add(self, partitions: list[Partition]) -> None:
        """Serve partitions `make_logs` made (or `open_existing` opened), all in this one step."""
        self.partitions.update(((p.topic, p.index), p) for p in partitions)

    async def discard(self, partitions: list[Partition]) -> None:
        """Delete the logs of partitions `make_logs` made and nobody was told of (a rolled-back create)."""
        if partitions:
            await asyncio.get_running_loop().run_in_executor(self._maker, lambda: [p.log.delete() for p in partitions])

    def _checkpointed(self, tp: TopicPartition) -> tuple[int, int, int]:
        """(log start, recovery point, first dirty offset) the checkpoints of the last run hold for
        `tp`, taken once (a partition created after the start begins at 0)."""
        return self._log_starts.pop(tp, 0), self._recovery_points.pop(tp, 0), self._first_dirty.pop(tp, 0)

    def _open(self, topic: str, index: int, topic_config: TopicConfig, alone: bool,
              positions: tuple[int, int, int], leader_epoch: int | None = None) -> Partition:
        """`leader_epoch`: a new replica's in a cluster, led in from its start."""
        log_start, recovery_point, first_dirty = positions
        pl = PartitionLog(self.partition_dir(topic, index), topic, index, topic_config)
        partition = Partition(topic, index, pl, self.broker_id)
        try:
            pl.open(log_start, self._clean, recovery_point, lead=alone)
            pl.first_dirty_offset = first_dirty
            if alone:
                partition.become_leader(pl.leader_epoch, [self.broker_id], [self.broker_id])
            elif leader_epoch is not None:
                pl.assign_leader_epoch(leader_epoch)
        except CorruptSegment as exc:
            log.error("partition %s-%d is offline: %s", topic, index, exc)
            partition.mark_offline(str(exc))
        except OSError as exc:
            reason = f"cannot open the log in {pl.directory}: {exc}; fix the directory and restart the broker"
            log.error("partition %s-%d is offline: %s", topic, index, reason)
            partition.mark_offline(reason)
        return partition

    def started(self) -> None:
        """After every hosted partition is open: the next crash must recover again, and partitions
        created from now on start empty whatever stale checkpoint entries say."""
        self._all_open = True
        self._log_starts.clear()
        self._recovery_points.clear()
        self._first_dirty.clear()
        self._clean = True
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN)
        if os.path.exists(marker):
            os.unlink(marker)

    def unhost_topic(self, topic: str) -> None:
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            self._drop(tp)
        self.cleaner.write_checkpoint()

    def unhost(self, topic: str, index: int) -> None:
        """Stop serving one partition and delete its log (a partition creation rolled back, a replica
        reassigned away)."""
        if self._drop((topic, index)):
            self.cleaner.write_checkpoint()

    def _drop(self, tp: TopicPartition) -> bool:
        """Stop serving a partition and delete its log. The caller then writes the cleaner checkpoint without
        it, as Kafka does: a log created again under its name starts dirty from offset 0, not where the
        deleted one was cleaned to."""
        partition = self.partitions.pop(tp, None)
        if partition is None:
            return False
        partition.wake_waiters()
        partition.log.delete()
        return True

    def reconfigure(self, topic: str, topic_config: TopicConfig) -> None:
        for (name, _), partition in self.partitions.items():
            if name == topic:
                partition.log.config = topic_config
        self.cleaner.wake()  # compaction may be due under the new settings

    def _online_logs(self):
        """(topic-partition, log, last stable offset) of each partition the cleaner may work on."""
        return [(tp, p.log, p.last_stable_offset) for tp, p in self.partitions.items() if not p.offline_reason]

    # -- queries (what request handlers and the cluster view ask; they never see `partitions`) ------

    def find(self, topic: str, index: int) -> Partition | None:
        """The hosted partition, or None."""
        return self.partitions.get((topic, index))

    def hosts(self, topic: str, index: int) -> bool:
        return (topic, index) in self.partitions

    def is_offline(self, topic: str, index: int) -> bool:
        """Is the partition hosted here with a log that cannot be read or written?"""
        partition = self.partitions.get((topic, index))
        return partition is not None and bool(partition.offline_reason)

    def hosted(self) -> list[Partition]:
        """Every hosted partition, in the order they were hosted."""
        return list(self.partitions.values())

    def hosted_partitions(self) -> list[TopicPartition]:
        """(topic, index) of every hosted partition, sorted."""
        return sorted(self.partitions)

    def describe_log_dir(self, wanted: set[TopicPartition] | None = None) -> LogDirDescription:
        """DescribeLogDirs: the one log directory (the data dir), its disk, and its replicas' sizes."""
        replicas = [ReplicaSize(p.topic, p.index, p.log.size_bytes(),
                                # (Kafka's: how far the log end is below the high watermark; 0 for a current log)
                                max(p.high_watermark - p.log.log_end_offset, 0))
                    for tp in self.hosted_partitions() if wanted is None or tp in wanted
                    for p in [self.partitions[tp]]]
        disk = os.statvfs(self.data_dir)
        return LogDirDescription(self.data_dir, replicas, disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize)

    def get(self, topic: str, index: int) -> Partition:
        try:
            return self.partitions[(topic, index)]
        except KeyError:
            raise UnknownTopicOrPartition(f"this broker hosts no partition {topic}-{index}") from None

    def leader(self, topic: str, index: int) -> Partition:
        """The partition, if this broker leads it (NOT_LEADER_OR_FOLLOWER otherwise)."""
        partition = self.get(topic, index)
        partition.check_leader()
        return partition

    # -- produce / fetch -----------------------------------------------------------------------

    def append(self, topic: str, index: int, records: bytes, from_client: bool = True, required_acks: int = 1,
               transaction_version: int = 0):
        return self.get(topic, index).append_as_leader(records, from_client, required_acks, transaction_version)

    def read(self, topic: str, index: int, offset: int, max_bytes: int, min_one_batch: bool,
             read_committed: bool = False, replica_id: int = CONSUMER) -> FetchSlice:
        """read_committed stops at the last stable offset and lists the aborted transactions to skip.
        A follower (`replica_id`) reads up to the log end, and its fetch offset tells this leader
        how far its log goes. A debugging consumer (`binlake replica-verification`) reads this
        broker's replica, leader or not, up to its high watermark."""
        if replica_id == DEBUGGING_CONSUMER:
            partition = self.get(topic, index)
            region = partition.read(offset, max_bytes, min_one_batch)
            return FetchSlice(region, partition.high_watermark, partition.log.log_start_offset,
                              partition.last_stable_offset, None)
        partition = self.leader(topic, index)
        if replica_id == CONSUMER:
            region = partition.read(offset, max_bytes, min_one_batch, read_committed)
        else:
            caught_up = partition.follower_fetched(replica_id, offset)
            if caught_up is not None and self.on_caught_up is not None:
                self.on_caught_up(partition, caught_up)
            region = partition.log.read(offset, max_bytes, partition.log.log_end_offset, min_one_batch)
        lso = partition.last_stable_offset
        aborted = partition.log.aborted_transactions(offset, lso) if read_committed and region else None
        return FetchSlice(region, partition.high_watermark, partition.log.log_start_offset, lso, aborted)

    async def wait_for_data(self, tps: list[TopicPartition], timeout_s: float) -> None:
        """Sleep until any of `tps` gets new committed data, or the timeout."""
        if timeout_s > 0:
            await wait_for_news([self.partitions[tp] for tp in tps if tp in self.partitions], timeout_s)

    # -- housekeeping --------------------------------------------------------------------------

    def apply_retention(self) -> None:
        now_ms = int(time.time() * 1000)
        deleted = False
        for partition in list(self.partitions.values()):
            if partition.offline_reason:
                continue
            try:
                deleted |= bool(partition.log.apply_retention(partition.high_watermark, now_ms))
                partition.log.producers.remove_expired(now_ms, self.config.get("producer.id.expiration.ms"))
            except (BrokerError, OSError) as exc:
                log.error("retention of %s-%d failed: %s", partition.topic, partition.index, exc)
        if deleted:
            self.checkpoint()

    def flush_due(self, now_ms: int) -> None:
        for partition in self.partitions.values():
            if partition.offline_reason:
                continue
            try:
                partition.log.flush_if_due(now_ms)
            except OSError as exc:
                log.error("flushing %s-%d failed: %s", partition.topic, partition.index, exc)

    def checkpoint(self) -> None:
        """Write each log's recovery point and start offset, now."""
        self._write_checkpoints(self._both_now())

    async def checkpoint_in_background(self) -> None:
        """The periodic checkpoint (every log.flush.offset.checkpoint.interval.ms): the offsets are read
        here, the files written by a worker thread, as Kafka's scheduler thread does. Each write
        fsyncs twice, tens of milliseconds or more on a busy disk, which would hold up every request
        on the event loop meanwhile."""
        await asyncio.to_thread(self._write_checkpoints, self._both_now())

    def checkpoint_log_starts(self) -> None:
        self._write_checkpoints([self._log_starts_now()])

    def _both_now(self) -> list[tuple[CheckpointFile, dict, int]]:
        return [self._recovery_points_now(), self._log_starts_now()]

    def _recovery_points_now(self) -> tuple[CheckpointFile, dict, int]:
        return (self._recovery_file, {tp: p.log.recovery_point for tp, p in self.partitions.items()},
                next(self._snapshots))

    def _log_starts_now(self) -> tuple[CheckpointFile, dict, int]:
        return (self._log_start_file, {tp: p.log.log_start_offset for tp, p in self.partitions.items()},
                next(self._snapshots))

    @staticmethod
    def _write_checkpoints(snapshots: list[tuple[CheckpointFile, dict, int]]) -> None:
        for file, offsets, taken in snapshots:
            file.write(offsets, taken)

    def shutdown(self) -> None:
        """Seal and fsync every log, write the checkpoints, then mark the directory cleanly shut down,
        unless a partition is offline: its damage must be found again on the next start. A stop
        before every log was opened writes neither: the logs not opened keep their checkpointed
        positions, and the next start recovers what this one did not."""
        self._maker.shutdown(cancel_futures=True)
        for partition in self.partitions.values():
            partition.wake_waiters()
            partition.log.close(flush=not partition.offline_reason)
        if not self._all_open:
            log.warning("not checkpointing %s nor marking it cleanly shut down: stopped while its logs opened",
                        self.data_dir)
            return
        self.checkpoint()
        offline = [f"{p.topic}-{p.index}" for p in self.partitions.values() if p.offline_reason]
        if offline:
            log.warning("not marking %s cleanly shut down: partitions %s are offline", self.data_dir,
                        ", ".join(offline))
            return
        with open(os.path.join(self.data_dir, CLEAN_SHUTDOWN), "w"):
            pass
