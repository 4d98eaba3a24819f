"""Canal's start keys end to end (`binlake canal run`, kafka mode): three destinations of one conf directory start
at a binlog file and position, at a GTID set (gtidon) and at a time, on MariaDB and MySQL; each delivers what was
written from there on and nothing before; SIGKILLed and restarted, each goes on from its stored position."""

from __future__ import annotations

import json
import time

import pytest

from canal_stock import add_destination, conf_dir
from e2e_harness import read_committed, wait_for_log, wait_until
from sandbox.process import free_port
from sql_fixtures import by_default_on
from test_canal_kafka import caught_up, start


def _executed(server) -> str:
    variable = "@@gtid_binlog_pos" if server.kind == "mariadb" else "@@gtid_executed"
    return str(server.sql(f"SELECT {variable}")[0][0]).replace("\n", "")


async def _ids(broker, topic: str) -> list[int]:
    return [int(row["id"]) for m in await read_committed(broker.address, [topic])
            for row in json.loads(m.value)["data"] or ()]


@by_default_on("mariadb")      # (MySQL too with -m slow; tests/cdc/test_cdc_start.py runs every start on both)
@pytest.mark.timeout(600)
async def test_destinations_start_where_their_keys_say(server, broker, tmp_path):
    db = server.new_database()
    then = int(time.time()) - 3600          # (binlog events carry the session's TIMESTAMP)
    server.sql("FLUSH BINARY LOGS")         # (a file of this test's transactions: the time search goes back over it)
    server.sql(f"SET TIMESTAMP = {then}", "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)",
               f"SET TIMESTAMP = {then + 1800}", "INSERT INTO t VALUES (2)", db=db)
    file, pos = server.binlog_end()
    executed = _executed(server)
    server.sql("INSERT INTO t VALUES (3)", db=db)
    starts = {"bypos": {"canal.instance.master.journal.name": file, "canal.instance.master.position": str(pos)},
              "bygtid": {"canal.instance.gtidon": "true", "canal.instance.master.gtid": executed},
              "bytime": {"canal.instance.master.timestamp": str((then + 1800) * 1000)}}
    mysql = {"canal.instance.master.address": f"127.0.0.1:{server.port}", "canal.instance.dbUsername": server.user,
             "canal.instance.dbPassword": server.password, "canal.instance.filter.regex": f"{db}\\..*"}
    conf = conf_dir(tmp_path, {"canal.serverMode": "kafka", "kafka.bootstrap.servers": broker.address,
                               "canal.metrics.pull.port": str(free_port())},
                    {**mysql, **starts["bypos"], "canal.mq.topic": "bypos"}, destination="bypos")
    for name in ("bygtid", "bytime"):
        add_destination(conf, name, {**mysql, **starts[name], "canal.mq.topic": name})

    async def all_caught_up() -> bool:
        return all([await caught_up(broker, server, name) for name in starts])

    process = start(conf, tmp_path, 0)
    await wait_for_log(process, "bytime-0 started", timeout=180)
    server.sql("INSERT INTO t VALUES (4)", db=db)
    await wait_until(all_caught_up, 180, "the three destinations to write what they start at")
    process.kill()
    assert await _ids(broker, "bypos") == [3, 4]
    assert await _ids(broker, "bygtid") == [3, 4]
    assert await _ids(broker, "bytime") == [2, 3, 4]

    server.sql("INSERT INTO t VALUES (5)", db=db)       # restarted: from the stored positions, not the starts
    process = start(conf, tmp_path, 1)
    await wait_until(all_caught_up, 180, "the restarted destinations to catch up")
    process.terminate()
    assert [await _ids(broker, name) for name in starts] == [[3, 4, 5], [3, 4, 5], [2, 3, 4, 5]]
