"""The sink killed (SIGKILL) at random moments while MySQL keeps changing — during Spark's start, in
the middle of a batch, in the middle of a commit — plus a broker and a connector SIGKILL in the same
run. After a last run to the end, every target still equals MySQL: nothing lost, doubled or resurrected."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import threading
import time

import pytest

from testkit.brokerproc import ROOT
from sink_harness import (Workload, assert_targets_equal_mysql, connector_config, run_sink, sink_config,
                          wait_for_mark)


class SinkProcess:
    """`binlake sink run CONFIG` in its own process (its own JVM), so the test can SIGKILL it."""

    def __init__(self, config: dict, path) -> None:
        self.path = path.with_suffix(".yaml")
        self.path.write_text(json.dumps(config))
        self.log_path = path.with_suffix(".log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> "SinkProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "sink", "run", str(self.path),
                                          "--master", "local[1]"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def batches(self) -> int:
        return len(re.findall(r"INFO spark_sink\.job: \S+ batch \d+: ", self.log_path.read_text(errors="replace"))) \
            if self.log_path.exists() else 0

    def wait_batches(self, count: int, timeout: float = 300) -> None:
        # A sink's first batch creates its Delta tables and merges on one core: over 100 s when the
        # disk is cold and the machine shared (seen on a 2-core CI VM), a few seconds otherwise.
        deadline = time.monotonic() + timeout
        while self.batches() < count:
            assert self.proc.poll() is None, f"the sink exited:\n{self.log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no batch within {timeout} s:\n{self.log_path.read_text()[-3000:]}"
            time.sleep(0.2)


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
    sinks = [SinkProcess(config, tmp_path / f"sink-{kind}") for kind, config in configs.items()]
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


@pytest.mark.timeout(900)  # four JVM starts on two shared cores; a timeout inside Spark would break the shared session
# On MySQL `slow` for suite time (two minutes of sink kills; the sink reads the same events from either server,
# and test_sink.py compares its tables with MySQL's by default)
@pytest.mark.parametrize("server_kind", ["mariadb", pytest.param("mysql", marks=pytest.mark.slow)], indirect=True)
def test_sink_sigkills_with_a_broker_and_a_connector_kill(spark, postgres, server, broker, connector, tmp_path):
    crash_run(2, spark, postgres, server, broker, connector, tmp_path)  # the connector dies at kill 0, the broker at 1


@pytest.mark.slow
def test_twenty_sink_sigkills(spark, postgres, server, broker, connector, tmp_path):
    crash_run(20, spark, postgres, server, broker, connector, tmp_path)
