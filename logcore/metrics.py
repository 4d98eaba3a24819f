"""The broker's Prometheus metrics (prometheus-client), served at http://HOST:PORT/metrics when
`prometheus.listener` is set (`logcore.metrics_endpoint`).

Two kinds, by what they cost:
- Events are counted where they happen, once per request or per partition of a request, never per
  record: requests and their latency by API, records and bytes in and out by topic, ISR changes.
- State is read when Prometheus scrapes, by `BrokerState` on the event loop: partitions and their
  replication, log sizes and offsets, the cleaner's backlog, groups, transactions and consumer lag.
  An unscraped broker does no work for these.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .protocol.codec import ApiKey
from .storage.log_cleaner import cleanable

if TYPE_CHECKING:
    from .coordinator.group_coordinator import GroupCoordinator
    from .coordinator.transaction_coordinator import TransactionCoordinator
    from .replication.manager import ReplicaManager

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class BrokerMetrics:
    """The broker's registry and the counters its request path updates."""

    def __init__(self, replicas: ReplicaManager, groups: GroupCoordinator, transactions: TransactionCoordinator) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram("binlake_broker_request_seconds",
                                         "Time from a request's dispatch to its response data, by API (a produce "
                                         "with acks=all includes the wait for the ISR; a fetch, its max.wait)",
                                         ["api"], buckets=LATENCY_BUCKETS, registry=r)
        self.messages_in = Counter("binlake_broker_messages_in", "Records appended by producers, by topic",
                                   ["topic"], registry=r)
        self.bytes_in = Counter("binlake_broker_bytes_in", "Record-batch bytes appended by producers, by topic",
                                ["topic"], registry=r)
        self.bytes_out = Counter("binlake_broker_bytes_out", "Record-batch bytes sent to consumers, by topic",
                                 ["topic"], registry=r)
        self.replication_bytes_out = Counter("binlake_broker_replication_bytes_out",
                                             "Record-batch bytes sent to follower brokers, by topic", ["topic"],
                                             registry=r)
        self.isr_shrinks = Counter("binlake_broker_isr_shrinks", "Followers removed from an ISR this broker leads",
                                   registry=r)
        self.isr_expands = Counter("binlake_broker_isr_expands", "Followers added back to an ISR this broker leads",
                                   registry=r)
        r.register(BrokerState(replicas, groups, transactions))
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds, ...
        # Label children looked up once (a deleted topic's stay: its counts are history, as Kafka's meters)
        self._latency: dict[int, object] = {}
        self._in: dict[str, tuple] = {}
        self._out: dict[tuple[str, bool], object] = {}

    def observe_request(self, api_key: int, seconds: float) -> None:
        child = self._latency.get(api_key)
        if child is None:
            name = ApiKey(api_key).name.lower() if api_key in ApiKey._value2member_map_ else str(api_key)
            child = self._latency[api_key] = self.request_seconds.labels(name)
        child.observe(seconds)

    def appended(self, topic: str, records: int, size: int) -> None:
        children = self._in.get(topic)
        if children is None:
            children = self._in[topic] = (self.messages_in.labels(topic), self.bytes_in.labels(topic))
        children[0].inc(records)
        children[1].inc(size)

    def sent(self, topic: str, size: int, to_follower: bool) -> None:
        key = (topic, to_follower)
        child = self._out.get(key)
        if child is None:
            child = self._out[key] = (self.replication_bytes_out if to_follower else self.bytes_out).labels(topic)
        child.inc(size)

    def isr_changed(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks.inc(before - after)
        elif after > before:
            self.isr_expands.inc(after - before)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class BrokerState(Collector):
    """Gauges read from the broker at scrape time (on the event loop, as the broker's own state is)."""

    def __init__(self, replicas: ReplicaManager, groups: GroupCoordinator, transactions: TransactionCoordinator) -> None:
        self.replicas = replicas
        self.groups = groups
        self.transactions = transactions

    def collect(self):
        partitions = self.replicas.hosted()
        now_ms = int(time.time() * 1000)

        role = GaugeMetricFamily("binlake_broker_partitions", "Partitions hosted, by role", labels=["role"])
        leaders = [p for p in partitions if p.is_leader]
        role.add_metric(["leader"], len(leaders))
        role.add_metric(["follower"], len(partitions) - len(leaders))
        yield role
        yield GaugeMetricFamily("binlake_broker_under_replicated_partitions",
                                "Partitions this broker leads whose ISR lacks some of their replicas",
                                value=sum(len(p.isr) < len(p.replicas) for p in leaders))
        yield GaugeMetricFamily("binlake_broker_under_min_isr_partitions",
                                "Partitions this broker leads whose ISR is below min.insync.replicas",
                                value=sum(len(p.isr) < p.log.config["min.insync.replicas"] for p in leaders))
        yield GaugeMetricFamily("binlake_broker_offline_partitions",
                                "Hosted partitions whose log cannot be read or written (see the broker's log)",
                                value=sum(p.offline_reason is not None for p in partitions))

        size = GaugeMetricFamily("binlake_broker_log_size_bytes", "Bytes of a partition's segments",
                                 labels=["topic", "partition"])
        start = GaugeMetricFamily("binlake_broker_log_start_offset", "First offset a partition holds",
                                  labels=["topic", "partition"])
        end = GaugeMetricFamily("binlake_broker_log_end_offset", "Offset the next record of a partition gets",
                                labels=["topic", "partition"])
        dirty = GaugeMetricFamily("binlake_broker_cleaner_dirty_bytes",
                                  "Bytes of a compacted partition not cleaned yet (the cleaner's backlog)",
                                  labels=["topic", "partition"])
        for p in partitions:
            if p.offline_reason is not None:
                continue
            labels = [p.topic, str(p.index)]
            size.add_metric(labels, p.log.size_bytes())
            start.add_metric(labels, p.log.log_start_offset)
            end.add_metric(labels, p.log.log_end_offset)
            if "compact" in p.log.config["cleanup.policy"]:
                found = cleanable(p.log, p.last_stable_offset, p.log.first_dirty_offset, now_ms)
                dirty.add_metric(labels, found.dirty_bytes)
        yield from (size, start, end, dirty)

        groups = GaugeMetricFamily("binlake_broker_groups", "Groups this broker coordinates, by state",
                                   labels=["state"])
        by_state: dict[str, int] = {}
        for state in [*(g.state.value for g in self.groups.listed()), *(g.state for g in self.groups.consumer_groups()),
                      *(g.state for g in self.groups.share_groups())]:
            by_state[state] = by_state.get(state, 0) + 1
        for state, count in sorted(by_state.items()):
            groups.add_metric([state], count)
        yield groups
        yield self._consumer_lag()

        txns = GaugeMetricFamily("binlake_broker_transactions",
                                 "Transactional ids this broker coordinates, by state", labels=["state"])
        by_txn_state: dict[str, int] = {}
        for txn in self.transactions.txns.values():
            name = "".join(word.capitalize() for word in txn.state.name.split("_"))  # Kafka's: Ongoing, PrepareCommit
            by_txn_state[name] = by_txn_state.get(name, 0) + 1
        for state, count in sorted(by_txn_state.items()):
            txns.add_metric([state], count)
        yield txns

    def _consumer_lag(self) -> GaugeMetricFamily:
        """Per group and partition: the high watermark minus the committed offset, for the groups this broker
        coordinates and the partitions it leads (in a cluster, each partition's leader knows its high watermark)."""
        lag = GaugeMetricFamily("binlake_broker_consumer_lag",
                                "Records between a group's committed offset and the partition's high watermark",
                                labels=["group", "topic", "partition"])
        for group in self.groups.groups.values():
            for (topic, index), committed in group.offsets.items():
                partition = self.replicas.find(topic, index)
                if partition is None or not partition.is_leader or partition.offline_reason is not None:
                    continue
                lag.add_metric([group.group_id, topic, str(index)],
                               max(0, partition.high_watermark - committed.offset))
        return lag

