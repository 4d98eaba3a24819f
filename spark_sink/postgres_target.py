"""PostgreSQL tables kept equal to the source, exactly once, with the batch's offsets in the same
database transaction as its rows.

Source `db.table` lands as the view `<schema>.<table>`: exactly the live rows, the MySQL columns
first, then `__seq`, `__op`, `__ts`. Behind it, the table `<table>__base` holds live rows and
tombstones (`__deleted`). `changelog` and `scd2` modes add `<table>__changelog` / `<table>__history`.

A micro-batch goes in two steps. Executors write every table's changes in one Spark job (Spark's
JDBC writer) into the unlogged staging table `_binlake_stage`, one row a change: its table, the
batch id and the row as a text array, each value as its column's type reads it (rows of an earlier,
crashed attempt of the same batch are deleted first; a task run again after its commit stages its
rows twice, which every step below reads as once). Then the driver runs one transaction: per
table, merge the latest staged change of each key (`INSERT … SELECT DISTINCT ON … ON CONFLICT …
WHERE newer`), apply a TRUNCATE, append the changelog or the history; record the batch id and its
end offsets in `_binlake_sink`, clear the staging rows, commit. A batch whose id is already
recorded is skipped, so the warehouse itself is the exactly-once record of what was applied.
"""

from __future__ import annotations

import functools
import json
import logging

import psycopg
from psycopg import sql
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from .changes import TableSchema
from .config import JdbcTarget
from .evolve import evolution
from .plan import META, TableBatch

log = logging.getLogger(__name__)
PURGE_EVERY = 50  # batches of a table between two purges of its old tombstones
META_TYPES = {"__seq": "numeric(38,0)", "__op": "text", "__deleted": "boolean", "__ts": "timestamptz(6)"}
_SPARK_OF_PG = {"integer": "int", "bigint": "bigint", "real": "float", "double precision": "double", "date": "date",
                "timestamp without time zone": "timestamp_ntz", "timestamp with time zone": "timestamp",
                "bytea": "binary", "text": "string", "jsonb": "string"}
STAGE = "_binlake_stage"  # every table's staged changes: its table, the batch id, the row as text[]


def ident(*parts: str) -> sql.Composable:
    return sql.SQL(".").join(sql.Identifier(p) for p in parts)


def staging(table: str, schema: TableSchema) -> list[Column]:
    """The projection of a table's changes into the staging table: the table, and the row (its columns, then
    META) as an array of text that each column's type reads back. (An array, not JSON: PostgreSQL stores and
    subscripts it for less than it parses a jsonb object and looks up its keys.)"""
    kinds = {c.name: c.type.spark for c in schema.columns} | {"__ts": "timestamp"}
    values = (as_text(F.col(c), kinds.get(c)) for c in (*(c.name for c in schema.columns), *META))
    return [F.lit(table).alias("__table"), F.array(*values).alias("row")]


def as_text(value: Column, spark_type: str | None) -> Column:
    """A value as its PostgreSQL column reads it: bytes in the hex form, a `timestamp` to the microsecond with
    its offset (Spark's own text has neither), everything else as Spark writes it."""
    if spark_type == "binary":
        return F.concat(F.lit("\\x"), F.hex(value))
    if spark_type == "timestamp":
        return F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSSXXX")
    return value.cast("string")


class PostgresTables:
    def __init__(self, spark: SparkSession, target: JdbcTarget, mode: str, tombstone_retention_ms: int) -> None:
        self.spark = spark
        self.target = target
        self.schema = target.schema_
        self.mode = mode
        self.retention_ms = tombstone_retention_ms
        self._writes: dict[str, int] = {}  # batches written per table, for the tombstone purge
        self._ensured: dict[str, tuple] = {}  # per table: the columns and key its tables have (this job is their writer)
        self._projections: dict[tuple, list[Column]] = {}  # per table and columns: `staging`
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            conn.execute(sql.SQL("""CREATE TABLE IF NOT EXISTS {} (query_id text PRIMARY KEY, batch_id bigint NOT NULL,
                                    end_offsets jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())""")
                         .format(ident(self.schema, "_binlake_sink")))
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (table_name text PRIMARY KEY, truncated_at numeric(38,0))")
                         .format(ident(self.schema, "_binlake_tables")))
            if self._columns(conn, STAGE).get("row", "ARRAY") != "ARRAY":  # JSON, as staged before: unfinished
                conn.execute(sql.SQL("DROP TABLE {}").format(ident(self.schema, STAGE)))  # batches stage again
            conn.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} (__table text NOT NULL, __batch bigint NOT NULL, "
                                 "row text[] NOT NULL)").format(ident(self.schema, STAGE)))

    def _connect(self, autocommit: bool = True) -> psycopg.Connection:
        return psycopg.connect(self.target.dsn, autocommit=autocommit)

    # -- a micro-batch -----------------------------------------------------------------------------

    def write(self, app_id: str, batch_id: int, batches: list[tuple[tuple[str, str], TableBatch]],
              offsets: dict) -> None:
        tables = [table for (_, table), _ in batches]
        with self._connect() as conn:
            done = conn.execute(sql.SQL("SELECT batch_id FROM {} WHERE query_id = %s").format(
                ident(self.schema, "_binlake_sink")), (app_id,)).fetchone()
            if done and done[0] >= batch_id:
                log.info("batch %d is already in the warehouse (last applied: %d); skipping it", batch_id, done[0])
                return
            for (_, table), batch in batches:
                self._ensure(conn, table, batch.schema)
            self._stage(conn, batches, batch_id)
        with self._connect(autocommit=False) as conn, conn.transaction():
            for (_, table), batch in batches:
                self._merge(conn, table, batch, batch_id)
            conn.execute(sql.SQL("DELETE FROM {} WHERE __batch = %s AND __table = ANY(%s)").format(
                ident(self.schema, STAGE)), (batch_id, tables))
            conn.execute(sql.SQL("""INSERT INTO {} (query_id, batch_id, end_offsets) VALUES (%s, %s, %s)
                                    ON CONFLICT (query_id) DO UPDATE SET batch_id = EXCLUDED.batch_id,
                                    end_offsets = EXCLUDED.end_offsets, committed_at = now()""")
                         .format(ident(self.schema, "_binlake_sink")),
                         (app_id, batch_id, json.dumps({f"{t}:{p}": end for (t, p), end in sorted(offsets.items())})))

    def _stage(self, conn, batches: list[tuple[tuple[str, str], TableBatch]], batch_id: int) -> None:
        """Every change of every table of the batch into the staging table, in one Spark job (each table's
        own would pay Spark's fixed cost per job once per table): from the executors, by Spark's JDBC writer.
        Every change, not each key's latest: the merge's DISTINCT ON takes that, with no shuffle in Spark."""
        conn.execute(sql.SQL("DELETE FROM {} WHERE __batch = %s AND __table = ANY(%s)").format(
            ident(self.schema, STAGE)), (batch_id, [table for (_, table), _ in batches]))
        rows = functools.reduce(DataFrame.union, (batch.changes.select(*self._staging(table, batch.schema))
                                                  for (_, table), batch in batches))
        (rows.withColumn("__batch", F.lit(batch_id).cast("bigint"))
         .coalesce(self.spark.sparkContext.defaultParallelism)  # (a JDBC connection a task, and most are empty)
         .write.format("jdbc").mode("append")
         .option("url", f"{self.target.url}?reWriteBatchedInserts=true&stringtype=unspecified")
         .option("dbtable", f'"{self.schema}"."{STAGE}"').option("user", self.target.user)
         .option("password", self.target.password.get_secret_value()).option("batchsize", 10000)
         .option("driver", "org.postgresql.Driver").save())

    def _staging(self, table: str, schema: TableSchema) -> list[Column]:
        """`staging(table, schema)`, built once (each expression costs the driver a round trip to the JVM)."""
        key = (table, schema.columns)
        if key not in self._projections:
            self._projections[key] = staging(table, schema)
        return self._projections[key]

    def _staged(self, table: str, batch: TableBatch, batch_id: int) -> sql.Composable:
        """`WITH staged AS (...)`: the table's staged changes of the batch, typed again by its columns."""
        types = {**{c.name: c.type.postgres for c in batch.schema.columns}, **META_TYPES}
        typed = sql.SQL(", ").join(sql.SQL("row[{}]::{} AS {}").format(sql.Literal(i), sql.SQL(kind), sql.Identifier(name))
                                   for i, (name, kind) in enumerate(types.items(), 1))
        return sql.SQL("WITH staged AS (SELECT {} FROM {} WHERE __batch = {} AND __table = {})").format(
            typed, ident(self.schema, STAGE), sql.Literal(batch_id), sql.Literal(table))

    def _merge(self, conn, table: str, batch: TableBatch, batch_id: int) -> None:
        keys, columns = batch.keys, batch.columns
        base = ident(self.schema, f"{table}__base")
        all_columns = [*columns, *META]
        names = sql.SQL(", ").join(map(sql.Identifier, all_columns))
        stored = conn.execute(sql.SQL("SELECT truncated_at FROM {} WHERE table_name = %s").format(
            ident(self.schema, "_binlake_tables")), (table,)).fetchone()
        truncated_at = max(int(stored[0]) if stored and stored[0] is not None else 0, batch.truncated_at or 0)
        if truncated_at and (not stored or stored[0] is None or truncated_at > int(stored[0])):
            emptied = [sql.SQL("{} = NULL").format(sql.Identifier(c)) for c in columns if c not in keys]
            conn.execute(sql.SQL("UPDATE {} SET {} WHERE __seq < %s").format(base, sql.SQL(", ").join(
                [*emptied, sql.SQL("__seq = %s, __op = 't', __deleted = true, __ts = now()")])), (truncated_at, truncated_at))
            conn.execute(sql.SQL("""INSERT INTO {} VALUES (%s, %s) ON CONFLICT (table_name)
                                    DO UPDATE SET truncated_at = EXCLUDED.truncated_at""")
                         .format(ident(self.schema, "_binlake_tables")), (table, truncated_at))
        updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in all_columns)
        # One row per key, its latest change, if the latest TRUNCATE did not empty it away. (Also how a task
        # that Spark ran again after its JDBC commit, its executor lost before reporting it, is applied once:
        # it staged its rows twice, and ON CONFLICT DO UPDATE refuses to touch a row twice.)
        key_list = sql.SQL(", ").join(map(sql.Identifier, keys))
        conn.execute(sql.SQL("""{staged} INSERT INTO {base} ({names})
                                SELECT DISTINCT ON ({keys}) {names} FROM staged WHERE __seq > %s
                                ORDER BY {keys}, __seq DESC
                                ON CONFLICT ({keys}) DO UPDATE SET {updates} WHERE {base}.__seq < EXCLUDED.__seq""")
                     .format(staged=self._staged(table, batch, batch_id), base=base, names=names, keys=key_list,
                             updates=updates), (truncated_at,))
        self._writes[table] = self._writes.get(table, 0) + 1
        if self._writes[table] % PURGE_EVERY == 0:  # tombstones older than the retention go
            conn.execute(sql.SQL("DELETE FROM {} WHERE __deleted AND __ts < now() - %s * interval '1 millisecond'")
                         .format(base), (self.retention_ms,))
        if self.mode == "changelog":
            self._append_changelog(conn, table, batch, batch_id)
        elif self.mode == "scd2":
            self._merge_history(conn, table, batch, batch_id)

    def _append_changelog(self, conn, table: str, batch: TableBatch, batch_id: int) -> None:
        names = sql.SQL(", ").join(map(sql.Identifier, [*batch.columns, *META]))
        conn.execute(sql.SQL("{} INSERT INTO {} ({n}) SELECT {n} FROM staged ON CONFLICT DO NOTHING")
                     .format(self._staged(table, batch, batch_id), ident(self.schema, f"{table}__changelog"), n=names))

    def _merge_history(self, conn, table: str, batch: TableBatch, batch_id: int) -> None:
        """Versions of the batch's keys recomputed from their history and the batch's changes (see
        plan.history, the same rules in SQL)."""
        keys, columns = batch.keys, batch.columns
        hist = ident(self.schema, f"{table}__history")
        data = sql.SQL(", ").join(map(sql.Identifier, [*columns, "__seq", "__op"]))
        key_list = sql.SQL(", ").join(map(sql.Identifier, keys))
        conn.execute(sql.SQL("""
            {staged}, versions AS (
                SELECT {data}, __start_at FROM {hist} WHERE ({keys}) IN (SELECT {keys} FROM staged)
                UNION SELECT {data}, __ts FROM staged)
            INSERT INTO {hist} ({data}, __start_at, __end_at, __is_current)
            SELECT {data}, __start_at, lead(__start_at) OVER w, lead(__seq) OVER w IS NULL AND __op <> 'd'
            FROM versions WINDOW w AS (PARTITION BY {keys} ORDER BY __seq)
            ON CONFLICT ({keys}, __seq) DO UPDATE SET __end_at = EXCLUDED.__end_at, __is_current = EXCLUDED.__is_current
        """).format(staged=self._staged(table, batch, batch_id), data=data, hist=hist, keys=key_list))

    # -- tables and their schemas --------------------------------------------------------------------

    def _ensure(self, conn, table: str, schema: TableSchema) -> None:
        """Create or evolve the base table, its view and the mode's extra table: once per table and
        structure, since this job is the only one that changes them."""
        if self._ensured.get(table) == (schema.columns, schema.primary_key):
            return
        base = f"{table}__base"
        existing = self._columns(conn, base)
        keys = sql.SQL(", ").join(map(sql.Identifier, schema.primary_key))
        if not existing:
            self._create(conn, base, schema, META_TYPES, sql.SQL(", PRIMARY KEY ({})").format(keys))
            log.info("created %s.%s for %s", self.schema, base, schema.table)
        else:
            change = evolution({name: _SPARK_OF_PG.get(kind, kind) for name, kind in existing.items()}, schema)
            by_name = {c.name: c for c in schema.columns}
            for name, _ in change.add:
                conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    ident(self.schema, base), sql.Identifier(name), sql.SQL(by_name[name].type.postgres)))
            for name, _, _ in change.widen:
                kind = sql.SQL(by_name[name].type.postgres)
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(ident(self.schema, table)))
                conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                    ident(self.schema, base), sql.Identifier(name), kind, sql.Identifier(name), kind))
        visible = [c for c in self._columns(conn, base) if c not in META_TYPES] + ["__seq", "__op", "__ts"]
        if list(self._columns(conn, table)) != visible:  # new or changed: replaced in one transaction
            with conn.transaction():
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(ident(self.schema, table)))
                conn.execute(sql.SQL("CREATE VIEW {} AS SELECT {} FROM {} WHERE NOT __deleted").format(
                    ident(self.schema, table), sql.SQL(", ").join(map(sql.Identifier, visible)), ident(self.schema, base)))
        if self.mode == "changelog" and not self._columns(conn, f"{table}__changelog"):
            self._create(conn, f"{table}__changelog", schema, META_TYPES,
                         sql.SQL(", UNIQUE ({}, __seq)").format(keys))
        if self.mode == "scd2" and not self._columns(conn, f"{table}__history"):
            self._create(conn, f"{table}__history", schema,
                         {"__seq": "numeric(38,0)", "__op": "text", "__start_at": "timestamptz(6)",
                          "__end_at": "timestamptz(6)", "__is_current": "boolean"},
                         sql.SQL(", PRIMARY KEY ({}, __seq)").format(keys))
        self._ensured[table] = (schema.columns, schema.primary_key)

    def _create(self, conn, name: str, schema: TableSchema, meta: dict[str, str], constraint: sql.Composable) -> None:
        columns = {**{c.name: c.type.postgres for c in schema.columns}, **meta}
        definition = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in columns.items())
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}{})").format(ident(self.schema, name), definition,
                                                                             constraint))

    def _columns(self, conn, name: str) -> dict[str, str]:
        """Column → data type of a table, in order (empty when it does not exist)."""
        rows = conn.execute("""SELECT column_name, CASE WHEN data_type = 'numeric'
                                  THEN format('decimal(%%s,%%s)', numeric_precision, numeric_scale) ELSE data_type END
                               FROM information_schema.columns WHERE table_schema = %s AND table_name = %s
                               ORDER BY ordinal_position""", (self.schema, name)).fetchall()
        return dict(rows)

    def dead_letter(self, rows: DataFrame) -> None:
        with self._connect() as conn:
            conn.execute(sql.SQL("""CREATE TABLE IF NOT EXISTS {} (topic text, partition integer, "offset" bigint,
                                    reason text, raw text, at timestamptz DEFAULT now())""")
                         .format(ident(self.schema, "_binlake_dead_letter")))
        (rows.write.format("jdbc").mode("append").option("url", f"{self.target.url}?stringtype=unspecified")
         .option("dbtable", f'"{self.schema}"."_binlake_dead_letter"').option("user", self.target.user)
         .option("password", self.target.password.get_secret_value()).option("driver", "org.postgresql.Driver").save())
