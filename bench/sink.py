"""The Spark sink's throughput and batch latency, from the log into Delta Lake and PostgreSQL.

    .venv/bin/python bench/sink.py [--changes 1000000] [--keys 200000] [--partitions 4]
                                   [--rate 5000 --seconds 60] [--only backlog|latency] [--target delta|jdbc]
                                   [--formats json,avro]

backlog: a backlog of --changes change events (Debezium's envelope, as the connector writes them: inserts,
  then updates and deletes of --keys keys) is written to a broker first, the same changes in each of
  --formats: JSON (`format: debezium`) and Avro in Confluent's wire format (`value_format: avro`, its
  schema in a `binlake schema-registry` subprocess; `format: debezium-avro`); the sink then runs with
  `trigger: available_now` and the figure is changes merged per second from the log into each
  target, with each batch's time split into read+decode, schemas+checks and merge+commit. Each
  format and target runs twice, into tables of its own: cold (the JVM's first run) and warm.
latency: a producer writes --rate changes/s for --seconds; the sink triggers every 500 ms; the
  figures are p50/p99 of each batch's duration (Spark's triggerExecution) once it has warmed up.

Everything runs on this machine: a `binlake broker` subprocess, a throwaway PostgreSQL, and a
local[2] SparkSession in this process (the driver), started once for every run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree, not the installed one

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer

from cdc.formats.debezium_avro import envelope_schema, namespace, table_record
from cdc.schema.model import ColumnDef
from sandbox.postgres import start_postgres
from spark_sink.config import validate
from spark_sink.job import SinkJob
from spark_sink.session import builder
from testkit.brokerproc import BrokerProcess
from testkit.registryproc import RegistryProcess

SERVER, DB, TABLE = "bench", "shop", "orders"
TOPIC = f"{SERVER}.{DB}.{TABLE}"
AVRO_TOPIC = f"{SERVER}-avro.{DB}.{TABLE}"   # (the same table's changes in Avro; the schema topic is SERVER's)
COLUMNS = [("id", "int(11)"), ("customer", "int(11)"), ("amount", "decimal(10,2)"), ("status", "varchar(10)"),
           ("created", "datetime(6)"), ("note", "varchar(40)")]


def schema_event() -> bytes:
    return json.dumps({"source": {"file": "binlog.000001", "pos": 4, "db": DB, "table": TABLE, "snapshot": "false"},
                       "ddl": "CREATE TABLE orders ...", "databaseName": DB, "tableChanges": [{
                           "type": "CREATE", "id": f"{DB}.{TABLE}", "table": {"primaryKeyColumnNames": ["id"], "columns": [
                               {"name": n, "typeName": t.split("(")[0].upper(), "typeExpression": t} for n, t in COLUMNS]}}]}).encode()


class Changes:
    """Change events of `keys` orders: each key is created, then updated, sometimes deleted and created again."""

    def __init__(self, keys: int, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.keys = keys
        self.live: set[int] = set()
        self.pos = 1000

    def row(self, key: int) -> dict:
        r = self.rng
        return {"id": key, "customer": r.randint(1, 10_000), "amount": f"{r.randint(0, 10**7) / 100:.2f}",
                "status": r.choice(["new", "paid", "sent"]), "created": "2026-11-24T10:00:00.123456",
                "note": "x" * r.randint(0, 40)}

    def next(self) -> tuple[int, str, dict | None, dict | None, dict]:
        """(key, op, before, after, source) of the next change."""
        key = self.rng.randrange(self.keys)
        self.pos += 100
        if key not in self.live:
            op, before, after = "c", None, self.row(key)
            self.live.add(key)
        elif self.rng.random() < 0.1:
            op, before, after = "d", self.row(key), None
            self.live.discard(key)
        else:
            op, before, after = "u", self.row(key), self.row(key)
        source = {"version": "binlake-0.1", "connector": "mysql", "name": SERVER, "server_id": 1,
                  "file": "binlog.000001", "pos": self.pos, "gtid": None, "db": DB, "table": TABLE,
                  "ts_ms": int(time.time() * 1000), "snapshot": "false", "row": 0}
        return key, op, before, after, source


def json_value(op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": source["ts_ms"], "source": source}).encode()


class AvroValues:
    """The envelope in Avro as the connector writes it (cdc/formats/debezium_avro.py's schema, registered under
    the Avro topic's subject), framed with the registry id."""

    def __init__(self, registry_url: str) -> None:
        ns = namespace(SERVER, DB, TABLE)
        columns = [ColumnDef(n, t.split("(")[0], tuple(int(a) for a in t.split("(")[1].rstrip(")").split(",")))
                   for n, t in COLUMNS]
        value, self.image = table_record("Value", ns, columns, "precise")
        envelope = envelope_schema(ns, value)
        schema_id = SchemaRegistryClient({"url": registry_url}).register_schema(
            f"{AVRO_TOPIC}-value", Schema(json.dumps(envelope), "AVRO"))
        self.header, self.parsed, self.branch = b"\0" + schema_id.to_bytes(4, "big"), parse_schema(envelope), f"{ns}.Value"

    def __call__(self, op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, self.parsed, {
            "before": before and (self.branch, self.image(before)), "after": after and (self.branch, self.image(after)),
            "source": source, "op": op, "ts_ms": source["ts_ms"], "transaction": None})
        return self.header + out.getvalue()


def producer(address: str) -> Producer:
    return Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.num.messages": 10000,
                     "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})


def sink_config(address: str, work: Path, target: dict, fmt: str = "json", registry: str | None = None,
                **extra) -> dict:
    avro = {"format": "debezium-avro", "topics": [AVRO_TOPIC], "schema_registry": {"url": registry}} \
        if fmt == "avro" else {}
    return {"bootstrap_servers": address, "topics": [TOPIC], "format": "debezium", "schema_topic": SERVER,
            "checkpoint": str(work / f"ck-{time.monotonic_ns()}"), "target": target, **avro, **extra}


def backlog(spark, address: str, targets: dict, work: Path, changes: int, keys: int, registry: str | None) -> None:
    """The same changes in each format (JSON always; Avro with a registry), then the sink over each."""
    p, events = producer(address), Changes(keys)
    encoders = {"json": (TOPIC, json_value), **({"avro": (AVRO_TOPIC, AvroValues(registry))} if registry else {})}
    size = dict.fromkeys(encoders, 0)
    started = time.monotonic()
    for _ in range(changes):
        key, *change = events.next()
        key = json.dumps({"id": key}).encode()
        for fmt, (topic, encode) in encoders.items():
            value = encode(*change)
            size[fmt] += len(value)
            while True:
                try:
                    p.produce(topic, value, key)
                    break
                except BufferError:
                    p.poll(0.05)
    p.flush(120)
    print(f"backlog: {changes:,} changes of {keys:,} keys written in {time.monotonic() - started:.1f} s; value bytes "
          f"per change: " + ", ".join(f"{fmt} {n / changes:.0f}" for fmt, n in size.items()))
    rates: dict = {}
    for round_ in ("cold", "warm"):  # the first run also pays the JVM's warm-up (class loading, JIT)
        for fmt in encoders:
            for name, target in targets.items():
                job = SinkJob(spark, validate(sink_config(address, work, fresh(target, f"{fmt}_{round_}"), fmt,
                                                          trigger="available_now", registry=registry)))
                started = time.monotonic()
                job.start().awaitTermination()
                seconds = time.monotonic() - started
                rates[(round_, fmt, name)] = changes / seconds
                parts = {k: sum(t[k] for t in job.timings) for k in ("read_decode", "plan", "write")}
                print(f"  {round_} {fmt:4} {name:6} {changes / seconds:>10,.0f} changes/s  ({seconds:.1f} s, "
                      f"{len(job.timings)} batch(es): read+decode {parts['read_decode']:.1f} s, schemas+checks "
                      f"{parts['plan']:.1f} s, merge+commit {parts['write']:.1f} s; the rest is Spark planning the "
                      f"query and its Kafka offsets)", flush=True)
    for round_ in ("cold", "warm"):
        for name in targets:
            if ("avro" in encoders) and (round_, "json", name) in rates:
                print(f"  {round_} {name}: Avro / JSON = {rates[(round_, 'avro', name)] / rates[(round_, 'json', name)]:.2f}x")


def fresh(target: dict, suffix: str) -> dict:
    """The target with its own tables for this run (a Delta path or a PostgreSQL schema of its own)."""
    if "delta" in target:
        return {"delta": {**target["delta"], "path": f"{target['delta']['path']}-{suffix}"}}
    return {"jdbc": {**target["jdbc"], "schema": f"{target['jdbc']['schema']}_{suffix}"}}


def latency(spark, address: str, targets: dict, work: Path, rate: int, seconds: int, keys: int) -> None:
    for name, target in targets.items():
        stop = threading.Event()

        def feed() -> None:
            p, events = producer(address), Changes(keys, seed=7)
            next_at = time.monotonic()
            while not stop.is_set():
                for _ in range(rate // 100):
                    key, *change = events.next()
                    p.produce(TOPIC, json_value(*change), json.dumps({"id": key}).encode())
                p.poll(0)
                next_at += 0.01
                time.sleep(max(0.0, next_at - time.monotonic()))
            p.flush(60)

        feeder = threading.Thread(target=feed)
        feeder.start()
        job = SinkJob(spark, validate(sink_config(address, work, target, starting_offsets="latest",
                                                  trigger={"processing_time": "500ms"})))
        query = job.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(5)
            if query.exception():
                raise SystemExit(f"the sink stopped: {query.exception()}")
            print(f"    {len(query.recentProgress)} batches so far; last: {job.timings[-1] if job.timings else None}",
                  flush=True)
        stop.set()
        feeder.join()
        progress = query.recentProgress
        query.stop()
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p["numInputRows"] > 0][3:]
        rows = [p["numInputRows"] for p in progress if p["numInputRows"] > 0][3:]
        if len(durations) < 2:
            print(f"  {name:6} too few batches ({len(durations)}) in {seconds} s")
            continue
        p99 = sorted(durations)[int(len(durations) * 0.99)]  # nearest rank: with under 100 batches, the slowest
        print(f"  {name:6} {rate:,} changes/s: {len(durations)} batches of {statistics.median(rows):,.0f} changes, "
              f"duration p50 {statistics.median(durations):.2f} s, p99 {p99:.2f} s, max {max(durations):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--only", choices=["backlog", "latency"])
    parser.add_argument("--target", choices=["delta", "jdbc"])
    parser.add_argument("--formats", default="json,avro", help="json, or json,avro: the backlog in each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = BrokerProcess(work / "broker").start()
        postgres = start_postgres(work / "pg")
        try:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": broker.address})
            for topic, n in ((TOPIC, args.partitions), (AVRO_TOPIC, args.partitions), (SERVER, 1)):
                admin.create_topics([NewTopic(topic, n, 1)])[topic].result(30)
            p = producer(broker.address)
            p.produce(SERVER, schema_event(), b'{"databaseName":"shop"}')
            p.flush(30)
            spark = builder("binlake-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "4", "spark.driver.extraJavaOptions": "-XX:MaxJavaStackTraceDepth=100000"}).getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            targets = {"delta": {"delta": {"path": str(work / "delta"), "optimize_every": 0}},
                       "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": "bench"}}}
            if args.target:
                targets = {args.target: targets[args.target]}
            print(f"machine: {os.cpu_count()} cores; Spark local[2], broker and PostgreSQL on this machine")
            if args.only in (None, "backlog"):
                registry = RegistryProcess(broker.address, work / "registry.log").start() \
                    if "avro" in args.formats.split(",") else None
                try:
                    backlog(spark, broker.address, targets, work, args.changes, args.keys, registry and registry.url)
                finally:
                    if registry is not None:
                        registry.kill()
            if args.only in (None, "latency"):
                latency(spark, broker.address, targets, work, args.rate, args.seconds, args.keys)
            spark.stop()
        finally:
            postgres.stop()
            broker.kill()


if __name__ == "__main__":
    main()
