"""streams/consumer.py: the worker's consumer hands each message to the streams in one task instead of
faust's race of four. What the race did still holds: a hand-over that blocks (the streams' buffers
are full) is given up when the flow stops for a rebalance, when the consumer stops and when it
crashes; a fetcher cancelled mid-hand-over stays cancelled. A real faust app's consumer, not started:
only the hand-over is under test here (workers over a broker run it in tests/streams/test_exactly_once.py
and test_worker.py)."""

from __future__ import annotations

import asyncio

import faust
import pytest

from streams import consumer
from streams.exactly_once import ExactlyOnceConsumer, install


def app_consumer(exactly_once: bool = False):
    """A consumer of a faust app as the worker sets it up, whose callback (faust's conductor putting a
    message on its streams' queues) blocks until released; and what it delivered."""
    app = faust.App("hand-over", broker="kafka://127.0.0.1:1",
                    processing_guarantee="exactly_once" if exactly_once else "at_least_once")
    app.agent(app.topic("t"))(lambda stream: stream)
    if not install(app):
        consumer.install(app)
    delivered, entered, release = [], asyncio.Event(), asyncio.Event()

    async def callback(message):
        entered.set()
        await release.wait()
        delivered.append(message)

    c = app.consumer
    c.callback = callback  # (faust's: the conductor's on_message)
    return c, delivered, entered, release


def test_every_app_gets_the_consumer():
    assert type(app_consumer()[0]) is consumer.Consumer
    exact = app_consumer(exactly_once=True)[0]
    assert isinstance(exact, ExactlyOnceConsumer) and isinstance(exact, consumer.Consumer)


async def test_a_message_is_handed_over_once_its_streams_take_it():
    c, delivered, entered, release = app_consumer()
    hand_over = asyncio.create_task(c._hand_over("m"))
    await entered.wait()
    assert not hand_over.done()  # the streams' buffer is full: the fetcher waits
    release.set()
    await asyncio.wait_for(hand_over, 10)
    assert delivered == ["m"] and c._delivery is None


@pytest.mark.parametrize("event", ["stop_flow", "stop", "crash"])
async def test_a_blocked_hand_over_is_given_up_when_the_flow_stops_or_the_consumer_stops_or_crashes(event):
    c, delivered, entered, release = app_consumer()
    hand_over = asyncio.create_task(c._hand_over("m"))
    await entered.wait()
    {"stop_flow": c.stop_flow, "stop": c._stopped_set, "crash": lambda: c._crash(RuntimeError("boom"))}[event]()
    await asyncio.wait_for(hand_over, 10)  # returns: the fetcher goes on (to its loop's end, when stopping)
    release.set()
    await asyncio.sleep(0)
    assert delivered == []


async def test_while_the_flow_is_stopped_a_message_is_handed_over_only_if_its_streams_take_it_at_once():
    c, delivered, entered, release = app_consumer()
    c.stop_flow()
    release.set()
    await asyncio.wait_for(c._hand_over("taken at once"), 10)
    release.clear()
    await asyncio.wait_for(c._hand_over("would wait"), 10)
    assert delivered == ["taken at once"]


async def test_a_fetcher_cancelled_mid_hand_over_stays_cancelled():
    c, delivered, entered, release = app_consumer()
    hand_over = asyncio.create_task(c._hand_over("m"))
    await entered.wait()
    hand_over.cancel()
    with pytest.raises(asyncio.CancelledError):
        await hand_over
    release.set()
    await asyncio.sleep(0)
    assert delivered == [] and c._delivery is None
