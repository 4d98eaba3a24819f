"""BinlogClient: the interface, and its implementation over pymysqlreplication.

pymysqlreplication keeps the replication protocol (COM_BINLOG_DUMP, checksums, table-map parsing);
row bodies are not decoded by it (its `.rows` is never touched), only sliced out of the packet.
A TABLE_MAP is sent once per table id (ids change with every DDL on the table and are only reused
after a real rotate), so consumers keep maps until a Rotate with a non-zero timestamp.
"""

from __future__ import annotations

import logging
from typing import Iterator, Protocol

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent, TableMapEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

from cdc.binlog.events import (Begin, BinlogColumn, Commit, Event, Gtid, Heartbeat, Query, Rotate, Rows,
                               TableMap)
from cdc.errors import DecodeError
from cdc.offsets import BinlogPosition
from cdc.schema.charsets import charset_of_collation_id

_EVENTS = [RotateEvent, QueryEvent, XidEvent, GtidEvent, MariadbGtidEvent, TableMapEvent, WriteRowsEvent,
           UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent, HeartbeatLogEvent]
_ROW_KINDS = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d", PartialUpdateRowsEvent: "u"}
_HEADER = 20  # OK byte + 19-byte event header in front of every event payload


class _RowMetadataAdvice(logging.Filter):
    """pymysqlreplication warns at every connect that binlog_row_metadata should be FULL; binlake reads
    MINIMAL and NO_LOG too (cdc.schema.columns), so that advice would only mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "BINLOG_ROW_METADATA = FULL" not in record.getMessage()


logging.getLogger("pymysqlreplication").addFilter(_RowMetadataAdvice())


class BinlogClient(Protocol):
    """Yields neutral events from a start position; `close` ends the stream."""

    def events(self) -> Iterator[Event]: ...

    def close(self) -> None: ...


def _column(c) -> BinlogColumn:
    values = ()
    if c.type == FIELD_TYPE.ENUM and c.enum_values:
        values = tuple(c.enum_values[1:])  # pymysqlreplication prepends "" for index 0
    elif c.type == FIELD_TYPE.SET and c.set_values:
        values = tuple(c.set_values)
    return BinlogColumn(
        name=c.name, type=c.type, unsigned=bool(c.unsigned), charset=c.character_set_name,
        max_length=getattr(c, "max_length", 0), length_size=getattr(c, "length_size", 0),
        fsp=getattr(c, "fsp", 0), precision=getattr(c, "precision", 0), scale=getattr(c, "decimals", 0),
        bits=getattr(c, "bits", 0), size=getattr(c, "size", 0), values=values)


class PyMySqlReplicationClient:
    """Reads the binlog as a replica from `start` (file/pos). Not thread-safe; one consumer."""

    def __init__(self, connection: dict, server_id: int, start: BinlogPosition, *, blocking: bool = True,
                 heartbeat_s: float = 0, gtids: str | None = None) -> None:
        """Start at `start`, or, given `gtids`, after that executed GTID set (MariaDB `d-s-n` or MySQL
        `uuid:1-n`); the server then names the file in the first Rotate."""
        self._file = start.file
        position = ({"auto_position": gtids, "is_mariadb": ":" not in gtids} if gtids is not None else
                    {"log_file": start.file, "log_pos": start.pos, "resume_stream": True})
        self._reader = BinLogStreamReader(
            connection_settings={"host": connection["host"], "port": connection["port"],
                                 "user": connection["user"], "password": connection["password"]},
            server_id=server_id, blocking=blocking, only_events=_EVENTS, freeze_schema=True,
            enable_logging=False, slave_heartbeat=heartbeat_s or None, **position)

    def close(self) -> None:
        self._reader.close()

    def events(self) -> Iterator[Event]:
        for e in self._reader:
            event = self._convert(e)
            if event is not None:
                yield event

    def _convert(self, e) -> Event | None:
        packet = e.packet
        end = packet.log_pos
        start = end - packet.event_size
        head = (self._file, start, end, packet.timestamp, packet.server_id)
        cls = type(e)
        kind = _ROW_KINDS.get(cls)
        if kind is not None:
            full = (1 << e.number_of_columns) - 1
            if int.from_bytes(e.columns_present_bitmap, "little") & full != full:
                raise DecodeError(f"row event at {self._file}:{start} has a partial row image; "
                                  "set binlog_row_image=FULL on the server")
            return Rows(*head, kind=kind, table_id=e.table_id, data=packet.packet._data,
                        begin=packet.packet._position, stop=_HEADER + e.event_size,
                        partial=cls is PartialUpdateRowsEvent)
        if cls is TableMapEvent:
            pk = tuple(e.optional_metadata.simple_primary_key_list or
                       sorted(e.optional_metadata.primary_keys_with_prefix or ()))
            return TableMap(*head, table_id=e.table_id, db=e.schema, table=e.table,
                            columns=tuple(_column(c) for c in e.columns), primary_key=pk)
        if cls is QueryEvent:
            sql = e.query.strip()
            word = sql.upper()
            if word == "BEGIN":
                return Begin(*head)
            if word in ("COMMIT", "ROLLBACK"):
                return Commit(*head)
            db = e.schema.decode() if isinstance(e.schema, bytes) else e.schema
            return Query(*head, db=db, sql=sql,
                         server_charset=charset_of_collation_id(getattr(e, "collation_server", None)))
        if cls is XidEvent:
            return Commit(*head, xid=e.xid)
        if cls is MariadbGtidEvent:
            return Gtid(*head, gtid=e.gtid, standalone=bool(e.flags & 1))
        if cls is GtidEvent:             # MySQL: a BEGIN query follows unless the group is one DDL
            return Gtid(*head, gtid=e.gtid, standalone=True)
        if cls is RotateEvent:
            self._file = e.next_binlog
            return Rotate(*head, next_file=e.next_binlog, next_pos=e.position)
        if cls is HeartbeatLogEvent:
            return Heartbeat(*head)
        return None
