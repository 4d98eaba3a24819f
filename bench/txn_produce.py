"""Transactional produce throughput beside plain and idempotent produce, against a real `binlake
broker` subprocess (confluent-kafka / librdkafka).

    .venv/bin/python bench/txn_produce.py [--messages N] [--size BYTES] [--per-txn 100 1000 10000] [--repeat 3]
                                          [--set linger.ms=0 ...]
    .venv/bin/python bench/txn_produce.py --in-process [--per-txn 100 1000 10000] [--transactions 1000]
    .venv/bin/python bench/txn_produce.py --timeline [--per-txn 1000] [--transactions 1000]
    .venv/bin/python bench/txn_produce.py --client-ceiling [--per-txn 1000]

Rows use produce_consume.py's columns. A transactional row commits every `--per-txn` messages
(begin, produce, commit: the commit waits for every batch and for the EndTxn answer), so its rate
includes one coordinator round of AddPartitionsToTxn + EndTxn per transaction; below the table each
such row is split per transaction into the produce() calls, the commit and the broker CPU.
`read_committed` rows consume the transactional topic back with each isolation level, which shows
what the LSO and the aborted transaction list cost a reader. `--set` overrides producer settings in
every produce row. Each row runs --repeat times; the best run is reported.

`--in-process` measures the broker alone, as bench/request_path.py does (no sockets, thread CPU
time): each request of a transaction as librdkafka sends them (AddPartitionsToTxn v0, a transactional
Produce v9, EndTxn v1), and the markers EndTxn leaves for right after its response.

`--timeline` splits each transaction's wall time between the client and the broker: the broker runs
with its connection's reads and response writes timestamped (the same monotonic clock as this
process), so each of the three requests shows when it arrived and when its answer left, and the
gaps in between are the client's (librdkafka's threads and timers).

`--client-ceiling` runs the plain and transactional rows against librdkafka's own in-process mock
cluster instead (a C broker that costs next to nothing): what the client allows at best.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import (HEADER, THROUGHPUT_CONSUMER, THROUGHPUT_PRODUCER, BrokerUnderTest,  # noqa: E402
                             Meter, Result, _consume_until, _produce_all)
from request_path import TOPIC, Phases, roundtrip  # noqa: E402

from logcore.broker import Broker  # noqa: E402
from logcore.protocol.codec import ApiKey, build, encode_request, request_class  # noqa: E402
from logcore.protocol.connection import ServerConnection  # noqa: E402
from logcore.storage.batch import TRANSACTIONAL  # noqa: E402
from logcore.storage.records import encode_batch  # noqa: E402

OVERRIDES = ["transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5"]


def produce(address: str | None, broker: BrokerUnderTest | None, topic: str, count: int, value: bytes, name: str,
            extra: dict, per_txn: int | None = None) -> Result:
    """`address` None: librdkafka's mock cluster."""
    server = {"bootstrap.servers": address} if address else {"test.mock.num.brokers": 1}
    config = {**server, "acks": "all", **THROUGHPUT_PRODUCER, **extra}
    failures: list = []
    config["on_delivery"] = lambda err, _msg: failures.append(err)
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    if per_txn:
        producer.init_transactions(30)
    phases: list[tuple[float, float]] = []  # per transaction: produce() calls, commit
    with Meter(broker) as meter:
        if per_txn:
            for start in range(0, count, per_txn):
                began = time.perf_counter()
                producer.begin_transaction()
                _produce_all(producer, topic, min(per_txn, count - start), value)
                produced = time.perf_counter()
                producer.commit_transaction(120)
                phases.append((produced - began, time.perf_counter() - produced))
        else:
            _produce_all(producer, topic, count, value)
        left = producer.flush(120)
    if left or failures:
        raise SystemExit(f"{name}: {left} undelivered, {len(failures)} failed ({failures[:1]})")
    settings = {"acks": "all", **extra, **({"messages per transaction": per_txn} if per_txn else {})}
    if phases:
        settings["median ms per transaction"] = {
            "produce() calls": 1000 * statistics.median(p for p, _ in phases),
            "commit": 1000 * statistics.median(c for _, c in phases)}
        if meter.broker_cpu is not None:
            settings["median ms per transaction"]["broker CPU (mean)"] = 1000 * meter.broker_cpu / len(phases)
    return meter.result(name, count, len(value), settings=settings)


def consume(address: str, broker: BrokerUnderTest, topic: str, count: int, size: int, isolation: str) -> Result:
    consumer = Consumer({**THROUGHPUT_CONSUMER, "bootstrap.servers": address, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    with Meter(broker) as meter:
        _consume_until(consumer, count, isolation)
    consumer.close()
    return meter.result(f"consume {isolation}", count, size)


async def in_process(transactions: int, per_txn: int, value: bytes) -> list[str]:
    tmp = tempfile.mkdtemp(prefix="binlake-txnpath-")
    broker = Broker(os.path.join(tmp, "data"), port=0)
    try:
        await broker.start()
        await broker.topic_admin.create(TOPIC, 1)
        conn = ServerConnection(broker.server.supported, 1 << 30)
        frame = lambda api_key, version, data: encode_request(build(request_class(api_key, version), data), 1)  # noqa: E731
        await roundtrip(broker, conn, frame(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "bench",
                                                                        "transaction_timeout": 60000}), Phases())
        meta = broker.transactions.txns["bench"]
        add = frame(ApiKey.ADD_PARTITIONS_TO_TXN, 0, {
            "v3_and_below_transactional_id": "bench", "v3_and_below_producer_id": meta.producer_id,
            "v3_and_below_producer_epoch": meta.producer_epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]})
        end = frame(ApiKey.END_TXN, 1, {"transactional_id": "bench", "producer_id": meta.producer_id,
                                        "producer_epoch": meta.producer_epoch, "committed": True})
        produces = [frame(ApiKey.PRODUCE, 9, {"transactional_id": "bench", "acks": -1, "timeout": 30000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": encode_batch(
                [(None, value)] * per_txn, int(time.time() * 1000), producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch, base_sequence=i * per_txn, attributes=TRANSACTIONAL)}]}]})
            for i in range(transactions)]
        phases = {"AddPartitionsToTxn": Phases(), "Produce": Phases(), "EndTxn": Phases()}
        markers = Phases()
        for produce_frame in produces:
            await roundtrip(broker, conn, add, phases["AddPartitionsToTxn"])
            await roundtrip(broker, conn, produce_frame, phases["Produce"])
            await roundtrip(broker, conn, end, phases["EndTxn"])
            started = time.thread_time()
            for _ in range(2):  # the loop iterations that would write the response, then the markers
                await asyncio.sleep(0)
            markers.handle += time.thread_time() - started
        per = lambda seconds: f"{1e6 * seconds / transactions:7.1f} µs"  # noqa: E731
        lines = [f"{name:<18} parse {per(p.parse)}  handle {per(p.handle)}  encode {per(p.encode)}"
                 for name, p in phases.items()]
        lines.append(f"{'markers after':<18} {per(markers.handle)} (EndTxn's markers and completion, after its response)")
        total = sum(p.parse + p.handle + p.encode for p in phases.values()) + markers.handle
        lines.append(f"broker CPU per transaction of {per_txn} messages: {per(total)}, in process")
        return lines
    finally:
        await broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# A broker whose connections timestamp each read and each response write (a bench probe, not a feature).
TIMELINE_BROKER = """
import atexit, json, os, sys, time
import logcore.server as server
events = []
atexit.register(lambda: json.dump(events, open(os.environ["TIMELINE"], "w")))
received, flush = server._Connection.data_received, server._Connection._flush
def data_received(self, data):
    events.append(("read", time.perf_counter()))
    received(self, data)
async def _flush(self):
    if self.unsent:
        events.append(("write", time.perf_counter()))
    await flush(self)
server._Connection.data_received, server._Connection._flush = data_received, _flush
from binlake.cli import main
main(sys.argv[1:])
"""
STEPS = ["produce() calls", "client: begin to AddPartitionsToTxn arrival", "broker: AddPartitionsToTxn",
         "client: to Produce", "broker: Produce", "client: to EndTxn", "broker: EndTxn", "client: to commit return"]


def timeline(transactions: int, per_txn: int, value: bytes) -> list[str]:
    tmp = tempfile.mkdtemp(prefix="binlake-timeline-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    args = [sys.executable, "-c", TIMELINE_BROKER, "broker", "--data-dir", os.path.join(tmp, "data"), "--listen",
            address, *(a for o in OVERRIDES for a in ("--override", o))]
    proc = subprocess.Popen(args, env={**os.environ, "TIMELINE": os.path.join(tmp, "events.json")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        producer = Producer({"bootstrap.servers": address, "acks": "all", **THROUGHPUT_PRODUCER,
                             "transactional.id": "timeline", "on_delivery": lambda err, _msg: None})
        producer.list_topics("timeline", timeout=30)
        producer.init_transactions(30)
        marks = []
        for i in range(20 + transactions):  # the first 20 warm up
            began = time.perf_counter()
            producer.begin_transaction()
            _produce_all(producer, "timeline", per_txn, value)
            produced = time.perf_counter()
            producer.commit_transaction(30)
            if i >= 20:
                marks.append((began, produced, time.perf_counter()))
    finally:
        proc.terminate()
        proc.wait(30)
    with open(os.path.join(tmp, "events.json")) as f:
        events = json.load(f)
    shutil.rmtree(tmp, ignore_errors=True)
    steps: list[list[float]] = []
    for began, produced, committed in marks:
        points, waiting = [began], True  # request arrival (first read after the last write), response write
        for kind, at in events:
            if began <= at <= committed and (kind == "read") == waiting:
                points.append(at)
                waiting = not waiting
        if len(points) == 7:  # exactly AddPartitionsToTxn, Produce, EndTxn: nothing else in between
            gaps = [b - a for a, b in zip(points, points[1:] + [committed])]
            steps.append([produced - began, *gaps])
    medians = [1000 * statistics.median(s[i] for s in steps) for i in range(len(STEPS))]
    lines = [f"median ms per transaction of {per_txn} messages over {len(steps)} transactions "
             f"(steps overlap: the produce() calls run while the first request waits)"]
    lines += [f"  {name:<46} {ms:6.2f}" for name, ms in zip(STEPS, medians)]
    lines.append(f"  {'whole transaction (median)':<46} {1000 * statistics.median(c - b for b, _, c in marks):6.2f}")
    return lines


def best(runs: list[Result]) -> Result:
    return min(runs, key=lambda r: r.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--per-txn", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="producer settings over the throughput ones, e.g. linger.ms=0 batch.num.messages=1000")
    parser.add_argument("--in-process", action="store_true", help="broker CPU per request of a transaction, no sockets")
    parser.add_argument("--timeline", action="store_true", help="split each transaction between client and broker")
    parser.add_argument("--client-ceiling", action="store_true", help="against librdkafka's mock cluster, no binlake")
    parser.add_argument("--transactions", type=int, default=1000, help="with --in-process or --timeline")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    value = os.urandom(args.size // 2).hex().encode()[: args.size].ljust(args.size, b"x")
    if args.timeline:
        for per_txn in args.per_txn:
            print("\n".join(timeline(args.transactions, per_txn, value)))
        return
    if args.in_process:
        for per_txn in args.per_txn:
            print("\n".join(asyncio.run(in_process(args.transactions, per_txn, value))))
        return
    if args.client_ceiling:
        rows = [best([produce(None, None, f"plain-{i}", args.messages, value, "mock plain", overrides)
                      for i in range(args.repeat)])]
        for per_txn in args.per_txn:
            rows.append(best([produce(None, None, f"txn-{per_txn}-{i}", args.messages, value,
                                      f"mock transactional {per_txn}/txn",
                                      {**overrides, "transactional.id": f"mock-{per_txn}-{i}"}, per_txn)
                              for i in range(args.repeat)]))
        report(rows, rows[1:])
        return

    with tempfile.TemporaryDirectory(prefix="binlake-bench-") as tmp:
        broker = BrokerUnderTest(os.path.join(tmp, "data"), OVERRIDES)
        try:
            rows: list[Result] = []
            runs = {"plain": {}, "idempotent": {"enable.idempotence": True}}
            for name, extra in runs.items():
                rows.append(best([produce(broker.address, broker, f"{name}-{i}", args.messages, value, name,
                                          {**overrides, **extra})
                                  for i in range(args.repeat)]))
            for per_txn in args.per_txn:
                name = f"transactional {per_txn}/txn"
                rows.append(best([produce(broker.address, broker, f"txn-{per_txn}-{i}", args.messages, value, name,
                                          {**overrides, "transactional.id": f"bench-{per_txn}-{i}"}, per_txn)
                                  for i in range(args.repeat)]))
            topic = f"txn-{args.per_txn[0]}-0"  # the most markers per message
            for isolation in ("read_uncommitted", "read_committed"):
                rows.append(best([consume(broker.address, broker, topic, args.messages, args.size, isolation)
                                  for _ in range(args.repeat)]))
        finally:
            broker.stop()
    report(rows, rows[2:-2])


def report(rows: list[Result], transactional: list[Result]) -> None:
    """The table, then each transactional row against the first (plain) one."""
    print(HEADER)
    for row in rows:
        print(row.row())
    plain = rows[0].messages / rows[0].seconds
    for row in transactional:
        phases = ", ".join(f"{k} {v:.2f}" for k, v in row.settings["median ms per transaction"].items())
        print(f"{row.name}: {row.messages / row.seconds / plain:.0%} of plain produce; ms per transaction: {phases}")


if __name__ == "__main__":
    main()
