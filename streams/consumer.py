"""The consumer every `binlake streams worker` gives its app: faust's aiokafka consumer, handing each
fetched message to the streams at a fraction of the cost.

faust's fetch loop (`Consumer._drain_messages`) races the delivery of every message (the conductor
putting it on its streams' queues) against the flow being suspended (a rebalance), the consumer
stopping and the consumer crashing, with `Service.wait_first`: four tasks and an `asyncio.wait` per
message, three of them cancelled right after. That was half of a worker's time on an event its
agent does nothing with (docs/benchmarks.md). Here a message is delivered in one task, and the three
events cancel that task when they happen (`stop_flow`, `_stopped_set`, `_crash`), which is what the
race did. Everything else the loop does is faust's: yield to the event loop every 100 messages,
record gaps in the offsets (so a commit may pass them), commit every `broker_commit_every`
acknowledgements, skip what was read before.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as driver
from faust.types import Message
from mode import Service

from .agent_errors import AgentErrors

YIELD_EVERY = 100  # messages handed out between two turns given to the rest of the event loop


class Consumer(driver.Consumer):
    def __post_init__(self) -> None:
        super().__post_init__()
        self._delivery: Optional[asyncio.Future] = None  # the message being handed to the streams
        self.agent_errors: AgentErrors = self.transport.agent_errors

    async def on_task_error(self, exc: BaseException) -> None:
        """faust calls this in the task of an agent that raised, before the agent's supervisor acts.
        faust commits here, and a later commit passes the event the agent raised on: here the app's
        policy decides (streams/agent_errors.py), and once the worker stops for a failure it commits
        nothing more (`_commit_offsets`)."""
        await self.agent_errors.handle(exc)

    async def _commit_offsets(self, offsets: Any, start_new_transaction: bool = True) -> bool:
        if self.agent_errors.failure is not None:
            return False  # (the failed event would be acknowledged as its stream closes, and committed)
        return await super()._commit_offsets(offsets, start_new_transaction=start_new_transaction)

    async def _drain_messages(self, fetcher: Service) -> None:
        """faust's fetcher runs this until it or the consumer stops."""
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        errors = self.agent_errors
        since_yield = 0
        try:
            while not (self.should_stop or fetcher.should_stop or errors.failure is not None):
                self.diag.set_flag(CONSUMER_FETCHING)
                messages = self.getmany(timeout=1.0)
                await asyncio.sleep(0)  # getmany need not yield when records are waiting
                if self.should_stop:
                    continue
                async for tp, message in messages:
                    if errors.failure is not None:
                        break  # an agent failed: the worker stops, and hands out nothing more
                    since_yield += 1
                    if since_yield > YIELD_EVERY:
                        await asyncio.sleep(0)
                        since_yield = 0
                    last = read_offset[tp]
                    if last is not None and message.offset < last:
                        continue  # read already (a seek went back)
                    if last and message.offset - last > 1 and acks_enabled_for(message.topic):
                        await self._add_gap(tp, last + 1, message.offset)
                    if self._commit_every is not None and self._n_acked >= self._commit_every:
                        self._n_acked = 0
                        await self.commit()
                    await self._hand_over(message)
                    read_offset[tp] = message.offset
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.transport.app.should_stop:
                raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _hand_over(self, message: Message) -> None:
        if self.suspend_flow.is_set() or self._stopped.is_set() or self._crashed.is_set():
            await self.wait_first(self.callback(message), self.suspend_flow.wait())  # faust's race, for the rare case
            return
        self._delivery = delivery = asyncio.ensure_future(self.callback(message))
        try:
            await delivery
        except asyncio.CancelledError:
            if not delivery.cancelled() or asyncio.current_task().cancelling():
                raise  # the fetcher itself is cancelled (asyncio cancelled the delivery with it)
        finally:
            self._delivery = None

    def _interrupt_delivery(self) -> None:
        if self._delivery is not None:
            self._delivery.cancel()

    def stop_flow(self) -> None:
        super().stop_flow()
        self._interrupt_delivery()

    def _stopped_set(self) -> None:
        super()._stopped_set()
        self._interrupt_delivery()

    def _crash(self, reason: BaseException) -> None:
        super()._crash(reason)
        self._interrupt_delivery()


class Transport(driver.Transport):
    Consumer = Consumer
    agent_errors: AgentErrors  # what the consumer does when an agent raises


def install(app: Any, agent_errors: Optional[AgentErrors] = None) -> None:
    """Give an app this module's transport (before it starts), with the app's policy for agents that
    raise (read from the app unless given)."""
    app.transport = Transport(app.conf.broker_consumer, app, loop=app.loop)
    app.transport.agent_errors = agent_errors or AgentErrors.of(app)
