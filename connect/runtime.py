"""The standalone runtime: runs connectors' source tasks, restarts failed ones with backoff, stops cleanly.

Layers: `Worker` (the connectors of this process; what the CLI and REST API talk to) →
`TaskRunner` (one task: attempts, backoff, pause/resume/restart, status) → one attempt = offset
store + producer + writer + the plugin's task. Everything runs on one event loop; the control
methods (pause, resume, restart, stop) only set flags and wake the runner, which acts on them
between batches, so a batch is always written and committed whole (a source transaction split
over several batches is committed whole too, or aborted when the task stops inside it).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import traceback
from collections.abc import Callable, Mapping

from aiokafka.errors import ProducerFenced

from .api import Batch, ConnectorConfig, FatalError, SourceConnector, SourceTask, TaskContext
from .config import ConnectorSpec
from .metrics import TaskMetrics
from .offsets import LogOffsetStore
from .producer import Writer, make_producer, make_writer, start_producer, stop_producer
from .transforms import chain

log = logging.getLogger(__name__)


class State(str, enum.Enum):
    UNASSIGNED = "UNASSIGNED"  # not run by any worker yet
    RUNNING = "RUNNING"        # run by this worker: starting (producer, offsets, source), then writing batches
    PAUSED = "PAUSED"
    RESTARTING = "RESTARTING"  # failed; waiting out the backoff before the next attempt (see trace)
    FAILED = "FAILED"          # failed restart.max_restarts times in a row, or fatally; only a REST restart revives it
    FINISHED = "FINISHED"      # the source ended on its own (e.g. a snapshot-only run)
    STOPPED = "STOPPED"


def offset_store(spec: ConnectorSpec) -> LogOffsetStore:
    """Where the connector of `spec` keeps its source offsets."""
    runtime = spec.runtime
    return LogOffsetStore(runtime.bootstrap_servers, runtime.offsets.topic, runtime.offsets.partitions,
                          runtime.offsets.replication_factor, runtime.producer.request_timeout_ms, runtime.security)


class TaskRunner:
    """Runs one source task until stopped. Event loop only; control methods never block."""

    def __init__(self, spec: ConnectorSpec, task_id: int, task_config: ConnectorConfig) -> None:
        self.spec = spec
        self.task_id = task_id
        self.task_config = task_config
        self.label = f"{spec.name}-{task_id}"
        self.on_state: Callable[[TaskRunner], None] | None = None
        """Called after every change of `state` (the distributed worker publishes it)."""
        self.on_topic: Callable[[TaskRunner, str], None] | None = None
        """Called when the task first writes to a topic (the distributed worker publishes it, KIP-558)."""
        self._state = State.UNASSIGNED
        self.trace: str | None = None
        self.failures = 0
        self.batches_written = 0
        self.records_written = 0
        self.active_topics: set[str] = set()
        """The topics this task has written to since it started or since a reset (Kafka Connect's KIP-558)."""
        self.paused = False
        self._stopping = False
        self._restart_requested = False
        self._changed = asyncio.Event()
        self._transform = chain(spec.runtime.transforms) if spec.runtime.transforms else None
        self.metrics = TaskMetrics(spec.name, task_id)
        self._source_task: SourceTask | None = None  # the running attempt's, for its metrics
        self.store = offset_store(spec)
        self.topics = self.store.topics  # one admin view (and partition-count cache) for offsets and tasks

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        changed, self._state = value != self._state, value
        if changed and self.on_state is not None:
            self.on_state(self)

    # -- control (called by the worker, the REST API, signal handlers) -----------------------------

    def pause(self) -> None:
        self.paused = True
        self._changed.set()

    def resume(self) -> None:
        self.paused = False
        self._changed.set()

    def restart(self) -> None:
        """End the current attempt cleanly (batch committed) and start a new one at once."""
        self._restart_requested = True
        self._changed.set()

    def stop(self) -> None:
        self._stopping = True
        self._changed.set()

    def status(self) -> dict:
        status = {"id": self.task_id, "state": self.state.value, "trace": self.trace,
                  "failures": self.failures, "batches": self.batches_written, "records": self.records_written}
        if metrics := self.source_metrics():  # (binlake's, once the source reports: snapshot progress, binlog lag)
            status["source"] = dict(metrics)
        if self._source_task is not None and (details := self._source_task.details()):
            status.setdefault("source", {}).update(details)
        return status

    def signal(self, signal: Mapping) -> None:
        """Hand a signal to the running source; ValueError when it refuses it or none runs."""
        if self._source_task is None:
            raise ValueError(f"{self.label} is {self.state.value}, not running: it takes signals once it runs")
        self._source_task.signal(signal)

    # -- supervision ----------------------------------------------------------------------------------

    async def run(self) -> State:
        """Attempt, back off, attempt again; returns the final state (STOPPED, FINISHED or FAILED)."""
        restart = self.spec.runtime.restart
        while not self._stopping:
            self._restart_requested = False
            # Run by this worker from now on, as the connector is: a task starting (its producer, its
            # offsets, its source's connection) is RUNNING, not UNASSIGNED, as Kafka Connect's is.
            self.state = State.PAUSED if self.paused else State.RUNNING
            try:
                if await self._attempt():
                    self.state = State.FINISHED
                    log.info("%s: the source finished; offsets committed", self.label)
                    return self.state
                if self._restart_requested and not self._stopping:
                    log.info("%s: restarting on request", self.label)
                continue
            except Exception as exc:
                self.failures += 1
                self.metrics.failures.inc()
                self.trace = "".join(traceback.format_exception(exc))
                if isinstance(exc, FatalError):
                    self.state = State.FAILED
                    log.error("%s failed and will not be restarted: %s", self.label, exc)
                    return self.state
                if isinstance(exc, ProducerFenced):  # (as Kafka Connect: a fenced instance is a zombie)
                    self.state = State.FAILED
                    log.error("%s was fenced: another instance of it started (a rebalance elsewhere), or its "
                              "offsets were changed; this one stops for good", self.label)
                    return self.state
                if restart.max_restarts is not None and self.failures > restart.max_restarts:
                    self.state = State.FAILED
                    log.error("%s failed %d times in a row, giving up: %s", self.label, self.failures, _why(exc))
                    return self.state
                delay = restart.backoff_ms(self.failures) / 1000
                self.state = State.RESTARTING
                log.error("%s failed: %s; restarting in %.3f s (failure %d in a row)",
                          self.label, _why(exc), delay, self.failures, exc_info=exc if self.failures == 1 else None)
                await self._sleep(delay)
        self.state = State.STOPPED
        return self.state

    async def _sleep(self, seconds: float) -> None:
        """Wait out a backoff; a stop or restart request cuts it short."""
        deadline = time.monotonic() + seconds
        while not (self._stopping or self._restart_requested) and (left := deadline - time.monotonic()) > 0:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def _attempt(self) -> bool:
        """One life of the task; True when its source ended, False when stopped or restarted."""
        runtime = self.spec.runtime
        await self.store.start()
        producer = make_producer(runtime, self.task_id)
        # Before reading offsets: InitProducerId settles a transaction the previous instance left behind
        # (aborted, or committed if it had already asked to commit), so the offsets read are final.
        await start_producer(producer, runtime)
        task: SourceTask | None = None
        try:
            offsets = await self.store.load(self.spec.name)
            context = TaskContext(self.spec.name, self.task_id, offsets, self.topics)
            task = self._source_task = self.spec.plugin.task_class(self.task_config, context)
            await task.start()
            log.info("%s started (%s, %d stored offset(s))", self.label, runtime.delivery, len(offsets.all()))
            return await self._pump(task, make_writer(producer, self.store, runtime))
        finally:
            self._source_task = None
            if task is not None:
                try:
                    await task.stop()
                except Exception:
                    log.exception("%s: task.stop() raised", self.label)
            await stop_producer(producer)

    async def _pump(self, task: SourceTask, writer: Writer) -> bool:
        source = task.batches()
        pending: asyncio.Future | None = None
        try:
            while not (self._stopping or self._restart_requested):
                self._changed.clear()
                if pending is None:
                    pending = asyncio.ensure_future(anext(source))
                    await asyncio.sleep(0)  # a batch the source already holds arrives in this one step
                if self.paused or not pending.done():
                    self.state = State.PAUSED if self.paused else State.RUNNING
                    await self._wait(pending, writer)
                    continue
                if writer.commit_due_in(more_waiting=True) == 0:
                    await self._commit(writer)
                try:
                    batch = pending.result()
                except StopAsyncIteration:
                    await self._commit(writer)
                    return True
                except Exception:
                    # The source failed, not the log: what was written is good, so commit it (the
                    # writer waits for the records' acks first; a source transaction left unfinished
                    # is aborted instead) and the restart repeats nothing that was committed.
                    await self._commit(writer)
                    raise
                pending = None
                await self._write(batch, writer)
            await self._commit(writer)
            return False
        finally:
            if pending is not None and not pending.done():
                pending.cancel()  # nothing unyielded is lost: the next attempt resumes from committed offsets
                await asyncio.gather(pending, return_exceptions=True)
            await source.aclose()

    async def _wait(self, pending: asyncio.Future, writer: Writer) -> None:
        """The source is idle: commit or send what is due, then wait for the next batch (unless paused),
        a control request, or the next commit or linger deadline."""
        if writer.commit_due_in() == 0:
            await self._commit(writer)
        if writer.flush_due_in() == 0:
            await writer.flush()
        deadlines = [d for d in (writer.commit_due_in(), writer.flush_due_in()) if d is not None]
        wake = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({wake} if self.paused else {wake, pending},
                               timeout=min(deadlines, default=None), return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()

    async def _commit(self, writer: Writer) -> None:
        started = time.perf_counter()
        if await writer.commit():
            self.metrics.commit_seconds.observe(time.perf_counter() - started)

    def _note_topics(self, topics: set[str]) -> None:
        for topic in topics - self.active_topics:
            self.active_topics.add(topic)
            if self.on_topic is not None:
                self.on_topic(self, topic)

    def source_metrics(self) -> Mapping[str, float]:
        """The running source task's own gauges (none between attempts, or when they cannot be read)."""
        if self._source_task is None:
            return {}
        try:
            return self._source_task.metrics()
        except Exception:
            log.exception("%s: reading the source's metrics failed", self.label)
            return {}

    async def _write(self, batch: Batch, writer: Writer) -> None:
        records = batch.records
        if self._transform is not None:
            records = [out for record in records if (out := self._transform(record)) is not None]
        await writer.write(records, batch.source_partition, batch.source_offset, batch.ends_transaction)
        self.batches_written += 1
        self.metrics.batches.inc()
        if records:
            self.records_written += len(records)
            self.metrics.records.inc(len(records))
            self._note_topics({record.topic for record in records})
            if batch.ends_transaction:
                self.metrics.transactions.inc()
        if self.failures:
            log.info("%s: recovered after %d failure(s)", self.label, self.failures)
            self.failures, self.trace = 0, None


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def split_tasks(spec: ConnectorSpec) -> tuple[SourceConnector, list[ConnectorConfig]]:
    """The connector plugin of `spec`, and one config per task (at most `tasks_max`)."""
    if not issubclass(spec.plugin, SourceConnector):
        raise ValueError(f"{spec.source}: connector {spec.runtime.connector!r} is a sink; "
                         "the runtime runs source connectors only")
    plugin = spec.plugin(spec.name, spec.config)
    return plugin, plugin.task_configs(spec.runtime.tasks_max)[: spec.runtime.tasks_max]


class RunningConnector:
    """One configured connector: its spec and the runners of its tasks."""

    def __init__(self, spec: ConnectorSpec) -> None:
        self.spec = spec
        self.plugin, configs = split_tasks(spec)
        self.runners = [TaskRunner(spec, i, config) for i, config in enumerate(configs)]
        self.paused = False

    def status(self) -> dict:
        return {"name": self.spec.name, "type": self.plugin.kind,
                "connector": {"state": "PAUSED" if self.paused else "RUNNING"},
                "tasks": [r.status() for r in self.runners]}


class Worker:
    """The connectors of one process. Event loop only."""

    def __init__(self, specs: list[ConnectorSpec]) -> None:
        names = [s.name for s in specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"connector names must be unique; given twice: {', '.join(duplicates)}")
        self.connectors = {s.name: RunningConnector(s) for s in specs}
        self._running: dict[TaskRunner, asyncio.Task] = {}
        self._idle = asyncio.Event()

    def _launch(self, runner: TaskRunner) -> None:
        self._idle.clear()
        task = asyncio.create_task(runner.run(), name=runner.label)
        self._running[runner] = task
        task.add_done_callback(lambda _: self._finished(runner))

    def _finished(self, runner: TaskRunner) -> None:
        self._running.pop(runner, None)
        if not self._running:
            self._idle.set()

    def start(self) -> None:
        for connector in self.connectors.values():
            for runner in connector.runners:
                self._launch(runner)
        if not self._running:
            self._idle.set()

    async def wait(self) -> bool:
        """Until no task runs any more; True when none ended FAILED."""
        await self._idle.wait()
        return all(r.state != State.FAILED for c in self.connectors.values() for r in c.runners)

    async def stop(self) -> None:
        """Every task finishes its current batch and commits; tasks that overrun shutdown_timeout_ms
        are cancelled (an open transaction is then aborted, never half-committed)."""
        for connector in self.connectors.values():
            for runner in connector.runners:
                runner.stop()
        await asyncio.gather(*(self._stopped(runner, task) for runner, task in list(self._running.items())))

    @staticmethod
    async def _stopped(runner: TaskRunner, task: asyncio.Task) -> None:
        done, _ = await asyncio.wait({task}, timeout=runner.spec.runtime.shutdown_timeout_ms / 1000)
        if not done:
            log.warning("%s did not stop within shutdown_timeout_ms; cancelling it", runner.label)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # -- REST-facing control --------------------------------------------------------------------------

    def pause(self, name: str) -> None:
        connector = self.connectors[name]
        connector.paused = True
        for runner in connector.runners:
            runner.pause()

    def resume(self, name: str) -> None:
        connector = self.connectors[name]
        connector.paused = False
        for runner in connector.runners:
            runner.resume()

    def signal(self, name: str, signal: Mapping) -> None:
        """A signal for the connector's source (its first task: a binlog source runs one)."""
        self.connectors[name].runners[0].signal(signal)

    def restart(self, name: str, task_id: int | None = None) -> None:
        """Restart one task or all of a connector's; a task that had ended (FAILED, FINISHED) runs again."""
        for runner in self.connectors[name].runners:
            if task_id is not None and runner.task_id != task_id:
                continue
            if runner in self._running:
                runner.restart()
            else:
                runner.failures, runner.trace = 0, None
                self._launch(runner)
