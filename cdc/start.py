"""Where a source with no stored offset starts when it is told to (`start`), as Canal's
canal.instance.master.* keys tell it: a binlog file and position, an executed GTID set, or a time.

    start_offset(StartAt(file="binlog.000003", pos=1234), engine, scan)   # the transaction holding pos
    start_offset(StartAt(timestamp_ms=1764390000000), engine, scan)         # after the last one begun before

A position inside a transaction moves back to that transaction's start (Canal does the same: a
replica cannot start mid-transaction). A time is found as Canal finds it: the binlog files are read
newest first, each from its start, until one holds a transaction begun before the time; the start is
the end of the last such transaction in it, so the first transaction delivered is the first begun at
or after the time. When every transaction began at or after it, the start is the oldest file's start.
A GTID set needs no search: the server streams what the set lacks.

The GTID set executed at a file position (the offset carries it, for restarts by GTID set and for
failover) is the server's: BINLOG_GTID_POS on MariaDB, and on MySQL the file's Previous_gtids plus
the GTIDs of the file before the position (SHOW BINLOG EVENTS).

Only a first start uses it: a stored offset always wins, as Canal's stored position does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from sqlalchemy import Connection, Engine

from cdc.binlog.client import BinlogClient
from cdc.binlog.events import Begin, Commit, Event, Gtid, Query, Rotate
from cdc.checks import binlog_files
from cdc.config import StartAt
from cdc.connection import is_mariadb
from cdc.errors import ConfigurationError
from cdc.gtid import MySqlGtidSet
from cdc.offsets import BinlogPosition, Offset

FIRST_POSITION = 4      # past a binlog file's magic number
_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([^']+)'", re.I)

Scan = Callable[[BinlogPosition], BinlogClient]
"""A non-blocking binlog client from a position (it stops where the server's binlog ends)."""


@dataclass(frozen=True, slots=True)
class Transaction:
    """One event group of a binlog file: a transaction, or a DDL; `ts` is its first event's time (s)."""

    start: BinlogPosition
    end: BinlogPosition
    ts: int


def start_offset(start: StartAt, engine: Engine, scan: Scan) -> Offset:
    """The offset to stream from for `start`; ConfigurationError when its file is not on the server."""
    with engine.connect() as conn:
        files = list(binlog_files(conn))        # oldest first
        if not files:
            raise ConfigurationError("the server lists no binary logs: binary logging is off")
        if start.gtids is not None:
            return Offset(BinlogPosition(files[0], FIRST_POSITION), start.gtids)
        if start.file is not None and start.file not in files:
            raise ConfigurationError(f"binlog file {start.file!r} (the start position) is not on the server, which "
                                     f"has {files[0]} to {files[-1]}: it was purged, or the name is wrong")
        if start.pos is not None:
            position = transaction_start(scan, BinlogPosition(start.file, start.pos))
        else:
            position = first_at(scan, [start.file] if start.file else files[::-1], start.timestamp_ms)
        version = str(conn.exec_driver_sql("SELECT VERSION()").scalar())
        return Offset(position, gtids_at(conn, version, position))


def transactions(events: Iterable[Event], file: str) -> Iterator[Transaction]:
    """The event groups of `file`, read from its start, as the streaming source groups them (cdc.streaming): a
    GTID or BEGIN opens one, a COMMIT (XID) ends it, and so does a statement of a group that is no DML
    transaction (a DDL)."""
    first: Event | None = None
    dml = False
    for event in events:
        if isinstance(event, Rotate):
            if event.ts:                        # (a real rotate: the file ends; the first one is sent on connect)
                return
            continue
        if event.file != file:
            return
        if isinstance(event, Gtid):
            first, dml = event, not event.standalone
        elif isinstance(event, Begin):
            first, dml = first or event, True
        elif isinstance(event, Commit) or (isinstance(event, Query) and not dml):
            opened = first or event
            yield Transaction(BinlogPosition(file, opened.start), BinlogPosition(file, event.end), opened.ts)
            first, dml = None, False


def _read(scan: Scan, file: str) -> Iterator[Transaction]:
    client = scan(BinlogPosition(file, FIRST_POSITION))
    try:
        yield from transactions(client.events(), file)
    finally:
        client.close()


def transaction_start(scan: Scan, position: BinlogPosition) -> BinlogPosition:
    """`position`, or the start of the transaction it falls inside."""
    for txn in _read(scan, position.file):
        if txn.end.pos > position.pos:
            return txn.start if txn.start.pos < position.pos else position
    return position


def first_at(scan: Scan, files_newest_first: list[str], timestamp_ms: int) -> BinlogPosition:
    """Where the first transaction begun at or after `timestamp_ms` starts (Canal's search, above)."""
    for file in files_newest_first:
        before: BinlogPosition | None = None
        for txn in _read(scan, file):
            if txn.ts * 1000 >= timestamp_ms:
                break
            before = txn.end
        if before is not None:
            return before
    return BinlogPosition(files_newest_first[-1], FIRST_POSITION)


def gtids_at(conn: Connection, version: str, position: BinlogPosition) -> str:
    """The GTID set the server had executed when it wrote `position` (a transaction boundary)."""
    if is_mariadb(version):
        found = conn.exec_driver_sql("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos)).scalar()
        if found is None:
            raise ConfigurationError(f"MariaDB finds no GTID position at {position} (BINLOG_GTID_POS): it is not "
                                     "the start of an event of that file")
        return str(found)
    executed = MySqlGtidSet()
    for _, pos, kind, _, _, info in conn.exec_driver_sql("SHOW BINLOG EVENTS IN %s", (position.file,)):
        if kind == "Previous_gtids":                # (in the file's header: read even for a start at its top)
            executed = MySqlGtidSet(str(info).replace("\n", ""))
        elif kind.startswith("Gtid") and (gtid := _GTID_NEXT.search(str(info))):
            if int(pos) >= position.pos:
                break
            executed.add(gtid.group(1))
    return str(executed)
