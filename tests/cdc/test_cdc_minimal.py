"""Row metadata below FULL (MySQL's default MINIMAL, MariaDB's default NO_LOG): the schema history names
and describes the columns, streams exactly what FULL streams, and a history that cannot describe the
binlog stops the source with what to do. MySQL 9's SHOW CREATE TABLE round-trips through the parser."""

from __future__ import annotations

import pytest

from sandbox.sql import BINLOG_OPTIONS, MYSQL_OPTIONS
from cdc_harness import Capture
from cdc.errors import DecodeError
from cdc.schema.ddl import apply_ddl
from cdc.schema.history import MemoryHistoryStore
from cdc.schema.model import Schema

DEFAULT_OPTIONS = {"mariadb": BINLOG_OPTIONS, "mysql": MYSQL_OPTIONS}
REDUCED = {"mariadb": "NO_LOG", "mysql": "MINIMAL"}     # each server's default row metadata

# A database whose default every later table without a charset takes, and one table with what the
# history has to describe: unsigned integers, charsets declared, by collation, by table and by database
# default, binary strings, ENUM/SET, an invisible and a generated column, a key that is not the first
# columns in their order. MySQL adds its own: 0900 collations, a functional key (a hidden column the
# binlog does not carry), SRID, and a generated invisible primary key.
SETUP = {
    "common": [
        "CREATE DATABASE shop CHARACTER SET latin1",
        "CREATE TABLE shop.items (code CHAR(3) NOT NULL, id INT UNSIGNED NOT NULL, hidden INT INVISIBLE, "
        "tiny TINYINT UNSIGNED, small SMALLINT UNSIGNED, medium MEDIUMINT UNSIGNED, big BIGINT UNSIGNED, neg INT, "
        "name VARCHAR(20), title VARCHAR(20) CHARACTER SET utf8mb4, bin_ci VARCHAR(10) COLLATE utf8mb4_bin, "
        "legacy VARCHAR(10) CHARACTER SET utf8mb3, note TEXT, raw VARBINARY(8), chunk BLOB, "
        "state ENUM('new','it''s paid','shipped'), tags SET('red','green','blue'), doubled INT AS (neg * 2) VIRTUAL, "
        "PRIMARY KEY (id, code))",
        "INSERT INTO shop.items (code, id, hidden, tiny, small, medium, big, neg, name, title, bin_ci, legacy, note, "
        "raw, chunk, state, tags) VALUES ('abc', 1, 7, 255, 65535, 16777215, 18446744073709551615, -5, 'café€', "
        "'😀', 'Ab', 'ñ', 'ü text', x'00ff', x'0102', 'it''s paid', 'red,blue')",
    ],
    "mysql": [
        "CREATE TABLE shop.modern (id INT PRIMARY KEY, c VARCHAR(10) COLLATE utf8mb4_0900_as_cs, "
        "p POINT NOT NULL SRID 4326, n INT, KEY ((n + 1)))",
        "INSERT INTO shop.modern VALUES (1, 'Ä', ST_GeomFromText('POINT(1 2)', 4326), 3)",
        "SET SESSION sql_generate_invisible_primary_key = ON",
        "CREATE TABLE shop.keyless (v VARCHAR(5))",
        "INSERT INTO shop.keyless VALUES ('k1')",
    ],
}
# Streamed: rows, DDL that changes the columns and their charsets, a database created without a charset
# (the server's default), and on MySQL another generated invisible primary key.
WORKLOAD = {
    "common": [
        "INSERT INTO shop.items (code, id, tiny, big, neg, name, title, state, tags) "
        "VALUES ('xyz', 2, 0, 0, 1, 'naïve', 'ok', 'new', '')",
        "UPDATE shop.items SET name = 'Øre', state = 'shipped', tags = 'green' WHERE id = 1",
        "UPDATE shop.items SET id = 3 WHERE id = 2",
        "ALTER TABLE shop.items ADD COLUMN extra VARCHAR(5) CHARACTER SET utf8mb4 AFTER id, ADD COLUMN flag BIT(3)",
        "INSERT INTO shop.items (code, id, extra, flag, name) VALUES ('new', 4, '✓', b'101', 'l€')",
        "ALTER TABLE shop.items CONVERT TO CHARACTER SET utf8mb4",
        "INSERT INTO shop.items (code, id, name, note) VALUES ('cvt', 5, '😀 now', '𝄞')",
        "DELETE FROM shop.items WHERE id = 1",
        "CREATE DATABASE fresh",
        "CREATE TABLE fresh.t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO fresh.t VALUES (1, 'é€')",
    ],
    "mysql": [
        "INSERT INTO shop.modern VALUES (2, 'ß', ST_GeomFromText('POINT(3 4)', 4326), 4)",
        "SET SESSION sql_generate_invisible_primary_key = ON",
        "CREATE TABLE shop.keyless2 (v VARCHAR(5))",
        "INSERT INTO shop.keyless2 VALUES ('k2')",
        "INSERT INTO shop.keyless VALUES ('k3')",
    ],
}


def _run_all(server, statements) -> None:
    with server.connect() as conn, conn.cursor() as cur:      # one session: SET SESSION applies to what follows
        for statement in statements:
            cur.execute(statement)


def _captured(server_factory, kind: str, row_metadata: str) -> list:
    """Snapshot after SETUP, stream WORKLOAD, on a fresh server with this binlog_row_metadata: the
    records with what describes the rows (not positions, GTIDs or clocks, which differ per server)."""
    server = server_factory(**{**DEFAULT_OPTIONS[kind], "binlog-row-metadata": row_metadata})
    assert server.sql("SELECT @@binlog_row_metadata")[0][0] == row_metadata
    _run_all(server, SETUP["common"] + SETUP.get(kind, []))
    capture = Capture(server)
    config = capture.config("shop", table_include=[r"shop\..*", r"fresh\..*"])
    snapshot = capture.run(config)
    _run_all(server, WORKLOAD["common"] + WORKLOAD.get(kind, []))
    records = []
    for r in Capture.records(capture.run(config, offset=snapshot[-1].offset)):
        value = r["value"]
        if value is not None and "op" in value:
            value = {k: value[k] for k in ("op", "before", "after")}
        elif value is not None:
            value = {k: value[k] for k in ("ddl", "tableChanges")}
        records.append((r["topic"], r["key"], value))
    return records


def test_reduced_row_metadata_streams_what_full_does(server_kind, server_factory):
    full = _captured(server_factory, server_kind, "FULL")
    reduced = _captured(server_factory, server_kind, REDUCED[server_kind])
    assert reduced == full
    # and what both stream is right, not merely equal
    rows = {(topic, tuple(key.values()) if key else None): value["after"] for topic, key, value in reduced
            if value and value.get("op") in ("c", "u")}
    inserted = rows[("srv.shop.items", (3, "xyz"))]
    assert inserted == {"code": "xyz", "id": 3, "hidden": None, "tiny": 0, "small": None, "medium": None, "big": 0,
                        "neg": 1, "name": "naïve", "title": "ok", "bin_ci": None, "legacy": None, "note": None,
                        "raw": None, "chunk": None, "state": "new", "tags": "", "doubled": 2}
    updated = next(v for t, k, v in reduced if v and v.get("op") == "u" and v["after"]["id"] == 1)
    assert updated["before"] == {"code": "abc", "id": 1, "hidden": 7, "tiny": 255, "small": 65535, "medium": 16777215,
                                 "big": 18446744073709551615, "neg": -5, "name": "café€", "title": "😀", "bin_ci": "Ab",
                                 "legacy": "ñ", "note": "ü text", "raw": "AP8=", "chunk": "AQI=",
                                 "state": "it's paid", "tags": "red,blue", "doubled": -10}
    assert updated["after"]["name"] == "Øre" and updated["after"]["tags"] == "green"
    assert rows[("srv.shop.items", (4, "new"))]["extra"] == "✓" and rows[("srv.shop.items", (4, "new"))]["flag"] == 5
    assert rows[("srv.shop.items", (4, "new"))]["name"] == "l€"            # latin1 until the CONVERT
    assert rows[("srv.shop.items", (5, "cvt"))]["name"] == "😀 now"        # utf8mb4 after it
    assert rows[("srv.fresh.t", (1,))] == {"id": 1, "v": "é€"}           # the server's default charset
    if server_kind == "mysql":
        assert rows[("srv.shop.modern", (2,))]["c"] == "ß"
        assert [(t, k, v["after"]) for t, k, v in reduced if t.startswith("srv.shop.keyless")] == [
            ("srv.shop.keyless2", {"my_row_id": 1}, {"my_row_id": 1, "v": "k2"}),
            ("srv.shop.keyless", {"my_row_id": 2}, {"my_row_id": 2, "v": "k3"})]


def _stale(store: MemoryHistoryStore, db: str, table_ddl: str | None) -> MemoryHistoryStore:
    """The history with t's stored definition replaced (None: lost), as if it had missed DDL."""
    stale = MemoryHistoryStore()
    for record in store.records():
        if record.get("db") == db and record.get("ddl", "").startswith("CREATE TABLE `t`"):
            if table_ddl is None:
                continue
            record = {**record, "ddl": table_ddl}
        stale.append(record)
    return stale


def _snapshot_then_insert(server):
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(5))")
    capture, store = Capture(server), MemoryHistoryStore()
    config = capture.config(db)
    snapshot = capture.run(config, store=store)
    server.sql(f"INSERT INTO `{db}`.t VALUES (1, 'a')")
    return capture, config, snapshot[-1].offset, store, db


def test_a_table_missing_from_the_history_stops_at_minimal_metadata(mysql):
    capture, config, offset, store, db = _snapshot_then_insert(mysql)
    with pytest.raises(DecodeError, match=rf"{db}\.t: the table map at binlog\.\d+:\d+ carries no column names "
                                          r"\(binlog_row_metadata is not FULL\), so they come from the schema "
                                          r"history, which has no definition of the table; take a new snapshot .*"
                                          r"snapshot: always"):
        capture.run(config, offset=offset, store=_stale(store, db, None))
    # what the message says to do works: a new snapshot rebuilds the history
    again = capture.run({**config, "snapshot": "always"}, offset=offset, store=_stale(store, db, None))
    assert [c["after"] for c in Capture.changes(again)] == [{"id": 1, "v": "a"}]


@pytest.mark.parametrize("stale_ddl,why", [
    ("CREATE TABLE `t` (`id` int NOT NULL, PRIMARY KEY (`id`))",
     r"the binlog has 2 columns, the history 1 \(id\): the history missed a change to the table"),
    ("CREATE TABLE `t` (`id` int NOT NULL, `v` int, PRIMARY KEY (`id`))",
     r"column 2 `v` is int in the history but VARCHAR in the binlog: the history missed a change to the table"),
])
def test_a_history_out_of_step_stops_at_minimal_metadata(mysql, stale_ddl, why):
    capture, config, offset, store, db = _snapshot_then_insert(mysql)
    with pytest.raises(DecodeError, match=rf"{db}\.t: the table map at binlog\.\d+:\d+ .* {why}; take a new snapshot"):
        capture.run(config, offset=offset, store=_stale(store, db, stale_ddl))


def test_full_metadata_is_preferred_over_the_history(mariadb):
    capture, config, offset, store, db = _snapshot_then_insert(mariadb)
    stale = _stale(store, db, "CREATE TABLE `t` (`id` int NOT NULL, `w` int, `x` int, PRIMARY KEY (`id`))")
    assert [c["after"] for c in Capture.changes(capture.run(config, offset=offset, store=stale))] == [
        {"id": 1, "v": "a"}]


# Tables whose SHOW CREATE TABLE the parser must read as the server stores them.
ROUND_TRIP = {
    "common": [
        "CREATE TABLE gen (id INT PRIMARY KEY, h INT INVISIBLE DEFAULT 3, a INT, v INT AS (a * 2) VIRTUAL, "
        "s VARCHAR(10) AS (CONCAT('x', a)) STORED, d DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3), "
        "u BIGINT UNSIGNED DEFAULT (1 + 1), CHECK (a > 0)) DEFAULT CHARSET=utf8mb4",
        "CREATE TABLE cs (id INT PRIMARY KEY, l VARCHAR(5) CHARACTER SET latin1, b VARCHAR(5) COLLATE utf8mb4_bin, "
        "m CHAR(2) CHARACTER SET utf8mb3, e ENUM('a','b''c'), st SET('x','y'), raw VARBINARY(3), g GEOMETRY) "
        "DEFAULT CHARSET=latin1",
        "CREATE TABLE part (id INT NOT NULL, v VARCHAR(3), PRIMARY KEY (id)) "
        "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)",
    ],
    "mysql": [
        "CREATE TABLE modern (id INT PRIMARY KEY, c VARCHAR(9) COLLATE utf8mb4_0900_as_cs, "
        "t TEXT COLLATE utf8mb4_0900_ai_ci, p POINT NOT NULL SRID 4326, n INT, j JSON DEFAULT (JSON_ARRAY()), "
        "KEY ((n + 1)), CONSTRAINT lax CHECK (n < 100) NOT ENFORCED)",
        "SET SESSION sql_generate_invisible_primary_key = ON",
        "CREATE TABLE gipk (a INT, b VARCHAR(4) INVISIBLE)",
    ],
}


def test_show_create_table_round_trips_through_the_parser(server, db):
    """Every table parses to what information_schema says: columns in storage order (invisible ones and
    generated invisible primary keys included), types, signedness, character sets, primary key."""
    statements = ROUND_TRIP["common"] + ROUND_TRIP.get(server.kind, [])
    with server.connect(db=db) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    tables = [name for (name,) in server.sql(f"SHOW TABLES FROM `{db}`")]
    assert len(tables) == sum(s.startswith("CREATE TABLE") for s in statements)
    schema = Schema()
    for table in tables:
        apply_ddl(schema, db, server.sql(f"SHOW CREATE TABLE `{db}`.`{table}`")[0][1])
        parsed = schema.get(db, table)
        expected = server.sql(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE LIKE '%unsigned%', CHARACTER_SET_NAME, COLUMN_KEY "
            f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{table}' "
            "ORDER BY ORDINAL_POSITION")
        assert [(c.name, c.type, c.unsigned, c.charset) for c in parsed.columns] == [
            (name, data_type.replace("geomcollection", "geometrycollection"), bool(unsigned), charset)
            for name, data_type, unsigned, charset, _ in expected], table
        assert parsed.primary_key == tuple(name for name, *_, key in expected if key == "PRI"), table
    if server.kind == "mysql":     # the generated invisible primary key comes first, as the binlog has it
        gipk = schema.get(db, "gipk")
        assert [c.name for c in gipk.columns] == ["my_row_id", "a", "b"] and gipk.primary_key == ("my_row_id",)
