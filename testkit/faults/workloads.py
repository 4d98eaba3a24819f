"""Workloads that record a history for `checkers.py`: real clients (confluent-kafka, librdkafka)
in threads of the test process, which sits in the root namespace and is never cut off.

- `QueueWorkload`: an idempotent acks=all producer sends unique values round the partitions at a
  steady rate; a consumer (no group, every partition from the start, read_uncommitted) polls them.
- `TxnWorkload`: a transactional producer writes one value to each partition per transaction and
  commits or aborts at random (seeded); a read_committed consumer polls.

Times are `time.monotonic()` seconds. Every value is unique, so a history is checked by value.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

DELIVERY_TIMEOUT_MS = 300_000


@dataclass
class Send:
    value: bytes
    partition: int
    sent: float
    acked: float | None = None
    offset: int | None = None
    error: str | None = None  # a definite failure (the write may still exist if retried: indeterminate)


@dataclass
class Poll:
    partition: int
    offset: int
    value: bytes
    at: float
    session: int  # polls of one consumer instance, in order


@dataclass
class Txn:
    id: int
    values: dict[bytes, int]  # value -> partition
    began: float
    commit_invoked: float | None = None
    outcome: str = "pending"  # committed | aborted | indeterminate
    ended: float | None = None


class Poller(threading.Thread):
    """Polls every partition of `topic` from the start; records what it sees."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, read_committed: bool) -> None:
        super().__init__(daemon=True, name=f"poller-{topic}")
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.read_committed = read_committed
        self.polls: list[Poll] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.positions: dict[int, int] = {}

    def run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"poller-{self.topic}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
                             "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(500, timeout=0.2):
                    if message.error():
                        if message.error().code() != KafkaError._PARTITION_EOF:
                            self.errors.append(str(message.error()))
                        continue
                    self.polls.append(Poll(message.partition(), message.offset(), message.value(),
                                           time.monotonic(), 0))
                    self.positions[message.partition()] = message.offset() + 1
        finally:
            consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


class QueueWorkload(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 100.0, prefix: str = "q") -> None:
        super().__init__(daemon=True, name=f"queue-{topic}")
        self.bootstrap, self.topic, self.partitions, self.rate, self.prefix = bootstrap, topic, partitions, rate, prefix
        self.sends: list[Send] = []
        self.stopping = threading.Event()
        self.poller = Poller(bootstrap, topic, partitions, read_committed=False)
        self.errors: list[str] = []  # fatal producer errors; a new producer took over after each

    def _producer(self) -> Producer:
        # librdkafka's default delivery timeout (5 minutes), longer than any fault of a schedule: a
        # producer that times messages out gives idempotence up (documented: it bumps its epoch and
        # sends the possibly written messages queued behind them again, under new sequence numbers,
        # so no broker can tell them from new ones; 60 s gave 47 duplicates in one seed at load 50).
        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "delivery.timeout.ms": DELIVERY_TIMEOUT_MS, "request.timeout.ms": 5000,
                         "topic.metadata.refresh.interval.ms": 1000, "retry.backoff.ms": 50,
                         "retry.backoff.max.ms": 200})

    def run(self) -> None:
        producer = self._producer()
        self.poller.start()
        interval, n, next_at = 1.0 / self.rate, 0, time.monotonic()
        while not self.stopping.is_set():
            try:
                now = time.monotonic()
                if now >= next_at:
                    send = Send(f"{self.prefix}{n}".encode(), n % self.partitions, now)
                    self.sends.append(send)
                    n, next_at = n + 1, next_at + interval
                    try:
                        producer.produce(self.topic, send.value, partition=send.partition,
                                         on_delivery=lambda err, msg, s=send: self._delivered(s, err, msg))
                    except BufferError as exc:
                        send.error = f"not sent: {exc}"
                    except KafkaException as exc:
                        send.error = f"not sent: {exc}"
                        raise
                producer.poll(max(0.0, min(interval, next_at - time.monotonic())))
            except KafkaException as exc:
                # A fatal error: librdkafka's idempotent producer gives up (seen: _INCONSISTENT, a retried
                # batch it could not rebuild after a long unavailability). As a crashed client: what it
                # had not acknowledged stays indeterminate, a new producer (a new producer id) goes on.
                self.errors.append(str(exc))
                producer = self._producer()
        producer.flush(90)

    @staticmethod
    def _delivered(send: Send, err, msg) -> None:
        if err is not None:
            send.error = str(err)
        else:
            send.acked, send.offset = time.monotonic(), msg.offset()

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)

    def acked(self) -> list[Send]:
        return [s for s in self.sends if s.acked is not None]


class TxnWorkload(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, seed: int, rate: float = 10.0,
                 commit_ratio: float = 0.7) -> None:
        super().__init__(daemon=True, name=f"txn-{topic}")
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.random = random.Random(seed)
        self.commit_ratio = commit_ratio
        self.txns: list[Txn] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.poller = Poller(bootstrap, topic, partitions, read_committed=True)
        self._generation = 0

    def _producer(self) -> Producer:
        self._generation += 1
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"faults-{self.topic}",
                             "transaction.timeout.ms": 60000, "linger.ms": 5, "request.timeout.ms": 5000,
                             "topic.metadata.refresh.interval.ms": 1000})
        while not self.stopping.is_set():
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                self.errors.append(f"init_transactions: {exc}")
                time.sleep(0.5)
        return producer

    def run(self) -> None:
        self.poller.start()
        producer, n = self._producer(), 0
        while not self.stopping.is_set():
            txn = Txn(n, {f"t{n}-{p}".encode(): p for p in range(self.partitions)}, time.monotonic())
            n += 1
            commit = self.random.random() < self.commit_ratio
            self.txns.append(txn)
            try:
                producer.begin_transaction()
                for value, partition in txn.values.items():
                    producer.produce(self.topic, value, partition=partition)
                if commit:
                    txn.commit_invoked = time.monotonic()
                    producer.commit_transaction(30)
                    txn.outcome = "committed"
                else:
                    producer.abort_transaction(30)
                    txn.outcome = "aborted"
            except KafkaException as exc:
                self.errors.append(f"txn {txn.id}: {exc}")
                try:
                    producer.abort_transaction(30)
                    txn.outcome = "aborted"
                except KafkaException as again:
                    self.errors.append(f"txn {txn.id} abort: {again}")
                    txn.outcome = "indeterminate"
                    producer = self._producer()  # fences the old one: its transaction is decided
            txn.ended = time.monotonic()
            self.stopping.wait(1.0 / self.rate)

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)


def read_all(bootstrap: str, topic: str, partitions: int, read_committed: bool,
             timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition from the start up to its end offset now: partition -> [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        position = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {position} of {ends} in {timeout} s")
            for message in consumer.consume(1000, timeout=0.5):
                if message.error():
                    continue
                got[message.partition()].append((message.offset(), message.value()))
                position[message.partition()] = message.offset() + 1
            for p in range(partitions):  # (read_committed skips markers and aborted data: ask the position)
                if position[p] < ends[p]:
                    tp = consumer.position([TopicPartition(topic, p)])[0]
                    if tp.offset >= 0:
                        position[p] = max(position[p], tp.offset)
        return got
    finally:
        consumer.close()
