"""Asking a MySQL server for its binlog after a GTID set (COM_BINLOG_DUMP_GTID), tags included.

pymysqlreplication 1.0.17 builds COM_BINLOG_DUMP_GTID from its own GTID parser, which refuses tagged
GTIDs (MySQL 8.3+) and knows only the untagged encoding; its reader takes no encoded set, and the
steps before the dump command (binlog checksum, heartbeat period, replica registration) sit in the
same private method. So the reader keeps those steps and only the command is binlake's: the reader
is started at a file/position, and the connection class it is given through `pymysql_wrapper` (its
hook for the connection it opens) sends COM_BINLOG_DUMP_GTID for binlake's set in place of the
COM_BINLOG_DUMP it writes.
"""

from __future__ import annotations

import functools
import struct
from typing import Callable

import pymysql

from cdc.binlog.connection import ReplicationConnection
from cdc.gtid import MySqlGtidSet

COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID = 0x12, 0x1E
_NON_BLOCK, _THROUGH_GTID = 0x01, 0x04
_MAX_PAYLOAD = (1 << 24) - 1          # one protocol packet
_FIRST_POSITION = 4                   # past the binlog file's magic number


def dump_gtid_command(server_id: int, gtids: MySqlGtidSet, blocking: bool) -> bytes:
    """The COM_BINLOG_DUMP_GTID packet (header included): stream every transaction not in `gtids`, from
    the oldest binlog file holding one; no file name, so the server chooses it."""
    encoded = gtids.encode()
    flags = _THROUGH_GTID | (0 if blocking else _NON_BLOCK)
    payload = struct.pack("<BHIIQI", COM_BINLOG_DUMP_GTID, flags, server_id, 0, _FIRST_POSITION, len(encoded))
    payload += encoded
    if len(payload) >= _MAX_PAYLOAD:
        raise ValueError(f"the GTID set to restart from takes {len(encoded)} bytes, more than one protocol packet; "
                         "it has too many intervals to send: restart by position (restart_by: position)")
    return len(payload).to_bytes(3, "little") + b"\0" + payload


class _DumpByGtidConnection(ReplicationConnection):
    """A replication connection that sends `dump_command` when its user writes a COM_BINLOG_DUMP."""

    def __init__(self, *, dump_command: bytes, **settings) -> None:
        self._dump_command = dump_command
        super().__init__(**settings)

    def _write_bytes(self, data: bytes) -> None:
        # (pymysqlreplication writes its dump command as one packet; a sequence id of 0 marks a command's start)
        if len(data) > 4 and data[3] == 0 and data[4] == COM_BINLOG_DUMP:
            data = self._dump_command
        super()._write_bytes(data)


def dump_by_gtid(server_id: int, gtids: MySqlGtidSet, blocking: bool) -> Callable[..., pymysql.Connection]:
    """A `pymysql_wrapper` for pymysqlreplication's reader: its stream starts after `gtids`."""
    return functools.partial(_DumpByGtidConnection, dump_command=dump_gtid_command(server_id, gtids, blocking))
