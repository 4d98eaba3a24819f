"""The exactly-once producer's flush, which a commit waits on: it must not end while faust's buffer
still holds a message (a table's changelog write), however long that message's send takes."""

from __future__ import annotations

import asyncio

import faust
from confluent_kafka.admin import AdminClient, NewTopic

from streams.exactly_once import install

SEND_STALLED_S = 2.0  # faust's own flush gives up on its buffer after 0.1 s without a send


def test_a_flush_ends_only_when_every_buffered_message_is_sent(broker_factory):
    # A send that cannot finish for a while, for real: its topic does not exist yet, and the broker
    # creates none on its own, so the client waits for the topic's metadata.
    broker = broker_factory(config={"auto.create.topics.enable": "false"})
    app = faust.App("flush", broker=f"kafka://{broker.address}", processing_guarantee="exactly_once")
    assert install(app)

    async def scenario():
        producer = app.producer
        await producer.start()
        try:
            sent = app.topic("late", value_serializer="raw").send_soon(value=b"table write")
            flush = asyncio.ensure_future(producer.flush())
            done, _ = await asyncio.wait([flush], timeout=SEND_STALLED_S)
            assert not done and not sent.done(), "the flush ended with a message still in the buffer"
            admin = AdminClient({"bootstrap.servers": broker.address})
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: admin.create_topics([NewTopic("late", 1, 1)])["late"].result(30))
            await asyncio.wait_for(flush, 60)
            assert sent.done() and sent.result().offset == 0
        finally:
            await producer.stop()

    app.loop.run_until_complete(scenario())  # (faust's services run on the app's loop)
