"""Helpers over the connector's change topics, for faust agents.

    orders = change_topic(app, "shop.shop.orders")            # values are ChangeEvents
    customers = materialize(app, change_topic(app, "shop.shop.customers"))

    @app.agent(orders)
    async def enrich(stream):
        async for change in changes(stream):                   # tombstones and DDL skipped
            customer = customers.get(change.row["customer_id"])
            ...

A change's row holds the connector's JSON values (docs/cdc.md, "Type mapping": DECIMAL an exact
string, DATETIME an ISO string); `typed_row` converts them by the column types a Canal message
carries. Writing derived change events back: `derived_change` + a topic with
`value_serializer="canal"` (streams/codecs.py).
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from spark_sink.changes import ChangeEvent, MySqlType

__all__ = ["ChangeEvent", "change_topic", "changes", "derived_change", "materialize", "row_key", "typed_row"]


def change_topic(app, name: str, fmt: str = "debezium", **options):
    """The faust topic of a change topic: JSON keys (the row's primary key), ChangeEvent values."""
    return app.topic(name, key_serializer="json", value_serializer=fmt, **options)


async def changes(stream) -> AsyncIterator[ChangeEvent]:
    """The row changes of a stream of a change topic; tombstones, schema changes and DDL skipped."""
    async for change in stream:
        if change is not None:
            yield change


def row_key(key: Any) -> Any:
    """A table key for a change record's key: the value of a one-column primary key, else the JSON
    text of the key (a faust table's keys must survive its JSON changelog)."""
    if isinstance(key, dict):
        return next(iter(key.values())) if len(key) == 1 else json.dumps(key, sort_keys=True)
    return key


def materialize(app, topic, name: str | None = None):
    """A table of the current rows of a MySQL table (the "KTable" of its change topic), in every
    worker (a faust GlobalTable, so any key can be looked up whatever partition an event is on),
    kept by an agent: key → the row's latest `after`, deleted rows removed. Its changelog has the
    change topic's partition count, which the topic must declare (faust checks they are equal)."""
    if not topic.partitions:
        raise ValueError(f"declare the partition count of {topic.get_topic_name()!r} (the connector's topic_partitions): "
                         f"change_topic(app, name, partitions=N)")
    name = name or f"{topic.get_topic_name()}-rows"
    # faust applies the changelog records a worker reads in buffers, flushed when full or at a rebalance.
    # A GlobalTable's standby buffer holds one record, but with synchronize_all_active_partitions its
    # partitions are also active, and the active buffer (recovery_buffer_size, 1000) is the one used:
    # rows another worker wrote would stay invisible here until a rebalance. One record applies each.
    table = app.GlobalTable(name, default=None, partitions=topic.partitions, synchronize_all_active_partitions=True,
                            recovery_buffer_size=1)

    async def apply(stream) -> None:
        async for event in stream.events():
            change = event.value
            if change is None:
                continue
            if change.op == "d":
                table.pop(row_key(event.key), None)
            else:
                table[row_key(event.key)] = change.after

    app.agent(topic, name=f"{name}-materializer")(apply)
    return table


def typed_row(change: ChangeEvent) -> dict:
    """The row with typed values (Decimal, datetime, bytes…) by the column types the change carries
    (Canal's mysqlType, or a derived change's `types`)."""
    if not change.types:
        raise ValueError(f"the change of {change.table} carries no column types: Debezium values are typed "
                         f"by the schema topic (spark_sink.changes.SchemaHistory); Canal's carry them")
    return {name: MySqlType.parse(change.types[name]).value(value) if name in change.types else value
            for name, value in change.row.items()}


def derived_change(source: ChangeEvent, table: str, op: str, before: dict | None, after: dict | None,
                   key: tuple[str, ...], types: dict[str, str]) -> ChangeEvent:
    """A change of a derived table (`db.table`) caused by `source`: it keeps the source's position,
    so a sink orders a processor's output as it orders the connector's, and declares its columns'
    MySQL types and primary key, so a Canal message of it lands in a warehouse without a schema."""
    row = after if after is not None else before
    return ChangeEvent(table, op, before, after, source.sequence, source.ts_ms, {k: row[k] for k in key},
                       source.source, types)
