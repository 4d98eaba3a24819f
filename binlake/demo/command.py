"""`binlake demo`: start the pipeline's pieces (services.STAGES), show the change events of a snapshot
and of a workload as they arrive (killing one broker of the cluster halfway), compare the source server
(MariaDB, or MySQL with --mysql) with the log and the warehouse, and stop everything again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import click
from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.markup import escape

from sandbox.process import SandboxError

from . import outputs, shop, warehouse
from .events import TableState, normalized, parse
from .landing import Landing
from .services import (DERIVED, PROCESSOR_APP, STAGES, DemoError, Pipeline, Process, interrupts_held, keep_instructions,
                       partitions_of)
from .view import event_line, summary_table

WAIT_S = 40          # for the snapshot, and for the workload's last event
SETTLE_S = 0.25      # after a workload step: stop showing its events once none came for this long


class Watcher:
    """Reads change topics (read_committed) in `fmt` and prints each event."""

    def __init__(self, pipeline: Pipeline, fmt: str) -> None:
        self.pipeline, self.format = pipeline, fmt
        self.tables: dict[str, TableState] = defaultdict(TableState)
        self.schema_changes: set[str] = set()  # the DDL of the schema-change events shown, whitespace collapsed
        self.consumer = AIOKafkaConsumer(bootstrap_servers=pipeline.bootstrap, isolation_level="read_committed",
                                         auto_offset_reset="earliest", enable_auto_commit=False)

    async def start(self, topics: set[str], creator: Process) -> None:
        """Read every partition of `topics` from its start, once `creator` has created them all
        (assigned, not subscribed: without a group aiokafka would assign anew, and read again,
        whenever a subscribed topic appears)."""
        await self.consumer.start()
        self.consumer.assign(await partitions_of(self.pipeline, topics, creator))

    async def read(self, timeout_s: float) -> int:
        """Show what arrives within `timeout_s`; returns how many records."""
        batches = await self.consumer.getmany(timeout_ms=int(timeout_s * 1000))
        for messages in batches.values():
            for msg in messages:
                change = parse(msg.topic, msg.key, msg.value, self.format)
                event_line(self.pipeline.console, change)
                if change.op == "ddl" and change.ddl:
                    self.schema_changes.add(" ".join(change.ddl.split()))
                if change.table is not None:
                    self.tables[change.table].apply(change)
        return sum(map(len, batches.values()))

    async def read_until(self, done, what: str, process: Process) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            self.pipeline.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"{what} did not arrive within {WAIT_S} s; the log of {process.name} ends:\n"
                                f"{process.log_tail()}")
            await self.read(0.2)

    async def settle(self) -> None:
        """Show a step's events under it: read until they stop coming (or a second passed)."""
        deadline = time.monotonic() + 1
        seen = 0
        while time.monotonic() < deadline:
            n = await self.read(SETTLE_S)
            if seen and not n:
                return
            seen += n

    async def drain(self) -> None:
        """Read every partition up to its last committed offset."""
        partitions = self.consumer.assignment()
        ends = await self.consumer.end_offsets(list(partitions))
        deadline = time.monotonic() + WAIT_S
        while any([await self.consumer.position(tp) < ends[tp] for tp in partitions]):
            if time.monotonic() > deadline:
                raise DemoError("the consumer did not reach the end of the change topics")
            await self.read(0.2)

    async def read_while(self, condition, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while condition() and time.monotonic() < deadline:
            self.pipeline.check_alive()
            await self.read(0.2)

    def showed(self, statements: tuple[str, ...]) -> bool:
        """Whether the schema-change event of each of `statements` was shown."""
        return all(statement in self.schema_changes for statement in statements)

    def matches(self, rows: dict[str, set[tuple]]) -> bool:
        """Whether the keys rebuilt from the log are the source's `rows`, table by table."""
        return all(self.tables[table].keys == keys for table, keys in rows.items())

    def has_keys(self, expected: dict[str, set[tuple]]) -> bool:
        return all(keys <= self.tables[table].keys for table, keys in expected.items())


async def show(pipeline: Pipeline) -> bool:
    """Snapshot, then the workload while streaming, then the processors' outputs and the sink's
    batches; returns whether every table downstream matches the source."""
    console, name = pipeline.console, pipeline.source_name
    log_ok, source_tables = await show_change_log(pipeline)
    await show_processors(pipeline, source_tables)
    console.rule("Spark sink: micro-batches merged into Delta Lake and PostgreSQL")
    landed = await asyncio.to_thread(Landing(pipeline, source_tables).wait)
    console.print(landed.table())
    ok = log_ok and landed.ok
    console.print("[green]every change arrived, exactly once: the log, the processors' outputs, Delta and "
                  f"PostgreSQL match {name}[/]" if ok else f"[red]something downstream does not match {name}[/] "
                  "(see above)", soft_wrap=True)
    return ok


async def show_change_log(pipeline: Pipeline) -> tuple[bool, dict[str, tuple]]:
    """The connector's events, snapshot then streaming (a broker killed halfway); returns whether the
    keys rebuilt from the log are the source's, and the source's tables at the end (warehouse.mysql_table)."""
    console, server = pipeline.console, pipeline.source
    seeded = await asyncio.to_thread(shop.primary_keys, server)
    watcher, customers = Watcher(pipeline, pipeline.format), ProcessorCustomers(pipeline)
    await customers.consumer.start()
    try:
        await watcher.start(pipeline.topics(seeded), pipeline.connector)
        console.rule("snapshot: the rows that were there before the connector started")
        await watcher.read_until(lambda: watcher.has_keys(seeded), "the snapshot's events", pipeline.connector)
        console.rule("streaming: changes as they are committed")
        for number, step in enumerate(shop.WORKLOAD):
            if number == len(shop.WORKLOAD) // 2 and len(pipeline.brokers) > 1:
                kill_a_broker(pipeline)
            if step.inserts_orders:
                now = await asyncio.to_thread(shop.primary_keys, server)
                await customers.wait_for(now[f"{shop.DATABASE}.customers"])
            console.print(f"[bold]▶ {step.title}[/]")
            for statement in step.statements:
                console.print(f"  [dim]{escape(' '.join(statement.split()))}[/]", soft_wrap=True, highlight=False)
            await asyncio.to_thread(shop.run_step, server, step)
            await watcher.settle()
        table, key = shop.LAST_CHANGE
        last = f"{shop.DATABASE}.{table}"
        await watcher.read_until(lambda: normalized(key) in watcher.tables[last].keys, "the workload's last event",
                                 pipeline.connector)
        await watcher.drain()
        now = await asyncio.to_thread(shop.primary_keys, server)
        # After a broker's death a transaction shows up on a partition once its marker reaches the new
        # leader: the rows may all match while a schema change's partition still holds its event back.
        await watcher.read_while(lambda: not (watcher.matches(now) and watcher.showed(shop.SCHEMA_CHANGES)),
                                 WAIT_S)
    finally:
        await watcher.consumer.stop()
        await customers.consumer.stop()
    console.print(summary_table(watcher.tables, now, server.name))
    ok = watcher.matches(now) and watcher.showed(shop.SCHEMA_CHANGES)
    console.print(f"[green]every change arrived: the log matches {server.name}[/]" if ok
                  else f"[red]the log does not match {server.name}[/] (see the table above: its rows, or a schema "
                  "change)")
    source_tables = await asyncio.to_thread(
        lambda: {t: warehouse.mysql_table(server, shop.DATABASE, t, shop.JSON_COLUMNS) for t in shop.TABLES})
    return ok, source_tables


async def show_processors(pipeline: Pipeline, source_tables: dict[str, tuple]) -> None:
    """The processors' derived change events as they arrive, until they hold what the source's tables imply."""
    pipeline.console.rule(f"processors: derived change events ({len(pipeline.processors)} faust workers, exactly once)")
    want = outputs.expected(source_tables["orders"][2], source_tables["customers"][2])
    topics = {f"{DERIVED}.{table}" for table in want}
    watcher = Watcher(pipeline, "canal")

    def done() -> bool:
        rebuilt = {name.partition(".")[2]: state.rows for name, state in watcher.tables.items()}
        return (watcher.tables[f"derived.{outputs.ENRICHED}"].keys == _text_keys(want[outputs.ENRICHED])
                and watcher.tables[f"derived.{outputs.HIGH_VALUE}"].keys == _text_keys(want[outputs.HIGH_VALUE])
                and outputs.revenue_per_product(rebuilt.get(outputs.REVENUE, {})) == want[outputs.REVENUE])
    try:
        await watcher.start(topics, pipeline.processors[0])
        await watcher.read_until(done, "the processors' outputs", pipeline.processors[0])
    finally:
        await watcher.consumer.stop()


def _text_keys(rows: warehouse.Rows) -> set[tuple]:
    return {tuple(str(v) for v in key) for key in rows}


class ProcessorCustomers:
    """The customers the processors know: their customers table (examples/shop_processors.py
    materializes the customers' changes), read from its changelog. A stream-table join gives an order
    the name its customer has when the order is processed, so orders wait until it is complete."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.rows: dict[str, bool] = {}  # customer id (JSON) → present
        self.consumer = AIOKafkaConsumer(bootstrap_servers=pipeline.bootstrap, isolation_level="read_committed",
                                         auto_offset_reset="earliest", enable_auto_commit=False)

    async def wait_for(self, ids: set[tuple]) -> None:
        """Until the table holds every customer of `ids` (primary keys as text)."""
        if not self.consumer.assignment():
            self.consumer.assign(await partitions_of(self.pipeline, {f"{PROCESSOR_APP}-customers-changelog"},
                                                     self.pipeline.processors[0]))
        deadline = time.monotonic() + WAIT_S
        while not {str(i[0]) for i in ids} <= {k for k, present in self.rows.items() if present}:
            self.pipeline.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"the processors did not learn every customer within {WAIT_S} s; the log of "
                                f"{self.pipeline.processors[0].name} ends:\n{self.pipeline.processors[0].log_tail()}")
            for messages in (await self.consumer.getmany(timeout_ms=200)).values():
                for msg in messages:
                    self.rows[msg.key.decode()] = msg.value is not None


def kill_a_broker(pipeline: Pipeline) -> None:
    """SIGKILL one broker mid-run: its partitions get new leaders among the others once its ZooKeeper
    session ends, and the connector and the reader carry on with nothing lost or repeated."""
    victim = pipeline.brokers[1]
    victim.kill()
    pipeline.console.print(f"[bold yellow]✖ killed {victim.name} (SIGKILL)[/]: the controller moves its leaderships "
                           f"to the other brokers, which hold every acknowledged change; the pipeline carries on",
                           soft_wrap=True, highlight=False)


@click.command("demo")
@click.option("--format", "fmt", type=click.Choice(["debezium", "canal"]), default="debezium", show_default=True,
              help="the change events' format")
@click.option("--keep", is_flag=True,
              help="once the run matched, leave every piece running and print how to reach it, until Ctrl-C")
@click.option("--single-broker", is_flag=True,
              help="one broker alone instead of ZooKeeper and a three-broker cluster (no broker is killed)")
@click.option("--mariadb", "source_kind", flag_value="mariadb", default=True,
              help="the source is MariaDB (Debian's mariadb-server)  [default]")
@click.option("--mysql", "source_kind", flag_value="mysql",
              help="the source is Oracle MySQL at its defaults (minimal row metadata, caching_sha2_password) with "
                   "GTIDs on, from `make setup`'s Debian sid root")
def demo_command(fmt: str, keep: bool, single_broker: bool, source_kind: str) -> None:
    """Run the whole pipeline on this machine, no Docker needed.

    MariaDB (or Oracle MySQL) → the mysql connector → the brokers → stream processors and the Spark
    sink → Delta Lake and PostgreSQL; it ends with each source table beside its copies."""
    console = Console()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # (its retries while a broker is down: the demo says it)
    signal.signal(signal.SIGTERM, signal.default_int_handler)     # SIGTERM cleans up like Ctrl-C
    with contextlib.ExitStack() as stack:                          # stops what the stages started, in reverse
        with interrupts_held():
            work_dir = Path(tempfile.mkdtemp(prefix="binlake-demo-"))
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        pipeline = Pipeline(work_dir, fmt, console, single_broker, source_kind)
        ok = run(pipeline, stack)
        if keep and ok:
            console.print(keep_instructions(pipeline), highlight=False, soft_wrap=True)
            wait_for_interrupt()
        signal.signal(signal.SIGINT, signal.SIG_IGN)              # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        console.print(f"stopping every piece; removing {work_dir}", soft_wrap=True)
    sys.exit(0 if ok else 1)


def wait_for_interrupt() -> None:
    """Until Ctrl-C or SIGTERM."""
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            signal.pause()


def run(pipeline: Pipeline, stack: contextlib.ExitStack) -> bool:
    """Start the stages and show the events; False (with the reason printed) on failure or Ctrl-C."""
    console = pipeline.console
    brokers = "a broker" if pipeline.single_broker else "a three-broker cluster"
    console.print(f"[bold]binlake demo[/]: {pipeline.source_name} → mysql connector → {brokers} → faust processors "
                  f"and the Spark sink → Delta Lake and PostgreSQL (format {pipeline.format}); files in "
                  f"{pipeline.work_dir}", soft_wrap=True)
    try:
        for stage in STAGES:
            stage(pipeline, stack)
        ok = asyncio.run(show(pipeline))
    except (DemoError, SandboxError) as exc:
        console.print(f"[red]demo failed:[/] {exc}", highlight=False)
        ok = False
    except (KeyboardInterrupt, asyncio.CancelledError):  # (a Ctrl-C as asyncio.run starts surfaces as the latter)
        console.print("interrupted")
        return False
    if not ok:
        console.print(f"the logs of every piece are kept in {keep_logs(pipeline.work_dir)}", soft_wrap=True)
    return ok


def keep_logs(work_dir: Path) -> Path:
    """Copies of the *.log files under `work_dir` (which goes), in a directory of their own."""
    kept = Path(tempfile.mkdtemp(prefix="binlake-demo-logs-"))
    for log in work_dir.rglob("*.log"):
        target = kept / log.relative_to(work_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, target)
    return kept
