"""faust-streaming with processing_guarantee="exactly_once" against a real broker: a worker killed
mid-stream (SIGKILL) and a replacement produce every output exactly once.

The app is shaped around three properties of faust (docs/transactions.md): it sends transactionally
only to topics it also consumes; `stream_publish_on_commit` puts an event's output in the
transaction that commits the event; and that commit takes the outputs attached up to and *including*
the offset it commits, partition after partition with awaits in between. So an event processed
while the commit works through another partition can have its output committed without its offset.
With one source partition (and the send as the agent's last step) no event can slip in.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from brokerproc import read_to_end
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30
CONFIG = {"transaction.state.log.num.partitions": "5", "offsets.topic.num.partitions": "5",
          "group.initial.rebalance.delay.ms": "0"}

APP = r'''
import asyncio, sys
import faust

address = sys.argv.pop(1)
app = faust.App("eos-app", broker=f"kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, broker_session_timeout=6, broker_heartbeat_interval=1,
                broker_commit_interval=0.5, consumer_auto_offset_reset="earliest", web_enabled=False,
                stream_publish_on_commit=True)
source = app.topic("faust-in", value_serializer="raw", key_serializer="raw", partitions=1)
sink = app.topic("faust-out", value_serializer="raw", key_serializer="raw", partitions=1)


@app.agent(source)
async def shout(stream):
    async for event in stream.events():
        await asyncio.sleep(0.01)  # the work; the send comes last (see the module docstring)
        await sink.send(key=event.key, value=event.value.upper(), partition=event.message.partition)


# Consuming the sink puts it in the source's co-partitioned group, so faust writes it with the
# source partition's transactional producer.
@app.agent(sink)
async def audit(stream):
    async for _ in stream:
        pass

if __name__ == "__main__":
    app.main()
'''



def start_worker(tmp_path, address: str) -> subprocess.Popen:
    (tmp_path / "app.py").write_text(APP)
    return subprocess.Popen([sys.executable, "app.py", address, "worker", "-l", "warn"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow  # suite time: binlake's streams worker runs faust exactly once by default (tests/streams)
def test_faust_exactly_once_across_a_worker_kill(broker_factory, tmp_path):
    broker = broker_factory(config=CONFIG)
    admin = AdminClient({"bootstrap.servers": broker.address})
    for future in admin.create_topics([NewTopic("faust-in", 1, 1), NewTopic("faust-out", 1, 1)]).values():
        future.result(TIMEOUT)
    inputs = [b"event-%03d" % i for i in range(400)]
    feeder = Producer({"bootstrap.servers": broker.address})
    for i, value in enumerate(inputs):
        feeder.produce("faust-in", value, key=b"k%d" % i, partition=0)
    feeder.flush(TIMEOUT)

    first = start_worker(tmp_path, broker.address)
    try:
        deadline = time.monotonic() + 60
        while len(read_to_end(broker.address, {"faust-out": 1}, "read_committed")) < 100:  # well into the stream
            assert time.monotonic() < deadline, "the first worker produced nothing"
            assert first.poll() is None, "the first worker died"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert len(read_to_end(broker.address, {"faust-out": 1}, "read_committed")) < len(inputs)

    second = start_worker(tmp_path, broker.address)
    try:
        deadline = time.monotonic() + 120
        while len(read_to_end(broker.address, {"faust-out": 1}, "read_committed")) < len(inputs):
            assert time.monotonic() < deadline, "the second worker did not finish the stream"
            assert second.poll() is None, "the second worker died"
            time.sleep(1)
        time.sleep(2)  # a duplicate, if any were coming, would land in the next commit interval
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()
    assert sorted(read_to_end(broker.address, {"faust-out": 1}, "read_committed")) == sorted(v.upper() for v in inputs)
