"""BinlogClient: the interface, and its implementation over pymysqlreplication.

pymysqlreplication keeps the replication protocol (COM_BINLOG_DUMP, checksums, table-map parsing);
row bodies are not decoded by it (its `.rows` is never touched), only sliced out of the packet.
A TABLE_MAP is sent once per table id (ids change with every DDL on the table and are only reused
after a real rotate), so consumers keep maps until a Rotate with a non-zero timestamp.

Every event the server sends is accounted for by its type code: converted, unpacked (compressed
events, cdc.binlog.compressed, whose inner events are parsed as if written inline), skipped for a
stated reason, or refused with a DecodeError that names the type, the position and what to do. The
library itself drops only the types in `_DROPPED_BY_LIBRARY`; anything it does not know reaches us
as a NotImplementedEvent. Nothing is skipped silently.
"""

from __future__ import annotations

import logging
from typing import Iterator, Protocol

from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import (BeginLoadQueryEvent, ExecuteLoadQueryEvent, GtidEvent, HeartbeatLogEvent,
                                      IntvarEvent, MariadbGtidEvent, NotImplementedEvent, RandEvent,
                                      RotateEvent, UserVarEvent, XAPrepareEvent, XidEvent)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent, TableMapEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

from cdc.binlog import compressed, query_event, vector_tablemap
from cdc.binlog.connection import ReplicationConnection
from cdc.binlog.events import (Begin, BinlogColumn, Commit, Event, Gtid, Heartbeat, Query, Rotate, Rows,
                               TableMap)
from cdc.binlog.gtid_dump import dump_by_gtid
from cdc.binlog.gtid_event import tagged_gtid
from cdc.errors import DecodeError
from cdc.gtid import MySqlGtidSet
from cdc.offsets import BinlogPosition
from cdc.charsets import charset_of_collation_id

# What reaches us; the library constructs (parses) only these classes. It drops, unparsed, the other
# classes it maps: FORMAT_DESCRIPTION, PREVIOUS_GTIDS (the stream's offsets carry their own GTID set),
# STOP, ROWS_QUERY (the statement text of row events, informative) and MariaDB's ANNOTATE_ROWS,
# BINLOG_CHECKPOINT, GTID_LIST and START_ENCRYPTION (the dump thread sends events decrypted).
_EVENTS = [RotateEvent, query_event.StatementQueryEvent, XidEvent, GtidEvent, MariadbGtidEvent, TableMapEvent,
           WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent, HeartbeatLogEvent, XAPrepareEvent,
           IntvarEvent, RandEvent, UserVarEvent, BeginLoadQueryEvent, ExecuteLoadQueryEvent, NotImplementedEvent]
_ROW_KINDS = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d", PartialUpdateRowsEvent: "u"}
_HEADER = 20  # OK byte + 19-byte event header in front of every event payload
_CHECKSUM = b"\0\0\0\0"  # appended to unpacked events, which have none, so they parse like streamed ones

INCIDENT, HEARTBEAT_V2, TRANSACTION_PAYLOAD, GTID_TAGGED = 26, 41, 40, 42
_SKIPPED = {
    28: "IGNORABLE",                    # written so that replicas ignore it
    34: "ANONYMOUS_GTID",               # gtid_mode=OFF: the group starts at its BEGIN or DDL, which follow
    36: "TRANSACTION_CONTEXT",          # group replication's certification data
    37: "VIEW_CHANGE",                  # group replication's membership change
    5: "INTVAR", 13: "RAND", 14: "USER_VAR",  # context of the statement-based DML that follows; refused there
}
_STATEMENT_BASED = {17: "BEGIN_LOAD_QUERY", 18: "EXECUTE_LOAD_QUERY"}
_IGNORABLE_FLAG = 0x80                  # LOG_EVENT_IGNORABLE_F: the server says replicas may skip it

vector_tablemap.install()       # MySQL 9's VECTOR columns in table maps
query_event.install()           # QUERY events without parsing their status variables


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
                 heartbeat_s: float = 0, gtids: str | None = None, boundaries_only: bool = False) -> None:
        """Connect with `connection` (PyMySQL's settings: host, port, user, password, ssl) and start at
        `start`, or, given `gtids`, after that executed GTID set (MariaDB `d-s-n`, or MySQL
        `uuid:1-n:tag:1-n`); the server then names the file in the first Rotate. `boundaries_only`: for a
        reader that looks for where event groups begin and end, not at their rows (cdc.start), a two-phase
        XA PREPARE is the end of its group instead of an error."""
        self._file = start.file
        self._boundaries_only = boundaries_only
        stream_from: dict = {"log_file": start.file, "log_pos": start.pos, "resume_stream": True,
                             "pymysql_wrapper": ReplicationConnection}   # (a lost connection ends the stream)
        if gtids is not None and ":" in gtids:      # MySQL: the dump command is binlake's (cdc.binlog.gtid_dump)
            stream_from["pymysql_wrapper"] = dump_by_gtid(server_id, MySqlGtidSet(gtids), blocking)
        elif gtids is not None:     # MariaDB; an empty set means "from the oldest binlog" on either server
            stream_from = {"auto_position": gtids, "is_mariadb": True, "pymysql_wrapper": ReplicationConnection}
        self._reader = BinLogStreamReader(
            connection_settings=dict(connection),
            server_id=server_id, blocking=blocking, only_events=_EVENTS, filter_non_implemented_events=False,
            freeze_schema=True, enable_logging=False, slave_heartbeat=heartbeat_s or None, **stream_from)

    def close(self) -> None:
        self._reader.close()

    def events(self) -> Iterator[Event]:
        for e in self._reader:
            packet = e.packet
            end = packet.log_pos
            start = end - packet.event_size
            if packet.event_type == TRANSACTION_PAYLOAD:
                yield from self._payload(e, start, end)
                continue
            event = self._convert(e, start, end)
            if event is not None:
                yield event

    def _payload(self, e, start: int, end: int) -> Iterator[Event]:
        """A compressed transaction's events, each placed at the payload event's own position (the
        only one a replica can restart from); streaming numbers their rows on (cdc.streaming)."""
        packet = e.packet       # (a view, not a copy: the payload may be large)
        body = memoryview(packet.packet._data)[_HEADER:_HEADER + packet.event_size - compressed.HEADER_SIZE]
        for raw in compressed.transaction_payload(body):
            event = self._convert(self._reparse(raw), start, end)
            if event is not None:
                yield event

    def _reparse(self, raw: bytes):
        """Parse one event's bytes (header + body, no checksum) with the library, as if streamed."""
        size = len(raw) + len(_CHECKSUM)
        header = raw[:9] + size.to_bytes(4, "little") + raw[13:compressed.HEADER_SIZE]
        packet = MysqlPacket(b"\0" + header + raw[compressed.HEADER_SIZE:] + _CHECKSUM, "utf8")
        reader = self._reader
        # (checksum: _CHECKSUM; freeze_schema as the reader; the optional metadata is read where present)
        wrapper = BinLogPacketWrapper(packet, reader.table_map, reader._ctl_connection, reader.mysql_version,
                                      True, frozenset(_EVENTS), None, None, None, None, True, False, False,
                                      True, False)
        if wrapper.event is None:       # a table map of a known table id (freeze_schema): like a streamed one
            return None
        return wrapper.event

    def _convert(self, e, start: int, end: int) -> Event | None:
        if e is None:
            return None
        packet = e.packet
        code = packet.event_type
        head = (self._file, start, end, packet.timestamp, packet.server_id)
        where = f"{self._file}:{start}"
        cls = type(e)
        kind = _ROW_KINDS.get(cls)
        if kind is not None:
            full = (1 << e.number_of_columns) - 1
            if int.from_bytes(e.columns_present_bitmap, "little") & full != full:
                raise DecodeError(f"row event at {where} has a partial row image; "
                                  "set binlog_row_image=FULL on the server")
            return Rows(*head, kind=kind, table_id=e.table_id, data=packet.packet._data,
                        begin=packet.packet._position, stop=_HEADER + e.event_size,
                        partial=cls is PartialUpdateRowsEvent)
        if cls is TableMapEvent:
            pk = tuple(e.optional_metadata.simple_primary_key_list or
                       sorted(e.optional_metadata.primary_keys_with_prefix or ()))
            return TableMap(*head, table_id=e.table_id, db=e.schema, table=e.table,
                            columns=tuple(_column(c) for c in e.columns), primary_key=pk)
        if cls is query_event.StatementQueryEvent:
            return _query(e, head)
        if cls is XidEvent:
            return Commit(*head, xid=e.xid)
        if cls is MariadbGtidEvent:
            return Gtid(*head, gtid=e.gtid, standalone=bool(e.flags & 1))
        if cls is GtidEvent:             # MySQL: a BEGIN query follows unless the group is one DDL
            return Gtid(*head, gtid=e.gtid, standalone=True)
        if code == GTID_TAGGED:          # MySQL 8.3+: the same with a tag (cdc.binlog.gtid_event)
            return Gtid(*head, gtid=tagged_gtid(_body(e)), standalone=True)
        if cls is RotateEvent:
            self._file = e.next_binlog
            return Rotate(*head, next_file=e.next_binlog, next_pos=e.position)
        if cls is HeartbeatLogEvent or code == HEARTBEAT_V2:
            return Heartbeat(*head)
        if cls is XAPrepareEvent:
            if e.one_phase or self._boundaries_only:   # XA COMMIT ... ONE PHASE: an ordinary commit
                return Commit(*head)
            raise DecodeError(f"XA PREPARE at {where}: two-phase XA transactions are not supported (whether their "
                              "rows commit is known only at a later XA COMMIT or XA ROLLBACK); commit XA "
                              "transactions with XA COMMIT ... ONE PHASE, or exclude their tables")
        if code in compressed.ROWS_COMPRESSED:
            plain, body = compressed.mariadb_rows(code, _body(e))
            return self._convert(self._reparse(_event_bytes(e, plain, body)), start, end)
        if code == compressed.QUERY_COMPRESSED:
            body = compressed.mariadb_query(_body(e))
            return self._convert(self._reparse(_event_bytes(e, 2, body)), start, end)
        return _unconverted(e, code, where)


def _query(e, head: tuple) -> Event | None:
    sql = e.query.strip()
    word = sql.upper()
    if word == "BEGIN" or word.startswith("XA START"):
        return Begin(*head)
    if word in ("COMMIT", "ROLLBACK"):
        return Commit(*head)
    if word.startswith("XA END"):       # the XA transaction's commit event follows
        return None
    db = e.schema.decode() if isinstance(e.schema, bytes) else e.schema
    return Query(*head, db=db, sql=sql, server_charset=charset_of_collation_id(getattr(e, "collation_server", None)))


def _unconverted(e, code: int, where: str) -> None:
    """Event types with no change to convert: skipped for a known reason, or refused."""
    if code in _SKIPPED:
        return None
    if code in _STATEMENT_BASED:
        raise DecodeError(f"{_STATEMENT_BASED[code]} event at {where}: a LOAD DATA written in statement format "
                          "(a session ran with binlog_format=STATEMENT or MIXED); binlake reads row events only: "
                          "set binlog_format=ROW for every session and re-snapshot the table")
    if code == INCIDENT:
        raise DecodeError(f"INCIDENT event at {where}: the server recorded that changes may be missing from its "
                          "binlog (see its error log); re-snapshot the affected tables, then move the stored "
                          "offset past this event")
    if e.packet.flags & _IGNORABLE_FLAG:
        return None
    raise DecodeError(f"binlog event type {code} at {where} is not one binlake decodes, and the server did not "
                      "mark it ignorable: its changes would be lost; stopping. Upgrade binlake or report the "
                      "type; to go on without it, move the stored offset past this event")


def _body(e) -> bytes:
    """The event's body: after its header, up to its declared size (a checksum may follow)."""
    packet = e.packet
    return bytes(packet.packet._data[_HEADER:_HEADER + packet.event_size - compressed.HEADER_SIZE])


def _event_bytes(e, event_type: int, body: bytes) -> bytes:
    """Header + body of an event of `event_type` rebuilt from `e`'s header (its size set by _reparse)."""
    header = e.packet.packet._data[1:_HEADER]
    return header[:4] + bytes([event_type]) + header[5:] + body
