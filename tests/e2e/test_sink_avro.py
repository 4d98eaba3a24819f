"""The whole pipeline in Avro: MySQL → the connector (value_format and key_format avro, schemas in `binlake
schema-registry`) → the Spark sink's format: debezium-avro → Delta Lake and PostgreSQL, through a snapshot,
changes and deletes, a column added and one dropped mid-stream; each target compared with MySQL."""

from __future__ import annotations

import asyncio

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

import sink_harness
from sql_fixtures import by_default_on
from sink_harness import (TABLES, Workload, assert_same, assert_targets_equal_mysql, connector_config, delta_table,
                          mysql_table, postgres_table, run_sinks, sink_config)

ITEMS = "CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20), gone INT, price DECIMAL(10,2))"


@by_default_on("mysql")
def test_avro_from_mysql_into_delta_and_postgres_across_a_column_added_and_one_dropped(
        spark, postgres, server, broker, registry, connector, tmp_path):
    db, name = server.new_database(), "sinkav"
    workload = Workload(server, db, seed=11)
    workload.create()
    server.sql(ITEMS.format(db=db), *[f"INSERT INTO {db}.items VALUES ({i}, 'n{i}', {i}, {i}.25)" for i in range(1, 31)])
    workload.run(40)  # before the connector starts: the snapshot reads these
    connector(connector_config(tmp_path, name, broker, server, db, "debezium", value_format="avro",
                               key_format="avro", schema_registry={"url": registry.url}))
    workload.run(60)
    reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))

    def wait_for_mark():
        asyncio.run(sink_harness.wait_for_mark(broker.address, name, db, workload.mark(), value=lambda m: reader(
            m.value, SerializationContext(m.topic, MessageField.VALUE))))

    delta_root, schema = tmp_path / "delta", f"s_{db}"
    targets = {"delta": {"delta": {"path": str(delta_root)}},
               "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}}}
    sinks = [{**sink_config(name, broker, db, "debezium-avro", tmp_path / f"ck-{kind}", target,
                            schema_registry={"url": registry.url}),
              "topics": [f"{name}.{db}.{t}" for t in (*TABLES, "items")]} for kind, target in targets.items()]

    def targets_equal_mysql(when: str):
        assert_targets_equal_mysql(spark, postgres, server, db, delta_root, schema, when)
        columns, key, expected = mysql_table(server, db, "items")
        assert_same(expected, delta_table(spark, f"{delta_root}/{db}/items", key, columns), f"Delta {db}.items{when}")
        assert_same(expected, postgres_table(postgres, schema, "items", key, columns), f"PostgreSQL {schema}.items{when}")
        return columns, expected

    wait_for_mark()
    run_sinks(spark, *sinks)
    assert targets_equal_mysql(" (snapshot and changes)")[0] == ["id", "name", "gone", "price"]

    # the same checkpoints carry on through a batch with both of the items' schema versions
    server.sql(f"UPDATE {db}.items SET gone = -gone, name = 'v1' WHERE id % 3 = 0", f"DELETE FROM {db}.items WHERE id % 5 = 0",
               f"ALTER TABLE {db}.items ADD COLUMN note VARCHAR(20), DROP COLUMN gone",
               f"UPDATE {db}.items SET note = 'v2', price = price * 2 WHERE id % 2 = 0",
               f"INSERT INTO {db}.items (id, name, price, note) VALUES (31, 'n31', 0.01, 'new'), (32, 'n32', NULL, NULL)",
               f"DELETE FROM {db}.items WHERE id % 7 = 0")
    workload.run(60)
    wait_for_mark()
    assert SchemaRegistryClient({"url": registry.url}).get_versions(f"{name}.{db}.items-value") == [1, 2]
    run_sinks(spark, *sinks)
    columns, expected = targets_equal_mysql(" (after the DDL)")
    assert columns == ["id", "name", "price", "note"] and len(expected) == 22
