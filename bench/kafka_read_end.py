"""Spark's Kafka source reading a small batch of a transactional topic, read_committed, with the
broker's empty-fetch wait at Kafka's default (fetch.max.wait.ms 500) beside the sink's
(spark_sink/job.py FETCH_MAX_WAIT_MS), interleaved in one SparkSession.

    .venv/bin/python bench/kafka_read_end.py [--partitions 12] [--records 2400] [--rounds 5] [--master local[2]]

Each round commits one transaction of --records records spread over --partitions partitions of a
`binlake broker` subprocess, then reads the topic whole with `spark.read.format("kafka")` under
each setting and times the read. A task reads its partition up to an end offset that is the
transaction's commit marker, which a consumer never returns as a record: the task fetches past
it, and the broker holds that empty fetch for fetch.max.wait.ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from spark_sink.job import FETCH_MAX_WAIT_MS  # noqa: E402
from spark_sink.session import builder  # noqa: E402
from testkit.brokerproc import BrokerProcess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--records", type=int, default=2400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    waits = {"Kafka's default (500 ms)": None, f"the sink's ({FETCH_MAX_WAIT_MS} ms)": FETCH_MAX_WAIT_MS}
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(Path(work) / "broker").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.address})
            admin.create_topics([NewTopic("changes", args.partitions, 1)])["changes"].result()
            producer = Producer({"bootstrap.servers": broker.address, "transactional.id": "bench"})
            producer.init_transactions()
            spark = builder(master=args.master, quiet=True).getOrCreate()
            seconds: dict[str, list[float]] = {name: [] for name in waits}
            for round_ in range(args.rounds):
                producer.begin_transaction()
                for i in range(args.records):
                    producer.produce("changes", value=b"v" * 150, partition=i % args.partitions)
                producer.commit_transaction()
                for name, wait in waits.items():
                    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.address)
                              .option("subscribe", "changes").option("kafka.isolation.level", "read_committed")
                              .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
                    if wait is not None:
                        reader = reader.option("kafka.fetch.max.wait.ms", wait)
                    started = time.monotonic()
                    count = reader.load().count()
                    if round_:  # (the first round warms the JVM up)
                        seconds[name].append(time.monotonic() - started)
                    print(f"round {round_}: {name}: {count:,} records in {time.monotonic() - started:.2f} s", flush=True)
            print(f"\n{args.partitions} partitions, one transaction of {args.records:,} records a round, {args.master}; "
                  f"median of {args.rounds - 1} warm rounds:")
            for name, values in seconds.items():
                print(f"  {name}: {statistics.median(values):.2f} s")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
