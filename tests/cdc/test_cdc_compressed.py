"""Compressed binlog events and the events nobody decodes.

MySQL's compressed transactions (binlog_transaction_compression, per session) and MariaDB's
compressed events (log_bin_compress) decode exactly like inline ones, resume in the middle of a
compressed transaction, and each row keeps a distinct (position, row). An event type binlake does not
know stops the source with its type code and position unless the server marked it ignorable: tested
with forged events appended to a closed binlog file of a real server, which sends them to the
source as it would any other. Statement-based DML and two-phase XA stop with what to change.
"""

from __future__ import annotations

import struct
import time
import zlib

import pytest

from cdc_harness import Capture
from cdc.errors import DecodeError
from sandbox.sql import start_server

MYSQL_FULL_METADATA = {"log-bin": "binlog", "server-id": "1", "gtid-mode": "ON", "enforce-gtid-consistency": "ON",
                       "binlog-row-metadata": "FULL"}
MARIADB_COMPRESSED = {"log-bin": "binlog", "binlog-format": "ROW", "binlog-row-image": "FULL",
                      "binlog-row-metadata": "FULL", "server-id": "1", "log-bin-compress": "ON",
                      "log-bin-compress-min-len": "10"}


@pytest.fixture(scope="module")
def compressing(request, tmp_path_factory):
    """A MySQL, or a MariaDB with log_bin_compress=ON (MySQL compresses per session, in the test)."""
    kind = request.param
    template = request.getfixturevalue(f"{kind}_template")
    options = MYSQL_FULL_METADATA if kind == "mysql" else MARIADB_COMPRESSED
    server = start_server(kind, tmp_path_factory.mktemp(f"{kind}-compressing"), template, options)
    yield server
    server.stop()


def _workload(cur, compress: bool, kind: str) -> None:
    if kind == "mysql":
        cur.execute(f"SET SESSION binlog_transaction_compression = {'ON' if compress else 'OFF'}")
    cur.execute("BEGIN")
    cur.execute("INSERT INTO t VALUES (1, 'a', '{\"k\": [1, 2]}'), (2, 'b', NULL), (3, 'c', '\"s\"')")
    cur.execute("INSERT INTO u VALUES (1, 10)")
    cur.execute("UPDATE t SET v = CONCAT(v, v) WHERE id < 3")
    cur.execute("DELETE FROM t WHERE id = 3")
    cur.execute("COMMIT")


def _binlog_event_types(server) -> set[str]:
    files = [row[0] for row in server.sql("SHOW BINARY LOGS")]
    return {row[2] for f in files for row in server.sql(f"SHOW BINLOG EVENTS IN '{f}'")}


@pytest.mark.parametrize("compressing", ["mysql", "mariadb"], indirect=True)
def test_compressed_transactions_give_the_changes_of_inline_ones(compressing):
    server = compressing
    capture = Capture(server)
    changes = {}
    for compress in (False, True):
        db = server.new_database()
        server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20), j JSON)",
                   f"CREATE TABLE `{db}`.u (id INT PRIMARY KEY, w INT)")
        config = capture.config(db, server_id=300 + compress)
        snapshot = capture.run(config)
        if server.kind == "mariadb":
            server.sql(f"SET GLOBAL log_bin_compress = {'ON' if compress else 'OFF'}")
        with server.connect(db=db) as conn, conn.cursor() as cur:
            _workload(cur, compress, server.kind)
        batches = capture.run(config, offset=snapshot[-1].offset)
        changes[compress] = Capture.changes(batches)
    types = _binlog_event_types(server)
    assert ("Transaction_payload" in types if server.kind == "mysql"      # really compressed, and both ways
            else {"Write_rows_compressed_v1", "Update_rows_compressed_v1", "Query_compressed"} <= types)
    plain, packed = changes[False], changes[True]
    assert [(c["op"], c["before"], c["after"]) for c in packed] == [(c["op"], c["before"], c["after"]) for c in plain]
    assert len(packed) == 7
    places = [(c["source"]["file"], c["source"]["pos"], c["source"]["row"]) for c in packed]
    assert len(set(places)) == len(places) and places == sorted(places)  # the sink orders changes by them
    if server.kind == "mysql":       # every change of the compressed transaction stands at its payload event
        assert len({p[:2] for p in places}) == 1 and [p[2] for p in places] == list(range(7))


def test_a_large_compressed_transaction_resumes_in_its_middle(mysql_template, tmp_path_factory):
    server = start_server("mysql", tmp_path_factory.mktemp("mysql-large"), mysql_template, MYSQL_FULL_METADATA)
    try:
        db = server.new_database()
        server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
        capture = Capture(server)
        config = capture.config(db, max_batch_records=1000)
        snapshot = capture.run(config)
        rows = ", ".join(f"({i}, 'v{i}')" for i in range(1, 20001))
        with server.connect(db=db) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION binlog_transaction_compression = ON")
            cur.execute(f"INSERT INTO t VALUES {rows}")
            cur.execute("SET SESSION binlog_transaction_compression = OFF")
            cur.execute("INSERT INTO t VALUES (30000, 'after')")
        assert "Transaction_payload" in _binlog_event_types(server)
        batches = capture.run(config, offset=snapshot[-1].offset)
        ids = [c["after"]["id"] for c in Capture.changes(batches)]
        assert ids == list(range(1, 20001)) + [30000]
        assert all(len(b.records) <= 1000 for b in batches)
        middle = batches[7].offset                       # a slice inside the compressed transaction
        assert middle["skip_rows"] == 8000 and middle["pos"] == batches[0].offset["pos"]
        resumed = capture.run(config, offset=middle)
        assert [c["after"]["id"] for c in Capture.changes(resumed)] == list(range(8001, 20001)) + [30000]
        assert resumed[-1].offset == batches[-1].offset
    finally:
        server.stop()


@pytest.mark.parametrize("compressing", ["mariadb"], indirect=True)
def test_mariadb_compressed_ddl_reaches_the_schema_history(compressing):
    server = compressing
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture = Capture(server)
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"ALTER TABLE `{db}`.t ADD COLUMN note VARCHAR(40) NOT NULL DEFAULT 'long enough to compress'",
               f"INSERT INTO `{db}`.t (id) VALUES (1)")
    batches = capture.run(config, offset=snapshot[-1].offset)
    schema_changes = [r["value"] for r in Capture.records(batches) if r["value"] and "ddl" in r["value"]]
    assert [c["ddl"].split()[0] for c in schema_changes] == ["ALTER"]
    assert Capture.changes(batches)[0]["after"] == {"id": 1, "note": "long enough to compress"}


# --- events nobody decodes --------------------------------------------------------------------

def _append_forged_event(server, event_type: int, body: bytes, flags: int = 0) -> dict:
    """Close the current binlog file and append one event to it; the server sends it to a replica that
    starts there. Returns that position as a stored offset."""
    file = server.sql("SHOW BINARY LOGS")[-1][0]
    server.sql("FLUSH BINARY LOGS")
    path = server.data_dir / file
    start = path.stat().st_size
    size = 19 + len(body) + 4
    header = struct.pack("<IBIIIH", int(time.time()), event_type, 1, size, start + size, flags)
    with open(path, "ab") as f:
        f.write(header + body + zlib.crc32(header + body).to_bytes(4, "little"))
    return {"file": file, "pos": start, "gtids": "", "skip_rows": 0}


def _source_after_snapshot(server, db):
    capture = Capture(server)
    config = capture.config(db)
    snapshot = capture.run(config)
    return capture, config, snapshot


def test_an_unknown_event_stops_the_source_with_its_type_and_position(server, db):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture, config, _ = _source_after_snapshot(server, db)
    offset = _append_forged_event(server, 99, b"data binlake cannot read")
    with pytest.raises(DecodeError, match=rf"binlog event type 99 at {offset['file']}:{offset['pos']} is not one "
                                          r"binlake decodes.*move the stored offset past this event"):
        capture.run(config, offset=offset)


def test_an_unknown_event_the_server_marks_ignorable_is_skipped(server, db):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture, config, _ = _source_after_snapshot(server, db)
    offset = _append_forged_event(server, 99, b"replicas may skip this", flags=0x80)
    server.sql(f"INSERT INTO `{db}`.t VALUES (7)")      # in the next file, after the forged event
    assert [c["after"] for c in Capture.changes(capture.run(config, offset=offset))] == [{"id": 7}]


def _packed(n: int) -> bytes:
    return bytes([n]) if n < 251 else b"\xfc" + n.to_bytes(2, "little")


def _payload_body(compression: int, inner: bytes) -> bytes:
    """A TRANSACTION_PAYLOAD body: (type, length, value) fields in packed integers, the end mark, the payload."""
    fields = b"".join(_packed(kind) + _packed(len(_packed(value))) + _packed(value)
                      for kind, value in ((1, len(inner)), (2, compression), (3, len(inner))))
    return fields + b"\0" + inner


def test_a_payload_the_source_cannot_unpack_stops_it(mysql_template, tmp_path_factory):
    server = start_server("mysql", tmp_path_factory.mktemp("mysql-forged"), mysql_template, MYSQL_FULL_METADATA)
    try:
        db = server.new_database()
        server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
        capture, config, _ = _source_after_snapshot(server, db)
        offset = _append_forged_event(server, 40, _payload_body(7, b"\x01\x02\x03"))
        with pytest.raises(DecodeError, match=r"compressed with algorithm 7"):
            capture.run(config, offset=offset)
        unknown_inside = struct.pack("<IBIIIH", int(time.time()), 99, 1, 19 + 4, 0, 0) + b"abcd"
        offset = _append_forged_event(server, 40, _payload_body(255, unknown_inside))
        with pytest.raises(DecodeError, match=rf"binlog event type 99 at {offset['file']}:{offset['pos']}"):
            capture.run(config, offset=offset)
    finally:
        server.stop()


def test_statement_based_dml_stops_the_source_with_what_to_change(server, db):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture, config, snapshot = _source_after_snapshot(server, db)
    server.sql("SET SESSION binlog_format = 'STATEMENT'", f"INSERT INTO `{db}`.t VALUES (1)")
    with pytest.raises(DecodeError, match=r"a data change written as an SQL statement .*binlog_format=ROW for every "
                                          r"session.*INSERT INTO"):
        capture.run(config, offset=snapshot[-1].offset)


def test_one_phase_xa_commits_and_two_phase_xa_stops(server, db):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    capture, config, snapshot = _source_after_snapshot(server, db)
    server.sql("XA START 'one'", f"INSERT INTO `{db}`.t VALUES (1)", "XA END 'one'", "XA COMMIT 'one' ONE PHASE")
    batches = capture.run(config, offset=snapshot[-1].offset)
    assert [c["after"] for c in Capture.changes(batches)] == [{"id": 1}]
    server.sql("XA START 'two'", f"INSERT INTO `{db}`.t VALUES (2)", "XA END 'two'", "XA PREPARE 'two'",
               "XA COMMIT 'two'")
    with pytest.raises(DecodeError, match=r"XA PREPARE at .*two-phase XA transactions are not supported"):
        capture.run(config, offset=batches[-1].offset)
