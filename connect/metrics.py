"""The connect runtimes' Prometheus metrics: `connect run --prometheus-listener HOST:PORT`, or
`prometheus.listener` in a distributed worker's file.

Counted per batch and per commit by each `TaskRunner` (never per record): records, batches, source
transactions, commits and their duration, failures. Read at each scrape: every task's state, and the
source's own gauges (`SourceTask.metrics()`: for mysql, the snapshot's progress and the binlog lag).
One registry per process, as one process runs one runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
_TASK = ["connector", "task"]
RECORDS = Counter("binlake_connect_records", "Records written to the log", _TASK, registry=REGISTRY)
BATCHES = Counter("binlake_connect_batches", "Batches taken from the source and written", _TASK, registry=REGISTRY)
TRANSACTIONS = Counter("binlake_connect_source_transactions",
                       "Source transactions written whole (their last batch written)", _TASK, registry=REGISTRY)
COMMIT_SECONDS = Histogram("binlake_connect_commit_seconds",
                           "Time to commit written batches with their offsets (a Kafka transaction under "
                           "exactly_once)", _TASK, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                            0.5, 1, 2.5, 5, 10), registry=REGISTRY)
FAILURES = Counter("binlake_connect_task_failures", "Times a task failed (and was restarted or left FAILED)", _TASK,
                   registry=REGISTRY)


class TaskMetrics:
    """One task's counters, looked up once."""

    def __init__(self, connector: str, task: int) -> None:
        labels = (connector, str(task))
        self.records, self.batches = RECORDS.labels(*labels), BATCHES.labels(*labels)
        self.transactions, self.commit_seconds = TRANSACTIONS.labels(*labels), COMMIT_SECONDS.labels(*labels)
        self.failures = FAILURES.labels(*labels)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class WatchedTask(Protocol):
    """What a scrape reads of a task (connect.runtime.TaskRunner is one): a seam, so that this module
    needs nothing of the runtime."""

    @property
    def spec(self) -> _Named: ...
    @property
    def task_id(self) -> int: ...
    @property
    def state(self) -> Enum: ...
    def source_metrics(self) -> Mapping[str, float]: ...


class TaskStates(Collector):
    """At each scrape: each task's state (1 for its current one) and its source's gauges."""

    def __init__(self, runners: Callable[[], Iterable[WatchedTask]]) -> None:
        self.runners = runners

    def collect(self):
        states = GaugeMetricFamily("binlake_connect_task_state", "1 for each task's current state",
                                   labels=[*_TASK, "state"])
        source: dict[str, GaugeMetricFamily] = {}
        for runner in self.runners():
            labels = [runner.spec.name, str(runner.task_id)]
            states.add_metric([*labels, runner.state.value], 1)
            for name, value in runner.source_metrics().items():
                family = source.get(name)
                if family is None:
                    family = source[name] = GaugeMetricFamily(f"binlake_connect_source_{name}",
                                                              f"The source's {name.replace('_', ' ')}", labels=_TASK)
                family.add_metric(labels, value)
        yield states
        yield from source.values()


def watch(runners: Callable[[], Iterable[WatchedTask]]) -> None:
    """Report these runners' states at each scrape (the runtime of this process calls it once)."""
    REGISTRY.register(TaskStates(runners))


def exposition() -> bytes:
    return generate_latest(REGISTRY)
