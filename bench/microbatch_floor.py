"""The floor under any Spark Structured Streaming sink on this machine: write→visible latency of a
micro-batch on Spark's Kafka source whose foreachBatch does nothing, or only counts its records, at
trigger 0 (the next batch as soon as one ends) and 500 ms (binlake's sink in `bench/sink.py --versus`).

    .venv/bin/python bench/microbatch_floor.py [--rate 1000] [--seconds 30] [--master local[2]]

The feed of `bench/sink.py --versus`'s latency row: three tables' change topics of 4 partitions,
--rate changes/s (the connector's JSON envelope, 450 bytes a value), one new key of `orders` every
100 ms a probe. The topics are read as binlake's sink reads them (read_committed, its
fetch.max.wait.ms). A probe counts as visible when the foreachBatch of the batch holding its offset
returns, the earliest a sink writing in that batch could show it: the difference from
`bench/sink.py --versus` is what the sink's own work adds, not how it is timed. p50/p99 after 10 s of
warm-up, each setting in its own query in one warm local SparkSession.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/sink.py's feed

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from sink import TABLES, Changes, Feeder, end_to_end, p99, topics  # noqa: E402

from spark_sink.job import FETCH_MAX_WAIT_MS  # noqa: E402
from spark_sink.session import builder  # noqa: E402
from testkit.brokerproc import BrokerProcess  # noqa: E402

PARTITIONS = 4
WARM_UP_S = 10
BODIES = {"nothing": lambda df: None, "count": lambda df: df.count()}
TRIGGERS = {"0": "0 seconds", "500ms": "500 milliseconds"}


def batch_ends(checkpoint: Path, topic: str) -> dict[int, dict[int, int]]:
    """Each batch's end offset of each partition of `topic`, from the query's offset log."""
    ends = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            source = json.loads(path.read_text().splitlines()[2])  # (version, batch metadata, the source's offsets)
            ends[int(path.name)] = {int(p): end for p, end in source.get(topic, {}).items()}
    return ends


def visible(placed: dict[int, tuple[int, int]], ends: dict[int, dict[int, int]], done: dict[int, float]) -> dict[int, float]:
    """When each probe became visible: the end of the first batch that read past its offset."""
    seen = {}
    for key, (partition, offset) in placed.items():
        batch = next((b for b in sorted(ends) if ends[b].get(partition, 0) > offset and b in done), None)
        if batch is not None:
            seen[key] = done[batch]
    return seen


def floor(spark, address: str, work: Path, body: str, trigger: str, rate: int, seconds: int) -> list[float]:
    done: dict[int, float] = {}

    def each(df, batch_id: int) -> None:
        BODIES[body](df)
        done[batch_id] = time.time()
    checkpoint = work / f"ck-{body}-{trigger}"
    feeder = Feeder(address, Changes(50_000, seed=7, tables=TABLES), rate, probes=True)
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", address)
             .option("kafka.isolation.level", "read_committed").option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
             .option("startingOffsets", "latest").option("subscribe", ",".join(topics())).load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=TRIGGERS[trigger]).start())
    while not done:  # (the first batch: the source's start offsets)
        time.sleep(0.1)
    feeder.start()
    time.sleep(WARM_UP_S + seconds)
    feeder.stop()
    deadline = time.monotonic() + 30
    while len(visible(feeder.placed, batch_ends(checkpoint, topics()[0]), done)) < len(feeder.probes):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    query.stop()
    seen = visible(feeder.placed, batch_ends(checkpoint, topics()[0]), done)
    values, lost = end_to_end(feeder.probes, seen, WARM_UP_S)
    batches = len(done)
    print(f"  foreachBatch {body:8} trigger {trigger:6} {len(values)} probes over {batches} batches: write→visible "
          f"p50 {statistics.median(values):.2f} s, p99 {p99(values):.2f} s, max {max(values):.2f} s"
          + (f"; {lost} not seen" if lost else "") + f" (load {os.getloadavg()[0]:.2f})", flush=True)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = BrokerProcess(work / "broker").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.address})
            for topic in topics():
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            # Every batch's offsets kept (Spark keeps 100), to place the probes of a run of hundreds of batches.
            spark = builder("binlake-floor", master=args.master,
                            conf={"spark.sql.streaming.minBatchesToRetain": "100000"}).getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; Spark "
                  f"{args.master}, broker on this machine; {args.rate:,} changes/s", flush=True)
            for trigger in TRIGGERS:
                for body in BODIES:
                    floor(spark, broker.address, work, body, trigger, args.rate, args.seconds)
            spark.stop()
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
