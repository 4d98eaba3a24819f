"""Exactly once per MySQL transaction, across crashes: a random workload of multi-row transactions on three
tables (inserts, updates, deletes, primary-key changes; some transactions larger than the source's batch
bound) runs while the connector (`binlake connect run`) is SIGKILLed and restarted again and again, and the
broker once (or one broker of a three-broker cluster). On Oracle MySQL the workload also switches, per
session, compressed transactions, partial JSON updates and tagged GTIDs over a fourth table with JSON and
VECTOR columns, and writes one compressed transaction of 20,000 rows (mysql_workload.py); that runs at
MySQL's default binlog_row_metadata=MINIMAL and at FULL, restarting by position and by GTID set. Afterwards
the events a read_committed consumer sees must

- replay into exactly the tables MySQL holds (row by row, value for value),
- hold every streamed row change once: no source position (file, pos, row) twice, except the delete +
  create pair of a primary-key change,
- hold every MySQL transaction whole: all its changes (total_order 1..n, n = the rows it changed) and
  nothing else, contiguous in every partition, transactions in binlog order in every partition.

Set E2E_SEED to replay a run."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sandbox.sql import MYSQL_OPTIONS
from sql_fixtures import by_default_on
from e2e_harness import mysql_config, read_committed, wait_for_log, wait_until, write_config
from mysql_workload import (BINLOG_EVENTS, MAX_BATCH_RECORDS, binlog_event_types, check, check_stable_offsets,
                            committed_offset, open_records, sample_stable_offsets, seeded_workload, snapshot_done)

BIG_COMPRESSED = 20_000  # rows of the one compressed transaction of the MySQL workload


async def run_crash_test(server, broker, connector, tmp_path, *, seconds: float, kills: int, commit_interval_ms: int,
                         restart_by: str = "position"):
    seed, rng, db, workload = seeded_workload(server, BIG_COMPRESSED if server.kind == "mysql" else 0)
    name = "crash"
    config = write_config(tmp_path / "crash.yaml", **mysql_config(
        name, broker, server, [rf"{db}\.({'|'.join(workload.tables)})"], topic_partitions=3,
        max_batch_records=MAX_BATCH_RECORDS, snapshot_chunk_rows=200, commit_interval_ms=commit_interval_ms,
        restart_by=restart_by, restart={"initial_backoff_ms": 100, "max_backoff_ms": 1000}))
    address = broker.address

    async def killed_while_running(longest: float) -> None:
        """Started, and SIGKILLed at a random moment once it has committed something: on a loaded machine a
        start takes seconds, and a kill before the first commit would test nothing."""
        stored = await committed_offset(address, name)
        process = connector(config)
        await wait_for_log(process, f"{name}-0 started", timeout=60)

        async def committed() -> bool:
            return await committed_offset(address, name) != stored
        await wait_until(committed, 60, "the restarted connector's first commit", interval=0.1)
        await asyncio.sleep(rng.uniform(0.1, longest))
        process.kill()

    # Killed during the snapshot (its chunks commit one by one), then resumed to its end.
    await killed_while_running(0.5)
    process = connector(config)
    await wait_until(lambda: snapshot_done(address, name), 60, "the end of the snapshot")
    process.kill()

    async def killed_inside_the_big_transaction() -> None:
        """Once MySQL has committed the big compressed transaction, SIGKILLed while writing it to the log."""
        workload.big_requested.set()
        assert await asyncio.to_thread(workload.big_written.wait, 60), "the big transaction was not written"
        process = connector(config)
        await wait_for_log(process, f"{name}-0 started", timeout=60)

        async def inside() -> bool:   # (no other transaction has a fifth as many rows of table j)
            return await open_records(address, [f"{name}.{db}.j"]) > BIG_COMPRESSED // 5
        await wait_until(inside, 60, "the connector inside the big compressed transaction", interval=0.05)
        process.kill()

    stop, sampled = threading.Event(), threading.Event()
    since = server.binlog_end()
    writer = threading.Thread(target=workload.run, args=(stop, seconds / 3), daemon=True)
    writer.start()
    topics = [f"{name}.{db}.{t}" for t in workload.tables]
    # (sampled until the last run has caught up: on a loaded machine the connector is down most of the workload)
    sampler = asyncio.create_task(sample_stable_offsets(address, topics, sampled))
    try:
        deadline = time.monotonic() + seconds
        broker_killed = False
        for n in range(kills):
            if n == 1 and workload.big_compressed:
                await killed_inside_the_big_transaction()
            await killed_while_running(max(0.5, (deadline - time.monotonic()) / (kills - n) - 2))
            if not broker_killed and n >= kills // 2:
                process = connector(config)
                await wait_for_log(process, f"{name}-0 started")
                await asyncio.sleep(rng.uniform(0.5, 2))
                broker.kill()                          # SIGKILL the broker mid-workload, start it on the same data
                await asyncio.sleep(0.5)
                broker.start()
                await asyncio.sleep(rng.uniform(1, 2))
                process.kill()
                broker_killed = True
        stop.set()
        await asyncio.to_thread(writer.join)

        process = connector(config)                    # the last run catches up with the binlog
        await wait_for_log(process, f"{name}-0 started", timeout=60)  # (a SIGTERM before that kills it mid-import)
        end = server.binlog_end()

        async def caught_up():
            offset = await committed_offset(address, name)
            return offset is not None and (offset["file"], offset["pos"]) >= tuple(end)
        await wait_until(caught_up, 90, f"the committed offset to reach {end}")
        assert process.terminate() == 0, process.log()[-3000:]
    finally:
        stop.set()
        sampled.set()
        await asyncio.to_thread(writer.join)
        samples = await sampler

    events = await read_committed(address, topics)
    check(events, workload, server, db, seed)
    check_stable_offsets(events, samples, seed)
    big = sum(1 for n in workload.committed.values() if n > MAX_BATCH_RECORDS)
    print(f"transactions {len(workload.committed)}, big {big}, events {len(events)}, stable offsets sampled {len(samples)}")
    assert len(workload.committed) > 50, "the workload ran too little to mean anything"
    if workload.mysql_features:   # the workload wrote what it means to test
        assert BINLOG_EVENTS <= binlog_event_types(server, since), binlog_event_types(server, since)


# On Apache Kafka this crash test is `slow` (a JVM broker start and five kills: half a minute of the suite).
@pytest.mark.parametrize("any_broker_factory", ["logcore", pytest.param("kafka", marks=[pytest.mark.kafka,
                                                                                        pytest.mark.slow])],
                         indirect=True)
@by_default_on("mysql")  # (MariaDB with -m slow: Canal's TCP test kills its connector twice by default)
async def test_connector_and_broker_crashes_lose_and_repeat_nothing(server, any_broker, connector, tmp_path):
    # 12 s and 3 kills (the broker dies at the second): test_connect_failover.py kills workers running
    # the same connector under the same workload and checks, and the longer runs are `slow` below.
    # On MySQL: its defaults (binlog_row_metadata=MINIMAL), restarts by position.
    await run_crash_test(server, any_broker, connector, tmp_path, seconds=12, kills=3, commit_interval_ms=100)


async def test_mysql_at_full_row_metadata_restarting_by_gtid(mysql_factory, broker, connector, tmp_path):
    """The MySQL workload at binlog_row_metadata=FULL, the connector restarting after its stored GTID set
    (tagged GTIDs included) instead of its binlog position."""
    server = mysql_factory(**MYSQL_OPTIONS, binlog_row_metadata="FULL")
    await run_crash_test(server, broker, connector, tmp_path, seconds=12, kills=3, commit_interval_ms=100,
                         restart_by="gtid")


@pytest.mark.slow  # the cluster variant of the test above (the cluster's own failover tests run by default)
async def test_against_a_cluster_with_a_broker_killed(server, cluster_broker, connector, tmp_path):
    """The same on three brokers (replication factor 3), one of them SIGKILLed mid-workload: the
    transaction coordinators and partition leaders it held move, and nothing is lost or repeated."""
    await run_crash_test(server, cluster_broker, connector, tmp_path, seconds=20, kills=5, commit_interval_ms=100)


@pytest.mark.slow
@pytest.mark.parametrize("commit_interval_ms", [0, 100])
async def test_many_crashes_under_a_longer_workload(mariadb, broker, connector, tmp_path, commit_interval_ms):
    await run_crash_test(mariadb, broker, connector, tmp_path, seconds=120, kills=20,
                         commit_interval_ms=commit_interval_ms)


@pytest.mark.slow  # the same on MySQL, each row metadata setting with each way of restarting
@pytest.mark.parametrize("restart_by", ["position", "gtid"])
@pytest.mark.parametrize("metadata", ["MINIMAL", "FULL"])
async def test_many_crashes_under_a_longer_mysql_workload(mysql_factory, broker, connector, tmp_path, metadata,
                                                         restart_by):
    server = mysql_factory(**MYSQL_OPTIONS, binlog_row_metadata=metadata)
    await run_crash_test(server, broker, connector, tmp_path, seconds=120, kills=20, commit_interval_ms=100,
                         restart_by=restart_by)
