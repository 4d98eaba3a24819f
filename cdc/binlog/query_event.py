"""QUERY events read past status variables the library does not know.

pymysqlreplication parses every status variable of a QUERY event and raises StatusVariableMismatch
on one it does not know; servers add new ones (MySQL 9 writes some for statement-format DML), which
would stop the source with a message about the library instead of the statement. binlake needs the
default database, the statement text and the server's collation (Q_CHARSET, which servers write
before their newer variables), so this reader parses the variables the library knows and skips the
rest of the block by its declared length. `install()` maps QUERY events to it in the library's
event table (its only hook).
"""

from __future__ import annotations

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import BinLogEvent, QueryEvent
from pymysqlreplication.exceptions import MalformedBinLogEvent, StatusVariableMismatch
from pymysqlreplication.packet import BinLogPacketWrapper

_POST_HEADER = 13   # thread id 4, execution time 4, database name length 1, error code 2, status length 2


class StatementQueryEvent(QueryEvent):
    def __init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
        BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        self.slave_proxy_id = self.packet.read_uint32()
        self.execution_time = self.packet.read_uint32()
        self.schema_length = self.packet.read(1)[0]
        self.error_code = self.packet.read_uint16()
        self.status_vars_length = self.packet.read_uint16()
        post_header = self._advance_to_payload(_POST_HEADER)
        end = self.packet.read_bytes + self.status_vars_length
        try:
            while self.packet.read_bytes < end:
                self._read_status_vars_value_for_key(self.packet.read_uint8())
        except StatusVariableMismatch:
            pass                        # one newer than the library: the rest of the block is skipped
        self.packet.advance(end - self.packet.read_bytes)
        self.schema = self.packet.read(self.schema_length)
        self.packet.advance(1)
        length = event_size - post_header - self.status_vars_length - self.schema_length - 1
        if length < 0:
            raise MalformedBinLogEvent(f"QUERY event of {event_size} bytes shorter than its own header")
        self.query = self.packet.read(length).decode("utf-8", errors="backslashreplace")


def install() -> None:
    BinLogPacketWrapper._BinLogPacketWrapper__event_map[BINLOG.QUERY_EVENT] = StatementQueryEvent
