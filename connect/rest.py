"""A Kafka-Connect-style REST API over a `Worker` (aiohttp), enabled with `--rest HOST:PORT`.

Same paths, verbs and status codes as Kafka Connect where the feature exists; errors are
`{"error_code": <http status>, "message": ...}` like Kafka Connect's.
"""

from __future__ import annotations

import logging
import socket
from importlib.metadata import version

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .runtime import RunningConnector, TaskRunner, Worker

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1024 * 1024  # a connector config is a few KB; aiohttp answers 413 past this


class _OneLineBadRequests(logging.Filter):
    """aiohttp logs every unparsable HTTP request with a traceback; a client's bad bytes are not
    our stack, so each becomes one line naming the peer and what was wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args = "%s: %s", (record.getMessage(), f"{exc.code} {exc.message}".strip())
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_http_log = logging.getLogger(f"{__name__}.http")
_http_log.addFilter(_OneLineBadRequests())


class NotFound(Exception):
    pass


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except NotFound as exc:
        return web.json_response({"error_code": 404, "message": str(exc)}, status=404)
    except web.HTTPException as exc:
        return web.json_response({"error_code": exc.status, "message": exc.reason}, status=exc.status)
    except Exception as exc:  # e.g. the log is unreachable while reading offsets
        log.exception("REST %s %s failed", request.method, request.path)
        return web.json_response({"error_code": 500, "message": f"{type(exc).__name__}: {exc}"}, status=500)


def make_app(worker: Worker, worker_id: str) -> web.Application:
    routes = web.RouteTableDef()
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)

    def connector_of(request: web.Request) -> RunningConnector:
        name = request.match_info["name"]
        if name not in worker.connectors:
            raise NotFound(f"connector {name} not found; running: {', '.join(sorted(worker.connectors))}")
        return worker.connectors[name]

    def task_of(request: web.Request, connector: RunningConnector) -> TaskRunner:
        raw = request.match_info["task"]
        runners = {str(r.task_id): r for r in connector.runners}
        if raw not in runners:
            raise NotFound(f"connector {connector.spec.name} has no task {raw}; tasks: {', '.join(runners)}")
        return runners[raw]

    def status(connector: RunningConnector) -> dict:
        body = connector.status()
        body["connector"]["worker_id"] = worker_id
        for task in body["tasks"]:
            task["worker_id"] = worker_id
        return body

    def info(connector: RunningConnector) -> dict:
        name = connector.spec.name
        return {"name": name, "config": connector.spec.public(), "type": connector.plugin.kind,
                "tasks": [{"connector": name, "task": r.task_id} for r in connector.runners]}

    @routes.get("/")
    async def root(request):
        return web.json_response({"version": version("binlake"), "mode": "standalone", "worker_id": worker_id})

    @routes.get("/connectors")
    async def connectors(request):
        if "expand" in request.query:
            expand = request.query.getall("expand")
            return web.json_response({name: {**({"status": status(c)} if "status" in expand else {}),
                                             **({"info": info(c)} if "info" in expand else {})}
                                      for name, c in worker.connectors.items()})
        return web.json_response(sorted(worker.connectors))

    @routes.get("/connectors/{name}")
    async def get_connector(request):
        return web.json_response(info(connector_of(request)))

    @routes.get("/connectors/{name}/config")
    async def get_config(request):
        return web.json_response(connector_of(request).spec.public())

    @routes.get("/connectors/{name}/status")
    async def get_status(request):
        return web.json_response(status(connector_of(request)))

    @routes.get("/connectors/{name}/tasks")
    async def get_tasks(request):
        connector = connector_of(request)
        return web.json_response([{"id": {"connector": connector.spec.name, "task": r.task_id},
                                   "config": r.task_config.model_dump(mode="json")} for r in connector.runners])

    @routes.get("/connectors/{name}/tasks/{task}/status")
    async def get_task_status(request):
        connector = connector_of(request)
        return web.json_response({**task_of(request, connector).status(), "worker_id": worker_id})

    @routes.get("/connectors/{name}/offsets")
    async def get_offsets(request):
        """Committed offsets as stored in the log (read now, not a cached copy)."""
        connector = connector_of(request)
        store = connector.runners[0].store
        offsets = await store.load(connector.spec.name)
        return web.json_response({"offsets": [{"partition": p, "offset": o} for p, o in offsets.all()]})

    @routes.post("/connectors/{name}/restart")
    async def restart(request):
        connector = connector_of(request)
        worker.restart(connector.spec.name)
        return web.json_response(status(connector), status=202)

    @routes.post("/connectors/{name}/tasks/{task}/restart")
    async def restart_task(request):
        connector = connector_of(request)
        worker.restart(connector.spec.name, task_of(request, connector).task_id)
        return web.Response(status=204)

    @routes.put("/connectors/{name}/pause")
    async def pause(request):
        worker.pause(connector_of(request).spec.name)
        return web.Response(status=202)

    @routes.put("/connectors/{name}/resume")
    async def resume(request):
        worker.resume(connector_of(request).spec.name)
        return web.Response(status=202)

    app.add_routes(routes)
    return app


async def serve(worker: Worker, host: str, port: int) -> web.AppRunner:
    """Start listening (port 0 picks a free one); the caller awaits `runner.cleanup()` on shutdown."""
    sock = socket.create_server((host, port))  # bound first, so the worker id names the real port
    bound_host, bound_port = sock.getsockname()[:2]
    runner = web.AppRunner(make_app(worker, f"{bound_host}:{bound_port}"), access_log=None, logger=_http_log)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner
