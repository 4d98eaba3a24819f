"""The sink submitted to a Spark standalone cluster (a master and two workers, testkit/spark_cluster.py), as a
user runs it beyond one machine: `binlake sink run --master spark://...` with a Delta and a PostgreSQL query in
one application, while MySQL keeps changing. One worker is SIGKILLed twice (with its executor, as a lost
machine) and brought back; Spark reruns the lost tasks on the other worker. Then the targets equal MySQL."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sink_harness import (SinkProcess, Workload, assert_targets_equal_mysql, connector_config, sink_config,
                          wait_for_mark)
from testkit.spark_cluster import SparkStandalone


@pytest.mark.slow  # three JVMs besides the driver's and two executor starts: minutes on two cores
@pytest.mark.timeout(1200)
def test_the_sink_on_a_standalone_cluster_survives_a_worker_sigkilled_twice(spark, postgres, server, broker,
                                                                            connector, tmp_path):
    db, name, fmt = server.new_database(), "cluster", "debezium"
    workload = Workload(server, db, seed=39)
    workload.create()
    workload.run(40)
    connector(connector_config(tmp_path, name, broker, server, db, fmt))
    delta_root, schema = tmp_path / "delta", f"cluster_{db}"
    configs = {f"{name}-{kind}": sink_config(name, broker, db, fmt, tmp_path / f"ck-{kind}", target,
                                             trigger={"processing_time": "500ms"}, max_offsets_per_trigger=40)
               for kind, target in [("delta", {"delta": {"path": str(delta_root)}}),
                                    ("jdbc", {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}})]}
    cluster = SparkStandalone(tmp_path / "spark", workers=2).start()
    stop = threading.Event()
    writer = threading.Thread(target=workload.keep_running, args=(stop,))
    writer.start()
    sink = SinkProcess(configs, tmp_path / "sink", master=cluster.master_url).start()
    final = {key: {**config, "trigger": "available_now", "max_offsets_per_trigger": None}
             for key, config in configs.items()}
    (tmp_path / "last").mkdir()              # (the same query names, other files)
    last = SinkProcess(final, tmp_path / "last" / "sink", master=cluster.master_url)
    try:
        sink.wait_batches(2)
        lost = cluster.workers[0]
        for _ in range(2):
            batches = sink.batches()
            lost.kill()                              # mid-stream: its executor's tasks are lost with it
            sink.wait_batches(batches + 4)           # the other worker carries the queries alone
            lost.start()
        stop.set()
        writer.join(60)
        mark = workload.mark()
        asyncio.run(wait_for_mark(broker.address, name, db, mark, timeout=120))
        sink.kill()
        assert last.start().proc.wait(600) == 0, last.log()[-3000:]
    finally:
        stop.set()
        writer.join(60)
        for process in (sink, last):
            process.kill()
        cluster.stop()
    assert "Lost executor" in sink.log(), "no executor was lost: the kills missed the application"
    assert_targets_equal_mysql(spark, postgres, server, db, delta_root, schema, " on a standalone cluster")
