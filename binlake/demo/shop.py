"""The demo's data: a `shop` database, the rows it starts with (the connector's snapshot reads them)
and a workload that runs while the connector streams the binlog.

Orders come only in the workload: the processors join each order with its customer as the customers
table stands when the order is processed (a stream-table join), so the demo lets them learn the
customers first (`Step.inserts_orders`).

The tables and their first rows are in shop.sql, which the quickstart runs by hand too.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from pathlib import Path

from sandbox.sql import SqlServer

from .events import normalized

DATABASE = "shop"
TABLES = ("customers", "products", "orders")
JSON_COLUMNS = frozenset({"attributes"})

SQL_FILE = Path(__file__).with_name("shop.sql")
"""The tables and their first rows, as SQL: the demo runs it, and so do the quickstart's readers."""


def statements(text: str) -> tuple[str, ...]:
    """An SQL file's statements: `--` comment lines dropped, split at each `;` that ends a line."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return tuple(stripped for s in "\n".join(lines).split(";\n") if (stripped := s.strip().rstrip(";").strip()))


_SETUP = statements(SQL_FILE.read_text())
SCHEMA = tuple(s for s in _SETUP if s.startswith("CREATE TABLE"))
SEED = tuple(s for s in _SETUP if s.startswith("INSERT INTO"))


@dataclass(frozen=True)
class Step:
    """One workload step: statements committed as one transaction."""

    title: str
    statements: tuple[str, ...]

    @property
    def inserts_orders(self) -> bool:
        return any(s.startswith("INSERT INTO orders") for s in self.statements)


WORKLOAD = (
    Step("the first orders",
         ("""INSERT INTO orders VALUES
               (1, 1, 'MUG-01', 2, 25.00, 'shipped', '2024-04-01 10:00:00'),
               (2, 2, 'STK-01', 5, 15.00, 'paid', '2024-04-02 11:30:00'),
               (3, 3, 'TEE-01', 1, 19.90, 'new', '2024-04-03 12:45:00')""",)),
    Step("insert: a customer signs up",
         ("INSERT INTO customers VALUES (4, 'Edsger Dijkstra', 'edsger@example.com', 'basic', NOW(3))",)),
    Step("update: a price change", ("UPDATE products SET price = 14.00 WHERE sku = 'MUG-01'",)),
    Step("one transaction: two orders, and the customer moves up a tier",
         ("INSERT INTO orders VALUES (4, 4, 'MUG-01', 1, 14.00, 'new', NOW())",
          "INSERT INTO orders VALUES (5, 4, 'TEE-01', 1, 19.90, 'new', NOW())",
          "UPDATE customers SET tier = 'silver' WHERE id = 4")),
    Step("update of several rows: both orders are paid", ("UPDATE orders SET status = 'paid' WHERE id IN (4, 5)",)),
    Step("delete: an order is removed", ("DELETE FROM orders WHERE id = 2",)),
    Step("primary-key change: a product gets a new SKU (its orders follow)",
         ("UPDATE products SET sku = 'MUG-02' WHERE sku = 'MUG-01'",
          "UPDATE orders SET sku = 'MUG-02' WHERE sku = 'MUG-01'")),
    Step("schema change: ALTER TABLE adds a column", ("ALTER TABLE orders ADD COLUMN gift_note VARCHAR(64) NULL",)),
    Step("insert using the new column",
         ("INSERT INTO orders VALUES (6, 1, 'TEE-01', 3, 59.70, 'new', NOW(), 'happy birthday')",)),
)

SCHEMA_CHANGES = tuple(" ".join(s.split()) for step in WORKLOAD for s in step.statements
                       if s.startswith(("ALTER ", "CREATE ", "DROP ", "RENAME ", "TRUNCATE ")))
"""The workload's DDL, whitespace collapsed: the demo shows each one's schema-change event."""

HIGH_VALUE_TOTAL = decimal.Decimal("20")
"""The processors' high-value threshold in the demo (its orders are small)."""

LAST_CHANGE = ("orders", (6,))
"""Table and key of the workload's last row change: once its event is read, everything before it is
committed in the log."""


def run_step(server: SqlServer, step: Step) -> None:
    with server.connect(db=DATABASE) as conn, conn.cursor() as cur:
        conn.begin()
        for statement in step.statements:
            cur.execute(statement)
        conn.commit()


def primary_keys(server: SqlServer) -> dict[str, set[tuple[str, ...]]]:
    """Per table ("shop.orders"): the primary keys of the rows it holds now."""
    with server.connect(db=DATABASE) as conn, conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) "
                    "FROM information_schema.KEY_COLUMN_USAGE "
                    "WHERE TABLE_SCHEMA = %s AND CONSTRAINT_NAME = 'PRIMARY' GROUP BY TABLE_NAME", (DATABASE,))
        keys = {}
        for table, columns in cur.fetchall():
            cur.execute(f"SELECT {columns} FROM {table}")
            keys[f"{DATABASE}.{table}"] = {normalized(row) for row in cur.fetchall()}
        return keys
