"""Kafka Connect's REST API (aiohttp) over a runtime: standalone (`connect run --rest`) or distributed.

Same paths, verbs, bodies and status codes as Kafka Connect; errors are
`{"error_code": <http status>, "message": ...}` like Kafka Connect's. On a distributed worker that is
not the group's leader, requests that change something are forwarded to the leader, as Kafka
Connect's workers do.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
from importlib.metadata import version

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from . import config as connect_config
from . import plugins
from .herder import BadRequest, Conflict, Herder, NotFound, RequestError

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1024 * 1024  # a connector config is a few KB; aiohttp answers 413 past this
FORWARDED = "X-Binlake-Forwarded"  # set on a forwarded request: the receiver must not forward it again


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


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error_code": status, "message": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except RequestError as exc:
        return _error(exc.status, str(exc))
    except web.HTTPException as exc:
        return _error(exc.status, exc.reason)
    except Exception as exc:  # e.g. the log is unreachable while reading offsets
        log.exception("REST %s %s failed", request.method, request.path)
        return _error(500, f"{type(exc).__name__}: {exc}")


async def _json(request: web.Request, kind: type = dict):
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, kind):
        raise BadRequest(f"the request body must be a JSON {'object' if kind is dict else 'array'}")
    return body


def _flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false"):
        raise BadRequest(f"{name} must be true or false (got {value!r})")
    return value == "true"


def make_app(herder: Herder) -> web.Application:
    routes = web.RouteTableDef()
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)

    def changes(handler):
        """A request that changes something runs on the leader: forward it there when this is not it."""
        @functools.wraps(handler)
        async def forwarding(request: web.Request):
            leader = await herder.forward_to()
            if leader is None:
                return await handler(request)
            if request.headers.get(FORWARDED):
                raise Conflict("Cannot complete request because of a conflicting operation (e.g. worker rebalance)")
            return await _forward(request, leader)
        return forwarding

    def task_id(request: web.Request) -> int:
        raw = request.match_info["task"]
        if not raw.isdigit():
            raise NotFound(f"{raw!r} is not a task id")
        return int(raw)

    @routes.get("/")
    async def root(request):
        return web.json_response({"version": version("binlake"), "mode": herder.mode, "worker_id": herder.worker_id})

    @routes.get("/connectors")
    async def connectors(request):
        if "expand" in request.query:
            expand = request.query.getall("expand")
            return web.json_response({name: {**({"status": herder.status(name)} if "status" in expand else {}),
                                             **({"info": herder.info(name)} if "info" in expand else {})}
                                      for name in herder.names()})
        return web.json_response(herder.names())

    @routes.post("/connectors")
    @changes
    async def create(request):
        body = await _json(request)
        config = body.get("config")
        name = body.get("name") or (config or {}).get("name")
        if not isinstance(name, str) or not isinstance(config, dict):
            raise BadRequest('the body must be {"name": NAME, "config": {...}}')
        await herder.put(name, config, create_only=True)
        return web.json_response(herder.info(name), status=201)

    @routes.get("/connectors/{name}")
    async def get_connector(request):
        return web.json_response(herder.info(request.match_info["name"]))

    @routes.delete("/connectors/{name}")
    @changes
    async def delete(request):
        await herder.delete(request.match_info["name"])
        return web.Response(status=204)

    @routes.get("/connectors/{name}/config")
    async def get_config(request):
        return web.json_response(herder.config(request.match_info["name"]))

    @routes.put("/connectors/{name}/config")
    @changes
    async def put_config(request):
        name = request.match_info["name"]
        created = await herder.put(name, await _json(request), create_only=False)
        return web.json_response(herder.info(name), status=201 if created else 200)

    @routes.get("/connectors/{name}/status")
    async def get_status(request):
        return web.json_response(herder.status(request.match_info["name"]))

    @routes.get("/connectors/{name}/tasks")
    async def get_tasks(request):
        return web.json_response(herder.task_configs(request.match_info["name"]))

    @routes.get("/connectors/{name}/tasks/{task}/status")
    async def get_task_status(request):
        return web.json_response(herder.task_status(request.match_info["name"], task_id(request)))

    @routes.post("/connectors/{name}/restart")
    @changes
    async def restart(request):
        name = request.match_info["name"]
        include_tasks, only_failed = _flag(request, "includeTasks"), _flag(request, "onlyFailed")
        await herder.restart(name, None, include_tasks, only_failed)
        if not (include_tasks or only_failed):
            return web.Response(status=204)
        status = herder.status(name)  # what the request restarts is shown RESTARTING, as Kafka Connect does
        for part in [status["connector"], *(status["tasks"] if include_tasks else [])]:
            if not only_failed or part["state"] == "FAILED":
                part["state"] = "RESTARTING"
        return web.json_response(status, status=202)

    @routes.post("/connectors/{name}/tasks/{task}/restart")
    @changes
    async def restart_task(request):
        await herder.restart(request.match_info["name"], task_id(request))
        return web.Response(status=204)

    @routes.put("/connectors/{name}/pause")
    @changes
    async def pause(request):
        await herder.pause(request.match_info["name"])
        return web.Response(status=202)

    @routes.put("/connectors/{name}/resume")
    @changes
    async def resume(request):
        await herder.resume(request.match_info["name"])
        return web.Response(status=202)

    @routes.put("/connectors/{name}/stop")
    @changes
    async def stop(request):
        await herder.stop(request.match_info["name"])
        return web.Response(status=204)

    @routes.post("/connectors/{name}/signals")
    async def signal(request):
        """A signal for the connector's source (Debezium's shape: {"id"?, "type", "data"}); not a Kafka
        Connect path. Answered where the source runs."""
        await herder.signal(request.match_info["name"], await _json(request))
        return web.Response(status=202)

    @routes.get("/connectors/{name}/topics")
    async def get_topics(request):
        """The topics the connector has written to since it started or since a reset (KIP-558)."""
        name = request.match_info["name"]
        return web.json_response({name: {"topics": herder.active_topics(name)}})

    @routes.put("/connectors/{name}/topics/reset")
    async def reset_topics(request):
        await herder.reset_active_topics(request.match_info["name"])
        return web.Response(status=202)

    @routes.get("/connectors/{name}/offsets")
    async def get_offsets(request):
        """Committed offsets as stored in the log (read now, not a cached copy)."""
        return web.json_response({"offsets": await herder.offsets(request.match_info["name"])})

    @routes.patch("/connectors/{name}/offsets")
    @changes
    async def alter_offsets(request):
        offsets = (await _json(request)).get("offsets")
        if not isinstance(offsets, list) or not all(
                isinstance(o, dict) and isinstance(o.get("partition"), dict)
                and (o.get("offset") is None or isinstance(o["offset"], dict)) for o in offsets):
            raise BadRequest('the body must be {"offsets": [{"partition": {...}, "offset": {...} or null}, ...]}')
        await herder.alter_offsets(request.match_info["name"], offsets)
        return web.json_response({"message": "The offsets for this connector have been altered successfully"})

    @routes.delete("/connectors/{name}/offsets")
    @changes
    async def reset_offsets(request):
        await herder.alter_offsets(request.match_info["name"], None)
        return web.json_response({"message": "The offsets for this connector have been reset successfully"})

    @routes.get("/connector-plugins")
    async def connector_plugins(request):
        return web.json_response([_describe_plugin(name) for name in sorted(plugins.installed())])

    @routes.get("/connector-plugins/{plugin}/config")
    async def plugin_config(request):
        return web.json_response([entry["definition"] for entry in _definitions(request.match_info["plugin"], {})])

    @routes.put("/connector-plugins/{plugin}/config/validate")
    async def validate(request):
        plugin_name = request.match_info["plugin"]
        config = await _json(request)
        entries = _definitions(plugin_name, config)
        alias, _ = _plugin(plugin_name)  # the URL may name the class, as Kafka Connect's users do
        try:
            connect_config.validate(herder.completed({"connector": alias, **config}),
                                    "validate", os.environ)
        except connect_config.ConfigError as exc:
            by_key = {e["definition"]["name"]: e for e in entries}
            for path, message in exc.problems:
                key = path.split(".")[0].split("[")[0]
                entry = by_key.get(key) or by_key.setdefault(key, _entry(key, "", config.get(key), "connector", 0))
                entry["value"]["errors"].append(f"{path}: {message}" if path != key else message)
            entries = list(by_key.values())
        return web.json_response({"name": plugin_name, "error_count": sum(len(e["value"]["errors"]) for e in entries),
                                  "groups": ["runtime", "connector"], "configs": entries})

    app.add_routes(routes)
    return app


async def _forward(request: web.Request, leader: str) -> web.Response:
    headers = {FORWARDED: "1"}
    if request.content_type:
        headers["Content-Type"] = request.content_type
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async with http.request(request.method, leader.rstrip("/") + request.path_qs, data=await request.read(),
                                    headers=headers) as answer:
                body = await answer.read()
                return web.Response(status=answer.status, body=body or None,
                                    content_type=answer.content_type if body else None)
    except aiohttp.ClientError as exc:
        raise Conflict(f"the group's leader at {leader} cannot be reached ({exc}); a rebalance is probably "
                       "under way: try again") from None


def _plugin(name: str):
    for entry, target in plugins.installed().items():
        if name in (entry, target, target.replace(":", ".")):
            return entry, plugins.load(entry)
    try:
        return name, plugins.load(name)
    except plugins.PluginError as exc:
        raise NotFound(str(exc)) from None


def _describe_plugin(name: str) -> dict:
    entry, plugin = _plugin(name)
    return {"class": f"{plugin.__module__}.{plugin.__qualname__}", "alias": entry, "type": plugin.kind,
            "version": version("binlake")}


def _definitions(name: str, given: dict) -> list[dict]:
    """Kafka Connect's ConfigInfo entries for the runtime's keys and the plugin's."""
    _, plugin = _plugin(name)
    entries = []
    for group, model in (("runtime", connect_config.RuntimeConfig), ("connector", plugin.config_model)):
        for order, (key, field) in enumerate(model.model_fields.items()):
            entries.append(_entry(key, field.description or "", given.get(key), group, order,
                                  field.is_required(), None if field.is_required() else field.get_default()))
    return entries


def _entry(key: str, doc: str, value, group: str, order: int, required: bool = False, default=None) -> dict:
    return {"definition": {"name": key, "type": "STRING", "required": required,
                           "default_value": None if default is None else json.dumps(default, default=str),
                           "importance": "HIGH" if required else "MEDIUM", "documentation": doc, "group": group,
                           "width": "NONE", "display_name": key, "dependents": [], "order": order},
            "value": {"name": key, "value": value if value is None or isinstance(value, str) else json.dumps(value),
                      "recommended_values": [], "errors": [], "visible": True}}


def bind(host: str, port: int) -> socket.socket:
    """The REST socket, bound before the runtime starts so its worker id names the real port (0: any free)."""
    return socket.create_server((host, port))


async def serve(herder: Herder, sock: socket.socket) -> web.AppRunner:
    """Serve the API on `sock`; the caller awaits `runner.cleanup()` on shutdown."""
    runner = web.AppRunner(make_app(herder), access_log=None, logger=_http_log)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner
