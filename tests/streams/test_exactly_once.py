"""faust apps run by `binlake streams worker` are exactly once with many source partitions per
worker: several workers share 6 partitions of inputs written in transactions (as the connector
writes them), are SIGKILLed and restarted at random (and the broker once), and a read_committed
reader then finds every input's output exactly once, and the table's changelog equal to the fold
of the inputs."""

from __future__ import annotations

import collections
import random
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from brokerproc import read_to_end
from faust_workers import Worker

CONFIG = {"transaction.state.log.num.partitions": "5", "offsets.topic.num.partitions": "5",
          "group.initial.rebalance.delay.ms": "0"}
PARTITIONS = 6

APP = r'''
import faust

app = faust.App("eos-check", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions={partitions}, broker_session_timeout=6, broker_heartbeat_interval=1,
                broker_commit_interval=0.5, consumer_auto_offset_reset="earliest", web_enabled=False)
source = app.topic("eos-in", value_serializer="raw", key_serializer="raw", partitions={partitions})
out = app.topic("eos-out", value_serializer="raw", key_serializer="raw", partitions=3)  # not consumed here
counts = app.Table("eos-counts", default=int, partitions={partitions})


@app.agent(source, concurrency=2)
async def count(stream):
    async for event in stream.events():
        key = event.key.decode()  # (the table's keys go through its JSON changelog)
        counts[key] += 1
        await out.send(key=event.key, value=event.value + b"|" + str(counts[key]).encode())
'''


def feed(address: str, start: int, count: int, keys: int, per_transaction: int = 7) -> None:
    """Inputs written in transactions, as the exactly-once connector writes change events: each
    partition then holds a control record after every transaction, a gap in its offsets."""
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, "transactional.id": "eos-feeder"})
    producer.init_transactions(30)
    for first in range(start, start + count, per_transaction):
        producer.begin_transaction()
        for i in range(first, min(first + per_transaction, start + count)):
            producer.produce("eos-in", value=b"e%06d" % i, key=b"k%03d" % (i % keys))
        producer.commit_transaction(30)


def outputs(address: str) -> list[bytes]:
    return read_to_end(address, {"eos-out": 3}, "read_committed")


def run(broker_factory, tmp_path, kills: int, events: int) -> None:
    broker = broker_factory(config=CONFIG)
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.create_topics([NewTopic("eos-in", PARTITIONS, 1), NewTopic("eos-out", 3, 1)]).values():
        future.result(30)
    (tmp_path / "eos_app.py").write_text(APP.format(address=broker.address, partitions=PARTITIONS))
    keys, rng = 50, random.Random(kills)
    workers = [Worker(tmp_path, n, "eos_app:app").start() for n in range(3)]
    fed = 0
    try:
        for kill in range(kills):
            feed(broker.address, fed, events // kills, keys)
            fed += events // kills
            time.sleep(rng.uniform(1, 4))
            victim = rng.choice(workers)
            victim.kill()
            if kill == kills // 2:
                broker.kill()
                broker.start()
            victim.start()
        deadline = time.monotonic() + 180
        while len(got := outputs(broker.address)) < fed:
            assert time.monotonic() < deadline, f"only {len(got)} of {fed} outputs after the kills"
            time.sleep(1)
        time.sleep(3)  # anything late would be a duplicate
    finally:
        for worker in workers:
            worker.kill()
    got = outputs(broker.address)
    values = collections.Counter(v.split(b"|")[0] for v in got)
    duplicates = {v: n for v, n in values.items() if n > 1}
    missing = {b"e%06d" % i for i in range(fed)} - set(values)
    assert not duplicates and not missing, f"{len(duplicates)} duplicated, {len(missing)} missing of {fed}"
    by_key = collections.defaultdict(list)
    for v in got:
        value, count = v.split(b"|")
        by_key[int(value[1:]) % keys].append(int(count))
    wrong = {k: sorted(c) for k, c in by_key.items() if sorted(c) != list(range(1, len(c) + 1))}
    assert not wrong, f"the table's running counts are not 1..n for {len(wrong)} keys, e.g. {list(wrong.items())[:2]}"


def test_exactly_once_across_worker_kills_and_a_broker_kill(broker_factory, tmp_path):
    run(broker_factory, tmp_path, kills=3, events=1800)  # the broker dies at the second kill; 20 kills: slow


@pytest.mark.slow  # the Apache Kafka variant of the test above: a minute, too long for the default suite
@pytest.mark.kafka
def test_exactly_once_on_apache_kafka_across_worker_kills_and_a_broker_kill(apache_kafka_factory, tmp_path):
    run(apache_kafka_factory, tmp_path, kills=5, events=3000)


@pytest.mark.slow
def test_exactly_once_across_twenty_worker_kills(broker_factory, tmp_path):
    run(broker_factory, tmp_path, kills=20, events=12000)
