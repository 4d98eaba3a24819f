"""asyncio listener: read → feed the sans-IO connection → dispatch → write, in request order.

Each connection has a reader (frames requests as they arrive) and a writer task (awaits each
request's handler in arrival order and writes its response), so one connection's responses stay
in order while a long-poll fetch on one connection never holds up another connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from .api import HANDLERS, RequestContext
from .protocol.codec import ErrorCode, FileRegion
from .protocol.connection import NEED_DATA, RemoteProtocolError, Request, ServerConnection
from .protocol.errors import BrokerError

log = logging.getLogger(__name__)

MAX_PIPELINE = 100  # requests read ahead of the one being answered, per connection


class KafkaServer:
    def __init__(self, broker, host: str, port: int, supported: dict[int, tuple[int, int]], max_frame: int) -> None:
        self.broker = broker
        self.host, self.port = host, port
        self.supported = supported
        self.max_frame = max_frame
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True,
                                                  limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = ServerConnection(self.supported, self.max_frame)
        pending: asyncio.Queue = asyncio.Queue(MAX_PIPELINE)
        responder = asyncio.create_task(self._respond(conn, pending, writer, peer[0]))
        try:
            while not responder.done():
                data = await reader.read(1 << 20)
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is NEED_DATA:
                        break
                    if event is None:
                        return
                    await pending.put((event, asyncio.ensure_future(self._handle(event, peer[0]))))
        except RemoteProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            responder.cancel()  # the broker is stopping: do not wait out long polls
            raise
        finally:
            if not responder.done() and not responder.cancelling():
                await pending.put(None)  # answer what was read, then stop
            try:
                await responder
            except (ConnectionError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("response writer for %s failed", peer)
            writer.close()
            self._connections.discard(task)

    async def _handle(self, request: Request, host: str) -> dict | None | ErrorCode:
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

    async def _respond(self, conn: ServerConnection, pending: asyncio.Queue, writer: asyncio.StreamWriter,
                       host: str) -> None:
        loop = asyncio.get_running_loop()
        while (item := await pending.get()) is not None:
            request, result = item
            data = await result
            if data is None:
                continue  # acks=0 produce: no response
            try:
                chunks = conn.send_error(request, data) if isinstance(data, ErrorCode) else conn.send(request, data)
            except Exception:  # a handler bug must cost one response, not the connection
                log.exception("cannot encode the response to api %d v%d", request.api_key, request.api_version)
                chunks = conn.send_error(request, ErrorCode.unknown_server_error)
            for chunk in chunks:
                if isinstance(chunk, FileRegion):
                    await _send_region(loop, writer, chunk)
                else:
                    writer.write(chunk)
            if writer.transport.get_write_buffer_size() > (1 << 20):
                await writer.drain()
        await writer.drain()


async def _send_region(loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter, region: FileRegion) -> None:
    """Zero-copy when the transport allows it (plain TCP), one read otherwise."""
    await writer.drain()
    try:
        with open(region.fd, "rb", closefd=False) as f:
            await loop.sendfile(writer.transport, f, region.position, region.length, fallback=False)
    except (asyncio.SendfileNotAvailableError, NotImplementedError):
        writer.write(region.read())
