"""Debezium's JDBC sink connector on a Kafka Connect standalone worker, configured as a Debezium user
configures it to land change topics in PostgreSQL: what bench/sink.py holds binlake's PostgreSQL
sink against.

    worker = start_worker(Path("/tmp/w"), broker.address)          # the worker's JVM, no connector yet
    add(worker, "dbz-1", connector(topics, postgres.url, "dbz_1"))  # returns once its tasks run
    remove(worker, "dbz-1")

The topics carry Kafka Connect's JsonConverter wrapping with schemas ({"schema", "payload"}), the
converter's default and what Debezium's MySQL connector writes with it: the sink needs a record's
schema to map its columns, and refuses schemaless JSON. Or, with `avro_registry`, keys and values in
Avro in Confluent's framing, read by Apicurio's AvroConverter from that registry (the converter
Debezium's documentation names besides Confluent's, which is not on Maven Central). It reads
Debezium's envelope natively (no ExtractNewRecordState needed). The connector comes from `make reference`
(bench/reference/jdbc-sink/pom.xml), in a plugin directory of its own on the worker's plugin.path.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.reference import (  # noqa: E402
    ConnectWorker, MissingReference, apicurio_classpath, apicurio_converter, jar_dir, start_connect)

PLUGIN = "debezium-connector-jdbc"


def start_worker(base: Path, bootstrap: str, avro_registry: str | None = None) -> ConnectWorker:
    """A standalone worker with no connector (they come through its REST API): JSON with schemas, or
    Avro through the registry at `avro_registry` (its base URL)."""
    plugins = jar_dir() / "plugins"
    if not (plugins / PLUGIN / ".fetched").exists():
        raise MissingReference(f"Debezium's JDBC sink connector is not in {plugins / PLUGIN}; run `make reference`")
    converters = apicurio_converter(f"{avro_registry}/apis/registry/v2") if avro_registry else {
        "key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true"}
    return start_connect(base, bootstrap, connectors=[], jars=avro_registry and apicurio_classpath(), worker={
        **converters, "plugin.path": str(plugins), "connector.client.config.override.policy": "All"})


def connector(topics: list[str], url: str, starting_offsets: str = "earliest", tasks: int = 2) -> dict[str, str]:
    """Upserts and deletes by the record's key, tables created from the records' schemas, named as the
    source's. `url`: a database of its own (the connector finds a table of that name in any schema
    its connection sees, and would write into another sink's)."""
    return {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "topics": ",".join(topics),
            "tasks.max": str(tasks), "connection.url": url,
            "connection.username": "binlake", "connection.password": "",
            "insert.mode": "upsert", "delete.enabled": "true", "primary.key.mode": "record_key",
            "schema.evolution": "basic", "collection.name.format": "${source.table}",
            "consumer.override.auto.offset.reset": starting_offsets}


def add(worker: ConnectWorker, name: str, config: dict[str, str], timeout: float = 120) -> None:
    status, body = worker.rest("POST", "/connectors", {"name": name, "config": config})
    if status != 201:
        raise RuntimeError(f"Kafka Connect refused connector {name}: {status} {body}")
    deadline = time.monotonic() + timeout
    while worker.task_states(name) != ["RUNNING"] * int(config["tasks.max"]):
        check(worker, name)
        if time.monotonic() > deadline:
            raise RuntimeError(f"connector {name}'s tasks did not run in {timeout:.0f} s: "
                               f"{worker.rest('GET', f'/connectors/{name}/status')[1]}")
        time.sleep(0.1)


def check(worker: ConnectWorker, name: str) -> None:
    """RuntimeError with the task's stack trace if a task of `name` has failed."""
    status, body = worker.rest("GET", f"/connectors/{name}/status")
    failed = [task.get("trace", "") for task in body.get("tasks", []) if task["state"] == "FAILED"] \
        if status == 200 else []
    if failed:
        raise RuntimeError(f"connector {name} failed:\n{failed[0][-3000:]}")


def remove(worker: ConnectWorker, name: str) -> None:
    worker.rest("DELETE", f"/connectors/{name}")
