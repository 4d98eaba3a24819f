"""Canal's column filters (cdc/canal_fields.py) on MariaDB and MySQL, in both of Canal's outputs: FlatMessages
(kafka mode) and the Entry protobufs of a destination's entry log (tcp mode) carry the kept columns only, with
Canal's pkNames, mysqlType, sqlType and `old` over them, and each entry column keeps its index in the table."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cdc.canal_fields import CanalFields
from cdc.config import SourceConfig
from cdc.formats.proto import EntryProtocol_pb2 as pb
from cdc_harness import Capture, int_type

WORKLOAD = ["INSERT INTO t VALUES (1, 's1', 10, 'a')", "UPDATE t SET qty = 11, secret = 's2' WHERE id = 1",
            "DELETE FROM t WHERE id = 1"]


def _run(server, capture, db, **canal):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, secret VARCHAR(10), qty INT, note VARCHAR(10))", db=db)
    config = capture.config(db, format="canal", snapshot="no_data", **canal)
    start = capture.run(config)
    server.sql(*WORKLOAD, db=db)
    return capture.run(config, offset=start[-1].offset)


def test_flat_messages_carry_the_kept_columns(server, db, capture):
    batches = _run(server, capture, db, canal_mq={"topic": "example"},
                   canal_fields={"include": {f"{db.upper()}.T": ["ID", "qty"]}})
    insert, update, delete = (m["value"] for m in Capture.records(batches))
    assert insert["data"] == [{"id": "1", "qty": "10"}] and insert["pkNames"] == ["id"]
    assert insert["mysqlType"] == {"id": int_type(server), "qty": int_type(server)}
    assert insert["sqlType"] == {"id": 4, "qty": 4}
    assert update["data"] == [{"id": "1", "qty": "11"}] and update["old"] == [{"qty": "10"}]   # (secret: left out)
    assert delete["data"] == [{"id": "1", "qty": "11"}]


def test_a_left_out_primary_key_leaves_pk_names_as_canal_does(server, db, capture):
    batches = _run(server, capture, db, canal_mq={"topic": "example"},
                   canal_fields={"exclude": {f"{db}.t": ["id", "secret"]}})
    insert = Capture.records(batches)[0]["value"]
    assert insert["data"] == [{"qty": "10", "note": "a"}] and insert["pkNames"] is None
    assert list(insert["sqlType"]) == ["qty", "note"]


def test_entries_carry_the_kept_columns_at_their_table_index(server, db, capture):
    batches = _run(server, capture, db, canal_entries="example.canal-entries",
                   canal_fields={"exclude": {f"{db}.t": ["secret"]}})
    entries = [pb.Entry.FromString(r.value) for b in batches for r in b.records]
    changes = [pb.RowChange.FromString(e.storeValue) for e in entries if e.entryType == pb.ROWDATA]
    insert, update, delete = (c.rowDatas[0] for c in changes)
    assert [(c.index, c.name, c.isKey, c.value) for c in insert.afterColumns] == \
        [(0, "id", True, "1"), (2, "qty", False, "10"), (3, "note", False, "a")]
    assert [(c.name, c.updated) for c in update.afterColumns] == [("id", False), ("qty", True), ("note", False)]
    assert [c.name for c in update.beforeColumns] == [c.name for c in delete.beforeColumns] == ["id", "qty", "note"]


def test_kept_columns_and_refusals():
    fields = CanalFields(include={"shop.orders": ["id", "QTY"]}, exclude={"shop.orders": ["id"], "Shop.Notes": ["b"]})
    assert fields.kept("shop", "orders", ["id", "item", "qty"]) == ("id", "qty")    # include wins, as in Canal
    assert fields.kept("SHOP", "notes", ["a", "B", "c"]) == ("a", "c")
    assert fields.kept("shop", "other", ["a"]) is None
    with pytest.raises(ValidationError, match="write db.table with at least one column"):
        CanalFields(include={"orders": ["id"]})
    with pytest.raises(ValidationError, match="canal_fields shapes Canal's messages: set canal_mq or canal_entries"):
        SourceConfig(name="x", user="u", server_id=3, format="canal", canal_fields={"include": {"a.b": ["c"]}})
