"""`heartbeat_query`: a statement run on the source at each heartbeat while the stream is idle.

A server whose captured tables are idle still writes binlog for everything else, but a source that
only hears binlog heartbeats has nothing to commit, so its stored position stays behind; once the
server purges that file, a restart cannot resume (Debezium's heartbeat.action.query). Writing a row
(`INSERT INTO ops.binlake_heartbeat VALUES (1, NOW()) ON DUPLICATE KEY UPDATE ts = NOW()`) makes a
transaction the stream reads and commits, captured or not, so the stored offset moves past it.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)


class HeartbeatQuery:
    """Called by the streaming source at every binlog heartbeat (the server idle); runs `sql` at most every
    `interval_s`. A failed run is logged and tried again at the next interval: the stream goes on."""

    def __init__(self, engine: Engine, sql: str, interval_s: float, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.engine, self.sql, self.interval_s, self.clock = engine, sql, interval_s, clock
        self._last = clock()
        self.runs = 0

    def __call__(self) -> None:
        now = self.clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        try:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(self.sql)
            self.runs += 1
        except SQLAlchemyError as exc:
            log.warning("heartbeat_query failed (tried again in %g s): %s", self.interval_s, exc)
