"""What the REST API asks of a runtime (Kafka Connect calls it the herder), and the standalone one.

Both runtimes answer the same questions with the same JSON shapes, so `connect.rest` serves either:
the standalone `Worker` runs the connectors of its YAML files and cannot create or delete any;
`connect.distributed.DistributedWorker` keeps connectors in the log and shares them across workers.
"""

from __future__ import annotations

from typing import Any, Protocol

from .runtime import RunningConnector, TaskRunner, Worker


class RequestError(Exception):
    """A request the runtime refuses; `status` is the HTTP status the REST API answers with."""

    status = 400


class BadRequest(RequestError):
    status = 400


class NotFound(RequestError):
    status = 404


class Conflict(RequestError):
    status = 409


class Unsupported(RequestError):
    status = 405


class Herder(Protocol):
    mode: str
    worker_id: str

    async def forward_to(self) -> str | None:
        """The URL of the worker that must handle changes (the group's leader), or None: this one."""

    def names(self) -> list[str]: ...

    def info(self, name: str) -> dict[str, Any]:
        """{"name", "config", "tasks": [{"connector", "task"}], "type"}"""

    def config(self, name: str) -> dict[str, Any]: ...

    def status(self, name: str) -> dict[str, Any]:
        """{"name", "connector": {"state", "worker_id", "trace"?}, "tasks": [{"id", "state", "worker_id", ...}], "type"}"""

    def task_configs(self, name: str) -> list[dict[str, Any]]: ...

    def task_status(self, name: str, task: int) -> dict[str, Any]: ...

    def active_topics(self, name: str) -> list[str]:
        """The topics the connector's tasks have written to since it started or since a reset (KIP-558)."""

    async def reset_active_topics(self, name: str) -> None: ...

    def completed(self, config: dict[str, Any]) -> dict[str, Any]:
        """A connector config as given in a request, with the keys this runtime fills in itself."""

    async def offsets(self, name: str) -> list[dict[str, Any]]:
        """[{"partition": source partition, "offset": source offset}], as committed in the log now."""

    async def pause(self, name: str) -> None: ...

    async def resume(self, name: str) -> None: ...

    async def stop(self, name: str) -> None: ...

    async def restart(self, name: str, task: int | None = None, include_tasks: bool = False,
                      only_failed: bool = False) -> None: ...

    async def put(self, name: str, config: dict[str, Any], *, create_only: bool) -> bool:
        """Create or reconfigure a connector; True when it was created. 400/409 as Kafka Connect answers."""

    async def delete(self, name: str) -> None: ...

    async def signal(self, name: str, signal: dict[str, Any]) -> None:
        """Hand a signal ({"id", "type", "data"}) to the connector's running source; BadRequest if it refuses."""

    async def alter_offsets(self, name: str, offsets: list[dict[str, Any]] | None) -> None:
        """Write these offsets (KIP-875), or forget all of the connector's when None."""


class Standalone:
    """The standalone `Worker` as a herder: its connectors come from YAML files, fixed at start."""

    mode = "standalone"

    def __init__(self, worker: Worker, worker_id: str) -> None:
        self.worker = worker
        self.worker_id = worker_id

    async def forward_to(self) -> None:
        return None

    def completed(self, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def _connector(self, name: str) -> RunningConnector:
        if name not in self.worker.connectors:
            raise NotFound(f"connector {name} not found; running: {', '.join(sorted(self.worker.connectors))}")
        return self.worker.connectors[name]

    def _runner(self, name: str, task: int) -> TaskRunner:
        runners = {r.task_id: r for r in self._connector(name).runners}
        if task not in runners:
            raise NotFound(f"connector {name} has no task {task}; tasks: {', '.join(map(str, runners))}")
        return runners[task]

    def names(self) -> list[str]:
        return sorted(self.worker.connectors)

    def info(self, name: str) -> dict[str, Any]:
        connector = self._connector(name)
        return {"name": name, "config": connector.spec.public(), "type": connector.plugin.kind,
                "tasks": [{"connector": name, "task": r.task_id} for r in connector.runners]}

    def config(self, name: str) -> dict[str, Any]:
        return self._connector(name).spec.public()

    def status(self, name: str) -> dict[str, Any]:
        body = self._connector(name).status()
        body["connector"]["worker_id"] = self.worker_id
        for task in body["tasks"]:
            task["worker_id"] = self.worker_id
        return body

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        return [{"id": {"connector": name, "task": r.task_id}, "config": r.task_config.model_dump(mode="json")}
                for r in self._connector(name).runners]

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        return {**self._runner(name, task).status(), "worker_id": self.worker_id}

    def active_topics(self, name: str) -> list[str]:
        return sorted(set().union(*(r.active_topics for r in self._connector(name).runners)))

    async def reset_active_topics(self, name: str) -> None:
        for runner in self._connector(name).runners:
            runner.active_topics.clear()

    async def offsets(self, name: str) -> list[dict[str, Any]]:
        connector = self._connector(name)
        offsets = await connector.runners[0].store.load(name)
        return [{"partition": p, "offset": o} for p, o in offsets.all()]

    async def pause(self, name: str) -> None:
        self.worker.pause(self._connector(name).spec.name)

    async def resume(self, name: str) -> None:
        self.worker.resume(self._connector(name).spec.name)

    async def restart(self, name: str, task: int | None = None, include_tasks: bool = False,
                      only_failed: bool = False) -> None:
        if task is not None:
            self._runner(name, task)
            self.worker.restart(name, task)
            return
        if not include_tasks:
            self._connector(name)
            return  # the connector object holds no work here: only its tasks (includeTasks=true) restart
        for runner in self._connector(name).runners:
            if not only_failed or runner.state.value == "FAILED":
                self.worker.restart(name, runner.task_id)

    async def stop(self, name: str) -> None:
        raise Unsupported(_FIXED)

    async def signal(self, name: str, signal: dict[str, Any]) -> None:
        try:
            self.worker.signal(self._connector(name).spec.name, signal)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    async def put(self, name: str, config: dict[str, Any], *, create_only: bool) -> bool:
        raise Unsupported(_FIXED)

    async def delete(self, name: str) -> None:
        raise Unsupported(_FIXED)

    async def alter_offsets(self, name: str, offsets: list[dict[str, Any]] | None) -> None:
        raise Unsupported(_FIXED)


_FIXED = ("a standalone runtime (`binlake connect run`) runs the connectors of its YAML files; to create, "
          "change, stop or delete connectors (or their offsets) through the REST API, run distributed "
          "workers: `binlake connect worker --config WORKER.yaml`")
