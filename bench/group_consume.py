"""Consumer-group throughput: N group members (one process each, confluent-kafka) share a topic and
commit after every batch, against a real `binlake broker` subprocess.

    .venv/bin/python bench/group_consume.py [--messages N] [--size BYTES] [--partitions P] [--members 1 2 3]

Rows use produce_consume.py's columns, whose wall time and msgs/s include process start and the
group's join. `join s` is how long the group took from the members' start to the first message
(process start and initial rebalance delay included), `steady/s` the rate after it, `mbr s` the
members' CPU seconds (`cli s` is only the parent's), `commits` the OffsetCommits sent. The run fails
unless the group's final committed offsets cover every message.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import time

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import (HEADER, THROUGHPUT_CONSUMER, THROUGHPUT_PRODUCER, BrokerUnderTest,  # noqa: E402
                             Meter, _produce_all)

INITIAL_DELAY_MS = 500


def member(address: str, topic: str, group: str, total: int, consumed, commits, first_at) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException  # in the child: librdkafka threads
                                                                       # do not survive a fork

    consumer = Consumer({**THROUGHPUT_CONSUMER, "bootstrap.servers": address, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    while consumed.value < total:
        batch = consumer.consume(10_000, 0.2)
        if not batch:
            continue
        with first_at.get_lock():
            if first_at.value == 0:
                first_at.value = time.time()
        consumer.commit(asynchronous=True)  # at-least-once: after the batch is handled
        with consumed.get_lock():
            consumed.value += len(batch)
        with commits.get_lock():
            commits.value += 1
    try:
        consumer.commit(asynchronous=False)  # waits for the asynchronous ones before it
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing new since the last commit
            raise
    consumer.close()


def run(address: str, broker: BrokerUnderTest, topic: str, partitions: int, total: int, size: int,
        members: int) -> str:
    group = f"bench-{members}"
    ctx = multiprocessing.get_context("spawn")
    consumed, commits, first_at = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=member, args=(address, topic, group, total, consumed, commits, first_at))
             for _ in range(members)]
    started, children_cpu = time.time(), _children_cpu()
    with Meter(broker) as meter:
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
    ended, members_cpu = time.time(), _children_cpu() - children_cpu
    if any(p.exitcode for p in procs):
        raise SystemExit(f"{group}: a member failed")
    admin = AdminClient({"bootstrap.servers": address})
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    committed = sum(tp.offset for tp in found.topic_partitions if tp.topic == topic)
    if committed != total:
        raise SystemExit(f"{group}: committed offsets cover {committed} of {total} messages")
    result = meter.result(f"confluent group x{members}", total, size)
    steady = total / (ended - first_at.value)
    return f"{result.row()} {first_at.value - started:6.2f} {steady:>10,.0f} {members_cpu:6.1f} {commits.value:>7}"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # finished member processes
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="binlake-bench-") as tmp:
        broker = BrokerUnderTest(os.path.join(tmp, "data"),
                                 [f"group.initial.rebalance.delay.ms={INITIAL_DELAY_MS}"])
        try:
            address, topic = broker.address, "group-bench"
            admin = AdminClient({"bootstrap.servers": address})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result()
            producer = Producer({"bootstrap.servers": address, **THROUGHPUT_PRODUCER})
            _produce_all(producer, topic, args.messages, b"x" * args.size, args.partitions)
            if producer.flush(120):
                raise SystemExit("producing the benchmark data failed")
            print(f"{HEADER} {'join s':>6} {'steady/s':>10} {'mbr s':>6} {'commits':>7}")
            for members in args.members:
                print(run(address, broker, topic, args.partitions, args.messages, args.size, members), flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
