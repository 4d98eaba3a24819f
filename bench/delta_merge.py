"""Delta MERGE of a small batch into a table under two values of one Spark SQL setting, interleaved in
one SparkSession so the ratio holds on a shared machine. By default the setting is Delta's snapshot
partitions: Delta's default (50) beside the sink's (one per local core).

    .venv/bin/python bench/delta_merge.py [--rows 200000] [--batch 5000] [--merges 6] [--master local[2]]
    .venv/bin/python bench/delta_merge.py --rows 1000 --batch 3 --merges 20 \\
        --compare spark.sql.codegen.factoryMode=FALLBACK,NO_CODEGEN --compare spark.sql.codegen.wholeStage=true,false

Each MERGE is the sink's shape: update when the source's sequence is newer, insert otherwise. Each
--compare names a runtime SQL setting and its two values (the first run of each pair with the first
values); the figures are each MERGE's wall time and the JVM's CPU time during it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_sink.session import SMALL_BATCHES, builder  # noqa: E402

SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def jvm_cpu(pid: int) -> float:
    """CPU seconds the JVM has used so far (every thread: driver, tasks, JIT, GC)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--merges", type=int, default=6, help="per setting, after one warm-up each")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--small-batches", action="store_true",
                        help="the session with spark_sink.session.SMALL_BATCHES, as `binlake sink run --small-batches`")
    parser.add_argument("--compare", action="append", metavar="KEY=A,B",
                        help="a runtime SQL setting and its two values; several go together  "
                             "[default: the snapshot partitions, 50 and the sink's]")
    args = parser.parse_args()

    spark = builder("bench-delta-merge", master=args.master, conf=SMALL_BATCHES if args.small_batches else None).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pid = spark.sparkContext._gateway.proc.pid  # (spark-submit execs the JVM)
    from delta.tables import DeltaTable

    if args.compare:
        pairs = [(key, value.split(",")) for key, value in (c.split("=", 1) for c in args.compare)]
        settings = {", ".join(f"{k}={v[i]}" for k, v in pairs): {k: v[i] for k, v in pairs} for i in (0, 1)}
    else:
        sink_value = spark.conf.get(SNAPSHOT_PARTITIONS)
        settings = {"Delta's default (50)": {SNAPSHOT_PARTITIONS: "50"},
                    f"the sink's ({sink_value})": {SNAPSHOT_PARTITIONS: sink_value}}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as work:
        path = f"{work}/table"
        spark.range(args.rows).selectExpr("id", "cast(id as string) v", "cast(0 as long) seq") \
            .write.format("delta").save(path)
        table = DeltaTable.forPath(spark, path)
        for round_ in range(args.merges + 1):
            for name, conf in settings.items():
                for key, value in conf.items():
                    spark.conf.set(key, value)
                start = round_ * args.batch // 2
                batch = spark.range(start, start + args.batch).selectExpr("id", "'x' v", f"cast({round_ + 1} as long) seq")
                began, cpu = time.monotonic(), jvm_cpu(pid)
                (table.alias("t").merge(batch.alias("s"), "t.id = s.id")
                 .whenMatchedUpdate(condition="s.seq > t.seq", set={"v": "s.v", "seq": "s.seq"})
                 .whenNotMatchedInsertAll().execute())
                if round_:  # the first round warms the JVM up
                    times[name].append((time.monotonic() - began, jvm_cpu(pid) - cpu))
    print(f"MERGE of {args.batch:,} rows into {args.rows:,} on {args.master}{' (small batches)' if args.small_batches else ''}, "
          f"{args.merges} each, interleaved "
          f"(load {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for name, figures in times.items():
        wall, cpu = ([f[i] for f in figures] for i in (0, 1))
        print(f"  {name:>40}: median {statistics.median(wall):.2f} s (max {max(wall):.2f} s), "
              f"JVM CPU median {statistics.median(cpu):.2f} s")
    (first, second) = (statistics.median(f[0] for f in figures) for figures in times.values())
    (cpu_first, cpu_second) = (statistics.median(f[1] for f in figures) for figures in times.values())
    print(f"  ratio first/second: wall {first / second:.2f}x, JVM CPU {cpu_first / cpu_second:.2f}x")
    spark.stop()


if __name__ == "__main__":
    main()
