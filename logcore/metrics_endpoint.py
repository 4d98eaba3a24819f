"""GET /metrics over HTTP (aiohttp) on the running event loop, for any process that keeps a Prometheus
registry: the broker (`prometheus.listener`) and the connect runtimes. The exposition is built on the
loop, where the state it reads lives."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)


async def serve_metrics(exposition: Callable[[], bytes], listener: str) -> web.AppRunner:
    """Serve at `listener` (HOST:PORT; port 0 picks a free one, which the log names); returns the runner to
    clean up."""

    async def scrape(request: web.Request) -> web.Response:
        return web.Response(body=exposition(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = listener.rpartition(":")
    await web.TCPSite(runner, host or "0.0.0.0", int(port)).start()
    bound_host, bound_port = runner.addresses[0][:2]
    log.info("Prometheus metrics on http://%s:%d/metrics", bound_host, bound_port)
    return runner
