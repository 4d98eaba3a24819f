"""Kafka Connect (Java) with Debezium's MariaDB connector, writing to a logcore broker: standalone, and a
distributed worker with exactly-once source support (KIP-618), whose topics are transactional."""

from __future__ import annotations

import json
import random

import pytest
from confluent_kafka import Consumer, TopicPartition

from testkit.reference import start_connect
from brokerproc import NO_REBALANCE_DELAY, read_to_end
from waiting import wait_for

pytestmark = pytest.mark.java

ROWS = 200


def debezium(mariadb, bootstrap: str, prefix: str) -> dict[str, str]:
    settings = mariadb.settings()
    return {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1", "database.port": str(settings["port"]),
        "database.user": settings["user"], "database.password": settings["password"],
        "database.server.id": str(random.randint(10_000, 90_000)), "topic.prefix": prefix,
        "database.include.list": prefix, "decimal.handling.mode": "string",
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        "schema.history.internal.kafka.topic": f"{prefix}-history",
    }


def workload(mariadb, db: str, rng: random.Random, statements: int) -> None:
    """Inserts, updates and deletes of random keys, several to a transaction now and then."""
    conn = mariadb.connect(db=db)
    with conn.cursor() as cur:
        for _ in range(statements):
            key, kind = rng.randrange(ROWS * 2), rng.choice(["upsert", "update", "delete"])
            if kind == "upsert":
                cur.execute("INSERT INTO orders VALUES (%s, %s, 'new') ON DUPLICATE KEY UPDATE note = 'upserted'",
                            (key, rng.randrange(10**6) / 100))
            elif kind == "update":
                cur.execute("UPDATE orders SET amount = amount + 1.25, note = 'updated' WHERE id = %s", (key,))
            else:
                cur.execute("DELETE FROM orders WHERE id = %s", (key,))
            if rng.random() < 0.3:
                conn.commit()
    conn.commit()
    conn.close()


def mysql_rows(mariadb, db: str) -> dict[int, tuple[str, str]]:
    return {r[0]: (f"{r[1]:.2f}", r[2]) for r in mariadb.sql(f"SELECT id, amount, note FROM {db}.orders")}


def folded(values: list[bytes | None]) -> dict[int, tuple[str, str]]:
    """The table the change events describe: each key's last image, deletes removing it."""
    table: dict[int, tuple[str, str]] = {}
    for value in values:
        if value is None:
            continue  # the tombstone after a delete
        event = json.loads(value)
        if event["op"] == "d":
            table.pop(event["before"]["id"], None)
        else:
            table[event["after"]["id"]] = (f"{float(event['after']['amount']):.2f}", event["after"]["note"])
    return table


@pytest.fixture
def shop(mariadb):
    """A database of its own on the session's MariaDB, with ROWS orders for the snapshot."""
    db = f"dbz{random.randrange(10**6)}"
    mariadb.sql(f"CREATE DATABASE {db}",
                f"CREATE TABLE {db}.orders (id INT PRIMARY KEY, amount DECIMAL(10,2) NOT NULL, note VARCHAR(20))",
                f"INSERT INTO {db}.orders VALUES " + ", ".join(f"({i}, {i}.25, 'n{i}')" for i in range(ROWS)))
    yield db
    mariadb.sql(f"DROP DATABASE {db}")


def caught_up(bootstrap: str, topic: str, mariadb, db: str, isolation: str = "read_uncommitted") -> bool:
    return folded(read_to_end(bootstrap, {topic: 1}, isolation=isolation)) == mysql_rows(mariadb, db)


def test_debezium_on_a_standalone_worker_writes_logcore_topics_that_equal_mysql(reference_jars, broker, mariadb,
                                                                                 shop, tmp_path):
    connect = start_connect(tmp_path / "connect", broker.address,
                            connectors=[{"name": "dbz", **debezium(mariadb, broker.address, shop)}])
    try:
        wait_for(lambda: connect.task_states("dbz") == ["RUNNING"], "the Debezium task to run")
        workload(mariadb, shop, random.Random(1), 300)
        wait_for(lambda: caught_up(broker.address, f"{shop}.{shop}.orders", mariadb, shop),
                 "the topic to describe the MySQL table")
    finally:
        connect.stop()


def test_debezium_exactly_once_on_a_distributed_worker_writes_transactions_to_logcore(reference_jars, broker_factory,
                                                                                       mariadb, shop, tmp_path):
    """KIP-618: the worker's task writes through a transactional producer, its offsets in the same
    transactions, and the worker's leader fences zombies through the admin API (FenceProducers)."""
    broker = broker_factory(NO_REBALANCE_DELAY)  # (the Connect cluster's group: one worker)
    connect = start_connect(tmp_path / "connect", broker.address, worker={
        "group.id": "connect-cluster", "exactly.once.source.support": "enabled",
        **{f"{kind}.storage.{key}": value for kind in ("config", "offset", "status")
           for key, value in (("topic", f"connect-{kind}"), ("replication.factor", "1"))}})
    try:
        status, body = connect.rest("POST", "/connectors", {"name": "dbz", "config": {
            **debezium(mariadb, broker.address, shop), "exactly.once.support": "required"}})
        assert status == 201, body
        wait_for(lambda: connect.task_states("dbz") == ["RUNNING"], "the Debezium task to run")
        workload(mariadb, shop, random.Random(2), 300)
        wait_for(lambda: caught_up(broker.address, f"{shop}.{shop}.orders", mariadb, shop, "read_committed"),
                 "the committed topic to describe the MySQL table")
        events = read_to_end(broker.address, {f"{shop}.{shop}.orders": 1})
        consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "watermarks"})
        _, end = consumer.get_watermark_offsets(TopicPartition(f"{shop}.{shop}.orders", 0), timeout=10)
        consumer.close()
        assert end > len(events)  # commit markers take offsets: the task wrote in transactions
    finally:
        connect.stop()
