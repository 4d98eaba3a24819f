"""The replication connection, made to end the stream when the server goes away.

pymysqlreplication's reader reconnects by itself when the connection drops (errors 2006, 2013) and
asks again from where it was first started, not from where the stream had got to: in position mode
mid-transaction or far back, in GTID mode every group since the start again, either way duplicates
or a group read from its middle. binlake restarts from its stored offset instead (the connector
runtime restarts the task), so the reader's connection turns those errors into ConnectionLost,
which the reader does not catch.
"""

from __future__ import annotations

import pymysql

_GONE = (2006, 2013)   # CR_SERVER_GONE_ERROR, CR_SERVER_LOST


class ConnectionLost(ConnectionError):
    """The server closed the replication connection; restart from the stored offset."""


class ReplicationConnection(pymysql.connections.Connection):
    def _read_packet(self, *args, **kwargs):
        try:
            return super()._read_packet(*args, **kwargs)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in _GONE:
                raise ConnectionLost(f"the server closed the replication connection ({exc.args[-1]}); "
                                     "the source restarts from its stored offset") from exc
            raise
