"""The binlog behind an interface: neutral events, a pymysqlreplication client, and record/replay for tests."""

from cdc.binlog.client import BinlogClient, PyMySqlReplicationClient
from cdc.binlog.events import (Begin, BinlogColumn, Commit, Event, Gtid, Heartbeat, Query, Rotate, Rows,
                               TableMap)
from cdc.binlog.replay import ReplayClient, record_events

__all__ = ["BinlogClient", "PyMySqlReplicationClient", "ReplayClient", "record_events", "Event", "Rotate",
           "Gtid", "Begin", "Commit", "Query", "TableMap", "Rows", "Heartbeat", "BinlogColumn"]
