"""The whole pipeline in Avro: MySQL → the connector (value_format and key_format avro, schemas in `binlake
schema-registry`) → the Spark sink's format: debezium-avro → Delta Lake and PostgreSQL, through a snapshot,
changes and deletes, a column added and one dropped mid-stream; each target compared with MySQL."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

import sink_harness
from sql_fixtures import by_default_on
from sink_harness import (TABLES, Workload, assert_same, assert_targets_equal_mysql, connector_config, delta_table,
                          mysql_table, postgres_table, run_sinks, sink_config)

ITEMS = "CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20), gone INT, price DECIMAL(10,2))"


class AvroPipeline:
    """MySQL's tables (sink_harness's workload, and `items`) captured by the connector in Avro, and the sink's
    configs for them."""

    def __init__(self, server, broker, registry, connector, tmp_path) -> None:
        self.server, self.broker, self.registry = server, broker, registry
        self.db, self.name = server.new_database(), "sinkav"
        self.workload = Workload(server, self.db, seed=11)
        self.workload.create()
        server.sql(ITEMS.format(db=self.db),
                   *[f"INSERT INTO {self.db}.items VALUES ({i}, 'n{i}', {i}, {i}.25)" for i in range(1, 31)])
        self.workload.run(40)  # before the connector starts: the snapshot reads these
        connector(connector_config(tmp_path, self.name, broker, server, self.db, "debezium", value_format="avro",
                                   key_format="avro", schema_registry={"url": registry.url}))
        self.reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
        self.delta_root, self.tmp_path = tmp_path / "delta", tmp_path

    def sink(self, kind: str, target: dict | None = None) -> dict:
        """The sink's config: into Delta at delta_root, or `target`."""
        target = target or {"delta": {"path": str(self.delta_root)}}
        return {**sink_config(self.name, self.broker, self.db, "debezium-avro", self.tmp_path / f"ck-{kind}", target,
                              schema_registry={"url": self.registry.url}),
                "topics": [f"{self.name}.{self.db}.{t}" for t in (*TABLES, "items")]}

    def wait_for_mark(self) -> None:
        """Until everything MySQL committed so far is on the log."""
        asyncio.run(sink_harness.wait_for_mark(
            self.broker.address, self.name, self.db, self.workload.mark(),
            value=lambda m: self.reader(m.value, SerializationContext(m.topic, MessageField.VALUE))))

    def change_items_schema(self) -> None:
        """Changes under the items' schema v1, `note` added and `gone` dropped, changes under v2."""
        db = self.db
        self.server.sql(f"UPDATE {db}.items SET gone = -gone, name = 'v1' WHERE id % 3 = 0",
                        f"DELETE FROM {db}.items WHERE id % 5 = 0",
                        f"ALTER TABLE {db}.items ADD COLUMN note VARCHAR(20), DROP COLUMN gone",
                        f"UPDATE {db}.items SET note = 'v2', price = price * 2 WHERE id % 2 = 0",
                        f"INSERT INTO {db}.items (id, name, price, note) VALUES (31, 'n31', 0.01, 'new'), (32, 'n32', NULL, NULL)",
                        f"DELETE FROM {db}.items WHERE id % 7 = 0")

    def items_versions(self) -> list[int]:
        return SchemaRegistryClient({"url": self.registry.url}).get_versions(f"{self.name}.{self.db}.items-value")

    def delta_equals_mysql(self, spark, when: str = "") -> list[str]:
        """Every table's Delta rows (Spark's and delta-rs's) equal MySQL's; the items' MySQL columns."""
        for table in (*TABLES, "items"):
            columns, key, expected = mysql_table(self.server, self.db, table)
            assert_same(expected, delta_table(spark, f"{self.delta_root}/{self.db}/{table}", key, columns),
                        f"Delta {self.db}.{table}{when}")
        return columns


@by_default_on("mysql")
def test_avro_into_delta_with_both_schema_versions_of_a_table_in_one_batch(
        spark, server, broker, registry, connector, tmp_path):
    """One `available_now` run: the snapshot, changes, and the items' records of schema v1 and v2 in one batch."""
    pipeline = AvroPipeline(server, broker, registry, connector, tmp_path)
    pipeline.wait_for_mark()                # (streaming: the snapshot, of schema v1, is done)
    pipeline.change_items_schema()
    pipeline.workload.run(30)
    pipeline.wait_for_mark()
    assert pipeline.items_versions() == [1, 2]
    run_sinks(spark, pipeline.sink("delta"))
    assert pipeline.delta_equals_mysql(spark) == ["id", "name", "price", "note"]


@pytest.mark.slow  # (two runs into two targets: minutes on a shared machine; the test above runs by default)
@by_default_on("mysql")
def test_avro_into_delta_and_postgres_across_a_column_added_and_one_dropped(
        spark, postgres, server, broker, registry, connector, tmp_path):
    """Delta and PostgreSQL at once, run after the snapshot and changes, then again (the same checkpoints)
    after the items' DDL: the targets gain `note` through schema evolution, keep `gone` (NULL from then on)."""
    pipeline = AvroPipeline(server, broker, registry, connector, tmp_path)
    db, schema = pipeline.db, f"s_{pipeline.db}"
    sinks = [pipeline.sink("delta"), pipeline.sink("jdbc", {"jdbc": {"url": postgres.url, "user": "binlake",
                                                                     "schema": schema}})]

    def targets_equal_mysql(when: str) -> list[str]:
        assert_targets_equal_mysql(spark, postgres, server, db, pipeline.delta_root, schema, when)
        columns, key, expected = mysql_table(server, db, "items")
        assert_same(expected, delta_table(spark, f"{pipeline.delta_root}/{db}/items", key, columns),
                    f"Delta {db}.items{when}")
        assert_same(expected, postgres_table(postgres, schema, "items", key, columns), f"PostgreSQL {schema}.items{when}")
        return columns

    pipeline.workload.run(60)
    pipeline.wait_for_mark()
    run_sinks(spark, *sinks)
    assert targets_equal_mysql(" (snapshot and changes)") == ["id", "name", "gone", "price"]

    pipeline.change_items_schema()
    pipeline.workload.run(60)
    pipeline.wait_for_mark()
    assert pipeline.items_versions() == [1, 2]
    run_sinks(spark, *sinks)
    assert targets_equal_mysql(" (after the DDL)") == ["id", "name", "price", "note"]
