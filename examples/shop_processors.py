"""Stream processors over the demo shop's change events (binlake/demo/shop.py), exactly once:

    binlake streams worker examples/shop_processors --without-web      (docs/quickstart.md, section 2)

1. **orders_enriched**: each order change with its customer's name, looked up in a table of the
   current customers materialized from the customers' changes (a stream-table join: the name the
   order gets is the one known when the order change is processed).
2. **revenue_per_minute**: the revenue each order change books per product, summed in one-minute
   tumbling windows of the change's commit time (an order's later update or delete books its
   difference, so a window holds the net change of that minute).
3. **high_value_orders**: the orders whose total is at least HIGH_VALUE_TOTAL; an order that drops
   below it leaves the derived table (a delete), one that rises above enters it.

Each output is a change topic of a derived table (`derived.<table>`) in Canal's flat message, which
carries its column types and key, so `binlake sink run` with `format: canal` lands it as it lands
the connector's tables. Settings come from the environment, with the demo's values as defaults.
"""

from __future__ import annotations

import datetime
import decimal
import os

import faust

from streams.changes import ChangeEvent, change_topic, changes, derived_change, materialize

BROKER = os.environ.get("BOOTSTRAP_SERVERS", "127.0.0.1:9092")
SOURCE = os.environ.get("SHOP_TOPIC_PREFIX", "shop.shop")  # the connector's <name>.<database>
SOURCE_FORMAT = os.environ.get("SHOP_FORMAT", "debezium")
OUTPUT = os.environ.get("DERIVED_TOPIC_PREFIX", "derived.shop")
HIGH_VALUE = decimal.Decimal(os.environ.get("HIGH_VALUE_TOTAL", "100"))
SOURCE_PARTITIONS = int(os.environ.get("SHOP_PARTITIONS", "1"))  # the connector's topic_partitions
PARTITIONS = int(os.environ.get("PROCESSOR_PARTITIONS", "6"))  # of the app's own topics and tables

app = faust.App(os.environ.get("PROCESSOR_APP_ID", "shop-processors"), broker=f"kafka://{BROKER}",
                processing_guarantee="exactly_once", store="memory://", topic_partitions=PARTITIONS,
                consumer_auto_offset_reset="earliest", web_enabled=False,
                topic_replication_factor=int(os.environ.get("PROCESSOR_REPLICATION_FACTOR", "1")),
                broker_session_timeout=10, broker_heartbeat_interval=1)  # a dead worker's partitions move in 10 s

orders = change_topic(app, f"{SOURCE}.orders", SOURCE_FORMAT, partitions=SOURCE_PARTITIONS)
customers = materialize(app, change_topic(app, f"{SOURCE}.customers", SOURCE_FORMAT, partitions=SOURCE_PARTITIONS),
                        "customers")

ORDER_TYPES = {"id": "int", "customer_id": "int", "sku": "varchar(16)", "quantity": "smallint unsigned",
               "total": "decimal(12,2)", "status": "enum('new','paid','shipped','cancelled')",
               "ordered_at": "datetime"}
ENRICHED_TYPES = {**ORDER_TYPES, "customer_name": "varchar(64)"}
REVENUE_TYPES = {"sku": "varchar(16)", "minute": "datetime", "revenue": "decimal(14,2)"}

enriched_out = app.topic(f"{OUTPUT}.orders_enriched", value_serializer="canal")
high_value_out = app.topic(f"{OUTPUT}.high_value_orders", value_serializer="canal")
revenue_out = app.topic(f"{OUTPUT}.revenue_per_minute", value_serializer="canal")


def is_high_value(row: dict | None) -> bool:
    return row is not None and decimal.Decimal(row["total"]) >= HIGH_VALUE


def cents(row: dict | None) -> int:
    return 0 if row is None else int(decimal.Decimal(row["total"]) * 100)


# Revenue: each order change becomes one or two (sku, cents) deltas, repartitioned by sku so that one
# worker owns each product's windows; the windowed table sums them by the change's commit time.
deltas = app.topic(f"{app.conf.id}-revenue-deltas", key_serializer="raw", value_serializer="json",
                   partitions=PARTITIONS, internal=True)
revenue = app.Table("revenue-per-minute", default=int, partitions=PARTITIONS).tumbling(
    60, expires=datetime.timedelta(days=1)).relative_to(lambda event: event.value["ts_ms"] / 1000)


@app.agent(orders)
async def process_orders(stream):
    """All three processors' work on an order change, in one agent: with exactly-once, a topic is
    read by one agent (docs/streams.md)."""
    async for change in changes(stream):
        await enrich(change)
        await route_high_value(change)
        await book_revenue(change)


async def enrich(change: ChangeEvent) -> None:
    def with_name(row):
        if row is None:
            return None
        # The table is keyed as the connector keys customers (the id, an int); a Canal message's values are text.
        customer = customers.get(int(row["customer_id"]))
        return {**row, "customer_name": customer["name"] if customer else None}
    await enriched_out.send(key=str(change.row["id"]), value=derived_change(
        change, "derived.orders_enriched", change.op, with_name(change.before), with_name(change.after),
        ("id",), ENRICHED_TYPES))


async def route_high_value(change: ChangeEvent) -> None:
    was, now = is_high_value(change.before), is_high_value(change.after)
    if was or now:
        op = change.op if was == now else ("c" if now else "d")
        await high_value_out.send(key=str(change.row["id"]), value=derived_change(
            change, "derived.high_value_orders", op, change.before if was else None, change.after if now else None,
            ("id",), ORDER_TYPES))


async def book_revenue(change: ChangeEvent) -> None:
    booked: dict[str, int] = {}
    if change.before is not None:
        booked[change.before["sku"]] = -cents(change.before)
    if change.after is not None:
        booked[change.after["sku"]] = booked.get(change.after["sku"], 0) + cents(change.after)
    for sku, amount in booked.items():
        if amount:
            await deltas.send(key=sku.encode(), value={"cents": amount, "sequence": str(change.sequence),
                                                       "ts_ms": change.ts_ms, "source": change.source})


@app.agent(deltas)
async def sum_revenue(stream):
    async for event in stream.events():
        sku, delta = event.key.decode(), event.value
        revenue[sku] += delta["cents"]
        total = revenue[sku].value()
        minute = datetime.datetime.fromtimestamp(delta["ts_ms"] // 60000 * 60, datetime.timezone.utc)
        row = {"sku": sku, "minute": minute.strftime("%Y-%m-%dT%H:%M:%S"), "revenue": f"{decimal.Decimal(total) / 100:.2f}"}
        cause = ChangeEvent(f"{SOURCE}.orders", "u", None, None, int(delta["sequence"]), delta["ts_ms"], source=delta["source"])
        await revenue_out.send(key=f"{sku}|{row['minute']}", value=derived_change(
            cause, "derived.revenue_per_minute", "u", None, row, ("sku", "minute"), REVENUE_TYPES))
