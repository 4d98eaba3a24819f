"""A configured start (cdc/start.py): with no stored offset the source streams from a binlog file and position,
a GTID set or a time, on MariaDB and MySQL; changes before it are not delivered, changes after it are; the
offset carries the server's GTID set there; a stored offset wins over the start."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from cdc.config import SourceConfig
from cdc.errors import ConfigurationError
from cdc_harness import Capture
from sandbox.process import free_port


def _ids(batches) -> list[int]:
    return [c["after"]["id"] for c in Capture.changes(batches)]


def _executed(server) -> str:
    variable = "@@gtid_binlog_pos" if server.kind == "mariadb" else "@@gtid_executed"
    return str(server.sql(f"SELECT {variable}")[0][0]).replace("\n", "")


def test_start_at_a_file_and_position(server, db, capture):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", db=db)
    file, pos = server.binlog_end()
    executed = _executed(server)
    server.sql("INSERT INTO t VALUES (2)", "INSERT INTO t VALUES (3)", db=db)
    config = capture.config(db, snapshot="no_data", start={"file": file, "pos": pos})
    batches = capture.run(config)
    assert _ids(batches) == [2, 3]
    assert batches[0].offset["gtids"] == executed and (batches[0].offset["file"], batches[0].offset["pos"]) == (file, pos)
    # a stored offset wins: restarted from it, the start is not looked at again
    server.sql("INSERT INTO t VALUES (4)", db=db)
    assert _ids(capture.run(config, offset=batches[-1].offset)) == [4]


def test_a_two_phase_xa_transaction_before_the_start_is_passed_over(server, db, capture):
    """The search for the start's transaction reads the file from its top: an XA PREPARE of another table
    there (which streaming refuses) ends a group like any commit."""
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE xa (id INT PRIMARY KEY)", "FLUSH BINARY LOGS",
               db=db)
    server.sql("XA START 'before'", f"INSERT INTO `{db}`.xa VALUES (1)", "XA END 'before'", "XA PREPARE 'before'",
               "XA COMMIT 'before'")
    file, pos = server.binlog_end()
    server.sql("INSERT INTO t VALUES (1)", db=db)
    assert _ids(capture.run(capture.config(db, snapshot="no_data", start={"file": file, "pos": pos}))) == [1]


def test_start_at_the_top_of_a_file_carries_the_set_executed_before_it(server, db, capture):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", "FLUSH BINARY LOGS", db=db)
    file, _ = server.binlog_end()
    executed = _executed(server)
    server.sql("INSERT INTO t VALUES (2)", db=db)
    batches = capture.run(capture.config(db, snapshot="no_data", start={"file": file, "pos": 4}))
    assert _ids(batches) == [2] and batches[0].offset["gtids"] == executed


def test_a_position_inside_a_transaction_starts_at_the_transaction(server, db, capture):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", db=db)
    file, begin = server.binlog_end()
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (2)")
        cur.execute("INSERT INTO t VALUES (3)")
        cur.execute("COMMIT")
    events = server.sql(f"SHOW BINLOG EVENTS IN '{file}' FROM {begin}")
    inside = [int(pos) for _, pos, kind, *_ in events if kind.startswith("Write_rows")][-1]   # (the second row)
    batches = capture.run(capture.config(db, snapshot="no_data", start={"file": file, "pos": inside}))
    assert _ids(batches) == [2, 3]
    assert batches[0].offset["pos"] == begin


def test_start_at_a_time_searches_back_over_binlog_files(server, db, capture):
    then = int(time.time()) - 3600      # (binlog events carry the session's TIMESTAMP)
    server.sql("FLUSH BINARY LOGS")     # (a file of this test's transactions only: the search takes time to grow)
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute(f"SET TIMESTAMP = {then}")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute(f"SET TIMESTAMP = {then + 1800}")
        cur.execute("INSERT INTO t VALUES (2)")
    older, _ = server.binlog_end()
    server.sql("FLUSH BINARY LOGS")
    server.sql("INSERT INTO t VALUES (3)", db=db)        # now: in the newest file, the only one of it
    from_two = capture.config(db, snapshot="no_data", start={"timestamp_ms": (then + 1800) * 1000})
    assert _ids(capture.run(from_two)) == [2, 3]          # found in the older file
    from_three = capture.config(db, snapshot="no_data", start={"timestamp_ms": (then + 1801) * 1000})
    assert _ids(capture.run(from_three)) == [3]           # its start: the end of the older file's last transaction
    in_file = capture.config(db, snapshot="no_data", start={"file": older, "timestamp_ms": (then + 1) * 1000})
    assert _ids(capture.run(in_file)) == [2, 3]           # that file searched only


def test_start_after_a_gtid_set(server, db, capture):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", db=db)
    executed = _executed(server)
    server.sql("INSERT INTO t VALUES (2)", db=db)
    config = capture.config(db, snapshot="no_data", restart_by="gtid", start={"gtids": executed})
    batches = capture.run(config)
    assert _ids(batches) == [2]
    server.sql("INSERT INTO t VALUES (3)", db=db)
    assert _ids(capture.run(config, offset=batches[-1].offset)) == [3]


def test_a_file_of_the_first_server_is_not_looked_for_on_the_next(server, db, capture):
    file, pos = server.binlog_end()
    down = f"127.0.0.1:{free_port()}"               # (nothing listens there)
    config = capture.config(db, snapshot="no_data", restart_by="gtid", hosts=[down, f"127.0.0.1:{server.port}"],
                            start={"file": file, "pos": pos})
    with pytest.raises(ConfigurationError, match=f"names binlog file {file} of {down}, which did not answer"):
        capture.run(config)


@pytest.mark.parametrize("start, overrides, message", [
    ({"file": "binlog.000001", "pos": 4}, {"snapshot": "initial"}, "set snapshot: no_data"),
    ({"gtids": "0-1-5"}, {}, "set restart_by: gtid"),
    ({"pos": 4}, {}, "pos needs file"),
    ({"file": "binlog.000001"}, {}, "give file and pos, gtids, or timestamp_ms"),
    ({"gtids": "0-1-5", "timestamp_ms": 1}, {"restart_by": "gtid"}, "give gtids alone"),
])
def test_a_start_that_cannot_be_followed_is_refused(start, overrides, message):
    with pytest.raises(ValidationError, match=message):
        SourceConfig(name="x", user="u", server_id=3, **{"snapshot": "no_data", **overrides}, start=start)
