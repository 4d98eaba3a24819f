"""The sink killed (SIGKILL) at random moments while MySQL keeps changing — during Spark's start, in
the middle of a batch, in the middle of a commit — plus a broker and a connector SIGKILL in the same
run. After a last run to the end, every target still equals MySQL: nothing lost, doubled or resurrected."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from sink_harness import (SinkProcess, Workload, assert_targets_equal_mysql, connector_config, run_sink,
                          sink_config, wait_for_mark)


def crash_run(kills: int, spark, postgres, server, broker, connector, tmp_path) -> None:
    """A Delta sink and a PostgreSQL sink side by side, killed together `kills` times."""
    db, name, fmt = server.new_database(), "crash", "debezium"
    workload = Workload(server, db, seed=kills)
    workload.create()
    workload.run(40)
    connector_cfg = connector_config(tmp_path, name, broker, server, db, fmt)
    source = connector(connector_cfg)
    delta_root, schema = tmp_path / "delta", f"crash_{db}"
    configs = {kind: sink_config(name, broker, db, fmt, tmp_path / f"ck-{kind}", target,
                                 trigger={"processing_time": "500ms"}, max_offsets_per_trigger=40)
               for kind, target in [("delta", {"delta": {"path": str(delta_root), "optimize_every": 3}}),
                                    ("jdbc", {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}})]}
    stop = threading.Event()
    writer = threading.Thread(target=workload.keep_running, args=(stop,))
    writer.start()
    rng = random.Random(kills)
    sinks = [SinkProcess({f"sink-{kind}": config}, tmp_path / f"sink-{kind}") for kind, config in configs.items()]
    try:
        for kill in range(kills):
            merged = [sink.batches() for sink in sinks]
            for sink in sinks:
                sink.start()
            if kill % 2:  # once one sink (each in turn) has a batch in, kill at a random moment of its next ones
                turn = kill // 2 % len(sinks)  # (reads, merges, commits); the other is where it is, often mid-batch
                sinks[turn].wait_batches(merged[turn] + 1)
                time.sleep(rng.uniform(0, 3))
            else:  # at any moment, the JVM's start included
                time.sleep(rng.uniform(2, 8))
            for sink in sinks:
                sink.kill()
            if kill == kills // 2:
                broker.kill()
                broker.start()
            if kill == kills // 3:
                source.kill()
                source = connector(connector_cfg)
    finally:
        stop.set()
        writer.join(60)
        for sink in sinks:  # a failed run leaves none running (its JVM would load the tests after it)
            sink.kill()
    mark = workload.mark()
    asyncio.run(wait_for_mark(broker.address, name, db, mark, timeout=120))
    for config in configs.values():
        run_sink(spark, {**config, "trigger": "available_now", "max_offsets_per_trigger": None})
    assert_targets_equal_mysql(spark, postgres, server, db, delta_root, schema, f" after {kills} sink kills")


# `slow` for suite time (3.5 minutes of sink kills); the default suite keeps the sink's restart from its
# checkpoint in test_sink_rules.py and its tables against MySQL's in test_sink.py
@pytest.mark.slow
@pytest.mark.timeout(900)  # four JVM starts on two shared cores; a timeout inside Spark would break the shared session
def test_sink_sigkills_with_a_broker_and_a_connector_kill(spark, postgres, server, broker, connector, tmp_path):
    crash_run(2, spark, postgres, server, broker, connector, tmp_path)  # the connector dies at kill 0, the broker at 1


@pytest.mark.slow
def test_twenty_sink_sigkills(spark, postgres, server, broker, connector, tmp_path):
    crash_run(20, spark, postgres, server, broker, connector, tmp_path)
