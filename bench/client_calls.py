"""What confluent-kafka's Python calls cost the client thread, against librdkafka's in-process mock
cluster (no broker of ours involved): the produce and consume benchmarks are bound by these.

    .venv/bin/python bench/client_calls.py [--messages 500000] [--size 100]
"""

from __future__ import annotations

import argparse
import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from produce_consume import THROUGHPUT_CONSUMER, THROUGHPUT_PRODUCER

TOPIC = "calls"


def measure(name: str, count: int, run, repeat: int = 3) -> None:
    """Best of `repeat` runs, by the calling thread's CPU time."""
    cpu = wall = float("inf")
    for _ in range(repeat):
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        run()
        cpu, wall = min(cpu, time.thread_time() - cpu0), min(wall, time.perf_counter() - wall0)
    print(f"{name:<58} {count / cpu:>12,.0f} calls/s of the Python thread's CPU ({count / wall:,.0f}/s wall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    n, value = args.messages, os.urandom(args.size)
    settings = {k: v for k, v in THROUGHPUT_PRODUCER.items() if k != "delivery.report.only.error"}
    producer = Producer({"test.mock.num.brokers": 1, **settings})
    metadata = producer.list_topics(TOPIC, timeout=10)
    produce = producer.produce

    def drained(loop):
        def run():
            loop()
            producer.flush(60)  # serves the delivery callbacks, if any
        return run

    measure("produce(topic, value, partition=0)", n, drained(lambda: [produce(TOPIC, value, partition=0)
                                                                      for _ in range(n)]))
    measure("produce(topic, value, None, 0)  (positional)", n, drained(lambda: [produce(TOPIC, value, None, 0)
                                                                               for _ in range(n)]))
    measure("produce(..., on_delivery=callback)  (a callback per message)", n,
            drained(lambda: [produce(TOPIC, value, None, 0, lambda err, msg: None) for _ in range(n)]))

    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    consumer = Consumer({"bootstrap.servers": bootstrap, **THROUGHPUT_CONSUMER})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)  # the mock keeps ~5 MB

    def consume_batches():
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        got = 0
        while got < high - low:
            got += len(consumer.consume(min(10_000, high - low - got), 10))

    def poll_each():
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        for _ in range(high - low):
            consumer.poll(10)

    measure("consume(10000, timeout) batches", high - low, consume_batches)
    measure("poll() per message", high - low, poll_each)
    consumer.close()


if __name__ == "__main__":
    main()
