"""What `binlake streams worker` does when an agent raises on an event: the app's `agent_errors` policy.

faust's answer is to commit the offsets acknowledged so far, restart the agent and go on; the event the
agent raised on is acknowledged as asyncio closes the agent's dropped stream iterator, and the next
commit passes it: it is never processed again (under exactly-once the worker stalled instead, its
commit waiting for that event forever). Here the policy decides, as Kafka Streams' exception handlers do:

- `stop` (the default): the worker stops at once, saying which agent, event and error; nothing from
  the event on is committed (the consumer refuses every later commit; under exactly-once the open
  transactions are aborted), so the next owner of the partition processes the event again;
- `dead_letter`: the event (its key, value and headers, plus headers naming the error and where the
  event came from, as Kafka Streams' KIP-1034 writes them) goes to the dead-letter topic, the event
  counts as processed and the agent starts again on the next one. Under exactly-once the dead letter
  joins the event's transaction, so it commits with the offset and the other events' outputs.

The consumers (`streams/consumer.py`, `streams/exactly_once.py`) call `handle` from faust's error
hook, in the task of the agent that raised, before the agent's supervisor acts: `AgentSupervisor`
then stops the worker, or restarts the agent once its event is a dead letter.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import traceback
from dataclasses import dataclass
from typing import Any, Optional

from faust.agents.agent import current_agent
from faust.streams import current_event
from faust.types import EventT, Message
from mode import OneForOneSupervisor

from .settings import app_setting

log = logging.getLogger(__name__)
POLICIES = ("stop", "dead_letter")
HEADER = "__streams.errors."  # Kafka Streams' dead-letter headers (KIP-1034)


class BadAgentErrorsSetting(ValueError):
    """An app setting `agent_errors` or `dead_letter_topic` the worker cannot use."""


@dataclass(frozen=True)
class AgentFailure:
    """An agent raised on an event, and the worker stops for it."""
    agent: str
    exc: BaseException
    message: Optional[Message]  # the event's source message; None when the agent held no event

    def summary(self) -> str:
        m = self.message
        where = f"on the event at {m.topic}-{m.partition} offset {m.offset}" if m is not None else "outside any event"
        return f"agent {self.agent} raised {type(self.exc).__name__}: {self.exc} {where}"


class AgentErrors:
    """The app's policy for agents that raise, and the failure that stopped the worker (if any).
    Event loop only."""

    def __init__(self, app: Any, policy: str, dead_letter_topic: str) -> None:
        self.app, self.policy, self.dead_letter_topic = app, policy, dead_letter_topic
        self.failure: Optional[AgentFailure] = None
        self._topic: Any = None  # the dead-letter topic, declared at its first use

    @classmethod
    def of(cls, app: Any) -> "AgentErrors":
        """The policy the app sets (`agent_errors`, `dead_letter_topic`: faust.App options, its config
        object or the environment). BadAgentErrorsSetting for a value the worker does not know."""
        policy = app_setting(app, "agent_errors") or "stop"
        if policy not in POLICIES:
            raise BadAgentErrorsSetting(
                f"agent_errors={policy!r}: an agent that raises either stops the worker ('stop', the default) "
                f"or sends its event to a dead-letter topic and goes on ('dead_letter')")
        topic = app_setting(app, "dead_letter_topic") or f"{app.conf.id}-dlq"
        if not isinstance(topic, str) or not topic.strip():
            raise BadAgentErrorsSetting(f"dead_letter_topic={topic!r}: name a topic")
        return cls(app, policy, topic.strip())

    def supervise(self) -> None:
        """Give every agent a supervisor that stops the worker when it stops for an agent's failure
        (faust's restarts an agent that raised, and its event is lost) and otherwise restarts it."""
        for agent in self.app.agents.values():
            agent.supervisor_strategy = functools.partial(AgentSupervisor, agent_errors=self)

    async def handle(self, exc: BaseException) -> Optional[AgentFailure]:
        """In the task of the agent that raised: None once its event is a dead letter (the agent goes
        on), else the failure the worker stops for (logged here; faust's crash log follows with the
        traceback). Nothing is awaited before the failure is recorded: no commit comes in between."""
        if self.failure is not None:
            return self.failure  # (another agent, in the worker's last moments)
        agent, event = current_agent(), current_event()
        name = agent.name if agent is not None else "?"
        if self.policy == "stop":
            advice = "(To send such events to a dead-letter topic and go on, give the app agent_errors='dead_letter': " \
                     "docs/streams.md.)"
        else:
            stream = self._stream_of(agent, event) if event is not None else None
            if event is None:
                reason = ("the agent held no single event (it raised outside its stream's events, or over a batch "
                          "from take())")
            elif stream is None:
                reason = "the stream that handed the event to the agent is not known"
            else:
                reason = await self._dead_letter(name, event, exc, stream)
                if reason is None:
                    return None
            advice = f"(agent_errors='dead_letter', but {reason}.)"
        self.failure = failure = AgentFailure(name, exc, event.message if event is not None else None)
        log.error("%s; the worker stops. Nothing from that event on is committed (open transactions are aborted): "
                  "the worker that next owns the partition processes the event again. %s", failure.summary(), advice)
        return failure

    async def _dead_letter(self, agent: str, event: EventT, exc: BaseException, stream: Any) -> Optional[str]:
        """Send the event to the dead-letter topic and acknowledge it; why it could not be sent, if not.
        The event is held meanwhile (a commit stops short of it): the agent's iterator of `stream`, dropped
        with the agent, acknowledges the stream's current event when asyncio closes it. It is closed
        here before the agent restarts: faust's iterator acknowledges the stream's event of the moment,
        which would be the restarted agent's, in the middle of its processing."""
        event.message.incref()
        try:
            await self._send_dead_letter(agent, event, exc)
        except Exception as send_exc:
            return f"its dead letter could not be sent to {self.dead_letter_topic}: {send_exc!r}"
        for iterator in list(stream._active_agens):
            if not iterator.ag_running:
                await iterator.aclose()
        message = event.message
        log.warning("agent %s raised %s: %s on the event at %s-%d offset %d: sent to %s, going on", agent,
                    type(exc).__name__, exc, message.topic, message.partition, message.offset, self.dead_letter_topic)
        event.ack()
        return None

    @staticmethod
    def _stream_of(agent: Any, event: EventT) -> Any:
        """The stream that handed `event` to the current actor of `agent` (its own or one derived from
        it: group_by, through)."""
        task = asyncio.current_task()
        for actor in list(getattr(agent, "_actors", ())):
            if actor.actor_task is task:
                for stream in actor.stream.get_root_stream()._iter_ll_forwards():
                    if stream.current_event is event:
                        return stream
        return None

    async def _send_dead_letter(self, agent: str, event: EventT, exc: BaseException) -> None:
        """The event's key, value and headers with the error's, to the dead-letter topic (declared at
        its first use, with the app's partitions and replication factor). Under exactly-once the send
        joins the event's transaction; otherwise it is waited for."""
        if self._topic is None:
            topic = self.app.topic(self.dead_letter_topic, key_serializer="raw", value_serializer="raw")
            await topic.maybe_declare()
            self._topic = topic
        message = event.message
        sent = await self._topic.send(key=message.key, value=message.value,
                                      headers=list(message.headers or ()) + error_headers(self.app.conf.id, agent,
                                                                                          message, exc))
        await sent


def error_headers(app_id: str, agent: str, message: Message, exc: BaseException) -> list[tuple[str, bytes]]:
    """The headers of a dead letter: Kafka Streams' (KIP-1034), and the app's id and agent."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    values = {"exception": name, "message": str(exc),
              "stacktrace": "".join(traceback.format_exception(exc)),
              "topic": message.topic, "partition": str(message.partition), "offset": str(message.offset),
              "application.id": app_id, "agent": agent}
    return [(HEADER + key, value.encode()) for key, value in values.items()]


class AgentSupervisor(OneForOneSupervisor):
    """Each agent's supervisor under the worker: stops the worker as SIGTERM does once it stops for an
    agent's failure (logged, its commits refused), else restarts the actor: one whose event went to
    the dead-letter topic, or one a rebalance cancelled (faust's isolated partitions). mode's
    CrashingSupervisor marks every service of the worker crashed instead, and the worker's stop
    then trips over its crashed consumer thread ("Error while stopping child ...: Event loop is
    closed", with a traceback). A restart is quiet (the event and the error are logged), has no cap
    (mode's supervisor stops the worker after 100 restarts in a second: a burst of events that fail
    is a burst of dead letters), and does not wait 5 s for a restarted actor that crashes (faust
    does not start the actor that replaces a crashed one, and mode's supervisor looks at an actor
    not started only every 5 s; it hears of a crash only while it waits for one)."""

    def __init__(self, *services: Any, agent_errors: AgentErrors, **kwargs: Any) -> None:
        super().__init__(*services, **kwargs)
        self.agent_errors = agent_errors

    async def restart_services(self, services: list) -> None:
        while services:
            if self.agent_errors.failure is not None:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            for service in services:
                index = self._index[service]
                replacement = await self.replacement(service, index)
                replacement.supervisor = self
                self.insert(index, replacement)
                await replacement.maybe_start()
            services = [s for s in self._services if s.started and not self.service_operational(s)]
