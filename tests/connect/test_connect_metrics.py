"""The connect runtime's Prometheus endpoint (`--prometheus-listener`), scraped while a connector runs and
parsed with prometheus-client's own parser."""

import asyncio

from connect_testlib import datagen_ids
from prometheus_scrape import endpoint, scrape

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_run, write_config


async def test_records_batches_commits_and_task_states_are_reported(broker, connect_run, write_config):
    process = connect_run(write_config(name="gen", connector="datagen", bootstrap_servers=broker.address,
                                       batch_size=5, interval_ms=10), metrics="127.0.0.1:0")
    process.wait_for_log("Prometheus metrics on")
    url = endpoint(process.log())
    task = (("connector", "gen"), ("task", "0"))
    async with asyncio.timeout(30):
        while (samples := scrape(url)).get(("binlake_connect_records_total", task), 0) < 100:
            await asyncio.sleep(0.1)
    records = samples[("binlake_connect_records_total", task)]
    assert records == 5 * samples[("binlake_connect_batches_total", task)]  # datagen's batches hold 5
    assert samples[("binlake_connect_source_transactions_total", task)] == records / 5
    assert samples[("binlake_connect_commit_seconds_count", task)] >= 1
    assert samples[("binlake_connect_task_failures_total", task)] == 0
    assert samples[("binlake_connect_task_state", tuple(sorted((*task, ("state", "RUNNING")))))] == 1
    assert ("process_resident_memory_bytes", ()) in samples
    assert process.terminate() == 0, process.log()
    assert len(await datagen_ids(broker.address, "gen.datagen", "read_committed")) >= records
