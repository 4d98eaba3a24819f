"""Canal's MQ routing (cdc/canal_routing.py) and FlatMessages (cdc/formats/canal_mq.py), checked against what
Canal 1.1.8's MQMessageUtils and CanalKafkaProducer compute: Java's String.hashCode, Math.abs, the topic rules."""

from __future__ import annotations

import json

import pytest

from cdc.canal_routing import CanalMq, Router, java_hash, java_partition
from cdc.emitter import TableContext
from cdc.errors import CdcError
from cdc.formats.canal_mq import CanalMqOutput
from cdc.offsets import EventSource


def test_java_string_hash():
    assert java_hash("") == 0
    assert java_hash("abc") == 96354
    assert java_hash("polygenelubricants") == -(1 << 31)          # Integer.MIN_VALUE
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00        # over UTF-16 code units
    assert java_hash("mytest") == -1059087298                    # (as a JVM prints them)


def test_partition_folds_like_java():
    assert java_partition(-(1 << 31), 3) == 2                      # Math.abs(MIN) % 3 = -2, abs -> 2
    assert java_partition(-7, 3) == 1
    assert java_partition(96354, 4) == 2


def test_topics():
    router = Router(CanalMq(topic="example", dynamic_topic="mytest1.user,topic2:mytest2\\..*,.*\\..*"))
    assert router.topic("mytest1", "user") == "mytest1_user"       # a plain name: its own topic, dots to _
    assert router.topic("MyTest1", "User") == "mytest1_user"
    assert router.topic("mytest2", "orders") == "topic2"
    assert router.topic("Shop", "Orders") == "shop_orders"         # `.*\..*`: every table its own topic
    assert router.topic("", "") == "example"
    schemas = Router(CanalMq(topic="example.all", dynamic_topic="shop,audit:log.*"))
    assert schemas.topic("shop", "t") == "shop"                    # a schema name matches a table's schema
    assert schemas.topic("logs", "t") == "audit"                   # a regex without `\.` is a schema pattern
    assert schemas.topic("other", "t") == "example_all"            # the default topic, dots replaced too
    assert Router(CanalMq(topic="example.all")).topic("a", "b") == "example.all"   # (only with dynamicTopic)


def test_partition_counts():
    router = Router(CanalMq(topic="t", dynamic_topic=".*\\..*", partitions_num=3,
                            partition_hash=".*\\..*:$pk$", dynamic_topic_partition_num="shop_.*:4,mycanal:6"))
    assert (router.partitions("shop_orders"), router.partitions("mycanal"), router.partitions("x")) == (4, 6, 3)
    assert Router(CanalMq(topic="t", partition=2)).partitions_needed("t") == 3


def test_split_by_columns_primary_key_and_table():
    rows = [{"id": str(i), "name": f"n{i}"} for i in range(8)]
    by_pk = Router(CanalMq(topic="t", partitions_num=3, partition_hash=".*\\..*:$pk$"))
    expected: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        expected.setdefault(abs(java_hash("shop") ^ java_hash(row["id"])) % 3, []).append(i)
    assert by_pk.split("shop", "t", "t", ["id"], rows) == sorted(expected.items())
    no_db = Router(CanalMq(topic="t", partitions_num=3, partition_hash="shop.t:id^name", database_hash=False))
    assert no_db.split("shop", "t", "t", None, rows[:1]) == [(abs(java_hash("0") ^ java_hash("n0")) % 3, [0])]
    assert no_db.split("shop", "other", "t", None, rows) == [(0, list(range(8)))]    # no rule: partition 0
    by_table = Router(CanalMq(topic="t", partitions_num=5, partition_hash="shop.t"))
    assert by_table.split("SHOP", "t", "t", None, rows) == [(abs(java_hash("t")) % 5, list(range(8)))]
    fixed = Router(CanalMq(topic="t", partition=1))
    assert fixed.split("shop", "t", "t", ["id"], rows) == [(1, list(range(8)))]


def _table():
    return TableContext("shop", "t", "example", 3, ("id",), {"id": "int", "name": "varchar(10)", "n": "int"},
                        {"id": 4, "name": 12, "n": 4})


def _source():
    return EventSource({"ts_ms": 1700000000000, "pos": 4711, "gtid": None})


def test_event_batching_and_fields():
    out_records = []
    output = CanalMqOutput(CanalMq(topic="example", partitions_num=3, partition_hash=".*\\..*:$pk$"), lambda t: 3)
    images = [{"id": 1, "name": "a", "n": 1}, {"id": 1, "name": "b", "n": 1},
              {"id": 2, "name": "c", "n": 5}, {"id": 2, "name": "c", "n": 6},
              {"id": 4, "name": "d", "n": None}, {"id": 4, "name": "e", "n": 7}]
    output.rows(_table(), "u", images, 0, 3, _source(), 1700000000123, out_records)
    partition_of = {i: abs(java_hash("shop") ^ java_hash(str(i))) % 3 for i in (1, 2, 4)}
    by_partition = {r.partition: json.loads(r.value) for r in out_records}
    assert sorted(by_partition) == sorted(set(partition_of.values()))
    assert all(r.key is None and r.topic == "example" for r in out_records)
    message = by_partition[partition_of[1]]
    assert list(message) == ["data", "database", "es", "gtid", "id", "isDdl", "mysqlType", "old", "pkNames", "sql",
                             "sqlType", "table", "ts", "type"]
    assert message["database"] == "shop" and message["type"] == "UPDATE" and message["es"] == 1700000000000
    assert message["ts"] == 1700000000123 and message["id"] == 4711 and message["gtid"] == "" and not message["isDdl"]
    rows = {row["id"]: (row, old) for m in by_partition.values() for row, old in zip(m["data"], m["old"])}
    assert rows["1"] == ({"id": "1", "name": "b", "n": "1"}, {"name": "a"})
    # Canal keeps one set of changed columns per event: row 2 changed n, and row 1's name stays in the set
    assert rows["2"] == ({"id": "2", "name": "c", "n": "6"}, {"name": "c", "n": "5"})
    assert rows["4"] == ({"id": "4", "name": "e", "n": "7"}, {"name": "d", "n": None})


def test_one_message_per_event_without_hash_and_per_row_on_request():
    inserts = [{"id": i, "name": None, "n": i} for i in range(3)]
    event, per_row = [], []
    CanalMqOutput(CanalMq(topic="example"), lambda t: 1).rows(_table(), "c", inserts, 0, 3, _source(), 1, event)
    CanalMqOutput(CanalMq(topic="example", flat_message_rows="row"), lambda t: 1).rows(
        _table(), "c", inserts, 0, 3, _source(), 1, per_row)
    [message] = [json.loads(r.value) for r in event]
    assert message["data"] == [{"id": str(i), "name": None, "n": str(i)} for i in range(3)]
    assert message["old"] is None and message["pkNames"] == ["id"] and message["type"] == "INSERT"
    assert [json.loads(r.value)["data"] for r in per_row] == [[row] for row in message["data"]]


def test_too_few_partitions_is_refused():
    output = CanalMqOutput(CanalMq(topic="example", partitions_num=3, partition_hash=".*\\..*:$pk$"), lambda t: 1)
    with pytest.raises(CdcError, match=r"topic 'example' has 1 partition\(s\) but Canal's routing writes to 3"):
        output.rows(_table(), "c", [{"id": 1, "name": "a", "n": 1}], 0, 1, _source(), 1, [])


def test_canal_event_filters_leave_changes_out():
    from cdc.config import SourceConfig
    from cdc.emitter import Emitter
    config = SourceConfig(name="x", user="u", server_id=3, format="canal", canal_mq=CanalMq(topic="example"),
                          canal_skip=("delete", "ddl"))
    emitter, out = Emitter(config, lambda t: 1), []
    rows = [{"id": 1, "name": "a", "n": 1}]
    emitter.rows(_table(), "d", rows, 0, 1, _source(), 0, None, out)
    emitter.schema_change("shop", "ALTER TABLE t ADD c INT", [object()], {"snapshot": "false"}, out)
    assert out == []
    emitter.rows(_table(), "c", rows, 0, 1, _source(), 0, None, out)
    assert [json.loads(r.value)["type"] for r in out] == ["INSERT"]
