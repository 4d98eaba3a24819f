"""The connector API: what a plugin implements and what the runtime hands it.

A plugin is a `SourceConnector` (or, for the sinks that follow, a `SinkConnector`) subclass, found
through the entry-point group `binlake.connectors` (see `connect.plugins`). It declares:

- `config_model`: a pydantic model of its own keys (subclass `ConnectorConfig`, which rejects unknown
  keys). The runtime validates the runtime keys (name, connector, bootstrap_servers, ...) itself and
  every other key of the YAML file with this model, so one error report covers both.
- `task_class`: the task that does the work; `task_configs()` splits the work between tasks.

A source task yields `Batch`es: records plus the source offset reached after them. The runtime
writes a batch's records and its offset atomically (exactly-once) or records first and offsets
after (at-least-once); on restart the task reads where to resume with `context.offsets.get(...)`.
A source transaction too large for one batch spans several: all but its last say
`ends_transaction=False`, and under exactly-once they share one Kafka transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

Json = Any
"""A value `json.dumps` accepts: dict, list, str, int, float, bool or None."""


class FatalError(Exception):
    """Raised by a task for a problem no restart can fix (the source is misconfigured, or refuses our
    credentials): the runtime leaves the task FAILED at once, with this message, instead of retrying.
    The message must say what to change."""


class ConnectorConfig(BaseModel):
    """Base of every plugin's config model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record for the log. `key`/`value`: bytes and str go as they are, anything else as JSON;
    a None value is a tombstone. `partition=None` lets the producer hash the key.

    The runtime reads records by attribute only, so a source may hand it any object with these six
    attributes (cdc's records are such objects: built once per row, they skip a conversion)."""

    topic: str
    value: Json | bytes
    key: Json | bytes = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Batch:
    """Records plus the position in the source reached after them.

    `source_partition` names the stream the offset belongs to (e.g. {"server": "shop"}) and
    `source_offset` is where to resume (e.g. {"file": "bin.000003", "pos": 4711}); both must be
    JSON. A batch may hold no records: it then only moves the offset (a heartbeat, or events the
    source filtered out).

    `ends_transaction=False` says the source's own transaction goes on in the next batch (a large
    transaction cut into bounded slices). Under exactly-once the runtime commits only after a batch
    that ends a source transaction, so a read_committed consumer sees each source transaction
    whole; the offset of a slice is then never committed (if the task stops inside a source
    transaction, the open Kafka transaction is aborted and the next run repeats it from its start).
    """

    records: Sequence[SourceRecord]
    source_partition: Mapping[str, Json]
    source_offset: Mapping[str, Json] | None
    ends_transaction: bool = True


class OffsetReader(Protocol):
    """Committed source offsets of one connector, as loaded when its task started."""

    def get(self, source_partition: Mapping[str, Json]) -> Mapping[str, Json] | None: ...

    def all(self) -> list[tuple[Mapping[str, Json], Mapping[str, Json]]]: ...


class LogAccess(Protocol):
    """The log as a task may use it besides writing batches: topics it keeps state in, partition counts."""

    async def partitions(self, topic: str, create: int = 1) -> int:
        """The topic's partition count; a missing topic is created with `create` partitions."""

    async def ensure_topic(self, topic: str, partitions: int = 1, compact: bool = False, *,
                           label: str = "topic", loss: str = "the state it holds") -> None:
        """Create the topic if missing; refuse an existing one that should be compacted and is not
        (the error names it as `label`, e.g. "schema history topic", and says retention would delete `loss`)."""

    async def read(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) of every committed record, oldest first, up to the end (read_committed)."""

    def follow(self, topic: str, start: dict[int, int]) -> AsyncIterator[tuple[int, int, bytes | None, bytes | None]]:
        """(partition, offset, key, value) of each committed record as it arrives, from `start` (partition ->
        offset; other partitions from their beginning), creating the topic if missing."""


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What the runtime tells a task: who it is, where it stopped last time, and the log."""

    connector: str
    """The connector's name: the logical server name and default topic prefix."""
    task_id: int
    offsets: OffsetReader
    log: LogAccess


class Task(ABC):
    """What source and sink tasks share: their config and context; `start` and `stop` hooks."""

    def __init__(self, config: ConnectorConfig, context: TaskContext) -> None:
        self.config = config
        self.context = context

    async def start(self) -> None:
        """Open connections."""

    async def stop(self) -> None:
        """Release what `start` opened. Called once, also after `start` failed halfway: must not raise then."""


class SourceTask(Task):
    """One unit of work of a source connector. Runs on the event loop; the runtime calls `start`
    (read `self.context.offsets` there to find where to resume), iterates `batches()`, and calls
    `stop` once, also after `start` or `batches` raised.

    Stopping: when the runtime stops or restarts the task (SIGTERM, REST restart) while it waits
    inside `batches()`, the pending `__anext__` is cancelled: CancelledError arrives at the task's
    `await`, and nothing it has not yielded yet is written. A batch already yielded is always
    written and committed first.
    """

    def metrics(self) -> Mapping[str, float]:
        """The source's own gauges for the metrics endpoint, e.g. {"binlog_lag_seconds": 0.4}; exported as
        `binlake_connect_source_<name>{connector,task}`. Called on the event loop at each scrape: cheap
        reads only."""
        return {}

    def details(self) -> Mapping[str, Json]:
        """What the REST status shows of the source beside its gauges (e.g. an incremental snapshot's table
        and ETA). Cheap reads only."""
        return {}

    def signal(self, signal: Mapping[str, Json]) -> None:
        """A signal from the REST API ({"id", "type", "data"}, Debezium's shape). Raise ValueError, saying
        why, for one the source refuses; sources without signals refuse them all."""
        raise ValueError(f"{type(self).__name__} takes no signals")

    @abstractmethod
    def batches(self) -> AsyncGenerator[Batch, None]:
        """An async generator: yield batches forever, or return when the source is exhausted (the task
        then finishes). The runtime closes it (`aclose`) when the task stops."""


@dataclass(frozen=True, slots=True)
class SinkRecord:
    """A record read from the log, as a sink task receives it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()


class SinkTask(Task):
    """One unit of work of a sink connector: `put` receives records in log order per partition;
    `flush` must make everything put so far durable before the runtime commits `offsets` (the
    next offset to read per (topic, partition)). A sink that stores offsets with its data (the
    exactly-once way) returns them from `committed` on start."""

    async def committed(self) -> dict[tuple[str, int], int]:
        """Offsets the sink stored itself, to resume from; empty means use the runtime's."""
        return {}

    @abstractmethod
    async def put(self, records: Sequence[SinkRecord]) -> None: ...

    async def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Make every record put so far durable."""


class Connector(ABC):
    """A plugin: its config model, its task class, and how it splits work into tasks."""

    kind: ClassVar[str]
    config_model: ClassVar[type[ConnectorConfig]]
    task_class: ClassVar[type[Task]]

    def __init__(self, name: str, config: ConnectorConfig) -> None:
        self.name = name
        self.config = config

    def task_configs(self, max_tasks: int) -> list[ConnectorConfig]:
        """One config per task, at most `max_tasks`. Most sources (a binlog is one stream) run one."""
        return [self.config]


class SourceConnector(Connector):
    kind = "source"
    task_class: ClassVar[type[SourceTask]]


class SinkConnector(Connector):
    """The standalone runtime does not run sinks; the distributed worker will."""

    kind = "sink"
    task_class: ClassVar[type[SinkTask]]
