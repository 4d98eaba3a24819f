"""The end of the demo: the Spark sink's batches as it logs them, until its Delta and PostgreSQL tables
hold what the source server holds (and the processors' derived tables what its tables imply), then
the closing side-by-side table.

Delta tables are read with delta-rs (the `deltalake` package), not Spark: the warehouse is meant for
every Delta reader (docs/sink.md, "Readers of the Delta tables"), and no second JVM has to start.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rich import box
from rich.markup import escape
from rich.table import Table

from . import outputs, shop, warehouse
from .services import DemoError, Pipeline

WAIT_S = 120          # for the sink's next batch (its first batches create the tables; a loaded machine
                      # takes a minute for one): the wait ends when the sink stops making progress
FIRST_BATCH_WAIT_S = 300  # for its first: Spark's start (JVM, the jars, the Kafka source) takes minutes on a
                          # loaded 2-core machine
POLL_S = 1.0
BATCH_LINE = re.compile(r"spark_sink\.job: (binlake-sink-\S+) (batch \d+: .*?)(?: \(read\+decode|$)")


@dataclass
class Side:
    """One system's copy of a table: its rows, or why they could not be read."""

    rows: warehouse.Rows | None = None
    error: str = ""

    def cell(self) -> str:
        return f"{len(self.rows)} · {warehouse.checksum(self.rows)}" if self.rows is not None else "—"


@dataclass
class Comparison:
    table: str
    expected: Side
    delta: Side
    postgres: Side | None  # None: not landed in PostgreSQL

    @property
    def ok(self) -> bool:
        return all(side.rows == self.expected.rows for side in (self.delta, self.postgres) if side is not None)


class Landing:
    def __init__(self, pipeline: Pipeline, source_tables: dict[str, tuple]) -> None:
        """`source_tables`: table → (columns, key, rows), as warehouse.mysql_table reads them."""
        self.pipeline, self.source_tables = pipeline, source_tables
        self.derived = outputs.expected(source_tables["orders"][2], source_tables["customers"][2])
        self.comparisons: list[Comparison] = []
        self._log_offset = 0

    @property
    def ok(self) -> bool:
        return bool(self.comparisons) and all(c.ok for c in self.comparisons)

    def wait(self) -> "Landing":
        """Show the sink's batches until every table matches, or the sink landed no batch for WAIT_S
        (FIRST_BATCH_WAIT_S before its first; then the table shows what differs)."""
        deadline = time.monotonic() + FIRST_BATCH_WAIT_S
        while True:
            self.pipeline.check_alive()
            if self.show_batches():
                deadline = time.monotonic() + WAIT_S
            self.comparisons = self.compare()
            if self.ok or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        self.show_batches()
        return self

    def show_batches(self) -> int:
        """Print the batch lines the sink logged since the last call; how many there were."""
        with open(self.pipeline.sink.log_path, "rb") as log:
            log.seek(self._log_offset)
            text = log.read()
        end = text.rfind(b"\n") + 1          # (a line being written is read next time)
        self._log_offset += end
        batches = [match for line in text[:end].decode(errors="replace").splitlines()
                   if (match := BATCH_LINE.search(line))]
        for match in batches:
            self.pipeline.console.print(f"  [cyan]{escape(match.group(1))}[/] {escape(match.group(2))}",
                                        soft_wrap=True, highlight=False)
        return len(batches)

    def compare(self) -> list[Comparison]:
        pipeline, found = self.pipeline, []
        for table, (columns, key, rows) in self.source_tables.items():
            delta = _read(lambda: warehouse.delta_rs_table(str(pipeline.warehouse / shop.DATABASE / table), key,
                                                           columns, shop.JSON_COLUMNS))
            postgres = _read(lambda: warehouse.postgres_table(pipeline.postgres, shop.DATABASE, table, key, columns,
                                                              shop.JSON_COLUMNS))
            found.append(Comparison(f"{shop.DATABASE}.{table}", Side(rows), delta, postgres))
        for table, rows in self.derived.items():
            key = ("sku", "minute") if table == outputs.REVENUE else ("id",)
            delta = _read(lambda: warehouse.delta_rs_table(str(pipeline.warehouse / "derived" / table), key,
                                                           outputs.columns(table)))
            if table == outputs.REVENUE and delta.rows is not None:
                delta.rows = outputs.revenue_per_product(delta.rows)
            found.append(Comparison(f"derived.{table}", Side(rows), delta, None))
        return found

    def table(self) -> Table:
        name = self.pipeline.source_name
        t = Table(title=f"{name} vs the warehouse (rows · checksum)", box=box.SIMPLE_HEAD,
                  caption=f"derived.*: the processors' outputs, expected values computed from {name}'s tables "
                          "(revenue: summed per product)")
        for column in ("table", name, "Delta", "PostgreSQL", "match"):
            t.add_column(column, justify="left" if column == "table" else "right", no_wrap=True)
        for c in self.comparisons:
            t.add_row(c.table, c.expected.cell(), c.delta.cell(), c.postgres.cell() if c.postgres else "",
                      "[green]yes[/]" if c.ok else "[red]NO[/]")
        for c in self.comparisons:
            for where, side in (("Delta", c.delta), ("PostgreSQL", c.postgres)):
                if side is not None and side.rows != c.expected.rows:
                    why = side.error or warehouse.differences(c.expected.rows, side.rows)
                    t.add_row(f"[red]{c.table} in {where}[/]", escape(why[:300]), "", "", "")
        return t


def _read(read) -> Side:
    try:
        return Side(read())
    except Exception as exc:  # (not there yet: the sink's first batch of it creates it)
        return Side(error=" ".join(str(exc).split())[:300])
