"""MySqlSource: what the connector runtime runs.

    source = MySqlSource(config, history_store, stored_offset)
    for batch in source.batches():      # per MySQL transaction, snapshot chunk, DDL or heartbeat
        write batch.records and batch.offset in one Kafka transaction

Startup checks run first; the snapshotter decides whether to snapshot (with no stored offset and a
configured `start`, structure only, recorded at that start: cdc/start.py); then the binlog is streamed
from the resulting offset until `stop()` (or, with follow=False, until the server has nothing more).
The stream reconnects at the offset's file/position, or with `restart_by: gtid` at its GTID set (so
a source can follow a failover to another server of the same replication topology: with several
`hosts`, each start reads from the first that answers and holds every published GTID, cdc/failover.py).
"""

from __future__ import annotations

from typing import Callable, Iterator

from cdc.binlog.client import BinlogClient, PyMySqlReplicationClient
from cdc.binlog_lag import BinlogBytesBehind
from cdc.checks import check_gtids, check_privileges, check_server, position_available
from cdc.config import SourceConfig
from cdc.connection import connection_settings, make_engine
from cdc.dispatcher import Dispatcher
from cdc.errors import CdcError, ConfigurationError
from cdc.emitter import Emitter
from cdc.failover import choose_server
from cdc.heartbeat_query import HeartbeatQuery
from cdc.offsets import BinlogPosition, Offset
from cdc.records import Batch
from cdc.schema.history import HistoryStore, SchemaHistory
from cdc.snapshot import SnapshotSource, Snapshotter
from cdc.snapshot.incremental import IncrementalSnapshot
from cdc.start import start_offset
from cdc.streaming import StreamingSource

ClientFactory = Callable[[Offset], BinlogClient]


class MySqlSource:
    def __init__(self, config: SourceConfig | dict, history_store: HistoryStore, offset: dict | None = None, *,
                 partitions: Callable[[str], int] | None = None, follow: bool = True,
                 client_factory: ClientFactory | None = None) -> None:
        self.config = config if isinstance(config, SourceConfig) else SourceConfig(**config)
        self.partitions = partitions or (lambda topic: self.config.topic_partitions)
        self.dispatcher = Dispatcher(self.config, Emitter(self.config, self.partitions))
        self.history = SchemaHistory(history_store, self.config.ddl_skip_unparseable, self.dispatcher.captured)
        self.streaming = StreamingSource(self.config, self.dispatcher, self.history, self.partitions)
        self._stored = Offset.from_dict(offset) if offset else None
        self._stored_tables = (offset or {}).get("tables")
        self._follow = follow
        self._client_factory = client_factory or self._binlog_client
        self.engine = make_engine(self.config)
        self.snapshot: SnapshotSource | None = None
        self._bytes_behind = BinlogBytesBehind(self.engine)
        self.incremental = self.streaming.incremental = IncrementalSnapshot(
            self.config, self.engine, self.history, self.dispatcher, self.partitions, (offset or {}).get("incremental"))

    def metrics(self, now: float) -> dict[str, float]:
        """Gauges for the connector's metrics endpoint; read from another thread (plain numbers only)."""
        found: dict[str, float] = {}
        progress = self.snapshot.progress if self.snapshot is not None else None
        if progress is not None:
            found.update(snapshot_tables_total=progress.tables_total, snapshot_tables_done=progress.tables_done,
                         snapshot_rows_read=progress.rows_read, snapshot_rows_estimated=progress.rows_estimated)
        found.update(self.incremental.metrics(now))
        lag = self.streaming.lag_seconds(now)
        if lag is not None:
            found["binlog_lag_seconds"] = lag
        position = self.streaming.position
        if position is not None and (behind := self._bytes_behind(position, now)) is not None:
            found["binlog_lag_bytes"] = behind
        return found

    def stop(self) -> None:
        self.streaming.stop()
        self._bytes_behind.close()

    def _binlog_client(self, offset: Offset) -> BinlogClient:
        c = self.config
        return PyMySqlReplicationClient(connection_settings(c), c.server_id, offset.position,
                                        blocking=self._follow, heartbeat_s=min(c.heartbeat_interval_s or 1.0, 1.0),
                                        gtids=offset.gtids if c.restart_by == "gtid" else None)

    def _configured_start(self) -> Offset:
        """Where `start` says to stream from, on the server chosen; a binlog file is the first server's."""
        c = self.config
        (host, port) = c.addresses[0]
        if c.start.file is not None and (c.host, c.port) != (host, port):
            raise ConfigurationError(f"the start position names binlog file {c.start.file} of {host}:{port}, which did "
                                     f"not answer, and {c.host}:{c.port} has binlog files of its own: start once "
                                     f"{host}:{port} answers, or start after a GTID set or at a time")
        return start_offset(c.start, self.engine, self._scan)

    def _scan(self, position: BinlogPosition) -> BinlogClient:
        """A binlog reader that stops at the binlog's end, to look for a configured start (cdc/start.py)."""
        return PyMySqlReplicationClient(connection_settings(self.config), self.config.server_id, position,
                                        blocking=False, boundaries_only=True)

    def _use_server(self) -> None:
        """Point the source at the first server of `hosts` that answers and holds what was published
        (cdc/failover.py): the snapshot, the schema reads and the binlog stream all use it."""
        published = self._stored.gtids if self._stored is not None and self.config.restart_by == "gtid" else None
        chosen = choose_server(self.config, published)
        if (chosen.host, chosen.port) != (self.config.host, self.config.port):
            self.engine.dispose()
            self._bytes_behind.close()
            self.config, self.engine = chosen, make_engine(chosen)
            self._bytes_behind = BinlogBytesBehind(self.engine)

    def _restart_gtids(self, offset: Offset) -> str | None:
        return offset.gtids if self.config.restart_by == "gtid" else None

    def check(self) -> bool:
        """Startup checks; returns whether the stored position is still on the server."""
        self._use_server()
        with self.engine.connect() as conn:
            check_server(conn)
            check_privileges(conn)
            if self.config.read_only_snapshots:
                check_gtids(conn, f"signals: {{topic: {self.config.signal_topic}}} without a signal table (read-only "
                                  "incremental snapshots, whose watermarks are GTID sets)")
            if self._stored is None:
                return False
            if self.config.restart_by == "gtid":   # the server refuses purged GTIDs when we connect
                return True
            return position_available(conn, self._stored.position)

    def batches(self) -> Iterator[Batch]:
        available = self.check()
        offset = self._stored
        decision = Snapshotter(self.config.snapshot).decide(offset, available)
        self.snapshot = snapshot = SnapshotSource(self.config, self.engine, self.history, self.dispatcher,
                                                  self.partitions)
        if decision.snapshot_data:
            self.incremental.forget()       # (the snapshot reads every table)
            resume = offset if decision.resume else None
            if resume is not None:
                self.history.recover(resume.position, self._restart_gtids(resume))
            for batch in snapshot.run(resume, record_schema=decision.snapshot_schema):
                offset = Offset.from_dict(batch.offset)
                yield batch
        elif decision.snapshot_schema:
            start = self._configured_start() if offset is None and self.config.start is not None else None
            offset = snapshot.structure_only(start)
            self.dispatcher.flush(offset)
            while self.dispatcher.ready:
                yield self.dispatcher.ready.popleft()
        elif decision.stream:
            if not any(True for _ in self.history.store.records()):
                raise CdcError(f"an offset is stored ({offset.position}) but the schema history is empty: "
                               "restore the history store, or delete the offset to take a new snapshot")
            self.history.recover(offset.position, self._restart_gtids(offset))
            self.incremental.tables_added(self._stored_tables)
        if decision.stream:
            if self.config.heartbeat_query:
                self.streaming.on_idle = HeartbeatQuery(self.engine, self.config.heartbeat_query,
                                                        self.config.heartbeat_interval_s or 1.0)
            yield from self.streaming.run(self._client_factory(offset), offset)
