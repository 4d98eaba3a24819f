"""The example processors (examples/shop_processors.py) fed by the mysql connector from a MySQL or MariaDB
workload, run by three `binlake streams worker`s that are SIGKILLed and restarted at random (and the
broker once): a read_committed reader then finds each order change's enriched and filtered outputs
exactly once and in order, and every revenue window equal to the fold of the order changes."""

from __future__ import annotations

import asyncio
import collections
import decimal
import json
import random
import time

import pytest

from binlake.demo.shop import SCHEMA
from sql_fixtures import by_default_on
from e2e_harness import mysql_config, read_committed, wait_until, write_config
from faust_workers import Worker
from spark_sink.changes import parse
from testkit.brokerproc import ROOT

BROKER_CONFIG = {"transaction.state.log.num.partitions": "5", "offsets.topic.num.partitions": "5",
                 "group.initial.rebalance.delay.ms": "0", "num.partitions": "3"}
CUSTOMERS, SKUS = 20, ("MUG-01", "TEE-01", "STK-01", "CAP-01", "PEN-01")
APP_ID = "shop-processors-test"
HIGH_VALUE = decimal.Decimal("100")


class OrderWorkload:
    """Orders inserted, repriced, moved to another product, paid and deleted, a few per transaction."""

    def __init__(self, server, db: str, seed: int) -> None:
        self.server, self.db, self.rng = server, db, random.Random(seed)
        self.next_id = 1

    def run(self, transactions: int) -> None:
        r = self.rng
        with self.server.connect(db=self.db) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            for _ in range(transactions):
                for _ in range(r.randint(1, 3)):
                    cur.execute("SELECT id FROM orders")
                    ids = [row[0] for row in cur.fetchall()]
                    action = r.random() if ids else 0
                    total = decimal.Decimal(r.randint(100, 30000)) / 100
                    if action < 0.5:
                        cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, %s, 'new', NOW())",
                                    (self.next_id, r.randint(1, CUSTOMERS), r.choice(SKUS), r.randint(1, 5), total))
                        self.next_id += 1
                    elif action < 0.7:
                        cur.execute("UPDATE orders SET total = %s WHERE id = %s", (total, r.choice(ids)))
                    elif action < 0.8:
                        cur.execute("UPDATE orders SET sku = %s WHERE id = %s", (r.choice(SKUS), r.choice(ids)))
                    elif action < 0.9:
                        cur.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (r.choice(ids),))
                    else:
                        cur.execute("DELETE FROM orders WHERE id = %s", (r.choice(ids),))
                conn.commit()


def minute_of(ts_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:00", time.gmtime(ts_ms // 1000))


def canal_rows(messages) -> list[dict]:
    return [json.loads(m.value) for m in messages if m.value is not None]


def expected_outputs(changes, names: dict[int, str]):
    """From the order changes in log order: per order the enriched and high-value outputs, and the
    revenue per (sku, minute)."""
    enriched, high_value = collections.defaultdict(list), collections.defaultdict(list)
    revenue: collections.Counter = collections.Counter()
    for change in changes:
        row = change.row
        op = "c" if change.op == "r" else change.op
        enriched[row["id"]].append((op, row["total"], row["sku"], row["status"], names[row["customer_id"]]))
        was = change.before is not None and decimal.Decimal(change.before["total"]) >= HIGH_VALUE
        now = change.after is not None and decimal.Decimal(change.after["total"]) >= HIGH_VALUE
        if was or now:
            op = op if was == now else ("c" if now else "d")
            high_value[row["id"]].append((op, (change.after if now else change.before)["total"]))
        for sku, amount in bookings(change).items():
            revenue[sku, minute_of(change.ts_ms)] += amount
    return enriched, high_value, revenue


CANAL_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}


def bookings(change) -> dict[str, decimal.Decimal]:
    """What an order change books per product: minus the old total, plus the new one; zeros dropped."""
    booked: dict[str, decimal.Decimal] = collections.defaultdict(decimal.Decimal)
    if change.before is not None:
        booked[change.before["sku"]] -= decimal.Decimal(change.before["total"])
    if change.after is not None:
        booked[change.after["sku"]] += decimal.Decimal(change.after["total"])
    return {sku: amount for sku, amount in booked.items() if amount}


def run(broker_factory, server, connector, tmp_path, kills: int) -> None:
    broker = broker_factory(config=BROKER_CONFIG)
    db = server.new_database()
    server.sql(*SCHEMA, db=db)
    names = {i: f"customer {i}" for i in range(1, CUSTOMERS + 1)}
    with server.connect(db=db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO customers VALUES (%s, %s, %s, 'basic', NOW(3))",
                        [(i, name, f"c{i}@example.com") for i, name in names.items()])
        conn.commit()
    connector(write_config(tmp_path / "shop.yaml", **mysql_config("shop", broker, server, [rf"{db}\..*"],
                                                                   format="debezium", topic_partitions=3)))
    env = {"BOOTSTRAP_SERVERS": broker.address, "SHOP_TOPIC_PREFIX": f"shop.{db}", "PROCESSOR_APP_ID": APP_ID,
           "DERIVED_TOPIC_PREFIX": "derived", "SHOP_PARTITIONS": "3", "PYTHONPATH": f"{ROOT}:{ROOT / 'examples'}"}
    workers = [Worker(tmp_path, n, "shop_processors", env).start() for n in range(3)]
    out_topics = [f"derived.{t}" for t in ("orders_enriched", "high_value_orders", "revenue_per_minute")]

    async def customers_known():  # a stream-table join: orders come once the customers are in the table
        try:
            return len(await read_committed(broker.address, [f"{APP_ID}-customers-changelog"])) >= CUSTOMERS
        except AssertionError:
            return False
    asyncio.run(wait_until(customers_known, 120, "the customers table materialized"))

    workload, rng = OrderWorkload(server, db, seed=kills), random.Random(kills)
    try:
        for kill in range(kills):
            workload.run(150 // kills)
            time.sleep(rng.uniform(1, 3))
            victim = rng.choice(workers)
            victim.kill()
            if kill == kills // 2:
                broker.kill()
                broker.start()
            victim.start()
        workload.run(5)

        async def settled():  # the revenue agent is a hop behind the enriching one: wait for both
            changes = [c for m in await read_committed(broker.address, [f"shop.{db}.orders"])
                       if (c := parse(m.value, "debezium")) is not None]
            try:
                enriched = await read_committed(broker.address, out_topics[:1])
                revenue = await read_committed(broker.address, out_topics[2:])
            except AssertionError:
                return False
            booked = sum(len(bookings(c)) for c in changes)
            return bool(changes) and len(enriched) >= len(changes) and len(revenue) >= booked
        asyncio.run(wait_until(settled, 180, "an enriched output for every order change and a revenue output for "
                                             "every booking", interval=1))
        time.sleep(3)  # anything late would be a duplicate
    finally:
        for worker in workers:
            worker.kill()

    async def read_all():
        changes = [c for m in await read_committed(broker.address, [f"shop.{db}.orders"])
                   if (c := parse(m.value, "debezium")) is not None]
        return changes, {t: await read_committed(broker.address, [t]) for t in out_topics}
    changes, outputs = asyncio.run(read_all())
    enriched, high_value, revenue = expected_outputs(changes, names)

    got_enriched = collections.defaultdict(list)
    for body in canal_rows(outputs["derived.orders_enriched"]):
        row = body["data"][0]
        got_enriched[int(row["id"])].append((CANAL_OPS[body["type"]], row["total"], row["sku"], row["status"],
                                             row["customer_name"]))
    wrong = {k: (got_enriched.get(k), v) for k, v in enriched.items() if got_enriched.get(k) != v}
    assert not wrong and got_enriched.keys() == enriched.keys(), \
        f"{len(wrong)} of {len(enriched)} orders' enriched outputs differ, e.g. {list(wrong.items())[:2]}"

    got_high = collections.defaultdict(list)
    for body in canal_rows(outputs["derived.high_value_orders"]):
        got_high[int(body["data"][0]["id"])].append((CANAL_OPS[body["type"]], body["data"][0]["total"]))
    assert got_high == high_value, "the high-value orders differ from the filter applied to the order changes"

    final: dict[tuple, decimal.Decimal] = {}
    for body in canal_rows(outputs["derived.revenue_per_minute"]):
        row = body["data"][0]
        final[row["sku"], row["minute"]] = decimal.Decimal(row["revenue"])
    assert final == dict(revenue), f"revenue windows differ: {sorted(set(final.items()) ^ set(revenue.items()))[:6]}"
    booked = sum(len(bookings(c)) for c in changes)
    assert len(outputs["derived.revenue_per_minute"]) == booked, "a revenue booking was lost or doubled"


@by_default_on("mysql")      # (the processors read the same events from either server)
def test_shop_processors_exactly_once_across_worker_kills_and_a_broker_kill(broker_factory, server, connector,
                                                                            tmp_path):
    run(broker_factory, server, connector, tmp_path, kills=3)  # the broker dies at the second kill; 20: slow


@pytest.mark.slow
def test_shop_processors_exactly_once_across_twenty_worker_kills(broker_factory, server, connector, tmp_path):
    run(broker_factory, server, connector, tmp_path, kills=20)
