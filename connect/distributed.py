"""Distributed workers (Kafka Connect's distributed mode): connectors survive the machine they run on.

Workers with one `group_id` form a group (protocol type "connect") on the log's group coordinator.
Connectors live in the config topic, statuses in the status topic, source offsets in the offsets
topic (`connect.cluster_state`). The group's leader decides who runs which connector and task
(`connect.assignor`, incremental cooperative); every worker runs its share with the same `TaskRunner`
as `connect run`, so restarts, backoff and exactly-once delivery are the standalone ones.

Failover: when a worker dies, the coordinator drops it after `session.timeout.ms`, the others rejoin,
and the leader gives its tasks out again. A task's transactional id is derived from its connector and
task id, so the new instance's InitProducerId aborts what the dead one left open and fences it if it
was only cut off: its records and offsets were committed together or not at all, and the new instance
resumes from the last committed offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Coroutine
from typing import Any

from aiokafka.client import AIOKafkaClient

from common.kafka_group import GroupMember, MembershipLost
from common.log_topics import LogTopics

from . import config as connect_config
from .api import ConnectorConfig
from .assignor import Assignment, LeaderMemory, MemberState, Unit, assign, unit_label, unit_order
from .cluster_state import StateTopics, split_config_key
from .herder import BadRequest, Conflict, NotFound
from .producer import make_producer, start_producer
from .runtime import State, TaskRunner, offset_store, split_tasks
from .worker_config import WorkerConfig

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "connect"
PROTOCOL = "binlake-cooperative"  # not Kafka's "sessioned": a Java worker in the group is refused, not misread


class Prepared:
    """A connector's config as this worker validated it: its spec and task configs, or why it is invalid."""

    def __init__(self, key: str, raw: dict[str, Any], worker: WorkerConfig, name: str) -> None:
        self.key = key
        self.error: str | None = None
        self.spec: connect_config.ConnectorSpec | None = None
        self.task_configs: list[ConnectorConfig] = []
        self.kind = "source"
        try:
            spec = connect_config.validate(with_worker_defaults(raw, worker, name), f"connector {name}", os.environ)
            self.kind = spec.plugin.kind
            _, self.task_configs = split_tasks(spec)
            self.spec = spec  # only a config that also yields tasks counts as valid
        except (connect_config.ConfigError, ValueError) as exc:
            self.error = str(exc)


def with_worker_defaults(raw: dict[str, Any], worker: WorkerConfig, name: str) -> dict[str, Any]:
    """A connector config from the REST API, completed with the worker's log and offsets topic."""
    offsets = {"topic": worker.offset_topic, "partitions": worker.offset_partitions,
               "replication_factor": worker.offset_replication_factor}
    given = raw.get("offsets")
    return {"bootstrap_servers": worker.bootstrap_servers, "security": worker.security.as_yaml(), **raw, "name": name,
            "offsets": {**offsets, **given} if isinstance(given, dict) else given or offsets}


class DistributedWorker:
    """One distributed worker: group membership, its share of connectors and tasks, and the answers to
    REST requests (it implements `connect.herder.Herder`). Event loop only."""

    mode = "distributed"

    def __init__(self, config: WorkerConfig, url: str) -> None:
        self.settings = config
        self.url = url
        self.worker_id = url.removeprefix("http://").removeprefix("https://")
        self.topics = StateTopics(config.bootstrap_servers, config.config_topic, config.status_topic,
                                  self._on_config, self._on_topic_reset, config.security)
        self.memory = LeaderMemory()
        self.assignment: Assignment | None = None
        self.connectors: set[str] = set()  # connector units this worker owns
        self.runners: dict[Unit, TaskRunner] = {}
        self._running: dict[TaskRunner, asyncio.Task] = {}
        self._prepared: dict[str, Prepared] = {}
        self._rejoin = asyncio.Event()
        self._joined = asyncio.Event()
        self._locks: dict[Unit, asyncio.Lock] = {}
        self._background: set[asyncio.Task] = set()
        self._loop: asyncio.Task | None = None
        self._applying: asyncio.Task | None = None
        self.client: AIOKafkaClient | None = None
        self.member: GroupMember | None = None

    # -- life -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        c = self.settings
        for topic, partitions, replication, label in (
                (c.config_topic, 1, c.config_replication_factor, "config topic"),
                (c.status_topic, c.status_partitions, c.status_replication_factor, "status topic"),
                (c.offset_topic, c.offset_partitions, c.offset_replication_factor, "offsets topic")):
            await LogTopics(c.bootstrap_servers, replication, security=c.security).ensure_topic(
                topic, partitions, compact=True, label=label, loss="the connectors' state")
        await self.topics.start(await LogTopics(c.bootstrap_servers, security=c.security).partitions(c.status_topic))
        # A JoinGroup waits at the coordinator for every member, up to the rebalance timeout.
        self.client = AIOKafkaClient(bootstrap_servers=c.bootstrap_servers,
                                     request_timeout_ms=c.rebalance_timeout_ms + 10_000, **c.security.aiokafka())
        await self.client.bootstrap()
        self.member = GroupMember(self.client, c.group_id, PROTOCOL_TYPE, session_timeout_ms=c.session_timeout_ms,
                                  rebalance_timeout_ms=c.rebalance_timeout_ms)
        self._loop = asyncio.create_task(self._membership(), name="connect-membership")

    async def wait(self) -> None:
        """Until the membership loop fails (e.g. the group belongs to something else): raises why."""
        await self._loop

    async def shutdown(self) -> None:
        """Tasks finish their batch and commit, then the worker leaves the group so the others take over
        at once."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._applying is not None:
            await asyncio.gather(self._applying, return_exceptions=True)
        await self._apply(frozenset())
        if self.member is not None:
            await self.member.leave()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.topics.stop()
        if self.client is not None:
            await self.client.close()

    # -- membership -----------------------------------------------------------------------------------

    async def _membership(self) -> None:
        while True:
            owned = frozenset(self.runners) | {(name, None) for name in self.connectors}
            metadata = MemberState(self.url, self.topics.state.config_offset, owned).encode()
            self._rejoin.clear()
            raw = await self.member.join(PROTOCOL, metadata, self._assign)
            self.assignment = assignment = Assignment.decode(raw, self.member.generation)
            self._joined.set()
            log.info("generation %d: running %s (leader %s)", assignment.generation,
                     ", ".join(map(unit_label, sorted(assignment.units, key=unit_order))) or "nothing",
                     assignment.leader_url)
            await self.topics.catch_up(assignment.config_offset)
            self._applying = applying = asyncio.create_task(self._apply(assignment.units))
            rejoin_in = assignment.delay_ms / 1000 if assignment.delay_ms else None
            await self._heartbeat(applying, rejoin_in)
            await applying  # done by now; raises what it raised

    async def _heartbeat(self, applying: asyncio.Task, rejoin_in: float | None) -> None:
        """Heartbeat every heartbeat.interval.ms until `applying` is done and the group rebalances (or this
        worker must rejoin: asked to, or a departed worker's units waited `rejoin_in` seconds)."""
        deadline = None if rejoin_in is None else time.monotonic() + rejoin_in
        interval = self.settings.heartbeat_interval_ms / 1000
        next_beat = time.monotonic() + interval
        rebalancing = False
        rejoin = asyncio.ensure_future(self._rejoin.wait())
        try:
            while True:
                now = time.monotonic()
                if applying.done() and (applying.result() or rebalancing or rejoin.done()
                                        or (deadline is not None and now >= deadline)):
                    return  # (applying.result(): units were revoked and must go to their new owners now)
                if now >= next_beat:
                    next_beat = now + interval
                    try:
                        rebalancing = rebalancing or not await self.member.heartbeat()
                    except MembershipLost as exc:
                        log.warning("%s: this worker was dropped from the group; stopping its tasks before "
                                    "rejoining", exc)
                        await applying
                        await self._apply(frozenset())
                        return
                    continue
                wake = next_beat if deadline is None else min(next_beat, deadline)
                await asyncio.wait({rejoin} if applying.done() else {applying}, timeout=max(0.0, wake - now))
        finally:
            rejoin.cancel()

    async def _assign(self, members: dict[str, bytes]) -> dict[str, bytes]:
        """The leader's part of a rebalance: read the config topic to its end, then assign."""
        await self.topics.catch_up()
        states = {m: MemberState.decode(data) for m, data in members.items()}
        units = self._units()
        assignments, delay_ms = assign(states, units, self.memory, time.monotonic(),
                                       self.settings.scheduled_rebalance_max_delay_ms)
        offset = self.topics.state.config_offset
        log.info("leading a rebalance of %d worker(s) over %d unit(s)%s", len(states), len(units),
                 f"; a departed worker's units wait {delay_ms} ms" if delay_ms else "")
        return {m: Assignment(self.url, offset, units, delay_ms).encode() for m, units in assignments.items()}

    def _units(self) -> set[Unit]:
        units: set[Unit] = set()
        for name in self.topics.state.configs:
            units.add((name, None))
            if self.topics.state.target_state(name) != "STOPPED":
                units |= {(name, i) for i in range(len(self._prepare(name).task_configs))}
        return units

    def _prepare(self, name: str) -> Prepared:
        raw = self.topics.state.configs[name]
        key = json.dumps(raw, sort_keys=True)
        prepared = self._prepared.get(name)
        if prepared is None or prepared.key != key:
            prepared = self._prepared[name] = Prepared(key, raw, self.settings, name)
        return prepared

    # -- running units --------------------------------------------------------------------------------

    async def _apply(self, units: frozenset[Unit]) -> bool:
        """Run exactly `units`: stop the others (each commits its batch), start the new ones. True when
        something this worker owned was taken away."""
        owned = set(self.runners) | {(name, None) for name in self.connectors}
        revoked = owned - units
        await asyncio.gather(*(self._stop_task(unit) for unit in revoked if unit[1] is not None))
        self.connectors -= {name for name, task in revoked if task is None}
        for name, task in sorted(units - owned, key=unit_order):
            if task is None:
                self.connectors.add(name)
                self._publish_connector(name)
            else:
                await self._start_task((name, task))
        return bool(revoked)

    def _lock(self, unit: Unit) -> asyncio.Lock:
        """Starting, stopping and restarting one unit take turns: two instances of a task must never run."""
        return self._locks.setdefault(unit, asyncio.Lock())

    async def _start_task(self, unit: Unit) -> None:
        async with self._lock(unit):
            self._start_runner(unit)

    async def _stop_task(self, unit: Unit) -> None:
        async with self._lock(unit):
            await self._stop_runner(unit)

    async def _restart_task(self, unit: Unit) -> None:
        """A fresh runner with the connector's current config (a new attempt right away), if still ours. The
        unit stays ours meanwhile: a rebalance during the restart must not give it to another worker."""
        async with self._lock(unit):
            if unit in self.runners:
                await self._halt(self.runners[unit])
                del self.runners[unit]
                self._start_runner(unit)

    def _start_runner(self, unit: Unit) -> None:
        name, task = unit
        prepared = self._prepare(name) if name in self.topics.state.configs else None
        if (unit in self.runners or prepared is None or prepared.spec is None or task >= len(prepared.task_configs)
                or self.topics.state.target_state(name) == "STOPPED"):
            return  # running already, or deleted, reconfigured or stopped since the assignment (the next rebalance drops it)
        runner = TaskRunner(prepared.spec, task, prepared.task_configs[task])
        runner.on_state = self._publish_task
        runner.on_topic = self._publish_topic
        if self.topics.state.target_state(name) == "PAUSED":
            runner.pause()
        self.runners[unit] = runner
        self._running[runner] = asyncio.create_task(runner.run(), name=runner.label)
        self._running[runner].add_done_callback(lambda _: self._running.pop(runner, None))

    async def _stop_runner(self, unit: Unit) -> None:
        runner = self.runners.pop(unit, None)
        if runner is not None:
            await self._halt(runner)

    async def _halt(self, runner: TaskRunner) -> None:
        runner.on_state = runner.on_topic = None  # its next owner reports its state from now on
        task = self._running.get(runner)
        if task is None:
            return
        runner.stop()
        done, _ = await asyncio.wait({task}, timeout=runner.spec.runtime.shutdown_timeout_ms / 1000)
        if not done:
            log.warning("%s did not stop within shutdown_timeout_ms; cancelling it", runner.label)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        log.info("%s stopped on this worker", runner.label)

    def _publish_connector(self, name: str) -> None:
        if name not in self.connectors or name not in self.topics.state.configs:
            return
        prepared = self._prepare(name)
        target = self.topics.state.target_state(name)
        state = "FAILED" if prepared.error else {"STARTED": "RUNNING"}.get(target, target)
        self._spawn(self.topics.write_status(f"status-connector-{name}", self._status(state, prepared.error)))

    def _publish_task(self, runner: TaskRunner) -> None:
        self._spawn(self.topics.write_status(f"status-task-{runner.spec.name}-{runner.task_id}",
                                             self._status(runner.state.value, runner.trace)))

    def _publish_topic(self, runner: TaskRunner, topic: str) -> None:
        name = runner.spec.name
        if topic not in self.topics.state.active_topics(name):
            self._spawn(self.topics.write_status(f"topic-{topic}-{name}", {"topic": {
                "name": topic, "connector": name, "task": runner.task_id, "discoverTimestamp": int(time.time() * 1000)}}))

    def _on_topic_reset(self, name: str, topic: str) -> None:
        """The topic is active again for tasks here once they next write to it."""
        for (connector, _), runner in self.runners.items():
            if connector == name:
                runner.active_topics.discard(topic)

    def _status(self, state: str, trace: str | None) -> dict[str, Any]:
        generation = self.assignment.generation if self.assignment else -1
        return {"state": state, "trace": trace, "worker_id": self.worker_id, "generation": generation}

    def _spawn(self, work: Coroutine) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed: %s", task.get_coro().__qualname__, task.exception(), exc_info=task.exception())

    # -- config records, as every worker reads them ---------------------------------------------------

    def _on_config(self, key: str, value: Any) -> None:
        kind, name = split_config_key(key)
        if kind in ("connector", "target-state") and self.member is not None and self.member.is_leader:
            self._rejoin.set()  # connectors or task counts may have changed: rebalance
        mine = sorted(u for u in self.runners if u[0] == name)
        target = self.topics.state.target_state(name)
        if kind == "connector" and value is None:
            self._prepared.pop(name, None)
        if (kind == "connector" and value is None) or (kind == "target-state" and target == "STOPPED"):
            for unit in mine:  # deleted or stopped: its tasks stop now, not at the rebalance that follows
                self._spawn(self._stop_task(unit))
            self._publish_connector(name)
        elif kind == "connector":
            for unit in mine:  # reconfigured: its tasks start over with the new config
                self._spawn(self._restart_task(unit))
            self._publish_connector(name)
        elif kind == "target-state":
            self._publish_connector(name)
            for unit in mine:
                self.runners[unit].pause() if target == "PAUSED" else self.runners[unit].resume()
        elif kind == "restart" and value is not None:
            self._restart(name, value, mine)

    def _restart(self, name: str, request: dict[str, Any], mine: list[Unit]) -> None:
        if request["task"] is None:
            self._prepared.pop(name, None)  # the connector restarts: validate its config again
            self._publish_connector(name)
            if not request["include_tasks"]:
                return
        for unit in mine:
            if request["task"] is not None and unit[1] != request["task"]:
                continue
            if not request["only_failed"] or self.runners[unit].state == State.FAILED:
                self._spawn(self._restart_task(unit))

    # -- the REST API's questions (connect.herder.Herder) ---------------------------------------------

    async def forward_to(self) -> str | None:
        """The leader of the current (or, during a rebalance, the last) generation; a worker still joining
        its group waits for it up to rebalance.timeout.ms."""
        if self.assignment is None:
            try:
                async with asyncio.timeout(self.settings.rebalance_timeout_ms / 1000):
                    await self._joined.wait()
            except TimeoutError:
                raise Conflict("this worker has not joined its group yet, so it does not know the leader; "
                               "try again") from None
        if self.member.is_leader:
            return None
        return self.assignment.leader_url

    def completed(self, config: dict[str, Any]) -> dict[str, Any]:
        if isinstance(config.get("name"), str):
            return with_worker_defaults(config, self.settings, config["name"])
        return {k: v for k, v in with_worker_defaults(config, self.settings, "").items() if k != "name"}

    def _config_of(self, name: str) -> dict[str, Any]:
        configs = self.topics.state.configs
        if name not in configs:
            raise NotFound(f"connector {name} not found; connectors: {', '.join(sorted(configs)) or 'none'}")
        return configs[name]

    def names(self) -> list[str]:
        return sorted(self.topics.state.configs)

    def config(self, name: str) -> dict[str, Any]:
        self._config_of(name)
        prepared = self._prepare(name)
        return prepared.spec.public() if prepared.spec else self._config_of(name)

    def info(self, name: str) -> dict[str, Any]:
        return {"name": name, "config": self.config(name), "type": self._prepare(name).kind,
                "tasks": [{"connector": name, "task": i} for i in range(self._task_count(name))]}

    def _task_count(self, name: str) -> int:
        if self.topics.state.target_state(name) == "STOPPED":
            return 0
        return len(self._prepare(name).task_configs)

    def status(self, name: str) -> dict[str, Any]:
        self._config_of(name)
        state = self.topics.state
        return {"name": name, "connector": _shown(state.connector_status(name)),
                "tasks": [{"id": i, **_shown(state.task_status(name, i))} for i in range(self._task_count(name))],
                "type": self._prepare(name).kind}

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        self._config_of(name)
        return [{"id": {"connector": name, "task": i}, "config": c.model_dump(mode="json")}
                for i, c in enumerate(self._prepare(name).task_configs) if i < self._task_count(name)]

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        if not 0 <= task < self._task_count(name):
            raise NotFound(f"connector {name} has no task {task}")
        return {"id": task, **_shown(self.topics.state.task_status(name, task))}

    def active_topics(self, name: str) -> list[str]:
        self._config_of(name)
        return sorted(self.topics.state.active_topics(name))

    async def reset_active_topics(self, name: str) -> None:
        self._config_of(name)
        for key in self.topics.state.active_topics(name).values():
            await self.topics.write_status(key, None)

    async def offsets(self, name: str) -> list[dict[str, Any]]:
        store = offset_store(self._valid_spec(name))
        await store.start()
        return [{"partition": p, "offset": o} for p, o in (await store.load(name)).all()]

    def _valid_spec(self, name: str) -> connect_config.ConnectorSpec:
        self._config_of(name)
        prepared = self._prepare(name)
        if prepared.spec is None:
            raise Conflict(f"connector {name} has an invalid config: {prepared.error}")
        return prepared.spec

    async def _write(self, key: str, value: Any) -> None:
        await self.topics.catch_up(await self.topics.write_config(key, value))

    async def put(self, name: str, config: dict[str, Any], *, create_only: bool) -> bool:
        if config.get("name", name) != name:
            raise BadRequest(f"the config names connector {config['name']!r}, the request {name!r}")
        exists = name in self.topics.state.configs
        if create_only and exists:
            raise Conflict(f"Connector {name} already exists")
        checked = Prepared("", config, self.settings, name)  # what every worker will do with it
        if checked.error is not None:
            raise BadRequest(checked.error)
        await self._write(f"connector-{name}", {**config, "name": name})
        return not exists

    async def delete(self, name: str) -> None:
        self._config_of(name)
        tasks = [key for key in self.topics.state.statuses if key.startswith(f"status-task-{name}-")]
        await self._write(f"connector-{name}", None)
        await self._write(f"target-state-{name}", None)
        topics = self.topics.state.active_topics(name).values()  # (as Kafka Connect forgets them, KIP-558)
        for key in [f"status-connector-{name}", *tasks, *topics]:
            await self.topics.write_status(key, None)

    async def signal(self, name: str, signal: dict[str, Any]) -> None:
        self._config_of(name)
        runner = self.runners.get((name, 0))
        if runner is None:
            where = self.topics.state.task_status(name, 0) or {}
            raise Conflict(f"task 0 of {name} does not run on this worker ({where.get('worker_id', 'unassigned')} "
                           "runs it): send the signal there, or insert it into the signal table")
        try:
            runner.signal(signal)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    async def pause(self, name: str) -> None:
        await self._target(name, "PAUSED")

    async def resume(self, name: str) -> None:
        await self._target(name, "STARTED")

    async def stop(self, name: str) -> None:
        await self._target(name, "STOPPED")

    async def _target(self, name: str, state: str) -> None:
        self._config_of(name)
        await self._write(f"target-state-{name}", {"state": state})

    async def restart(self, name: str, task: int | None = None, include_tasks: bool = False,
                      only_failed: bool = False) -> None:
        if task is not None:
            self.task_status(name, task)
        self._config_of(name)
        await self._write(f"restart-{name}", {"task": task, "include_tasks": include_tasks,
                                              "only_failed": only_failed})

    async def alter_offsets(self, name: str, offsets: list[dict[str, Any]] | None) -> None:
        """KIP-875: only for a STOPPED connector. Every task's transactional id is initialized first,
        which fences any instance still running somewhere, then the offsets are written in a
        transaction of task 0 (or acknowledged by all replicas under at_least_once)."""
        spec = self._valid_spec(name)
        if self.topics.state.target_state(name) != "STOPPED":
            raise BadRequest(f"Connectors must be in the STOPPED state before their offsets can be modified. "
                             f"This can be done for the specified connector by issuing a 'PUT' request to the "
                             f"'/connectors/{name}/stop' endpoint")
        store = offset_store(spec)
        await store.start()
        if offsets is None:
            offsets = [{"partition": p, "offset": None} for p, _ in (await store.load(name)).all()]
        records = [store.record(name, o["partition"], o["offset"]) for o in offsets]
        runtime = spec.runtime
        producers = [make_producer(runtime, i) for i in range(max(1, len(self._prepare(name).task_configs)))]
        try:
            for producer in producers:
                await start_producer(producer, runtime)
            writer = producers[0]
            transactional = runtime.delivery == "exactly_once"
            if transactional:
                await writer.begin_transaction()
            sent = [await writer.send(r.topic, r.value, key=r.key) for r in records]
            await asyncio.gather(*sent)
            if transactional:
                await writer.commit_transaction()
        finally:
            for producer in producers:
                with contextlib.suppress(Exception):
                    await producer.stop()


def _shown(status: dict[str, Any] | None) -> dict[str, Any]:
    """A status record as the REST API shows it (Kafka Connect omits an empty trace)."""
    if status is None:
        return {"state": "UNASSIGNED", "worker_id": None}
    shown = {"state": status["state"], "worker_id": status["worker_id"]}
    if status.get("trace"):
        shown["trace"] = status["trace"]
    return shown
