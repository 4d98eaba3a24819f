"""Exactly once for faust apps, through the classes faust lets a transport configure.

faust-streaming's `processing_guarantee="exactly_once"` keeps Kafka Streams' first scheme (KIP-98):
one transactional producer per source partition (`<app>-<topic group>-<partition>`), whose
transaction carries that partition's outputs, its tables' changelog writes and its consumed
offsets; a worker that takes the partition over initializes the same transactional id, which fences
the old owner and aborts whatever it left open. That scheme is sound. faust's use of it has eleven
holes, each closed here (docs/streams.md tells the whole story):

1. **Commits race with processing.** faust commits while agents keep taking events, so a change
   whose offset is not in a commit can have its output, or its table update, in it. Here a commit
   is a barrier: the fetcher stops handing out messages, every message it handed out is processed
   and acknowledged, the producer's buffer (table changelogs) is flushed, and only then are the
   offsets and transactions committed; the fetcher then resumes.
2. **Outputs are routed by their destination partition**, so a send goes into the transaction of
   whatever source partition shares the output's number — or fails for a topic the app does not
   consume. Here a send made while an event is processed goes into the transaction of that event's
   source partition. A send outside any event (a timer, a web view) cannot be exact and is refused.
3. **Partitions given up in a rebalance** leave their transaction open to be aborted by the next
   owner, while the tables in this worker's memory keep the effects of the aborted changes and
   apply them again when the events come back. Here the revoking worker commits what it has
   processed (faust has already stopped the flow and waited for in-flight events).
4. **A fenced worker carries on**: faust logs a lost transactional id and drops its producer, so a
   worker that lost its partitions keeps processing them. Here it stops (`ExactlyOnceProducer`).
5. **Table recovery reads the changelog's end from the last fetch response**, which is -1 before the
   first fetch: `ConsistencyError: ... highwater -1`. That number lives in faust's aiokafka driver
   (`Consumer._highwaters` asks `AIOKafkaConsumer.last_stable_offset`), not in the broker. Here the
   end comes from ListOffsets at read_committed, which the broker answers with the last stable offset.
6. **Producers outlive their partitions**: faust keeps the producer of a revoked partition that became
   a standby here, fenced by the new owner, and uses it again if the partition comes back. Here
   every producer whose id the worker does not own is stopped after a rebalance.
7. **After a rebalance, source partitions are read before they are positioned**: faust resumes them,
   then seeks them to their committed offsets, so events taken in between are processed twice; and
   aiokafka does not move a partition that has no committed offset, so events a rebalance cut short
   there are never processed (while later ones commit). Here source messages fetched before the
   seek are dropped (the seek reads them again), and a partition without a committed offset is put
   at the reset policy's end. Only a seek after the assignment counts (a recovery a rebalance cut
   short seeks the old one), and a message fetched before a later seek or assignment is dropped
   too: faust's streams skip a message of an earlier generation without acknowledging it (a commit
   would wait for it forever), and a skipped message may not be followed by a handed-out one
   (a commit is one past the last acknowledged, hole 8). The seek pauses the source partitions
   until it is known, so that nothing fetched after it is dropped as if fetched before. The seek
   faust's fetcher makes while the flow is stopped positions nothing (recovery seeks again).
8. **Offsets lag the outputs committed with them**: faust commits a partition's offset only up to
   the first gap in the offsets it saw acknowledged (a transactional source has a control record,
   so a gap, after every transaction), and its gap filling double-counts the message after each
   gap, so every commit stops at the next gap while the outputs of everything processed commit.
   A worker that takes the partition over processes those events again. Here, since a commit is a
   barrier, the offset committed is the one past the last message acknowledged.
9. **Table writes can miss their transaction**: a table's changelog writes wait in faust's producer
   buffer, whose flush before a commit gives up once no message has gone out for 0.1 s (a batch
   waiting on a busy broker is enough), so the transaction commits an event's offset without its
   table write; after a kill, the next owner recovers the table without it. Here the flush waits
   for every buffered message to be sent.
10. **Table recovery waits for a commit marker**: faust recovers a changelog partition until it has
   seen the record before the end it is given, and a transactional changelog ends in a commit
   marker, which no reader sees; recovery then ends by faust's fallback, 10 s later. Here the end
   is one past the last record a read_committed reader gets.
11. **That fallback marks a recovery done that a rebalance cut short**: after 10 s without changelog
   records, faust takes a changelog partition whose consumer position is at or past the end for
   one ending in aborted transactions, and marks it recovered. A recovery that a rebalance
   restarts after its fetch has such a position while the records it fetched were dropped: the
   restarted recovery skipped them, and the table lost them. Here a changelog partition reports
   no position: the end is a record every reader gets (10), so the fallback has nothing to skip.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, AsyncIterator, Mapping, Optional, Set, Tuple

import aiokafka
from aiokafka.errors import ProducerFenced
from faust.exceptions import ProducerSendError
from faust.streams import current_event
from faust.transport.consumer import TransactionManager
from faust.transport.drivers import aiokafka as driver
from faust.types import TP, Message

from . import consumer
from .agent_errors import AgentErrors

log = logging.getLogger(__name__)
BARRIER_WARN_S = 10.0  # a commit waiting this long for agents to finish their events says which
TAIL_WINDOW = 16  # records read back from a changelog's end to find its last committed record


class ExactlyOnceConsumer(consumer.Consumer):
    """Consumer whose commits wait for every delivered message to be processed (hole 1) and
    whose changelog ends are the last stable offsets (hole 5)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._deliver = asyncio.Event()
        self._deliver.set()
        self._in_flight: list[Message] = []  # handed to the streams since the last commit
        self._commit_lock = asyncio.Lock()
        self._revoking = False
        self._fetcher: Optional[asyncio.Task] = None  # faust's fetcher, the task that runs getmany
        self._positioned = False  # source partitions are at their committed offsets (hole 7)
        self._seeks = 0  # seeks so far: a message fetched before the latest one is read again

    async def getmany(self, timeout: float) -> AsyncIterator[Tuple[TP, Message]]:
        self._fetcher = asyncio.current_task()
        # A source message is handed out only if its partitions were positioned when it was fetched and
        # no seek came since: else the seek reads it again (dropped here, it is neither processed
        # twice nor skipped; a commit is one past the last message acknowledged, hole 8). All the
        # batch was fetched before its first message comes out, so a seek after that is after the fetch.
        # (Never wait for the seek here: table recovery, which comes first, reads through this loop.)
        acks, seeks = self.app.topics.acks_enabled_for, None
        async for tp, message in super().getmany(timeout):
            if seeks is None:
                seeks = self._seeks if self._positioned else -1
            await self._deliver.wait()  # while a commit or a rebalance is in progress: hold the message back
            if acks(tp.topic):
                # faust's streams skip (without acknowledging) what comes while its flow is stopped: between
                # the seek and the end of recovery, and from the start of a rebalance
                await self.app.flow_control.acquire()
                if not self._positioned or self._seeks != seeks:
                    continue
            self._in_flight.append(message)
            yield tp, message
            if not (message.acked or message.refcount) and self._in_flight and self._in_flight[-1] is message:
                self._in_flight.pop()  # no agent got it: the fetcher dropped it, or a rebalance cut its delivery

    async def commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        if not self.in_transaction or self._revoking:  # (faust commits while it waits out a revoke)
            return await super().commit(topics, start_new_transaction=start_new_transaction)
        # faust's fetcher also commits (every broker_commit_every acks) while it holds a message it has
        # not handed to the agents yet: that one is not waited for, and stays in flight.
        held = self._in_flight[-1] if self._in_flight and asyncio.current_task() is self._fetcher else None
        async with self._commit_lock:
            self._deliver.clear()
            try:
                await self._wait_processed(excluding=held)
                self._in_flight[:] = [held] if held else []
                return await super().commit(topics, start_new_transaction=start_new_transaction)
            finally:
                self._deliver.set()

    async def _wait_processed(self, excluding: Optional[Message] = None) -> None:
        """Until every message handed to the streams is acknowledged. When faust has stopped the
        flow (a rebalance, a shutdown) it drops the messages no agent has started, so then the wait
        is for the started ones: the messages faust tracks, which it lets the garbage collector
        forget when it drops them (as its own `wait_empty` does)."""
        started = warned = time.monotonic()
        done = 0  # self._in_flight[:done] needs no more waiting
        while not self.should_stop and self.agent_errors.failure is None:  # (a failed worker commits nothing)
            flowing = self.app.flow_control.is_active()
            if flowing:
                done = self._first_unprocessed(done, excluding)
                if done == len(self._in_flight):
                    return
            else:
                self._in_flight.clear()  # (its references would keep the dropped messages alive)
                gc.collect()
                self._clean_unacked_messages()
                if not self._unprocessed(list(self._unacked_messages)):
                    return
            if time.monotonic() - warned > BARRIER_WARN_S:
                warned = time.monotonic()
                waiting = self._in_flight[done:] if flowing else list(self._unacked_messages)
                pending = self._unprocessed([m for m in waiting if m is not excluding])
                log.warning("commit waiting %.0f s for agents to finish events in %s", warned - started,
                            ", ".join(f"{tp.topic}-{tp.partition} (up to offset {o})" for tp, o in sorted(pending.items())))
            await asyncio.sleep(0.005 if flowing else 0.05)

    def _first_unprocessed(self, done: int, excluding: Optional[Message]) -> int:
        """The index in `_in_flight` of the first message from `done` on that a commit must wait
        for (its length if none). Messages are handed out in that order and mostly finished in it,
        and a message once acknowledged stays so: a poll looks only at those finished since the
        last, instead of every message in flight (thousands, every 5 ms of a commit's wait)."""
        in_flight, assignment, acks = self._in_flight, self.assignment(), self.app.topics.acks_enabled_for
        done = min(done, len(in_flight))  # (the fetcher takes back a message no agent got)
        while done < len(in_flight):
            message = in_flight[done]
            if message is not excluding and not message.acked and message.tp in assignment and acks(message.tp.topic):
                break
            done += 1
        return done

    def _new_offset(self, tp: TP) -> Optional[int]:
        """The offset to commit for `tp`: past the last message acknowledged (hole 8). faust commits
        only up to the first gap in the offsets it saw acknowledged, filling gaps left by control
        records, but the fill also covers the message after the gap, so that offset appears twice and
        every commit stops at the first gap; under a transactional source (a gap per transaction)
        the offsets lag the outputs committed with them. At a barrier every message delivered
        from `tp` is acknowledged, so the one past the highest is exactly what is processed."""
        if not self.in_transaction:
            return super()._new_offset(tp)
        acked = self._acked[tp]
        if not acked:
            return None
        offset = max(acked) + 1
        acked.clear()
        self._acked_index[tp].clear()
        self._gap.pop(tp, None)
        return offset

    def _unprocessed(self, messages: list[Message]) -> dict[TP, int]:
        """Per partition still assigned, the highest offset of `messages` not acknowledged."""
        assignment = self.assignment()
        acks = self.app.topics.acks_enabled_for
        pending: dict[TP, int] = {}
        for message in messages:
            tp = message.tp
            if not message.acked and tp in assignment and acks(tp.topic):
                pending[tp] = max(pending.get(tp, -1), message.offset)
        return pending

    async def on_partitions_revoked(self, revoked: Set[TP]) -> None:
        """Commit what is processed, once the events agents have started are finished, before faust
        forgets the partitions (hole 3); abort what no commit covers (outputs of events that will be
        read again after the rebalance); hand out nothing more until the partitions are assigned."""
        async with self._commit_lock:
            self._deliver.clear()
            self._positioned = False
            await self._wait_processed()
            self._in_flight.clear()
            await super().commit(start_new_transaction=False)
            await self.app.producer.abort_open_transactions()
            self._revoking = True
            try:
                await super().on_partitions_revoked(revoked)
            finally:
                self._revoking = False

    async def perform_seek(self) -> None:
        """faust resumes the source partitions, then seeks them to their committed offsets: what an
        agent took in between is read again after the seek. Source messages fetched before it are
        dropped (getmany). The seek pauses the source partitions (in the consumer thread) until it is
        known here: a message fetched after the seek but handed out before would be dropped as if it
        came before it, and read never again. faust's fetcher seeks too, when it gets messages while
        the flow is stopped (after a rebalance, before table recovery): that seek positions nothing,
        since the recovery seeks again when it ends; a message handed out in between (recovery resumes
        the flow to read changelogs) was processed while that last seek read the committed offsets
        before its commit, and was processed again after it (duplicates)."""
        await super().perform_seek()
        self._seeks += 1
        if asyncio.current_task() is not self._fetcher:
            self._positioned = True
        await self._thread.call_thread(self._thread.resume_sought)

    async def position(self, tp: TP) -> Optional[int]:
        """faust asks for a position only in table recovery, after 10 s without changelog records: a
        changelog partition whose position is at or past the recovery's end is taken for one that ends
        in aborted transactions, and is marked recovered (hole 11). Here the end is a record every
        reader gets (hole 10), so nothing aborted is left to skip; a position past it only says the
        fetcher went past records that a rebalance then dropped before the table got them, and a
        recovery marked done would skip them (the restarted one reads them again). So a changelog
        partition has no position here (-1)."""
        if self.in_transaction and tp.topic in self.app.tables.changelog_topics:
            return -1
        return await super().position(tp)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        """A table recovery that a rebalance cuts short goes on to seek the new assignment's standby
        partitions before it has read their offsets (None), and faust's worker crashes on it ("Offset
        must be a positive integer"). Those partitions wait for the recovery the rebalance restarts."""
        await super().seek_wait({tp: offset for tp, offset in partitions.items() if offset is not None})

    async def on_partitions_assigned(self, assigned: Set[TP], generation_id: int = 0) -> None:
        self._positioned = False  # (a recovery cut by this rebalance may have sought the old assignment)
        try:
            await super().on_partitions_assigned(assigned, generation_id)
        finally:
            self._deliver.set()

    def _new_consumer_thread(self) -> "ExactlyOnceConsumerThread":
        return ExactlyOnceConsumerThread(self, loop=self.loop, beacon=self.beacon)


class ExactlyOnceConsumerThread(driver.AIOKafkaConsumerThread):
    """The aiokafka side of the consumer (faust runs it in a thread of its own)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._sought: list = []  # source partitions paused by the seek in progress

    async def seek_to_committed(self) -> Mapping[TP, int]:
        return await self.call_thread(self._seek_to_committed)

    async def _seek_to_committed(self) -> Mapping[TP, int]:
        """aiokafka seeks only the partitions with a committed offset above 0; the others keep the
        position the fetcher had reached, past the messages a rebalance cut short, which then no agent
        ever processes. Under exactly-once a source partition without a committed offset
        starts where a new owner would: the reset policy's end."""
        consumer = self._ensure_consumer()
        acks = self.app.topics.acks_enabled_for
        if self.consumer.in_transaction:  # (until the event loop knows of the seek: resume_sought)
            self._sought = [tp for tp in consumer.assignment() if acks(tp.topic)]
            consumer.pause(*self._sought)
        committed = await consumer.seek_to_committed()
        if self.consumer.in_transaction:
            unset = [tp for tp, offset in committed.items() if not offset and acks(tp.topic)]
            if unset:
                latest = self.app.conf.consumer_auto_offset_reset == "latest"
                await (consumer.seek_to_end if latest else consumer.seek_to_beginning)(*unset)
        return committed

    def resume_sought(self) -> None:
        """Resume the source partitions the last seek paused (those still assigned)."""
        consumer = self._ensure_consumer()
        assigned = consumer.assignment()
        consumer.resume(*(tp for tp in self._sought if tp in assigned))
        self._sought = []

    async def _highwaters(self, partitions: Any) -> Mapping[TP, int]:
        """faust recovers a changelog partition until it has seen the record before the end this
        returns (hole 5: the end must come from ListOffsets). Under exactly-once that record is a
        commit marker, which no reader sees: recovery would wait for it until faust's 10-s fallback
        (hole 10). Here the end is one past the last record a read_committed reader gets."""
        if not self.consumer.in_transaction:
            return await super()._highwaters(partitions)
        stable_ends = await self._ensure_consumer().end_offsets(list(partitions))  # ListOffsets, read_committed
        return await self._visible_ends(stable_ends)

    async def _visible_ends(self, stable_ends: Mapping[TP, int]) -> Mapping[TP, int]:
        """Per partition, one past the last committed record below its stable end (0 if none), read
        from the tail with a consumer of its own (the worker's consumer must keep its positions)."""
        tails = [aiokafka.TopicPartition(*tp) for tp, end in stable_ends.items() if end]
        if not tails:  # (and an assignment of nothing would hang the reader's stop, in aiokafka 0.14)
            return dict(stable_ends)
        conf, transport = self.app.conf, self.transport
        reader = aiokafka.AIOKafkaConsumer(
            client_id=conf.broker_client_id, isolation_level="read_committed", enable_auto_commit=False,
            bootstrap_servers=driver.server_list(transport.url, transport.default_port),
            request_timeout_ms=int(conf.broker_request_timeout * 1000.0),
            **driver.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context))
        await reader.start()
        try:
            reader.assign(tails)
            starts = await reader.beginning_offsets(tails)
            return {tp: await last_record_end(reader, tp, starts[tp], end) if end else 0
                    for tp, end in stable_ends.items()}
        finally:
            await reader.stop()


async def last_record_end(reader: aiokafka.AIOKafkaConsumer, tp: TP, start: int, end: int) -> int:
    """One past the last record `reader` gets in [start, end), or 0: reads back from `end` in
    growing windows (behind the last commit marker there may be aborted transactions)."""
    window = TAIL_WINDOW
    while True:
        low = max(start, end - window)
        reader.seek(tp, low)
        last = -1
        while await reader.position(tp) < end:
            for record in (await reader.getmany(tp, timeout_ms=1000)).get(tp, ()):
                if record.offset < end:
                    last = max(last, record.offset)
        if last >= 0:
            return last + 1
        if low == start:
            return 0
        window *= 8


class ExactlyOnceTransactions(TransactionManager):
    """Routes each send into its event's source-partition transaction (hole 2), flushes buffered
    changelog writes before committing (hole 1) and keeps producers only for owned ids (hole 6)."""

    async def send(self, topic: str, key: Optional[bytes], value: Optional[bytes], partition: Optional[int],
                   timestamp: Optional[float], headers: Any, *, transactional_id: Optional[str] = None):
        event = current_event()
        if event is not None:
            source = event.message.tp
            group = self.app.assignor.group_for_topic(source.topic)
            transactional_id = f"{self.app.conf.id}-{group}-{source.partition}"
            sent = await self.producer.send(topic, key, value, self.consumer.key_partition(topic, key, partition),
                                            timestamp, headers, transactional_id=transactional_id)
            sent.add_done_callback(lambda fut: self._check_sent(fut, transactional_id))
            return sent
        if self._is_changelog(topic):  # a table write, flushed from faust's buffer after its event
            return await super().send(topic, key, value, partition, timestamp, headers)
        raise ProducerSendError(
            f"send to {topic!r} outside of an event: with processing_guarantee='exactly_once' every output must "
            f"belong to the event it comes from (timers, crontabs and web views cannot send exactly once; "
            f"send from an agent, or use a separate app with at-least-once)")

    async def on_rebalance(self, assigned: Set[TP], revoked: Set[TP], newly_assigned: Set[TP]) -> None:
        # faust stops the producers of revoked partitions, except those of partitions that became this
        # worker's standbys: such a producer stays, its id owned (and fenced) by another worker, and is
        # used again, fenced, if the partition comes back. Every id this worker does not own is stopped.
        owned = self._tps_to_transactional_ids(assigned)
        await self._stop_transactions([tid for tid in self.producer._transaction_producers if tid not in owned])
        await super().on_rebalance(assigned, revoked, newly_assigned)

    def _check_sent(self, fut: asyncio.Future, transactional_id: str) -> None:
        if not fut.cancelled() and isinstance(fut.exception(), ProducerFenced):
            self.app.loop.create_task(fenced(self.app, transactional_id))

    def _is_changelog(self, topic: str) -> bool:
        return topic in self.app.tables.changelog_topics

    async def commit(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        await self.app.producer.flush()  # table changelog writes wait in faust's producer buffer
        return await super().commit(offsets, start_new_transaction=start_new_transaction)


class ExactlyOnceProducer(driver.Producer):
    """faust's producer logs a fenced transactional id and carries on without it (hole 4): the
    worker would keep partitions it no longer owns. Here a fenced worker stops. Its flush gives up
    on the buffer after 0.1 s without a send (hole 9): here it waits for every buffered message."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._buffered: set[asyncio.Future] = set()  # put in faust's buffer (table changelog writes), not yet sent

    def send_soon(self, fut: Any) -> None:
        self._buffered.add(fut)
        fut.add_done_callback(self._buffered.discard)
        super().send_soon(fut)

    async def flush(self) -> None:
        """faust's buffer flush returns once no message has gone out for 0.1 s (a batch waiting for
        a busy broker, a loaded machine), leaving table changelog writes behind: they would miss the
        transaction committed with their events' offsets, and a worker taking the partition over
        would recover the table without them. Here a flush ends when each of them is sent."""
        await super().flush()
        while self._buffered and not self.should_stop:
            await asyncio.wait(list(self._buffered), timeout=1.0)
            await super().flush()  # (what the buffer sent meanwhile joined a batch: send it)

    async def abort_open_transactions(self) -> None:
        for transactional_id, transaction_producer in list(self._transaction_producers.items()):
            if transaction_producer._txn_manager.is_in_transaction():
                await self.abort_transaction(transactional_id)

    async def on_stop(self) -> None:
        """A transaction still open when the worker stops is one no commit will end (a worker stopping
        for an agent that raised commits nothing more): it is aborted, not left for the next owner of
        its id to abort (a read_committed reader of its outputs would wait for that)."""
        await self.abort_open_transactions()
        await super().on_stop()

    async def begin_transaction(self, transactional_id: str) -> None:
        await super().begin_transaction(transactional_id)
        if transactional_id not in self._transaction_producers:  # faust drops a producer only when fenced
            await fenced(self.app, transactional_id)

    async def commit_transaction(self, transactional_id: str) -> None:
        await self._unless_fenced(super().commit_transaction, transactional_id)

    async def abort_transaction(self, transactional_id: str) -> None:
        await self._unless_fenced(super().abort_transaction, transactional_id)

    async def _unless_fenced(self, end, transactional_id: str) -> None:
        had = transactional_id in self._transaction_producers
        await end(transactional_id)
        if had and transactional_id not in self._transaction_producers:
            await fenced(self.app, transactional_id)


async def fenced(app, transactional_id: str) -> None:
    log.error("transactional id %s was taken over by a newer worker (this one is a zombie: its open "
              "transaction is aborted); stopping", transactional_id)
    await app.crash(ProducerFenced(f"{transactional_id} fenced by a newer instance"))


class ExactlyOnceTransport(consumer.Transport):
    Consumer = ExactlyOnceConsumer
    Producer = ExactlyOnceProducer
    TransactionManager = ExactlyOnceTransactions


class NotExactlyOnce(ValueError):
    """An app whose shape exactly-once cannot hold."""


def install(app, agent_errors: Optional[AgentErrors] = None) -> bool:
    """Give an exactly-once app binlake's transport (before it starts), with the app's policy for agents
    that raise (read from the app unless given); False for other apps. NotExactlyOnce for a topic that
    several agents read."""
    if not app.conf.processing_guarantee.value == "exactly_once":
        return False
    readers: dict[str, list[str]] = {}
    for agent in app.agents.values():
        for topic in getattr(agent.channel, "topics", ()):
            readers.setdefault(topic, []).append(agent.name)
    for topic, agents in readers.items():
        if len(agents) > 1:
            # Each agent gets its own copy of the topic's messages; a rebalance stops them at different
            # places, so one agent's outputs for an event would commit while the event is read again.
            raise NotExactlyOnce(
                f"with processing_guarantee='exactly_once' a topic is read by one agent, and {topic!r} is read by "
                f"{len(agents)} ({', '.join(agents)}): a rebalance can stop one of them mid-way through events another "
                f"has finished, and those outputs would be written twice. Do the work in one agent (docs/streams.md)")
    app.transport = ExactlyOnceTransport(app.conf.broker_consumer, app, loop=app.loop)
    app.transport.agent_errors = agent_errors or AgentErrors.of(app)
    return True
