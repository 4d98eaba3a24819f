"""The connector's change events in Avro beside JSON: records built per CPU second and bytes per change.

    .venv/bin/python bench/cdc_avro.py [--rows 200000]

Runs cdc.emitter.Emitter in process on the same row images (an orders-like table: BIGINT key, INT,
VARCHAR(40), DECIMAL(10,2), DATETIME(3), TIMESTAMP, nullable TEXT) for inserts and updates inside a
transaction, once with the JSON format (its per-event templates) and once with `value_format: avro,
key_format: avro` (fastavro's schemaless_writer per record), the schemas registered once with a real
`binlake schema-registry` on a real broker started here. Reports changes per CPU second (the emitter
only: no binlog decoding, no producer) and the mean key and value bytes of a change.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from cdc.config import SourceConfig  # noqa: E402
from cdc.emitter import Emitter, TableContext  # noqa: E402
from cdc.offsets import SourceInfo  # noqa: E402
from cdc.schema.model import ColumnDef, TableDef  # noqa: E402
from testkit.brokerproc import BrokerProcess  # noqa: E402
from testkit.registryproc import RegistryProcess  # noqa: E402

TABLE = TableDef("shop", "orders", (
    ColumnDef("id", "bigint", nullable=False), ColumnDef("qty", "int", nullable=False),
    ColumnDef("item", "varchar", (40,), charset="utf8mb4"), ColumnDef("price", "decimal", (10, 2)),
    ColumnDef("placed", "datetime", (3,)), ColumnDef("seen", "timestamp"), ColumnDef("note", "text")),
    primary_key=("id",))


def images(rows: int) -> list[dict]:
    return [{"id": i, "qty": i % 50, "item": f"item number {i % 997}", "price": f"{i % 10_000}.{i % 100:02d}",
             "placed": f"2024-05-{1 + i % 28:02d}T12:{i % 60:02d}:{i % 60:02d}.{i % 1000:03d}",
             "seen": f"2024-05-{1 + i % 28:02d}T12:00:00Z", "note": None if i % 3 else "gift wrap"}
            for i in range(rows)]


def emit(config: SourceConfig, kind: str, rows: list[dict]) -> tuple[float, list]:
    """(CPU seconds, records) of one rows event of `rows` changes, in a transaction."""
    emitter = Emitter(config, lambda topic: 1)
    table = TableContext.build(config, lambda topic: 1, "shop", "orders", ("id",), TABLE)
    source = SourceInfo("srv", server_id=1, file="binlog.000001", pos=4, gtid="0-1-5", db="shop", table="orders",
                        ts_ms=1_700_000_000_000).event()
    images_ = rows if kind == "c" else [image for row in rows for image in (row, {**row, "qty": row["qty"] + 1})]
    out: list = []
    started = time.process_time()
    emitter.rows(table, kind, images_, 0, len(rows), source, 0, (b'{"id":"0-1-5","total_order":', 0, 0), out)
    return time.process_time() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-avro-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker").start()
        registry = RegistryProcess(broker.address, Path(tmp) / "registry.log").start()
        try:
            base = {"name": "srv", "user": "bench", "server_id": 1}
            configs = {"json": SourceConfig(**base),
                       "avro": SourceConfig(**base, value_format="avro", key_format="avro",
                                            schema_registry={"url": registry.url})}
            rows = images(args.rows)
            print(f"{args.rows:,} changes per run, best of 3; changes per CPU second of the emitter, mean bytes")
            print(f"{'':6} {'kind':7} {'changes/CPU s':>14} {'key B':>6} {'value B':>8}")
            results = {}
            for kind in ("c", "u"):
                for name, config in configs.items():
                    cpu, out = min((emit(config, kind, rows) for _ in range(3)), key=lambda r: r[0])
                    key = sum(len(r.key) for r in out) / len(out)
                    value = sum(len(r.value) for r in out) / len(out)
                    results[name, kind] = (args.rows / cpu, key, value)
                    print(f"{name:6} {'insert' if kind == 'c' else 'update':7} {args.rows / cpu:14,.0f} "
                          f"{key:6.1f} {value:8.1f}")
            for kind in ("c", "u"):
                (jr, jk, jv), (ar, ak, av) = results["json", kind], results["avro", kind]
                print(f"avro/json {'insert' if kind == 'c' else 'update'}: speed {ar / jr:.2f}x, "
                      f"bytes {(ak + av) / (jk + jv):.2f}x")
        finally:
            registry.kill()
            broker.kill()


if __name__ == "__main__":
    main()
