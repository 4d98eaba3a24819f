"""`binlake demo`: start the pipeline's pieces (services.STAGES), show the change events of a snapshot
and of a workload as they arrive (killing one broker of the cluster halfway), compare MySQL with the
log, and stop everything again."""

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
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
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
        """Read every partition of `topics` from its start, once the connector has created them all (in a
        cluster a new topic reaches the brokers one by one; assigned, not subscribed: without a group
        aiokafka would assign anew, and read again, whenever a subscribed topic appears)."""
        await self.consumer.start()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.pipeline.bootstrap)
        await admin.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while (partitions := await self._partitions(admin, topics)) is None:
                self.pipeline.check_alive()
                if time.monotonic() > deadline:
                    raise DemoError(f"the connector did not create {sorted(topics)} within {WAIT_S} s; its log "
                                    f"ends:\n{self.pipeline.connector.log_tail()}")
                await asyncio.sleep(0.1)
        finally:
            await admin.close()
        self.consumer.assign(partitions)

    @staticmethod
    async def _partitions(admin: AIOKafkaAdminClient, topics: set[str]) -> list[TopicPartition] | None:
        """Every partition of `topics`, or None while one is not known yet."""
        if not topics <= set(await admin.list_topics()):
            return None
        described = await admin.describe_topics(sorted(topics))
        if any(d["error_code"] or not d["partitions"] for d in described):
            return None
        return [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]

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

    async def read_while(self, condition, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while condition() and time.monotonic() < deadline:
            self.pipeline.check_alive()
            await self.read(0.2)

    def matches(self, rows: dict[str, set[tuple]]) -> bool:
        """Whether the keys rebuilt from the log are MySQL's `rows`, table by table."""
        return all(self.tables[table].keys == keys for table, keys in rows.items())

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
        for number, step in enumerate(shop.WORKLOAD):
            if number == len(shop.WORKLOAD) // 2 and len(pipeline.brokers) > 1:
                kill_a_broker(pipeline)
            console.print(f"[bold]▶ {step.title}[/]")
            for statement in step.statements:
                console.print(f"  [dim]{escape(' '.join(statement.split()))}[/]", soft_wrap=True, highlight=False)
            await asyncio.to_thread(shop.run_step, server, step)
            await watcher.settle()
        table, key = shop.LAST_CHANGE
        last = f"{shop.DATABASE}.{table}"
        await watcher.read_until(lambda: normalized(key) in watcher.tables[last].keys, "the workload's last event")
        await watcher.drain()
        now = await asyncio.to_thread(shop.primary_keys, server)
        # (after a broker's death a transaction shows up on a partition once its marker reaches the new leader)
        await watcher.read_while(lambda: not watcher.matches(now), WAIT_S)
    finally:
        await watcher.consumer.stop()
    console.print(summary_table(watcher.tables, now))
    ok = watcher.matches(now)
    console.print("[green]every change arrived: the log matches MySQL[/]" if ok
                  else "[red]the log does not match MySQL[/] (see the table above)")
    return ok


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
              help="leave MariaDB, the brokers and the connector running, and print how to reach them")
@click.option("--single-broker", is_flag=True,
              help="one broker alone instead of ZooKeeper and a three-broker cluster (no broker is killed)")
def demo_command(fmt: str, keep: bool, single_broker: bool) -> None:
    """Run the whole pipeline on this machine, no Docker needed."""
    console = Console()
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # (its retries while a broker is down: the demo says it)
    signal.signal(signal.SIGTERM, signal.default_int_handler)     # SIGTERM cleans up like Ctrl-C
    with contextlib.ExitStack() as stack:                          # stops what the stages started, in reverse
        with interrupts_held():
            work_dir = Path(tempfile.mkdtemp(prefix="binlake-demo-"))
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        pipeline = Pipeline(work_dir, fmt, console, single_broker)
        ok = run(pipeline, stack)
        signal.signal(signal.SIGINT, signal.SIG_IGN)              # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if keep and ok:
            stack.pop_all()
            console.print(keep_instructions(pipeline), highlight=False, soft_wrap=True)
        else:
            console.print(f"stopping the connector, the brokers and MariaDB; removing {work_dir}", soft_wrap=True)
    sys.exit(0 if ok else 1)


def run(pipeline: Pipeline, stack: contextlib.ExitStack) -> bool:
    """Start the stages and show the events; False (with the reason printed) on failure or Ctrl-C."""
    console = pipeline.console
    brokers = "a broker" if pipeline.single_broker else "a three-broker cluster"
    console.print(f"[bold]binlake demo[/]: MariaDB → mysql connector → {brokers} → you (format {pipeline.format}); "
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
