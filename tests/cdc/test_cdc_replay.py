"""The binlog sits behind an interface: recorded events replay to the same output as the live server."""

from __future__ import annotations

from cdc_harness import Capture
from cdc.binlog import PyMySqlReplicationClient, ReplayClient, record_events
from cdc.offsets import BinlogPosition


def _without_clock(records):
    for r in records:
        if r["value"] is not None:
            r["value"].pop("ts_ms", None)
    return records


def test_recorded_events_replay_identically(server, db, capture, tmp_path):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10), d DATETIME(3))")
    config = capture.config(db)
    snapshot = capture.run(config)
    server.sql(f"INSERT INTO `{db}`.t VALUES (1, 'a', '2020-01-01 00:00:00.123'), (2, 'b', NULL)",
                f"UPDATE `{db}`.t SET v = 'c'", f"ALTER TABLE `{db}`.t ADD COLUMN n INT",
                f"DELETE FROM `{db}`.t WHERE id = 1")
    start = snapshot[-1].offset
    live = capture.run(config, offset=start)
    client = PyMySqlReplicationClient(server.settings(), 999, BinlogPosition(start["file"], start["pos"]),
                                      blocking=False)
    path = tmp_path / "events.jsonl"
    assert record_events(client.events(), path) > 10
    replayed = capture.run(config, offset=start, client_factory=lambda offset: ReplayClient(path))
    assert _without_clock(Capture.records(replayed)) == _without_clock(Capture.records(live))
    assert [b.offset for b in replayed] == [b.offset for b in live]
