"""The Spark sink end to end: MySQL or MariaDB → mysql connector → broker → Spark (a real local session,
Spark's own Kafka source) → Delta Lake and PostgreSQL tables, compared with MySQL row for row."""

from __future__ import annotations

import asyncio

import pytest

from sql_fixtures import by_default_on
from sink_harness import (Workload, assert_targets_equal_mysql, connector_config, run_sinks, sink_config,
                          wait_for_mark)


# The Canal variant is `slow` for suite time: what differs from Debezium is decoding, which
# tests/sink/test_changes.py covers for both formats; the Spark jobs are the same.
@pytest.mark.parametrize("fmt", ["debezium", pytest.param("canal", marks=pytest.mark.slow)])
@by_default_on("mysql")      # (the sink reads the same events from either server)
def test_delta_and_postgres_equal_mysql_through_snapshot_changes_and_ddl(
        fmt, spark, postgres, server, broker, connector, tmp_path):
    sink_tables_equal_mysql(fmt, spark, postgres, server, broker, connector, tmp_path)


@pytest.mark.slow  # the Apache Kafka variant of the test above (a minute)
@pytest.mark.kafka
def test_on_apache_kafka_delta_and_postgres_equal_mysql(spark, postgres, server, apache_kafka_factory, connector,
                                                         tmp_path):
    sink_tables_equal_mysql("debezium", spark, postgres, server, apache_kafka_factory(), connector, tmp_path)


def sink_tables_equal_mysql(fmt, spark, postgres, server, broker, connector, tmp_path) -> None:
    """Snapshot and changes, then DDL (a new column, a widened type) and more changes: after each
    `available_now` run of the sink, its Delta and PostgreSQL tables equal MySQL's."""
    db, name = server.new_database(), f"sink{fmt[0]}"
    workload = Workload(server, db, seed=7)
    workload.create()
    workload.run(60)  # before the connector starts: the snapshot reads these
    connector(connector_config(tmp_path, name, broker, server, db, fmt))
    workload.run(120)
    mark = workload.mark()
    asyncio.run(wait_for_mark(broker.address, name, db, mark))

    delta_root, schema = tmp_path / "delta", f"s_{db}"
    targets = {"delta": {"delta": {"path": str(delta_root)}},
               "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}}}
    sinks = [sink_config(name, broker, db, fmt, tmp_path / f"ck-{kind}", target) for kind, target in targets.items()]
    run_sinks(spark, *sinks)  # (both targets at once: one's merge runs while the other's driver plans)
    assert_targets_equal_mysql(spark, postgres, server, db, delta_root, schema)

    # the same checkpoints carry on: new columns, a widened type, more changes
    server.sql(f"ALTER TABLE {db}.orders ADD COLUMN note VARCHAR(20)", f"ALTER TABLE {db}.orders MODIFY customer BIGINT",
                f"UPDATE {db}.orders SET note = 'noted', customer = 9000000000 WHERE id % 2 = 0")
    workload.run(80)
    mark = workload.mark()
    asyncio.run(wait_for_mark(broker.address, name, db, mark))
    run_sinks(spark, *sinks)
    assert_targets_equal_mysql(spark, postgres, server, db, delta_root, schema)
