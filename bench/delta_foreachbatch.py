"""A user's first change-data job into Delta Lake, as Delta's documentation shows it ("write change
data into a Delta table" with foreachBatch): bench/sink.py holds binlake's Delta sink against it.

    query = start(spark, "127.0.0.1:9092", {"bench.shop.orders": "/warehouse/orders"}, COLUMNS,
                  trigger={"availableNow": True})

Each micro-batch: parse the Debezium JSON (Kafka Connect's JsonConverter wrapping, {"schema",
"payload"}), keep the latest change per key by the event's `ts_ms` (Delta's example:
`max(struct(time, ...))` per key), and MERGE it into the topic's table: matched and deleted →
delete, matched → update, not matched and not deleted → insert. Nothing more, as a first job goes:
the columns are written by hand, changes of one millisecond are ordered by chance, a replayed batch
is merged again, and a change older than the row already in the table overwrites it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


def start(spark: SparkSession, bootstrap: str, tables: dict[str, str], columns: list[tuple[str, str]],
          checkpoint: str, trigger: dict, starting_offsets: str = "earliest") -> StreamingQuery:
    """`tables`: topic → Delta path; `columns`: (name, Spark type), the first the key."""
    from delta.tables import DeltaTable

    key = columns[0][0]
    row = ", ".join(f"{name} {kind}" for name, kind in columns)
    payload = f"payload STRUCT<op STRING, ts_ms BIGINT, before STRUCT<{row}>, after STRUCT<{row}>>"
    for path in tables.values():
        builder = DeltaTable.createIfNotExists(spark).location(path)
        for name, kind in columns:
            builder = builder.addColumn(name, kind)
        builder.execute()

    def upsert(batch: DataFrame, batch_id: int) -> None:
        changes = (batch.select("topic", F.from_json(F.col("value").cast("string"), payload).payload.alias("e"))
                   .where("e IS NOT NULL")
                   .select("topic", F.coalesce("e.after", "e.before").alias("row"), (F.col("e.op") == "d").alias("deleted"),
                           F.col("e.ts_ms").alias("time"))
                   .persist())  # one read of the batch for the tables' MERGEs, as Spark's guide advises
        for topic, path in tables.items():
            latest = (changes.where(F.col("topic") == topic)
                      .groupBy(F.col(f"row.{key}").alias("k"))
                      .agg(F.max(F.struct("time", "deleted", "row")).alias("latest"))
                      .select("latest.deleted", "latest.row.*"))
            values = {name: f"s.{name}" for name, _ in columns}
            (DeltaTable.forPath(spark, path).alias("t").merge(latest.alias("s"), f"s.{key} = t.{key}")
             .whenMatchedDelete(condition="s.deleted")
             .whenMatchedUpdate(set=values)
             .whenNotMatchedInsert(condition="NOT s.deleted", values=values)
             .execute())
        changes.unpersist()

    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", ",".join(tables)).option("startingOffsets", starting_offsets).load()
            .writeStream.foreachBatch(upsert).option("checkpointLocation", checkpoint).trigger(**trigger)
            .queryName("delta-foreachbatch").start())
