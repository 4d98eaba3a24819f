"""The sink's Prometheus metrics (`binlake sink run --prometheus-listener HOST:PORT`), per streaming
query: each batch's time by phase, the row changes merged per table, how far each query is behind
the log (the offsets between what it has merged and the latest, from Spark's progress), and each
table's freshness: how long after their MySQL commit its rows became visible in the target, p50 and
p99 over the last `FRESHNESS_WINDOW_S` (docs/sink.md, "Metrics")."""

from __future__ import annotations

import json
import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

REGISTRY = CollectorRegistry()
PHASES = ("read_decode", "plan", "write")  # (as the batch log line: read+decode, schemas+checks, merge+commit)

BATCH_SECONDS = Histogram("binlake_sink_batch_seconds", "Time of each micro-batch, by phase: read_decode (read the "
                          "log and decode), plan (schemas and checks), write (MERGE and commit)",
                          ["query", "phase"], registry=REGISTRY,
                          buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
ROWS = Counter("binlake_sink_rows", "Row changes merged into the target", ["query", "table"], registry=REGISTRY)
BATCHES = Counter("binlake_sink_batches", "Micro-batches merged and committed", ["query"], registry=REGISTRY)
OFFSETS_BEHIND = Gauge("binlake_sink_offsets_behind", "Offsets between the last batch's end and the latest offsets "
                       "of the query's topics (records and transaction markers not yet merged)", ["query"],
                       registry=REGISTRY)


FRESHNESS_WINDOW_S = 60.0
FRESHNESS_QUANTILES = (0.5, 0.99)
# Each batch sums up a table's commit times as these quantiles of them, per partition (Spark's
# percentile_approx), each standing for an equal share of the partition's rows.
COMMIT_TIME_PROBABILITIES = tuple(i / 100 for i in range(101))


class Freshness:
    """Per (query, table): the ages at which rows became visible (visible time - MySQL commit time,
    as weighted samples), kept for `window_s` after their batch's commit; the quantiles are read
    at each scrape, so a table with no changes in the window has none."""

    def __init__(self, window_s: float = FRESHNESS_WINDOW_S, clock=time.time) -> None:
        self.window_s, self.clock = window_s, clock
        self._batches: deque = deque()  # (visible at, query, table, [(age s, weight)])
        self._lock = threading.Lock()

    def batch_visible(self, query: str, visible_at: float, commits: dict[str, list[tuple[int, float]]]) -> None:
        """A batch became visible at `visible_at` (epoch seconds); per table, its rows' commit times
        as (epoch ms, weight) samples."""
        with self._lock:
            for table, samples in commits.items():
                if samples:
                    self._batches.append((visible_at, query, table,
                                          [(visible_at - ms / 1000, weight) for ms, weight in samples]))

    def quantiles(self) -> dict[tuple[str, str], dict[float, float]]:
        """{(query, table): {quantile: seconds}} over the window."""
        with self._lock:
            while self._batches and self._batches[0][0] < self.clock() - self.window_s:
                self._batches.popleft()
            tables: dict[tuple[str, str], list] = {}
            for _at, query, table, ages in self._batches:
                tables.setdefault((query, table), []).extend(ages)
        return {key: weighted_quantiles(ages, FRESHNESS_QUANTILES) for key, ages in tables.items()}

    def collect(self):
        family = GaugeMetricFamily(
            "binlake_sink_freshness_seconds", f"Time from the MySQL commit of a row change to its being visible in "
            f"the target (after the commit of the batch holding it), by quantile over the last "
            f"{FRESHNESS_WINDOW_S:g} s; source and sink clocks as they are", labels=["query", "table", "quantile"])
        for (query, table), found in sorted(self.quantiles().items()):
            for q, seconds in found.items():
                family.add_metric([query, table, f"{q:g}"], seconds)
        yield family


def weighted_quantiles(samples: list[tuple[float, float]], quantiles) -> dict[float, float]:
    """The smallest value at or above each quantile of the samples' total weight."""
    ordered = sorted(samples)
    total = sum(weight for _value, weight in ordered)
    found, seen, i = {}, 0.0, -1
    for q in sorted(quantiles):
        while i < 0 or (seen < q * total and i + 1 < len(ordered)):
            i += 1
            seen += ordered[i][1]
        found[q] = ordered[i][0]
    return found


FRESHNESS = Freshness()
REGISTRY.register(FRESHNESS)


def batch_done(query: str, timings: dict[str, float], rows: dict[str, int],
               commits: dict[str, list[tuple[int, float]]], visible_at: float) -> None:
    BATCHES.labels(query).inc()
    for phase in PHASES:
        BATCH_SECONDS.labels(query, phase).observe(timings[phase])
    for table, n in rows.items():
        ROWS.labels(query, table).inc(n)
    FRESHNESS.batch_visible(query, visible_at, commits)


def progress(query: str, last_progress) -> None:
    """Update the lag from a query's last progress report (None before its first batch)."""
    if not last_progress:
        return
    behind = 0
    for source in last_progress["sources"]:
        latest, end = (_offsets(source[key]) for key in ("latestOffset", "endOffset"))
        behind += sum(max(offset - end.get(tp, 0), 0) for tp, offset in latest.items())
    OFFSETS_BEHIND.labels(query).set(behind)


def _offsets(value) -> dict[tuple[str, str], int]:
    """{(topic, partition): offset} from the Kafka source's offsets ({"topic": {"0": 42}}, maybe as JSON)."""
    found = (json.loads(value) if isinstance(value, str) else value) or {}  # (None, or "null": not known yet)
    return {(topic, partition): int(offset) for topic, partitions in found.items()
            for partition, offset in (partitions or {}).items()}
