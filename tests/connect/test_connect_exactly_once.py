"""delivery: exactly_once (the default): each batch's records and its offset are one Kafka transaction, so a
read_committed consumer sees every record exactly once, even when the runtime is SIGKILLed mid-stream."""

import asyncio
import os

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from connect_testlib import datagen_ids, stored_offsets

from waiting import wait_for

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_run, write_config

UNSUPPORTED = "does not support transactions"


def datagen(broker, **keys) -> dict:
    return {"name": "demo", "connector": "datagen", "bootstrap_servers": broker.address, **keys}


def wait_exit(process, timeout: float = 60) -> int:
    """Like process.wait(), but fails at once when the broker turns transactions down."""
    try:
        process.wait_for_log(UNSUPPORTED, timeout)
    except AssertionError:
        return process.wait(1)
    raise AssertionError(f"the broker refused transactions:\n{process.log()[-2000:]}")


async def test_each_batch_is_one_transaction_with_its_offset(broker, connect_run, write_config):
    process = connect_run(write_config(**datagen(broker, count=50, batch_size=7, interval_ms=0)))
    assert wait_exit(process) == 0, process.log()
    assert "demo-0 started (exactly_once, 0 stored offset(s))" in process.log()
    assert await datagen_ids(broker.address, "demo.datagen", "read_committed") == list(range(50))
    offsets = [offset["next"] for _, offset in await stored_offsets(broker.address, "demo", "read_committed")]
    assert offsets == [7, 14, 21, 28, 35, 42, 49, 50]  # one offset record per batch, committed with it


async def test_sigkill_mid_stream_then_restart_repeats_nothing(broker, connect_run, write_config):
    keys = datagen(broker, batch_size=5, interval_ms=10)
    running = connect_run(write_config(**keys))
    async with asyncio.timeout(30):
        while len(await datagen_ids(broker.address, "demo.datagen", "read_committed")) < 40:
            assert UNSUPPORTED not in running.log(), running.log()[-2000:]
            await asyncio.sleep(0.1)
    running.kill()  # no clean stop: an open transaction is left behind and must never become visible

    committed = (await stored_offsets(broker.address, "demo", "read_committed"))[-1][1]["next"]
    resumed = connect_run(write_config(**{**keys, "count": committed + 30}))
    assert wait_exit(resumed) == 0, resumed.log()
    assert await datagen_ids(broker.address, "demo.datagen", "read_committed") == list(range(committed + 30))


async def test_commit_interval_groups_batches_into_fewer_transactions(broker, connect_run, write_config):
    keys = datagen(broker, count=300, batch_size=1, interval_ms=0, commit_interval_ms=200)
    process = connect_run(write_config(**keys))
    assert wait_exit(process) == 0, process.log()
    assert await datagen_ids(broker.address, "demo.datagen", "read_committed") == list(range(300))
    offsets = [offset["next"] for _, offset in await stored_offsets(broker.address, "demo", "read_committed")]
    assert offsets[-1] == 300 and len(offsets) < 100  # one offset record per transaction, not per batch


@pytest.mark.slow
async def test_the_offsets_topic_stays_bounded_under_the_log_cleaner(broker_factory, connect_run, write_config):
    # Every transaction leaves an offset record and a commit marker in binlake-offsets: the cleaner
    # keeps the latest record per key and drops markers once their data is gone and delete.retention.ms passed.
    broker = broker_factory(config={"log.cleaner.backoff.ms": "100"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic("binlake-offsets", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "20000", "delete.retention.ms": "1000"})])["binlake-offsets"].result(30)
    keys = datagen(broker, count=20000, batch_size=10, interval_ms=0)
    process = connect_run(write_config(**keys))
    assert wait_exit(process, timeout=300) == 0, process.log()
    directory = broker.data_dir / "binlake-offsets-0"

    def offsets_bytes() -> int:
        return sum(os.path.getsize(directory / n) for n in os.listdir(directory) if n.endswith(".log"))

    wait_for(lambda: offsets_bytes() < 3 * 20000, "the offsets topic to shrink to a few segments", timeout=120)
    resumed = connect_run(write_config(**{**keys, "count": 20010}))
    assert wait_exit(resumed) == 0, resumed.log()
    assert "demo-0 started (exactly_once, 1 stored offset(s))" in resumed.log()
    assert await datagen_ids(broker.address, "demo.datagen", "read_committed") == list(range(20010))
