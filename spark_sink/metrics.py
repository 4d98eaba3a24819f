"""The sink's Prometheus metrics (`binlake sink run --prometheus-listener HOST:PORT`), per streaming
query: each batch's time by phase, the row changes merged per table, and how far each query is
behind the log (the offsets between what it has merged and the latest, from Spark's progress)."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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


def batch_done(query: str, timings: dict[str, float], rows: dict[str, int]) -> None:
    BATCHES.labels(query).inc()
    for phase in PHASES:
        BATCH_SECONDS.labels(query, phase).observe(timings[phase])
    for table, n in rows.items():
        ROWS.labels(query, table).inc(n)


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
