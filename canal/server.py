"""Canal's TCP server (canal.serverMode=tcp) over the destinations' entry logs: the asyncio side of
canal/protocol.py (framing, packets) and canal/batches.py (batches, acks, rollbacks).

Each destination's mysql connector writes Canal entries, exactly once, to one partition of its entry log
(`<destination>.canal-entries`). A subscribed (destination, client id) reads that partition, read_committed,
from its committed offset in the group `binlake-canal-<destination>-<client id>`: an ack commits the end of the
acked batch there before the connection's next reply is written, so a server killed at any moment resumes
after the last ack the client may know was taken, and a batch never acked comes again. (The commit runs while
the next request is read and its batch taken: a Canal client sends its ack and its next get back to back.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from cdc.formats.canal_entry import is_ddl
from common.kafka_security import KafkaSecurity
from common.log_topics import LogTopics

from . import auth
from .batches import BatchError, LogEntry, Stream, table_filter
from .protocol import (NEED_DATA, Auth, ClientAck, Get, Heartbeat, ProtocolError, Rollback, ServerConnection,
                       Subscribe, Unsubscribe)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DestinationLog:
    """Where a destination's entries are and how its clients get them (canal.instance.memory.*, filters)."""

    name: str
    topic: str
    bootstrap_servers: str | list[str]
    security: KafkaSecurity = KafkaSecurity()
    capacity: int = 16384                 # canal.instance.memory.buffer.size: un-acked entries held at most
    memunit: int | None = 1024            # canal.instance.memory.buffer.memunit with batch.mode MEMSIZE; None: ITEMSIZE
    transaction_entries: bool = True      # not canal.instance.filter.transaction.entry
    ddl_isolation: bool = False           # canal.instance.get.ddl.isolation: a DDL's entry in a batch of its own


def entries_topic(destination: str) -> str:
    return f"{destination}.canal-entries"


class _Reader:
    """One stream's consumer: fills the stream from the log while it has room; commits acks."""

    def __init__(self, destination: DestinationLog, client_id: str) -> None:
        self.destination = destination
        self.tp = TopicPartition(destination.topic, 0)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=destination.bootstrap_servers, group_id=f"binlake-canal-{destination.name}-{client_id}",
            enable_auto_commit=False, isolation_level="read_committed", auto_offset_reset="earliest",
            max_partition_fetch_bytes=16 << 20, fetch_max_bytes=64 << 20, **destination.security.aiokafka())
        self.stream: Stream | None = None
        self.grew = asyncio.Event()
        self.space = asyncio.Event()
        self.failure: str | None = None     # why it stopped reading; its client's requests get this until a subscribe
        self._task: asyncio.Task | None = None
        self._committing = asyncio.Lock()
        self._committed = 0                 # the offset last committed

    async def start(self, client: str, next_id) -> Stream:
        await self.consumer.start()
        self.consumer.assign([self.tp])
        committed = await self.consumer.committed(self.tp)
        if committed is None:
            await self.consumer.seek_to_beginning(self.tp)
            committed = await self.consumer.position(self.tp)
        self.stream = Stream(client, committed, self.destination.capacity, next_id)
        self._committed = committed
        self._task = asyncio.create_task(self._read())
        return self.stream

    async def _read(self) -> None:
        """Fill the stream until an error no retry mends: then say why in `failure`, wake the waiting gets (they
        answer with it) and let go of the log."""
        try:
            await self._fill()
        except Exception as exc:
            self.failure = (f"destination:{self.destination.name}: reading {self.tp.topic} from offset "
                            f"{self.stream.read_to} failed ({type(exc).__name__}: {exc}); the server stopped reading "
                            "it for this client: subscribe again (a reconnecting client does) to read on from the last "
                            "ack, and see the server's log if it fails again")
            log.error("%s", self.failure, exc_info=exc)
            self.grew.set()
            await self.consumer.stop()

    async def _fill(self) -> None:
        """Read on while the stream has room; a failed fetch is logged and retried from where the stream is (any
        error but a Kafka error ends it)."""
        stream, consumer = self.stream, self.consumer
        position = None
        while True:
            if stream.room <= 0:
                self.space.clear()
                await self.space.wait()
                continue
            try:
                if position != stream.read_to:
                    position = stream.read_to
                    consumer.seek(self.tp, position)
                batches = await consumer.getmany(self.tp, timeout_ms=500, max_records=stream.room)
            except KafkaError as exc:
                log.warning("%s: reading %s failed (%r); reading again in a second", self.destination.name,
                            self.tp.topic, exc)
                position = None
                await asyncio.sleep(1)
                continue
            records = batches.get(self.tp, [])
            if records:
                isolate = self.destination.ddl_isolation
                stream.append([LogEntry(r.offset, r.key, r.value, isolate and r.key is not None and is_ddl(r.value))
                               for r in records])
                position = records[-1].offset + 1
                self.grew.set()

    def ack(self, batch_id: int) -> asyncio.Task:
        """Ack the oldest batch (BatchError for any other id); the task that stores the ack."""
        offset = self.stream.ack(batch_id)
        self.space.set()
        return asyncio.ensure_future(self._commit(offset))

    async def _commit(self, offset: int) -> None:
        """Store the acks up to `offset`, at least, as the group's committed offset. One commit at a time, of the
        latest ack then: a commit that finds its offset stored by a later ack's returns at once."""
        async with self._committing:
            if self._committed >= offset:
                return
            latest = self.stream.acked
            await self.consumer.commit({self.tp: OffsetAndMetadata(latest, "")})
            self._committed = latest

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()


class CanalServer:
    """Canal's client protocol on one address, for these destinations. Event loop only.

    With `standby`, it serves none of them until told to (`serve`), as a server standing by in Canal's high
    availability (canal/ha.py); `release` stops serving one again, closing its clients' connections."""

    def __init__(self, host: str, port: int, destinations: dict[str, DestinationLog], user: str = "",
                 passwd: str = "", standby: bool = False) -> None:
        self.host, self.port = host, port
        self.destinations = destinations
        self.user, self.passwd = user, passwd
        self.served: set[str] = set() if standby else set(destinations)
        self._readers: dict[tuple[str, str], _Reader] = {}
        self._filters: dict[tuple[str, str], object] = {}
        self._clients: dict[str, set[asyncio.Task]] = {name: set() for name in destinations}
        self._batch_id = _first_batch_id()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    def _next_id(self) -> int:
        self._batch_id += 1
        return self._batch_id

    async def start(self) -> None:
        for destination in self.destinations.values():
            await LogTopics(destination.bootstrap_servers, security=destination.security).partitions(
                destination.topic, 1)
        self._server = await asyncio.start_server(self._connection, self.host or None, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Canal's TCP protocol on %s:%d for %s%s", self.host or "*", self.port, ", ".join(self.destinations),
                 "" if self.served else " (standing by until ZooKeeper says which run here)")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        for reader in self._readers.values():
            await reader.stop()

    def serve(self, destination: str) -> None:
        self.served.add(destination)
        self._batch_id = max(self._batch_id, _first_batch_id())     # (past the ids of the server it takes over from)

    async def release(self, destination: str) -> None:
        """Stop serving `destination`: its clients' connections close (they reconnect, to the server running it
        now) and its readers stop, so that serving it again starts from the committed offsets."""
        self.served.discard(destination)
        for task in list(self._clients[destination]):
            task.cancel()
        for key in [k for k in self._readers if k[0] == destination]:
            self._filters.pop(key, None)
            await self._readers.pop(key).stop()

    # --- connections -----------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        conn = ServerConnection(os.urandom(8))
        peer = writer.get_extra_info("peername")
        storing: list[tuple[int, asyncio.Task]] = []      # (batch id, its ack's commit): the next reply waits
        sock = writer.get_extra_info("socket")
        try:
            writer.write(conn.handshake())
            while data := await reader.read(1 << 16):
                _quick_ack(sock)
                conn.receive_data(data)
                while (event := conn.next_event()) is not NEED_DATA:
                    reply, close = await self._handle(conn, event, storing)
                    if reply and storing:
                        failed = await _acks_stored(conn, storing)
                        reply, close = (failed, True) if failed else (reply, close)
                    if reply:
                        writer.write(reply)
                        await writer.drain()
                        _quick_ack(sock)
                    if close:
                        return
        except ProtocolError as exc:
            log.warning("closing the connection of %s: %s", peer, exc)
            writer.write(conn.error(exc.code, str(exc)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if storing and not task.cancelling():      # the acks the client sent before it left are stored all the same
                await _acks_stored(conn, storing)
            self._connections.discard(task)
            for clients in self._clients.values():
                clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, conn: ServerConnection, event,
                      storing: list[tuple[int, asyncio.Task]]) -> tuple[bytes | None, bool]:
        """The reply to one request (None: none), and whether to close the connection after it. An ack adds the
        commit that stores it to `storing`."""
        try:
            if isinstance(event, Auth):
                if not auth.check(self.user, self.passwd, event.username, event.password, conn.seeds):
                    return conn.error(400, f"auth failed for user:{event.username}"), True
                if event.destination and event.client_id:
                    await self._subscribe(event.destination, event.client_id, event.filter)
                return conn.accepted(), False
            if isinstance(event, Subscribe):
                await self._subscribe(event.destination, event.client_id, event.filter)
                return conn.ack(), False
            if isinstance(event, Unsubscribe):
                self._filters.pop((event.destination, event.client_id), None)
                return conn.ack(), False
            if isinstance(event, Get):
                return await self._get(conn, event), False
            if isinstance(event, ClientAck):
                return self._ack(conn, event, storing), False
            if isinstance(event, Rollback):
                reader = self._readers.get((event.destination, event.client_id))
                if reader is not None:           # (as Canal: a rollback before subscribing is ignored)
                    reader.stream.rollback(event.batch_id)
                return None, False
            if isinstance(event, Heartbeat):
                return None, False
            raise AssertionError(f"an event canal.protocol does not make: {event!r}")
        except (BatchError, _NotServed) as exc:
            return conn.error(400, str(exc)), False

    async def _subscribe(self, destination: str, client_id: str, filter_text: str) -> None:
        if not destination or not client_id:
            raise _NotServed("destination or clientId is null")
        served = self.destinations.get(destination)
        if served is None:
            raise _NotServed(f"destination:{destination} should start first (served here: "
                             f"{', '.join(self.destinations)})")
        if destination not in self.served:
            raise _NotServed(f"destination:{destination} should start first (this server stands by for it: "
                             f"another runs it)")
        self._clients[destination].add(asyncio.current_task())
        key = (destination, client_id)
        self._filters[key] = table_filter(filter_text, served.transaction_entries)
        failed = self._readers.get(key)
        if failed is not None and failed.failure is not None:
            del self._readers[key]
            await failed.stop()
        if key not in self._readers:
            reader = self._readers[key] = _Reader(served, client_id)
            try:
                await reader.start(client_id, self._next_id)
            except BaseException:
                self._readers.pop(key, None)        # (a release may have taken it meanwhile)
                raise
            log.info("%s: client %s subscribed, from offset %d of %s", destination, client_id,
                     reader.stream.acked, served.topic)

    def _subscribed(self, destination: str, client_id: str) -> tuple[_Reader, object]:
        key = (destination, client_id)
        if key not in self._filters:
            raise _NotServed(f"ClientIdentity:{client_id}/{destination} should subscribe first")
        reader = self._readers[key]
        if reader.failure is not None:
            raise _NotServed(reader.failure)
        return reader, self._filters[key]

    async def _get(self, conn: ServerConnection, get: Get) -> bytes:
        reader, accepts = self._subscribed(get.destination, get.client_id)
        stream = reader.stream
        size = get.fetch_size if get.fetch_size > 0 else 1000
        if get.timeout_s is not None:
            deadline = None if get.timeout_s == 0 else asyncio.get_running_loop().time() + get.timeout_s
            while not stream.ready(accepts, size) and stream.room > 0 and reader.failure is None:
                reader.grew.clear()
                remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
                if remaining is not None and remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.grew.wait(), remaining)
            if reader.failure is not None:
                raise _NotServed(reader.failure)
        memunit = reader.destination.memunit
        taken = stream.take(size, accepts, None if memunit is None else size * memunit)
        if taken is None:
            return conn.messages(-1, [])
        batch, entries = taken
        return conn.messages(batch.id, entries)

    def _ack(self, conn: ServerConnection, ack: ClientAck, storing: list[tuple[int, asyncio.Task]]) -> bytes | None:
        if ack.batch_id == 0:
            return conn.error(402, "batchId should assign value")
        if ack.batch_id == -1:          # the get before it had nothing
            return None
        reader, _ = self._subscribed(ack.destination, ack.client_id)
        storing.append((ack.batch_id, reader.ack(ack.batch_id)))
        return None


def _quick_ack(sock) -> None:
    """ACK what the client sends at once. Canal's Java client writes each request as two writes, its 4-byte length
    and then its body, with Nagle's algorithm on: the body waits for the length's ACK, which Linux delays (up to
    40 ms) on a connection that answers what it reads, or until the server reads the length. Linux leaves quick-ACK
    mode by itself, so it is set again after every read and every reply."""
    if hasattr(socket, "TCP_QUICKACK"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


async def _acks_stored(conn: ServerConnection, storing: list[tuple[int, asyncio.Task]]) -> bytes | None:
    """Wait until the connection's acks are stored; Canal's error ACK if one could not be (the connection then
    closes: the client connects again and gets every batch not stored as acked again)."""
    acks, storing[:] = list(storing), []
    results = await asyncio.gather(*(task for _, task in acks), return_exceptions=True)
    for (batch_id, _), result in zip(acks, results):
        if isinstance(result, BaseException):
            log.warning("storing the ack of batch %d failed: %r", batch_id, result)
            return conn.error(400, f"storing the ack of batch {batch_id} failed ({type(result).__name__}: "
                                   f"{result}): connect again; the batches after the last stored ack come again")
    return None


def _first_batch_id() -> int:
    """Batch ids start from the clock (ms << 8), so they grow across restarts and takeovers: an ack of a batch the
    previous server handed out fails here instead of acking another batch (unless that server handed out more than
    256 batches a millisecond)."""
    return int(time.time() * 1000) << 8


class _NotServed(Exception):
    """A request for a destination or client this server does not serve (yet, or any more: its reader failed)."""
