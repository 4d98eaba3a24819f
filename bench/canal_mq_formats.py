"""Canal's kafka-mode messages, built in process: FlatMessages (JSON) beside protobuf Messages
(canal.mq.flatMessage=false), without and with a `$pk$` partition hash, and TCP mode's entries for reference.

    .venv/bin/python bench/canal_mq_formats.py [--events 2000] [--rows 60] [--repeat 3]

No servers: the emitter's Canal outputs are fed `--events` rows events of `--rows` inserted rows each (MariaDB
writes ~60 rows of a 500-row INSERT per event) of a 6-column table, and committed every 10 events (one MySQL
transaction). Rows/s counts row changes per second of this process's CPU time (the best of `--repeat` runs), so
a loaded machine changes the figures less than it would a wall-clock rate; the ratio column compares each to
FlatMessages without a hash.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from cdc.canal_routing import CanalMq  # noqa: E402
from cdc.emitter import TableContext  # noqa: E402
from cdc.formats.canal_entry import CanalEntryOutput  # noqa: E402
from cdc.formats.canal_mq import CanalMqOutput  # noqa: E402
from cdc.formats.canal_mq_messages import CanalMqMessages  # noqa: E402
from cdc.offsets import BinlogPosition, EventSource  # noqa: E402

COLUMNS = {"id": ("int", 4), "k": ("int", 4), "name": ("varchar(40)", 12), "price": ("decimal(10,2)", 3),
           "note": ("varchar(200)", 12), "at": ("datetime", 93)}
HASH = ".*\\..*:$pk$"


def table() -> TableContext:
    return TableContext("bench", "t", "bench", 3, ("id",), {c: t for c, (t, _) in COLUMNS.items()},
                        {c: s for c, (_, s) in COLUMNS.items()})


def events(count: int, rows: int) -> list[list[dict]]:
    return [[{"id": e * rows + i, "k": i % 97, "name": f"name-{e}-{i}", "price": "123.45",
              "note": "a note of some length " * 3, "at": "2026-11-29 05:30:00"} for i in range(rows)]
            for e in range(count)]


def run(output, data: list[list[dict]], flat: bool) -> float:
    """CPU seconds to build every record of `data`."""
    t = table()
    out: list = []
    started = time.process_time()
    for n, images in enumerate(data):
        source = EventSource({"file": "binlog.000001", "pos": 1000 + n, "server_id": 1, "ts_ms": 1764394200000,
                              "gtid": "0-1-%d" % (n // 10), "row": 0})
        if flat:
            output.rows(t, "c", images, 0, len(images), source, 1764394200000, out)
        else:
            output.rows(t, "c", images, 0, len(images), source, out)
        if n % 10 == 9:
            if not flat:
                output.commit("0-1-%d" % (n // 10), BinlogPosition("binlog.000001", 2000 + n), out)
            out.clear()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = events(args.events, args.rows)
    partitions = lambda topic: 3  # noqa: E731
    cases = [
        ("FlatMessage", lambda: CanalMqOutput(CanalMq(topic="bench"), partitions), True),
        ("FlatMessage, $pk$ hash", lambda: CanalMqOutput(CanalMq(topic="bench", partitions_num=3, partition_hash=HASH),
                                                         partitions), True),
        ("protobuf Message", lambda: CanalMqMessages(CanalMq(topic="bench", flat_message=False), partitions, False,
                                                     8 << 20), False),
        ("protobuf Message, $pk$ hash", lambda: CanalMqMessages(
            CanalMq(topic="bench", flat_message=False, partitions_num=3, partition_hash=HASH), partitions, False,
            8 << 20), False),
        ("TCP entries (reference)", lambda: CanalEntryOutput("bench.canal-entries", False), False),
    ]
    rows = args.events * args.rows
    print(f"{rows:,} rows ({args.events:,} events of {args.rows}), best of {args.repeat}, CPU time")
    print(f"{'output':32} {'rows/s':>12} {'ratio':>7}")
    base = None
    for name, make, flat in cases:
        best = min(run(make(), data, flat) for _ in range(args.repeat))
        rate = rows / best
        base = base or rate
        print(f"{name:32} {rate:12,.0f} {rate / base:7.2f}")


if __name__ == "__main__":
    main()
