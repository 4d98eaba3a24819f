"""The log cleaner: Kafka's LogCleaner and LogCleanerManager. It picks the dirtiest compacted
partition, cleans it in a worker process (storage/compaction.py) and swaps the result in
(PartitionLog.install_cleaned). Workers are processes, not threads: a thread would share the GIL
with the event loop that serves clients.

A partition's log is cleanable from its log start to its first uncleanable offset: the base of the
segment holding the earliest of the active segment, the last stable offset (which also stays below
the high watermark) and the first segment younger than min.compaction.lag.ms. The part from the
first dirty offset (where the last clean ended, kept in `cleaner-offset-checkpoint`) on is dirty.
A partition is cleaned when its dirty bytes are at least min.cleanable.dirty.ratio of its
cleanable bytes, or when a dirty record is older than max.compaction.lag.ms.

Broker settings, as Kafka's: log.cleaner.enable, log.cleaner.threads (worker processes),
log.cleaner.dedupe.buffer.size and log.cleaner.io.max.bytes.per.second (shared by the workers),
log.cleaner.backoff.ms (the pause when nothing needs cleaning).

Event loop only, apart from `clean`, which runs in the workers.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable

from common.lifetime import die_with_parent

from ..config import BrokerConfig
from . import swap
from .checkpoint import write_checkpoint
from .compaction import CleanedGroup, CleanJob, CleanResult, SegmentFile, clean
from .log import PartitionLog

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
CLEANER_NICENESS = 10  # an overdue clean's priority: below the event loop's, but it gets its share
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Cleanable:
    """Where a compacted log could be cleaned now, and how dirty it is."""

    first_dirty: int
    end: int  # first uncleanable offset, a segment base
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # a dirty record is older than max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable(log_: PartitionLog, last_stable_offset: int, first_dirty: int, now_ms: int) -> Cleanable:
    segments = log_.segments
    config = log_.config
    bases = [s.base_offset for s in segments]
    limit = min(log_.active.base_offset, last_stable_offset)
    young = now_ms - config["min.compaction.lag.ms"]
    if config["min.compaction.lag.ms"] > 0:
        limit = min([limit] + [s.base_offset for s in segments if s.largest_timestamp() > young])
    end_index = max(bisect.bisect_right(bases, limit) - 1, 0)  # the segment holding `limit` is not cleanable
    end = bases[end_index]
    first_dirty = min(max(first_dirty, log_.log_start_offset), end)  # retention may have passed it
    dirty_index = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
    clean_bytes = sum(s.size for s in segments[:dirty_index])
    dirty = segments[dirty_index:end_index]
    overdue = bool(dirty) and now_ms - (dirty[0].rolling_base_ms or now_ms) > config["max.compaction.lag.ms"]
    return Cleanable(first_dirty, end, clean_bytes, sum(s.size for s in dirty), overdue)


def job_for(log_: PartitionLog, found: Cleanable, now_ms: int, map_bytes: int,
            io_bytes_per_second: float = float("inf")) -> CleanJob:
    """What a worker needs to clean `log_` below `found.end`, taken from the log now."""
    config = log_.config
    segments = [s for s in log_.segments if s.base_offset < found.end]
    return CleanJob(
        directory=log_.directory, name=str(log_),
        segments=tuple(SegmentFile(s.base_offset, s.next_offset, s.size) for s in segments),
        first_dirty=found.first_dirty, end=found.end, now_ms=now_ms,
        delete_retention_ms=config["delete.retention.ms"], segment_bytes=config["segment.bytes"],
        max_index_bytes=config["segment.index.bytes"], index_interval_bytes=config["index.interval.bytes"],
        map_bytes=map_bytes, io_bytes_per_second=io_bytes_per_second,
        aborted=tuple(entry for s in log_.segments for entry in s.txn_index.entries),
        producer_last_offsets=frozenset(e.last_data_offset for e in log_.producers.active_producers() if e.batches))


class LogCleaner:
    def __init__(self, data_dir: str, config: BrokerConfig,
                 logs: Callable[[], Iterable[tuple[TopicPartition, PartitionLog, int]]]) -> None:
        """`logs`: (topic-partition, log, last stable offset) of each online partition."""
        self.data_dir = data_dir
        self.config = config
        self.logs = logs
        self.threads = config.get("log.cleaner.threads")
        self.enabled = config.get("log.cleaner.enable")
        self.delete_horizons: dict[TopicPartition, int] = {}  # when kept tombstones may go (KIP-534)
        self.in_progress: set[TopicPartition] = set()
        # Logs whose clean failed: skipped until the broker restarts. By log, not name: a topic deleted
        # mid-clean (its worker then fails) and created again is a new log, cleaned as any other.
        self.uncleanable: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        self._idle: list[CleanerProcess] = []
        self._busy: set[CleanerProcess] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self.enabled:
            self._tasks = [asyncio.create_task(self._work()) for _ in range(self.threads)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for worker in [*self._idle, *self._busy]:
            worker.kill()  # a clean in progress is dropped: the next open removes its files
        self._idle, self._busy = [], set()

    def wake(self) -> None:
        """Look for work now (a topic's compaction settings changed, a test wants a clean)."""
        self._wake.set()

    # -- choosing ---------------------------------------------------------------------------------

    def _dirtiest(self, now_ms: int) -> tuple[TopicPartition, PartitionLog, Cleanable] | None:
        """The partition most in need: overdue ones (max.compaction.lag.ms) first, then by dirty ratio;
        failing those, one whose kept tombstones have reached their delete horizon."""
        best, best_rank, expired = None, (False, 0.0), None
        for tp, log_, lso in self.logs():
            if tp in self.in_progress or log_ in self.uncleanable or not log_.config.compacted or not log_.segments:
                continue
            found = cleanable(log_, lso, log_.first_dirty_offset, now_ms)
            if found.end <= log_.log_start_offset:
                continue
            rank = (found.overdue, found.dirty_ratio)
            if found.dirty_bytes and rank > best_rank and (
                    found.overdue or found.dirty_ratio >= log_.config["min.cleanable.dirty.ratio"]):
                best, best_rank = (tp, log_, found), rank
            elif expired is None and self.delete_horizons.get(tp, now_ms + 1) <= now_ms:
                expired = (tp, log_, found)
        return best or expired

    # -- cleaning ---------------------------------------------------------------------------------

    async def _work(self) -> None:
        backoff_s = self.config.get("log.cleaner.backoff.ms") / 1000
        while True:
            try:
                cleaned = await self.clean_dirtiest()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the log cleaner failed; it tries again in %.1f s", backoff_s)
                cleaned = False
            if not cleaned:
                self._wake.clear()
                try:
                    async with asyncio.timeout(backoff_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    async def clean_dirtiest(self) -> bool:
        """Clean the dirtiest partition that needs it; False when none does."""
        now_ms = int(time.time() * 1000)
        chosen = self._dirtiest(now_ms)
        if chosen is None:
            return False
        tp, log_, found = chosen
        job = job_for(log_, found, now_ms, self.config.get("log.cleaner.dedupe.buffer.size") // self.threads,
                      self.config.get("log.cleaner.io.max.bytes.per.second") / self.threads)
        cleaned_from = {s.base_offset: s for s in log_.segments if s.base_offset < found.end}
        swapped: list[bool] = []

        def swap_in(group) -> None:
            if all(swapped):
                swapped.append(log_.install_cleaned(group, cleaned_from))
            else:
                swap.remove_cleaned(log_.directory, group.base_offset)

        self.in_progress.add(tp)
        try:
            result = await self._run(job, found.overdue, swap_in)
        except CleanFailed as exc:
            if not log_.segments:
                log.info("%s was deleted while it was cleaned", log_)
                return True
            # As Kafka: one partition's failure must not stop the cleaning of the others.
            self.uncleanable.add(log_)
            log.error("%s cannot be cleaned; the cleaner leaves it as it is until the broker restarts: %s", log_, exc)
            return True
        finally:
            self.in_progress.discard(tp)
        if not all(swapped):
            log.info("%s changed while it was cleaned; the rest of the clean is dropped and done again", log_)
            return True
        log_.first_dirty_offset = result.cleaned_to
        if result.next_delete_horizon is None:
            self.delete_horizons.pop(tp, None)
        else:
            self.delete_horizons[tp] = result.next_delete_horizon
        self.write_checkpoint()
        stats = result.stats
        log.info("%s: cleaned up to offset %d in %.2f s: %d of %d records kept, %d → %d bytes in %d segment(s); "
                 "%.2f s throttled", log_, result.cleaned_to, stats.seconds, stats.records_kept, stats.records_read,
                 sum(s.size for s in job.segments), stats.bytes_written, len(result.groups), stats.throttled_seconds)
        return True

    async def _run(self, job: CleanJob, overdue: bool, swap_in: Callable[[CleanedGroup], None]) -> CleanResult:
        """`clean(job)` in a worker process, swapping each cleaned group in as it comes. Workers
        start at the first clean: most brokers of a test run never need one."""
        worker = self._idle.pop() if self._idle else CleanerProcess()
        self._busy.add(worker)
        try:
            result = await worker.clean(job, overdue, swap_in)
        except BaseException:
            self._busy.discard(worker)
            worker.kill()
            raise
        self._busy.discard(worker)
        self._idle.append(worker)
        return result

    def write_checkpoint(self) -> None:
        write_checkpoint(os.path.join(self.data_dir, CHECKPOINT),
                         {tp: log_.first_dirty_offset for tp, log_, _ in self.logs()})


class CleanFailed(Exception):
    """A clean raised in its worker (the traceback is the message) or the worker died."""


class CleanerProcess:
    """One worker process and the pipe to it: a job goes in; each cleaned group comes back as soon
    as it is written, then the result. It dies with the broker (PR_SET_PDEATHSIG), so none writes
    on into a directory that a restarted broker owns.

    A clean runs only on CPU time nothing else wants (SCHED_IDLE): at any niceness it still held a
    CPU when the broker or its clients woke, and producers lost a fifth of their throughput (a
    niceness-10 busy loop cost them 12-20 %, an idle-class one nothing; docs/benchmarks.md). Work
    past max.compaction.lag.ms is the exception: it runs at niceness 10, so that a broker whose
    CPUs are never idle still cleans what Kafka's users were promised. An unprivileged thread cannot
    leave SCHED_IDLE, so each clean runs in a thread of its own that lowers only itself."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid()), name="log-cleaner", daemon=True)
        self.process.start()
        child.close()

    async def clean(self, job: CleanJob, overdue: bool, on_group: Callable[[CleanedGroup], None]) -> CleanResult:
        self.conn.send((job, overdue))
        while True:
            kind, payload = await self._receive()
            if kind == "group":
                on_group(payload)
            elif kind == "done":
                return payload
            else:
                raise CleanFailed(payload)

    async def _receive(self):
        loop = asyncio.get_running_loop()
        while not self.conn.poll():
            readable = loop.create_future()
            loop.add_reader(self.conn.fileno(), lambda: readable.done() or readable.set_result(None))
            try:
                await readable
            finally:
                loop.remove_reader(self.conn.fileno())
        try:
            return self.conn.recv()
        except EOFError:
            raise CleanFailed(f"the cleaner process exited (code {self.process.exitcode})") from None

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


def _serve(conn: multiprocessing.connection.Connection, parent: int) -> None:
    die_with_parent(parent)
    os.nice(CLEANER_NICENESS)
    while True:
        job, overdue = conn.recv()
        cleaning = threading.Thread(target=_clean, args=(conn, job, overdue), name=f"clean {job.name}")
        cleaning.start()
        cleaning.join()


def _clean(conn: multiprocessing.connection.Connection, job: CleanJob, overdue: bool) -> None:
    if not overdue:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread only
    try:
        result = clean(job, lambda group: conn.send(("group", group)))
    except BaseException:  # all of them: a thread that died silently would leave the broker waiting
        conn.send(("error", traceback.format_exc()))
    else:
        conn.send(("done", result))
