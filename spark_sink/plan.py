"""Planning one table's part of a micro-batch: pure functions DataFrame → DataFrame, testable on a
tiny local DataFrame with no broker and no target."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .changes import TableSchema

META = ("__seq", "__op", "__deleted", "__ts")  # after the MySQL columns, in every table the sink writes
HISTORY_META = ("__seq", "__op", "__start_at", "__end_at", "__is_current")


@dataclass
class TableBatch:
    """What one micro-batch does to one source table."""

    source: str  # db.table
    schema: TableSchema
    changes: DataFrame  # every change, typed (decode.typed_columns) without the bookkeeping columns
    truncated_at: int | None  # sequence of the latest TRUNCATE up to this batch, if any

    @property
    def keys(self) -> list[str]:
        return list(self.schema.primary_key)

    @property
    def columns(self) -> list[str]:
        return [c.name for c in self.schema.columns]

    def latest(self) -> DataFrame:
        """One change per key: the one with the greatest sequence, and only if it follows the latest
        TRUNCATE (an older one was emptied away by it)."""
        latest = latest_per_key(self.changes, self.keys)
        if self.truncated_at is None:
            return latest
        return latest.where(F.col("__seq") > F.lit(str(self.truncated_at)).cast("decimal(38,0)"))


def latest_per_key(changes: DataFrame, keys: list[str]) -> DataFrame:
    """The change with the greatest __seq of each key (sequences of one key are distinct; ties in a
    replayed record are the same change)."""
    w = Window.partitionBy(*keys).orderBy(F.col("__seq").desc())
    return changes.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


def history(existing: DataFrame, changes: DataFrame, keys: list[str], columns: list[str]) -> DataFrame:
    """SCD type 2 versions of the keys in `changes`, with `existing` (their versions so far): each
    change starts a version at its sequence; a version ends where the key's next change starts;
    a delete ends the open version and starts none (its row stays as the marker, never current).
    An older change that arrives late lands in its place and shortens the version before it."""
    data = [*columns, "__seq", "__op", "__start_at"]
    incoming = changes.select(*columns, "__seq", "__op", F.col("__ts").alias("__start_at"))
    versions = existing.select(*data).unionByName(incoming).dropDuplicates([*keys, "__seq"])
    w = Window.partitionBy(*keys).orderBy("__seq")
    return versions.select(
        *data, F.lead("__start_at").over(w).alias("__end_at"),
        (F.lead("__seq").over(w).isNull() & (F.col("__op") != "d")).alias("__is_current"))
