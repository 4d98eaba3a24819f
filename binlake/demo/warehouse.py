"""Tables compared across systems: a MySQL table, its Delta table and its PostgreSQL table (or a
processor's output and what MySQL implies for it), each read into one neutral shape, rows by primary
key, values normalized so that the three systems' drivers agree on them.

The demo's closing table and the sink's end-to-end tests both compare through here.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
from collections.abc import Iterable

Rows = dict[tuple, dict]
"""Primary key → {column: normalized value}."""


def normalized(value, is_json: bool = False):
    """A value as every side can agree on it: JSON parsed, bytes as bytes, aware times as naive UTC,
    numbers as exact decimals without trailing zeros."""
    if value is None:
        return None
    if is_json:
        return json.loads(value) if isinstance(value, str) else value  # (PostgreSQL's jsonb arrives parsed)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(value, decimal.Decimal):
        return value.normalize() if value == value.to_integral_value() else value
    if isinstance(value, int) and not isinstance(value, bool):
        return decimal.Decimal(value).normalize()
    return value


def rows_of(records: Iterable[dict], key: tuple[str, ...], columns: list[str],
            json_columns: frozenset[str] = frozenset()) -> Rows:
    return {tuple(normalized(r[k]) for k in key): {c: normalized(r[c], c in json_columns) for c in columns}
            for r in records}


def mysql_table(server, db: str, table: str, json_columns: frozenset[str] = frozenset()
                ) -> tuple[list[str], tuple[str, ...], Rows]:
    """Columns, primary key and rows of a MySQL table."""
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        columns = [d[0] for d in cur.description]
        records = [dict(zip(columns, row)) for row in cur.fetchall()]
        cur.execute("SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
                    "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position", (db, table))
        key = tuple(r[0] for r in cur.fetchall())
    return columns, key, rows_of(records, key, columns, json_columns)


def delta_table(spark, path: str, key: tuple[str, ...], columns: list[str],
                json_columns: frozenset[str] = frozenset()) -> Rows:
    """The live rows of a Delta table the sink writes (tombstones have `__deleted`), read by Spark."""
    records = [r.asDict() for r in spark.read.format("delta").load(path).where("NOT __deleted").collect()]
    return rows_of(records, key, columns, json_columns)


def delta_rs_table(path: str, key: tuple[str, ...], columns: list[str],
                   json_columns: frozenset[str] = frozenset()) -> Rows:
    """The same, read by delta-rs (the `deltalake` package, the reader behind Polars, DuckDB's delta
    extension and most engines that are not Spark): it refuses a table that needs a feature it lacks."""
    import deltalake  # (here: only the sink's extra installs it)

    records = [r for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist() if not r["__deleted"]]
    return rows_of(records, key, columns, json_columns)


def postgres_table(postgres, schema: str, table: str, key: tuple[str, ...], columns: list[str],
                   json_columns: frozenset[str] = frozenset()) -> Rows:
    """The rows of the sink's PostgreSQL view (live rows only)."""
    with postgres.connect() as conn:
        cur = conn.execute(f'SELECT * FROM "{schema}"."{table}"')
        names = [d.name for d in cur.description]
        records = [dict(zip(names, row)) for row in cur.fetchall()]
    return rows_of(records, key, columns, json_columns)


def differences(expected: Rows, actual: Rows) -> str:
    """'' if equal, else what differs, with examples."""
    missing, extra = expected.keys() - actual.keys(), actual.keys() - expected.keys()
    wrong = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
    if not (missing or extra or wrong):
        return ""
    return (f"{len(missing)} missing, {len(extra)} extra, {len(wrong)} different of {len(expected)} rows; "
            f"e.g. missing {sorted(missing, key=repr)[:3]}, extra {sorted(extra, key=repr)[:3]}, "
            f"different {[(expected[k], actual[k]) for k in wrong[:2]]}")


def checksum(rows: Rows) -> str:
    """A short digest of the rows, equal for equal contents whatever their order."""
    digest = hashlib.sha256()
    for key in sorted(rows, key=repr):
        digest.update(json.dumps([key, rows[key]], sort_keys=True, default=repr).encode())
    return digest.hexdigest()[:8]
