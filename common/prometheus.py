"""GET /metrics from a thread of its own (prometheus-client's server), for the processes whose main
thread is not an asyncio loop of ours: the Spark sink's driver and faust workers. The line it logs
("Prometheus metrics on http://HOST:PORT/metrics") names the port when 0 picked a free one."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


def serve_in_thread(registry: CollectorRegistry, listener: str) -> str:
    """Serve `registry` at `listener` (HOST:PORT); returns the URL."""
    host, _, port = listener.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    bound_host, bound_port = server.server_address[:2]
    url = f"http://{bound_host}:{bound_port}/metrics"
    log.info("Prometheus metrics on %s", url)
    return url
