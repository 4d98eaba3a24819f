"""`binlake canal run` in kafka mode with canal.mq.flatMessage=false, against MariaDB (MySQL with -m slow) and a
real broker: Canal's protobuf Messages, decoded with the protobuf classes, carry every change on the partition
Canal's $pk$ hash puts its row, and replaying them gives the server's table."""

from __future__ import annotations

import pytest

from cdc.canal_routing import java_hash
from cdc.formats.proto import CanalProtocol_pb2 as packets
from cdc.formats.proto import EntryProtocol_pb2 as pb
from e2e_harness import mysql_rows, read_committed, wait_for_log, wait_until
from mysql_workload import committed_offset
from sql_fixtures import by_default_on
from test_canal_kafka import canal_conf, caught_up, start


@by_default_on("mariadb")
@pytest.mark.timeout(600)
async def test_protobuf_messages_in_kafka_mode(server, broker, tmp_path):
    db = server.new_database()
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))", db=db)
    conf = canal_conf(tmp_path, server, broker, db, {"canal.mq.flatMessage": "false"},
                      **{"canal.mq.topic": "messages"})      # (partitionsNum 3, partitionHash .*\\..*:$pk$)
    process = start(conf, tmp_path, 0)
    await wait_for_log(process, "example-0 started", timeout=180)
    await wait_until(lambda: committed_offset(broker.address, "example"), 180, "the destination's start position")
    server.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 9)),
               "UPDATE t SET v = 'changed' WHERE id IN (2, 3)", "DELETE FROM t WHERE id = 5",
               "ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (9, 'v9', 9)", db=db)
    await wait_until(lambda: caught_up(broker, server), 180, "the destination to write the changes")
    process.terminate()

    rows: dict[str, dict] = {}
    ddl = []
    for record in await read_committed(broker.address, ["messages"]):
        packet = packets.Packet.FromString(record.value)
        assert packet.type == packets.MESSAGES and record.key is None
        for raw in packets.Messages.FromString(packet.body).messages:
            entry = pb.Entry.FromString(raw)
            assert entry.entryType == pb.ROWDATA              # (a partition hash drops BEGIN and END, as Canal)
            change = pb.RowChange.FromString(entry.storeValue)
            if change.isDdl:
                ddl.append((record.partition, change.sql))
                continue
            [row] = change.rowDatas                          # one row per entry under a $pk$ hash
            columns = row.beforeColumns if change.eventType == pb.DELETE else row.afterColumns
            key = next(c.value for c in columns if c.isKey)
            assert record.partition == abs(java_hash(db) ^ java_hash(key)) % 3
            if change.eventType == pb.DELETE:
                rows.pop(key)
            else:
                rows[key] = {c.name: None if c.isNull else c.value for c in columns}
    assert ddl == [(0, "ALTER TABLE t ADD COLUMN w INT")]
    expected = {str(row["id"]): {c: None if v is None else str(v) for c, v in row.items()}
                for row in mysql_rows(server, f"{db}.t").values()}
    assert {k: {"w": None, **v} for k, v in rows.items()} == expected
