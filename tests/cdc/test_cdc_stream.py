"""Streaming: row changes in both formats, primary-key changes, filters, transactions, heartbeats,
large transactions split with bounded batches and resumed without loss or duplicates."""

from __future__ import annotations

import json
import re
import threading
import time

from cdc_harness import GTID, Capture, int_type
from cdc.schema.history import MemoryHistoryStore
from cdc.source import MySqlSource


def _stream(server, capture, db, statements, **overrides):
    """Snapshot the (empty) tables, run `statements`, return the streamed batches."""
    config = capture.config(db, **overrides)
    snapshot = capture.run(config)
    with server.connect(db=db) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
    return config, snapshot, capture.run(config, offset=snapshot[-1].offset)


def test_debezium_insert_update_delete_and_key_change(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10), n INT)")
    _, _, batches = _stream(server, capture, db, [
        "INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)",
        "UPDATE t SET v = 'aa' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "UPDATE t SET id = 5 WHERE id = 1",
    ], topic_partitions=3)
    records = Capture.records(batches)
    ops = [(r["value"] or {}).get("op") for r in records]
    assert ops == ["c", "c", "u", "d", None, "d", None, "c"]       # None = tombstone after each delete
    assert all(r["topic"] == f"srv.{db}.t" for r in records)
    assert [r["key"] for r in records] == [{"id": 1}, {"id": 2}, {"id": 1}, {"id": 2}, {"id": 2}, {"id": 1},
                                           {"id": 1}, {"id": 5}]
    update = records[2]["value"]
    assert update["before"] == {"id": 1, "v": "a", "n": 10} and update["after"] == {"id": 1, "v": "aa", "n": 10}
    move_delete, move_create = records[5]["value"], records[7]["value"]
    assert move_delete["before"]["id"] == 1 and move_delete["after"] is None
    assert move_create["after"] == {"id": 5, "v": "aa", "n": 10} and move_create["before"] is None
    source = update["source"]
    assert source["name"] == "srv" and source["db"] == db and source["table"] == "t" and source["snapshot"] == "false"
    assert source["file"].startswith("binlog.") and source["pos"] > 0 and re.fullmatch(GTID[server.kind], source["gtid"])
    assert update["transaction"]["id"] == source["gtid"] and update["transaction"]["total_order"] == 1
    # one batch per MySQL transaction, each with the offset after its commit
    assert [len(b.records) for b in batches] == [2, 1, 2, 3]
    gtid = move_create["source"]["gtid"]      # the offset's set ends with it (MySQL's as a range from 1)
    assert batches[-1].offset["gtids"] == (gtid if server.kind == "mariadb" else re.sub(r":(\d+)$", r":1-\1", gtid))
    from cdc.murmur2 import partition_for
    assert all(r["partition"] == partition_for(json.dumps(r["key"], separators=(",", ":")).encode(), 3)
               for r in records)


def test_canal_flat_message(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT UNSIGNED NOT NULL, k CHAR(2) NOT NULL, v VARCHAR(10), "
                "d DECIMAL(5,2), PRIMARY KEY (id, k))")
    _, snapshot, batches = _stream(server, capture, db, [
        "INSERT INTO t VALUES (1, 'x', 'a', 1.50)",
        "UPDATE t SET v = 'b' WHERE id = 1",
        "DELETE FROM t WHERE id = 1",
    ], format="canal")
    ddl = [r for r in Capture.records(snapshot) if r["value"] and r["value"]["isDdl"]]
    assert ddl[0]["value"]["type"] == "CREATE" and ddl[0]["value"]["sql"].startswith("CREATE TABLE `t`")
    records = Capture.records(batches)
    assert [r["value"]["type"] for r in records] == ["INSERT", "UPDATE", "DELETE"]      # no tombstones
    insert, update, delete = (r["value"] for r in records)
    assert insert["data"] == [{"id": "1", "k": "x", "v": "a", "d": "1.50"}] and insert["old"] is None
    assert update["data"] == [{"id": "1", "k": "x", "v": "b", "d": "1.50"}] and update["old"] == [{"v": "a"}]
    assert delete["data"] == [{"id": "1", "k": "x", "v": "b", "d": "1.50"}]
    assert insert["database"] == db and insert["table"] == "t" and insert["pkNames"] == ["id", "k"]
    assert insert["isDdl"] is False and insert["sql"] == "" and re.fullmatch(GTID[server.kind], insert["gtid"])
    assert insert["mysqlType"] == {"id": int_type(server, unsigned=True), "k": "char(2)", "v": "varchar(10)",
                                   "d": "decimal(5,2)"}
    assert insert["sqlType"] == {"id": -5, "k": 1, "v": 12, "d": 3}
    assert insert["es"] % 1000 == 0 and insert["ts"] >= insert["es"]
    assert [r["key"] for r in records] == [{"id": 1, "k": "x"}] * 3     # deterministic key: the primary key


def test_table_filters_are_anchored_regexes(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.orders_log (id INT PRIMARY KEY)",
                f"CREATE TABLE `{db}`.users (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.tmp_users (id INT PRIMARY KEY)")
    inserts = [f"INSERT INTO {t} VALUES (1)" for t in ("orders", "orders_log", "users", "tmp_users")]
    _, _, batches = _stream(server, capture, db, inserts,
                            table_include=[rf"{db}\.orders", rf"{db}\..*users"], table_exclude=[r".*\.tmp_.*"])
    assert sorted(r["topic"] for r in Capture.records(batches)) == [f"srv.{db}.orders", f"srv.{db}.users"]


def test_transaction_metadata_and_multi_statement_transactions(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY)")
    _, _, batches = _stream(server, capture, db, [
        "BEGIN", "INSERT INTO a VALUES (1), (2)", "INSERT INTO b VALUES (1)", "UPDATE a SET id = 3 WHERE id = 2",
        "COMMIT"], transaction_metadata=True)
    assert len(batches) == 1
    records = Capture.records(batches)
    begin, end = records[0], records[-1]
    assert begin["topic"] == "srv.transaction" and begin["value"]["status"] == "BEGIN"
    assert end["value"]["status"] == "END" and end["value"]["event_count"] == 4
    assert end["value"]["data_collections"] == [{"data_collection": f"{db}.a", "event_count": 3},
                                                {"data_collection": f"{db}.b", "event_count": 1}]
    changes = Capture.changes(batches)
    assert [c["transaction"]["total_order"] for c in changes] == [1, 2, 3, 4, 4]
    assert {c["transaction"]["id"] for c in changes} == {begin["value"]["id"]}


def test_large_transaction_streams_in_bounded_batches_and_resumes(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    rows = ", ".join(f"({i}, 'v{i}')" for i in range(1, 1001))
    config, snapshot, batches = _stream(server, capture, db, [f"INSERT INTO t VALUES {rows}", "INSERT INTO t VALUES (5000, 'x')"],
                                        max_batch_records=100)
    assert all(len(b.records) <= 100 for b in batches)
    ids = [c["after"]["id"] for c in Capture.changes(batches)]
    assert ids == list(range(1, 1001)) + [5000]
    middle = batches[3].offset            # a slice of the 1000-row transaction
    assert middle["skip_rows"] == 400 and middle["pos"] == batches[0].offset["pos"]
    resumed = capture.run(config, offset=middle)
    assert [c["after"]["id"] for c in Capture.changes(resumed)] == list(range(401, 1001)) + [5000]
    assert resumed[-1].offset == batches[-1].offset
    # 1,000 rows fill exactly ten batches; the commit still gets a batch of its own with its offset
    assert batches[10].records == [] and batches[10].offset["skip_rows"] == 0
    assert batches[10].offset["pos"] > batches[9].offset["pos"]
    # only the batch with the commit offset ends the transaction: a runtime keeps its Kafka transaction open until then
    assert [b.ends_transaction for b in batches] == [False] * 10 + [True, True]


def test_heartbeats_move_the_offset_on_quiet_and_filtered_traffic(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.watched (id INT PRIMARY KEY)", f"CREATE TABLE `{db}`.other (id INT PRIMARY KEY)")
    config = capture.config(db, table_include=[rf"{db}\.watched"], heartbeat_interval_s=0.3)
    source = MySqlSource(config, MemoryHistoryStore())          # follows the binlog like production
    batches: list = []
    reader = threading.Thread(target=lambda: batches.extend(source.batches()))
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while not any("snapshot" not in b.offset for b in batches) and time.monotonic() < deadline:
            time.sleep(0.05)
        start = batches[-1].offset
        server.sql(f"INSERT INTO `{db}`.other VALUES (1)", f"INSERT INTO `{db}`.other VALUES (2)")
        while time.monotonic() < deadline and not (batches[-1].offset["pos"] > start["pos"]
                                                   and len(batches) > 3):
            time.sleep(0.05)
    finally:
        source.stop()
        reader.join(10)
    beats = [b for b in batches if b.records and b.records[0].topic == "__binlake-heartbeat.srv"]
    assert len(beats) >= 2, "heartbeats while nothing captured happens"
    assert json.loads(beats[0].records[0].key) == {"serverName": "srv"}
    assert "ts_ms" in json.loads(beats[0].records[0].value)
    assert batches[-1].offset["pos"] > start["pos"] and batches[-1].offset["gtids"] != start["gtids"]
    assert not Capture.changes(batches[len(beats):])       # the inserts themselves are filtered out


def test_restart_by_gtid_ignores_the_file_position(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    rows = ", ".join(f"({i})" for i in range(1, 301))
    config, _, batches = _stream(server, capture, db, [f"INSERT INTO t VALUES {rows}", "INSERT INTO t VALUES (999)"],
                                 max_batch_records=100, restart_by="gtid")
    # as if the source had failed over to a server where these files and positions mean nothing
    middle = {**batches[1].offset, "file": "elsewhere.000042", "pos": 4}
    assert middle["skip_rows"] == 200
    resumed = capture.run(config, offset=middle)
    assert [c["after"]["id"] for c in Capture.changes(resumed)] == list(range(201, 301)) + [999]
    assert resumed[-1].offset == batches[-1].offset


def test_table_without_primary_key(server, db, capture):
    server.sql(f"CREATE TABLE `{db}`.log (msg VARCHAR(10), n INT)",
                *[f"INSERT INTO `{db}`.log VALUES ('m{i}', {i})" for i in range(5)])
    config = capture.config(db, snapshot_chunk_rows=2, topic_partitions=4)
    snapshot = capture.run(config)
    reads = [r for r in Capture.records(snapshot) if r["value"] and r["value"].get("op") == "r"]
    assert [r["value"]["after"]["n"] for r in reads] == [0, 1, 2, 3, 4]
    assert reads[-1]["value"]["source"]["snapshot"] == "last"
    assert [len([r for r in b.records if r.topic.endswith(".log")]) for b in snapshot] == [2, 2, 1]
    server.sql(f"UPDATE `{db}`.log SET n = 10 WHERE n = 1", f"DELETE FROM `{db}`.log WHERE n = 2")
    records = Capture.records(capture.run(config, offset=snapshot[-1].offset))
    assert [(r["value"]["op"], r["key"], r["partition"]) for r in records] == [("u", None, 0), ("d", None, 0)]


def test_binlog_lag_bytes_is_what_the_server_wrote_past_the_stream(server, db, capture):
    from cdc.binlog_lag import POLL_S
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(200))", db=db)
    source = MySqlSource(capture.config(db), MemoryHistoryStore(), follow=False)
    list(source.batches())  # the snapshot, then the stream up to the server's end
    assert source.metrics(time.time())["binlog_lag_bytes"] == 0
    server.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, REPEAT('x', 200))" for i in range(1, 51)), db=db)
    file, end = server.binlog_end()
    position = source.streaming.position
    assert position.file == file  # (one binlog file here, so the expected figure is one subtraction)
    behind = source.metrics(time.time() + POLL_S)["binlog_lag_bytes"]  # (a clock past the poll interval)
    assert behind == int(end) - position.pos and behind > 50 * 200
    source.stop()


def test_binlog_lag_polls_share_one_connection(server, db, capture):
    """A poll per connection cost the server a login (and a TLS handshake) every 5 s per connector."""
    from cdc.binlog_lag import POLL_S
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", db=db)
    source = MySqlSource(capture.config(db), MemoryHistoryStore(), follow=False)
    list(source.batches())
    now = time.time()
    source.metrics(now)  # the first poll connects

    def logins() -> int:  # (each call logs in once itself)
        return int(server.sql("SHOW GLOBAL STATUS LIKE 'Connections'")[0][1])

    before = logins()
    for i in range(1, 4):
        source.metrics(now + i * POLL_S)
    assert logins() == before + 1
    source.stop()


def test_a_lost_replication_connection_ends_the_stream_instead_of_reconnecting_at_its_start(server, db, capture):
    """pymysqlreplication would reconnect by itself and ask again from where it first started (events
    read twice); the source ends instead, and its runtime restarts it from the stored offset."""
    from cdc.binlog.connection import ConnectionLost
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    config = capture.config(db)
    source = MySqlSource(config, MemoryHistoryStore())          # follows the binlog like production
    batches: list = []
    failure: list = []

    def read() -> None:
        try:
            batches.extend(source.batches())
        except ConnectionLost as exc:
            failure.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        server.sql(f"INSERT INTO `{db}`.t VALUES (1)")

        def dump_threads() -> list:
            return [row[0] for row in server.sql("SHOW PROCESSLIST") if str(row[4]).startswith("Binlog Dump")
                    and row[1] == server.user]
        # (the row may come as a snapshot read, before the stream starts: wait for the dump thread too)
        dumps: list = []
        while not (Capture.changes(batches) and (dumps := dump_threads())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dumps, "the source's binlog dump thread"
        server.sql(*(f"KILL {thread}" for thread in dumps))
        reader.join(30)
    finally:
        source.stop()
        reader.join(10)
    assert failure and "restarts from its stored offset" in str(failure[0])
    assert [c["after"] for c in Capture.changes(batches)] == [{"id": 1}]      # nothing read twice
