"""Following a primary failover: which server of `database.hosts` a source attempt reads from.

A lost connection ends the attempt (cdc.binlog.connection.ConnectionLost); the runtime starts a new
one from the stored offset, and the new attempt calls `choose_server`: the servers are tried in
order and the first that answers *and* has executed every GTID the log already holds is the one the
snapshot, the schema reads and the binlog stream all use. Restarting by GTID set (`restart_by:
gtid`, required with several hosts) then streams from that server exactly the transactions the log
lacks, whatever its binlog files are called.

A server that answers but lacks published GTIDs is either a replica still applying its relay log
(wait: it is tried again until `failover_catch_up_s` has passed) or a server that lost transactions
the log already holds (the old primary's last commits never reached it): reading from it would
publish a second history beside the first, so the source stops with the missing set instead
(`HistoryDiverged`, fatal). A server that already answered keeps its place in the order, so an old
primary that comes back stale is passed over for the next host, which has what was published.

Published = the stored offset's GTID set: with exactly-once delivery exactly what the log holds;
with at-least-once, records written after the last offset commit are not counted (they are re-read).
MySQL: the stored set must be a subset of the server's @@gtid_executed (GTID_SUBSET). MariaDB: per
replication domain, the server's @@gtid_binlog_pos must have reached the stored sequence number.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import pymysql

from cdc.config import SourceConfig
from cdc.connection import connection_settings, is_mariadb
from cdc.errors import CdcError
from cdc.offsets import GtidSet

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
RETRY_EVERY_S = 0.5
_ACCESS_DENIED = 1045


class NoServerAnswered(ConnectionError):
    """None of the hosts accepted a connection; the runtime retries with backoff."""


class HistoryDiverged(CdcError):
    """Every server that answers lacks transactions the log already holds."""


def executed_gtids(config: SourceConfig) -> str:
    """The server's executed GTIDs: @@gtid_executed on MySQL, @@gtid_binlog_pos (what its binlog can
    serve) on MariaDB. Raises pymysql's OperationalError when it does not answer."""
    with pymysql.connect(**connection_settings(config), connect_timeout=CONNECT_TIMEOUT_S) as conn, \
            conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = str(cur.fetchone()[0])
        cur.execute("SELECT @@gtid_binlog_pos" if is_mariadb(version) else "SELECT @@gtid_executed")
        return str(cur.fetchone()[0] or "").replace("\n", "")


def choose_server(config: SourceConfig, published: str | None, *, probe: Callable[[SourceConfig], str] = executed_gtids,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> SourceConfig:
    """`config` pointed at the first of its servers that answers and holds `published` (a GTID set; None:
    nothing to hold, e.g. no stored offset, or restarts by position)."""
    deadline = clock() + config.failover_catch_up_s
    waited = False
    while True:
        unreachable: list[str] = []
        lacking: list[tuple[str, str, str]] = []     # (address, missing, executed)
        for host, port in config.addresses:
            candidate = config.model_copy(update={"host": host, "port": port})
            address = f"{host}:{port}"
            try:
                executed = probe(candidate)
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] == _ACCESS_DENIED:
                    raise
                unreachable.append(f"{address} ({exc.args[-1] if exc.args else exc})")
                continue
            missing = "" if not published else GtidSet(published).missing_from(GtidSet(executed))
            if not missing:
                if waited or (host, port) != config.addresses[0]:
                    log.warning("reading from %s (the servers before it: %s)", address,
                                "; ".join(unreachable + [f"{a} lacks {m}" for a, m, _ in lacking]) or "none")
                return candidate
            lacking.append((address, missing, executed))
        if not lacking:
            raise NoServerAnswered(f"no server answered: {'; '.join(unreachable)}; retrying")
        if clock() >= deadline:
            raise HistoryDiverged(_diverged(lacking, unreachable, published, config.failover_catch_up_s))
        if not waited:
            log.warning("%s answers but has not executed %s, which the log already holds; waiting up to %g s "
                        "for it to catch up", lacking[0][0], lacking[0][1], config.failover_catch_up_s)
            waited = True
        sleep(RETRY_EVERY_S)


def _diverged(lacking: list[tuple[str, str, str]], unreachable: list[str], published: str, waited_s: float) -> str:
    servers = "; ".join(f"{address} lacks {missing} (it has executed {executed or 'nothing'})"
                        for address, missing, executed in lacking)
    down = f"; not answering: {', '.join(unreachable)}" if unreachable else ""
    return (f"no server holds every transaction the log already holds (GTID set {published}): {servers}{down}, "
            f"after waiting {waited_s:g} s. Reading from one of them would publish a second history beside the "
            "first, so the source stops. Do one of: bring back (or promote) the server that has the missing "
            "transactions; apply them to the new primary; or, if they are lost for good, accept that consumers "
            "hold changes the database no longer has: delete the connector's stored offsets and start it "
            "again with snapshot: initial (or raise database.failover_catch_up_ms if a replica is still "
            "applying its relay log)")
