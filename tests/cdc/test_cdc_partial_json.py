"""MySQL's partial JSON updates (binlog_row_value_options=PARTIAL_JSON): PARTIAL_UPDATE_ROWS events carry
diffs for JSON columns, and the source turns them back into the whole documents the server holds.

Every statement runs twice: on table `t` from a session with PARTIAL_JSON (diffs in the binlog) and on
its twin `f` from a plain session (whole documents). The change events of both must equal what
`SELECT` prints after each statement, and SHOW BINLOG EVENTS must show that `t`'s updates really
were partial: each event much smaller than its twin's, which carries the padded document twice.
"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from sandbox.sql import start_server
from cdc.binlog import PyMySqlReplicationClient, ReplayClient
from cdc.binlog.events import Rows
from cdc.errors import DecodeError
from cdc.jsondiff import JsonDiffError, apply_diffs, parse_path
from cdc.offsets import BinlogPosition
from cdc_harness import Capture

PAD = 2000   # characters of padding in each document: a full after image would carry them again


@pytest.fixture(scope="module")
def mysql_full(mysql_template, tmp_path_factory):
    """MySQL with full row metadata (the source refuses MINIMAL until that work lands); GTIDs as deployed."""
    server = start_server("mysql", tmp_path_factory.mktemp("mysql-full"), mysql_template,
                          {"log-bin": "binlog", "server-id": "1", "gtid-mode": "ON", "enforce-gtid-consistency": "ON",
                           "binlog-row-metadata": "FULL"})
    yield server
    server.stop()


COLUMNS = "id INT PRIMARY KEY, j JSON, k JSON, n JSON NULL, s VARCHAR(20)"
ROWS = [f"({i}, JSON_OBJECT('a', {i}, 'b', JSON_ARRAY(1, 2, 3), 'c', JSON_OBJECT('d', 'x', 'e', 'y'), 's', 5, "
        f"'pad', REPEAT('p', {PAD})), {k}, {n}, 'r{i}')"
        for i, k, n in [(1, "'[1, \"k\"]'", "NULL"), (2, "'{\"w\": 0}'", "'{\"a\": 1}'"), (3, "NULL", "NULL")]]

# (SET clause, WHERE clause, whether `j` changes through diffs only)
STATEMENTS = [
    ("j = JSON_SET(j, '$.a', 2)", "id = 1", True),                                       # replace a number
    ("j = JSON_SET(j, '$.new', 'é𝄞 \"q\"\\n\\t')", "id = 1", True),                    # insert: key order, escapes
    ("j = JSON_REPLACE(j, '$.b[1]', JSON_OBJECT('x', JSON_ARRAY(1, 2.5, NULL)))", "id = 1", True),
    ("j = JSON_REMOVE(j, '$.c.d')", "id = 1", True),                                     # nested member
    (r"""j = JSON_SET(j, '$."k y"', 18446744073709551615, '$."a.b[0]"', -9223372036854775808, '$.é', 'ü',"""
     r""" '$.""', '', '$."q\\"x"', 1)""", "id = 1", True),                              # keys needing quotes
    ("j = JSON_SET(j, '$.b[last]', 1.5e300, '$.b[10]', 0.1e0 + 0.2e0, '$.b[0]', -1e-20, '$.b[1].x[1]', 1e15)",
     "id = 1", True),                                                                     # last, past the end, doubles
    ("j = JSON_SET(j, '$.t', true, '$.f', false, '$.z', CAST('null' AS JSON), '$.c.e', 12345678.9e0)", "id = 1", True),
    ("j = JSON_SET(j, '$.dec', CAST(12.50 AS DECIMAL(6,2)), '$.dt', CAST('2024-02-29 23:59:59.123456' AS DATETIME(6)),"
     " '$.d', CAST('2024-01-02' AS DATE), '$.tm', CAST('-838:59:59' AS TIME), '$.bin', CAST(x'00ff' AS BINARY))",
     "id = 1", True),                                                                     # opaque values
    ("j = JSON_REMOVE(j, '$.b[0]', '$.b[last-1]')", "id = 1", True),                     # array elements
    ("j = JSON_SET(j, '$.c', JSON_ARRAY(), '$.c[0]', 'first', '$.c[5]', JSON_OBJECT())", "id = 1", True),
    ("j = JSON_SET(j, '$.s[1]', 8)", "id = 1", True),                                    # a scalar becomes an array
    ("j = JSON_SET(j, '$.a', id * 10, '$.c', JSON_OBJECT('id', id))", None, True),       # several rows
    ("j = JSON_SET(j, '$.m', 1), k = JSON_ARRAY(id)", None, True),                       # j partial, k whole
    ("n = JSON_SET(n, '$.a', 5)", None, False),                                          # only row 2: NULL stays NULL
    ("n = JSON_OBJECT('from', 'null')", "id = 1", False),                                # NULL to a document
    ("j = NULL", "id = 3", False),                                                       # a document to NULL
    ("j = JSON_SET(j, '$.a', 99), s = 'changed'", "id = 2", True),
]


def _rows(cur, table: str) -> dict[int, dict]:
    cur.execute(f"SELECT id, j, k, n, s FROM {table} ORDER BY id")
    return {r[0]: dict(zip(("id", "j", "k", "n", "s"), r)) for r in cur.fetchall()}


def _rows_events(server, start: dict) -> dict[str, list[tuple[set[str], int]]]:
    """Per table, per transaction since `start`: the kinds of its rows events and their total size
    (the server splits a statement's rows over several events when they are large)."""
    names: dict[str, str] = {}
    transactions: list[dict[str, tuple[set[str], int]]] = []
    for _, pos, kind, _, end, info in server.sql(f"SHOW BINLOG EVENTS IN '{start['file']}' FROM {start['pos']}"):
        if kind == "Gtid":
            transactions.append({})
        elif kind == "Table_map":
            table_id, name = re.match(r"table_id: (\d+) \(\w+\.(\w+)\)", info).groups()
            names[table_id] = name
        elif kind.endswith("_rows") or kind.endswith("_rows_partial"):
            name = names[re.match(r"table_id: (\d+)", info).group(1)]
            kinds, size = transactions[-1].get(name, (set(), 0))
            transactions[-1][name] = kinds | {kind}, size + end - pos
    found: dict[str, list[tuple[set[str], int]]] = {}
    for transaction in transactions:
        for name, summary in transaction.items():
            found.setdefault(name, []).append(summary)
    return found


def test_partial_updates_carry_the_documents_the_server_holds(mysql_full):
    db = mysql_full.new_database()
    capture = Capture(mysql_full)
    mysql_full.sql(f"CREATE TABLE t ({COLUMNS})", "CREATE TABLE f LIKE t", db=db)
    config = capture.config(db)
    start = capture.run(config)[-1].offset
    expected: dict[str, list[tuple[dict, dict]]] = {"t": [], "f": []}    # (before, after) per changed row
    with mysql_full.connect(db=db) as partial, partial.cursor() as p_cur, \
            mysql_full.connect(db=db) as full, full.cursor() as f_cur:
        p_cur.execute("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
        for table, cur in (("t", p_cur), ("f", f_cur)):
            cur.execute(f"INSERT INTO {table} VALUES {', '.join(ROWS)}")
        after_insert = capture.run(config, offset=start)[-1].offset
        for set_clause, where, _ in STATEMENTS:
            for table, cur in (("t", p_cur), ("f", f_cur)):
                old = _rows(cur, table)
                cur.execute(f"UPDATE {table} SET {set_clause}" + (f" WHERE {where}" if where else ""))
                new = _rows(cur, table)
                changed = [(old[i], new[i]) for i in sorted(new) if new[i] != old[i]]
                assert changed, f"{set_clause!r} changed nothing in {table}"
                expected[table].append(changed)
        assert _rows(p_cur, "t") == _rows(f_cur, "f")

    batches = capture.run(config, offset=after_insert)
    for table in ("t", "f"):
        updates = [c for c in Capture.changes(batches, f".{table}") if c["op"] == "u"]
        transactions = list(dict.fromkeys(u["source"]["gtid"] for u in updates))
        by_statement = [sorted(((u["before"], u["after"]) for u in updates if u["source"]["gtid"] == gtid),
                               key=lambda change: change[1]["id"]) for gtid in transactions]
        assert by_statement == expected[table], f"table {table}"

    events = _rows_events(mysql_full, after_insert)
    assert [kinds for kinds, _ in events["t"]] == [{"Update_rows_partial"}] * len(STATEMENTS)
    assert [kinds for kinds, _ in events["f"]] == [{"Update_rows"}] * len(STATEMENTS)
    for (_, partial_size), (_, full_size), (set_clause, _, diffs) in zip(events["t"], events["f"], STATEMENTS):
        if diffs:
            assert partial_size + PAD // 2 < full_size, f"{set_clause!r} was logged with whole documents"


def test_global_partial_json_is_accepted_and_decoded(mysql_full):
    """With PARTIAL_JSON as the server's default every session writes partial updates; the source starts."""
    db = mysql_full.new_database()
    capture = Capture(mysql_full)
    mysql_full.sql("CREATE TABLE t (id INT PRIMARY KEY, j JSON)",
                   f"INSERT INTO t VALUES (1, JSON_OBJECT('a', JSON_ARRAY(1, 2), 'pad', REPEAT('p', {PAD})))", db=db)
    mysql_full.sql("SET GLOBAL binlog_row_value_options = 'PARTIAL_JSON'")
    try:
        config = capture.config(db)
        start = capture.run(config)[-1].offset
        mysql_full.sql("UPDATE t SET j = JSON_SET(j, '$.a[0]', 'x', '$.b', 1.0e0)", db=db)
        after = [c["after"] for c in Capture.changes(capture.run(config, offset=start))]
    finally:
        mysql_full.sql("SET GLOBAL binlog_row_value_options = ''")
    assert after == [{"id": 1, "j": mysql_full.sql("SELECT j FROM t", db=db)[0][0]}]
    assert [kinds for kinds, _ in _rows_events(mysql_full, start)["t"]] == [{"Update_rows_partial"}]


def test_a_diff_that_does_not_fit_stops_with_table_position_and_path(mysql_full, tmp_path):
    """The diffs of a recorded event are made to name a member the document lacks: the source stops
    and says where, instead of emitting a wrong document."""
    db = mysql_full.new_database()
    capture = Capture(mysql_full)
    mysql_full.sql("CREATE TABLE t (id INT PRIMARY KEY, j JSON)",
                   "INSERT INTO t VALUES (1, '{\"zz9\": 1, \"other\": 2}')", db=db)
    config = capture.config(db)
    start = capture.run(config)[-1].offset
    with mysql_full.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
        cur.execute("UPDATE t SET j = JSON_SET(j, '$.zz9', 5)")
    client = PyMySqlReplicationClient(mysql_full.settings(), 998, BinlogPosition(start["file"], start["pos"]),
                                      blocking=False)
    events = list(client.events())
    partial = [e for e in events if isinstance(e, Rows) and e.partial]
    assert len(partial) == 1 and b"$.zz9" in partial[0].data[partial[0].begin:partial[0].stop]
    bad = dataclasses.replace(partial[0], data=partial[0].data.replace(b"$.zz9", b"$.qq9"))
    replayed = [bad if e is partial[0] else e for e in events]
    with pytest.raises(DecodeError) as err:
        capture.run(config, offset=start, client_factory=lambda offset: ReplayClient(replayed))
    message = str(err.value)
    assert f"{db}.t at {bad.file}:{bad.start}" in message
    assert "column 'j', path $.qq9: cannot REPLACE: no member 'qq9'" in message
    assert "binlog_row_value_options=''" in message


def test_random_doubles_print_as_the_server_prints_them(mysql_full):
    """Doubles of every magnitude, whole documents and through diffs, against the server's text."""
    rng = random.Random(7)
    numbers = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(150)]
    numbers += [float(rng.randint(-10**17, 10**17)) for _ in range(30)] + [1e15, 1e16, 123456789012345.6, 5e-324]
    db = mysql_full.new_database()
    capture = Capture(mysql_full)
    mysql_full.sql("CREATE TABLE t (id INT PRIMARY KEY, j JSON)",
                   f"INSERT INTO t VALUES (1, JSON_OBJECT('pad', REPEAT('p', {PAD})))", db=db)
    config = capture.config(db)
    start = capture.run(config)[-1].offset
    literals = ", ".join(f"{x!r}e0" if "e" not in repr(x) else repr(x) for x in numbers)
    with mysql_full.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO t VALUES (2, JSON_ARRAY({literals}))")
        cur.execute("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
        cur.execute(f"UPDATE t SET j = JSON_SET(j, '$.n', JSON_ARRAY({literals})) WHERE id = 1")
        cur.execute("SELECT id, j FROM t ORDER BY id")
        server = dict(cur.fetchall())
    streamed = {c["after"]["id"]: c["after"]["j"] for c in Capture.changes(capture.run(config, offset=start))}
    assert streamed == server


def test_diff_list_errors_name_the_column_and_path():
    document = bytes.fromhex("00 01 00 0c 00 0b 00 01 00 05 01 00") + b"a"    # {"a": 1}
    assert apply_diffs(document, b"\x00\x03$.a\x03\x05\x02\x00", "j") == '{"a": 2}'
    assert apply_diffs(document, b"\x01\x03$.b\x02\x04\x00", "j") == '{"a": 1, "b": null}'
    with pytest.raises(JsonDiffError, match=r"column 'j', path \$\.a: the next diff has an unknown operation 7"):
        apply_diffs(document, b"\x00\x03$.a\x03\x05\x02\x00\x07", "j")
    with pytest.raises(JsonDiffError, match=r"path \$\.a: the diff's value \(9 bytes at 6\) runs past the 9 bytes"):
        apply_diffs(document, b"\x00\x03$.a\x09\x05\x02\x00", "j")
    with pytest.raises(JsonDiffError, match=r"path \$\.a: cannot INSERT: member 'a' exists already"):
        apply_diffs(document, b"\x01\x03$.a\x03\x05\x02\x00", "j")
    with pytest.raises(JsonDiffError, match=r"path \$\.a\[0\]: cannot REMOVE: the parent is a scalar"):
        apply_diffs(document, b"\x02\x06$.a[0]", "j")
    with pytest.raises(JsonDiffError, match=r"path \$\.x\.y: cannot REPLACE: \$\.x does not exist"):
        apply_diffs(document, b"\x00\x05$.x.y\x03\x05\x02\x00", "j")
    with pytest.raises(JsonDiffError, match=r"path \$\.a: the column had no value before the update"):
        apply_diffs(None, b"\x00\x03$.a\x03\x05\x02\x00", "j")


def test_paths_as_the_server_writes_them():
    assert parse_path("$") == []
    assert parse_path('$.a[3]."k y"[last][last-2].é."q\\"x"') == ["a", 3, "k y", -1, -3, "é", 'q"x']
    for bad in ("a.b", "$.*", "$[1 to 2]", "$**.a", "$.a["):
        with pytest.raises(ValueError):
            parse_path(bad)
