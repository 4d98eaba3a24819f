"""Neutral binlog events: what the streaming source consumes, whatever library read them.

Every event carries its binlog file, its start and end positions (end = the next event's start) and
the server's timestamp in seconds. Row events keep their body undecoded: `data[begin:stop]` holds the
row images, decoded later by a decoder compiled for the table map (cdc.rowdecoder).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BinlogColumn:
    """One column as a TABLE_MAP event with binlog_row_metadata=FULL describes it. With less metadata
    the names (None), signedness, charsets and members are filled in from the schema history
    (cdc.schema.columns)."""

    name: str
    type: int                  # MySQL field type code (pymysql.constants.FIELD_TYPE)
    unsigned: bool = False
    charset: str | None = None  # Python codec of a character column; "binary" for binary strings
    max_length: int = 0         # CHAR/VARCHAR/BINARY: maximum length in bytes
    length_size: int = 0        # BLOB/TEXT/JSON/GEOMETRY: bytes of the length prefix
    fsp: int = 0                # fractional seconds precision of TIME/DATETIME/TIMESTAMP
    precision: int = 0          # DECIMAL
    scale: int = 0              # DECIMAL
    bits: int = 0               # BIT
    size: int = 0               # ENUM/SET: bytes of the stored index/bitmask
    values: tuple[str, ...] = ()  # ENUM/SET members in definition order


@dataclass(frozen=True, slots=True)
class Event:
    file: str
    start: int
    end: int
    ts: int
    server_id: int


@dataclass(frozen=True, slots=True)
class Rotate(Event):
    next_file: str
    next_pos: int


@dataclass(frozen=True, slots=True)
class Gtid(Event):
    gtid: str
    standalone: bool = False  # MariaDB FL_STANDALONE: a DDL group without BEGIN/COMMIT


@dataclass(frozen=True, slots=True)
class Begin(Event):
    pass


@dataclass(frozen=True, slots=True)
class Commit(Event):
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Query(Event):
    db: str
    sql: str
    server_charset: str | None = None  # the server's default character set as the statement ran


@dataclass(frozen=True, slots=True)
class TableMap(Event):
    table_id: int
    db: str
    table: str
    columns: tuple[BinlogColumn, ...]
    primary_key: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Rows(Event):
    kind: str          # "c" write, "u" update, "d" delete
    table_id: int
    data: bytes
    begin: int
    stop: int
    partial: bool = False  # a PARTIAL_UPDATE_ROWS event: JSON columns of after images may be diffs


@dataclass(frozen=True, slots=True)
class Heartbeat(Event):
    """The server is alive and has nothing more to send (or skipped events); a chance to emit heartbeats."""
