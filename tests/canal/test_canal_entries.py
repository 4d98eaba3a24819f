"""Canal's change entries as the connector writes them (cdc/formats/canal_entry.py), decoded with the Entry
protobuf: columns as Canal's LogEventConvert fills them, BEGIN/END around a transaction's rows, DDL entries."""

from __future__ import annotations

from types import SimpleNamespace

from cdc.emitter import TableContext
from cdc.formats.canal_entry import CanalEntryOutput, is_ddl
from cdc.formats.proto import EntryProtocol_pb2 as pb
from cdc.offsets import BinlogPosition, EventSource

TABLE = TableContext("shop", "t", "example.canal-entries", 1, ("id",), {"id": "int", "name": "varchar(10)", "n": "int"},
                     {"id": 4, "name": 12, "n": 4})


def source(pos: int) -> EventSource:
    return EventSource({"file": "binlog.000003", "pos": pos, "server_id": 7, "ts_ms": 1700000000000, "gtid": "0-7-9"})


def decode(record) -> tuple[pb.Entry, pb.RowChange | None]:
    entry = pb.Entry.FromString(record.value)
    change = pb.RowChange.FromString(entry.storeValue) if entry.entryType == pb.ROWDATA else None
    return entry, change


def test_a_transaction_of_two_events():
    output, out = CanalEntryOutput("example.canal-entries", gtids=False), []
    output.rows(TABLE, "c", [{"id": 1, "name": "a", "n": None}, {"id": 2, "name": "b", "n": 5}], 0, 2, source(300), out)
    output.rows(TABLE, "u", [{"id": 1, "name": "a", "n": None}, {"id": 1, "name": "z", "n": None}], 0, 1,
                source(400), out)
    output.commit("0-7-9", BinlogPosition("binlog.000003", 500), out)
    output.commit("0-7-10", BinlogPosition("binlog.000003", 600), out)      # nothing captured: no END
    assert [r.key for r in out] == [None, b"shop.t", b"shop.t", None]
    assert all(r.topic == "example.canal-entries" and r.partition == 0 for r in out)
    (begin, _), (insert, inserted), (update, updated), (end, _) = map(decode, out)
    assert begin.entryType == pb.TRANSACTIONBEGIN and end.entryType == pb.TRANSACTIONEND
    assert pb.TransactionEnd.FromString(end.storeValue).transactionId == "0-7-9"
    assert (end.header.logfileName, end.header.logfileOffset) == ("binlog.000003", 500)
    h = insert.header
    assert (h.version, h.logfileName, h.logfileOffset, h.serverId, h.executeTime, h.schemaName, h.tableName,
            h.eventType, h.sourceType, h.gtid) == (1, "binlog.000003", 300, 7, 1700000000000, "shop", "t",
                                                   pb.INSERT, pb.MYSQL, "")
    assert [(p.key, p.value) for p in h.props] == [("rowsCount", "2")]
    assert inserted.eventType == pb.INSERT and not inserted.isDdl and len(inserted.rowDatas) == 2
    first = inserted.rowDatas[0].afterColumns
    assert [(c.index, c.name, c.sqlType, c.mysqlType, c.isKey, c.updated, c.isNull, c.value) for c in first] == [
        (0, "id", 4, "int", True, True, False, "1"), (1, "name", 12, "varchar(10)", False, True, False, "a"),
        (2, "n", 4, "int", False, True, True, "")]                 # an INSERT's columns are all `updated`
    assert not inserted.rowDatas[0].beforeColumns
    row = updated.rowDatas[0]
    assert [c.updated for c in row.beforeColumns] == [False, False, False]
    assert [(c.name, c.updated) for c in row.afterColumns] == [("id", False), ("name", True), ("n", False)]
    assert update.header.eventType == pb.UPDATE


def test_delete_and_ddl_entries():
    output, out = CanalEntryOutput("e", gtids=True), []
    output.rows(TABLE, "d", [{"id": 3, "name": "c", "n": 1}], 0, 1, source(300), out)
    output.commit("x", BinlogPosition("binlog.000003", 400), out)
    change = SimpleNamespace(db="shop", table="t", type="ALTER")
    output.ddl(change, "ALTER TABLE t ADD c INT", {**source(500).fields, "snapshot": "false"}, out)
    output.ddl(change, "CREATE TABLE t (...)", {**source(500).fields, "snapshot": "true"}, out)   # at start: none
    (_, _), (delete, deleted), (_, _), (ddl, altered) = map(decode, out)
    assert deleted.eventType == pb.DELETE and not deleted.rowDatas[0].afterColumns
    assert [c.value for c in deleted.rowDatas[0].beforeColumns] == ["3", "c", "1"]
    assert delete.header.gtid == "0-7-9"                             # gtidon: the header carries it
    assert (ddl.header.eventType, altered.isDdl, altered.sql, altered.ddlSchemaName) == \
        (pb.ALTER, True, "ALTER TABLE t ADD c INT", "shop")
    assert out[-1].key == b"shop.t" and len(out) == 4
    assert [is_ddl(r.value) for r in out] == [False, False, False, True]      # (canal.instance.get.ddl.isolation)
