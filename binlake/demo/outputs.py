"""What the example processors (examples/shop_processors.py) must have written, computed from the
shop's tables in MySQL: the demo holds their derived tables (as the change events rebuild them, and
as the Spark sink lands them in Delta) against it."""

from __future__ import annotations

import decimal
from collections import defaultdict

from .shop import HIGH_VALUE_TOTAL
from .warehouse import Rows

ENRICHED, HIGH_VALUE, REVENUE = "orders_enriched", "high_value_orders", "revenue_per_minute"
DERIVED_TABLES = (ENRICHED, HIGH_VALUE, REVENUE)
ORDER_COLUMNS = ("id", "customer_id", "sku", "quantity", "total", "status", "ordered_at")


def expected(orders: Rows, customers: Rows) -> dict[str, Rows]:
    """Per derived table: each order with its customer's name; the orders of at least HIGH_VALUE_TOTAL;
    and, for the revenue windows, their sum per product (see `revenue_per_product`)."""
    names = {key[0]: row["name"] for key, row in customers.items()}
    projected = {key: {c: row[c] for c in ORDER_COLUMNS} for key, row in orders.items()}
    revenue: dict = defaultdict(decimal.Decimal)
    for row in orders.values():
        revenue[row["sku"]] += row["total"]
    return {
        ENRICHED: {key: {**row, "customer_name": names.get(row["customer_id"])} for key, row in projected.items()},
        HIGH_VALUE: {key: row for key, row in projected.items() if row["total"] >= HIGH_VALUE_TOTAL},
        REVENUE: _nonzero(revenue),
    }


def revenue_per_product(windows: Rows) -> Rows:
    """The revenue windows ((sku, minute) → revenue) summed per product: each order change books its
    difference in its minute, so over all minutes a product's revenue is the total of its orders now
    (products whose bookings cancel out are left out)."""
    revenue: dict = defaultdict(decimal.Decimal)
    for row in windows.values():
        revenue[row["sku"]] += decimal.Decimal(row["revenue"])
    return _nonzero(revenue)


def _nonzero(revenue: dict) -> Rows:
    return {(sku,): {"revenue": amount.normalize()} for sku, amount in revenue.items() if amount}


def columns(table: str) -> list[str]:
    """The columns a derived table is compared on."""
    return {ENRICHED: [*ORDER_COLUMNS, "customer_name"], HIGH_VALUE: list(ORDER_COLUMNS),
            REVENUE: ["sku", "minute", "revenue"]}[table]
