"""A SparkSession with Spark's Kafka source, spark-avro, Delta Lake and the PostgreSQL driver on its class path.

The jars come from Maven Central through `spark_sink/jars/pom.xml`: `make spark-jars` copies them
into the jar cache (BINLAKE_SPARK_JARS, default `.cache/spark-jars` in the checkout). Those pyspark
already ships (Scala, Hadoop, Jackson, Parquet, ...) are left out, so one copy of each class is
loaded. They go in `spark.jars`, set before the session starts (not `spark.jars.packages`, whose
Ivy resolver ignores Maven's settings).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUIET_LOGGING = Path(__file__).resolve().with_name("log4j2.properties")  # the driver's log4j2 configuration
DEFAULT_CACHE = ROOT / ".cache" / "spark-jars"
REQUIRED = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2", "spark-avro",
            "delta-spark", "delta-storage", "postgresql")
_VERSION = re.compile(r"-\d+(\.\d+)+[\w.\-]*\.jar$")  # the last -N.N... run: -4.2.0.jar, -1.5.7-3.jar


# For streams of small batches (a few rows each: a quiet source, the demo, the tests): Spark's generated
# code and the JIT's C2 compiler cost more than they save there; a small MERGE took half the JVM CPU
# without them (bench/delta_merge.py --compare, docs/sink.md "Latency"). Not the sink's default: on a
# backlog, generated code pays off. `binlake sink run --small-batches` sets them.
# C1 alone gets the JVM's client-sized code cache (48 MB): a sink running for minutes filled it with
# Spark's and Delta's compiled methods and the code-cache sweeper then flushed and the JIT recompiled
# them for ever (the sweeper thread alone took a fifth of the JVM's CPU in the demo): give it the
# tiered JIT's usual 240 MB.
SMALL_BATCHES = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                 "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"}


class MissingJars(RuntimeError):
    pass


def jar_cache() -> Path:
    return Path(os.environ.get("BINLAKE_SPARK_JARS", DEFAULT_CACHE))


def artifact(jar: str) -> str:
    """`delta-spark_4.2_2.13-4.4.0.jar` → `delta-spark_4.2_2.13`."""
    return _VERSION.sub("", jar)


def sink_jars() -> list[str]:
    """The cached jars pyspark does not ship, as absolute paths; MissingJars names the make target."""
    import pyspark

    cache = jar_cache()
    found = sorted(p for p in cache.glob("*.jar")) if cache.is_dir() else []
    missing = [name for name in REQUIRED if not any(artifact(p.name).startswith(name) for p in found)]
    if missing:
        raise MissingJars(f"the Spark sink's jars are not in {cache} (missing: {', '.join(missing)}); "
                          f"run `make spark-jars` (Maven fetches them from Maven Central)")
    shipped = {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [str(p) for p in found if artifact(p.name) not in shipped]


def builder(app_name: str = "binlake-sink", master: str | None = None, conf: dict[str, str] | None = None,
            quiet: bool = False):
    """A SparkSession.Builder with the sink's jars and Delta's SQL extension and catalog; `quiet`:
    the driver logs with spark_sink/log4j2.properties (warnings, without the start-up notices)."""
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    cores = max(os.cpu_count() or 1, 1)
    settings = {
        "spark.jars": ",".join(sink_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",  # MySQL DATETIME has no zone: keep it as written
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores * 2),
        # Delta rebuilds a table's snapshot from its log in 50 tasks by default (sized for a cluster):
        # on a few local cores that is most of a small MERGE's time (bench/sink.py: 3-4x slower).
        "spark.databricks.delta.snapshotPartitions": str(cores),
        **(conf or {}),
    }
    if quiet:  # (after the caller's JVM options, which it keeps)
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{options} -Dlog4j2.configurationFile={QUIET_LOGGING}".strip()
    for key, value in settings.items():
        b = b.config(key, value)
    return b


if __name__ == "__main__":  # spark-submit --jars "$(python -m spark_sink.session)" ...
    print(",".join(sink_jars()))
