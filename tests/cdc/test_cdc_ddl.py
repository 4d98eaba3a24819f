"""DDL mid-stream: the schema history follows it, is replayed on restart, and unparseable DDL stops."""

from __future__ import annotations

import pytest

from cdc_harness import Capture, int_type
from cdc.errors import UnsupportedDdlError
from cdc.offsets import BinlogPosition
from cdc.schema.history import FileHistoryStore, SchemaHistory


def test_add_drop_rename_columns_mid_stream(server, db, capture, tmp_path):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, a INT, b VARCHAR(5))")
    store = FileHistoryStore(tmp_path / "history.jsonl")
    config = capture.config(db, format="canal")
    snapshot = capture.run(config, store=store)
    server.sql(f"INSERT INTO `{db}`.t VALUES (1, 10, 'x')",
                f"ALTER TABLE `{db}`.t ADD COLUMN c DECIMAL(4,1) AFTER id",
                f"INSERT INTO `{db}`.t VALUES (2, 1.5, 20, 'y')",
                f"ALTER TABLE `{db}`.t DROP COLUMN a, RENAME COLUMN b TO bee",
                f"INSERT INTO `{db}`.t VALUES (3, 2.5, 'z')",
                f"ALTER TABLE `{db}`.t CHANGE bee b2 VARCHAR(9) NOT NULL")
    batches = capture.run(config, offset=snapshot[-1].offset, store=store)
    messages = [r["value"] for r in Capture.records(batches)]
    assert [m["type"] for m in messages] == ["INSERT", "ALTER", "INSERT", "ALTER", "INSERT", "ALTER"]
    inserts = [m for m in messages if m["type"] == "INSERT"]
    assert [m["data"][0] for m in inserts] == [{"id": "1", "a": "10", "b": "x"},
                                              {"id": "2", "c": "1.5", "a": "20", "b": "y"},
                                              {"id": "3", "c": "2.5", "bee": "z"}]
    assert inserts[1]["mysqlType"] == {"id": int_type(server), "c": "decimal(4,1)", "a": int_type(server),
                                       "b": "varchar(5)"}
    alter = messages[3]
    assert alter["isDdl"] and alter["sql"].startswith("ALTER TABLE") and alter["mysqlType"]["bee"] == "varchar(5)"

    # Restart from before the first ALTER: the history is replayed to that position, so the row written
    # then still has its old shape and its old declared types.
    first_insert_batch = next(b for b in batches if any(b"INSERT" in r.value for r in b.records))
    again = capture.run(config, offset=snapshot[-1].offset, store=store)
    assert [r["value"] for r in Capture.records(again)] == [
        {**m, "ts": r["value"]["ts"]} for m, r in zip(messages, Capture.records(again))]
    history = SchemaHistory(store)
    before = history.recover(BinlogPosition(**{k: snapshot[-1].offset[k] for k in ("file", "pos")}))
    assert [c.name for c in before.get(db, "t").columns] == ["id", "a", "b"]
    after = history.recover(BinlogPosition(batches[-1].offset["file"], batches[-1].offset["pos"]))
    t = after.get(db, "t")
    assert [c.name for c in t.columns] == ["id", "c", "b2"] and t.column("b2").mysql_type == "varchar(9)"
    assert first_insert_batch.offset["pos"] < batches[1].offset["pos"]
    # Each DDL is stored once, however often it is read.
    ddl = [r["ddl"] for r in store.records() if "ALTER" in r.get("ddl", "")]
    assert len(ddl) == 3


def test_debezium_schema_change_events(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"ALTER TABLE `{db}`.t ADD COLUMN name VARCHAR(20) NOT NULL DEFAULT ''",
                f"RENAME TABLE `{db}`.t TO `{db}`.t2", f"DROP TABLE `{db}`.t2")
    records = Capture.records(capture.run(config, offset=snapshot[-1].offset))
    assert [r["topic"] for r in records] == ["srv"] * 3
    alter, rename, drop = (r["value"] for r in records)
    assert records[0]["key"] == {"databaseName": db}
    assert alter["ddl"].startswith("ALTER TABLE") and alter["databaseName"] == db
    change = alter["tableChanges"][0]
    assert change["type"] == "ALTER" and change["id"] == f"{db}.t"
    assert [c["name"] for c in change["table"]["columns"]] == ["id", "name"]
    assert change["table"]["primaryKeyColumnNames"] == ["id"]
    assert rename["tableChanges"][0]["type"] == "RENAME" and rename["tableChanges"][0]["previousId"] == f"{db}.t"
    assert drop["tableChanges"][0] == {"type": "DROP", "id": f"{db}.t2", "previousId": None, "table": None}


def test_unparseable_ddl_stops_unless_skipped(mariadb):
    """On MariaDB, whose INET6 type binlake does not map. (Every type and statement MySQL 9 writes is
    read: there a DDL is unreadable only when the history lacks what it refers to, which the snapshot's
    complete structure prevents.)"""
    server, db = mariadb, mariadb.new_database()
    capture = Capture(server)
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"CREATE TABLE `{db}`.u (id INT PRIMARY KEY, x INET6)", f"INSERT INTO `{db}`.t VALUES (7)")
    problem = "column type 'inet6' is not supported"
    with pytest.raises(UnsupportedDdlError, match=rf"{problem}.*MINIMAL.*ddl_skip_unparseable"):
        capture.run(config, offset=snapshot[-1].offset)
    skipping = {**config, "ddl_skip_unparseable": True}
    batches = capture.run(skipping, offset=snapshot[-1].offset)
    assert [c["after"] for c in Capture.changes(batches)] == [{"id": 7}]


def test_ddl_on_one_table_keeps_streaming_the_others(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY)")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"INSERT INTO `{db}`.b VALUES (1)", f"ALTER TABLE `{db}`.a ADD COLUMN x INT",
                f"INSERT INTO `{db}`.b VALUES (2)", f"TRUNCATE TABLE `{db}`.a", f"INSERT INTO `{db}`.b VALUES (3)",
                f"INSERT INTO `{db}`.a VALUES (1, 1)")
    changes = Capture.changes(capture.run(config, offset=snapshot[-1].offset))
    assert [(c["source"]["table"], c["after"]) for c in changes] == [
        ("b", {"id": 1}), ("b", {"id": 2}), ("b", {"id": 3}), ("a", {"id": 1, "x": 1})]


def test_a_snapshot_records_same_named_tables_of_every_database(tmp_path):
    # A snapshot records every table at one position; two databases (tenants, shards) often hold tables
    # created by the same text. Each must be stored, and found again on recovery.
    store = FileHistoryStore(tmp_path / "history.jsonl")
    history = SchemaHistory(store)
    at = BinlogPosition("binlog.000001", 4)
    history.reset(at)
    for db in ("tenant1", "tenant2"):
        history.record(at, db, f"CREATE DATABASE IF NOT EXISTS `{db}`")
        history.record(at, db, "CREATE TABLE `a` (`id` int NOT NULL, PRIMARY KEY (`id`))")
    history.record(at, "tenant1", "CREATE TABLE `a` (`id` int NOT NULL, PRIMARY KEY (`id`))")  # re-read: stored once
    assert [r["db"] for r in store.records() if "CREATE TABLE" in r.get("ddl", "")] == ["tenant1", "tenant2"]
    recovered = SchemaHistory(store).recover(at)
    assert recovered.get("tenant1", "a") is not None and recovered.get("tenant2", "a") is not None


def test_the_history_replays_the_server_charset_a_database_was_created_with(tmp_path):
    # CREATE DATABASE without a character set takes the server's default of that moment (the binlog event
    # carries it); replayed later, the database and the tables made in it without one still have it.
    store = FileHistoryStore(tmp_path / "history.jsonl")
    history = SchemaHistory(store)
    history.record(BinlogPosition("binlog.000001", 100), "", "CREATE DATABASE fresh", server_charset="latin1")
    history.record(BinlogPosition("binlog.000001", 200), "fresh", "CREATE TABLE t (v VARCHAR(3))", server_charset="utf8mb4")
    recovered = SchemaHistory(store).recover(BinlogPosition("binlog.000001", 200))
    assert recovered.databases == {"fresh": "latin1"} and recovered.get("fresh", "t").column("v").charset == "latin1"
