"""Every MySQL type maps to one documented value (docs/cdc.md, "Type mapping"), and the binlog and the
snapshot agree on it, on MariaDB and on MySQL 9.

One table holds a column per case: rows 1 and 2 carry a value each (with its expected JSON value), row 3
only NULLs. The snapshot reads table `src`; the same rows copied into `dst` reach the source through the
binlog as an insert, an update and a delete. The columns both servers have come first; then each server
kind's own: MySQL's VECTOR, binary JSON and utf8mb4_0900 collations, MariaDB's JSON kept as written.
"""

from __future__ import annotations

import base64
import json
import random
import struct

import pytest

from sandbox.sql import MYSQL_OPTIONS, start_server
from cdc.schema.model import GEOMETRY_TYPES
from cdc_harness import Capture

# The servers the types are checked on. MySQL runs at its defaults plus full row metadata: the source
# refuses minimal metadata until it reads column names and members from the schema history; then the
# session's `mysql` (minimal metadata) joins this list as "mysql".
SERVERS = ("mariadb", "mysql-full-metadata")


@pytest.fixture(scope="module", params=SERVERS)
def server(request, tmp_path_factory):
    """This module's server (overrides the shared `server`, so `db` and `capture` use it too)."""
    if request.param != "mysql-full-metadata":
        return request.getfixturevalue(request.param)
    mysql = start_server("mysql", tmp_path_factory.mktemp("mysql-full"), request.getfixturevalue("mysql_template"),
                         {**MYSQL_OPTIONS, "binlog-row-metadata": "FULL"})
    request.addfinalizer(mysql.stop)
    return mysql


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def members(prefix: str, n: int) -> str:
    return ",".join(f"'{prefix}{i}'" for i in range(n))


def sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


MAX_DECIMAL = "9" * 35 + "." + "9" * 30

# (column, declared type, SQL of row 1, SQL of row 2, JSON value of row 1, of row 2)
COMMON = [
    ("ti", "TINYINT", "-128", "127", -128, 127),
    ("tiu", "TINYINT UNSIGNED", "255", "0", 255, 0),
    ("si", "SMALLINT", "-32768", "32767", -32768, 32767),
    ("siu", "SMALLINT UNSIGNED", "65535", "0", 65535, 0),
    ("mi", "MEDIUMINT", "-8388608", "8388607", -8388608, 8388607),
    ("miu", "MEDIUMINT UNSIGNED", "16777215", "0", 16777215, 0),
    ("i", "INT", "-2147483648", "2147483647", -2147483648, 2147483647),
    ("iu", "INT UNSIGNED", "4294967295", "0", 4294967295, 0),
    ("bi", "BIGINT", "-9223372036854775808", "9223372036854775807", -9223372036854775808, 9223372036854775807),
    ("biu", "BIGINT UNSIGNED", "18446744073709551615", "0", 18446744073709551615, 0),
    ("bo", "BOOLEAN", "TRUE", "FALSE", 1, 0),
    ("de", "DECIMAL(10,3)", "-12345.678", "0.001", "-12345.678", "0.001"),
    ("de0", "DECIMAL(5,0)", "99999", "-1", "99999", "-1"),
    ("dmax", "DECIMAL(65,30)", "-" + MAX_DECIMAL, MAX_DECIMAL, "-" + MAX_DECIMAL, MAX_DECIMAL),
    ("dtiny", "DECIMAL(65,30)", "-0." + "0" * 29 + "1", "0", "-0." + "0" * 29 + "1", "0." + "0" * 30),
    ("fl", "FLOAT", "123456.789", "-1.17549435e-38", 123456.79, -1.1754944e-38),
    ("dbl", "DOUBLE", "0.1e0 + 0.2e0", "-1.7976931348623157e308", 0.30000000000000004, -1.7976931348623157e308),
    ("d", "DATE", "'2024-02-29'", "'0000-00-00'", "2024-02-29", None),
    ("dz", "DATE", "'2024-00-10'", "'1000-01-01'", None, "1000-01-01"),
    ("t0", "TIME", "'-838:59:59'", "'838:59:59'", "-838:59:59", "838:59:59"),
    ("t1", "TIME(1)", "'-00:00:00.5'", "'12:34:56.7'", "-00:00:00.5", "12:34:56.7"),
    ("t2", "TIME(2)", "'-01:02:03.04'", "'00:00:00.99'", "-01:02:03.04", "00:00:00.99"),
    ("t3", "TIME(3)", "'75:34:56.789'", "'-00:00:00.500'", "75:34:56.789", "-00:00:00.500"),
    ("t4", "TIME(4)", "'-12:00:00.0001'", "'23:59:59.9999'", "-12:00:00.0001", "23:59:59.9999"),
    ("t5", "TIME(5)", "'-838:59:58.99999'", "'00:00:00.00001'", "-838:59:58.99999", "00:00:00.00001"),
    ("t6", "TIME(6)", "'-00:00:00.000001'", "'838:59:59.000000'", "-00:00:00.000001", "838:59:59.000000"),
    ("dt0", "DATETIME", "'2024-01-02 03:04:05'", "'0000-00-00 00:00:00'", "2024-01-02T03:04:05", None),
    ("dt1", "DATETIME(1)", "'9999-12-31 23:59:59.9'", "'2024-05-00 10:00:00'", "9999-12-31T23:59:59.9", None),
    ("dt2", "DATETIME(2)", "'1000-01-01 00:00:00.01'", "'2000-02-29 12:00:00'", "1000-01-01T00:00:00.01",
     "2000-02-29T12:00:00.00"),
    ("dt3", "DATETIME(3)", "'2024-01-02 03:04:05.678'", "'2024-01-02 03:04:05'", "2024-01-02T03:04:05.678",
     "2024-01-02T03:04:05.000"),
    ("dt4", "DATETIME(4)", "'1999-12-31 23:59:59.9999'", "'1000-01-01 00:00:00.0001'", "1999-12-31T23:59:59.9999",
     "1000-01-01T00:00:00.0001"),
    ("dt5", "DATETIME(5)", "'2038-01-19 03:14:08.12345'", "'0000-00-00 00:00:00'", "2038-01-19T03:14:08.12345",
     None),
    ("dt6", "DATETIME(6)", "'9999-12-31 23:59:59.999999'", "'1000-01-01 00:00:00.000001'",
     "9999-12-31T23:59:59.999999", "1000-01-01T00:00:00.000001"),
    ("ts0", "TIMESTAMP NULL", "'2038-01-19 03:14:07'", "'0000-00-00 00:00:00'", "2038-01-19T03:14:07Z", None),
    ("ts1", "TIMESTAMP(1) NULL", "'1970-01-01 00:00:01.1'", "'2001-02-03 04:05:06'", "1970-01-01T00:00:01.1Z",
     "2001-02-03T04:05:06.0Z"),
    ("ts2", "TIMESTAMP(2) NULL", "'2020-02-29 23:59:59.99'", "'1970-01-01 00:00:01'", "2020-02-29T23:59:59.99Z",
     "1970-01-01T00:00:01.00Z"),
    ("ts3", "TIMESTAMP(3) NULL", "'2038-01-19 03:14:07.999'", "'1970-01-01 00:00:01'", "2038-01-19T03:14:07.999Z",
     "1970-01-01T00:00:01.000Z"),
    ("ts4", "TIMESTAMP(4) NULL", "'2001-09-09 01:46:40.0001'", "'0000-00-00 00:00:00'",
     "2001-09-09T01:46:40.0001Z", None),
    ("ts5", "TIMESTAMP(5) NULL", "'2024-06-30 12:00:00.12345'", "'1999-01-01 00:00:00'",
     "2024-06-30T12:00:00.12345Z", "1999-01-01T00:00:00.00000Z"),
    ("ts6", "TIMESTAMP(6) NULL", "'1970-01-01 00:00:01.000001'", "'2038-01-19 03:14:07.999999'",
     "1970-01-01T00:00:01.000001Z", "2038-01-19T03:14:07.999999Z"),
    ("y", "YEAR", "2155", "0", 2155, 0),
    ("y2", "YEAR", "1901", "'2000'", 1901, 2000),
    ("c", "CHAR(5)", "'ab'", "''", "ab", ""),
    ("vc", "VARCHAR(300)", "REPEAT('é', 300)", "''", "é" * 300, ""),
    ("tx", "TEXT", "'text ✓'", "''", "text ✓", ""),
    ("lt", "LONGTEXT", "'long 𝄞'", "''", "long 𝄞", ""),
    ("cbin", "VARCHAR(10) COLLATE utf8mb4_bin", "'Ab𝄞'", "'a'", "Ab𝄞", "a"),
    ("c3", "VARCHAR(10) CHARACTER SET utf8mb3", "'ñandú ✓'", "''", "ñandú ✓", ""),
    ("cl", "CHAR(4) CHARACTER SET latin1", "'àé'", "''", "àé", ""),
    ("vl", "VARCHAR(10) CHARACTER SET latin1", "'café€'", "x'81'", "café€", "\x81"),   # MySQL's latin1 is cp1252
    ("tl", "TEXT CHARACTER SET latin1", "'Ærø'", "''", "Ærø", ""),
    ("cb", "CHAR(4) CHARACTER SET binary", "'a'", "''", b64(b"a\0\0\0"), b64(b"\0" * 4)),
    ("bn", "BINARY(4)", "'a\\0'", "''", b64(b"a\0\0\0"), b64(b"\0" * 4)),
    ("vb", "VARBINARY(10)", "'x\\0y'", "''", b64(b"x\0y"), ""),
    ("bl", "BLOB", "x'00ff10'", "''", b64(b"\x00\xff\x10"), ""),
    ("lb", "LONGBLOB", "REPEAT(x'fe', 70000)", "''", b64(b"\xfe" * 70000), ""),
    ("j", "JSON", sql_string('{"k": [1, 2.5, null, "v"]}'), "'[]'", '{"k": [1, 2.5, null, "v"]}', "[]"),
    ("e", "ENUM('a','b','c')", "'b'", "''", "b", ""),           # '' is the invalid member, index 0
    ("e300", f"ENUM({members('v', 300)})", "'v299'", "'v0'", "v299", "v0"),     # 2-byte index
    ("st", "SET('x','y','z')", "'x,z'", "''", "x,z", ""),
    ("st64", f"SET({members('m', 64)})", "'m63,m0,m31'", "'m63'", "m0,m31,m63", "m63"),
    ("b1", "BIT(1)", "b'1'", "b'0'", 1, 0),
    ("b7", "BIT(7)", "b'1010101'", "0", 0b1010101, 0),
    ("b9", "BIT(9)", "511", "256", 511, 256),
    ("b10", "BIT(10)", "b'1010101010'", "0", 0b1010101010, 0),
    ("b17", "BIT(17)", "131071", "65536", 131071, 65536),
    ("b33", "BIT(33)", "8589934591", "4294967296", 8589934591, 4294967296),
    ("b63", "BIT(63)", "9223372036854775807", "1", 9223372036854775807, 1),
    ("b64", "BIT(64)", "18446744073709551615", "9223372036854775808", 18446744073709551615, 9223372036854775808),
    # geometries: row 1 with SRID 0, row 2 with SRID 4326; their WKB is compared with the server's below
    ("g", "GEOMETRY", "ST_GeomFromText('LINESTRING(0 0, 1 1)')", "ST_GeomFromText('POINT(5 5)', 4326)", 0, 4326),
    ("p", "POINT", "ST_GeomFromText('POINT(1 2)')", "ST_GeomFromText('POINT(-1.5 0)', 4326)", 0, 4326),
    ("ls", "LINESTRING", "ST_GeomFromText('LINESTRING(0 0, 1 2, 3 4)')",
     "ST_GeomFromText('LINESTRING(10 20, 30 40)', 4326)", 0, 4326),
    ("pg", "POLYGON", "ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 0), (1 1, 2 1, 2 2, 1 1))')",
     "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))', 4326)", 0, 4326),
    ("mp", "MULTIPOINT", "ST_GeomFromText('MULTIPOINT(1 1, 2 3)')",
     "ST_GeomFromText('MULTIPOINT(1 1, 2 3)', 4326)", 0, 4326),
    ("mls", "MULTILINESTRING", "ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 4))')",
     "ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 4))', 4326)", 0, 4326),
    ("mpg", "MULTIPOLYGON", "ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5)))')",
     "ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)))', 4326)", 0, 4326),
    ("gc", "GEOMETRYCOLLECTION", "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 2))')",
     "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 2))', 4326)", 0, 4326),
    # generated columns (both servers log VIRTUAL ones too, with their values) and an invisible column
    ("gs", "INT AS (ti * 2) STORED", None, None, -256, 254),
    ("gv", "INT AS (ti * 3) VIRTUAL", None, None, -384, 381),
    ("gvt", "VARCHAR(20) AS (CONCAT('t', ti)) VIRTUAL", None, None, "t-128", "t127"),
    ("inv", "INT INVISIBLE", "42", "-1", 42, -1),
]

MYSQL = [
    ("vec", "VECTOR(3)", "STRING_TO_VECTOR('[1.5, -2.25, 0.1]')", "x'01000080ffff7f7f00000000'",   # (bytes: a subnormal)
     [1.5, -2.25, 0.1], [-1e-45, 3.4028235e38, 0.0]),
    ("vecmax", "VECTOR", "STRING_TO_VECTOR(CONCAT('[', REPEAT('0.3,', 2047), '-7]'))",
     "STRING_TO_VECTOR('[1]')", [0.3] * 2047 + [-7.0], [1.0]),
    # (a character column right after the vectors: VECTOR counts among the table map's character columns)
    ("cai", "VARCHAR(10) COLLATE utf8mb4_0900_ai_ci", "'Ab𝄞'", "''", "Ab𝄞", ""),
    ("c0b", "VARCHAR(10) COLLATE utf8mb4_0900_bin", "'é€'", "'z'", "é€", "z"),
    ("jnum", "JSON", sql_string("[1e0, 2.5, 1e300, -0.0, 0.1, 1e15, 1e14, 1.5e-7, 1e-15, 1e-16, 5e-324, -123.456e-20]"),
     sql_string("[9223372036854775807, -9223372036854775808, 18446744073709551615, true, false, null, -32768, 65535, "
                "-2147483648, 4294967295]"),
     "[1.0, 2.5, 1e300, -0.0, 0.1, 1e15, 100000000000000.0, 0.00000015, 0.000000000000001, 1e-16, 5e-324, "
     "-1.23456e-18]",
     "[9223372036854775807, -9223372036854775808, 18446744073709551615, true, false, null, -32768, 65535, "
     "-2147483648, 4294967295]"),
    ("jstr", "JSON", sql_string('{"zz": "a\\"b\\\\ \\n\\t\\u0001\\u001f\x7f é 𝄞", "a": {"b": [[], {}]}}'),
     sql_string('""'), '{"a": {"b": [[], {}]}, "zz": "a\\"b\\\\ \\n\\t\\u0001\\u001f\x7f é 𝄞"}', '""'),
    ("jopq", "JSON", "JSON_ARRAY(CAST(12.50 AS DECIMAL(5,2)), CAST('2024-01-02' AS DATE), "
     "CAST('-12:34:56.5' AS TIME(1)), CAST('2024-01-02 03:04:05.25' AS DATETIME(2)), CAST(x'0102ff' AS JSON), "
     "TIMESTAMP'2001-02-03 04:05:06')",
     "CAST(REPEAT(x'ab', 60) AS JSON)",
     '[12.50, "2024-01-02", "-12:34:56.500000", "2024-01-02 03:04:05.250000", "base64:type15:AQL/", '
     '"2001-02-03 04:05:06.000000"]',
     '"base64:type15:' + b64(b"\xab" * 60)[:76] + "\\n" + b64(b"\xab" * 60)[76:] + '"'),
    ("jbig", "JSON", "JSON_OBJECT('k', REPEAT('x', 70000), 'n', 70000)", "CAST(-0.5 AS JSON)",
     '{"k": "' + "x" * 70000 + '", "n": 70000}', "-0.5"),
]

MARIADB = [
    ("jm", "JSON", sql_string('{"b":1,  "a" : [1,2]}'), "'  [ ]'", '{"b":1,  "a" : [1,2]}', "  [ ]"),   # as written
]


def columns(kind: str) -> list[tuple]:
    return COMMON + (MYSQL if kind == "mysql" else MARIADB)


def create_and_insert(server, db: str, table: str) -> None:
    cols = columns(server.kind)
    stored = [c for c in cols if c[2] is not None]      # generated columns take no values
    names = ", ".join(c[0] for c in stored)
    rows = [f"(1, {', '.join(c[2] for c in stored)})", f"(2, {', '.join(c[3] for c in stored)})",
            f"(3{', NULL' * len(stored)})"]
    server.sql("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'", "SET SESSION time_zone = '+00:00'",
               f"CREATE TABLE `{db}`.{table} (id INT PRIMARY KEY, "
               + ", ".join(f"`{c[0]}` {c[1]}" for c in cols) + ") DEFAULT CHARSET=utf8mb4",
               f"INSERT INTO `{db}`.{table} (id, {names}) VALUES {', '.join(rows)}")


@pytest.fixture(scope="module")
def mapped(server):
    """Rows of every type read by the snapshot (src), then copied so the binlog carries them (dst)."""
    db = server.new_database()
    create_and_insert(server, db, "src")
    capture = Capture(server)
    config = capture.config(db)
    snapshot = capture.run(config)
    stored = ", ".join(["id"] + [c[0] for c in columns(server.kind) if c[2] is not None])
    server.sql("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'", "SET SESSION time_zone = '+00:00'",
               f"CREATE TABLE `{db}`.dst LIKE `{db}`.src",
               f"INSERT INTO `{db}`.dst ({stored}) SELECT {stored} FROM `{db}`.src",
               f"UPDATE `{db}`.dst SET c = 'zz' WHERE id = 1", f"DELETE FROM `{db}`.dst WHERE id = 2")
    streamed = capture.run(config, offset=snapshot[-1].offset)
    return db, Capture.changes(snapshot, ".src"), Capture.changes(streamed, ".dst")


def test_binlog_and_snapshot_give_identical_values(mapped):
    _, snapshot, streamed = mapped
    snapped = {v["after"]["id"]: v["after"] for v in snapshot if v["op"] == "r"}
    assert sorted(snapped) == [1, 2, 3]
    created = {v["after"]["id"]: v["after"] for v in streamed if v["op"] == "c"}
    assert created == snapped
    update = next(v for v in streamed if v["op"] == "u")
    assert update["before"] == snapped[1] and update["after"] == {**snapped[1], "c": "zz"}
    delete = next(v for v in streamed if v["op"] == "d")
    assert delete["before"] == snapped[2] and delete["after"] is None


def test_documented_mapping(server, mapped):
    db, snapshot, _ = mapped
    rows = {v["after"]["id"]: v["after"] for v in snapshot}
    cols = columns(server.kind)
    assert set(rows[1]) == {"id"} | {c[0] for c in cols}           # invisible and generated columns included
    geometries = [c[0] for c in cols if c[1].split()[0].lower() in GEOMETRY_TYPES]
    for name, _, _, _, first, second in cols:
        if name in geometries:
            assert (rows[1][name]["srid"], rows[2][name]["srid"]) == (first, second), name
        else:
            assert (rows[1][name], rows[2][name]) == (first, second), name
        assert rows[3][name] is None, name
    # GEOMETRY: {"srid", "wkb"}, the WKB as the server stores it (geographic SRIDs on MySQL: longitude first)
    order = ", 'axis-order=long-lat'" if server.kind == "mysql" else ""
    for name in geometries:
        stored = server.sql(f"SELECT id, ST_AsBinary(`{name}`{order}) FROM `{db}`.src WHERE id < 3 ORDER BY id")
        assert [rows[i][name]["wkb"] for i in (1, 2)] == [b64(wkb) for _, wkb in stored], name
    assert base64.b64decode(rows[1]["p"]["wkb"]) == bytes.fromhex("0101000000" "000000000000f03f" "0000000000000040")


def test_geographic_point_keeps_the_servers_axis_order(server, db, capture):
    """POINT(1 2) with SRID 4326 is latitude 1, longitude 2 to MySQL 8+, which stores x=2, y=1; MariaDB
    stores the coordinates as written. The value carries what is stored, as Debezium does."""
    server.sql(f"CREATE TABLE `{db}`.geo (id INT PRIMARY KEY, p POINT)",
               f"INSERT INTO `{db}`.geo VALUES (1, ST_GeomFromText('POINT(1 2)', 4326))")
    point = Capture.changes(capture.run(capture.config(db)))[0]["after"]["p"]
    x, y = (2.0, 1.0) if server.kind == "mysql" else (1.0, 2.0)
    assert point == {"srid": 4326, "wkb": b64(b"\x01\x01\x00\x00\x00" + struct.pack("<dd", x, y))}


def test_invisible_primary_key(server, db, capture):
    """A primary key the application never sees: MySQL generates `my_row_id` for tables created without one
    when sql_generate_invisible_primary_key is on; MariaDB has it declared. Keys and values both ways."""
    if server.kind == "mysql":
        statements = ["SET SESSION sql_generate_invisible_primary_key = ON", f"CREATE TABLE `{db}`.gipk (a INT)"]
    else:
        statements = [f"CREATE TABLE `{db}`.gipk (my_row_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT INVISIBLE "
                      "PRIMARY KEY, a INT)"]
    server.sql(*statements, f"INSERT INTO `{db}`.gipk (a) VALUES (10), (20)")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"INSERT INTO `{db}`.gipk (a) VALUES (30)", f"UPDATE `{db}`.gipk SET a = 21 WHERE a = 20")
    streamed = capture.run(config, offset=snapshot[-1].offset)
    records = [r for r in Capture.records(snapshot + streamed) if r["value"] and "op" in r["value"]]
    assert [(r["key"], r["value"]["op"], r["value"]["after"]) for r in records] == [
        ({"my_row_id": 1}, "r", {"my_row_id": 1, "a": 10}), ({"my_row_id": 2}, "r", {"my_row_id": 2, "a": 20}),
        ({"my_row_id": 3}, "c", {"my_row_id": 3, "a": 30}), ({"my_row_id": 2}, "u", {"my_row_id": 2, "a": 21})]


def test_json_added_to_existing_rows_is_json_null(server, db, capture):
    """A NOT NULL JSON column added to existing rows holds an empty value on MySQL, which prints `null`
    (MariaDB checks JSON_VALID, so there the rows get a default)."""
    default = " DEFAULT 'null'" if server.kind == "mariadb" else ""
    server.sql(f"CREATE TABLE `{db}`.late (id INT PRIMARY KEY, a INT)", f"INSERT INTO `{db}`.late VALUES (1, 1)",
               f"ALTER TABLE `{db}`.late ADD COLUMN j JSON NOT NULL{default}")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"UPDATE `{db}`.late SET a = 2")
    update = Capture.changes(capture.run(config, offset=snapshot[-1].offset))[0]
    snapped = Capture.changes(snapshot)[0]["after"]
    assert update["before"] == snapped and update["after"] == {**snapped, "a": 2}
    assert snapped["j"] == "null" == server.sql(f"SELECT j FROM `{db}`.late")[0][0]


def test_random_json_numbers_and_strings_agree_with_the_server(server, db, capture):
    """Doubles of every magnitude, integers at the edges, strings with every control character: the
    binlog's JSON text equals what the server prints (the snapshot's)."""
    rng = random.Random(7)
    server.sql(f"CREATE TABLE `{db}`.js (id INT PRIMARY KEY, j JSON)")
    config = capture.config(db)
    snapshot = capture.run(config)
    rows = []
    for i in range(200):
        doubles = [f"{rng.choice(['-', ''])}{number(rng)}e{rng.randint(-330, 300)}" for _ in range(8)]
        ints = [str(rng.choice([rng.randint(-2**63, 2**63 - 1), rng.randint(0, 2**64 - 1), rng.randint(-999, 999)]))]
        text = "".join(chr(rng.choice([rng.randint(0, 0x7f), rng.randint(0x80, 0xd7ff), rng.randint(0x10000, 0x1f9ff)]))
                       for _ in range(12))
        doc = "[" + ", ".join(doubles + ints + [json.dumps(text)]) + "]"
        rows.append(f"({i}, {sql_string(doc)})")
    server.sql(f"INSERT INTO `{db}`.js VALUES {', '.join(rows)}")
    streamed = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(config, offset=snapshot[-1].offset))}
    snapped = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(capture.config(db)))}
    assert len(streamed) == 200 and streamed == snapped


def number(rng: random.Random) -> str:
    """A decimal mantissa with 1 to 17 significant digits."""
    digits = str(rng.randint(1, 10 ** rng.randint(1, 17)))
    return digits[0] + ("." + digits[1:] if len(digits) > 1 else "")


def test_random_decimals_and_temporals_agree_with_the_server(server, db, capture):
    """Many random values through the generated decoders, compared with the server's own text."""
    rng = random.Random(11)
    specs = [(1, 0), (9, 9), (10, 2), (18, 9), (19, 0), (27, 13), (65, 30), (40, 1)]
    cols = ", ".join(f"d{i} DECIMAL({p},{s})" for i, (p, s) in enumerate(specs))
    server.sql(f"CREATE TABLE `{db}`.r (id INT PRIMARY KEY, {cols}, dt DATETIME(4), t TIME(5), ts TIMESTAMP(1) NULL)")
    config = capture.config(db)
    snapshot = capture.run(config)

    def decimal(p, s):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, p)))
        whole, frac = digits[:max(len(digits) - s, 0)] or "0", digits[max(len(digits) - s, 0):].rjust(s, "0")
        return ("-" if rng.random() < 0.5 else "") + whole + ("." + frac if s else "")

    rows = []
    for i in range(300):
        values = [f"'{decimal(p, s)}'" for p, s in specs]
        dt = f"'{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} " \
             f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 9999):04d}'"
        t = f"'{rng.choice(['-', ''])}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 99999):05d}'"
        ts = f"FROM_UNIXTIME({rng.randint(1, 2**31 - 1)}.{rng.randint(0, 9)})"
        rows.append(f"({i}, {', '.join(values)}, {dt}, {t}, {ts})")
    server.sql("SET time_zone = '+00:00'", f"INSERT INTO `{db}`.r VALUES {', '.join(rows)}")
    streamed = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(config, offset=snapshot[-1].offset))}
    snapped = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(capture.config(db)))}
    assert len(streamed) == 300 and streamed == snapped
