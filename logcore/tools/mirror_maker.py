"""`binlake mirror-maker`: copy the topics matching a regular expression from one cluster to another
(logcore or Apache Kafka, either way), exactly once.

Records keep their key, value, headers and timestamp, and their partition where both topics have
as many partitions (a missing target topic is created with the source's count). Each batch is one
transaction on the target, and the source positions it reached are committed in the same
transaction, under the mirror's group on the *target* cluster (KIP-98's consume-transform-produce
with the offsets kept where the output is). A restarted mirror resumes from those offsets, so a
kill at any moment duplicates and loses nothing, and its transactional id fences the old process
if that one still runs. One process mirrors every matching partition (it assigns them itself, so a
restart resumes at once instead of waiting for a group's session timeout); nothing is written to
the source.
"""

from __future__ import annotations

import re
import signal
import sys
import time

import click
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30
BATCH = 1000
PROGRESS_EVERY_S = 5.0


class Mirror:
    def __init__(self, source: str, target: str, include: str, group: str, transactional_id: str) -> None:
        self.include = re.compile(include)
        self.source_admin = AdminClient({"bootstrap.servers": source})
        self.target_admin = AdminClient({"bootstrap.servers": target})
        self.consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        # A member of the mirror's group on the target: where the offsets live, and the group
        # metadata each transaction commits them under (a group with no active members there).
        # read_committed: its OffsetFetch asks for stable offsets, never ones of an undecided transaction.
        self.offsets = Consumer({"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})
        self.producer = Producer({"bootstrap.servers": target, "transactional.id": transactional_id,
                                  "enable.idempotence": True, "linger.ms": 5})
        self.same_partitions: dict[str, bool] = {}
        self.mirrored = 0

    def start(self) -> None:
        self.producer.init_transactions(TIMEOUT_S)
        topics = [t for t in self.source_admin.list_topics(timeout=TIMEOUT_S).topics
                  if self.include.fullmatch(t) and not t.startswith("__")]
        if not topics:
            raise click.ClickException(f"no source topic matches {self.include.pattern!r}")
        self._ensure_targets(topics)
        partitions = [TopicPartition(t, p) for t, meta in sorted(
            self.source_admin.list_topics(timeout=TIMEOUT_S).topics.items()) if t in topics for p in meta.partitions]
        # Each partition starts where the last committed transaction left it, else at its beginning.
        committed = self.offsets.committed(partitions, timeout=TIMEOUT_S)
        self.consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else -2)
                              for tp in committed])

    def _ensure_targets(self, topics: list[str]) -> None:
        source = self.source_admin.list_topics(timeout=TIMEOUT_S).topics
        existing = self.target_admin.list_topics(timeout=TIMEOUT_S).topics
        missing = [NewTopic(t, len(source[t].partitions), -1) for t in topics if t not in existing]
        for topic, future in (self.target_admin.create_topics(missing) if missing else {}).items():
            try:
                future.result(TIMEOUT_S)
            except KafkaException as exc:
                if "already exists" not in exc.args[0].str():
                    raise
        existing = self.target_admin.list_topics(timeout=TIMEOUT_S).topics
        self.same_partitions = {t: len(existing[t].partitions) == len(source[t].partitions) for t in topics}

    def step(self) -> int:
        """Mirror one batch in one transaction; the number of records."""
        batch = [m for m in self.consumer.consume(BATCH, 0.5) if m.error() is None]
        if not batch:
            return 0
        self.producer.begin_transaction()
        positions: dict[tuple[str, int], int] = {}
        for m in batch:
            partition = m.partition() if self.same_partitions.get(m.topic()) else -1
            kind, stamp = m.timestamp()
            self.producer.produce(m.topic(), value=m.value(), key=m.key(), headers=m.headers(),
                                  partition=partition, timestamp=stamp if kind else 0)
            positions[(m.topic(), m.partition())] = m.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        self.producer.send_offsets_to_transaction(offsets, self.offsets.consumer_group_metadata(), TIMEOUT_S)
        self.producer.commit_transaction(TIMEOUT_S)
        self.mirrored += len(batch)
        return len(batch)

    def lag(self) -> int:
        total = 0
        for tp in self.consumer.assignment():
            _, high = self.consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
            position = self.consumer.position([tp])[0].offset
            total += max(high - position, 0) if position >= 0 and high >= 0 else 0
        return total

    def close(self) -> None:
        self.consumer.close()
        self.offsets.close()
        self.producer.flush(TIMEOUT_S)


@click.command("mirror-maker")
@click.option("--source", required=True, metavar="HOST:PORT[,…]", help="the cluster to copy from")
@click.option("--target", required=True, metavar="HOST:PORT[,…]", help="the cluster to copy to")
@click.option("--include", required=True, metavar="REGEX", help="topics to copy (the whole name must match)")
@click.option("--group", default="binlake-mirror-maker", show_default=True,
              help="the group on the target that keeps the mirror's source offsets")
@click.option("--transactional-id", default=None, help="default: the group name (one per mirror process)")
@click.option("--max-idle-ms", type=int, default=-1, show_default=True,
              help="stop after this long with nothing to copy (-1: run until stopped)")
def mirror_maker_command(source: str, target: str, include: str, group: str, transactional_id: str | None,
                         max_idle_ms: int) -> None:
    """Copy topics between clusters, exactly once (kafka-mirror-maker)."""
    stopped = [False]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.__setitem__(0, True))
    mirror = Mirror(source, target, include, group, transactional_id or group)
    try:
        mirror.start()
        idle_since = last_report = time.monotonic()
        while not stopped[0]:
            if mirror.step():
                idle_since = time.monotonic()
            elif max_idle_ms >= 0 and (time.monotonic() - idle_since) * 1000 >= max_idle_ms:
                break
            if time.monotonic() - last_report >= PROGRESS_EVERY_S:
                print(f"mirrored {mirror.mirrored} records; lag {mirror.lag()}", file=sys.stderr, flush=True)
                last_report = time.monotonic()
        print(f"mirrored {mirror.mirrored} records; lag {mirror.lag()}", file=sys.stderr, flush=True)
    except KafkaException as exc:
        raise click.ClickException(exc.args[0].str()) from None
    finally:
        mirror.close()
