"""Bounded memory for a transaction larger than the connector could hold: one MariaDB UPDATE of wide rows
(about 230 MB of change events) streams through `binlake connect run` in slices of max_batch_bytes inside
one Kafka transaction. The connector's resident memory (its source process included) grows by a small
fraction of the transaction, and a read_committed consumer sees the transaction whole and once.
bench/cdc_memory.py runs the 2 GB version and prints the peak."""

from __future__ import annotations

import asyncio

import pytest
import zstandard

from cdc.binlog import compressed
from cdc.errors import DecodeError
from e2e_harness import read_committed, wait_for_log, wait_until, write_config
from mysql_workload import committed_offset
from testkit.memory import PeakRss, tree_rss

ROWS, WIDTH = 1200, 100_000         # an UPDATE's event holds the row twice: ~200 KB per change, ~230 MB in all
MiB = 1 << 20


async def test_a_large_transaction_streams_in_bounded_slices(mariadb, broker, connector, tmp_path):
    db = mariadb.new_database()
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, pad LONGTEXT)", db=db)
    for first in range(0, ROWS, 100):
        mariadb.sql("INSERT INTO t VALUES " + ", ".join(f"({i}, 0, REPEAT('x', {WIDTH}))"
                                                        for i in range(first + 1, first + 101)), db=db)
    name = "memory"
    config = write_config(tmp_path / "memory.yaml", name=name, connector="mysql", bootstrap_servers=broker.address,
                          database={"host": "127.0.0.1", "port": mariadb.port, "user": mariadb.user,
                                    "password": mariadb.password, "server_id": 5402},
                          tables={"include": [rf"{db}\.t"]}, snapshot="no_data", heartbeat_interval_ms=200,
                          max_batch_bytes=MiB, max_queue_bytes=4 * MiB)
    process = connector(config)
    await wait_for_log(process, f"{name}-0 started", timeout=60)
    await wait_until(lambda: committed_offset(broker.address, name), 60, "the connector's first heartbeat")

    baseline = tree_rss(process.proc.pid)
    sampler = PeakRss(process.proc.pid).start()
    await asyncio.to_thread(mariadb.sql, "UPDATE t SET v = v + 1", db=db)
    end = mariadb.binlog_end()

    async def caught_up() -> bool:
        offset = await committed_offset(broker.address, name)
        return offset is not None and (offset["file"], offset["pos"]) >= end
    try:
        await wait_until(caught_up, 120, "the connector to write the transaction", interval=0.2)
    finally:
        peak = sampler.stop()
    growth = peak - baseline
    events = [m for m in await read_committed(broker.address, [f"{name}.{db}.t"]) if m.value is not None]
    size = sum(len(m.value) for m in events)
    print(f"transaction {size / MiB:.0f} MiB of events, connector RSS {baseline / MiB:.0f} MiB -> peak "
          f"{peak / MiB:.0f} MiB (+{growth / MiB:.0f} MiB)")
    assert len(events) == ROWS and {m.data["transaction"]["id"] for m in events} == {events[0].data["transaction"]["id"]}
    assert sorted(m.data["transaction"]["total_order"] for m in events) == list(range(1, ROWS + 1))
    assert size > 200 * MiB
    # Held whole, the transaction would be in the source process, pickled, and in the connector: 3x its size
    # (+470 MiB for 153 MiB when max_batch_bytes and max_queue_bytes do not bound it); in slices, a few
    # slices' worth plus the allocator's slack (+52 MiB, two thirds of it in the source process).
    assert growth < size / 3, f"RSS grew by {growth / MiB:.0f} MiB for a {size / MiB:.0f} MiB transaction"


def test_a_compressed_transaction_is_decompressed_as_a_stream():
    """Events split across the reader's chunks, an event larger than a chunk, several zstd frames."""
    def event(n: int, size: int) -> bytes:
        return compressed.HEADER.pack(0, 30, 1, size, 0, 0) + bytes([n % 256]) * (size - compressed.HEADER_SIZE)
    events = [event(n, size) for n, size in enumerate([19, 100, compressed._CHUNK + 7, 5000, 3 * compressed._CHUNK])]
    raw = b"".join(events)
    packed = zstandard.ZstdCompressor().compress(raw[:50_000]) + zstandard.ZstdCompressor().compress(raw[50_000:])
    uncompressed_size = bytes([3, 4, 0xfd]) + len(raw).to_bytes(3, "little")   # (type, length, packed value)
    body = uncompressed_size + bytes([0]) + packed          # (no compression field: zstd)
    assert list(compressed.transaction_payload(body)) == events
    with pytest.raises(DecodeError, match="truncated"):
        list(compressed.transaction_payload(bytes([0]) + zstandard.ZstdCompressor().compress(raw[:-1])))
