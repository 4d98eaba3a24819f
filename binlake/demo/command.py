"""`binlake demo`: start the pipeline's pieces (services.STAGES), show the change events of a snapshot
and of a workload as they arrive, compare MySQL with the log, and stop everything again."""

from __future__ import annotations

import asyncio
import contextlib
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

from binlake.sandbox import SandboxError

from . import shop
from .events import TableState, normalized, parse
from .services import STAGES, DemoError, Pipeline, interrupts_held, keep_instructions
from .view import event_line, summary_table

WAIT_S = 40          # for the snapshot, and for the workload's last event
SETTLE_S = 0.25      # after a workload step: stop showing its events once none came for this long


class Watcher:
    """Reads every change topic of the connector (read_committed) and prints each event."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.tables: dict[str, TableState] = defaultdict(TableState)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=pipeline.bootstrap, isolation_level="read_committed",
                                         auto_offset_reset="earliest", enable_auto_commit=False)

    async def start(self, topics: set[str]) -> None:
        """Read `topics` from their start, once the connector has created them all: without a group,
        aiokafka assigns partitions anew whenever a subscribed topic appears, and re-reads the others."""
        await self.consumer.start()
        deadline = time.monotonic() + WAIT_S
        while not topics <= await self.consumer.topics():
            self.pipeline.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"the connector did not create {sorted(topics)} within {WAIT_S} s; its log ends:\n"
                                f"{self.pipeline.connector.log_tail()}")
            await asyncio.sleep(0.1)
        self.consumer.subscribe(sorted(topics))

    async def read(self, timeout_s: float) -> int:
        """Show what arrives within `timeout_s`; returns how many records."""
        batches = await self.consumer.getmany(timeout_ms=int(timeout_s * 1000))
        for messages in batches.values():
            for msg in messages:
                change = parse(msg.topic, msg.key, msg.value, self.pipeline.format)
                event_line(self.pipeline.console, change)
                if change.table is not None:
                    self.tables[change.table].apply(change)
        return sum(map(len, batches.values()))

    async def read_until(self, done, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            self.pipeline.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"{what} did not arrive within {WAIT_S} s; the connector's log ends:\n"
                                f"{self.pipeline.connector.log_tail()}")
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

    def has_keys(self, expected: dict[str, set[tuple]]) -> bool:
        return all(keys <= self.tables[table].keys for table, keys in expected.items())


async def show(pipeline: Pipeline) -> bool:
    """Snapshot, then the workload while streaming; returns whether the log matches MySQL."""
    console, server = pipeline.console, pipeline.mariadb
    seeded = await asyncio.to_thread(shop.primary_keys, server)
    watcher = Watcher(pipeline)
    try:
        await watcher.start(pipeline.topics(seeded))
        console.rule("snapshot: the rows that were there before the connector started")
        await watcher.read_until(lambda: watcher.has_keys(seeded), "the snapshot's events")
        console.rule("streaming: changes as they are committed")
        for step in shop.WORKLOAD:
            console.print(f"[bold]▶ {step.title}[/]")
            for statement in step.statements:
                console.print(f"  [dim]{escape(' '.join(statement.split()))}[/]", soft_wrap=True, highlight=False)
            await asyncio.to_thread(shop.run_step, server, step)
            await watcher.settle()
        table, key = shop.LAST_CHANGE
        last = f"{shop.DATABASE}.{table}"
        await watcher.read_until(lambda: normalized(key) in watcher.tables[last].keys, "the workload's last event")
        await watcher.drain()
    finally:
        await watcher.consumer.stop()
    now = await asyncio.to_thread(shop.primary_keys, server)
    console.print(summary_table(watcher.tables, now))
    ok = all(watcher.tables[table].keys == keys for table, keys in now.items())
    console.print("[green]every change arrived: the log matches MySQL[/]" if ok
                  else "[red]the log does not match MySQL[/] (see the table above)")
    return ok


@click.command("demo")
@click.option("--format", "fmt", type=click.Choice(["debezium", "canal"]), default="debezium", show_default=True,
              help="the change events' format")
@click.option("--keep", is_flag=True,
              help="leave MariaDB, the broker and the connector running, and print how to reach them")
def demo_command(fmt: str, keep: bool) -> None:
    """Run the whole pipeline on this machine, no Docker needed."""
    console = Console()
    signal.signal(signal.SIGTERM, signal.default_int_handler)     # SIGTERM cleans up like Ctrl-C
    with contextlib.ExitStack() as stack:                          # stops what the stages started, in reverse
        with interrupts_held():
            work_dir = Path(tempfile.mkdtemp(prefix="binlake-demo-"))
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        pipeline = Pipeline(work_dir, fmt, console)
        ok = run(pipeline, stack)
        signal.signal(signal.SIGINT, signal.SIG_IGN)              # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if keep and ok:
            stack.pop_all()
            console.print(keep_instructions(pipeline), highlight=False, soft_wrap=True)
        else:
            console.print(f"stopping the connector, the broker and MariaDB; removing {work_dir}", soft_wrap=True)
    sys.exit(0 if ok else 1)


def run(pipeline: Pipeline, stack: contextlib.ExitStack) -> bool:
    """Start the stages and show the events; False (with the reason printed) on failure or Ctrl-C."""
    console = pipeline.console
    console.print(f"[bold]binlake demo[/]: MariaDB → mysql connector → broker → you (format {pipeline.format}); "
                  f"files in {pipeline.work_dir}", soft_wrap=True)
    try:
        for stage in STAGES:
            stage(pipeline, stack)
        return asyncio.run(show(pipeline))
    except (DemoError, SandboxError) as exc:
        console.print(f"[red]demo failed:[/] {exc}", highlight=False)
    except (KeyboardInterrupt, asyncio.CancelledError):  # (a Ctrl-C as asyncio.run starts surfaces as the latter)
        console.print("interrupted")
    return False
