"""Transactional produce throughput beside plain and idempotent produce, against a real `binlake
broker` subprocess (confluent-kafka / librdkafka).

    .venv/bin/python bench/txn_produce.py [--messages N] [--size BYTES] [--per-txn 100 1000 10000] [--repeat 3]

Rows use produce_consume.py's columns. A transactional row commits every `--per-txn` messages
(begin, produce, commit: the commit waits for every batch and for the markers), so its rate includes
one coordinator round of AddPartitionsToTxn + EndTxn per transaction. `read_committed` rows consume
the transactional topic back with each isolation level, which shows what the LSO and the aborted
transaction list cost a reader. Each row runs --repeat times; the best run is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import (HEADER, THROUGHPUT_CONSUMER, THROUGHPUT_PRODUCER, BrokerUnderTest,  # noqa: E402
                             Meter, Result, _consume_until, _produce_all)

OVERRIDES = ["transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5"]


def produce(address: str, broker: BrokerUnderTest, topic: str, count: int, value: bytes, name: str,
            extra: dict, per_txn: int | None = None) -> Result:
    config = {"bootstrap.servers": address, "acks": "all", **THROUGHPUT_PRODUCER, **extra}
    failures: list = []
    config["on_delivery"] = lambda err, _msg: failures.append(err)
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    if per_txn:
        producer.init_transactions(30)
    with Meter(broker) as meter:
        if per_txn:
            for start in range(0, count, per_txn):
                producer.begin_transaction()
                _produce_all(producer, topic, min(per_txn, count - start), value)
                producer.commit_transaction(120)
        else:
            _produce_all(producer, topic, count, value)
        left = producer.flush(120)
    if left or failures:
        raise SystemExit(f"{name}: {left} undelivered, {len(failures)} failed ({failures[:1]})")
    settings = {"acks": "all", **extra, **({"messages per transaction": per_txn} if per_txn else {})}
    return meter.result(name, count, len(value), settings=settings)


def consume(address: str, broker: BrokerUnderTest, topic: str, count: int, size: int, isolation: str) -> Result:
    consumer = Consumer({**THROUGHPUT_CONSUMER, "bootstrap.servers": address, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    with Meter(broker) as meter:
        _consume_until(consumer, count, isolation)
    consumer.close()
    return meter.result(f"consume {isolation}", count, size)


def best(runs: list[Result]) -> Result:
    return min(runs, key=lambda r: r.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--per-txn", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    value = os.urandom(args.size // 2).hex().encode()[: args.size].ljust(args.size, b"x")

    with tempfile.TemporaryDirectory(prefix="binlake-bench-") as tmp:
        broker = BrokerUnderTest(os.path.join(tmp, "data"), OVERRIDES)
        try:
            rows: list[Result] = []
            runs = {"plain": {}, "idempotent": {"enable.idempotence": True}}
            for name, extra in runs.items():
                rows.append(best([produce(broker.address, broker, f"{name}-{i}", args.messages, value, name, extra)
                                  for i in range(args.repeat)]))
            for per_txn in args.per_txn:
                name = f"transactional {per_txn}/txn"
                rows.append(best([produce(broker.address, broker, f"txn-{per_txn}-{i}", args.messages, value, name,
                                          {"transactional.id": f"bench-{per_txn}-{i}"}, per_txn)
                                  for i in range(args.repeat)]))
            topic = f"txn-{args.per_txn[0]}-0"  # the most markers per message
            for isolation in ("read_uncommitted", "read_committed"):
                rows.append(best([consume(broker.address, broker, topic, args.messages, args.size, isolation)
                                  for _ in range(args.repeat)]))
        finally:
            broker.stop()
    print(HEADER)
    for row in rows:
        print(row.row())
    plain = rows[0].messages / rows[0].seconds
    for row in rows[2:-2]:
        print(f"{row.name}: {row.messages / row.seconds / plain:.0%} of plain produce")


if __name__ == "__main__":
    main()
