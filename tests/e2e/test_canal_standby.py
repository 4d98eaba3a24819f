"""canal.instance.standby.address end to end (`binlake canal run`, kafka mode): the destination's servers are the
master and the standby, followed by GTID set; with the master down the destination reads from the standby."""

from __future__ import annotations

import json

import pytest

from e2e_harness import read_committed, wait_for_log, wait_until
from mysql_workload import committed_offset
from sandbox.process import free_port
from sql_fixtures import by_default_on
from test_canal_kafka import canal_conf, caught_up, start


@by_default_on("mariadb")
@pytest.mark.timeout(600)
async def test_the_destination_reads_from_the_standby_when_the_master_is_down(server, broker, tmp_path):
    db = server.new_database()
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)", db=db)
    conf = canal_conf(tmp_path, server, broker, db, **{
        "canal.instance.master.address": f"127.0.0.1:{free_port()}",     # (nothing listens there)
        "canal.instance.standby.address": f"127.0.0.1:{server.port}", "canal.instance.gtidon": "true",
        "canal.mq.topic": "standby"})
    process = start(conf, tmp_path, 0)
    await wait_for_log(process, "example-0 started", timeout=180)
    await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
    server.sql("INSERT INTO t VALUES (1), (2)", db=db)

    await wait_until(lambda: caught_up(broker, server), 180, "the rows, read from the standby")
    process.terminate()
    assert sorted(row["id"] for m in await read_committed(broker.address, ["standby"])
                  for row in json.loads(m.value)["data"] or ()) == ["1", "2"]
    assert "reading from 127.0.0.1:%d" % server.port in process.log()
