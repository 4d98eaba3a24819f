"""asyncio listener: read → feed the sans-IO connection → dispatch → write, in request order.

Each connection is an `asyncio.Protocol` that frames requests straight from the bytes the transport
hands it (no stream reader, so no extra buffer copies or reader task wake-ups) and starts each
request's handler at once; one responder task per connection awaits the handlers in arrival order
and writes their responses. So one connection's responses stay in order, while a long-poll fetch
on one connection never holds up another connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket

from .allocator import keep_freed_memory
from .api import HANDLERS, RequestContext
from .protocol.codec import ErrorCode, FileRegion
from .protocol.connection import NEED_DATA, RemoteProtocolError, Request, ServerConnection
from .protocol.errors import BrokerError

log = logging.getLogger(__name__)

MAX_PIPELINE = 100  # requests read ahead of the one being answered, per connection
SENDFILE_MIN = 64 * 1024  # smaller record regions are cheaper to copy than to sendfile
WRITE_HIGH_WATER = 4 * 1024 * 1024  # unsent response bytes that pause the responder


class KafkaServer:
    def __init__(self, broker, host: str, port: int, supported: dict[int, tuple[int, int]], max_frame: int) -> None:
        self.broker = broker
        self.host, self.port = host, port
        self.supported = supported
        self.max_frame = max_frame
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        if not keep_freed_memory():
            log.info("cannot tune malloc here (not glibc): large produce requests will cost more CPU")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        for task in list(self._connections):
            task.cancel()  # the broker is stopping: do not wait out long polls
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()

    async def handle(self, request: Request, host: str) -> dict | None | ErrorCode:
        if request.error is not None:
            log.info("answering %s to %s: %s", request.error.name, host, request.error_message)
            return request.error
        ctx = RequestContext(self.broker, request.api_version, request.client_id, host)
        try:
            return await HANDLERS[request.api_key](ctx, request.body)
        except BrokerError as exc:
            return exc.code
        except Exception:
            log.exception("handler for api %d v%d failed", request.api_key, request.api_version)
            return ErrorCode.unknown_server_error


class _Connection(asyncio.Protocol):
    """One accepted socket. Event loop only: the transport callbacks frame requests and queue
    (request, handler task) pairs; `_respond` is the only writer."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.conn = ServerConnection(server.supported, server.max_frame)
        self.pending: collections.deque[tuple[Request, asyncio.Future] | None] = collections.deque()
        self.wakeup: asyncio.Future | None = None  # set while the responder waits for a request
        self.writable: asyncio.Future | None = None  # set while the transport is over its high water mark
        self.unsent: list[bytes] = []  # encoded responses not yet handed to the transport
        self.closed = False
        self.stopped_reading = False  # a framing error or EOF: read nothing more

    # -- transport callbacks (reading side) ------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.responder = self.loop.create_task(self._respond())
        self.server._connections.add(self.responder)

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        self._frame_requests()

    def eof_received(self) -> bool:
        self.stopped_reading = True
        self.conn.receive_data(b"")
        self._frame_requests()
        return True  # keep the transport: the responder answers what was read, then closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._queue(None)
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def _frame_requests(self) -> None:
        try:
            while (event := self.conn.next_event()) is not NEED_DATA:
                if event is None:  # the peer closed between frames
                    self._queue(None)
                    return
                self._queue((event, self.loop.create_task(self.server.handle(event, self.peer[0]))))
        except RemoteProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.stopped_reading = True
            self.transport.pause_reading()
            self._queue(None)  # answer what was read, then close
            return
        if len(self.pending) >= MAX_PIPELINE:
            self.transport.pause_reading()

    def _queue(self, item: tuple[Request, asyncio.Future] | None) -> None:
        self.pending.append(item)
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)

    # -- transport callbacks (writing side) ------------------------------------------------------

    def pause_writing(self) -> None:
        self.writable = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    # -- the responder ---------------------------------------------------------------------------

    async def _respond(self) -> None:
        try:
            while (item := await self._next()) is not None:
                request, result = item
                if not result.done():
                    await self._flush()  # what is ready goes out before a long poll
                data = await result
                if data is not None:  # None: acks=0 produce, no response
                    await self._add(request, data)
            await self._flush()
        except asyncio.CancelledError:
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
            self.server._connections.discard(self.responder)

    async def _next(self) -> tuple[Request, asyncio.Future] | None:
        if not self.pending:
            await self._flush()
        while not self.pending:
            self.wakeup = self.loop.create_future()
            await self.wakeup
        item = self.pending.popleft()
        if len(self.pending) == MAX_PIPELINE - 1 and not (self.closed or self.stopped_reading):
            self.transport.resume_reading()
        return item

    async def _add(self, request: Request, data: dict | ErrorCode) -> None:
        """Encode one response behind the unsent ones; record regions go out with sendfile."""
        conn = self.conn
        try:
            chunks = conn.send_error(request, data) if isinstance(data, ErrorCode) else conn.send(request, data)
        except Exception:  # a handler bug must cost one response, not the connection
            log.exception("cannot encode the response to api %d v%d", request.api_key, request.api_version)
            chunks = conn.send_error(request, ErrorCode.unknown_server_error)
        for chunk in chunks:
            if not isinstance(chunk, FileRegion):
                self.unsent.append(chunk)
            elif chunk.length < SENDFILE_MIN:
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
