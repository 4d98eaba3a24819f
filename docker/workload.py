"""The compose demo's workload: the shop database with its first rows (binlake/demo/shop.py) once,
then a new order every few seconds for as long as it runs, so changes keep flowing through the
pipeline. /tmp/workload-ready marks the schema in place (its health check)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pymysql

from binlake.demo.shop import DATABASE, SCHEMA, SEED

READY = Path("/tmp/workload-ready")
INTERVAL_S = float(os.environ.get("ORDER_INTERVAL_S", "5"))
PRODUCTS = (("MUG-01", "12.50"), ("TEE-01", "19.90"), ("STK-01", "3.00"))


def connect():
    while True:  # (the health check says the server answers; the root user may be a moment later)
        try:
            return pymysql.connect(host=os.environ["MYSQL_HOST"], port=int(os.environ.get("MYSQL_PORT", "3306")),
                                   user="root", password=os.environ["MYSQL_ROOT_PASSWORD"], autocommit=True)
        except pymysql.err.OperationalError as exc:
            print(f"waiting for the database at {os.environ['MYSQL_HOST']}: {exc}", flush=True)
            time.sleep(1)


def create_shop(cursor) -> None:
    cursor.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    cursor.execute(f"USE {DATABASE}")
    cursor.execute("SHOW TABLES")
    if {row[0] for row in cursor.fetchall()} >= {"customers", "products", "orders"}:
        return  # (a restart, or a volume kept from the last run)
    for statement in (*SCHEMA, *SEED):
        cursor.execute(statement)
    print(f"created {DATABASE} with its first rows", flush=True)


def main() -> None:
    cursor = connect().cursor()
    create_shop(cursor)
    READY.touch()
    for n in itertools.count():
        cursor.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM orders")
        (order_id,) = cursor.fetchone()
        sku, price = PRODUCTS[n % len(PRODUCTS)]
        quantity = n % 3 + 1
        cursor.execute("INSERT INTO orders (id, customer_id, sku, quantity, total, status, ordered_at) "
                       "VALUES (%s, %s, %s, %s, %s * %s, 'new', NOW())",
                       (order_id, n % 3 + 1, sku, quantity, price, quantity))
        print(f"order {order_id}: {quantity} × {sku}", flush=True)
        time.sleep(INTERVAL_S)


if __name__ == "__main__":
    main()
