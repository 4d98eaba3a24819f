"""The pieces of the demo pipeline, each started the way a user would start it by hand.

`STAGES` runs in order; each stage starts one piece, records what later stages and the user need in
`Pipeline`, and registers how to stop it on the ExitStack (so stopping runs in reverse order, on
success, on error and on Ctrl-C alike). Every child dies with the demo, even when the demo is
SIGKILLed (common.lifetime).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console

from common.lifetime import die_with_parent
from sandbox import postgres as pgsandbox
from sandbox import sql as sqlsandbox
from sandbox import zookeeper as zksandbox
from sandbox.process import free_port

from . import outputs
from .shop import DATABASE, HIGH_VALUE_TOTAL, SCHEMA, SEED

BINLAKE = [sys.executable, "-m", "binlake.cli"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # (the processors' app: a source checkout's)
STOP_TIMEOUT_S = 20
BROKER_START_S = 30
TOPICS_WAIT_S = 40
CLUSTER_SIZE = 3
# A killed broker's partitions get new leaders once its ZooKeeper session ends: keep that short here.
# Topics a client creates by asking for them (faust's outputs) get three replicas too.
CLUSTER_OVERRIDES = ["--override", "zookeeper.session.timeout.ms=4000", "--override", "default.replication.factor=3"]
PROCESSOR_WORKERS = 2
PROCESSOR_APP = "shop-processors"  # examples/shop_processors.py: its faust app id and consumer group
DERIVED = "derived.shop"           # the processors' output topics: derived.shop.<table>
SINK_TRIGGER = "1s"
BINLOG_SETTINGS = ("binlog_format", "binlog_row_image", "binlog_row_metadata", "gtid_mode")  # (shown at the start)


class DemoError(RuntimeError):
    """A piece of the pipeline failed to start or died; the message carries its log."""


@dataclass
class Process:
    """A child process in its own session (a Ctrl-C reaches only the demo, which stops it in order),
    with its output in a log file."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None  # added to the demo's own environment
    cwd: Path | None = None
    proc: subprocess.Popen | None = None
    killed: bool = False  # on purpose, by the demo: not a failure

    def start(self) -> "Process":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=partial(die_with_parent, os.getpid()),
                                         cwd=self.cwd, env={**os.environ, **self.env} if self.env else None)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None and not self.killed:
            raise DemoError(f"{self.name} exited with {self.proc.returncode}; its log "
                            f"({self.log_path}) ends:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: no clean shutdown at all."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL if that takes longer than STOP_TIMEOUT_S."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def interrupts_held():
    """Hold SIGINT/SIGTERM until the block ends: what the block starts gets registered for stopping
    before an interrupt unwinds the stack (else it could be started and never stopped)."""
    pending: list[int] = []
    held = {sig: signal.signal(sig, lambda signum, _frame: pending.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


@dataclass
class Pipeline:
    """What the stages started: addresses, processes, files. Filled in stage by stage."""

    work_dir: Path
    format: str
    console: Console
    single_broker: bool = False
    source_kind: str = "mariadb"         # the source server: "mariadb" or "mysql" (sandbox.sql)
    source: sqlsandbox.SqlServer | None = None
    postgres: pgsandbox.PostgreSQL | None = None
    zookeeper: zksandbox.ZooKeeper | None = None
    bootstrap: str = ""
    brokers: list[Process] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    connector: Process | None = None
    processors: list[Process] = field(default_factory=list)
    sink: Process | None = None
    metrics: dict[str, str] = field(default_factory=dict)  # piece → its Prometheus endpoint's URL

    @property
    def source_name(self) -> str:
        """MariaDB or MySQL, for what the demo prints."""
        return sqlsandbox.NAMES[self.source_kind]

    @property
    def connector_name(self) -> str:
        return DATABASE

    def topics(self, tables: Iterable[str]) -> set[str]:
        """The connector's topics for `tables` ("shop.orders"): one per table, and in Debezium format the
        schema-change topic (the connector's name)."""
        return {f"{self.connector_name}.{table}" for table in tables} | (
            {self.connector_name} if self.format == "debezium" else set())

    def metrics_at(self, name: str) -> str:
        """A free loopback HOST:PORT for `name`'s Prometheus endpoint (listed by --keep)."""
        address = f"127.0.0.1:{free_port()}"
        self.metrics[name] = f"http://{address}/metrics"
        return address

    def say(self, text: str) -> None:
        """One line of progress, never wrapped (paths stay copyable)."""
        self.console.print(text, soft_wrap=True, highlight=False)

    @property
    def warehouse(self) -> Path:
        """Where the sink's Delta tables land: <warehouse>/<db>/<table>."""
        return self.work_dir / "warehouse"

    def pids(self) -> list[int]:
        """Of every process still running."""
        return [p.pid for p in self.processes if p.proc.poll() is None] + [
            s.proc.pid for s in (self.source, self.postgres, self.zookeeper) if s is not None and s.proc.poll() is None]

    def check_alive(self) -> None:
        for p in self.processes:
            p.check_alive()

    def launch(self, process: Process, stack: contextlib.ExitStack) -> Process:
        with interrupts_held():
            process.start()
            stack.callback(process.stop)
            self.processes.append(process)
        return process


def start_source(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """The throwaway MariaDB or MySQL (sandbox's settings: MySQL at its defaults, plus GTIDs)."""
    base = pipeline.work_dir / pipeline.source_kind
    base.mkdir()
    with interrupts_held():         # a Ctrl-C now takes effect once the server is up (2-6 s)
        server = sqlsandbox.start_server(pipeline.source_kind, base, tied=True)
        stack.callback(server.stop)
    pipeline.source = server
    pipeline.say(f"[bold]{server.name:<9}[/] 127.0.0.1:{server.port}  ({binlog_settings(server)}; "
                 f"data in {server.data_dir})")


def binlog_settings(server: sqlsandbox.SqlServer) -> str:
    """The server's own word on the settings the connector depends on, e.g. "binlog_row_metadata=MINIMAL"
    (MariaDB has no gtid_mode: its GTIDs are always on)."""
    names = ", ".join(f"'{name}'" for name in BINLOG_SETTINGS)
    values = dict(server.sql(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"))
    return " ".join(f"{name}={values[name]}" for name in BINLOG_SETTINGS if name in values)


def start_brokers(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """ZooKeeper and three brokers (replication factor 3 for every topic), or one broker alone."""
    if pipeline.single_broker:
        address = _start_broker(pipeline, stack, "broker", [])
        pipeline.bootstrap = address
        pipeline.say(f"[bold]broker[/]    {address}  (binlake broker, data in {pipeline.work_dir / 'broker'})")
        return
    with interrupts_held():
        server = zksandbox.start_zookeeper(pipeline.work_dir / "zookeeper", tied=True)
        stack.callback(server.stop)
    pipeline.zookeeper = server
    pipeline.say(f"[bold]ZooKeeper[/] {server.connect_string}  (the cluster's metadata and its controller election)")
    addresses = [_launch_broker(pipeline, stack, f"broker-{broker_id}", [
        "--broker-id", str(broker_id), "--zookeeper", server.connect_string, *CLUSTER_OVERRIDES])
        for broker_id in range(CLUSTER_SIZE)]  # (all at once: they start side by side)
    for broker_id, address in enumerate(addresses):
        _wait_ready(pipeline.brokers[broker_id], address)
        pipeline.say(f"[bold]broker {broker_id}[/]  {address}  (binlake broker in a cluster, data in "
                     f"{pipeline.work_dir / f'broker-{broker_id}'})")
    pipeline.bootstrap = ",".join(addresses)


def _start_broker(pipeline: Pipeline, stack: contextlib.ExitStack, name: str, extra: list[str]) -> str:
    address = _launch_broker(pipeline, stack, name, extra)
    _wait_ready(pipeline.brokers[-1], address)
    return address


def _launch_broker(pipeline: Pipeline, stack: contextlib.ExitStack, name: str, extra: list[str]) -> str:
    address = f"127.0.0.1:{free_port()}"
    pipeline.brokers.append(pipeline.launch(Process(
        name, [*BINLAKE, "broker", "--data-dir", str(pipeline.work_dir / name), "--listen", address, *extra,
               "--override", f"prometheus.listener={pipeline.metrics_at(name)}"],
        pipeline.work_dir / f"{name}.log"), stack))
    return address


def _wait_ready(broker: Process, address: str) -> None:
    """Until the broker says it is ready (in a cluster: it has joined)."""
    deadline = time.monotonic() + BROKER_START_S
    while "ready on" not in broker.log_tail(5):
        broker.check_alive()
        if time.monotonic() > deadline:
            raise DemoError(f"{broker.name} was not ready on {address} within {BROKER_START_S} s:\n"
                            f"{broker.log_tail()}")
        time.sleep(0.05)


def connector_config(pipeline: Pipeline) -> dict:
    """The `mysql` connector's YAML for the sandbox server (examples/shop.yaml, with this run's addresses)."""
    server = pipeline.source
    return {
        "name": pipeline.connector_name,
        "connector": "mysql",
        "bootstrap_servers": pipeline.bootstrap,
        "database": {"host": "127.0.0.1", "port": server.port, "user": server.user, "password": server.password,
                     "server_id": 5401},
        "tables": {"include": [rf"{DATABASE}\..*"]},
        "snapshot": "initial",
        "format": pipeline.format,
    }


def start_connector(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    path = pipeline.work_dir / "shop.yaml"
    path.write_text(yaml.safe_dump(connector_config(pipeline), sort_keys=False))
    pipeline.connector = pipeline.launch(
        Process("connector", [*BINLAKE, "connect", "run", str(path), "--prometheus-listener",
                              pipeline.metrics_at("connector")], pipeline.work_dir / "connect.log"), stack)
    pipeline.say(f"[bold]connector[/] binlake connect run {path}  (mysql → {pipeline.bootstrap}, "
                 f"format {pipeline.format}, exactly once)")


def create_shop(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """The shop database with its first rows, before the connector starts: its snapshot reads them."""
    pipeline.source.sql(f"CREATE DATABASE {DATABASE}")
    pipeline.source.sql(*SCHEMA, *SEED, db=DATABASE)
    pipeline.say(f"[bold]database[/]  {DATABASE}: tables customers, products, orders and their first rows")


def start_postgres(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    with interrupts_held():
        server = pgsandbox.start_postgres(pipeline.work_dir / "postgres", tied=True)
        stack.callback(server.stop)
    pipeline.postgres = server
    pipeline.say(f"[bold]PostgreSQL[/] 127.0.0.1:{server.port}  (the warehouse database {pgsandbox.DATABASE}; "
                 f"data in {server.data_dir})")


def sink_configs(pipeline: Pipeline) -> dict[str, dict]:
    """`binlake sink run` configs by file name: the connector's tables into Delta and into PostgreSQL,
    the processors' derived tables (Canal messages) into Delta. Topic patterns: the sink starts before
    the topics exist and reads each from its start once it appears. As in docs/quickstart.md, the
    schema topic is the default one the pattern names (the connector's name)."""
    def config(name: str, pattern: str, fmt: str, target: dict) -> dict:
        return {"bootstrap_servers": pipeline.bootstrap, "topic_pattern": pattern, "format": fmt,
                "checkpoint": str(pipeline.work_dir / "checkpoints" / name),
                "trigger": {"processing_time": SINK_TRIGGER}, "target": target}
    source = rf"{pipeline.connector_name}\.{DATABASE}\..*"
    delta = {"delta": {"path": str(pipeline.warehouse)}}
    return {
        "shop-delta": config("shop-delta", source, pipeline.format, delta),
        "shop-postgres": config("shop-postgres", source, pipeline.format, {"jdbc": {
            "url": pipeline.postgres.url, "user": pgsandbox.USER, "schema": DATABASE}}),
        "derived-delta": config("derived-delta", DERIVED.replace(".", r"\.") + r"\..*", "canal", delta),
    }


def start_sink(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """One Spark application (local[2]) running three streaming queries: it starts early, so the JVM
    is up by the time the first change events are on the log."""
    paths = []
    for name, config in sink_configs(pipeline).items():
        paths.append(pipeline.work_dir / f"{name}.yaml")
        paths[-1].write_text(yaml.safe_dump(config, sort_keys=False))
    pipeline.sink = pipeline.launch(Process("sink", [*BINLAKE, "sink", "run", *map(str, paths), "--master", "local[2]",
                                                     "--prometheus-listener", pipeline.metrics_at("sink"),
                                                     "--small-batches"],  # (its changes come a few at a time)
                                            pipeline.work_dir / "sink.log", cwd=pipeline.work_dir), stack)
    pipeline.say(f"[bold]Spark sink[/] binlake sink run {' '.join(p.name for p in paths)}  (Spark's Kafka source → "
                 f"MERGE into Delta tables in {pipeline.warehouse} and PostgreSQL schema {DATABASE}, exactly once)")


async def partitions_of(pipeline: Pipeline, topics: set[str], creator: Process) -> list[TopicPartition]:
    """Every partition of `topics`, once `creator` has created them all and each has a leader (in a
    cluster a new topic reaches the brokers one by one)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=pipeline.bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + TOPICS_WAIT_S
        while True:
            if topics <= set(await admin.list_topics()):
                described = await admin.describe_topics(sorted(topics))
                if not any(d["error_code"] or not d["partitions"] for d in described):
                    return [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
            pipeline.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"{creator.name} did not create {sorted(topics)} within {TOPICS_WAIT_S} s; its log "
                                f"({creator.log_path}) ends:\n{creator.log_tail()}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def create_topics(pipeline: Pipeline, names: list[str]) -> None:
    """Topics with a replica on every broker, made now: one a client creates by sending to it after a
    broker died could not get its replicas (Kafka refuses such a topic too)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=pipeline.bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        await admin.create_topics([NewTopic(name, 1, len(pipeline.brokers)) for name in names if name not in existing])
    finally:
        await admin.close()


def start_processors(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """Two faust workers of examples/shop_processors.py, exactly once, sharing its partitions; once
    the connector has created the topics they read (a faust app subscribes to topics that exist),
    and with their output topics made (as an operator makes them: before anything can fail)."""
    asyncio.run(partitions_of(pipeline, {f"{pipeline.connector_name}.{DATABASE}.{t}" for t in ("customers", "orders")},
                              pipeline.connector))
    asyncio.run(create_topics(pipeline, [f"{DERIVED}.{table}" for table in outputs.DERIVED_TABLES]))
    env = {"BOOTSTRAP_SERVERS": pipeline.bootstrap, "SHOP_TOPIC_PREFIX": f"{pipeline.connector_name}.{DATABASE}",
           "SHOP_FORMAT": pipeline.format, "DERIVED_TOPIC_PREFIX": DERIVED, "PROCESSOR_APP_ID": PROCESSOR_APP,
           "HIGH_VALUE_TOTAL": str(HIGH_VALUE_TOTAL), "PROCESSOR_REPLICATION_FACTOR": str(len(pipeline.brokers)),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))}
    for n in range(PROCESSOR_WORKERS):
        cwd = pipeline.work_dir / f"processor-{n}"   # (faust keeps its data directory in the working directory)
        cwd.mkdir()
        pipeline.processors.append(pipeline.launch(Process(
            f"processor-{n}", [*BINLAKE, "streams", "worker", "shop_processors", "--without-web",
                               "--prometheus-listener", pipeline.metrics_at(f"processor-{n}")],
            pipeline.work_dir / f"processor-{n}.log", env, cwd), stack))
    pipeline.say(f"[bold]processors[/] {PROCESSOR_WORKERS} × binlake streams worker shop_processors  (faust, exactly "
                 f"once: orders enriched with their customer, high-value orders, revenue per minute → {DERIVED}.*)")


# In order; each stage's stop runs in reverse. The sink starts before the connector: Spark is the slowest to start.
STAGES = (start_source, create_shop, start_postgres, start_brokers, start_sink, start_connector, start_processors)


def keep_instructions(pipeline: Pipeline) -> str:
    """How to reach what `--keep` leaves running."""
    server, b, pg = pipeline.source, pipeline.bootstrap, pipeline.postgres
    running = {p.name for p in pipeline.processes if p.proc.poll() is None}  # (not the broker the demo killed)
    topic = f"{pipeline.connector_name}.{DATABASE}.orders"
    delta = ("--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension "
             "--conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog")
    return "\n".join([
        "Left running (Ctrl-C stops every piece and removes the files):",
        f"  SQL      {server.kind} -h 127.0.0.1 -P {server.port} -u root {DATABASE}",  # (Debian's client, both names)
        f"  events   kcat -b {b} -C -t {topic} -o beginning -f '%k %s\\n'",
        f"           binlake consume --bootstrap-server {b} --topic {topic} --from-beginning "
        "--property print.key=true",
        f"  derived  binlake consume --bootstrap-server {b} --topic {DERIVED}.orders_enriched --from-beginning",
        f"  topics   binlake topics list --bootstrap-server {b}",
        f"  groups   binlake groups describe --bootstrap-server {b} --group {PROCESSOR_APP}",
        *([f"  cluster  binlake cluster --bootstrap-server {b}    (ZooKeeper: {pipeline.zookeeper.connect_string})"]
          if pipeline.zookeeper else []),
        f"  Delta    pyspark --jars \"$(python -m spark_sink.session)\" {delta}",
        f"           >>> spark.read.format('delta').load('{pipeline.warehouse}/{DATABASE}/orders').show()",
        f"  Postgres psql -h 127.0.0.1 -p {pg.port} -U {pgsandbox.USER} {pgsandbox.DATABASE} "
        f"-c 'SELECT * FROM {DATABASE}.orders'",
        *(f"  {'metrics' if i == 0 else '':8} {url}  ({name})" for i, (name, url) in enumerate(
            (name, url) for name, url in pipeline.metrics.items() if name in running)),
        f"  logs     {pipeline.work_dir}/*.log",
    ])
