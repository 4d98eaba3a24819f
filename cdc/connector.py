"""The `mysql` connector plugin: runs `MySqlSource` under the connector runtime (connect/).

    name: shop
    connector: mysql
    bootstrap_servers: 127.0.0.1:9092
    database: {host: 127.0.0.1, port: 3306, user: cdc, password: "${MYSQL_PASSWORD}", server_id: 5401}
    tables: {include: ['shop\\..*'], exclude: []}

With `database: {hosts: ['db1:3306', 'db2:3306'], ...}` (and `restart_by: gtid`) the source follows a
primary failover: each attempt reads from the first server that answers and holds every GTID already
published (cdc/failover.py).

The source (binlog socket, SQLAlchemy: blocking, and most of the connector's CPU) runs in a child
process (cdc/source_process.py); a thread receives its batches and hands them to the event loop
through a small bounded queue (`_Handoff`): decoding goes on, on another core, while the runtime
writes and commits. Each batch carries the schema-history records recorded since the previous one
(`TopicHistoryStore`), so history, change events and offset land in one Kafka transaction, and a
batch that slices a large MySQL transaction says so (`ends_transaction=False`): the runtime keeps
the Kafka transaction open until the MySQL transaction's last slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import AsyncGenerator
from typing import Literal

import pymysql
from pydantic import Field, SecretStr, field_validator, model_validator

from cdc import signals
from cdc.canal_fields import CanalFields
from cdc.canal_routing import CanalMq
from cdc.config import (SourceConfig, StartAt, check_address, check_avro, check_canal_outputs, check_regexes,
                        check_start)
from cdc.errors import CdcError
from cdc.schema_registry import Incompatible
from cdc.source_process import SourceProcess, warm_up
from common.schema_registry import SchemaRegistrySettings
from connect.api import Batch, ConnectorConfig, FatalError, SourceConnector, SourceTask

log = logging.getLogger(__name__)
_ACCESS_DENIED = 1045
_STOP = object()


class DatabaseConfig(ConnectorConfig):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str
    password: SecretStr = SecretStr("")
    server_id: int = Field(ge=1, lt=2**32)
    """Replica id the connector uses; unique among the server's replicas."""
    hosts: list[str] = []
    """Servers of one replication topology (`host:port`), instead of `host`: when the connection is lost the
    source resumes on the first that answers and holds every published GTID (cdc/failover.py)."""
    failover_catch_up_ms: int = Field(30_000, ge=0)
    """How long a server that lacks published GTIDs (a replica still applying its relay log) is waited for."""
    ssl_mode: Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"] = "preferred"
    """TLS to the server (docs/cdc.md's ssl_mode); verify_ca and verify_identity need ssl_ca."""
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None

    @field_validator("hosts")
    @classmethod
    def _addresses(cls, hosts: list[str]) -> list[str]:
        return [check_address(h) for h in hosts]

    @model_validator(mode="after")
    def _host_or_hosts(self) -> "DatabaseConfig":
        if self.hosts and "host" in self.model_fields_set:
            raise ValueError("give database.host or database.hosts, not both (hosts: ['a:3306', 'b:3306'] "
                             "lists every server, the first one included)")
        return self


class TablesConfig(ConnectorConfig):
    include: list[str] = []
    """Anchored regexes over `db.table`; none: every table outside the system databases."""
    exclude: list[str] = []

    @field_validator("include", "exclude")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        return check_regexes(patterns)


class SignalsConfig(ConnectorConfig):
    table: str | None = Field(None, pattern=r"^[^.`]+\.[^.`]+$")
    """`db.table` of the signal table `(id VARCHAR(64) PRIMARY KEY, type VARCHAR(32), data TEXT)`: signals are rows
    inserted into it, read from the binlog; incremental snapshots write their watermarks to it."""
    topic: str | None = None
    """A topic of signals (Debezium's Kafka signal channel): key = the logical server name (`topic_prefix`, by
    default the connector's name), value = the signal as JSON `{"id", "type", "data"}`. Without a `table`, the
    incremental snapshots are read-only: watermarks are the server's GTID sets, nothing is written to the source."""


class MySqlConfig(ConnectorConfig):
    database: DatabaseConfig
    tables: TablesConfig = TablesConfig()
    snapshot: Literal["initial", "initial_only", "when_needed", "no_data", "always"] = "initial"
    snapshot_chunk_rows: int = Field(10_000, ge=1)
    format: Literal["debezium", "canal"] = "debezium"
    value_format: Literal["json", "avro"] = "json"
    """avro: Debezium's envelope in Avro, in Confluent's wire format, its schema registered as `<topic>-value` in
    `schema_registry` (docs/connect.md, "Avro")."""
    key_format: Literal["json", "avro"] = "json"
    """avro: the primary-key record in Avro, registered as `<topic>-key` (partitions follow its bytes)."""
    schema_registry: SchemaRegistrySettings | None = None
    """`{url, basic_auth_user, basic_auth_password, ca_file}` of a schema registry (Confluent's REST API)."""
    schema_incompatible: Incompatible = "stop"
    """A table change the subject's compatibility level forbids: `stop` the connector (with the subject, both
    schemas and what to do), or `new_subject_version_with_none`: set the subject's level to NONE and register it."""
    decimal_handling_mode: Literal["precise", "string"] = "precise"
    """DECIMAL in Avro: Kafka Connect's Decimal (bytes, exact) or its text, as Debezium's option of that name."""
    restart_by: Literal["position", "gtid"] = "position"
    topic_prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    """Logical server name: prefix of every topic, `source.name` of events. Default: the connector name."""
    topic_partitions: int = Field(1, ge=1)
    """Partitions of the topics the connector creates; existing topics keep theirs."""
    tombstones_on_delete: bool = True
    transaction_metadata: bool = False
    heartbeat_interval_ms: int = Field(10_000, ge=0)
    heartbeat_query: str | None = None
    """SQL run on the source at each heartbeat while the captured tables are idle, so the stored position
    moves before the server purges its binlog (e.g. an upsert into a heartbeat table)."""
    max_batch_records: int = Field(10_000, ge=1)
    max_batch_bytes: int = Field(8 << 20, ge=1)
    """Keys and values of one batch: a larger MySQL transaction is written in slices of this size (one Kafka
    transaction under exactly-once), so memory does not grow with a transaction's size or its rows' width."""
    max_queue_bytes: int = Field(64 << 20, ge=1)
    """Batches decoded ahead of the writer (Debezium's max.queue.size.in.bytes, on by default)."""
    ddl_skip_unparseable: bool = False
    schema_history_topic: str | None = None
    """Compacted topic of the schema history. Default: `<name>.schema-history`."""
    signals: SignalsConfig = SignalsConfig()
    canal_entries: str | None = None
    """With format: canal: write Canal's change entries (protobuf), all on one partition of this topic: the
    entry log `binlake canal run` serves to Canal's TCP clients (docs/canal.md)."""
    canal_skip: list[Literal["insert", "update", "delete", "ddl"]] = []
    """With canal or canal_entries: the changes Canal's event filters leave out (canal.instance.filter.dml.insert,
    .update, .delete, filter.query.ddl; filter.rows: every row change)."""
    canal: CanalMq | None = None
    """Canal's MQ routing and batching (with format: canal): canal.mq.topic, dynamicTopic, partition,
    partitionsNum, partitionHash, dynamicTopicPartitionNum, database.hash, and flat_message_rows (docs/canal.md)."""

    canal_fields: CanalFields | None = None
    """With canal or canal_entries: the columns Canal's messages carry, `{include: {db.table: [columns]}, exclude:
    {...}}` (canal.instance.filter.field, filter.black.field; cdc/canal_fields.py)."""
    start: StartAt | None = None
    """Where to stream from when no offset is stored (with snapshot: no_data): `{file, pos}`, `{gtids}` (with
    restart_by: gtid), `{timestamp_ms}` or `{file, timestamp_ms}` (cdc/start.py). A stored offset wins."""

    @model_validator(mode="after")
    def _start_without_snapshot(self) -> "MySqlConfig":
        if self.start is not None:
            check_start(self.start, self.snapshot, self.restart_by)
        return self

    @model_validator(mode="after")
    def _avro_registers(self) -> "MySqlConfig":
        check_avro(self.format, self.value_format, self.key_format, self.schema_registry)
        return self

    @model_validator(mode="after")
    def _canal_outputs_write_canal(self) -> "MySqlConfig":
        check_canal_outputs(self.format, {"canal": self.canal, "canal_entries": self.canal_entries},
                            self.canal_fields)
        return self

    @model_validator(mode="after")
    def _failover_by_gtid(self) -> "MySqlConfig":
        if len(self.database.hosts) > 1 and self.restart_by != "gtid":
            raise ValueError(f"database.hosts lists {len(self.database.hosts)} servers, so set restart_by: gtid: "
                             "following a failover resumes by GTID set (another server's binlog files and positions "
                             "are not this one's); MySQL needs gtid_mode=ON, MariaDB always has GTIDs")
        return self

    def source_config(self, connector: str) -> SourceConfig:
        db = self.database
        return SourceConfig(
            name=self.topic_prefix or connector, host=db.host, port=db.port, hosts=tuple(db.hosts),
            failover_catch_up_s=db.failover_catch_up_ms / 1000, user=db.user, ssl_mode=db.ssl_mode, ssl_ca=db.ssl_ca,
            ssl_cert=db.ssl_cert, ssl_key=db.ssl_key,
            password=db.password.get_secret_value(), server_id=db.server_id, format=self.format,
            value_format=self.value_format, key_format=self.key_format, schema_registry=self.schema_registry,
            schema_incompatible=self.schema_incompatible, decimal_handling_mode=self.decimal_handling_mode,
            snapshot=self.snapshot, restart_by=self.restart_by, snapshot_chunk_rows=self.snapshot_chunk_rows,
            table_include=tuple(self.tables.include), table_exclude=tuple(self.tables.exclude),
            topic_partitions=self.topic_partitions, tombstones_on_delete=self.tombstones_on_delete,
            transaction_metadata=self.transaction_metadata, heartbeat_interval_s=self.heartbeat_interval_ms / 1000,
            heartbeat_query=self.heartbeat_query,
            max_batch_records=self.max_batch_records, max_batch_bytes=self.max_batch_bytes,
            ddl_skip_unparseable=self.ddl_skip_unparseable, signal_table=self.signals.table,
            signal_topic=self.signals.topic, canal_mq=self.canal, canal_entries=self.canal_entries,
            canal_skip=tuple(self.canal_skip), canal_fields=self.canal_fields, start=self.start)


class _Handoff:
    """Batches from the source thread to the event loop: at most `max_records` records and `max_bytes`
    bytes of keys and values (or one batch, however large) wait, so memory stays bounded while decoding
    runs ahead of writing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_records: int, max_bytes: int) -> None:
        self._loop = loop
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._items: deque = deque()
        self._queued = 0
        self._queued_bytes = 0
        self._room = threading.Condition()
        self._ready = asyncio.Event()
        self.closed = False

    def put(self, item, nbytes: int = 0) -> bool:
        """From the thread; `nbytes`: the batch's keys and values. False when the consumer went away."""
        size = len(item.records) if isinstance(item, Batch) else 0
        with self._room:
            while self._items and (self._queued + size > self._max_records or
                                   self._queued_bytes + nbytes > self._max_bytes) and not self.closed:
                self._room.wait()
            if self.closed:
                return False
            self._items.append((item, nbytes))
            self._queued += size
            self._queued_bytes += nbytes
        self._loop.call_soon_threadsafe(self._ready.set)
        return True

    async def get(self):
        while True:
            self._ready.clear()
            with self._room:
                if self._items:
                    item, nbytes = self._items.popleft()
                    self._queued -= len(item.records) if isinstance(item, Batch) else 0
                    self._queued_bytes -= nbytes
                    self._room.notify()
                    return item
            await self._ready.wait()

    def close(self) -> None:
        with self._room:
            self.closed = True
            self._items.clear()
            self._room.notify_all()


def _fatal(exc: BaseException, config: MySqlConfig) -> BaseException:
    """Problems a restart cannot fix become FatalError, with what to change."""
    if isinstance(exc, CdcError):
        return FatalError(str(exc))
    error = getattr(exc, "orig", exc)           # SQLAlchemy wraps the driver's error
    if isinstance(error, pymysql.err.OperationalError) and error.args[0] == _ACCESS_DENIED:
        db = config.database
        where = ", ".join(db.hosts) or f"{db.host}:{db.port}"
        return FatalError(f"MySQL at {where} refused user {db.user!r}: {error.args[1]}; "
                          "check database.user and database.password")
    return exc


class MySqlTask(SourceTask):
    config: MySqlConfig

    async def start(self) -> None:
        connector, log = self.context.connector, self.context.log
        self._loop = asyncio.get_running_loop()
        self._handoff = _Handoff(self._loop, 2 * self.config.max_batch_records, self.config.max_queue_bytes)
        self._partitions: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._source = SourceProcess(f"binlake-source-{connector}")
        self.source_config = self.config.source_config(connector)
        self.source_partition = {"server": self.source_config.name}
        topic = self.config.schema_history_topic or f"{connector}.schema-history"
        await log.ensure_topic(topic, 1, compact=True, label="schema history topic",
                               loss="table structures, and events could no longer be decoded after a restart")
        self._history_topic = topic
        self._stored_history = [value for _, value in await log.read(topic)]

    def _partition_count(self, topic: str) -> int:
        """From the receiving thread: the topic's partitions, creating it if missing."""
        count = self._partitions.get(topic)
        if count is None:
            future = asyncio.run_coroutine_threadsafe(
                self.context.log.partitions(topic, self.source_config.partitions_to_create(topic)), self._loop)
            count = self._partitions[topic] = future.result()
        return count

    def _run(self) -> None:
        """The receiving thread: every batch of the source process into the handoff."""
        handoff = self._handoff
        try:
            for batch in self._source.batches():
                nbytes = sum([len(r.value or b"") + len(r.key or b"") for r in batch.records])
                if not handoff.put(Batch(batch.records, self.source_partition, batch.offset, batch.ends_transaction),
                                   nbytes):
                    return
            handoff.put(_STOP)
        except BaseException as exc:
            handoff.put(_fatal(exc, self.config))

    async def batches(self) -> AsyncGenerator[Batch, None]:
        stored = self.context.offsets.get(self.source_partition)
        self._source.begin(self.source_config, self._history_topic, self._stored_history, stored,
                           self._partition_count)
        self._thread = threading.Thread(target=self._run, name=f"mysql-{self.context.connector}", daemon=True)
        self._thread.start()
        if self.config.signals.topic:
            start = {int(p): o for p, o in ((stored or {}).get(signals.OFFSETS) or {}).items()}
            self._signals = asyncio.create_task(self._follow_signals(self.config.signals.topic, start))
        while True:
            item = await self._handoff.get()
            if item is _STOP:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def metrics(self) -> dict[str, float]:
        source = getattr(self, "_source", None)
        return {} if source is None else source.metrics

    def details(self) -> dict:
        source = getattr(self, "_source", None)
        return {} if source is None else {k: v for k, v in source.details.items() if v is not None}

    async def _follow_signals(self, topic: str, start: dict[int, int]) -> None:
        """Debezium's Kafka signal channel: records keyed by the logical server name, valued with the signal's
        JSON, each handed to the source with its position (which the source keeps in its offsets, so a signal
        already acted on is not read again after a restart). Others' signals (another key) are passed by."""
        name = self.source_config.name
        try:
            async for partition, offset, key, value in self.context.log.follow(topic, start):
                where = f"signal topic {topic} [{partition}] offset {offset}"
                if key is None or key.decode(errors="replace") != name:
                    log.debug("%s: key %r is not %s; not for this connector", where, key, name)
                    continue
                try:
                    parsed = signals.from_json(value or b"", default_id=f"{topic}-{partition}-{offset}")
                except signals.SignalRefused as exc:
                    log.error("%s refused: %s", where, exc)
                    continue
                self._source.signal(parsed, (partition, offset))
        except Exception:
            log.exception("reading the signal topic %s failed: its signals are not acted on until the task restarts",
                          topic)

    def signal(self, signal: dict) -> None:
        """From the REST API: checked here (raises SignalRefused, a ValueError), acted on by the source."""
        parsed = signals.from_json(signal, default_id=f"rest-{uuid.uuid4().hex[:12]}")
        source = getattr(self, "_source", None)
        if source is None:
            raise ValueError("the task is not running; signal it once it runs")
        source.signal(parsed)

    async def stop(self) -> None:
        if getattr(self, "_source", None) is None:
            return
        if (follower := getattr(self, "_signals", None)) is not None:
            follower.cancel()
            with contextlib.suppress(BaseException):
                await follower
        self._source.stop()
        self._handoff.close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)


class MySqlConnector(SourceConnector):
    config_model = MySqlConfig
    task_class = MySqlTask

    def __init__(self, name: str, config: MySqlConfig) -> None:
        super().__init__(name, config)
        warm_up()   # (its tasks' source processes are forked from a server that has imported the source)
