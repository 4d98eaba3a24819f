"""`binlake canal run CONF_DIR` in kafka mode, end to end: Canal 1.1.8's stock conf directory (serverMode kafka,
its MySQL, its broker, a partitionHash and a dynamicTopic set) against MariaDB and MySQL and a real broker. The
FlatMessages are checked against Canal's rules: an event's rows in one message per partition, each row on the
partition Java's hashes put it, Canal's fields in Canal's order, DDL on partition 0; a SIGKILL loses and
repeats nothing."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import pytest

from canal_stock import conf_dir
from cdc.canal_routing import java_hash
from e2e_harness import ConnectorProcess, mysql_rows, read_committed, wait_for_log, wait_until
from mysql_workload import committed_offset
from sandbox.process import free_port

CANAL_RUN = [sys.executable, "-m", "binlake.cli", "canal", "run"]
FIELDS = ["data", "database", "es", "gtid", "id", "isDdl", "mysqlType", "old", "pkNames", "sql", "sqlType", "table",
          "ts", "type"]


def canal_conf(tmp_path, server, broker, db: str, server_keys: dict[str, str] | None = None, **instance: str):
    return conf_dir(tmp_path, {"canal.serverMode": "kafka", "kafka.bootstrap.servers": broker.address,
                               "canal.metrics.pull.port": str(free_port()), **(server_keys or {})},
                    {"canal.instance.master.address": f"127.0.0.1:{server.port}",
                     "canal.instance.dbUsername": server.user, "canal.instance.dbPassword": server.password,
                     "canal.instance.mysql.slaveId": "5403", "canal.instance.filter.regex": f"{db}\\..*",
                     "canal.mq.partitionsNum": "3", "canal.mq.partitionHash": ".*\\..*:$pk$",
                     "canal.mq.dynamicTopic": f"{db}\\.notes", **instance})


def start(conf, tmp_path, n: int) -> ConnectorProcess:
    return ConnectorProcess(conf, tmp_path / f"canal-{n}.log", command=[*CANAL_RUN, str(conf)]).start()


def partition_of(db: str, key: str) -> int:
    return abs(java_hash(db) ^ java_hash(key)) % 3


async def caught_up(broker, server, destination: str = "example") -> bool:
    """The destination has committed the server's whole binlog."""
    end = server.binlog_end()
    offset = await committed_offset(broker.address, destination)
    return offset is not None and (offset["file"], offset["pos"]) >= end


# On MySQL `slow` for suite time (the routing and the messages do not depend on the server; tests/canal covers them)
@pytest.mark.parametrize("server_kind", ["mariadb", pytest.param("mysql", marks=pytest.mark.slow)], indirect=True)
@pytest.mark.timeout(900)     # (a loaded machine starts a restarted destination slowly)
async def test_stock_conf_in_kafka_mode(server, broker, tmp_path):
    db = server.new_database()
    server.sql("CREATE TABLE orders (id INT PRIMARY KEY, item VARCHAR(20), qty INT)",
               "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT)", db=db)
    server.sql("INSERT INTO orders VALUES (100, 'before', 1)", db=db)     # before the start: not captured (Canal's)
    conf = canal_conf(tmp_path, server, broker, db)
    process = start(conf, tmp_path, 0)
    await wait_for_log(process, "example-0 started", timeout=180)
    await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
    assert "canal.instance.tsdb.enable ignored: binlake keeps table structures" in process.log()

    server.sql("INSERT INTO orders VALUES " + ", ".join(f"({i}, 'item{i}', {i})" for i in range(1, 9)), db=db)
    server.sql("UPDATE orders SET qty = qty * 10 WHERE id IN (1, 2, 3)",
               "DELETE FROM orders WHERE id = 8",
               "ALTER TABLE orders ADD COLUMN note VARCHAR(10)",
               "INSERT INTO notes VALUES (1, 'hello'), (2, NULL)", db=db)
    await wait_until(lambda: caught_up(broker, server), 180, "the destination to write the workload")
    process.kill()

    messages = await read_committed(broker.address, ["example"])
    by_type = defaultdict(list)
    for m in messages:
        body = json.loads(m.value)
        assert list(body) == FIELDS and m.key is None
        by_type[body["type"]].append((m.partition, body))
    # the 8-row INSERT: one message per partition its rows hash to, every row on Canal's partition
    inserts = by_type["INSERT"]
    assert len(inserts) == len({partition_of(db, str(i)) for i in range(1, 9)})
    assert sorted(int(row["id"]) for _, body in inserts for row in body["data"]) == list(range(1, 9))
    for partition, body in inserts:
        assert all(partition_of(db, row["id"]) == partition for row in body["data"])
        assert body["database"] == db and body["table"] == "orders" and body["pkNames"] == ["id"]
        assert body["old"] is None and body["isDdl"] is False and body["sql"] == ""
        assert body["mysqlType"] == {"id": "int", "item": "varchar(20)", "qty": "int"} or \
            body["mysqlType"] == {"id": "int(11)", "item": "varchar(20)", "qty": "int(11)"}
        assert body["sqlType"] == {"id": 4, "item": 12, "qty": 4}
    updates = [(p, row, old) for p, body in by_type["UPDATE"] for row, old in zip(body["data"], body["old"])]
    assert sorted((row["id"], row["qty"], old) for _, row, old in updates) == \
        [("1", "10", {"qty": "1"}), ("2", "20", {"qty": "2"}), ("3", "30", {"qty": "3"})]
    [(partition, delete)] = by_type["DELETE"]
    assert delete["data"] == [{"id": "8", "item": "item8", "qty": "8"}] and partition == partition_of(db, "8")
    [(partition, alter)] = by_type["ALTER"]
    assert partition == 0 and alter["isDdl"] is True and alter["data"] is None and alter["mysqlType"] is None
    assert alter["sql"].startswith("ALTER TABLE orders ADD COLUMN note")
    notes = [json.loads(m.value) for m in await read_committed(broker.address, [f"{db}_notes"])]
    assert sorted(row["id"] for n in notes for row in n["data"]) == ["1", "2"]      # the dynamic topic
    assert {row["body"] for n in notes for row in n["data"]} == {"hello", None}

    # SIGKILLed above; restarted, it goes on after the last committed transaction: nothing lost or repeated
    server.sql("INSERT INTO orders VALUES (20, 'after', 2, 'n')", "UPDATE orders SET qty = 0 WHERE id = 20", db=db)
    process = start(conf, tmp_path, 1)
    await wait_until(lambda: caught_up(broker, server), 180, "the restarted destination to catch up")
    process.terminate()
    rows: dict[str, dict | None] = {}
    for m in await read_committed(broker.address, ["example"]):
        body = json.loads(m.value)
        for row in body["data"] or ():
            rows[row["id"]] = None if body["type"] == "DELETE" else row
    expected = {str(row["id"]): {c: None if v is None else str(v) for c, v in row.items()}
                for row in mysql_rows(server, f"{db}.orders").values() if row["id"] != 100}
    replayed = {k: {"note": None, **v} for k, v in rows.items() if v is not None}   # (note: added later)
    assert replayed == expected
    counts = defaultdict(int)
    for m in await read_committed(broker.address, ["example"]):
        body = json.loads(m.value)
        for row in body["data"] or ():
            counts[(body["type"], row["id"], row.get("qty"))] += 1
    assert set(counts.values()) == {1}, counts
