"""Is the broker still whole? Asked every so many fuzzed frames, with a real client (aiokafka).

Before the fuzzing, BASELINE records are produced with acks=all. Each check then asks that the
broker process is alive, that one more record goes in and comes back (a produce/consume round
trip), that the baseline records read back unchanged in order from offset 0, and that the broker's
resident memory stays within RSS_FACTOR of what it held idle after the first check.

Mutated admin requests are sometimes valid ones: a CreatePartitions whose count became 8,194 makes
8,194 partitions, as it would on Kafka, and the heap they leave behind when the topic is deleted
again stays fragmented. That is state the requests asked for, not a leak, so the memory bound
grows by PARTITION_BYTES for each partition the broker's log says it created since the first check
(a partition costs the broker about 6 KiB while it lives; the allowance is generous, a leak is not).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from ..brokerproc import BrokerProcess

BASELINE = 1000
RSS_FACTOR = 2.0
PARTITION_BYTES = 16 * 1024
CREATED = re.compile(r"created topic \S+ with (\d+) partition|topic \S+ now has (\d+) partition")
CHECK_TIMEOUT_S = 60


class FuzzFailure(AssertionError):
    """The broker died, lost or changed acknowledged records, stopped serving, or grew too big."""


@dataclass(frozen=True)
class Health:
    rss_bytes: int
    round_trip_ms: float
    partitions: int  # created since the broker started, by its log (internal topics included)


class HealthCheck:
    def __init__(self, broker: BrokerProcess, topic: str = "fuzz-health-check") -> None:
        self.broker = broker
        self.partition = TopicPartition(topic, 0)
        self.baseline = [f"acknowledged before fuzzing #{i}".encode() for i in range(BASELINE)]
        self.checks = 0
        self.idle_rss = 0
        self.idle_partitions = 0

    async def start(self) -> Health:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.broker.address, acks="all", enable_idempotence=True)
        await self.producer.start()
        futures = [await self.producer.send(self.partition.topic, value, partition=0) for value in self.baseline]
        offsets = [(await f).offset for f in futures]
        if offsets != list(range(BASELINE)):
            raise FuzzFailure(f"the baseline should sit at offsets 0..{BASELINE - 1}, got {offsets[:3]}...")
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.broker.address, enable_auto_commit=False)
        await self.consumer.start()
        self.consumer.assign([self.partition])
        first = await self.check()
        self.idle_rss, self.idle_partitions = first.rss_bytes, first.partitions
        return first

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.producer.stop()

    async def check(self) -> Health:
        self._alive()
        try:
            return await asyncio.wait_for(self._check(), CHECK_TIMEOUT_S)
        except TimeoutError:
            self._alive()
            raise FuzzFailure(f"health check {self.checks} took more than {CHECK_TIMEOUT_S} s") from None

    async def _check(self) -> Health:
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.checks += 1
        value = f"health check #{self.checks}".encode()
        sent = await self.producer.send_and_wait(self.partition.topic, value, partition=0)
        self.consumer.seek(self.partition, 0)
        read: list[bytes] = []
        while len(read) <= sent.offset:
            batches = await self.consumer.getmany(self.partition, timeout_ms=1000)
            read += [m.value for m in batches.get(self.partition, []) if m.offset <= sent.offset]
        round_trip_ms = (loop.time() - started) * 1000
        if read[:BASELINE] != self.baseline:
            changed = next(i for i, (a, b) in enumerate(zip(read, self.baseline)) if a != b)
            raise FuzzFailure(f"acknowledged record at offset {changed} changed: {read[changed]!r}")
        if read[-1] != value:
            raise FuzzFailure(f"the round trip read back {read[-1]!r} at offset {sent.offset}, not {value!r}")
        partitions = sum(int(a or b) for a, b in CREATED.findall(self.broker.log()))
        rss = self.broker.rss_bytes()
        allowed = RSS_FACTOR * self.idle_rss + max(partitions - self.idle_partitions, 0) * PARTITION_BYTES
        if self.idle_rss and rss > allowed:
            raise FuzzFailure(f"broker RSS {rss / 2**20:.0f} MiB is more than {RSS_FACTOR}× its idle "
                              f"{self.idle_rss / 2**20:.0f} MiB (+ {PARTITION_BYTES // 1024} KiB for each of "
                              f"{partitions - self.idle_partitions} partitions created since)")
        return Health(rss, round_trip_ms, partitions)

    def _alive(self) -> None:
        if self.broker.proc.poll() is not None:
            raise FuzzFailure(f"the broker died (exit code {self.broker.proc.returncode}); its log ends:\n"
                              f"{self.broker.log()[-3000:]}")
