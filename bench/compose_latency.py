"""A row's trip through a running pipeline at steady state: from its commit in the source database to its
being visible in PostgreSQL and in the Delta table, per row, p50 and max after a warm-up.

    .venv/bin/python bench/compose_latency.py [-f docker-compose.yml] [--rows 12] [--warmup 2] [--interval 5]
    .venv/bin/python bench/compose_latency.py --mysql 127.0.0.1:PORT --postgres 127.0.0.1:PORT --warehouse DIR

Against the compose demo (the default: `docker-compose up -d` first) it finds the database's and
PostgreSQL's container addresses and the warehouse volume with `docker inspect`; with --mysql,
--postgres and --warehouse it measures any other pipeline, such as the one `binlake demo --keep`
leaves running (its last lines give the ports and the warehouse directory; root has no password
there). Every --interval seconds it inserts a marker customer into `shop.customers` (autocommit; its
clock starts when the INSERT returns) and polls every --poll seconds for all unseen markers, in
PostgreSQL's view `shop.customers` and in the Delta table `<warehouse>/shop/customers` (read with
delta-rs, as any Delta reader would see it). The first --warmup rows are shown but not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pyarrow.compute as pc
import pymysql
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docker.check import WAREHOUSE, compose_command  # noqa: E402

TARGETS = ("PostgreSQL", "Delta")


@dataclass(frozen=True)
class Endpoints:
    mysql: tuple[str, int]
    mysql_password: str
    postgres: tuple[str, int]
    warehouse: Path
    sink_metrics: str | None = None  # the sink's Prometheus endpoint


@dataclass
class Marker:
    id: int
    committed: float  # time.monotonic() when the INSERT returned
    seen: dict[str, float] = field(default_factory=dict)  # target → seconds after the commit
    shown: bool = False


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def compose_endpoints(files: list[str]) -> Endpoints:
    """The compose demo's database, PostgreSQL (container addresses: nothing is published) and the
    warehouse volume's directory on this host."""
    def inspect(service: str, template: str) -> str:
        container = subprocess.run([*compose_command(files), "ps", "-q", service], capture_output=True, text=True,
                                   check=True).stdout.strip()
        if not container:
            raise SystemExit(f"the compose demo's {service} is not running: `docker-compose up -d` first")
        return subprocess.run(["docker", "inspect", "-f", template, container], capture_output=True, text=True,
                              check=True).stdout.strip()
    ip = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    volume = "{{range .Mounts}}{{if eq .Destination \"%s\"}}{{.Source}}{{end}}{{end}}" % WAREHOUSE
    return Endpoints((inspect("database", ip), 3306), "root-secret", (inspect("postgres", ip), 5432),
                     Path(inspect("sink", volume)), f"http://{inspect('sink', ip)}:9310/metrics")


def batch_totals(url: str | None) -> dict[tuple[str, str], tuple[float, float]]:
    """{(query, phase): (seconds, batches)} so far, from the sink's binlake_sink_batch_seconds."""
    if url is None:
        return {}
    totals: dict[tuple[str, str], list[float]] = {}
    for family in text_string_to_metric_families(urllib.request.urlopen(url, timeout=10).read().decode()):
        if family.name == "binlake_sink_batch_seconds":
            for sample in family.samples:
                kind = {"binlake_sink_batch_seconds_sum": 0, "binlake_sink_batch_seconds_count": 1}.get(sample.name)
                if kind is not None:
                    totals.setdefault((sample.labels["query"], sample.labels["phase"]), [0.0, 0.0])[kind] = sample.value
    return {key: (seconds, n) for key, (seconds, n) in totals.items()}


def phases(before: dict, after: dict) -> dict[str, dict[str, float]]:
    """Per query: batches in the window and their mean seconds per phase (read_decode, plan, write)."""
    found: dict[str, dict[str, float]] = {}
    for (query, phase), (seconds, n) in after.items():
        seconds0, n0 = before.get((query, phase), (0.0, 0.0))
        if n > n0:
            found.setdefault(query, {"batches": n - n0})[phase] = (seconds - seconds0) / (n - n0)
    return found


class Probe:
    """Inserts markers and finds which of them each target shows."""

    def __init__(self, where: Endpoints) -> None:
        self.mysql = pymysql.connect(host=where.mysql[0], port=where.mysql[1], user="root",
                                     password=where.mysql_password, database="shop", autocommit=True)
        self.postgres = psycopg.connect(host=where.postgres[0], port=where.postgres[1], user="binlake",
                                        dbname="warehouse", autocommit=True)
        self.delta_path = where.warehouse / "shop" / "customers"
        self.delta: DeltaTable | None = None

    def insert(self, marker_id: int) -> float:
        with self.mysql.cursor() as cursor:
            cursor.execute("INSERT INTO customers VALUES (%s, %s, %s, 'basic', NOW(3))",
                           (marker_id, f"Latency{marker_id}", f"latency{marker_id}@example.com"))
        return time.monotonic()

    def visible(self, target: str, ids: list[int]) -> set[int]:
        return self._in_postgres(ids) if target == "PostgreSQL" else self._in_delta(ids)

    def _in_postgres(self, ids: list[int]) -> set[int]:
        try:
            return {r[0] for r in self.postgres.execute("SELECT id FROM shop.customers WHERE id = ANY(%s)", (ids,))}
        except psycopg.errors.UndefinedTable:  # (before the sink's first batch of the table)
            return set()

    def _in_delta(self, ids: list[int]) -> set[int]:
        if self.delta is None:
            if not DeltaTable.is_deltatable(str(self.delta_path)):
                return set()
            self.delta = DeltaTable(str(self.delta_path))
        else:
            self.delta.update_incremental()
        rows = self.delta.to_pyarrow_dataset().to_table(
            columns=["id"], filter=pc.field("id").isin(ids) & ~pc.field("__deleted"))
        return set(rows.column("id").to_pylist())

    def close(self) -> None:
        self.mysql.close()
        self.postgres.close()


def measure(probe: Probe, first_id: int, rows: int, interval: float, poll: float, timeout: float,
            console: Console) -> list[Marker]:
    """Insert `rows` markers (ids from `first_id`), one every `interval` s, and poll until each is seen everywhere."""
    markers: list[Marker] = []
    next_insert = time.monotonic()
    while len(markers) < rows or any(len(m.seen) < len(TARGETS) for m in markers):
        now = time.monotonic()
        if len(markers) < rows and now >= next_insert:
            markers.append(Marker(first_id + len(markers), probe.insert(first_id + len(markers))))
            next_insert += interval
        for target in TARGETS:
            pending = [m for m in markers if target not in m.seen]
            if pending:
                found, at = probe.visible(target, [m.id for m in pending]), time.monotonic()
                for m in pending:
                    if m.id in found:
                        m.seen[target] = at - m.committed
        for m in markers:
            if len(m.seen) == len(TARGETS) and not m.shown:
                m.shown = True
                console.print(f"id {m.id}: "
                              + ", ".join(f"{t} {m.seen[t]:5.1f} s" for t in TARGETS), highlight=False)
            elif time.monotonic() - m.committed > timeout and len(m.seen) < len(TARGETS):
                raise SystemExit(f"row {m.id} reached only {sorted(m.seen) or 'nothing'} within {timeout:.0f} s")
        time.sleep(max(0.0, poll - (time.monotonic() - now)))
    return markers


def summary(markers: list[Marker]) -> dict[str, dict[str, float]]:
    return {t: {"p50": statistics.median(m.seen[t] for m in markers), "max": max(m.seen[t] for m in markers),
                "min": min(m.seen[t] for m in markers)} for t in TARGETS}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-f", "--file", dest="files", action="append", metavar="FILE",
                        help="a compose file, as docker-compose takes them  [default: docker-compose.yml]")
    parser.add_argument("--mysql", type=address, metavar="HOST:PORT", help="the source database (not the compose demo)")
    parser.add_argument("--mysql-password", default="", help="root's password there  [default: none]")
    parser.add_argument("--postgres", type=address, metavar="HOST:PORT", help="the warehouse database (user binlake)")
    parser.add_argument("--warehouse", type=Path, help="the Delta tables' directory (<dir>/shop/customers)")
    parser.add_argument("--sink-metrics", metavar="URL", help="the sink's Prometheus endpoint, for its batch phases")
    parser.add_argument("--rows", type=int, default=12, help="markers counted, after the warm-up")
    parser.add_argument("--warmup", type=int, default=2, help="markers shown but not counted")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two markers")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between two looks at each target")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a marker may take before the run fails")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    explicit = (args.mysql, args.postgres, args.warehouse)
    if any(explicit) and not all(explicit):
        parser.error("--mysql, --postgres and --warehouse go together")
    where = Endpoints(args.mysql, args.mysql_password, args.postgres, args.warehouse, args.sink_metrics) \
        if all(explicit) \
        else compose_endpoints(args.files or ["docker-compose.yml"])

    console = Console()
    console.print(f"before: {uptime()}", highlight=False)
    probe = Probe(where)
    try:
        first_id = 2_000_000_000 + int(time.time()) % 100_000_000   # (above the demo's own customers)
        measure(probe, first_id, args.warmup, args.interval, args.poll, args.timeout, console)
        before = batch_totals(where.sink_metrics)
        markers = measure(probe, first_id + args.warmup, args.rows, args.interval, args.poll, args.timeout, console)
        sink = phases(before, batch_totals(where.sink_metrics))
    finally:
        probe.close()
    load = uptime()
    figures = summary(markers)
    table = Table(title=f"a row's commit → visible, {args.rows} rows after {args.warmup} of warm-up, "
                        f"one every {args.interval:g} s")
    for column in ("target", "p50", "max", "min"):
        table.add_column(column, justify="right" if column != "target" else "left")
    for target, f in figures.items():
        table.add_row(target, *(f"{f[k]:.1f} s" for k in ("p50", "max", "min")))
    console.print(table)
    if sink:
        batches = Table(title="the sink's batches meanwhile (its metrics): mean seconds per phase")
        for column in ("query", "batches", "read+decode", "schemas+checks", "merge+commit"):
            batches.add_column(column, justify="right" if column != "query" else "left")
        for query, f in sorted(sink.items()):
            batches.add_row(query, f"{f['batches']:.0f}",
                            *(f"{f.get(phase, 0):.2f}" for phase in ("read_decode", "plan", "write")))
        console.print(batches)
    console.print(f"after: {load}", highlight=False)
    if args.json:
        args.json.write_text(json.dumps({"uptime": load, "rows": [{"id": m.id, **m.seen} for m in markers],
                                         "warmup": args.warmup, "figures": figures, "sink": sink}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
