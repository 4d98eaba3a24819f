"""The Spark sink: Spark's Kafka source → each micro-batch decoded, planned and written to the target.

    binlake sink run CONFIG.yaml [CONFIG.yaml ...]                # local[*]
    spark-submit --jars "$(python -m spark_sink.session)" spark_sink/job.py CONFIG.yaml ...   # any master

Several configs run as several streaming queries of one Spark application (one JVM, one driver).

Reading is Spark's own: `readStream.format("kafka")` with `kafka.isolation.level=read_committed`
(aborted transactions never reach a table) and offsets in the checkpoint. This file only wires
reading, planning (decode.py, plan.py) and committing (delta_target.py, postgres_target.py).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from spark_sink import decode, decode_avro, metrics
from spark_sink.changes import TableSchema, UnsupportedType
from spark_sink.config import SinkConfig, duration_ms
from spark_sink.plan import META, TableBatch
from spark_sink.schemas import DebeziumSchemas, canal_schema
from spark_sink.writer_schemas import SchemaNotFound, WriterSchemas

log = logging.getLogger(__name__)

PROGRESS_S = 5  # how often the lag metric is read from the queries' progress
# How long the broker may hold an executor's empty fetch. A batch's task reads its partition up to an end
# offset that, in a transactional topic, is a commit marker, never returned as a record: the task's
# consumer then fetches past it and the broker holds that empty fetch for fetch.max.wait.ms (500 ms by
# default) before the task ends. One such wait a partition made a batch of 12 small partitions on two
# cores read for 3.5 s instead of 0.5-1 s (docs/benchmarks.md, "The Kafka read at a transactional end").
FETCH_MAX_WAIT_MS = 10


class SinkError(RuntimeError):
    """A record the sink cannot apply, named with its topic, partition and offset."""


@dataclass
class TableSummary:
    """What one micro-batch holds of one kind of record (row, truncate, ...) of one table."""

    kind: str
    table: str | None
    n: int = 0
    truncate: int | None = None  # sequence of the latest TRUNCATE
    last: object = None  # Canal: the latest sequence, and its message's column types, key and position
    types: str | None = None
    pk: list | None = None
    position: str = ""
    commits: list = field(default_factory=list)  # MySQL commit times (epoch ms, weight) of its changes (metrics.py)
    schema_ids: set = field(default_factory=set)  # debezium-avro: the writer schemas of its records


@dataclass(frozen=True)
class Conversion:
    """One table's decode.typed_columns projection, and what tells a value that failed to convert, with why."""

    columns: list  # the projection: typed columns, META, the record's place, a `__bad_<i>` flag per column
    keep: list  # what a TableBatch's changes hold: the MySQL columns, then META
    bad: Column | None  # any value failed to convert (None: the table has no columns)
    reason: Column | None  # which, and where the record is
    stop: Column | None  # errors.tolerance none: true, or the job stopped with the reason

    @classmethod
    def of(cls, schema: TableSchema, columns: list, tolerance: str) -> "Conversion":
        flags = [F.col(f"__bad_{i}") for i in range(len(schema.columns))]
        keep = [c.name for c in schema.columns] + list(META)
        if not flags:
            return cls(columns, keep, None, None, None)
        bad = F.greatest(*flags) if len(flags) > 1 else flags[0]
        column = F.coalesce(*[F.when(flag, F.lit(f"column {c.name}: a value does not fit {c.type.spark} "
                                                 f"(MySQL {c.type.base})")) for flag, c in zip(flags, schema.columns)])
        reason = F.concat(F.lit(f"table {schema.table}, "), column, F.lit(" at "), F.col("position"),
                          F.lit(" (topic "), F.col("topic"), F.lit(", partition "), F.col("partition").cast("string"),
                          F.lit(", offset "), F.col("offset").cast("string"), F.lit(")"))
        stop = F.when(bad, F.raise_error(F.concat(reason, F.lit("; set errors: {tolerance: all} to send such records "
                                                                "to the dead-letter table instead")))
                      ).otherwise(F.lit(True)) if tolerance == "none" else None
        return cls(columns, keep, bad, reason, stop)


class SinkJob:
    def __init__(self, spark: SparkSession, config: SinkConfig) -> None:
        # A session of its own (same SparkContext): the Delta target puts each merge's idempotent-write
        # identity in the session's SQL conf, where another job's query must neither see nor unset it.
        self.spark = spark.newSession()
        self.config = config
        if config.target.delta is not None:
            from spark_sink.delta_target import DeltaTables
            self.target = DeltaTables(self.spark, config.target.delta, config.mode, config.tombstone_retention_ms)
        else:
            from spark_sink.postgres_target import PostgresTables
            self.target = PostgresTables(self.spark, config.target.jdbc, config.mode, config.tombstone_retention_ms)
        self.schemas = DebeziumSchemas(config.bootstrap_servers, config.resolved_schema_topic, config.security) \
            if config.debezium else None
        self.avro = decode_avro.Decoder(WriterSchemas(config.schema_registry, config.topics, config.topic_pattern)) \
            if config.format == "debezium-avro" else None
        self.timings: list[dict] = []  # per batch: seconds spent reading+decoding, planning, writing
        self._conversions: dict[tuple, Conversion] = {}  # by table structure and writer schemas (_conversion)
        self.name = "binlake-sink"      # the streaming query's

    def start(self, name: str = "binlake-sink") -> StreamingQuery:
        """Start the query; `name` must be unique among the session's active queries."""
        self.name = name
        c = self.config
        reader = (self.spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", c.bootstrap_servers)
                  .option("kafka.isolation.level", "read_committed")
                  .option("startingOffsets", c.starting_offsets)
                  .option("failOnDataLoss", "true")
                  .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS))
        for key, value in c.security.java().items():  # TLS and SASL, as the Java client takes them
            reader = reader.option(f"kafka.{key}", value)
        reader = reader.option("subscribe", ",".join(c.topics)) if c.topics else reader.option("subscribePattern", c.topic_pattern)
        if c.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", c.max_offsets_per_trigger)
        writer = reader.load().writeStream.foreachBatch(self.apply).option("checkpointLocation", c.checkpoint)
        if c.trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{duration_ms(c.trigger['processing_time'])} milliseconds")
        return writer.queryName(name).start()

    # -- one micro-batch ---------------------------------------------------------------------------

    def apply(self, kafka: DataFrame, batch_id: int) -> None:
        app_id = self.spark.sparkContext.getLocalProperty("sql.streaming.queryId") or "binlake-sink"
        started = time.monotonic()
        cached = []
        try:
            records, value, summary, offsets = self._read(kafka, cached)
            if any(r.kind == "bad" for r in summary):
                records = self._bad_records(records, batch_id)
            decoded = time.monotonic()
            tables = self._plan(records, summary, value)
            planned = time.monotonic()
            self.target.write(app_id, batch_id, tables, offsets)
            done, visible_at = time.monotonic(), time.time()
            timing = {"read_decode": decoded - started, "plan": planned - decoded, "write": done - planned}
            self.timings.append({"batch": batch_id, "rows": sum(r.n for r in summary if r.kind == "row"), **timing})
            rows = [r for r in summary if r.kind == "row"]
            metrics.batch_done(self.name, timing, {r.table: r.n for r in rows}, {r.table: r.commits for r in rows},
                               visible_at)
            log.info("%s batch %d: %s (read+decode %.2f s, schemas+checks %.2f s, merge+commit %.2f s)", self.name, batch_id,
                     ", ".join(f"{r.table}: {counted(r.n, r.kind)}" for r in summary if r.kind in ("row", "truncate"))
                     or "no changes", decoded - started, planned - decoded, done - planned)
        finally:
            for df in cached:
                df.unpersist()

    def _read(self, kafka: DataFrame, cached: list) -> tuple[DataFrame, Callable, list["TableSummary"], dict]:
        """The batch's records decoded and cached (decode.records' columns), the function reading one column's value
        of a table's records with the schema ids of its summary (decode.typed_columns' `value`), the summary and the
        offsets. debezium-avro: a batch with records of schema ids the decoder does not know yet (registered
        since it last listed the registry) is decoded again, whole, once it has learnt them."""
        while True:
            records, value = self._decoded(kafka)
            # As many partitions as cores: the Kafka source makes one a topic partition, and each is a task in every
            # job of the batch (a small batch's tasks cost more to schedule than to run).
            records = records.coalesce(self.spark.sparkContext.defaultParallelism).persist()
            cached.append(records)
            summary, offsets = self._summary(records)
            unknown = set().union(*(r.schema_ids for r in summary if r.kind == "unknown"))
            if not unknown:
                return records, value, summary, offsets
            log.info("%s: schema ids %s are new to the sink: reading them from the registry", self.name, sorted(unknown))
            records.unpersist()
            self._avro(self.avro.learn, unknown)

    def _decoded(self, kafka: DataFrame) -> tuple[DataFrame, Callable]:
        if self.avro is None:
            return decode.records(kafka, self.config.format), lambda ids: decode.text_value
        records = self._avro(self.avro.records, kafka)
        writers = self.avro.writers
        return records, lambda ids: decode_avro.values(writers, ids)

    @staticmethod
    def _avro(call: Callable, *args):
        try:
            return call(*args)
        except (SchemaNotFound, UnsupportedType, ValueError) as exc:
            raise SinkError(f"format: debezium-avro: {exc}") from None

    def _summary(self, records: DataFrame) -> tuple[list["TableSummary"], dict]:
        """One pass over the batch: per kind and table, how many records, the latest TRUNCATE,
        quantiles of its changes' MySQL commit times (not of snapshot reads) and (Canal) the latest
        column types and key; and each partition's end offset."""
        canal = self.config.format == "canal"
        by_schema = ["schema_id"] if self.avro is not None else []
        rows = records.groupBy("kind", "table", "topic", "partition", *by_schema).agg(*self._tallies).collect()
        offsets: dict = {}
        summary: dict[tuple, TableSummary] = {}
        for r in rows:  # one row per partition: fold them per table
            offsets[(r.topic, r.partition)] = r.end
            s = summary.setdefault((r.kind, r.table), TableSummary(r.kind, r.table))
            s.n += r.n
            if by_schema and r.schema_id is not None:
                s.schema_ids.add(r.schema_id)
            if r.committed:
                s.commits += [(ms, r.committed / len(r.commit_ms)) for ms in r.commit_ms]
            if r.truncate is not None:
                s.truncate = max(s.truncate or 0, int(r.truncate))
            if canal and (s.last is None or r.last > s.last):
                s.last, s.types, s.pk, s.position = r.last, r.types, r.pk, r.position
        return list(summary.values()), offsets

    @functools.cached_property
    def _tallies(self) -> list[Column]:
        """The summary's aggregates, built once (as `_conversion`'s expressions)."""
        latest = [F.max_by(c, "seq").alias(c) for c in ("types", "pk", "position")] + [F.max("seq").alias("last")] \
            if self.config.format == "canal" else []
        committed = F.when((F.col("kind") == "row") & (F.col("op") != "r") & (F.col("ts_ms") > 0), F.col("ts_ms"))
        return [F.count("*").alias("n"), F.max(F.when(F.col("kind") == "truncate", F.col("seq"))).alias("truncate"),
                (F.max("offset") + 1).alias("end"), F.count(committed).alias("committed"),
                F.percentile_approx(committed, list(metrics.COMMIT_TIME_PROBABILITIES)).alias("commit_ms"), *latest]

    def _plan(self, records: DataFrame, summary: list, value: Callable) -> list[tuple[tuple[str, str], TableBatch]]:
        history = self.schemas.catch_up() if self.schemas else None
        truncates = dict(history.truncates) if history else {}
        for r in summary:
            if r.truncate is not None:
                truncates[r.table] = max(truncates.get(r.table, 0), r.truncate)
        planned = []
        touched = {r.table for r in summary if r.kind == "row"} | {r.table for r in summary if r.kind == "truncate"}
        for table in sorted(touched):
            schema = self._schema(table, history, summary)
            if not schema.primary_key:
                raise SinkError(f"table {table} has no primary key: the sink merges by key; add one in MySQL, "
                                f"or leave the table out of the connector's tables")
            rows = records.where((F.col("kind") == "row") & (F.col("table") == table))
            ids = frozenset().union(*(r.schema_ids for r in summary if r.table == table and r.kind == "row"))
            conversion = self._conversion(schema, ids, value)
            changes = self._converted(rows.select(*conversion.columns), conversion)
            planned.append((self.config.target_name(table), TableBatch(table, schema, changes, truncates.get(table))))
        return planned

    def _schema(self, table: str, history, summary: list) -> TableSchema:
        if history is not None:
            schema = history.tables.get(table)
            if schema is None:
                raise SinkError(f"no schema-change event describes {table} in topic {self.schemas.topic}: "
                                f"is schema_topic the connector's name?")
            return schema
        row = next((r for r in summary if r.table == table and r.kind == "row" and r.types), None)
        if row is None:  # only a TRUNCATE: the target's own columns stay as they are
            return TableSchema(table, (), (), "")
        return canal_schema(table, row.types, row.pk, row.position)

    def _conversion(self, schema: TableSchema, ids: frozenset, value: Callable) -> "Conversion":
        """A table's projection and checks for its structure and writer schemas, built at its first batch
        and kept: building the expressions costs the driver a JVM round trip each, a second and more a batch."""
        key = (schema.table, schema.columns, schema.primary_key, ids)
        if key not in self._conversions:
            try:
                columns = decode.typed_columns(schema, value(ids))
            except UnsupportedType as exc:
                raise SinkError(f"table {schema.table}: {exc}") from None
            self._conversions[key] = Conversion.of(schema, columns, self.config.errors.tolerance)
        return self._conversions[key]

    def _converted(self, typed: DataFrame, conversion: "Conversion") -> DataFrame:
        """The typed changes without values that failed to convert: by default such a value stops
        the job, raised from inside whichever Spark job meets it first (no pass of its own), naming
        the table, column, binlog position and record; with errors.tolerance: all its record goes
        to the dead-letter table."""
        if conversion.bad is None:
            return typed.select(*conversion.keep)
        if conversion.stop is not None:
            return typed.where(conversion.stop).select(*conversion.keep)
        failed = typed.where(conversion.bad)
        if failed.limit(1).count():
            self.target.dead_letter(failed.select("topic", "partition", "offset", conversion.reason.alias("reason"),
                                                  F.lit(None).cast("string").alias("raw")))
        return typed.where(~conversion.bad).select(*conversion.keep)

    def _bad_records(self, records: DataFrame, batch_id: int) -> DataFrame:
        bad = records.where(F.col("kind") == "bad")
        first = bad.limit(1).collect()[0]
        if self.config.errors.tolerance == "none":
            raise SinkError(f"topic {first.topic}, partition {first.partition}, offset {first.offset}: {first.reason}; "
                            f"is it a change topic of the {self.config.format} format? (errors: {{tolerance: all}} "
                            f"sends such records to the dead-letter table)")
        self.target.dead_letter(bad.select("topic", "partition", "offset", "reason", "raw"))
        return records.where(F.col("kind") != "bad")


def counted(n: int, noun: str) -> str:
    """`1 row`, `8 rows`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def query_names(paths: list[str]) -> list[str]:
    """One streaming query name per config file: `binlake-sink-<file stem>`."""
    names = [f"binlake-sink-{Path(p).stem}" for p in paths]
    if len(set(names)) < len(names):
        raise SinkError(f"config files need distinct names (each names its streaming query): {paths}")
    return names


def run(configs: dict[str, SinkConfig], master: str | None = None, metrics_listener: str | None = None,
        verbose: bool = False, settings: dict[str, str] | None = None) -> int:
    """Run one query per config (by name) until they stop (available_now: once each has merged
    everything committed at its start); the first query that fails stops the others, and the job.
    With `metrics_listener` (HOST:PORT) it serves Prometheus metrics there. A driver this starts logs
    quietly unless `verbose` (under spark-submit the driver runs already, as spark-submit set it up).
    `settings`: Spark settings over the sink's own (`binlake sink run --conf`)."""
    checkpoints = [c.checkpoint for c in configs.values()]
    if len(set(checkpoints)) < len(checkpoints):
        raise SinkError("each config needs its own checkpoint directory: Spark keeps one query's offsets in it")
    from spark_sink.session import builder
    spark = builder(master=master, conf=settings, quiet=not verbose).getOrCreate()
    queries = [SinkJob(spark, config).start(name) for name, config in configs.items()]
    if metrics_listener is not None:
        from common.prometheus import serve_in_thread
        serve_in_thread(metrics.REGISTRY, metrics_listener)
    try:
        while active := [q for q in queries if q.isActive]:
            for q in active:  # (raises the failure of a query that failed; wakes now and then to read the lag)
                q.awaitTermination(PROGRESS_S / len(active))
            for q in queries:
                metrics.progress(q.name, q.lastProgress)
    except KeyboardInterrupt:
        pass
    finally:
        for q in queries:
            q.stop()
    return 0


if __name__ == "__main__":  # spark-submit spark_sink/job.py CONFIG.yaml ...
    from spark_sink.config import load_all
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(run(dict(zip(query_names(sys.argv[1:]), load_all(sys.argv[1:])))))
