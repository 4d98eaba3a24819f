"""The initial snapshot: consistent hand-off to streaming under concurrent writes, crash resume,
table-lock fallback, re-snapshot when the position is gone, and the progress bar."""

from __future__ import annotations

import random
import threading
import time

import pytest

from cdc_harness import Capture, int_type
from cdc.errors import ConfigurationError, PositionLostError
from cdc.schema.history import MemoryHistoryStore
from cdc.source import MySqlSource


def _apply(state: dict, change: dict) -> None:
    if change["op"] in ("r", "c"):
        state[change["after"]["id"]] = change["after"]
    elif change["op"] == "u":
        state[change["after"]["id"]] = change["after"]
    else:
        del state[change["before"]["id"]]


def test_snapshot_hands_off_to_streaming_without_gap_or_duplicate(server, db):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT NOT NULL)",
                f"INSERT INTO `{db}`.t VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 3001)))
    stop = threading.Event()
    written = []

    def writer():
        rng = random.Random(7)
        with server.connect(db=db) as conn, conn.cursor() as cur:
            next_id = 10_000
            while not stop.is_set():
                op = rng.random()
                if op < 0.4:
                    cur.execute("INSERT INTO t VALUES (%s, 0)", (next_id,))
                    next_id += 1
                elif op < 0.9:
                    cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (rng.randint(1, 3000),))
                else:
                    cur.execute("DELETE FROM t WHERE id = %s", (rng.randint(1, 3000),))
                written.append(op)

    config = Capture(server).config(db, snapshot_chunk_rows=100)
    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 30
    while len(written) < 20 and time.monotonic() < deadline:  # writing before the snapshot starts,
        time.sleep(0.01)                                       # so it overlaps however fast the snapshot
    batches = []
    try:
        for batch in MySqlSource(config, MemoryHistoryStore(), follow=False).batches():
            batches.append(batch)
            if "snapshot" not in batch.offset:
                stop.set()            # snapshot done: stop writing, stream what was written
                thread.join()
    finally:
        stop.set()
        thread.join()
    changes = Capture.changes(batches)
    snapshot = [c for c in changes if c["op"] == "r"]
    streamed = [c for c in changes if c["op"] != "r"]
    assert len(written) >= 20 and streamed, "the writer must overlap the snapshot"
    assert snapshot[-1]["source"]["snapshot"] == "last"
    assert all(c["source"]["snapshot"] == "true" for c in snapshot[:-1])
    state: dict = {}
    for change in snapshot:
        assert change["after"]["id"] not in state
        _apply(state, change)
    for change in streamed:     # every streamed change starts from exactly the state the snapshot left
        if change["op"] == "c":
            assert change["after"]["id"] not in state, "row both snapshotted and streamed as created"
        else:
            assert state[change["before"]["id"]] == change["before"], "a change was missed or applied twice"
        _apply(state, change)
    rows = server.sql(f"SELECT id, v FROM `{db}`.t")
    assert state == {i: {"id": i, "v": v} for i, v in rows}


def test_crashed_snapshot_resumes_from_its_last_chunk(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.b (k VARCHAR(5) PRIMARY KEY)",
                f"INSERT INTO `{db}`.a VALUES " + ", ".join(f"({i})" for i in range(1, 26)),
                f"INSERT INTO `{db}`.b VALUES " + ", ".join(f"('k{i}')" for i in range(1, 6)))
    config = capture.config(db, snapshot_chunk_rows=10)
    first = capture.run(config, limit=2)          # then the process dies
    assert first[-1].offset["snapshot"] == {"done": [], "table": f"{db}.a", "after": ["20"]}
    server.sql(f"UPDATE `{db}`.a SET id = 100 WHERE id = 3")
    rest = capture.run(config, offset=first[-1].offset)
    resumed = [c["after"] for c in Capture.changes(rest) if c["op"] == "r"]
    # The remaining chunks come from a new consistent snapshot (which sees id 100); streaming restarts at
    # the first snapshot's position, so the change made in between is streamed too: at least once.
    assert resumed == [{"id": i} for i in (*range(21, 26), 100)] + [{"k": f"k{i}"} for i in range(1, 6)]
    streamed = [c for c in Capture.changes(rest) if c["op"] != "r"]
    assert [(c["op"], (c["before"] or c["after"])["id"]) for c in streamed] == [("d", 3), ("c", 100)]
    assert "snapshot" not in rest[-1].offset


def test_table_locks_without_reload_privilege(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1), (2)",
                f"CREATE USER 'nolock_{db}'@'%' IDENTIFIED BY 'pw'",
                f"GRANT SELECT, LOCK TABLES, REPLICATION SLAVE, {server.binlog_monitor} ON *.* TO 'nolock_{db}'@'%'",
                f"CREATE USER 'nolocks_{db}'@'%' IDENTIFIED BY 'pw'",
                f"GRANT SELECT, REPLICATION SLAVE, {server.binlog_monitor} ON *.* TO 'nolocks_{db}'@'%'")
    config = capture.config(db, user=f"nolock_{db}", password="pw")
    assert [c["after"] for c in Capture.changes(capture.run(config))] == [{"id": 1}, {"id": 2}]
    with pytest.raises(ConfigurationError, match="GRANT RELOAD .* or LOCK TABLES"):
        capture.run(capture.config(db, user=f"nolocks_{db}", password="pw"))


def test_lost_position_resnapshots_when_needed_else_fails(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
    config = capture.config(db)
    offset = {**capture.run(config)[-1].offset, "file": "binlog.999999"}     # purged long ago
    with pytest.raises(PositionLostError, match="binlog.999999.*snapshot: when_needed"):
        capture.run(config, offset=offset)
    again = capture.run({**config, "snapshot": "when_needed"}, offset=offset)
    assert [c["op"] for c in Capture.changes(again)] == ["r"]


def test_progress_bar_shows_tables_rows_and_rate(server, db, capture, capsys):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
               f"INSERT INTO `{db}`.t VALUES " + ", ".join(f"({i})" for i in range(1, 51)))
    capture.run(capture.config(db, snapshot_progress=True, snapshot_chunk_rows=20))
    out = capsys.readouterr().out
    assert f"{db}.t" in out and "50/50" in out and "rows/s" in out and "tables" in out


def test_no_data_mode_records_structure_and_streams_from_now(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(3))", f"INSERT INTO `{db}`.t VALUES (1, 'a')")
    config = capture.config(db, snapshot="no_data", format="canal")
    first = capture.run(config)
    assert [r["value"]["type"] for r in Capture.records(first)] == ["CREATE"]      # structure, no rows
    server.sql(f"INSERT INTO `{db}`.t VALUES (2, 'b')")
    later = Capture.records(capture.run(config, offset=first[-1].offset))
    assert [(m["value"]["type"], m["value"]["data"]) for m in later] == [("INSERT", [{"id": "2", "v": "b"}])]
    assert later[0]["value"]["mysqlType"] == {"id": int_type(server), "v": "varchar(3)"}


def test_initial_only_snapshots_once_and_never_streams(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1), (2)")
    config = capture.config(db, snapshot="initial_only")
    first = capture.run(config)
    server.sql(f"INSERT INTO `{db}`.t VALUES (3)")
    assert [(c["op"], c["after"]["id"]) for c in Capture.changes(first)] == [("r", 1), ("r", 2)]
    assert all(b.ends_transaction for b in first) and "snapshot" not in first[-1].offset
    assert capture.run(config, offset=first[-1].offset) == []          # done: a restart neither reads nor streams
