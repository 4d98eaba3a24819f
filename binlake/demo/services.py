"""The pieces of the demo pipeline, each started the way a user would start it by hand.

`STAGES` runs in order; each stage starts one piece, records what later stages and the user need in
`Pipeline`, and registers how to stop it on the ExitStack (so stopping runs in reverse order, on
success, on error and on Ctrl-C alike; `--keep` detaches the stack instead). The stream processor
(streams/) and the Spark sink (spark_sink/) become further stages here.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from binlake import sandbox, zksandbox

from .shop import DATABASE, SCHEMA, SEED

BINLAKE = [sys.executable, "-m", "binlake.cli"]
STOP_TIMEOUT_S = 20
BROKER_START_S = 30
CLUSTER_SIZE = 3
# A killed broker's partitions get new leaders once its ZooKeeper session ends: keep that short here.
CLUSTER_OVERRIDES = ["--override", "zookeeper.session.timeout.ms=4000"]


class DemoError(RuntimeError):
    """A piece of the pipeline failed to start or died; the message carries its log."""


@dataclass
class Process:
    """A child process in its own session (a Ctrl-C reaches only the demo, which stops it in order),
    with its output in a log file."""

    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    killed: bool = False  # on purpose, by the demo: not a failure

    def start(self) -> "Process":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
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
    mariadb: sandbox.MariaDB | None = None
    zookeeper: zksandbox.ZooKeeper | None = None
    bootstrap: str = ""
    brokers: list[Process] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    connector: Process | None = None

    @property
    def connector_name(self) -> str:
        return DATABASE

    def topics(self, tables: Iterable[str]) -> set[str]:
        """The connector's topics for `tables` ("shop.orders"): one per table, and in Debezium format the
        schema-change topic (the connector's name)."""
        return {f"{self.connector_name}.{table}" for table in tables} | (
            {self.connector_name} if self.format == "debezium" else set())

    def say(self, text: str) -> None:
        """One line of progress, never wrapped (paths stay copyable)."""
        self.console.print(text, soft_wrap=True, highlight=False)

    def pids(self) -> list[int]:
        """Of every process still running."""
        return [p.pid for p in self.processes if p.proc.poll() is None] + [
            s.proc.pid for s in (self.mariadb, self.zookeeper) if s is not None and s.proc.poll() is None]

    def check_alive(self) -> None:
        for p in self.processes:
            p.check_alive()

    def launch(self, process: Process, stack: contextlib.ExitStack) -> Process:
        with interrupts_held():
            process.start()
            stack.callback(process.stop)
            self.processes.append(process)
        return process


def start_mariadb(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    base = pipeline.work_dir / "mariadb"
    base.mkdir()
    with interrupts_held():         # a Ctrl-C now takes effect once the server is up (about 2 s)
        server = sandbox.start_mariadb(base)
        stack.callback(server.stop)
    pipeline.mariadb = server
    pipeline.say(f"[bold]MariaDB[/]   127.0.0.1:{server.port}  (binlog ROW, full row images and metadata; "
                 f"data in {server.data_dir})")


def start_brokers(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """ZooKeeper and three brokers (replication factor 3 for every topic), or one broker alone."""
    if pipeline.single_broker:
        address = _start_broker(pipeline, stack, "broker", [])
        pipeline.bootstrap = address
        pipeline.say(f"[bold]broker[/]    {address}  (binlake broker, data in {pipeline.work_dir / 'broker'})")
        return
    with interrupts_held():
        server = zksandbox.start_zookeeper(pipeline.work_dir / "zookeeper")
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
    address = f"127.0.0.1:{sandbox.free_port()}"
    pipeline.brokers.append(pipeline.launch(Process(
        name, [*BINLAKE, "broker", "--data-dir", str(pipeline.work_dir / name), "--listen", address, *extra],
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
    server = pipeline.mariadb
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
        Process("connector", [*BINLAKE, "connect", "run", str(path)], pipeline.work_dir / "connect.log"), stack)
    pipeline.say(f"[bold]connector[/] binlake connect run {path}  (mysql → {pipeline.bootstrap}, "
                 f"format {pipeline.format}, exactly once)")


def create_shop(pipeline: Pipeline, stack: contextlib.ExitStack) -> None:
    """The shop database with its first rows, before the connector starts: its snapshot reads them."""
    pipeline.mariadb.sql(f"CREATE DATABASE {DATABASE}")
    pipeline.mariadb.sql(*SCHEMA, *SEED, db=DATABASE)
    pipeline.say(f"[bold]database[/]  {DATABASE}: tables customers, products, orders and their first rows")


# In order; each stage's stop runs in reverse. Next: the stream processor (streams/), the Spark sink.
STAGES = (start_mariadb, create_shop, start_brokers, start_connector)


def keep_instructions(pipeline: Pipeline) -> str:
    """How to reach what `--keep` left running, and how to stop it."""
    server, b = pipeline.mariadb, pipeline.bootstrap
    topic = f"{pipeline.connector_name}.{DATABASE}.orders"
    pids = " ".join(map(str, pipeline.pids()))
    return "\n".join([
        "Left running:",
        f"  SQL      mariadb -h 127.0.0.1 -P {server.port} -u root {DATABASE}",
        f"  events   kcat -b {b} -C -t {topic} -o beginning -f '%k %s\\n'",
        f"           binlake consume --bootstrap-server {b} --topic {topic} --from-beginning "
        "--property print.key=true",
        f"  topics   binlake topics list --bootstrap-server {b}",
        *([f"  cluster  binlake cluster --bootstrap-server {b}    (ZooKeeper: {pipeline.zookeeper.connect_string})"]
          if pipeline.zookeeper else []),
        f"  logs     {pipeline.work_dir}/*.log",
        f"  stop     kill {pids}; sleep 3; rm -rf {pipeline.work_dir}",
    ])
