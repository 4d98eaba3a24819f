"""heartbeat_query (cdc/heartbeat_query.py): with the captured table idle, the statement runs on the source at
each heartbeat, and the offsets the source hands out move past what it wrote, without any other write."""

from __future__ import annotations

import threading
import time

from cdc.offsets import BinlogPosition
from cdc.schema.history import MemoryHistoryStore
from cdc.source import MySqlSource


def test_an_idle_source_moves_its_position_with_the_heartbeat_query(server, db, capture):
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE hb (id INT PRIMARY KEY, ts DATETIME(6))", db=db)
    server.sql(f"GRANT INSERT, UPDATE ON `{db}`.hb TO '{server.user}'@'%'")
    config = capture.config(db, table_include=[rf"{db}\.t"], snapshot="no_data", heartbeat_interval_s=0.2,
                            heartbeat_query=f"INSERT INTO `{db}`.hb VALUES (1, NOW(6)) "
                                            "ON DUPLICATE KEY UPDATE ts = NOW(6)")
    source = MySqlSource(config, MemoryHistoryStore())
    offsets: list[dict] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            for batch in source.batches():
                offsets.append(batch.offset)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failure.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        start = None
        while not failure and time.monotonic() < deadline:
            if offsets and start is None:
                start = BinlogPosition(offsets[0]["file"], offsets[0]["pos"])
            written = server.sql(f"SELECT COUNT(*), MAX(ts) FROM `{db}`.hb")[0]
            moved = [o for o in offsets if start is not None and BinlogPosition(o["file"], o["pos"]) > start]
            if written[0] and len(moved) >= 2:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the position did not move: offsets {offsets[-3:]}, failure {failure}")
        end = BinlogPosition(*server.binlog_end())
        assert BinlogPosition(moved[-1]["file"], moved[-1]["pos"]) <= end
    finally:
        source.stop()
        thread.join(10)
    assert source.streaming.on_idle.runs >= 1
