"""asyncio listener: read → feed the sans-IO connection → dispatch → write, in request order.

Each connection is an `asyncio.Protocol` that frames requests straight from the bytes the transport
hands it (no stream reader, so no extra buffer copies or reader task wake-ups) and starts each
request's handler at once; one responder task per connection awaits the handlers in arrival order
and writes their responses. So one connection's responses stay in order, while a long-poll fetch
on one connection never holds up another connection.

Limits, with Kafka's names (`ServerLimits`): the frame size, connections in all and per IP, idle
connections, and requests in flight across the broker. Memory per connection is bounded too: a
connection stops being read while MAX_PIPELINE of its requests are unanswered, while the broker
holds `queued.max.requests`, and while more than WRITE_HIGH_WATER response bytes wait for a peer
that does not read them. Bad input is logged through `BadInputLog`: a few lines, never one per frame.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Callable

from .allocator import keep_freed_memory
from .api import HANDLERS, RequestContext, Services
from .bad_input import BadInputLog
from .protocol.codec import ApiKey, ErrorCode, FileRegion
from .protocol.connection import NEED_DATA, RemoteProtocolError, Request, ServerConnection
from .protocol.errors import BrokerError
from .security.sasl import SaslSession

ANONYMOUS = "User:ANONYMOUS"
SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)  # (answered by the connection, on SASL listeners)

log = logging.getLogger(__name__)

MAX_PIPELINE = 100  # requests read ahead of the one being answered, per connection
SENDFILE_MIN = 64 * 1024  # smaller record regions are cheaper to copy than to sendfile
WRITE_HIGH_WATER = 4 * 1024 * 1024  # unsent response bytes that pause the responder


@dataclass(frozen=True)
class ServerLimits:
    """What one client may take from the broker, under Kafka's config names."""

    max_frame: int = 104857600  # socket.request.max.bytes
    max_connections: int = 2**31 - 1  # max.connections
    max_connections_per_ip: int = 2**31 - 1  # max.connections.per.ip
    per_ip_overrides: dict[str, int] = field(default_factory=dict)  # max.connections.per.ip.overrides
    idle_ms: int = 600000  # connections.max.idle.ms (-1: never close idle connections)
    queued_max_requests: int = 500  # queued.max.requests

    @classmethod
    def from_config(cls, config) -> "ServerLimits":
        return cls(config.get("socket.request.max.bytes"), config.get("max.connections"),
                   config.get("max.connections.per.ip"), config.connection_overrides(),
                   config.get("connections.max.idle.ms"), config.get("queued.max.requests"))

    def per_ip(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)


class KafkaServer:
    """One listener: its address, its TLS context (SSL, SASL_SSL) and its SASL sessions (SASL_*)."""

    def __init__(self, services: Services, host: str, port: int, supported: dict[int, tuple[int, int]],
                 limits: ServerLimits = ServerLimits(), listener: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None,
                 sasl_session: Callable[[], SaslSession] | None = None) -> None:
        self.services = services  # what its requests' handlers get (`RequestContext`)
        self.host, self.port = host, port
        self.supported = supported
        self.limits = limits
        self.listener = listener
        self.ssl_context = ssl_context
        self.sasl_session = sasl_session  # a new session per connection; None: no authentication
        self.bad_input = BadInputLog(log)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self._per_host: collections.Counter[str] = collections.Counter()
        self._responders: set[asyncio.Task] = set()
        # Requests read whose handler has not started yet: Kafka's request queue between its network
        # and handler threads, which queued.max.requests bounds. Parked long polls are not in it.
        self._queued: set[asyncio.Task] = set()
        self._starved: set[_Connection] = set()  # not reading because the queue is full
        self._orphans: set[asyncio.Task] = set()  # handlers still running for closed connections
        self._idle_sweeper: asyncio.Task | None = None

    async def start(self, serving: bool = True) -> None:
        """Bind the port; accept connections at once, or (`serving=False`) from `serve()` on."""
        if not keep_freed_memory():
            log.info("cannot tune malloc here (not glibc): large produce requests will cost more CPU")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), self.host, self.port, reuse_address=True,
                                                start_serving=serving, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.limits.idle_ms >= 0:
            self._idle_sweeper = loop.create_task(self._close_idle_connections())

    async def serve(self) -> None:
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        if self._idle_sweeper:
            self._idle_sweeper.cancel()
        for task in [*self._responders, *self._orphans]:
            task.cancel()  # the broker is stopping: do not wait out long polls
        await asyncio.gather(*self._responders, *self._orphans, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()
        self.bad_input.close()

    def dispatch(self, request: Request, host: str, principal: str) -> asyncio.Task:
        """Start `request`'s handler; it counts as queued until it first runs."""
        task = asyncio.get_running_loop().create_task(self.handle(request, host, principal))
        self._queued.add(task)
        task.add_done_callback(self._dequeue)  # also when it is cancelled before it ever ran
        return task

    def _dequeue(self, task: asyncio.Task) -> None:
        if task in self._queued:
            self._queued.discard(task)
            if self._starved and not self.saturated:
                starved, self._starved = self._starved, set()
                for conn in starved:
                    conn.update_reading()

    @property
    def saturated(self) -> bool:
        return len(self._queued) >= self.limits.queued_max_requests

    def keep_running(self, tasks: list[asyncio.Task]) -> None:
        """Hold handlers of a closed connection until they finish: the loop keeps only weak references."""
        for task in tasks:
            if not task.done():
                self._orphans.add(task)
                task.add_done_callback(self._orphans.discard)

    def starve(self, conn: _Connection) -> None:
        """`conn` stopped reading because the queue is full; `_dequeue` wakes it."""
        self._starved.add(conn)

    async def handle(self, request: Request, host: str, principal: str) -> dict | None | ErrorCode:
        self._dequeue(asyncio.current_task())
        if request.error is not None:
            self.bad_input.report(host, request.error_kind, "answering %s to %s: %s",
                                  request.error.name, host, request.error_message)
            return request.error
        ctx = RequestContext(self.services, request.api_version, request.client_id, host, self.listener, principal)
        started = time.perf_counter()
        try:
            return await HANDLERS[request.api_key](ctx, request.body)
        except BrokerError as exc:
            return exc.code
        except Exception as exc:  # a handler bug costs this request only (UNKNOWN_SERVER_ERROR, as Kafka)
            self.bad_input.report(host, f"handler error in api {request.api_key} ({type(exc).__name__})",
                                  "handler for api %d v%d from %s failed", request.api_key, request.api_version,
                                  host, level=logging.ERROR, exc_info=True)
            return ErrorCode.unknown_server_error
        finally:
            self.services.metrics.observe_request(request.api_key, time.perf_counter() - started)

    # -- connection accounting -------------------------------------------------------------------

    def admit(self, conn: _Connection) -> str | None:
        """Register a new connection, or say which limit refuses it."""
        host = conn.peer[0]
        if len(self._connections) >= self.limits.max_connections:
            return f"max.connections={self.limits.max_connections} reached"
        if self._per_host[host] >= self.limits.per_ip(host):
            return f"max.connections.per.ip={self.limits.per_ip(host)} reached for {host}"
        self._connections.add(conn)
        self._per_host[host] += 1
        return None

    def release(self, conn: _Connection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self._per_host[conn.peer[0]] -= 1
            if not self._per_host[conn.peer[0]]:
                del self._per_host[conn.peer[0]]
        self._starved.discard(conn)

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms: close connections with nothing in flight and no bytes for that long."""
        idle_s = self.limits.idle_ms / 1000
        while True:
            await asyncio.sleep(max(idle_s / 4, 0.05))
            cutoff = time.monotonic() - idle_s
            for conn in [c for c in self._connections if c.idle_since is not None and c.idle_since < cutoff]:
                log.debug("closing connection from %s idle for more than %d ms", conn.peer, self.limits.idle_ms)
                conn.close_idle()


class _Connection(asyncio.Protocol):
    """One accepted socket. Event loop only: the transport callbacks frame requests and queue
    (request, handler task) pairs; `_respond` is the only writer; `update_reading` alone pauses and
    resumes the transport's reading."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.conn = ServerConnection(server.supported, server.limits.max_frame)
        self.sasl = server.sasl_session() if server.sasl_session else None
        self.pending: collections.deque[tuple[Request, asyncio.Future] | None] = collections.deque()
        self.wakeup: asyncio.Future | None = None  # set while the responder waits for a request
        self.writable: asyncio.Future | None = None  # set while the transport is over its high water mark
        self.unsent: list[bytes] = []  # encoded responses not yet handed to the transport
        self.unanswered = 0  # requests read whose response is not written yet
        self.current: tuple[Request, asyncio.Future] | None = None  # the one the responder waits for
        self.last_active = time.monotonic()
        self.closed = False
        self.stopped_reading = False  # a framing error or EOF: read nothing more
        self.reading = True

    # -- transport callbacks (reading side) ------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        refused = self.server.admit(self)
        if refused is not None:
            self.server.bad_input.report(self.peer[0], "connections refused by a limit",
                                         "refusing a connection from %s: %s", self.peer, refused)
            self.closed = self.stopped_reading = True
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.responder = self.loop.create_task(self._respond())
        self.server._responders.add(self.responder)

    def data_received(self, data: bytes) -> None:
        if self.stopped_reading:
            return
        self.last_active = time.monotonic()
        self.conn.receive_data(data)
        self._frame_requests()

    def eof_received(self) -> bool:
        if not self.stopped_reading:
            self.stopped_reading = True
            self.conn.receive_data(b"")
            self._frame_requests()
        # keep the transport: the responder answers what was read, then closes it (TLS cannot half-close)
        return self.server.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.release(self)
        # Nobody will read the answers. Fetches only read, so their long polls end now; every other
        # handler finishes what it started (a produce may have appended already), unanswered.
        for request, task in [item for item in (self.current, *self.pending) if item is not None]:
            if request.api_key == ApiKey.FETCH:
                task.cancel()
        self._queue(None)
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def _frame_requests(self) -> None:
        try:
            while (event := self.conn.next_event()) is not NEED_DATA:
                if event is None:  # the peer closed between frames
                    self._queue(None)
                    return
                if self.sasl is not None and event.api_key != ApiKey.API_VERSIONS and (
                        not self.sasl.authenticated or self.sasl.in_progress or event.api_key in SASL_APIS):
                    self._authenticate(event)  # (authenticated already: a re-authentication, KIP-368)
                    if self.stopped_reading:
                        break
                    continue
                if self.sasl is not None and self.sasl.expired():
                    self._close_expired(event)
                    break
                principal = self.sasl.principal if self.sasl is not None else ANONYMOUS
                self._queue((event, self.server.dispatch(event, self.peer[0], principal)))
                if len(self.pending) >= MAX_PIPELINE or self.server.saturated:
                    break  # the rest stays buffered until the responder or the broker catches up
        except RemoteProtocolError as exc:
            self.server.bad_input.report(self.peer[0], "unframeable bytes", "closing connection from %s: %s",
                                         self.peer, exc)
            self.stopped_reading = True
            self._queue(None)  # answer what was read, then close
        self.update_reading()

    def _authenticate(self, request: Request) -> None:
        """Before a SASL connection has authenticated, only SaslHandshake and SaslAuthenticate (and
        ApiVersions) are served, here. A failed or malformed one is answered with its error, then the
        connection closes; any other request closes it unanswered, as Kafka does. Other connections
        carry on."""
        answer: dict | ErrorCode | None = None
        if request.error is not None:
            answer = request.error
        elif request.api_key == ApiKey.SASL_HANDSHAKE and request.api_version == 0:
            answer = ErrorCode.unsupported_version  # (v0's bare tokens are not read: docs/security.md)
        elif request.api_key == ApiKey.SASL_HANDSHAKE:
            answer = self.sasl.handshake(request.body.mechanism)
        elif request.api_key == ApiKey.SASL_AUTHENTICATE:
            answer = self.sasl.authenticate(request.body.auth_bytes)
        if answer is not None:
            done = self.loop.create_future()
            done.set_result(answer)
            self._queue((request, done))
        if answer is None or isinstance(answer, ErrorCode) or self.sasl.failed:
            why = ("a request other than SaslHandshake/SaslAuthenticate" if answer is None
                   else answer.name if isinstance(answer, ErrorCode) else answer.get("error_message") or answer["error_code"].name)
            self.server.bad_input.report(self.peer[0], "failed SASL authentication",
                                         "closing connection from %s on listener %s: api %d before authentication "
                                         "ended: %s", self.peer, self.server.listener, request.api_key, why)
            self.stopped_reading = True
            self._queue(None)  # answer what was answered, then close

    def _close_expired(self, request: Request) -> None:
        """A request after the session's lifetime, without re-authenticating: the connection closes
        unanswered, as Kafka closes it (the client reconnects and authenticates anew)."""
        self.server.bad_input.report(self.peer[0], "expired SASL sessions",
                                     "closing connection from %s on listener %s: api %d after its SASL session of "
                                     "%d ms expired (connections.max.reauth.ms) without re-authentication",
                                     self.peer, self.server.listener, request.api_key, self.sasl.lifetime_ms)
        self.stopped_reading = True
        self._queue(None)

    def _queue(self, item: tuple[Request, asyncio.Future] | None) -> None:
        if item is not None:
            self.unanswered += 1
        self.pending.append(item)
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    def update_reading(self) -> None:
        """Read while this connection has room for more requests and responses, and the broker too."""
        if self.closed:
            return
        starved = self.server.saturated
        wanted = not (self.stopped_reading or starved or self.writable is not None
                      or len(self.pending) >= MAX_PIPELINE)
        if starved:
            self.server.starve(self)
        if wanted and not self.reading:
            self.transport.resume_reading()
            self.reading = True
            self._frame_requests()  # requests that arrived while reading was paused
        elif not wanted and self.reading:
            self.transport.pause_reading()
            self.reading = False

    @property
    def idle_since(self) -> float | None:
        """When this connection last saw bytes or answered, if nothing is in flight on it now."""
        return None if self.unanswered or self.closed else self.last_active

    def close_idle(self) -> None:
        self.transport.close()

    # -- transport callbacks (writing side) ------------------------------------------------------

    def pause_writing(self) -> None:
        """The peer is not reading its responses: stop reading its requests until they drain."""
        self.writable = self.loop.create_future()
        self.update_reading()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None
        self.update_reading()

    # -- the responder ---------------------------------------------------------------------------

    async def _respond(self) -> None:
        try:
            while (item := await self._next()) is not None:
                self.current = request, result = item
                if not result.done():
                    await self._flush()  # what is ready goes out before a long poll
                try:
                    data = await result
                except asyncio.CancelledError:
                    if self.closed and result.cancelled() and not self.responder.cancelling():
                        break  # a fetch the lost connection ended (connection_lost)
                    raise
                if data is not None:  # None: acks=0 produce, no response
                    await self._add(request, data)
                self.current = None
                self.unanswered -= 1
                self.last_active = time.monotonic()
            await self._flush()
        except asyncio.CancelledError:  # the broker is stopping: do not wait for anything
            for item in self.pending:
                if item is not None:
                    item[1].cancel()
            raise
        except ConnectionError:
            pass
        except Exception:
            log.exception("response writer for %s failed", self.peer)
        finally:
            self.transport.close()
            self.server._responders.discard(self.responder)
            self.server.keep_running([task for _, task in filter(None, (self.current, *self.pending))])

    async def _next(self) -> tuple[Request, asyncio.Future] | None:
        if not self.pending:
            await self._flush()
        while not self.pending:
            self.wakeup = self.loop.create_future()
            await self.wakeup
        item = self.pending.popleft()
        if not self.reading:
            self.update_reading()
        return item

    async def _add(self, request: Request, data: dict | ErrorCode) -> None:
        """Encode one response behind the unsent ones; record regions go out with sendfile."""
        conn = self.conn
        try:
            chunks = conn.send_error(request, data) if isinstance(data, ErrorCode) else conn.send(request, data)
        except Exception as exc:  # a handler bug must cost one response, not the connection
            self.server.bad_input.report(self.peer[0], f"unencodable response to api {request.api_key} "
                                         f"({type(exc).__name__})", "cannot encode the response to api %d v%d",
                                         request.api_key, request.api_version, level=logging.ERROR, exc_info=True)
            chunks = conn.send_error(request, ErrorCode.unknown_server_error)
        for chunk in chunks:
            if not isinstance(chunk, FileRegion):
                self.unsent.append(chunk)
            elif chunk.length < SENDFILE_MIN or self.server.ssl_context is not None:  # (TLS encrypts in user space)
                self.unsent.append(chunk.read())
            else:
                await self._flush()
                await self._sendfile(chunk)

    async def _flush(self) -> None:
        """One write for every response encoded since the last: pipelined answers share a send()."""
        if self.closed:
            raise ConnectionResetError("the peer went away")
        if self.unsent:
            self.transport.write(self.unsent[0] if len(self.unsent) == 1 else b"".join(self.unsent))
            self.unsent.clear()
        if self.writable is not None:
            await self.writable

    async def _sendfile(self, region: FileRegion) -> None:
        """Zero-copy when the transport allows it (plain TCP), one read otherwise."""
        try:
            with open(region.fd, "rb", closefd=False) as f:
                await self.loop.sendfile(self.transport, f, region.position, region.length, fallback=False)
        except (asyncio.SendfileNotAvailableError, NotImplementedError):
            self.transport.write(region.read())
