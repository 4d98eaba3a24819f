"""`binlake connect run` end to end against a real broker: records land, offsets live in the compacted
offsets topic, SIGTERM commits and a restart resumes without duplicates, failed tasks restart with backoff."""

import asyncio
import json
import re
from datetime import datetime

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from connect_testlib import datagen_ids, read_topic, stored_offsets, topic_config

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_run, write_config

PARTITION = {"datagen": "demo"}


def datagen(broker, **keys) -> dict:
    return {"name": "demo", "connector": "datagen", "bootstrap_servers": broker.address,
            "delivery": "at_least_once", "interval_ms": 0, **keys}


async def wait_for_records(broker, topic: str, at_least: int, timeout: float = 30) -> list[int]:
    async with asyncio.timeout(timeout):
        while len(ids := await datagen_ids(broker.address, topic)) < at_least:
            await asyncio.sleep(0.2)
    return ids


async def test_records_land_and_offsets_are_kept_in_the_compacted_topic(broker, connect_run, write_config):
    first = connect_run(write_config(**datagen(broker, count=55, batch_size=10)))
    assert first.wait() == 0, first.log()
    assert await datagen_ids(broker.address, "demo.datagen") == list(range(55))

    [message] = [m for m in await read_topic(broker.address, "binlake-offsets") if json.loads(m.key)[0] == "demo"]
    assert message.key == b'["demo",{"datagen":"demo"}]'  # Kafka Connect's key shape; stable bytes for compaction
    assert json.loads(message.value) == {"next": 55}
    assert await topic_config(broker.address, "binlake-offsets", "cleanup.policy") == "compact"

    second = connect_run(write_config(**datagen(broker, count=80, batch_size=10)))
    assert second.wait() == 0, second.log()
    assert "demo-0 started (at_least_once, 1 stored offset(s))" in second.log()
    assert await datagen_ids(broker.address, "demo.datagen") == list(range(80))


async def test_sigterm_commits_and_restart_resumes_without_duplicates(broker, connect_run, write_config):
    # Offsets would only be committed hourly: what is stored afterwards was committed by the clean stop.
    keys = datagen(broker, batch_size=5, interval_ms=20, commit_interval_ms=3_600_000)
    running = connect_run(write_config(**keys))
    await wait_for_records(broker, "demo.datagen", 30)
    assert running.terminate() == 0, running.log()
    assert "stopping: tasks finish their current batch and commit" in running.log()

    landed = await datagen_ids(broker.address, "demo.datagen")
    assert landed == list(range(len(landed)))
    assert (await stored_offsets(broker.address, "demo"))[-1] == (PARTITION, {"next": len(landed)})

    resumed = connect_run(write_config(**{**keys, "count": len(landed) + 25}))
    assert resumed.wait() == 0, resumed.log()
    assert await datagen_ids(broker.address, "demo.datagen") == list(range(len(landed) + 25))


def _started_at(log: str) -> list[datetime]:
    return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in log.splitlines()
            if re.search(r"demo-0 started \(", line)]


async def test_a_crashing_task_restarts_with_exponential_backoff(broker, connect_run, write_config):
    keys = datagen(broker, connector="flaky_plugin:FlakyConnector", count=40, batch_size=5, fail_at=20, failures=3,
                   restart={"initial_backoff_ms": 200, "max_backoff_ms": 500, "multiplier": 2})
    process = connect_run(write_config(**keys))
    assert process.wait() == 0, process.log()
    log = process.log()
    for failure, delay in [(1, "0.200"), (2, "0.400"), (3, "0.500")]:
        assert (f"demo-0 failed: RuntimeError: injected failure at record 20 (attempt {failure}); "
                f"restarting in {delay} s (failure {failure} in a row)") in log
    assert log.count("Traceback") == 1  # the first failure logs its traceback, repeats only the reason
    assert "demo-0: recovered after 3 failure(s)" in log
    starts = _started_at(log)
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:])]
    assert len(gaps) == 3 and [g >= d for g, d in zip(gaps, [0.2, 0.4, 0.5])] == [True] * 3, gaps
    # The source failed, not the log: what it had written was committed, so nothing repeats.
    assert await datagen_ids(broker.address, "demo.datagen") == list(range(40))


async def test_a_task_failing_past_max_restarts_is_left_failed(broker, connect_run, write_config):
    keys = datagen(broker, connector="flaky_plugin:FlakyConnector", count=40, fail_at=0, failures=100,
                   restart={"initial_backoff_ms": 50, "max_restarts": 2})
    process = connect_run(write_config(**keys))
    assert process.wait() == 1, process.log()
    assert "demo-0 failed 3 times in a row, giving up: RuntimeError: injected failure at record 0" in process.log()


async def test_several_connectors_in_one_process_and_unique_names(broker, connect_run, write_config):
    one = write_config("one.yaml", **datagen(broker, name="one", count=12))
    two = write_config("two.yaml", **datagen(broker, name="two", count=7, delivery="exactly_once"))
    process = connect_run(one, two)
    assert process.wait() == 0, process.log()
    assert await datagen_ids(broker.address, "one.datagen") == list(range(12))
    assert await datagen_ids(broker.address, "two.datagen", "read_committed") == list(range(7))

    clash = connect_run(one, write_config("again.yaml", **datagen(broker, name="one")))
    assert clash.wait() == 2
    assert "connector names must be unique; given twice: one" in clash.log()


async def test_an_offsets_topic_that_is_not_compacted_is_refused(broker, connect_run, write_config):
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("plain-offsets", 1, 1, topic_configs={"cleanup.policy": "delete"})])
    finally:
        await admin.close()
    process = connect_run(write_config(**datagen(broker, count=5, offsets={"topic": "plain-offsets"},
                                             restart={"max_restarts": 0})))
    assert process.wait() == 1, process.log()
    assert ("offsets topic plain-offsets has cleanup.policy=delete; it must be compact, or retention will delete "
            "offsets and connectors start over") in process.log()


async def test_a_task_that_does_not_stop_is_cancelled_after_shutdown_timeout(broker, connect_run, write_config):
    keys = datagen(broker, connector="flaky_plugin:FlakyConnector", fail_at=1 << 30, failures=0, hang_on_stop=True,
                   interval_ms=20, shutdown_timeout_ms=500)
    process = connect_run(write_config(**keys))
    process.wait_for_log("demo-0 started")
    assert process.terminate(timeout=15) == 0, process.log()
    assert "demo-0 did not stop within shutdown_timeout_ms; cancelling it" in process.log()
