"""Delta MERGE of a small batch into a table, with Delta's default snapshot partitions (50) and with
the sink's setting (one per local core), interleaved in one SparkSession so the ratio holds on a
shared machine.

    .venv/bin/python bench/delta_merge.py [--rows 200000] [--batch 5000] [--merges 6] [--master local[2]]

Each MERGE is the sink's shape: update when the source's sequence is newer, insert otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_sink.session import builder  # noqa: E402

SETTING = "spark.databricks.delta.snapshotPartitions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--merges", type=int, default=6, help="per setting, after one warm-up each")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    spark = builder("bench-delta-merge", master=args.master).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from delta.tables import DeltaTable

    sink_value = spark.conf.get(SETTING)
    settings = {"Delta's default (50)": "50", f"the sink's ({sink_value})": sink_value}
    times: dict[str, list[float]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as work:
        path = f"{work}/table"
        spark.range(args.rows).selectExpr("id", "cast(id as string) v", "cast(0 as long) seq") \
            .write.format("delta").save(path)
        table = DeltaTable.forPath(spark, path)
        for round_ in range(args.merges + 1):
            for name, value in settings.items():
                spark.conf.set(SETTING, value)
                start = round_ * args.batch // 2
                batch = spark.range(start, start + args.batch).selectExpr("id", "'x' v", f"cast({round_ + 1} as long) seq")
                began = time.monotonic()
                (table.alias("t").merge(batch.alias("s"), "t.id = s.id")
                 .whenMatchedUpdate(condition="s.seq > t.seq", set={"v": "s.v", "seq": "s.seq"})
                 .whenNotMatchedInsertAll().execute())
                if round_:  # the first round warms the JVM up
                    times[name].append(time.monotonic() - began)
    print(f"MERGE of {args.batch:,} rows into {args.rows:,} on {args.master}, {args.merges} each, interleaved:")
    for name, seconds in times.items():
        print(f"  snapshot partitions {name:>22}: median {statistics.median(seconds):.2f} s, "
              f"max {max(seconds):.2f} s")
    default, sink = (statistics.median(s) for s in times.values())
    print(f"  ratio: the sink's setting is {default / sink:.1f}x faster")
    spark.stop()


if __name__ == "__main__":
    main()
