"""The console's HTTP side (aiohttp): the page, and the JSON it draws from. Reads go to the cluster
(in threads: the admin client blocks), the connect runtime and the sink; the two writes (restart a
connector, reset a group's offsets) answer 403 unless the console runs with --allow-writes, and the
broker's ACLs still apply to the console's own principal."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from . import browse, remote
from .pipeline import pipeline
from .cluster import Cluster, ConsoleError

STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    client_settings: dict
    connect_url: str | None = None
    sink_url: str | None = None
    allow_writes: bool = False


def make_app(settings: Settings) -> web.Application:
    cluster = Cluster(settings.bootstrap, settings.client_settings)
    routes = web.RouteTableDef()

    @routes.get("/")
    async def page(_request):
        return web.FileResponse(STATIC / "index.html")

    @routes.get("/api/config")
    async def config(_request):
        return web.json_response({"bootstrap": settings.bootstrap, "writes": settings.allow_writes,
                                  "connect": settings.connect_url, "sink": settings.sink_url})

    @routes.get("/api/overview")
    async def overview(_request):
        return await _answer(asyncio.to_thread(cluster.overview))

    @routes.get("/api/topics")
    async def topics(_request):
        return await _answer(asyncio.to_thread(cluster.topics))

    @routes.get("/api/topics/{topic}/messages")
    async def messages(request):
        query = request.query
        try:
            partition = int(query.get("partition", 0))
            offset = int(query["offset"]) if query.get("offset") else None
            timestamp = _timestamp_ms(query["timestamp"]) if query.get("timestamp") else None
            limit = int(query.get("limit", 50))
        except ValueError as exc:
            return _error(400, f"bad parameter: {exc}")
        return await _answer(asyncio.to_thread(browse.read, settings.bootstrap, settings.client_settings,
                                               request.match_info["topic"], partition, offset, timestamp, limit))

    @routes.get("/api/groups")
    async def groups(_request):
        return await _answer(asyncio.to_thread(cluster.groups))

    @routes.post("/api/groups/{group}/reset")
    async def reset(request):
        if not settings.allow_writes:
            return _read_only()
        to = request.query.get("to")
        if to not in ("earliest", "latest"):
            return _error(400, "reset takes to=earliest or to=latest")
        return await _answer(asyncio.to_thread(cluster.reset_group, request.match_info["group"], to))

    @routes.get("/api/transactions")
    async def transactions(_request):
        return await _answer(asyncio.to_thread(cluster.transactions))

    @routes.get("/api/connectors")
    async def connectors(_request):
        if settings.connect_url is None:
            return _error(404, "no connect runtime: start the console with --connect URL")
        return await _answer(remote.connectors(settings.connect_url))

    @routes.post("/api/connectors/{name}/restart")
    async def restart(request):
        if not settings.allow_writes:
            return _read_only()
        if settings.connect_url is None:
            return _error(404, "no connect runtime: start the console with --connect URL")
        return await _answer(remote.restart(settings.connect_url, request.match_info["name"]))

    @routes.get("/api/sink")
    async def sink(_request):
        if settings.sink_url is None:
            return _error(404, "no sink: start the console with --sink URL (the sink's --prometheus-listener)")
        return await _answer(remote.sink(settings.sink_url))

    @routes.get("/api/pipeline")
    async def pipeline_view(_request):
        return await _answer(pipeline(cluster, settings.connect_url, settings.sink_url))

    app = web.Application()
    app.add_routes(routes)
    app.router.add_static("/static/", STATIC)
    return app


async def _answer(work) -> web.Response:
    try:
        return web.json_response(await work)
    except ConsoleError as exc:
        return _error(502, str(exc))


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _read_only() -> web.Response:
    return _error(403, "the console is read-only: start it with --allow-writes to restart connectors and reset offsets")


def _timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO date-time (UTC unless it says otherwise)."""
    if text.lstrip("-").isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)

