"""How many binlog bytes the stream has still to read: the sizes of the server's binary logs
(SHOW BINARY LOGS) past the stream's position. Polled at most every POLL_S, so a metrics scrape
costs the server one small query now and then; between polls the figure can only under-count. The
polls share one connection (the engine has no pool, and a connection per poll costs a TLS handshake)."""

from __future__ import annotations

import logging
import math
import threading

from sqlalchemy.exc import SQLAlchemyError

from cdc.offsets import BinlogPosition

log = logging.getLogger(__name__)

POLL_S = 5.0


class BinlogBytesBehind:
    def __init__(self, engine) -> None:
        self.engine = engine
        self._logs: list[tuple[str, int]] = []  # (file, size), oldest first
        self._polled = -math.inf
        self._warned = False
        self._conn = None
        self._lock = threading.Lock()  # (polled by the metrics thread, closed by the source's)

    def __call__(self, position: BinlogPosition, now: float) -> int | None:
        """Bytes written to the server's binlog after `position` (None: its file is not listed)."""
        if now - self._polled >= POLL_S:
            self._poll(now)
        behind, reached = 0, False
        for name, size in self._logs:
            if name == position.file:
                reached, behind = True, max(size - position.pos, 0)
            elif reached:
                behind += size
        return behind if reached else None

    def _poll(self, now: float) -> None:
        self._polled = now  # (a failed poll is not retried at once either)
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self.engine.connect()
                self._logs = [(str(row[0]), int(row[1])) for row in self._conn.exec_driver_sql("SHOW BINARY LOGS")]
                self._conn.rollback()  # (ends the implicit transaction SQLAlchemy began)
            except SQLAlchemyError as exc:
                self._close()
                if not self._warned:
                    log.warning("cannot list the server's binary logs for binlog_lag_bytes (retrying every %g s): %s",
                                POLL_S, exc)
                    self._warned = True

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except SQLAlchemyError:
                pass  # (a connection already lost: nothing to give back)
