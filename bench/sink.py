"""The Spark sink's throughput and batch latency, from the log into Delta Lake and PostgreSQL.

    .venv/bin/python bench/sink.py [--changes 1000000] [--keys 200000] [--partitions 4]
                                   [--rate 5000 --seconds 60] [--only backlog|latency] [--target delta|jdbc]
                                   [--formats json,avro] [--phases]
                                   [--versus [--pg-rate 1000] [--formats json|avro --target jdbc]]

backlog: a backlog of --changes change events (Debezium's envelope, as the connector writes them: inserts,
  then updates and deletes of --keys keys) is written to a broker first, the same changes in each of
  --formats: JSON (`format: debezium`) and Avro in Confluent's wire format (`value_format: avro`, its
  schema in a `binlake schema-registry` subprocess; `format: debezium-avro`); the sink then runs with
  `trigger: available_now` and the figure is changes merged per second from the log into each
  target, with each batch's time split into read+decode, schemas+checks and merge+commit. Each
  format and target runs twice, into tables of its own: cold (the JVM's first run) and warm. --phases
  then times the read+decode phase's steps alone (Kafka source, decode, cache and summary) per format.
latency: a producer writes --rate changes/s for --seconds; the sink triggers every 500 ms; the
  figures are p50/p99 of each batch's duration (Spark's triggerExecution) once it has warmed up.

--versus: each target beside what a user would run instead, on the same topics (three tables of
  --keys keys each; keys and values in Kafka Connect's JsonConverter wrapping with schemas, which
  Debezium's JDBC sink needs), each run cold and warm, then a table of figures and ratios:
  - PostgreSQL: Debezium's JDBC sink connector on a Kafka Connect standalone worker
    (bench/jdbc_sink_reference.py; upsert, deletes, key from the record key, 2 tasks as Spark has 2
    cores). Backlog: changes/s until an end marker in each partition of each table is visible. Latency:
    at --pg-rate changes/s, one new row every 100 ms is a probe, timed from its write to the log to
    its row being visible in PostgreSQL (polled every 50 ms); p99 after 10 s of warm-up.
  - Delta: the foreachBatch MERGE job of Delta's documentation (bench/delta_foreachbatch.py), in
    the same SparkSession. Backlog: `available_now`; latency: p99 batch duration at --rate changes/s,
    both with a 500 ms trigger.
  With --formats avro (and --target jdbc): keys and values in Avro as the connector writes them with
  key_format and value_format avro, their schemas in a `binlake schema-registry` subprocess; binlake's
  sink reads them as `format: debezium-avro`, the connector through Apicurio's AvroConverter (Avro is
  what most Debezium users run, and it spares both sides the wrapping's bytes).
  Needs `make reference` (Kafka Connect, the connector, Apicurio's converter).

Everything runs on this machine: a `binlake broker` subprocess, a throwaway PostgreSQL, and a
local[2] SparkSession in this process (the driver), started once for every run.
"""

from __future__ import annotations

import argparse
import functools
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


def schema_event(table: str = TABLE) -> bytes:
    return json.dumps({"source": {"file": "binlog.000001", "pos": 4, "db": DB, "table": table, "snapshot": "false"},
                       "ddl": f"CREATE TABLE {table} ...", "databaseName": DB, "tableChanges": [{
                           "type": "CREATE", "id": f"{DB}.{table}", "table": {"primaryKeyColumnNames": ["id"], "columns": [
                               {"name": n, "typeName": t.split("(")[0].upper(), "typeExpression": t} for n, t in COLUMNS]}}]}).encode()


def connect_schemas(table: str) -> tuple[bytes, bytes]:
    """Kafka Connect's schemas of a table's keys and change events, as JsonConverter writes them beside
    each payload (schemas.enable=true), in the shape Debezium's MySQL connector gives them with
    decimal.handling.mode=string; DATETIME stays the connector's text, as the payload has it."""
    def field(name: str, kind: str, optional: bool = True) -> dict:
        return {"field": name, "type": kind, "optional": optional}
    row = [field("id", "int32", False), field("customer", "int32"), field("amount", "string"),
           field("status", "string"), field("created", "string"), field("note", "string")]
    value = {"type": "struct", "name": f"{SERVER}.{DB}.{table}.Value", "optional": True, "fields": row}
    source = {"type": "struct", "name": "io.debezium.connector.mysql.Source", "optional": False, "field": "source",
              "fields": [field("version", "string", False), field("connector", "string", False),
                         field("name", "string", False), field("ts_ms", "int64", False), field("snapshot", "string"),
                         field("db", "string", False), field("table", "string"), field("server_id", "int64", False),
                         field("gtid", "string"), field("file", "string", False), field("pos", "int64", False),
                         field("row", "int32", False)]}
    envelope = {"type": "struct", "name": f"{SERVER}.{DB}.{table}.Envelope", "optional": False, "version": 2,
                "fields": [{**value, "field": "before"}, {**value, "field": "after"}, source,
                           field("op", "string", False), field("ts_ms", "int64")]}
    key = {"type": "struct", "name": f"{SERVER}.{DB}.{table}.Key", "optional": False, "fields": [row[0]]}
    return json.dumps(key).encode(), json.dumps(envelope).encode()


class Changes:
    """Change events of `keys` rows of each of `tables`: each key is created, then updated, sometimes
    deleted and created again. `live` holds each table's keys that exist after the changes so far.
    The encoders below turn a change into what a producer writes."""

    def __init__(self, keys: int, seed: int = 1, tables: tuple[str, ...] = (TABLE,)) -> None:
        self.rng = random.Random(seed)
        self.keys = keys
        self.tables = tables
        self.live: dict[str, set[int]] = {table: set() for table in tables}
        self.pos = 1000

    def row(self, key: int) -> dict:
        r = self.rng
        return {"id": key, "customer": r.randint(1, 10_000), "amount": f"{r.randint(0, 10**7) / 100:.2f}",
                "status": r.choice(["new", "paid", "sent"]), "created": "2026-11-24T10:00:00.123456",
                "note": "x" * r.randint(0, 40)}

    def next(self, key: int | None = None, table: str | None = None) -> tuple[str, int, str, dict | None, dict | None, dict]:
        """(table, key, op, before, after, source) of the next change: of a random key and table, or the given ones."""
        table = table or self.rng.choice(self.tables)
        key = self.rng.randrange(self.keys) if key is None else key
        live = self.live[table]
        self.pos += 100
        if key not in live:
            op, before, after = "c", None, self.row(key)
            live.add(key)
        elif self.rng.random() < 0.1:
            op, before, after = "d", self.row(key), None
            live.discard(key)
        else:
            op, before, after = "u", self.row(key), self.row(key)
        source = {"version": "binlake-0.1", "connector": "mysql", "name": SERVER, "server_id": 1,
                  "file": "binlog.000001", "pos": self.pos, "gtid": None, "db": DB, "table": table,
                  "ts_ms": int(time.time() * 1000), "snapshot": "false", "row": 0}
        return table, key, op, before, after, source


# -- encoders: a change → (topic, key, value) as a producer writes it -------------------------------------

def json_key(key: int) -> bytes:
    return json.dumps({"id": key}).encode()


def json_value(op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": source["ts_ms"], "source": source}).encode()


def plain(table: str, key: int, op: str, before: dict | None, after: dict | None, source: dict) -> tuple[str, bytes, bytes]:
    """The key and envelope in JSON, as binlake's connector writes them."""
    return f"{SERVER}.{DB}.{table}", json_key(key), json_value(op, before, after, source)


class Wrapped:
    """Keys and values in Kafka Connect's JsonConverter wrapping with schemas ({"schema", "payload"}),
    Debezium's default, which Debezium's JDBC sink needs."""

    def __init__(self, tables: tuple[str, ...]) -> None:
        self.schemas = {table: connect_schemas(table) for table in tables}

    def __call__(self, table: str, key: int, *change) -> tuple[str, bytes, bytes]:
        topic, key_json, value = plain(table, key, *change)
        key_schema, value_schema = self.schemas[table]
        return (topic, b'{"schema":%b,"payload":%b}' % (key_schema, key_json),
                b'{"schema":%b,"payload":%b}' % (value_schema, value))


class Avro:
    """Changes in Avro as the connector writes them (cdc/formats/debezium_avro.py's schemas, registered under
    each topic's subjects, Confluent's framing): the envelope, and with `keys` the Key record (key_format:
    avro), else the key in JSON. Topics are `server`'s."""

    def __init__(self, registry_url: str, server: str = SERVER, tables: tuple[str, ...] = (TABLE,),
                 keys: bool = False) -> None:
        client = SchemaRegistryClient({"url": registry_url})
        columns = [ColumnDef(n, t.split("(")[0], tuple(int(a) for a in t.split("(")[1].rstrip(")").split(",")),
                             nullable=n != "id") for n, t in COLUMNS]

        def framed(subject: str, schema: dict) -> bytes:
            return b"\0" + client.register_schema(subject, Schema(json.dumps(schema), "AVRO")).to_bytes(4, "big")
        self.tables = {}
        for table in tables:
            ns = namespace(server, DB, table)
            topic = f"{server}.{DB}.{table}"
            value, image, _ = table_record("Value", ns, columns, "precise")
            envelope = envelope_schema(ns, value)
            key = table_record("Key", ns, columns[:1], "precise") if keys else None
            self.tables[table] = (topic, framed(f"{topic}-value", envelope), parse_schema(envelope), f"{ns}.Value",
                                  image, key and (framed(f"{topic}-key", key.schema), key.binary))

    def __call__(self, table: str, key: int, op: str, before: dict | None, after: dict | None,
                 source: dict) -> tuple[str, bytes, bytes]:
        topic, header, parsed, branch, image, framed_key = self.tables[table]
        out = io.BytesIO()
        schemaless_writer(out, parsed, {
            "before": before and (branch, image(before)), "after": after and (branch, image(after)),
            "source": source, "op": op, "ts_ms": source["ts_ms"], "transaction": None})
        if framed_key is None:
            return topic, json_key(key), header + out.getvalue()
        key_header, key_binary = framed_key
        return topic, key_header + key_binary({"id": key}), header + out.getvalue()


def producer(address: str) -> Producer:
    return Producer({"bootstrap.servers": address, "linger.ms": 20, "batch.num.messages": 10000,
                     "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})


def sink_config(address: str, work: Path, target: dict, fmt: str = "json", registry: str | None = None,
                **extra) -> dict:
    avro = {"format": "debezium-avro", "topics": [AVRO_TOPIC], "schema_registry": {"url": registry}} \
        if fmt == "avro" else {}
    return {"bootstrap_servers": address, "topics": [TOPIC], "format": "debezium", "schema_topic": SERVER,
            "checkpoint": str(work / f"ck-{time.monotonic_ns()}"), "target": target, **avro, **extra}


def write(p: Producer, events: Changes, changes: int, encoders: dict) -> dict[str, int]:
    """`changes` change events, each in each of `encoders` (name → encoder), as fast as the broker takes
    them; returns the value bytes each encoder wrote."""
    size = dict.fromkeys(encoders, 0)
    for _ in range(changes):
        change = events.next()
        for name, encode in encoders.items():
            topic, key, value = encode(*change)
            size[name] += len(value)
            while True:
                try:
                    p.produce(topic, value, key)
                    break
                except BufferError:
                    p.poll(0.05)
    p.flush(120)
    return size


def backlog(spark, address: str, targets: dict, work: Path, changes: int, keys: int, registry: str | None,
            phases: bool = False) -> None:
    """The same changes in each format (JSON always; Avro with a registry), then the sink over each; with
    `phases`, then the read+decode phase's steps alone over the same changes (`read_phases`)."""
    encoders = {"json": plain, **({"avro": Avro(registry, server=f"{SERVER}-avro")} if registry else {})}
    started = time.monotonic()
    size = write(producer(address), Changes(keys), changes, encoders)
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
                print(f"  {round_} {fmt:4} {name:6} {changes / seconds:>10,.0f} changes/s  ({seconds:.1f} s, "
                      f"{split(job)})", flush=True)
    for round_ in ("cold", "warm"):
        for name in targets:
            if "avro" in encoders:
                print(f"  {round_} {name}: Avro / JSON = {rates[(round_, 'avro', name)] / rates[(round_, 'json', name)]:.2f}x")
    if phases:
        read_phases(spark, address, work, encoders, registry)


def read_phases(spark, address: str, work: Path, formats, registry: str | None) -> None:
    """The sink's read+decode phase in steps, each alone over the whole backlog of each format, as a batch
    query in the warm JVM: Spark's Kafka source alone, + the sink's decode, + its cache and summary pass (what
    the sink does before planning). Each step runs twice; the second (warm) is printed, with the Spark JVM's
    CPU seconds beside the wall time (the machine is shared: CPU moves less with the load)."""
    jvm = spark.sparkContext._jvm.ProcessHandle.current().pid()

    def cpu() -> float:
        fields = Path(f"/proc/{jvm}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime

    for fmt in formats:
        job = SinkJob(spark, validate(sink_config(address, work, {"delta": {"path": str(work / "phases")}}, fmt,
                                                  registry=registry)))
        kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", address)
                 .option("subscribe", AVRO_TOPIC if fmt == "avro" else TOPIC).option("startingOffsets", "earliest")
                 .load())

        def summarised() -> None:
            cached: list = []
            try:
                job._read(kafka, cached)
            finally:
                for df in cached:
                    df.unpersist()
        steps = {"Kafka source alone": lambda: kafka.select("topic", "partition", "offset", "value")
                 .write.format("noop").mode("overwrite").save(),
                 "+ decode": lambda: job._decoded(kafka)[0].write.format("noop").mode("overwrite").save(),
                 "+ cache and summary pass": summarised}
        for step, run in steps.items():
            for _ in range(2):
                began, used = time.monotonic(), cpu()
                run()
            print(f"  phases {fmt:4} {step:26} {time.monotonic() - began:6.1f} s, JVM CPU {cpu() - used:6.1f} s",
                  flush=True)


def split(job: SinkJob) -> str:
    """Where a run's time went, by the sink's own timings."""
    parts = {k: sum(t[k] for t in job.timings) for k in ("read_decode", "plan", "write")}
    return (f"{len(job.timings)} batch(es): read+decode {parts['read_decode']:.1f} s, schemas+checks "
            f"{parts['plan']:.1f} s, merge+commit {parts['write']:.1f} s; the rest is Spark planning the query and "
            f"its Kafka offsets")


def fresh(target: dict, suffix: str) -> dict:
    """The target with its own tables for this run (a Delta path or a PostgreSQL schema of its own)."""
    if "delta" in target:
        return {"delta": {**target["delta"], "path": f"{target['delta']['path']}-{suffix}"}}
    return {"jdbc": {**target["jdbc"], "schema": f"{target['jdbc']['schema']}_{suffix}"}}


class Feeder(threading.Thread):
    """Writes `rate` changes/s, as `encode` makes them, in steps of 10 ms until stopped. With `probes`,
    one change in each 100 ms is the insert of a new key of the first table (from PROBE up), its write
    time kept in `probes` (key → epoch seconds) and, once the broker has it, its place in `placed`
    (key → partition and offset)."""

    def __init__(self, address: str, events: Changes, rate: int, encode=plain, probes: bool = False) -> None:
        super().__init__(daemon=True)
        self.p, self.events, self.rate, self.encode = producer(address), events, rate, encode
        self.probes: dict[int, float] | None = {} if probes else None
        self.placed: dict[int, tuple[int, int]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        next_at, tick = time.monotonic(), 0
        while not self.halt.is_set():
            for i in range(self.rate // 100):
                placed = None
                if self.probes is not None and tick % 10 == 0 and i == 0:
                    key = PROBE + len(self.probes)
                    change = self.events.next(key=key, table=self.events.tables[0])
                    self.probes[key] = time.time()
                    placed = functools.partial(self._placed, key)
                else:
                    change = self.events.next()
                topic, k, value = self.encode(*change)
                self.p.produce(topic, value, k, on_delivery=placed)
            self.p.poll(0)
            tick += 1
            next_at += 0.01
            time.sleep(max(0.0, next_at - time.monotonic()))
        self.p.flush(60)

    def _placed(self, key: int, error, message) -> None:
        if error is None:
            self.placed[key] = (message.partition(), message.offset())

    def stop(self) -> None:
        self.halt.set()
        self.join()


def batch_durations(progress: list[dict]) -> tuple[list[float], list[int]]:
    """Each batch's duration and changes, from a query's progress, past the first three (warm-up)."""
    batches = [p for p in progress if p["numInputRows"] > 0][3:]
    return [p["durationMs"]["triggerExecution"] / 1000 for p in batches], [p["numInputRows"] for p in batches]


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * 0.99))]  # nearest rank: under 100, the largest


def latency(spark, address: str, targets: dict, work: Path, rate: int, seconds: int, keys: int) -> None:
    for name, target in targets.items():
        feeder = Feeder(address, Changes(keys, seed=7), rate)
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
        feeder.stop()
        progress = query.recentProgress
        query.stop()
        durations, rows = batch_durations(progress)
        if len(durations) < 2:
            print(f"  {name:6} too few batches ({len(durations)}) in {seconds} s")
            continue
        print(f"  {name:6} {rate:,} changes/s: {len(durations)} batches of {statistics.median(rows):,.0f} changes, "
              f"duration p50 {statistics.median(durations):.2f} s, p99 {p99(durations):.2f} s, max {max(durations):.2f} s")


# -- beside what a user would run instead ---------------------------------------------------------------

TABLES = ("orders", "payments", "shipments")
PROBE = 1_000_000_000  # latency probes' and end markers' keys, above every workload key
SPARK_COLUMNS = [("id", "int"), ("customer", "int"), ("amount", "decimal(10,2)"), ("status", "string"),
                 ("created", "timestamp_ntz"), ("note", "string")]  # what the Delta user writes by hand


def topics() -> list[str]:
    return [f"{SERVER}.{DB}.{table}" for table in TABLES]


def mark_ends(address: str, events: Changes, encode, partitions: int) -> int:
    """After a backlog: in each partition of each table's topic, the insert of a new key (from PROBE
    up), so that a sink has caught up once it shows them all. Returns how many there are per table."""
    p = producer(address)
    for table in TABLES:
        for partition in range(partitions):
            topic, key, value = encode(*events.next(key=PROBE + partition, table=table))
            p.produce(topic, value, key, partition=partition)
    p.flush(60)
    return partitions


def pg_count(conn, table: str, where: str = "true") -> int:
    import psycopg
    try:
        return conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


def wait_visible(conn, marks: int, alive, timeout: float = 3600) -> None:
    """Until every table shows its end markers; `alive()` raises if the sink failed."""
    deadline = time.monotonic() + timeout
    while any(pg_count(conn, t, f"id >= {PROBE}") < marks for t in TABLES):
        alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"the end markers were not all visible after {timeout:.0f} s")
        time.sleep(0.2)


def database(postgres, name: str):
    """A new database on the server, and a connection to it: Debezium's tables, one database a run."""
    import psycopg
    postgres.sql(f"CREATE DATABASE {name}")
    return psycopg.connect(postgres.dsn.replace("dbname=warehouse", f"dbname={name}"), autocommit=True)


class Probes(threading.Thread):
    """Polls a PostgreSQL table every 50 ms for the Feeder's probe keys: when each was first visible."""

    def __init__(self, conn, table: str) -> None:
        super().__init__(daemon=True)
        self.conn, self.table, self.seen = conn, table, {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            now = time.time()
            try:
                ids = [r[0] for r in self.conn.execute(f"SELECT id FROM {self.table} WHERE id >= {PROBE}").fetchall()]
            except Exception:  # the sink has not created the table yet
                ids = []
            for key in ids:
                self.seen.setdefault(key, now)
            time.sleep(0.05)

    def stop(self) -> None:
        self.halt.set()
        self.join()


def end_to_end(written: dict[int, float], seen: dict[int, float], warm_up: float) -> tuple[list[float], int]:
    """Write-to-visible seconds of the probes written once the sink showed its first probe plus
    `warm_up` seconds, and how many of those never showed."""
    if not seen:
        return [], len(written)
    start = min(seen.values()) + warm_up
    counted = [k for k, t in written.items() if t >= start]
    return [seen[k] - written[k] for k in counted if k in seen], sum(k not in seen for k in counted)


def pg_latency(name: str, address: str, conn, table: str, rate: int, seconds: int, keys: int, encode, start,
               stop, alive, warm_up: float = 10) -> list[float]:
    """End-to-end latency at `rate` changes/s: `start()` runs a sink reading from the log's end, and
    probes written meanwhile are timed from their write to their row being visible in `table`."""
    feeder = Feeder(address, Changes(keys, seed=7, tables=TABLES), rate, encode, probes=True)
    probes = Probes(conn, table)
    start()
    feeder.start()
    probes.start()
    deadline = time.monotonic() + 600
    while not probes.seen:  # the sink's first batch: its tables are made
        alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: no probe was seen in {table} in 600 s")
        time.sleep(0.2)
    deadline = time.monotonic() + warm_up + seconds
    while time.monotonic() < deadline:
        time.sleep(1)
        alive()
    feeder.stop()
    written = dict(feeder.probes)
    drain = time.monotonic() + 60
    while not set(written) <= set(probes.seen) and time.monotonic() < drain:
        time.sleep(0.2)
    probes.stop()
    stop()
    values, lost = end_to_end(written, probes.seen, warm_up)
    if not values:
        raise SystemExit(f"{name}: no probe was seen in {table}")
    print(f"  {name:22} {rate:,} changes/s: {len(values)} probes, write→visible p50 "
          f"{statistics.median(values):.2f} s, p99 {p99(values):.2f} s, max {max(values):.2f} s"
          + (f"; {lost} not seen within 60 s of the end" if lost else ""), flush=True)
    return values


def versus(spark, address: str, postgres, work: Path, args, registry: str | None) -> dict[str, tuple[float, float]]:
    """Each target beside what a user would run instead, on the same topics (three tables; keys and
    values with Connect's schemas, or in Avro through `registry`): returns row → (binlake, reference)."""
    from delta_foreachbatch import start as foreachbatch
    from jdbc_sink_reference import add, check, connector, remove, start_worker

    events = Changes(args.keys, tables=TABLES)
    encode = Wrapped(TABLES) if registry is None else Avro(registry, tables=TABLES, keys=True)
    started = time.monotonic()
    size = write(producer(address), events, args.changes, {"encoded": encode})["encoded"]
    marks = mark_ends(address, events, encode, args.partitions)
    print(f"backlog: {args.changes:,} changes of {args.keys:,} keys in each of {len(TABLES)} tables written in "
          f"{time.monotonic() - started:.1f} s (keys and values {'with Kafka Connect' if registry is None else 'in Avro'}"
          f"'s schemas, {size / args.changes:,.0f} value bytes per change)", flush=True)
    ours_format = {} if registry is None else {"fmt": "avro", "registry": registry}
    expected = {t: len(events.live[t]) for t in TABLES}
    conn = postgres.connect()
    rows: dict[str, tuple[float, float]] = {}
    best = {"binlake": 0.0, "reference": 0.0}
    if args.target in (None, "jdbc"):
        worker = start_worker(work / "connect", address, avro_registry=registry)
        try:
            for round_ in ("cold", "warm"):
                job = SinkJob(spark, validate({**sink_config(address, work, {"jdbc": {
                    "url": postgres.url, "user": "binlake", "schema": f"bl_{round_}"}}, trigger="available_now",
                    **ours_format), "topics": topics()}))
                began = time.monotonic()
                job.start().awaitTermination()
                ours = args.changes / (time.monotonic() - began)
                print(f"  {round_} binlake into PostgreSQL: {time.monotonic() - began:.1f} s, {split(job)}", flush=True)
                dbz = database(postgres, f"dbz_{round_}")
                began = time.monotonic()
                add(worker, f"dbz-{round_}", connector(topics(), postgres.url.replace("warehouse", f"dbz_{round_}")))
                wait_visible(dbz, marks, lambda: check(worker, f"dbz-{round_}"))
                theirs = args.changes / (time.monotonic() - began)
                remove(worker, f"dbz-{round_}")
                counts = {"binlake": {t: pg_count(conn, f"bl_{round_}.{t}") for t in TABLES},
                          "debezium": {t: pg_count(dbz, t) for t in TABLES}}
                print(f"  {round_} PostgreSQL backlog: binlake {ours:,.0f} changes/s, Debezium's JDBC sink "
                      f"{theirs:,.0f} changes/s; rows per table: expected {expected}, {counts}", flush=True)
                rows["PostgreSQL backlog, changes/s"] = (ours, theirs)
            jobs = []

            def start_ours() -> None:
                jobs.append(SinkJob(spark, validate({**sink_config(
                    address, work, {"jdbc": {"url": postgres.url, "user": "binlake", "schema": "bl_lat"}},
                    starting_offsets="latest", trigger={"processing_time": "500ms"}, **ours_format),
                    "topics": topics()})).start())

            def ours_alive() -> None:
                if jobs and jobs[-1].exception():
                    raise SystemExit(f"the sink stopped: {jobs[-1].exception()}")
            ours = pg_latency("binlake", address, postgres.connect(), "bl_lat.orders", args.pg_rate, args.seconds, args.keys,
                              encode, start_ours, lambda: jobs[-1].stop(), ours_alive)
            theirs = pg_latency(
                "Debezium's JDBC sink", address, database(postgres, "dbz_lat"), "orders", args.pg_rate, args.seconds,
                args.keys, encode, lambda: add(worker, "dbz-lat", connector(topics(), postgres.url.replace("warehouse", "dbz_lat"),
                                                                    starting_offsets="latest")),
                lambda: remove(worker, "dbz-lat"), lambda: check(worker, "dbz-lat"))
            rows[f"PostgreSQL p99 write→visible @{args.pg_rate:,}/s, s"] = (p99(ours), p99(theirs))
        finally:
            worker.stop()
    if args.target in (None, "delta") and registry is None:   # (the foreachBatch job of Delta's docs reads JSON)
        for round_ in ("cold", "warm"):
            job = SinkJob(spark, validate({**sink_config(address, work, {"delta": {
                "path": str(work / f"delta-bl-{round_}"), "optimize_every": 0}}, trigger="available_now"),
                "topics": topics()}))
            began = time.monotonic()
            job.start().awaitTermination()
            ours = args.changes / (time.monotonic() - began)
            print(f"  {round_} binlake into Delta: {time.monotonic() - began:.1f} s, {split(job)}", flush=True)
            paths = {topic: str(work / f"delta-user-{round_}" / topic) for topic in topics()}
            began = time.monotonic()
            foreachbatch(spark, address, paths, SPARK_COLUMNS, str(work / f"ck-user-{round_}"),
                         {"availableNow": True}).awaitTermination()
            theirs = args.changes / (time.monotonic() - began)
            counts = {"binlake": {t: spark.read.format("delta").load(str(work / f"delta-bl-{round_}" / DB / t))
                                  .where("NOT __deleted").count() for t in TABLES},
                      "foreachBatch": {t: spark.read.format("delta").load(paths[f"{SERVER}.{DB}.{t}"]).count()
                                       for t in TABLES}}
            print(f"  {round_} Delta backlog: binlake {ours:,.0f} changes/s, Delta's foreachBatch MERGE "
                  f"{theirs:,.0f} changes/s; rows per table: expected {expected}, {counts}", flush=True)
            rows["Delta backlog, changes/s"] = (ours, theirs)
        durations = {}
        for side in ("binlake", "foreachBatch"):
            feeder = Feeder(address, Changes(args.keys, seed=7, tables=TABLES), args.rate, encode)
            feeder.start()
            if side == "binlake":
                query = SinkJob(spark, validate({**sink_config(address, work, {"delta": {
                    "path": str(work / "delta-bl-lat"), "optimize_every": 0}}, starting_offsets="latest",
                    trigger={"processing_time": "500ms"}), "topics": topics()})).start()
            else:
                query = foreachbatch(spark, address, {t: str(work / "delta-user-lat" / t) for t in topics()},
                                     SPARK_COLUMNS, str(work / "ck-user-lat"), {"processingTime": "500 milliseconds"},
                                     starting_offsets="latest")
            first = time.monotonic() + 600  # the first batch (tables made), then --seconds
            deadline = None
            while deadline is None or time.monotonic() < deadline:
                time.sleep(1)
                if query.exception():
                    raise SystemExit(f"{side} stopped: {query.exception()}")
                if deadline is None and any(p["numInputRows"] for p in query.recentProgress):
                    deadline = time.monotonic() + args.seconds
                elif deadline is None and time.monotonic() > first:
                    raise SystemExit(f"{side}: no batch in 600 s")
            feeder.stop()
            progress = query.recentProgress
            query.stop()  # (Spark may print a StackOverflowError here: its check of the stop's cause, harmless)
            durations[side], batch_rows = batch_durations(progress)
            if not durations[side]:
                raise SystemExit(f"{side}: too few batches in {args.seconds} s; run longer (--seconds)")
            print(f"  {side:22} {args.rate:,} changes/s into Delta: {len(durations[side])} batches of "
                  f"{statistics.median(batch_rows):,.0f} changes, duration p50 {statistics.median(durations[side]):.2f} s, "
                  f"p99 {p99(durations[side]):.2f} s", flush=True)
        rows[f"Delta p99 batch duration @{args.rate:,}/s, s"] = (p99(durations["binlake"]), p99(durations["foreachBatch"]))
    return rows


def print_versus(rows: dict[str, tuple[float, float]]) -> None:
    """The figures side by side; ratio = how many times better binlake is (throughput: ours / theirs,
    latency: theirs / ours)."""
    print(f"\n{'':44} {'binlake':>12} {'reference':>12} {'ratio':>7}")
    for row, (ours, theirs) in rows.items():
        ratio = ours / theirs if "changes/s" in row.split(",")[-1] else theirs / ours
        print(f"{row:44} {ours:>12,.2f} {theirs:>12,.2f} {ratio:>6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--only", choices=["backlog", "latency"])
    parser.add_argument("--target", choices=["delta", "jdbc"])
    parser.add_argument("--formats", help="backlog: json, or json,avro (the default): the backlog in each; "
                                           "--versus: json (the default) or avro, PostgreSQL only")
    parser.add_argument("--versus", action="store_true",
                        help="each target beside what a user would run instead (Debezium's JDBC sink, Delta's "
                             "foreachBatch MERGE), on the same topics; --keys then counts per table")
    parser.add_argument("--pg-rate", type=int, default=1000, help="--versus: changes/s for PostgreSQL's latency")
    parser.add_argument("--phases", action="store_true",
                        help="backlog: then the read+decode phase's steps alone, each format (Kafka source, decode, "
                             "cache and summary)")
    args = parser.parse_args()
    args.formats = args.formats or ("json" if args.versus else "json,avro")
    if args.versus and args.formats not in ("json", "avro"):
        parser.error("--versus takes --formats json or avro: one run per format")
    if args.versus and args.formats == "avro" and args.target != "jdbc":
        parser.error("--versus --formats avro compares PostgreSQL sinks only (Delta's foreachBatch job reads "
                     "JSON): add --target jdbc")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = BrokerProcess(work / "broker").start()
        postgres = start_postgres(work / "pg", tied=True)
        registry = None
        try:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": broker.address})
            for topic, n in (*((t, args.partitions) for t in (topics() if args.versus else [TOPIC, AVRO_TOPIC])),
                             (SERVER, 1)):
                admin.create_topics([NewTopic(topic, n, 1)])[topic].result(30)
            p = producer(broker.address)
            for table in TABLES:
                p.produce(SERVER, schema_event(table), b'{"databaseName":"shop"}')
            p.flush(30)
            spark = builder("binlake-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "4", "spark.driver.extraJavaOptions": "-XX:MaxJavaStackTraceDepth=100000"}).getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; Spark "
                  f"local[2], broker and PostgreSQL on this machine", flush=True)
            registry = RegistryProcess(broker.address, work / "registry.log").start() \
                if "avro" in args.formats.split(",") else None
            if args.versus:
                print_versus(versus(spark, broker.address, postgres, work, args, registry and registry.url))
                spark.stop()
                return
            targets = {"delta": {"delta": {"path": str(work / "delta"), "optimize_every": 0}},
                       "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": "bench"}}}
            if args.target:
                targets = {args.target: targets[args.target]}
            if args.only in (None, "backlog"):
                backlog(spark, broker.address, targets, work, args.changes, args.keys, registry and registry.url,
                        args.phases)
            if args.only in (None, "latency"):
                latency(spark, broker.address, targets, work, args.rate, args.seconds, args.keys)
            spark.stop()
        finally:
            if registry is not None:
                registry.kill()
            postgres.stop()
            broker.kill()


if __name__ == "__main__":
    main()
