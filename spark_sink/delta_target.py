"""Delta Lake tables kept equal to the source: one MERGE per table per micro-batch.

A source table `db.table` lands at `<path>/<db>/<table>`: its MySQL columns, then `__seq`, `__op`,
`__deleted`, `__ts`. Live rows are those with `__deleted = false`; the rest are tombstones (key and
sequence of a delete or a TRUNCATE) that keep a late, older change from bringing a row back, until
`tombstone_retention` after the delete. `changelog` mode also appends every change to
`<table>__changelog`; `scd2` keeps `<table>__history`.

Every write of micro-batch N carries Delta's idempotent-write identity (txnAppId = the streaming
query's id, txnVersion = N), so a batch that Spark replays after a crash changes nothing.

A batch's tables are written at once, each in a thread and a Spark session of its own: a small
MERGE is mostly the driver planning and committing between short jobs, so one table's jobs run while
another's are planned. The job is each table's only writer, so it keeps what it learnt of a table
(its DeltaTable, the columns it was last made to hold, its TRUNCATE mark) instead of asking Delta
again every batch.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.util import inheritable_thread_target

from .changes import TableSchema
from .config import DeltaTarget
from .evolve import evolution
from .plan import HISTORY_META, META, TableBatch, history

log = logging.getLogger(__name__)
TRUNCATED_AT = "binlake.truncatedAt"  # table property: sequence of the latest TRUNCATE applied
_TXN_APP, _TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"
TABLE_WRITERS = 4  # at most this many tables of a batch are written at once (docs/benchmarks.md, issue 39)
_SIDE_TABLE = {"changelog": "__changelog", "scd2": "__history"}  # the mode's second table, beside each table


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class _Table:
    """What the job knows of one Delta table it writes. Only the thread writing the table touches it."""

    spark: SparkSession  # a session of its own: each MERGE's idempotent-write identity is in the session's conf
    delta: DeltaTable | None = None
    schema: TableSchema | None = None  # the source columns the table was last made to hold
    truncated_at: int | None = None  # the TRUNCATE sequence it stores; None: not read yet
    writes: int = 0  # batches written, for OPTIMIZE and the purge


class DeltaTables:
    def __init__(self, spark: SparkSession, target: DeltaTarget, mode: str, tombstone_retention_ms: int) -> None:
        self.spark = spark
        self.target = target
        self.mode = mode
        self.retention_ms = tombstone_retention_ms
        self._tables: dict[str, _Table] = {}  # by path (the main thread adds them, before the writers start)

    def path(self, db: str, table: str, suffix: str = "") -> str:
        return str(Path(self.target.path) / db / f"{table}{suffix}")

    def write(self, app_id: str, batch_id: int, batches: list[tuple[tuple[str, str], TableBatch]],
              offsets: dict) -> None:
        """Every table's part at once; the first failure is raised once every table's writer has ended
        (a replay of the batch skips the tables already written, by their idempotent-write identity)."""
        for (db, table), _ in batches:
            for suffix in ("", *filter(None, [_SIDE_TABLE.get(self.mode)])):
                if (path := self.path(db, table, suffix)) not in self._tables:
                    self._tables[path] = _Table(self.spark.newSession())
        writer = inheritable_thread_target(self.spark)(self._write_table)  # (the query's job group: stop cancels it)
        with ThreadPoolExecutor(min(TABLE_WRITERS, len(batches) or 1), thread_name_prefix="delta-writer") as pool:
            written = [pool.submit(writer, app_id, batch_id, db, table, batch) for (db, table), batch in batches]
        for future in written:
            future.result()

    # -- one table ---------------------------------------------------------------------------------

    def _write_table(self, app_id: str, batch_id: int, db: str, table: str, batch: TableBatch) -> None:
        path = self.path(db, table)
        state = self._tables[path]
        target = self._ensure(path, batch, META_TYPES)
        if state.truncated_at is None:
            found = state.spark.sql(f"SHOW TBLPROPERTIES delta.{q(path)} ('{TRUNCATED_AT}')").first()
            state.truncated_at = int(found.value) if found and found.value.isdigit() else 0
        stored = state.truncated_at
        truncated_at = max(stored, batch.truncated_at or 0) or None
        batch.truncated_at = truncated_at
        with self._idempotent(state.spark, app_id, batch_id):
            self._merge(target, batch, truncated_at if truncated_at and truncated_at > stored else None)
        if truncated_at and truncated_at > stored:
            state.spark.sql(f"ALTER TABLE delta.{q(path)} SET TBLPROPERTIES ('{TRUNCATED_AT}' = '{truncated_at}')")
            state.truncated_at = truncated_at
        if self.mode == "changelog":
            self._append_changelog(app_id, batch_id, self.path(db, table, _SIDE_TABLE["changelog"]), batch)
        elif self.mode == "scd2":
            self._merge_history(app_id, batch_id, self.path(db, table, _SIDE_TABLE["scd2"]), batch)
        if self.target.catalog:
            state.spark.sql(f"CREATE TABLE IF NOT EXISTS {q(f'{self.target.catalog}{db}_{table}')} USING DELTA "
                           f"LOCATION '{path}'")
        self._housekeeping(state, target)

    def _merge(self, target: DeltaTable, batch: TableBatch, truncate: int | None) -> None:
        keys, columns = batch.keys, batch.columns
        values = {q(c): f"s.{q(c)}" for c in (*columns, *META)}
        merge = (target.alias("t").merge(batch.latest().alias("s"), " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in keys))
                 .whenMatchedUpdate(condition="s.__seq > t.__seq", set=values)
                 .whenNotMatchedInsert(values=values))
        if truncate is not None:  # TRUNCATE: every older row becomes a tombstone at its sequence
            emptied = {**{q(c): "NULL" for c in columns if c not in keys}, "__seq": f"CAST({truncate} AS DECIMAL(38,0))",
                       "__op": "'t'", "__deleted": "true", "__ts": "current_timestamp()"}
            merge = merge.whenNotMatchedBySourceUpdate(condition=f"t.__seq < {truncate}", set=emptied)
        merge.execute()

    def _append_changelog(self, app_id: str, batch_id: int, path: str, batch: TableBatch) -> None:
        self._ensure(path, batch, META_TYPES)  # (the write's options carry its idempotent-write identity)
        (batch.changes.select(*batch.columns, *META).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id).save(path))

    def _merge_history(self, app_id: str, batch_id: int, path: str, batch: TableBatch) -> None:
        keys, columns = batch.keys, batch.columns
        target = self._ensure(path, batch, HISTORY_TYPES)
        spark = self._tables[path].spark
        existing = (spark.read.format("delta").load(path)  # (its latest version: `target` may be batches old)
                    .join(batch.changes.select(*keys).distinct(), keys, "left_semi"))
        versions = history(existing, batch.changes, keys, columns)
        on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in (*keys, "__seq"))
        values = {q(c): f"s.{q(c)}" for c in (*columns, *HISTORY_META)}
        with self._idempotent(spark, app_id, batch_id):
            (target.alias("t").merge(versions.alias("s"), on)
             .whenMatchedUpdate(set={"__end_at": "s.__end_at", "__is_current": "s.__is_current"})
             .whenNotMatchedInsert(values=values).execute())

    # -- tables and their schemas --------------------------------------------------------------------

    def _ensure(self, path: str, batch: TableBatch, meta: dict[str, str]) -> DeltaTable:
        """The table at `path`, created or evolved to hold the batch's columns. Created with no table
        feature beyond Delta's defaults, so every Delta reader opens it (docs/sink.md, "Readers").
        A batch with the columns of the table's previous one asks Delta nothing: nobody else alters it."""
        state = self._tables[path]
        if state.delta is None or state.schema != batch.schema:
            state.delta = self._evolved(state.spark, path, batch, meta)
            state.schema = batch.schema
        return state.delta

    def _evolved(self, spark: SparkSession, path: str, batch: TableBatch, meta: dict[str, str]) -> DeltaTable:
        if not DeltaTable.isDeltaTable(spark, path):
            builder = DeltaTable.createIfNotExists(spark).location(path)
            for column in batch.schema.columns:
                builder = builder.addColumn(column.name, column.type.spark, nullable=column.name not in batch.keys)
            for name, kind in meta.items():
                builder = builder.addColumn(name, kind)
            builder.execute()
            log.info("created Delta table %s for %s", path, batch.source)
        table = DeltaTable.forPath(spark, path)
        existing = {f.name: f.dataType.simpleString() for f in table.toDF().schema.fields}
        change = evolution(existing, batch.schema)
        if change.add:
            spark.sql(f"ALTER TABLE delta.{q(path)} ADD COLUMNS ("
                           + ", ".join(f"{q(name)} {kind}" for name, kind in change.add) + ")")
        if change.widen and self.target.type_widening == "feature":
            spark.sql(f"ALTER TABLE delta.{q(path)} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
            for name, _old, new in change.widen:
                spark.sql(f"ALTER TABLE delta.{q(path)} ALTER COLUMN {q(name)} TYPE {new}")
        elif change.widen:
            self._rewrite_widened(spark, path, {name: new for name, _old, new in change.widen})
        if change:
            log.info("%s: added %s, widened %s", path, [n for n, _ in change.add], [(n, o, w) for n, o, w in change.widen])
            table = DeltaTable.forPath(spark, path)  # the altered schema
        return table

    def _rewrite_widened(self, spark: SparkSession, path: str, widened: dict[str, str]) -> None:
        """Widen columns the way every reader can follow: rewrite the table with the columns cast, in
        one commit (readers see the old table or the new one). Costs a read and a write of the whole
        table, once per widening DDL."""
        started = time.monotonic()
        rows = spark.read.format("delta").load(path)
        files = len(rows.inputFiles())
        cast = [F.col(q(f.name)).cast(widened[f.name]).alias(f.name) if f.name in widened else F.col(q(f.name))
                for f in rows.schema.fields]
        rows.select(*cast).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        log.info("%s: widened %s by rewriting the table (%d files) in %.1f s; type_widening: feature would "
                 "do it in place, for Delta readers that support it (docs/sink.md)", path, widened, files,
                 time.monotonic() - started)

    def dead_letter(self, rows: DataFrame) -> None:
        """Records that could not be applied, with where they came from and why: `<path>/_dead_letter`."""
        (rows.withColumn("at", F.current_timestamp()).write.format("delta").mode("append")
         .option("mergeSchema", "true").save(str(Path(self.target.path) / "_dead_letter")))

    @staticmethod
    def _idempotent(spark: SparkSession, app_id: str, batch_id: int):
        class Txn:
            def __enter__(self):
                spark.conf.set(_TXN_APP, app_id)
                spark.conf.set(_TXN_VERSION, str(batch_id))

            def __exit__(self, *exc):
                spark.conf.unset(_TXN_APP)
                spark.conf.unset(_TXN_VERSION)

        return Txn()

    def _housekeeping(self, state: _Table, table: DeltaTable) -> None:
        """Every `optimize_every` batches of a table: compact its small files and drop tombstones
        older than the retention."""
        every = self.target.optimize_every
        state.writes += 1
        if every and state.writes % every == 0:
            table.delete(F.col("__deleted") & (F.col("__ts") < F.expr(f"current_timestamp() - make_dt_interval(0, 0, 0, {self.retention_ms / 1000})")))
            table.optimize().executeCompaction()


META_TYPES = {"__seq": "decimal(38,0)", "__op": "string", "__deleted": "boolean", "__ts": "timestamp"}
HISTORY_TYPES = {"__seq": "decimal(38,0)", "__op": "string", "__start_at": "timestamp", "__end_at": "timestamp",
                 "__is_current": "boolean"}
