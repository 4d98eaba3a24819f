"""Send mutated frames to a running broker over many connections, with health checks between.

Each connection sends a batch of frames without waiting (a frame with a wrong size prefix ends
the batch, since nothing after it could be framed), half-closes, reads what comes back for a
moment and is dropped, so a frame whose size prefix promises more bytes than follow (or a long
poll) never stalls the run. A connection the broker closes before answering every frame it was
sent counts as cut. The last frames sent are kept, and written to a file when the broker dies, so
the killing frame can be found and kept as a regression test.
"""

from __future__ import annotations

import asyncio
import collections
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..brokerproc import BrokerProcess
from .health import FuzzFailure, Health, HealthCheck
from .mutate import Mutator

BATCH = 64  # frames per connection
READ_IDLE_S = 1.0  # how long a connection waits for its next answer (a long poll may never come; a busy broker is slow)
RECENT = 5000  # frames kept for the crash file


@dataclass
class FuzzReport:
    seed: int
    frames: int = 0
    seconds: float = 0.0
    connections: int = 0
    cut: int = 0  # connections the broker closed before answering all their frames
    answered: int = 0  # response frames received
    mutations: collections.Counter = field(default_factory=collections.Counter)
    health: list[Health] = field(default_factory=list)

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        idle, last = self.health[0].rss_bytes / 2**20, self.health[-1].rss_bytes / 2**20
        return (f"seed {self.seed}: {self.frames:,} frames in {self.seconds:.1f} s ({self.frames_per_s:,.0f}/s), "
                f"{self.answered:,} answered, {self.connections:,} connections, {self.cut:,} cut by the broker, "
                f"{len(self.health) - 1} health checks passed, broker RSS {idle:.0f} → {last:.0f} MiB")


class Fuzzer:
    def __init__(self, broker: BrokerProcess, corpus: list[bytes], seed: int, frames: int,
                 connections: int = 32, check_every: int = 20_000, crash_dir: Path | None = None,
                 progress=lambda line: None) -> None:
        self.broker = broker
        self.mutator = Mutator(corpus, seed)
        self.total = frames
        self.connections = connections
        self.check_every = check_every
        self.crash_dir = crash_dir
        self.progress = progress
        self.report = FuzzReport(seed)
        self.recent: collections.deque[bytes] = collections.deque(maxlen=RECENT)
        self.failure: FuzzFailure | None = None  # set by whichever task finds it first
        self._due = asyncio.Event()  # a health check is due
        self._checked = asyncio.Event()  # no check is due or running: connections may send
        self._checked.set()
        self._finished = False

    async def run(self) -> FuzzReport:
        health = HealthCheck(self.broker)
        self.report.health.append(await health.start())
        started = time.monotonic()
        workers = [asyncio.create_task(self._connection()) for _ in range(self.connections)]
        checker = asyncio.create_task(self._checks(health))
        try:
            await asyncio.gather(*workers)  # they stop early once a check fails
            self.report.seconds = time.monotonic() - started
            self._finished = True
            self._due.set()  # one last check after the last frame
            await checker
        except FuzzFailure as exc:
            raise self._with_crash_file(exc) from None
        finally:
            for task in (*workers, checker):
                task.cancel()
            await asyncio.gather(*workers, checker, return_exceptions=True)
            await health.stop()
        return self.report

    async def _checks(self, health: HealthCheck) -> None:
        while True:
            await self._due.wait()
            self._due.clear()
            try:
                result = await health.check()
            except FuzzFailure as exc:
                self.failure = exc
                self._checked.set()  # (the connections see the failure and stop)
                raise
            self.report.health.append(result)
            self._checked.set()
            self.progress(f"  {self.report.frames:>9,} frames: alive, round trip {result.round_trip_ms:.0f} ms, "
                          f"RSS {result.rss_bytes / 2**20:.0f} MiB, {result.partitions:,} partitions created")
            if self._finished:
                return

    async def _connection(self) -> None:
        host, _, port = self.broker.address.rpartition(":")
        while self.report.frames < self.total and self.failure is None:
            await self._checked.wait()  # the broker is checked after exactly check_every more frames
            if self.report.frames >= self.total or self.failure is not None:
                return
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
            except (OSError, TimeoutError):
                if self.broker.proc.poll() is not None:
                    self.failure = FuzzFailure(f"the broker died (exit code {self.broker.proc.returncode}); "
                                               f"its log ends:\n{self.broker.log()[-3000:]}")
                    raise self.failure from None
                await asyncio.sleep(0.01)
                continue
            self.report.connections += 1
            sent = self._send(writer)
            try:
                await asyncio.wait_for(writer.drain(), 5)
                writer.write_eof()
            except (OSError, TimeoutError):  # the broker closed it already, or stopped reading it
                pass
            answered, closed_by_broker = await self._answers(reader)
            self.report.answered += answered
            if closed_by_broker and answered < sent:
                self.report.cut += 1
            writer.transport.abort()

    def _send(self, writer: asyncio.StreamWriter) -> int:
        sent = 0
        for _ in range(BATCH):
            if self.report.frames >= self.total or not self._checked.is_set() or writer.transport.is_closing():
                break
            applied, frame = self.mutator.frame()
            self.recent.append(frame)
            self.report.mutations.update(applied)
            self.report.frames += 1
            sent += 1
            writer.write(frame)
            if self.report.frames % self.check_every == 0:
                self._checked.clear()
                self._due.set()
                break  # no more frames until the check is done
            if "wrong size prefix" in applied:
                break  # nothing after it would be framed: it ends this connection's batch
        return sent

    @staticmethod
    async def _answers(reader: asyncio.StreamReader) -> tuple[int, bool]:
        """(whole response frames read, whether the broker closed the connection) until no answer
        came for READ_IDLE_S."""
        buffered, answered = b"", 0
        try:
            while True:
                data = await asyncio.wait_for(reader.read(65536), READ_IDLE_S)
                if not data:
                    return answered, True
                buffered += data
                while len(buffered) >= 4 and len(buffered) >= 4 + struct.unpack_from(">i", buffered)[0]:
                    buffered = buffered[4 + struct.unpack_from(">i", buffered)[0]:]
                    answered += 1
        except TimeoutError:
            pass
        except OSError:
            return answered, True
        return answered, False

    def _with_crash_file(self, failure: FuzzFailure) -> FuzzFailure:
        if self.crash_dir is None:
            return failure
        path = self.crash_dir / f"fuzz-seed{self.report.seed}-last{len(self.recent)}.bin"
        path.write_bytes(b"".join(self.recent))
        return FuzzFailure(f"{failure}\nthe last {len(self.recent)} frames sent are in {path} "
                           f"(replay them one by one with bench/fuzz.py --replay {path})")
