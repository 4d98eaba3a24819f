"""Every MySQL type maps to one documented value, and the binlog and the snapshot agree on it."""

from __future__ import annotations

import base64
import random

import pytest

from cdc_harness import Capture

COLUMNS = """
    id INT PRIMARY KEY,
    ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
    i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, bo BOOLEAN,
    de DECIMAL(10,3), de0 DECIMAL(5,0), dbig DECIMAL(65,30), fl FLOAT, dbl DOUBLE,
    d DATE, t TIME, t3 TIME(3), dt DATETIME, dt6 DATETIME(6), ts TIMESTAMP(3) NULL, y YEAR,
    c CHAR(5), vc VARCHAR(300), tx TEXT, lt LONGTEXT, cl CHAR(4) CHARACTER SET latin1, vl VARCHAR(10) CHARACTER SET latin1,
    bn BINARY(4), vb VARBINARY(10), bl BLOB, j JSON,
    e ENUM('a','b','c'), st SET('x','y','z'), b1 BIT(1), b10 BIT(10), b64 BIT(64),
    g GEOMETRY, p POINT
"""

ROWS = [
    "(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, "
    "18446744073709551615, TRUE, -12345.678, 99999, -12345678901234567890123456789012345.123456789012345678901234567890, "
    "123456.789, 0.1e0 + 0.2e0, '2024-02-29', '-838:59:59', '75:34:56.789', '2024-01-02 03:04:05', "
    "'9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', 2155, 'ab', REPEAT('é', 300), 'text ✓', "
    "'long 𝄞', 'àé', 'café€', 'a\\0', 'x\\0y', x'00ff10', '{\"k\": [1, 2.5, null, \"v\"]}', 'b', 'x,z', b'1', "
    "b'1010101010', b'1111111111111111111111111111111111111111111111111111111111111111', "
    "ST_GeomFromText('LINESTRING(0 0, 1 1)'), ST_GeomFromText('POINT(1 2)', 4326))",
    "(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, FALSE, 0.001, -1, 0, "
    "-1.17549435e-38, -1.7976931348623157e308, '0000-00-00', '00:00:00', '-00:00:00.500', '0000-00-00 00:00:00', "
    "'1000-01-01 00:00:00.000001', '1970-01-01 00:00:01', 0, '', '', '', '', '', '', '', '', '', '[]', '', '', "
    "b'0', b'0', b'0', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'), ST_GeomFromText('POINT(-1.5 0)'))",
    "(3" + ", NULL" * 40 + ")",
]


@pytest.fixture(scope="module")
def mapped(server):
    """Rows of every type read by the snapshot (src), then copied so the binlog carries them (dst)."""
    db = server.new_database()
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE src ({COLUMNS}) DEFAULT CHARSET=utf8mb4")
        cur.execute(f"CREATE TABLE dst ({COLUMNS}) DEFAULT CHARSET=utf8mb4")
        cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")
        cur.execute(f"INSERT INTO src VALUES {', '.join(ROWS)}")
    capture = Capture(server)
    config = capture.config(db)
    snapshot = capture.run(config)
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")
        cur.execute("INSERT INTO dst SELECT * FROM src")
        cur.execute("UPDATE dst SET c = 'zz' WHERE id = 1")
        cur.execute("DELETE FROM dst WHERE id = 2")
    streamed = capture.run(config, offset=snapshot[-1].offset)
    return capture.changes(snapshot, ".src"), capture.changes(streamed, ".dst")


def test_binlog_and_snapshot_give_identical_values(mapped):
    snapshot, streamed = mapped
    snapped = {v["after"]["id"]: v["after"] for v in snapshot if v["op"] == "r"}
    assert sorted(snapped) == [1, 2, 3]
    created = {v["after"]["id"]: v["after"] for v in streamed if v["op"] == "c"}
    assert created == snapped
    update = next(v for v in streamed if v["op"] == "u")
    assert update["before"] == snapped[1] and update["after"] == {**snapped[1], "c": "zz"}
    delete = next(v for v in streamed if v["op"] == "d")
    assert delete["before"] == snapped[2] and delete["after"] is None


def test_documented_mapping(mapped):
    snapped = {v["after"]["id"]: v["after"] for v in mapped[0]}
    r1, r2, r3 = snapped[1], snapped[2], snapped[3]
    assert r1["biu"] == 18446744073709551615 and r1["bi"] == -9223372036854775808
    assert r1["tiu"] == 255 and r1["miu"] == 16777215 and r1["bo"] == 1 and r2["bo"] == 0
    assert r1["de"] == "-12345.678" and r2["de"] == "0.001" and r2["de0"] == "-1" and r2["dbig"] == "0." + "0" * 30
    assert r1["dbig"] == "-12345678901234567890123456789012345.123456789012345678901234567890"
    assert r1["fl"] == 123456.79 and r2["fl"] == -1.1754944e-38       # shortest float32 decimal
    assert r1["dbl"] == 0.30000000000000004 and r2["dbl"] == -1.7976931348623157e308
    assert r1["d"] == "2024-02-29" and r2["d"] is None
    assert r1["t"] == "-838:59:59" and r1["t3"] == "75:34:56.789" and r2["t3"] == "-00:00:00.500"
    assert r1["dt"] == "2024-01-02T03:04:05" and r2["dt"] is None
    assert r1["dt6"] == "9999-12-31T23:59:59.999999" and r2["dt6"] == "1000-01-01T00:00:00.000001"
    assert r1["ts"] == "2038-01-19T03:14:07.999Z" and r2["ts"] == "1970-01-01T00:00:01.000Z"
    assert r1["y"] == 2155 and r2["y"] == 0
    assert r1["c"] == "ab" and r1["vc"] == "é" * 300 and r1["tx"] == "text ✓" and r1["lt"] == "long 𝄞"
    assert r1["cl"] == "àé" and r1["vl"] == "café€"
    assert base64.b64decode(r1["bn"]) == b"a\0\0\0" and base64.b64decode(r1["vb"]) == b"x\0y"
    assert base64.b64decode(r1["bl"]) == b"\x00\xff\x10" and r2["bn"] == base64.b64encode(b"\0" * 4).decode()
    assert r1["j"] == '{"k": [1, 2.5, null, "v"]}' and r2["j"] == "[]"
    assert r1["e"] == "b" and r1["st"] == "x,z" and r2["e"] == "" and r2["st"] == ""
    assert r1["b1"] == 1 and r1["b10"] == 0b1010101010 and r1["b64"] == 2**64 - 1 and r2["b10"] == 0
    assert r1["p"]["srid"] == 4326 and r1["g"]["srid"] == 0
    assert base64.b64decode(r1["p"]["wkb"])[:5] == b"\x01\x01\x00\x00\x00"     # little-endian WKB point
    assert all(v is None for k, v in r3.items() if k != "id")


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
        t = f"'{rng.choice('-+')}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 99999):05d}'"
        ts = f"FROM_UNIXTIME({rng.randint(1, 2**31 - 1)}.{rng.randint(0, 9)})"
        rows.append(f"({i}, {', '.join(values)}, {dt}, {t}, {ts})")
    server.sql("SET time_zone = '+00:00'", f"INSERT INTO `{db}`.r VALUES {', '.join(rows)}")
    streamed = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(config, offset=snapshot[-1].offset))}
    snapped = {c["after"]["id"]: c["after"] for c in Capture.changes(capture.run(capture.config(db)))}
    assert len(streamed) == 300 and streamed == snapped
