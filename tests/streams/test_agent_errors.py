"""An agent that raises, under `binlake streams worker`, with real workers over a real broker: with the
default policy (`agent_errors="stop"`) the worker stops at once naming the event, commits nothing
from it on (its transaction aborted), also when SIGTERMed or SIGKILLed right after, and a restart
with the agent fixed processes the event; with `agent_errors="dead_letter"` the event goes to the
dead-letter topic with the error's headers and the worker goes on, exactly once across a SIGKILL."""

from __future__ import annotations

import collections
import signal
import subprocess
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition

from binlake.cli import main
from brokerproc import TO_THE_END, read_to_end
from faust_workers import Worker, faust_broker, wait_outputs
from waiting import wait_for

APP = r'''
import asyncio
import os
import faust

app = faust.App("crash", broker="kafka://{address}", processing_guarantee="{guarantee}", store="memory://",
                topic_partitions=1, consumer_auto_offset_reset="earliest", broker_commit_interval=0.5,
                broker_session_timeout=6, broker_heartbeat_interval=0.5, web_enabled=False{options})
out = app.topic("crash-out", value_serializer="raw")


@app.agent(app.topic("crash-in", value_serializer="raw", partitions=1))
async def forward(stream):
    async for value in stream:
        if value.startswith(b"boom") and not os.environ.get("FIXED"):
            raise KeyError(value)
        await out.send(value=value)
        await asyncio.sleep(float(os.environ.get("PACE", 0)))  # (a test's worker busy long enough to be killed mid-way)
'''
GUARANTEES = ["exactly_once", "at_least_once"]
FAILED = "agent crash_app.forward raised KeyError: b'boom' on the event at crash-in-0 offset 1"


def app_dir(tmp_path, address: str, guarantee: str, options: str = "") -> None:
    (tmp_path / "crash_app.py").write_text(APP.format(address=address, guarantee=guarantee, options=options))


def feed(address: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": address})
    for value in values:
        producer.produce("crash-in", value=value, headers=[("origin", b"feed")])
    assert producer.flush(30) == 0


def committed(address: str) -> int:
    """The app's committed offset of crash-in-0 (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "crash"})
    try:
        return consumer.committed([TopicPartition("crash-in", 0)], 30)[0].offset
    finally:
        consumer.close()


def records(address: str, topic: str) -> list:
    """The committed records of single-partition `topic`, headers and all."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "dlq-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **TO_THE_END})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 30
    try:
        while True:
            assert time.monotonic() < deadline, f"never reached the end of {topic}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return got
            got.append(msg)
    finally:
        consumer.close()


def exited(worker: Worker, timeout: float = 60) -> int:
    try:
        return worker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker is still running:\n{worker.log()[-3000:]}") from None


# (suite time: by default the agent's failure alone and under SIGKILL with each guarantee but the failure
# alone at least once; SIGTERM, and the failure alone at least once, run with -m slow)
CRASH_CASES = [pytest.param("exactly_once", None, id="alone-exactly_once"),
               pytest.param("at_least_once", None, id="alone-at_least_once", marks=pytest.mark.slow),
               *(pytest.param(g, signal.SIGTERM, id=f"sigterm-{g}", marks=pytest.mark.slow) for g in GUARANTEES),
               *(pytest.param(g, signal.SIGKILL, id=f"sigkill-{g}") for g in GUARANTEES)]


@pytest.mark.parametrize("guarantee, then", CRASH_CASES)
def test_an_agent_that_raises_stops_the_worker_and_a_restart_processes_its_event(broker_factory, tmp_path,
                                                                                 guarantee, then):
    broker = faust_broker(broker_factory, "crash-in", "crash-out")
    app_dir(tmp_path, broker.address, guarantee)
    feed(broker.address, [b"a", b"boom", b"c"])
    worker = Worker(tmp_path, 0, "crash_app").start()
    try:
        wait_for(lambda: FAILED in worker.log() or worker.proc.poll() is not None, "the agent's failure logged", 60)
        if then is not None:
            worker.proc.send_signal(then)  # (an operator's stop, or a kill, while the worker stops on its own)
        code = exited(worker)
    finally:
        worker.kill()
    log = worker.log()
    assert FAILED in log, log[-3000:]
    if then is None:
        assert code == 1 and f"worker stopped: {FAILED}" in log, log[-3000:]
        assert log.count("Traceback") == 1, log  # the agent's, once: no storm
    assert "commit waiting" not in log
    assert committed(broker.address) <= 1, "committed past the event the agent raised on"
    if guarantee == "exactly_once":
        assert read_to_end(broker.address, {"crash-out": 1}, "read_committed") in ([], [b"a"])

    fixed = Worker(tmp_path, 1, "crash_app", env={"FIXED": "1"}).start()
    try:
        wait_outputs(broker.address, "crash-out", 3)
        wait_for(lambda: committed(broker.address) == 3, "the restarted worker's commit past c", 60)
        got = read_to_end(broker.address, {"crash-out": 1}, "read_committed")
    finally:
        fixed.kill()
    counts = collections.Counter(got)
    assert set(counts) == {b"a", b"boom", b"c"}, got
    if guarantee == "exactly_once":
        assert set(counts.values()) == {1}, got


def test_agent_errors_takes_stop_or_dead_letter_and_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app_dir(tmp_path, "127.0.0.1:1", "exactly_once", options=', agent_errors="skip"')
    result = CliRunner().invoke(main, ["streams", "worker", "crash_app"])
    assert result.exit_code != 0
    assert "agent_errors='skip': an agent that raises either stops the worker ('stop', the default) or sends " \
           "its event to a dead-letter topic and goes on ('dead_letter')" in result.output, result.output


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_dead_letter_holds_the_event_and_its_error_and_the_worker_goes_on(broker_factory, tmp_path, guarantee):
    broker = faust_broker(broker_factory, "crash-in", "crash-out")
    app_dir(tmp_path, broker.address, guarantee, options=', agent_errors="dead_letter"')
    feed(broker.address, [b"a", b"boom", b"c"])
    worker = Worker(tmp_path, 0, "crash_app").start()
    try:
        wait_outputs(broker.address, "crash-out", 2)
        wait_for(lambda: committed(broker.address) == 3, "a commit past c", 60)
        dead = records(broker.address, "crash-dlq")
        got = read_to_end(broker.address, {"crash-out": 1}, "read_committed")
        assert worker.proc.poll() is None, worker.log()[-3000:]
    finally:
        worker.kill()
    assert collections.Counter(got) == {b"a": 1, b"c": 1}, got
    assert [m.value() for m in dead] == [b"boom"], [m.value() for m in dead]
    headers = dict(dead[0].headers())
    assert headers["origin"] == b"feed"
    assert {k: v for k, v in headers.items() if k != "__streams.errors.stacktrace"} == {
        "origin": b"feed", "__streams.errors.exception": b"KeyError", "__streams.errors.message": b"b'boom'",
        "__streams.errors.topic": b"crash-in", "__streams.errors.partition": b"0", "__streams.errors.offset": b"1",
        "__streams.errors.application.id": b"crash", "__streams.errors.agent": b"crash_app.forward"}
    assert b"raise KeyError(value)" in headers["__streams.errors.stacktrace"]
    assert "raised KeyError: b'boom' on the event at crash-in-0 offset 1: sent to crash-dlq, going on" in worker.log()


def test_dead_letters_are_exactly_once_across_a_sigkill(broker_factory, tmp_path):
    """Events, a tenth of them failing, through a worker SIGKILLed mid-way and restarted: every
    output and every dead letter once (the kill leaves an open transaction that holds both)."""
    broker = faust_broker(broker_factory, "crash-in", "crash-out")
    app_dir(tmp_path, broker.address, "exactly_once",
            options=', agent_errors="dead_letter", dead_letter_topic="crash-dead"')
    values = [b"boom%04d" % i if i % 10 == 3 else b"v%04d" % i for i in range(1500)]
    feed(broker.address, values)
    first = Worker(tmp_path, 0, "crash_app", env={"PACE": "0.005"}).start()
    second = Worker(tmp_path, 1, "crash_app")
    try:
        wait_for(lambda: first.log().count("sent to crash-dead") >= 30, "30 dead letters sent", 90)
        first.kill()  # (mid-transaction: a commit waits for every event handed to the agent, here all)
        assert committed(broker.address) < 1500, "the kill came after the last commit"
        second.start()
        wait_outputs(broker.address, "crash-out", 1350, timeout=120)
        wait_for(lambda: committed(broker.address) == 1500, "a commit past the last event", 60)
        got = read_to_end(broker.address, {"crash-out": 1}, "read_committed")
        dead = [m.value() for m in records(broker.address, "crash-dead")]
    finally:
        first.kill()
        second.kill()
    assert collections.Counter(got) == {v: 1 for v in values if not v.startswith(b"boom")}
    assert collections.Counter(dead) == {v: 1 for v in values if v.startswith(b"boom")}


BATCH_APP = r'''
import faust

app = faust.App("crash", broker="kafka://{address}", processing_guarantee="exactly_once", store="memory://",
                topic_partitions=1, consumer_auto_offset_reset="earliest", web_enabled=False,
                agent_errors="dead_letter")


@app.agent(app.topic("crash-in", value_serializer="raw", partitions=1))
async def batches(stream):
    async for values in stream.take(10, within=1):
        if b"boom" in values:
            raise KeyError(b"boom")
'''


def test_an_agent_that_takes_batches_stops_the_worker_even_with_dead_letters(broker_factory, tmp_path):
    """A batch's other events would count as processed with the one dead letter: the worker stops."""
    broker = faust_broker(broker_factory, "crash-in")
    (tmp_path / "crash_app.py").write_text(BATCH_APP.format(address=broker.address))
    feed(broker.address, [b"a", b"boom", b"c"])
    worker = Worker(tmp_path, 0, "crash_app").start()
    try:
        code = exited(worker)
    finally:
        worker.kill()
    assert code == 1, worker.log()[-3000:]
    assert "agent crash_app.batches raised KeyError: b'boom' outside any event; the worker stops." in worker.log()
    assert "(agent_errors='dead_letter', but the agent held no single event (it raised outside its stream's " \
           "events, or over a batch from take()).)" in worker.log(), worker.log()[-3000:]
    assert committed(broker.address) <= 0
