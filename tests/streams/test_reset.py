"""`binlake streams-application-reset` on a real faust app: refused while a worker runs; afterwards the app's
group reads its input from the start again and its table, whose changelog was deleted, counts from zero."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from testkit.brokerproc import ROOT
from faust_workers import Worker, faust_broker, wait_outputs

COUNTER_APP = r'''
import faust

app = faust.App("counter", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, broker_commit_interval=0.5, consumer_auto_offset_reset="earliest",
                web_enabled=False)
source = app.topic("r-in", value_serializer="raw", partitions=1)
out = app.topic("r-out", value_serializer="raw")
counts = app.Table("counts", default=int, partitions=1)


@app.agent(source)
async def count(stream):
    async for value in stream:
        counts[value] += 1
        await out.send(value=b"%s:%d" % (value, counts[value]))
'''
RESET = [sys.executable, "-m", "binlake.cli", "streams-application-reset"]


def reset(address: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RESET, "--bootstrap-server", address, "--application-id", "counter",
                           "--input-topics", "r-in", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_reset_app_reprocesses_its_input_with_fresh_tables(broker_factory, tmp_path):
    broker = faust_broker(broker_factory, "r-in", "r-out")
    admin = AdminClient({"bootstrap.servers": broker.address})
    producer = Producer({"bootstrap.servers": broker.address})
    for value in [b"a", b"b", b"a", b"a", b"b"]:
        producer.produce("r-in", value=value)
    assert producer.flush(30) == 0
    (tmp_path / "counter_app.py").write_text(COUNTER_APP.format(address=broker.address))

    worker = Worker(tmp_path, 0, "counter_app").start()
    try:
        assert wait_outputs(broker.address, "r-out", 5) == [b"a:1", b"b:1", b"a:2", b"a:3", b"b:2"]
        refused = reset(broker.address)
        assert refused.returncode == 1 and "application counter is still active" in refused.stderr
    finally:
        worker.proc.terminate()
        worker.proc.wait(60)
    assert "counter-counts-changelog" in admin.list_topics(timeout=30).topics

    dry = reset(broker.address, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "Topic: r-in Partition: 0 Offset: 0" in dry.stdout and "(dry run) Done." in dry.stdout
    assert "counter-counts-changelog" in dry.stdout and "counter-counts-changelog" in admin.list_topics(timeout=30).topics

    done = reset(broker.address)
    assert done.returncode == 0 and done.stdout.endswith("Done.\n"), done.stderr
    assert "counter-counts-changelog" not in admin.list_topics(timeout=30).topics

    # Run again: the input from its start, the table from zero (not a:4, a:5, ...).
    again = Worker(tmp_path, 1, "counter_app").start()
    try:
        assert wait_outputs(broker.address, "r-out", 10)[5:] == [b"a:1", b"b:1", b"a:2", b"a:3", b"b:2"]
    finally:
        again.kill()
