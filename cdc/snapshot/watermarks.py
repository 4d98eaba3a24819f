"""The two ways an incremental snapshot marks a chunk's window in the binlog (cdc/snapshot/incremental.py).

`TableWatermarks` (a signal table is configured): rows written to it before and after the chunk's SELECT
come back through the binlog; the window opens at the first and closes at the second (DBLog).

`GtidWatermarks` (read-only: a signal topic and no signal table; Debezium's read-only MySQL mode): nothing is
written to the source. The low watermark is the server's executed GTID set before the SELECT, the high one
the set after it; the window opens at once and closes when the stream has read every transaction of the
high set that the low one lacks (those that committed while the chunk was read). Executed set: MySQL's
@@gtid_executed (updated after the storage engine committed, so everything in it is visible to a read view
opened later), MariaDB's @@gtid_binlog_pos (its last GTID per replication domain).

Before the SELECT both make sure the chunk's read view holds every transaction the stream has already
read: with watermark rows that is given (the low watermark commits before the SELECT, after what the stream
read); with GTIDs the chunk is read only once the low set holds what the stream read, and on MariaDB (whose
binlog may be sent before a transaction is visible) the read view's own binlog position
(`binlog_snapshot_position` of START TRANSACTION WITH CONSISTENT SNAPSHOT) must have reached the stream's.
A transaction the stream read but the chunk did not see would otherwise be overwritten by the chunk.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from sqlalchemy import Connection

from cdc import signals as S
from cdc.connection import is_mariadb
from cdc.offsets import BinlogPosition, GtidSet, Offset

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Chunk:
    """Rows read between watermarks, and how the stream will recognise the window."""

    rows: list
    open_id: str | None = None          # table watermarks: the ids of the window's rows
    close_id: str | None = None
    pending: GtidSet | None = None      # GTID watermarks: what committed during the read (empty: nothing)


class TableWatermarks:
    """Written on the chunk's own connection, each in a transaction committed before the next statement."""

    between = False        # a chunk may be read inside a transaction of the stream
    read_ahead = 2         # chunks read and waiting for their windows, at most (their windows follow each other)

    def __init__(self, signal_table: str) -> None:
        db, _, table = signal_table.partition(".")
        self.quoted = f"`{db}`.`{table}`"

    def read(self, conn: Connection, select: Callable[[], list], at: Offset | None, table: str,
             after) -> Chunk | None:
        window_id = uuid.uuid4().hex
        opened, closed = f"{window_id}-open", f"{window_id}-close"
        data = json.dumps({"data-collection": table, "after": list(after) if after is not None else None})
        self._write(conn, (opened, S.WINDOW_OPEN, data), [])
        rows = select()                    # (a read view opened after the low watermark's commit)
        conn.rollback()
        self._write(conn, (closed, S.WINDOW_CLOSE, data), [opened, closed])
        return Chunk(rows, opened, closed)

    def _write(self, conn: Connection, insert: tuple[str, str, str], deletes: list[str]) -> None:
        conn.exec_driver_sql(f"INSERT INTO {self.quoted} (id, type, data) VALUES (%s, %s, %s)", insert)
        if deletes:
            conn.exec_driver_sql(f"DELETE FROM {self.quoted} WHERE id IN ({', '.join(['%s'] * len(deletes))})",
                                 tuple(deletes))
        conn.commit()


class GtidWatermarks:
    """Owned by the streaming thread."""

    between = True         # a chunk is read between two transactions of the stream only
    read_ahead = 1         # (a window opens when its chunk is read: one read ahead would open inside the last)
    WARN_AFTER_S = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._mariadb: bool | None = None
        self._behind_since: float | None = None
        self._warned = False

    def read(self, conn: Connection, select: Callable[[], list], at: Offset | None, table: str,
             after) -> Chunk | None:
        """The chunk, or None when the server does not yet show what the stream read (try again later);
        `at`: the stream's offset between two transactions."""
        if self._mariadb is None:
            self._mariadb = is_mariadb(str(conn.exec_driver_sql("SELECT VERSION()").scalar()))
        low = self._executed(conn)
        missing = GtidSet(at.gtids).missing_from(low)
        missing = f"the GTIDs {missing}" if missing else ""
        if not missing and self._mariadb:
            conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            status = {str(k).lower(): v for k, v in conn.exec_driver_sql(
                "SHOW STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')").fetchall()}
            seen = BinlogPosition(_text(status["binlog_snapshot_file"]), int(status["binlog_snapshot_position"]))
            if seen < at.position:
                missing = f"the binlog up to {at.position} (the read view is at {seen})"
        if missing:
            conn.rollback()
            self._waiting(f"the server does not show {missing} as executed yet, which the stream has read")
            return None
        self._behind_since, self._warned = None, False
        rows = select()
        conn.rollback()
        high = self._executed(conn)
        return Chunk(rows, pending=GtidSet(high.missing_from(low)))

    def _executed(self, conn: Connection) -> GtidSet:
        text = conn.exec_driver_sql("SELECT @@gtid_binlog_pos" if self._mariadb else "SELECT @@gtid_executed").scalar()
        conn.rollback()
        return GtidSet(str(text or "").replace("\n", ""))

    def _waiting(self, why: str) -> None:
        now = self.clock()
        if self._behind_since is None:
            self._behind_since = now
        elif now - self._behind_since >= self.WARN_AFTER_S and not self._warned:
            self._warned = True
            log.warning("incremental snapshot: waiting %.0f s to read the next chunk: %s (is the connector reading "
                        "another server than the one it queries?)", now - self._behind_since, why)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
